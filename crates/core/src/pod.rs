//! Slim mirrors of the k8s-openapi pod types: the same field names and shapes, only the fields
//! kerf reads. The full types are mostly empty fields, and a snapshot holds two or more per pod
//! and per workload template: memory (figures in docs/performance.md, "Slim pod types").
//!
//! Metadata too: [`Meta`] keeps what kerf reads, in [`Strings`], instead of a whole
//! `ObjectMeta` with a `BTreeMap` per label or annotation map.
//!
//! They deserialize from the same JSON/YAML as the Kubernetes types (unknown fields are
//! ignored), and convert from them with `From`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};

use crate::model::Name;
use kerf_support::small_map::SmallMap;

/// Labels or annotations as kerf holds them: one sorted vector (same order as a `BTreeMap`).
pub type Strings = SmallMap<String, String>;

/// Read access to labels or annotations by key, whichever map holds them: kerf's objects hold
/// [`Strings`], the webhook's decoder a `BTreeMap`. The readers of a pod's labels and
/// annotations (owner, allocation, selection) take either.
pub trait StrMap {
    fn get_str(&self, key: &str) -> Option<&str>;
    /// Whether a key satisfies `f` (annotation families named by a prefix).
    fn any_key(&self, f: &dyn Fn(&str) -> bool) -> bool;
}

impl StrMap for Strings {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
    fn any_key(&self, f: &dyn Fn(&str) -> bool) -> bool {
        self.keys().any(|k| f(k))
    }
}

impl StrMap for BTreeMap<String, String> {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
    fn any_key(&self, f: &dyn Fn(&str) -> bool) -> bool {
        self.keys().any(|k| f(k))
    }
}

/// An owner reference: what owner resolution reads (`core::owner`), without the uid.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    pub api_version: Name,
    pub kind: Name,
    pub name: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
}

/// The metadata kerf reads of a pod or a pod template (same field names as `ObjectMeta`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Strings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Strings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Vec<OwnerRef>>,
    /// Boxed: set only on a terminating pod, and 16 bytes less put the held pod in a smaller
    /// allocation class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Box<Time>>,
}

/// A container's `resources`: its requests and limits (no claims), as small maps. A
/// `BTreeMap` per list cost a 544-byte node even for one entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<SmallMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<SmallMap<String, Quantity>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: Name,
    /// Boxed: many containers have none, and a container is held for every pod and template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<Resources>>,
    /// `Always` on an init container makes it a sidecar (restartable init container). Boxed:
    /// set only on sidecars, and 16 bytes less on every container held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<Box<Name>>,
    /// How the kubelet applies an in-place resize of each resource (none: `NotRequired`). A
    /// boxed slice: a container is held for every pod and template, and most set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize_policy: Option<Box<[ContainerResizePolicy]>>,
}

impl Container {
    /// An init container with `restartPolicy: Always`: a sidecar, running beside the regular
    /// containers.
    pub fn is_sidecar(&self) -> bool {
        self.restart_policy
            .as_deref()
            .is_some_and(|p| p == "Always")
    }
}

/// A container's `resizePolicy` entry: `restartPolicy` (`NotRequired`, `RestartContainer`) of
/// one resource (`cpu`, `memory`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerResizePolicy {
    pub resource_name: Name,
    pub restart_policy: Name,
}

/// A pod condition, of the kinds kerf reads: the kubelet's `PodResizePending`,
/// `PodResizeInProgress` and `Ready` (the others are dropped as they are read: memory).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: Name,
    pub status: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// The pod condition types of an in-place resize (Kubernetes `PodResizePending`,
/// `PodResizeInProgress`, k8s.io/api core/v1 types.go).
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// `Ready`: a workload whose pods are replaced by eviction waits for all of them to be ready.
pub const POD_READY: &str = "Ready";

fn is_kept_condition(type_: &str) -> bool {
    type_ == POD_RESIZE_PENDING || type_ == POD_RESIZE_IN_PROGRESS || type_ == POD_READY
}

/// The resize conditions of a pod's `status.conditions`, read straight from the JSON.
fn kept_conditions<'de, D>(d: D) -> Result<Option<Box<[PodCondition]>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let all: Option<Vec<PodCondition>> = Option::deserialize(d)?;
    let kept: Vec<PodCondition> = all
        .into_iter()
        .flatten()
        .filter(|c| is_kept_condition(&c.type_))
        .collect();
    Ok((!kept.is_empty()).then(|| kept.into_boxed_slice()))
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    /// Pod-level requests and limits (`PodLevelResources`): the HPA divides usage by these
    /// when they are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<Resources>>,
    /// `spec.os` (boxed: most pods set none): a Windows pod cannot be resized in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<Box<PodOs>>,
}

