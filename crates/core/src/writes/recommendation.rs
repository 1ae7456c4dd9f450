//! The RightsizingRecommendation a workload's outcome is written as (spec and status), and the
//! restore plans of a rollback or a release: built in write planning, from the recommenders'
//! results and the status as last written.
//!
//! - **previousHPATarget** is the HPA target before kerf's *first* coordinated change; later changes
//!   keep it, so release restores the user's own target together with the recorded original
//!   requests (the two belong together: restoring one without the other would change scaling).
//! - **Original requests** are recorded per container for the resources kerf applies, the first time
//!   it applies them (`originalRequests`); a resource that had no request at all (nor a limit) is
//!   recorded as created (`createdRequests`), so a release removes kerf's value there instead of
//!   restoring one.
//! - **Release is per field** (docs/design/hpa-coordination.md#h13): a request kerf took that the
//!   outcome no longer manages — its resource left auto-patch, its container left the scope —
//!   and the HPA target once coordination is off, are given back ([`plan_release`]); the HPA
//!   target goes together with the requests of its resource.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::ops::RestoreKind;
use crate::hpa::{self, HpaResource};
use crate::model::{
    ContainerRequests, CoordinatedHpa, PolicyId, RequestSet, ResourceRequests, WorkloadKey,
};
use crate::quantity::{self, format_gpu};
use crate::recommenders::gpu::WorkloadResult;
use crate::recommenders::resources::container::{PolicyError, Source};
use crate::recommenders::resources::workload::{
    AgentPlan, ContainerOutcome, Managed, RightsizingOutcome, get, savings,
};
use kerf_api::{
    AppliedChange, ContainerRecommendation, HpaRecommendation, RecommendationPhase,
    RecommendationStatus, ResourceValues, RightsizingRecommendationSpec, WorkloadRef,
};
use kerf_support::small_map::SmallMap;

fn values(r: &ResourceRequests, gpu: Option<f64>) -> ResourceValues {
    ResourceValues {
        cpu: r.cpu_millis.map(quantity::cpu_quantity),
        memory: r.memory_bytes.map(quantity::memory_quantity),
        gpu: gpu.map(format_gpu),
    }
}

/// The `RightsizingRecommendation` spec for an outcome (rightsized containers only).
/// A list kept in a recommendation for as long as it lives: without growth slack (a filtered
/// collect grows to four entries; ≈12 MB over 25,000 one-container recommendations).
fn held<T>(mut v: Vec<T>) -> Vec<T> {
    v.shrink_to_fit();
    v
}

pub fn recommendation_spec(
    outcome: &RightsizingOutcome,
    workload: &WorkloadKey,
    policy: Option<&PolicyId>,
) -> RightsizingRecommendationSpec {
    RightsizingRecommendationSpec {
        workload: WorkloadRef {
            kind: workload.kind.as_str().to_string(),
            name: workload.name.to_string(),
        },
        policies: policy.map(|p| vec![p.to_string()]).unwrap_or_default(),
        containers: held(
            outcome
                .containers
                .iter()
                .filter(|c| c.in_scope)
                .map(|c| ContainerRecommendation {
                    name: c.name.clone(),
                    current: values(&c.current, c.gpu_current),
                    recommended: values(&c.recommended, c.gpu_recommended),
                })
                .collect(),
        ),
        driving_metric: None,
        hpa: outcome.hpa.as_ref().map(|h| {
            Box::new(HpaRecommendation {
                name: h.name.clone(),
                resource: h.resource.map(|r| r.as_str().to_string()),
                target_before: h.target_before,
                target_after: h.target_after,
                skip_reason: h.skip_reason.map(|s| s.as_str().to_string()),
            })
        }),
        risk_flags: outcome.risk_flags.clone(),
        risk_reasons: outcome.risk_reasons.clone(),
        savings: outcome.savings.clone(),
    }
}

/// The GPU side of a workload's `RightsizingRecommendation` (docs/design/gpu-engine.md#g10): the
/// driving GPU metric of the recommendation in force and the GPU policies, added to `spec`.
pub fn add_gpu(spec: &mut RightsizingRecommendationSpec, gpu: &WorkloadResult) {
    spec.driving_metric = gpu
        .recommendation
        .as_ref()
        .and_then(|r| r.driving_metric)
        .map(|d| d.as_str().to_string());
    for p in gpu.policies.iter() {
        let p = p.to_string();
        if !spec.policies.contains(&p) {
            spec.policies.push(p);
        }
    }
    // Held by the recommendation: no growth slack (a push grows the list to four).
    spec.policies.shrink_to_fit();
}

