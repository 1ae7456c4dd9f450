//! A scripted mock API server for the kube IO tests: every request is recorded (method, path,
//! query, content type, JSON body) and answered by the test's handler.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub accept: String,
    pub body: Value,
}

impl Recorded {
    pub fn query_has(&self, pair: &str) -> bool {
        self.query.split('&').any(|p| p == pair)
    }
}

pub enum Reply {
    Json(u16, Value),
    /// A plain-text answer, as the API server gives for a path nothing serves (a CRD that is
    /// not installed: `404 page not found`).
    Text(u16, String),
    /// A watch response: one JSON event per line, then the stream ends.
    Events(Vec<Value>),
    /// Never answered (an open watch).
    Hang,
    /// The reply, sent after a delay (a slow API server: the request has taken effect already).
    Late(std::time::Duration, Box<Reply>),
}

/// The HTTP response of a reply (`None`: never answered).
fn response(reply: Reply) -> Option<Response<Body>> {
    let json = |code: u16, bytes: Vec<u8>| {
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(bytes))
            .unwrap()
    };
    match reply {
        Reply::Json(code, v) => Some(json(code, serde_json::to_vec(&v).unwrap())),
        Reply::Text(code, text) => Some(
            Response::builder()
                .status(code)
                .header("content-type", "text/plain; charset=utf-8")
                .body(Body::from(text.into_bytes()))
                .unwrap(),
        ),
        Reply::Events(events) => {
            let mut body = Vec::new();
            for e in events {
                body.extend(serde_json::to_vec(&e).unwrap());
                body.push(b'\n');
            }
            Some(json(200, body))
        }
        Reply::Hang => None,
        Reply::Late(_, reply) => response(*reply),
    }
}

pub fn status(code: u16, reason: &str) -> Reply {
    Reply::Json(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("mock {reason}"), "reason": reason, "code": code}),
    )
}

/// The API server's `/api/v1` discovery, listing `pods/resize` when `resize` (Kubernetes 1.33+
/// with InPlacePodVerticalScaling on, as the registry serves it).
pub fn core_v1_discovery(resize: bool) -> Reply {
    let mut resources = vec![
        json!({"name": "pods", "singularName": "pod", "namespaced": true,
        "kind": "Pod", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}),
    ];
    if resize {
        resources.push(
            json!({"name": "pods/resize", "singularName": "", "namespaced": true,
            "kind": "Pod", "verbs": ["get", "patch", "update"]}),
        );
    }
    Reply::Json(
        200,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
               "resources": resources}),
    )
}

pub type Log = Arc<Mutex<Vec<Recorded>>>;

/// The cluster writer of a replica that holds the Lease, writing (not readOnly) with short
/// retry pauses; the Lease's sender keeps it leading while held.
pub fn leading_writer(
    client: Client,
) -> (
    tokio::sync::watch::Sender<bool>,
    kerf::writers::kube::WriterHandle,
) {
    let (lease, lease_rx) = tokio::sync::watch::channel(true);
    let mut cfg = kerf::writers::kube::WriterConfig::new("kerf-system");
    cfg.backoff = std::time::Duration::from_millis(10);
    cfg.read_only = false;
    (
        lease,
        kerf::writers::kube::Writer::spawn_with(client, lease_rx, cfg),
    )
}

pub fn requests(log: &Log) -> Vec<Recorded> {
    log.lock().unwrap().clone()
}

/// (method, path) of each request, in order: what was sent where (a subresource such as
/// `/status` is part of the path).
pub fn calls(seen: &[Recorded]) -> Vec<(&str, &str)> {
    seen.iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect()
}

/// A kube client whose requests go to `handler`.
pub fn mock<F>(mut handler: F) -> (Client, Log)
where
    F: FnMut(&Recorded) -> Reply + Send + 'static,
{
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log: Log = Arc::default();
    let seen = log.clone();
    tokio::spawn(async move {
        let mut parked = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let rec = Recorded {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or("").to_string(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string(),
                accept: parts
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            let reply = handler(&rec);
            seen.lock().unwrap().push(rec);
            match reply {
                Reply::Hang => parked.push(send),
                // Answered later, without holding up the requests that come meanwhile.
                Reply::Late(after, reply) => {
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        if let Some(resp) = response(*reply) {
                            send.send_response(resp);
                        }
                    });
                }
                reply => {
                    if let Some(resp) = response(reply) {
                        send.send_response(resp);
                    }
                }
            }
        }
    });
    (Client::new(service, "default"), log)
}

/// Polls `f` until it is true (or panics after `secs` seconds with `what`).
pub async fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

pub mod real_merge;
pub mod ssa;
