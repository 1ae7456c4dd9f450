//! Leader computes, every replica serves the same answer: two replicas watch the same (mock) API
//! server; only the Lease holder queries Prometheus; both fill the store the webhook reads from
//! the persisted state (workload annotations, RightsizingRecommendations), so they answer every
//! review identically.

use crate::kube_support;
use crate::prometheus_support;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kerf::api::Signal;
use kerf::core::model::{GpuMap, GpuRecommendation, PolicyId};
use kerf::reconcile::cluster::prime_store;
use kerf::reconcile::cluster::{Cycle, ReconcileCycle};
use kerf::server::review::handle_review;
use kerf::sources::kube::Reader;
use kerf::state::Store;
use kerf::writers::kube::Writer;
use kube_support::{Recorded, Reply, mock};
use prometheus_support::TestPrometheus;
use serde_json::{Value, json};
use tokio::sync::watch;

fn list(items: Vec<Value>) -> Reply {
    Reply::Json(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
    )
}

fn signal(metric: &str) -> Value {
    json!({"prometheus": {"metric": metric, "interpretation": "fullGPU"}})
}

/// What the leader persisted earlier: a GPU recommendation on `ml/llm` and a coordinated CPU
/// change (700m, HPA target 50 → 71 %) on `shop/web`.
fn cluster(prometheus_url: &str, r: &Recorded) -> Reply {
    if r.query_has("watch=true") {
        return Reply::Hang;
    }
    let gpu = GpuRecommendation {
        containers: GpuMap::from([("inference".into(), 0.84)]),
        driving_metric: Some(Signal::Compute),
        policy: PolicyId::parse("GpuReactivePolicy/ml/gpu"),
        updated_at: Some("2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap()),
        by_policy: Default::default(),
    };
    let template = |labels: Value, containers: Value| {
        json!({"metadata": {"labels": labels, "annotations": {"gpu-fraction": "0.5"}},
               "spec": {"containers": containers}})
    };
    match r.path.as_str() {
        "/apis/rightsizing.kubex.ai/v1alpha1/globalconfigurations" => list(vec![json!({
            "metadata": {"name": "global-config"},
            "spec": {"prometheus": {"url": prometheus_url, "requestTimeout": "5s"}}})]),
        "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies" => list(vec![json!({
            "metadata": {"name": "gpu", "namespace": "ml"},
            "spec": {"experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
                     "automationStrategyRef": {"name": "s"},
                     "scope": {"labelSelector": {"matchLabels": {"app": "llm"}}},
                     "metrics": {"compute": signal("sm"), "memory": signal("fb")}}})]),
        "/apis/rightsizing.kubex.ai/v1alpha1/automationstrategies" => list(vec![json!({
            "metadata": {"name": "s", "namespace": "ml"},
            "spec": {"experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
                     "enablement": {"overrideScheduler": "kai"}}})]),
        "/apis/rightsizing.kubex.ai/v1alpha1/rightsizingrecommendations" => list(vec![json!({
            "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "RightsizingRecommendation",
            "metadata": {"name": "deployment-web", "namespace": "shop"},
            "spec": {"workload": {"kind": "Deployment", "name": "web"},
                     "policies": ["RightsizingPolicy/shop/web"], "containers": []},
            "status": {"phase": "applied",
                       "applied": {"requests": {"app": {"cpu": "700m"}},
                                   "hpa": {"name": "web", "resource": "cpu",
                                           "targetBefore": 50, "targetAfter": 71}}}})]),
        "/apis/apps/v1/deployments" => list(vec![
            json!({"metadata": {"name": "llm", "namespace": "ml", "labels": {"app": "llm"},
                                "annotations": {
                                    "rightsizing.kubex.ai/gpu-baseline": "{\"inference\":\"0.5\"}",
                                    "rightsizing.kubex.ai/gpu-recommendation": gpu.render()}},
                   "spec": {"selector": {"matchLabels": {"app": "llm"}},
                            "template": template(json!({"app": "llm"}),
                                json!([{"name": "inference", "image": "i"}]))}}),
            json!({"metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
                   "spec": {"selector": {"matchLabels": {"app": "web"}},
                            "template": template(json!({"app": "web"}),
                                json!([{"name": "app", "image": "w",
                                        "resources": {"requests": {"cpu": "1000m"}}}]))}}),
        ]),
        "/api/v1/pods" => list(vec![json!({
            "metadata": {"name": "llm-1-a", "namespace": "ml", "labels": {"app": "llm"},
                         "annotations": {"gpu-fraction": "0.5"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "llm-1", "uid": "u3", "controller": true}]},
            "spec": {"containers": [{"name": "inference", "image": "i"}]},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}})]),
        "/apis/apps/v1/replicasets" => list(vec![
            json!({"metadata": {"name": "llm-1", "namespace": "ml", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm", "uid": "u1", "controller": true}]}}),
            json!({"metadata": {"name": "web-1", "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u2", "controller": true}]}}),
        ]),
        _ => list(vec![]),
    }
}