/// The `RightsizingRecommendation` spec of a workload only GPU reactive policies cover: per
/// container its current and recommended GPUs, the driving GPU metric, the GPU policies and the
/// GPU savings (docs/design/gpu-engine.md#g10).
pub fn gpu_recommendation_spec(
    gpu: &WorkloadResult,
    workload: &WorkloadKey,
    replicas: i32,
) -> RightsizingRecommendationSpec {
    let containers: Vec<ContainerOutcome> = gpu
        .containers
        .iter()
        .filter(|(_, o)| o.current.is_some() || o.recommended.is_some())
        .map(|(name, o)| ContainerOutcome {
            name: name.clone(),
            in_scope: true,
            current: ResourceRequests::default(),
            recommended: ResourceRequests::default(),
            current_limits: ResourceRequests::default(),
            recommended_limits: ResourceRequests::default(),
            cpu_source: Source::NoData,
            memory_source: Source::NoData,
            cpu_usage: None,
            memory_usage: None,
            throttled: false,
            oom_killed: false,
            gpu_current: o.current,
            gpu_recommended: o.recommended,
        })
        .collect();
    let mut spec = RightsizingRecommendationSpec {
        workload: WorkloadRef {
            kind: workload.kind.as_str().to_string(),
            name: workload.name.to_string(),
        },
        containers: containers
            .iter()
            .map(|c| ContainerRecommendation {
                name: c.name.clone(),
                current: values(&c.current, c.gpu_current),
                recommended: values(&c.recommended, c.gpu_recommended),
            })
            .collect(),
        savings: savings(&containers, replicas),
        ..Default::default()
    };
    add_gpu(&mut spec, gpu);
    spec
}

/// Reason of a GPU-only recommendation without a GPU recommendation in force.
pub const REASON_NO_RECOMMENDATION: &str = "NoRecommendation";

/// The status of a workload only GPU reactive policies cover: `applied` while a GPU
/// recommendation is in force (admission applies it), `pending` (reason `NoRecommendation`)
/// while there is none; what must survive is carried over from `previous` (see
/// [`recommendation_status`]).
pub fn gpu_recommendation_status(
    gpu: &WorkloadResult,
    previous: Option<&RecommendationStatus>,
) -> RecommendationStatus {
    let (phase, reason) = match &gpu.recommendation {
        Some(_) => (RecommendationPhase::Applied, None),
        None => (
            RecommendationPhase::Pending,
            Some(REASON_NO_RECOMMENDATION.to_string()),
        ),
    };
    RecommendationStatus {
        phase,
        reason,
        previous_hpa_target: previous.and_then(|p| p.previous_hpa_target),
        original_requests: previous
            .map(|p| p.original_requests.clone())
            .unwrap_or_default(),
        last_applied_time: gpu
            .recommendation
            .as_ref()
            .and_then(|r| r.updated_at)
            .map(crate::model::rfc3339_secs)
            .or_else(|| previous.and_then(|p| p.last_applied_time.clone())),
        created_requests: previous
            .map(|p| p.created_requests.clone())
            .unwrap_or_default(),
        applied: None,
        conditions: previous.map(|p| p.conditions.clone()).unwrap_or_default(),
        conflict: previous.and_then(|p| p.conflict.clone()),
        apply_method: None,
        write_method: None,
        write_method_reason: None,
        resize: None,
        eviction: None,
        pending: None,
    }
}

