//! The real `kerf serve` binary: flags from `KERF_*` environment variables, both listeners up,
//! `/readyz` 503 while the API server cannot be reached (and saying so), and exit 0 on SIGTERM.

use crate::apiserver;
use crate::support;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// An address that refuses connections for as long as the returned socket lives: bound (so no
/// one else gets the port) but not listening.
fn refusing_address() -> (tokio::net::TcpSocket, std::net::SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

#[cfg(unix)]
#[tokio::test]
async fn kerf_serve_runs_from_env_and_exits_zero_on_sigterm() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    // An API server that refuses connections: kerf retries, stays alive and not ready.
    let (_refusing, apiserver) = refusing_address();
    let kubeconfig = apiserver::kubeconfig(dir.path(), &format!("http://{apiserver}"), "t");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .arg("serve")
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        // Port 0: kerf binds and logs the ports it got (no port picked here and freed first).
        .env("KERF_LISTEN", "127.0.0.1:0")
        .env("KERF_HEALTH_LISTEN", "127.0.0.1:0")
        .env("KERF_TLS_CERT", &cert)
        .env("KERF_TLS_KEY", &key)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf binary starts");
    let (webhook, health) = serving_addresses(&mut child);
    let start = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("http://{health}/healthz")).await {
            assert_eq!(r.status(), 200);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "kerf serve did not come up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (status, body) = get_text(health, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        if body.contains("cannot reach the API server") {
            break body;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        body.starts_with(
            "not ready: waiting for the caches to sync\ncaches not synced (30 of 30): "
        ),
        "{body}"
    );
    assert!(
        body.contains("): list failed: cannot reach the API server: "),
        "{body}"
    );
    let resp = review(
        &client(&pki.ca_pem(), webhook, false),
        webhook,
        &fixture("pod-kai-fraction.json"),
    )
    .await;
    assert_eq!(resp["response"]["allowed"], true);

    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run `kill` (Debian package procps; `scripts/test --setup-only` installs it)");
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "kerf did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0), "graceful exit code");
}

#[test]
fn serve_rejects_standalone_without_manifests() {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["serve", "--tls-cert", "c", "--tls-key", "k", "--standalone"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--manifests"), "{err}");
}
