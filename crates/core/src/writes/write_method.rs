//! How kerf sends a write of a pod template, decided from the target's schema
//! (docs/gitops.md#how-kerf-writes), and the JSON Patch it sends where a server-side apply
//! would replace what it did not mean to change.
//!
//! Server-side apply merges a list item by item only where the schema makes the list a map
//! keyed by `name` (`x-kubernetes-list-type: map`, `x-kubernetes-list-map-keys: [name]`); a plain
//! array, or one under `x-kubernetes-preserve-unknown-fields`, is atomic, and an apply of a
//! partial container list replaces the whole list (structured-merge-diff's `typed/merge.go`;
//! the API server converts a CRD's schema with kube-openapi's `schemaconv`). Argo Rollouts
//! before v1.9 ships such a CRD. There kerf writes an RFC 6902 JSON Patch whose `test`
//! operations pin each container's name at its index: a list that changed under kerf fails
//! the write instead of being corrupted.

use std::borrow::Cow;
use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};

use crate::model::{ContainerRequests, RequestSet, ResourceRequests};
use crate::quantity;
use kerf_api::{WorkloadKind, WriteMethod};

/// How the containers list of a kind's pod template merges under server-side apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerList {
    /// A map keyed by `name`: an apply merges container by container.
    MapByName,
    /// Atomic: an apply replaces the list whole.
    Atomic,
    /// Under `x-kubernetes-preserve-unknown-fields` (types deduced: lists atomic).
    Deduced,
}

/// The containers list of the pod template at `template_path` in a CRD version's
/// `openAPIV3Schema`.
pub fn container_list(schema: &Value, template_path: &[&str]) -> ContainerList {
    let mut node = schema;
    for step in template_path.iter().chain(&["spec", "containers"]) {
        match node.get("properties").and_then(|p| p.get(*step)) {
            Some(next) => node = next,
            None => return ContainerList::Deduced,
        }
    }
    let keyed_by_name = node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map")
        && node.get("x-kubernetes-list-map-keys") == Some(&json!(["name"]));
    if keyed_by_name {
        ContainerList::MapByName
    } else {
        ContainerList::Atomic
    }
}

/// The `openAPIV3Schema` of `kind`'s served version in a CRD object (`None`: not that kind's
/// CRD, or the version is not in it).
pub fn crd_version_schema(crd: &Value, kind: WorkloadKind) -> Option<&Value> {
    let (group, version) = kind.api_version().split_once('/')?;
    let spec = crd.get("spec")?;
    if spec.get("group")?.as_str()? != group
        || spec.get("names")?.get("kind")?.as_str()? != kind.kind_name()
    {
        return None;
    }
    spec.get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .get("schema")?
        .get("openAPIV3Schema")
}

/// A RayService's change is written to its `spec.rayClusterConfig`, where KubeRay reads the
/// cluster it rolls to (docs/workloads.md): by JSON Patch, since `workerGroupSpecs` is a plain
/// list (an apply would replace it whole) and each group is found by its `groupName`.
pub fn ray_cluster_config_write_method() -> (WriteMethod, Cow<'static, str>) {
    (
        WriteMethod::JsonPatch,
        "RayService: spec.rayClusterConfig is written, KubeRay rolls to a new cluster; its \
         workerGroupSpecs is a plain list: JSON Patch pinned to each group's groupName and \
         each container's name"
            .into(),
    )
}

/// How a template write of `kind` is sent, and why: `schema` is its CRD's `openAPIV3Schema`
/// (`None`: none at hand). Kubernetes' own kinds key containers by name.
pub fn template_write_method(
    kind: WorkloadKind,
    schema: Option<&Value>,
) -> (WriteMethod, Cow<'static, str>) {
    if !kind.template_writable() {
        return (
            WriteMethod::Evict,
            format!("{kind}'s controller owns the pod template: running pods are evicted").into(),
        );
    }
    if WorkloadKind::BUILT_IN.contains(&kind) {
        return (
            WriteMethod::Apply,
            "containers are a list keyed by name: server-side apply of kerf's fields".into(),
        );
    }
    match schema.map(|s| container_list(s, kind.template_path())) {
        Some(ContainerList::MapByName) => (
            WriteMethod::Apply,
            format!("{kind}'s CRD keys containers by name: server-side apply of kerf's fields")
                .into(),
        ),
        Some(ContainerList::Atomic) => (
            WriteMethod::JsonPatch,
            format!(
                "{kind}'s CRD makes containers an atomic list (an apply would replace it whole): \
                 JSON Patch pinned to each container's name"
            )
            .into(),
        ),
        Some(ContainerList::Deduced) => (
            WriteMethod::JsonPatch,
            format!(
                "{kind}'s CRD leaves the pod template to x-kubernetes-preserve-unknown-fields \
                 (lists atomic): JSON Patch pinned to each container's name"
            )
            .into(),
        ),
        None => (
            WriteMethod::JsonPatch,
            format!(
                "no CRD of {kind} at hand to say how its containers merge: JSON Patch pinned to \
                 each container's name (the safe way)"
            )
            .into(),
        ),
    }
}

