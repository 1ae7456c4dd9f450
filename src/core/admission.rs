//! The admission patch builder (pure): from an object being admitted and what the store knows
//! about its workload, the desired object and the JSON Patch that turns one into the other.
//!
//! Objects are handled as JSON values so fields kerf does not know survive untouched. The patch
//! is a diff between the original and the desired object, so a second invocation on an
//! already-patched object yields an empty patch (`reinvocationPolicy: IfNeeded`).
//!
//! kerf's readings beyond the rules of docs/design/kai-admission.md (written there too):
//! - GPU sizes go through [`GpuTarget::from_units`]: noise removal (round to 9 decimals) before
//!   rounding up to 0.01. A fraction that rounds up to 1.00 becomes whole GPUs.
//! - The KAI contract carries one fractional container per pod. If several containers would need
//!   a fraction, the first (pod order) gets it and the others get whole GPUs (⌈r⌉, never below
//!   the recommendation).
//! - `enablement.gpu.requests.upsize/downsize` compare the size that would be applied (after
//!   rounding) with the template's allocation (`WorkloadState.template_gpu`, else the pod's own).
//! - The scheduler is overridden when the strategy says `kai`, when the pod already carries KAI
//!   annotations, or when the patched pod carries `gpu-fraction` (only KAI honours it).
//! - A pod with KAI `gpu-memory` keeps its GPU setup: kerf has no current allocation for it.
//! - CPU is written in millicores (`700m`); memory as `<n>Gi` when a whole number of GiB, else
//!   `<n>Mi` when a whole number of MiB, else plain bytes. A request above the container's
//!   existing limit is capped at the limit (the API server would reject the pod otherwise).
//! - `rightsizing.kubex.ai/mutated` is `{"policy": …, "containers": {c: {"gpu": …, "cpu": …,
//!   "memory": …}}, "schedulerName": …, "queue": …}` listing only what this admission changed;
//!   GPU values are `0.84` (fraction of one device), `2x0.84` (fraction on each of 2 devices)
//!   or `2` (whole GPUs).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::MetricSpec;
use serde_json::Value;

mod draft;
pub mod kai;
mod node;
use draft::{Draft, DraftObj};
pub use node::{Node, Obj, ObjDecoder, RAW_VALUE_KEY};

use crate::api::KaiSettings;
use crate::core::accelerator::{Holds, NVIDIA_KAI};
use crate::core::hpa::{analyze_metric_specs, utilization_metrics};
use crate::core::json_text;
use crate::core::quantity;

use crate::core::model::{ANNOTATION_MUTATED, CoordinatedHpa, PolicyId, WorkloadState};
use crate::core::pod::StrMap;

/// Largest GPU count kerf will write; anything above is treated as a broken recommendation.
const MAX_GPUS: f64 = 4096.0;
const NANOS: i128 = 1_000_000_000;

/// The object is not shaped like the kind it claims to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);

fn shape(msg: impl Into<String>) -> ShapeError {
    ShapeError(msg.into())
}

/// Result of building a mutation.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    /// RFC 6902 operations turning the original into the desired state of what kerf manages
    /// (for a pod its [`pod_skeleton`], for an HPA the whole object); empty when nothing changes.
    pub patch: Vec<PatchOp>,
    /// Human-readable reasons for containers left alone.
    pub notes: Vec<String>,
}

impl Mutation {
    fn from(original: &Node, desired: &Draft<'_>, notes: Vec<String>) -> Self {
        Self {
            patch: diff_draft(original, desired),
            notes,
        }
    }

    fn unchanged(notes: Vec<String>) -> Self {
        Self {
            patch: Vec::new(),
            notes,
        }
    }
}

/// How a GPU recommendation is expressed on a pod (KAI contract `v1alpha1-2026-07`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuTarget {
    /// `gpu-fraction` = hundredths/100 on each of `devices` devices.
    Fraction { hundredths: u32, devices: u32 },
    /// `nvidia.com/gpu` = n.
    Whole(u32),
}

/// Rounds to 9 decimals (float noise removal), returned as integer nano-units.
fn nanos(x: f64) -> i128 {
    (x * 1e9).round() as i128
}

/// ⌈a / b⌉ for positive integers.
fn ceil_div(a: i128, b: i128) -> i128 {
    (a + b - 1) / b
}

/// `x` rounded up to 0.01 after removing float noise, in hundredths (so 0.8400000001 → 84).
pub fn ceil_hundredths(x: f64) -> i128 {
    ceil_div(nanos(x).max(0), NANOS / 100)
}

impl GpuTarget {
    /// The target for `r` recommended GPU units; `None` when `r` is not a usable size.
    pub fn from_units(r: f64) -> Option<Self> {
        if !r.is_finite() || r <= 0.0 || r > MAX_GPUS {
            return None;
        }
        let nr = nanos(r);
        if nr <= 0 {
            return None;
        }
        if nr < NANOS {
            let h = ceil_div(nr, NANOS / 100).max(1);
            return Some(if h >= 100 {
                GpuTarget::Whole(1)
            } else {
                GpuTarget::Fraction {
                    hundredths: h as u32,
                    devices: 1,
                }
            });
        }
        let n = ceil_div(nr, NANOS);
        // r/n ≥ 0.995 ⇔ 200·r ≥ 199·n, exact in nano-units.
        if nr * 200 >= 199 * n * NANOS {
            return Some(GpuTarget::Whole(n as u32));
        }
        let h = ceil_div(nr, n * (NANOS / 100));
        Some(if h >= 100 {
            GpuTarget::Whole(n as u32)
        } else {
            GpuTarget::Fraction {
                hundredths: h as u32,
                devices: n as u32,
            }
        })
    }

    /// GPU units this target allocates.
    pub fn units(self) -> f64 {
        match self {
            GpuTarget::Fraction {
                hundredths,
                devices,
            } => f64::from(hundredths) * f64::from(devices) / 100.0,
            GpuTarget::Whole(n) => f64::from(n),
        }
    }

    fn devices(self) -> u32 {
        match self {
            GpuTarget::Fraction { devices, .. } | GpuTarget::Whole(devices) => devices,
        }
    }

