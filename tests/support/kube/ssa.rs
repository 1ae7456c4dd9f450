//! A mock API server that keeps one Deployment and its HPA the way the API server does for the
//! fields kerf writes: every container request, workload annotation and the HPA's `spec.metrics`
//! has a value and its owners, and `managedFields` is rendered from them.
//!
//! Server-side apply (`application/apply-patch+yaml`, forced): each field in the body gets the
//! body's value and the applier as an owner (a changed value takes it from the other owners); a
//! field the applier owned and left out loses that owner, and a field left without owners is
//! deleted. A patch (an Update: strategic merge, JSON merge) moves a field it changes to the
//! patching manager; a field it leaves at its value keeps its owners. Quantities are stored in
//! canonical form, as the API server does.
//!
//! RightsizingRecommendation spec/status applies are kept, Events are kept, anything else is a
//! test failure.
//!
//! The emulator is a fast, readable model; it is not trusted on its own: every PATCH of the
//! Deployment or the HPA it answers is also sent through the API server's own merge
//! (structured-merge-diff, [`super::real_merge`]) from the same object, and a test fails where
//! the two disagree on a tracked field's value or owners.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kerf::core::quantity;
use serde_json::{Value, json};

use super::{Recorded, Reply};

pub const APPLY: &str = "application/apply-patch+yaml";
pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// The user's manager for what the manifest set.
pub const USER: &str = "kubectl-client-side-apply";

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
}

