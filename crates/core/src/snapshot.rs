//! A consistent view of everything one evaluation needs, built either from the kube reader's
//! indexes or from a directory of manifests. Plain data: the pure core reads only this.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::managed_fields::{FieldManager, project};
use crate::model::{Name, PolicyId, WorkloadKey};
use crate::pod::{Pod, PodTemplateSpec, Strings, strings};
use crate::selection::Candidate;
use kerf_api::{
    GlobalConfigurationSpec, GpuReactivePolicySpec, PolicyEvaluationSpec, PolicyStatus, PolicyType,
    RightsizingPolicySpec, StrategyView, WorkloadKind,
};

/// A policy of either scope, normalized to its family's spec type.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy<S> {
    pub id: PolicyId,
    pub policy_type: PolicyType,
    pub creation: Option<Timestamp>,
    pub generation: Option<i64>,
    pub spec: S,
    pub status: Option<PolicyStatus>,
}

/// A GPU reactive policy of either kind.
pub type GpuPolicy = Policy<GpuReactivePolicySpec>;
/// A CPU/memory rightsizing policy of either kind.
pub type RsPolicy = Policy<RightsizingPolicySpec>;

/// What policy selection reads of a policy (`core::selection`), one reader for every caller.
macro_rules! policy_candidate {
    ($spec:ty) => {
        impl Policy<$spec> {
            pub fn candidate(&self) -> Candidate<'_> {
                Candidate {
                    id: &self.id,
                    policy_type: self.policy_type,
                    scope: &self.spec.scope,
                    weight: self.spec.weight,
                    creation: self.creation,
                }
            }
        }
    };
}
policy_candidate!(GpuReactivePolicySpec);
policy_candidate!(RightsizingPolicySpec);

impl<S> Policy<S> {
    /// From the policy object's metadata (a cluster policy's carries no namespace).
    pub fn from_object(
        meta: &ObjectMeta,
        policy_type: PolicyType,
        spec: S,
        status: Option<PolicyStatus>,
    ) -> Self {
        Policy {
            id: PolicyId {
                kind: policy_type.as_str().into(),
                namespace: meta.namespace.as_deref().map(Name::from),
                name: meta.name.as_deref().unwrap_or_default().into(),
            },
            policy_type,
            creation: meta.creation_timestamp.as_ref().map(|t| t.0),
            generation: meta.generation,
            spec,
            status,
        }
    }
}

/// A workload (top owner) with just what evaluation and the writer need.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub key: WorkloadKey,
    pub uid: Option<String>,
    pub labels: Strings,
    pub annotations: Strings,
    /// For CronJobs: the job template's pod template.
    pub template: PodTemplateSpec,
    pub replicas: Option<i32>,
    /// Who owns the fields kerf sets, from `managedFields` (docs/gitops.md).
    pub field_managers: Vec<FieldManager>,
    /// Where it sits among its owners (docs/workloads.md).
    pub ownership: Ownership,
}

/// A workload among its owners (docs/workloads.md).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ownership {
    /// The object's own controller reference, when it has one (boxed: most have none).
    pub controller: Option<Box<crate::owner::Link>>,
    /// A Deployment or StatefulSet controlled by an object kerf does not know: that controller
    /// owns the template, kerf never writes it.
    pub owned: bool,
    /// Its pods' owner chain, topmost first, for a workload whose pods sit below other objects
    /// (an InferenceService's Deployment and ReplicaSet); empty otherwise.
    pub chain: Vec<crate::owner::Link>,
    /// A RayService whose change KubeRay rolls to a new cluster ([`zero_downtime_upgrade`]):
    /// kerf writes it to `spec.rayClusterConfig`.
    pub ray_cluster_config: bool,
    /// A Rollout's `spec.workloadRef` to a Deployment ([`workload_ref_deployment`]): that
    /// Deployment's name. Argo reads the pod template from it, and kerf writes it there.
    pub template_ref: Option<String>,
    /// The Deployment [`Ownership::template_ref`] names is in the snapshot: the workload's
    /// template is that Deployment's (`core::grouping::resolve_workload_refs`).
    pub template_ref_found: bool,
}

/// The Deployment a Rollout takes its pod template from (Argo's `rollout/templateref.go`:
/// `spec.workloadRef` of kind `Deployment` in group `apps`): its name. `object`: the Rollout
/// whole. A reference to another kind (a ReplicaSet, a PodTemplate) is not followed.
pub fn workload_ref_deployment(object: &serde_json::Value) -> Option<String> {
    let r = object.pointer("/spec/workloadRef")?;
    let field = |f: &str| r.get(f).and_then(serde_json::Value::as_str);
    let group = field("apiVersion").map(kerf_api::common::api_group);
    (field("kind") == Some("Deployment") && group == Some("apps"))
        .then(|| field("name").map(str::to_string))
        .flatten()
        .filter(|n| !n.is_empty())
}

