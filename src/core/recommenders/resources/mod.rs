//! Whole-snapshot CPU/memory evaluation (RightsizingPolicy / ClusterRightsizingPolicy), in the
//! same two pure halves as the GPU one: [`plan`] picks the winning policy per workload and the
//! batched queries (one per policy and signal), [`evaluate`] builds each workload's input for
//! [`workload::evaluate_workload`].

pub mod container;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::core::pod::Pod;
use jiff::{SignedDuration, Timestamp};

use self::container::{ContainerSignals, Sample};
use self::workload::{ContainerInput, HpaInput, RightsizingOutcome, WorkloadInput};
use crate::core::hpa::{self, ReplicaHistory};
use crate::core::model::{PolicyId, WorkloadKey};
use crate::core::recommenders::gpu::engine::ContainerOutcome as GpuContainer;
use crate::core::recommenders::gpu::{covering, pods_by_owner};
use crate::core::selection::{self, Candidate};
use crate::core::snapshot::Snapshot;
use crate::metrics::{Aggregation, RangeQuery, SeriesSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;

/// cAdvisor metric names kerf reads (namespace/pod/container labels).
pub const CPU_USAGE_METRIC: &str = "container_cpu_usage_seconds_total";
pub const MEMORY_METRIC: &str = "container_memory_working_set_bytes";
pub const THROTTLED_PERIODS_METRIC: &str = "container_cpu_cfs_throttled_periods_total";
pub const PERIODS_METRIC: &str = "container_cpu_cfs_periods_total";

/// Throttled when at some point of the window at least this share of CFS periods was throttled.
pub const THROTTLED_RATIO: f64 = 0.05;

/// Range queries stay below this many points: long windows (7d) use a coarser step.
const MAX_POINTS: i64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RsSignal {
    Cpu,
    Memory,
    ThrottledPeriods,
    Periods,
    /// kube-state-metrics: the HPAs' current replicas (docs/design/hpa-coordination.md#h7).
    HpaCurrentReplicas,
    /// kube-state-metrics: the HPAs' `spec.maxReplicas`.
    HpaMaxReplicas,
}

impl RsSignal {
    /// The per-container signals, queried for every policy with pods.
    pub const ALL: [RsSignal; 4] = [
        RsSignal::Cpu,
        RsSignal::Memory,
        RsSignal::ThrottledPeriods,
        RsSignal::Periods,
    ];
    /// The HPA replica history, queried for every policy whose workloads have an HPA.
    pub const REPLICAS: [RsSignal; 2] = [RsSignal::HpaCurrentReplicas, RsSignal::HpaMaxReplicas];

    pub fn metric(self) -> &'static str {
        match self {
            RsSignal::Cpu => CPU_USAGE_METRIC,
            RsSignal::Memory => MEMORY_METRIC,
            RsSignal::ThrottledPeriods => THROTTLED_PERIODS_METRIC,
            RsSignal::Periods => PERIODS_METRIC,
            RsSignal::HpaCurrentReplicas => hpa::KSM_CURRENT_REPLICAS,
            RsSignal::HpaMaxReplicas => hpa::KSM_MAX_REPLICAS,
        }
    }
}

/// The windows of a policy's recipes, in seconds: (cpu, memory).
fn windows(spec: &crate::api::RightsizingPolicySpec) -> (i64, i64) {
    let cpu = spec.resources.cpu.clone().unwrap_or_default().window;
    let memory = spec.resources.memory.clone().unwrap_or_default().window;
    (cpu.seconds() as i64, memory.seconds() as i64)
}

/// The range query of one signal selecting `series` (namespace, pod — or HPA — name) over the
/// last `window` seconds.
fn range_query(
    signal: RsSignal,
    series: &BTreeSet<(String, String)>,
    window: i64,
    now: Timestamp,
    step_seconds: i64,
) -> RangeQuery {
    let sorted = |v: Vec<String>| -> Vec<String> {
        v.into_iter().collect::<BTreeSet<_>>().into_iter().collect()
    };
    let replicas = RsSignal::REPLICAS.contains(&signal);
    RangeQuery {
        metric: signal.metric().into(),
        namespace_label: "namespace".into(),
        pod_label: if replicas { hpa::KSM_HPA_LABEL } else { "pod" }.into(),
        container_label: if replicas { "" } else { "container" }.into(),
        namespaces: sorted(series.iter().map(|(ns, _)| ns.clone()).collect()),
        pods: sorted(series.iter().map(|(_, p)| p.clone()).collect()),
        start: now - SignedDuration::from_secs(window),
        end: now,
        step_seconds: step_for(window, step_seconds),
        counter: Some(matches!(
            signal,
            RsSignal::Cpu | RsSignal::ThrottledPeriods | RsSignal::Periods
        )),
        // Several kube-state-metrics replicas export the same value: one value, not a sum.
        aggregation: if replicas {
            Aggregation::Max
        } else {
            Aggregation::Sum
        },
    }
}

