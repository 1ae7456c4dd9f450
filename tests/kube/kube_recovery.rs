//! Restart recovery: the store rebuilt from workload annotations matches what the leader wrote.

use crate::kube_support;
use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kerf::api::{AutomationStrategySpec, GpuReactivePolicySpec, PolicyType, Signal, WorkloadKind};
use kerf::core::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, GpuMap, GpuRecommendation, PolicyId,
    WorkloadKey, WorkloadState,
};
use kerf::core::recovery::{recover, store_entries_from_annotations};
use kerf::core::snapshot::{GpuPolicy, Snapshot, StrategyKey, Workload};
use kerf::core::writes::WriteOp;
use kerf::core::writes::{GpuAnnotations, WorkloadWrite};
use kerf::reconcile::cluster::prime_store;
use kerf::sources::kube::Reader;
use kerf::state::Store;
use kerf::writers::kube::{WriteOutcome, Writer, WriterConfig};
use kube_support::{Recorded, Reply, mock, requests};
use serde_json::{Value, json};
use tokio::sync::watch;

fn policy_spec(containers: &[&str]) -> GpuReactivePolicySpec {
    let signal = |m: &str| json!({"prometheus": {"metric": m, "interpretation": "fullGPU"}});
    serde_json::from_value(json!({
        "experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
        "automationStrategyRef": {"name": "s"},
        "scope": {"containers": containers, "labelSelector": {"matchLabels": {"app": "web"}}},
        "metrics": {"compute": signal("sm"), "memory": signal("fb")}
    }))
    .unwrap()
}

fn strategy() -> AutomationStrategySpec {
    serde_json::from_value(json!({
        "experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
        "enablement": {"overrideScheduler": "kai", "gpu": {"requests": {"downsize": false}}}
    }))
    .unwrap()
}

fn template(app_gpus: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [
            {"name": "app", "image": "a", "resources": {"limits": {"nvidia.com/gpu": app_gpus}}},
            {"name": "worker", "image": "w", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ]}
    }))
    .unwrap()
}

fn rec() -> GpuRecommendation {
    GpuRecommendation {
        containers: GpuMap::from([("app".into(), 1.5), ("worker".into(), 0.5)]),
        driving_metric: Some(Signal::Memory),
        policy: PolicyId::parse("GpuReactivePolicy/shop/gpu"),
        updated_at: Some("2026-07-01T12:00:00Z".parse::<Timestamp>().unwrap()),
        by_policy: Default::default(),
    }
}

fn annotations(rec: &GpuRecommendation) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            ANNOTATION_GPU_BASELINE.to_string(),
            "{\"app\":\"1\",\"worker\":\"1\"}".to_string(),
        ),
        (ANNOTATION_GPU_RECOMMENDATION.to_string(), rec.render()),
    ])
}

fn workload(namespace: &str, annotations: BTreeMap<String, String>, app_gpus: &str) -> Workload {
    Workload {
        key: WorkloadKey::new(namespace, WorkloadKind::Deployment, "web"),
        uid: None,
        labels: [("app".to_string(), "web".to_string())].into(),
        annotations: annotations.into_iter().collect(),
        template: template(app_gpus).into(),
        replicas: Some(1),
        field_managers: Vec::new(),
        ownership: Default::default(),
    }
}

fn snapshot(workloads: Vec<Workload>, scope: &[&str]) -> Snapshot {
    Snapshot {
        gpu_policies: vec![GpuPolicy {
            id: PolicyId::parse("GpuReactivePolicy/shop/gpu").unwrap(),
            policy_type: PolicyType::GpuReactivePolicy,
            creation: None,
            generation: Some(1),
            spec: policy_spec(scope),
            status: None,
        }],
        strategies: BTreeMap::from([(
            StrategyKey {
                namespace: Some("shop".into()),
                name: "s".into(),
            },
            std::sync::Arc::new(strategy().view()),
        )]),
        workloads: workloads.into_iter().map(std::sync::Arc::new).collect(),
        ..Default::default()
    }
}

fn expected(r: GpuRecommendation) -> WorkloadState {
    WorkloadState {
        policy: r.policy.clone(),
        gpu: Some(r),
        template_gpu: GpuMap::from([("app".into(), 1.0), ("worker".into(), 1.0)]),
        strategy: std::sync::Arc::new(strategy().view()),
        ..Default::default()
    }
}

#[test]
fn entries_carry_the_recommendation_template_allocation_policy_and_strategy() {
    let snap = snapshot(vec![workload("shop", annotations(&rec()), "1")], &[]);
    let entries = store_entries_from_annotations(&snap);
    assert_eq!(
        entries,
        vec![(
            WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
            expected(rec())
        )]
    );
    // Every replica recovering from the same objects builds the same store.
    assert_eq!(store_entries_from_annotations(&snap.clone()), entries);
}

