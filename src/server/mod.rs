//! The admission webhook (TLS, `/mutate`) and the plain-HTTP health listener (`/healthz`,
//! `/readyz`, `/metrics`, `/debug/recommendations`, `/debug`).
//!
//! Connections are served by hyper-util's auto builder (HTTP/1.1 keep-alive and HTTP/2 via ALPN)
//! behind tokio-rustls; shutdown stops accepting, lets in-flight reviews finish and closes idle
//! keep-alive connections (hyper's graceful shutdown).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::state::Store;
use crate::telemetry::{AdmissionLabels, KindLabel, ListenerLabel, Metrics};
use limits::{Activity, BodyBudget, Limits, Phase, Watched};

pub mod debug;
pub mod exposition;
pub mod limits;
pub mod review;
pub mod tls;

pub use review::handle_review;

/// Largest AdmissionReview body accepted (the API server's own request limit is 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How the server listens.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// TLS listener for `/mutate`.
    pub listen: SocketAddr,
    /// Plain-HTTP listener for health, metrics and debug.
    pub health_listen: SocketAddr,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// How often the cert/key files are checked for changes.
    pub reload_interval: Duration,
    /// Upper bound on waiting for in-flight requests at shutdown.
    pub shutdown_timeout: Duration,
    /// Test hook: every `/mutate` waits this long before answering (zero in production).
    pub review_delay: Duration,
    /// Test hook: told when a `/mutate` request reaches its handler, before `review_delay`
    /// (none in production), so a test knows a review is in flight.
    pub review_started: Option<mpsc::UnboundedSender<()>>,
    /// Timeouts of every phase of a connection, connection and memory caps.
    pub limits: Limits,
}

impl ServeConfig {
    pub fn new(
        listen: SocketAddr,
        health_listen: SocketAddr,
        tls_cert: PathBuf,
        tls_key: PathBuf,
    ) -> Self {
        Self {
            listen,
            health_listen,
            tls_cert,
            tls_key,
            reload_interval: Duration::from_secs(2),
            shutdown_timeout: Duration::from_secs(25),
            review_delay: Duration::ZERO,
            review_started: None,
            limits: Limits::default(),
        }
    }
}

#[derive(Clone)]
struct AppState {
    store: Arc<Store>,
    review_delay: Duration,
    review_started: Option<mpsc::UnboundedSender<()>>,
}

/// The admission router (`POST /mutate`).
pub fn router(store: Arc<Store>) -> Router {
    router_with_hooks(store, Duration::ZERO, None)
}

fn router_with_hooks(
    store: Arc<Store>,
    review_delay: Duration,
    review_started: Option<mpsc::UnboundedSender<()>>,
) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(AppState {
            store,
            review_delay,
            review_started,
        })
}

/// The health/metrics/debug router.
pub fn health_router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/debug/recommendations", get(debug_recommendations))
        .route("/debug", get(debug_page))
        .with_state(AppState {
            store,
            review_delay: Duration::ZERO,
            review_started: None,
        })
}

async fn mutate(State(app): State<AppState>, body: Bytes) -> Response {
    let started = Instant::now();
    if let Some(tx) = &app.review_started {
        let _ = tx.send(());
    }
    if !app.review_delay.is_zero() {
        tokio::time::sleep(app.review_delay).await;
    }
    // Counted and logged inside the step: a client that gives up while its answer waits drops
    // this future at the step's second yield, and the review it got must still be counted.
    let reply = in_own_step(|| {
        // The review's span: its log lines name the request, the namespace and the pod's owner
        // (filled in by the handler as it learns them), and it records the answer: the kind,
        // whether it was allowed and patched, and why not patched.
        let span = tracing::info_span!(
            "review",
            uid = tracing::field::Empty,
            kind = tracing::field::Empty,
            namespace = tracing::field::Empty,
            owner = tracing::field::Empty,
            allowed = tracing::field::Empty,
            patched = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let _in_review = span.enter();
        let reply = handle_review(&body, &app.store);
        span.record("kind", reply.kind);
        // kerf allows every pod it can read (it never fails a creation); a malformed review is
        // answered 400.
        span.record("allowed", reply.status == 200);
        span.record("patched", reply.outcome == review::Outcome::Patched);
        if let Some(reason) = &reply.detail {
            span.record("reason", reason.as_str());
        }
        count_review(&app.store, &reply, started);
        reply
    })
    .await;
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(header::CONTENT_TYPE, reply.content_type)],
        reply.body,
    )
        .into_response()
}

