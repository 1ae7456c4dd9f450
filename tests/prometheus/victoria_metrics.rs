//! A second engine: VictoriaMetrics serves the Prometheus query API. Loaded with the same data
//! as Prometheus, kerf's recommendations through it must be Prometheus's — exactly on the
//! shipped examples, and within the tolerance docs/metrics.md documents on irregular scrapes
//! (jitter, missed scrapes, a counter reset), where the engines' rate and staleness rules part.
//! Needs `prometheus`, `promtool` and `victoria-metrics` (`scripts/test` installs them).

use crate::kerf_cli;
use crate::prometheus_support;
use crate::victoria;
use std::collections::BTreeMap;

use jiff::Timestamp;
use kerf::metrics::prometheus::PrometheusSource;
use kerf::metrics::{MetricSource, RangeQuery, SeriesKey, SeriesSet};
use kerf_cli::root;
use prometheus_support::{Lcg, TestPrometheus};
use serde_json::Value;
use victoria::TestVictoriaMetrics;

/// 2026-01-01T12:00:00Z, the end of every example's data.
const END: i64 = 1_767_268_800;

/// The CPU recommendation through VictoriaMetrics is within this fraction of Prometheus's
/// (docs/metrics.md, "VictoriaMetrics").
const CPU_TOLERANCE: f64 = 0.03;
/// …and within this at every percentile once a rate window spans 240 s or more.
const LONG_WINDOW_TOLERANCE: f64 = 0.05;

fn recommend(manifests: &str, source: &[&str]) -> Value {
    kerf_cli::recommend(manifests, source, &[])
}

/// Recommendations from the file, from Prometheus and from VictoriaMetrics, all loaded with
/// `text`.
fn three_ways(manifests: &str, text: &str) -> (Value, Value, Value) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("metrics.om");
    std::fs::write(&file, text).unwrap();
    let prom = TestPrometheus::start_with_openmetrics(text);
    let vm = TestVictoriaMetrics::start_with_openmetrics(text);
    (
        recommend(manifests, &["--metrics", &file.display().to_string()]),
        recommend(manifests, &["--prometheus", &prom.url()]),
        recommend(manifests, &["--prometheus", &vm.url()]),
    )
}

#[test]
fn victoria_metrics_gives_prometheus_recommendations_on_the_shipped_examples() {
    for (manifests, metrics) in [
        ("examples/manifests", "examples/metrics.om"),
        ("examples/hpa/manifests", "examples/hpa/metrics.om"),
    ] {
        let text = std::fs::read_to_string(root().join(metrics)).unwrap();
        let (file, prom, vm) = three_ways(manifests, &text);
        assert_eq!(prom, file, "{manifests}");
        assert_eq!(
            vm, prom,
            "{manifests}: VictoriaMetrics differs from Prometheus"
        );
    }
    // Not vacuous: the GPU upsize and the coordinated CPU/HPA change are in there.
    let text = std::fs::read_to_string(root().join("examples/hpa/metrics.om")).unwrap();
    let (_, _, vm) = three_ways("examples/hpa/manifests", &text);
    let web = &vm["recommendations"][0];
    assert_eq!(web["resources"]["app"]["cpu"]["recommended"], "700m");
    assert_eq!(web["hpa"]["targetAfter"], 71);
}

const WEB_PODS: [&str; 3] = [
    "web-6d4b8c7f9-a1b2c",
    "web-6d4b8c7f9-d3e4f",
    "web-6d4b8c7f9-g5h6i",
];

/// The HPA example's pods as a real cAdvisor would report them: scrapes every 15 s ± 2 s,
/// CPU usage varying (a slow wave, noise, rare bursts), three missed scrapes on the second pod,
/// a container restart (counter reset) on the third, a varying working set.
fn irregular_cadvisor(seed: u64) -> String {
    let mut rng = Lcg(seed);
    let start = END - 3600 - 300;
    let mut cpu = vec!["# TYPE container_cpu_usage_seconds counter".to_string()];
    let mut mem = vec!["# TYPE container_memory_working_set_bytes gauge".to_string()];
    for (i, pod) in WEB_PODS.iter().enumerate() {
        let labels = format!("namespace=\"shop\",pod=\"{pod}\",container=\"app\"");
        let (mut counter, mut prev, mut n) = (1000.0, None::<f64>, 0);
        let mut t = start;
        while t <= END {
            let ts = t as f64 + rng.between(-2.0, 2.0);
            t += 15;
            if i == 1 && (END - 2400..END - 2220).contains(&(t - 15)) {
                continue; // missed scrapes
            }
            if let Some(p) = prev {
                let burst = if rng.next() < 0.03 { 0.5 } else { 0.0 };
                let usage =
                    0.6 + 0.15 * (ts / 600.0 + i as f64).sin() + rng.between(-0.1, 0.1) + burst;
                counter += usage * (ts - p);
            }
            if i == 2 && n == 120 {
                counter = 0.5; // the container restarted
            }
            let bytes = (300.0 + rng.between(-20.0, 40.0)) * 1024.0 * 1024.0;
            cpu.push(format!(
                "container_cpu_usage_seconds_total{{{labels}}} {counter:.3} {ts:.3}"
            ));
            mem.push(format!(
                "container_memory_working_set_bytes{{{labels}}} {bytes:.0} {ts:.3}"
            ));
            prev = Some(ts);
            n += 1;
        }
    }
    cpu.extend(mem);
    cpu.join("\n") + "\n# EOF\n"
}

