//! TLS serving behaviour over real connections: certificate rotation without restart (file
//! rewrite and Kubernetes' `..data` symlink swap), a bad new pair keeps the old one, TLS 1.2,
//! and graceful shutdown.

use crate::process_metrics;
use crate::support;
use std::time::{Duration, Instant};

use kerf::state::Store;
use support::*;

/// Polls new connections until the presented certificate is `want` (or 10 s pass).
async fn wait_for_cert(ca: &str, addr: std::net::SocketAddr, want: &[u8]) -> Duration {
    let start = Instant::now();
    loop {
        if presented_cert(ca, addr).await == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "new certificate not served within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn rewritten_cert_files_are_served_on_next_connection() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let old = pki.leaf("old");
    let (cert, key) = write_pair(dir.path(), &old);
    let server = start(Store::new(), &cert, &key, |_| {}).await;
    let ca = pki.ca_pem();
    let reloaded = || async { reloads(server.health, "ok").await };
    let before = reloaded().await;
    assert_eq!(presented_cert(&ca, server.webhook).await, old.der);
    // An established keep-alive connection keeps working across the rotation: one TLS
    // connection (it cannot reconnect) answers before and after, still under the old certificate.
    let mut kept = tls_connection(&ca, server.webhook).await;
    assert_eq!(get_on(&mut kept, "/x").await, Ok(404));

    let new = pki.leaf("new");
    write_pair(dir.path(), &new);
    wait_for_cert(&ca, server.webhook, &new.der).await;
    assert_eq!(
        get_on(&mut kept, "/x").await,
        Ok(404),
        "the connection made before the rotation"
    );
    assert_eq!(connection_cert(&kept), old.der);
    assert_eq!(reloaded().await - before, 1.0, "one reload counted");
}

/// `kerf_tls_reloads_total{kind}` on `/metrics`.
async fn reloads(health: std::net::SocketAddr, kind: &str) -> f64 {
    let (_, text) = get_text(health, "/metrics").await;
    process_metrics::value(
        &text,
        &format!(r#"kerf_tls_reloads_total{{kind="{kind}"}}"#),
    )
}

/// Kubernetes mounts Secret keys as `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`, and
/// rotates by creating a new timestamp directory and atomically renaming a new `..data` link.
#[cfg(unix)]
#[tokio::test]
async fn secret_volume_data_symlink_swap_is_picked_up() {
    use std::os::unix::fs::symlink;
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let pki = Pki::new();
    let old = pki.leaf("old");
    let write_version = |name: &str, leaf: &Leaf| {
        let v = root.join(name);
        std::fs::create_dir(&v).unwrap();
        write_pair(&v, leaf);
    };
    write_version("..2026_07_01_10_00_00.1", &old);
    symlink("..2026_07_01_10_00_00.1", root.join("..data")).unwrap();
    symlink("..data/tls.crt", root.join("tls.crt")).unwrap();
    symlink("..data/tls.key", root.join("tls.key")).unwrap();
    let server = start(
        Store::new(),
        &root.join("tls.crt"),
        &root.join("tls.key"),
        |_| {},
    )
    .await;
    let ca = pki.ca_pem();
    assert_eq!(presented_cert(&ca, server.webhook).await, old.der);

    let new = pki.leaf("new");
    write_version("..2026_07_02_10_00_00.2", &new);
    symlink("..2026_07_02_10_00_00.2", root.join("..data_tmp")).unwrap();
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    std::fs::remove_dir_all(root.join("..2026_07_01_10_00_00.1")).unwrap();
    wait_for_cert(&ca, server.webhook, &new.der).await;
}

#[tokio::test]
async fn bad_new_pair_keeps_old_cert_serving() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let old = pki.leaf("old");
    let (cert, key) = write_pair(dir.path(), &old);
    let server = start(Store::new(), &cert, &key, |c| {
        c.reload_interval = Duration::from_millis(200)
    })
    .await;
    let ca = pki.ca_pem();
    let before = reloads(server.health, "error").await;

    // A certificate with someone else's key, then garbage: each refused (counted), old kept.
    let other = pki.leaf("other");
    // Written whole (temp file + rename): a reload never sees half a file, so each change is
    // exactly one refused reload.
    write_atomically(&cert, other.cert_pem.as_bytes());
    wait_for_reload_errors(server.health, before + 1.0).await;
    assert_eq!(presented_cert(&ca, server.webhook).await, old.der);
    write_atomically(&cert, b"not a certificate");
    wait_for_reload_errors(server.health, before + 2.0).await;
    assert_eq!(presented_cert(&ca, server.webhook).await, old.der);

    // Fixing the files later still rotates.
    let new = pki.leaf("new");
    write_pair(dir.path(), &new);
    wait_for_cert(&ca, server.webhook, &new.der).await;
}

fn write_atomically(path: &std::path::Path, contents: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits (polling /metrics, up to 20 s) until the refused reloads counted are exactly `n`.
async fn wait_for_reload_errors(health: std::net::SocketAddr, n: f64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = reloads(health, "error").await;
        if seen == n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never saw {n} refused reloads (last: {seen})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn invalid_initial_pair_fails_with_file_name() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, "garbage").unwrap();
    std::fs::write(&key, "garbage").unwrap();
    let cfg = kerf::server::ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        cert,
        key,
    );
    let err = kerf::server::BoundServer::bind(cfg)
        .await
        .err()
        .expect("must fail");
    assert!(err.to_string().contains("tls.crt"), "{err}");
}

