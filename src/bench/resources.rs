//! `kerf bench resources`: a CPU/memory cycle over a synthetic cluster (default 25,000
//! Deployments / 33,000 pods, one RightsizingPolicy with 7-day windows per namespace) against a
//! real Prometheus loaded with seven days of synthetic cAdvisor history
//! (`--write-openmetrics` writes it for `promtool tsdb create-blocks-from openmetrics`). See
//! docs/performance.md.
//!
//! The history is what a cluster leaves: every pod's CPU counter and working set at a coarse
//! scrape interval (which keeps the backfill small), CFS counters for the pods with a CPU
//! limit, for the workloads rolled out mid-window the replaced pods' first half, and for half of
//! those the OOM kill kube-state-metrics recorded in a replaced pod.

use std::io::Write;

use jiff::Timestamp;

use crate::api::{PolicyType, RightsizingPolicySpec};
use crate::bench::scale::{
    FNV_OFFSET, add_bench_strategy, deployment, fnv1a, namespace, running_pod,
};
use crate::core::model::PolicyId;
use crate::core::pod::{Container, PodSpec, PodTemplateSpec, Resources};
use crate::core::recommenders::resources::LAST_TERMINATED_METRIC;
use crate::core::recommenders::resources::container::OOM_KILLED;
use crate::core::snapshot::{RsPolicy, Snapshot};
use crate::support::small_map::SmallMap;

#[derive(Clone, Copy, Debug)]
pub struct HistorySpec {
    pub workloads: usize,
    pub pods: usize,
    pub namespaces: usize,
    /// Days of history written (the policies' windows are 7 days).
    pub days: i64,
    /// Seconds between two synthetic scrapes.
    pub scrape_seconds: i64,
}

impl Default for HistorySpec {
    fn default() -> Self {
        Self {
            workloads: 25_000,
            pods: 33_000,
            namespaces: 50,
            days: 7,
            scrape_seconds: 3_600,
        }
    }
}

/// The characters of Kubernetes' generated name suffixes.
const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `len` characters of `SAFE` from `n`: a deterministic pod-template-hash or pod suffix.
fn safe(mut n: u64, len: usize) -> String {
    let mut out = String::with_capacity(len);
    for _ in 0..len {
        out.push(SAFE[(n % SAFE.len() as u64) as usize] as char);
        n = n / SAFE.len() as u64 + 7919;
    }
    out
}

fn workload_name(w: usize) -> String {
    format!("svc-{w:05}")
}

/// Every tenth workload was rolled out in the middle of the window: its old ReplicaSet's pods
/// have the first half of the history, today's the second.
fn rolled_out(w: usize) -> bool {
    w % 10 == 3
}

/// Every twentieth workload (half of those rolled out) had its replaced pods OOM-killed in the
/// first half of the window: the OOM kill only kube-state-metrics' history still shows.
fn oom_killed(w: usize) -> bool {
    rolled_out(w) && w % 20 == 3
}

/// Every tenth pod has a CPU limit (and so CFS counters).
fn limited(p: usize) -> bool {
    p % 10 == 7
}

/// (workload, namespace, ReplicaSet, pod) of today's pods, pods spread round-robin.
fn pods(spec: &HistorySpec) -> Vec<(usize, String, String, String)> {
    (0..spec.pods)
        .map(|p| {
            let w = p % spec.workloads;
            let rs = format!("{}-{}", workload_name(w), safe(w as u64 * 31 + 1, 9));
            let pod = format!("{rs}-{}", safe(p as u64 * 131 + 5, 5));
            (w, namespace(w % spec.namespaces), rs, pod)
        })
        .collect()
}

/// The bench's policy; its CPU rate window holds two of the history's scrapes (1 minute at
/// 30-s scrapes, 2 hours at the coarse default).
fn policy_spec(scrape_seconds: i64) -> RightsizingPolicySpec {
    let rate = (2 * scrape_seconds).max(60);
    let yaml = format!(
        r#"
automationStrategyRef: {{name: bench}}
resources:
  cpu: {{mode: auto-patch, percentile: 95, headroomPercent: 15, window: 7d, rateWindow: {rate}s}}
  memory: {{mode: audit-only, headroomPercent: 20, window: 7d}}
"#
    );
    serde_saphyr::from_str(&yaml).expect("bench policy parses")
}