/// The status for an outcome, carrying over what must survive from `previous`: the original
/// requests, `previousHPATarget` (see module docs), last applied time and conditions (the IO
/// edge owns those two).
pub fn recommendation_status(
    outcome: &RightsizingOutcome,
    previous: Option<&RecommendationStatus>,
) -> RecommendationStatus {
    let mut status = RecommendationStatus {
        phase: outcome.phase,
        reason: outcome.reason.clone(),
        previous_hpa_target: previous.and_then(|p| p.previous_hpa_target),
        original_requests: previous
            .map(|p| p.original_requests.clone())
            .unwrap_or_default(),
        created_requests: previous
            .map(|p| p.created_requests.clone())
            .unwrap_or_default(),
        last_applied_time: previous.and_then(|p| p.last_applied_time.clone()),
        applied: previous.and_then(|p| p.applied.clone()),
        conditions: previous.map(|p| p.conditions.clone()).unwrap_or_default(),
        conflict: previous.and_then(|p| p.conflict.clone()),
        apply_method: previous.and_then(|p| p.apply_method),
        write_method: previous.and_then(|p| p.write_method),
        write_method_reason: previous.and_then(|p| p.write_method_reason.clone()),
        resize: previous.and_then(|p| p.resize.clone()),
        eviction: previous.and_then(|p| p.eviction.clone()),
        // Only a change's own unit writes it (see `pending`); a cycle that writes nothing
        // carries it over.
        pending: None,
    };
    if let Some(plan) = &outcome.apply {
        if let Some(h) = &plan.hpa {
            status.previous_hpa_target.get_or_insert(h.target_before);
        }
        for (name, applied) in &plan.requests {
            let Some(c) = outcome.containers.iter().find(|c| &c.name == name) else {
                continue;
            };
            let mut created = status
                .created_requests
                .get(name)
                .map(|n| RequestSet::from_names(n))
                .unwrap_or_default();
            let entry = status.original_requests.entry(name.clone()).or_default();
            if applied.cpu_millis.is_some() && entry.cpu.is_none() && !created.cpu {
                entry.cpu = c.current.cpu_millis.map(quantity::cpu_quantity);
                created.cpu = entry.cpu.is_none();
            }
            if applied.memory_bytes.is_some() && entry.memory.is_none() && !created.memory {
                entry.memory = c.current.memory_bytes.map(quantity::memory_quantity);
                created.memory = entry.memory.is_none();
            }
            if created.any() {
                status
                    .created_requests
                    .insert(name.clone(), created.names());
            }
        }
        status
            .original_requests
            .retain(|_, v| v.cpu.is_some() || v.memory.is_some());
    }
    status
}

/// `status` with what kerf took left as `previous` recorded it: nothing is taken in a cycle
/// that applies nothing (readOnly, a rollback held, metrics unavailable).
pub fn keep_taken(status: &mut RecommendationStatus, previous: Option<&RecommendationStatus>) {
    status.previous_hpa_target = previous.and_then(|p| p.previous_hpa_target);
    status.original_requests = previous
        .map(|p| p.original_requests.clone())
        .unwrap_or_default();
    status.created_requests = previous
        .map(|p| p.created_requests.clone())
        .unwrap_or_default();
}

/// The change kerf applies, as the RightsizingRecommendation records it (`status.applied`).
pub fn applied_change(requests: &ContainerRequests, hpa: Option<&CoordinatedHpa>) -> AppliedChange {
    AppliedChange {
        requests: recorded_values(requests),
        limits: Default::default(),
        hpa: hpa.map(|h| {
            Box::new(HpaRecommendation {
                name: h.hpa_name.clone(),
                resource: Some(h.resource.clone()),
                target_before: Some(h.target_before),
                target_after: Some(h.target_after),
                skip_reason: None,
            })
        }),
        gpu_annotations: Default::default(),
    }
}

/// Requests or limits as `status.applied` records them.
pub fn recorded_values(values: &ContainerRequests) -> SmallMap<String, ResourceValues> {
    values
        .iter()
        .map(|(c, r)| {
            let values = ResourceValues {
                cpu: r.cpu_millis.map(quantity::cpu_quantity),
                memory: r.memory_bytes.map(quantity::memory_quantity),
                gpu: None,
            };
            (c.clone(), values)
        })
        .collect()
}

/// Requests or limits `status.applied` records, read back.
pub fn served_values(values: &SmallMap<String, ResourceValues>) -> ContainerRequests {
    values
        .iter()
        .map(|(c, v)| {
            let r = ResourceRequests {
                cpu_millis: v.cpu.as_ref().and_then(|q| quantity::cpu_millis(q).ok()),
                memory_bytes: v
                    .memory
                    .as_ref()
                    .and_then(|q| quantity::memory_bytes(q).ok()),
            };
            (c.clone(), r)
        })
        .collect()
}