/// Whether KubeRay prepares a new cluster when a RayService's `spec.rayClusterConfig` changes
/// (`rayservice_controller.go`, `shouldPrepareNewCluster` → `isZeroDowntimeUpgradeEnabled`):
/// unless `spec.upgradeStrategy.type` is `None`. (The operator's `ENABLE_ZERO_DOWNTIME=false`
/// turns it off too, which kerf cannot see.) `object`: the RayService whole.
pub fn zero_downtime_upgrade(object: &serde_json::Value) -> bool {
    object
        .pointer("/spec/rayClusterConfig")
        .is_some_and(serde_json::Value::is_object)
        && object
            .pointer("/spec/upgradeStrategy/type")
            .and_then(serde_json::Value::as_str)
            != Some("None")
}

impl Workload {
    /// How kerf applies a change to this workload: through its template, or (a kind whose
    /// template kerf does not write, a template another controller owns) never through it.
    pub fn template_writable(&self) -> bool {
        self.key.kind.template_writable() && !self.ownership.owned
    }

    /// A RayService whose change is written to `spec.rayClusterConfig` (KubeRay rolls it).
    pub fn writes_ray_cluster_config(&self) -> bool {
        self.key.kind == WorkloadKind::RayService && self.ownership.ray_cluster_config
    }

    /// Where kerf writes this workload's CPU/memory change: the Deployment a workload-reference
    /// Rollout takes its template from, else the workload itself.
    pub fn template_write_key(&self) -> WorkloadKey {
        match &self.ownership.template_ref {
            Some(name) if self.key.kind == WorkloadKind::Rollout => WorkloadKey::new(
                self.key.namespace.clone(),
                WorkloadKind::Deployment,
                name.as_str(),
            ),
            _ => self.key.clone(),
        }
    }
}

/// A field of an object kerf cannot read: its path in the object and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field {path}: {reason}")]
pub struct FieldError {
    pub path: String,
    pub reason: String,
}

impl FieldError {
    /// The field `serde_path_to_error` found wrong.
    pub fn of(e: serde_path_to_error::Error<serde_json::Error>) -> Self {
        FieldError {
            path: e.path().to_string(),
            reason: e.inner().to_string(),
        }
    }
}

impl Workload {
    /// A workload of a kind another controller runs GPU inference under, or one the
    /// configuration lists (docs/workloads.md), from its object's metadata and the rest of it
    /// (`spec`, `status`): where kerf writes its template (a Rollout, a listed kind with a
    /// `templatePath`), the pod template there and `spec.replicas` (default 1, as Argo Rollouts
    /// defaults it); the others' templates are not kerf's to write. An error names the field.
    pub fn of_controller(
        meta: ObjectMeta,
        kind: WorkloadKind,
        object: Option<&serde_json::Value>,
    ) -> Result<Self, FieldError> {
        let (template, replicas) = if kind.template_writable() {
            let path = kind.template_path();
            let mut at = object;
            for step in path {
                at = at.and_then(|v| v.get(*step));
            }
            let template = match at {
                Some(t) => serde_path_to_error::deserialize(t.clone()).map_err(|e| FieldError {
                    path: format!("{}.{}", path.join("."), e.path()),
                    reason: e.inner().to_string(),
                })?,
                None => Default::default(),
            };
            let replicas = object
                .and_then(|o| o.pointer("/spec/replicas"))
                .and_then(serde_json::Value::as_i64)
                .map_or(1, |r| i32::try_from(r).unwrap_or(i32::MAX));
            (template, Some(replicas))
        } else {
            (Default::default(), None)
        };
        let mut w = Self::from_object(meta, kind, template, replicas);
        w.ownership.ray_cluster_config =
            kind == WorkloadKind::RayService && object.is_some_and(zero_downtime_upgrade);
        if kind == WorkloadKind::Rollout {
            w.ownership.template_ref = object.and_then(workload_ref_deployment);
        }
        Ok(w)
    }
}