/// The review's metrics and log line.
fn count_review(store: &Store, reply: &review::Reply, started: Instant) {
    let m = store.metrics();
    m.admission_requests
        .get_or_create(&AdmissionLabels {
            kind: reply.kind,
            operation: reply.operation,
            outcome: reply.outcome.as_str(),
        })
        .inc();
    m.admission_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    match reply.outcome {
        review::Outcome::Patched => {
            m.admission_patches
                .get_or_create(&KindLabel { kind: reply.kind })
                .inc();
        }
        review::Outcome::Error => {
            m.admission_internal_errors.inc();
            tracing::warn!(kind = %reply.kind, operation = %reply.operation,
                "admission review answered without a patch: {}", reply.detail.as_deref().unwrap_or(""));
        }
        review::Outcome::BadRequest => {
            tracing::info!(
                "rejected admission request: {}",
                reply.detail.as_deref().unwrap_or("")
            );
        }
        _ => {
            tracing::debug!(kind = %reply.kind, operation = %reply.operation, outcome = reply.outcome.as_str(),
                "{}", reply.detail.as_deref().unwrap_or(""));
        }
    }
}

/// Runs `step` between two yields to the scheduler. `/mutate` decides each review this way, so
/// under load the worker reads every ready request, then decides every review, then writes
/// every answer, instead of alternating the TLS/HTTP stack and the handler request by request.
/// Each then finds its code and data still in the caches: the handler took almost twice as
/// long right after the stack ran as right after another review (docs/performance.md,
/// "Reviews in steps"). Unloaded, a yield costs one extra turn of the scheduler. Public for
/// the admission bench's stepped server.
pub async fn in_own_step<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::yield_now().await;
    let out = step();
    tokio::task::yield_now().await;
    out
}

/// Liveness: fails once a required background task stopped (`docs/design/runtime.md#r14`).
async fn healthz(State(app): State<AppState>) -> Response {
    let (alive, body) = app.store.health().liveness();
    (health_status(alive), body).into_response()
}

/// Readiness: ready once the store was loaded; otherwise says what it waits for and the last
/// error of each dependency (`docs/design/runtime.md#r14`).
async fn readyz(State(app): State<AppState>) -> Response {
    let (ready, body) = app.store.health().readiness(app.store.is_ready());
    (health_status(ready), body).into_response()
}

