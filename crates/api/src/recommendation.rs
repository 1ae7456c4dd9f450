//! RightsizingRecommendation: one per workload, written by the leader.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;

use kerf_support::small_map::SmallMap;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResourceValues {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// GPU units as a decimal string (e.g. "0.84").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContainerRecommendation {
    pub name: String,
    #[serde(default)]
    pub current: ResourceValues,
    #[serde(default)]
    pub recommended: ResourceValues,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HpaRecommendation {
    pub name: String,
    /// `cpu` or `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_before: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_after: Option<i32>,
    /// `max-replicas-reached`, `unsupported-metrics`, `pod-level-resources`, `missing-request`,
    /// `target-out-of-bounds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    /// Per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_units: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Per replica × current replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cpu_cores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_memory_bytes: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_gpu_units: Option<f64>,
}

#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[kube(
    group = "rightsizing.kubex.ai",
    derive = "PartialEq",
    version = "v1alpha1",
    kind = "RightsizingRecommendation",
    shortname = "rsrec",
    namespaced,
    status = "RecommendationStatus",
    printcolumn = r#"{"name":"Workload","type":"string","jsonPath":".spec.workload.name"}"#,
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.workload.kind"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"GPU-Metric","type":"string","jsonPath":".spec.drivingMetric"}"#,
    printcolumn = r#"{"name":"HPA","type":"string","jsonPath":".spec.hpa.name"}"#,
    printcolumn = r#"{"name":"HPA-Target","type":"integer","jsonPath":".spec.hpa.targetAfter"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RightsizingRecommendationSpec {
    pub workload: WorkloadRef,
    /// `<Kind>/<namespace>/<name>` of the policy that produced it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    #[serde(default)]
    pub containers: Vec<ContainerRecommendation>,
    /// `compute` or `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driving_metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa: Option<Box<HpaRecommendation>>,
    /// e.g. `hpa-coupled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub risk_flags: Vec<String>,
    /// Why a floor holds a request (`throttled`, `oom-killed`): the signal, its value and when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub risk_reasons: Vec<String>,
    #[serde(default)]
    pub savings: Savings,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum RecommendationPhase {
    Applied,
    Blocked,
    AuditOnly,
    #[default]
    Pending,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecommendationStatus {
    #[serde(default)]
    pub phase: RecommendationPhase,
    /// e.g. `HPACoupled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(
        default,
        rename = "previousHPATarget",
        skip_serializing_if = "Option::is_none"
    )]
    pub previous_hpa_target: Option<i32>,
    /// Original requests per container before kerf applied anything (for release/rollback).
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub original_requests: SmallMap<String, ResourceValues>,
    /// Requests kerf set where the container had none (no request, no limit), per container
    /// (`cpu`, `memory`): release and rollback remove them instead of restoring a value.
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub created_requests: SmallMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_time: Option<String>,
    /// What kerf applies to this workload now: every replica's webhook serves it from here (the
    /// leader computes and writes it; see docs/design/runtime.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Box<AppliedChange>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Fields kerf set that another field manager took back (docs/gitops.md): the Lease
    /// holder's count, kept here so a new leader goes on from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<Box<ConflictStatus>>,
    /// How kerf applies the CPU/memory change to running pods (docs/policies.md#in-place-resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_method: Option<ApplyMethod>,
    /// How kerf sends its write of the pod template (docs/gitops.md#how-kerf-writes): `apply`,
    /// `jsonPatch`, or `evict` where kerf writes no template; absent where nothing is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_method: Option<WriteMethod>,
    /// Why that way (the schema that decided it).
    // Borrowed where the text is fixed: every recommendation of a built-in kind carries the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_method_reason: Option<Cow<'static, str>>,
    /// The in-place resize of the running pods, while `applyMethod` is `inPlace` or after it fell
    /// back to a rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<Box<ResizeStatus>>,
    /// The replacement of running pods by eviction, while `applyMethod` is `evict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction: Option<Box<EvictionStatus>>,
    /// A change not whole yet (docs/design/runtime.md#r17): written before its parts are sent,
    /// kept while one fails, removed once every part went through. A new Lease holder reads it
    /// back and goes on from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Box<PendingChange>>,
}

/// A change of several parts (template and HPA, GPU annotations and restart) until every part
/// went through: what is left, why the last attempt stopped, when the next one is due.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingChange {
    /// What is left to do, in order: `template`, `hpa`, `gpuAnnotations`, `restart`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
    /// The part whose write failed on the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_part: Option<String>,
    /// Its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Attempts made so far (the one under way included).
    #[serde(default)]
    pub attempts: u32,
    /// No attempt before this time (RFC 3339): retries back off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_after: Option<String>,
    /// The CPU/memory change as planned, HPA target from the pre-change pair: what a retry
    /// writes (a different plan supersedes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<Box<AppliedChange>>,
    /// The GPU recommendation annotation the change writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_recommendation: Option<String>,
}

