//! Write planning, pure: every write one cycle calls for, from the snapshot, the cycle's
//! outcome and the RightsizingRecommendations as last written — recommendations, GPU
//! annotations, coordinated changes, rollbacks and releases, events and policy conditions. The
//! writer (cluster or in-memory) skips what the objects already have.

use std::cell::{Cell, OnceCell};
use std::collections::{BTreeMap, BTreeSet};

use crate::hash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::pending::restart_left;
use super::recommendation::{
    Gates, RestoreHpa, RestorePlan, add_gpu, applied_change, coordinated_after_release,
    gpu_recommendation_spec, gpu_recommendation_status, keep_taken,
    phase_while_metrics_unavailable, plan_release, plan_restore, pre_change_target,
    recommendation_phase, recommendation_spec, recommendation_status,
};
use super::{
    ConditionUpdate, CoordinatedChange, EventWrite, EvictWrite, GpuAnnotations, HpaTarget, Kept,
    PlanWarning, PolicyStatusWrite, RecommendationWrite, ResizeWrite, RestoreKind, RestoreWrite,
    WorkloadWrite, WriteOp, gpu_restart_due, merge_conditions, requests_match,
};
use crate::grouping::pods_by_owner;
use crate::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, ANNOTATION_ROLLBACK, PolicyId,
    WorkloadKey,
};
use crate::persisted::PersistedRecommendation;
use crate::pod::Pod;
use crate::recommenders::cycle::WorkloadOutcome;
use crate::recommenders::cycle::{CycleOutput, QueryFailed};
use crate::recommenders::gpu::WorkloadResult;
use crate::recommenders::gpu::samples::{
    MissingSamples, REASON_NO_SAMPLES, REASON_SAMPLES_FOUND, condition_message,
};
use crate::recommenders::resources::workload::{AgentPlan, RightsizingOutcome, RsResult};
use crate::snapshot::{InvalidPolicy, REASON_STRATEGY_UNRESOLVED, Snapshot, Workload};
use crate::writes::conflict::{Assessment, ConflictInput, ConflictRules, assess};
use crate::writes::eviction::{Wanted, plan_eviction};
use crate::writes::method::{Delivery, MethodInput, delivery, gpu_delivery, running_pods_kept};
use crate::writes::recorded_values;
use crate::writes::resize::RESIZES_PER_CYCLE;
use crate::writes::write_method::{ray_cluster_config_write_method, template_write_method};
use kerf_api::{
    AppliedChange, ApplyMethod, CONDITION_METRICS_FOUND, CONDITION_PROMETHEUS_AVAILABLE,
    CONDITION_READY, CONDITION_STRATEGY_RESOLVED, PolicyStatus, REASON_CONFLICT,
    RecommendationPhase, RecommendationStatus, WorkloadKind, WriteMethod,
};

/// Name of a workload's RightsizingRecommendation: `<kind>-<name>`, lower-case kind.
pub fn recommendation_name(key: &WorkloadKey) -> String {
    // Built in place (no formatting machinery): named for every workload each cycle. Kinds are
    // ASCII.
    let kind = key.kind.as_str();
    let mut name = String::with_capacity(kind.len() + 1 + key.name.len());
    name.extend(kind.chars().map(|c| c.to_ascii_lowercase()));
    name.push('-');
    name.push_str(&key.name);
    name
}

fn owner_of(w: &Workload) -> Option<OwnerReference> {
    w.uid.as_ref().map(|uid| OwnerReference {
        api_version: w.key.kind.api_version().into(),
        kind: w.key.kind.as_str().into(),
        name: w.key.name.to_string(),
        uid: uid.clone(),
        ..Default::default()
    })
}

fn condition_writes(
    id: &PolicyId,
    generation: Option<i64>,
    observed: Option<PolicyStatus>,
    unresolved_strategy: Option<String>,
    prometheus: Option<&Result<(), QueryFailed>>,
    metrics_found: Option<ConditionUpdate>,
    matched: i64,
) -> WriteOp {
    let mut conditions = Vec::new();
    let strategy_ok = unresolved_strategy.is_none();
    conditions.push(match unresolved_strategy {
        None => ConditionUpdate::new(
            CONDITION_STRATEGY_RESOLVED,
            true,
            "Resolved",
            "automationStrategyRef resolves",
        ),
        Some(why) => ConditionUpdate::new(CONDITION_STRATEGY_RESOLVED, false, "NotFound", why),
    });
    match prometheus {
        Some(Ok(())) => conditions.push(ConditionUpdate::new(
            CONDITION_PROMETHEUS_AVAILABLE,
            true,
            "QueriesSucceeded",
            "the last range queries succeeded",
        )),
        Some(Err(e)) => conditions.push(ConditionUpdate::new(
            CONDITION_PROMETHEUS_AVAILABLE,
            false,
            "QueryFailed",
            format!("{e}; the last recommendations stay in force"),
        )),
        None => {}
    }
    conditions.extend(metrics_found);
    conditions.push(if strategy_ok {
        ConditionUpdate::new(
            CONDITION_READY,
            true,
            "Evaluated",
            format!("{matched} workload(s) selected"),
        )
    } else {
        ConditionUpdate::new(
            CONDITION_READY,
            false,
            REASON_STRATEGY_UNRESOLVED,
            "the policy is not applied",
        )
    });
    WriteOp::PolicyStatus(Box::new(PolicyStatusWrite {
        policy: id.clone(),
        generation,
        observed,
        conditions,
        matched_workloads: Some(matched),
    }))
}

/// `MetricsFound` of a GPU policy whose queries were answered (docs/design/gpu-engine.md#g13):
/// `False` (`NoSamples`) naming each signal some selected pod had no sample of.
fn metrics_found(
    missing: &[MissingSamples],
    coverage: Option<(Timestamp, Timestamp)>,
) -> ConditionUpdate {
    if missing.is_empty() {
        ConditionUpdate::new(
            CONDITION_METRICS_FOUND,
            true,
            REASON_SAMPLES_FOUND,
            "every selected pod has samples of both metrics",
        )
    } else {
        ConditionUpdate::new(
            CONDITION_METRICS_FOUND,
            false,
            REASON_NO_SAMPLES,
            condition_message(missing, coverage),
        )
    }
}

/// A rollback was asked for: the workload carries `rightsizing.kubex.ai/rollback` with a
/// non-empty value.
pub fn rollback_requested(w: &Workload) -> bool {
    w.annotations
        .get(ANNOTATION_ROLLBACK)
        .is_some_and(|v| !v.trim().is_empty())
}

/// The recommendation says kerf was rolled back there and must not apply (until it is deleted).
pub fn rolled_back(status: Option<&RecommendationStatus>) -> bool {
    status.is_some_and(|s| {
        s.phase == RecommendationPhase::AuditOnly
            && s.reason.as_deref() == Some(RestoreKind::Rollback.reason())
    })
}