/// The coordinated HPA target of a change whose requests are still those recorded — the
/// pending change's (`status.pending.change`), else `status.applied` —: the one planned from
/// the pre-change pair. Recomputed from the live pair, a
/// half-applied change (the template written, the HPA write failed) would pass for a whole one:
/// round(50 × 700/700) = 50 instead of 71. `None`: the plan's own target stands (a new change,
/// another HPA, or the same target).
pub fn pre_change_target(
    requests: &ContainerRequests,
    planned: &CoordinatedHpa,
    previous: Option<&RecommendationStatus>,
) -> Option<CoordinatedHpa> {
    let previous = previous?;
    let pending = previous.pending.as_ref().and_then(|p| p.change.as_deref());
    let applied = pending.or(previous.applied.as_deref())?;
    let recorded = served_change(applied).1?;
    let same_change = recorded.hpa_name == planned.hpa_name
        && recorded.resource == planned.resource
        && applied_change(requests, None).requests == applied.requests;
    (same_change && recorded != *planned).then_some(recorded)
}

/// [`applied_change`] read back: the requests and the HPA target the webhook serves. A value
/// that does not parse is left out (the webhook then leaves that field of the pod alone).
pub fn served_change(applied: &AppliedChange) -> (ContainerRequests, Option<CoordinatedHpa>) {
    let requests = served_values(&applied.requests);
    let hpa = applied.hpa.as_ref().and_then(|h| {
        Some(CoordinatedHpa {
            hpa_name: h.name.clone(),
            resource: h.resource.clone()?,
            target_before: h.target_before?,
            target_after: h.target_after?,
        })
    });
    (requests, hpa)
}

/// The HPA target to restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreHpa {
    pub name: String,
    pub resource: String,
    pub target: i32,
}

/// What a rollback or a release writes back (requests per container, HPA target), in one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestorePlan {
    /// The values from before kerf (a `None` resource is not restored).
    pub requests: ContainerRequests,
    /// Requests kerf created where the container had none: removed.
    pub removed: BTreeMap<String, RequestSet>,
    pub hpa: Option<RestoreHpa>,
}

impl RestorePlan {
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.removed.is_empty() && self.hpa.is_none()
    }

    /// `status` once this plan went through: what it gave back is no longer recorded as taken.
    pub fn settle(&self, status: &mut RecommendationStatus) {
        for (name, r) in &self.requests {
            if let Some(v) = status.original_requests.get_mut(name) {
                if r.cpu_millis.is_some() {
                    v.cpu = None;
                }
                if r.memory_bytes.is_some() {
                    v.memory = None;
                }
            }
        }
        status
            .original_requests
            .retain(|_, v| v.cpu.is_some() || v.memory.is_some());
        for (name, gone) in &self.removed {
            if let Some(names) = status.created_requests.get_mut(name) {
                let left = RequestSet::from_names(names);
                *names = RequestSet {
                    cpu: left.cpu && !gone.cpu,
                    memory: left.memory && !gone.memory,
                }
                .names();
            }
        }
        status.created_requests.retain(|_, v| !v.is_empty());
        if self.hpa.is_some() {
            status.previous_hpa_target = None;
        }
    }
}

/// Rollback and the release of a whole workload: every recorded original request restored,
/// every request kerf created removed, and — when kerf changed the HPA — `previousHPATarget` on
/// the HPA named in `spec.hpa`.
pub fn plan_restore(
    spec: &RightsizingRecommendationSpec,
    status: &RecommendationStatus,
) -> Result<RestorePlan, PolicyError> {
    plan_release(spec, status, &Managed::default())
}

fn recorded(name: &str, v: &ResourceValues) -> Result<ResourceRequests, PolicyError> {
    type Reader = fn(&Quantity) -> Result<i64, quantity::QuantityError>;
    let read = |resource: &str, q: Option<&Quantity>, reader: Reader| {
        q.map(reader).transpose().map_err(|e| PolicyError {
            field: format!("status.originalRequests.{name}.{resource}"),
            message: e.to_string(),
        })
    };
    Ok(ResourceRequests {
        cpu_millis: read("cpu", v.cpu.as_ref(), quantity::cpu_millis)?,
        memory_bytes: read("memory", v.memory.as_ref(), quantity::memory_bytes)?,
    })
}

