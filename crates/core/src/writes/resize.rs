//! In-place resize, pure (docs/policies.md#in-place-resize): which running pods of a workload
//! get a `pods/resize` request, their bodies, what the kubelet reports of earlier ones, and when
//! the change falls back to a rollout. Kubernetes' rules, from its source:
//!
//! - QoS class: a resize must not change it (`ValidatePodResize`, pkg/apis/core/validation/
//!   validation.go); the class is computed as `ComputePodQOS` does (pkg/apis/core/helper/qos/
//!   qos.go): [`qos_class`].
//! - Only CPU and memory of the containers and restartable init containers (sidecars) are
//!   resized; kerf sends the requests and limits admission sets ([`pod_resources`], the one
//!   rule `limits::pod_resource_value`), so a resized pod is the pod a rollout would create.
//! - `validateContainerResize` (same file): requests and limits cannot be removed (kerf never
//!   removes one); on Kubernetes 1.33 a memory limit may not be lowered, nor added, unless the
//!   container's memory `resizePolicy` is `RestartContainer`: [`memory_limit_not_lowered`]
//!   rolls out instead (1.34 lifted the rule; kerf keeps it, the strictest version it runs on).
//! - The kubelet's answer is the pod's `PodResizePending` (reason `Deferred` or `Infeasible`)
//!   and `PodResizeInProgress` conditions (k8s.io/api core/v1 types.go). As VPA's updater
//!   (`InPlaceOrRecreate`) does, a resize deferred for longer than [`DEFERRED_BOUND`] or in
//!   progress for longer than [`IN_PROGRESS_BOUND`], an infeasible one, one the kubelet failed
//!   (`PodResizeInProgress` reason `Error`) or one the API server refused falls back to
//!   replacing the pods — for kerf, a rollout of the workload.
//! - A pod with pod-level resources is not resized (refused before Kubernetes 1.36).

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use crate::limits::pod_resource_value;
use crate::model::{ContainerRequests, ResourceRequests};
use crate::pod::{
    Container, POD_RESIZE_IN_PROGRESS, POD_RESIZE_PENDING, Pod, PodCondition, PodSpec,
};
use crate::quantity::{cpu_millis, format_cpu_millis, format_memory_bytes, memory_bytes};

/// How long a resize the kubelet defers (the node lacks room now) is waited for before the
/// change rolls out instead: VPA's updater uses the same 5 minutes.
pub const DEFERRED_BOUND: SignedDuration = SignedDuration::from_mins(5);
/// How long a resize may stay in progress before the change rolls out instead: VPA's 1 hour.
pub const IN_PROGRESS_BOUND: SignedDuration = SignedDuration::from_hours(1);
/// At most this many pods are asked to resize per cycle, over all workloads, one workload's
/// pods after another: never every pod of the cluster at once.
pub const RESIZES_PER_CYCLE: usize = 100;

/// A pod's Quality of Service class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    BestEffort,
    Burstable,
    Guaranteed,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::BestEffort => "BestEffort",
            QosClass::Burstable => "Burstable",
            QosClass::Guaranteed => "Guaranteed",
        }
    }
}

/// A resource's request as the API server stores it: the request, else the limit (a missing
/// request is defaulted to the limit).
fn request_of(c: &Container, resource: &str) -> Option<i64> {
    let r = c.resources.as_deref()?;
    let q = r
        .requests
        .as_ref()
        .and_then(|m| m.get(resource))
        .or_else(|| r.limits.as_ref().and_then(|m| m.get(resource)))?;
    parse(resource, q)
}

/// A resource's limit, read as the recommendation and the template write read it.
fn limit_of(c: &Container, resource: &str) -> Option<i64> {
    let limits = crate::recommenders::resources::container::container_limits(c);
    match resource {
        "cpu" => limits.cpu_millis,
        _ => limits.memory_bytes,
    }
}

