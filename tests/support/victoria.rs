//! A real VictoriaMetrics for tests (Debian package `victoria-metrics`), loaded with the same
//! OpenMetrics text as [`super::prometheus_support::TestPrometheus`]: the text is read with kerf's
//! own parser (which derives milliseconds exactly as promtool does) and POSTed to
//! `/api/v1/import/prometheus` as Prometheus text lines with millisecond timestamps, then
//! `/internal/force_flush` makes it queryable.
//!
//! Declared once in each test binary that uses it (`tests/<edge>/main.rs`) as `mod victoria`
//! next to `prometheus_support` (whose `local_server` it uses). The binary comes from `KERF_VICTORIA_METRICS_BIN` or `PATH`.
#![allow(dead_code)] // each test binary uses a different part

use super::prometheus_support::local_server;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub fn victoria_metrics_bin() -> PathBuf {
    local_server::binary(
        "KERF_VICTORIA_METRICS_BIN",
        "victoria-metrics",
        "victoria-metrics",
    )
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
            vm.port = local_server::free_port();
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
        let port = self.port;
        local_server::wait_ready(&mut self.child, &log_path, "victoria-metrics", || {
            matches!(local_server::http(port, "GET", "/health", ""), Ok((200, _)))
        })
    }

    /// Plain blocking HTTP/1.0 request: (status, body).
    pub fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        local_server::http(self.port, method, path, body)
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