/// docs/design/hpa-coordination.md#h13, per field: what kerf took (recorded in `status`) and no
/// longer manages. A request is released when `managed` does not have it (its resource left
/// auto-patch, its container left the scope, the policy is gone: nothing managed); the HPA
/// target when kerf no longer coordinates it, and with it the requests of the resource the HPA
/// still measures (the two were changed together; restoring one alone would change scaling).
pub fn plan_release(
    spec: &RightsizingRecommendationSpec,
    status: &RecommendationStatus,
    managed: &Managed,
) -> Result<RestorePlan, PolicyError> {
    let hpa = match (status.previous_hpa_target, spec.hpa.as_ref()) {
        (Some(_), _) if managed.hpa_target => None,
        (Some(target), Some(h)) => Some(RestoreHpa {
            name: h.name.clone(),
            resource: h.resource.clone().ok_or_else(|| PolicyError {
                field: "spec.hpa.resource".into(),
                message: "missing, but status.previousHPATarget is set".into(),
            })?,
            target,
        }),
        (Some(_), None) => {
            return Err(PolicyError {
                field: "spec.hpa".into(),
                message: "missing, but status.previousHPATarget is set".into(),
            });
        }
        (None, _) => None,
    };
    // Released with the HPA target: the requests of the resource it still measures.
    let with_target = hpa
        .as_ref()
        .and_then(|h| HpaResource::parse(&h.resource))
        .filter(|r| managed.hpa_resource == Some(*r));
    let kept = |name: &str| {
        let mut k = managed.requests.get(name).copied().unwrap_or_default();
        match with_target {
            Some(HpaResource::Cpu) => k.cpu = false,
            Some(HpaResource::Memory) => k.memory = false,
            None => {}
        }
        k
    };
    let mut requests = ContainerRequests::new();
    for (name, v) in &status.original_requests {
        let keep = kept(name);
        let mut r = recorded(name, v)?;
        r.cpu_millis = r.cpu_millis.filter(|_| !keep.cpu);
        r.memory_bytes = r.memory_bytes.filter(|_| !keep.memory);
        if r.cpu_millis.is_some() || r.memory_bytes.is_some() {
            requests.insert(name.clone(), r);
        }
    }
    let mut removed = BTreeMap::new();
    for (name, names) in &status.created_requests {
        let keep = kept(name);
        let created = RequestSet::from_names(names);
        let gone = RequestSet {
            cpu: created.cpu && !keep.cpu,
            memory: created.memory && !keep.memory,
        };
        if gone.any() {
            removed.insert(name.clone(), gone);
        }
    }
    Ok(RestorePlan {
        requests,
        removed,
        hpa,
    })
}

/// The coordinated change once `release` puts requests of the HPA's resource back on containers
/// kerf no longer manages: the target moves with them, so requests × target stays what it was
/// (docs/design/hpa-coordination.md#h3). Unchanged when the release touches no such request.
pub fn coordinated_after_release(
    outcome: &RightsizingOutcome,
    plan: &AgentPlan,
    release: &RestorePlan,
) -> Option<CoordinatedHpa> {
    let h = plan.hpa.as_ref()?;
    let Some(resource) = HpaResource::parse(&h.resource) else {
        return Some(h.clone());
    };
    let mut touched = false;
    let mut before = 0;
    let mut after = 0;
    for c in &outcome.containers {
        let current = get(&c.current, resource).unwrap_or_default();
        before += current;
        let removed = release
            .removed
            .get(&c.name)
            .is_some_and(|g| match resource {
                HpaResource::Cpu => g.cpu,
                HpaResource::Memory => g.memory,
            });
        let restored = release.requests.get(&c.name).and_then(|r| get(r, resource));
        let planned = plan.requests.get(&c.name).and_then(|r| get(r, resource));
        after += match (planned, restored) {
            (Some(v), _) => v,
            (None, Some(v)) => {
                touched = true;
                v
            }
            (None, None) if removed => {
                touched = true;
                0
            }
            (None, None) => current,
        };
    }
    let mut out = h.clone();
    if touched {
        out.target_after =
            hpa::new_target(h.target_before, before, after).unwrap_or(h.target_after);
    }
    Some(out)
}

/// What stands between a workload's outcome and kerf acting on it, for the
/// RightsizingRecommendation's phase ([`recommendation_phase`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gates {
    /// This cycle writes a rollback or a release of the whole workload.
    pub restore: Option<RestoreKind>,
    /// kerf was rolled back there and stays so until the recommendation is deleted.
    pub rolled_back: bool,
    /// GlobalConfiguration `readOnly`: kerf writes nothing.
    pub read_only: bool,
    /// Another field manager keeps taking kerf's fields back (docs/gitops.md).
    pub conflict_blocked: bool,
    /// Part of what kerf took is given back this cycle.
    pub releasing: bool,
}

/// The reason of phase `audit-only` under GlobalConfiguration `readOnly`.
pub const REASON_READ_ONLY: &str = "ReadOnly";