/// A pod's `spec.os`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodOs {
    #[serde(default)]
    pub name: String,
}

/// The metadata kerf reads of a pod template: its labels and annotations (a template's name,
/// namespace and owners are never set; [`Meta`]'s fields for them were ≈100 bytes per workload).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Strings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Strings>,
}

impl From<ObjectMeta> for TemplateMeta {
    fn from(m: ObjectMeta) -> Self {
        TemplateMeta {
            labels: strings(m.labels),
            annotations: strings(m.annotations),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
}

/// Of a termination only what OOM detection reads (the full type carries a message of up to
/// 4 KiB per container).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ContainerState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_state: Option<ContainerState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    /// Only `Ready` and the in-place resize conditions ([`POD_RESIZE_PENDING`], [`POD_RESIZE_IN_PROGRESS`]).
    /// A boxed slice: a status is held for every pod.
    #[serde(
        default,
        deserialize_with = "kept_conditions",
        skip_serializing_if = "Option::is_none"
    )]
    pub conditions: Option<Box<[PodCondition]>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

static NO_SPEC: PodSpec = PodSpec {
    containers: Vec::new(),
    init_containers: None,
    resources: None,
    os: None,
};
static NO_STRINGS: Strings = SmallMap::new();

impl PodTemplateSpec {
    /// The pod spec, or an empty one (borrowed: evaluation reads it for every workload).
    pub fn pod_spec(&self) -> &PodSpec {
        self.spec.as_ref().unwrap_or(&NO_SPEC)
    }

    pub fn labels(&self) -> &Strings {
        self.metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or(&NO_STRINGS)
    }

    pub fn annotations(&self) -> &Strings {
        self.metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .unwrap_or(&NO_STRINGS)
    }
}

impl From<OwnerReference> for OwnerRef {
    fn from(o: OwnerReference) -> Self {
        OwnerRef {
            api_version: o.api_version.into(),
            kind: o.kind.into(),
            name: o.name.into(),
            controller: o.controller,
        }
    }
}

/// Labels or annotations, kept without growth slack (they are held for every object).
pub fn strings(map: Option<BTreeMap<String, String>>) -> Option<Strings> {
    map.map(|m| m.into_iter().collect())
}

impl From<ObjectMeta> for Meta {
    fn from(m: ObjectMeta) -> Self {
        Meta {
            name: m.name.map(Name::from),
            namespace: m.namespace.map(Name::from),
            labels: strings(m.labels),
            annotations: strings(m.annotations),
            owner_references: m
                .owner_references
                .map(|refs| refs.into_iter().map(OwnerRef::from).collect()),
            deletion_timestamp: m.deletion_timestamp.map(Box::new),
        }
    }
}

impl From<k8s::ResourceRequirements> for Resources {
    fn from(r: k8s::ResourceRequirements) -> Self {
        Resources {
            limits: r.limits.map(|m| m.into_iter().collect()),
            requests: r.requests.map(|m| m.into_iter().collect()),
        }
    }
}

impl From<k8s::Container> for Container {
    fn from(c: k8s::Container) -> Self {
        Container {
            name: c.name.into(),
            resources: c.resources.map(|r| Box::new(r.into())),
            restart_policy: c.restart_policy.map(|p| Box::new(Name::from(p))),
            resize_policy: c.resize_policy.map(|list| {
                list.into_iter()
                    .map(|p| ContainerResizePolicy {
                        resource_name: p.resource_name.into(),
                        restart_policy: p.restart_policy.into(),
                    })
                    .collect()
            }),
        }
    }
}

impl From<k8s::PodSpec> for PodSpec {
    fn from(s: k8s::PodSpec) -> Self {
        PodSpec {
            containers: s.containers.into_iter().map(Container::from).collect(),
            init_containers: s
                .init_containers
                .map(|cs| cs.into_iter().map(Container::from).collect()),
            resources: s.resources.map(|r| Box::new(r.into())),
            os: s.os.map(|os| Box::new(PodOs { name: os.name })),
        }
    }
}

