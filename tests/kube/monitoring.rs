//! kerf's alerts and dashboard (`manifests/monitoring`) on series a real kerf exposed.
//!
//! The series come from kerf's own `/metrics`: a `kerf serve --standalone` (webhook reviews,
//! cycles over a real Prometheus, its serving certificate) and, for what only the Lease holder's
//! writer does (evictions, in-place resizes, the Lease), kerf's writer and Lease driven against
//! the mock API server with their registry served by kerf's own health router.
//!
//! - Alerts: each scenario's `/metrics` is scraped a few dozen times, each scrape becoming one
//!   2-minute step of `promtool test rules`' `input_series` (the time axis compressed, the values
//!   as scraped; a `*_timestamp_seconds` value moves with its scrape onto the test's time axis),
//!   with the target labels a ServiceMonitor's scrape adds. Every alert has a case where it
//!   fires and one where it stays silent.
//! - Dashboard: a real Prometheus scrapes the running kerf every second while it serves reviews,
//!   runs cycles (a few of them while its Prometheus is down) and writes; then every panel's query
//!   must parse and return data.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kerf::telemetry::Metrics;
use kerf::writers::kube::{Lease, LeaseConfig};
use serde_json::{Value, json};

use crate::kerf_cli::{AT, root};
use crate::kube_resize::{evict_op, resize_op, writer};
use crate::kube_support::{self, Recorded, Reply, mock};
use crate::prometheus_support::{TestPrometheus, promtool_bin};
use crate::support::{self, Serve, client, fixture, review};

/// One `promtool` step per scrape.
const STEP_MINUTES: usize = 2;
/// Scrapes per scenario: 80 minutes of test time, longer than every alert's window and `for`.
const SCRAPES: usize = 40;
/// The target labels a ServiceMonitor's scrape adds (the alerts sum by namespace).
const TARGET: &str = r#"job="kerf",namespace="kerf-system""#;

/// One scrape: each series (name and labels as exposed) and its value, and when.
struct Scrape {
    at: f64,
    samples: Vec<(String, f64)>,
}

/// kerf's `/metrics` at `health`, in the Prometheus text format.
async fn scrape(health: SocketAddr) -> Scrape {
    let text = reqwest::Client::new()
        .get(format!("http://{health}/metrics"))
        .header("accept", "text/plain")
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .unwrap();
    let at = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    let samples = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            (series.to_string(), value.parse().expect("a number"))
        })
        .collect();
    Scrape { at, samples }
}

/// The scrapes of one scenario, named for the test cases.
struct Recording {
    name: &'static str,
    scrapes: Vec<Scrape>,
}

/// `series` with the scrape's target labels added.
fn with_target(series: &str) -> String {
    match series.split_once('{') {
        Some((name, rest)) => format!("{name}{{{TARGET},{rest}"),
        None => format!("{series}{{{TARGET}}}"),
    }
}

/// promtool's `input_series`: every series of the recording, a value per step (`_` where a
/// scrape did not have it yet).
fn input_series(rec: &Recording) -> Vec<Value> {
    let mut series: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for (i, s) in rec.scrapes.iter().enumerate() {
        for (name, value) in &s.samples {
            // A point in time moves with its scrape onto the test's time axis.
            let value = if name
                .split('{')
                .next()
                .unwrap()
                .ends_with("_timestamp_seconds")
            {
                value - s.at + (i * STEP_MINUTES * 60) as f64
            } else {
                *value
            };
            series
                .entry(with_target(name))
                .or_insert_with(|| vec![None; rec.scrapes.len()])[i] = Some(value);
        }
    }
    series
        .into_iter()
        .map(|(name, values)| {
            let values: Vec<String> = values
                .iter()
                .map(|v| v.map_or("_".to_string(), |v| format!("{v}")))
                .collect();
            json!({"series": name, "values": values.join(" ")})
        })
        .collect()
}

