//! A VerticalPodAutoscaler (`autoscaling.k8s.io/v1`) on a workload kerf rightsizes: two
//! mutating webhooks setting the same requests at admission. Only the fields that say which
//! requests the VPA changes are read (upstream: kubernetes/autoscaler
//! `vertical-pod-autoscaler/pkg/apis/autoscaling.k8s.io/v1/types.go`).
//!
//! Rules, as the VPA applies them:
//! - `spec.updatePolicy.updateMode` absent means the VPA's default, which applies its
//!   recommendations; only `Off` (recommendations only) leaves the pods' requests alone.
//! - Per container, `spec.resourcePolicy.containerPolicies[]` applies the entry whose
//!   `containerName` is the container's, else the `*` entry; its `mode: Off` leaves that
//!   container alone; its `controlledResources` default to cpu and memory.

use serde::{Deserialize, Serialize};

use crate::model::Name;

pub const VPA_API_GROUP: &str = "autoscaling.k8s.io";
pub const REASON_VPA_CONFLICT: &str = "VPAConflict";

/// The parts of a VPA that say what it changes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Vpa {
    pub namespace: Name,
    pub name: Name,
    /// `spec.targetRef` kind and name.
    pub target_kind: Name,
    pub target_name: Name,
    /// `spec.updatePolicy.updateMode`, `None` when absent.
    pub update_mode: Option<String>,
    pub container_policies: Vec<ContainerPolicy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPolicy {
    #[serde(default)]
    pub container_name: Option<String>,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub controlled_resources: Option<Vec<String>>,
}

/// The object as stored (only the fields read).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Object {
    metadata: ObjectMeta,
    spec: Spec,
}

#[derive(Deserialize)]
struct ObjectMeta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    target_ref: TargetRef,
    #[serde(default)]
    update_policy: Option<UpdatePolicy>,
    #[serde(default)]
    resource_policy: Option<ResourcePolicy>,
}

#[derive(Deserialize)]
struct TargetRef {
    kind: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdatePolicy {
    #[serde(default)]
    update_mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourcePolicy {
    #[serde(default)]
    container_policies: Vec<ContainerPolicy>,
}

impl Vpa {
    /// Reads a VerticalPodAutoscaler object; an error names the field.
    pub fn from_object(value: serde_json::Value) -> Result<Self, crate::snapshot::FieldError> {
        let o: Object =
            serde_path_to_error::deserialize(value).map_err(crate::snapshot::FieldError::of)?;
        Ok(Vpa {
            namespace: o.metadata.namespace.as_deref().unwrap_or("default").into(),
            name: o.metadata.name.into(),
            target_kind: o.spec.target_ref.kind.into(),
            target_name: o.spec.target_ref.name.into(),
            update_mode: o.spec.update_policy.and_then(|p| p.update_mode),
            container_policies: o
                .spec
                .resource_policy
                .map(|p| p.container_policies)
                .unwrap_or_default(),
        })
    }

    /// The VPA changes pods' requests (any update mode but `Off`).
    pub fn applies(&self) -> bool {
        self.update_mode.as_deref() != Some("Off")
    }

    /// The VPA sets `resource` (`cpu`, `memory`) of `container` when it applies.
    pub fn controls(&self, container: &str, resource: &str) -> bool {
        if !self.applies() {
            return false;
        }
        let named = |n: &str| {
            self.container_policies
                .iter()
                .find(|p| p.container_name.as_deref() == Some(n))
        };
        let Some(policy) = named(container).or_else(|| named("*")) else {
            return true;
        };
        if policy.mode.as_deref() == Some("Off") {
            return false;
        }
        policy
            .controlled_resources
            .as_ref()
            .is_none_or(|rs| rs.iter().any(|r| r == resource))
    }

    /// `namespace/name`, as messages name it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The first VPA (by name) in `namespace` whose `targetRef` is the workload `kind`/`name` and
/// that applies its recommendations.
pub fn applying_vpa<'a>(
    vpas: &'a [Vpa],
    namespace: &str,
    kind: &str,
    name: &str,
) -> Option<&'a Vpa> {
    vpas.iter()
        .filter(|v| {
            v.namespace.as_str() == namespace
                && v.target_kind.as_str() == kind
                && v.target_name.as_str() == name
                && v.applies()
        })
        .min_by(|a, b| a.name.cmp(&b.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vpa(spec: serde_json::Value) -> Vpa {
        let mut spec = spec;
        spec["targetRef"] = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
        Vpa::from_object(json!({
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": "web-vpa", "namespace": "shop"}, "spec": spec
        }))
        .unwrap()
    }

    /// The VPA's defaults: no update policy applies recommendations, to cpu and memory of every
    /// container; `Off` applies nothing.
    #[test]
    fn update_mode_off_is_the_only_mode_that_changes_nothing() {
        let v = vpa(json!({}));
        assert!(v.applies() && v.controls("app", "cpu") && v.controls("app", "memory"));
        for mode in ["Auto", "Recreate", "Initial", "InPlaceOrRecreate"] {
            assert!(vpa(json!({"updatePolicy": {"updateMode": mode}})).controls("app", "cpu"));
        }
        let off = vpa(json!({"updatePolicy": {"updateMode": "Off"}}));
        assert!(!off.applies() && !off.controls("app", "cpu"));
        let vpas = [off];
        assert_eq!(applying_vpa(&vpas, "shop", "Deployment", "web"), None);
    }

    /// A container's own policy wins over `*`; `mode: Off` and `controlledResources` narrow
    /// what the VPA sets.
    #[test]
    fn container_policies_say_which_requests_the_vpa_sets() {
        let v = vpa(json!({"resourcePolicy": {"containerPolicies": [
            {"containerName": "*", "controlledResources": ["memory"]},
            {"containerName": "proxy", "mode": "Off"},
            {"containerName": "app", "controlledResources": ["cpu", "memory"]}
        ]}}));
        assert!(v.controls("app", "cpu") && v.controls("app", "memory"));
        assert!(!v.controls("proxy", "cpu") && !v.controls("proxy", "memory"));
        assert!(!v.controls("other", "cpu") && v.controls("other", "memory"));
        let vpas = [v];
        assert_eq!(
            applying_vpa(&vpas, "shop", "Deployment", "web").map(Vpa::id),
            Some("shop/web-vpa".into())
        );
        assert_eq!(applying_vpa(&vpas, "shop", "StatefulSet", "web"), None);
    }

    #[test]
    fn a_vpa_without_target_ref_is_an_error_naming_the_field() {
        let e = Vpa::from_object(json!({"metadata": {"name": "v"}, "spec": {}})).unwrap_err();
        assert!(e.path.contains("spec"), "{e}");
    }
}
