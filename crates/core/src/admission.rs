//! The admission patch builder (pure): from an object being admitted and what the store knows
//! about its workload, the desired object and the JSON Patch that turns one into the other.
//!
//! Objects are handled as `serde_json` values so fields kerf does not know survive untouched.
//! Each concern of a pod's patch is a function of its own, as in VPA's admission controller:
//! the GPU target ([`gpu_targets`], over KAI's one-fractional-container rule in [`kai`]),
//! CPU/memory requests ([`resource_requests`]), scheduler and queue ([`scheduler_and_queue`]),
//! and the metadata they imply ([`metadata`]). The patch is the `json-patch` crate's diff
//! between the original and the desired object ([`diff`] walks it at less cost), so a second
//! invocation on an already-patched object yields an empty patch (`reinvocationPolicy:
//! IfNeeded`). The rules and kerf's readings of them are docs/design/kai-admission.md.

use std::borrow::Cow;
use std::collections::BTreeMap;

use json_patch::PatchOperation;
use k8s_openapi::api::autoscaling::v2::MetricSpec;
use serde_json::{Map, Value};

mod diff;
pub mod kai;

pub use diff::patch_between;

use crate::accelerator::{Holds, NVIDIA_KAI};
use crate::hpa::{analyze_metric_specs, utilization_metrics};
use crate::quantity;
use kerf_api::KaiSettings;

use crate::model::{ANNOTATION_MUTATED, CoordinatedHpa, PolicyId, WorkloadState};
use crate::pod::StrMap;

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
    pub patch: Vec<PatchOperation>,
    /// Human-readable reasons for containers left alone.
    pub notes: Vec<String>,
}

impl Mutation {
    fn from(original: &Value, desired: &Value, notes: Vec<String>) -> Self {
        Self {
            patch: patch_between(original, desired),
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
fn quantity_text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        _ => None,
    }
}

fn cpu_millis_of(v: &Value) -> Option<i64> {
    quantity::parse_cpu_millis(&quantity_text(v)?).ok()
}

fn memory_bytes_of(v: &Value) -> Option<i64> {
    quantity::parse_memory_bytes(&quantity_text(v)?).ok()
}

fn gpus_of(v: &Value) -> Option<f64> {
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

/// `m[key]`, found by comparing the keys in order. A pod's maps hold a handful of keys, and
/// serde_json's ordered map hashes the key (SipHash) to look it up, which costs several times
/// such a scan (docs/performance.md, "Small maps").
fn field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.iter().find_map(|(k, v)| (k == key).then_some(v))
}

/// [`field`], to change the value in place.
fn field_mut<'a>(m: &'a mut Map<String, Value>, key: &str) -> Option<&'a mut Value> {
    m.iter_mut().find_map(|(k, v)| (k == key).then_some(v))
}

/// `v[key]` when `v` is an object ([`field`]).
fn member<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    field(v.as_object()?, key)
}

/// [`member`], to change the value in place.
fn member_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    field_mut(v.as_object_mut()?, key)
}

/// `m[key]` as an object, created when missing or null (so missing parent maps get added).
fn child_obj<'m>(
    m: &'m mut Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'m mut Map<String, Value>, ShapeError> {
    if !m.keys().any(|k| k == key) {
        m.insert(key.to_string(), Value::Null);
    }
    let mut v = field_mut(m, key);
    if let Some(null @ Value::Null) = v.as_deref_mut() {
        *null = Value::Object(Map::new());
    }
    v.and_then(Value::as_object_mut)
        .ok_or_else(|| shape(format!("{at}.{key} is not an object")))
}

fn get_obj<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    match field(m, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(shape(format!("{at}.{key} is not an object"))),
    }
}

/// A string map (`annotations`, `labels`) of `metadata`, every value checked to be a string,
/// read in place.
#[derive(Clone, Copy)]
struct StrObj<'a>(Option<&'a Map<String, Value>>);

impl<'a> StrObj<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        field(self.0?, key).and_then(Value::as_str)
    }

    fn contains_key(&self, key: &str) -> bool {
        self.0.is_some_and(|m| field(m, key).is_some())
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
fn string_map<'a>(
    meta: Option<&'a Map<String, Value>>,
    key: &str,
) -> Result<StrObj<'a>, ShapeError> {
    match get_obj_or_shape(meta, key)? {
        None => Ok(StrObj(None)),
        Some(m) => match m.iter().find(|(_, v)| !v.is_string()) {
            Some((k, _)) => Err(shape(format!("metadata.{key}[{k:?}] is not a string"))),
            None => Ok(StrObj(Some(m))),
        },
    }
}

