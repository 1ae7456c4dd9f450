//! Restart recovery: the admission store rebuilt from what the leader persisted on the workloads
//! (`gpu-recommendation`, `gpu-baseline`), so a restarted replica — and every follower — answers
//! admission like the leader before its first evaluation cycle.
//!
//! The same rules as evaluation decide what still stands: workloads in protected namespaces and
//! workloads their recommending policy no longer covers get nothing; entries outside the policy's
//! container scope are dropped; a template whose own GPU allocation no longer matches the
//! recorded baseline — an entry that differs, or a container the template no longer has —
//! resets the recommendation (docs/design/gpu-engine.md#g7, the engine's `check_baseline`).

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::{HashMap, HashSet};
use std::sync::Arc;

use crate::allocation::{container_allocations, scoped_container_names};
use crate::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, GpuRecommendation, PolicyId,
    WorkloadKey, WorkloadState, parse_baseline,
};
use crate::persisted::PersistedRecommendation;
use crate::recommenders::gpu::engine::check_baseline;
use crate::recommenders::gpu::{resolve_strategy, template_gpu};
use crate::selection;
use crate::snapshot::{GpuPolicy, Snapshot, Workload};
use crate::writes::served_change;
use kerf_api::StrategyView;
use kerf_support::small_map::SmallMap;

/// Store entries plus what was ignored and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovered {
    pub entries: Vec<(WorkloadKey, WorkloadState)>,
    pub warnings: Vec<String>,
}

/// Store entries for every workload carrying a usable `gpu-recommendation` annotation. Strategies
/// are resolved when the recommending policy is known (else left default, refined by the next
/// evaluation cycle).
pub fn store_entries_from_annotations(snapshot: &Snapshot) -> Vec<(WorkloadKey, WorkloadState)> {
    recover(snapshot).entries
}

/// What every replica's webhook serves, derived from the persisted state alone (so two replicas
/// watching the same objects answer the same review identically): the GPU recommendation from
/// the workload annotations ([`recover`]), the CPU/memory requests and the coordinated HPA
/// target from the workload's RightsizingRecommendation `status.applied` — except for the
/// `held` workloads (rollback asked for or done), which get no CPU/memory or HPA target. One
/// workload at a time (see [`recover_each`]).
pub fn serving_state_each(
    snapshot: &Snapshot,
    recommendations: &[Arc<PersistedRecommendation>],
    held: &BTreeSet<WorkloadKey>,
    mut emit: impl FnMut(WorkloadKey, WorkloadState),
) -> Vec<String> {
    let workloads: HashSet<&WorkloadKey> = snapshot.workloads.iter().map(|w| &w.key).collect();
    // The CPU/memory part, by workload, merged into the GPU entries as they come.
    let mut applied: BTreeMap<WorkloadKey, WorkloadState> = BTreeMap::new();
    for rec in recommendations {
        let Some(change) = rec.status.as_ref().and_then(|s| s.applied.as_ref()) else {
            continue;
        };
        let Some(key) = rec.workload() else {
            continue;
        };
        let protected = snapshot.global.is_protected(&key.namespace);
        if protected || held.contains(&key) || !workloads.contains(&key) {
            continue;
        }
        let (resources, hpa) = served_change(change);
        let state = applied.entry(key).or_insert_with(|| WorkloadState {
            policy: rec.spec.policies.first().and_then(|p| PolicyId::parse(p)),
            ..Default::default()
        });
        state.resources = resources;
        state.limits = crate::writes::served_values(&change.limits);
        state.hpa = hpa;
    }
    // An owned workload's GPU annotations, as its recommendation publishes them.
    let published: Published<'_> = recommendations
        .iter()
        .filter_map(|rec| {
            let a = rec.status.as_ref()?.applied.as_ref()?;
            (!a.gpu_annotations.is_empty()).then(|| (rec.workload(), &a.gpu_annotations))
        })
        .filter_map(|(key, a)| Some((key?, a)))
        .collect();
    let warnings = recover_each(snapshot, &published, |key, mut state| {
        if let Some(rs) = applied.remove(&key) {
            state.resources = rs.resources;
            state.limits = rs.limits;
            state.hpa = rs.hpa;
        }
        emit(key, state);
    });
    for (key, state) in applied {
        emit(key, state);
    }
    warnings
}