impl From<k8s::PodTemplateSpec> for PodTemplateSpec {
    fn from(t: k8s::PodTemplateSpec) -> Self {
        PodTemplateSpec {
            metadata: t.metadata.map(TemplateMeta::from),
            spec: t.spec.map(PodSpec::from),
        }
    }
}

impl From<k8s::ContainerState> for ContainerState {
    fn from(s: k8s::ContainerState) -> Self {
        ContainerState {
            terminated: s.terminated.map(|t| ContainerStateTerminated {
                reason: t.reason.map(Name::from),
                finished_at: t.finished_at,
            }),
        }
    }
}

impl From<k8s::ContainerStatus> for ContainerStatus {
    fn from(s: k8s::ContainerStatus) -> Self {
        ContainerStatus {
            name: s.name.into(),
            state: s.state.map(ContainerState::from),
            last_state: s.last_state.map(ContainerState::from),
        }
    }
}

impl From<k8s::PodStatus> for PodStatus {
    fn from(s: k8s::PodStatus) -> Self {
        let statuses = |list: Option<Vec<k8s::ContainerStatus>>| {
            list.map(|l| l.into_iter().map(ContainerStatus::from).collect())
        };
        PodStatus {
            phase: s.phase.map(Name::from),
            start_time: s.start_time,
            container_statuses: statuses(s.container_statuses),
            init_container_statuses: statuses(s.init_container_statuses),
            conditions: s.conditions.and_then(|list| {
                let kept: Vec<PodCondition> = list
                    .into_iter()
                    .filter(|c| is_kept_condition(&c.type_))
                    .map(|c| PodCondition {
                        type_: c.type_.into(),
                        status: c.status.into(),
                        reason: c.reason.map(Name::from),
                        message: c.message,
                        last_transition_time: c.last_transition_time,
                    })
                    .collect();
                (!kept.is_empty()).then(|| kept.into_boxed_slice())
            }),
        }
    }
}

impl From<k8s::Pod> for Pod {
    fn from(p: k8s::Pod) -> Self {
        Pod {
            metadata: p.metadata.into(),
            spec: p.spec.map(PodSpec::from),
            status: p.status.map(PodStatus::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_json() -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "annotations": {"gpu-fraction": "0.5"}},
            "spec": {
                "containers": [{
                    "name": "inference", "image": "x", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
                }],
                "initContainers": [{"name": "proxy", "image": "y", "restartPolicy": "Always"}],
                "volumes": [{"name": "v", "emptyDir": {}}]
            },
            "status": {
                "phase": "Running", "startTime": "2026-01-01T00:00:00Z", "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "PodResizePending", "status": "True", "reason": "Deferred",
                     "message": "Node didn't have enough resource: cpu",
                     "lastTransitionTime": "2026-01-01T00:20:00Z"}
                ],
                "containerStatuses": [{
                    "name": "inference", "image": "x", "imageID": "", "ready": true, "restartCount": 1,
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                 "finishedAt": "2026-01-01T00:10:00Z"}}
                }]
            }
        })
    }

    #[test]
    fn slim_pod_from_json_equals_slim_pod_from_the_kubernetes_type() {
        let direct: Pod = serde_json::from_value(pod_json()).unwrap();
        let full: k8s::Pod = serde_json::from_value(pod_json()).unwrap();
        assert_eq!(direct, Pod::from(full));
        let spec = direct.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].name, "inference");
        assert!(spec.containers[0].resources.is_some());
        assert_eq!(
            spec.init_containers.as_ref().unwrap()[0]
                .restart_policy
                .as_deref()
                .map(Name::as_str),
            Some("Always")
        );
        let status = direct.status.as_ref().unwrap();
        let terminated = status.container_statuses.as_ref().unwrap()[0]
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .unwrap();
        assert_eq!(terminated.reason.as_deref(), Some("OOMKilled"));
        assert!(status.start_time.is_some());
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(
            conditions.len(),
            2,
            "only Ready and the resize conditions are kept"
        );
        assert_eq!(conditions[1].reason.as_deref(), Some("Deferred"));
    }

    #[test]
    fn slim_container_is_a_small_fraction_of_the_kubernetes_container() {
        // The reason these types exist; fails if they grow back towards the full types.
        assert!(std::mem::size_of::<Container>() * 8 < std::mem::size_of::<k8s::Container>());
        assert!(std::mem::size_of::<Pod>() * 2 < std::mem::size_of::<k8s::Pod>());
    }
}
