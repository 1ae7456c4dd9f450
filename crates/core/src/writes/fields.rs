//! What kerf's applies carry, pure: the server-side apply bodies, the fields kerf (or another
//! manager) owns on a live object according to its `managedFields`, and the comparisons that
//! decide whether a write or a rolling restart is due. The cluster writer executes them; the
//! in-memory writer and write planning read the same functions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::{ConditionUpdate, GpuAnnotations};
use crate::admission::GpuTarget;
use crate::managed_fields::{Owned, kerf_owned, others_owned};
use crate::model::{
    ANNOTATION_GPU_RECOMMENDATION, ContainerRequests, GpuMap, GpuRecommendation, RequestSet,
    ResourceRequests, WorkloadKey,
};
use crate::pod::{PodSpec, PodTemplateSpec};
use crate::quantity;
use crate::recommenders::gpu::template_gpu;
use crate::snapshot::Workload;
use kerf_api::WorkloadKind;

/// A workload as the API server returned it: its metadata (managedFields included) and the
/// rest of the object. Plain data, so the planning here needs no client types.
#[derive(Clone, Copy, Debug)]
pub struct Live<'a> {
    pub metadata: &'a ObjectMeta,
    pub data: &'a Value,
}

/// Nests `leaf` under `path` (`["spec","template"]` → `{"spec":{"template":leaf}}`).
pub fn nest(path: &[&str], leaf: Value) -> Value {
    path.iter().rev().fold(leaf, |acc, k| json!({ *k: acc }))
}

/// The merge patch of a rolling restart at `at`: an Argo Rollout's own `spec.restartAt` (its
/// pods older than that are replaced, as its strategy's `maxUnavailable` allows, with no canary
/// steps: `rollout/restart.go`); any other kind's pod template annotation
/// `rightsizing.kubex.ai/restartedAt`, which a template change rolls.
pub fn restart_body(kind: WorkloadKind, at: &str) -> Value {
    if kind == WorkloadKind::Rollout {
        return json!({"spec": {"restartAt": at}});
    }
    let mut path: Vec<&str> = kind.template_path().to_vec();
    path.extend(["metadata", "annotations"]);
    nest(&path, json!({ crate::model::ANNOTATION_RESTARTED_AT: at }))
}

/// Writing `gpu` over the workload `observed` changes the GPU allocation its pods get: a rolling
/// restart is due (Jobs and CronJobs are never restarted). What a pod gets is, per container, the
/// recommendation as admission writes it, else the template's own allocation — so removing a
/// recommendation that equals the template's allocation (a scale-back that landed on the
/// baseline) changes no pod and restarts nothing (docs/design/kai-admission.md#k9). Shared by
/// the cluster writer and the in-memory writer.
pub fn gpu_restart_due(observed: &Workload, gpu: &GpuAnnotations) -> bool {
    if matches!(observed.key.kind, WorkloadKind::Job | WorkloadKind::CronJob) {
        return false;
    }
    let template = template_gpu(observed);
    let before = observed
        .annotations
        .get(ANNOTATION_GPU_RECOMMENDATION)
        .and_then(|t| GpuRecommendation::parse(t).ok());
    let pods_get = |rec: Option<&GpuRecommendation>| -> GpuMap {
        let mut out = template.clone();
        for (c, r) in rec.map(|r| &r.containers).into_iter().flatten() {
            // A size admission cannot use leaves the container as the template has it.
            if let Some(t) = GpuTarget::from_units(*r) {
                out.insert(c.clone(), t.units());
            }
        }
        out
    };
    !same_gpu(
        Some(&pods_get(before.as_ref())),
        Some(&pods_get(gpu.recommendation.as_ref())),
    )
}

pub fn same_gpu(a: Option<&GpuMap>, b: Option<&GpuMap>) -> bool {
    let a = a.cloned().unwrap_or_default();
    let b = b.cloned().unwrap_or_default();
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && (va - vb).abs() < 1e-9)
}