fn get_obj_or_shape<'a>(
    meta: Option<&'a Map<String, Value>>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    match meta {
        None => Ok(None),
        Some(m) => get_obj(m, key, "metadata"),
    }
}

fn containers<'a>(
    spec: &'a Map<String, Value>,
    key: &str,
) -> Result<Vec<(&'a str, &'a Value)>, ShapeError> {
    match field(spec, key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if !c.is_object() {
                    return Err(shape(format!("spec.{key}[{i}] is not an object")));
                }
                let name = member(c, "name").and_then(Value::as_str).ok_or_else(|| {
                    shape(format!("spec.{key}[{i}].name is missing or not a string"))
                })?;
                Ok((name, c))
            })
            .collect(),
        Some(_) => Err(shape(format!("spec.{key} is not an array"))),
    }
}

fn container_mut(pod: &mut Value, at: ContainerAt) -> Result<&mut Map<String, Value>, ShapeError> {
    let (list, idx) = (at.list(), at.index());
    member_mut(pod, "spec")
        .and_then(|s| member_mut(s, list))
        .and_then(|l| l.get_mut(idx))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| shape(format!("spec.{list}[{idx}] is not an object")))
}

/// The container's `resources.<which>` map, created when missing.
fn resources_mut<'d>(
    c: &'d mut Map<String, Value>,
    which: &str,
) -> Result<&'d mut Map<String, Value>, ShapeError> {
    let res = child_obj(c, "resources", "container")?;
    child_obj(res, which, "container.resources")
}

fn resource_value<'a>(c: &'a Value, which: &str, name: &str) -> Option<&'a Value> {
    member(member(member(c, "resources")?, which)?, name)
}

/// The pod's container list `spec.<list>` (`containers`, `initContainers`); empty when it is
/// missing or not a list. Read by [`member`], not `Value::pointer`, which unescapes each token
/// into a new string: the pod-level guard reads the lists on every review.
fn spec_list<'a>(pod: &'a Value, list: &str) -> &'a [Value] {
    member(pod, "spec")
        .and_then(|s| member(s, list))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The pod's `metadata` in the desired object, created when missing.
fn metadata_mut(desired: &mut Value) -> Result<&mut Map<String, Value>, ShapeError> {
    let root = desired
        .as_object_mut()
        .ok_or_else(|| shape("the pod is not a JSON object"))?;
    child_obj(root, "metadata", "pod")
}

fn set_str(
    map: &mut Map<String, Value>,
    key: &str,
    value: String,
    same: impl Fn(&Value) -> bool,
) -> bool {
    if field(map, key).is_some_and(same) {
        return false;
    }
    map.insert(key.to_string(), Value::String(value));
    true
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
fn current_units(c_name: &str, c: &Value, frac: Option<&KaiFraction>) -> Option<f64> {
    if let Some(f) = frac.filter(|f| f.container == c_name) {
        return Some(f.nanos as f64 / NANOS as f64 * f64::from(f.devices));
    }
    resource_value(c, "limits", NVIDIA_KAI.resource_name)
        .or_else(|| resource_value(c, "requests", NVIDIA_KAI.resource_name))
        .and_then(gpus_of)
}

/// What this admission changed, for the `mutated` annotation.
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

/// The parts of a pod the builder reads or writes — `metadata.annotations`, `metadata.labels`,
/// `spec.schedulerName`, and `name`/`resources` of every (init) container — at their original
/// paths (container indices kept). Diffing skeletons gives the same patch as diffing whole pods
/// without cloning or comparing the rest (env, volumes, probes…), which dominates large pods.
pub fn pod_skeleton(pod: &Value) -> Result<Value, ShapeError> {
    let root = pod
        .as_object()
        .ok_or_else(|| shape("the pod is not a JSON object"))?;
    let pick = |m: &Map<String, Value>, keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| m.get(*k).map(|v| ((*k).to_string(), v.clone())))
            .collect()
    };
    let mut out = Map::new();
    match root.get("metadata") {
        None => {}
        Some(Value::Object(m)) => {
            out.insert(
                "metadata".into(),
                Value::Object(pick(m, &["annotations", "labels"])),
            );
        }
        Some(Value::Null) => {
            out.insert("metadata".into(), Value::Null);
        }
        Some(_) => return Err(shape("pod.metadata is not an object")),
    }
    if let Some(spec) = root.get("spec") {
        let s = spec
            .as_object()
            .ok_or_else(|| shape("pod.spec is missing or not an object"))?;
        let mut ss = pick(s, &["schedulerName", "resources"]);
        for list in ["containers", "initContainers"] {
            match s.get(list) {
                None => {}
                Some(Value::Array(a)) => {
                    let items = a
                        .iter()
                        .map(|c| match c {
                            Value::Object(cm) => Value::Object(pick(cm, &["name", "resources"])),
                            other => other.clone(),
                        })
                        .collect();
                    ss.insert(list.into(), Value::Array(items));
                }
                // Kept as is: the builder reports the shape problem.
                Some(other) => {
                    ss.insert(list.into(), other.clone());
                }
            }
        }
        out.insert("spec".into(), Value::Object(ss));
    }
    Ok(Value::Object(out))
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
    pub(crate) annotations: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpecSkeleton {
    #[serde(default)]
    pub(crate) scheduler_name: Option<Value>,
    /// Pod-level requests and limits: kerf's container requests stay within them.
    #[serde(default)]
    pub(crate) resources: Option<Value>,
    #[serde(default, deserialize_with = "objects_only")]
    pub(crate) containers: Option<Vec<ContainerSkeleton>>,
    #[serde(default, deserialize_with = "objects_only")]
    pub(crate) init_containers: Option<Vec<ContainerSkeleton>>,
}