/// RFC 6901: a JSON Pointer from path segments (`~` and `/` escaped).
fn pointer(segments: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(segments.iter().copied())
}

fn add(segments: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: pointer(segments),
        value,
    })
}

/// A JSON Patch of a workload `live` (the object as the API server returned it): annotations
/// set (`Some`) or removed (`None`), then per container the requests set and removed. Every
/// container touched is first pinned by a `test` of its name at its index; missing parent maps
/// are added first. Containers `live` does not have are left out (returned).
pub fn json_patch(
    live: &Value,
    kind: WorkloadKind,
    annotations: &BTreeMap<String, Option<String>>,
    set: &ContainerRequests,
    limits: &ContainerRequests,
    removed: &BTreeMap<String, RequestSet>,
) -> (Patch, Vec<String>) {
    let mut ops = Vec::new();
    let live_annotations = live.pointer("/metadata/annotations");
    if annotations.values().any(Option::is_some) && live_annotations.is_none() {
        ops.push(add(&["metadata", "annotations"], json!({})));
    }
    for (k, v) in annotations {
        let path = ["metadata", "annotations", k.as_str()];
        match v {
            Some(v) => ops.push(add(&path, json!(v))),
            None if live_annotations.and_then(|a| a.get(k)).is_some() => {
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: pointer(&path),
                }))
            }
            None => {}
        }
    }
    let mut missing = Vec::new();
    let names: std::collections::BTreeSet<&String> = set
        .keys()
        .chain(limits.keys())
        .chain(removed.keys())
        .collect();
    for name in names {
        let values = (set.get(name), limits.get(name));
        match container_ops(live, kind, name, values, removed.get(name)) {
            Some(c) => ops.extend(c),
            None => missing.push(name.clone()),
        }
    }
    (Patch(ops), missing)
}

/// Where KubeRay's RayService holds its cluster's pod templates (`ray-operator/apis/ray/v1`:
/// `RayClusterSpec` under `spec.rayClusterConfig`).
const RAY_CLUSTER_CONFIG: [&str; 2] = ["spec", "rayClusterConfig"];

/// The pod templates of a workload `live` that kerf writes, each with the `test` pinning it: a
/// kind's one template ([`WorkloadKind::template_path`]), none pinned; a RayService's head
/// group's and each worker group's under `spec.rayClusterConfig`, a worker group pinned by its
/// `groupName` at its index (`workerGroupSpecs` is a plain list: its order may change under
/// kerf).
pub fn template_locations(
    live: &Value,
    kind: WorkloadKind,
) -> Vec<(Vec<String>, Option<PatchOperation>)> {
    let owned = |path: &[&str]| path.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    if kind != WorkloadKind::RayService {
        return vec![(owned(kind.template_path()), None)];
    }
    let mut head = owned(&RAY_CLUSTER_CONFIG);
    head.extend(["headGroupSpec".into(), "template".into()]);
    let mut out = vec![(head, None)];
    let groups = live
        .pointer("/spec/rayClusterConfig/workerGroupSpecs")
        .and_then(Value::as_array);
    for (i, group) in groups.into_iter().flatten().enumerate() {
        let mut base = owned(&RAY_CLUSTER_CONFIG);
        base.extend(["workerGroupSpecs".into(), i.to_string()]);
        let pin = group.get("groupName").map(|name| {
            let mut at: Vec<&str> = base.iter().map(String::as_str).collect();
            at.push("groupName");
            PatchOperation::Test(TestOperation {
                path: pointer(&at),
                value: name.clone(),
            })
        });
        base.push("template".into());
        out.push((base, pin));
    }
    out
}