/// The alerts of `kerf-alerts.yaml` as a plain rule file (the PrometheusRule's `spec`), and
/// each alert's rule.
fn alert_rules() -> (Value, BTreeMap<String, Value>) {
    let text =
        std::fs::read_to_string(root().join("manifests/monitoring/kerf-alerts.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).expect("kerf-alerts.yaml");
    let spec = rule["spec"].clone();
    let alerts = spec["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| (r["alert"].as_str().unwrap().to_string(), r.clone()))
        .collect();
    (spec, alerts)
}

/// One promtool test case: `alert` at the last step of `rec`, firing or not.
fn case(rec: &Recording, alert: &str, rule: &Value, fires: bool) -> Value {
    let expected = if fires {
        let mut labels = rule["labels"].clone();
        labels["namespace"] = json!("kerf-system");
        json!([{"exp_labels": labels, "exp_annotations": rule["annotations"]}])
    } else {
        json!([])
    };
    json!({
        "name": format!("{alert} {} on {}", if fires { "fires" } else { "is silent" }, rec.name),
        "interval": format!("{STEP_MINUTES}m"),
        "input_series": input_series(rec),
        "alert_rule_test": [{
            "eval_time": format!("{}m", (rec.scrapes.len() - 1) * STEP_MINUTES),
            "alertname": alert,
            "exp_alerts": expected,
        }],
    })
}

/// Runs `promtool`; its output when it fails.
fn promtool(args: &[&str], dir: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new(promtool_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool runs (`scripts/test --setup-only` installs it)");
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// The HPA example's source: a real Prometheus with its history.
fn source_prometheus() -> TestPrometheus {
    let text = std::fs::read_to_string(root().join("examples/hpa/metrics.om")).unwrap();
    TestPrometheus::start_with_openmetrics(&text)
}

/// `kerf serve --standalone` on the HPA example with its history in `prometheus`, a cycle every
/// `interval` seconds, its certificate valid for `cert_days`.
async fn serve(prometheus: &TestPrometheus, interval: &str, cert_days: i64) -> Serve {
    let url = prometheus.url();
    let args = [
        "--manifests",
        "examples/hpa/manifests",
        "--at",
        AT,
        "--prometheus",
        &url,
        "--interval-seconds",
        interval,
    ];
    support::serve_standalone(&args, &[], Some(cert_days)).await
}

/// One admission review as the API server sends it (a pod of the example's Deployment: patched),
/// and a body kerf cannot read when `bad`.
async fn send_review(c: &reqwest::Client, s: &Serve, bad: bool) {
    if bad {
        let status = c
            .post(support::url(s.webhook, "/mutate"))
            .header("content-type", "application/json")
            .body("{\"kind\": \"AdmissionReview\", \"request\": 7}")
            .send()
            .await
            .expect("request")
            .status();
        assert_eq!(status, 400);
    } else {
        review(c, s.webhook, &fixture("pod-web.json")).await;
    }
}

/// Reviews answered in more than 0.8192 s (a bucket's bound) so far, from a scrape.
fn slower_than_0_8_s(scrape: &Scrape) -> f64 {
    let count = |le: &str| {
        scrape
            .samples
            .iter()
            .find(|(n, _)| n == &format!("kerf_admission_duration_seconds_bucket{{le=\"{le}\"}}"))
            .map_or(0.0, |(_, v)| *v)
    };
    count("+Inf") - count("0.8192")
}

/// `kill -SIG pid`.
fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// A kerf starved of CPU, as a CPU limit's throttling starves it: while a burst of big reviews
/// (2.5 MB of annotations each, the API server sends up to 3 MiB) is being decided, the process
/// is stopped for a second. Each step repeats until a review it started was answered in more than
/// 0.8 s (the stop landed while reviews were being decided), then is scraped.
async fn record_starved(name: &'static str, s: &Serve, steps: usize) -> Recording {
    let mut body = fixture("pod-web.json");
    body["request"]["object"]["metadata"]["annotations"]["example.com/blob"] =
        json!("x".repeat(2_500_000));
    let body = Arc::new(serde_json::to_vec(&body).unwrap());
    let c = client(&s.pki.ca_pem(), s.webhook, true);
    let pid = s.child.id();
    let mut scrapes = Vec::new();
    let mut slow = slower_than_0_8_s(&scrape(s.health).await);
    for _ in 0..steps {
        for attempt in 1.. {
            assert!(
                attempt <= 40,
                "no stop of kerf landed while it decided reviews"
            );
            // Where in the burst the stop lands varies from attempt to attempt: on a loaded
            // machine the bodies take longer to arrive.
            let lead = Duration::from_millis([250, 100, 500, 800, 1200][attempt % 5]);
            let sent: Vec<_> = (0..8)
                .map(|_| {
                    let (c, body, url) =
                        (c.clone(), body.clone(), support::url(s.webhook, "/mutate"));
                    tokio::spawn(async move {
                        let r = c
                            .post(url)
                            .header("content-type", "application/json")
                            .body((*body).clone())
                            .send()
                            .await
                            .expect("request");
                        assert_eq!(r.status(), 200);
                    })
                })
                .collect();
            tokio::time::sleep(lead).await;
            signal(pid, "-STOP");
            tokio::time::sleep(Duration::from_secs(1)).await;
            signal(pid, "-CONT");
            for r in sent {
                r.await.unwrap();
            }
            let now = slower_than_0_8_s(&scrape(s.health).await);
            if now > slow {
                slow = now;
                break;
            }
        }
        scrapes.push(scrape(s.health).await);
    }
    Recording { name, scrapes }
}

/// What is sent to kerf before each scrape.
#[derive(Clone, Copy, Default)]
struct Traffic {
    reviews: usize,
    bad: usize,
}

/// `SCRAPES` scrapes of `s`, `pause` apart, `traffic` before each.
async fn record_serve(
    name: &'static str,
    s: &Serve,
    pause: Duration,
    traffic: Traffic,
) -> Recording {
    let c = client(&s.pki.ca_pem(), s.webhook, false);
    let mut scrapes = Vec::new();
    for _ in 0..SCRAPES {
        for _ in 0..traffic.reviews {
            send_review(&c, s, false).await;
        }
        for _ in 0..traffic.bad {
            send_review(&c, s, true).await;
        }
        tokio::time::sleep(pause).await;
        scrapes.push(scrape(s.health).await);
    }
    Recording { name, scrapes }
}

/// kerf's health router (its own `/metrics`) over `metrics`, on a loopback port.
async fn serve_registry(metrics: Arc<Metrics>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = kerf::server::health_router(kerf::state::Store::with_metrics(metrics));
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// The mock API server's answers for the writer scenarios: evictions refused by a disruption
/// budget or accepted, resizes refused or accepted, the Lease created or forbidden.
fn cluster(evictions_refused: bool, resizes_refused: bool, lease_forbidden: bool) -> kube::Client {
    let (client, _log) = mock(move |r: &Recorded| {
        if r.path.ends_with("/eviction") {
            return match evictions_refused {
                true => Reply::Json(
                    429,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                           "reason": "TooManyRequests", "code": 429}),
                ),
                false => Reply::Json(
                    201,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
                ),
            };
        }
        if r.path.ends_with("/resize") && resizes_refused {
            return kube_support::status(422, "Invalid");
        }
        if r.path.contains("/leases") {
            return match (r.method.as_str(), lease_forbidden) {
                ("GET", _) => kube_support::status(404, "NotFound"),
                (_, true) => kube_support::status(403, "Forbidden"),
                (_, false) => Reply::Json(201, r.body.clone()),
            };
        }
        if r.path.ends_with("/status") {
            let mut rec = json!({"apiVersion": "rightsizing.kubex.ai/v1alpha1",
                "kind": "RightsizingRecommendation",
                "metadata": {"name": "deployment-web", "namespace": "shop"},
                "spec": {"workload": {"kind": "Deployment", "name": "web"}}});
            rec["status"] = r.body["status"].clone();
            return Reply::Json(200, rec);
        }
        Reply::Json(200, r.body.clone())
    });
    client
}

/// The Lease holder's writer and Lease against `cluster`, its registry served by kerf's health
/// router; `turn` applies one eviction and one resize.
struct WriterSide {
    health: SocketAddr,
    writer: kerf::writers::kube::WriterHandle,
    _lease: tokio::sync::watch::Receiver<bool>,
    _gate: tokio::sync::watch::Sender<bool>,
}

impl WriterSide {
    async fn start(client: kube::Client) -> Self {
        let metrics = Metrics::new();
        let lease_cfg = LeaseConfig {
            name: "kerf-writer".into(),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_millis(50),
            metrics: metrics.clone(),
            health: None,
        };
        let lease = Lease::new(client.clone(), "kerf-system", "kerf-0", lease_cfg).run();
        let (writer, gate) = writer(client, metrics.clone());
        let health = serve_registry(metrics.clone()).await;
        Self {
            health,
            writer,
            _lease: lease,
            _gate: gate,
        }
    }

    async fn turn(&self, i: usize) {
        let _ = self
            .writer
            .apply(evict_op(&format!("llm-predictor-{i}")))
            .await;
        let _ = self.writer.apply(resize_op(&["web-1"])).await;
    }

    async fn record(&self, name: &'static str) -> Recording {
        let mut scrapes = Vec::new();
        for i in 0..SCRAPES {
            self.turn(i).await;
            scrapes.push(scrape(self.health).await);
        }
        Recording { name, scrapes }
    }
}

/// Every alert of `kerf-alerts.yaml` fires on the series of a kerf in the trouble it names and
/// stays silent on a healthy kerf's, under `promtool test rules`; `promtool check rules` accepts
/// the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_alert_fires_and_stays_silent_on_series_kerf_exposed() {
    let (spec, rules) = alert_rules();
    let prometheus = source_prometheus();
    let mut down = source_prometheus();
    // Started one after another (each waits until ready), recorded at the same time.
    let healthy_kerf = serve(&prometheus, "1", 30).await;
    let stalled_kerf = serve(&prometheus, "3600", 30).await;
    let failing_kerf = serve(&down, "1", 3).await;
    down.stop();
    let writing = WriterSide::start(cluster(false, false, false)).await;
    let refused = WriterSide::start(cluster(true, true, true)).await;
    let pause = Duration::from_millis(500);
    let one = |reviews, bad| Traffic { reviews, bad };
    let (healthy, stalled, failing, writing, refused) = tokio::join!(
        // Reviews answered, a cycle a second over a Prometheus that answers, a certificate for
        // 30 days.
        record_serve("a healthy kerf", &healthy_kerf, pause, one(2, 0)),
        // One cycle at start, the next in an hour.
        record_serve("a kerf whose cycles stall", &stalled_kerf, pause, one(1, 0)),
        // Its Prometheus gone, half the reviews unreadable, a certificate for 3 days.
        record_serve("a kerf in trouble", &failing_kerf, pause, one(1, 1)),
        writing.record("a Lease holder whose writes go through"),
        refused.record("a writer the cluster refuses"),
    );
    drop((healthy_kerf, stalled_kerf, failing_kerf));
    // Stopped for a second now and then (5-minute window, 10 minutes `for`, and a margin); alone,
    // so that its big reviews take no CPU from the healthy kerf's.
    let starved = serve(&prometheus, "1", 30).await;
    let starved = record_starved("a kerf starved of CPU", &starved, 12).await;

    // Each alert: where it fires, where it is silent.
    let cases: [(&str, &Recording, &Recording); 10] = [
        ("KerfWebhookErrors", &failing, &healthy),
        ("KerfWebhookSlow", &starved, &healthy),
        ("KerfServingCertificateExpiring", &failing, &healthy),
        ("KerfCyclesFailing", &failing, &healthy),
        ("KerfCyclesStalled", &stalled, &healthy),
        ("KerfPrometheusUnreachable", &failing, &healthy),
        ("KerfRecommendationsStale", &failing, &healthy),
        ("KerfNoLeaseHolder", &refused, &writing),
        ("KerfEvictionsRefused", &refused, &writing),
        ("KerfResizesRefused", &refused, &writing),
    ];
    let tested: Vec<&str> = cases.iter().map(|c| c.0).collect();
    assert_eq!(
        rules
            .keys()
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>(),
        tested.iter().copied().collect(),
        "every alert is tested, firing and silent"
    );
    let tests: Vec<Value> = cases
        .iter()
        .flat_map(|(alert, fires, silent)| {
            let rule = &rules[*alert];
            [
                case(fires, alert, rule, true),
                case(silent, alert, rule, false),
            ]
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    // JSON is YAML: the rule file and the test file as promtool reads them.
    std::fs::write(dir.path().join("alerts.yaml"), spec.to_string()).unwrap();
    let test = json!({
        "rule_files": ["alerts.yaml"],
        "evaluation_interval": "1m",
        "tests": tests,
    });
    std::fs::write(dir.path().join("alerts.test.yaml"), test.to_string()).unwrap();
    promtool(&["check", "rules", "alerts.yaml"], dir.path()).unwrap_or_else(|e| panic!("{e}"));
    promtool(&["test", "rules", "alerts.test.yaml"], dir.path())
        .unwrap_or_else(|e| panic!("promtool test rules failed:\n{e}"));
}

/// Grafana's variables as the test's queries fill them: the namespace the scrape labels kerf
/// with, and a rate window of a minute (the scrape runs every second).
fn filled(expr: &str, variables: &[&str]) -> String {
    let mut out = expr.replace("$__rate_interval", "1m");
    for v in variables {
        let value = match *v {
            "namespace" => "kerf-system",
            other => panic!("a query uses the variable {other}, which the test cannot fill"),
        };
        out = out.replace(&format!("${v}"), value);
    }
    assert!(
        !out.contains('$'),
        "a variable the dashboard does not define: {expr}"
    );
    out
}

/// `GET path` on `prometheus` with `params`: the JSON answer's `data`, or the error.
async fn prometheus_api(prometheus: &TestPrometheus, path: &str, params: &[(&str, &str)]) -> Value {
    let mut url = url::Url::parse(&format!("{}{path}", prometheus.url())).unwrap();
    url.query_pairs_mut().extend_pairs(params);
    let r = reqwest::Client::new()
        .get(url)
        .send()
        .await
        .expect("Prometheus answers");
    let status = r.status();
    let body: Value = r.json().await.expect("JSON");
    assert!(
        status.is_success() && body["status"] == "success",
        "{path} {params:?}: {body}"
    );
    body["data"].clone()
}

/// Every query of `dashboard.json` (each target of each panel, and the namespace variable's)
/// parses and returns data from a real Prometheus that scraped a running `kerf serve` every
/// second while it answered reviews (some unreadable), ran cycles over the HPA example — a few
/// while its Prometheus was down — and, with kerf's writer and Lease on the mock API server,
/// wrote, evicted and resized, and recorded a field Argo CD took back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_panel_returns_data_from_a_prometheus_that_scraped_kerf() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("manifests/monitoring/dashboard.json")).unwrap(),
    )
    .expect("dashboard.json");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .filter(|v| *v != "datasource")
        .collect();
    let mut source = source_prometheus();
    let s = serve(&source, "1", 30).await;
    let writer = WriterSide::start(cluster(true, false, false)).await;
    // A writer whose field Argo CD took back (docs/gitops.md), recorded before the scrapes.
    let mut gitops = crate::gitops_conflict_kube::Cluster::new(false);
    gitops.cycle(0).await;
    gitops.argocd_sync(2, &["Deployment"]).await;
    gitops.cycle(10).await;
    let gitops = serve_registry(gitops.metrics.clone()).await;
    let labels: &[(&str, &str)] = &[("namespace", "kerf-system")];
    let scraper = TestPrometheus::start_scraping(&[
        (s.health.to_string(), labels),
        (writer.health.to_string(), labels),
        (gitops.to_string(), labels),
    ]);
    let c = client(&s.pki.ca_pem(), s.webhook, false);
    for i in 0..24 {
        send_review(&c, &s, false).await;
        send_review(&c, &s, true).await;
        writer.turn(i).await;
        match i {
            8 => source.stop(),
            14 => source.restart(),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The last of it scraped.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let namespaces = prometheus_api(
        &scraper,
        "/api/v1/label/namespace/values",
        &[("match[]", "kerf_reconcile_cycles_total")],
    )
    .await;
    assert_eq!(
        namespaces,
        json!(["kerf-system"]),
        "the namespace variable's values"
    );
    let mut empty = Vec::new();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = filled(target["expr"].as_str().unwrap(), &variables);
            let data = prometheus_api(&scraper, "/api/v1/query", &[("query", &expr)]).await;
            queries += 1;
            let values: Vec<&Value> = data["result"].as_array().unwrap().iter().collect();
            if values.is_empty() {
                empty.push(format!("{}: {expr}", panel["title"]));
            }
        }
    }
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );
    assert!(queries > 20, "{queries} queries");
}