#[tokio::test]
async fn tls12_client_is_accepted() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let server = start(Store::new(), &cert, &key, |_| {}).await;
    let c = reqwest::Client::builder()
        .tls_backend_preconfigured(client_tls(&pki.ca_pem(), &[b"http/1.1"], true))
        .resolve("localhost", server.webhook)
        .build()
        .unwrap();
    let resp = c.get(url(server.webhook, "/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 404, "the TLS listener serves only /mutate");
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_review() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let mut server = start(Store::new(), &cert, &key, |c| {
        c.review_delay = Duration::from_millis(1500);
        c.review_started = Some(started_tx);
    })
    .await;
    let client = client(&pki.ca_pem(), server.webhook, false);
    let addr = server.webhook;
    let body = fixture("pod-kai-fraction.json");
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move { review(&client, addr, &body).await }
    });
    tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("the review reached the server within 10 s");
    let t = Instant::now();
    server.stop();
    let resp = in_flight.await.expect("in-flight review completed");
    assert_eq!(resp["response"]["allowed"], true);
    let result = tokio::time::timeout(Duration::from_secs(10), &mut server.handle)
        .await
        .expect("server exits after draining")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "the server waited for the review"
    );
    // No longer accepting.
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn graceful_shutdown_closes_idle_keep_alive_connections() {
    use tokio::io::AsyncReadExt;
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    // Open connections hold shutdown up for at most this long; idle ones must not hold it up.
    let mut server = start(Store::new(), &cert, &key, |c| {
        c.shutdown_timeout = Duration::from_secs(60)
    })
    .await;
    // An idle HTTP/1.1 keep-alive connection: two requests answered on it, then left open.
    let mut idle = tls_connection(&pki.ca_pem(), server.webhook).await;
    assert_eq!(get_on(&mut idle, "/x").await, Ok(404));
    assert_eq!(get_on(&mut idle, "/x").await, Ok(404), "kept alive");
    server.stop();
    let result = tokio::time::timeout(Duration::from_secs(10), &mut server.handle)
        .await
        .expect("the idle keep-alive connection held shutdown up (10 s, the timeout is 60 s)")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    // The server closed it.
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("the idle connection is closed");
    assert!(matches!(read, Ok(0)), "{read:?}");
}

/// The serving certificate's `notAfter` as openssl reads it, in Unix seconds.
fn openssl_not_after(cert: &std::path::Path) -> i64 {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in"])
        .arg(cert)
        .output()
        .expect("openssl runs (`scripts/test --setup-only` installs it)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let iso = text.trim().strip_prefix("notAfter=").expect(&text);
    iso.replace(' ', "T")
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{iso}: {e}"))
        .as_second()
}

/// `kerf_tls_certificate_expiration_timestamp_seconds` is the `notAfter` of the pair serving now,
/// as openssl reads it: an openssl certificate (UTCTime, 30 days), then after a rotation an rcgen
/// one (GeneralizedTime, year 4096) — the alert on an expiring certificate follows the rotation.
#[tokio::test]
async fn the_certificate_expiry_metric_follows_a_rotation() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "30", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "{out:?}");
    let server = start(Store::new(), &cert, &key, |c| {
        c.reload_interval = Duration::from_millis(100);
    })
    .await;
    let expiry = || async {
        let (_, text) = get_text(server.health, "/metrics").await;
        process_metrics::value(&text, "kerf_tls_certificate_expiration_timestamp_seconds")
    };
    let in_30_days = openssl_not_after(&cert);
    let start = Instant::now();
    while expiry().await != in_30_days as f64 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            expiry().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = jiff::Timestamp::now().as_second();
    assert!((in_30_days - now - 30 * 86_400).abs() < 120, "{in_30_days}");

    let pki = Pki::new();
    write_pair(dir.path(), &pki.leaf("rotated"));
    let rotated = openssl_not_after(&cert);
    assert_ne!(rotated, in_30_days);
    while expiry().await != rotated as f64 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{}",
            expiry().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
