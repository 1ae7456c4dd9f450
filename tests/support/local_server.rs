//! What the tests' real servers (Prometheus, VictoriaMetrics) share: finding their binary, a free
//! loopback port, waiting until the started process serves, and a plain blocking HTTP/1.0
//! request. `prometheus.rs` includes it as `prometheus_support::local_server`; `victoria.rs` uses
//! it from there.
#![allow(dead_code)] // each test binary uses a different part

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The binary `name`: `$env` if set, else from `PATH`; missing, the test fails saying how to
/// install Debian package `package`.
pub fn binary(env: &str, name: &str, package: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "`{name}` not found on PATH and {env} is not set; install it with \
                 `scripts/test --setup-only` (or `apt-get install -y {package}`)"
            )
        })
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// Waits until `ready()`, while the process in `child` (logging to `log`) runs; Err with its
/// log when it exits first or is not ready in 30 s (then it is killed).
pub fn wait_ready(
    child: &mut Option<Child>,
    log: &Path,
    name: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let log_text = || std::fs::read_to_string(log).unwrap_or_default();
    loop {
        if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            *child = None;
            return Err(format!(
                "{name} exited ({status}) before ready:\n{}",
                log_text()
            ));
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() > deadline {
            if let Some(mut c) = child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err(format!(
                "{name} not ready after {READY_TIMEOUT:?}:\n{}",
                log_text()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A plain blocking HTTP/1.0 request to `127.0.0.1:port` (no chunked encoding: the server closes
/// when done): (status, body).
pub fn http(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad HTTP answer: {text:.200}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}