/// kerf applied something there that a release must give back.
fn kerf_applied(status: Option<&RecommendationStatus>) -> bool {
    status.is_some_and(|s| {
        s.previous_hpa_target.is_some()
            || !s.original_requests.is_empty()
            || !s.created_requests.is_empty()
    })
}

/// The HPA `name` in the workload's namespace, as last seen.
fn hpa_named<'a>(
    snapshot: &'a Snapshot,
    key: &WorkloadKey,
    name: &str,
) -> Option<&'a HorizontalPodAutoscaler> {
    snapshot.hpas.iter().find(|x| {
        x.metadata.namespace.as_deref() == Some(key.namespace.as_str())
            && x.metadata.name.as_deref() == Some(name)
    })
}

/// The target kerf sets on the HPA `name` of the workload `key`.
fn hpa_target(
    snapshot: &Snapshot,
    key: &WorkloadKey,
    name: &str,
    resource: &str,
    target: i32,
) -> HpaTarget {
    HpaTarget {
        namespace: key.namespace.to_string(),
        name: name.to_string(),
        resource: resource.to_string(),
        average_utilization: target,
        observed: hpa_named(snapshot, key, name).cloned(),
    }
}

/// The HPA target a restore writes back; none when the HPA no longer exists (it is not
/// recreated).
fn restore_target(snapshot: &Snapshot, key: &WorkloadKey, h: &RestoreHpa) -> Option<HpaTarget> {
    hpa_named(snapshot, key, &h.name)?;
    Some(hpa_target(snapshot, key, &h.name, &h.resource, h.target))
}

/// The RightsizingRecommendations by (namespace, name): looked up once per workload, so a
/// cycle stays linear in the number of workloads.
struct RecommendationIndex<'a>(HashMap<(&'a str, &'a str), &'a PersistedRecommendation>);

impl<'a> RecommendationIndex<'a> {
    fn new(recommendations: &'a [Arc<PersistedRecommendation>]) -> Self {
        Self(
            recommendations
                .iter()
                .map(|rec| ((rec.namespace.as_str(), rec.name.as_str()), &**rec))
                .collect(),
        )
    }

    /// The recommendation of the workload `key`.
    fn find(&self, key: &WorkloadKey) -> Option<&'a PersistedRecommendation> {
        let name = recommendation_name(key);
        self.0
            .get(&(key.namespace.as_str(), name.as_str()))
            .copied()
    }
}

/// Workloads whose CPU/memory kerf must not set, at admission or by the agent: a rollback is
/// asked for or was done (see [`rolled_back`]).
pub fn held_back(
    snapshot: &Snapshot,
    recommendations: &[Arc<PersistedRecommendation>],
) -> BTreeSet<WorkloadKey> {
    let mut out: BTreeSet<WorkloadKey> = snapshot
        .workloads
        .iter()
        .filter(|w| rollback_requested(w))
        .map(|w| w.key.clone())
        .collect();
    out.extend(
        recommendations
            .iter()
            .filter(|r| rolled_back(r.status.as_deref()))
            .filter_map(|r| r.workload()),
    );
    out
}

/// What every step of write planning reads: the snapshot, the cycle's outcome, the workloads and
/// the RightsizingRecommendations by key, and `now`.
struct Planning<'a> {
    snapshot: &'a Snapshot,
    cycle: &'a CycleOutput,
    recommendations: &'a [Arc<PersistedRecommendation>],
    workloads: HashMap<&'a WorkloadKey, &'a Arc<Workload>>,
    index: RecommendationIndex<'a>,
    now: Timestamp,
    /// Pods still to be asked to resize in place this cycle ([`RESIZES_PER_CYCLE`]).
    resize_budget: Cell<usize>,
    /// Each workload's pods (indexes into the snapshot's), built when a change is resized in
    /// place.
    pods_by_owner: OnceCell<HashMap<WorkloadKey, Vec<usize>>>,
}

impl Planning<'_> {
    /// How a template write of `kind` is sent (docs/gitops.md#how-kerf-writes).
    fn write_method(&self, kind: WorkloadKind) -> WriteMethod {
        template_write_method(kind, self.snapshot.crd_schema(kind)).0
    }

    /// How the CPU/memory change of `w` is written: [`Planning::write_method`], or into a
    /// RayService's `spec.rayClusterConfig`.
    fn change_write_method(&self, w: &Workload) -> WriteMethod {
        workload_write_method(w, self.snapshot).0
    }

    /// The running pods of `key` (not being deleted).
    fn running_pods(&self, key: &WorkloadKey) -> Vec<&Pod> {
        let by_owner = self
            .pods_by_owner
            .get_or_init(|| pods_by_owner(self.snapshot));
        by_owner
            .get(key)
            .into_iter()
            .flatten()
            .map(|i| &*self.snapshot.pods[*i])
            .filter(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .collect()
    }

    /// [`Planning::delivery`] of the outcome's change, recorded in `status` (`applyMethod`, and
    /// `resize` while kerf writes).
    #[allow(clippy::too_many_arguments)]
    fn delivery_recorded(
        &self,
        wo: &WorkloadOutcome,
        r: &RsResult,
        w: &Workload,
        outcome: &RightsizingOutcome,
        writing: bool,
        status: &mut RecommendationStatus,
        previous: Option<&RecommendationStatus>,
    ) -> Option<Delivery> {
        let delivery = match outcome.apply.as_ref() {
            Some(a) => Some(self.delivery(wo, r, w, a, previous, writing)),
            None => self.gpu_delivery(wo.gpu.as_deref(), w, previous, writing),
        };
        status.apply_method = delivery.as_ref().map(|d| d.method);
        let writes_template = matches!(
            status.apply_method,
            Some(ApplyMethod::Rollout | ApplyMethod::Evict)
        );
        record_write_method(status, w, self.snapshot, writes_template);
        status.resize = delivery
            .as_ref()
            .filter(|_| writing)
            .and_then(Delivery::status);
        status.eviction = delivery
            .as_ref()
            .and_then(|d| d.eviction.as_ref())
            .map(|e| Box::new(e.status.clone()));
        delivery
    }

    /// How the change of a workload reaches its running pods; `writing`: kerf writes it this
    /// cycle (else only the method is said, no pod is looked at or asked).
    fn delivery(
        &self,
        wo: &WorkloadOutcome,
        r: &RsResult,
        w: &Workload,
        apply: &AgentPlan,
        previous: Option<&RecommendationStatus>,
        writing: bool,
    ) -> Delivery {
        let strategy_in_place = self
            .snapshot
            .rightsizing_policies
            .iter()
            .find(|policy| policy.id == r.policy)
            .and_then(|policy| {
                self.snapshot.strategy(
                    policy.id.namespace.as_deref(),
                    &policy.spec.automation_strategy_ref.name,
                )
            })
            .is_some_and(|s| s.resize_in_place());
        let gpu_recreates = wo
            .gpu
            .as_deref()
            .filter(|g| !g.metrics_unavailable)
            .is_some_and(|g| {
                let annotations = GpuAnnotations {
                    baseline: g.baseline.clone(),
                    recommendation: g.recommendation.as_deref().cloned(),
                };
                gpu_restart_due(w, &annotations)
            });
        // A RayService's change is written to its rayClusterConfig: KubeRay rolls it.
        let template_writable = w.template_writable() || w.writes_ray_cluster_config();
        let pods = if writing && (strategy_in_place || !template_writable) {
            self.running_pods(&r.key)
        } else {
            Vec::new()
        };
        let input = MethodInput {
            template_writable,
            new_pods_only: running_pods_kept(w.key.kind),
            strategy_in_place,
            support: self.snapshot.resize,
            coordinated: apply.hpa.is_some(),
            gpu_recreates,
            recorded_fallback: previous
                .and_then(|s| s.resize.as_ref())
                .and_then(|r| r.fallback.as_ref()),
            pods: &pods,
            requests: &apply.requests,
            limits: &apply.limits,
            now: self.now,
            last_request: previous
                .and_then(|s| s.resize.as_ref())
                .and_then(|r| r.last_request_time.as_deref())
                .and_then(|t| t.parse().ok()),
        };
        let mut budget = if writing { self.resize_budget.get() } else { 0 };
        let mut d = delivery(&input, &mut budget);
        if writing {
            self.resize_budget.set(budget);
        }
        if writing && d.method == ApplyMethod::Evict {
            let wanted = Wanted {
                requests: &apply.requests,
                limits: &apply.limits,
                gpu: gpu_wanted(wo.gpu.as_deref()),
            };
            d.eviction = Some(self.eviction(w, &pods, wanted, previous));
        }
        d
    }

    /// This cycle's eviction of an owned workload's running `pods`, paced from the last one
    /// recorded.
    fn eviction(
        &self,
        w: &Workload,
        pods: &[&Pod],
        wanted: Wanted<'_>,
        previous: Option<&RecommendationStatus>,
    ) -> super::eviction::EvictionPlan {
        let recorded = previous.and_then(|s| s.eviction.as_deref());
        plan_eviction(pods, w.replicas, wanted, recorded, self.now)
    }

    /// How a GPU recommendation without a CPU/memory change reaches the running pods
    /// ([`gpu_delivery`]); `None` without a recommendation. `writing`: an owned workload's pods
    /// are looked at and one evicted when due.
    fn gpu_delivery(
        &self,
        gpu: Option<&WorkloadResult>,
        w: &Workload,
        previous: Option<&RecommendationStatus>,
        writing: bool,
    ) -> Option<Delivery> {
        let wanted_gpu = gpu
            .filter(|g| !g.metrics_unavailable)
            .and_then(|g| g.recommendation.as_deref())?;
        let mut d = gpu_delivery(w.template_writable(), running_pods_kept(w.key.kind));
        if writing && d.method == ApplyMethod::Evict {
            let pods = self.running_pods(&w.key);
            let none = crate::model::ContainerRequests::default();
            let wanted = Wanted {
                requests: &none,
                limits: &none,
                gpu: Some(&wanted_gpu.containers),
            };
            d.eviction = Some(self.eviction(w, &pods, wanted, previous));
        }
        Some(d)
    }
}