#[derive(Clone, Debug)]
pub struct RsWorkloadPlan {
    pub workload: usize,
    pub policy: usize,
    pub pods: Vec<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct RsPlan {
    pub workloads: Vec<RsWorkloadPlan>,
    pub queries: Vec<(usize, RsSignal, RangeQuery)>,
    /// Policies whose strategy does not resolve, with the message for their status: they still
    /// recommend, and are not applied.
    pub unresolved: BTreeMap<usize, String>,
}

/// The step for a window: at least `step`, coarse enough to stay under [`MAX_POINTS`].
pub fn step_for(window_seconds: i64, step: i64) -> i64 {
    step.max((window_seconds + MAX_POINTS - 1) / MAX_POINTS)
}

pub fn plan(snapshot: &Snapshot, now: Timestamp, step_seconds: i64) -> RsPlan {
    let mut out = RsPlan::default();
    for (i, p) in snapshot.rightsizing_policies.iter().enumerate() {
        let name = &p.spec.automation_strategy_ref.name;
        if let Some(why) = snapshot.unresolved_strategy(p.id.namespace.as_deref(), name) {
            out.unresolved.insert(i, why);
        }
    }
    let pods_by_owner = pods_by_owner(snapshot);
    let hpas = hpa::hpa_index(&snapshot.hpas);
    let mut per_policy: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    let mut hpas_per_policy: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    for (wi, w) in snapshot.workloads.iter().enumerate() {
        if snapshot
            .global
            .protected_namespaces
            .contains(&w.key.namespace)
        {
            continue;
        }
        let covering: Vec<(usize, Candidate<'_>)> =
            covering(&snapshot.rightsizing_policies, w, |p| Candidate {
                id: &p.id,
                policy_type: p.policy_type,
                scope: &p.spec.scope,
                weight: p.spec.weight,
                creation: p.creation,
            })
            .into_iter()
            .collect();
        let candidates: Vec<Candidate<'_>> = covering.iter().map(|(_, c)| c.clone()).collect();
        let Some(winner) = selection::single_winner(&candidates, &snapshot.precedence) else {
            continue;
        };
        let Some(policy) = covering
            .iter()
            .find(|(_, c)| c.id == winner.id)
            .map(|(i, _)| *i)
        else {
            continue;
        };
        let pods = pods_by_owner.get(&w.key).cloned().unwrap_or_default();
        for &pi in &pods {
            let pod = &snapshot.pods[pi];
            if pod.metadata.deletion_timestamp.is_none() {
                per_policy.entry(policy).or_default().insert((
                    w.key.namespace.clone(),
                    pod.metadata.name.clone().unwrap_or_default(),
                ));
            }
        }
        let key = (
            w.key.namespace.as_str(),
            w.key.kind.as_str(),
            w.key.name.as_str(),
        );
        if let Some(h) = hpas.get(&key) {
            hpas_per_policy.entry(policy).or_default().insert((
                w.key.namespace.clone(),
                h.metadata.name.clone().unwrap_or_default(),
            ));
        }
        out.workloads.push(RsWorkloadPlan {
            workload: wi,
            policy,
            pods,
        });
    }
    for (pi, pods) in per_policy {
        let (cpu_window, mem_window) = windows(&snapshot.rightsizing_policies[pi].spec);
        for signal in RsSignal::ALL {
            let window = if signal == RsSignal::Memory {
                mem_window
            } else {
                cpu_window
            };
            out.queries.push((
                pi,
                signal,
                range_query(signal, &pods, window, now, step_seconds),
            ));
        }
    }
    // The HPAs' replica history over the longer window, batched like the rest: one query per
    // policy and series (docs/design/hpa-coordination.md#h7).
    for (pi, hpas) in hpas_per_policy {
        let (cpu_window, mem_window) = windows(&snapshot.rightsizing_policies[pi].spec);
        for signal in RsSignal::REPLICAS {
            out.queries.push((
                pi,
                signal,
                range_query(signal, &hpas, cpu_window.max(mem_window), now, step_seconds),
            ));
        }
    }
    out
}

/// One workload's CPU/memory outcome.
#[derive(Clone, Debug)]
pub struct RsResult {
    pub key: WorkloadKey,
    pub policy: PolicyId,
    /// Err = the policy cannot be used (field-named message).
    pub outcome: Result<RightsizingOutcome, String>,
    pub metrics_unavailable: bool,
}

/// Per (policy, signal): samples by (namespace, pod, container).
type Index = HashMap<(usize, RsSignal), HashMap<(String, String, String), Vec<Sample>>>;

fn index(results: BTreeMap<(usize, RsSignal), SeriesSet>) -> Index {
    results
        .into_iter()
        .map(|(k, set)| {
            let m = set
                .series
                .into_iter()
                .map(|(key, v)| ((key.namespace, key.pod, key.container), v))
                .collect();
            (k, m)
        })
        .collect()
}

/// The HPA's kube-state-metrics replica history over the window of the resource it scales on
/// (docs/design/hpa-coordination.md#h7); `None` when there is no current-replicas series for it.
fn replica_history(
    idx: &Index,
    policy: usize,
    namespace: &str,
    h: &HorizontalPodAutoscaler,
    spec: &crate::api::RightsizingPolicySpec,
    now: Timestamp,
) -> Option<ReplicaHistory> {
    let a = hpa::analyze_metrics(h);
    let resource = a
        .supported
        .or(a.first_target)
        .map(|(r, _)| r)
        .or_else(|| a.utilization_resources.first().copied());
    let (cpu_window, mem_window) = windows(spec);
    let window = match resource {
        Some(hpa::HpaResource::Memory) => mem_window,
        _ => cpu_window,
    };
    let from = now.as_second() - window;
    let key = (
        namespace.to_string(),
        h.metadata.name.clone().unwrap_or_default(),
        String::new(),
    );
    let in_window = |signal: RsSignal| -> Option<Vec<Sample>> {
        let samples = idx.get(&(policy, signal))?.get(&key)?;
        Some(
            samples
                .iter()
                .filter(|(t, _)| *t > from && *t <= now.as_second())
                .copied()
                .collect(),
        )
    };
    Some(ReplicaHistory {
        current: in_window(RsSignal::HpaCurrentReplicas)?,
        max: in_window(RsSignal::HpaMaxReplicas).unwrap_or_default(),
    })
}

/// Evaluates every planned workload. `gpu` carries the GPU engine's per-container values so the
/// recommendation resource shows them and counts them in savings.
pub fn evaluate(
    snapshot: &Snapshot,
    plan: &RsPlan,
    results: BTreeMap<(usize, RsSignal), SeriesSet>,
    failed: &BTreeSet<usize>,
    gpu: &HashMap<&WorkloadKey, &BTreeMap<String, GpuContainer>>,
    now: Timestamp,
) -> Vec<RsResult> {
    let idx = index(results);
    let hpas = hpa::hpa_index(&snapshot.hpas);
    let mut out = Vec::new();
    for wp in &plan.workloads {
        let w = &snapshot.workloads[wp.workload];
        let policy = &snapshot.rightsizing_policies[wp.policy];
        let pods: Vec<&Pod> = wp.pods.iter().map(|&i| &*snapshot.pods[i]).collect();
        let spec = w.template.pod_spec();
        let mem_window = policy
            .spec
            .resources
            .memory
            .clone()
            .unwrap_or_default()
            .window
            .signed();
        let oom = container::oom_killed_containers(&pods, now - mem_window, now);
        let gather = |signal: RsSignal, container: &str| -> Vec<Sample> {
            let Some(m) = idx.get(&(wp.policy, signal)) else {
                return Vec::new();
            };
            let mut v: Vec<Sample> = pods
                .iter()
                .filter_map(|p| {
                    m.get(&(
                        w.key.namespace.clone(),
                        p.metadata.name.clone().unwrap_or_default(),
                        container.to_string(),
                    ))
                })
                .flatten()
                .copied()
                .collect();
            v.sort_by_key(|s| s.0);
            v
        };
        let mut containers = Vec::new();
        let mut bad_request: Option<String> = None;
        let gpu_w = gpu.get(&w.key).copied();
        for c in container::counted_containers(spec) {
            let current = match container::effective_requests(c) {
                Ok(r) => r,
                Err(e) => {
                    bad_request = Some(format!("container {}: {e}", c.name));
                    Default::default()
                }
            };
            let throttled = container::throttled(
                &gather(RsSignal::ThrottledPeriods, &c.name),
                &gather(RsSignal::Periods, &c.name),
                THROTTLED_RATIO,
            );
            let in_scope = policy.spec.scope.containers.is_empty()
                || policy.spec.scope.containers.contains(&c.name);
            let g = gpu_w.and_then(|m| m.get(&c.name));
            containers.push(ContainerInput {
                signals: ContainerSignals {
                    name: c.name.clone(),
                    current,
                    cpu: gather(RsSignal::Cpu, &c.name),
                    memory: gather(RsSignal::Memory, &c.name),
                    throttled,
                    oom_killed: oom.contains(&c.name),
                },
                in_scope,
                gpu_current: g.and_then(|g| g.current),
                gpu_recommended: g.and_then(|g| g.recommended),
            });
        }
        let hpa = hpas
            .get(&(
                w.key.namespace.as_str(),
                w.key.kind.as_str(),
                w.key.name.as_str(),
            ))
            .map(|&h| {
                let history =
                    replica_history(&idx, wp.policy, &w.key.namespace, h, &policy.spec, now);
                HpaInput {
                    hpa: h.clone(),
                    max_replicas_reached: hpa::max_replicas_reached(h, history.as_ref()),
                    replica_history: history.is_some(),
                }
            });
        let metrics_unavailable = failed.contains(&wp.policy);
        let outcome = match bad_request {
            Some(e) => Err(e),
            None => workload::evaluate_workload(&WorkloadInput {
                strategy_unresolved: plan.unresolved.get(&wp.policy).cloned(),
                policy: policy.spec.clone(),
                containers,
                hpa,
                replicas: w.replicas.unwrap_or(1),
                now,
            })
            .map_err(|e| e.to_string()),
        };
        out.push(RsResult {
            key: w.key.clone(),
            policy: policy.id.clone(),
            outcome,
            metrics_unavailable,
        });
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::sources::dir::{load_dir, load_text};

    /// A Deployment the HPA example's policy covers (`app: web`), with an HPA of its own.
    fn another_web_app(name: &str, hpa: &str) -> String {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: shop, labels: {{app: web}}}}
spec:
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec: {{containers: [{{name: app, image: w, resources: {{requests: {{cpu: "1"}}}}}}]}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {hpa}, namespace: shop}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  maxReplicas: 4
"#
        )
    }

