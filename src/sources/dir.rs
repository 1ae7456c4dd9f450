//! Standalone mode: objects from YAML manifests instead of the API server — a directory (read
//! recursively), one file, or what `kubectl get -o yaml` prints (a `kind: List`; the `items` of
//! any `*List` are read as objects). Every file and document is read; anything that cannot be
//! understood is an error naming the file, the object and the field, and every such error of
//! every file is reported together — nothing is skipped silently.
//!
//! kerf's own kinds are read strictly ([`crate::api::strict`]): a field their schema does not
//! declare is an error, as `kubectl apply` reports it. Kubernetes kinds are read as the
//! Kubernetes types know them: the API server checks them against its own version's schema, which
//! may be newer than the one kerf is built with, so a field those types do not know is a warning
//! (its path and the nearest known name, once per field and file), an error only with `--strict`.
//! Objects of kinds kerf does not read (`kubectl get all -o yaml` holds Services, ConfigMaps…)
//! are skipped and counted in one summary line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

use crate::api::*;
use crate::core::model::PolicyId;
use crate::core::owner;
use crate::core::snapshot::{InvalidPolicy, Policy, Snapshot, StrategyKey, Workload};

/// The objects read from a directory, as a snapshot plus notes about ignored documents.
#[derive(Debug, Default)]
pub struct Manifests {
    pub snapshot: Snapshot,
    pub notes: Vec<String>,
    /// Fields of Kubernetes kinds that kerf's types do not know (dropped as read): each with
    /// where it is and the nearest known name, once per field and file.
    pub warnings: Vec<String>,
    /// Objects of kinds kerf does not read, by kind (the summary line: [`Manifests::skipped`]).
    pub skipped_kinds: std::collections::BTreeMap<String, usize>,
    /// The unknown fields as found.
    pub(crate) dropped: Vec<Dropped>,
    /// Policies left out because they are invalid, each with its file, object and field: as in a
    /// cluster, the others are evaluated and these say why in their status (`Ready=False`).
    pub invalid: Vec<InvalidPolicy>,
}

/// Why manifests cannot be read. Every message names the file and document, the object and the
/// field; one read reports every problem of every file at once ([`ManifestError::Several`]).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading directory {path}: {error}")]
    Directory { path: String, error: std::io::Error },
    #[error("{0}: no .yaml or .yml files")]
    NoYamlFiles(String),
    /// A field that does not decode as its type says.
    #[error("{what}: field {path}: {reason}")]
    Field {
        what: String,
        path: String,
        reason: String,
    },
    /// Fields kerf's own kinds do not have (with the nearest declared name).
    #[error("{what}: {error}")]
    UnknownFields {
        what: String,
        error: ValidationError,
    },
    /// A field whose value breaks the kind's rules (the CRD's, checked by `validate()`).
    #[error("{what}: invalid: {error}")]
    Invalid {
        what: String,
        error: ValidationError,
    },
    /// An object kerf reads but cannot take as it is (a singleton's name, an HPA's version,
    /// a kind unknown in kerf's group, a document without apiVersion or kind).
    #[error("{what}: {problem}")]
    Object { what: String, problem: String },
    /// A kind kerf does not read (nor the configuration lists): read again once the
    /// configuration's `workloadKinds` is known, then skipped.
    #[error("a kind kerf does not read")]
    UnsupportedKind(serde_json::Value),
    /// One problem, as found.
    #[error("{0}")]
    One(String),
    /// Every problem, each on its own line.
    #[error("{} errors:\n{}", .0.len(), .0.join("\n"))]
    Several(Vec<String>),
}

impl ManifestError {
    fn object(what: &str, problem: impl Into<String>) -> Self {
        ManifestError::Object {
            what: what.to_string(),
            problem: problem.into(),
        }
    }