    fn describe(self) -> String {
        match self {
            GpuTarget::Fraction {
                hundredths,
                devices: 1,
            } => fmt_hundredths(hundredths),
            GpuTarget::Fraction {
                hundredths,
                devices,
            } => format!("{devices}x{}", fmt_hundredths(hundredths)),
            GpuTarget::Whole(n) => n.to_string(),
        }
    }
}

/// `84` → `0.84`, `50` → `0.5`, `5` → `0.05`.
pub fn fmt_hundredths(h: u32) -> String {
    let mut s = (h / 100).to_string();
    let (tenths, hundredths) = ((h % 100) / 10, h % 10);
    if tenths + hundredths > 0 {
        s.push('.');
        s.push(char::from(b'0' + tenths as u8));
        if hundredths > 0 {
            s.push(char::from(b'0' + hundredths as u8));
        }
    }
    s
}

/// The text of a quantity in a JSON object: a string, or a bare number as Kubernetes also
/// accepts. Parsed by [`quantity`], never through a float.
fn quantity_text(v: &Node) -> Option<Cow<'_, str>> {
    match v {
        Node::String(s) => Some(Cow::Borrowed(s)),
        Node::Number(n) => Some(Cow::Owned(n.to_string())),
        _ => None,
    }
}

fn cpu_millis_of(v: &Node) -> Option<i64> {
    quantity::parse_cpu_millis(&quantity_text(v)?).ok()
}

fn memory_bytes_of(v: &Node) -> Option<i64> {
    quantity::parse_memory_bytes(&quantity_text(v)?).ok()
}

fn gpus_of(v: &Node) -> Option<f64> {
    quantity::parse_gpus(&quantity_text(v)?).ok()
}

/// CPU request text for `millis` millicores.
pub fn fmt_cpu(millis: i64) -> String {
    let mut s = millis.to_string();
    s.push('m');
    s
}

/// Memory request text for `bytes`.
pub fn fmt_memory(bytes: i64) -> String {
    const MI: i64 = 1 << 20;
    const GI: i64 = 1 << 30;
    let (n, unit) = if bytes != 0 && bytes % GI == 0 {
        (bytes / GI, "Gi")
    } else if bytes != 0 && bytes % MI == 0 {
        (bytes / MI, "Mi")
    } else {
        (bytes, "")
    };
    let mut s = n.to_string();
    s.push_str(unit);
    s
}

// ---------------------------------------------------------------------------------------------
// JSON helpers

/// `v[key]` as an object, created when missing or null (so missing parent maps get added).
fn child_obj<'d, 'a>(
    v: &'d mut DraftObj<'a>,
    key: &'a str,
    at: &str,
) -> Result<&'d mut DraftObj<'a>, ShapeError> {
    v.child_obj(key)
        .ok_or_else(|| shape(format!("{at}.{key} is not an object")))
}

fn get_obj<'a>(v: &'a Node, key: &str, at: &str) -> Result<Option<&'a Obj>, ShapeError> {
    match v.get(key) {
        None | Some(Node::Null) => Ok(None),
        Some(Node::Object(m)) => Ok(Some(m)),
        Some(_) => Err(shape(format!("{at}.{key} is not an object"))),
    }
}

/// A string map (`annotations`, `labels`) of `metadata`, every value checked to be a string,
/// read in place.
#[derive(Clone, Copy)]
struct StrObj<'a>(Option<&'a Obj>);

impl<'a> StrObj<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0?.get(key).and_then(Node::as_str)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.0.is_some_and(|m| m.contains_key(key))
    }
}

impl StrMap for StrObj<'_> {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
    fn any_key(&self, f: &dyn Fn(&str) -> bool) -> bool {
        self.0.is_some_and(|m| m.keys().any(|k| f(k)))
    }
}

/// The string map `key` of `metadata` (missing or null: empty).
fn string_map<'a>(meta: Option<&'a Obj>, key: &str) -> Result<StrObj<'a>, ShapeError> {
    let Some(m) = meta.and_then(|m| m.get(key)) else {
        return Ok(StrObj(None));
    };
    match m {
        Node::Null => Ok(StrObj(None)),
        Node::Object(m) => match m.iter().find(|(_, v)| v.as_str().is_none()) {
            Some((k, _)) => Err(shape(format!("metadata.{key}[{k:?}] is not a string"))),
            None => Ok(StrObj(Some(m))),
        },
        _ => Err(shape(format!("metadata.{key} is not an object"))),
    }
}

fn containers<'a>(spec: &'a Obj, key: &str) -> Result<Vec<(&'a str, &'a Node)>, ShapeError> {
    match spec.get(key) {
        None | Some(Node::Null) => Ok(Vec::new()),
        Some(Node::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c.get("name").and_then(Node::as_str).ok_or_else(|| {
                    shape(format!("spec.{key}[{i}].name is missing or not a string"))
                })?;
                if !c.is_object() {
                    return Err(shape(format!("spec.{key}[{i}] is not an object")));
                }
                Ok((name, c))
            })
            .collect(),
        Some(_) => Err(shape(format!("spec.{key} is not an array"))),
    }
}

fn container_mut<'d, 'a>(
    pod: &'d mut DraftObj<'a>,
    list: &str,
    idx: usize,
) -> Result<&'d mut DraftObj<'a>, ShapeError> {
    pod.get_mut("spec")
        .and_then(Draft::obj_mut)
        .and_then(|s| s.get_mut(list))
        .and_then(Draft::arr_mut)
        .and_then(|l| l.get_mut(idx))
        .and_then(Draft::obj_mut)
        .ok_or_else(|| shape(format!("spec.{list}[{idx}] is not an object")))
}

/// The container's `resources.<which>` map, created when missing.
fn resources_mut<'d, 'a>(
    c: &'d mut DraftObj<'a>,
    which: &'a str,
) -> Result<&'d mut DraftObj<'a>, ShapeError> {
    let res = child_obj(c, "resources", "container")?;
    child_obj(res, which, "container.resources")
}

fn resource_value<'a>(c: &'a Node, which: &str, name: &str) -> Option<&'a Node> {
    c.get("resources")?.get(which)?.get(name)
}

// ---------------------------------------------------------------------------------------------
// Pods

