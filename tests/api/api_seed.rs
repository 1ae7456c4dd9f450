//! The seed's YAML (copied verbatim into `tests/fixtures/seed/`) applies as written: it
//! deserializes into the typed kinds, validates, passes the CRD check, and round-trips without
//! losing or changing anything it sets.

use std::path::Path;

use kerf::api::crd_check::{check_against, kerf_checkers};
use kerf::api::{
    ClusterGpuReactivePolicy, GlobalConfiguration, GpuReactivePolicy, Interpretation, KerfObject,
    NamespaceOperator,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn seed(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every leaf the seed sets is present, equal, in `output` (numbers compared as numbers).
fn assert_preserved(input: &Value, output: &Value, path: &str) {
    match input {
        Value::Object(map) => {
            for (k, v) in map {
                let child = output
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k} was dropped: {output}"));
                assert_preserved(v, child, &format!("{path}.{k}"));
            }
        }
        Value::Array(items) => {
            let out = output
                .as_array()
                .unwrap_or_else(|| panic!("{path} is no longer a list"));
            assert_eq!(items.len(), out.len(), "{path} length changed");
            for (i, (a, b)) in items.iter().zip(out).enumerate() {
                assert_preserved(a, b, &format!("{path}[{i}]"));
            }
        }
        Value::Number(n) => assert_eq!(n.as_f64(), output.as_f64(), "{path} changed"),
        other => assert_eq!(other, output, "{path} changed"),
    }
}

/// typed → YAML → typed is the identity, and the YAML keeps every field the seed set.
fn round_trip<T>(file: &str) -> T
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    let text = seed(file);
    let typed: T = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("{file} does not deserialize: {e}"));
    let yaml = serde_saphyr::to_string(&typed).expect("serializes");
    let again: T = serde_saphyr::from_str(&yaml)
        .unwrap_or_else(|e| panic!("{file} re-serialized YAML does not parse: {e}\n{yaml}"));
    assert_eq!(
        typed, again,
        "{file}: typed → YAML → typed changed the object"
    );
    let input: Value = serde_saphyr::from_str(&text).expect("yaml");
    let output: Value = serde_saphyr::from_str(&yaml).expect("yaml");
    assert_preserved(&input, &output, "");

    let checkers = kerf_checkers().expect("CRDs compile");
    check_against(&checkers, &input)
        .unwrap_or_else(|e| panic!("{file}: the CRD rejects the seed: {e:?}"));
    // The re-serialized form (with defaults written out) is accepted by the CRD as well.
    check_against(&checkers, &output)
        .unwrap_or_else(|e| panic!("{file}: the CRD rejects the round trip: {e:?}"));
    KerfObject::parse(&input).unwrap_or_else(|e| panic!("{file}: {e}"));
    typed
}

#[test]
fn seed_gpu_reactive_policy() {
    let p: GpuReactivePolicy = round_trip("gpureactivepolicy.yaml");
    p.spec.validate().expect("validates");
    assert_eq!(p.metadata.name.as_deref(), Some("gpu-reactive"));
    assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(p.spec.scope.containers, ["inference"]);
    assert_eq!(p.spec.min_pod_metrics_age.seconds(), 15 * 60);
    let c = &p.spec.metrics.compute;
    assert_eq!(
        (
            c.upsize.threshold_percent,
            c.upsize.headroom_percent,
            c.upsize.max_percent
        ),
        (125.0, 20.0, 200.0)
    );
    assert_eq!(c.upsize.metrics_window.seconds(), 600);
    assert_eq!(
        (
            c.scale_back.threshold_percent,
            c.scale_back.headroom_percent
        ),
        (60.0, 20.0)
    );
    assert_eq!(
        c.prometheus.metric,
        "kubex_gpu_container_sm_utilization_percent"
    );
    assert_eq!(c.prometheus.interpretation, Interpretation::FullGpu);
    let m = &p.spec.metrics.memory;
    assert_eq!(
        m.prometheus.interpretation,
        Interpretation::CurrentAllocation
    );
    assert_eq!(
        m.prometheus.metric,
        "kubex_gpu_container_memory_footprint_percent"
    );
    assert_eq!(
        p.spec.automation_strategy_ref.name,
        "sample-automation-strategy"
    );
    assert_eq!(p.spec.weight, 0);
}

#[test]
fn seed_cluster_gpu_reactive_policy() {
    let p: ClusterGpuReactivePolicy = round_trip("clustergpureactivepolicy.yaml");
    p.spec.validate().expect("validates");
    let sel = p
        .spec
        .scope
        .namespace_selector
        .as_ref()
        .expect("namespaceSelector");
    assert_eq!(sel.operator, NamespaceOperator::In);
    assert!(sel.matches("anything"), "\"*\" matches every namespace");
    assert_eq!(
        p.spec.automation_strategy_ref.name,
        "sample-cluster-automation-strategy"
    );
}

#[test]
fn seed_global_configuration() {
    let g: GlobalConfiguration = round_trip("globalconfiguration.yaml");
    g.validate().expect("validates");
    assert_eq!(
        g.spec.prometheus.url,
        "http://prometheus.monitoring.svc:9090"
    );
    assert_eq!(g.spec.prometheus.request_timeout.seconds(), 30);
}