/// The requests a container of `template` has, as kerf compares them.
pub fn template_requests(template: &PodTemplateSpec, container: &str) -> Option<ResourceRequests> {
    let req = template_container(template, container)?
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    Some(ResourceRequests {
        cpu_millis: req
            .and_then(|r| r.get("cpu"))
            .and_then(|q| quantity::cpu_millis(q).ok()),
        memory_bytes: req
            .and_then(|r| r.get("memory"))
            .and_then(|q| quantity::memory_bytes(q).ok()),
    })
}

/// The limits a container of `template` has (`None` where it has none), read as the
/// recommendation reads them.
pub fn template_limits(template: &PodTemplateSpec, container: &str) -> Option<ResourceRequests> {
    template_container(template, container)
        .map(crate::recommenders::resources::container::container_limits)
}

/// A container's requests, or its limits.
fn template_values(
    template: &PodTemplateSpec,
    container: &str,
    limits: bool,
) -> Option<ResourceRequests> {
    match limits {
        true => template_limits(template, container),
        false => template_requests(template, container),
    }
}

/// The container of `template` of that name (regular or init).
fn template_container<'t>(
    template: &'t PodTemplateSpec,
    container: &str,
) -> Option<&'t crate::pod::Container> {
    let spec = template.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == container)
}

pub fn requests_match(template: &PodTemplateSpec, wanted: &ContainerRequests) -> bool {
    values_match(template, wanted, false)
}

/// Whether the template's limits are `wanted`'s.
pub fn limits_match(template: &PodTemplateSpec, wanted: &ContainerRequests) -> bool {
    values_match(template, wanted, true)
}

fn values_match(template: &PodTemplateSpec, wanted: &ContainerRequests, limits: bool) -> bool {
    wanted
        .iter()
        .all(|(c, want)| match template_values(template, c, limits) {
            // A container the template does not have cannot be written; nothing to do for it.
            None => true,
            Some(have) => {
                want.cpu_millis.is_none_or(|m| have.cpu_millis == Some(m))
                    && want
                        .memory_bytes
                        .is_none_or(|b| have.memory_bytes == Some(b))
            }
        })
}

/// Whether `template` has any of the requests `which` names.
pub fn has_any(template: &PodTemplateSpec, which: &BTreeMap<String, RequestSet>) -> bool {
    which.iter().any(|(c, set)| {
        template_requests(template, c).is_some_and(|have| {
            (set.cpu && have.cpu_millis.is_some()) || (set.memory && have.memory_bytes.is_some())
        })
    })
}

/// The live values of the annotations `owned` names.
fn owned_annotation_values(owned: &Owned, live: Live<'_>) -> BTreeMap<String, String> {
    let live_ann = live.metadata.annotations.as_ref();
    owned
        .annotations
        .iter()
        .filter_map(|k| {
            live_ann
                .and_then(|a| a.get(k))
                .map(|v| (k.clone(), v.clone()))
        })
        .collect()
}

/// The live template values of the requests `owned` names.
fn owned_request_values(owned: &Owned, template: &PodTemplateSpec) -> ContainerRequests {
    owned_values(&owned.requests, template, false)
}

fn owned_values(
    owned: &BTreeMap<String, RequestSet>,
    template: &PodTemplateSpec,
    limits: bool,
) -> ContainerRequests {
    owned
        .iter()
        .filter_map(|(c, set)| {
            template_values(template, c, limits).map(|have| {
                let owned = ResourceRequests {
                    cpu_millis: have.cpu_millis.filter(|_| set.cpu),
                    memory_bytes: have.memory_bytes.filter(|_| set.memory),
                };
                (c.clone(), owned)
            })
        })
        .collect()
}

pub fn live_template(obj: Live<'_>, kind: WorkloadKind) -> PodTemplateSpec {
    let mut v = Some(obj.data);
    for step in kind.template_path() {
        v = v.and_then(|x| x.get(*step));
    }
    v.and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default()
}