/// Store entries for every workload carrying a usable `gpu-recommendation` annotation (see
/// [`recover_each`]).
pub fn recover(snapshot: &Snapshot) -> Recovered {
    let mut entries = Vec::new();
    let warnings = recover_each(snapshot, &Published::default(), |k, s| entries.push((k, s)));
    Recovered { entries, warnings }
}

/// Each policy part's strategy (multi-policy), by policy.
type PartStrategies = BTreeMap<PolicyId, Arc<StrategyView>>;

/// The containers of a workload whose recovered recommendation is still served, with the strategy
/// of each policy part (multi-policy): only containers of policies that still exist, cover the
/// workload and resolve their strategy (docs/design/runtime.md#r8). None when nothing is served.
fn served_containers(
    snapshot: &Snapshot,
    w: &Workload,
    rec: &GpuRecommendation,
    policy: Option<&GpuPolicy>,
    policies: &HashMap<&PolicyId, &GpuPolicy>,
    warnings: &mut Vec<String>,
) -> Option<(Vec<String>, PartStrategies)> {
    let spec = w.template.pod_spec();
    // The containers a policy that still covers the workload may size.
    let covered = |p: &GpuPolicy| -> Option<Vec<String>> {
        selection::covers(&p.candidate(), &w.key, &w.labels, w.template.labels())
            .then(|| scoped_container_names(spec, &p.spec.scope.containers))
    };
    // Multi-policy: each part's policy's strategy, for its containers.
    let mut gpu_strategies = BTreeMap::new();
    let scope: Vec<String> = if !rec.by_policy.is_empty() {
        // Multi-policy: each policy's part stands or falls with that policy and its strategy
        // (docs/design/runtime.md#r8).
        let mut scope = Vec::new();
        for (id, part) in &rec.by_policy {
            let Some((p, s)) = policies.get(id).and_then(|&p| Some((p, covered(p)?))) else {
                warnings.push(format!(
                    "{}: policy {id} no longer exists or covers it: its containers are not served",
                    w.key
                ));
                continue;
            };
            let Some(strategy) = resolve_strategy(snapshot, p) else {
                warnings.push(format!(
                    "{}: policy {id}: {}: its containers are not served",
                    w.key,
                    snapshot.unresolved_strategy_message(
                        p.id.namespace.as_deref(),
                        &p.spec.automation_strategy_ref.name
                    )
                ));
                continue;
            };
            gpu_strategies.insert(id.clone(), strategy.clone());
            scope.extend(s.into_iter().filter(|c| part.containers.contains(c)));
        }
        scope
    } else if let Some(p) = policy {
        let Some(scope) = covered(p) else {
            warnings.push(format!("{}: policy {} no longer covers it", w.key, p.id));
            return None;
        };
        scope
    } else {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .map(|c| c.name.to_string())
            .collect()
    };
    Some((scope, gpu_strategies))
}

/// The policy a recovered recommendation's pods follow and its strategy: the one policy's, or
/// the main part's still served (multi-policy). None when the one policy's strategy does not
/// resolve (docs/design/runtime.md#r8).
fn served_strategy(
    snapshot: &Snapshot,
    w: &Workload,
    rec: &GpuRecommendation,
    policy: Option<&GpuPolicy>,
    gpu_strategies: &PartStrategies,
    warnings: &mut Vec<String>,
) -> Option<(Option<PolicyId>, Arc<StrategyView>)> {
    Some(if rec.by_policy.is_empty() {
        // A policy whose strategy does not resolve is not applied (docs/design/runtime.md#r8).
        let strategy = match policy.map(|p| (p, resolve_strategy(snapshot, p))) {
            Some((p, None)) => {
                warnings.push(format!(
                    "{}: policy {}: {}",
                    w.key,
                    p.id,
                    snapshot.unresolved_strategy_message(
                        p.id.namespace.as_deref(),
                        &p.spec.automation_strategy_ref.name
                    )
                ));
                return None;
            }
            Some((_, Some(s))) => s.clone(),
            None => Default::default(),
        };
        (rec.policy.clone(), strategy)
    } else {
        // Each part was checked above. The pod follows the main part, or the largest part
        // still served when that one is not (as the cycle, which plans only the policies
        // still in force).
        let main = rec
            .main_policy_among(|id| gpu_strategies.contains_key(id))
            .cloned();
        let strategy = main.as_ref().and_then(|id| gpu_strategies.get(id));
        (main, strategy.cloned().unwrap_or_default())
    })
}