/// The operations for one container in every template of `live` that has it: `None` when
/// none has a container of that name.
fn container_ops(
    live: &Value,
    kind: WorkloadKind,
    name: &str,
    (set, limits): (Option<&ResourceRequests>, Option<&ResourceRequests>),
    removed: Option<&RequestSet>,
) -> Option<Vec<PatchOperation>> {
    let mut ops = Vec::new();
    let mut found = false;
    for (path, pin) in template_locations(live, kind) {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        if let Some(c) = container_ops_at(live, &path, name, (set, limits), removed) {
            found = true;
            ops.extend(pin);
            ops.extend(c);
        }
    }
    found.then_some(ops)
}

/// The operations for one container of the template at `path`: `None` when that template has
/// no container of that name.
fn container_ops_at(
    live: &Value,
    path: &[&str],
    name: &str,
    (set, limits): (Option<&ResourceRequests>, Option<&ResourceRequests>),
    removed: Option<&RequestSet>,
) -> Option<Vec<PatchOperation>> {
    // A pointer: a step may be a list index (a RayService's worker group).
    let template = live.pointer(pointer(path).as_str())?;
    let spec = template.get("spec")?;
    let (list, index, container) = ["containers", "initContainers"].iter().find_map(|list| {
        spec.get(*list)?
            .as_array()?
            .iter()
            .enumerate()
            .find(|(_, c)| c.get("name").and_then(Value::as_str) == Some(name))
            .map(|(i, c)| (*list, i.to_string(), c))
    })?;
    let mut base: Vec<&str> = path.to_vec();
    base.extend(["spec", list, index.as_str()]);
    let at = |tail: &[&'static str]| -> Vec<&str> { base.iter().chain(tail).copied().collect() };
    let mut ops = vec![PatchOperation::Test(TestOperation {
        path: pointer(&at(&["name"])),
        value: json!(name),
    })];
    let requests = container.get("resources").and_then(|r| r.get("requests"));
    let mut parents_added = container.get("resources").is_some();
    for (which, values) in [("requests", set), ("limits", limits)] {
        let have = container.get("resources").and_then(|r| r.get(which));
        let changes = changed_values(have, values);
        if changes.is_empty() {
            continue;
        }
        if !parents_added {
            ops.push(add(&at(&["resources"]), json!({})));
            parents_added = true;
        }
        if have.is_none() {
            ops.push(add(&at(&["resources", which]), json!({})));
        }
        for (r, v) in changes {
            let path = pointer(&at(&["resources", which, r]));
            ops.push(match have.and_then(|q| q.get(r)) {
                Some(_) => PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: json!(v),
                }),
                None => PatchOperation::Add(AddOperation {
                    path,
                    value: json!(v),
                }),
            });
        }
    }
    let gone = removed.copied().unwrap_or_default();
    for (r, go) in [("cpu", gone.cpu), ("memory", gone.memory)] {
        if go && requests.and_then(|q| q.get(r)).is_some() {
            ops.push(PatchOperation::Remove(RemoveOperation {
                path: pointer(&at(&["resources", "requests", r])),
            }));
        }
    }
    Some(ops)
}

/// The values of `values` that differ from the live ones `have` (whatever the live text), as
/// kerf writes them.
fn changed_values(
    have: Option<&Value>,
    values: Option<&ResourceRequests>,
) -> Vec<(&'static str, String)> {
    let Some(v) = values else {
        return Vec::new();
    };
    let live = |r: &str| {
        have.and_then(|q| q.get(r))
            .and_then(Value::as_str)
            .map(|t| Quantity(t.to_string()))
    };
    let mut out = Vec::new();
    if let Some(m) = v.cpu_millis
        && live("cpu").and_then(|q| quantity::cpu_millis(&q).ok()) != Some(m)
    {
        out.push(("cpu", quantity::format_cpu_millis(m)));
    }
    if let Some(b) = v.memory_bytes
        && live("memory").and_then(|q| quantity::memory_bytes(&q).ok()) != Some(b)
    {
        out.push(("memory", quantity::format_memory_bytes(b)));
    }
    out
}

#[cfg(test)]
mod tests;
