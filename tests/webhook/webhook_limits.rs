//! Slow and silent clients against both listeners, as an attacker on the network would hold
//! them: every phase of a connection (no handshake, silent after the handshake, slow headers,
//! a stalled body, idle keep-alive on HTTP/1.1 and HTTP/2, a silent plain TCP connection on the
//! health port) is closed within its timeout and counted; headers beyond the limit get 431;
//! the connection cap makes new connections wait; many stalled bodies keep the real `kerf
//! serve` process under its memory bound while reviews go on being answered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kerf::server::limits::Limits;
use kerf::state::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::process_metrics;
use crate::support::*;

/// Short limits, each phase its own length so a close tells which deadline cut it.
fn short_limits() -> Limits {
    Limits {
        tls_handshake_timeout: Duration::from_millis(1000),
        first_request_timeout: Duration::from_millis(1500),
        header_read_timeout: Duration::from_millis(1000),
        body_read_timeout: Duration::from_millis(1200),
        idle_timeout: Duration::from_millis(2000),
        ..Limits::default()
    }
}

/// Reads until the peer closes; returns what was read and when the close came.
async fn read_to_close<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    within: Duration,
) -> (Vec<u8>, Instant) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => panic!(
                "still open after {within:?}; read so far: {:?}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return (out, Instant::now()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// Asserts a connection opened at `opened` was closed at `closed`, not before `timeout` and
/// within it plus the close grace and scheduling slack.
fn closed_in_time(what: &str, opened: Instant, closed: Instant, timeout: Duration) {
    let took = closed - opened;
    assert!(
        took >= timeout.mul_f64(0.9),
        "{what}: closed after {took:?}, before its timeout {timeout:?}"
    );
    assert!(
        took <= timeout + Duration::from_millis(1500),
        "{what}: closed after {took:?}, timeout {timeout:?}"
    );
}

async fn tls_h2(ca: &str, addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_tls(ca, &[b"h2"], false)));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let s = connector.connect(name, tcp).await.expect("TLS handshake");
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    s
}

async fn metrics_text(health: SocketAddr) -> String {
    get_text(health, "/metrics").await.1
}

fn closed(text: &str, listener: &str, phase: &str, reason: &str) -> f64 {
    process_metrics::value(
        text,
        &format!(
            "kerf_connections_closed_total{{listener=\"{listener}\",phase=\"{phase}\",reason=\"{reason}\"}}"
        ),
    )
}