/// The GPUs an owned workload's new pods are admitted with, which its running pods are
/// replaced to get: the recommendation, while its metrics answer.
fn gpu_wanted(gpu: Option<&WorkloadResult>) -> Option<&crate::model::GpuMap> {
    gpu.filter(|g| !g.metrics_unavailable)
        .and_then(|g| g.recommendation.as_deref())
        .map(|r| &r.containers)
}

/// An owned workload's GPU recommendation and baseline, published in `status.applied` for
/// admission to serve (kerf writes no annotation on an object another controller owns); kept
/// as last published while the GPU metrics are unavailable.
fn publish_owned_gpu(
    status: &mut RecommendationStatus,
    w: &Workload,
    gpu: Option<&WorkloadResult>,
    previous: Option<&RecommendationStatus>,
    writes: bool,
) {
    if w.template_writable() {
        return;
    }
    let published = match gpu {
        Some(g) if writes && !g.metrics_unavailable => GpuAnnotations {
            baseline: g.baseline.clone(),
            recommendation: g.recommendation.as_deref().cloned(),
        }
        .rendered()
        .into_iter()
        .collect(),
        _ => previous
            .and_then(|s| s.applied.as_ref())
            .map(|a| a.gpu_annotations.clone())
            .unwrap_or_default(),
    };
    if published.is_empty() {
        if let Some(a) = status.applied.as_mut() {
            a.gpu_annotations = published;
        }
        return;
    }
    status
        .applied
        .get_or_insert_with(Default::default)
        .gpu_annotations = published;
}

/// The status a restore leaves: audit-only with the restore's reason; nothing kerf applied is
/// left to give back.
fn restored_status(mut status: RecommendationStatus, kind: RestoreKind) -> RecommendationStatus {
    let gates = Gates {
        restore: Some(kind),
        ..Gates::default()
    };
    (status.phase, status.reason) = recommendation_phase(status.phase, status.reason.take(), gates);
    status.previous_hpa_target = None;
    status.original_requests.clear();
    status.created_requests.clear();
    status.applied = None;
    status
}

/// The workloads whose own requests are restored this cycle: a rollback asked for on the
/// workload, or a release of one kerf applied to that no policy covers any more.
fn restores_due(
    p: &Planning<'_>,
    results: &HashMap<&WorkloadKey, &RsResult>,
) -> BTreeMap<WorkloadKey, RestoreKind> {
    let mut due: BTreeMap<WorkloadKey, RestoreKind> = p
        .snapshot
        .workloads
        .iter()
        .filter(|w| rollback_requested(w))
        .map(|w| (w.key.clone(), RestoreKind::Rollback))
        .collect();
    for rec in p.recommendations {
        let Some(key) = rec.workload() else {
            continue;
        };
        if due.contains_key(&key)
            || !p.workloads.contains_key(&key)
            || !kerf_applied(rec.status.as_deref())
        {
            continue;
        }
        if !results.contains_key(&key) {
            due.insert(key, RestoreKind::Release);
        }
    }
    due
}

/// What a restore writes back of the recommendation as last written; the reason nothing is
/// restored when it cannot be read.
fn restore_plan(observed: Option<&PersistedRecommendation>) -> (RestorePlan, Option<String>) {
    let Some((spec, status)) = observed.and_then(|rec| Some((&rec.spec, rec.status.as_deref()?)))
    else {
        return (RestorePlan::default(), None);
    };
    match plan_restore(spec, status) {
        Ok(plan) => (plan, None),
        Err(e) => (
            RestorePlan::default(),
            Some(format!("nothing restored: {e}")),
        ),
    }
}