/// The reason while the metric source cannot be queried: an outage, not missing data
/// (`NoUsageData`).
pub const REASON_METRICS_UNAVAILABLE: &str = "MetricsUnavailable";

/// The phase and reason while the metric source cannot be queried: the phase in force stays
/// (`pending` when there was none), the reason says why nothing was re-evaluated.
pub fn phase_while_metrics_unavailable(
    previous: Option<&RecommendationStatus>,
) -> (RecommendationPhase, Option<String>) {
    let phase = previous.map_or(RecommendationPhase::Pending, |s| s.phase);
    (phase, Some(REASON_METRICS_UNAVAILABLE.to_string()))
}

/// The RightsizingRecommendation's phase and reason: the outcome's (`phase`, `reason`) unless a
/// gate stops it. A restore says its kind; a rollback holds the workload at `audit-only` (also
/// under `readOnly`, so the hold survives it); an `applied` outcome is `audit-only` under
/// `readOnly` and `blocked` (`Conflict`) while another manager takes its fields back; an
/// `audit-only` outcome giving back what kerf took says `Released`.
pub fn recommendation_phase(
    phase: RecommendationPhase,
    reason: Option<String>,
    gates: Gates,
) -> (RecommendationPhase, Option<String>) {
    let audit_only = |why: &str| (RecommendationPhase::AuditOnly, Some(why.to_string()));
    if let Some(kind) = gates.restore {
        return audit_only(kind.reason());
    }
    if gates.rolled_back {
        return audit_only(RestoreKind::Rollback.reason());
    }
    match phase {
        RecommendationPhase::Applied if gates.read_only => audit_only(REASON_READ_ONLY),
        RecommendationPhase::Applied if gates.conflict_blocked => (
            RecommendationPhase::Blocked,
            Some(kerf_api::REASON_CONFLICT.to_string()),
        ),
        RecommendationPhase::AuditOnly if gates.releasing => {
            audit_only(RestoreKind::Release.reason())
        }
        _ => (phase, reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RecommendationPhase::{Applied, AuditOnly, Blocked, Pending};

    fn phase(
        phase: RecommendationPhase,
        reason: Option<&str>,
        gates: Gates,
    ) -> (RecommendationPhase, Option<String>) {
        super::recommendation_phase(phase, reason.map(str::to_string), gates)
    }

    fn said(p: RecommendationPhase, reason: &str) -> (RecommendationPhase, Option<String>) {
        (p, Some(reason.to_string()))
    }

    /// docs/policies.md#cpu-percentile: the RightsizingRecommendation carries a floor's risk
    /// flag and its reason.
    #[test]
    fn recommendation_spec_says_what_floor_holds_a_request() {
        use crate::model::ResourceRequests;
        use crate::recommenders::resources::container::ContainerSignals;
        use crate::recommenders::resources::workload::{
            ContainerInput, History, WorkloadInput, evaluate_workload,
        };
        let input = WorkloadInput {
            policy: Default::default(),
            strategy_unresolved: None,
            containers: vec![ContainerInput {
                limits: ResourceRequests::default(),
                signals: ContainerSignals {
                    name: "app".into(),
                    current: ResourceRequests {
                        cpu_millis: Some(1000),
                        memory_bytes: Some(1 << 30),
                    },
                    cpu: Some(0.2),
                    memory: Some(f64::from(1 << 30)),
                    throttled: true,
                    ..Default::default()
                },
                in_scope: true,
                gpu_current: None,
                gpu_recommended: None,
            }],
            hpa: None,
            pod_level_resources: Vec::new(),
            vpa: None,
            limit_range: None,
            regular_containers: 1,
            quotas: Vec::new(),
            replicas: 1,
            history: History::default(),
            now: jiff::Timestamp::UNIX_EPOCH,
        };
        let outcome = evaluate_workload(&input).unwrap();
        let key = WorkloadKey::new("shop", kerf_api::WorkloadKind::Deployment, "web");
        let spec = recommendation_spec(&outcome, &key, None);
        assert_eq!(spec.risk_flags, ["throttled"]);
        assert_eq!(
            spec.risk_reasons,
            ["app: throttled; CPU request held at 1 (usage alone: 230m)"]
        );
    }

    #[test]
    fn pre_change_target() {
        let requests = |cpu| {
            ContainerRequests::from([(
                "app".into(),
                ResourceRequests {
                    cpu_millis: Some(cpu),
                    memory_bytes: None,
                },
            )])
        };
        let hpa = |before, after| CoordinatedHpa {
            hpa_name: "web".into(),
            resource: "cpu".into(),
            target_before: before,
            target_after: after,
        };
        let recorded = RecommendationStatus {
            applied: Some(Box::new(applied_change(&requests(700), Some(&hpa(50, 71))))),
            ..Default::default()
        };
        // The template half went through, the HPA half did not: the live pair gives 50 → 50.
        assert_eq!(
            super::pre_change_target(&requests(700), &hpa(50, 50), Some(&recorded)),
            Some(hpa(50, 71))
        );
        // Both halves went through: the live pair gives 71 → 71; the same target stands.
        assert_eq!(
            super::pre_change_target(&requests(700), &hpa(71, 71), Some(&recorded)),
            Some(hpa(50, 71))
        );
        assert_eq!(
            super::pre_change_target(&requests(700), &hpa(50, 71), Some(&recorded)),
            None,
            "already the plan's"
        );
        assert_eq!(
            super::pre_change_target(&requests(650), &hpa(71, 76), Some(&recorded)),
            None,
            "a new change is planned from the live pair"
        );
        let other = CoordinatedHpa {
            hpa_name: "web-2".into(),
            ..hpa(50, 50)
        };
        assert_eq!(
            super::pre_change_target(&requests(700), &other, Some(&recorded)),
            None
        );
        assert_eq!(
            super::pre_change_target(&requests(700), &hpa(50, 50), None),
            None
        );
    }

    #[test]
    fn phase_while_metrics_unavailable() {
        let status = |phase| RecommendationStatus {
            phase,
            reason: Some("HPACoupled".into()),
            ..Default::default()
        };
        for kept in [Applied, Blocked, AuditOnly, Pending] {
            assert_eq!(
                super::phase_while_metrics_unavailable(Some(&status(kept))),
                said(kept, "MetricsUnavailable")
            );
        }
        assert_eq!(
            super::phase_while_metrics_unavailable(None),
            said(Pending, "MetricsUnavailable")
        );
        assert_ne!(REASON_METRICS_UNAVAILABLE, "NoUsageData");
    }

    #[test]
    fn recommendation_phase() {
        let none = Gates::default();
        let read_only = Gates {
            read_only: true,
            ..none
        };
        let conflict = Gates {
            conflict_blocked: true,
            ..none
        };
        let rolled_back = Gates {
            rolled_back: true,
            ..none
        };
        // No gate: the outcome's own phase and reason.
        for (p, r) in [
            (Applied, None),
            (Pending, Some("InsufficientHistory")),
            (Blocked, Some("HPACoupled")),
            (AuditOnly, Some("StrategyUnresolved")),
        ] {
            assert_eq!(phase(p, r, none), (p, r.map(str::to_string)));
        }
        // A restore says its kind, whatever the outcome.
        for kind in [RestoreKind::Rollback, RestoreKind::Release] {
            let gates = Gates {
                restore: Some(kind),
                ..conflict
            };
            assert_eq!(phase(Applied, None, gates), said(AuditOnly, kind.reason()));
        }
        // A rollback holds, also under readOnly: the reason is what keeps it held next cycle.
        assert_eq!(
            phase(Applied, None, rolled_back),
            said(AuditOnly, "RolledBack")
        );
        let both = Gates {
            read_only: true,
            ..rolled_back
        };
        assert_eq!(phase(Applied, None, both), said(AuditOnly, "RolledBack"));
        // readOnly and a conflict stop only what would have been applied.
        assert_eq!(phase(Applied, None, read_only), said(AuditOnly, "ReadOnly"));
        assert_eq!(phase(Applied, None, conflict), said(Blocked, "Conflict"));
        for gates in [read_only, conflict] {
            assert_eq!(
                phase(Pending, Some("NoUsageData"), gates),
                said(Pending, "NoUsageData")
            );
            assert_eq!(
                phase(Blocked, Some("VPAConflict"), gates),
                said(Blocked, "VPAConflict")
            );
        }
        // Giving back what kerf took from a workload that left auto-patch says so.
        let releasing = Gates {
            releasing: true,
            ..none
        };
        assert_eq!(
            phase(AuditOnly, None, releasing),
            said(AuditOnly, "Released")
        );
        assert_eq!(phase(Applied, None, releasing), (Applied, None));
    }
}
