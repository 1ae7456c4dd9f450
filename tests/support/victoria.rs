//! A real VictoriaMetrics for tests (Debian package `victoria-metrics`), loaded with the same
//! OpenMetrics text as [`super::prometheus_support::TestPrometheus`]: the text is read with kerf's
//! own parser (which derives milliseconds exactly as promtool does) and POSTed to
//! `/api/v1/import/prometheus` as Prometheus text lines with millisecond timestamps, then
//! `/internal/force_flush` makes it queryable.
//!
//! Include it with `#[path = "support/victoria.rs"] mod victoria;`. The binary comes from
//! `KERF_VICTORIA_METRICS_BIN` or `PATH`.
#![allow(dead_code)] // each test binary uses a different part

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub fn victoria_metrics_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KERF_VICTORIA_METRICS_BIN") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("victoria-metrics"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "`victoria-metrics` not found on PATH and KERF_VICTORIA_METRICS_BIN is not set; \
                 install it with `scripts/test --setup-only` (or `apt-get install -y victoria-metrics`)"
            )
        })
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// OpenMetrics text → VictoriaMetrics import lines (`name{labels} value milliseconds`).
pub fn import_lines(openmetrics: &str) -> String {
    let parsed = kerf::metrics::openmetrics::parse(openmetrics)
        .unwrap_or_else(|e| panic!("test data is not valid OpenMetrics: {e:?}"));
    let mut out = String::new();
    for s in &parsed.series {
        let labels: Vec<String> = s
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
            .collect();
        for (ms, v) in &s.samples {
            out += &format!("{}{{{}}} {} {ms}\n", s.name, labels.join(","), number(*v));
        }
    }
    out
}

pub struct TestVictoriaMetrics {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

impl TestVictoriaMetrics {
    /// Starts VictoriaMetrics on a free loopback port and loads `text` (OpenMetrics).
    pub fn start_with_openmetrics(text: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut vm = Self {
            dir,
            port: 0,
            child: None,
        };
        for attempt in 1..=3 {
            vm.port = free_port();
            match vm.spawn() {
                Ok(()) => break,
                Err(e) if attempt == 3 => panic!("{e}"),
                Err(_) => {}
            }
        }
        let (status, body) = vm
            .request("POST", "/api/v1/import/prometheus", &import_lines(text))
            .expect("import");
        assert!(status / 100 == 2, "import refused: {status} {body}");
        let (status, body) = vm
            .request("GET", "/internal/force_flush", "")
            .expect("force_flush");
        assert_eq!(status, 200, "force_flush: {body}");
        vm
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join("victoria-metrics.log");
        let log = std::fs::File::create(&log_path).expect("create log");
        let child = Command::new(victoria_metrics_bin())
            .arg(format!(
                "-storageDataPath={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("-httpListenAddr=127.0.0.1:{}", self.port))
            .arg("-retentionPeriod=100y")
            // Backfilled data is queried at fixed past times: no "recent data" offset.
            .arg("-search.latencyOffset=0s")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start victoria-metrics ({}): {e}",
                    victoria_metrics_bin().display()
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!(
                    "victoria-metrics exited ({status}) before ready:\n{log}"
                ));
            }
            if matches!(self.request("GET", "/health", ""), Ok((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!(
                    "victoria-metrics not ready after {READY_TIMEOUT:?}:\n{log}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Plain blocking HTTP/1.0 request: (status, body).
    pub fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
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
}

impl Drop for TestVictoriaMetrics {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