/// The synthetic cluster: one RightsizingPolicy per namespace, Deployments with one `app`
/// container (500m, 512Mi), today's pods.
pub fn synth_snapshot(spec: &HistorySpec, now: Timestamp) -> Snapshot {
    let mut s = Snapshot {
        workloads: Vec::with_capacity(spec.workloads),
        pods: Vec::with_capacity(spec.pods),
        ..Default::default()
    };
    for n in 0..spec.namespaces {
        let ns = namespace(n);
        s.rightsizing_policies.push(RsPolicy {
            id: PolicyId {
                kind: "RightsizingPolicy".into(),
                namespace: Some(ns.as_str().into()),
                name: "rs".into(),
            },
            policy_type: PolicyType::RightsizingPolicy,
            creation: None,
            generation: None,
            spec: policy_spec(spec.scrape_seconds),
            status: None,
        });
        add_bench_strategy(&mut s, ns);
    }
    let container = |limit: bool| {
        let requests = SmallMap::from([
            ("cpu".to_string(), crate::core::quantity::cpu_quantity(500)),
            (
                "memory".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("512Mi".into()),
            ),
        ]);
        let limits = limit.then(|| {
            SmallMap::from([("cpu".to_string(), crate::core::quantity::cpu_quantity(1000))])
        });
        Container {
            name: "app".into(),
            resources: Some(Box::new(Resources {
                requests: Some(requests),
                limits,
            })),
            ..Default::default()
        }
    };
    for w in 0..spec.workloads {
        let ns = namespace(w % spec.namespaces);
        s.workloads.push(deployment(
            ns,
            workload_name(w),
            PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![container(false)],
                    ..Default::default()
                }),
            },
        ));
    }
    let started = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        now - jiff::SignedDuration::from_hours(72),
    );
    for (p, (w, ns, rs, pod)) in pods(spec).into_iter().enumerate() {
        s.replicaset_owners.insert(
            (ns.as_str().into(), rs.as_str().into()),
            workload_name(w).into(),
        );
        s.pods.push(running_pod(
            (ns, pod),
            rs,
            None,
            vec![container(limited(p))],
            &started,
        ));
    }
    s
}

/// Deterministic usage of a pod at a time, in [0, 1): a third of the workloads run hot.
fn noise(pod: &str, t: i64) -> f64 {
    let h = fnv1a(FNV_OFFSET, pod.bytes().chain(t.to_le_bytes()));
    (h % 1000) as f64 / 1000.0
}

/// One pod's series over `[from, to]`: the CPU counter, the working set and (with a limit) the
/// CFS counters.
fn write_pod(
    out: &mut impl Write,
    spec: &HistorySpec,
    (ns, pod, w, limit): (&str, &str, usize, bool),
    (from, to): (i64, i64),
) -> std::io::Result<()> {
    let labels = format!("namespace=\"{ns}\",pod=\"{pod}\",container=\"app\"");
    let cores = if w % 3 == 0 { 0.6 } else { 0.2 };
    let step = spec.scrape_seconds;
    let (mut cpu, mut throttled, mut periods) = (0.0, 0.0, 0.0);
    let mut t = from;
    while t <= to {
        let n = noise(pod, t);
        writeln!(
            out,
            "container_cpu_usage_seconds_total{{{labels}}} {cpu:.3} {t}"
        )?;
        writeln!(
            out,
            "container_memory_working_set_bytes{{{labels}}} {} {t}",
            (200.0 + 200.0 * n).round() * 1_048_576.0
        )?;
        if limit {
            writeln!(
                out,
                "container_cpu_cfs_throttled_periods_total{{{labels}}} {throttled} {t}"
            )?;
            writeln!(
                out,
                "container_cpu_cfs_periods_total{{{labels}}} {periods} {t}"
            )?;
        }
        cpu += cores * (0.5 + n) * step as f64;
        periods += 10.0 * step as f64;
        throttled += if n > 0.9 { step as f64 } else { 0.0 };
        t += step;
    }
    Ok(())
}

/// kube-state-metrics' last termination reason `OOMKilled` of a pod's `app` container over
/// `[from, to]` (the pod ran on after the kill).
fn write_oom_killed(
    out: &mut impl Write,
    spec: &HistorySpec,
    (ns, pod): (&str, &str),
    (from, to): (i64, i64),
) -> std::io::Result<()> {
    let mut t = from;
    while t <= to {
        writeln!(
            out,
            "{LAST_TERMINATED_METRIC}{{namespace=\"{ns}\",pod=\"{pod}\",container=\"app\",reason=\"{OOM_KILLED}\"}} 1 {t}"
        )?;
        t += spec.scrape_seconds;
    }
    Ok(())
}

