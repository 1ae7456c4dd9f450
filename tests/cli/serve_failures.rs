//! `kerf serve` says what is wrong: a required task that stops (no kube configuration, caches
//! that cannot sync, the standalone loop ending, a panic) is logged with its cause chain, fails
//! `/healthz` and `/readyz`, and makes the process exit 1 after shutting the listeners down;
//! meanwhile `/readyz` names what it waits for and each dependency's last error.

use crate::apiserver;
use crate::support;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiserver::{Answer, MockApiServer, Seen};
use kerf::server::{BoundServer, ServeConfig};
use kerf::state::Store;
use serde_json::json;
use support::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `kerf serve` whose stderr is collected as it comes.
struct Kerf {
    child: Child,
    stderr: Arc<Mutex<String>>,
    drain: Option<std::thread::JoinHandle<()>>,
    health: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Kerf {
    /// `kerf serve` with a fresh certificate, loopback listeners, and an environment with no
    /// kube configuration: no KUBECONFIG, no KUBERNETES_SERVICE_HOST, HOME an empty directory,
    /// no KERF_* variable from the caller. `configure` adds the test's flags and variables.
    fn serve(configure: impl FnOnce(&mut Command, &Path)) -> Kerf {
        install_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), &Pki::new().leaf("kerf"));
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let health: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kerf"));
        cmd.arg("serve")
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--health-listen")
            .arg(health.to_string())
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("KERF_") {
                cmd.env_remove(k);
            }
        }
        cmd.env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env_remove("RUST_LOG")
            .env("HOME", &home)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        configure(&mut cmd, dir.path());
        let mut child = cmd.spawn().expect("kerf binary starts");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let drain = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Kerf {
            child,
            stderr,
            drain: Some(drain),
            health,
            _dir: dir,
        }
    }

    /// Waits for the process to exit (at most `secs`), then for the rest of its stderr.
    async fn exit(&mut self, secs: u64) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "kerf did not exit within {secs}s; stderr so far:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if let Some(d) = self.drain.take() {
            d.join().unwrap();
        }
        (status, self.stderr())
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Polls `path` on the health listener until `done(status, body)` (at most `secs`).
    async fn poll(
        &self,
        path: &str,
        secs: u64,
        mut done: impl FnMut(u16, &str) -> bool,
    ) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        loop {
            if let Ok(r) = reqwest::get(format!("http://{}{path}", self.health)).await {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                if done(status, &body) {
                    return (status, body);
                }
                last = Some((status, body));
            }
            assert!(
                Instant::now() < deadline,
                "{path} never answered as expected; last answer {last:?}; stderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Kerf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines_with<'a>(stderr: &'a str, parts: &[&str]) -> Vec<&'a str> {
    stderr
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .collect()
}

/// Index of the first line containing `part` (panics with the whole stderr if none).
fn line_no(stderr: &str, part: &str) -> usize {
    stderr
        .lines()
        .position(|l| l.contains(part))
        .unwrap_or_else(|| panic!("no line with {part:?} in:\n{stderr}"))
}

const NO_CONFIG: &str = "reconciler stopped: no Kubernetes client configuration: in-cluster \
    mode needs the pod's service account (KUBERNETES_SERVICE_HOST and \
    /var/run/secrets/kubernetes.io/serviceaccount/) or a kubeconfig (KUBECONFIG, or \
    ~/.kube/config); without a cluster use --standalone: Failed to infer configuration: failed \
    to infer config: in-cluster: (failed to read an incluster environment variable: environment \
    variable not found), kubeconfig: (failed to read kubeconfig from";

#[tokio::test]
async fn serve_without_kube_configuration_exits_1_and_says_why() {
    let mut termination_log = PathBuf::new();
    let mut kerf = Kerf::serve(|cmd, dir| {
        termination_log = dir.join("termination-log");
        std::fs::write(&termination_log, "").unwrap();
        cmd.env("KERF_TERMINATION_LOG", &termination_log);
    });
    let (status, stderr) = kerf.exit(30).await;
    assert_eq!(status.code(), Some(1), "{stderr}");

    // Logged with the whole cause chain: what is missing, where kerf looked, what to do.
    let logged = lines_with(&stderr, &[" ERROR kerf::cli::serve: ", NO_CONFIG]);
    assert_eq!(logged.len(), 1, "{stderr}");
    let home = kerf._dir.path().join("home/.kube/config");
    assert!(
        logged[0].ends_with(&format!(
            "{}\"': No such file or directory (os error 2)); shutting down the webhook listener \
             and exiting",
            home.display()
        )),
        "{}",
        logged[0]
    );
    // …after the listeners came up, and before they were shut down gracefully.
    assert!(line_no(&stderr, "kerf serving") < line_no(&stderr, NO_CONFIG));
    assert!(line_no(&stderr, NO_CONFIG) < line_no(&stderr, "shutdown complete"));
    // The last line is the exit reason, and the termination message says the same.
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with(&format!("error: {NO_CONFIG}")), "{last}");
    assert_eq!(
        std::fs::read_to_string(&termination_log).unwrap(),
        last.strip_prefix("error: ").unwrap()
    );
}