    /// docs/design/hpa-coordination.md#h7, batched like every query (gpu-engine.md#g12): the
    /// HPAs' replica history (kube-state-metrics) is read with one range query per policy and
    /// series, selecting every HPA of the policy's workloads, over the policy's longer window.
    #[test]
    fn replica_history_is_queried_once_per_policy_for_all_its_hpas() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hpa/manifests");
        let mut m = load_dir(&dir).unwrap();
        load_text(&another_web_app("api", "api-hpa"), "test", &mut m).unwrap();
        let now = "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap();
        let plan = plan(&m.snapshot, now, 15);
        for metric in [
            "kube_horizontalpodautoscaler_status_current_replicas",
            "kube_horizontalpodautoscaler_spec_max_replicas",
        ] {
            let queries: Vec<&RangeQuery> = plan
                .queries
                .iter()
                .filter(|(_, _, q)| q.metric == metric)
                .map(|(_, _, q)| q)
                .collect();
            assert_eq!(queries.len(), 1, "{metric}: {:#?}", plan.queries);
            let q = queries[0];
            assert_eq!(q.namespace_label, "namespace");
            assert_eq!(q.pod_label, "horizontalpodautoscaler");
            assert_eq!(q.namespaces, ["shop"]);
            assert_eq!(q.pods, ["api-hpa", "web"]);
            assert_eq!(
                q.start,
                now - SignedDuration::from_hours(1),
                "the 1h windows"
            );
            assert_eq!(q.counter, Some(false));
        }
    }
}
