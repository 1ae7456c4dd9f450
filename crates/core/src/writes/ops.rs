//! The writes one cycle calls for, as plain data: what the cluster writer executes and the
//! in-memory writer applies.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::fields::requests_match;
use super::resize::PodResize;
use crate::hpa::{self, HpaResource};
use crate::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, ContainerRequests, CoordinatedHpa,
    GpuMap, GpuRecommendation, PolicyId, RequestSet, WorkloadKey, render_baseline,
};
use crate::persisted::PersistedRecommendation;
use crate::snapshot::Workload;
use kerf_api::{PolicyStatus, RecommendationStatus, RightsizingRecommendationSpec, WriteMethod};

/// The GPU annotations kerf wants on a workload (`None` = the annotation is absent).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuAnnotations {
    pub baseline: Option<GpuMap>,
    pub recommendation: Option<GpuRecommendation>,
}

impl GpuAnnotations {
    /// The annotations as kerf writes them (an absent value is no entry).
    pub fn rendered(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        if let Some(b) = self.baseline.as_ref().filter(|b| !b.is_empty()) {
            m.insert(ANNOTATION_GPU_BASELINE.to_string(), render_baseline(b));
        }
        if let Some(r) = self
            .recommendation
            .as_ref()
            .filter(|r| !r.containers.is_empty())
        {
            m.insert(ANNOTATION_GPU_RECOMMENDATION.to_string(), r.render());
        }
        m
    }
}

/// kerf's fields on one workload. `None` leaves that group as kerf last applied it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadWrite {
    /// The workload as last seen (snapshot): identifies it and is diffed against, so an
    /// unchanged workload costs no request.
    pub observed: Arc<Workload>,
    /// GPU baseline and recommendation annotations. When the recommendation's per-container
    /// values change, the workload is also restarted (pod template `restartedAt`).
    pub gpu: Option<GpuAnnotations>,
    /// Template container requests kerf sets (auto-patch / coordinated change), by container.
    pub requests: Option<ContainerRequests>,
    /// The limits that go with them (docs/policies.md#limits), by container.
    pub limits: Option<ContainerRequests>,
    /// How the write is sent (`apply` or `jsonPatch`, from the kind's schema).
    pub method: WriteMethod,
}