/// The server-side apply body for kerf's fields on a workload, and the containers whose
/// requests it leaves out because the template has no such container.
pub fn workload_body(
    key: &WorkloadKey,
    annotations: &BTreeMap<String, String>,
    requests: &ContainerRequests,
    limits: &ContainerRequests,
    template: &PodTemplateSpec,
) -> (Value, Vec<String>) {
    let mut missing = Vec::new();
    let mut metadata = json!({"name": key.name, "namespace": key.namespace});
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    let mut body = json!({"apiVersion": key.kind.api_version(), "kind": key.kind.as_str(), "metadata": metadata});
    let empty = PodSpec::default();
    let spec = template.spec.as_ref().unwrap_or(&empty);
    let mut containers = Vec::new();
    let mut init_containers = Vec::new();
    let names: std::collections::BTreeSet<&String> = requests.keys().chain(limits.keys()).collect();
    for name in names {
        let none = ResourceRequests::default();
        let req = rendered(spec, name, requests.get(name).unwrap_or(&none), false);
        let lim = rendered(spec, name, limits.get(name).unwrap_or(&none), true);
        if req.is_empty() && lim.is_empty() {
            continue;
        }
        let mut resources = serde_json::Map::new();
        if !req.is_empty() {
            resources.insert("requests".into(), Value::Object(req));
        }
        if !lim.is_empty() {
            resources.insert("limits".into(), Value::Object(lim));
        }
        let entry = json!({"name": name, "resources": resources});
        if spec.containers.iter().any(|c| c.name == name) {
            containers.push(entry);
        } else if spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        {
            init_containers.push(entry);
        } else {
            missing.push(name.clone());
        }
    }
    if !containers.is_empty() || !init_containers.is_empty() {
        let mut pod_spec = serde_json::Map::new();
        if !containers.is_empty() {
            pod_spec.insert("containers".into(), Value::Array(containers));
        }
        if !init_containers.is_empty() {
            pod_spec.insert("initContainers".into(), Value::Array(init_containers));
        }
        let mut path: Vec<&str> = key.kind.template_path().to_vec();
        path.push("spec");
        let spec_part = nest(&path, Value::Object(pod_spec));
        if let (Some(b), Some(s)) = (body.as_object_mut(), spec_part.as_object()) {
            b.extend(s.clone());
        }
    }
    (body, missing)
}

/// `values` (requests, or `limits`) of a container as kerf writes them: where a value equals the
/// live one, the live text (server-side apply compares the raw text: `500000Ki` over a user's
/// `512M` would move the field to kerf although nothing changed; docs/gitops.md#how-kerf-writes).
fn rendered(
    spec: &PodSpec,
    container: &str,
    values: &ResourceRequests,
    limits: bool,
) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    if let Some(m) = values.cpu_millis {
        let text = live_value(spec, container, "cpu", limits)
            .filter(|q| quantity::cpu_millis(q).ok() == Some(m))
            .map_or_else(|| quantity::format_cpu_millis(m), |q| q.0.clone());
        out.insert("cpu".into(), json!(text));
    }
    if let Some(b) = values.memory_bytes {
        let text = live_value(spec, container, "memory", limits)
            .filter(|q| quantity::memory_bytes(q).ok() == Some(b))
            .map_or_else(|| quantity::format_memory_bytes(b), |q| q.0.clone());
        out.insert("memory".into(), json!(text));
    }
    out
}

fn live_value<'a>(
    spec: &'a PodSpec,
    container: &str,
    resource: &str,
    limits: bool,
) -> Option<&'a Quantity> {
    let r = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == container)?
        .resources
        .as_ref()?;
    match limits {
        true => r.limits.as_ref()?.get(resource),
        false => r.requests.as_ref()?.get(resource),
    }
}