    /// A field error of the core's readers, named for `what`.
    fn field(what: &str, e: crate::core::snapshot::FieldError) -> Self {
        ManifestError::Field {
            what: what.to_string(),
            path: e.path,
            reason: e.reason,
        }
    }
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let unreadable = |error| ManifestError::Directory {
            path: d.display().to_string(),
            error,
        };
        let entries = std::fs::read_dir(&d).map_err(unreadable)?;
        for e in entries {
            let path = e.map_err(unreadable)?.path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(|x| x.to_str()),
                Some("yaml" | "yml")
            ) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A Kubernetes object decoded as `T`, the fields `T` does not know noted in `dropped`.
fn decode_builtin<T: DeserializeOwned + schemars::JsonSchema>(
    doc: serde_json::Value,
    what: &str,
    dropped: &mut Vec<crate::api::FieldError>,
) -> Result<T, ManifestError> {
    dropped.extend(crate::api::strict::unknown_fields_of::<T>(&doc));
    decode(doc, what)
}

fn decode<T: DeserializeOwned>(doc: serde_json::Value, what: &str) -> Result<T, ManifestError> {
    serde_path_to_error::deserialize(doc)
        .map_err(|e| ManifestError::field(what, crate::core::snapshot::FieldError::of(e)))
}

/// A kerf object decoded strictly: every unknown field (with the nearest declared name) is an
/// error, then the shape.
fn decode_strict<T: DeserializeOwned>(
    doc: &serde_json::Value,
    what: &str,
) -> Result<T, ManifestError> {
    let unknown = crate::api::strict::unknown_fields(doc);
    if !unknown.is_empty() {
        return Err(ManifestError::UnknownFields {
            what: what.to_string(),
            error: ValidationError(unknown),
        });
    }
    decode(doc.clone(), what)
}

/// A policy document decoded and validated by `check`; an error names the document and the
/// field.
fn read_policy<P: DeserializeOwned, T>(
    doc: &serde_json::Value,
    what: &str,
    check: impl FnOnce(P) -> Result<T, ValidationError>,
) -> Result<T, ManifestError> {
    check(decode_strict(doc, what)?).map_err(|error| ManifestError::Invalid {
        what: what.to_string(),
        error,
    })
}

/// A cluster-scoped object's metadata carries no namespace, whatever the manifest says.
fn cluster_scoped(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        namespace: None,
        ..meta
    }
}

/// An invalid policy document, reported as an invalid policy is in a cluster.
fn rejected_policy(
    doc: &serde_json::Value,
    policy_type: PolicyType,
    name: &str,
    error: ManifestError,
) -> InvalidPolicy {
    let namespaced = matches!(
        policy_type,
        PolicyType::GpuReactivePolicy | PolicyType::RightsizingPolicy
    );
    let namespace = namespaced.then(|| {
        doc.get("metadata")
            .and_then(|md| md.get("namespace"))
            .and_then(|n| n.as_str())
            .unwrap_or("default")
            .to_string()
    });
    InvalidPolicy {
        id: PolicyId {
            kind: policy_type.as_str().into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        },
        policy_type,
        generation: None,
        error: error.to_string(),
        status: None,
    }
}

/// Reads `path`: every `*.yaml`/`*.yml` file under it when it is a directory, else the one
/// file (multi-document files and `*List` documents allowed). Every problem of every file is
/// reported in the one error; invalid policies are returned in [`Manifests::invalid`] (a cluster
/// reports them in their status).
pub fn load_dir(path: &Path) -> Result<Manifests, ManifestError> {
    let files = if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        let files = yaml_files(path)?;
        if files.is_empty() {
            return Err(ManifestError::NoYamlFiles(path.display().to_string()));
        }
        files
    };
    let mut reader = ManifestReader::default();
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => reader.text(&text, &file.display().to_string()),
            Err(e) => reader.error(format!("reading {}: {e}", file.display())),
        }
    }
    reader.finish()
}

