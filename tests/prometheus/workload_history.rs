//! CPU/memory from the workload's history (docs/metrics.md#history-by-workload), against a real
//! Prometheus: pods replaced within the window count, a Prometheus refusing big queries still
//! yields every recommendation (kerf splits the batch), a window longer than the history is
//! flagged, and the file source answers exactly as Prometheus does.
//! Needs `prometheus` and `promtool` (`scripts/test` installs them).

use std::fmt::Write as _;

use crate::prometheus_support::{EPOCH, Lcg, TestPrometheus};
use jiff::Timestamp;
use kerf::api::WorkloadKind;
use kerf::cli::recommend::{to_json, to_table};
use kerf::core::recommenders::cycle::CycleOutput;
use kerf::metrics::file::FileSource;
use kerf::metrics::prometheus::PrometheusSource;
use kerf::metrics::promql::LabelMatcher;
use kerf::metrics::{
    MetricError, MetricSource, WindowAggregate, WindowQuery, WorkloadSelector,
    window_query_splitting,
};
use kerf::reconcile::run_cycle;
use kerf::sources::dir::load_dir;
use serde_json::Value;

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// A policy (CPU p95 auto-patch, memory peak audit-only, no headroom, both over `window`), its
/// strategy, and one Deployment per `(name, today's pods)` requesting 1 CPU and 1Gi.
pub(crate) fn manifests(window: &str, workloads: &[(&str, &[&str])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut y = format!(
        r#"apiVersion: rightsizing.kubex.ai/v1alpha1
kind: RightsizingPolicy
metadata: {{name: rs, namespace: shop}}
spec:
  scope: {{labelSelector: {{matchLabels: {{tier: web}}}}}}
  automationStrategyRef: {{name: s}}
  resources:
    cpu: {{mode: auto-patch, percentile: 95, headroomPercent: 0, window: {window}}}
    memory: {{mode: audit-only, headroomPercent: 0, window: {window}}}
---
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {{name: s, namespace: shop}}
spec: {{}}
"#
    );
    for (name, pods) in workloads {
        write!(
            y,
            r#"---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: shop, labels: {{tier: web}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: app, image: x, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]}}
"#,
            replicas = pods.len()
        )
        .unwrap();
        for pod in *pods {
            let rs = pod.rsplit_once('-').unwrap().0;
            write!(
                y,
                r#"---
apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  namespace: shop
  labels: {{app: {name}}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: {rs}, uid: u-{rs}, controller: true}}]
spec: {{containers: [{{name: app, image: x, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]}}
status: {{phase: Running, startTime: "2026-01-01T00:00:00Z"}}
"#
            )
            .unwrap();
        }
    }
    std::fs::write(dir.path().join("all.yaml"), y).unwrap();
    dir
}

/// OpenMetrics for one pod's `app` container: a CPU counter at `cores` and a working set at
/// `bytes(t)`, every `scrape` seconds over `[from, to]`.
pub(crate) fn pod_series(
    out: &mut (String, String),
    pod: &str,
    (from, to, scrape): (i64, i64, i64),
    cores: impl Fn(i64) -> f64,
    bytes: impl Fn(i64) -> f64,
) {
    let labels = format!("namespace=\"shop\",pod=\"{pod}\",container=\"app\"");
    let mut counter = 0.0;
    let mut t = from;
    while t <= to {
        writeln!(
            out.0,
            "container_cpu_usage_seconds_total{{{labels}}} {counter} {t}"
        )
        .unwrap();
        writeln!(
            out.1,
            "container_memory_working_set_bytes{{{labels}}} {} {t}",
            bytes(t)
        )
        .unwrap();
        counter += cores(t) * scrape as f64;
        t += scrape;
    }
}

pub(crate) fn openmetrics(series: (String, String)) -> String {
    with_last_terminated(series, "")
}

/// [`openmetrics`] with more metric families (their `# TYPE` lines and samples).
pub(crate) fn openmetrics_with(series: (String, String), families: &str) -> String {
    openmetrics(series).replace("# EOF\n", &format!("{families}# EOF\n"))
}

/// [`openmetrics`] with kube-state-metrics' last termination reason series `ksm`
/// ([`last_terminated`]).
fn with_last_terminated(series: (String, String), ksm: &str) -> String {
    let ksm = match ksm {
        "" => String::new(),
        _ => format!("# TYPE kube_pod_container_status_last_terminated_reason gauge\n{ksm}"),
    };
    format!(
        "# TYPE container_cpu_usage_seconds counter\n{}# TYPE container_memory_working_set_bytes gauge\n{}{ksm}# EOF\n",
        series.0, series.1
    )
}

/// kube-state-metrics' series for one pod's `app` container whose last termination was for
/// `reason`, every `scrape` seconds over `[from, to]` (the pod running after the restart).
fn last_terminated(out: &mut String, pod: &str, reason: &str, (from, to, scrape): (i64, i64, i64)) {
    for t in (from..=to).step_by(scrape as usize) {
        writeln!(
            out,
            "kube_pod_container_status_last_terminated_reason{{namespace=\"shop\",pod=\"{pod}\",container=\"app\",reason=\"{reason}\",uid=\"u-{pod}\"}} 1 {t}"
        )
        .unwrap();
    }
}

pub(crate) async fn cycle<S: MetricSource>(
    dir: &std::path::Path,
    source: &S,
    at: Timestamp,
) -> CycleOutput {
    let m = load_dir(dir).unwrap();
    run_cycle(&m.snapshot, source, at, 15).await
}

/// The cycle at `at` from Prometheus `p`, once every query of it succeeded and the file source
/// holding the same `text` gave the same recommendations.
pub(crate) async fn cycle_agreeing(
    dir: &std::path::Path,
    text: &str,
    p: &TestPrometheus,
    at: Timestamp,
) -> CycleOutput {
    let out = cycle(dir, &prom(p), at).await;
    assert!(
        out.query_failures().is_empty(),
        "{:?}",
        out.query_failures()
    );
    assert_eq!(
        to_json(&out),
        to_json(&cycle(dir, &file(text, p), at).await),
        "file and Prometheus agree"
    );
    out
}

pub(crate) fn at(t: i64) -> Timestamp {
    Timestamp::from_second(t).unwrap()
}

pub(crate) fn prom(p: &TestPrometheus) -> PrometheusSource {
    PrometheusSource::new(&p.url(), std::time::Duration::from_secs(30)).unwrap()
}

pub(crate) fn file(text: &str, p: &TestPrometheus) -> FileSource {
    FileSource::from_str(text)
        .unwrap()
        .with_semantics(p.file_semantics())
}

/// The `resources.app` entry of workload `name` in the JSON `kerf recommend` prints.
fn app<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no recommendation for {name}: {json:#}"))
}

/// A rollout in the middle of a one-day window: the old ReplicaSet's pods ran hot (0.8 cores,
/// a 900Mi peak) and are gone; today's pods are cool. The recommendation is the whole day's —
/// the old pods' CPU percentile and memory peak — and pods of another workload whose name
/// starts the same are not counted. File and Prometheus agree.
#[tokio::test]
async fn pods_replaced_mid_window_count_with_their_peak() {
    let (start, end) = (EPOCH, EPOCH + 86_400);
    let mid = start + 43_200;
    let mut s = (String::new(), String::new());
    for old in ["web-7d9c8b5f6d-x2x4z", "web-7d9c8b5f6d-q5w6z"] {
        let peak = |t: i64| {
            if t == start + 3_600 {
                900.0 * MIB
            } else {
                400.0 * MIB
            }
        };
        pod_series(&mut s, old, (start, mid, 60), |_| 0.8, peak);
    }
    let today = ["web-5f6d7c8b9d-b2c4d", "web-5f6d7c8b9d-k7m8n"];
    for new in today {
        pod_series(&mut s, new, (mid + 60, end, 60), |_| 0.3, |_| 300.0 * MIB);
    }
    // Another Deployment, `web-api`, whose pod names start with `web-`: not web's history.
    pod_series(
        &mut s,
        "web-api-6b7c8d9f2-t4v5w",
        (start, end, 60),
        |_| 3.0,
        |_| 4096.0 * MIB,
    );
    // A pod named by hand that no controller of web could have made.
    pod_series(
        &mut s,
        "web-debug",
        (start, end, 60),
        |_| 3.0,
        |_| 4096.0 * MIB,
    );
    let text = openmetrics(s);
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = manifests("1d", &[("web", &today)]);

    let jp = to_json(&cycle_agreeing(dir.path(), &text, &p, at(end)).await);
    let web = app(&jp, "web");
    assert_eq!(
        web["resources"]["app"]["cpu"]["recommended"], "800m",
        "{web:#}"
    );
    assert_eq!(
        web["resources"]["app"]["memory"]["recommended"], "900Mi",
        "{web:#}"
    );
    assert_eq!(
        web["riskFlags"],
        serde_json::json!([]),
        "a whole day of history"
    );

    // Today's pods alone (a window after the rollout) give today's usage: the test above
    // measured the replaced pods, not something else.
    // (Ten minutes past Prometheus's 5-minute lookback of the old pods' last samples.)
    let late = cycle(dir.path(), &prom(&p), at(end + 43_200 + 600)).await;
    let web = app(&to_json(&late), "web").clone();
    assert_eq!(
        web["resources"]["app"]["cpu"]["recommended"], "300m",
        "{web:#}"
    );
    assert_eq!(
        web["resources"]["app"]["memory"]["recommended"], "300Mi",
        "{web:#}"
    );
}

/// An OOM kill kerf learns of from kube-state-metrics only: `web`'s old pod was OOM-killed in
/// the morning, ran on, and was replaced at noon by a rollout; today's pods' statuses show no
/// OOM kill. The recommendation keeps the memory request (the OOM floor) instead of lowering it
/// to the day's peak. `api`'s old pod restarted for another reason: no OOM kill series, so no
/// OOM history (and no error), and its memory comes down.
/// File and Prometheus agree; a window after the OOM-killed pod's time lowers `web` again.
#[tokio::test]
async fn an_oom_kill_of_a_pod_replaced_mid_window_keeps_the_memory_request() {
    let (start, end) = (EPOCH, EPOCH + 86_400);
    let mid = start + 43_200;
    let mut s = (String::new(), String::new());
    let mut ksm = String::new();
    let web_today = ["web-5f6d7c8b9d-b2c4d"];
    let api_today = ["api-5f6d7c8b9d-b2c4d"];
    for (old, today, reason) in [
        ("web-7d9c8b5f6d-x2x4z", web_today[0], "OOMKilled"),
        ("api-7d9c8b5f6d-x2x4z", api_today[0], "Error"),
    ] {
        pod_series(&mut s, old, (start, mid, 60), |_| 0.5, |_| 400.0 * MIB);
        last_terminated(&mut ksm, old, reason, (start + 21_600, mid, 60));
        pod_series(&mut s, today, (mid + 60, end, 60), |_| 0.3, |_| 300.0 * MIB);
    }
    let text = with_last_terminated(s, &ksm);
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = manifests("1d", &[("web", &web_today), ("api", &api_today)]);

    let json = to_json(&cycle_agreeing(dir.path(), &text, &p, at(end)).await);
    let memory = |json: &Value, name: &str| app(json, name)["resources"]["app"]["memory"].clone();
    assert_eq!(memory(&json, "web")["recommended"], "1Gi", "{json:#}");
    assert_eq!(memory(&json, "api")["recommended"], "400Mi", "{json:#}");

    // Half a day later the OOM-killed pod is out of the window: the day's peak again.
    let late = to_json(&cycle(dir.path(), &prom(&p), at(end + 43_200 + 600)).await);
    assert_eq!(memory(&late, "web")["recommended"], "300Mi", "{late:#}");
}

/// A sidecar (a restartable init container) OOM-killed in a pod replaced since: kube-state-metrics
/// reports it in `kube_pod_init_container_status_last_terminated_reason` (its init-container
/// family; the regular family never lists init containers). The sidecar's memory request stays
/// (the OOM floor); the `app` container, never OOM-killed, comes down to its peak. File and
/// Prometheus agree.
#[tokio::test]
async fn a_sidecar_oom_kill_of_a_pod_replaced_mid_window_keeps_its_memory_request() {
    let (start, end) = (EPOCH, EPOCH + 86_400);
    let mid = start + 43_200;
    let (old, today) = ("web-7d9c8b5f6d-x2x4z", "web-5f6d7c8b9d-b2c4d");
    let mut s = (String::new(), String::new());
    pod_series(&mut s, old, (start, mid, 60), |_| 0.5, |_| 400.0 * MIB);
    pod_series(&mut s, today, (mid + 60, end, 60), |_| 0.3, |_| 300.0 * MIB);
    let proxy = |t: &str| t.replace("container=\"app\"", "container=\"proxy\"");
    let s = (
        format!("{}{}", s.0, proxy(&s.0)),
        format!("{}{}", s.1, proxy(&s.1)),
    );
    let mut ksm = String::new();
    last_terminated(&mut ksm, old, "OOMKilled", (start + 21_600, mid, 60));
    let ksm = proxy(&ksm).replace(
        "kube_pod_container_status_last_terminated_reason",
        "kube_pod_init_container_status_last_terminated_reason",
    );
    let text = openmetrics_with(
        s,
        &format!("# TYPE kube_pod_init_container_status_last_terminated_reason gauge\n{ksm}"),
    );
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = manifests("1d", &[("web", &[today])]);
    let all = dir.path().join("all.yaml");
    let yaml = std::fs::read_to_string(&all).unwrap().replace(
        "{containers: [",
        r#"{initContainers: [{name: proxy, image: x, restartPolicy: Always, resources: {requests: {cpu: "1", memory: 1Gi}}}], containers: ["#,
    );
    std::fs::write(&all, yaml).unwrap();

    let json = to_json(&cycle_agreeing(dir.path(), &text, &p, at(end)).await);
    let web = app(&json, "web");
    assert_eq!(
        web["resources"]["proxy"]["memory"]["recommended"], "1Gi",
        "{web:#}"
    );
    assert_eq!(
        web["resources"]["app"]["memory"]["recommended"], "400Mi",
        "{web:#}"
    );
}

/// A cluster that scrapes cAdvisor twice (through the kubelet and a standalone cAdvisor): each
/// container's series come twice, `job="kubelet"` and `job="cadvisor"`. By default kerf sums
/// them (the usage of both); GlobalConfiguration `spec.prometheus.resourceMetrics.matchers`
/// picks the kubelet's. Renamed series (a recording rule's names) are read from
/// `resourceMetrics.cpu` / `.memory`. File and Prometheus agree.
#[tokio::test]
async fn resource_metrics_pick_one_scrape_of_cadvisor_and_renamed_series() {
    let (start, end) = (EPOCH, EPOCH + 86_400);
    let today = "web-5f6d7c8b9d-b2c4d";
    let job = |t: &str, job: &str| {
        t.replace(
            "container=\"app\"",
            &format!("container=\"app\",job=\"{job}\""),
        )
    };
    let (mut kubelet, mut cadvisor) = (
        (String::new(), String::new()),
        (String::new(), String::new()),
    );
    pod_series(
        &mut kubelet,
        today,
        (start, end, 60),
        |_| 0.3,
        |_| 300.0 * MIB,
    );
    pod_series(
        &mut cadvisor,
        today,
        (start, end, 60),
        |_| 0.5,
        |_| 500.0 * MIB,
    );
    let twice = (
        format!(
            "{}{}",
            job(&kubelet.0, "kubelet"),
            job(&cadvisor.0, "cadvisor")
        ),
        format!(
            "{}{}",
            job(&kubelet.1, "kubelet"),
            job(&cadvisor.1, "cadvisor")
        ),
    );
    // The kubelet's series again under a recording rule's names.
    let renamed = (
        job(&kubelet.0, "kubelet")
            .replace("container_cpu_usage_seconds_total", "k_cpu_seconds_total"),
        job(&kubelet.1, "kubelet").replace("container_memory_working_set_bytes", "k_memory_bytes"),
    );
    let text = openmetrics(twice).replace(
        "# EOF\n",
        &format!(
            "# TYPE k_cpu_seconds counter\n{}# TYPE k_memory_bytes gauge\n{}# EOF\n",
            renamed.0, renamed.1
        ),
    );
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = manifests("1d", &[("web", &[today])]);
    let recommended = async |global: &str| {
        let path = dir.path().join("global.yaml");
        if global.is_empty() {
            let _ = std::fs::remove_file(&path);
        } else {
            std::fs::write(&path, format!(
                "apiVersion: rightsizing.kubex.ai/v1alpha1\nkind: GlobalConfiguration\nmetadata: {{name: global-config}}\nspec:\n  prometheus:\n    resourceMetrics:\n{global}"
            )).unwrap();
        }
        let json = to_json(&cycle_agreeing(dir.path(), &text, &p, at(end)).await);
        let r = &app(&json, "web")["resources"]["app"];
        (
            r["cpu"]["recommended"].as_str().unwrap().to_string(),
            r["memory"]["recommended"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(
        recommended("").await,
        ("800m".into(), "800Mi".into()),
        "both scrapes summed"
    );
    let kubelet_only = "      matchers: ['job=\"kubelet\"']\n";
    assert_eq!(
        recommended(kubelet_only).await,
        ("300m".into(), "300Mi".into())
    );
    let renamed = "      cpu: k_cpu_seconds_total\n      memory: k_memory_bytes\n";
    assert_eq!(recommended(renamed).await, ("300m".into(), "300Mi".into()));
}

/// Eight workloads, 16 pods, one batch: a Prometheus started with a small
/// `--query.max-samples` refuses the batch (HTTP 422); kerf splits it until the queries fit and
/// every workload gets the recommendation an unlimited Prometheus gives — the OOM kills
/// kube-state-metrics recorded for half of them included.
#[tokio::test]
async fn a_small_max_samples_still_yields_every_recommendation_by_splitting() {
    let (start, end) = (EPOCH, EPOCH + 3_600);
    let mut s = (String::new(), String::new());
    let mut ksm = String::new();
    let mut rng = Lcg(7);
    let names: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    let mut pods: Vec<Vec<String>> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mine: Vec<String> = (0..2)
            .map(|k| format!("{name}-6b7c8d9f2-{}", ["b2c4d", "k7m8n"][k]))
            .collect();
        for pod in &mine {
            let base = 0.1 + 0.1 * i as f64;
            let noise: Vec<f64> = (0..=240).map(|_| rng.between(0.0, 0.2)).collect();
            pod_series(
                &mut s,
                pod,
                (start, end, 15),
                |t| base + noise[((t - start) / 15) as usize],
                |t| (100.0 + i as f64 * 10.0) * MIB + ((t - start) % 900) as f64 * 1000.0,
            );
            if i % 2 == 0 {
                last_terminated(&mut ksm, pod, "OOMKilled", (start, end, 15));
            }
        }
        pods.push(mine);
    }
    let text = with_last_terminated(s, &ksm);
    let workloads: Vec<(&str, Vec<&str>)> = names
        .iter()
        .zip(&pods)
        .map(|(n, p)| (n.as_str(), p.iter().map(String::as_str).collect()))
        .collect();
    let refs: Vec<(&str, &[&str])> = workloads.iter().map(|(n, p)| (*n, &p[..])).collect();
    let dir = manifests("1h", &refs);

    let unlimited = TestPrometheus::start_with_openmetrics(&text);
    let want = cycle(dir.path(), &prom(&unlimited), at(end)).await;
    assert_eq!(want.query_splits, 0);
    assert!(want.query_failures().is_empty());
    // Far below what the eight-workload batch loads (its CPU query evaluates 240 rate steps
    // over 16 pods), above what a single workload's queries load.
    let limited = TestPrometheus::start_with_args(&text, &["--query.max-samples=1500"]);
    let batch = WindowQuery {
        metric: "container_cpu_usage_seconds_total".into(),
        aggregate: WindowAggregate::RateQuantile { quantile: 0.95 },
        matchers: vec![],
        namespace_label: "namespace".into(),
        pod_label: "pod".into(),
        container_label: "container".into(),
        workloads: names
            .iter()
            .map(|n| WorkloadSelector {
                namespace: "shop".into(),
                kind: WorkloadKind::Deployment,
                name: n.clone(),
                other_pods: vec![],
            })
            .collect(),
        at: at(end),
        window_seconds: 3_600,
        step_seconds: 15,
        rate_seconds: 60,
    };
    match prom(&limited).window_query(&batch).await {
        Err(e @ MetricError::Refused(_)) => {
            assert!(e.to_string().contains("too many samples"), "{e}")
        }
        other => panic!("the whole batch must be refused: {other:?}"),
    }
    let split = window_query_splitting(&prom(&limited), &batch)
        .await
        .unwrap();
    assert!(
        split.splits >= 3,
        "split down to fitting batches: {}",
        split.splits
    );
    assert_eq!(split.values.len(), 8, "{:?}", split.values);
    let one = prom(&unlimited).window_query(&batch).await.unwrap();
    assert_eq!(
        split.values, one.values,
        "the halves answer what one query would"
    );
    // The OOM-kill query of the batch too, its matcher in every half.
    let oom = WindowQuery {
        metric: "kube_pod_container_status_last_terminated_reason".into(),
        aggregate: WindowAggregate::Peak,
        matchers: vec![LabelMatcher {
            name: "reason".into(),
            value: "OOMKilled".into(),
        }],
        ..batch.clone()
    };
    assert!(matches!(
        prom(&limited).window_query(&oom).await,
        Err(MetricError::Refused(_))
    ));
    let split = window_query_splitting(&prom(&limited), &oom).await.unwrap();
    assert!(split.splits >= 1);
    let one = prom(&unlimited).window_query(&oom).await.unwrap();
    assert_eq!(split.values, one.values);
    let oom_killed: Vec<&str> = one.values.keys().map(|k| k.workload.as_str()).collect();
    assert_eq!(
        oom_killed,
        [
            "Deployment/w0",
            "Deployment/w2",
            "Deployment/w4",
            "Deployment/w6"
        ]
    );

    let registry = kerf::telemetry::Metrics::new();
    let counter = || -> f64 {
        let text = registry.encode();
        text.lines()
            .find(|l| l.starts_with("kerf_prometheus_query_splits_total "))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let source = prom(&limited).reporting_to(registry.clone());
    let got = cycle(dir.path(), &source, at(end)).await;
    assert!(
        got.query_failures().is_empty(),
        "{:?}",
        got.query_failures()
    );
    assert!(
        got.query_splits > 3 * 3,
        "CPU, throttling, history and OOM-kill batches split: {}",
        got.query_splits
    );
    assert_eq!(
        counter(),
        got.query_splits as f64,
        "the metric counts the splits"
    );
    assert!(got.queries > want.queries);
    assert_eq!(to_json(&got), to_json(&want));
    for (i, n) in names.iter().enumerate() {
        let r = app(&to_json(&got), n).clone();
        assert_ne!(
            r["resources"]["app"]["cpu"]["recommended"],
            Value::Null,
            "{r:#}"
        );
        // The OOM-killed ones keep their 1Gi memory request.
        let memory = &r["resources"]["app"]["memory"]["recommended"];
        assert_eq!(memory == "1Gi", i % 2 == 0, "{r:#}");
    }

    // A limit not even one workload fits: that batch's workloads fail, visibly, nothing else.
    let tiny = TestPrometheus::start_with_args(&text, &["--query.max-samples=100"]);
    let failed = cycle(dir.path(), &prom(&tiny), at(end)).await;
    let failures = failed.query_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].1.reason.contains("query refused as too big"),
        "{failures:?}"
    );
    assert!(failed.resource_results().all(|r| r.metrics_unavailable));
}

/// A 7-day window on a Prometheus holding 2 days of one workload and 5 hours of another:
/// both are recommended from the data there is and flagged `insufficient-history` (JSON and
/// table); the one with less than a day is not auto-patched yet.
#[tokio::test]
async fn a_window_longer_than_the_history_is_flagged_and_auto_patch_waits_a_day() {
    let end = EPOCH + 7 * 86_400;
    let mut s = (String::new(), String::new());
    let two_days = ["old-6b7c8d9f2-b2c4d"];
    let five_hours = ["new-6b7c8d9f2-b2c4d"];
    pod_series(
        &mut s,
        two_days[0],
        (end - 2 * 86_400, end, 30),
        |_| 0.5,
        |_| 200.0 * MIB,
    );
    pod_series(
        &mut s,
        five_hours[0],
        (end - 5 * 3_600, end, 30),
        |_| 0.25,
        |_| 100.0 * MIB,
    );
    let text = openmetrics(s);
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = manifests("7d", &[("old", &two_days), ("new", &five_hours)]);
    let out = cycle_agreeing(dir.path(), &text, &p, at(end)).await;
    let json = to_json(&out);

    let old = app(&json, "old");
    assert_eq!(
        old["riskFlags"],
        serde_json::json!(["insufficient-history"]),
        "{old:#}"
    );
    assert_eq!(old["phase"], "applied", "two days ≥ 24 h: applied");
    assert_eq!(old["resources"]["app"]["cpu"]["recommended"], "500m");
    let new = app(&json, "new");
    assert_eq!(
        new["riskFlags"],
        serde_json::json!(["insufficient-history"]),
        "{new:#}"
    );
    assert_eq!(new["phase"], "pending", "{new:#}");
    assert_eq!(new["resources"]["app"]["cpu"]["recommended"], "250m");
    let reasons = new["reasons"].to_string();
    assert!(reasons.contains("auto-patch waits for 24h"), "{reasons}");

    let table = to_table(&out, at(end), &kerf::writers::memory::MemoryWriter::new());
    let line = table
        .lines()
        .find(|l| l.starts_with("shop/Deployment/new"))
        .unwrap();
    assert!(
        line.contains("pending") && line.ends_with("insufficient-history"),
        "{table}"
    );
}

/// The four window aggregates on irregular data — jittered and missed scrapes, a counter reset,
/// throttling, a StatefulSet, a pod of another workload — from the file and from Prometheus;
/// and the OOM signal's label matcher (kube-state-metrics' last termination reason, some pods
/// OOM-killed, others terminated for another reason).
#[tokio::test]
async fn file_and_prometheus_window_aggregates_agree() {
    let (start, end) = (EPOCH, EPOCH + 6 * 3_600);
    let mut rng = Lcg(42);
    let mut text = String::from("# TYPE container_cpu_usage_seconds counter\n");
    let mut gauges = String::new();
    let mut thr = String::new();
    let mut per = String::new();
    let mut ksm = String::new();
    let pods = [
        "web-6b7c8d9f2-b2c4d",
        "web-6b7c8d9f2-k7m8n",
        "web-5f6d7c8b9d-x2x4z",
        "db-0",
        "db-1",
        "web-api-6b7c8d9f2-t4v5w",
    ];
    // kube-state-metrics' last termination reason of (pod, container) from a time on, until
    // a time: OOM kills in web (one replaced before the last 3 hours), in web-api (another
    // workload), a 0 as older kube-state-metrics export for reasons that were not, and a
    // termination for another reason.
    let last_terminated = |pod: &str, c: &str| -> Option<(&str, f64, i64, i64)> {
        match (pod, c) {
            ("web-6b7c8d9f2-b2c4d", "app") => Some(("OOMKilled", 1.0, start + 7_200, end)),
            ("web-6b7c8d9f2-k7m8n", "proxy") => Some(("OOMKilled", 1.0, start, start + 3_600)),
            ("web-5f6d7c8b9d-x2x4z", "proxy") => Some(("Error", 1.0, start, end)),
            ("db-0", "app") => Some(("OOMKilled", 0.0, start, end)),
            ("web-api-6b7c8d9f2-t4v5w", "app") => Some(("OOMKilled", 1.0, start, end)),
            _ => None,
        }
    };
    for (i, pod) in pods.iter().enumerate() {
        let from = start + (i as i64 % 3) * 1_800;
        for c in ["app", "proxy"] {
            let l = format!("namespace=\"shop\",pod=\"{pod}\",container=\"{c}\"");
            let (mut cpu, mut throttled, mut periods) = (0.0, 0.0, 0.0);
            let mut t = from as f64;
            while t <= end as f64 {
                if rng.next() > 0.03 {
                    writeln!(
                        text,
                        "container_cpu_usage_seconds_total{{{l}}} {cpu} {t:.3}"
                    )
                    .unwrap();
                    writeln!(
                        gauges,
                        "container_memory_working_set_bytes{{{l}}} {} {t:.3}",
                        rng.between(1e8, 3e8).round()
                    )
                    .unwrap();
                    writeln!(
                        thr,
                        "container_cpu_cfs_throttled_periods_total{{{l}}} {throttled} {t:.3}"
                    )
                    .unwrap();
                    writeln!(
                        per,
                        "container_cpu_cfs_periods_total{{{l}}} {periods} {t:.3}"
                    )
                    .unwrap();
                    if let Some((reason, v, since, until)) = last_terminated(pod, c)
                        && (since as f64..=until as f64).contains(&t)
                    {
                        writeln!(
                            ksm,
                            "kube_pod_container_status_last_terminated_reason{{{l},reason=\"{reason}\"}} {v} {t:.3}"
                        )
                        .unwrap();
                    }
                }
                cpu = if rng.next() < 0.002 {
                    0.0
                } else {
                    cpu + rng.between(0.0, 30.0)
                };
                periods += 150.0;
                throttled += if rng.next() < 0.05 {
                    rng.between(0.0, 40.0)
                } else {
                    0.0
                };
                t += 15.0 + rng.between(-2.0, 2.0);
            }
        }
    }
    let text = format!(
        "{text}# TYPE container_memory_working_set_bytes gauge\n{gauges}# TYPE container_cpu_cfs_throttled_periods counter\n{thr}# TYPE container_cpu_cfs_periods counter\n{per}# TYPE kube_pod_container_status_last_terminated_reason gauge\n{ksm}# EOF\n"
    );
    let p = TestPrometheus::start_with_openmetrics(&text);
    let f = file(&text, &p);
    let workloads = vec![
        WorkloadSelector {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: "web".into(),
            other_pods: vec![],
        },
        WorkloadSelector {
            namespace: "shop".into(),
            kind: WorkloadKind::StatefulSet,
            name: "db".into(),
            other_pods: vec![],
        },
    ];
    let oom_killed = vec![LabelMatcher {
        name: "reason".into(),
        value: "OOMKilled".into(),
    }];
    let oom_metric = "kube_pod_container_status_last_terminated_reason";
    for (metric, aggregate, matchers) in [
        (
            "container_cpu_usage_seconds_total",
            WindowAggregate::RateQuantile { quantile: 0.95 },
            vec![],
        ),
        (
            "container_cpu_usage_seconds_total",
            WindowAggregate::RateQuantile { quantile: 0.5 },
            vec![],
        ),
        (
            "container_memory_working_set_bytes",
            WindowAggregate::Peak,
            vec![],
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            WindowAggregate::RateRatioPeak {
                denominator: "container_cpu_cfs_periods_total".into(),
            },
            vec![],
        ),
        (
            "container_memory_working_set_bytes",
            WindowAggregate::FirstSeen,
            vec![],
        ),
        (oom_metric, WindowAggregate::Peak, oom_killed.clone()),
        // What the floors' reasons say: how many steps and when last a pod was throttled, when
        // an OOM kill last showed.
        (
            "container_cpu_cfs_throttled_periods_total",
            WindowAggregate::RateRatioAbove {
                denominator: "container_cpu_cfs_periods_total".into(),
                ratio: 0.05,
                last: false,
            },
            vec![],
        ),
        (
            "container_cpu_cfs_throttled_periods_total",
            WindowAggregate::RateRatioAbove {
                denominator: "container_cpu_cfs_periods_total".into(),
                ratio: 0.05,
                last: true,
            },
            vec![],
        ),
        (
            oom_metric,
            WindowAggregate::LastPositive,
            oom_killed.clone(),
        ),
    ] {
        for (window, step) in [(3 * 3_600, 15), (86_400, 61)] {
            let q = WindowQuery {
                metric: metric.into(),
                aggregate: aggregate.clone(),
                matchers: matchers.clone(),
                namespace_label: "namespace".into(),
                pod_label: "pod".into(),
                container_label: "container".into(),
                workloads: workloads.clone().into(),
                at: at(end - 7),
                window_seconds: window,
                step_seconds: step,
                rate_seconds: 60,
            };
            let (a, b) = (
                f.window_query(&q).await.unwrap(),
                prom(&p).window_query(&q).await.unwrap(),
            );
            if metric == oom_metric && aggregate == WindowAggregate::LastPositive {
                // When last shown: web's app to the end, its replaced pod's proxy an hour in
                // (in the day-long window only); db's 0 is no OOM kill.
                let mut want = vec![("Deployment/web", "app", (end - 7) as f64)];
                if window == 86_400 {
                    want.push(("Deployment/web", "proxy", (start + 3_600) as f64));
                }
                let got: Vec<(&str, &str, f64)> = a
                    .values
                    .iter()
                    .map(|(k, v)| (k.workload.as_str(), k.container.as_str(), *v))
                    .collect();
                let close = got.len() == want.len()
                    && got
                        .iter()
                        .zip(&want)
                        .all(|(g, w)| (g.0, g.1) == (w.0, w.1) && (g.2 - w.2).abs() <= step as f64);
                assert!(close, "{window}s: {got:?} vs {want:?}");
            } else if metric == oom_metric {
                // web's replaced pod's proxy only in the day-long window; db's 0 is a value.
                let mut want = vec![
                    ("Deployment/web", "app", 1.0),
                    ("StatefulSet/db", "app", 0.0),
                ];
                if window == 86_400 {
                    want.insert(1, ("Deployment/web", "proxy", 1.0));
                }
                let got: Vec<(&str, &str, f64)> = a
                    .values
                    .iter()
                    .map(|(k, v)| (k.workload.as_str(), k.container.as_str(), *v))
                    .collect();
                assert_eq!(got, want, "{window}s");
            } else if matches!(aggregate, WindowAggregate::RateRatioAbove { .. }) {
                assert!(!a.values.is_empty(), "{aggregate:?}: some pod throttled");
            } else {
                assert_eq!(
                    a.values.len(),
                    4,
                    "{aggregate:?}: web and db, app and proxy: {a:?}"
                );
            }
            assert_eq!(
                a.values.keys().collect::<Vec<_>>(),
                b.values.keys().collect::<Vec<_>>(),
                "{aggregate:?}"
            );
            for (k, v) in &a.values {
                let w = b.values[k];
                assert!(
                    (v - w).abs() <= 1e-9 * v.abs().max(1e-9),
                    "{metric} {aggregate:?} {window}s {k:?}: file {v} vs Prometheus {w}"
                );
            }
            assert!(
                b.samples_loaded.is_some_and(|n| n > 0),
                "Prometheus says what it loaded"
            );
        }
    }
}
