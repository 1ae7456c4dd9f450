//! A consistent view of everything one evaluation needs, built either from the kube reader's
//! indexes or from a directory of manifests. Plain data: the pure core reads only this.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{
    GlobalConfigurationSpec, GpuReactivePolicySpec, PolicyEvaluationSpec, PolicyStatus, PolicyType,
    RightsizingPolicySpec, StrategyView, WorkloadKind,
};
use crate::core::model::{PolicyId, WorkloadKey, k8s_time};
use crate::core::pod::{Pod, PodTemplateSpec};

/// A policy of either scope, normalized to its family's spec type.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy<S> {
    pub id: PolicyId,
    pub policy_type: PolicyType,
    pub creation: Option<DateTime<Utc>>,
    pub generation: Option<i64>,
    pub spec: S,
    pub status: Option<PolicyStatus>,
}

/// A GPU reactive policy of either kind.
pub type GpuPolicy = Policy<GpuReactivePolicySpec>;
/// A CPU/memory rightsizing policy of either kind.
pub type RsPolicy = Policy<RightsizingPolicySpec>;

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
                kind: policy_type.as_str().to_string(),
                namespace: meta.namespace.clone(),
                name: meta.name.clone().unwrap_or_default(),
            },
            policy_type,
            creation: meta.creation_timestamp.as_ref().map(k8s_time),
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
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// For CronJobs: the job template's pod template.
    pub template: PodTemplateSpec,
    pub replicas: Option<i32>,
}

impl Workload {
    /// A workload from its object's metadata and pod template. A missing namespace is
    /// `default`, as kubectl assumes for a manifest without one.
    pub fn from_object(
        meta: &ObjectMeta,
        kind: WorkloadKind,
        template: k8s_openapi::api::core::v1::PodTemplateSpec,
        replicas: Option<i32>,
    ) -> Self {
        Workload {
            key: WorkloadKey::new(
                meta.namespace.clone().unwrap_or_else(|| "default".into()),
                kind,
                meta.name.clone().unwrap_or_default(),
            ),
            uid: meta.uid.clone(),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            template: template.into(),
            replicas,
        }
    }
}

impl Snapshot {
    /// Resolves an `automationStrategyRef` of a policy in `namespace` (None: a cluster policy):
    /// a namespaced policy looks in its namespace, then among cluster strategies; a cluster
    /// policy among cluster strategies only.
    pub fn strategy(&self, namespace: Option<&str>, name: &str) -> Option<&StrategyView> {
        let key = |namespace: Option<&str>| StrategyKey {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        };
        namespace
            .and_then(|ns| self.strategies.get(&key(Some(ns))))
            .or_else(|| self.strategies.get(&key(None)))
    }
}

/// The status message of a policy whose `automationStrategyRef` does not resolve.
pub fn unresolved_strategy_message(name: &str) -> String {
    format!("automationStrategyRef {name:?} does not resolve: policy not applied")
}

/// Strategy lookup key: `namespace = None` for ClusterAutomationStrategy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StrategyKey {
    pub namespace: Option<String>,
    pub name: String,
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub global: GlobalConfigurationSpec,
    pub precedence: PolicyEvaluationSpec,
    pub gpu_policies: Vec<GpuPolicy>,
    pub rightsizing_policies: Vec<RsPolicy>,
    pub strategies: BTreeMap<StrategyKey, StrategyView>,
    /// Shared with the reader's caches (a snapshot every cycle copies pointers, not objects).
    pub workloads: Vec<Arc<Workload>>,
    pub pods: Vec<Arc<Pod>>,
    pub hpas: Vec<HorizontalPodAutoscaler>,
    /// (namespace, ReplicaSet name) → Deployment name.
    pub replicaset_owners: BTreeMap<(String, String), String>,
    /// (namespace, Job name) → CronJob name.
    pub job_owners: BTreeMap<(String, String), String>,
}
