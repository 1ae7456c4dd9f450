//! GpuReactivePolicy and ClusterGpuReactivePolicy (the GPU reactive policies document): fields exactly as in it,
//! plus `spec.weight` and `spec.scope.workloadTypes`.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::*;

/// How a Prometheus value is turned into GPU units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Interpretation {
    /// Percentage of one whole GPU.
    #[serde(rename = "fullGPU")]
    FullGpu,
    /// Percentage of the container's current GPU allocation.
    #[serde(rename = "currentAllocation")]
    CurrentAllocation,
}

impl Interpretation {
    /// The GPU units a sample `value` (a percentage) stands for in a container holding
    /// `allocation` GPUs (docs/design/gpu-engine.md#g2): the engine and the usage charts read
    /// samples through this one conversion.
    pub fn gpus(self, value: f64, allocation: f64) -> f64 {
        match self {
            Interpretation::FullGpu => value / 100.0,
            Interpretation::CurrentAllocation => value / 100.0 * allocation,
        }
    }
}

fn default_namespace_label() -> String {
    "namespace".into()
}
fn default_pod_label() -> String {
    "pod".into()
}
fn default_container_label() -> String {
    "container".into()
}
fn default_headroom() -> f64 {
    20.0
}
fn default_upsize_threshold() -> f64 {
    125.0
}
fn default_scale_back_threshold() -> f64 {
    60.0
}
fn default_max_percent() -> f64 {
    200.0
}
fn default_window() -> DurationStr {
    DurationStr::parse("10m").expect("valid literal")
}
fn default_min_pod_metrics_age() -> DurationStr {
    DurationStr::parse("15m").expect("valid literal")
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusMetric {
    /// Metric name; a name ending in `_total` (or typed counter) is read with `rate()`.
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z_:][a-zA-Z0-9_:]*$')").message("must be a Prometheus metric name"))]
    pub metric: String,
    pub interpretation: Interpretation,
    #[serde(default = "default_namespace_label")]
    pub namespace_label: String,
    #[serde(default = "default_pod_label")]
    pub pod_label: String,
    #[serde(default = "default_container_label")]
    pub container_label: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpsizeRule {
    /// Upsize when a pod's usage exceeds this percent of its allocation (default 125).
    #[serde(default = "default_upsize_threshold")]
    #[x_kube(validation = Rule::new("self > 0.0").message("thresholdPercent must be > 0"))]
    pub threshold_percent: f64,
    /// At least 1m (default 10m).
    #[serde(default = "default_window")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("metricsWindow must be at least 1m"))]
    pub metrics_window: DurationStr,
    /// Added on top of the hottest pod's usage (default 20).
    #[serde(default = "default_headroom")]
    #[x_kube(validation = Rule::new("self >= 0.0").message("headroomPercent must be >= 0"))]
    pub headroom_percent: f64,
    /// Cap relative to the summed baseline, in percent (default 200, at least 100).
    #[serde(default = "default_max_percent")]
    #[x_kube(validation = Rule::new("self >= 100.0").message("maxPercent must be >= 100"))]
    pub max_percent: f64,
}

impl Default for UpsizeRule {
    fn default() -> Self {
        Self {
            threshold_percent: default_upsize_threshold(),
            metrics_window: default_window(),
            headroom_percent: default_headroom(),
            max_percent: default_max_percent(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleBackRule {
    /// Scale back when every pod stays below this percent of its allocation (default 60).
    #[serde(default = "default_scale_back_threshold")]
    #[x_kube(validation = Rule::new("self > 0.0").message("thresholdPercent must be > 0"))]
    pub threshold_percent: f64,
    /// At least 1m (default 10m).
    #[serde(default = "default_window")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("metricsWindow must be at least 1m"))]
    pub metrics_window: DurationStr,
    /// Added on top of the hottest pod's usage (default 20).
    #[serde(default = "default_headroom")]
    #[x_kube(validation = Rule::new("self >= 0.0").message("headroomPercent must be >= 0"))]
    pub headroom_percent: f64,
}

impl Default for ScaleBackRule {
    fn default() -> Self {
        Self {
            threshold_percent: default_scale_back_threshold(),
            metrics_window: default_window(),
            headroom_percent: default_headroom(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuSignal {
    #[serde(default)]
    pub upsize: UpsizeRule,
    #[serde(default)]
    pub scale_back: ScaleBackRule,
    pub prometheus: PrometheusMetric,
}

/// Both signals are required.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuMetrics {
    pub compute: GpuSignal,
    pub memory: GpuSignal,
}

/// The two GPU signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Signal {
    Compute,
    Memory,
}

impl Signal {
    pub const BOTH: [Signal; 2] = [Signal::Compute, Signal::Memory];
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Compute => "compute",
            Signal::Memory => "memory",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "compute" => Some(Signal::Compute),
            "memory" => Some(Signal::Memory),
            _ => None,
        }
    }
}

impl GpuMetrics {
    pub fn signal(&self, s: Signal) -> &GpuSignal {
        match s {
            Signal::Compute => &self.compute,
            Signal::Memory => &self.memory,
        }
    }
}

/// The spec both GPU policy kinds share; see [`GpuReactivePolicy`] and
/// [`ClusterGpuReactivePolicy`].
macro_rules! gpu_policy_spec {
    ($spec:ident, $kind:literal, $short:literal, $($scope_attr:tt)*) => {
        #[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
        #[kube(
            group = "rightsizing.kubex.ai",
            derive = "PartialEq",
            version = "v1alpha1",
            kind = $kind,
            shortname = $short,
            status = "PolicyStatus",
            printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
            printcolumn = r#"{"name":"Strategy","type":"string","jsonPath":".spec.automationStrategyRef.name"}"#,
            printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#,
            printcolumn = r#"{"name":"Workloads","type":"integer","jsonPath":".status.matchedWorkloads"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
            $($scope_attr)*
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            /// `gpuKaiContract` must be `v1alpha1-2026-07`.
            pub experimental: Experimental,
            #[serde(default)]
            pub scope: Scope,
            /// Pods count only once this old: `0s` or at least 1m (default 15m).
            #[serde(default = "default_min_pod_metrics_age")]
            #[x_kube(validation = Rule::new(CEL_ZERO_OR_AT_LEAST_1M).message("minPodMetricsAge must be 0s or at least 1m"))]
            pub min_pod_metrics_age: DurationStr,
            pub metrics: GpuMetrics,
            pub automation_strategy_ref: ObjectRef,
            /// Higher wins among policies of the same type priority (default 0).
            #[serde(default)]
            pub weight: i32,
        }

        impl $spec {
            /// The same validation as the CRD, with field-named messages.
            pub fn validate(&self) -> Result<(), ValidationError> {
                GpuPolicySpecRef::from(self).validate($kind)
            }
        }

        impl<'a> From<&'a $spec> for GpuPolicySpecRef<'a> {
            fn from(s: &'a $spec) -> Self {
                GpuPolicySpecRef {
                    experimental: &s.experimental,
                    scope: &s.scope,
                    min_pod_metrics_age: &s.min_pod_metrics_age,
                    metrics: &s.metrics,
                    automation_strategy_ref: &s.automation_strategy_ref,
                    weight: s.weight,
                }
            }
        }
    };
}

gpu_policy_spec!(
    GpuReactivePolicySpec,
    "GpuReactivePolicy",
    "grp",
    namespaced,
    validation = Rule::new("!has(self.spec.scope) || !has(self.spec.scope.namespaceSelector)")
        .message("spec.scope.namespaceSelector is only valid on ClusterGpuReactivePolicy")
        .field_path(".spec.scope.namespaceSelector"),
);
gpu_policy_spec!(
    ClusterGpuReactivePolicySpec,
    "ClusterGpuReactivePolicy",
    "cgrp",
);

impl From<ClusterGpuReactivePolicySpec> for GpuReactivePolicySpec {
    fn from(s: ClusterGpuReactivePolicySpec) -> Self {
        GpuReactivePolicySpec {
            experimental: s.experimental,
            scope: s.scope,
            min_pod_metrics_age: s.min_pod_metrics_age,
            metrics: s.metrics,
            automation_strategy_ref: s.automation_strategy_ref,
            weight: s.weight,
        }
    }
}

/// A borrowed view of either GPU policy spec: what the engine and selection read.
#[derive(Clone, Copy, Debug)]
pub struct GpuPolicySpecRef<'a> {
    pub experimental: &'a Experimental,
    pub scope: &'a Scope,
    pub min_pod_metrics_age: &'a DurationStr,
    pub metrics: &'a GpuMetrics,
    pub automation_strategy_ref: &'a ObjectRef,
    pub weight: i32,
}

impl GpuPolicySpecRef<'_> {
    pub fn validate(&self, kind: &str) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        v.contract(Some(self.experimental), "spec.experimental");
        let age = self.min_pod_metrics_age;
        v.check(
            age.seconds() == 0 || age.seconds() >= 60,
            "spec.minPodMetricsAge",
            format!("must be 0s or at least 1m (got {age})"),
        );
        v.check(
            !self.automation_strategy_ref.name.is_empty(),
            "spec.automationStrategyRef.name",
            "must not be empty",
        );
        self.scope.check_workload_types(&mut v);
        if kind == "GpuReactivePolicy" {
            v.check(
                self.scope.namespace_selector.is_none(),
                "spec.scope.namespaceSelector",
                "is only valid on ClusterGpuReactivePolicy",
            );
        }
        for signal in Signal::BOTH {
            let s = self.metrics.signal(signal);
            let base = format!("spec.metrics.{}", signal.as_str());
            v.positive(
                s.upsize.threshold_percent,
                &format!("{base}.upsize.thresholdPercent"),
            );
            v.at_least_1m(
                &s.upsize.metrics_window,
                &format!("{base}.upsize.metricsWindow"),
            );
            v.check(
                s.upsize.headroom_percent >= 0.0,
                format!("{base}.upsize.headroomPercent"),
                "must be >= 0",
            );
            v.check(
                s.upsize.max_percent >= 100.0,
                format!("{base}.upsize.maxPercent"),
                format!("must be >= 100 (got {})", s.upsize.max_percent),
            );
            v.positive(
                s.scale_back.threshold_percent,
                &format!("{base}.scaleBack.thresholdPercent"),
            );
            v.at_least_1m(
                &s.scale_back.metrics_window,
                &format!("{base}.scaleBack.metricsWindow"),
            );
            v.check(
                s.scale_back.headroom_percent >= 0.0,
                format!("{base}.scaleBack.headroomPercent"),
                "must be >= 0",
            );
            v.check(
                kerf_support::metric_name::is_metric_name(&s.prometheus.metric),
                format!("{base}.prometheus.metric"),
                format!(
                    "must be a Prometheus metric name (got {:?})",
                    s.prometheus.metric
                ),
            );
        }
        v.finish()
    }
}
