//! Cluster-wide singletons: GlobalConfiguration (`global-config`) and PolicyEvaluation
//! (`policy-evaluation`).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::*;

pub const GLOBAL_CONFIGURATION_NAME: &str = "global-config";
pub const POLICY_EVALUATION_NAME: &str = "policy-evaluation";

fn default_request_timeout() -> DurationStr {
    DurationStr::parse("30s").expect("valid literal")
}
fn default_check_interval() -> DurationStr {
    DurationStr::parse("1m").expect("valid literal")
}
fn default_kai_scheduler() -> String {
    "kai-scheduler".into()
}
fn default_protected_namespaces() -> Vec<String> {
    vec!["kube-system".into(), "kerf-system".into()]
}
fn default_prometheus_url() -> String {
    "http://prometheus.monitoring.svc:9090".into()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSettings {
    #[serde(default = "default_prometheus_url")]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("prometheus.url must be an http(s) URL"))]
    pub url: String,
    #[serde(default = "default_request_timeout")]
    #[x_kube(validation = Rule::new(CEL_NOT_ZERO).message("requestTimeout must be > 0"))]
    pub request_timeout: DurationStr,
}

impl Default for PrometheusSettings {
    fn default() -> Self {
        Self {
            url: default_prometheus_url(),
            request_timeout: default_request_timeout(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KaiSettings {
    #[serde(default = "default_kai_scheduler")]
    #[schemars(length(min = 1))]
    pub scheduler_name: String,
}

impl Default for KaiSettings {
    fn default() -> Self {
        Self {
            scheduler_name: default_kai_scheduler(),
        }
    }
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "rightsizing.kubex.ai",
    derive = "PartialEq",
    version = "v1alpha1",
    kind = "GlobalConfiguration",
    shortname = "kerfconfig",
    printcolumn = r#"{"name":"Prometheus","type":"string","jsonPath":".spec.prometheus.url"}"#,
    printcolumn = r#"{"name":"Interval","type":"string","jsonPath":".spec.gpuReactiveCheckInterval"}"#,
    printcolumn = r#"{"name":"ReadOnly","type":"boolean","jsonPath":".spec.readOnly"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name == 'global-config'").message("metadata.name must be global-config: GlobalConfiguration is a cluster singleton")
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalConfigurationSpec {
    #[serde(default)]
    pub prometheus: PrometheusSettings,
    /// How often GPU reactive policies are re-evaluated; at least 1m (default 1m).
    #[serde(default = "default_check_interval")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("gpuReactiveCheckInterval must be at least 1m"))]
    pub gpu_reactive_check_interval: DurationStr,
    /// Per-container winners among GPU policies (default false).
    #[serde(default)]
    pub multi_policy_container_rightsizing_enabled: bool,
    #[serde(default)]
    pub kai: KaiSettings,
    /// Namespaces kerf never mutates (default kube-system and kerf's own).
    #[serde(default = "default_protected_namespaces")]
    pub protected_namespaces: Vec<String>,
    /// When true kerf writes nothing to workloads or HPAs: recommendations only.
    #[serde(default)]
    pub read_only: bool,
}

impl Default for GlobalConfigurationSpec {
    fn default() -> Self {
        Self {
            prometheus: PrometheusSettings::default(),
            gpu_reactive_check_interval: default_check_interval(),
            multi_policy_container_rightsizing_enabled: false,
            kai: KaiSettings::default(),
            protected_namespaces: default_protected_namespaces(),
            read_only: false,
        }
    }
}

impl GlobalConfigurationSpec {
    /// Adds `namespace` to `protectedNamespaces`: kerf's own namespace is protected whatever the
    /// list says (docs/design/runtime.md#r12).
    pub fn protect(&mut self, namespace: &str) {
        if !self.protected_namespaces.iter().any(|n| n == namespace) {
            self.protected_namespaces.push(namespace.to_string());
        }
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        v.at_least_1m(
            &self.gpu_reactive_check_interval,
            "spec.gpuReactiveCheckInterval",
        );
        v.check(
            self.prometheus.url.starts_with("http://")
                || self.prometheus.url.starts_with("https://"),
            "spec.prometheus.url",
            format!("must be an http(s) URL (got {:?})", self.prometheus.url),
        );
        v.check(
            self.prometheus.request_timeout.seconds() > 0,
            "spec.prometheus.requestTimeout",
            "must be > 0",
        );
        v.check(
            !self.kai.scheduler_name.is_empty(),
            "spec.kai.schedulerName",
            "must not be empty",
        );
        v.finish()
    }
}

impl GlobalConfiguration {
    /// Spec validation plus the singleton name, as the CRD checks it.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        singleton_name(
            &mut v,
            self.metadata.name.as_deref(),
            GLOBAL_CONFIGURATION_NAME,
        );
        v.merge(self.spec.validate());
        v.finish()
    }
}

impl PolicyEvaluation {
    /// Spec validation plus the singleton name, as the CRD checks it.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        singleton_name(
            &mut v,
            self.metadata.name.as_deref(),
            POLICY_EVALUATION_NAME,
        );
        v.merge(self.spec.validate());
        v.finish()
    }
}

fn singleton_name(v: &mut Validator, name: Option<&str>, want: &str) {
    v.check(
        name == Some(want),
        "metadata.name",
        format!(
            "must be {want:?}: this kind is a cluster singleton (got {:?})",
            name.unwrap_or_default()
        ),
    );
}

/// Policy kinds ranked by PolicyEvaluation.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum PolicyType {
    GpuReactivePolicy,
    ClusterGpuReactivePolicy,
    RightsizingPolicy,
    ClusterRightsizingPolicy,
}

impl PolicyType {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyType::GpuReactivePolicy => "GpuReactivePolicy",
            PolicyType::ClusterGpuReactivePolicy => "ClusterGpuReactivePolicy",
            PolicyType::RightsizingPolicy => "RightsizingPolicy",
            PolicyType::ClusterRightsizingPolicy => "ClusterRightsizingPolicy",
        }
    }
    pub fn default_priority(self) -> i32 {
        match self {
            PolicyType::GpuReactivePolicy => 120,
            PolicyType::ClusterGpuReactivePolicy => 110,
            PolicyType::RightsizingPolicy | PolicyType::ClusterRightsizingPolicy => 90,
        }
    }
    pub fn is_cluster(self) -> bool {
        matches!(
            self,
            PolicyType::ClusterGpuReactivePolicy | PolicyType::ClusterRightsizingPolicy
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Precedence {
    #[serde(rename = "type")]
    pub policy_type: PolicyType,
    pub priority: i32,
}

fn default_precedence() -> Vec<Precedence> {
    [
        PolicyType::GpuReactivePolicy,
        PolicyType::ClusterGpuReactivePolicy,
        PolicyType::RightsizingPolicy,
        PolicyType::ClusterRightsizingPolicy,
    ]
    .into_iter()
    .map(|t| Precedence {
        policy_type: t,
        priority: t.default_priority(),
    })
    .collect()
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "rightsizing.kubex.ai",
    derive = "PartialEq",
    version = "v1alpha1",
    kind = "PolicyEvaluation",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name == 'policy-evaluation'").message("metadata.name must be policy-evaluation: PolicyEvaluation is a cluster singleton")
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyEvaluationSpec {
    /// Type priorities; a type not listed keeps its default (GpuReactivePolicy 120,
    /// ClusterGpuReactivePolicy 110, RightsizingPolicy 90, ClusterRightsizingPolicy 90).
    #[serde(default = "default_precedence")]
    #[schemars(length(max = 4))]
    #[x_kube(validation = Rule::new("self.all(p, self.exists_one(q, q.type == p.type))").message("each policy type may appear once in precedence"))]
    pub precedence: Vec<Precedence>,
}

impl Default for PolicyEvaluationSpec {
    fn default() -> Self {
        Self {
            precedence: default_precedence(),
        }
    }
}

impl PolicyEvaluationSpec {
    pub fn priority(&self, t: PolicyType) -> i32 {
        self.precedence
            .iter()
            .find(|p| p.policy_type == t)
            .map_or_else(|| t.default_priority(), |p| p.priority)
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        for (i, p) in self.precedence.iter().enumerate() {
            let dup = self.precedence[..i]
                .iter()
                .any(|q| q.policy_type == p.policy_type);
            v.check(
                !dup,
                format!("spec.precedence[{i}].type"),
                format!("{} appears more than once", p.policy_type.as_str()),
            );
        }
        v.finish()
    }
}
