//! A real Prometheus for tests, loaded from OpenMetrics text with `promtool`, optionally behind
//! its own `--web.config.file` (TLS, client certificates, basic auth: [`WebConfig`]).
//!
//! Declared once in each test binary that uses it (`tests/<edge>/main.rs`) as `mod prometheus_support`.
//! Binaries come from `KERF_PROMETHEUS_BIN` / `KERF_PROMTOOL_BIN` or `PATH`. Backfilled data is fixed in time: query at explicit times around
//! [`EPOCH`], never "now".
#![allow(dead_code)] // each test binary uses a different part

#[path = "local_server.rs"]
pub mod local_server;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// 2026-01-01T00:00:00Z: the fixed origin of test data.
pub const EPOCH: i64 = 1_767_225_600;

/// Deterministic pseudo-random numbers for test data.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number in [0, 1).
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next number in [lo, hi).
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
}

pub struct TestPrometheus {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// Started with a web configuration: TLS and/or authentication.
    web: Option<WebConfig>,
    /// More command-line flags (e.g. `--query.max-samples=N`).
    args: Vec<String>,
}

/// Prometheus's `--web.config.file`: TLS, client certificates and basic auth, all native.
#[derive(Clone, Debug, Default)]
pub struct WebConfig {
    /// Serving certificate and key (PEM): Prometheus answers over HTTPS only.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Requires a client certificate signed by this CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
    /// Basic-auth users and their passwords (stored bcrypt-hashed).
    pub users: Vec<(String, String)>,
}

impl WebConfig {
    fn yaml(&self) -> String {
        let mut out = String::new();
        if let Some((cert, key)) = &self.tls {
            out += &format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
                cert.display(),
                key.display()
            );
            if let Some(ca) = &self.client_ca {
                out += &format!(
                    "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n",
                    ca.display()
                );
            }
        }
        if !self.users.is_empty() {
            out += "basic_auth_users:\n";
            for (user, password) in &self.users {
                out += &format!("  {user}: '{}'\n", bcrypt(password));
            }
        }
        out
    }
}

/// A bcrypt hash of `password` (cost 4, the least bcrypt allows: quick to check), as
/// Prometheus's `basic_auth_users` wants it.
pub fn bcrypt(password: &str) -> String {
    bcrypt::hash(password, 4).expect("bcrypt hashes any password")
}

pub fn promtool_bin() -> PathBuf {
    local_server::binary("KERF_PROMTOOL_BIN", "promtool", "prometheus")
}

pub fn prometheus_bin() -> PathBuf {
    local_server::binary("KERF_PROMETHEUS_BIN", "prometheus", "prometheus")
}

