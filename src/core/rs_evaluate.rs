//! Whole-snapshot CPU/memory evaluation (RightsizingPolicy / ClusterRightsizingPolicy), in the
//! same two pure halves as the GPU one: [`plan`] picks the winning policy per workload and the
//! batched queries (one per policy and signal), [`evaluate`] builds each workload's input for
//! [`rightsizing::evaluate_workload`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::core::pod::Pod;
use chrono::{DateTime, Utc};

use crate::core::evaluate::{covering, pods_by_owner};
use crate::core::gpu_engine::ContainerOutcome as GpuContainer;
use crate::core::hpa;
use crate::core::model::{PolicyId, WorkloadKey};
use crate::core::resources::{self, ContainerSignals, Sample};
use crate::core::rightsizing::{self, ContainerInput, HpaInput, RightsizingOutcome, WorkloadInput};
use crate::core::selection::{self, Candidate};
use crate::core::snapshot::{Snapshot, unresolved_strategy_message};
use crate::metrics::{RangeQuery, SeriesSet};

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
}

impl RsSignal {
    pub const ALL: [RsSignal; 4] = [
        RsSignal::Cpu,
        RsSignal::Memory,
        RsSignal::ThrottledPeriods,
        RsSignal::Periods,
    ];
    pub fn metric(self) -> &'static str {
        match self {
            RsSignal::Cpu => CPU_USAGE_METRIC,
            RsSignal::Memory => MEMORY_METRIC,
            RsSignal::ThrottledPeriods => THROTTLED_PERIODS_METRIC,
            RsSignal::Periods => PERIODS_METRIC,
        }
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
    /// Policies whose strategy does not resolve, with the message for their status: they are
    /// not applied, so they win no workload (docs/design/hpa-coordination.md#h13: what kerf
    /// applied under them is released).
    pub unresolved: BTreeMap<usize, String>,
}

/// The step for a window: at least `step`, coarse enough to stay under [`MAX_POINTS`].
pub fn step_for(window_seconds: i64, step: i64) -> i64 {
    step.max((window_seconds + MAX_POINTS - 1) / MAX_POINTS)
}

pub fn plan(snapshot: &Snapshot, now: DateTime<Utc>, step_seconds: i64) -> RsPlan {
    let mut out = RsPlan::default();
    for (i, p) in snapshot.rightsizing_policies.iter().enumerate() {
        let name = &p.spec.automation_strategy_ref.name;
        if snapshot.strategy(p.id.namespace.as_deref(), name).is_none() {
            out.unresolved.insert(i, unresolved_strategy_message(name));
        }
    }
    let pods_by_owner = pods_by_owner(snapshot);
    let mut per_policy: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
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
            .filter(|(i, _)| !out.unresolved.contains_key(i))
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
        out.workloads.push(RsWorkloadPlan {
            workload: wi,
            policy,
            pods,
        });
    }
    for (pi, pods) in per_policy {
        let spec = &snapshot.rightsizing_policies[pi].spec;
        let cpu_window = spec
            .resources
            .cpu
            .clone()
            .unwrap_or_default()
            .window
            .seconds() as i64;
        let mem_window = spec
            .resources
            .memory
            .clone()
            .unwrap_or_default()
            .window
            .seconds() as i64;
        let namespaces: Vec<String> = pods
            .iter()
            .map(|(ns, _)| ns.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let pod_names: Vec<String> = pods
            .iter()
            .map(|(_, p)| p.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for signal in RsSignal::ALL {
            let window = if signal == RsSignal::Memory {
                mem_window
            } else {
                cpu_window
            };
            out.queries.push((
                pi,
                signal,
                RangeQuery {
                    metric: signal.metric().into(),
                    namespace_label: "namespace".into(),
                    pod_label: "pod".into(),
                    container_label: "container".into(),
                    namespaces: namespaces.clone(),
                    pods: pod_names.clone(),
                    start: now - chrono::Duration::seconds(window),
                    end: now,
                    step_seconds: step_for(window, step_seconds),
                    counter: Some(signal != RsSignal::Memory),
                },
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

/// Evaluates every planned workload. `gpu` carries the GPU engine's per-container values so the
/// recommendation resource shows them and counts them in savings.
pub fn evaluate(
    snapshot: &Snapshot,
    plan: &RsPlan,
    results: BTreeMap<(usize, RsSignal), SeriesSet>,
    failed: &BTreeSet<usize>,
    gpu: &HashMap<&WorkloadKey, &BTreeMap<String, GpuContainer>>,
    now: DateTime<Utc>,
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
            .chrono();
        let oom = resources::oom_killed_containers(&pods, now - mem_window, now);
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
        for c in resources::counted_containers(spec) {
            let current = match resources::effective_requests(c) {
                Ok(r) => r,
                Err(e) => {
                    bad_request = Some(format!("container {}: {e}", c.name));
                    Default::default()
                }
            };
            let throttled = resources::throttled(
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
            .map(|&h| HpaInput {
                hpa: h.clone(),
                max_replicas_reached: hpa::max_replicas_reached(h, &[]),
            });
        let metrics_unavailable = failed.contains(&wp.policy);
        let outcome = match bad_request {
            Some(e) => Err(e),
            None => rightsizing::evaluate_workload(&WorkloadInput {
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