/// One `metav1.Condition` kerf wants on a policy.
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionUpdate {
    pub type_: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl ConditionUpdate {
    pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct PolicyStatusWrite {
    pub policy: PolicyId,
    /// `metadata.generation` of the policy evaluated (→ `status.observedGeneration`).
    pub generation: Option<i64>,
    /// The policy's status as last seen (keeps `lastTransitionTime` and skips no-op writes).
    pub observed: Option<PolicyStatus>,
    pub conditions: Vec<ConditionUpdate>,
    pub matched_workloads: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct RecommendationWrite {
    pub namespace: String,
    pub name: String,
    pub spec: RightsizingRecommendationSpec,
    pub status: Option<RecommendationStatus>,
    /// Usually the workload, so the recommendation goes away with it.
    pub owner: Option<OwnerReference>,
    pub observed: Option<PersistedRecommendation>,
}

impl WorkloadWrite {
    /// The workload as observed already carries these GPU annotations and requests: both
    /// writers would do nothing (no apply, no restart), so planning leaves the write out.
    pub fn in_place(&self) -> bool {
        let gpu_same = self.gpu.as_ref().is_none_or(|g| {
            let desired = g.rendered();
            [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION]
                .iter()
                .all(|k| self.observed.annotations.get(*k) == desired.get(*k))
        });
        gpu_same
            && self
                .requests
                .as_ref()
                .is_none_or(|r| requests_match(&self.observed.template, r))
    }
}

impl RecommendationWrite {
    /// The recommendation as it reads back once this write went through: what the next write
    /// of the same unit is compared with.
    pub fn as_written(&self) -> PersistedRecommendation {
        PersistedRecommendation {
            namespace: self.namespace.as_str().into(),
            name: self.name.as_str().into(),
            owner_uids: self.owner.iter().map(|o| o.uid.clone()).collect(),
            spec: self.spec.clone(),
            status: self.status.clone().map(Box::new),
        }
    }

    /// The recommendation as observed already has this spec, owner and status: the cluster
    /// writer would send nothing, so planning leaves the write out (a steady cluster then plans
    /// no recommendation writes, and the in-memory writer keeps the object it holds).
    pub fn in_place(
        observed: &PersistedRecommendation,
        spec: &RightsizingRecommendationSpec,
        status: Option<&RecommendationStatus>,
        owner: Option<&OwnerReference>,
    ) -> bool {
        observed.spec == *spec
            && status.is_none_or(|s| observed.status.as_deref() == Some(s))
            && owner.is_none_or(|own| observed.owned_by(&own.uid))
    }
}

/// The utilization target kerf sets on an HPA (single `Resource` metric).
#[derive(Clone, Debug, PartialEq)]
pub struct HpaTarget {
    pub namespace: String,
    pub name: String,
    /// `cpu` or `memory`.
    pub resource: String,
    pub average_utilization: i32,
    pub observed: Option<HorizontalPodAutoscaler>,
}

impl HpaTarget {
    /// The HPA's current target, read as the engine and admission read it
    /// (docs/design/hpa-coordination.md#h1): an HPA without metrics is at CPU 80 %.
    pub fn current(&self) -> Option<(HpaResource, i32)> {
        self.observed.as_ref().and_then(hpa::utilization_target)
    }

    /// The HPA already has this target: nothing to write.
    pub fn in_place(&self) -> bool {
        self.current()
            .is_some_and(|(r, t)| r.as_str() == self.resource && t == self.average_utilization)
    }

    /// The target falls (requests grow): the HPA is written before the template, so the
    /// transient state stays over-provisioned.
    pub fn goes_first(&self) -> bool {
        self.current()
            .is_some_and(|(_, t)| self.average_utilization < t)
    }
}

/// HPA coordination's "one change": the template requests and the HPA target, applied together.
#[derive(Clone, Debug, PartialEq)]
pub struct CoordinatedChange {
    pub workload: WorkloadWrite,
    pub hpa: HpaTarget,
}

/// An `events.k8s.io/v1` Event on a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct EventWrite {
    pub regarding: WorkloadKey,
    pub uid: Option<String>,
    pub warning: bool,
    pub reason: String,
    pub action: String,
    pub note: String,
    /// Carried as the Event's annotations (e.g. `hpa`, `hpaResource`, `hpaTargetFrom`, `hpaTargetTo`).
    pub details: BTreeMap<String, String>,
}

impl EventWrite {
    /// `Applied`: a coordinated change went through.
    pub fn applied(workload: &Workload, hpa: &CoordinatedHpa) -> Self {
        let details = BTreeMap::from([
            ("hpa".to_string(), hpa.hpa_name.clone()),
            ("hpaResource".to_string(), hpa.resource.clone()),
            ("hpaTargetFrom".to_string(), hpa.target_before.to_string()),
            ("hpaTargetTo".to_string(), hpa.target_after.to_string()),
        ]);
        Self {
            regarding: workload.key.clone(),
            uid: workload.uid.clone(),
            warning: false,
            reason: "Applied".into(),
            action: "Rightsize".into(),
            note: format!(
                "applied new requests with HPA {} {} target {}% -> {}%",
                hpa.hpa_name, hpa.resource, hpa.target_before, hpa.target_after
            ),
            details,
        }
    }

    /// `Resized`: running pods asked to resize in place (`restarts`: containers the kubelet
    /// restarts for it, by their `resizePolicy`).
    pub fn resized(workload: &Workload, pods: &[PodResize]) -> Self {
        let restarts: Vec<&str> = pods
            .iter()
            .flat_map(|p| p.restarts.iter().map(String::as_str))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut note = format!(
            "resizing {} running pod{} in place",
            pods.len(),
            if pods.len() == 1 { "" } else { "s" }
        );
        if !restarts.is_empty() {
            note.push_str(&format!(
                "; the kubelet restarts container {} (resizePolicy RestartContainer)",
                restarts.join(", ")
            ));
        }
        Self {
            regarding: workload.key.clone(),
            uid: workload.uid.clone(),
            warning: false,
            reason: "Resized".into(),
            action: "Resize".into(),
            note,
            details: BTreeMap::from([("pods".to_string(), pods.len().to_string())]),
        }
    }

    /// `Evicted`: a running pod evicted so that its replacement is admitted with the change.
    pub fn evicted(workload: &Workload, pod: &str, left: u32) -> Self {
        Self {
            regarding: workload.key.clone(),
            uid: workload.uid.clone(),
            warning: false,
            reason: "Evicted".into(),
            action: "Evict".into(),
            note: format!(
                "evicting pod {pod} so that its replacement is admitted with the new requests ({left} pod(s) to replace)"
            ),
            details: BTreeMap::from([("pod".to_string(), pod.to_string())]),
        }
    }

    /// `ResizeFallback`: the in-place change rolls out instead, with why.
    pub fn resize_fallback(workload: &Workload, reason_code: &str, message: &str) -> Self {
        Self {
            regarding: workload.key.clone(),
            uid: workload.uid.clone(),
            warning: true,
            reason: "ResizeFallback".into(),
            action: "Rollout".into(),
            note: format!("{reason_code}: {message}; rolling out instead"),
            details: BTreeMap::from([("reason".to_string(), reason_code.to_string())]),
        }
    }

    /// `Blocked` with a reason code such as `HPACoupled`.
    pub fn blocked(workload: &Workload, reason_code: &str, message: &str) -> Self {
        Self {
            regarding: workload.key.clone(),
            uid: workload.uid.clone(),
            warning: true,
            reason: "Blocked".into(),
            action: "Rightsize".into(),
            note: format!("{reason_code}: {message}"),
            details: BTreeMap::from([("reason".to_string(), reason_code.to_string())]),
        }
    }

    /// `RolledBack` / `Released`: what a restore wrote back (`requests`) and removed
    /// (`removed`: requests kerf had created). `hpa_from` is the HPA's target before the
    /// restore, when known.
    pub fn restored(
        workload: &Workload,
        kind: RestoreKind,
        (requests, removed): (&ContainerRequests, &BTreeMap<String, RequestSet>),
        hpa: Option<&HpaTarget>,
        hpa_from: Option<i32>,
        problem: Option<&str>,
    ) -> Self {
        let mut details = BTreeMap::new();
        let mut parts = Vec::new();
        if !requests.is_empty() {
            let list: Vec<String> = requests
                .iter()
                .map(|(c, r)| {
                    let mut v = Vec::new();
                    if let Some(m) = r.cpu_millis {
                        v.push(format!("cpu {}", crate::quantity::format_cpu_millis(m)));
                    }
                    if let Some(b) = r.memory_bytes {
                        v.push(format!(
                            "memory {}",
                            crate::quantity::format_memory_bytes(b)
                        ));
                    }
                    format!("{c} {}", v.join(", "))
                })
                .collect();
            parts.push(format!("requests {}", list.join("; ")));
        }

        if let Some(h) = hpa {
            details.insert("hpa".to_string(), h.name.clone());
            details.insert("hpaResource".to_string(), h.resource.clone());
            if let Some(from) = hpa_from {
                details.insert("hpaTargetFrom".to_string(), from.to_string());
            }
            details.insert("hpaTargetTo".to_string(), h.average_utilization.to_string());
            parts.push(match hpa_from {
                Some(from) => format!(
                    "HPA {} {} target {from}% -> {}%",
                    h.name, h.resource, h.average_utilization
                ),
                None => format!(
                    "HPA {} {} target {}%",
                    h.name, h.resource, h.average_utilization
                ),
            });
        }
        let mut done = Vec::new();
        if !parts.is_empty() {
            done.push(format!("restored {}", parts.join(" and ")));
        }
        if !removed.is_empty() {
            let list: Vec<String> = removed
                .iter()
                .map(|(c, set)| format!("{c} {}", set.names().join(", ")))
                .collect();
            done.push(format!(
                "removed the requests kerf had set where there were none: {}",
                list.join("; ")
            ));
        }
        let what = if done.is_empty() {
            "nothing kerf recorded to restore".to_string()
        } else {
            done.join("; ")
        };
        let then = match kind {
            RestoreKind::Rollback => {
                "; kerf stops applying until the RightsizingRecommendation is deleted"
            }
            RestoreKind::Release => "; kerf no longer owns these fields",
            RestoreKind::HalfPair => {
                "; another manager took back the other half of the coordinated change (Conflict)"
            }
        };
        let problem = problem.map(|p| format!(" ({p})")).unwrap_or_default();
        Self {
            regarding: workload.key.clone(),
            uid: workload.uid.clone(),
            warning: !problem.is_empty(),
            reason: kind.reason().into(),
            action: match kind {
                RestoreKind::Rollback => "Rollback",
                RestoreKind::Release => "Release",
                RestoreKind::HalfPair => "Conflict",
            }
            .into(),
            note: format!("{what}{then}{problem}"),
            details,
        }
    }
}

/// Why kerf writes a workload's recorded original requests and HPA target back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreKind {
    /// `rightsizing.kubex.ai/rollback` on the workload: restored by server-side apply as `kerf`
    /// in one coordinated step, the annotation removed, kerf stops applying.
    Rollback,
    /// The workload left auto-patch: restored by [`RELEASE_FIELD_MANAGER`], then kerf gives up
    /// its ownership of those fields.
    Release,
    /// Another manager took back half of a coordinated pair (docs/gitops.md): the other half
    /// set back by server-side apply as `kerf` (as a rollback: kerf keeps owning it, with the
    /// value from before its change); the workload is blocked with `Conflict`.
    HalfPair,
}

impl RestoreKind {
    /// The Event reason (and the RightsizingRecommendation `status.reason`).
    pub fn reason(self) -> &'static str {
        match self {
            RestoreKind::Rollback => "RolledBack",
            RestoreKind::Release => "Released",
            RestoreKind::HalfPair => "Restored",
        }
    }
}