/// Rollbacks (annotation) and the release of workloads the cycle has no CPU/memory result for
/// (policy deleted, no longer selected, its strategy does not resolve) that kerf applied to:
/// one [`RestoreWrite`] each. Nothing under `readOnly`. A workload with a result is released
/// field by field by [`resource_writes`].
fn restore_writes(p: &Planning<'_>) -> BTreeMap<WorkloadKey, WriteOp> {
    let mut out = BTreeMap::new();
    if p.snapshot.global.read_only {
        return out;
    }
    let results: HashMap<&WorkloadKey, &RsResult> =
        p.cycle.resource_results().map(|r| (&r.key, r)).collect();
    for (key, kind) in restores_due(p, &results) {
        // kerf never wrote a template another controller owns: nothing to put back.
        let Some(w) = p.workloads.get(&key).filter(|w| w.template_writable()) else {
            continue;
        };
        let observed = p.index.find(&key).cloned();
        let outcome = results
            .get(&key)
            .and_then(|r| r.outcome.as_ref().ok().map(|o| (o, &r.policy)));
        let (plan, problem) = restore_plan(observed.as_ref());
        let hpa = plan
            .hpa
            .as_ref()
            .and_then(|h| restore_target(p.snapshot, &key, h));
        let hpa_from = hpa.as_ref().and_then(HpaTarget::current).map(|(_, t)| t);
        let recommendation = match (&observed, outcome) {
            (_, Some((o, policy))) => {
                let prev = observed.as_ref().and_then(|r| r.status.as_deref());
                let mut spec = recommendation_spec(o, &key, Some(policy));
                if let Some(g) = p.cycle.gpu_results().find(|g| g.key == key) {
                    add_gpu(&mut spec, g);
                }
                Some((spec, recommendation_status(o, prev)))
            }
            (Some(rec), None) => Some((
                rec.spec.clone(),
                rec.status.as_deref().cloned().unwrap_or_default(),
            )),
            (None, None) => None,
        }
        .map(|(spec, status)| {
            let mut status = restored_status(status, kind);
            status.last_applied_time = Some(crate::model::rfc3339_secs(p.now));
            RecommendationWrite {
                namespace: key.namespace.to_string(),
                name: recommendation_name(&key),
                spec,
                status: Some(status),
                owner: owner_of(w),
                observed: observed.clone(),
            }
        });
        let event = EventWrite::restored(
            w,
            kind,
            (&plan.requests, &plan.removed),
            hpa.as_ref(),
            hpa_from,
            problem.as_deref(),
        );
        out.insert(
            key,
            WriteOp::Restore(Box::new(RestoreWrite {
                kind,
                observed: Arc::clone(w),
                requests: plan.requests,
                removed: plan.removed,
                hpa,
                keep: None,
                recommendation,
                event,
                method: p.write_method(w.template_write_key().kind),
            })),
        );
    }
    out
}

/// The verdict of a workload with no conflict, as [`assess`] gives it.
static QUIET: Assessment = Assessment {
    status: None,
    blocked: false,
    counted: Vec::new(),
    blocking: None,
    resumed: None,
    condition: None,
    restore_hpa: None,
    restore_requests: None,
};

/// Field conflicts (docs/gitops.md) of the workloads the cycle evaluated, from the objects and
/// the RightsizingRecommendations as last written. Only verdicts with something in them are
/// kept: one per workload was ≈40 MB of hash table at 150,000 pods, nearly all of it quiet.
struct Conflicts<'a> {
    /// Under `readOnly` nothing is assessed: kerf writes nothing, so nothing is fought over,
    /// and `status.conflict` is carried over as it is.
    read_only: bool,
    found: HashMap<&'a WorkloadKey, Assessment>,
}

impl<'a> Conflicts<'a> {
    fn assess(p: &Planning<'a>) -> Self {
        let read_only = p.snapshot.global.read_only;
        let found = if read_only {
            HashMap::new()
        } else {
            p.cycle
                .workloads
                .iter()
                .filter_map(|wo| {
                    let w = p.workloads.get(wo.key())?;
                    let previous = p.index.find(wo.key()).and_then(|r| r.status.as_deref());
                    // Resized in place or replaced by eviction: kerf writes no template field,
                    // so another manager's apply of the template takes nothing back.
                    let untouched = previous.and_then(|s| s.apply_method).is_some_and(|m| {
                        matches!(
                            m,
                            kerf_api::ApplyMethod::InPlace
                                | kerf_api::ApplyMethod::Evict
                                | kerf_api::ApplyMethod::Admission
                        )
                    });
                    if untouched || !w.template_writable() {
                        return None;
                    }
                    let input = ConflictInput {
                        workload: w,
                        hpas: &p.snapshot.hpas,
                        previous,
                        now: p.now,
                        rules: ConflictRules::default(),
                    };
                    Some((wo.key(), assess(&input))).filter(|(_, a)| *a != QUIET)
                })
                .collect()
        };
        Self { read_only, found }
    }

    /// The verdict on an evaluated workload (`None` under `readOnly` or for a workload not in
    /// the snapshot).
    fn of(
        &self,
        key: &WorkloadKey,
        workloads: &HashMap<&WorkloadKey, &Arc<Workload>>,
    ) -> Option<&Assessment> {
        if self.read_only || !workloads.contains_key(key) {
            return None;
        }
        Some(self.found.get(key).unwrap_or(&QUIET))
    }

    /// Another manager keeps taking the workload's fields back: kerf does not write it.
    fn blocks(&self, key: &WorkloadKey) -> bool {
        self.found.get(key).is_some_and(|a| a.blocked)
    }
}

/// The conflict verdict on a RightsizingRecommendation status: `status.conflict` and the
/// `Conflict` condition (the phase is [`recommendation_phase`]'s).
fn record_conflict(
    status: &mut RecommendationStatus,
    conflict: Option<&Assessment>,
    now: Timestamp,
) {
    let Some(a) = conflict else { return };
    status.conflict = a.status.clone();
    if let Some(c) = &a.condition {
        status.conditions =
            merge_conditions(&status.conditions, std::slice::from_ref(c), None, now);
    }
}

/// The Warning Event of the cycle that stops writing a workload, naming the other manager; a
/// Normal `Resumed` Event in the cycle that writes it again.
fn conflict_event(w: &Workload, conflict: Option<&Assessment>) -> Option<WriteOp> {
    let a = conflict?;
    if let Some((t, message)) = &a.blocking {
        let mut event = EventWrite::blocked(w, REASON_CONFLICT, message);
        event.details.insert("manager".into(), t.manager.clone());
        event.details.insert("field".into(), t.field.clone());
        return Some(WriteOp::Event(Box::new(event)));
    }
    a.resumed.as_ref()?;
    let c = a.condition.as_ref()?;
    Some(WriteOp::Event(Box::new(EventWrite {
        regarding: w.key.clone(),
        uid: w.uid.clone(),
        warning: false,
        reason: "Resumed".into(),
        action: "Rightsize".into(),
        note: c.message.clone(),
        details: [("reason".to_string(), c.reason.clone())].into(),
    })))
}

/// The RightsizingRecommendation write, unless the object already says it all.
fn recommendation_write(recommendation: RecommendationWrite) -> Option<WriteOp> {
    let unchanged = recommendation.observed.as_ref().is_some_and(|o| {
        RecommendationWrite::in_place(
            o,
            &recommendation.spec,
            recommendation.status.as_ref(),
            recommendation.owner.as_ref(),
        )
    });
    (!unchanged).then(|| WriteOp::Recommendation(Box::new(recommendation)))
}