/// Requests a release gives back (docs/design/hpa-coordination.md#h13).
#[derive(Clone, Copy, Debug)]
pub struct Released<'a> {
    /// Restored to their value from before kerf, by [`release_patch`] first.
    pub restored: &'a ContainerRequests,
    /// Created by kerf where the container had none: they go.
    pub removed: &'a BTreeMap<String, RequestSet>,
}

impl Released<'_> {
    /// Nothing released.
    pub const NONE: Released<'static> = Released {
        restored: &ContainerRequests::new(),
        removed: &BTreeMap::new(),
    };
}

/// The strategic merge patch by which a release writes the restored values, as
/// `RELEASE_FIELD_MANAGER` (an Update moves a field whose value it changes to that manager).
/// `None` when nothing is restored.
pub fn release_patch(
    key: &WorkloadKey,
    restored: &ContainerRequests,
    limits: &ContainerRequests,
    template: &PodTemplateSpec,
) -> Option<Value> {
    // A restored container the template no longer has has nothing to restore.
    let (full, _) = workload_body(key, &BTreeMap::new(), restored, limits, template);
    let spec = full.get("spec")?;
    Some(json!({ "spec": spec }))
}

/// kerf's server-side apply on a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct KerfApply {
    pub body: Value,
    /// Restored requests (`<container> <resource>`) kerf is still the only owner of and keeps.
    pub still_kerfs: Vec<String>,
    /// Containers with requests to set that the template does not have (not written).
    pub not_in_template: Vec<String>,
}

/// kerf's server-side apply on the workload `live` (managedFields included), pure. Server-side
/// apply deletes a field its only manager leaves out, so the body carries every request kerf
/// owns there at its live value, with `set`'s values over them, except the released ones:
/// a removed one is left out (it goes); a restored one is left to the manager
/// [`release_patch`] moved it to — unless kerf is still its only owner (the patch did not change
/// its value, so could not move it), in which case it stays, at that value, rather than be
/// deleted. `annotations`: the annotations kerf wants (`None`: those it owns, as they are).
pub fn kerf_apply(
    key: &WorkloadKey,
    live: Live<'_>,
    annotations: Option<&BTreeMap<String, String>>,
    set: &ContainerRequests,
    set_limits: &ContainerRequests,
    released: Released<'_>,
) -> KerfApply {
    let template = live_template(live, key.kind);
    let owned = kerf_owned(live.metadata, key.kind, template.spec.as_ref());
    let others = others_owned(live.metadata, key.kind, template.spec.as_ref());
    let annotations = annotations
        .cloned()
        .unwrap_or_else(|| owned_annotation_values(&owned, live));
    let mut requests = owned_request_values(&owned, &template);
    let mut limits = owned_values(&owned.limits, &template, true);
    // A released resource's limit goes with its request.
    for (c, l) in limits.iter_mut() {
        let gone = leaving(released, &others.limits, c);
        if gone.cpu {
            l.cpu_millis = None;
        }
        if gone.memory {
            l.memory_bytes = None;
        }
    }
    overlay(&mut limits, set_limits);
    let mut still_kerfs = Vec::new();
    for (c, r) in requests.iter_mut() {
        let restored = released
            .restored
            .get(c)
            .map(RequestSet::of)
            .unwrap_or_default();
        let gone = leaving(released, &others.requests, c);
        if gone.cpu {
            r.cpu_millis = None;
        } else if restored.cpu && r.cpu_millis.is_some() {
            still_kerfs.push(format!("{c} cpu"));
        }
        if gone.memory {
            r.memory_bytes = None;
        } else if restored.memory && r.memory_bytes.is_some() {
            still_kerfs.push(format!("{c} memory"));
        }
    }
    overlay(&mut requests, set);
    let (body, not_in_template) = workload_body(key, &annotations, &requests, &limits, &template);
    KerfApply {
        body,
        still_kerfs,
        not_in_template,
    }
}