/// What kerf keeps applying in the step of a release that gives back only part of what it took
/// (docs/design/hpa-coordination.md#h13).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kept {
    /// This cycle's requests (auto-patch resources), by container.
    pub requests: ContainerRequests,
    /// The limits that go with them.
    pub limits: ContainerRequests,
    /// This cycle's coordinated HPA target.
    pub hpa: Option<HpaTarget>,
}

/// A rollback or a release: requests and HPA target restored together, then the
/// RightsizingRecommendation and the Event, in that order (a failed restore writes neither, so the
/// next cycle tries again).
#[derive(Clone, Debug)]
pub struct RestoreWrite {
    pub kind: RestoreKind,
    /// The workload as last seen.
    pub observed: Arc<Workload>,
    /// Original requests per container (`None` resource = left as it is).
    pub requests: ContainerRequests,
    /// Requests kerf created where the container had none: removed.
    pub removed: BTreeMap<String, RequestSet>,
    /// The HPA target to restore (`observed` is the HPA as last seen).
    pub hpa: Option<HpaTarget>,
    /// Release only: what kerf goes on applying in the same step (the same apply carries those
    /// requests); `None` when the whole workload is released or rolled back.
    pub keep: Option<Kept>,
    pub recommendation: Option<RecommendationWrite>,
    pub event: EventWrite,
    /// How kerf's own part of the write is sent (`apply` or `jsonPatch`).
    pub method: WriteMethod,
}