impl Workload {
    /// A workload from its object's metadata and pod template. A missing namespace is
    /// `default`, as kubectl assumes for a manifest without one.
    pub fn from_object(
        meta: ObjectMeta,
        kind: WorkloadKind,
        template: k8s_openapi::api::core::v1::PodTemplateSpec,
        replicas: Option<i32>,
    ) -> Self {
        let controller = meta
            .owner_references
            .as_deref()
            .and_then(crate::owner::controller)
            .map(|o| Box::new(crate::owner::Link::new(&o.api_version, &o.kind, &o.name)));
        let template: crate::pod::PodTemplateSpec = template.into();
        Workload {
            ownership: Ownership {
                controller,
                ..Default::default()
            },
            key: WorkloadKey::new(
                meta.namespace.unwrap_or_else(|| "default".into()),
                kind,
                meta.name.unwrap_or_default(),
            ),
            uid: meta.uid,
            labels: strings(meta.labels).unwrap_or_default(),
            annotations: strings(meta.annotations).unwrap_or_default(),
            field_managers: meta
                .managed_fields
                .as_deref()
                .map(|m| project(m, kind, template.spec.as_ref()))
                .unwrap_or_default(),
            template,
            replicas,
        }
    }
}

impl Snapshot {
    /// The `openAPIV3Schema` of `kind`'s version in the CRDs at hand.
    pub fn crd_schema(&self, kind: kerf_api::WorkloadKind) -> Option<&serde_json::Value> {
        self.crds
            .iter()
            .find_map(|c| crate::writes::write_method::crd_version_schema(c, kind))
    }

    /// The controller reference of the object `kind`/`name` in `namespace`, when known.
    pub fn controller_of(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Option<crate::owner::Link> {
        let key = (
            Name::from(namespace),
            Name::from(crate::owner::link_key(kind, name).as_str()),
        );
        self.controllers.get(&key).cloned()
    }

    /// Resolves an `automationStrategyRef` of a policy in `namespace` (None: a cluster policy):
    /// a namespaced policy looks in its namespace, then among cluster strategies; a cluster
    /// policy among cluster strategies only.
    pub fn strategy(&self, namespace: Option<&str>, name: &str) -> Option<&Arc<StrategyView>> {
        let key = |namespace: Option<&str>| StrategyKey {
            namespace: namespace.map(Name::from),
            name: name.into(),
        };
        namespace
            .and_then(|ns| self.strategies.get(&key(Some(ns))))
            .or_else(|| self.strategies.get(&key(None)))
    }
}

/// The reason a policy whose `automationStrategyRef` does not resolve gives — its `Ready`
/// condition and its recommendations' `status.reason` (docs/design/runtime.md#r8).
pub const REASON_STRATEGY_UNRESOLVED: &str = "StrategyUnresolved";

impl Snapshot {
    /// Why the `automationStrategyRef` `name` of a policy in `namespace` (cluster policies:
    /// `None`) does not resolve; `None` when it does. A policy that does not resolve is not
    /// applied, whatever its kind.
    pub fn unresolved_strategy(&self, namespace: Option<&str>, name: &str) -> Option<String> {
        self.strategy(namespace, name)
            .is_none()
            .then(|| self.unresolved_strategy_message(namespace, name))
    }

