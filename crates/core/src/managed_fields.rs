//! The one reader of `managedFields`: which field manager owns which of the fields kerf sets,
//! on a workload or an HPA. Conflict detection reads who took a field back ([`project`],
//! [`project_hpa`]); the writers read what kerf's own apply owns and what the others do
//! ([`kerf_owned`], [`others_owned`], [`hpa_metrics_owners`]). Both walk one entry the same
//! way ([`entry_fields`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::{Value, json};

use crate::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, ANNOTATION_RESTARTED_AT, RequestSet,
};
use crate::pod::PodSpec;
use kerf_api::WorkloadKind;

/// The field manager of every server-side apply kerf makes.
pub const FIELD_MANAGER: &str = "kerf";

/// Field manager of a release's restore writes (an Update, not an Apply): the restored values
/// change hands to it, so kerf's following apply can leave them out without server-side apply
/// deleting them.
pub const RELEASE_FIELD_MANAGER: &str = "kerf-release";

/// The workload annotations kerf writes: a manager other than kerf owning one means someone
/// else wrote it. (The ones users set — rollback, conflict-acknowledged — are not kerf's.)
const KERF_ANNOTATIONS: [&str; 2] = [ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION];

/// A field kerf sets and watches for take-backs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TrackedField {
    /// A container's request (`cpu`, `memory`) in the pod template.
    Request {
        container: String,
        init: bool,
        resource: String,
    },
    /// One of kerf's workload annotations (`rightsizing.kubex.ai/…`).
    Annotation(String),
    /// One of kerf's pod template annotations (the rolling restart's `restartedAt`).
    TemplateAnnotation(String),
    /// `spec.metrics` of the HPA of that name (the workload's namespace).
    HpaMetrics(String),
}

impl TrackedField {
    /// The field as events, conditions and `status.conflict` name it, e.g.
    /// `spec.template.spec.containers[app].resources.requests.cpu`.
    pub fn path(&self, kind: WorkloadKind) -> String {
        let template = kind.template_path().join(".");
        match self {
            TrackedField::Request {
                container,
                init,
                resource,
            } => {
                let list = if *init {
                    "initContainers"
                } else {
                    "containers"
                };
                format!("{template}.spec.{list}[{container}].resources.requests.{resource}")
            }
            TrackedField::Annotation(k) => format!("metadata.annotations[{k}]"),
            TrackedField::TemplateAnnotation(k) => format!("{template}.metadata.annotations[{k}]"),
            TrackedField::HpaMetrics(name) => {
                format!("HorizontalPodAutoscaler/{name} spec.metrics")
            }
        }
    }

    /// [`Self::path`] read back (a path kerf did not write is `None`).
    pub fn parse(path: &str) -> Option<Self> {
        if let Some(rest) = path.strip_prefix("HorizontalPodAutoscaler/") {
            let name = rest.strip_suffix(" spec.metrics")?;
            return Some(TrackedField::HpaMetrics(name.to_string()));
        }
        let bracketed = |s: &str| -> Option<String> {
            Some(s.strip_suffix(']')?.to_string()).filter(|k| !k.contains(']'))
        };
        if let Some(k) = path.strip_prefix("metadata.annotations[") {
            return bracketed(k).map(TrackedField::Annotation);
        }
        if let Some((_, k)) = path.split_once(".metadata.annotations[") {
            return bracketed(k).map(TrackedField::TemplateAnnotation);
        }
        let (init, rest) = match path.split_once(".spec.initContainers[") {
            Some((_, rest)) => (true, rest),
            None => (false, path.split_once(".spec.containers[")?.1),
        };
        let (container, resource) = rest.split_once("].resources.requests.")?;
        matches!(resource, "cpu" | "memory").then(|| TrackedField::Request {
            container: container.to_string(),
            init,
            resource: resource.to_string(),
        })
    }
}

/// One `managedFields` entry, projected to the fields kerf tracks.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldManager {
    pub manager: String,
    /// `Apply` (server-side apply) or `Update`.
    pub operation: String,
    /// When this manager last changed the object (`None` when the API server did not say).
    pub time: Option<Timestamp>,
    pub fields: BTreeSet<TrackedField>,
}

impl FieldManager {
    /// kerf itself (its applies, its restart patch) or kerf giving a field back on release.
    pub fn is_kerf(&self) -> bool {
        self.manager == FIELD_MANAGER || self.manager == RELEASE_FIELD_MANAGER
    }
}

/// What one `managedFields` entry owns of the fields kerf reads: the workload's annotations,
/// the pod template's annotations and the containers' `cpu`/`memory` requests.
#[derive(Debug, Default)]
pub struct EntryFields<'a> {
    pub annotations: Vec<&'a str>,
    pub template_annotations: Vec<&'a str>,
    /// (container, an init container, `cpu` or `memory`).
    pub requests: Vec<(String, bool, &'a str)>,
    /// The same for the containers' limits.
    pub limits: Vec<(String, bool, &'a str)>,
}

fn keys(v: Option<&Value>) -> impl Iterator<Item = &str> {
    v.and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.keys())
        .filter_map(|k| k.strip_prefix("f:"))
}

