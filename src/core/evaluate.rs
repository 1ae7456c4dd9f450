//! Whole-snapshot GPU evaluation, in two pure halves around the metric IO:
//! [`plan`] decides which policy wins which workload and which series to query (one batched
//! range query per policy and signal); [`evaluate`] runs the engine on the fetched samples.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;

use crate::api::{Signal, StrategyView, WorkloadKind};
use crate::core::allocation::{container_allocations, default_scope_containers};
use crate::core::gpu_engine::{self, Action, EngineInput, EngineOutput, SignalSamples};
use crate::core::model::{ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION};
use crate::core::model::{
    GpuMap, GpuRecommendation, PolicyId, WorkloadKey, WorkloadState, parse_baseline,
};
use crate::core::selection::{self, Candidate};
use crate::core::snapshot::{GpuPolicy, Snapshot, StrategyKey, Workload};
use crate::metrics::{RangeQuery, SeriesSet};

/// The top owner of a pod, from its owner references and the snapshot's owner maps. A pod owned
/// by an unknown ReplicaSet belongs to the Deployment named by the ReplicaSet name minus its
/// `-<pod-template-hash>` suffix.
pub fn pod_owner(
    pod: &Pod,
    snapshot_rs: &BTreeMap<(String, String), String>,
    snapshot_jobs: &BTreeMap<(String, String), String>,
) -> Option<WorkloadKey> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .or_else(|| pod.metadata.owner_references.iter().flatten().next())?;
    match owner.kind.as_str() {
        "ReplicaSet" => {
            let deployment = snapshot_rs
                .get(&(ns.clone(), owner.name.clone()))
                .cloned()
                .or_else(|| {
                    let hash = pod.metadata.labels.as_ref()?.get("pod-template-hash")?;
                    owner
                        .name
                        .strip_suffix(&format!("-{hash}"))
                        .map(str::to_string)
                })?;
            Some(WorkloadKey::new(ns, WorkloadKind::Deployment, deployment))
        }
        "Job" => Some(match snapshot_jobs.get(&(ns.clone(), owner.name.clone())) {
            Some(cron) => WorkloadKey::new(ns, WorkloadKind::CronJob, cron.clone()),
            None => WorkloadKey::new(ns, WorkloadKind::Job, owner.name.clone()),
        }),
        other => WorkloadKind::parse(other).map(|k| WorkloadKey::new(ns, k, owner.name.clone())),
    }
}

/// Resolves a policy's `automationStrategyRef`: a namespaced policy looks in its namespace, then
/// among cluster strategies; a cluster policy among cluster strategies only.
pub fn resolve_strategy<'a>(
    snapshot: &'a Snapshot,
    policy: &GpuPolicy,
) -> Option<&'a StrategyView> {
    let name = &policy.spec.automation_strategy_ref.name;
    let namespaced = policy.id.namespace.as_ref().and_then(|ns| {
        snapshot.strategies.get(&StrategyKey {
            namespace: Some(ns.clone()),
            name: name.clone(),
        })
    });
    namespaced.or_else(|| {
        snapshot.strategies.get(&StrategyKey {
            namespace: None,
            name: name.clone(),
        })
    })
}

/// Indexes of `snapshot.pods` by the workload that owns them.
pub fn pods_by_owner(snapshot: &Snapshot) -> BTreeMap<WorkloadKey, Vec<usize>> {
    let mut out: BTreeMap<WorkloadKey, Vec<usize>> = BTreeMap::new();
    for (i, pod) in snapshot.pods.iter().enumerate() {
        if let Some(k) = pod_owner(pod, &snapshot.replicaset_owners, &snapshot.job_owners) {
            out.entry(k).or_default().push(i);
        }
    }
    out
}

/// The policies (index, selection view) whose scope covers the workload.
pub fn covering<'a, P>(
    policies: &'a [P],
    w: &Workload,
    view: impl Fn(&'a P) -> Candidate<'a>,
) -> Vec<(usize, Candidate<'a>)> {
    let template_labels = w
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    policies
        .iter()
        .enumerate()
        .map(|(i, p)| (i, view(p)))
        .filter(|(_, c)| selection::covers(c, &w.key, &w.labels, &template_labels))
        .collect()
}

/// One policy's share of one workload.
#[derive(Clone, Debug)]
pub struct Assignment {
    pub policy: usize,
    /// Containers won in multi-policy mode (None = the policy's own scope).
    pub containers: Option<BTreeSet<String>>,
}

