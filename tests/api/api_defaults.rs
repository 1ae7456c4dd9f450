//! A minimal object gets the DESIGN defaults, and the CRD's schema defaults (what the API server
//! fills in) are the same as the Rust defaults: the object defaulted by the committed CRD schema
//! (`manifests/crds/`, raw JSON) equals the object read with the Rust defaults and written back.
//! Reading the schema-defaulted object back through serde would fill the Rust defaults itself
//! and hide a default the schema lacks.

use kerf::api::crd_check::kerf_checkers;
use kerf::api::*;
use kube::CustomResourceExt;
use kube::core::cel::apply_defaults;
use serde_json::{Value, json};

/// The OpenAPI schema of `K` in its committed CRD file (`manifests/crds/<plural>.yaml`).
fn committed_schema<K: CustomResourceExt>() -> Value {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/crds")
        .join(format!("{}.yaml", K::api_resource().plural));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let crd: Value = serde_saphyr::from_str(&text).expect("CRD YAML");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// `object` as the API server fills it in from the CRD schema's defaults, as JSON.
fn schema_defaulted<K: CustomResourceExt>(object: &Value) -> Value {
    apply_defaults(&committed_schema::<K>(), object)
}

/// `object` with the Rust defaults: read typed and written back.
fn rust_defaulted<K: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> Value {
    let typed: K = serde_json::from_value(object.clone()).expect("object deserializes");
    serde_json::to_value(typed).expect("object serializes")
}

/// The schema's defaults fill `object`'s spec exactly as the Rust defaults do.
fn assert_schema_defaults_are_the_rust_defaults<K>(object: &Value)
where
    K: CustomResourceExt + serde::de::DeserializeOwned + serde::Serialize,
{
    let schema = schema_defaulted::<K>(object)["spec"].clone();
    let rust = rust_defaulted::<K>(object)["spec"].clone();
    assert_eq!(
        schema,
        rust,
        "{}: the CRD schema defaults (left) differ from the Rust defaults (right); from the \
         schema's to Rust's, spec needs {}",
        K::crd_name(),
        serde_json::to_string(&json_patch::diff(&schema, &rust)).unwrap()
    );
}

fn minimal_gpu(kind: &str) -> Value {
    let signal =
        |metric: &str| json!({"prometheus": {"metric": metric, "interpretation": "fullGPU"}});
    json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": kind,
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
            "metrics": {"compute": signal("sm"), "memory": signal("mem")},
            "automationStrategyRef": {"name": "s"}
        }
    })
}

#[test]
fn minimal_gpu_policy_gets_design_defaults() {
    let object = minimal_gpu("GpuReactivePolicy");
    let p: GpuReactivePolicy =
        serde_json::from_value(object.clone()).expect("minimal policy parses");
    p.spec.validate().expect("minimal policy is valid");
    assert_eq!(p.spec.min_pod_metrics_age.as_str(), "15m");
    assert_eq!(p.spec.weight, 0);
    assert!(p.spec.scope.containers.is_empty() && p.spec.scope.workload_types.is_empty());
    for s in Signal::BOTH {
        let sig = p.spec.metrics.signal(s);
        assert_eq!(sig.upsize.headroom_percent, 20.0);
        assert_eq!(sig.scale_back.headroom_percent, 20.0);
        assert_eq!(sig.upsize.threshold_percent, 125.0);
        assert_eq!(sig.scale_back.threshold_percent, 60.0);
        assert_eq!(sig.upsize.max_percent, 200.0);
        assert_eq!(sig.upsize.metrics_window.as_str(), "10m");
        assert_eq!(sig.scale_back.metrics_window.as_str(), "10m");
        assert_eq!(
            (
                sig.prometheus.namespace_label.as_str(),
                sig.prometheus.pod_label.as_str(),
                sig.prometheus.container_label.as_str()
            ),
            ("namespace", "pod", "container")
        );
    }
    assert_schema_defaults_are_the_rust_defaults::<GpuReactivePolicy>(&object);
    let cluster = minimal_gpu("ClusterGpuReactivePolicy");
    assert_schema_defaults_are_the_rust_defaults::<ClusterGpuReactivePolicy>(&cluster);
    assert_eq!(
        schema_defaulted::<ClusterGpuReactivePolicy>(&cluster)["spec"]["minPodMetricsAge"],
        "15m"
    );
}

#[test]
fn minimal_strategy_gets_design_defaults() {
    let object = json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "AutomationStrategy",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"experimental": {"gpuKaiContract": "v1alpha1-2026-07"}, "enablement": {"gpu": {}}, "kai": {}}
    });
    let s: AutomationStrategy = serde_json::from_value(object.clone()).expect("parses");
    s.spec.validate().expect("valid");
    let view = s.spec.view();
    assert!(view.gpu_upsize() && view.gpu_downsize());
    assert!(!view.override_kai());
    assert_eq!(view.kai().queue, "kerf-gpu-queue");
    assert!(!view.kai().set_queue_when_specified);
    assert_schema_defaults_are_the_rust_defaults::<AutomationStrategy>(&object);
    // Nothing GPU-related set at all: everything allowed by default too.
    let empty = json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "ClusterAutomationStrategy",
        "metadata": {"name": "c"}, "spec": {}
    });
    assert_schema_defaults_are_the_rust_defaults::<ClusterAutomationStrategy>(&empty);
    let empty: ClusterAutomationStrategy = serde_json::from_value(empty).expect("parses");
    assert!(empty.spec.view().gpu_upsize() && empty.spec.view().gpu_downsize());
    assert_eq!(empty.spec.view().kai().queue, "kerf-gpu-queue");
}