/// The pod's current KAI fractional allocation, if any.
#[derive(Debug, Clone, PartialEq)]
struct KaiFraction {
    container: String,
    /// The fraction per device as the pod states it, in nano-units (noise removed, never rounded
    /// up: a pod with 0.841 has 0.841, not the 0.85 kerf would write).
    nanos: i128,
    devices: u32,
}

impl KaiFraction {
    /// The pod already has exactly this target's fraction on `container`
    /// (docs/design/kai-admission.md#k8: the value the patch would write, compared as written).
    fn is(&self, container: &str, hundredths: u32, devices: u32) -> bool {
        self.container == container
            && self.nanos == i128::from(hundredths) * (NANOS / 100)
            && self.devices == devices
    }
}

fn current_fraction(annotations: StrObj<'_>, first: Option<&str>) -> Option<KaiFraction> {
    let stated = NVIDIA_KAI.stated_fraction(&annotations, first)?;
    let (f, devices) = stated.size.ok()?;
    Some(KaiFraction {
        container: stated.container,
        nanos: nanos(f),
        devices,
    })
}

/// GPU units container `c` has on the pod as admitted.
fn current_units(c_name: &str, c: &Node, frac: Option<&KaiFraction>) -> Option<f64> {
    if let Some(f) = frac.filter(|f| f.container == c_name) {
        return Some(f.nanos as f64 / NANOS as f64 * f64::from(f.devices));
    }
    resource_value(c, "limits", NVIDIA_KAI.resource_name)
        .or_else(|| resource_value(c, "requests", NVIDIA_KAI.resource_name))
        .and_then(gpus_of)
}

#[derive(Default)]
struct Changes {
    containers: BTreeMap<String, BTreeMap<&'static str, String>>,
    top: BTreeMap<&'static str, String>,
}

impl Changes {
    fn note(&mut self, container: &str, what: &'static str, value: String) {
        self.containers
            .entry(container.to_string())
            .or_default()
            .insert(what, value);
    }
}

/// Sets `map[key] = value` unless an equivalent value is there; true when it changed.
fn set_str<'a>(
    map: &mut DraftObj<'a>,
    key: &'a str,
    value: String,
    same: impl Fn(&Node) -> bool,
) -> bool {
    if map.node(key).is_some_and(same) {
        return false;
    }
    map.insert(key, Draft::New(Node::String(value)));
    true
}

/// The parts of a pod the builder reads or writes — `metadata.annotations`, `metadata.labels`,
/// `spec.schedulerName`, and `name`/`resources` of every (init) container — at their original
/// paths (container indices kept). Diffing skeletons gives the same patch as diffing whole pods
/// without cloning or comparing the rest (env, volumes, probes…), which dominates large pods.
pub fn pod_skeleton(pod: &Value) -> Result<Node, ShapeError> {
    let root = pod
        .as_object()
        .ok_or_else(|| shape("the pod is not a JSON object"))?;
    let pick = |m: &serde_json::Map<String, Value>, keys: &[&str]| -> Obj {
        keys.iter()
            .filter_map(|k| m.get(*k).map(|v| ((*k).to_string(), Node::from(v))))
            .collect()
    };
    let mut out = Obj::new();
    match root.get("metadata") {
        None => {}
        Some(Value::Object(m)) => {
            out.insert(
                "metadata".into(),
                Node::Object(pick(m, &["annotations", "labels"])),
            );
        }
        Some(Value::Null) => {
            out.insert("metadata".into(), Node::Null);
        }
        Some(_) => return Err(shape("pod.metadata is not an object")),
    }
    if let Some(spec) = root.get("spec") {
        let s = spec
            .as_object()
            .ok_or_else(|| shape("pod.spec is missing or not an object"))?;
        let mut ss = pick(s, &["schedulerName"]);
        for list in ["containers", "initContainers"] {
            match s.get(list) {
                None => {}
                Some(Value::Array(a)) => {
                    let items = a
                        .iter()
                        .map(|c| match c {
                            Value::Object(cm) => Node::Object(pick(cm, &["name", "resources"])),
                            other => Node::from(other),
                        })
                        .collect();
                    ss.insert(list.into(), Node::Array(items));
                }
                // Kept as is: the builder reports the shape problem.
                Some(other) => {
                    ss.insert(list.into(), Node::from(other));
                }
            }
        }
        out.insert("spec".into(), Node::Object(ss));
    }
    Ok(Node::Object(out))
}

/// Where a container sits in the pod: `spec.containers[i]` or `spec.initContainers[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ContainerAt {
    Regular(usize),
    Init(usize),
}

impl ContainerAt {
    fn list(self) -> &'static str {
        match self {
            ContainerAt::Regular(_) => "containers",
            ContainerAt::Init(_) => "initContainers",
        }
    }

    fn index(self) -> usize {
        match self {
            ContainerAt::Regular(i) | ContainerAt::Init(i) => i,
        }
    }
}

/// Builds the mutation of a Pod being created.
///
/// `kai` is GlobalConfiguration `kai` (the scheduler name and the queue label key).
pub fn mutate_pod(
    pod: &Value,
    state: &WorkloadState,
    kai: &KaiSettings,
) -> Result<Mutation, ShapeError> {
    mutate_skeleton(&pod_skeleton(pod)?, state, kai)
}

/// A pod decoded straight into its skeleton: everything [`pod_skeleton`] keeps, plus the owner
/// references and namespace owner resolution needs; all other fields are skipped while parsing
/// (no allocation for env, volumes, probes…). Shape errors here are decode errors.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct PodSkeleton {
    #[serde(default, deserialize_with = "object_only")]
    pub metadata: Option<MetaSkeleton>,
    #[serde(default, deserialize_with = "object_only")]
    pub(crate) spec: Option<SpecSkeleton>,
}

/// Accepts only a JSON object (or null) for a struct. serde's derived structs also accept an
/// array of field values; a patch built from such a skeleton would name paths the object does
/// not have (`/spec/schedulerName` under `"spec": []`), so that shape is a decode error here.
struct MapOnly<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Objects<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Objects<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Objects(std::marker::PhantomData))
            .map(MapOnly)
    }
}

fn object_only<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Ok(Option::<MapOnly<T>>::deserialize(d)?.map(|m| m.0))
}

