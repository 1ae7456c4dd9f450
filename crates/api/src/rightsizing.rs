//! RightsizingPolicy / ClusterRightsizingPolicy: CPU and memory recommendations, HPA coordination.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::*;

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ResourceMode {
    AutoPatch,
    #[default]
    AuditOnly,
}

/// Which of a container's values kerf sets for a resource (VPA's `controlledValues`):
/// `RequestsAndLimits` (default) scales a limit with its request, keeping their ratio;
/// `RequestsOnly` leaves the limit and caps the request at it (docs/policies.md#limits).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ControlledValues {
    #[default]
    RequestsAndLimits,
    RequestsOnly,
}

fn default_percentile() -> f64 {
    95.0
}
fn default_cpu_headroom() -> f64 {
    15.0
}
fn default_memory_headroom() -> f64 {
    20.0
}
fn default_resource_window() -> DurationStr {
    DurationStr::parse("7d").expect("valid literal")
}
fn default_rate_window() -> DurationStr {
    DurationStr::parse("1m").expect("valid literal")
}

/// The scrape interval of cAdvisor's series a `rateWindow` must hold twice (a rate needs two
/// samples): kube-prometheus scrapes the kubelet's cAdvisor every 30 s.
pub const ASSUMED_SCRAPE_SECONDS: u64 = 30;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuRecipe {
    #[serde(default)]
    pub mode: ResourceMode,
    /// `RequestsAndLimits` (default): a limit keeps its ratio to the request;
    /// `RequestsOnly`: the limit stays and the request is capped at it.
    #[serde(default)]
    pub controlled_values: ControlledValues,
    /// Percentile of the CPU usage rate over `window` (default 95): of the rates over
    /// `rateWindow`, sampled at least every `rateWindow`.
    #[serde(default = "default_percentile")]
    #[x_kube(validation = Rule::new("self > 0.0 && self <= 100.0").message("percentile must be in (0, 100]"))]
    pub percentile: f64,
    #[serde(default = "default_cpu_headroom")]
    #[x_kube(validation = Rule::new("self >= 0.0").message("headroomPercent must be >= 0"))]
    pub headroom_percent: f64,
    #[serde(default = "default_resource_window")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("window must be at least 1m"))]
    pub window: DurationStr,
    /// The timescale of the CPU usage rate (default 1m), the same whatever `window`: at least
    /// twice the scrape interval (30 s assumed).
    #[serde(default = "default_rate_window")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("rateWindow must be at least 1m (twice the 30s scrape interval)"))]
    pub rate_window: DurationStr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Quantity>,
}

