//! A small authenticating reverse proxy in front of a test Prometheus, as OpenShift's
//! kube-rbac-proxy or a gateway would stand in front of a real one: it answers 401 unless the
//! request carries `Authorization: Bearer <the token it accepts>`, records every request it sees
//! (method, path, query, headers, body) and forwards the accepted ones.
//!
//! It runs on its own thread and runtime, so sync and async tests (and a `kerf` child process)
//! can all use it. Declared once in each test binary that uses it (`tests/<edge>/main.rs`) as `mod auth_proxy`.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};

/// One request as the proxy saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    /// Header names lower-cased; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    pub body: String,
    /// Whether the proxy let it through.
    pub accepted: bool,
}

impl Seen {
    /// The query string's pairs, decoded.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        url_pairs(&self.query)
    }

    /// The form body's pairs, decoded.
    pub fn form_pairs(&self) -> Vec<(String, String)> {
        url_pairs(&self.body)
    }
}

fn url_pairs(s: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://x/?{s}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

struct State {
    upstream: String,
    token: Option<String>,
    seen: Vec<Seen>,
}

pub struct AuthProxy {
    url: String,
    state: Arc<Mutex<State>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AuthProxy {
    /// A proxy to `upstream` (plain HTTP) accepting `Bearer <token>` only, or every request
    /// when `token` is `None` (then it only records).
    pub fn start(upstream: &str, token: Option<&str>) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let state = Arc::new(Mutex::new(State {
            upstream: upstream.trim_end_matches('/').to_string(),
            token: token.map(str::to_string),
            seen: Vec::new(),
        }));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let http = reqwest::Client::new();
                let app = axum::Router::new().fallback(move |req: Request<Body>| {
                    let (state, http) = (shared.clone(), http.clone());
                    async move { handle(state, http, req).await }
                });
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop.await;
                    })
                    .await
                    .unwrap();
            });
        });
        let addr = addr_rx.recv().expect("proxy listening");
        Self {
            url: format!("http://{addr}"),
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// From now on only `Bearer <token>` is accepted (the old token is refused).
    pub fn accept_only(&self, token: &str) {
        self.state.lock().unwrap().token = Some(token.to_string());
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn clear(&self) {
        self.state.lock().unwrap().seen.clear();
    }
}

impl Drop for AuthProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    http: reqwest::Client,
    req: Request<Body>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 16 << 20)
        .await
        .unwrap_or_default();
    let mut headers = BTreeMap::<String, String>::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_string())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value)
            })
            .or_insert(value);
    }
    let (upstream, accepted) = {
        let state = state.lock().unwrap();
        let accepted = state.token.as_ref().is_none_or(|t| {
            headers.get("authorization").map(String::as_str) == Some(&format!("Bearer {t}"))
        });
        (state.upstream.clone(), accepted)
    };
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        accepted,
    };
    state.lock().unwrap().seen.push(seen);
    if !accepted {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Bearer")
            .body(Body::from("Unauthorized\n"))
            .unwrap();
    }
    let target = format!(
        "{upstream}{}",
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut forward = http.request(parts.method.clone(), target).body(body);
    if let Some(ct) = parts.headers.get("content-type") {
        forward = forward.header("content-type", ct.clone());
    }
    match forward.send().await {
        Ok(r) => {
            let status = r.status();
            let ct = r.headers().get("content-type").cloned();
            let bytes = r.bytes().await.unwrap_or_default();
            let mut out = Response::builder().status(status);
            if let Some(ct) = ct {
                out = out.header("content-type", ct);
            }
            out.body(Body::from(bytes)).unwrap()
        }
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from(format!("proxy: {e}")))
            .unwrap(),
    }
}
