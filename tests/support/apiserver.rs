//! A mock Kubernetes API server over plain HTTP, for tests that run the `kerf` binary with a
//! kubeconfig pointing at it. Every request is answered by the test's handler.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub enum Answer {
    Json(u16, Value),
    /// Plain text, as the API server answers a path nothing serves (`404 page not found`).
    Text(u16, &'static str),
    /// A watch that stays open and silent.
    Hang,
}

/// One request as the handler sees it.
pub struct Seen<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a str,
    pub body: Value,
}

impl Seen<'_> {
    pub fn is_watch(&self) -> bool {
        self.query.split('&').any(|p| p == "watch=true")
    }
}

pub struct MockApiServer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockApiServer {
    pub async fn start<F>(handler: F) -> Self
    where
        F: Fn(&Seen) -> Answer + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        let app = axum::Router::new().fallback(move |req: Request| {
            let handler = handler.clone();
            async move {
                let (parts, body) = req.into_parts();
                let bytes = axum::body::to_bytes(body, usize::MAX)
                    .await
                    .unwrap_or_default();
                let seen = Seen {
                    method: parts.method.as_str(),
                    path: parts.uri.path(),
                    query: parts.uri.query().unwrap_or(""),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                answer(handler(&seen))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig for this server, authenticating with `token`.
    pub fn kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        kubeconfig(dir, &self.url(), token)
    }
}

/// A kubeconfig whose current context points at `server` with a bearer `token`.
pub fn kubeconfig(dir: &Path, server: &str, token: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: mock\n  cluster:\n    server: {server}\n\
             users:\n- name: kerf\n  user:\n    token: {token}\n\
             contexts:\n- name: mock\n  context:\n    cluster: mock\n    user: kerf\n\
             current-context: mock\n"
        ),
    )
    .unwrap();
    path
}

fn answer(a: Answer) -> Response {
    let code = |c: u16| StatusCode::from_u16(c).unwrap();
    match a {
        Answer::Json(c, v) => (
            code(c),
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&v).unwrap(),
        )
            .into_response(),
        Answer::Text(c, t) => (
            code(c),
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            t,
        )
            .into_response(),
        Answer::Hang => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()),
        )
            .into_response(),
    }
}