fn health_status(ok: bool) -> StatusCode {
    if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// `/metrics` in the format the scraper asks for (`exposition::negotiate`).
async fn metrics_text(State(app): State<AppState>, headers: header::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = exposition::negotiate(accept);
    let m = app.store.metrics();
    let body = if format.is_openmetrics() {
        m.encode()
    } else {
        m.encode_prometheus_text()
    };
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

#[derive(serde::Deserialize)]
struct DebugQuery {
    format: Option<String>,
}

async fn debug_recommendations(
    State(app): State<AppState>,
    Query(q): Query<DebugQuery>,
) -> Response {
    match q.format.as_deref() {
        Some("html") => Html(debug::html(&app.store)).into_response(),
        None | Some("json") => axum::Json(debug::json(&app.store)).into_response(),
        Some(other) => (
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}: use json or html\n"),
        )
            .into_response(),
    }
}

async fn debug_page(State(app): State<AppState>) -> Html<String> {
    Html(debug::html(&app.store))
}

/// Listeners bound and the certificate loaded, not yet serving (tests read the bound ports).
pub struct BoundServer {
    config: ServeConfig,
    tls_listener: TcpListener,
    health_listener: TcpListener,
    certs: Arc<tls::CertReloader>,
}

impl BoundServer {
    pub async fn bind(config: ServeConfig) -> Result<Self, ServeError> {
        let certs = tls::CertReloader::load(&config.tls_cert, &config.tls_key)?;
        let listen = |flag: &'static str, addr: SocketAddr| {
            move |error| ServeError::Listen { flag, addr, error }
        };
        let tls_listener = TcpListener::bind(config.listen)
            .await
            .map_err(listen("--listen", config.listen))?;
        let health_listener = TcpListener::bind(config.health_listen)
            .await
            .map_err(listen("--health-listen", config.health_listen))?;
        Ok(Self {
            config,
            tls_listener,
            health_listener,
            certs,
        })
    }

    pub fn webhook_addr(&self) -> SocketAddr {
        self.tls_listener.local_addr().unwrap_or(self.config.listen)
    }

    pub fn health_addr(&self) -> SocketAddr {
        self.health_listener
            .local_addr()
            .unwrap_or(self.config.health_listen)
    }

    /// Serves until `shutdown` resolves, then drains gracefully.
    pub async fn run(
        self,
        store: Arc<Store>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServeError> {
        let acceptor = TlsAcceptor::from(self.certs.server_config()?);
        // The bound addresses (a port 0 in the configuration is the one the system picked).
        let (webhook_addr, health_addr) = (self.webhook_addr(), self.health_addr());
        let reload = tokio::spawn(
            self.certs
                .clone()
                .watch(self.config.reload_interval, store.metrics().clone()),
        );
        let (stop_tx, stop_rx) = watch::channel(false);
        // Every connection task holds a sender; all dropped = every connection finished.
        let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
        let limits = Arc::new(self.config.limits.clone());
        let metrics = store.metrics().clone();
        // One budget for the bodies of both listeners: memory is one limit.
        let budget = BodyBudget::new(limits.max_buffered_body_bytes, metrics.clone());
        let webhook = tokio::spawn(accept_loop(
            self.tls_listener,
            router_with_hooks(
                store.clone(),
                self.config.review_delay,
                self.config.review_started.clone(),
            ),
            Some(acceptor),
            Served {
                listener: "webhook",
                max_connections: limits.max_connections,
                limits: limits.clone(),
                budget: budget.clone(),
                metrics: metrics.clone(),
            },
            stop_rx.clone(),
            open_tx.clone(),
        ));
        let health = tokio::spawn(accept_loop(
            self.health_listener,
            health_router(store),
            None,
            Served {
                listener: "health",
                max_connections: limits.health_max_connections,
                limits,
                budget,
                metrics,
            },
            stop_rx,
            open_tx,
        ));
        tracing::info!(webhook = %webhook_addr, health = %health_addr, "kerf serving");
        shutdown.await;
        tracing::info!("shutting down: no new connections, finishing in-flight reviews");
        let _ = stop_tx.send(true);
        // The accept loops return once they stopped accepting (dropping their listeners).
        let _ = webhook.await;
        let _ = health.await;
        reload.abort();
        if tokio::time::timeout(self.config.shutdown_timeout, open_rx.recv())
            .await
            .is_err()
        {
            tracing::warn!(
                "connections still open after {:?}; exiting anyway",
                self.config.shutdown_timeout
            );
        }
        tracing::info!("shutdown complete");
        Ok(())
    }
}

/// Binds and serves until `shutdown` resolves.
pub async fn serve(
    config: ServeConfig,
    store: Arc<Store>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    BoundServer::bind(config).await?.run(store, shutdown).await
}

/// Why the webhook cannot serve: its TLS pair, or an address it cannot listen on (the flag
/// named).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("cannot listen on {addr} ({flag}): {error}")]
    Listen {
        flag: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
}

/// Serves `app` over TLS on `listen` through the webhook's own stack (tokio-rustls, the same
/// HTTP/1.1 + HTTP/2 connection handling) until the process ends. Benchmarks use it to measure
/// that stack alone, with a handler that does no work (`benches/admission.rs`, the null server).
pub async fn serve_app(
    listen: SocketAddr,
    cert: &std::path::Path,
    key: &std::path::Path,
    app: Router,
) -> Result<(), ServeError> {
    let certs = tls::CertReloader::load(cert, key)?;
    let acceptor = TlsAcceptor::from(certs.server_config()?);
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|error| ServeError::Listen {
            flag: "--listen",
            addr: listen,
            error,
        })?;
    // Held for the whole run: the accept loop stops once the sender is gone.
    let (_stop, stop_rx) = watch::channel(false);
    let (open, _open_rx) = mpsc::channel::<()>(1);
    let limits = Arc::new(Limits::default());
    let metrics = Metrics::new();
    let served = Served {
        listener: "webhook",
        max_connections: limits.max_connections,
        budget: BodyBudget::new(limits.max_buffered_body_bytes, metrics.clone()),
        limits,
        metrics,
    };
    accept_loop(listener, app, Some(acceptor), served, stop_rx, open).await;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// How one listener serves its connections (`limits.rs`).
struct Served {
    /// The `listener` label: `webhook` or `health`.
    listener: &'static str,
    max_connections: usize,
    limits: Arc<Limits>,
    budget: BodyBudget,
    metrics: Arc<Metrics>,
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    served: Served,
    mut stop: watch::Receiver<bool>,
    open: mpsc::Sender<()>,
) {
    let limits = served.limits.clone();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The watchdog in `drive` times the headers: hyper's own header timer would also run while
    // a keep-alive connection waits for its next request. The read buffer bounds the request
    // line and headers (hyper answers 431 beyond it) and the size of a body's chunks.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let label = ListenerLabel {
        listener: served.listener,
    };
    served
        .metrics
        .connections_max
        .get_or_create(&label)
        .set(served.max_connections as i64);
    let slots = Arc::new(tokio::sync::Semaphore::new(served.max_connections));
    let served = Arc::new(served);
    loop {
        // At the cap, stop accepting: new connections wait in the kernel's backlog until a
        // served one closes (every phase has a deadline, so one does).
        let slot = tokio::select! {
            _ = stopped(&mut stop) => break,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
        };
        let (tcp, peer) = tokio::select! {
            _ = stopped(&mut stop) => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Typically EMFILE: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let open = open.clone();
        let stop = stop.clone();
        let app = app.clone();
        let builder = builder.clone();
        let tls = tls.clone();
        let served = served.clone();
        let gauge = served
            .metrics
            .connections_open
            .get_or_create(&label)
            .clone();
        gauge.inc();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        served.limits.tls_handshake_timeout,
                        acceptor.accept(tcp),
                    );
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            serve_connection(&builder, stream, app, &served, stop, peer).await
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            limits::count_closed(
                                &served.metrics,
                                served.listener,
                                Phase::Handshake,
                                "timeout",
                            );
                        }
                    }
                }
                None => serve_connection(&builder, tcp, app, &served, stop, peer).await,
            }
            gauge.dec();
            drop(slot);
            drop(open);
        });
    }
}

