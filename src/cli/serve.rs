//! `kerf serve`: the admission webhook (TLS) and the health listener, fed either by the
//! in-cluster reconciler or, with `--standalone`, by periodic evaluation of a manifest directory.
//!
//! The feeder is a required task: when it ends (no client configuration, caches that cannot
//! sync, a stopped watch, Lease or writer, a panic) kerf logs why, fails `/healthz`, shuts the
//! listeners down gracefully and exits non-zero, writing the reason to the container's
//! termination message (`docs/design/runtime.md#r14`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use jiff::Timestamp;

use super::{MetricSourceArgs, PrometheusConnectionArgs};
use crate::metrics::MetricSource;
use crate::server::limits::Limits;
use crate::server::{BoundServer, ServeConfig};
use crate::state::Store;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// TLS listen address for `/mutate`.
    #[arg(long, env = "KERF_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain (reloaded when the file changes).
    #[arg(long, env = "KERF_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key (reloaded when the file changes).
    #[arg(long, env = "KERF_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Plain-HTTP listen address for /healthz, /readyz, /metrics and /debug.
    #[arg(long, env = "KERF_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    pub health_listen: SocketAddr,
    /// Read objects from `--manifests` instead of the API server.
    #[arg(long, env = "KERF_STANDALONE", requires = "manifests")]
    pub standalone: bool,
    /// Directory of YAML manifests (standalone mode).
    #[arg(long, env = "KERF_MANIFESTS", requires = "standalone")]
    pub manifests: Option<PathBuf>,
    /// OpenMetrics file (standalone mode).
    #[arg(
        long,
        env = "KERF_METRICS",
        conflicts_with = "prometheus",
        requires = "standalone"
    )]
    pub metrics: Option<PathBuf>,
    /// Prometheus base URL (standalone mode).
    #[arg(long, env = "KERF_PROMETHEUS", requires = "standalone")]
    pub prometheus: Option<String>,
    /// How to reach `--prometheus` (standalone mode; in-cluster: GlobalConfiguration
    /// `spec.prometheus`).
    #[command(flatten)]
    pub connection: super::PrometheusConnectionArgs,
    /// Evaluation time (RFC 3339) for standalone mode; default now at each refresh.
    #[arg(long, env = "KERF_AT", requires = "standalone")]
    pub at: Option<String>,
    /// Seconds between cycles in standalone mode, instead of the GlobalConfiguration's
    /// `gpuReactiveCheckInterval` (which cannot go below 1m): for trying kerf out and for tests.
    #[arg(long, env = "KERF_INTERVAL_SECONDS", requires = "standalone")]
    pub interval_seconds: Option<u64>,
    /// Query step in seconds (standalone mode).
    #[arg(long, env = "KERF_STEP_SECONDS", default_value_t = 15)]
    pub step_seconds: i64,
    /// In-cluster: seconds the caches may stay unsynced while a list or watch keeps failing
    /// (RBAC denied, a CRD not installed, the API server unreachable) before kerf exits.
    #[arg(long, env = "KERF_CACHE_SYNC_TIMEOUT_SECONDS", default_value_t = 120)]
    pub cache_sync_timeout_seconds: u64,
    #[command(flatten)]
    pub own_namespace: super::OwnNamespaceArgs,
    /// Where the reason of a failed exit is written for `kubectl describe pod` (only when the
    /// file exists: the kubelet creates it).
    #[arg(
        long,
        env = "KERF_TERMINATION_LOG",
        default_value = "/dev/termination-log"
    )]
    pub termination_log: PathBuf,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// What a client may hold on either listener, and for how long (docs/install.md, "Webhook