/// The synthetic history, `spec.days` days up to `now`, as OpenMetrics. Series are written
/// one after the other, each in ascending time (what promtool needs); the families' `# TYPE`
/// lines come first.
pub fn write_openmetrics(
    spec: &HistorySpec,
    now: Timestamp,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let end = now.as_second();
    let start = end - spec.days * 86_400;
    let mid = start + (end - start) / 2;
    for (family, kind) in [
        ("container_cpu_usage_seconds", "counter"),
        ("container_memory_working_set_bytes", "gauge"),
        ("container_cpu_cfs_throttled_periods", "counter"),
        ("container_cpu_cfs_periods", "counter"),
        (LAST_TERMINATED_METRIC, "gauge"),
    ] {
        writeln!(out, "# TYPE {family} {kind}")?;
    }
    for (p, (w, ns, rs, pod)) in pods(spec).into_iter().enumerate() {
        if rolled_out(w) {
            let old = format!("{}-{}", workload_name(w), safe(w as u64 * 37 + 2, 8));
            let old_pod = format!("{old}-{}", safe(p as u64 * 137 + 3, 5));
            write_pod(out, spec, (&ns, &old_pod, w, limited(p)), (start, mid))?;
            if oom_killed(w) {
                let killed = start + (mid - start) / 2;
                write_oom_killed(out, spec, (&ns, &old_pod), (killed, mid))?;
            }
            write_pod(
                out,
                spec,
                (&ns, &pod, w, limited(p)),
                (mid + spec.scrape_seconds, end),
            )?;
        } else {
            write_pod(out, spec, (&ns, &pod, w, limited(p)), (start, end))?;
        }
        let _ = rs;
    }
    writeln!(out, "# EOF")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WorkloadKind;
    use crate::core::recommenders::resources::{RsQuery, RsSignal};
    use crate::metrics::window::pod_name_suffix;

    #[test]
    fn synthetic_pods_follow_their_deployments_name_pattern_and_resolve_to_it() {
        let spec = HistorySpec {
            workloads: 100,
            pods: 132,
            namespaces: 5,
            ..Default::default()
        };
        let now: Timestamp = "2026-01-08T00:00:00Z".parse().unwrap();
        let s = synth_snapshot(&spec, now);
        assert_eq!(
            (
                s.workloads.len(),
                s.pods.len(),
                s.rightsizing_policies.len()
            ),
            (100, 132, 5)
        );
        let suffix =
            regex::Regex::new(&format!("^{}$", pod_name_suffix(WorkloadKind::Deployment))).unwrap();
        for (w, _, _, pod) in pods(&spec) {
            let rest = pod.strip_prefix(&workload_name(w)).unwrap();
            assert!(suffix.is_match(rest), "{pod}");
        }
        let plan = crate::core::recommenders::resources::plan(&s, now, 1800, None);
        assert_eq!(plan.workloads.len(), 100);
        assert_eq!(
            plan.queries.len(),
            5 * 7,
            "5 policies of one batch, 7 window queries per batch"
        );
        assert_eq!(
            plan.workloads.iter().map(|w| w.pods.len()).sum::<usize>(),
            132,
            "every pod resolves to its workload"
        );
        let mut text = Vec::new();
        write_openmetrics(&spec, now, &mut text).unwrap();
        let src = crate::metrics::file::FileSource::from_str(std::str::from_utf8(&text).unwrap());
        assert!(src.is_ok(), "the history parses: {:?}", src.as_ref().err());
        // The OOM-kill queries find the workloads whose replaced pods were OOM-killed.
        let mut killed = Vec::new();
        for (_, signal, q) in &plan.queries {
            if let (RsSignal::OomKilled, RsQuery::Window { query, .. }) = (signal, q) {
                let set = src.as_ref().unwrap().evaluate_window(query).unwrap();
                killed.extend(set.values.into_keys().map(|k| k.workload));
            }
        }
        killed.sort();
        let want: Vec<String> = (0..100)
            .filter(|&w| oom_killed(w))
            .map(|w| format!("Deployment/{}", workload_name(w)))
            .collect();
        assert_eq!(killed, want);
    }
}