/// The RightsizingRecommendation of a workload only GPU reactive policies cover
/// (docs/design/gpu-engine.md#g10), so `kubectl get rightsizingrecommendations` lists it. None
/// while its metrics are unavailable (the last one stays), without a policy that applies, or
/// when a restore of the workload writes its recommendation this cycle.
fn gpu_only_recommendation(
    p: &Planning<'_>,
    gpu: &WorkloadResult,
    restores: &BTreeMap<WorkloadKey, WriteOp>,
    conflict: Option<&Assessment>,
) -> Vec<WriteOp> {
    if gpu.metrics_unavailable || gpu.policies.is_empty() || restores.contains_key(&gpu.key) {
        return Vec::new();
    }
    let Some(w) = p.workloads.get(&gpu.key) else {
        return Vec::new();
    };
    let observed = p.index.find(&gpu.key);
    let previous = observed.and_then(|o| o.status.as_deref());
    let mut status = gpu_recommendation_status(gpu, previous);
    let gates = Gates {
        rolled_back: rolled_back(previous),
        read_only: p.snapshot.global.read_only,
        conflict_blocked: conflict.is_some_and(|a| a.blocked),
        ..Gates::default()
    };
    (status.phase, status.reason) = recommendation_phase(status.phase, status.reason.take(), gates);
    record_conflict(&mut status, conflict, p.now);
    let writing = !p.snapshot.global.read_only && !gates.rolled_back && !gates.conflict_blocked;
    if !writing {
        status.pending = previous.and_then(|s| s.pending.clone());
    }
    let writes = gpu.recommendation.is_some() && !p.snapshot.global.read_only;
    record_write_method(&mut status, w, p.snapshot, writes);
    publish_owned_gpu(&mut status, w, Some(gpu), previous, writing);
    let delivery = p.gpu_delivery(Some(gpu), w, previous, writing);
    status.apply_method = delivery.as_ref().map(|d| d.method);
    status.eviction = delivery
        .as_ref()
        .and_then(|d| d.eviction.as_ref())
        .map(|e| Box::new(e.status.clone()));
    if delivery
        .as_ref()
        .and_then(|d| d.eviction.as_ref())
        .is_some_and(|e| e.evict.is_some())
    {
        status.last_applied_time = Some(crate::model::rfc3339_secs(p.now));
    }
    let recommendation = RecommendationWrite {
        namespace: gpu.key.namespace.to_string(),
        name: recommendation_name(&gpu.key),
        spec: gpu_recommendation_spec(gpu, &gpu.key, w.replicas.unwrap_or(1)),
        status: Some(status),
        owner: owner_of(w),
        observed: observed.cloned(),
    };
    recommendation_write(recommendation)
        .into_iter()
        .chain(conflict_event(w, conflict))
        .chain(delivery.as_ref().and_then(|d| evict_write(w, d)))
        .collect()
}

/// The phase and reason of a workload's recommendation under the gates of this cycle
/// (`rolled_back`: its previous status says it was rolled back).
fn set_phase(
    status: &mut RecommendationStatus,
    outcome: &RightsizingOutcome,
    standing: Standing,
    rolled_back: bool,
    releasing: bool,
) {
    let gates = Gates {
        restore: None,
        rolled_back,
        read_only: standing.read_only,
        conflict_blocked: standing.fight,
        releasing,
    };
    (status.phase, status.reason) =
        recommendation_phase(outcome.phase, outcome.reason.clone(), gates);
}

/// How the workload's template write is sent (docs/gitops.md#how-kerf-writes), recorded in its
/// status when kerf writes one (`writes`); `evict` where kerf writes no template.
fn record_write_method(
    status: &mut RecommendationStatus,
    w: &Workload,
    snapshot: &Snapshot,
    writes: bool,
) {
    let (method, reason) = match writes {
        true => {
            let (m, r) = workload_write_method(w, snapshot);
            (Some(m), Some(r))
        }
        false => (None, None),
    };
    status.write_method = method;
    status.write_method_reason = reason;
}

/// How a write of `w`'s change is sent, and why: a RayService that rolls to a new cluster on a
/// change is written in its `spec.rayClusterConfig`, any other by its kind's CRD schema.
fn workload_write_method(
    w: &Workload,
    snapshot: &Snapshot,
) -> (WriteMethod, std::borrow::Cow<'static, str>) {
    if w.writes_ray_cluster_config() {
        return ray_cluster_config_write_method();
    }
    let kind = w.template_write_key().kind;
    template_write_method(kind, snapshot.crd_schema(kind))
}

/// Where a workload with a CPU/memory result stands this cycle.
#[derive(Clone, Copy, Debug)]
struct Standing {
    metrics_unavailable: bool,
    read_only: bool,
    /// Rolled back (or asked to be): recommendation only.
    held: bool,
    /// Another manager keeps taking its fields back.
    fight: bool,
}

impl Standing {
    fn of(
        p: &Planning<'_>,
        r: &RsResult,
        w: &Workload,
        previous: Option<&RecommendationStatus>,
        conflict: Option<&Assessment>,
    ) -> Self {
        Standing {
            metrics_unavailable: r.metrics_unavailable,
            read_only: p.snapshot.global.read_only,
            held: rolled_back(previous) || rollback_requested(w),
            fight: conflict.is_some_and(|a| a.blocked),
        }
    }
}

impl Standing {
    /// A cycle that writes nothing to the workload takes nothing and gives nothing back.
    fn writes(self) -> bool {
        !self.metrics_unavailable && !self.read_only && !self.held && !self.fight
    }
}

/// What kerf gives back this cycle of what it took that the outcome no longer manages; a
/// warning when the recorded values cannot be read.
fn release_plan(
    r: &RsResult,
    observed: Option<&PersistedRecommendation>,
    outcome: &RightsizingOutcome,
    standing: Standing,
) -> (RestorePlan, Option<WriteOp>) {
    let recorded = observed.and_then(|rec| Some((&rec.spec, rec.status.as_deref()?)));
    let Some((spec, previous)) = recorded.filter(|_| standing.writes()) else {
        return (RestorePlan::default(), None);
    };
    match plan_release(spec, previous, &outcome.managed) {
        Ok(plan) => (plan, None),
        Err(e) => {
            let warning = WriteOp::Warning(Box::new(PlanWarning {
                workload: r.key.clone(),
                message: format!("nothing released: {e}"),
            }));
            (RestorePlan::default(), Some(warning))
        }
    }
}

/// The outcome once a release went through: requests put back on containers the HPA counts
/// move its target with them. `None` when nothing moves.
fn coordinated_outcome(
    outcome: &RightsizingOutcome,
    release: &RestorePlan,
) -> Option<RightsizingOutcome> {
    let plan = outcome.apply.as_ref().filter(|_| !release.is_empty())?;
    let h = coordinated_after_release(outcome, plan, release)?;
    let mut o = outcome.clone();
    if let Some(oh) = o.hpa.as_mut() {
        oh.target_after = Some(h.target_after);
    }
    if let Some(p) = o.apply.as_mut() {
        p.hpa = Some(h);
    }
    Some(o)
}

