//! `kerf bench scale`: full GPU reconcile cycles over a synthetic cluster (default 25,000 GPU
//! workloads / 33,000 pods), measuring wall time, CPU seconds, peak RSS and Prometheus queries.
//! Engine only (synthetic in-memory samples) or against a real Prometheus loaded with the same
//! data (`--write-openmetrics` writes it for `promtool tsdb create-blocks-from openmetrics`).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use jiff::{SignedDuration, Timestamp};

use crate::api::{GpuReactivePolicySpec, PolicyType, StrategyView, WorkloadKind};
use crate::core::accelerator::NVIDIA_KAI;
use crate::core::model::{PolicyId, WorkloadKey};
use crate::core::pod::{
    Container, Meta, OwnerRef, Pod, PodSpec, PodStatus, PodTemplateSpec, Strings, TemplateMeta,
};
use crate::core::snapshot::{GpuPolicy, Snapshot, StrategyKey, Workload};
use crate::metrics::{MetricError, MetricSource, RangeQuery, SeriesKey, SeriesSet};

pub const COMPUTE_METRIC: &str = "kubex_gpu_container_sm_utilization_percent";
pub const MEMORY_METRIC: &str = "kubex_gpu_container_memory_footprint_percent";

#[derive(Clone, Copy, Debug)]
pub struct ScaleSpec {
    pub workloads: usize,
    pub pods: usize,
    pub namespaces: usize,
    /// One namespaced policy per namespace.
    pub step_seconds: i64,
}

impl Default for ScaleSpec {
    fn default() -> Self {
        Self {
            workloads: 25_000,
            pods: 33_000,
            namespaces: 50,
            step_seconds: 15,
        }
    }
}

fn policy_spec() -> GpuReactivePolicySpec {
    let yaml = format!(
        r#"
experimental: {{gpuKaiContract: v1alpha1-2026-07}}
scope: {{containers: [inference]}}
minPodMetricsAge: 15m
metrics:
  compute: {{prometheus: {{metric: {COMPUTE_METRIC}, interpretation: fullGPU}}}}
  memory: {{prometheus: {{metric: {MEMORY_METRIC}, interpretation: currentAllocation}}}}
automationStrategyRef: {{name: bench}}
"#
    );
    serde_saphyr::from_str(&yaml).expect("static bench policy parses")
}

/// The synthetic namespaces, shared by every bench cluster.
pub(crate) fn namespace(i: usize) -> String {
    format!("team-{i:03}")
}

/// FNV-1a offset basis and prime: a cheap deterministic hash for synthetic values.
pub(crate) const FNV_OFFSET: u64 = 1469598103934665603;

/// FNV-1a of `bytes` continued from the state `h`.
pub(crate) fn fnv1a(mut h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
    }
    h
}

/// The `bench` automation strategy every bench policy of namespace `ns` names.
pub(crate) fn add_bench_strategy(s: &mut Snapshot, ns: String) {
    s.strategies.insert(
        StrategyKey {
            namespace: Some(ns.into()),
            name: "bench".into(),
        },
        Arc::new(StrategyView::default()),
    );
}

/// A one-replica Deployment with `template`.
pub(crate) fn deployment(ns: String, name: String, template: PodTemplateSpec) -> Arc<Workload> {
    Arc::new(Workload {
        key: WorkloadKey::new(ns, WorkloadKind::Deployment, name),
        uid: None,
        labels: Strings::new(),
        annotations: Strings::new(),
        template,
        replicas: Some(1),
        field_managers: Vec::new(),
        ownership: Default::default(),
    })
}

