//! A small cluster and its usage, shared by the incremental-history tests (the file source's
//! and a real Prometheus's): two Deployments under one policy with 1-hour windows, five hours
//! of cAdvisor and kube-state-metrics samples every 15 s with a rollout, an OOM kill, a
//! five-minute CPU spike and a workload appearing mid-window; and the comparison of a kept
//! history's recommendations with the whole window's.
#![allow(dead_code)]

use std::fmt::Write as _;

use kerf::core::recommenders::cycle::CycleOutput;

pub const T0: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z
pub const HOURS: i64 = 5;
pub const SCRAPE: i64 = 15;

pub const POLICY: &str = r#"
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: RightsizingPolicy
metadata: {name: shop, namespace: shop}
spec:
  scope: {labelSelector: {matchLabels: {team: shop}}}
  automationStrategyRef: {name: s}
  resources:
    cpu: {mode: audit-only, percentile: 95, headroomPercent: 10, window: 1h}
    memory: {mode: audit-only, headroomPercent: 20, window: 1h}
---
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {name: s, namespace: shop}
spec: {}
"#;

/// A Deployment of the policy's team, one `app` container.
pub fn deployment(name: &str, replicas: u32, cpu: &str, memory: &str) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: shop, labels: {{team: shop}}}}\n\
         spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n\
         \x20   metadata: {{labels: {{app: {name}}}}}\n\
         \x20   spec: {{containers: [{{name: app, image: w, resources: {{requests: {{cpu: \"{cpu}\", memory: {memory}}}}}}}]}}\n"
    )
}

/// The time scale of the usage: `unit` seconds stand for the hour of the 1-hour windows (a
/// day for 1-day windows), sampled every `scrape` seconds.
#[derive(Clone, Copy)]
pub struct Scale {
    pub unit: i64,
    pub scrape: i64,
}

/// Five hours at 15 s, for 1-hour windows.
pub const HOURLY: Scale = Scale {
    unit: 3600,
    scrape: SCRAPE,
};

/// Pods of `web` (a rollout at 2.5 units replaces both), and of `late` from 3 units on.
pub fn pods(scale: Scale) -> Vec<(&'static str, i64, i64)> {
    let at = |hours: f64| T0 + (hours * scale.unit as f64) as i64;
    let (rollout, end) = (at(2.5), at(HOURS as f64));
    vec![
        ("web-6d4b8c7f9-bcdfg", T0, rollout),
        ("web-6d4b8c7f9-hjklm", T0, rollout),
        ("web-7c9d5b8f4-npqrs", rollout - 120, end),
        ("web-7c9d5b8f4-tvwxz", rollout - 120, end),
        ("late-5f6d7c8b9-bcdfg", at(3.0), end),
    ]
}

/// The usage of [`HOURLY`].
pub fn openmetrics() -> String {
    openmetrics_at(HOURLY)
}

/// Usage that varies: a slow wave, noise, a five-minute CPU spike at 1.17 units on one pod, a
/// ten-minute memory climb before an OOM kill at 2 units (kube-state-metrics reports it from then
/// on).
pub fn openmetrics_at(scale: Scale) -> String {
    let at = |hours: f64| T0 + (hours * scale.unit as f64) as i64;
    let (spike, oom_at) = (at(4200.0 / 3600.0), at(2.0));
    let mut cpu = String::from("# TYPE container_cpu_usage_seconds counter\n");
    let mut mem = String::from("# TYPE container_memory_working_set_bytes gauge\n");
    let mut oom = String::from("# TYPE kube_pod_container_status_last_terminated_reason gauge\n");
    for (p, (pod, from, to)) in pods(scale).into_iter().enumerate() {
        let mut counter = 0.0;
        let mut t = from;
        while t <= to {
            let i = (t - T0) / scale.scrape;
            let noise = ((i * 7919 + p as i64 * 104_729) % 97) as f64 / 97.0;
            let mut rate = 0.3 + 0.15 * ((i as f64) / 40.0 + p as f64).sin() + 0.1 * noise;
            if p == 0 && (spike..spike + 300).contains(&t) {
                rate = 1.8;
            }
            counter += rate * scale.scrape as f64;
            let labels = format!("namespace=\"shop\",pod=\"{pod}\",container=\"app\"");
            writeln!(
                cpu,
                "container_cpu_usage_seconds_total{{{labels}}} {counter:.3} {t}"
            )
            .unwrap();
            let mut bytes = 400e6 + 50e6 * noise + 20e6 * ((i as f64) / 25.0).cos();
            if p == 1 && (oom_at - 600..oom_at).contains(&t) {
                bytes += (t - oom_at + 600) as f64 * 1e6;
            }
            writeln!(
                mem,
                "container_memory_working_set_bytes{{{labels}}} {bytes:.0} {t}"
            )
            .unwrap();
            if p == 1 && t >= oom_at {
                writeln!(
                    oom,
                    "kube_pod_container_status_last_terminated_reason{{{labels},reason=\"OOMKilled\"}} 1 {t}"
                )
                .unwrap();
            }
            t += scale.scrape;
        }
    }
    format!("{cpu}{mem}{oom}# EOF\n")
}

/// (workload, cpu millicores, memory bytes) of every recommendation of a cycle.
pub fn recommended(out: &CycleOutput) -> Vec<(String, Option<i64>, Option<i64>)> {
    kerf::cli::bench::recommended_values(out)
}

pub fn close(a: Option<i64>, b: Option<i64>, rounding: u64) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) <= (b.unsigned_abs() / 100).max(rounding),
        (a, b) => a == b,
    }
}

/// The cluster's snapshot, its policy's windows 1 hour.
pub fn snapshot() -> kerf::core::snapshot::Snapshot {
    snapshot_with_window("1h")
}

/// The cluster's snapshot, its policy's windows `window`.
pub fn snapshot_with_window(window: &str) -> kerf::core::snapshot::Snapshot {
    let mut m = kerf::sources::dir::Manifests::default();
    let text = format!(
        "{}{}{}",
        POLICY.replace("window: 1h", &format!("window: {window}")),
        deployment("web", 2, "2", "2Gi"),
        deployment("late", 1, "1", "1Gi")
    );
    kerf::sources::dir::load_text(&text, "test", &mut m).unwrap();
    m.snapshot
}

/// Asserts that the kept history's recommendations are the whole window's, within 1 % or the
/// recipe's rounding (1 millicore, 1 MiB); returns how many were compared.
pub fn assert_close(full: &CycleOutput, kept: &CycleOutput, at: jiff::Timestamp) -> usize {
    let (want, got) = (recommended(full), recommended(kept));
    assert_eq!(
        want.iter().map(|w| &w.0).collect::<Vec<_>>(),
        got.iter().map(|g| &g.0).collect::<Vec<_>>(),
        "at {at}"
    );
    for (w, g) in want.iter().zip(&got) {
        assert!(
            close(g.1, w.1, 1) && close(g.2, w.2, 1 << 20),
            "at {at}: {g:?} from the kept history, {w:?} from the whole window"
        );
    }
    want.len()
}

/// Usage of `web`'s two pods that holds still but for noise below the recipe's rounding (CPU
/// within a hundredth of a millicore, the working set within a kilobyte), for three hours.
pub fn still_openmetrics() -> String {
    let mut cpu = String::from("# TYPE container_cpu_usage_seconds counter\n");
    let mut mem = String::from("# TYPE container_memory_working_set_bytes gauge\n");
    for (p, pod) in ["web-6d4b8c7f9-bcdfg", "web-6d4b8c7f9-hjklm"]
        .into_iter()
        .enumerate()
    {
        let labels = format!("namespace=\"shop\",pod=\"{pod}\",container=\"app\"");
        let mut counter = 0.0;
        let mut t = T0;
        while t <= T0 + 3 * 3600 {
            let i = (t - T0) / SCRAPE;
            let noise = ((i * 7919 + p as i64 * 104_729) % 97) as f64 / 97.0;
            counter += (0.4003 + 1e-5 * noise) * SCRAPE as f64;
            writeln!(
                cpu,
                "container_cpu_usage_seconds_total{{{labels}}} {counter:.7} {t}"
            )
            .unwrap();
            let bytes = 300e6 + 1000.0 * noise;
            writeln!(
                mem,
                "container_memory_working_set_bytes{{{labels}}} {bytes:.0} {t}"
            )
            .unwrap();
            t += SCRAPE;
        }
    }
    format!("{cpu}{mem}# EOF\n")
}
