//! GPU usage from the exporters users run (docs/gpu-metrics.md), against a real Prometheus and
//! promtool: the shipped recording rules pass `promtool check rules` and `promtool test rules`
//! (exporter-shaped input series); a container's device series are counted once (one and two
//! devices give the hand-computed recommendations, the file source agrees); the counter read
//! directly at GPU Process Exporter's 60 s cadence recommends as the recorded gauge does; the
//! example's recorded series are the shipped rule as Prometheus evaluates it.
//! Needs `prometheus` and `promtool` (`scripts/test` installs them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::prometheus_support::{TestPrometheus, promtool_bin};
use jiff::Timestamp;
use kerf::cli::recommend::to_json;
use kerf::core::recommenders::cycle::CycleOutput;
use kerf::metrics::MetricSource;
use kerf::metrics::file::FileSource;
use kerf::metrics::prometheus::PrometheusSource;
use kerf::reconcile::run_cycle;
use kerf::sources::dir::load_dir;
use serde_json::Value;

const EXAMPLE: &str = "examples/gpu-process-exporter";
const COUNTER: &str = "kubex_gpu_container_sm_utilization_percent_seconds_total";
const RECORDED: &str = "kubex_gpu_container_sm_utilization_percent";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn at() -> Timestamp {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new(promtool_bin())
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run promtool ({}): {e}", promtool_bin().display()));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The shipped rule file lints clean and its unit tests (GPU Process Exporter's counter and
/// per-device labels, DCGM exporter's ratios, MiB and `exported_*` labels, rule evaluations out
/// of phase with 60 s scrapes, a counter reset, both exporters on one container) pass.
#[test]
fn shipped_gpu_rules_pass_promtool_check_and_test() {
    let (ok, out) = promtool(&["check", "rules", "manifests/monitoring/gpu-rules.yaml"]);
    assert!(ok && out.contains("SUCCESS: 3 rules found"), "{out}");
    let (ok, out) = promtool(&[
        "test",
        "rules",
        "tests/fixtures/monitoring/gpu-rules.test.yaml",
    ]);
    assert!(ok && out.contains("SUCCESS"), "{out}");
}

async fn cycle<S: MetricSource>(dir: &Path, source: &S, step: i64) -> CycleOutput {
    let m = load_dir(dir).unwrap();
    run_cycle(&m.snapshot, source, at(), step).await
}

fn prom(p: &TestPrometheus) -> PrometheusSource {
    PrometheusSource::new(&p.url(), Duration::from_secs(10)).expect("source")
}

fn gpu(v: &Value, name: &str) -> Value {
    v["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name}: {v}"))["gpu"]
        .clone()
}

/// The example's manifests with the compute signal reading `metric`.
fn manifests_reading(metric: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join(EXAMPLE).join("manifests");
    for f in std::fs::read_dir(src).unwrap() {
        let f = f.unwrap().path();
        let text = std::fs::read_to_string(&f).unwrap().replace(
            &format!("metric: {RECORDED}\n"),
            &format!("metric: {metric}\n"),
        );
        std::fs::write(dir.path().join(f.file_name().unwrap()), text).unwrap();
    }
    dir
}

/// docs/design/gpu-engine.md#g2: `fullGPU` sums a container's device series, `currentAllocation`
/// averages them. Through a real Prometheus fed GPU Process Exporter's series: `chat` (half of
/// one GPU) and `chat-xl` (half of each of two GPUs) use 70 % of the SMs and 80 % of their
/// memory share on every device. By hand: chat uses 0.7 GPU (> 125 % of 0.5) → 0.7 × 1.2 =
/// 0.84; chat-xl 1.4 GPU (> 125 % of 1) → 1.68, the same ratio to the allocation; memory is at
/// 80 % of the share on both (no upsize). Summing the footprint instead would read chat-xl's
/// memory as 160 % and drive it to 1.92.
#[tokio::test]
async fn one_and_two_devices_give_the_hand_computed_recommendation() {
    let text = std::fs::read_to_string(root().join(EXAMPLE).join("metrics.om")).unwrap();
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = root().join(EXAMPLE).join("manifests");
    let from_prom = cycle(&dir, &prom(&p), 15).await;
    assert!(from_prom.query_failures().is_empty());
    let v = to_json(&from_prom);
    for (name, current, recommended) in [("chat", 0.5, 0.84), ("chat-xl", 1.0, 1.68)] {
        let g = gpu(&v, name);
        assert_eq!(g["action"], "upsize", "{name}: {g}");
        assert_eq!(g["drivingMetric"], "compute", "{name}: {g}");
        let c = &g["containers"]["inference"];
        assert_eq!(c["current"], current, "{name}: {g}");
        let got = c["recommended"].as_f64().unwrap();
        assert!((got - recommended).abs() < 1e-9, "{name}: {got}");
        assert!(
            (got / current - 1.68).abs() < 1e-9,
            "{name}: the same ratio"
        );
    }
    let file = FileSource::from_str(&text)
        .unwrap()
        .with_semantics(p.file_semantics());
    assert_eq!(v, to_json(&cycle(&dir, &file, 15).await), "the file agrees");
    // Every selected pod has samples of both metrics.
    let run = &from_prom.policies.values().next().unwrap();
    assert_eq!(run.missing_samples.as_deref(), Some(&[][..]));
}