/// A running pod of ReplicaSet `replicaset`, started at `started`.
pub(crate) fn running_pod(
    (ns, name): (String, String),
    replicaset: String,
    annotations: Option<Strings>,
    containers: Vec<Container>,
    started: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: Meta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            annotations,
            owner_references: Some(vec![OwnerRef {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: replicaset.into(),
                controller: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        status: Some(PodStatus {
            start_time: Some(started.clone()),
            phase: Some("Running".into()),
            ..Default::default()
        }),
    })
}

/// (namespace, pod name) of every synthetic pod, workload by workload.
fn pod_names(spec: &ScaleSpec) -> Vec<(usize, String, String)> {
    let mut out = Vec::with_capacity(spec.pods);
    for p in 0..spec.pods {
        let w = p % spec.workloads;
        let ns = namespace(w % spec.namespaces);
        out.push((w, ns, format!("gpu-{w:05}-rs-{p:05}")));
    }
    out
}

/// The synthetic cluster: every workload a KAI 0.5-GPU Deployment with an inference container and
/// a sidecar; pods spread round-robin so 33,000 pods cover 25,000 workloads.
pub fn synth_snapshot(spec: &ScaleSpec, now: Timestamp) -> Snapshot {
    // Exact capacities: the reader's snapshot is built from sized stores, without growth slack.
    let mut s = Snapshot {
        workloads: Vec::with_capacity(spec.workloads),
        pods: Vec::with_capacity(spec.pods),
        ..Default::default()
    };
    for n in 0..spec.namespaces {
        let ns = namespace(n);
        s.gpu_policies.push(GpuPolicy {
            id: PolicyId {
                kind: "GpuReactivePolicy".into(),
                namespace: Some(ns.as_str().into()),
                name: "gpu".into(),
            },
            policy_type: PolicyType::GpuReactivePolicy,
            creation: None,
            generation: None,
            spec: policy_spec(),
            status: None,
        });
        add_bench_strategy(&mut s, ns);
    }
    let containers = vec![
        Container {
            name: "inference".into(),
            ..Default::default()
        },
        Container {
            name: "proxy".into(),
            ..Default::default()
        },
    ];
    let annotations = Strings::from([(
        NVIDIA_KAI.fraction_annotation.to_string(),
        "0.5".to_string(),
    )]);
    for w in 0..spec.workloads {
        let ns = namespace(w % spec.namespaces);
        s.workloads.push(deployment(
            ns.clone(),
            format!("gpu-{w:05}"),
            PodTemplateSpec {
                metadata: Some(TemplateMeta {
                    annotations: Some(annotations.clone()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: containers.clone(),
                    ..Default::default()
                }),
            },
        ));
        s.replicaset_owners.insert(
            (ns.into(), format!("gpu-{w:05}-rs").into()),
            format!("gpu-{w:05}").into(),
        );
    }
    let started =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now - SignedDuration::from_hours(2));
    for (w, ns, name) in pod_names(spec) {
        s.pods.push(running_pod(
            (ns, name),
            format!("gpu-{w:05}-rs"),
            Some(annotations.clone()),
            containers.clone(),
            &started,
        ));
    }
    s
}

/// Deterministic sample value of a pod at a time: a third of the pods run hot.
fn value(metric: &str, pod: &str, t: i64) -> f64 {
    SeriesValues::new(metric, pod).at(t)
}

/// [`value`] for one series: the hash of its names and its hot flag computed once, so the
/// synthetic source costs little next to what it stands in for (decoding Prometheus's answer).
struct SeriesValues {
    /// FNV-1a state after the metric and pod names.
    prefix: u64,
    base: f64,
}

impl SeriesValues {
    fn new(metric: &str, pod: &str) -> Self {
        let h = fnv1a(FNV_OFFSET, metric.bytes().chain(pod.bytes()));
        let hot = pod.bytes().map(u64::from).sum::<u64>() % 3 == 0;
        Self {
            prefix: h,
            base: if hot { 60.0 } else { 20.0 },
        }
    }

    fn at(&self, t: i64) -> f64 {
        let h = fnv1a(self.prefix, t.to_le_bytes());
        self.base + (h % 200) as f64 / 10.0
    }
}

/// In-memory samples with the same values `write_openmetrics` writes.
pub struct SynthSource {
    pub spec: ScaleSpec,
    pub queries: AtomicUsize,
}

impl MetricSource for SynthSource {
    /// The GPU bench has no rightsizing policy: nothing asks.
    async fn window_query(
        &self,
        _q: &crate::metrics::WindowQuery,
    ) -> Result<crate::metrics::WindowSet, MetricError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        Ok(Default::default())
    }

    async fn range_query(&self, q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        let mut set = SeriesSet::default();
        let (start, end) = (q.start.as_second(), q.end.as_second());
        for pod in q.pods.iter() {
            let ns = pod_namespace(&self.spec, pod);
            let series = SeriesValues::new(&q.metric, pod);
            let samples = (0..)
                .map(|i| start + i * q.step_seconds)
                .take_while(|t| *t <= end)
                .map(|t| (t, series.at(t)))
                .collect();
            set.series.insert(
                SeriesKey {
                    namespace: ns,
                    pod: pod.clone(),
                    container: "inference".into(),
                },
                samples,
            );
        }
        Ok(set)
    }
}

