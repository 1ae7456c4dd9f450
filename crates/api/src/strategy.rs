//! AutomationStrategy / ClusterAutomationStrategy: what the agent may do with a recommendation.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::*;

fn default_queue() -> String {
    "kerf-gpu-queue".into()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpDown {
    #[serde(default = "default_true")]
    pub upsize: bool,
    #[serde(default = "default_true")]
    pub downsize: bool,
}

impl Default for UpDown {
    fn default() -> Self {
        Self {
            upsize: true,
            downsize: true,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuEnablement {
    #[serde(default)]
    pub requests: UpDown,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OverrideScheduler {
    #[default]
    None,
    Kai,
}

/// How a CPU/memory change reaches running pods (docs/policies.md#in-place-resize).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Resize {
    /// The pod template is written and the workload rolls out.
    #[default]
    Rollout,
    /// Running pods are resized through the `pods/resize` subresource where the cluster serves
    /// it and the change allows it; a rollout otherwise.
    InPlaceOrRollout,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Enablement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuEnablement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_scheduler: Option<OverrideScheduler>,
    /// `rollout` (default) or `inPlaceOrRollout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<Resize>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KaiStrategy {
    /// Queue label value for KAI pods (default `kerf-gpu-queue`).
    #[serde(default = "default_queue")]
    pub queue: String,
    /// Overwrite a queue label the pod already has (default false).
    #[serde(default)]
    pub set_queue_when_specified: bool,
}

impl Default for KaiStrategy {
    fn default() -> Self {
        Self {
            queue: default_queue(),
            set_queue_when_specified: false,
        }
    }
}

macro_rules! strategy_spec {
    ($spec:ident, $kind:literal, $short:literal, $($extra:tt)*) => {
        #[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
        #[kube(
            group = "rightsizing.kubex.ai",
            derive = "PartialEq",
            version = "v1alpha1",
            kind = $kind,
            shortname = $short,
            printcolumn = r#"{"name":"Scheduler","type":"string","jsonPath":".spec.enablement.overrideScheduler"}"#,
            printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".spec.kai.queue"}"#,
            printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
            validation = Rule::new("has(self.spec.experimental) || (!has(self.spec.kai) && (!has(self.spec.enablement) || (!has(self.spec.enablement.gpu) && !has(self.spec.enablement.overrideScheduler))))").message("spec.experimental.gpuKaiContract is required once a GPU or KAI field is set").field_path(".spec.experimental"),
            $($extra)*
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub experimental: Option<Experimental>,
            #[serde(default)]
            pub enablement: Enablement,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub kai: Option<KaiStrategy>,
        }

        impl $spec {
            pub fn validate(&self) -> Result<(), ValidationError> {
                self.view().validate()
            }

            pub fn view(&self) -> StrategyView {
                StrategyView {
                    experimental: self.experimental.clone(),
                    enablement: self.enablement.clone(),
                    kai: self.kai.clone(),
                }
            }
        }
    };
}

strategy_spec!(
    AutomationStrategySpec,
    "AutomationStrategy",
    "kerfstrategy",
    namespaced
);
strategy_spec!(
    ClusterAutomationStrategySpec,
    "ClusterAutomationStrategy",
    "ckerfstrategy",
);

/// What either strategy kind allows, resolved with defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StrategyView {
    pub experimental: Option<Experimental>,
    pub enablement: Enablement,
    pub kai: Option<KaiStrategy>,
}

impl StrategyView {
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        let uses_gpu = self.kai.is_some()
            || self.enablement.gpu.is_some()
            || self.enablement.override_scheduler.is_some();
        if uses_gpu || self.experimental.is_some() {
            v.contract(self.experimental.as_ref(), "spec.experimental");
        }
        v.finish()
    }

    pub fn gpu_upsize(&self) -> bool {
        self.enablement
            .gpu
            .as_ref()
            .is_none_or(|g| g.requests.upsize)
    }
    pub fn gpu_downsize(&self) -> bool {
        self.enablement
            .gpu
            .as_ref()
            .is_none_or(|g| g.requests.downsize)
    }
    pub fn override_kai(&self) -> bool {
        self.enablement.override_scheduler == Some(OverrideScheduler::Kai)
    }
    /// Whether CPU/memory changes are resized in place where they can be.
    pub fn resize_in_place(&self) -> bool {
        self.enablement.resize == Some(Resize::InPlaceOrRollout)
    }
    pub fn kai(&self) -> KaiStrategy {
        self.kai.clone().unwrap_or_default()
    }
}