/// The GPU example with every scrape ± 2 s off the grid and three minutes of missed scrapes.
fn irregular_gpu(seed: u64) -> String {
    let mut rng = Lcg(seed);
    let text = std::fs::read_to_string(root().join("examples/metrics.om")).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            out += line;
            out.push('\n');
            continue;
        }
        let (head, ts) = line.rsplit_once(' ').unwrap();
        let ts = ts.parse::<f64>().unwrap() + rng.between(-2.0, 2.0);
        if (END - 1200) as f64 <= ts && ts < (END - 1020) as f64 {
            continue;
        }
        out += &format!("{head} {ts:.3}\n");
    }
    out
}

fn millicores(v: &Value) -> f64 {
    let s = v.as_str().unwrap();
    match s.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => s.parse::<f64>().unwrap() * 1000.0,
    }
}

#[test]
fn victoria_metrics_agrees_within_the_documented_tolerance_on_irregular_scrapes() {
    let mut worst: f64 = 0.0;
    for seed in [11, 12, 13] {
        let (file, prom, vm) = three_ways("examples/hpa/manifests", &irregular_cadvisor(seed));
        assert_eq!(prom, file, "the file source reproduces Prometheus");
        let (p, v) = (&prom["recommendations"][0], &vm["recommendations"][0]);
        let (pc, vc) = (
            millicores(&p["resources"]["app"]["cpu"]["recommended"]),
            millicores(&v["resources"]["app"]["cpu"]["recommended"]),
        );
        let relative = (vc - pc).abs() / pc;
        eprintln!(
            "seed {seed}: CPU {pc}m through Prometheus, {vc}m through VictoriaMetrics ({:+.2} %)",
            100.0 * (vc - pc) / pc
        );
        assert!(relative <= CPU_TOLERANCE, "seed {seed}: {pc}m vs {vc}m");
        worst = worst.max(relative);
        assert_eq!(
            p["resources"]["app"]["memory"], v["resources"]["app"]["memory"],
            "seed {seed}: the working set is a gauge: same peak"
        );
        let (pt, vt) = (
            p["hpa"]["targetAfter"].as_i64().unwrap(),
            v["hpa"]["targetAfter"].as_i64().unwrap(),
        );
        assert!((pt - vt).abs() <= 1, "seed {seed}: HPA target {pt} vs {vt}");

        let (file, prom, vm) = three_ways("examples/manifests", &irregular_gpu(seed));
        assert_eq!(prom, file);
        assert_eq!(
            vm, prom,
            "seed {seed}: GPU signals are gauges: same recommendation"
        );
    }
    eprintln!("worst CPU difference {:.2} %", 100.0 * worst);

    // Other percentiles and a longer rate window (`rateWindow: 4m`): the further from the
    // middle of the distribution and the fewer samples per rate window, the more the engines'
    // rates part (docs/metrics.md).
    let text = irregular_cadvisor(11);
    let prom = TestPrometheus::start_with_openmetrics(&text);
    let vm = TestVictoriaMetrics::start_with_openmetrics(&text);
    let policy = std::fs::read_to_string(root().join("examples/hpa/manifests/web.yaml")).unwrap();
    assert!(policy.contains("percentile: 95"));
    for rate in ["1m", "4m"] {
        for percentile in [50, 90, 95, 99, 100] {
            let dir = tempfile::tempdir().unwrap();
            for f in ["pods.yaml", "web.yaml"] {
                let text = std::fs::read_to_string(root().join("examples/hpa/manifests").join(f))
                    .unwrap()
                    .replace(
                        "percentile: 95",
                        &format!("percentile: {percentile}, rateWindow: {rate}"),
                    );
                std::fs::write(dir.path().join(f), text).unwrap();
            }
            let manifests = dir.path().display().to_string();
            let cpu = |url: &str| {
                let v = recommend(&manifests, &["--prometheus", url]);
                millicores(&v["recommendations"][0]["resources"]["app"]["cpu"]["recommended"])
            };
            let (pc, vc) = (cpu(&prom.url()), cpu(&vm.url()));
            let relative = (vc - pc) / pc;
            eprintln!(
                "seed 11, rate window {rate}, percentile {percentile}: CPU {pc}m through Prometheus, \
                 {vc}m through VictoriaMetrics ({:+.2} %)",
                100.0 * relative
            );
            if percentile == 95 {
                assert!(
                    relative.abs() <= CPU_TOLERANCE,
                    "rate window {rate}: {pc}m vs {vc}m"
                );
            }
            if rate == "4m" {
                assert!(
                    relative.abs() <= LONG_WINDOW_TOLERANCE,
                    "rate window {rate}, percentile {percentile}: {pc}m vs {vc}m"
                );
            }
        }
    }
}