/// Synthetic pod names (`gpu-<workload>-rs-<pod>`) encode their workload, which gives the namespace.
fn pod_namespace(spec: &ScaleSpec, pod: &str) -> String {
    let w: usize = pod.get(4..9).and_then(|s| s.parse().ok()).unwrap_or(0);
    namespace(w % spec.namespaces)
}

/// Writes the same samples as OpenMetrics (seconds timestamps, ascending), covering
/// `[now − 20m, now]` on the step grid.
pub fn write_openmetrics(
    spec: &ScaleSpec,
    now: Timestamp,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let pods = pod_names(spec);
    let end = now.as_second();
    let start = end - 20 * 60;
    for metric in [COMPUTE_METRIC, MEMORY_METRIC] {
        writeln!(out, "# TYPE {metric} gauge")?;
        for (_, ns, pod) in &pods {
            let mut t = start;
            while t <= end {
                writeln!(
                    out,
                    "{metric}{{namespace=\"{ns}\",pod=\"{pod}\",container=\"inference\"}} {} {t}",
                    value(metric, pod, t)
                )?;
                t += spec.step_seconds;
            }
        }
    }
    writeln!(out, "# EOF")
}

/// A `/api/v1/query_range` answer as Prometheus writes it for one of the bench's batched
/// queries (`sum by (namespace,pod,container)`): `series` series of `points` samples each.
pub fn query_range_body(series: usize, points: usize) -> Vec<u8> {
    let mut out = String::from(r#"{"status":"success","data":{"resultType":"matrix","result":["#);
    for s in 0..series {
        if s > 0 {
            out.push(',');
        }
        let pod = format!("gpu-{:05}-rs-{s:05}", s % 25_000);
        out.push_str(&format!(
            r#"{{"metric":{{"container":"inference","namespace":"team-{:03}","pod":"{pod}"}},"values":["#,
            s % 50
        ));
        for p in 0..points {
            if p > 0 {
                out.push(',');
            }
            let t = 1_767_268_800 + 15 * p as i64;
            out.push_str(&format!("[{t},\"{}\"]", value(COMPUTE_METRIC, &pod, t)));
        }
        out.push_str("]}");
    }
    out.push_str("]}}");
    out.into_bytes()
}

/// CPU seconds (user + system) of this process so far, from /proc (Linux).
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux ABI kerf targets.
    Some(ticks / 100.0)
}

/// Peak resident set size in MiB (VmHWM), from /proc (Linux).
pub fn peak_rss_mib() -> Option<f64> {
    proc_status_mib("VmHWM:")
}

/// Current resident set size in MiB (VmRSS), from /proc (Linux).
pub fn rss_mib() -> Option<f64> {
    proc_status_mib("VmRSS:")
}

fn proc_status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_cluster_has_the_requested_size_and_every_pod_resolves_to_its_workload() {
        let spec = ScaleSpec {
            workloads: 100,
            pods: 132,
            namespaces: 5,
            step_seconds: 15,
        };
        let now = "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap();
        let s = synth_snapshot(&spec, now);
        assert_eq!(
            (s.workloads.len(), s.pods.len(), s.gpu_policies.len()),
            (100, 132, 5)
        );
        let plan = crate::core::recommenders::gpu::plan(&s, now, 15);
        assert_eq!(plan.workloads.len(), 100);
        assert_eq!(plan.queries.len(), 10, "one query per policy and signal");
        assert_eq!(
            plan.workloads.iter().map(|w| w.pods.len()).sum::<usize>(),
            132
        );
        for (_, _, q) in &plan.queries {
            for pod in q.pods.iter() {
                assert!(q.namespaces.contains(&pod_namespace(&spec, pod)));
            }
        }
    }
}