/// The GPU annotations RightsizingRecommendations publish for workloads kerf does not annotate
/// (`status.applied.gpuAnnotations`), by workload.
pub type Published<'a> = HashMap<WorkloadKey, &'a SmallMap<String, String>>;

/// A GPU annotation of `w`: on the object, or, for a workload whose object another controller
/// owns (kerf writes no annotation there), as its RightsizingRecommendation publishes it.
pub fn gpu_annotation<'a>(
    w: &'a Workload,
    published: &Published<'a>,
    key: &str,
) -> Option<&'a str> {
    if let Some(v) = w.annotations.get(key) {
        return Some(v);
    }
    if w.template_writable() {
        return None;
    }
    published.get(&w.key)?.get(key).map(String::as_str)
}

/// Each store entry recovered from the annotations (or an owned workload's published ones),
/// handed to `emit` one at a time (so a caller filling the store never holds a second generation
/// of them); returns what was ignored and why.
pub fn recover_each<'a>(
    snapshot: &'a Snapshot,
    published: &Published<'a>,
    mut emit: impl FnMut(WorkloadKey, WorkloadState),
) -> Vec<String> {
    let mut warnings = Vec::new();
    // By id, so a workload's policy is one lookup, not a scan of every policy; reversed so the
    // first of equal ids wins, as a scan would find it.
    let policies: HashMap<&PolicyId, &GpuPolicy> = snapshot
        .gpu_policies
        .iter()
        .rev()
        .map(|p| (&p.id, p))
        .collect();
    for w in &snapshot.workloads {
        let Some(text) = gpu_annotation(w, published, ANNOTATION_GPU_RECOMMENDATION) else {
            continue;
        };
        if snapshot.global.is_protected(&w.key.namespace) {
            continue;
        }
        let mut rec = match GpuRecommendation::parse(text) {
            Ok(r) => r,
            Err(e) => {
                warnings.push(format!(
                    "{}: ignoring annotation {ANNOTATION_GPU_RECOMMENDATION}: {e}",
                    w.key
                ));
                continue;
            }
        };
        let template = template_gpu(w);
        let baseline = gpu_annotation(w, published, ANNOTATION_GPU_BASELINE).and_then(|t| {
            let ignored = |e| {
                format!(
                    "{}: ignoring annotation {ANNOTATION_GPU_BASELINE}: {e}",
                    w.key
                )
            };
            parse_baseline(t)
                .map_err(|e| warnings.push(ignored(e)))
                .ok()
        });
        let spec = w.template.pod_spec();
        let policy = match &rec.policy {
            Some(id) => match policies.get(id).copied() {
                Some(p) => Some(p),
                // Several policies' parts: each is checked on its own below.
                None if !rec.by_policy.is_empty() => None,
                None => {
                    warnings.push(format!(
                        "{}: recommending policy {id} no longer exists",
                        w.key
                    ));
                    continue;
                }
            },
            None => None,
        };
        let Some((scope, gpu_strategies)) =
            served_containers(snapshot, w, &rec, policy, &policies, &mut warnings)
        else {
            continue;
        };
        rec.containers.retain(|c, _| scope.contains(c));
        if let Some(b) = &baseline {
            let alloc = container_allocations(spec, w.template.annotations());
            let scope: BTreeSet<String> = scope.iter().cloned().collect();
            if !check_baseline(b, spec, &alloc, &scope).changed.is_empty() {
                warnings.push(format!(
                    "{}: template GPU allocation changed since the baseline was recorded: recommendation not served",
                    w.key
                ));
                continue;
            }
        }
        if rec.containers.is_empty() {
            continue;
        }
        let Some((main, strategy)) =
            served_strategy(snapshot, w, &rec, policy, &gpu_strategies, &mut warnings)
        else {
            continue;
        };
        emit(
            w.key.clone(),
            WorkloadState {
                policy: main,
                gpu: Some(rec),
                template_gpu: template,
                strategy,
                gpu_strategies,
                owner_queue: w.labels.get(&snapshot.global.kai.queue_label_key).cloned(),
                ..Default::default()
            },
        );
    }
    warnings
}