fn query(metric: &str, step: i64, counter: bool) -> RangeQuery {
    RangeQuery {
        metric: metric.into(),
        namespace_label: "namespace".into(),
        pod_label: "pod".into(),
        container_label: "container".into(),
        namespaces: vec!["shop".into()],
        pods: Default::default(),
        start: Timestamp::from_second(END - 3600).unwrap(),
        end: Timestamp::from_second(END).unwrap(),
        step_seconds: step,
        counter: Some(counter),
        aggregation: Default::default(),
        matchers: Vec::new(),
    }
}

fn points(set: &SeriesSet) -> BTreeMap<(SeriesKey, i64), f64> {
    set.series
        .iter()
        .flat_map(|(k, s)| s.iter().map(move |(t, v)| ((k.clone(), *t), *v)))
        .collect()
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Where the two engines' raw answers differ, measured (the figures in docs/metrics.md): gauge
/// values are identical wherever both answer; Prometheus alone carries a value up to 5 minutes
/// into a scrape gap; rates differ point by point (Prometheus extrapolates to the window's
/// edges, VictoriaMetrics starts from the last sample before the window) but not on average.
#[tokio::test]
async fn where_the_engines_answers_differ() {
    let text = irregular_cadvisor(11);
    let prom = TestPrometheus::start_with_openmetrics(&text);
    let vm = TestVictoriaMetrics::start_with_openmetrics(&text);
    let timeout = std::time::Duration::from_secs(10);
    let (p, v) = (
        PrometheusSource::new(&prom.url(), timeout).unwrap(),
        PrometheusSource::new(&vm.url(), timeout).unwrap(),
    );

    let gauge = query("container_memory_working_set_bytes", 15, false);
    let (pg, vg) = (
        points(&p.range_query(&gauge).await.unwrap()),
        points(&v.range_query(&gauge).await.unwrap()),
    );
    let both: Vec<_> = pg.keys().filter(|k| vg.contains_key(*k)).collect();
    assert!(both.iter().all(|k| pg[*k] == vg[*k]), "gauge values differ");
    let only_prometheus: Vec<i64> = pg
        .keys()
        .filter(|k| !vg.contains_key(*k))
        .map(|(_, t)| *t)
        .collect();
    assert!(
        vg.keys().all(|k| pg.contains_key(k)),
        "VictoriaMetrics answers where Prometheus does not"
    );
    assert!(
        !only_prometheus.is_empty()
            && only_prometheus
                .iter()
                .all(|t| (END - 2400..END - 2100).contains(t)),
        "Prometheus alone answers inside the scrape gap, for at most its 5 minute lookback: {only_prometheus:?}"
    );
    eprintln!(
        "gauge: {} points equal, {} only from Prometheus (the scrape gap)",
        both.len(),
        only_prometheus.len()
    );

    for step in [15, 60] {
        let rate = query("container_cpu_usage_seconds_total", step, true);
        let (pr, vr) = (
            points(&p.range_query(&rate).await.unwrap()),
            points(&v.range_query(&rate).await.unwrap()),
        );
        let rel: Vec<f64> = pr
            .iter()
            .filter_map(|(k, a)| vr.get(k).map(|b| (a - b).abs() / a.abs().max(1e-9)))
            .collect();
        let mean = |m: &BTreeMap<_, f64>| m.values().sum::<f64>() / m.len() as f64;
        let p95 = |m: &BTreeMap<_, f64>| percentile(m.values().copied().collect(), 0.95);
        let (mean_rel, p95_rel) = (
            (mean(&pr) - mean(&vr)).abs() / mean(&pr),
            (p95(&pr) - p95(&vr)).abs() / p95(&pr),
        );
        eprintln!(
            "rate[{}s] step {step}s: {} points compared, {} only from Prometheus, {} only from \
             VictoriaMetrics; per point median {:.1} % max {:.1} % apart; mean {:.2} % and p95 \
             {:.2} % apart",
            kerf::metrics::promql::range_rate_window_seconds(step),
            rel.len(),
            pr.keys().filter(|k| !vr.contains_key(*k)).count(),
            vr.keys().filter(|k| !pr.contains_key(*k)).count(),
            100.0 * percentile(rel.clone(), 0.5),
            100.0 * percentile(rel.clone(), 1.0),
            100.0 * mean_rel,
            100.0 * p95_rel,
        );
        // Point by point the engines part (few samples per window: Prometheus extrapolates at
        // most half an interval past its first and last sample, VictoriaMetrics measures from
        // the sample before the window); the percentile kerf recommends from does not.
        assert!(
            percentile(rel, 1.0) > 0.1,
            "step {step}: no difference left to document"
        );
        assert!(p95_rel < CPU_TOLERANCE, "step {step}: p95 {p95_rel}");
    }
}