impl Owner {
    pub fn new(manager: &str, operation: &str) -> Self {
        Self {
            manager: manager.into(),
            operation: operation.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub value: Value,
    pub owners: BTreeSet<Owner>,
}

#[derive(Clone, Debug)]
pub struct Container {
    pub name: String,
    /// resource (`cpu`, `memory`) → request.
    pub requests: BTreeMap<String, Field>,
}

#[derive(Clone, Debug)]
pub struct Hpa {
    pub name: String,
    pub metrics: Option<Field>,
}

/// The objects as the API server holds them.
#[derive(Clone, Debug)]
pub struct State {
    pub namespace: String,
    pub name: String,
    pub annotations: BTreeMap<String, Field>,
    pub containers: Vec<Container>,
    /// Pod template annotations (the rolling restart); not tracked for ownership.
    pub template_annotations: BTreeMap<String, String>,
    pub hpa: Option<Hpa>,
    /// RightsizingRecommendation name → the object as the server holds it.
    pub recommendations: BTreeMap<String, Value>,
    pub events: Vec<Value>,
    /// Every request an apply deleted (its last owner left it out): (container, resource).
    pub deleted: Vec<(String, String)>,
    /// The server's clock (RFC 3339), when the test sets one: a manager's write then stamps its
    /// `managedFields` entries with it (`time`), as the API server does.
    pub clock: Option<String>,
    /// When each owner last wrote the Deployment or the HPA.
    pub times: BTreeMap<(bool, Owner), String>,
}

fn canonical(resource: &str, text: &str) -> Value {
    let q = Quantity(text.to_string());
    let s = match resource {
        "cpu" => quantity::cpu_millis(&q).map(quantity::format_cpu_millis),
        "memory" => quantity::memory_bytes(&q).map(quantity::format_memory_bytes),
        _ => Ok(text.to_string()),
    };
    Value::String(s.unwrap_or_else(|e| panic!("{resource} {text:?}: {e}")))
}

fn user_field(value: Value) -> Field {
    Field {
        value,
        owners: BTreeSet::from([Owner::new(USER, "Update")]),
    }
}

impl State {
    /// A Deployment `namespace/name` whose manifest set `containers` (name, [(resource,
    /// request)]), with an HPA on it when `hpa` is `Some((name, metrics))`.
    pub fn new(
        namespace: &str,
        name: &str,
        containers: &[(&str, &[(&str, &str)])],
        hpa: Option<(&str, Value)>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            annotations: BTreeMap::new(),
            containers: containers
                .iter()
                .map(|(c, reqs)| Container {
                    name: c.to_string(),
                    requests: reqs
                        .iter()
                        .map(|(r, v)| (r.to_string(), user_field(canonical(r, v))))
                        .collect(),
                })
                .collect(),
            template_annotations: BTreeMap::new(),
            hpa: hpa.map(|(n, m)| Hpa {
                name: n.into(),
                metrics: Some(user_field(m)),
            }),
            recommendations: BTreeMap::new(),
            events: Vec::new(),
            deleted: Vec::new(),
            clock: None,
            times: BTreeMap::new(),
        }
    }

    pub fn deployment_path(&self) -> String {
        format!(
            "/apis/apps/v1/namespaces/{}/deployments/{}",
            self.namespace, self.name
        )
    }

    pub fn hpa_path(&self) -> Option<String> {
        self.hpa.as_ref().map(|h| {
            format!(
                "/apis/autoscaling/v2/namespaces/{}/horizontalpodautoscalers/{}",
                self.namespace, h.name
            )
        })
    }

    /// The request of `container` for `resource`, with its owners' manager names.
    pub fn request(&self, container: &str, resource: &str) -> Option<(String, Vec<String>)> {
        let c = self.containers.iter().find(|c| c.name == container)?;
        let f = c.requests.get(resource)?;
        Some((
            f.value.as_str().unwrap_or_default().to_string(),
            f.owners.iter().map(|o| o.manager.clone()).collect(),
        ))
    }

    /// The HPA's utilization target (single metric) and the managers owning `spec.metrics`.
    pub fn hpa_target(&self) -> Option<(i64, Vec<String>)> {
        let f = self.hpa.as_ref()?.metrics.as_ref()?;
        Some((
            f.value[0]["resource"]["target"]["averageUtilization"].as_i64()?,
            f.owners.iter().map(|o| o.manager.clone()).collect(),
        ))
    }

    /// The Deployment as the API server returns it, managedFields included.
    pub fn deployment(&self) -> Value {
        let mut by_owner: BTreeMap<Owner, Value> = BTreeMap::new();
        let mut annotations = serde_json::Map::new();
        for (k, f) in &self.annotations {
            annotations.insert(k.clone(), f.value.clone());
            for o in &f.owners {
                let e = by_owner.entry(o.clone()).or_insert_with(|| json!({}));
                e["f:metadata"]["f:annotations"][format!("f:{k}")] = json!({});
            }
        }
        let mut containers = Vec::new();
        for c in &self.containers {
            let mut requests = serde_json::Map::new();
            let key = format!("k:{{\"name\":\"{}\"}}", c.name);
            for (r, f) in &c.requests {
                requests.insert(r.clone(), f.value.clone());
                for o in &f.owners {
                    let e = by_owner.entry(o.clone()).or_insert_with(|| json!({}));
                    let item = &mut e["f:spec"]["f:template"]["f:spec"]["f:containers"][&key];
                    item["."] = json!({});
                    item["f:name"] = json!({});
                    item["f:resources"]["f:requests"][format!("f:{r}")] = json!({});
                }
            }
            containers.push(json!({"name": c.name, "image": "example/app:1",
                "resources": {"requests": requests}}));
        }
        // The user also owns the rest of the manifest.
        let user = by_owner
            .entry(Owner::new(USER, "Update"))
            .or_insert_with(|| json!({}));
        user["f:spec"]["f:replicas"] = json!({});
        let managed: Vec<Value> = by_owner
            .into_iter()
            .map(|(o, f)| {
                let mut e = json!({"manager": o.manager, "operation": o.operation, "apiVersion": "apps/v1",
                       "fieldsType": "FieldsV1", "fieldsV1": f});
                if let Some(t) = self.times.get(&(false, o)) {
                    e["time"] = json!(t);
                }
                e
            })
            .collect();
        let mut template_meta = json!({"labels": {"app": self.name}});
        if !self.template_annotations.is_empty() {
            template_meta["annotations"] = json!(self.template_annotations);
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": format!("uid-{}", self.name),
                         "labels": {"app": self.name}, "resourceVersion": "1",
                         "annotations": annotations, "managedFields": managed},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": self.name}},
                     "template": {"metadata": template_meta, "spec": {"containers": containers}}}
        })
    }

    /// The HPA as the API server returns it, managedFields included.
    pub fn hpa(&self) -> Option<Value> {
        let h = self.hpa.as_ref()?;
        let mut by_owner: BTreeMap<Owner, Value> = BTreeMap::new();
        by_owner.insert(
            Owner::new(USER, "Update"),
            json!({"f:spec": {"f:maxReplicas": {}, "f:minReplicas": {}, "f:scaleTargetRef": {}}}),
        );
        let mut spec = json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": self.name},
            "minReplicas": 2, "maxReplicas": 10});
        if let Some(m) = &h.metrics {
            spec["metrics"] = m.value.clone();
            for o in &m.owners {
                let e = by_owner.entry(o.clone()).or_insert_with(|| json!({}));
                e["f:spec"]["f:metrics"] = json!({});
            }
        }
        let managed: Vec<Value> = by_owner
            .into_iter()
            .map(|(o, f)| {
                let mut e = json!({"manager": o.manager, "operation": o.operation,
                       "apiVersion": "autoscaling/v2", "fieldsType": "FieldsV1", "fieldsV1": f});
                if let Some(t) = self.times.get(&(true, o)) {
                    e["time"] = json!(t);
                }
                e
            })
            .collect();
        Some(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": h.name, "namespace": self.namespace, "resourceVersion": "1",
                         "managedFields": managed},
            "spec": spec,
            "status": {"currentReplicas": 3, "desiredReplicas": 3}
        }))
    }

    /// Answers `r` from the emulator, and checks every write against the API server's own merge
    /// (structured-merge-diff, [`super::real_merge`]): the same request on the same object must
    /// leave the same values and owners of the fields the emulator tracks.
    fn answer(&mut self, r: &Recorded) -> Reply {
        let checked = r.method == "PATCH"
            && (r.path == self.deployment_path() || Some(r.path.clone()) == self.hpa_path());
        if !checked {
            return self.answer_emulated(r);
        }
        let hpa = r.path != self.deployment_path();
        let before = if hpa {
            self.hpa().unwrap()
        } else {
            self.deployment()
        };
        let reply = self.answer_emulated(r);
        let emulated = if hpa {
            self.hpa().unwrap()
        } else {
            self.deployment()
        };
        let mut store = super::real_merge::Store::new("2026-01-01T00:00:00Z");
        store.objects.insert(r.path.clone(), before);
        let (manager, force) = (
            r.query
                .split('&')
                .find_map(|p| p.strip_prefix("fieldManager="))
                .unwrap_or_default(),
            r.query_has("force=true"),
        );
        let real = store
            .write(&r.path, &r.content_type, &r.body, manager, force)
            .unwrap_or_else(|e| {
                panic!(
                    "structured-merge-diff refused {} {}: {e:?}",
                    r.method, r.path
                )
            });
        let (a, b) = (tracked(&emulated, hpa), tracked(&real, hpa));
        assert_eq!(
            a, b,
            "the emulator and structured-merge-diff disagree after {} {} ({}) {}",
            r.method, r.path, r.content_type, r.body
        );
        reply
    }

    fn answer_emulated(&mut self, r: &Recorded) -> Reply {
        let manager = r
            .query
            .split('&')
            .find_map(|p| p.strip_prefix("fieldManager="))
            .unwrap_or_default()
            .to_string();
        let deployment = self.deployment_path();
        let hpa = self.hpa_path();
        match (r.method.as_str(), r.path.as_str()) {
            ("GET", p) if p == deployment => Reply::Json(200, self.deployment()),
            ("PATCH", p) if p == deployment => {
                self.stamp(false, &manager, &r.content_type);
                match r.content_type.as_str() {
                    APPLY => self.apply_deployment(&manager, &r.body),
                    STRATEGIC => self.update_requests(&manager, &r.body),
                    MERGE => self.merge_annotations(&r.body),
                    other => panic!("unexpected patch type {other} on {p}"),
                }
                Reply::Json(200, self.deployment())
            }
            ("GET", p) if Some(p) == hpa.as_deref() => {
                Reply::Json(200, self.hpa().unwrap_or(Value::Null))
            }
            ("PATCH", p) if Some(p) == hpa.as_deref() => {
                self.stamp(true, &manager, &r.content_type);
                let metrics = r.body.get("spec").and_then(|s| s.get("metrics")).cloned();
                match r.content_type.as_str() {
                    APPLY => {
                        let owner = Owner::new(&manager, "Apply");
                        let h = self.hpa.as_mut().unwrap();
                        set_field(&mut h.metrics, metrics, &owner);
                    }
                    MERGE => {
                        let owner = Owner::new(&manager, "Update");
                        let h = self.hpa.as_mut().unwrap();
                        update_field(
                            &mut h.metrics,
                            metrics.expect("a merge patch of metrics"),
                            &owner,
                        );
                    }
                    other => panic!("unexpected patch type {other} on {p}"),
                }
                Reply::Json(200, self.hpa().unwrap())
            }
            ("POST", p) if p.ends_with("/events") => {
                self.events.push(r.body.clone());
                Reply::Json(201, r.body.clone())
            }
            ("PATCH", p) if p.contains("/rightsizingrecommendations/") => {
                let status = p.ends_with("/status");
                let name = p
                    .trim_end_matches("/status")
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string();
                let namespace = self.namespace.clone();
                let rec = self.recommendations.entry(name.clone()).or_insert_with(|| {
                    json!({"apiVersion": "rightsizing.kubex.ai/v1alpha1",
                           "kind": "RightsizingRecommendation",
                           "metadata": {"name": name, "namespace": namespace}})
                });
                if status {
                    rec["status"] = r.body["status"].clone();
                } else {
                    rec["spec"] = r.body["spec"].clone();
                    if let Some(o) = r.body["metadata"].get("ownerReferences") {
                        rec["metadata"]["ownerReferences"] = o.clone();
                    }
                }
                Reply::Json(200, rec.clone())
            }
            // Policy status: not modelled, answered with the status applied.
            ("PATCH", p) if p.contains("policies/") && p.ends_with("/status") => {
                let mut body = r.body.clone();
                body["metadata"] = json!({"name": "x", "namespace": self.namespace});
                body["spec"] = json!({"automationStrategyRef": {"name": "x"}});
                Reply::Json(200, body)
            }
            _ => panic!("unexpected request {} {}", r.method, r.path),
        }
    }

    /// A write by `manager` at the server's clock (simplified: every write of a manager stamps
    /// its entry, whether or not it changed a field).
    fn stamp(&mut self, hpa: bool, manager: &str, content_type: &str) {
        let Some(now) = self.clock.clone() else {
            return;
        };
        let operation = if content_type == APPLY {
            "Apply"
        } else {
            "Update"
        };
        self.times
            .insert((hpa, Owner::new(manager, operation)), now);
    }

    /// Server-side apply of a Deployment body (annotations and container requests).
    pub fn apply_deployment(&mut self, manager: &str, body: &Value) {
        let owner = Owner::new(manager, "Apply");
        let mut annotations: BTreeMap<String, Value> = body["metadata"]["annotations"]
            .as_object()
            .map(|m| m.clone().into_iter().collect())
            .unwrap_or_default();
        let keys: BTreeSet<String> = self
            .annotations
            .keys()
            .cloned()
            .chain(annotations.keys().cloned())
            .collect();
        for k in keys {
            let mut slot = self.annotations.remove(&k);
            set_field(&mut slot, annotations.remove(&k), &owner);
            if let Some(f) = slot {
                self.annotations.insert(k, f);
            }
        }
        let spec = &body["spec"]["template"]["spec"];
        assert!(
            spec.get("initContainers").is_none(),
            "the fixture has no init containers"
        );
        let listed: BTreeMap<String, &Value> = spec["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| (c["name"].as_str().unwrap().to_string(), c))
                    .collect()
            })
            .unwrap_or_default();
        for name in listed.keys() {
            assert!(
                self.containers.iter().any(|c| &c.name == name),
                "the apply would add a container {name}"
            );
        }
        for c in &mut self.containers {
            let wanted = listed
                .get(&c.name)
                .and_then(|e| e["resources"]["requests"].as_object());
            for r in ["cpu", "memory"] {
                let value = wanted
                    .and_then(|w| w.get(r))
                    .map(|v| canonical(r, v.as_str().unwrap()));
                let mut slot = c.requests.remove(r);
                let had = slot.is_some();
                set_field(&mut slot, value, &owner);
                match slot {
                    Some(f) => {
                        c.requests.insert(r.to_string(), f);
                    }
                    None if had => self.deleted.push((c.name.clone(), r.to_string())),
                    None => {}
                }
            }
        }
    }

    /// A strategic merge patch of container requests (an Update).
    pub fn update_requests(&mut self, manager: &str, body: &Value) {
        let owner = Owner::new(manager, "Update");
        assert!(body.get("metadata").is_none(), "{body}");
        for e in body["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
        {
            let name = e["name"].as_str().unwrap();
            let c = self
                .containers
                .iter_mut()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("the patch would add a container {name}"));
            for (r, v) in e["resources"]["requests"].as_object().unwrap() {
                let mut slot = c.requests.remove(r);
                update_field(&mut slot, canonical(r, v.as_str().unwrap()), &owner);
                c.requests.insert(r.clone(), slot.unwrap());
            }
        }
    }

    /// A JSON merge patch of annotations (the rolling restart, the rollback annotation).
    fn merge_annotations(&mut self, body: &Value) {
        if let Some(a) = body["spec"]["template"]["metadata"]["annotations"].as_object() {
            for (k, v) in a {
                self.template_annotations
                    .insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
        if let Some(a) = body["metadata"]["annotations"].as_object() {
            for (k, v) in a {
                assert!(v.is_null(), "only removals: {body}");
                self.annotations.remove(k);
            }
        }
    }
}

/// The fields the emulator tracks on a Deployment (annotations, container requests) or an HPA
/// (`spec.metrics`): each one's value (quantities as numbers) and its owners (manager,
/// operation), as `managedFields` says.
fn tracked(obj: &Value, hpa: bool) -> BTreeMap<String, (Value, BTreeSet<(String, String)>)> {
    let mut out = BTreeMap::new();
    let owners = |fields: &[String]| -> BTreeSet<(String, String)> {
        obj["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                let mut v = Some(&e["fieldsV1"]);
                for f in fields {
                    v = v.and_then(|x| x.get(f));
                }
                v.is_some()
            })
            .map(|e| {
                (
                    e["manager"].as_str().unwrap_or_default().to_string(),
                    e["operation"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    if hpa {
        if let Some(m) = obj["spec"].get("metrics") {
            out.insert(
                "spec.metrics".into(),
                (m.clone(), owners(&["f:spec".into(), "f:metrics".into()])),
            );
        }
        return out;
    }
    for (k, v) in obj["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let path = [
            "f:metadata".into(),
            "f:annotations".into(),
            format!("f:{k}"),
        ];
        out.insert(format!("annotation {k}"), (v.clone(), owners(&path)));
    }
    for c in obj["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = c["name"].as_str().unwrap_or_default();
        for (r, q) in c["resources"]["requests"].as_object().into_iter().flatten() {
            let q = Quantity(q.as_str().unwrap_or_default().to_string());
            let value = match r.as_str() {
                "cpu" => json!(quantity::cpu_millis(&q).ok()),
                _ => json!(quantity::memory_bytes(&q).ok()),
            };
            let path = ["f:spec", "f:template", "f:spec", "f:containers"]
                .iter()
                .map(|s| s.to_string())
                .chain([
                    format!("k:{{\"name\":\"{name}\"}}"),
                    "f:resources".into(),
                    "f:requests".into(),
                    format!("f:{r}"),
                ])
                .collect::<Vec<_>>();
            out.insert(format!("{name} {r}"), (value, owners(&path)));
        }
    }
    out
}

/// Server-side apply of one field by `owner`: `Some` sets it (a changed value takes it from the
/// other owners), `None` drops `owner`'s claim and deletes a field nobody owns any more.
fn set_field(slot: &mut Option<Field>, value: Option<Value>, owner: &Owner) {
    match (slot.as_mut(), value) {
        (Some(f), Some(v)) => {
            if f.value != v {
                f.owners.clear();
                f.value = v;
            }
            f.owners.insert(owner.clone());
        }
        (None, Some(v)) => {
            *slot = Some(Field {
                value: v,
                owners: BTreeSet::from([owner.clone()]),
            })
        }
        (Some(f), None) => {
            f.owners.remove(owner);
            if f.owners.is_empty() {
                *slot = None;
            }
        }
        (None, None) => {}
    }
}

/// An Update of one field: a changed value moves the field to `owner`; the same value changes
/// nothing.
fn update_field(slot: &mut Option<Field>, value: Value, owner: &Owner) {
    match slot.as_mut() {
        Some(f) if f.value == value => {}
        _ => {
            *slot = Some(Field {
                value,
                owners: BTreeSet::from([owner.clone()]),
            })
        }
    }
}

/// The handler for [`super::mock`]: every request is answered from (and changes) `state`.
pub fn server(state: Arc<Mutex<State>>) -> impl FnMut(&Recorded) -> Reply + Send + 'static {
    move |r: &Recorded| state.lock().unwrap().answer(r)
}