/// Where the replacement of a workload's running pods by eviction stands.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvictionStatus {
    /// Running pods whose requests still differ from the recommendation.
    #[serde(default)]
    pub pods_to_replace: u32,
    /// When kerf last asked to evict one (the pace counts from here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_eviction_time: Option<String>,
    /// The pod it asked to evict then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evicted_pod: Option<String>,
    /// Why no pod is evicted now (`NotAllReady`, `Paced`, `EvictionRefused`: the pod last
    /// asked is still running, refused by a PodDisruptionBudget), when one is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// How a CPU/memory change reaches the running pods.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ApplyMethod {
    /// The pod template is written; the workload's controller rolls the pods.
    Rollout,
    /// Each running pod is resized through `pods/resize`; the template is not written.
    InPlace,
    /// Another controller owns the template: new pods get the change at admission, running
    /// ones are replaced one at a time through the Eviction API (docs/workloads.md).
    Evict,
    /// New pods only: the change is admitted into the next pods the controller creates, no
    /// running pod is replaced (a RayJob's cluster: evicting its head fails the job).
    Admission,
    /// Nothing is applied.
    #[default]
    None,
}

impl ApplyMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMethod::Rollout => "rollout",
            ApplyMethod::InPlace => "inPlace",
            ApplyMethod::Evict => "evict",
            ApplyMethod::Admission => "admission",
            ApplyMethod::None => "none",
        }
    }
}

/// How a write of a workload's pod template is sent, from the target's schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WriteMethod {
    /// Server-side apply of kerf's fields (containers a list keyed by name).
    Apply,
    /// An RFC 6902 JSON Patch whose `test` operations pin each container's name at its index
    /// (an atomic or unknown containers list).
    JsonPatch,
    /// No template is written: running pods are replaced through the Eviction API.
    Evict,
}

impl WriteMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteMethod::Apply => "apply",
            WriteMethod::JsonPatch => "jsonPatch",
            WriteMethod::Evict => "evict",
        }
    }
}

/// The running pods of a workload resized in place, as the last cycle counted them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResizeStatus {
    /// Pods whose requests are the recommendation, with no resize pending or in progress.
    #[serde(default)]
    pub pods_resized: u32,
    /// Pods asked to resize that the kubelet has not finished (deferred or in progress).
    #[serde(default)]
    pub pods_pending: u32,
    /// Pods the kubelet reports the resize of as infeasible.
    #[serde(default)]
    pub pods_infeasible: u32,
    /// Pods not asked yet (the per-cycle pace).
    #[serde(default)]
    pub pods_waiting: u32,
    /// When kerf last asked a pod of the workload to resize (RFC 3339): the bounds a deferred or
    /// in-progress resize may take are measured from it (docs/policies.md#in-place-resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request_time: Option<String>,
    /// Set once the change fell back to a rollout; kept while the recommendation is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<ResizeFallback>,
}

/// Why an in-place change fell back to a rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResizeFallback {
    /// `Infeasible`, `DeferredTooLong`, `InProgressTooLong`, `QoSClassChange`,
    /// `MemoryLimitDecrease`, … (docs/policies.md#in-place-resize).
    pub reason: String,
    pub message: String,
    pub time: String,
    /// The requests the fallback was for: a new recommendation is tried in place again.
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub requests: SmallMap<String, ResourceValues>,
}

/// The condition a field conflict sets (docs/gitops.md): `True` (reason `TakenBack`) while kerf
/// stops writing the workload, `False` (reason `Stable` or `Acknowledged`) once it writes again.
pub const CONDITION_CONFLICT: &str = "Conflict";

/// The reason (`status.reason`, the Event's `reason` detail) of a workload kerf stopped writing
/// because another field manager keeps taking its fields back.
pub const REASON_CONFLICT: &str = "Conflict";

/// kerf's record of a field fight on one workload (docs/gitops.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictStatus {
    /// Take-backs counted within the window (while blocked: those that blocked), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub takebacks: Vec<FieldTakeback>,
    /// Set while kerf does not write the workload (phase `blocked`, reason `Conflict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_since: Option<String>,
    /// Changes made at or before this time are dealt with: counted, or forgiven by a resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_through: Option<String>,
    /// When kerf last resumed because the other manager's value was stable: for one window
    /// after it, the first take-back blocks again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<String>,
    /// The value of `rightsizing.kubex.ai/conflict-acknowledged` kerf last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<String>,
    /// The coordinated change half of which another manager took back (docs/gitops.md): while
    /// blocked, kerf sets the other half back each cycle until the object has it (a restore
    /// that failed is written again; `status.applied` no longer carries the pair).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_pair: Option<Box<AppliedChange>>,
}

/// One change another manager made to a field kerf set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldTakeback {
    /// e.g. `spec.template.spec.containers[app].resources.requests.cpu`,
    /// `HorizontalPodAutoscaler/web spec.metrics`.
    pub field: String,
    /// The field manager that owns the field now (from `managedFields`).
    pub manager: String,
    /// When that manager changed it (its `managedFields` entry's `time`).
    pub time: String,
}

/// The change kerf applies: the requests it sets on new pods (auto-patch resources only), the
/// coordinated HPA target it enforces when the HPA is admitted, and an owned workload's GPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedChange {
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub requests: SmallMap<String, ResourceValues>,
    /// The limits that go with them (`controlledValues: RequestsAndLimits`), set at admission
    /// with the requests (docs/policies.md#limits).
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub limits: SmallMap<String, ResourceValues>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpa: Option<Box<HpaRecommendation>>,
    /// The GPU recommendation and baseline of a workload whose object kerf does not annotate
    /// (another controller owns it), as the annotations `rightsizing.kubex.ai/gpu-recommendation`
    /// and `rightsizing.kubex.ai/gpu-baseline` would carry them: admission serves them from here.
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub gpu_annotations: SmallMap<String, String>,
}