const TOKEN: &str = "kerf-test-token-5ecret";
const PODS_FORBIDDEN: &str = r#"pods is forbidden: User "system:serviceaccount:kerf-system:kerf" cannot list resource "pods" in API group "" at the cluster scope"#;

fn pods_forbidden() -> String {
    format!(
        "list failed: 403 Forbidden: {PODS_FORBIDDEN} (kerf's ClusterRole must allow get, list \
         and watch on pods: manifests/install/rbac.yaml)"
    )
}

const CRD_MISSING: &str = "list failed: HTTP 404: 404 page not found (the \
    CustomResourceDefinition gpureactivepolicies.rightsizing.kubex.ai is not installed: \
    kubectl apply -f manifests/crds/)";

/// A cluster where every list is empty and every watch stays open, except that listing pods
/// is forbidden and kerf's GpuReactivePolicy CRD is not installed.
fn forbidden_pods_and_a_missing_crd(r: &Seen) -> Answer {
    if r.is_watch() {
        return Answer::Hang;
    }
    match (r.method, r.path) {
        ("GET", "/api/v1/pods") => Answer::Json(
            403,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": PODS_FORBIDDEN, "reason": "Forbidden",
                   "details": {"kind": "pods"}, "code": 403}),
        ),
        ("GET", "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies") => {
            Answer::Text(404, "404 page not found")
        }
        ("GET", p) if p.contains("/leases/") => Answer::Json(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "leases.coordination.k8s.io \"kerf-writer\" not found",
                   "reason": "NotFound", "code": 404}),
        ),
        ("POST", p) if p.contains("/leases") => {
            let mut lease = r.body.clone();
            lease["metadata"]["resourceVersion"] = json!("1");
            Answer::Json(201, lease)
        }
        _ => Answer::Json(
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
        ),
    }
}