#[derive(Clone, Debug)]
pub enum WriteOp {
    Workload(Box<WorkloadWrite>),
    /// A rolling restart (pod template `rightsizing.kubex.ai/restartedAt`).
    Restart(WorkloadKey),
    PolicyStatus(Box<PolicyStatusWrite>),
    Recommendation(Box<RecommendationWrite>),
    Coordinated(Box<CoordinatedChange>),
    Event(Box<EventWrite>),
    /// Rollback or release of a workload's CPU/memory requests and HPA target.
    Restore(Box<RestoreWrite>),
    /// Something the planning could not do, for the writer to log (planning itself logs
    /// nothing).
    Warning(Box<PlanWarning>),
    /// The in-place part of a workload's change: its pods' resize requests, or the fallback
    /// to a rollout (the template write follows as its own op).
    Resize(Box<ResizeWrite>),
    /// One running pod of a workload whose template another controller owns, evicted through
    /// the Eviction API (docs/workloads.md).
    Evict(Box<EvictWrite>),
    /// The usage history's checkpoint, in parts (docs/metrics.md#incremental-history).
    Checkpoint(Box<CheckpointWrite>),
    /// A workload's change of several parts as one unit (docs/design/runtime.md#r17).
    Change(Box<ChangeWrite>),
}

/// A workload's change as one unit: `intent` (status `pending`, the parts listed) is written
/// first, then each part in order; once every part went through, `done` and the events. A part
/// that fails stops the unit: the status then names it with its error
/// ([`super::pending::failed_status`]) and the next cycle retries.
#[derive(Clone, Debug)]
pub struct ChangeWrite {
    pub workload: WorkloadKey,
    pub intent: RecommendationWrite,
    /// `Workload`, `Coordinated` or `Restart` ops, in order.
    pub parts: Vec<WriteOp>,
    pub done: RecommendationWrite,
    /// `Applied`: said only once the change is whole.
    pub events: Vec<EventWrite>,
    /// The cycle's time: a failure's backoff counts from it.
    pub planned_at: jiff::Timestamp,
}