#[tokio::test]
async fn every_phase_of_a_connection_is_closed_within_its_timeout() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let limits = short_limits();
    let server = start(Store::new(), &cert, &key, |c| c.limits = limits.clone()).await;
    let ca = pki.ca_pem();
    let (webhook, health) = (server.webhook, server.health);

    // Each client in its own task, all at once: the phases run side by side.
    let no_handshake = tokio::spawn(async move {
        let opened = Instant::now();
        let mut tcp = TcpStream::connect(webhook).await.unwrap();
        let (_, at) = read_to_close(&mut tcp, Duration::from_secs(5)).await;
        ("no TLS handshake", opened, at)
    });
    let ca1 = ca.clone();
    let silent_after_handshake = tokio::spawn(async move {
        let mut s = tls_connection(&ca1, webhook).await;
        let opened = Instant::now();
        let (_, at) = read_to_close(&mut s, Duration::from_secs(5)).await;
        ("silent after the handshake", opened, at)
    });
    let ca2 = ca.clone();
    let slow_headers = tokio::spawn(async move {
        let mut s = tls_connection(&ca2, webhook).await;
        s.write_all(b"POST /mutate HTTP/1.1\r\nhost: localhost\r\n")
            .await
            .unwrap();
        let opened = Instant::now();
        // Another header line, slower than the header deadline allows in total.
        tokio::time::sleep(Duration::from_millis(400)).await;
        s.write_all(b"x-slow: 1\r\n").await.unwrap();
        let (_, at) = read_to_close(&mut s, Duration::from_secs(5)).await;
        ("slow headers", opened, at)
    });
    let ca3 = ca.clone();
    let stalled_body = tokio::spawn(async move {
        let mut s = tls_connection(&ca3, webhook).await;
        s.write_all(
            b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{\"kind\":",
        )
        .await
        .unwrap();
        let opened = Instant::now();
        let (answer, at) = read_to_close(&mut s, Duration::from_secs(5)).await;
        let answer = String::from_utf8_lossy(&answer).to_string();
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert!(answer.contains("--body-read-timeout-seconds"), "{answer}");
        ("stalled body", opened, at)
    });
    let ca4 = ca.clone();
    let idle_keep_alive = tokio::spawn(async move {
        let mut s = tls_connection(&ca4, webhook).await;
        assert_eq!(get_on(&mut s, "/x").await, Ok(404));
        let opened = Instant::now();
        let (_, at) = read_to_close(&mut s, Duration::from_secs(5)).await;
        ("idle HTTP/1.1 keep-alive", opened, at)
    });
    let ca5 = ca.clone();
    let idle_h2 = tokio::spawn(async move {
        let s = tls_h2(&ca5, webhook).await;
        let (send, conn) = h2::client::handshake(s).await.expect("h2 handshake");
        let conn = tokio::spawn(conn);
        let mut send = send.ready().await.unwrap();
        let req = http::Request::get(url(webhook, "/x")).body(()).unwrap();
        let (resp, _) = send.send_request(req, true).unwrap();
        assert_eq!(resp.await.unwrap().status(), 404);
        let opened = Instant::now();
        // The connection future ends when the server sent GOAWAY and closed.
        let _ = tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("the idle HTTP/2 connection is closed");
        ("idle HTTP/2", opened, Instant::now())
    });
    let health_silent = tokio::spawn(async move {
        let opened = Instant::now();
        let mut tcp = TcpStream::connect(health).await.unwrap();
        let (_, at) = read_to_close(&mut tcp, Duration::from_secs(5)).await;
        ("silent plain TCP on the health port", opened, at)
    });
    let health_idle = tokio::spawn(async move {
        let mut tcp = TcpStream::connect(health).await.unwrap();
        assert_eq!(get_on(&mut tcp, "/healthz").await, Ok(200));
        let opened = Instant::now();
        let (_, at) = read_to_close(&mut tcp, Duration::from_secs(5)).await;
        ("idle keep-alive on the health port", opened, at)
    });

    let cases = [
        (no_handshake, limits.tls_handshake_timeout),
        (silent_after_handshake, limits.first_request_timeout),
        (slow_headers, limits.header_read_timeout),
        (stalled_body, limits.body_read_timeout),
        (idle_keep_alive, limits.idle_timeout),
        (idle_h2, limits.idle_timeout),
        (health_silent, limits.first_request_timeout),
        (health_idle, limits.idle_timeout),
    ];
    for (task, timeout) in cases {
        let (what, opened, at) = task.await.unwrap();
        closed_in_time(what, opened, at, timeout);
    }

    let text = metrics_text(health).await;
    for (listener, phase, n) in [
        ("webhook", "handshake", 1.0),
        ("webhook", "first_request", 1.0),
        ("webhook", "headers", 1.0),
        ("webhook", "body", 1.0),
        ("webhook", "idle", 2.0),
        ("health", "first_request", 1.0),
        ("health", "idle", 1.0),
    ] {
        assert_eq!(
            closed(&text, listener, phase, "timeout"),
            n,
            "{listener} {phase}\n{text}"
        );
    }
}