/// A container's name from its `managedFields` key (`k:{"name":"app"}`).
fn container_name(key: &str) -> Option<String> {
    let k = serde_json::from_str::<Value>(key.strip_prefix("k:")?).ok()?;
    k.get("name").and_then(Value::as_str).map(str::to_string)
}

/// The fields one entry owns; `None` for a subresource's entry (status, scale) or one without
/// `fieldsV1`. Where the containers list is atomic (a CRD without list markers: Argo Rollouts
/// before v1.9), an entry owns the list whole (`f:containers: {}`): it owns the requests of every
/// container `template` has.
pub fn entry_fields<'a>(
    mf: &'a ManagedFieldsEntry,
    kind: WorkloadKind,
    pod_spec: Option<&'a PodSpec>,
) -> Option<EntryFields<'a>> {
    if mf.subresource.as_deref().is_some_and(|s| !s.is_empty()) {
        return None;
    }
    let fields = &mf.fields_v1.as_ref()?.0;
    let annotations = fields
        .get("f:metadata")
        .and_then(|m| m.get("f:annotations"));
    let mut template = Some(fields);
    for step in kind.template_path() {
        template = template.and_then(|v| v.get(format!("f:{step}")));
    }
    let template_annotations = template
        .and_then(|t| t.get("f:metadata"))
        .and_then(|m| m.get("f:annotations"));
    let spec = template.and_then(|t| t.get("f:spec"));
    let mut requests: Vec<(String, bool, &'a str)> = Vec::new();
    let mut limits: Vec<(String, bool, &'a str)> = Vec::new();
    for (list, init) in [("f:containers", false), ("f:initContainers", true)] {
        let items = spec.and_then(|s| s.get(list)).and_then(Value::as_object);
        if items.is_some_and(serde_json::Map::is_empty) {
            for (container, init, resource) in atomic_list_requests(pod_spec, init, false) {
                requests.push((container, init, resource));
            }
            for (container, init, resource) in atomic_list_requests(pod_spec, init, true) {
                limits.push((container, init, resource));
            }
            continue;
        }
        for (key, item) in items.into_iter().flatten() {
            let Some(container) = container_name(key) else {
                continue;
            };
            let owned = item.get("f:resources").and_then(|r| r.get("f:requests"));
            for resource in keys(owned).filter(|r| matches!(*r, "cpu" | "memory")) {
                requests.push((container.clone(), init, resource));
            }
            let owned = item.get("f:resources").and_then(|r| r.get("f:limits"));
            for resource in keys(owned).filter(|r| matches!(*r, "cpu" | "memory")) {
                limits.push((container.clone(), init, resource));
            }
        }
    }
    Some(EntryFields {
        annotations: keys(annotations).collect(),
        template_annotations: keys(template_annotations).collect(),
        requests,
        limits,
    })
}

/// The requests (`limits`: the limits) of every container of `template`'s list (`init`: the
/// init containers), owned with the list when it is atomic.
fn atomic_list_requests(
    template: Option<&PodSpec>,
    init: bool,
    limits: bool,
) -> impl Iterator<Item = (String, bool, &'static str)> + '_ {
    let list = template.map(|t| match init {
        true => t.init_containers.as_deref().unwrap_or_default(),
        false => t.containers.as_slice(),
    });
    list.into_iter().flatten().flat_map(move |c| {
        let requests = c.resources.as_ref().and_then(|r| match limits {
            true => r.limits.as_ref(),
            false => r.requests.as_ref(),
        });
        ["cpu", "memory"]
            .into_iter()
            .filter(move |r| requests.is_some_and(|q| q.contains_key(*r)))
            .map(move |r| (c.name.to_string(), init, r))
    })
}

/// The tracked fields of a workload's `managedFields`, per entry (subresource entries and
/// entries owning none of them are left out).
pub fn project(
    entries: &[ManagedFieldsEntry],
    kind: WorkloadKind,
    template: Option<&PodSpec>,
) -> Vec<FieldManager> {
    let mut out = Vec::new();
    for mf in entries {
        let Some(owned) = entry_fields(mf, kind, template) else {
            continue;
        };
        let mut tracked = BTreeSet::new();
        tracked.extend(
            owned
                .annotations
                .iter()
                .filter(|k| KERF_ANNOTATIONS.contains(k))
                .map(|k| TrackedField::Annotation(k.to_string())),
        );
        tracked.extend(
            owned
                .template_annotations
                .iter()
                .filter(|k| **k == ANNOTATION_RESTARTED_AT)
                .map(|k| TrackedField::TemplateAnnotation(k.to_string())),
        );
        tracked.extend(
            owned
                .requests
                .into_iter()
                .map(|(container, init, resource)| TrackedField::Request {
                    container,
                    init,
                    resource: resource.to_string(),
                }),
        );
        if tracked.is_empty() {
            continue;
        }
        out.push(FieldManager {
            manager: mf.manager.clone().unwrap_or_default(),
            operation: mf.operation.clone().unwrap_or_default(),
            time: mf.time.as_ref().map(|t| t.0),
            fields: tracked,
        });
    }
    out
}

/// Whether the entry owns an HPA's target: `spec.metrics` (an `autoscaling/v2` entry) or
/// `spec.targetCPUUtilizationPercentage` (an `autoscaling/v1` one, e.g. a GitOps tool applying
/// a v1 manifest: the API server keeps each entry's fields at its own version).
fn owns_hpa_metrics(mf: &ManagedFieldsEntry) -> bool {
    mf.subresource.as_deref().is_none_or(str::is_empty)
        && mf
            .fields_v1
            .as_ref()
            .and_then(|f| f.0.get("f:spec"))
            .is_some_and(|s| {
                s.get("f:metrics").is_some() || s.get("f:targetCPUUtilizationPercentage").is_some()
            })
}

/// Keeps of an HPA's `managedFields` only the entries owning `spec.metrics`, reduced to that
/// field, so the reader's cache holds what conflict detection reads and no more.
pub fn prune_hpa_managed_fields(meta: &mut ObjectMeta) {
    let Some(entries) = meta.managed_fields.take() else {
        return;
    };
    let kept: Vec<ManagedFieldsEntry> = entries
        .into_iter()
        .filter(owns_hpa_metrics)
        .map(|mf| ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:metrics": {}}}))),
            ..mf
        })
        .collect();
    meta.managed_fields = (!kept.is_empty()).then_some(kept);
}

/// An HPA's `spec.metrics` owners, as [`project`] gives a workload's.
pub fn project_hpa(hpa: &HorizontalPodAutoscaler) -> Vec<FieldManager> {
    let name = hpa.metadata.name.clone().unwrap_or_default();
    hpa.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|mf| owns_hpa_metrics(mf))
        .map(|mf| FieldManager {
            manager: mf.manager.clone().unwrap_or_default(),
            operation: mf.operation.clone().unwrap_or_default(),
            time: mf.time.as_ref().map(|t| t.0),
            fields: BTreeSet::from([TrackedField::HpaMetrics(name.clone())]),
        })
        .collect()
}