/// docs/design/gpu-engine.md#g2: the exporter's counter read directly, at its default 60 s
/// scrapes (off the minute) and kerf's default 15 s step, gives the same recommendation as the
/// gauge the shipped rule records, from Prometheus and from the file alike. A 60 s rate window
/// (the window queries' floor) holds one sample there: no rate at all.
#[tokio::test]
async fn the_counter_at_60s_scrapes_recommends_as_the_recorded_gauge() {
    let text = std::fs::read_to_string(root().join(EXAMPLE).join("metrics.om")).unwrap();
    let p = TestPrometheus::start_with_openmetrics(&text);
    let gauge = manifests_reading(RECORDED);
    let counter = manifests_reading(COUNTER);
    let by_gauge = to_json(&cycle(gauge.path(), &prom(&p), 15).await);
    let by_counter = cycle(counter.path(), &prom(&p), 15).await;
    assert!(by_counter.query_failures().is_empty());
    let by_counter = to_json(&by_counter);
    for name in ["chat", "chat-xl"] {
        assert_eq!(gpu(&by_counter, name), gpu(&by_gauge, name), "{name}");
    }
    let file = FileSource::from_str(&text)
        .unwrap()
        .with_semantics(p.file_semantics());
    assert_eq!(to_json(&cycle(counter.path(), &file, 15).await), by_counter);

    let short = query_range(
        &p,
        &format!("rate({COUNTER}[60s])"),
        at().as_second() - 600,
        at().as_second(),
        15,
    )
    .await;
    assert_eq!(short, Vec::<Value>::new(), "a 60 s window holds one sample");
}

/// A range query straight to Prometheus; its result series.
async fn query_range(
    p: &TestPrometheus,
    promql: &str,
    start: i64,
    end: i64,
    step: i64,
) -> Vec<Value> {
    let form = [
        ("query", promql.to_string()),
        ("start", start.to_string()),
        ("end", end.to_string()),
        ("step", step.to_string()),
    ];
    let _ = rustls::crypto::ring::default_provider().install_default();
    let v: Value = reqwest::Client::new()
        .post(format!("{}/api/v1/query_range", p.url()))
        .form(&form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .clone()
}

/// The example ships the recorded gauge beside the counter; it must be what the shipped rule
/// records: the rule's own expression (read from the rule file), evaluated by Prometheus every
/// 60 s over the example's counter, equals the shipped series point for point.
#[tokio::test]
async fn the_examples_recorded_series_are_the_shipped_rule() {
    let rules: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root().join("manifests/monitoring/gpu-rules.yaml")).unwrap(),
    )
    .unwrap();
    let expr = rules["groups"][0]["rules"][0]["expr"].as_str().unwrap();
    assert_eq!(rules["groups"][0]["rules"][0]["record"], RECORDED);
    let text = std::fs::read_to_string(root().join(EXAMPLE).join("metrics.om")).unwrap();
    let p = TestPrometheus::start_with_openmetrics(&text);
    let (start, end) = (at().as_second() - 1800, at().as_second());
    let key = |s: &Value| {
        let m: std::collections::BTreeMap<&String, &Value> = s["metric"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k != "__name__")
            .collect();
        serde_json::to_string(&m).unwrap()
    };
    let mut evaluated = query_range(&p, expr, start, end, 60).await;
    let mut shipped = query_range(&p, RECORDED, start, end, 60).await;
    assert_eq!(evaluated.len(), 3, "one series per device");
    evaluated.sort_by_key(key);
    shipped.sort_by_key(key);
    for (e, s) in evaluated.iter().zip(&shipped) {
        assert_eq!(key(e), key(s));
        assert_eq!(e["values"], s["values"], "{}", key(e));
    }
    assert_eq!(evaluated.len(), shipped.len());
}