/// The outcome with the coordinated HPA target planned from the pre-change pair
/// ([`pre_change_target`]); `None` when the outcome's own stands.
fn with_pre_change_target(
    outcome: &RightsizingOutcome,
    previous: Option<&RecommendationStatus>,
) -> Option<RightsizingOutcome> {
    let plan = outcome.apply.as_ref()?;
    let kept = pre_change_target(&plan.requests, plan.hpa.as_ref()?, previous)?;
    let mut o = outcome.clone();
    if let Some(h) = o.hpa.as_mut() {
        h.target_before = Some(kept.target_before);
        h.target_after = Some(kept.target_after);
    }
    if let Some(p) = o.apply.as_mut() {
        p.hpa = Some(kept);
    }
    Some(o)
}

/// What every replica serves at admission (`status.applied`): this cycle's plan; while another
/// manager takes the template back, the requests alone (never a coordinated HPA target kerf
/// cannot set now: requests and target change together or not at all); the last one while the
/// metrics are unavailable (`carried`); else nothing.
fn served(
    outcome: &RightsizingOutcome,
    plan: Option<&AgentPlan>,
    standing: Standing,
    carried: Option<Box<AppliedChange>>,
) -> Option<Box<AppliedChange>> {
    if let Some(p) = plan {
        let mut change = applied_change(&p.requests, p.hpa.as_ref());
        change.limits = recorded_values(&p.limits);
        return Some(Box::new(change));
    }
    if standing.fight && !standing.held && !standing.metrics_unavailable && !standing.read_only {
        return outcome
            .apply
            .as_ref()
            .filter(|p| p.hpa.is_none())
            .map(|p| Box::new(applied_change(&p.requests, None)));
    }
    if !standing.metrics_unavailable || standing.held {
        return None;
    }
    carried
}

/// The Warning Event of the cycle in which the outcome becomes `blocked`.
fn blocked_event(
    w: &Workload,
    outcome: &RightsizingOutcome,
    previous: Option<&RecommendationStatus>,
    held: bool,
) -> Option<WriteOp> {
    let was_blocked = previous.is_some_and(|s| s.phase == RecommendationPhase::Blocked);
    (outcome.phase == RecommendationPhase::Blocked && !was_blocked && !held).then(|| {
        let reason = outcome
            .reason
            .clone()
            .unwrap_or_else(|| "HPACoupled".into());
        WriteOp::Event(Box::new(EventWrite::blocked(w, &reason, &outcome.message)))
    })
}

/// The writes of one workload with a CPU/memory result: its RightsizingRecommendation, the
/// change (coordinated when an HPA is), what a release gives back, and the events.
fn resource_writes(
    p: &Planning<'_>,
    wo: &WorkloadOutcome,
    r: &RsResult,
    conflict: Option<&Assessment>,
) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    let Ok(outcome) = &r.outcome else { return ops };
    let Some(w) = p.workloads.get(&r.key) else {
        return ops;
    };
    let observed = p.index.find(&r.key).cloned();
    let previous = observed.as_ref().and_then(|o| o.status.as_deref().cloned());
    let mut status = recommendation_status(outcome, previous.as_ref());
    let standing = Standing::of(p, r, w, previous.as_ref(), conflict);
    if !standing.writes() {
        keep_taken(&mut status, previous.as_ref());
        status.pending = previous.as_ref().and_then(|s| s.pending.clone());
    }
    let (release, warning) = match w.template_writable() {
        true => release_plan(r, observed.as_ref(), outcome, standing),
        // kerf never wrote a template another controller owns: nothing to give back.
        false => (RestorePlan::default(), None),
    };
    ops.extend(warning);
    let adjusted = coordinated_outcome(outcome, &release)
        .or_else(|| with_pre_change_target(outcome, previous.as_ref()));
    let outcome = adjusted.as_ref().unwrap_or(outcome);
    let plan = outcome.apply.as_ref().filter(|_| standing.writes());
    status.applied = served(outcome, plan, standing, status.applied.take());
    publish_owned_gpu(
        &mut status,
        w,
        wo.gpu.as_deref(),
        previous.as_ref(),
        standing.writes(),
    );
    // Without a CPU/memory plan, a GPU change alone is delivered while kerf writes.
    let writing = plan.is_some() || (outcome.apply.is_none() && standing.writes());
    let delivery = p.delivery_recorded(wo, r, w, outcome, writing, &mut status, previous.as_ref());
    let template_untouched = delivery.as_ref().is_some_and(Delivery::writes_no_template);
    let kept_hpa = plan
        .and_then(|plan| plan.hpa.as_ref())
        .map(|h| hpa_target(p.snapshot, &r.key, &h.hpa_name, &h.resource, h.target_after));
    let changing = change_due(w, plan, delivery.as_ref(), kept_hpa.as_ref(), &release);
    if changing || !release.is_empty() {
        status.last_applied_time = Some(crate::model::rfc3339_secs(p.now));
    }
    release.settle(&mut status);
    let held_back = rolled_back(previous.as_ref());
    set_phase(
        &mut status,
        outcome,
        standing,
        held_back,
        !release.is_empty(),
    );
    record_conflict(&mut status, conflict, p.now);
    let mut recommendation = recommendation_of(wo, r, w, outcome, status, observed);
    kept_through_outage(&mut recommendation, previous.as_ref(), standing);
    let blocked = blocked_event(w, outcome, previous.as_ref(), standing.held);
    // A retry of the HPA half changes no template, yet completes the change.
    let hpa_moves = kept_hpa.as_ref().is_some_and(|h| !h.in_place());
    let applied = plan
        .and_then(|plan| plan.hpa.as_ref())
        .filter(|_| changing || hpa_moves)
        .map(|h| WriteOp::Event(Box::new(EventWrite::applied(w, h))));
    if !release.is_empty() {
        // The release, with what kerf keeps applying, in one step.
        let kept = plan.map(|plan| Kept {
            requests: plan.requests.clone(),
            limits: plan.limits.clone(),
            hpa: kept_hpa,
        });
        ops.push(release_write(p, w, release, kept, recommendation));
        ops.extend(blocked);
        ops.extend(applied);
        return ops;
    }
    let resize = delivery
        .as_ref()
        .filter(|_| plan.is_some())
        .and_then(|d| resize_write(w, d, &recommendation));
    ops.extend(recommendation_write(recommendation));
    ops.extend(half_pair_write(p, w, conflict).filter(|_| !standing.held && !standing.read_only));
    ops.extend(blocked);
    ops.extend(conflict_event(w, conflict).filter(|_| !standing.held));
    ops.extend(delivery.as_ref().and_then(|d| evict_write(w, d)));
    let Some(plan) = plan else { return ops };
    ops.extend(resize);
    if !template_untouched {
        ops.push(template_write(w, plan, kept_hpa, p.change_write_method(w)));
        ops.extend(applied);
    }
    ops
}