/// Runs `promtool tsdb create-blocks-from openmetrics FILE DIR`; Err(output) when it refuses.
pub fn promtool_load(file: &Path, data_dir: &Path) -> Result<(), String> {
    let out = Command::new(promtool_bin())
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(file)
        .arg(data_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run promtool ({}): {e}", promtool_bin().display()));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl TestPrometheus {
    /// Loads `text` (OpenMetrics, ending in `# EOF`) and starts Prometheus on a free loopback
    /// port; returns once `/-/ready` answers 200.
    pub fn start_with_openmetrics(text: &str) -> Self {
        Self::start(text, None, &[])
    }

    /// Like [`Self::start_with_openmetrics`], with more command-line flags, e.g.
    /// `--query.max-samples=N` (queries loading more samples are refused with HTTP 422).
    pub fn start_with_args(text: &str, args: &[&str]) -> Self {
        Self::start(text, None, args)
    }

    /// Like [`Self::start_with_openmetrics`], behind `web` (TLS, client certificates, basic
    /// auth); ready once Prometheus logs that it serves.
    pub fn start_secured(text: &str, web: &WebConfig) -> Self {
        Self::start(text, Some(web.clone()), &[])
    }

    /// An empty Prometheus scraping `targets` (`host:port`, each with its target labels, e.g.
    /// `namespace`) at `/metrics` every second, as a ServiceMonitor's scrape would.
    pub fn start_scraping(targets: &[(String, &[(&str, &str)])]) -> Self {
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: kerf\n    static_configs:\n",
        );
        for (target, labels) in targets {
            config += &format!("      - targets: ['{target}']\n        labels:\n");
            for (k, v) in labels.iter() {
                config += &format!("          {k}: '{v}'\n");
            }
        }
        Self::start_with_config("# EOF\n", &config, None, &[])
    }

    fn start(text: &str, web: Option<WebConfig>, args: &[&str]) -> Self {
        let config = "global:\n  scrape_interval: 1h\nscrape_configs: []\n";
        Self::start_with_config(text, config, web, args)
    }

    fn start_with_config(text: &str, config: &str, web: Option<WebConfig>, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("data.om");
        std::fs::write(&file, text).expect("write OpenMetrics file");
        let data = dir.path().join("data");
        if text != "# EOF\n"
            && let Err(out) = promtool_load(&file, &data)
        {
            panic!("promtool refused the test data:\n{out}");
        }
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("write config");
        if let Some(web) = &web {
            std::fs::write(dir.path().join("web.yml"), web.yaml()).expect("write web config");
        }
        let mut p = Self {
            dir,
            port: 0,
            child: None,
            web,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        // The port is free when picked but could be taken before Prometheus binds it.
        for attempt in 1..=3 {
            p.port = local_server::free_port();
            match p.spawn() {
                Ok(()) => return p,
                Err(e) if attempt == 3 => panic!("{e}"),
                Err(_) => {}
            }
        }
        unreachable!()
    }

    /// Base URL, e.g. `http://127.0.0.1:40123` (`https://` behind TLS).
    pub fn url(&self) -> String {
        let scheme = match self.web.as_ref().and_then(|w| w.tls.as_ref()) {
            Some(_) => "https",
            None => "http",
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills Prometheus; the port then refuses connections. Data stays for [`Self::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops (if running) and starts again on the same port with the same data.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.spawn() {
            panic!("{e}");
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join("prometheus.log");
        let log = std::fs::File::create(&log_path).expect("create log");
        let mut command = Command::new(prometheus_bin());
        if self.web.is_some() {
            command.arg(format!(
                "--web.config.file={}",
                self.dir.path().join("web.yml").display()
            ));
        }
        let child = command
            .arg(format!(
                "--config.file={}",
                self.dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.path().join("data").display()
            ))
            .arg("--storage.tsdb.retention.time=100y")
            .args(&self.args)
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start prometheus ({}): {e}",
                    prometheus_bin().display()
                )
            });
        self.child = Some(child);
        let (web, port) = (self.web.is_some(), self.port);
        local_server::wait_ready(&mut self.child, &log_path, "prometheus", || {
            if web {
                // `/-/ready` is behind TLS and authentication too: the log says it instead.
                std::fs::read_to_string(&log_path)
                    .is_ok_and(|l| l.contains("Server is ready to receive web requests"))
            } else {
                matches!(
                    local_server::http(port, "GET", "/-/ready", ""),
                    Ok((200, _))
                )
            }
        })
    }

    /// Plain blocking HTTP GET against this Prometheus: (status, body).
    pub fn get(&self, path_and_query: &str) -> std::io::Result<(u16, String)> {
        local_server::http(self.port, "GET", path_and_query, "")
    }

    /// Requests Prometheus has served on `handler` (e.g. `/api/v1/query_range`), all codes.
    pub fn requests_served(&self, handler: &str) -> u64 {
        let (_, body) = self.get("/metrics").expect("GET /metrics");
        let needle = format!("handler=\"{handler}\"");
        body.lines()
            .filter(|l| l.starts_with("prometheus_http_requests_total{") && l.contains(&needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Major version from `/api/v1/status/buildinfo` (evaluation boundaries changed in 3).
    pub fn major_version(&self) -> u32 {
        let (_, body) = self.get("/api/v1/status/buildinfo").expect("GET buildinfo");
        let v: serde_json::Value = serde_json::from_str(&body).expect("buildinfo JSON");
        v["data"]["version"]
            .as_str()
            .and_then(|s| s.split('.').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no version in buildinfo: {body}"))
    }

    /// The [`kerf::metrics::file::Semantics`] that reproduce this Prometheus.
    pub fn file_semantics(&self) -> kerf::metrics::file::Semantics {
        if self.major_version() >= 3 {
            kerf::metrics::file::Semantics::Prometheus3
        } else {
            kerf::metrics::file::Semantics::Prometheus2
        }
    }
}

impl Drop for TestPrometheus {
    fn drop(&mut self) {
        self.stop();
    }
}