/// limits").
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Seconds a TLS handshake may take on the webhook listener.
    #[arg(long, env = "KERF_TLS_HANDSHAKE_TIMEOUT_SECONDS", default_value_t = 10)]
    pub tls_handshake_timeout_seconds: u64,
    /// Seconds from a new connection (after its TLS handshake) to the end of its first
    /// request's headers, on either listener.
    #[arg(long, env = "KERF_FIRST_REQUEST_TIMEOUT_SECONDS", default_value_t = 10)]
    pub first_request_timeout_seconds: u64,
    /// Seconds from a request's first byte to the end of its headers (HTTP/1).
    #[arg(long, env = "KERF_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10)]
    pub header_read_timeout_seconds: u64,
    /// Seconds from the end of a request's headers to the end of its body (answered 408);
    /// keep it above the webhook's timeoutSeconds.
    #[arg(long, env = "KERF_BODY_READ_TIMEOUT_SECONDS", default_value_t = 10)]
    pub body_read_timeout_seconds: u64,
    /// Seconds a connection may wait between an answer and its next request (HTTP/1
    /// keep-alive and HTTP/2) before kerf closes it.
    #[arg(long, env = "KERF_IDLE_TIMEOUT_SECONDS", default_value_t = 60)]
    pub idle_timeout_seconds: u64,
    /// Connections the webhook listener serves at once; beyond it new connections wait.
    #[arg(long, env = "KERF_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Connections the health listener serves at once; beyond it new connections wait.
    #[arg(long, env = "KERF_HEALTH_MAX_CONNECTIONS", default_value_t = 32)]
    pub health_max_connections: usize,
    /// Largest request line and headers (HTTP/1) or header list (HTTP/2), bytes or a
    /// quantity (`16Ki`); larger is answered 431. At least 8Ki.
    #[arg(long, env = "KERF_MAX_HEADER_BYTES", default_value = "16Ki", value_parser = parse_bytes)]
    pub max_header_bytes: usize,
    /// Request bodies held in memory at once, both listeners together, bytes or a quantity
    /// (`64Mi`); a body that does not fit is answered 503 at once. At least 3Mi.
    #[arg(long, env = "KERF_MAX_BUFFERED_BODY_BYTES", default_value = "64Mi", value_parser = parse_bytes)]
    pub max_buffered_body_bytes: usize,
}

fn parse_bytes(text: &str) -> Result<usize, String> {
    let n = crate::core::quantity::parse_memory_bytes(text).map_err(|e| e.to_string())?;
    usize::try_from(n).map_err(|_| format!("{text}: too large"))
}