impl Default for CpuRecipe {
    fn default() -> Self {
        Self {
            mode: ResourceMode::AuditOnly,
            controlled_values: ControlledValues::default(),
            percentile: default_percentile(),
            headroom_percent: default_cpu_headroom(),
            window: default_resource_window(),
            rate_window: default_rate_window(),
            min: None,
            max: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryRecipe {
    #[serde(default)]
    pub mode: ResourceMode,
    /// `RequestsAndLimits` (default): a limit keeps its ratio to the request;
    /// `RequestsOnly`: the limit stays and the request is capped at it.
    #[serde(default)]
    pub controlled_values: ControlledValues,
    #[serde(default = "default_memory_headroom")]
    #[x_kube(validation = Rule::new("self >= 0.0").message("headroomPercent must be >= 0"))]
    pub headroom_percent: f64,
    #[serde(default = "default_resource_window")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("window must be at least 1m"))]
    pub window: DurationStr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Quantity>,
}

impl Default for MemoryRecipe {
    fn default() -> Self {
        Self {
            mode: ResourceMode::AuditOnly,
            controlled_values: ControlledValues::default(),
            headroom_percent: default_memory_headroom(),
            window: default_resource_window(),
            min: None,
            max: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ResourceRecipes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuRecipe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryRecipe>,
}

/// Fixed recommended requests of one container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StaticRequests {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.minUtilization < self.maxUtilization").message("targetBounds.minUtilization must be below maxUtilization"))]
pub struct TargetBounds {
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("minUtilization must be in 1..100"))]
    pub min_utilization: i32,
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("maxUtilization must be in 1..100"))]
    pub max_utilization: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HpaCoordination {
    /// Change requests and the HPA target together (default false).
    #[serde(default)]
    pub coordinate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_bounds: Option<TargetBounds>,
}

macro_rules! rightsizing_spec {
    ($spec:ident, $kind:literal, $short:literal, $($extra:tt)*) => {
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
        #[kube(
            group = "rightsizing.kubex.ai",
            derive = "PartialEq",
            version = "v1alpha1",
            kind = $kind,
            shortname = $short,
            status = "PolicyStatus",
            printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
            printcolumn = r#"{"name":"CPU","type":"string","jsonPath":".spec.resources.cpu.mode"}"#,
            printcolumn = r#"{"name":"Memory","type":"string","jsonPath":".spec.resources.memory.mode"}"#,
            printcolumn = r#"{"name":"HPA","type":"boolean","jsonPath":".spec.hpa.coordinate"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
            $($extra)*
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            #[serde(default)]
            pub scope: Scope,
            #[serde(default)]
            pub weight: i32,
            pub automation_strategy_ref: ObjectRef,
            #[serde(default)]
            pub resources: ResourceRecipes,
            /// Fixed requests per container name (`"*"` = every container), instead of usage.
            #[serde(default, rename = "static", skip_serializing_if = "BTreeMap::is_empty")]
            pub static_requests: BTreeMap<String, StaticRequests>,
            #[serde(default)]
            pub hpa: HpaCoordination,
        }

        impl $spec {
            pub fn validate(&self) -> Result<(), ValidationError> {
                validate_rightsizing(&self.scope, &self.automation_strategy_ref, &self.resources, &self.hpa, $kind)
            }
        }
    };
}

rightsizing_spec!(
    RightsizingPolicySpec,
    "RightsizingPolicy",
    "rsp",
    namespaced,
    validation = Rule::new("!has(self.spec.scope) || !has(self.spec.scope.namespaceSelector)")
        .message("spec.scope.namespaceSelector is only valid on ClusterRightsizingPolicy")
        .field_path(".spec.scope.namespaceSelector"),
);
rightsizing_spec!(
    ClusterRightsizingPolicySpec,
    "ClusterRightsizingPolicy",
    "crsp",
);

impl From<ClusterRightsizingPolicySpec> for RightsizingPolicySpec {
    fn from(s: ClusterRightsizingPolicySpec) -> Self {
        RightsizingPolicySpec {
            scope: s.scope,
            weight: s.weight,
            automation_strategy_ref: s.automation_strategy_ref,
            resources: s.resources,
            static_requests: s.static_requests,
            hpa: s.hpa,
        }
    }
}

fn validate_rightsizing(
    scope: &Scope,
    strategy: &ObjectRef,
    resources: &ResourceRecipes,
    hpa: &HpaCoordination,
    kind: &str,
) -> Result<(), ValidationError> {
    let mut v = Validator::default();
    v.check(
        !strategy.name.is_empty(),
        "spec.automationStrategyRef.name",
        "must not be empty",
    );
    scope.check_workload_types(&mut v);
    if kind == "RightsizingPolicy" {
        v.check(
            scope.namespace_selector.is_none(),
            "spec.scope.namespaceSelector",
            "is only valid on ClusterRightsizingPolicy",
        );
    }
    if let Some(cpu) = &resources.cpu {
        v.check(
            cpu.percentile > 0.0 && cpu.percentile <= 100.0,
            "spec.resources.cpu.percentile",
            format!("must be in (0, 100] (got {})", cpu.percentile),
        );
        v.check(
            cpu.headroom_percent >= 0.0,
            "spec.resources.cpu.headroomPercent",
            "must be >= 0",
        );
        v.at_least_1m(&cpu.window, "spec.resources.cpu.window");
        v.check(
            cpu.rate_window.seconds() >= 2 * ASSUMED_SCRAPE_SECONDS,
            "spec.resources.cpu.rateWindow",
            format!(
                "must be at least twice the {ASSUMED_SCRAPE_SECONDS}s scrape interval (got {})",
                cpu.rate_window
            ),
        );
    }
    if let Some(mem) = &resources.memory {
        v.check(
            mem.headroom_percent >= 0.0,
            "spec.resources.memory.headroomPercent",
            "must be >= 0",
        );
        v.at_least_1m(&mem.window, "spec.resources.memory.window");
    }
    if let Some(b) = &hpa.target_bounds {
        v.check(
            (1..=100).contains(&b.min_utilization),
            "spec.hpa.targetBounds.minUtilization",
            "must be in 1..100",
        );
        v.check(
            (1..=100).contains(&b.max_utilization),
            "spec.hpa.targetBounds.maxUtilization",
            "must be in 1..100",
        );
        v.check(
            b.min_utilization < b.max_utilization,
            "spec.hpa.targetBounds",
            format!(
                "minUtilization ({}) must be below maxUtilization ({})",
                b.min_utilization, b.max_utilization
            ),
        );
    }
    v.finish()
}