#[test]
fn what_no_longer_stands_is_not_served() {
    // The template's own allocation changed since the baseline: reset (decision 7).
    let r = recover(&snapshot(
        vec![workload("shop", annotations(&rec()), "2")],
        &[],
    ));
    assert!(r.entries.is_empty());
    assert!(
        r.warnings[0].contains("template GPU allocation changed"),
        "{:?}",
        r.warnings
    );

    // Narrowed scope: only the containers still in scope are served.
    let r = recover(&snapshot(
        vec![workload("shop", annotations(&rec()), "1")],
        &["app"],
    ));
    let gpu = r.entries[0].1.gpu.as_ref().unwrap();
    assert_eq!(gpu.containers, GpuMap::from([("app".to_string(), 1.5)]));

    // The recommending policy is gone.
    let mut snap = snapshot(vec![workload("shop", annotations(&rec()), "1")], &[]);
    snap.gpu_policies.clear();
    let r = recover(&snap);
    assert!(r.entries.is_empty());
    assert!(r.warnings[0].contains("no longer exists"));

    // Protected namespace.
    let r = recover(&snapshot(
        vec![workload("kube-system", annotations(&rec()), "1")],
        &[],
    ));
    assert!(r.entries.is_empty());

    // Unreadable annotation: reported, not served.
    let mut bad = annotations(&rec());
    bad.insert(
        ANNOTATION_GPU_RECOMMENDATION.into(),
        "{\"containers\": {\"app\": \"lots\"}}".into(),
    );
    let r = recover(&snapshot(vec![workload("shop", bad, "1")], &[]));
    assert!(r.entries.is_empty());
    assert!(r.warnings[0].contains("containers.app"), "{:?}", r.warnings);
}

#[tokio::test]
async fn what_the_writer_persists_recovers_to_the_same_state() {
    let (client, log) = mock(|r: &Recorded| match r.method.as_str() {
        "GET" => Reply::Json(
            200,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                         "metadata": {"name": "web", "namespace": "shop"}}),
        ),
        _ => Reply::Json(200, r.body.clone()),
    });
    let (_lease_tx, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.read_only = false;
    let writer = Writer::spawn_with(client, lease_rx, cfg);
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: workload("shop", BTreeMap::new(), "1").into(),
        gpu: Some(GpuAnnotations {
            baseline: Some(GpuMap::from([("app".into(), 1.0), ("worker".into(), 1.0)])),
            recommendation: Some(rec()),
        }),
        requests: None,
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert!(matches!(
        writer.apply(op).await,
        WriteOutcome::Written { .. }
    ));
    let applied = requests(&log)
        .into_iter()
        .find(|r| r.content_type == "application/apply-patch+yaml")
        .unwrap();
    let persisted: BTreeMap<String, String> =
        serde_json::from_value(applied.body["metadata"]["annotations"].clone()).unwrap();
    let entries =
        store_entries_from_annotations(&snapshot(vec![workload("shop", persisted, "1")], &[]));
    assert_eq!(entries[0].1, expected(rec()));
}

fn list(items: Vec<Value>) -> Reply {
    Reply::Json(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
    )
}

#[tokio::test]
async fn prime_store_fills_the_store_from_the_cluster_before_readiness() {
    let (client, _log) = mock(|r: &Recorded| {
        if r.query.split('&').any(|p| p == "watch=true") {
            return Reply::Hang;
        }
        let rec = rec();
        match r.path.as_str() {
            "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies" => list(vec![json!({
                "metadata": {"name": "gpu", "namespace": "shop"}, "spec": serde_json::to_value(policy_spec(&[])).unwrap()})]),
            "/apis/rightsizing.kubex.ai/v1alpha1/automationstrategies" => list(vec![json!({
                "metadata": {"name": "s", "namespace": "shop"}, "spec": serde_json::to_value(strategy()).unwrap()})]),
            "/apis/apps/v1/deployments" => list(vec![json!({
                "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}, "annotations": annotations(&rec)},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": serde_json::to_value(template("1")).unwrap()}})]),
            "/apis/apps/v1/replicasets" => list(vec![
                json!({"metadata": {"name": "web-1", "namespace": "shop",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": true}]}}),
            ]),
            _ => list(vec![]),
        }
    });
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());
    assert!(!store.is_ready());
    let recovered = tokio::time::timeout(Duration::from_secs(10), prime_store(&reader, &store))
        .await
        .expect("prime_store finishes once the watches synced");
    assert!(store.is_ready());
    assert_eq!(recovered, 1);
    let key = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    assert_eq!(*store.get(&key).unwrap(), expected(rec()));
    assert_eq!(
        store
            .replicaset_owners
            .get(&kerf::state::ObjectName::new("shop", "web-1"))
            .unwrap()
            .as_str(),
        "web"
    );
}