/// Serves one connection through its watchdog: the stream is read through [`Watched`], every
/// request passes [`LimitedService`] (body read whole within its deadline and budget).
async fn serve_connection<S>(
    builder: &auto::Builder<TokioExecutor>,
    stream: S,
    app: Router,
    served: &Arc<Served>,
    stop: watch::Receiver<bool>,
    peer: SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Activity::new(Instant::now());
    let svc = LimitedService {
        inner: TowerToHyperService::new(app),
        activity: activity.clone(),
        served: served.clone(),
    };
    let conn = builder.serve_connection(TokioIo::new(Watched::new(stream, activity.clone())), svc);
    drive(conn, stop, peer, &activity, served).await;
}

/// The router behind the connection limits of [`limits`].
#[derive(Clone)]
struct LimitedService {
    inner: TowerToHyperService<Router>,
    activity: Arc<Activity>,
    served: Arc<Served>,
}

impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for LimitedService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn call(&self, req: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        let in_flight = self.activity.request();
        let inner = self.inner.clone();
        let served = self.served.clone();
        Box::pin(async move {
            let _in_flight = in_flight;
            match limits::read_body(req, &served.limits, &served.budget).await {
                Ok((req, _reserved)) => inner.call(req).await,
                Err((why, version)) => {
                    if let Some(reason) = why.reason() {
                        limits::count_closed(&served.metrics, served.listener, Phase::Body, reason);
                    }
                    tracing::debug!("request refused: {why:?}");
                    Ok(limits::refusal(&why, version, &served.limits))
                }
            }
        })
    }
}

/// Serves one connection until it ends, its phase's deadline passes (`limits.rs`), or shutdown
/// (HTTP/1: close once the in-flight response is written, or at once when idle; HTTP/2:
/// GOAWAY, then drain streams).
async fn drive<I>(
    conn: auto::Connection<'_, I, LimitedService, TokioExecutor>,
    mut stop: watch::Receiver<bool>,
    peer: SocketAddr,
    activity: &Activity,
    served: &Served,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    tokio::pin!(conn);
    let mut stopping = false;
    let result = loop {
        let deadline = activity.deadline(&served.limits);
        let wake = deadline.map_or(
            tokio::time::Instant::now() + Duration::from_secs(86_400),
            |d| tokio::time::Instant::from_std(d.at),
        );
        tokio::select! {
            r = conn.as_mut() => break r,
            _ = stopped(&mut stop), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = activity.changed() => {}
            _ = tokio::time::sleep_until(wake), if deadline.is_some() => {
                // Still the same phase (a request may have started meanwhile: then it wakes
                // `changed` and the next turn finds no deadline).
                let Some(d) = activity.deadline(&served.limits) else { continue };
                if d.at > Instant::now() {
                    continue;
                }
                limits::count_closed(&served.metrics, served.listener, d.phase, "timeout");
                tracing::debug!(%peer, phase = d.phase.as_str(), "closing a connection past its deadline");
                conn.as_mut().graceful_shutdown();
                match tokio::time::timeout(limits::CLOSE_GRACE, conn.as_mut()).await {
                    Ok(r) => break r,
                    Err(_) => return,
                }
            }
        }
    };
    if let Err(e) = result {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_parse_too_large)
        {
            limits::count_closed(
                &served.metrics,
                served.listener,
                Phase::Headers,
                "too_large",
            );
        }
        tracing::debug!(%peer, "connection closed with error: {e}");
    }
}

/// Resolves once shutdown was requested (or the sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}