#[derive(Clone, Debug)]
pub struct WorkloadPlan {
    pub workload: usize,
    pub assignments: Vec<Assignment>,
    /// Pods of the workload (indexes into `snapshot.pods`).
    pub pods: Vec<usize>,
    pub reasons: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub workloads: Vec<WorkloadPlan>,
    /// One batched query per (policy, signal).
    pub queries: Vec<(usize, Signal, RangeQuery)>,
    /// Policies whose strategy does not resolve, with the message for their status.
    pub unresolved: BTreeMap<usize, String>,
}

fn is_eligible(pod: &Pod, policy: &GpuPolicy, now: DateTime<Utc>) -> bool {
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(crate::core::model::k8s_time);
    pod.metadata.deletion_timestamp.is_none()
        && started.is_some_and(|t| {
            now.signed_duration_since(t) >= policy.spec.min_pod_metrics_age.chrono()
        })
}

pub fn plan(snapshot: &Snapshot, now: DateTime<Utc>, step_seconds: i64) -> Plan {
    let mut out = Plan::default();
    for (i, p) in snapshot.gpu_policies.iter().enumerate() {
        if resolve_strategy(snapshot, p).is_none() {
            out.unresolved.insert(
                i,
                format!(
                    "automationStrategyRef {:?} does not resolve: policy not applied",
                    p.spec.automation_strategy_ref.name
                ),
            );
        }
    }
    let pods_by_owner = pods_by_owner(snapshot);
    let protected = &snapshot.global.protected_namespaces;
    let mut pods_per_policy: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    for (wi, w) in snapshot.workloads.iter().enumerate() {
        if protected.contains(&w.key.namespace) {
            continue;
        }
        let covering = covering(&snapshot.gpu_policies, w, |p| Candidate {
            id: &p.id,
            policy_type: p.policy_type,
            scope: &p.spec.scope,
            weight: p.spec.weight,
            creation: p.creation,
        });
        if covering.is_empty() {
            continue;
        }
        let mut reasons = Vec::new();
        for (i, _) in &covering {
            if let Some(msg) = out.unresolved.get(i) {
                reasons.push(format!("{}: {msg}", snapshot.gpu_policies[*i].id));
            }
        }
        let usable: Vec<(usize, Candidate<'_>)> = covering
            .into_iter()
            .filter(|(i, _)| !out.unresolved.contains_key(i))
            .collect();
        let index_of = |id: &PolicyId| usable.iter().find(|(_, c)| c.id == id).map(|(i, _)| *i);
        let candidates: Vec<Candidate<'_>> = usable.iter().map(|(_, c)| c.clone()).collect();
        let assignments: Vec<Assignment> =
            if snapshot.global.multi_policy_container_rightsizing_enabled {
                let spec = w.template.spec.clone().unwrap_or_default();
                let defaults: Vec<String> = default_scope_containers(&spec)
                    .into_iter()
                    .map(|c| c.name.clone())
                    .collect();
                let all: Vec<String> = spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .map(|c| c.name.clone())
                    .collect();
                selection::per_container_winners(&candidates, &defaults, &all, &snapshot.precedence)
                    .into_iter()
                    .filter_map(|(id, set)| {
                        index_of(&id).map(|policy| Assignment {
                            policy,
                            containers: Some(set),
                        })
                    })
                    .collect()
            } else {
                selection::single_winner(&candidates, &snapshot.precedence)
                    .and_then(|w| index_of(w.id))
                    .map(|policy| Assignment {
                        policy,
                        containers: None,
                    })
                    .into_iter()
                    .collect()
            };
        let pods = pods_by_owner.get(&w.key).cloned().unwrap_or_default();
        for a in &assignments {
            let policy = &snapshot.gpu_policies[a.policy];
            for &pi in &pods {
                let pod = &snapshot.pods[pi];
                if is_eligible(pod, policy, now) {
                    pods_per_policy.entry(a.policy).or_default().insert((
                        w.key.namespace.clone(),
                        pod.metadata.name.clone().unwrap_or_default(),
                    ));
                }
            }
        }
        out.workloads.push(WorkloadPlan {
            workload: wi,
            assignments,
            pods,
            reasons,
        });
    }
    for (pi, pods) in pods_per_policy {
        let policy = &snapshot.gpu_policies[pi];
        let namespaces: BTreeSet<String> = pods.iter().map(|(ns, _)| ns.clone()).collect();
        for signal in Signal::BOTH {
            let cfg = policy.spec.metrics.signal(signal);
            let window = cfg
                .upsize
                .metrics_window
                .seconds()
                .max(cfg.scale_back.metrics_window.seconds()) as i64;
            out.queries.push((
                pi,
                signal,
                RangeQuery {
                    metric: cfg.prometheus.metric.clone(),
                    namespace_label: cfg.prometheus.namespace_label.clone(),
                    pod_label: cfg.prometheus.pod_label.clone(),
                    container_label: cfg.prometheus.container_label.clone(),
                    namespaces: namespaces.iter().cloned().collect(),
                    pods: pods
                        .iter()
                        .map(|(_, p)| p.clone())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    start: now - chrono::Duration::seconds(window),
                    end: now,
                    step_seconds,
                    counter: None,
                },
            ));
        }
    }
    out
}

/// Outcome of one workload's GPU evaluation.
#[derive(Clone, Debug)]
pub struct WorkloadResult {
    pub key: WorkloadKey,
    /// The policies that contributed (first = the main one).
    pub policies: Vec<PolicyId>,
    pub action: Action,
    pub driving_metric: Option<Signal>,
    pub containers: BTreeMap<String, gpu_engine::ContainerOutcome>,
    pub recommendation: Option<GpuRecommendation>,
    pub baseline: Option<GpuMap>,
    pub template_gpu: GpuMap,
    pub strategy: StrategyView,
    pub reasons: Vec<String>,
    /// Set when a metric query for one of the workload's policies failed: nothing changes.
    pub metrics_unavailable: bool,
}

/// Annotations that failed to parse are reported and treated as absent.
fn read_state(
    w: &Workload,
    reasons: &mut Vec<String>,
) -> (Option<GpuMap>, Option<GpuRecommendation>) {
    let baseline =
        w.annotations
            .get(ANNOTATION_GPU_BASELINE)
            .and_then(|t| match parse_baseline(t) {
                Ok(b) => Some(b),
                Err(e) => {
                    reasons.push(format!(
                        "ignoring annotation {ANNOTATION_GPU_BASELINE}: {e}"
                    ));
                    None
                }
            });
    let previous = w
        .annotations
        .get(ANNOTATION_GPU_RECOMMENDATION)
        .and_then(|t| match GpuRecommendation::parse(t) {
            Ok(r) => Some(r),
            Err(e) => {
                reasons.push(format!(
                    "ignoring annotation {ANNOTATION_GPU_RECOMMENDATION}: {e}"
                ));
                None
            }
        });
    (baseline, previous)
}

/// GPU allocation the template asks for, per container that has one.
pub fn template_gpu(w: &Workload) -> GpuMap {
    let spec = w.template.spec.clone().unwrap_or_default();
    let annotations = w
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    container_allocations(&spec, &annotations)
        .into_iter()
        .filter_map(|(c, a)| a.gpus().map(|g| (c, g)))
        .collect()
}

/// Per (policy, signal): the query result split by namespace into the engine's
/// per-(pod, container) samples. Built once per cycle so each workload is a lookup.
type SampleIndex = BTreeMap<(usize, Signal), HashMap<String, SignalSamples>>;

fn index_samples(results: BTreeMap<(usize, Signal), SeriesSet>) -> SampleIndex {
    results
        .into_iter()
        .map(|(k, set)| {
            let mut by_ns: HashMap<String, SignalSamples> = HashMap::new();
            for (key, samples) in set.series {
                by_ns
                    .entry(key.namespace)
                    .or_default()
                    .insert((key.pod, key.container), samples);
            }
            (k, by_ns)
        })
        .collect()
}

/// Runs the engine for every planned workload. `results[(policy, signal)]` holds the query
/// result; a missing entry means the query failed: the workload then keeps its previous state.
pub fn evaluate(
    snapshot: &Snapshot,
    plan: &Plan,
    results: BTreeMap<(usize, Signal), SeriesSet>,
    failed: &BTreeSet<usize>,
    now: DateTime<Utc>,
) -> Vec<WorkloadResult> {
    let index = index_samples(results);
    let empty = SignalSamples::new();
    let lookup = |policy: usize, signal: Signal, ns: &str| {
        index
            .get(&(policy, signal))
            .and_then(|m| m.get(ns))
            .unwrap_or(&empty)
    };
    let mut out = Vec::new();
    for wp in &plan.workloads {
        let w = &snapshot.workloads[wp.workload];
        let mut reasons = wp.reasons.clone();
        let (baseline, previous) = read_state(w, &mut reasons);
        let pods: Vec<&Pod> = wp.pods.iter().map(|&i| &snapshot.pods[i]).collect();
        let tgpu = template_gpu(w);
        let mut result = WorkloadResult {
            key: w.key.clone(),
            policies: Vec::new(),
            action: Action::None,
            driving_metric: None,
            containers: BTreeMap::new(),
            recommendation: None,
            baseline: baseline.clone(),
            template_gpu: tgpu,
            strategy: StrategyView::default(),
            reasons: Vec::new(),
            metrics_unavailable: false,
        };
        let mut outputs: Vec<(usize, EngineOutput)> = Vec::new();
        for a in &wp.assignments {
            let policy = &snapshot.gpu_policies[a.policy];
            result.policies.push(policy.id.clone());
            if failed.contains(&a.policy) {
                result.metrics_unavailable = true;
                reasons.push(format!(
                    "{}: metrics unavailable: keeping the last recommendation and baseline",
                    policy.id
                ));
            }
            let ns = &w.key.namespace;
            // Without data the engine still reads the current allocations (for the report);
            // its decision is discarded below.
            let compute = lookup(a.policy, Signal::Compute, ns);
            let memory = lookup(a.policy, Signal::Memory, ns);
            let input = EngineInput {
                policy_id: &policy.id,
                policy: &policy.spec,
                containers_override: a.containers.as_ref(),
                template: &w.template,
                pods: &pods,
                compute,
                memory,
                baseline: baseline.as_ref(),
                previous: previous.as_ref(),
                now,
            };
            outputs.push((a.policy, gpu_engine::evaluate(&input)));
        }
        if let Some(first) = wp.assignments.first() {
            result.strategy = resolve_strategy(snapshot, &snapshot.gpu_policies[first.policy])
                .cloned()
                .unwrap_or_default();
        }
        if result.metrics_unavailable {
            // Nothing flaps: the persisted state stays in force untouched.
            result.action = if previous.is_some() {
                Action::Reuse
            } else {
                Action::None
            };
            result.recommendation = previous.clone();
            result.driving_metric = previous.as_ref().and_then(|r| r.driving_metric);
            for (_, o) in outputs {
                result.containers.extend(o.containers);
            }
            for (c, o) in result.containers.iter_mut() {
                o.baseline = baseline.as_ref().and_then(|b| b.get(c).copied());
                o.recommended = previous.as_ref().and_then(|r| r.containers.get(c).copied());
            }
        } else {
            merge_outputs(&mut result, outputs, &mut reasons);
        }
        result.reasons = reasons;
        out.push(result);
    }
    out
}

/// Combines the engine outputs of the policies sharing a workload (one in the default mode).
fn merge_outputs(
    result: &mut WorkloadResult,
    outputs: Vec<(usize, EngineOutput)>,
    reasons: &mut Vec<String>,
) {
    let mut baseline: Option<GpuMap> = None;
    let mut rec: Option<GpuRecommendation> = None;
    let mut best_total = f64::MIN;
    for (_, o) in outputs {
        reasons.extend(o.reasons);
        result.containers.extend(o.containers);
        if let Some(b) = o.baseline {
            baseline.get_or_insert_with(GpuMap::new).extend(b);
        }
        if let Some(r) = o.recommendation {
            let total = r.total();
            let merged = rec.get_or_insert_with(|| GpuRecommendation {
                containers: GpuMap::new(),
                driving_metric: None,
                policy: None,
                updated_at: None,
            });
            merged.containers.extend(r.containers.clone());
            // The largest contributor names the driver and policy of the merged annotation.
            if total > best_total {
                best_total = total;
                merged.driving_metric = r.driving_metric;
                merged.policy = r.policy.clone();
                merged.updated_at = r.updated_at;
                result.action = o.action;
                result.driving_metric = o.driving_metric;
            }
        }
    }
    result.baseline = baseline;
    result.recommendation = rec;
}

impl WorkloadResult {
    /// What the admission path serves for this workload.
    pub fn to_state(&self) -> WorkloadState {
        WorkloadState {
            gpu: self.recommendation.clone(),
            template_gpu: self.template_gpu.clone(),
            resources: BTreeMap::new(),
            hpa: None,
            policy: self.policies.first().cloned(),
            strategy: self.strategy.clone(),
        }
    }
}