/// Which of container `c`'s values kerf's apply leaves out on a release: those kerf created
/// (removed), and those restored that another manager (`others`) now owns — leaving out one only
/// kerf owns would make server-side apply delete it.
fn leaving(released: Released<'_>, others: &BTreeMap<String, RequestSet>, c: &str) -> RequestSet {
    let removed = released.removed.get(c).copied().unwrap_or_default();
    let restored = released
        .restored
        .get(c)
        .map(RequestSet::of)
        .unwrap_or_default();
    let other = others.get(c).copied().unwrap_or_default();
    RequestSet {
        cpu: removed.cpu || (restored.cpu && other.cpu),
        memory: removed.memory || (restored.memory && other.memory),
    }
}

/// `set`'s values over `values`, resource by resource.
fn overlay(values: &mut ContainerRequests, set: &ContainerRequests) {
    for (c, want) in set {
        let e = values.entry(c.clone()).or_default();
        if want.cpu_millis.is_some() {
            e.cpu_millis = want.cpu_millis;
        }
        if want.memory_bytes.is_some() {
            e.memory_bytes = want.memory_bytes;
        }
    }
}

/// The limits a release or a rollback gives back with the `restored` requests: where kerf owns a
/// container's limit (it scaled it with the request), the limit at the restored request in the
/// live ratio — the user's own limit again (docs/policies.md#limits); a limit kerf never wrote
/// is left alone.
pub fn restored_limits(
    key: &WorkloadKey,
    live: Live<'_>,
    restored: &ContainerRequests,
) -> ContainerRequests {
    let template = live_template(live, key.kind);
    let owned = kerf_owned(live.metadata, key.kind, template.spec.as_ref());
    let mut out = ContainerRequests::new();
    for (c, r) in restored {
        let Some(set) = owned.limits.get(c) else {
            continue;
        };
        let have = template_requests(&template, c).unwrap_or_default();
        let lim = template_limits(&template, c).unwrap_or_default();
        let scale = |owned: bool, req: Option<i64>, lim: Option<i64>, to: Option<i64>| {
            to.filter(|_| owned)
                .and_then(|to| crate::limits::proportional_limit(req, lim, to))
        };
        let l = ResourceRequests {
            cpu_millis: scale(set.cpu, have.cpu_millis, lim.cpu_millis, r.cpu_millis),
            memory_bytes: scale(
                set.memory,
                have.memory_bytes,
                lim.memory_bytes,
                r.memory_bytes,
            ),
        };
        if l.cpu_millis.is_some() || l.memory_bytes.is_some() {
            out.insert(c.clone(), l);
        }
    }
    out
}

/// Conditions after applying `updates` at `now`: `lastTransitionTime` changes only when a
/// condition's status does; conditions not mentioned are kept.
pub fn merge_conditions(
    observed: &[Condition],
    updates: &[ConditionUpdate],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = observed.to_vec();
    for u in updates {
        let status = if u.status { "True" } else { "False" }.to_string();
        let fresh = Condition {
            type_: u.type_.clone(),
            status: status.clone(),
            reason: u.reason.clone(),
            message: u.message.clone(),
            observed_generation: generation,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        };
        match out.iter_mut().find(|c| c.type_ == u.type_) {
            Some(c) => {
                let keep_time = c.status == status;
                let time = c.last_transition_time.clone();
                *c = fresh;
                if keep_time {
                    c.last_transition_time = time;
                }
            }
            None => out.push(fresh),
        }
    }
    out
}

#[cfg(test)]
mod restart_tests {
    use super::*;

    /// A Rollout restarts through Argo's `spec.restartAt`, never its template (a template change
    /// would start a canary); a Deployment through its template annotation.
    #[test]
    fn restart_body() {
        let at = "2026-07-01T12:00:00Z";
        assert_eq!(
            super::restart_body(WorkloadKind::Rollout, at),
            json!({"spec": {"restartAt": at}})
        );
        assert_eq!(
            super::restart_body(WorkloadKind::Deployment, at),
            json!({"spec": {"template": {"metadata": {"annotations": {
                "rightsizing.kubex.ai/restartedAt": at}}}}})
        );
    }
}