/// Which managers own an HPA's `spec.metrics` (kerf's apply, anyone else).
pub fn hpa_metrics_owners(hpa: &HorizontalPodAutoscaler) -> (bool, bool) {
    let mut kerf = false;
    let mut others = false;
    for mf in hpa.metadata.managed_fields.iter().flatten() {
        if !owns_hpa_metrics(mf) {
            continue;
        }
        if mf.manager.as_deref() == Some(FIELD_MANAGER) {
            kerf |= mf.operation.as_deref() == Some("Apply");
        } else {
            others = true;
        }
    }
    (kerf, others)
}

/// What a set of field managers owns on a live workload: its annotations, and per container
/// the requests.
#[derive(Debug, Default)]
pub struct Owned {
    pub annotations: BTreeSet<String>,
    /// container → the requests owned.
    pub requests: BTreeMap<String, RequestSet>,
    /// container → the limits owned.
    pub limits: BTreeMap<String, RequestSet>,
}

/// What kerf's own apply configuration owns on a live workload.
pub fn kerf_owned(meta: &ObjectMeta, kind: WorkloadKind, template: Option<&PodSpec>) -> Owned {
    owned_where(meta, kind, template, |mf| {
        mf.manager.as_deref() == Some(FIELD_MANAGER) && mf.operation.as_deref() == Some("Apply")
    })
}

/// What every manager but `kerf` owns (a field kerf leaves out of its apply survives only then).
pub fn others_owned(meta: &ObjectMeta, kind: WorkloadKind, template: Option<&PodSpec>) -> Owned {
    owned_where(meta, kind, template, |mf| {
        mf.manager.as_deref() != Some(FIELD_MANAGER)
    })
}

fn owned_where(
    meta: &ObjectMeta,
    kind: WorkloadKind,
    template: Option<&PodSpec>,
    manager: impl Fn(&ManagedFieldsEntry) -> bool,
) -> Owned {
    let mut owned = Owned::default();
    for mf in meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|mf| manager(mf))
    {
        let Some(fields) = entry_fields(mf, kind, template) else {
            continue;
        };
        owned
            .annotations
            .extend(fields.annotations.iter().map(|k| k.to_string()));
        for (container, _, resource) in fields.requests {
            let e = owned.requests.entry(container).or_default();
            e.cpu |= resource == "cpu";
            e.memory |= resource == "memory";
        }
        for (container, _, resource) in fields.limits {
            let e = owned.limits.entry(container).or_default();
            e.cpu |= resource == "cpu";
            e.memory |= resource == "memory";
        }
    }
    owned
}

#[cfg(test)]
mod tests;