/// Reads one YAML text (`origin` names it in errors) into `m`; every problem in the one error.
pub fn load_text(text: &str, origin: &str, m: &mut Manifests) -> Result<(), ManifestError> {
    let mut reader = ManifestReader {
        manifests: std::mem::take(m),
        ..ManifestReader::default()
    };
    reader.text(text, origin);
    let failed = !reader.errors.is_empty();
    *m = reader.manifests;
    match all_errors(reader.all).filter(|_| failed) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Every error as one, each on its own line (none: `None`).
fn all_errors(mut errors: Vec<String>) -> Option<ManifestError> {
    match errors.len() {
        0 => None,
        1 => errors.pop().map(ManifestError::One),
        _ => Some(ManifestError::Several(errors)),
    }
}

impl Manifests {
    /// `skipped 14 objects of 6 kinds kerf does not read: Service, ConfigMap, …` (the kinds with
    /// the most objects first), or `None` when every object was read.
    pub fn skipped(&self) -> Option<String> {
        let objects: usize = self.skipped_kinds.values().sum();
        let mut kinds: Vec<(&String, &usize)> = self.skipped_kinds.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let names: Vec<&str> = kinds.iter().map(|(k, _)| k.as_str()).collect();
        let plural = |n: usize, word: &str| match n {
            1 => format!("1 {word}"),
            n => format!("{n} {word}s"),
        };
        (objects > 0).then(|| {
            format!(
                "skipped {} of {} kerf does not read: {} (a kind whose objects own pods is read \
                 once GlobalConfiguration spec.workloadKinds lists it)",
                plural(objects, "object"),
                plural(names.len(), "kind"),
                names.join(", ")
            )
        })
    }

    /// The unknown fields of Kubernetes kinds as one error (`--strict`), or `Ok` when there are
    /// none.
    pub fn reject_warnings(&self) -> Result<(), ManifestError> {
        match all_errors(self.warnings.clone()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The invalid policies as one error (for a one-shot command, where the user's input must be
    /// right): every one of them, each once.
    pub fn reject_invalid(&self) -> Result<(), ManifestError> {
        match all_errors(self.invalid.iter().map(|p| p.error.clone()).collect()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Objects read one at a time (documents of files, or objects listed from a cluster) into
/// [`Manifests`], with every problem kept for the end.
#[derive(Debug, Default)]
pub struct ManifestReader {
    manifests: Manifests,
    /// Documents that could not be read.
    errors: Vec<String>,
    /// Those and the invalid policies' errors, in document order.
    all: Vec<String>,
    /// Objects of a kind kerf does not know, read once the configuration's `workloadKinds` is
    /// (a GlobalConfiguration may come after them).
    unknown_kinds: Vec<(serde_json::Value, String)>,
}

impl ManifestReader {
    /// An object of a kind kerf does not read, counted for the summary line.
    fn skip(&mut self, doc: &serde_json::Value) {
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        *self
            .manifests
            .skipped_kinds
            .entry(kind.to_string())
            .or_default() += 1;
    }

    fn error(&mut self, e: String) {
        self.all.push(e.clone());
        self.errors.push(e);
    }

    /// Reads one YAML text, `origin` naming it in errors.
    pub fn text(&mut self, text: &str, origin: &str) {
        let docs: Vec<serde_json::Value> = match serde_saphyr::from_multiple(text) {
            Ok(docs) => docs,
            Err(e) => return self.error(format!("{origin}: invalid YAML: {e}")),
        };
        for (n, doc) in docs.into_iter().enumerate() {
            self.object(doc, &format!("{origin}: document {}", n + 1));
        }
    }

    /// Reads one object (or the items of a `*List`); `at` says where it is (`FILE: document 2`).
    pub fn object(&mut self, doc: serde_json::Value, at: &str) {
        if doc.is_null() {
            return;
        }
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        if kind.ends_with("List")
            && let Some(items) = doc.get("items").and_then(|i| i.as_array())
        {
            // A list is a cluster's dump (`kubectl get -o yaml`): read as a cluster is.
            let mut items: Vec<(serde_json::Value, String)> = items
                .iter()
                .enumerate()
                .map(|(i, item)| (item.clone(), format!("{at} item {}", i + 1)))
                .collect();
            in_creation_order(&mut items);
            for (item, at) in items {
                self.object(item, &at);
            }
            return;
        }
        let invalid = self.manifests.invalid.len();
        match read_object(doc, at, &mut self.manifests) {
            Ok(()) => {}
            // Kubernetes' own groups hold no listed kind: counted now, not kept (a dump's
            // ConfigMaps and Secrets can be large).
            Err(ManifestError::UnsupportedKind(doc)) if kubernetes_group(&doc) => self.skip(&doc),
            Err(ManifestError::UnsupportedKind(doc)) => {
                self.unknown_kinds.push((doc, at.to_string()))
            }
            Err(e) => self.error(e.to_string()),
        }
        let new = &self.manifests.invalid[invalid..];
        self.all.extend(new.iter().map(|p| p.error.clone()));
    }

    /// What was read, or every error (and every invalid policy) in one.
    pub fn finish(mut self) -> Result<Manifests, ManifestError> {
        crate::api::listed_kinds::set_listed(&self.manifests.snapshot.global.workload_kinds);
        for (doc, at) in std::mem::take(&mut self.unknown_kinds) {
            match read_object(doc, &at, &mut self.manifests) {
                Ok(()) => {}
                Err(ManifestError::UnsupportedKind(doc)) => self.skip(&doc),
                Err(e) => self.error(e.to_string()),
            }
        }
        self.manifests.warnings = dropped_field_warnings(&self.manifests.dropped);
        crate::core::grouping::group_under_topmost_owners(&mut self.manifests.snapshot);
        match self.errors.is_empty() {
            true => Ok(self.manifests),
            false => Err(all_errors(self.all).expect("errors is not empty")),
        }
    }
}

/// Objects from a cluster in the order they were created (`creationTimestamp`; the given order
/// among equals and for objects without one), which is the order of the files they were applied
/// from: a cluster's objects are then read in the order those files are.
pub fn in_creation_order(objects: &mut [(serde_json::Value, String)]) {
    objects.sort_by_key(|(doc, _)| {
        doc.pointer("/metadata/creationTimestamp")
            .and_then(|t| t.as_str())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
}

/// A field of a Kubernetes object that kerf's type for its kind does not know.
#[derive(Debug)]
pub(crate) struct Dropped {
    /// The document (`FILE: document 2 item 5`).
    at: String,
    kind: String,
    /// The document and the object, as errors name them.
    what: String,
    field: crate::api::FieldError,
}

/// The unknown fields of Kubernetes kinds, one warning per field and file (a dump of a newer
/// cluster carries the same new field in every object of a kind): the first object's document
/// named, and how many more objects of that file have it.
fn dropped_field_warnings(dropped: &[Dropped]) -> Vec<String> {
    // Per file, kind and field path with list indices left out.
    let mut seen: std::collections::HashMap<(&str, &str, String), (usize, usize)> =
        Default::default();
    let mut order = Vec::new();
    for (i, d) in dropped.iter().enumerate() {
        let file = d.at.split(": document ").next().unwrap_or(&d.at);
        let key = (file, d.kind.as_str(), indices_dropped(&d.field.field));
        match seen.get_mut(&key) {
            Some((_, more)) => *more += 1,
            None => {
                seen.insert(key.clone(), (i, 0));
                order.push(key);
            }
        }
    }
    order
        .iter()
        .map(|key| {
            let (first, more) = seen[key];
            let Dropped { what, field, .. } = &dropped[first];
            let also = match more {
                0 => String::new(),
                1 => ", also in 1 more object of this file".to_string(),
                n => format!(", also in {n} more objects of this file"),
            };
            format!("{what}: {field} (ignored{also})")
        })
        .collect()
}

/// `spec.containers[2].resizePolicy` → `spec.containers[].resizePolicy`.
fn indices_dropped(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            c => out.push(c),
        }
    }
    out
}

/// The object's API group is Kubernetes' own (the core group, `apps`, `batch`, `policy`,
/// `autoscaling`, `extensions`, or one under `k8s.io`), where no workload kind is listed.
fn kubernetes_group(doc: &serde_json::Value) -> bool {
    let api_version = doc.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
    let group = crate::api::common::api_group(api_version);
    matches!(
        group,
        "" | "apps" | "batch" | "policy" | "autoscaling" | "extensions"
    ) || group == "k8s.io"
        || group.ends_with(".k8s.io")
}

/// Reads one object into `m`: an error names the document (`at`), the object and the field.
fn read_object(doc: serde_json::Value, at: &str, m: &mut Manifests) -> Result<(), ManifestError> {
    let text = |v: Option<&serde_json::Value>| v.and_then(|k| k.as_str()).map(str::to_string);
    let kind = text(doc.get("kind")).unwrap_or_default();
    let api_version = text(doc.get("apiVersion")).unwrap_or_default();
    let name = text(doc.get("metadata").and_then(|md| md.get("name")))
        .unwrap_or_else(|| "<unnamed>".to_string());
    let what = format!("{at} ({kind} {name})");
    if kind.is_empty() || api_version.is_empty() {
        return Err(ManifestError::object(at, "missing apiVersion or kind"));
    }
    let ours = api_version == format!("{GROUP}/{VERSION}");
    match (ours, kind.as_str()) {
        (true, "RightsizingRecommendation") => m
            .notes
            .push(format!("{what}: output kind, ignored as input")),
        (true, k) if POLICY_KINDS.contains(&k) => read_policy_object(&doc, k, &what, &name, m),
        (true, k) => read_configuration(&doc, k, &what, &mut m.snapshot)?,
        (false, k) => {
            let mut dropped = Vec::new();
            let read =
                read_cluster_object(doc, k, &api_version, &what, &mut m.snapshot, &mut dropped);
            m.dropped.extend(dropped.into_iter().map(|field| Dropped {
                at: at.to_string(),
                kind: k.to_string(),
                what: what.clone(),
                field,
            }));
            read?
        }
    }
    Ok(())
}

/// kerf's policy kinds: an invalid one is recorded (its status says why), not an error.
const POLICY_KINDS: [&str; 4] = [
    "GpuReactivePolicy",
    "ClusterGpuReactivePolicy",
    "RightsizingPolicy",
    "ClusterRightsizingPolicy",
];

/// A policy of kerf's, or the reason it cannot be used.
fn read_policy_object(
    doc: &serde_json::Value,
    kind: &str,
    what: &str,
    name: &str,
    m: &mut Manifests,
) {
    let gpu = &mut m.snapshot.gpu_policies;
    let rightsizing = &mut m.snapshot.rightsizing_policies;
    let invalid = &mut m.invalid;
    let namespaced = |meta: &mut ObjectMeta| {
        meta.namespace.get_or_insert_with(|| "default".into());
    };
    match kind {
        "GpuReactivePolicy" => {
            let read = read_policy(doc, what, |mut p: GpuReactivePolicy| {
                namespaced(&mut p.metadata);
                p.spec.validate()?;
                Ok((p.metadata, p.spec, p.status))
            });
            let policy_type = PolicyType::GpuReactivePolicy;
            add_policy(read, policy_type, doc, name, gpu, invalid);
        }
        "ClusterGpuReactivePolicy" => {
            let read = read_policy(doc, what, |p: ClusterGpuReactivePolicy| {
                p.spec.validate()?;
                Ok((cluster_scoped(p.metadata), p.spec.into(), p.status))
            });
            let policy_type = PolicyType::ClusterGpuReactivePolicy;
            add_policy(read, policy_type, doc, name, gpu, invalid);
        }
        "RightsizingPolicy" => {
            let read = read_policy(doc, what, |mut p: RightsizingPolicy| {
                namespaced(&mut p.metadata);
                p.spec.validate()?;
                Ok((p.metadata, p.spec, p.status))
            });
            let policy_type = PolicyType::RightsizingPolicy;
            add_policy(read, policy_type, doc, name, rightsizing, invalid);
        }
        "ClusterRightsizingPolicy" => {
            let read = read_policy(doc, what, |p: ClusterRightsizingPolicy| {
                p.spec.validate()?;
                Ok((cluster_scoped(p.metadata), p.spec.into(), p.status))
            });
            let policy_type = PolicyType::ClusterRightsizingPolicy;
            add_policy(read, policy_type, doc, name, rightsizing, invalid);
        }
        _ => unreachable!("one of POLICY_KINDS"),
    }
}

/// A policy as read, or recorded as invalid with the reason.
fn add_policy<S>(
    read: Result<(ObjectMeta, S, Option<PolicyStatus>), ManifestError>,
    policy_type: PolicyType,
    doc: &serde_json::Value,
    name: &str,
    policies: &mut Vec<Policy<S>>,
    invalid: &mut Vec<InvalidPolicy>,
) {
    match read {
        Ok((meta, spec, status)) => {
            policies.push(Policy::from_object(&meta, policy_type, spec, status))
        }
        Err(e) => invalid.push(rejected_policy(doc, policy_type, name, e)),
    }
}

/// kerf's strategies and singletons.
fn read_configuration(
    doc: &serde_json::Value,
    kind: &str,
    what: &str,
    s: &mut Snapshot,
) -> Result<(), ManifestError> {
    let invalid = |error: ValidationError| ManifestError::Invalid {
        what: what.to_string(),
        error,
    };
    match kind {
        "AutomationStrategy" => {
            let p: AutomationStrategy = decode_strict(doc, what)?;
            p.spec.validate().map_err(invalid)?;
            s.strategies.insert(
                StrategyKey {
                    namespace: Some(p.metadata.namespace.as_deref().unwrap_or("default").into()),
                    name: p.metadata.name.as_deref().unwrap_or_default().into(),
                },
                Arc::new(p.spec.view()),
            );
        }
        "ClusterAutomationStrategy" => {
            let p: ClusterAutomationStrategy = decode_strict(doc, what)?;
            p.spec.validate().map_err(invalid)?;
            s.strategies.insert(
                StrategyKey {
                    namespace: None,
                    name: p.metadata.name.as_deref().unwrap_or_default().into(),
                },
                Arc::new(p.spec.view()),
            );
        }
        "GlobalConfiguration" => {
            let p: GlobalConfiguration = decode_strict(doc, what)?;
            p.spec.validate().map_err(invalid)?;
            if p.metadata.name.as_deref() != Some(GLOBAL_CONFIGURATION_NAME) {
                return Err(ManifestError::object(
                    what,
                    format!(
                        "metadata.name: the GlobalConfiguration singleton must be named {GLOBAL_CONFIGURATION_NAME}"
                    ),
                ));
            }
            s.global = p.spec;
        }
        "PolicyEvaluation" => {
            let p: PolicyEvaluation = decode_strict(doc, what)?;
            p.spec.validate().map_err(invalid)?;
            if p.metadata.name.as_deref() != Some(POLICY_EVALUATION_NAME) {
                return Err(ManifestError::object(
                    what,
                    format!(
                        "metadata.name: the PolicyEvaluation singleton must be named {POLICY_EVALUATION_NAME}"
                    ),
                ));
            }
            s.precedence = p.spec;
        }
        other => {
            return Err(ManifestError::object(
                what,
                format!("unknown kind {other} in {GROUP}/{VERSION}"),
            ));
        }
    }
    Ok(())
}

/// The cluster's objects kerf reads: workloads, their owners, pods, HPAs and VPAs.
fn read_cluster_object(
    doc: serde_json::Value,
    kind: &str,
    api_version: &str,
    what: &str,
    s: &mut Snapshot,
    dropped: &mut Vec<crate::api::FieldError>,
) -> Result<(), ManifestError> {
    match kind {
        "Deployment" => {
            let o: Deployment = decode_builtin(doc, what, dropped)?;
            s.workloads.push(Arc::new(Workload::from(o)));
        }
        "StatefulSet" => {
            let o: StatefulSet = decode_builtin(doc, what, dropped)?;
            s.workloads.push(Arc::new(Workload::from(o)));
        }
        "DaemonSet" => {
            let o: DaemonSet = decode_builtin(doc, what, dropped)?;
            s.workloads.push(Arc::new(Workload::from(o)));
        }
        "Job" => {
            let j: Job = decode_builtin(doc, what, dropped)?;
            let ns = j
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            match owner::cronjob_of(&j.metadata) {
                Some(c) => {
                    s.job_owners.insert(
                        (
                            ns.into(),
                            j.metadata.name.as_deref().unwrap_or_default().into(),
                        ),
                        c.into(),
                    );
                }
                None => s.workloads.push(Arc::new(Workload::from(j))),
            }
        }
        "CronJob" => {
            let o: CronJob = decode_builtin(doc, what, dropped)?;
            s.workloads.push(Arc::new(Workload::from(o)));
        }
        "ReplicaSet" => {
            let r: ReplicaSet = decode_builtin(doc, what, dropped)?;
            let ns = r
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            if let Some(d) = owner::deployment_of(&r.metadata) {
                s.replicaset_owners.insert(
                    (
                        ns.into(),
                        r.metadata.name.as_deref().unwrap_or_default().into(),
                    ),
                    d.into(),
                );
            } else {
                // A Rollout's (or another controller's) ReplicaSet.
                record_controller(s, "ReplicaSet", &r.metadata);
            }
        }
        "Pod" => {
            let mut p: Pod = decode_builtin(doc, what, dropped)?;
            p.metadata.namespace.get_or_insert_with(|| "default".into());
            p.metadata.managed_fields = None;
            s.pods.push(Arc::new(p.into()));
        }
        "HorizontalPodAutoscaler" => {
            if !api_version.starts_with("autoscaling/v2") {
                return Err(ManifestError::object(
                    what,
                    format!("apiVersion {api_version}: only autoscaling/v2 HPAs are read"),
                ));
            }
            let mut h: HorizontalPodAutoscaler = decode_builtin(doc, what, dropped)?;
            h.metadata.namespace.get_or_insert_with(|| "default".into());
            s.hpas.push(h);
        }
        // `kubectl get crd NAME -o yaml`: its schema decides how kerf writes that kind's
        // template (docs/gitops.md#how-kerf-writes).
        "CustomResourceDefinition" if api_version.starts_with("apiextensions.k8s.io/") => {
            s.crds.push(Arc::new(doc));
        }
        // Requests and limits are kept within it (docs/policies.md#limits).
        "LimitRange" if api_version == "v1" => {
            let mut doc = doc;
            if doc["metadata"].get("namespace").is_none() {
                doc["metadata"]["namespace"] = serde_json::json!("default");
            }
            s.limit_ranges
                .extend(crate::core::limits::ContainerLimitRange::from_object(&doc));
        }
        "ResourceQuota" if api_version == "v1" => {
            let mut doc = doc;
            if doc["metadata"].get("namespace").is_none() {
                doc["metadata"]["namespace"] = serde_json::json!("default");
            }
            s.resource_quotas
                .extend(crate::core::limits::QuotaView::from_object(&doc));
        }
        "VerticalPodAutoscaler"
            if api_version.starts_with(&format!("{}/", crate::core::vpa::VPA_API_GROUP)) =>
        {
            let v = crate::core::vpa::Vpa::from_object(doc)
                .map_err(|e| ManifestError::field(what, e))?;
            s.vpas.push(v);
        }
        k if WorkloadKind::of_object(api_version, k).is_some() => {
            let kind = WorkloadKind::of_object(api_version, k).expect("matched");
            s.workloads.push(Arc::new(owner_workload(doc, kind, what)?));
        }
        k if owner::passes_through(api_version, k) => {
            let meta: ObjectMeta = decode(
                doc.get("metadata").cloned().unwrap_or_default(),
                &format!("{what}: metadata"),
            )?;
            record_controller(s, k, &meta);
        }
        _ => return Err(ManifestError::UnsupportedKind(doc)),
    }
    Ok(())
}

/// The controller reference of an object an owner chain passes through
/// (`Snapshot::controllers`).
fn record_controller(s: &mut Snapshot, kind: &str, meta: &ObjectMeta) {
    let Some(c) = meta.owner_references.as_deref().and_then(owner::controller) else {
        return;
    };
    let ns = meta.namespace.as_deref().unwrap_or("default");
    let key = owner::link_key(kind, meta.name.as_deref().unwrap_or_default());
    s.controllers.insert(
        (ns.into(), key.as_str().into()),
        owner::Link::new(&c.api_version, &c.kind, &c.name),
    );
}

/// A workload of a kind another controller runs GPU inference under (docs/workloads.md).
fn owner_workload(
    doc: serde_json::Value,
    kind: WorkloadKind,
    what: &str,
) -> Result<Workload, ManifestError> {
    let meta: ObjectMeta = decode(
        doc.get("metadata").cloned().unwrap_or_default(),
        &format!("{what}: metadata"),
    )?;
    Workload::of_controller(meta, kind, Some(&doc)).map_err(|e| ManifestError::field(what, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field Kubernetes' types do not know is one warning per field and file, whichever list
    /// item or container holds it; another file says it again; kerf's own kinds stay strict and
    /// other kinds are counted, not read.
    #[test]
    fn unknown_fields_of_kubernetes_kinds_are_warned_once_per_field_and_file() {
        let deployment = |name: &str, second: &str| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: shop}}\n\
                 spec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    spec:\n      \
                 containers:\n        - {{name: a, image: i}}\n        - {{name: b, image: i, {second}: {{}}}}\n"
            )
        };
        let dump = format!(
            "apiVersion: v1\nkind: List\nitems:\n{}",
            [deployment("web", "resoures"), deployment("api", "resoures")]
                .iter()
                .map(|d| {
                    let doc: serde_json::Value = serde_saphyr::from_str(d).unwrap();
                    format!("  - {doc}\n")
                })
                .collect::<String>()
        );
        let mut reader = ManifestReader::default();
        reader.text(&dump, "a.yaml");
        reader.text(&deployment("db", "resoures"), "b.yaml");
        reader.text(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: l}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata: {name: t}\n",
            "c.yaml",
        );
        let m = reader.finish().unwrap();
        assert_eq!(
            m.warnings,
            [
                "a.yaml: document 1 item 1 (Deployment web): spec.template.spec.containers[1].resoures: \
                 unknown field; did you mean resources? (ignored, also in 1 more object of this file)",
                "b.yaml: document 1 (Deployment db): spec.template.spec.containers[1].resoures: \
                 unknown field; did you mean resources? (ignored)",
            ]
        );
        assert_eq!(m.snapshot.workloads.len(), 3, "the Deployments are read");
        assert_eq!(
            m.skipped().as_deref(),
            Some(
                "skipped 3 objects of 2 kinds kerf does not read: Service, Secret (a kind \
                 whose objects own pods is read once GlobalConfiguration spec.workloadKinds lists it)"
            )
        );
        assert!(
            m.reject_warnings()
                .unwrap_err()
                .to_string()
                .starts_with("2 errors:")
        );
    }

    /// The loader links a ReplicaSet to its Deployment and a Job to its CronJob only through the
    /// controller reference of the right API group ([`owner`]); anything else leaves a Job a
    /// workload of its own.
    #[test]
    fn a_non_controller_owner_reference_is_not_the_owner() {
        let mut m = Manifests::default();
        load_text(
            r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-abc
  namespace: shop
  ownerReferences:
    - {apiVersion: apps/v1, kind: Deployment, name: web, uid: u1, controller: true}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: adopted-abc
  namespace: shop
  ownerReferences:
    - {apiVersion: apps/v1, kind: Deployment, name: adopted, uid: u2}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: foreign-abc
  namespace: shop
  ownerReferences:
    - {apiVersion: example.com/v1, kind: Deployment, name: foreign, uid: u3, controller: true}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: nightly-1
  namespace: shop
  ownerReferences:
    - {apiVersion: batch/v1, kind: CronJob, name: nightly, uid: u4, controller: true}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: train}]}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: manual
  namespace: shop
  ownerReferences:
    - {apiVersion: batch/v1, kind: CronJob, name: nightly, uid: u4}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: train}]}}
"#,
            "test",
            &mut m,
        )
        .unwrap();
        let name = |n: &str| ("shop".into(), n.into());
        assert_eq!(
            m.snapshot.replicaset_owners,
            crate::core::hash::HashMap::from_iter([(name("web-abc"), "web".into())])
        );
        assert_eq!(
            m.snapshot.job_owners,
            crate::core::hash::HashMap::from_iter([(name("nightly-1"), "nightly".into())])
        );
        let workloads: Vec<String> = m
            .snapshot
            .workloads
            .iter()
            .map(|w| w.key.to_string())
            .collect();
        assert_eq!(workloads, ["shop/Job/manual"]);
    }
}