struct Replica {
    store: Arc<Store>,
    cycle: ReconcileCycle,
}

async fn replica(prometheus_url: &str, leader: bool) -> Replica {
    let url = prometheus_url.to_string();
    let (client, _log) = mock(move |r: &Recorded| cluster(&url, r));
    let store = Store::new();
    let reader = Reader::start_with_store(client.clone(), store.clone());
    let (_tx, lease) = watch::channel(leader);
    let writer = Writer::spawn(client, "kerf", lease.clone(), store.metrics().clone());
    tokio::time::timeout(Duration::from_secs(10), prime_store(&reader, &store))
        .await
        .expect("caches sync");
    Replica {
        store: store.clone(),
        cycle: ReconcileCycle::new(reader, writer, lease, store, 15),
    }
}

fn pod_review(uid: &str, ns: &str, replicaset: &str, container: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE", "userInfo": {"username": "x"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": format!("{replicaset}-"), "namespace": ns,
                    "annotations": {"gpu-fraction": "0.5"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": replicaset, "uid": "u", "controller": true}]},
                "spec": {"containers": [{"name": container, "image": "i",
                    "resources": {"requests": {"cpu": "1000m"}}}]}}}
    })
}

fn hpa_review() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/admission/hpa-cpu.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn two_replicas_answer_identically_and_only_the_leader_queries_prometheus() {
    let prom = TestPrometheus::start_with_openmetrics("# TYPE sm gauge\nsm 1 1\n# EOF\n");
    let queries = || prom.requests_served("/api/v1/query_range");
    let mut follower = replica(&prom.url(), false).await;
    let mut leader = replica(&prom.url(), true).await;

    let wait = follower.cycle.run_once().await.unwrap();
    assert_eq!(queries(), 0, "a follower never queries Prometheus");
    assert_eq!(wait, kerf::reconcile::cluster::SERVE_REFRESH);
    leader.cycle.run_once().await.unwrap();
    assert_eq!(
        queries(),
        2,
        "the leader: one range query per policy and signal"
    );
    leader.cycle.run_once().await.unwrap();
    assert_eq!(queries(), 2, "and not again before the interval");

    let reviews = [
        pod_review("gpu", "ml", "llm-1", "inference"),
        pod_review("cpu", "shop", "web-1", "app"),
        hpa_review(),
    ];
    for body in &reviews {
        let bytes = serde_json::to_vec(body).unwrap();
        let a = handle_review(&bytes, &follower.store);
        let b = handle_review(&bytes, &leader.store);
        assert_eq!(a.status, 200);
        assert_eq!(
            String::from_utf8_lossy(&a.body),
            String::from_utf8_lossy(&b.body),
            "same review, same answer"
        );
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert!(
            v["response"]["patch"].is_string(),
            "served from the persisted state: {v}"
        );
    }
    let patched = |body: &Value| {
        let a = handle_review(&serde_json::to_vec(body).unwrap(), &follower.store);
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        let bytes = base64_decode(v["response"]["patch"].as_str().unwrap());
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        let mut object = body["request"]["object"].clone();
        json_patch::patch(&mut object, &patch).unwrap();
        object
    };
    let pod = patched(&reviews[0]);
    assert_eq!(pod["metadata"]["annotations"]["gpu-fraction"], "0.84");
    let pod = patched(&reviews[1]);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "700m"
    );
    let hpa = patched(&reviews[2]);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        71
    );
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}