fn parse(
    resource: &str,
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Option<i64> {
    match resource {
        "cpu" => cpu_millis(q).ok(),
        _ => memory_bytes(q).ok(),
    }
}

const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The requests and limits a resize sets, per container (only those it sets).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodResources {
    pub requests: ContainerRequests,
    pub limits: ContainerRequests,
}

impl PodResources {
    /// Requests alone (no limit set).
    pub fn requests(requests: ContainerRequests) -> Self {
        Self {
            requests,
            limits: ContainerRequests::new(),
        }
    }
}

/// The pod's QoS class by Kubernetes' rule (`ComputePodQOS`): over the containers and init
/// containers, sums of the positive CPU and memory requests and limits; none at all is
/// `BestEffort`; every container limiting both and the sums equal is `Guaranteed`; anything
/// else `Burstable`. Pod-level resources, when set, decide instead of the containers.
/// `set` overrides the containers' requests and limits (the pod after a resize).
pub fn qos_class(spec: &PodSpec, set: &PodResources) -> QosClass {
    let mut sum_requests = [0i64; 2];
    let mut sum_limits = [0i64; 2];
    let mut seen_request = [false; 2];
    let mut seen_limit = [false; 2];
    let mut guaranteed = true;
    let mut add = |req: [Option<i64>; 2], lim: [Option<i64>; 2]| {
        for i in 0..2 {
            if let Some(v) = req[i].filter(|v| *v > 0) {
                sum_requests[i] += v;
                seen_request[i] = true;
            }
            if let Some(v) = lim[i].filter(|v| *v > 0) {
                sum_limits[i] += v;
                seen_limit[i] = true;
            }
        }
        lim.iter().all(|l| l.is_some_and(|v| v > 0))
    };
    if let Some(pod_level) = spec.resources.as_deref() {
        let get = |m: Option<&kerf_support::small_map::SmallMap<String, _>>, r: &str| {
            m.and_then(|m| m.get(r)).and_then(|q| parse(r, q))
        };
        let req = QOS_RESOURCES.map(|r| get(pod_level.requests.as_ref(), r));
        let lim = QOS_RESOURCES.map(|r| get(pod_level.limits.as_ref(), r));
        let limits_both = add(req, lim);
        // Upstream checks the limits found only when the pod sets some.
        guaranteed &= limits_both || pod_level.limits.as_ref().is_none_or(|l| l.is_empty());
    } else {
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let wanted = set.requests.get(c.name.as_str());
            let limits = set.limits.get(c.name.as_str());
            let req = [
                wanted
                    .and_then(|w| w.cpu_millis)
                    .or_else(|| request_of(c, "cpu")),
                wanted
                    .and_then(|w| w.memory_bytes)
                    .or_else(|| request_of(c, "memory")),
            ];
            let lim = [
                limits
                    .and_then(|l| l.cpu_millis)
                    .or_else(|| limit_of(c, "cpu")),
                limits
                    .and_then(|l| l.memory_bytes)
                    .or_else(|| limit_of(c, "memory")),
            ];
            guaranteed &= add(req, lim);
        }
    }
    let count = |seen: [bool; 2]| seen.iter().filter(|s| **s).count();
    if count(seen_request) == 0 && count(seen_limit) == 0 {
        return QosClass::BestEffort;
    }
    let requests_at_limits =
        (0..2).all(|i| !seen_request[i] || (seen_limit[i] && sum_requests[i] == sum_limits[i]));
    if guaranteed && requests_at_limits && count(seen_request) == count(seen_limit) {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// What the kubelet reports of a pod's last resize.
#[derive(Clone, Debug, PartialEq)]
pub enum KubeletResize {
    /// Nothing pending or in progress.
    Settled,
    /// `PodResizePending`, reason `Deferred`, since then.
    Deferred(Option<Timestamp>),
    /// `PodResizePending`, reason `Infeasible`, with the kubelet's message.
    Infeasible(String),
    /// `PodResizeInProgress` since then.
    InProgress(Option<Timestamp>),
    /// `PodResizeInProgress` with reason `Error`: the kubelet could not apply it (a memory
    /// limit below the usage, a runtime error), with its message.
    Failed(String),
}

fn true_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// A `PodResizeInProgress` the kubelet does not set while applying a resize: one with a reason
/// other than `Error`, or a message. VPA's updater falls back at once on such a condition
/// (`CanEvictInPlacingPod`, "unexpected in-progress-resize condition") instead of waiting out
/// the hour; so does kerf.
pub fn in_progress_unexpected(c: &PodCondition) -> bool {
    let reason = c.reason.as_deref().unwrap_or_default();
    let message = c.message.as_deref().unwrap_or_default();
    // `Error` is the kubelet's own failure, read as such.
    reason != "Error" && (!reason.is_empty() || !message.is_empty())
}

/// The pod's resize conditions, read as the kubelet sets them.
pub fn kubelet_resize(pod: &Pod) -> KubeletResize {
    let since = |c: &PodCondition| c.last_transition_time.as_ref().map(|t| t.0);
    let message = |c: &PodCondition| c.message.clone().unwrap_or_default();
    if let Some(c) = true_condition(pod, POD_RESIZE_PENDING) {
        return match c.reason.as_deref() {
            Some("Deferred") => KubeletResize::Deferred(since(c)),
            // An unknown reason is taken as infeasible, as VPA's updater takes it.
            _ => KubeletResize::Infeasible(message(c)),
        };
    }
    match true_condition(pod, POD_RESIZE_IN_PROGRESS) {
        Some(c) if c.reason.as_deref() == Some("Error") => KubeletResize::Failed(message(c)),
        Some(c) if in_progress_unexpected(c) => KubeletResize::Failed(format!(
            "unexpected in-progress condition (reason {:?}): {}",
            c.reason.as_deref().unwrap_or_default(),
            message(c)
        )),
        Some(c) => KubeletResize::InProgress(since(c)),
        None => KubeletResize::Settled,
    }
}

/// Why a workload's in-place change rolls out instead.
#[derive(Clone, Debug, PartialEq)]
pub struct Fallback {
    /// `Infeasible`, `ResizeError`, `DeferredTooLong`, `InProgressTooLong`, `QoSClassChange`,
    /// `PodLevelResources`, `WindowsPod`, `Refused` (by the API server, recorded by the writer).
    pub reason: &'static str,
    pub message: String,
}

/// A pod with pod-level resources is not resized in place (the API server refuses it before
/// Kubernetes 1.36: "pods with pod-level resources cannot be resized").
pub fn no_pod_level_resources(spec: &PodSpec) -> Result<(), Fallback> {
    match crate::hpa::pod_level_resources_set(spec) {
        false => Ok(()),
        true => Err(Fallback {
            reason: "PodLevelResources",
            message: "the pod sets pod-level resources, which cannot be resized in place".into(),
        }),
    }
}

/// A Windows pod (`spec.os.name: windows`) is not resized in place: the API server refuses it
/// (`ValidatePodResize`: "Forbidden: windows pods cannot be resized"), so the change rolls out
/// without a resize request.
pub fn not_windows(spec: &PodSpec) -> Result<(), Fallback> {
    match spec.os.as_deref().map(|os| os.name.as_str()) {
        Some("windows") => Err(Fallback {
            reason: "WindowsPod",
            message: "the pod runs on Windows, whose pods cannot be resized in place".into(),
        }),
        _ => Ok(()),
    }
}

/// A resize is refused by the API server when it would change the pod's QoS class.
pub fn qos_class_kept(spec: &PodSpec, wanted: &PodResources) -> Result<(), Fallback> {
    let before = qos_class(spec, &PodResources::default());
    let after = qos_class(spec, wanted);
    if before == after {
        return Ok(());
    }
    Err(Fallback {
        reason: "QoSClassChange",
        message: format!(
            "resizing in place would change the pod's QoS class from {} to {}",
            before.as_str(),
            after.as_str()
        ),
    })
}

/// On Kubernetes 1.33 a resize may not lower a container's memory limit, nor add one, unless
/// its memory `resizePolicy` is `RestartContainer` (`validateContainerResize`, "memory limits
/// cannot be decreased unless resizePolicy is RestartContainer"): such a change rolls out.
pub fn memory_limit_not_lowered(spec: &PodSpec, wanted: &PodResources) -> Result<(), Fallback> {
    for (c, _) in resizable(spec) {
        let Some(new) = wanted
            .limits
            .get(c.name.as_str())
            .and_then(|l| l.memory_bytes)
        else {
            continue;
        };
        let restarts = c
            .resize_policy
            .iter()
            .flatten()
            .find(|p| p.resource_name == "memory")
            .is_some_and(|p| p.restart_policy == "RestartContainer");
        let lowered = limit_of(c, "memory").is_none_or(|old| new < old);
        if lowered && !restarts {
            return Err(Fallback {
                reason: "MemoryLimitDecrease",
                message: format!(
                    "container {}: a memory limit may not be lowered or added in place unless \
                     its resizePolicy is RestartContainer",
                    c.name
                ),
            });
        }
    }
    Ok(())
}

/// When the wait on a deferred or in-progress resize started: kerf's own last resize request of
/// the workload (`status.resize.lastRequestTime`), as VPA's updater measures from its own last
/// in-place attempt, or the condition's `lastTransitionTime` where that is later. A condition
/// left from an earlier resize (its time long past) does not make a new request time out at
/// once; without a recorded request the condition's time is all there is.
pub fn resize_timer_start(
    condition_since: Option<Timestamp>,
    last_request: Option<Timestamp>,
) -> Option<Timestamp> {
    condition_since.max(last_request)
}

/// A resize the kubelet reports as infeasible, or waited on beyond its bound
/// ([`resize_timer_start`]), rolls out.
pub fn kubelet_resize_within_bounds(
    state: &KubeletResize,
    now: Timestamp,
    last_request: Option<Timestamp>,
) -> Result<(), Fallback> {
    let longer_than = |since: &Option<Timestamp>, bound: SignedDuration| {
        resize_timer_start(*since, last_request).is_some_and(|t| now.duration_since(t) > bound)
    };
    match state {
        KubeletResize::Infeasible(message) => Err(Fallback {
            reason: "Infeasible",
            message: format!("the kubelet cannot resize the pod in place: {message}"),
        }),
        KubeletResize::Failed(message) => Err(Fallback {
            reason: "ResizeError",
            message: format!("the kubelet failed to resize the pod: {message}"),
        }),
        KubeletResize::Deferred(since) if longer_than(since, DEFERRED_BOUND) => Err(Fallback {
            reason: "DeferredTooLong",
            message: format!(
                "the kubelet deferred the resize for more than {} minutes",
                DEFERRED_BOUND.as_mins()
            ),
        }),
        KubeletResize::InProgress(since) if longer_than(since, IN_PROGRESS_BOUND) => {
            Err(Fallback {
                reason: "InProgressTooLong",
                message: format!(
                    "the resize stayed in progress for more than {} minutes",
                    IN_PROGRESS_BOUND.as_mins()
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The containers a resize can change: the regular ones and the sidecars (restartable init
/// containers); an ordinary init container has run to completion.
fn resizable(spec: &PodSpec) -> impl Iterator<Item = (&Container, bool)> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.is_sidecar());
    spec.containers
        .iter()
        .map(|c| (c, false))
        .chain(sidecars.map(|c| (c, true)))
}

/// What one pod's containers should get, for the containers the pod has and can resize: the
/// requests and limits admission sets ([`pod_resource_value`]): the limits the change carries
/// (`limits`), elsewhere the request capped at the container's own limit.
pub fn pod_resources(
    spec: &PodSpec,
    wanted: &ContainerRequests,
    limits: &ContainerRequests,
) -> PodResources {
    let mut out = PodResources::default();
    for (c, _) in resizable(spec) {
        let Some(w) = wanted.get(c.name.as_str()) else {
            continue;
        };
        let carried = limits.get(c.name.as_str());
        let one = |want: Option<i64>, carried: Option<i64>, resource: &str| {
            let (r, l, _) = pod_resource_value(want?, carried, limit_of(c, resource));
            Some((r, l))
        };
        let cpu = one(
            w.cpu_millis.filter(|m| *m > 0),
            carried.and_then(|l| l.cpu_millis),
            "cpu",
        );
        let memory = one(
            w.memory_bytes.filter(|b| *b > 0),
            carried.and_then(|l| l.memory_bytes),
            "memory",
        );
        out.requests.insert(
            c.name.to_string(),
            ResourceRequests {
                cpu_millis: cpu.map(|v| v.0),
                memory_bytes: memory.map(|v| v.0),
            },
        );
        let lim = ResourceRequests {
            cpu_millis: cpu.and_then(|v| v.1),
            memory_bytes: memory.and_then(|v| v.1),
        };
        if lim.cpu_millis.is_some() || lim.memory_bytes.is_some() {
            out.limits.insert(c.name.to_string(), lim);
        }
    }
    out
}

/// Whether the pod's containers already have the requests and limits of `set`.
pub fn pod_matches(spec: &PodSpec, set: &PodResources) -> bool {
    let same = |values: Option<&ResourceRequests>, of: &dyn Fn(&str) -> Option<i64>| {
        values.is_none_or(|w| {
            w.cpu_millis.is_none_or(|m| of("cpu") == Some(m))
                && w.memory_bytes.is_none_or(|b| of("memory") == Some(b))
        })
    };
    resizable(spec).all(|(c, _)| {
        let name = c.name.as_str();
        same(set.requests.get(name), &|r| request_of(c, r))
            && same(set.limits.get(name), &|r| limit_of(c, r))
    })
}

/// The containers the kubelet restarts to apply the resize: those whose `resizePolicy` says
/// `RestartContainer` for a resource that changes (still resized in place, not recreated).
pub fn restarted_containers(spec: &PodSpec, set: &PodResources) -> Vec<String> {
    resizable(spec)
        .filter(|(c, _)| {
            let Some(w) = set.requests.get(c.name.as_str()) else {
                return false;
            };
            let l = set.limits.get(c.name.as_str());
            let changes = |resource: &str, v: Option<i64>| {
                let limit = l.and_then(|l| match resource {
                    "cpu" => l.cpu_millis,
                    _ => l.memory_bytes,
                });
                v.is_some_and(|v| request_of(c, resource) != Some(v))
                    || limit.is_some_and(|v| limit_of(c, resource) != Some(v))
            };
            let restarts = |resource: &str| {
                c.resize_policy
                    .iter()
                    .flat_map(|list| list.iter())
                    .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
            };
            (changes("cpu", w.cpu_millis) && restarts("cpu"))
                || (changes("memory", w.memory_bytes) && restarts("memory"))
        })
        .map(|(c, _)| c.name.to_string())
        .collect()
}

/// The body of a `pods/resize` request: a strategic merge patch of the containers' requests
/// and limits, as `kubectl patch --subresource resize` sends it (containers merge by name).
pub fn resize_body(spec: &PodSpec, set: &PodResources) -> Value {
    let values = |v: Option<&ResourceRequests>| {
        let mut m = Map::new();
        if let Some(c) = v.and_then(|v| v.cpu_millis) {
            m.insert("cpu".into(), json!(format_cpu_millis(c)));
        }
        if let Some(b) = v.and_then(|v| v.memory_bytes) {
            m.insert("memory".into(), json!(format_memory_bytes(b)));
        }
        m
    };
    let mut containers = Vec::new();
    let mut sidecars = Vec::new();
    for (c, sidecar) in resizable(spec) {
        let req = values(set.requests.get(c.name.as_str()));
        if req.is_empty() {
            continue;
        }
        let mut resources = Map::new();
        resources.insert("requests".into(), Value::Object(req));
        let lim = values(set.limits.get(c.name.as_str()));
        if !lim.is_empty() {
            resources.insert("limits".into(), Value::Object(lim));
        }
        let entry = json!({"name": c.name.as_str(), "resources": resources});
        if sidecar {
            sidecars.push(entry);
        } else {
            containers.push(entry);
        }
    }
    let mut spec_patch = Map::new();
    if !containers.is_empty() {
        spec_patch.insert("containers".into(), Value::Array(containers));
    }
    if !sidecars.is_empty() {
        spec_patch.insert("initContainers".into(), Value::Array(sidecars));
    }
    json!({ "spec": spec_patch })
}

/// One pod's resize request.
#[derive(Clone, Debug, PartialEq)]
pub struct PodResize {
    pub namespace: String,
    pub pod: String,
    /// The strategic merge patch sent to `pods/<pod>/resize`.
    pub body: Value,
    /// The requests it sets, per container (the in-memory writer lays them over the pod).
    pub requests: ContainerRequests,
    /// The limits it sets with them (those the change carries).
    pub limits: ContainerRequests,
    /// Containers the kubelet restarts to apply it (their `resizePolicy`).
    pub restarts: Vec<String>,
}

/// Where a workload's running pods stand against the change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadResize {
    /// The resize requests of this cycle.
    pub requests: Vec<PodResize>,
    pub resized: u32,
    pub pending: u32,
    pub infeasible: u32,
    /// Pods left for a later cycle (the pace).
    pub waiting: u32,
    /// Set when the change rolls out instead.
    pub fallback: Option<Fallback>,
    /// kerf's last resize request of the workload: this cycle's when it asks a pod, else the
    /// recorded one.
    pub last_request: Option<Timestamp>,
}

/// One workload's in-place change over its running pods: a pod already at the change is
/// resized (or pending, by its conditions); any other is asked, within `budget` pods this
/// cycle. A pod the change cannot reach in place — its QoS class would change, the kubelet
/// finds it infeasible or waits beyond the bounds — makes the whole change a rollout.
pub fn plan_workload_resize(
    pods: &[&Pod],
    (wanted, limits): (&ContainerRequests, &ContainerRequests),
    (now, last_request): (Timestamp, Option<Timestamp>),
    budget: &mut usize,
) -> WorkloadResize {
    let mut out = WorkloadResize {
        last_request,
        ..Default::default()
    };
    for pod in pods {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let requests = pod_resources(spec, wanted, limits);
        let state = kubelet_resize(pod);
        if pod_matches(spec, &requests) {
            if let Err(f) = kubelet_resize_within_bounds(&state, now, last_request) {
                if matches!(state, KubeletResize::Infeasible(_)) {
                    out.infeasible += 1;
                }
                out.fallback.get_or_insert(f);
                continue;
            }
            match state {
                KubeletResize::Settled => out.resized += 1,
                _ => out.pending += 1,
            }
            continue;
        }
        let refused = not_windows(spec)
            .and_then(|()| no_pod_level_resources(spec))
            .and_then(|()| qos_class_kept(spec, &requests))
            .and_then(|()| memory_limit_not_lowered(spec, &requests));
        if let Err(f) = refused {
            out.fallback.get_or_insert(f);
            continue;
        }
        let restarts = restarted_containers(spec, &requests);
        // A container its resizePolicy restarts is a disruption: one such pod per workload
        // and cycle, the others wait.
        let restarting_already = out.requests.iter().any(|r| !r.restarts.is_empty());
        if *budget == 0 || (!restarts.is_empty() && restarting_already) {
            out.waiting += 1;
            continue;
        }
        *budget -= 1;
        out.pending += 1;
        out.requests.push(PodResize {
            namespace: pod.metadata.namespace.as_deref().unwrap_or("").to_string(),
            pod: pod.metadata.name.as_deref().unwrap_or("").to_string(),
            body: resize_body(spec, &requests),
            restarts,
            requests: requests.requests,
            limits: requests.limits,
        });
    }
    if out.fallback.is_some() {
        // Nothing is asked after all: the budget goes back, the pods are not pending.
        let asked = out.requests.len();
        *budget += asked;
        out.pending -= u32::try_from(asked).unwrap_or(0);
        out.waiting = 0;
        out.requests.clear();
    }
    if !out.requests.is_empty() {
        out.last_request = Some(now);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