#[tokio::test]
async fn headers_beyond_the_limit_get_431_on_http1_and_http2() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let server = start(Store::new(), &cert, &key, |_| {}).await;
    let ca = pki.ca_pem();
    let big = "a".repeat(100_000);
    let over = "a".repeat(17 * 1024);
    let under = "a".repeat(12 * 1024);

    async fn h1_status(ca: &str, addr: SocketAddr, value: &str) -> String {
        let mut s = tls_connection(ca, addr).await;
        let req = format!("GET /x HTTP/1.1\r\nhost: localhost\r\nx-big: {value}\r\n\r\n");
        // The server may answer and close before all of a huge head is written.
        let _ = s.write_all(req.as_bytes()).await;
        let (answer, _) = read_to_close_or_answer(&mut s).await;
        answer
    }
    assert!(
        h1_status(&ca, server.webhook, &big)
            .await
            .starts_with("HTTP/1.1 431 ")
    );
    assert!(
        h1_status(&ca, server.webhook, &over)
            .await
            .starts_with("HTTP/1.1 431 ")
    );
    assert!(
        h1_status(&ca, server.webhook, &under)
            .await
            .starts_with("HTTP/1.1 404 ")
    );

    // A fresh HTTP/2 connection each: one far over the limit is closed as a whole.
    let h2 = |v: String| {
        let c = client(&ca, server.webhook, true);
        async move {
            c.get(url(server.webhook, "/x"))
                .header("x-big", v)
                .send()
                .await
        }
    };
    assert_eq!(h2(over).await.unwrap().status(), 431);
    assert_eq!(h2(under).await.unwrap().status(), 404);
    // The h2 library's own rule: a header block far beyond the limit ends the connection
    // (GOAWAY ENHANCE_YOUR_CALM) instead of being decoded for a 431.
    let err = h2(big.clone()).await.unwrap_err();
    assert!(format!("{err:?}").contains("ENHANCE_YOUR_CALM"), "{err:?}");

    let text = metrics_text(server.health).await;
    assert_eq!(
        closed(&text, "webhook", "headers", "too_large"),
        2.0,
        "{text}"
    );
}

/// Reads one HTTP/1 answer (its head) or until the close.
async fn read_to_close_or_answer<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> (String, ()) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Err(_) => panic!("no answer: {:?}", String::from_utf8_lossy(&out)),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                out.extend_from_slice(&buf[..n]);
                if out.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
        }
    }
    (String::from_utf8_lossy(&out).to_string(), ())
}

#[tokio::test]
async fn at_the_connection_cap_new_connections_wait_for_a_free_one() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let server = start(Store::new(), &cert, &key, |c| c.limits.max_connections = 3).await;
    let ca = pki.ca_pem();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = tls_connection(&ca, server.webhook).await;
        assert_eq!(get_on(&mut s, "/x").await, Ok(404));
        held.push(s);
    }
    let text = metrics_text(server.health).await;
    assert_eq!(
        process_metrics::value(&text, "kerf_connections_open{listener=\"webhook\"}"),
        3.0
    );
    assert_eq!(
        process_metrics::value(&text, "kerf_connections_max{listener=\"webhook\"}"),
        3.0
    );
    // The fourth connects (the kernel's backlog) but is not served: no handshake.
    let ca2 = ca.clone();
    let addr = server.webhook;
    let fourth = tokio::spawn(async move {
        let mut s = tls_connection(&ca2, addr).await;
        get_on(&mut s, "/x").await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !fourth.is_finished(),
        "a fourth connection was served past the cap"
    );
    held.pop();
    let status = tokio::time::timeout(Duration::from_secs(5), fourth)
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(status, Ok(404));
}