fn watch_errors(metrics: &str, resource: &str, reason: &str) -> u64 {
    let prefix = format!(r#"kerf_watch_errors_total{{resource="{resource}",reason="{reason}"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_forbidden_watch_and_a_missing_crd_are_shown_then_kerf_exits_1_after_the_sync_timeout() {
    let api = MockApiServer::start(forbidden_pods_and_a_missing_crd).await;
    let mut kerf = Kerf::serve(|cmd, dir| {
        cmd.env("KUBECONFIG", api.kubeconfig(dir, TOKEN))
            .env("KERF_CACHE_SYNC_TIMEOUT_SECONDS", "8")
            // As in manifests/install/deployment.yaml.
            .env("RUST_LOG", "info");
    });

    // /readyz names the caches it waits for and why each one fails.
    let (status, body) = kerf
        .poll("/readyz", 8, |_, b| {
            // Every other cache synced by then (under load some take a moment longer).
            b.contains("  Pod (")
                && b.contains("  GpuReactivePolicy (")
                && b.contains("caches not synced (2 of 30)")
        })
        .await;
    assert_eq!(status, 503, "{body}");
    let (head, errors) = body.split_once("last errors:\n").expect(&body);
    assert_eq!(
        head,
        "not ready: waiting for the caches to sync\n\
         caches not synced (2 of 30): GpuReactivePolicy, Pod\n\
         annotations read back: not yet (they are read once every cache has synced)\n"
    );
    let errors: Vec<(&str, &str)> = errors
        .lines()
        .map(|l| {
            let (dependency, message) = l.split_once("): ").expect(l);
            (dependency.split(" (").next().unwrap().trim(), message)
        })
        .collect();
    assert_eq!(
        errors,
        [
            ("GpuReactivePolicy", CRD_MISSING),
            ("Pod", pods_forbidden().as_str())
        ]
    );
    // Alive while it waits: the kubelet must not restart it for a slow start.
    assert_eq!(
        get_text(kerf.health, "/healthz").await,
        (200, "ok\n".to_string())
    );
    // Every refusal is counted (the first list and the watcher's retries)…
    kerf.poll("/metrics", 8, |_, m| {
        watch_errors(m, "Pod", "forbidden") >= 2
            && watch_errors(m, "GpuReactivePolicy", "crd_missing") >= 2
    })
    .await;

    // …then kerf gives up, says why and exits 1.
    let (status, stderr) = kerf.exit(30).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    // …while each error was logged once at warn (rate-limited), with the resource.
    let warned = lines_with(&stderr, &[" WARN kerf::sources::kube::watch_errors: Pod: "]);
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(
        warned[0].ends_with(&format!(
            "Pod: {}; retrying resource=Pod reason=forbidden",
            pods_forbidden()
        )),
        "{}",
        warned[0]
    );
    let warned = lines_with(
        &stderr,
        &[" WARN kerf::sources::kube::watch_errors: GpuReactivePolicy: "],
    );
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(
        warned[0].ends_with(&format!(
            "GpuReactivePolicy: {CRD_MISSING}; retrying resource=GpuReactivePolicy reason=crd_missing"
        )),
        "{}",
        warned[0]
    );
    assert_eq!(
        lines_with(&stderr, &["kube_runtime::watcher"]),
        Vec::<&str>::new(),
        "kube's own unlimited warning on every retry is left out"
    );
    let why = format!(
        "reconciler stopped: the caches did not sync within 8s; still failing: GpuReactivePolicy: \
         {CRD_MISSING}; Pod: {}",
        pods_forbidden()
    );
    let logged = lines_with(&stderr, &[" ERROR kerf::cli::serve: "]);
    assert_eq!(logged.len(), 1, "{stderr}");
    assert!(
        logged[0].ends_with(&format!(
            "{why}; shutting down the webhook listener and exiting"
        )),
        "{}",
        logged[0]
    );
    assert!(line_no(&stderr, &why) < line_no(&stderr, "shutdown complete"));
    assert_eq!(stderr.lines().last().unwrap(), format!("error: {why}"));
    assert!(!stderr.contains(TOKEN), "the token never reaches the log");
    assert!(!body.contains(TOKEN));
}

#[tokio::test]
async fn standalone_readyz_names_the_manifest_error_and_sigterm_still_exits_0() {
    let kerf = Kerf::serve(|cmd, dir| {
        cmd.args(["--standalone", "--metrics", "examples/metrics.om"])
            .arg("--manifests")
            .arg(dir.join("not-there"));
    });
    let (status, body) = kerf
        .poll("/readyz", 20, |_, b| b.contains("manifests ("))
        .await;
    assert_eq!(status, 503);
    let dir = kerf._dir.path().join("not-there");
    let (head, error) = body.split_once("last errors:\n  manifests (").expect(&body);
    assert_eq!(
        head,
        format!(
            "not ready: waiting for the first cycle over the manifests in {}\n",
            dir.display()
        )
    );
    assert!(
        error.ends_with(&format!(
            " ago): reading directory {}: No such file or directory (os error 2)\n",
            dir.display()
        )),
        "{error}"
    );
    // Retried, not fatal: alive, and a SIGTERM is still a clean exit.
    assert_eq!(
        get_text(kerf.health, "/healthz").await,
        (200, "ok\n".to_string())
    );
    let mut kerf = kerf;
    let st = Command::new("kill")
        .args(["-TERM", &kerf.child.id().to_string()])
        .status()
        .expect("run `kill` (Debian package procps; `scripts/test --setup-only` installs it)");
    assert!(st.success());
    let (status, stderr) = kerf.exit(30).await;
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[tokio::test]
async fn ready_standalone_still_names_a_failing_prometheus() {
    let port = free_port(); // nothing listens there
    let kerf = Kerf::serve(|cmd, _| {
        cmd.args(["--standalone", "--manifests", "examples/manifests"])
            .args(["--at", "2026-01-01T12:00:00Z"])
            .arg("--prometheus")
            .arg(format!("http://kerf:s3cret@127.0.0.1:{port}"));
    });
    // The first cycle ran (failed queries keep the last recommendations): ready, and the
    // failure is there for whoever looks (after the usage history's line).
    let (status, body) = kerf.poll("/readyz", 20, |s, _| s == 200).await;
    let error = body
        .strip_prefix("ready\nusage history: 0 workloads kept\nlast errors:\n  prometheus (")
        .expect(&body);
    assert!(
        error.contains("s ago): GpuReactivePolicy/ml/gpu-reactive ")
            && error.contains(" query failed: metric source unavailable: ")
            && error.contains(&format!("http://127.0.0.1:{port}/api/v1/")),
        "{body}"
    );
    assert_eq!(status, 200);
    assert!(!body.contains("s3cret"), "{body}");
}

#[tokio::test]
async fn standalone_exits_1_when_its_loop_stops() {
    let mut kerf = Kerf::serve(|cmd, dir| {
        cmd.args(["--standalone", "--manifests", "examples/manifests"])
            .arg("--metrics")
            .arg(dir.join("missing.om"));
    });
    let (status, stderr) = kerf.exit(30).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    let missing = kerf._dir.path().join("missing.om");
    let why = "standalone loop stopped: the metric source: ";
    let logged = lines_with(&stderr, &[" ERROR kerf::cli::serve: ", why]);
    assert_eq!(logged.len(), 1, "{stderr}");
    assert!(
        logged[0].contains(&missing.display().to_string()),
        "{}",
        logged[0]
    );
    assert!(
        logged[0].ends_with("; shutting down the webhook listener and exiting"),
        "{}",
        logged[0]
    );
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with(&format!("error: {why}")), "{last}");
}

async fn bound() -> (BoundServer, tempfile::TempDir) {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_pair(dir.path(), &Pki::new().leaf("kerf"));
    let config = ServeConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        cert,
        key,
    );
    (BoundServer::bind(config).await.unwrap(), dir)
}