/// The other half of a coordinated pair another manager took back half of, set back
/// ([`super::conflict::half_pair_restore`], [`super::conflict::half_pair_requests_restore`]):
/// the HPA to the target before the change, or the requests to the values from before kerf's
/// change as a rollback writes them (their limits with them). Not a part of a change: the
/// workload is blocked, and a restore that fails is planned again the next cycle.
fn half_pair_write(
    p: &Planning<'_>,
    w: &Arc<Workload>,
    conflict: Option<&Assessment>,
) -> Option<WriteOp> {
    let a = conflict?;
    let (requests, removed, hpa) = match (&a.restore_hpa, &a.restore_requests) {
        (Some((name, resource, target)), _) => {
            let hpa = hpa_target(p.snapshot, &w.key, name, resource, *target);
            (Default::default(), BTreeMap::new(), Some(hpa))
        }
        // kerf never wrote a template another controller owns: nothing to put back.
        (None, Some(r)) if w.template_writable() => {
            (r.plan.requests.clone(), r.plan.removed.clone(), None)
        }
        _ => return None,
    };
    let hpa_from = hpa.as_ref().and_then(HpaTarget::current).map(|(_, t)| t);
    let event = EventWrite::restored(
        w,
        RestoreKind::HalfPair,
        (&requests, &removed),
        hpa.as_ref(),
        hpa_from,
        None,
    );
    Some(WriteOp::Restore(Box::new(RestoreWrite {
        kind: RestoreKind::HalfPair,
        observed: Arc::clone(w),
        requests,
        removed,
        hpa,
        keep: None,
        // The cycle's own recommendation write records the block, even when this fails.
        recommendation: None,
        event,
        method: p.write_method(w.template_write_key().kind),
    })))
}

/// The eviction of this cycle, with its Event.
fn evict_write(w: &Workload, d: &Delivery) -> Option<WriteOp> {
    let plan = d.eviction.as_ref()?;
    let pod = plan.evict.clone()?;
    let left = plan.status.pods_to_replace;
    Some(WriteOp::Evict(Box::new(EvictWrite {
        workload: w.key.clone(),
        event: EventWrite::evicted(w, &pod.pod, left),
        pod,
    })))
}

/// A cycle whose queries failed (no rollback holding the workload) leaves the recommendation as
/// it was (the spec recorded before; `status.applied` is carried by [`served`]) and says why in
/// the phase's reason: an outage never empties the state every replica serves admission from.
fn kept_through_outage(
    rec: &mut RecommendationWrite,
    previous: Option<&RecommendationStatus>,
    standing: Standing,
) {
    if !standing.metrics_unavailable || standing.held {
        return;
    }
    if let Some(observed) = &rec.observed {
        rec.spec = observed.spec.clone();
    }
    if let Some(status) = rec.status.as_mut() {
        (status.phase, status.reason) = phase_while_metrics_unavailable(previous);
    }
}

/// The RightsizingRecommendation write of a workload with a CPU/memory result (and its GPU
/// part, if any).
fn recommendation_of(
    wo: &WorkloadOutcome,
    r: &RsResult,
    w: &Workload,
    outcome: &RightsizingOutcome,
    status: RecommendationStatus,
    observed: Option<PersistedRecommendation>,
) -> RecommendationWrite {
    let mut spec = recommendation_spec(outcome, &r.key, Some(&r.policy));
    if let Some(g) = &wo.gpu {
        add_gpu(&mut spec, g);
    }
    RecommendationWrite {
        namespace: r.key.namespace.to_string(),
        name: recommendation_name(&r.key),
        spec,
        status: Some(status),
        owner: owner_of(w),
        observed,
    }
}

/// The template write of a rolled-out change, with the HPA target when coordinated.
fn template_write(
    w: &Arc<Workload>,
    plan: &AgentPlan,
    kept_hpa: Option<HpaTarget>,
    method: WriteMethod,
) -> WriteOp {
    let workload = WorkloadWrite {
        observed: Arc::clone(w),
        gpu: None,
        requests: Some(plan.requests.clone()),
        limits: Some(plan.limits.clone()),
        method,
    };
    match kept_hpa {
        Some(hpa) => WriteOp::Coordinated(Box::new(CoordinatedChange { workload, hpa })),
        None => WriteOp::Workload(Box::new(workload)),
    }
}

/// Whether this cycle changes what the workload's pods run (`status.lastAppliedTime`): pods
/// asked to resize in place, a pod evicted, else a template that differs from the plan, or an
/// HPA target a release moves.
fn change_due(
    w: &Workload,
    plan: Option<&AgentPlan>,
    delivery: Option<&Delivery>,
    kept_hpa: Option<&HpaTarget>,
    release: &RestorePlan,
) -> bool {
    let Some(plan) = plan else {
        return kept_hpa.is_some_and(|h| !release.is_empty() && !h.in_place());
    };
    let pods_change = match delivery.map(|d| d.method) {
        Some(ApplyMethod::InPlace) => delivery
            .and_then(|d| d.resize.as_ref())
            .is_some_and(|r| !r.requests.is_empty()),
        Some(ApplyMethod::Evict) => delivery
            .and_then(|d| d.eviction.as_ref())
            .is_some_and(|e| e.evict.is_some()),
        // Only new pods change, as they come.
        Some(ApplyMethod::Admission) => false,
        _ => !requests_match(&w.template, &plan.requests),
    };
    pods_change || kept_hpa.is_some_and(|h| !release.is_empty() && !h.in_place())
}

/// The in-place part of a workload's change: its pods' resize requests with their Event, or
/// the Event of a fallback to a rollout first seen this cycle.
fn resize_write(w: &Workload, d: &Delivery, rec: &RecommendationWrite) -> Option<WriteOp> {
    let (pods, fallback, event) = match d.new_fallback() {
        Some(f) => (
            Vec::new(),
            Some(f.reason),
            EventWrite::resize_fallback(w, f.reason, &f.message),
        ),
        None => {
            let resize = d.resize.as_ref().filter(|r| !r.requests.is_empty())?;
            let event = EventWrite::resized(w, &resize.requests);
            (resize.requests.clone(), None, event)
        }
    };
    Some(WriteOp::Resize(Box::new(ResizeWrite {
        workload: w.key.clone(),
        pods,
        fallback,
        event,
        recommendation: (rec.namespace.clone(), rec.name.clone()),
        status: rec.status.clone().unwrap_or_default(),
    })))
}