#[test]
fn minimal_global_configuration_gets_design_defaults() {
    let object = json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "GlobalConfiguration",
        "metadata": {"name": "global-config"}, "spec": {}
    });
    let g: GlobalConfiguration = serde_json::from_value(object.clone()).expect("parses");
    g.validate().expect("valid");
    assert_eq!(g.spec.gpu_reactive_check_interval.as_str(), "1m");
    assert_eq!(g.spec.prometheus.request_timeout.as_str(), "30s");
    assert_eq!(g.spec.kai.scheduler_name, "kai-scheduler");
    assert_eq!(g.spec.protected_namespaces, ["kube-system", "kerf-system"]);
    assert!(!g.spec.read_only);
    assert!(!g.spec.multi_policy_container_rightsizing_enabled);
    assert_eq!(g.spec, GlobalConfigurationSpec::default());
    assert_schema_defaults_are_the_rust_defaults::<GlobalConfiguration>(&object);
}

#[test]
fn minimal_policy_evaluation_gets_design_priorities() {
    let object = json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "PolicyEvaluation",
        "metadata": {"name": "policy-evaluation"}, "spec": {}
    });
    let e: PolicyEvaluation = serde_json::from_value(object.clone()).expect("parses");
    e.validate().expect("valid");
    let prio = |t| e.spec.priority(t);
    assert_eq!(
        [
            prio(PolicyType::GpuReactivePolicy),
            prio(PolicyType::ClusterGpuReactivePolicy),
            prio(PolicyType::RightsizingPolicy),
            prio(PolicyType::ClusterRightsizingPolicy)
        ],
        [120, 110, 90, 90]
    );
    // A partial list keeps the defaults of the types it does not name.
    let partial: PolicyEvaluation = serde_json::from_value(json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "PolicyEvaluation",
        "metadata": {"name": "policy-evaluation"}, "spec": {"precedence": [{"type": "RightsizingPolicy", "priority": 200}]}
    }))
    .expect("parses");
    assert_eq!(partial.spec.priority(PolicyType::RightsizingPolicy), 200);
    assert_eq!(partial.spec.priority(PolicyType::GpuReactivePolicy), 120);
    assert_schema_defaults_are_the_rust_defaults::<PolicyEvaluation>(&object);
}

#[test]
fn minimal_rightsizing_policy_gets_design_defaults() {
    let object = json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "RightsizingPolicy",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"automationStrategyRef": {"name": "s"}, "resources": {"cpu": {}, "memory": {}}}
    });
    let p: RightsizingPolicy = serde_json::from_value(object.clone()).expect("parses");
    p.spec.validate().expect("valid");
    let cpu = p.spec.resources.cpu.as_ref().unwrap();
    assert_eq!(
        (
            cpu.mode,
            cpu.percentile,
            cpu.headroom_percent,
            cpu.window.as_str()
        ),
        (ResourceMode::AuditOnly, 95.0, 15.0, "7d")
    );
    let mem = p.spec.resources.memory.as_ref().unwrap();
    assert_eq!(
        (mem.mode, mem.headroom_percent, mem.window.as_str()),
        (ResourceMode::AuditOnly, 20.0, "7d")
    );
    assert!(!p.spec.hpa.coordinate);
    assert_eq!(p.spec.weight, 0);
    assert_schema_defaults_are_the_rust_defaults::<RightsizingPolicy>(&object);
}

#[test]
fn every_policy_kind_has_status_conditions_and_printer_columns() {
    kerf_checkers().expect("compiles");
    for (file, crd) in crds() {
        let version = &crd.spec.versions[0];
        let columns: Vec<&str> = version
            .additional_printer_columns
            .as_ref()
            .map(|c| c.iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        assert!(
            columns.contains(&"Age"),
            "{file}: printer columns {columns:?}"
        );
        let schema = serde_json::to_value(
            version
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        let kind = crd.spec.names.kind.as_str();
        if kind.ends_with("Policy") {
            assert!(
                columns.contains(&"Ready"),
                "{kind}: printer columns {columns:?}"
            );
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{kind} has no status subresource"
            );
            let cond = schema.pointer("/properties/status/properties/conditions/items/properties");
            for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
                assert!(
                    cond.and_then(|c| c.get(field)).is_some(),
                    "{kind}: status.conditions[].{field} missing"
                );
            }
        }
        if kind == "RightsizingRecommendation" {
            for want in ["Workload", "Kind", "Phase", "Reason", "HPA", "HPA-Target"] {
                assert!(
                    columns.contains(&want),
                    "{kind}: printer columns {columns:?} lack {want}"
                );
            }
            assert!(
                schema
                    .pointer("/properties/status/properties/conditions")
                    .is_some()
            );
        }
    }
}