#[tokio::test]
async fn a_panicking_task_stops_the_server_with_the_panic_message() {
    let (server, _dir) = bound().await;
    let store = Store::new();
    let result = kerf::cli::serve::serve_supervised(
        server,
        store.clone(),
        "standalone loop",
        async { panic!("the manifests index is corrupt") },
        std::future::pending(),
    )
    .await;
    let why = "standalone loop stopped: panicked: the manifests index is corrupt";
    assert_eq!(result.unwrap_err().to_string(), why);
    assert_eq!(
        store.health().liveness(),
        (false, format!("unhealthy: {why}\n"))
    );
}

#[tokio::test]
async fn a_task_that_returns_stops_the_server_with_its_cause_chain() {
    use anyhow::Context;
    let (server, _dir) = bound().await;
    let store = Store::new();
    let result = kerf::cli::serve::serve_supervised(
        server,
        store.clone(),
        "reconciler",
        async {
            Err::<(), _>(anyhow::anyhow!("connection refused")).context("the writer task stopped")
        },
        std::future::pending(),
    )
    .await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "reconciler stopped: the writer task stopped: connection refused"
    );
    // A task that ends without an error is a failure too: it must run until shutdown.
    let (server, _dir) = bound().await;
    let result = kerf::cli::serve::serve_supervised(
        server,
        Store::new(),
        "reconciler",
        async { Ok(()) },
        std::future::pending(),
    )
    .await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "reconciler stopped: it ended, and it must run until kerf shuts down"
    );
}

#[tokio::test]
async fn shutdown_first_is_a_clean_exit_and_stops_the_task() {
    let (server, _dir) = bound().await;
    let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
    let result = kerf::cli::serve::serve_supervised(
        server,
        Store::new(),
        "reconciler",
        async move {
            let _dropped = dropped_tx; // dropped when the task is aborted
            std::future::pending::<anyhow::Result<()>>().await
        },
        async {},
    )
    .await;
    assert!(result.is_ok(), "{result:?}");
    tokio::time::timeout(Duration::from_secs(10), dropped_rx)
        .await
        .expect("the task is aborted at shutdown")
        .unwrap_err();
}