impl LimitArgs {
    /// The limits, or an error naming the flag that cannot work.
    pub fn limits(&self) -> anyhow::Result<Limits> {
        let l = Limits {
            tls_handshake_timeout: Duration::from_secs(self.tls_handshake_timeout_seconds),
            first_request_timeout: Duration::from_secs(self.first_request_timeout_seconds),
            header_read_timeout: Duration::from_secs(self.header_read_timeout_seconds),
            body_read_timeout: Duration::from_secs(self.body_read_timeout_seconds),
            idle_timeout: Duration::from_secs(self.idle_timeout_seconds),
            max_connections: self.max_connections,
            health_max_connections: self.health_max_connections,
            max_header_bytes: self.max_header_bytes,
            max_buffered_body_bytes: self.max_buffered_body_bytes,
        };
        l.validate()?;
        Ok(l)
    }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let termination_log = args.termination_log.clone();
    let result = serve(args).await;
    if let Err(e) = &result {
        write_termination_message(&termination_log, &format!("{e:#}"));
    }
    result
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Flags that cannot work fail before anything listens (their files are read once the
    // directory's GlobalConfiguration is known: a failure then stops the standalone loop).
    args.connection
        .needs_prometheus(args.prometheus.as_deref())?;
    if let Some(url) = &args.prometheus {
        args.connection
            .settings(url, &crate::api::GlobalConfigurationSpec::default())?;
    }
    // The one registry of this process: every task reports to it, `/metrics` serves it.
    let store = Store::with_metrics(crate::telemetry::Metrics::new());
    let mut config = ServeConfig::new(
        args.listen,
        args.health_listen,
        args.tls_cert.clone(),
        args.tls_key.clone(),
    );
    config.limits = args.limits.limits()?;
    let server = BoundServer::bind(config).await?;
    if args.standalone {
        let dir = args
            .manifests
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--standalone needs --manifests DIR"))?;
        let source = match (&args.metrics, &args.prometheus) {
            (None, None) => anyhow::bail!("--standalone needs --metrics FILE or --prometheus URL"),
            (m, p) => MetricSourceArgs {
                metrics: m.clone(),
                prometheus: p.clone(),
            },
        };
        let at = match args.at.as_deref() {
            None => None,
            Some(t) => Some(super::parse_at(Some(t))?),
        };
        if args.step_seconds <= 0 {
            anyhow::bail!("--step-seconds must be > 0 (got {})", args.step_seconds);
        }
        if args.interval_seconds == Some(0) {
            anyhow::bail!("--interval-seconds must be > 0");
        }
        let feeder = run_standalone(
            crate::reconcile::standalone::DirLoop::protecting(&dir, args.own_namespace.detect())
                .keeping_history(),
            source,
            args.connection.clone(),
            at,
            args.step_seconds,
            args.interval_seconds,
            store.clone(),
        );
        serve_supervised(
            server,
            store,
            "standalone loop",
            feeder,
            crate::server::shutdown_signal(),
        )
        .await
    } else {
        let feeder = run_in_cluster(
            store.clone(),
            args.step_seconds,
            Duration::from_secs(args.cache_sync_timeout_seconds),
            args.own_namespace.detect(),
        );
        serve_supervised(
            server,
            store,
            "reconciler",
            feeder,
            crate::server::shutdown_signal(),
        )
        .await
    }
}

/// Serves until `shutdown` resolves (then `Ok`) or the required task `feeder` ends — with an
/// error, without one, or by panicking. Then the failure is logged with its cause chain and
/// recorded (`/healthz` and `/readyz` answer 503 with it), the listeners shut down gracefully
/// and the error `<task> stopped: <why>` is returned.
pub async fn serve_supervised(
    server: BoundServer,
    store: Arc<Store>,
    task: &'static str,
    feeder: impl Future<Output = anyhow::Result<()>> + Send + 'static,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let health = store.health().clone();
    let handle = tokio::spawn(feeder);
    let feeder_abort = handle.abort_handle();
    let supervisor = tokio::spawn({
        let health = health.clone();
        async move {
            let why = match handle.await {
                Ok(Ok(())) => "it ended, and it must run until kerf shuts down".to_string(),
                Ok(Err(e)) => crate::health::error_chain(e.as_ref()),
                Err(e) if e.is_panic() => format!(
                    "panicked: {}",
                    crate::health::panic_message(&*e.into_panic())
                ),
                Err(_) => return, // aborted at shutdown
            };
            health.task_stopped(task, &why);
        }
    });
    let (why_tx, why_rx) = tokio::sync::oneshot::channel();
    let stop = {
        let health = health.clone();
        async move {
            let failed = tokio::select! {
                () = shutdown => None,
                why = health.wait_stopped() => Some(why),
            };
            if let Some(why) = &failed {
                tracing::error!("{why}; shutting down the webhook listener and exiting");
            }
            let _ = why_tx.send(failed);
        }
    };
    let served = server.run(store, stop).await;
    feeder_abort.abort();
    supervisor.abort();
    served?;
    match why_rx.await {
        Ok(Some(why)) => Err(anyhow::anyhow!(why)),
        _ => Ok(()),
    }
}

/// Writes `message` where the kubelet reads the container's termination message
/// (`terminationMessagePath`), so `kubectl describe pod` shows why kerf exited. Only when the
/// file exists: outside a pod there is nothing to write to.
fn write_termination_message(path: &Path, message: &str) {
    if !path.is_file() {
        return;
    }
    // The kubelet keeps at most 4096 bytes.
    let mut end = message.len().min(4096);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    if let Err(e) = std::fs::write(path, &message[..end]) {
        tracing::warn!(
            "cannot write the termination message to {}: {e}",
            path.display()
        );
    }
}

/// In-cluster mode: the reconciler keeps `store` filled from the API server and Prometheus and
/// marks it ready once the caches synced and the annotations were read back. kerf's own
/// namespace (`own_namespace`, else `kerf-system`) holds the Lease and is always protected.
/// Returns only with an error (see [`crate::reconcile::cluster::run`]).
pub async fn run_in_cluster(
    store: Arc<Store>,
    step_seconds: i64,
    cache_sync_timeout: Duration,
    own_namespace: Option<String>,
) -> anyhow::Result<()> {
    store
        .health()
        .waiting_for("the Kubernetes client configuration");
    let client = ::kube::Client::try_default().await.context(
        "no Kubernetes client configuration: in-cluster mode needs the pod's service account \
         (KUBERNETES_SERVICE_HOST and /var/run/secrets/kubernetes.io/serviceaccount/) or a \
         kubeconfig (KUBECONFIG, or ~/.kube/config); without a cluster use --standalone",
    )?;
    let namespace = own_namespace.unwrap_or_else(|| "kerf-system".into());
    crate::reconcile::cluster::run(
        client,
        store,
        crate::reconcile::cluster::ReconcilerConfig {
            namespace,
            step_seconds,
            cache_sync_timeout,
        },
    )
    .await?;
    Ok(())
}

/// Builds the metric source (Prometheus reached as the connection flags say, the timeout from
/// the directory's GlobalConfiguration) and runs the standalone refresh loop with it.
async fn run_standalone(
    dir_loop: crate::reconcile::standalone::DirLoop,
    source: MetricSourceArgs,
    connection: PrometheusConnectionArgs,
    at: Option<Timestamp>,
    step_seconds: i64,
    interval_seconds: Option<u64>,
    store: Arc<Store>,
) -> anyhow::Result<()> {
    store.health().waiting_for(format!(
        "the first cycle over the manifests in {}",
        dir_loop.dir().display()
    ));
    // Said once here, not every cycle the loop reads the directory again.
    let global = match crate::sources::dir::load_dir(dir_loop.dir()) {
        Ok(m) => {
            for w in &m.warnings {
                tracing::warn!("{w}");
            }
            if let Some(skipped) = m.skipped() {
                tracing::info!("{skipped}");
            }
            m.snapshot.global
        }
        Err(_) => Default::default(),
    };
    let source = super::metric_source(&source, &connection, &global)
        .await
        .context("the metric source")?
        .reporting_to(store.metrics().clone());
    standalone_loop(
        dir_loop,
        &source,
        at,
        step_seconds,
        interval_seconds,
        &store,
    )
    .await;
    anyhow::bail!("the standalone loop ended")
}

/// The dependency name of the manifest directory on `/readyz`.
const MANIFESTS: &str = "manifests";

/// Runs the reconcile loop over its directory (see [`crate::reconcile::standalone::DirLoop`]) now and then
/// every GlobalConfiguration `gpuReactiveCheckInterval` (or `interval_seconds`). A directory
/// that cannot be read keeps the previous content and is retried after `RETRY`; failed queries
/// keep the last recommendations.
pub async fn standalone_loop<S: MetricSource>(
    mut dir_loop: crate::reconcile::standalone::DirLoop,
    source: &S,
    at: Option<Timestamp>,
    step_seconds: i64,
    interval_seconds: Option<u64>,
    store: &Store,
) {
    const RETRY: Duration = Duration::from_secs(10);
    loop {
        let now = at.unwrap_or_else(Timestamp::now);
        let wait = match dir_loop.run_once(source, now, step_seconds, store).await {
            Ok(e) => {
                store.health().clear_error(MANIFESTS);
                tracing::info!(
                    workloads = store.len(),
                    failed_policies = e.cycle.query_failures().len(),
                    "standalone cycle done"
                );
                Duration::from_secs(interval_seconds.unwrap_or_else(|| {
                    e.snapshot
                        .global
                        .gpu_reactive_check_interval
                        .seconds()
                        .max(1)
                }))
            }
            Err(e) => {
                tracing::warn!("standalone cycle failed (retrying in {RETRY:?}): {e:#}");
                store.health().record_error(MANIFESTS, &format!("{e:#}"));
                RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}