    /// The status message of a policy in `namespace` whose `automationStrategyRef` `name` does
    /// not resolve, listing the strategies it could name (the nearest first, when one is close).
    pub fn unresolved_strategy_message(&self, namespace: Option<&str>, name: &str) -> String {
        let mut names: Vec<String> = Vec::new();
        if let Some(ns) = namespace {
            names.extend(
                self.strategies
                    .keys()
                    .filter(|k| k.namespace.as_deref() == Some(ns))
                    .map(|k| k.name.to_string()),
            );
        }
        let cluster: Vec<String> = self
            .strategies
            .keys()
            .filter(|k| k.namespace.is_none())
            .map(|k| k.name.to_string())
            .collect();
        let mut listed = Vec::new();
        if let Some(ns) = namespace {
            listed.push(match names.is_empty() {
                true => format!("no AutomationStrategy in namespace {ns}"),
                false => format!(
                    "AutomationStrategies in namespace {ns}: {}",
                    names.join(", ")
                ),
            });
        }
        listed.push(match cluster.is_empty() {
            true => "no ClusterAutomationStrategy".to_string(),
            false => format!("ClusterAutomationStrategies: {}", cluster.join(", ")),
        });
        names.extend(cluster);
        let known: Vec<&str> = names.iter().map(String::as_str).collect();
        let hint = kerf_api::strict::nearest(name, &known)
            .map(|n| format!("did you mean {n}? "))
            .unwrap_or_default();
        format!(
            "automationStrategyRef {name:?} does not resolve: policy not applied ({hint}{})",
            listed.join("; ")
        )
    }
}

impl From<Deployment> for Workload {
    fn from(d: Deployment) -> Self {
        let replicas = Some(d.spec.replicas.unwrap_or(1));
        Workload::from_object(
            d.metadata,
            WorkloadKind::Deployment,
            d.spec.template,
            replicas,
        )
    }
}

impl From<StatefulSet> for Workload {
    fn from(s: StatefulSet) -> Self {
        let replicas = Some(s.spec.replicas.unwrap_or(1));
        Workload::from_object(
            s.metadata,
            WorkloadKind::StatefulSet,
            s.spec.template,
            replicas,
        )
    }
}

impl From<DaemonSet> for Workload {
    /// Replicas: the pods the DaemonSet should run (`status.desiredNumberScheduled`).
    fn from(d: DaemonSet) -> Self {
        let desired = d.status.as_ref().map(|s| s.desired_number_scheduled);
        Workload::from_object(
            d.metadata,
            WorkloadKind::DaemonSet,
            d.spec.template,
            desired,
        )
    }
}

impl From<Job> for Workload {
    /// A Job of its own; a Job run by a CronJob belongs to that CronJob's workload instead.
    fn from(j: Job) -> Self {
        let spec = j.spec.unwrap_or_default();
        Workload::from_object(
            j.metadata,
            WorkloadKind::Job,
            spec.template,
            spec.parallelism,
        )
    }
}

impl From<CronJob> for Workload {
    /// The template is the job template's pod template.
    fn from(c: CronJob) -> Self {
        let template = c
            .spec
            .job_template
            .spec
            .map(|s| s.template)
            .unwrap_or_default();
        Workload::from_object(c.metadata, WorkloadKind::CronJob, template, None)
    }
}

/// Strategy lookup key: `namespace = None` for ClusterAutomationStrategy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StrategyKey {
    pub namespace: Option<Name>,
    pub name: Name,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub global: GlobalConfigurationSpec,
    pub precedence: PolicyEvaluationSpec,
    pub gpu_policies: Vec<GpuPolicy>,
    pub rightsizing_policies: Vec<RsPolicy>,
    /// Shared: every workload's result and admission state names its strategy (a copy each
    /// was 64 bytes, and more with KAI settings, per workload).
    pub strategies: BTreeMap<StrategyKey, Arc<StrategyView>>,
    /// Shared with the reader's caches (a snapshot every cycle copies pointers, not objects).
    pub workloads: Vec<Arc<Workload>>,
    pub pods: Vec<Arc<Pod>>,
    pub hpas: Vec<HorizontalPodAutoscaler>,
    /// VerticalPodAutoscalers (docs/hpa-coordination.md#vpa): kerf applies nothing a VPA sets.
    pub vpas: Vec<crate::vpa::Vpa>,
    /// (namespace, ReplicaSet name) → Deployment name. Hashed: only looked up, and a map entry
    /// per Deployment takes half the memory of a tree's.
    pub replicaset_owners: crate::hash::HashMap<(Name, Name), Name>,
    /// (namespace, Job name) → CronJob name (hashed, as `replicaset_owners`).
    pub job_owners: crate::hash::HashMap<(Name, Name), Name>,
    /// Whether the API server serves `pods/resize` (in-place resize).
    pub resize: ResizeSupport,
    /// (namespace, `<Kind>/<name>`) → the object's controller reference, for the objects an
    /// owner chain passes through other than a ReplicaSet's Deployment and a Job's CronJob
    /// (docs/workloads.md): a Deployment's InferenceService, a Revision's Configuration, …
    pub controllers: BTreeMap<(Name, Name), crate::owner::Link>,
    /// The CustomResourceDefinitions of the custom kinds kerf writes (Rollouts, listed kinds):
    /// their schema decides how a template write is sent (docs/gitops.md#how-kerf-writes).
    pub crds: Vec<Arc<serde_json::Value>>,
    /// The Container bounds of the namespaces' LimitRanges (docs/policies.md#limits).
    pub limit_ranges: Vec<crate::limits::ContainerLimitRange>,
    /// The namespaces' ResourceQuotas: an upsize past one is held (`QuotaExceeded`).
    pub resource_quotas: Vec<crate::limits::QuotaView>,
}

/// Whether running pods can be resized in place (docs/policies.md#in-place-resize).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResizeSupport {
    /// The API server's discovery lists `pods/resize`.
    Served,
    /// It does not (Kubernetes before 1.33, or the feature gate off): every change rolls out.
    NotServed,
    /// No API server was asked (a directory of manifests): planned as a cluster that serves it.
    #[default]
    Assumed,
    /// The API server was asked and has not answered yet: no pod is asked to resize (and no
    /// template written) until it does.
    Unknown,
}