/// Prometheus text 0.0.4 when asked, OpenMetrics when asked (Prometheus's own scrape header),
/// text without an `Accept`; `promtool check metrics` finds nothing to say about the text.
#[tokio::test]
async fn metrics_are_negotiated_and_promtool_finds_nothing() {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let server = start(Store::new(), &cert, &key, |c| c.limits = short_limits()).await;
    // Labelled series present too: a review answered, a body refused.
    review(
        &client(&pki.ca_pem(), server.webhook, false),
        server.webhook,
        &fixture("pod-web.json"),
    )
    .await;
    let mut s = tls_connection(&pki.ca_pem(), server.webhook).await;
    s.write_all(b"POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-length: 4000000\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = read_to_close_or_answer(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.1 413 "),
        "refused before its body is read: {answer}"
    );

    // A request of its own: reqwest would add `Accept: */*` to every request.
    let get = |accept: Option<&'static str>| async move {
        let mut tcp = TcpStream::connect(server.health).await.unwrap();
        let accept = accept.map_or(String::new(), |a| format!("accept: {a}\r\n"));
        let req = format!(
            "GET /metrics HTTP/1.1\r\nhost: localhost\r\n{accept}connection: close\r\n\r\n"
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        let (answer, _) = read_to_close(&mut tcp, Duration::from_secs(5)).await;
        let answer = String::from_utf8(answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        let ct = head
            .lines()
            .find_map(|l| l.strip_prefix("content-type: "))
            .unwrap()
            .to_string();
        (ct, body.to_string())
    };
    let prometheus_scrape = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (ct, om) = get(Some(prometheus_scrape)).await;
    assert_eq!(
        ct,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE kerf_connections_closed counter\n"));
    let (ct, text) = get(Some("text/plain;version=0.0.4")).await;
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!text.contains("# EOF"));
    assert!(
        text.contains("# TYPE kerf_connections_closed_total counter\n"),
        "{text}"
    );
    assert!(text.contains("kerf_connections_closed_total{listener=\"webhook\",phase=\"body\",reason=\"too_large\"} 1\n"), "{text}");
    let (ct, _) = get(None).await;
    assert_eq!(
        ct, "text/plain; version=0.0.4; charset=utf-8",
        "no Accept: text"
    );
    let (ct, _) = get(Some("*/*")).await;
    assert_eq!(
        ct, "application/openmetrics-text; version=1.0.0; charset=utf-8",
        "*/* is the first offered"
    );

    let mut promtool = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed (scripts/test installs it)");
    let mut stdin = promtool.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = promtool.wait_with_output().await.unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// The attack of 100 connections each sending 2 MiB of a 3 MB body and stalling, against the
/// real `kerf serve` process with its default memory limits: its RSS stays far under the
/// Deployment's 256Mi, every stalled connection is answered or closed within the body
/// timeout, and reviews are answered all along.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn stalled_bodies_keep_kerf_under_its_memory_limit_while_reviews_are_answered() {
    use std::process::{Command, Stdio};
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let body_timeout = Duration::from_secs(4);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "serve",
            "--standalone",
            "--listen",
            "127.0.0.1:0",
            "--health-listen",
            "127.0.0.1:0",
        ])
        .arg("--manifests")
        .arg(examples.join("manifests"))
        .arg("--metrics")
        .arg(examples.join("metrics.om"))
        .args(["--at", "2026-01-01T12:00:00Z"])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .env(
            "KERF_BODY_READ_TIMEOUT_SECONDS",
            body_timeout.as_secs().to_string(),
        )
        .env("KERF_TERMINATION_LOG", dir.path().join("termination-log"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kerf binary starts");
    let pid = child.id();
    let (webhook, health) = serving_addresses(&mut child);
    let ca = pki.ca_pem();
    let reviewer = client(&ca, webhook, false);
    let body = fixture("pod-kai-fraction.json");
    review(&reviewer, webhook, &body).await;
    let before = vm_rss_kib(pid);

    let mut peaks = Vec::new();
    let mut rounds = Vec::new();
    // Twice: the memory of the first burst serves the second instead of adding to it.
    for _ in 0..2 {
        let (peak, reviews, statuses) =
            attack(&ca, webhook, pid, &reviewer, &body, body_timeout).await;
        peaks.push(peak);
        rounds.push((reviews, statuses));
    }
    let after = vm_rss_kib(pid);
    let text = get_text(health, "/metrics").await.1;
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("RSS before {before} KiB, peaks {peaks:?} KiB, after {after} KiB; rounds {rounds:?}");
    // 64Mi of bodies at most over a ~30-50 MiB process: far under the Deployment's 256Mi.
    for peak in &peaks {
        assert!(*peak < 160 * 1024, "peak RSS {peak} KiB");
    }
    assert!(
        peaks[1] < peaks[0] + 16 * 1024,
        "a second burst added to the first: {peaks:?}"
    );
    // Large bodies live in maps of their own, unmapped once answered: the burst's memory goes
    // back to the system (about 8 MiB stays; 38 MiB stayed when the bodies were on the heap).
    assert!(
        after < before + 24 * 1024,
        "memory not returned after the burst: before {before} KiB, after {after} KiB"
    );
    for (reviews, statuses) in &rounds {
        assert!(*reviews >= 20, "{reviews} reviews answered");
        assert_eq!(statuses.values().sum::<usize>(), 100);
        // The bodies that fit the budget were read and cut at the timeout (408); the others
        // were refused at once (503; the client may see only the close, its unsent body reset).
        assert!(
            statuses.get("408").copied().unwrap_or(0) >= 15,
            "{statuses:?}"
        );
    }
    let timed_out = closed(&text, "webhook", "body", "timeout");
    let refused = closed(&text, "webhook", "body", "memory_limit");
    assert_eq!(timed_out + refused, 200.0, "{text}");
    assert!(timed_out >= 30.0 && refused >= 100.0, "{text}");
    assert_eq!(
        process_metrics::value(&text, "kerf_request_body_bytes_buffered"),
        0.0,
        "{text}"
    );
}

type Statuses = std::collections::BTreeMap<String, usize>;

/// 100 connections that each send the head of a 3 MB review and 2 MiB of its body, then stall;
/// reviews and RSS samples meanwhile. Returns the peak RSS (KiB), the reviews answered and the
/// statuses the attackers got.
async fn attack(
    ca: &str,
    webhook: SocketAddr,
    pid: u32,
    reviewer: &reqwest::Client,
    body: &serde_json::Value,
    body_timeout: Duration,
) -> (u64, usize, Statuses) {
    let started = Instant::now();
    let chunk = vec![b' '; 64 * 1024];
    let mut attackers = Vec::new();
    for _ in 0..100 {
        let ca = ca.to_string();
        let chunk = chunk.clone();
        attackers.push(tokio::spawn(async move {
            let mut s = tls_connection(&ca, webhook).await;
            let head = "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 3000000\r\n\r\n";
            let _ = s.write_all(head.as_bytes()).await;
            let opened = Instant::now();
            // 2 MiB of the 3 MB, then nothing; a refused body's connection closes early.
            for _ in 0..32 {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            let (answer, at) = read_to_close(&mut s, Duration::from_secs(15)).await;
            (String::from_utf8_lossy(&answer).to_string(), at - opened)
        }));
    }
    // Reviews and RSS samples while the attack runs, until its bodies were cut.
    let mut peak = 0;
    let mut reviews = 0;
    while started.elapsed() < body_timeout + Duration::from_secs(2) {
        let t = Instant::now();
        let resp = review(reviewer, webhook, body).await;
        assert_eq!(resp["response"]["allowed"], true);
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "a review took {:?} during the attack: longer than the webhook's timeoutSeconds (3)",
            t.elapsed()
        );
        reviews += 1;
        peak = peak.max(vm_rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut statuses = Statuses::new();
    for a in attackers {
        let (answer, took) = a.await.unwrap();
        assert!(
            took <= body_timeout + Duration::from_secs(2),
            "a stalled body held on {took:?}"
        );
        let status = answer
            .split_whitespace()
            .nth(1)
            .unwrap_or("closed")
            .to_string();
        *statuses.entry(status).or_default() += 1;
    }
    (peak, reviews, statuses)
}