#[derive(Clone, Debug, serde::Deserialize)]
pub(crate) struct ContainerSkeleton {
    #[serde(default)]
    pub(crate) name: Option<Value>,
    #[serde(default)]
    pub(crate) resources: Option<Value>,
}

impl PodSkeleton {
    /// The same JSON [`pod_skeleton`] builds from the whole pod (null maps count as missing).
    pub fn to_value(&self) -> Value {
        self.clone().into_value()
    }

    /// [`Self::to_value`], moving the decoded parts instead of copying them (the webhook's path).
    pub fn into_value(self) -> Value {
        // Each map sized for what it can hold: inserting then never grows it.
        let mut out = Map::with_capacity(2);
        if let Some(m) = self.metadata {
            let mut mm = Map::with_capacity(2);
            if let Some(a) = m.annotations {
                mm.insert("annotations".into(), Value::Object(a));
            }
            if let Some(l) = m.labels {
                // In the map's (sorted) order, as serializing it would give.
                let l = l.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
                mm.insert("labels".into(), Value::Object(l));
            }
            out.insert("metadata".into(), Value::Object(mm));
        }
        if let Some(sp) = self.spec {
            let mut ss = Map::with_capacity(4);
            if let Some(n) = sp.scheduler_name {
                ss.insert("schedulerName".into(), n);
            }
            if let Some(r) = sp.resources {
                ss.insert("resources".into(), r);
            }
            let list = |cs: Vec<ContainerSkeleton>| {
                Value::Array(
                    cs.into_iter()
                        .map(|c| {
                            let mut cm = Map::with_capacity(2);
                            if let Some(n) = c.name {
                                cm.insert("name".into(), n);
                            }
                            if let Some(r) = c.resources {
                                cm.insert("resources".into(), r);
                            }
                            Value::Object(cm)
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
            out.insert("spec".into(), Value::Object(ss));
        }
        Value::Object(out)
    }
}

/// [`mutate_pod`] on a skeleton (from [`pod_skeleton`] or [`PodSkeleton::to_value`]).
pub fn mutate_skeleton(
    pod: &Value,
    state: &WorkloadState,
    kai: &KaiSettings,
) -> Result<Mutation, ShapeError> {
    let (desired, notes) = desired_pod(pod, state, kai)?;
    Ok(Mutation::from(pod, &desired, notes))
}

/// The pod as admitted, as the concerns read it.
struct Admitted<'a> {
    regular: Vec<(&'a str, &'a Value)>,
    init: Vec<(&'a str, &'a Value)>,
    annotations: StrObj<'a>,
    labels: StrObj<'a>,
    frac: Option<KaiFraction>,
    /// The pod already uses KAI's GPU sharing annotations.
    uses_kai: bool,
}

impl<'a> Admitted<'a> {
    fn read(pod: &'a Value) -> Result<Self, ShapeError> {
        let root = pod
            .as_object()
            .ok_or_else(|| shape("the pod is not a JSON object"))?;
        let meta = get_obj(root, "metadata", "pod")?;
        let annotations = string_map(meta, "annotations")?;
        let labels = string_map(meta, "labels")?;
        let spec = field(root, "spec")
            .and_then(Value::as_object)
            .ok_or_else(|| shape("pod.spec is missing or not an object"))?;
        let regular = containers(spec, "containers")?;
        let init = containers(spec, "initContainers")?;
        let first = regular.first().map(|(n, _)| *n);
        let uses_kai = NVIDIA_KAI
            .sharing_annotations()
            .iter()
            .any(|k| annotations.contains_key(k));
        Ok(Self {
            frac: current_fraction(annotations, first),
            regular,
            init,
            annotations,
            labels,
            uses_kai,
        })
    }

    /// Regular containers, then init containers: the engine sizes restartable init containers
    /// (sidecars) too, and KAI places a fraction on whichever container
    /// `gpu-fraction-container-name` names (docs/design/kai-admission.md#k2).
    fn containers(&self) -> impl Iterator<Item = (ContainerAt, &'a str, &'a Value)> + '_ {
        let regular = self.regular.iter().enumerate();
        let init = self.init.iter().enumerate();
        regular
            .map(|(i, (n, c))| (ContainerAt::Regular(i), *n, *c))
            .chain(init.map(|(i, (n, c))| (ContainerAt::Init(i), *n, *c)))
    }

    fn find(&self, name: &str) -> Option<(ContainerAt, &'a Value)> {
        self.containers()
            .find(|(_, n, _)| *n == name)
            .map(|(at, _, c)| (at, c))
    }

    fn holds(&self, name: &str, c: &Value) -> Holds {
        let whole = ["limits", "requests"]
            .iter()
            .any(|w| resource_value(c, w, NVIDIA_KAI.resource_name).is_some());
        if self.frac.as_ref().is_some_and(|f| f.container == name) {
            Holds::Fraction
        } else if whole {
            Holds::Whole
        } else {
            Holds::Nothing
        }
    }
}

/// What the concerns decided beyond the containers' resources.
#[derive(Default)]
struct Decided {
    notes: Vec<String>,
    changes: Changes,
    /// Annotations to set (`Some`) or remove (`None`).
    annotations: Vec<(&'static str, Option<String>)>,
    /// Labels to set.
    labels: Vec<(String, String)>,
}

/// The desired skeleton (a copy of `pod` with kerf's changes) and the notes on what was left
/// alone: each concern in turn, then the metadata they imply.
fn desired_pod(
    pod: &Value,
    state: &WorkloadState,
    kai: &KaiSettings,
) -> Result<(Value, Vec<String>), ShapeError> {
    let admitted = Admitted::read(pod)?;
    let mut desired = pod.clone();
    let mut decided = Decided::default();
    let has_fraction = match &state.gpu {
        Some(rec) => gpu_targets(&mut desired, &admitted, rec, state, &mut decided)?,
        None => admitted.frac.is_some(),
    };
    resource_requests(&mut desired, &admitted, state, &mut decided)?;
    pod_level_requests_kept(&mut desired, pod, &mut decided)?;
    let to_kai = scheduler_and_queue(
        &mut desired,
        &admitted,
        state,
        kai,
        has_fraction,
        &mut decided,
    )?;
    mps_with_the_fraction(&admitted, has_fraction, to_kai, &mut decided);
    metadata(&mut desired, pod, &admitted, state, &mut decided)?;
    Ok((desired, decided.notes))
}

/// The GPU concern (docs/design/kai-admission.md#k2–#k4, #k6, #k10): each recommended
/// container's size in the shape KAI accepts, written into `desired`; returns whether the
/// patched pod holds a fraction.
fn gpu_targets(
    desired: &mut Value,
    pod: &Admitted<'_>,
    rec: &crate::model::GpuRecommendation,
    state: &WorkloadState,
    decided: &mut Decided,
) -> Result<bool, ShapeError> {
    if let Some(what) = NVIDIA_KAI.shares_by_memory(&pod.annotations) {
        decided.notes.push(format!(
            "pod shares its GPU by memory ({what}): GPU size left as is, kerf sizes gpu-fraction pods only"
        ));
        return Ok(pod.frac.is_some());
    }
    let (slots, bases) = planned_gpu_targets(pod, rec, state, &mut decided.notes);
    let shape = kai::one_fraction_and_no_whole_gpus_beside_it(&slots, |i, whole| {
        allowed(whole, bases[i].1, state, slots[i].name)
    });
    let mut has_fraction = false;
    for (i, slot) in slots.iter().enumerate() {
        let Some(target) = shape.targets[i] else {
            has_fraction |= slot.holds == Holds::Fraction;
            continue;
        };
        has_fraction |= matches!(target, GpuTarget::Fraction { .. });
        let c = container_mut(desired, bases[i].0)?;
        let changed = write_gpu_target(c, bases[i].0, slot, target, pod, decided)?;
        if changed {
            decided.changes.note(slot.name, "gpu", target.describe());
        }
    }
    if let Some(why) = shape.why {
        decided.changes.top.insert("gpuShape", why.clone());
        decided.notes.push(why);
    }
    if !has_fraction && pod.frac.is_some() {
        // The fractional container became whole: the fraction annotations go.
        for k in NVIDIA_KAI.fraction_annotations() {
            decided.annotations.push((k, None));
        }
    }
    Ok(has_fraction)
}

/// Each container's planned size (K1–K3, K6), before KAI's shape rule: its slot and its base
/// (the template's allocation, else the pod's), with notes on what is not applied.
#[allow(clippy::type_complexity)]
fn planned_gpu_targets<'a>(
    pod: &Admitted<'a>,
    rec: &crate::model::GpuRecommendation,
    state: &WorkloadState,
    notes: &mut Vec<String>,
) -> (Vec<kai::Slot<'a>>, Vec<(ContainerAt, Option<f64>)>) {
    let mut slots = Vec::new();
    let mut bases = Vec::new();
    for (at, name, c) in pod.containers() {
        let base = state
            .template_gpu
            .get(name)
            .copied()
            .or_else(|| current_units(name, c, pod.frac.as_ref()));
        let target = rec.containers.get(name).and_then(|&r| {
            let Some(target) = GpuTarget::from_units(r) else {
                notes.push(format!(
                    "container {name}: recommendation {r} is not a usable GPU size"
                ));
                return None;
            };
            if !allowed(target, base, state, name) {
                let which = if target.units() > base.unwrap_or(0.0) {
                    "upsize"
                } else {
                    "downsize"
                };
                notes.push(format!(
                    "container {name}: {which} not allowed by the automation strategy"
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
    for c in rec.containers.keys().filter(|c| pod.find(c).is_none()) {
        notes.push(format!("container {c}: not in the pod"));
    }
    (slots, bases)
}

/// Writes one container's GPU target (K2, K3); returns whether the container changed.
fn write_gpu_target(
    c: &mut Map<String, Value>,
    at: ContainerAt,
    slot: &kai::Slot<'_>,
    target: GpuTarget,
    pod: &Admitted<'_>,
    decided: &mut Decided,
) -> Result<bool, ShapeError> {
    let mut changed = false;
    match target {
        GpuTarget::Fraction {
            hundredths,
            devices,
        } => {
            for which in ["requests", "limits"] {
                if let Some(m) = field_mut(c, "resources")
                    .and_then(|r| member_mut(r, which))
                    .and_then(Value::as_object_mut)
                {
                    changed |= m.remove(NVIDIA_KAI.resource_name).is_some();
                }
            }
            changed |= !pod
                .frac
                .as_ref()
                .is_some_and(|f| f.is(slot.name, hundredths, devices));
            let a = &mut decided.annotations;
            a.push((
                NVIDIA_KAI.fraction_annotation,
                Some(fmt_hundredths(hundredths)),
            ));
            a.push((
                NVIDIA_KAI.fraction_devices_annotation,
                (devices > 1).then(|| devices.to_string()),
            ));
            a.push((
                NVIDIA_KAI.fraction_container_annotation,
                (at != ContainerAt::Regular(0)).then(|| slot.name.to_string()),
            ));
        }
        GpuTarget::Whole(n) => {
            let same = |v: &Value| gpus_of(v) == Some(f64::from(n));
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
    Ok(changed)
}

/// The CPU/memory concern (docs/design/kai-admission.md#k10): requests from an auto-patch
/// CPU/memory policy, with the limits the change carries (`RequestsAndLimits`), else capped at
/// the container's limit as admitted.
fn resource_requests(
    desired: &mut Value,
    pod: &Admitted<'_>,
    state: &WorkloadState,
    decided: &mut Decided,
) -> Result<(), ShapeError> {
    for (name, req) in &state.resources {
        let Some((at, admitted)) = pod.find(name) else {
            decided
                .notes
                .push(format!("container {name}: not in the pod"));
            continue;
        };
        let c = container_mut(desired, at)?;
        // The limits that go with the requests (docs/policies.md#limits): where the change
        // carries one, the pod gets it; elsewhere the request is capped at the pod's limit.
        let limits = state.limits.get(name.as_str()).cloned().unwrap_or_default();
        // A resource: its name, how a quantity of it is read and written.
        type Resource = (&'static str, fn(&Value) -> Option<i64>, fn(i64) -> String);
        let mut one = |want: i64,
                       carried: Option<i64>,
                       (resource, of, fmt): Resource|
         -> Result<(), ShapeError> {
            let pod_limit = resource_value(admitted, "limits", resource).and_then(of);
            let (value, limit, cap) = crate::limits::pod_resource_value(want, carried, pod_limit);
            if let Some(l) = limit {
                let same = |v: &Value| of(v) == Some(l);
                set_str(resources_mut(c, "limits")?, resource, fmt(l), same);
            }
            if let Some(l) = cap {
                decided.notes.push(format!(
                    "container {name}: {resource} request capped at its limit {}",
                    fmt(l)
                ));
            }
            let same = |v: &Value| of(v) == Some(value);
            if set_str(resources_mut(c, "requests")?, resource, fmt(value), same) {
                decided.changes.note(name, resource, fmt(value));
            }
            Ok(())
        };
        if let Some(m) = req.cpu_millis.filter(|m| *m > 0) {
            one(m, limits.cpu_millis, ("cpu", cpu_millis_of, fmt_cpu))?;
        }
        if let Some(b) = req.memory_bytes.filter(|b| *b > 0) {
            one(
                b,
                limits.memory_bytes,
                ("memory", memory_bytes_of, fmt_memory),
            )?;
        }
    }
    Ok(())
}

/// A pod's pod-level request of `resource` (`spec.resources`, Kubernetes' PodLevelResources):
/// its request, else its limit (the API server defaults the request to the limit).
fn pod_level_request(pod: &Value, resource: &str) -> Option<i64> {
    pod_level_value(pod, "requests", resource)
        .or_else(|| pod_level_value(pod, "limits", resource))
        .and_then(|v| guarded_amount(resource, v))
}

/// The pod-level `spec.resources.<which>.<resource>`: it reads as a container's `resources`.
fn pod_level_value<'a>(pod: &'a Value, which: &str, resource: &str) -> Option<&'a Value> {
    resource_value(member(pod, "spec")?, which, resource)
}

/// A quantity of a resource the pod-level guard checks: `cpu` in millicores, `memory` in bytes.
fn guarded_amount(resource: &str, v: &Value) -> Option<i64> {
    match resource {
        "cpu" => cpu_millis_of(v),
        _ => memory_bytes_of(v),
    }
}

/// The containers' aggregate request of `resource` as the API server counts it against the
/// pod-level one (`AggregateContainerRequests`, kubernetes
/// `staging/src/k8s.io/component-helpers/resource/helpers.go`): the regular containers' and
/// sidecars' sum, or an init container's with the sidecars started before it, whichever is
/// more.
fn aggregate_container_requests(pod: &Value, resource: &str) -> i64 {
    let request = |c: &Value| {
        resource_value(c, "requests", resource)
            .and_then(|v| guarded_amount(resource, v))
            .unwrap_or(0)
    };
    let mut sum: i64 = spec_list(pod, "containers").iter().map(request).sum();
    let mut init_peak = 0;
    let mut sidecars = 0;
    for c in spec_list(pod, "initContainers") {
        if member(c, "restartPolicy").and_then(Value::as_str) == Some("Always") {
            sidecars += request(c);
            sum += request(c);
        } else {
            init_peak = init_peak.max(sidecars + request(c));
        }
    }
    sum.max(init_peak)
}

/// The pod-level guard: where the containers' requests kerf set would exceed the pod's
/// pod-level request of a resource, the API server refuses the pod (422, "must be greater than
/// or equal to aggregate container requests"); kerf then leaves that resource's container
/// requests as the pod had them, and says why.
fn pod_level_requests_kept(
    desired: &mut Value,
    pod: &Value,
    decided: &mut Decided,
) -> Result<(), ShapeError> {
    for resource in ["cpu", "memory"] {
        if !pod_level_exceeded(desired, pod, resource) {
            continue;
        }
        for list in ["containers", "initContainers"] {
            for (i, c) in spec_list(pod, list).iter().enumerate() {
                let at = match list {
                    "containers" => ContainerAt::Regular(i),
                    _ => ContainerAt::Init(i),
                };
                let container = container_mut(desired, at)?;
                // The limit kerf scales with the request goes back with it.
                for which in ["requests", "limits"] {
                    let before = resource_value(c, which, resource).cloned();
                    restore_request(container, which, resource, before);
                }
            }
        }
        for changed in decided.changes.containers.values_mut() {
            changed.remove(resource);
        }
        decided.changes.containers.retain(|_, c| !c.is_empty());
        decided.notes.push(format!(
            "{resource} requests and limits not set: the containers would exceed the pod-level \
             {resource} (spec.resources), which the API server refuses"
        ));
    }
    Ok(())
}

/// Whether kerf's container values of `resource` in `desired` break the pod's pod-level ones
/// where the pod's own did not: the containers' aggregate request above the pod-level request,
/// or a container's limit above the pod-level limit (`validatePodResourceConsistency`).
fn pod_level_exceeded(desired: &Value, pod: &Value, resource: &str) -> bool {
    let requests_over = pod_level_request(pod, resource).is_some_and(|p| {
        let wanted = aggregate_container_requests(desired, resource);
        wanted > p && wanted > aggregate_container_requests(pod, resource)
    });
    let pod_limit =
        pod_level_value(pod, "limits", resource).and_then(|v| guarded_amount(resource, v));
    let limit_over = pod_limit.is_some_and(|p| {
        ["containers", "initContainers"].iter().any(|list| {
            spec_list(desired, list)
                .iter()
                .filter_map(|c| resource_value(c, "limits", resource))
                .filter_map(|v| guarded_amount(resource, v))
                .any(|l| l > p)
        })
    });
    requests_over || limit_over
}

/// A container's request (or limit: `which`) of `resource` put back as admitted (`None`: it had
/// none), leaving no empty map behind.
fn restore_request(c: &mut Map<String, Value>, which: &str, resource: &str, before: Option<Value>) {
    let Some(Value::Object(resources)) = field_mut(c, "resources") else {
        return;
    };
    if let Some(Value::Object(values)) = field_mut(resources, which) {
        match before {
            Some(v) => {
                values.insert(resource.into(), v);
            }
            None => {
                values.remove(resource);
            }
        }
        if values.is_empty() {
            resources.remove(which);
        }
    }
    if resources.is_empty() {
        c.remove("resources");
    }
}

/// The scheduler and queue concern (docs/design/kai-admission.md#k5); returns whether kerf
/// sends the pod to KAI's scheduler in this admission.
fn scheduler_and_queue(
    desired: &mut Value,
    pod: &Admitted<'_>,
    state: &WorkloadState,
    kai: &KaiSettings,
    has_fraction: bool,
    decided: &mut Decided,
) -> Result<bool, ShapeError> {
    if state.gpu.is_none() || !(state.strategy.override_kai() || pod.uses_kai || has_fraction) {
        return Ok(false);
    }
    let root = desired
        .as_object_mut()
        .ok_or_else(|| shape("the pod is not a JSON object"))?;
    let spec = child_obj(root, "spec", "pod")?;
    let mut to_kai = false;
    if field(spec, "schedulerName").and_then(Value::as_str) != Some(kai.scheduler_name.as_str()) {
        spec.insert(
            "schedulerName".into(),
            Value::String(kai.scheduler_name.clone()),
        );
        decided
            .changes
            .top
            .insert("schedulerName", kai.scheduler_name.clone());
        to_kai = true;
    }
    // KAI's pod grouper reads the top owner's queue label before the pod's: with one on the
    // workload, a label on the pod would be ignored.
    let key = kai.queue_label_key.as_str();
    let queue = state.strategy.kai();
    let has_queue = pod.labels.contains_key(key);
    if state.owner_queue.is_none()
        && (!has_queue || queue.set_queue_when_specified)
        && pod.labels.get(key) != Some(queue.queue.as_str())
    {
        decided.labels.push((key.to_string(), queue.queue.clone()));
        decided.changes.top.insert("queue", queue.queue);
    }
    Ok(to_kai)
}

/// KAI refuses `mps: "true"` without a fraction (docs/design/kai-admission.md#k10): it goes
/// with the fraction kerf removed, or when kerf sends a pod without one to KAI.
fn mps_with_the_fraction(
    pod: &Admitted<'_>,
    has_fraction: bool,
    to_kai: bool,
    decided: &mut Decided,
) {
    if !has_fraction
        && (pod.frac.is_some() || to_kai)
        && pod.annotations.get(NVIDIA_KAI.mps_annotation) == Some("true")
    {
        decided.annotations.push((NVIDIA_KAI.mps_annotation, None));
        decided.changes.top.insert("mps", "removed".into());
        decided
            .notes
            .push("mps removed: KAI accepts MPS only with a GPU fraction".into());
    }
}

/// The metadata concern: the labels and annotations the others decided, then the `mutated`
/// record of what changed (docs/design/kai-admission.md#k10).
fn metadata(
    desired: &mut Value,
    original: &Value,
    pod: &Admitted<'_>,
    state: &WorkloadState,
    decided: &mut Decided,
) -> Result<(), ShapeError> {
    let ann_changed = decided
        .annotations
        .iter()
        .any(|(k, v)| !same_fraction_text(k, pod.annotations.get(k), v.as_deref()));
    let changes = &decided.changes;
    if ann_changed
        || !decided.labels.is_empty()
        || !changes.containers.is_empty()
        || !changes.top.is_empty()
    {
        let meta = metadata_mut(desired)?;
        if !decided.labels.is_empty() {
            let l = child_obj(meta, "labels", "metadata")?;
            for (k, v) in decided.labels.drain(..) {
                l.insert(k, Value::String(v));
            }
        }
        let a = child_obj(meta, "annotations", "metadata")?;
        for (k, v) in decided.annotations.drain(..) {
            match v {
                Some(v)
                    if !same_fraction_text(k, field(a, k).and_then(Value::as_str), Some(&v)) =>
                {
                    a.insert(k.to_string(), Value::String(v));
                }
                // Only a key the pod has: removing one hashes it.
                None if field(a, k).is_some() => {
                    a.remove(k);
                }
                Some(_) | None => {}
            }
        }
    }
    // A pod kept as it is because of KAI's rules still records why (once: a reinvocation
    // finds the record).
    let shape_only = decided.changes.top.contains_key("gpuShape")
        && !pod.annotations.contains_key(ANNOTATION_MUTATED);
    if shape_only || desired != original {
        let summary = summary_text(state.policy.as_ref(), &decided.changes);
        let a = child_obj(metadata_mut(desired)?, "annotations", "metadata")?;
        a.insert(ANNOTATION_MUTATED.into(), Value::String(summary));
    }
    Ok(())
}

/// The `mutated` annotation: compact JSON `{"policy":…,"containers":{c:{what:…}},` then the
/// pod-level changes (`gpuShape`, `mps`, `queue`, `schedulerName`) in key order, each part only
/// when present.
fn summary_text(policy: Option<&PolicyId>, changes: &Changes) -> String {
    #[derive(serde::Serialize)]
    struct Summary<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
        #[serde(skip_serializing_if = "BTreeMap::is_empty")]
        containers: &'a BTreeMap<String, BTreeMap<&'static str, String>>,
        #[serde(flatten)]
        top: &'a BTreeMap<&'static str, String>,
    }
    let summary = Summary {
        policy: policy.map(ToString::to_string),
        containers: &changes.containers,
        top: &changes.top,
    };
    // String keys and values only: serializing cannot fail.
    serde_json::to_string(&summary).unwrap_or_default()
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
    let root = hpa
        .as_object()
        .ok_or_else(|| shape("the hpa is not a JSON object"))?;
    let meta = get_obj(root, "metadata", "hpa")?;
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let unchanged = |note: String| Ok(Mutation::unchanged(vec![note]));
    if name != coordinated.hpa_name {
        return unchanged(format!(
            "HPA {name:?} is not the coordinated HPA {:?}",
            coordinated.hpa_name
        ));
    }
    let spec = root
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| shape("hpa.spec is missing or not an object"))?;
    let metrics: Option<Vec<MetricSpec>> = match spec.get("metrics") {
        None | Some(Value::Null) => None,
        Some(m) => Some(
            serde_json::from_value(m.clone())
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
    let mut desired = hpa.clone();
    let spec = desired
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| shape("hpa.spec is missing or not an object"))?;
    if listed {
        let target = spec
            .get_mut("metrics")
            .and_then(|m| m.get_mut(0))
            .and_then(|m| m.get_mut("resource"))
            .and_then(|r| r.get_mut("target"))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| shape("hpa.spec.metrics[0].resource.target is not an object"))?;
        target.insert(
            "averageUtilization".into(),
            Value::from(coordinated.target_after),
        );
    } else {
        spec.insert(
            "metrics".into(),
            utilization_metrics(resource.as_str(), coordinated.target_after),
        );
    }
    Ok(Mutation::from(hpa, &desired, Vec::new()))
}

#[cfg(test)]
mod tests;