fn objects_only<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Ok(Option::<Vec<MapOnly<T>>>::deserialize(d)?.map(|v| v.into_iter().map(|m| m.0).collect()))
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaSkeleton {
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub owner_references:
        Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(crate) annotations: Option<Obj>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpecSkeleton {
    #[serde(default)]
    pub(crate) scheduler_name: Option<Node>,
    #[serde(default, deserialize_with = "objects_only")]
    pub(crate) containers: Option<Vec<ContainerSkeleton>>,
    #[serde(default, deserialize_with = "objects_only")]
    pub(crate) init_containers: Option<Vec<ContainerSkeleton>>,
}

#[derive(Clone, Debug, serde::Deserialize)]
pub(crate) struct ContainerSkeleton {
    #[serde(default)]
    pub(crate) name: Option<Node>,
    #[serde(default)]
    pub(crate) resources: Option<Node>,
}

impl PodSkeleton {
    /// The same JSON [`pod_skeleton`] builds from the whole pod (null maps count as missing).
    pub fn to_node(&self) -> Node {
        self.clone().into_node()
    }

    /// [`Self::to_node`], moving the decoded parts instead of copying them (the webhook's path).
    pub fn into_node(self) -> Node {
        let mut out = Obj::new();
        if let Some(m) = self.metadata {
            let mut mm = Obj::new();
            if let Some(a) = m.annotations {
                mm.insert("annotations".into(), Node::Object(a));
            }
            if let Some(l) = m.labels {
                // In the map's (sorted) order, as serializing it would give.
                let l = l.into_iter().map(|(k, v)| (k, Node::String(v))).collect();
                mm.insert("labels".into(), Node::Object(l));
            }
            out.insert("metadata".into(), Node::Object(mm));
        }
        if let Some(sp) = self.spec {
            let mut ss = Obj::new();
            if let Some(n) = sp.scheduler_name {
                ss.insert("schedulerName".into(), n);
            }
            let list = |cs: Vec<ContainerSkeleton>| {
                Node::Array(
                    cs.into_iter()
                        .map(|c| {
                            let mut cm = Obj::new();
                            if let Some(n) = c.name {
                                cm.insert("name".into(), n);
                            }
                            if let Some(r) = c.resources {
                                cm.insert("resources".into(), r);
                            }
                            Node::Object(cm)
                        })
                        .collect(),
                )
            };
            if let Some(cs) = sp.containers {
                ss.insert("containers".into(), list(cs));
            }
            if let Some(cs) = sp.init_containers {
                ss.insert("initContainers".into(), list(cs));
            }
            out.insert("spec".into(), Node::Object(ss));
        }
        Node::Object(out)
    }
}

/// [`mutate_pod`] on a skeleton (from [`pod_skeleton`] or [`PodSkeleton::to_node`]).
pub fn mutate_skeleton(
    pod: &Node,
    state: &WorkloadState,
    kai: &KaiSettings,
) -> Result<Mutation, ShapeError> {
    let (desired, notes) = desired_pod(pod, state, kai)?;
    Ok(Mutation::from(pod, &Draft::Obj(desired), notes))
}

/// The desired skeleton (a draft of `pod`) and the notes on what was left alone.
fn desired_pod<'a>(
    pod: &'a Node,
    state: &WorkloadState,
    kai: &'a KaiSettings,
) -> Result<(DraftObj<'a>, Vec<String>), ShapeError> {
    let root = pod
        .as_object()
        .ok_or_else(|| shape("the pod is not a JSON object"))?;
    let meta = get_obj(pod, "metadata", "pod")?;
    let annotations = string_map(meta, "annotations")?;
    let labels = string_map(meta, "labels")?;
    let spec = root
        .get("spec")
        .and_then(Node::as_object)
        .ok_or_else(|| shape("pod.spec is missing or not an object"))?;
    let regular = containers(spec, "containers")?;
    let init = containers(spec, "initContainers")?;
    let first = regular.first().map(|(n, _)| *n);

    let uses_kai = NVIDIA_KAI
        .sharing_annotations()
        .iter()
        .any(|k| annotations.contains_key(k));
    let frac = current_fraction(annotations, first);

    let mut desired = DraftObj::of(root);
    let mut notes = Vec::new();
    let mut changes = Changes::default();
    let mut annotation_sets: Vec<(&'static str, Option<String>)> = Vec::new();
    let mut result_has_fraction = frac.is_some();

    if let Some(rec) = &state.gpu {
        result_has_fraction = gpu_targets(
            &mut desired,
            GpuPod {
                regular: &regular,
                init: &init,
                annotations,
                frac: frac.as_ref(),
            },
            rec,
            state,
            &mut notes,
            &mut changes,
            &mut annotation_sets,
        )?;
    }

    // --- CPU / memory requests ---
    for (name, req) in &state.resources {
        let found = regular
            .iter()
            .position(|(n, _)| n == name)
            .map(ContainerAt::Regular)
            .or_else(|| {
                init.iter()
                    .position(|(n, _)| n == name)
                    .map(ContainerAt::Init)
            });
        let Some(slot) = found else {
            notes.push(format!("container {name}: not in the pod"));
            continue;
        };
        // The limits as admitted: kerf never writes a CPU or memory limit.
        let admitted = match slot {
            ContainerAt::Regular(i) => regular[i].1,
            ContainerAt::Init(i) => init[i].1,
        };
        let cpu_limit = resource_value(admitted, "limits", "cpu").and_then(cpu_millis_of);
        let memory_limit = resource_value(admitted, "limits", "memory").and_then(memory_bytes_of);
        let c = container_mut(&mut desired, slot.list(), slot.index())?;
        if let Some(m) = req.cpu_millis.filter(|m| *m > 0) {
            let limit = cpu_limit;
            let m = match limit {
                Some(l) if l < m => {
                    notes.push(format!(
                        "container {name}: cpu request capped at its limit {}",
                        fmt_cpu(l)
                    ));
                    l
                }
                _ => m,
            };
            let same = |v: &Node| cpu_millis_of(v) == Some(m);
            if set_str(resources_mut(c, "requests")?, "cpu", fmt_cpu(m), same) {
                changes.note(name, "cpu", fmt_cpu(m));
            }
        }
        if let Some(b) = req.memory_bytes.filter(|b| *b > 0) {
            let limit = memory_limit;
            let b = match limit {
                Some(l) if l < b => {
                    notes.push(format!(
                        "container {name}: memory request capped at its limit {}",
                        fmt_memory(l)
                    ));
                    l
                }
                _ => b,
            };
            let same = |v: &Node| memory_bytes_of(v) == Some(b);
            if set_str(resources_mut(c, "requests")?, "memory", fmt_memory(b), same) {
                changes.note(name, "memory", fmt_memory(b));
            }
        }
    }

    // --- scheduler / queue ---
    let mut label_sets: Vec<(&'a str, String)> = Vec::new();
    let mut to_kai = false;
    if state.gpu.is_some() && (state.strategy.override_kai() || uses_kai || result_has_fraction) {
        let spec = child_obj(&mut desired, "spec", "pod")?;
        if spec.node("schedulerName").and_then(Node::as_str) != Some(kai.scheduler_name.as_str()) {
            spec.insert(
                "schedulerName",
                Draft::New(Node::String(kai.scheduler_name.clone())),
            );
            changes
                .top
                .insert("schedulerName", kai.scheduler_name.clone());
            to_kai = true;
        }
        // KAI's pod grouper reads the top owner's queue label before the pod's: with one on
        // the workload, a label on the pod would be ignored (docs/design/kai-admission.md#k5).
        let key = kai.queue_label_key.as_str();
        let queue = state.strategy.kai();
        let has_queue = labels.contains_key(key);
        if state.owner_queue.is_none()
            && (!has_queue || queue.set_queue_when_specified)
            && labels.get(key) != Some(queue.queue.as_str())
        {
            label_sets.push((key, queue.queue.clone()));
            changes.top.insert("queue", queue.queue);
        }
    }
    // KAI refuses `mps: "true"` without a fraction: it goes with the fraction kerf removed, or
    // when kerf sends a pod without one to KAI.
    if !result_has_fraction
        && (frac.is_some() || to_kai)
        && annotations.get(NVIDIA_KAI.mps_annotation) == Some("true")
    {
        annotation_sets.push((NVIDIA_KAI.mps_annotation, None));
        changes.top.insert("mps", "removed".into());
        notes.push("mps removed: KAI accepts MPS only with a GPU fraction".into());
    }

    // --- metadata ---
    let ann_changed = annotation_sets
        .iter()
        .any(|(k, v)| !same_fraction_text(k, annotations.get(k), v.as_deref()));
    if ann_changed
        || !label_sets.is_empty()
        || !changes.containers.is_empty()
        || !changes.top.is_empty()
    {
        let meta = child_obj(&mut desired, "metadata", "pod")?;
        if !label_sets.is_empty() {
            let l = child_obj(meta, "labels", "metadata")?;
            for (k, v) in label_sets {
                l.insert(k, Draft::New(Node::String(v)));
            }
        }
        let a = child_obj(meta, "annotations", "metadata")?;
        for (k, v) in annotation_sets {
            match v {
                Some(v)
                    if !same_fraction_text(
                        k,
                        a.node(k).and_then(Node::as_str),
                        Some(v.as_str()),
                    ) =>
                {
                    a.insert(k, Draft::New(Node::String(v)));
                }
                Some(_) => {}
                None => {
                    a.remove(k);
                }
            }
        }
    }

    // A pod kept as it is because of KAI's rules still records why (once: a reinvocation
    // finds the record).
    let shape_only =
        changes.top.contains_key("gpuShape") && !annotations.contains_key(ANNOTATION_MUTATED);
    if shape_only || !same_obj(root, &desired) {
        let summary = summary_text(state.policy.as_ref(), &changes);
        let a = child_obj(
            child_obj(&mut desired, "metadata", "pod")?,
            "annotations",
            "metadata",
        )?;
        a.insert(ANNOTATION_MUTATED, Draft::New(Node::String(summary)));
    }
    Ok((desired, notes))
}

/// The pod as admitted, as the GPU concern reads it.
struct GpuPod<'p, 'a> {
    regular: &'p [(&'a str, &'a Node)],
    init: &'p [(&'a str, &'a Node)],
    annotations: StrObj<'a>,
    frac: Option<&'p KaiFraction>,
}

impl GpuPod<'_, '_> {
    /// Regular containers, then init containers: the engine sizes restartable init containers
    /// (sidecars) too, and KAI places a fraction on whichever container
    /// `gpu-fraction-container-name` names (docs/design/kai-admission.md#k2).
    fn containers(&self) -> impl Iterator<Item = (ContainerAt, &str, &Node)> {
        let regular = self.regular.iter().enumerate();
        let init = self.init.iter().enumerate();
        regular
            .map(|(i, (n, c))| (ContainerAt::Regular(i), *n, *c))
            .chain(init.map(|(i, (n, c))| (ContainerAt::Init(i), *n, *c)))
    }

    fn holds(&self, name: &str, c: &Node) -> Holds {
        let whole = ["limits", "requests"]
            .iter()
            .any(|w| resource_value(c, w, NVIDIA_KAI.resource_name).is_some());
        if self.frac.is_some_and(|f| f.container == name) {
            Holds::Fraction
        } else if whole {
            Holds::Whole
        } else {
            Holds::Nothing
        }
    }
}

/// The GPU concern (docs/design/kai-admission.md#k2–#k4, #k6, #k10): each recommended
/// container's size in the shape KAI accepts, written into `desired`; returns whether the
/// patched pod holds a fraction.
#[allow(clippy::too_many_arguments)]
fn gpu_targets<'a>(
    desired: &mut DraftObj<'a>,
    pod: GpuPod<'_, 'a>,
    rec: &crate::core::model::GpuRecommendation,
    state: &WorkloadState,
    notes: &mut Vec<String>,
    changes: &mut Changes,
    annotation_sets: &mut Vec<(&'static str, Option<String>)>,
) -> Result<bool, ShapeError> {
    if let Some(what) = NVIDIA_KAI.shares_by_memory(&pod.annotations) {
        notes.push(format!(
            "pod shares its GPU by memory ({what}): GPU size left as is, kerf sizes gpu-fraction pods only"
        ));
        return Ok(pod.frac.is_some());
    }
    let mut slots = Vec::new();
    let mut bases = Vec::new();
    for (at, name, c) in pod.containers() {
        let base = state
            .template_gpu
            .get(name)
            .copied()
            .or_else(|| current_units(name, c, pod.frac));
        let target = rec.containers.get(name).and_then(|&r| {
            let Some(target) = GpuTarget::from_units(r) else {
                notes.push(format!(
                    "container {name}: recommendation {r} is not a usable GPU size"
                ));
                return None;
            };
            if !allowed(target, base, state, name) {
                notes.push(format!(
                    "container {name}: {} not allowed by the automation strategy",
                    if target.units() > base.unwrap_or(0.0) {
                        "upsize"
                    } else {
                        "downsize"
                    }
                ));
                return None;
            }
            Some(target)
        });
        slots.push(kai::Slot {
            name,
            holds: pod.holds(name, c),
            target,
        });
        bases.push((at, base));
    }
    for c in rec
        .containers
        .keys()
        .filter(|c| !pod.containers().any(|(_, n, _)| n == c.as_str()))
    {
        notes.push(format!("container {c}: not in the pod"));
    }
    let shape = kai::one_fraction_and_no_whole_gpus_beside_it(&slots, |i, whole| {
        allowed(whole, bases[i].1, state, slots[i].name)
    });
    let mut has_fraction = false;
    for (i, slot) in slots.iter().enumerate() {
        let Some(target) = shape.targets[i] else {
            has_fraction |= slot.holds == Holds::Fraction;
            continue;
        };
        let (at, name) = (bases[i].0, slot.name);
        let c = container_mut(desired, at.list(), at.index())?;
        let mut changed = false;
        match target {
            GpuTarget::Fraction {
                hundredths,
                devices,
            } => {
                has_fraction = true;
                for which in ["requests", "limits"] {
                    if let Some(m) = c
                        .get_mut("resources")
                        .and_then(Draft::obj_mut)
                        .and_then(|r| r.get_mut(which))
                        .and_then(Draft::obj_mut)
                    {
                        changed |= m.remove(NVIDIA_KAI.resource_name);
                    }
                }
                changed |= !pod.frac.is_some_and(|f| f.is(name, hundredths, devices));
                annotation_sets.push((
                    NVIDIA_KAI.fraction_annotation,
                    Some(fmt_hundredths(hundredths)),
                ));
                annotation_sets.push((
                    NVIDIA_KAI.fraction_devices_annotation,
                    (devices > 1).then(|| devices.to_string()),
                ));
                annotation_sets.push((
                    NVIDIA_KAI.fraction_container_annotation,
                    (at != ContainerAt::Regular(0)).then(|| name.to_string()),
                ));
            }
            GpuTarget::Whole(n) => {
                let same = |v: &Node| gpus_of(v) == Some(f64::from(n));
                for which in ["requests", "limits"] {
                    changed |= set_str(
                        resources_mut(c, which)?,
                        NVIDIA_KAI.resource_name,
                        n.to_string(),
                        same,
                    );
                }
                changed |= slot.holds == Holds::Fraction;
            }
        }
        if changed {
            changes.note(name, "gpu", target.describe());
        }
    }
    if let Some(why) = shape.why {
        changes.top.insert("gpuShape", why.clone());
        notes.push(why);
    }
    if !has_fraction && pod.frac.is_some() {
        // The fractional container became whole: the fraction annotations go, and with them
        // `mps`, which KAI accepts only beside a fraction.
        for k in NVIDIA_KAI.fraction_annotations() {
            annotation_sets.push((k, None));
        }
    }
    Ok(has_fraction)
}

/// The `mutated` annotation: compact JSON `{"policy":…,"containers":{c:{what:…}},` then the
/// pod-level changes (`queue`, `schedulerName`) in key order, each part only when present.
fn summary_text(policy: Option<&PolicyId>, changes: &Changes) -> String {
    let mut out = Vec::with_capacity(256);
    let mut entries = 0;
    let mut key = |out: &mut Vec<u8>, k: &str| {
        out.push(if entries == 0 { b'{' } else { b',' });
        entries += 1;
        json_text::push_str(out, k);
        out.push(b':');
    };
    if let Some(p) = policy {
        key(&mut out, "policy");
        json_text::push_str(&mut out, &p.to_string());
    }
    if !changes.containers.is_empty() {
        key(&mut out, "containers");
        for (i, (c, what)) in changes.containers.iter().enumerate() {
            out.push(if i == 0 { b'{' } else { b',' });
            json_text::push_str(&mut out, c);
            out.extend_from_slice(b":{");
            for (j, (k, v)) in what.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                json_text::push_str(&mut out, k);
                out.push(b':');
                json_text::push_str(&mut out, v);
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
    for (k, v) in &changes.top {
        key(&mut out, k);
        json_text::push_str(&mut out, v);
    }
    if entries == 0 {
        out.push(b'{');
    }
    out.push(b'}');
    // Written from strings, so always UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// `gpu-fraction` texts of the same value (`0.5` vs `0.50`) count as equal so a reinvocation
/// does not rewrite them; a different value (`0.841` for the `0.85` kerf writes) is rewritten
/// (docs/design/kai-admission.md#k8).
fn same_fraction_text(key: &str, old: Option<&str>, new: Option<&str>) -> bool {
    match (old, new) {
        (Some(o), Some(n)) if key == NVIDIA_KAI.fraction_annotation => {
            matches!((o.trim().parse::<f64>(), n.parse::<f64>()), (Ok(a), Ok(b)) if nanos(a) == nanos(b))
        }
        (o, n) => o == n,
    }
}

/// Whether `container` may go from `base` to `target` under its strategy's upsize/downsize.
pub(crate) fn allowed(
    target: GpuTarget,
    base: Option<f64>,
    state: &WorkloadState,
    container: &str,
) -> bool {
    let Some(base) = base else { return true };
    let units = target.units();
    let strategy = state.gpu_strategy_of(container);
    if units > base + 1e-9 {
        strategy.gpu_upsize()
    } else if units < base - 1e-9 {
        strategy.gpu_downsize()
    } else {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// HPAs

/// Builds the mutation of an `autoscaling/v2` HorizontalPodAutoscaler
/// (docs/design/hpa-coordination.md#h12). Its metrics are read as the engine and the writer read
/// them ([`analyze_metric_specs`], docs/design/hpa-coordination.md#h1): when they are the single
/// supported metric on the coordinated resource, its target becomes `target_after` — for an HPA
/// without metrics (the default, CPU 80 %) that metric is written out. Any other shape, or an HPA
/// other than the coordinated one, is left alone (empty patch, with a note).
pub fn mutate_hpa(hpa: &Value, coordinated: &CoordinatedHpa) -> Result<Mutation, ShapeError> {
    let hpa = &Node::from(hpa);
    let meta = get_obj(hpa, "metadata", "hpa")?;
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Node::as_str)
        .unwrap_or("");
    let unchanged = |note: String| Ok(Mutation::unchanged(vec![note]));
    if name != coordinated.hpa_name {
        return unchanged(format!(
            "HPA {name:?} is not the coordinated HPA {:?}",
            coordinated.hpa_name
        ));
    }
    let spec = hpa
        .get("spec")
        .and_then(Node::as_object)
        .ok_or_else(|| shape("hpa.spec is missing or not an object"))?;
    let metrics: Option<Vec<MetricSpec>> = match spec.get("metrics") {
        None | Some(Node::Null) => None,
        Some(m) => Some(
            serde_json::from_value(m.to_value())
                .map_err(|e| shape(format!("hpa.spec.metrics: {e}")))?,
        ),
    };
    let listed = metrics.as_ref().is_some_and(|m| !m.is_empty());
    let (resource, target) = match analyze_metric_specs(metrics.as_deref()).coordinable() {
        Ok(t) => t,
        Err(why) => return unchanged(format!("unsupported-metrics: {why}")),
    };
    if resource.as_str() != coordinated.resource {
        return unchanged(format!(
            "the HPA scales on {} utilization, not on the coordinated resource {}",
            resource.as_str(),
            coordinated.resource
        ));
    }
    if target == coordinated.target_after {
        return Ok(Mutation::unchanged(Vec::new()));
    }
    let mut desired = Draft::Orig(hpa);
    let spec = desired
        .obj_mut()
        .and_then(|h| h.get_mut("spec"))
        .and_then(Draft::obj_mut)
        .ok_or_else(|| shape("hpa.spec is missing or not an object"))?;
    if listed {
        let target = spec
            .get_mut("metrics")
            .and_then(Draft::arr_mut)
            .and_then(|m| m.get_mut(0))
            .and_then(Draft::obj_mut)
            .and_then(|m| m.get_mut("resource"))
            .and_then(Draft::obj_mut)
            .and_then(|r| r.get_mut("target"))
            .and_then(Draft::obj_mut)
            .ok_or_else(|| shape("hpa.spec.metrics[0].resource.target is not an object"))?;
        target.insert(
            "averageUtilization",
            Draft::New(Node::Number(coordinated.target_after.into())),
        );
    } else {
        spec.insert(
            "metrics",
            Draft::New(Node::from(&utilization_metrics(
                resource.as_str(),
                coordinated.target_after,
            ))),
        );
    }
    Ok(Mutation::from(hpa, &desired, Vec::new()))
}

// ---------------------------------------------------------------------------------------------
// JSON Patch

/// One RFC 6902 operation: `{"op":…,"path":…,"value":…}` (no `value` for `remove`), written
/// by [`write_patch`] without a JSON object built per operation.
#[derive(Clone, Debug, PartialEq)]
pub struct PatchOp {
    pub op: &'static str,
    pub path: String,
    pub value: Option<Node>,
}

impl PatchOp {
    /// The operation as a JSON object (what `json_patch` and the tests read).
    pub fn to_value(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("op".into(), Value::String(self.op.into()));
        m.insert("path".into(), Value::String(self.path.clone()));
        if let Some(v) = &self.value {
            m.insert("value".into(), v.to_value());
        }
        Value::Object(m)
    }
}

/// Appends `ops` as a JSON array: the bytes serde_json writes for them (test
/// `patch_ops_serialize_as_json_objects`), without going through a serializer.
pub fn write_patch(out: &mut Vec<u8>, ops: &[PatchOp]) {
    out.push(b'[');
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"op\":");
        json_text::push_str(out, op.op);
        out.extend_from_slice(b",\"path\":");
        json_text::push_str(out, &op.path);
        if let Some(v) = &op.value {
            out.extend_from_slice(b",\"value\":");
            v.write_json(out);
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// RFC 6901 reference token escaping.
pub fn escape_token(t: &str) -> String {
    let mut out = String::with_capacity(t.len() + 2);
    push_escaped(&mut out, t);
    out
}

/// Appends `t` escaped (RFC 6901: `~` → `~0`, `/` → `~1`) without an intermediate string,
/// copying the runs between those two (ASCII) bytes whole.
fn push_escaped(out: &mut String, t: &str) {
    let mut rest = t;
    while let Some(i) = rest.bytes().position(|b| b == b'~' || b == b'/') {
        out.push_str(&rest[..i]);
        out.push_str(if rest.as_bytes()[i] == b'~' {
            "~0"
        } else {
            "~1"
        });
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

/// RFC 6902 operations turning `a` into `b`. Objects are diffed key by key (a missing parent
/// map is added whole, so it comes before anything inside it); arrays of the same length
/// element by element; anything else is replaced.
pub fn diff(a: &Node, b: &Node) -> Vec<PatchOp> {
    let mut ops = Vec::new();
    diff_at(&mut Vec::new(), a, Want::Node(b), &mut ops);
    ops
}

/// [`diff`] against a draft of the desired object.
fn diff_draft(a: &Node, b: &Draft<'_>) -> Vec<PatchOp> {
    let mut ops = Vec::new();
    diff_at(&mut Vec::new(), a, Want::Draft(b), &mut ops);
    ops
}

/// Appends `/` and the token `t` (escaped) to `path`.
fn push_token(path: &mut String, t: &str) {
    path.push('/');
    push_escaped(path, t);
}

/// One step of a JSON Pointer while the diff walks: escaped and joined only for the paths of
/// the operations it emits, not for every key it passes.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The JSON Pointer (RFC 6901) of `steps`.
fn pointer(steps: &[Step<'_>]) -> String {
    let mut out = String::with_capacity(64);
    for step in steps {
        match step {
            Step::Key(k) => push_token(&mut out, k),
            Step::Index(i) => {
                out.push('/');
                match u8::try_from(*i) {
                    Ok(d @ 0..=9) => out.push(char::from(b'0' + d)),
                    _ => out.push_str(&i.to_string()),
                }
            }
        }
    }
    out
}

/// The desired side of a diff: a plain value, or a draft whose untouched parts are the
/// original's own values.
#[derive(Clone, Copy)]
enum Want<'d, 'a> {
    Node(&'d Node),
    Draft(&'d Draft<'a>),
}

/// The desired side's object, plain or drafted.
#[derive(Clone, Copy)]
enum WantObj<'d, 'a> {
    Node(&'d Obj),
    Draft(&'d DraftObj<'a>),
}

impl<'d, 'a> Want<'d, 'a> {
    /// A draft's plain values as plain values, so each shape has one case below.
    fn plain(self) -> Self {
        match self {
            Want::Draft(d) => d.node().map_or(self, Want::Node),
            Want::Node(_) => self,
        }
    }

    fn to_node(self) -> Node {
        match self {
            Want::Node(n) => n.clone(),
            Want::Draft(d) => d.to_node(),
        }
    }
}

impl<'d, 'a> WantObj<'d, 'a> {
    fn has_near(self, at: usize, key: &str) -> bool {
        match self {
            WantObj::Node(o) => o.get_near(at, key).is_some(),
            WantObj::Draft(o) => o.get_near(at, key).is_some(),
        }
    }

    fn entries(self) -> impl Iterator<Item = (&'d str, Want<'d, 'a>)> {
        let (plain, drafted) = match self {
            WantObj::Node(o) => (
                Some(o.iter().map(|(k, v)| (k.as_str(), Want::Node(v)))),
                None,
            ),
            WantObj::Draft(o) => (None, Some(o.iter().map(|(k, v)| (k, Want::Draft(v))))),
        };
        plain
            .into_iter()
            .flatten()
            .chain(drafted.into_iter().flatten())
    }
}

/// Whether `b` holds the same value as `a` (objects in any order, as [`Node`]'s equality).
fn same(a: &Node, b: Want<'_, '_>) -> bool {
    match (a, b.plain()) {
        (_, Want::Node(n)) => std::ptr::eq(a, n) || a == n,
        (Node::Object(x), Want::Draft(Draft::Obj(y))) => same_obj(x, y),
        (Node::Array(x), Want::Draft(Draft::Arr(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(vx, vy)| same(vx, Want::Draft(vy)))
        }
        _ => false,
    }
}

/// [`same`] for a drafted object.
fn same_obj(x: &Obj, y: &DraftObj<'_>) -> bool {
    // As in `diff_objects`: an entry of a draft of `x` that is still `x`'s own value is equal.
    let draft_of_x = y.drafts(x);
    x.len() == y.len()
        && y.iter().enumerate().all(|(i, (k, vy))| {
            (draft_of_x && matches!(vy, Draft::Orig(_)))
                || x.get_near(i, k).is_some_and(|vx| same(vx, Want::Draft(vy)))
        })
}

fn diff_at<'d>(path: &mut Vec<Step<'d>>, a: &'d Node, b: Want<'d, '_>, ops: &mut Vec<PatchOp>) {
    // Containers recurse without comparing first, so each node is visited once; an untouched
    // part of a draft is the original's own value, passed over at once.
    match (a, b.plain()) {
        (_, Want::Node(n)) if std::ptr::eq(a, n) => {}
        (Node::Object(x), Want::Node(Node::Object(y))) => {
            diff_objects(path, x, WantObj::Node(y), ops)
        }
        (Node::Object(x), Want::Draft(Draft::Obj(y))) => {
            diff_objects(path, x, WantObj::Draft(y), ops)
        }
        (Node::Array(x), Want::Node(Node::Array(y))) if x.len() == y.len() => {
            for (i, (vx, vy)) in x.iter().zip(y).enumerate() {
                path.push(Step::Index(i));
                diff_at(path, vx, Want::Node(vy), ops);
                path.pop();
            }
        }
        (Node::Array(x), Want::Draft(Draft::Arr(y))) if x.len() == y.len() => {
            for (i, (vx, vy)) in x.iter().zip(y).enumerate() {
                path.push(Step::Index(i));
                diff_at(path, vx, Want::Draft(vy), ops);
                path.pop();
            }
        }
        (_, Want::Node(n)) if a == n => {}
        (_, b) => ops.push(PatchOp {
            op: "replace",
            path: pointer(path),
            value: Some(b.to_node()),
        }),
    }
}

/// Keys of `x` missing from `y` are removed (in `x`'s order), then `y`'s entries in its order
/// are diffed or added. Keys are looked up near their own position (`get_near`): the desired
/// object is the original with changes.
fn diff_objects<'d>(
    path: &mut Vec<Step<'d>>,
    x: &'d Obj,
    y: WantObj<'d, '_>,
    ops: &mut Vec<PatchOp>,
) {
    // A draft of `x` knows what it kept: no key of `x` to look for when none was removed, and
    // nothing to compare where an entry is still `x`'s own value.
    let (draft_of_x, every_key_kept) = match y {
        WantObj::Draft(d) => (d.drafts(x), d.keeps_every_key_of(x)),
        WantObj::Node(_) => (false, false),
    };
    for (i, k) in x.keys().enumerate() {
        if every_key_kept || y.has_near(i, k) {
            continue;
        }
        path.push(Step::Key(k));
        ops.push(PatchOp {
            op: "remove",
            path: pointer(path),
            value: None,
        });
        path.pop();
    }
    for (i, (k, vy)) in y.entries().enumerate() {
        if draft_of_x && matches!(vy, Want::Draft(Draft::Orig(_))) {
            continue;
        }
        path.push(Step::Key(k));
        match x.get_near(i, k) {
            Some(vx) => diff_at(path, vx, vy, ops),
            None => ops.push(PatchOp {
                op: "add",
                path: pointer(path),
                value: Some(vy.to_node()),
            }),
        }
        path.pop();
    }
}

#[cfg(test)]
mod tests;