/// A policy left out of the snapshot, with the message for its `Ready=False` condition.
#[derive(Clone, Debug, PartialEq)]
pub struct InvalidPolicy {
    pub id: PolicyId,
    pub policy_type: PolicyType,
    pub generation: Option<i64>,
    pub error: String,
    /// The policy's current status when it could be read (so conditions keep their times).
    pub status: Option<PolicyStatus>,
}

#[cfg(test)]
mod strategy_tests {
    use super::*;

    /// KubeRay rolls a RayService to a new cluster unless its upgrade strategy is `None`;
    /// metadata alone (no spec read) says nothing, so it is not assumed.
    #[test]
    fn zero_downtime_upgrade() {
        let service = |strategy: serde_json::Value| {
            serde_json::json!({"spec": {"upgradeStrategy": strategy,
                "rayClusterConfig": {"headGroupSpec": {}}}})
        };
        assert!(super::zero_downtime_upgrade(&service(serde_json::json!(
            null
        ))));
        assert!(super::zero_downtime_upgrade(&service(
            serde_json::json!({"type": "NewCluster"})
        )));
        assert!(super::zero_downtime_upgrade(&service(
            serde_json::json!({"type": "NewClusterWithIncrementalUpgrade"})
        )));
        assert!(!super::zero_downtime_upgrade(&service(
            serde_json::json!({"type": "None"})
        )));
        assert!(!super::zero_downtime_upgrade(&serde_json::json!({})));
        let meta: ObjectMeta =
            serde_json::from_value(serde_json::json!({"name": "s", "namespace": "ml"})).unwrap();
        let read = |object: Option<&serde_json::Value>| {
            Workload::of_controller(meta.clone(), WorkloadKind::RayService, object).unwrap()
        };
        assert!(read(Some(&service(serde_json::json!(null)))).writes_ray_cluster_config());
        assert!(!read(None).writes_ray_cluster_config());
    }

    /// A Rollout's `workloadRef` to an apps Deployment names where its template is written;
    /// a reference to another kind, or none, keeps the Rollout's own.
    #[test]
    fn workload_ref_deployment() {
        let rollout = |r: serde_json::Value| serde_json::json!({"spec": {"workloadRef": r}});
        let deployment = rollout(serde_json::json!(
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}));
        assert_eq!(
            super::workload_ref_deployment(&deployment).as_deref(),
            Some("web")
        );
        for other in [
            serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web"}),
            serde_json::json!({"apiVersion": "v1", "kind": "PodTemplate", "name": "web"}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
        ] {
            assert_eq!(super::workload_ref_deployment(&rollout(other)), None);
        }
        assert_eq!(
            super::workload_ref_deployment(&serde_json::json!({"spec": {}})),
            None
        );
        let meta: ObjectMeta =
            serde_json::from_value(serde_json::json!({"name": "web", "namespace": "shop"}))
                .unwrap();
        let w = Workload::of_controller(meta, WorkloadKind::Rollout, Some(&deployment)).unwrap();
        assert_eq!(
            w.template_write_key(),
            WorkloadKey::new("shop", WorkloadKind::Deployment, "web")
        );
    }

    /// A policy whose strategy does not resolve says which strategies it could name, the
    /// nearest first.
    #[test]
    fn an_unresolved_strategy_lists_the_strategies_the_policy_can_name() {
        let mut s = Snapshot::default();
        for (ns, name) in [
            (Some("ml"), "gpu-strategy"),
            (Some("shop"), "web"),
            (None, "shared"),
        ] {
            s.strategies.insert(
                StrategyKey {
                    namespace: ns.map(Name::from),
                    name: name.into(),
                },
                Arc::new(Default::default()),
            );
        }
        assert_eq!(s.unresolved_strategy(Some("ml"), "gpu-strategy"), None);
        assert_eq!(
            s.unresolved_strategy(Some("ml"), "gpu-stratgy").unwrap(),
            "automationStrategyRef \"gpu-stratgy\" does not resolve: policy not applied \
             (did you mean gpu-strategy? AutomationStrategies in namespace ml: gpu-strategy; \
             ClusterAutomationStrategies: shared)"
        );
        assert_eq!(
            s.unresolved_strategy(None, "gpu-strategy").unwrap(),
            "automationStrategyRef \"gpu-strategy\" does not resolve: policy not applied \
             (ClusterAutomationStrategies: shared)"
        );
        assert_eq!(
            Snapshot::default()
                .unresolved_strategy(Some("a"), "x")
                .unwrap(),
            "automationStrategyRef \"x\" does not resolve: policy not applied \
             (no AutomationStrategy in namespace a; no ClusterAutomationStrategy)"
        );
    }
}