/// A release of part of what kerf took, with what it keeps applying and the recommendation, in
/// one step.
fn release_write(
    p: &Planning<'_>,
    w: &Arc<Workload>,
    release: RestorePlan,
    keep: Option<Kept>,
    recommendation: RecommendationWrite,
) -> WriteOp {
    let restored_hpa = release
        .hpa
        .as_ref()
        .and_then(|h| restore_target(p.snapshot, &w.key, h));
    let hpa_from = restored_hpa
        .as_ref()
        .and_then(HpaTarget::current)
        .map(|(_, t)| t);
    let event = EventWrite::restored(
        w,
        RestoreKind::Release,
        (&release.requests, &release.removed),
        restored_hpa.as_ref(),
        hpa_from,
        None,
    );
    WriteOp::Restore(Box::new(RestoreWrite {
        kind: RestoreKind::Release,
        observed: Arc::clone(w),
        requests: release.requests,
        removed: release.removed,
        hpa: restored_hpa,
        keep,
        recommendation: Some(recommendation),
        event,
        method: p.write_method(w.template_write_key().kind),
    }))
}

/// GPU baseline and recommendation annotations (restart on change is the writer's job), and the
/// release of workloads no GPU policy covers any more (deleted, no longer selecting them):
/// kerf's annotations go (kerf created them) and the pods roll, to be admitted with the
/// template's own GPU allocation (docs/design/hpa-coordination.md#h13).
fn gpu_annotation_writes(p: &Planning<'_>, conflicts: &Conflicts<'_>) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    // Hashed: a lookup per workload (a tree of 110,000 keys compared string by string cost more).
    let mut gpu_covered: HashSet<&WorkloadKey> = HashSet::new();
    for r in p.cycle.gpu_results() {
        gpu_covered.insert(&r.key);
        if r.metrics_unavailable || conflicts.blocks(&r.key) {
            continue; // nothing flaps: persisted state stays as it is
        }
        // A workload whose template another controller owns is never written: its GPU
        // recommendation is published, not persisted on the object (docs/workloads.md).
        let Some(w) = p.workloads.get(&r.key).filter(|w| w.template_writable()) else {
            continue;
        };
        let write = WorkloadWrite {
            observed: Arc::clone(w),
            gpu: Some(GpuAnnotations {
                baseline: r.baseline.clone(),
                recommendation: r.recommendation.as_deref().cloned(),
            }),
            requests: None,
            limits: None,
            method: p.write_method(w.key.kind),
        };
        let recorded = p.index.find(&r.key).and_then(|o| o.status.as_deref());
        if !write.in_place() {
            ops.push(WriteOp::Workload(Box::new(write)));
        } else if restart_left(recorded) {
            // The annotations went through, the restart did not: only the record says so.
            ops.push(WriteOp::Restart(w.key.clone()));
        }
    }
    for w in &p.snapshot.workloads {
        let kerfs = [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION]
            .iter()
            .any(|k| w.annotations.contains_key(*k));
        // An object another controller owns is never written, its old annotations neither.
        if kerfs
            && w.template_writable()
            && !gpu_covered.contains(&w.key)
            && !p.snapshot.global.is_protected(&w.key.namespace)
        {
            ops.push(WriteOp::Workload(Box::new(WorkloadWrite {
                observed: Arc::clone(w),
                gpu: Some(GpuAnnotations::default()),
                requests: None,
                limits: None,
                method: p.write_method(w.key.kind),
            })));
        }
    }
    ops
}

/// Every policy's status conditions (strategy, queries, samples, readiness) and the invalid
/// policies' `Ready=False`.
fn policy_condition_writes(
    snapshot: &Snapshot,
    cycle: &CycleOutput,
    invalid: &[InvalidPolicy],
) -> Vec<WriteOp> {
    let mut ops = Vec::new();
    let mut matched: HashMap<PolicyId, i64> = HashMap::new();
    for r in cycle.gpu_results() {
        // Every policy that sizes some of the workload's containers matched it.
        for p in r.policies.iter() {
            *matched.entry(p.clone()).or_default() += 1;
        }
    }
    for r in cycle.resource_results() {
        *matched.entry(r.policy.clone()).or_default() += 1;
    }
    let policies = snapshot
        .gpu_policies
        .iter()
        .map(|p| (&p.id, p.generation, &p.status))
        .chain(
            snapshot
                .rightsizing_policies
                .iter()
                .map(|p| (&p.id, p.generation, &p.status)),
        );
    for (id, generation, status) in policies {
        let run = cycle.policies.get(id).cloned().unwrap_or_default();
        // Said only when every query was answered: a failed one is PrometheusAvailable's.
        let answered = matches!(run.queries, Some(Ok(())));
        let metrics_found = run
            .missing_samples
            .as_deref()
            .filter(|_| answered)
            .map(|missing| metrics_found(missing, cycle.coverage));
        ops.push(condition_writes(
            id,
            generation,
            status.clone(),
            run.unresolved_strategy.clone(),
            run.queries.as_ref(),
            metrics_found,
            matched.get(id).copied().unwrap_or(0),
        ));
    }
    for bad in invalid {
        ops.push(WriteOp::PolicyStatus(Box::new(PolicyStatusWrite {
            policy: bad.id.clone(),
            generation: bad.generation,
            observed: bad.status.clone(),
            conditions: vec![ConditionUpdate::new(
                CONDITION_READY,
                false,
                "Invalid",
                bad.error.clone(),
            )],
            matched_workloads: Some(0),
        })));
    }
    ops
}

/// Pure: every write one cycle calls for, phase by phase — GPU annotations, rollbacks and
/// releases, each workload's RightsizingRecommendation and CPU/memory change, policy
/// conditions. The writer skips what the cluster already has.
pub fn plan_writes(
    snapshot: &Snapshot,
    cycle: &CycleOutput,
    invalid: &[InvalidPolicy],
    recommendations: &[Arc<PersistedRecommendation>],
    now: Timestamp,
) -> Vec<WriteOp> {
    let p = Planning {
        snapshot,
        cycle,
        recommendations,
        workloads: snapshot.workloads.iter().map(|w| (&w.key, w)).collect(),
        index: RecommendationIndex::new(recommendations),
        now,
        resize_budget: Cell::new(RESIZES_PER_CYCLE),
        pods_by_owner: OnceCell::new(),
    };
    // A workload whose fields another manager keeps taking back is not written (docs/gitops.md).
    let conflicts = Conflicts::assess(&p);
    let mut ops = gpu_annotation_writes(&p, &conflicts);
    // Rollbacks and releases carry their own RightsizingRecommendation write (made once the
    // restore went through), so those workloads are skipped below.
    let mut restores = restore_writes(&p);
    for wo in &cycle.workloads {
        let conflict = conflicts.of(wo.key(), &p.workloads);
        match (&wo.resources, &wo.gpu) {
            (Some(r), _) => match restores.remove(&r.key) {
                Some(op) => ops.push(op),
                None => ops.extend(resource_writes(&p, wo, r, conflict)),
            },
            (None, Some(g)) => ops.extend(gpu_only_recommendation(&p, g, &restores, conflict)),
            (None, None) => {}
        }
    }
    // Restores of workloads the cycle has no result for (policy deleted, no longer selected).
    ops.extend(restores.into_values());
    ops.extend(policy_condition_writes(snapshot, cycle, invalid));
    ops
}