/// The usage history's checkpoint: each part's JSON, written as ConfigMap
/// `kerf-history-<index>` in kerf's namespace; parts beyond these are removed.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointWrite {
    pub parts: Vec<Vec<u8>>,
}

/// One eviction of this cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct EvictWrite {
    pub workload: WorkloadKey,
    pub pod: super::eviction::PodEviction,
    pub event: EventWrite,
}

/// One workload's in-place resize of this cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct ResizeWrite {
    pub workload: WorkloadKey,
    /// Sent in order, paced (`pods/<name>/resize`).
    pub pods: Vec<PodResize>,
    /// The fallback first recorded this cycle (`Infeasible`, `DeferredTooLong`, …).
    pub fallback: Option<&'static str>,
    pub event: EventWrite,
    /// The workload's RightsizingRecommendation (namespace, name) and its status as planned:
    /// a resize the API server refuses is recorded there as a fallback to a rollout, which the
    /// next cycle applies (as VPA's updater evicts after a failed resize).
    pub recommendation: (String, String),
    pub status: RecommendationStatus,
}

impl WriteOp {
    /// What the write is about — a workload, a policy or a RightsizingRecommendation — for the
    /// writer's span.
    pub fn subject(&self) -> String {
        match self {
            WriteOp::Workload(w) => w.observed.key.to_string(),
            WriteOp::Restart(key) => key.to_string(),
            WriteOp::PolicyStatus(s) => s.policy.to_string(),
            WriteOp::Recommendation(r) => {
                format!("RightsizingRecommendation/{}/{}", r.namespace, r.name)
            }
            WriteOp::Coordinated(c) => c.workload.observed.key.to_string(),
            WriteOp::Event(e) => e.regarding.to_string(),
            WriteOp::Restore(r) => r.observed.key.to_string(),
            WriteOp::Warning(w) => w.workload.to_string(),
            WriteOp::Resize(r) => r.workload.to_string(),
            WriteOp::Evict(e) => e.workload.to_string(),
            WriteOp::Checkpoint(_) => "usage history checkpoint".to_string(),
            WriteOp::Change(c) => c.workload.to_string(),
        }
    }
}

/// A warning of the write planning about one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanWarning {
    pub workload: WorkloadKey,
    pub message: String,
}
