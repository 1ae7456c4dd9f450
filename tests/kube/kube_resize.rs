//! In-place resize against the mock API server: the exact `pods/<name>/resize` requests,
//! paced, their Event and metric; a refused resize recorded as a fallback on the
//! RightsizingRecommendation; readOnly sending nothing.

use std::time::{Duration, Instant};

use kerf::api::{RecommendationStatus, WorkloadKind};
use kerf::core::model::{ContainerRequests, ResourceRequests, WorkloadKey};
use kerf::core::writes::resize::PodResize;
use kerf::core::writes::{EventWrite, ResizeWrite, WriteOp};
use kerf::telemetry::Metrics;
use kerf::writers::kube::{RESIZE_PACE, WriteOutcome, Writer, WriterConfig, WriterHandle};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::kube_support::{self, Recorded, Reply, calls, mock, requests};

const STRATEGIC: &str = "application/strategic-merge-patch+json";
const STATUS_PATH: &str = "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/shop/rightsizingrecommendations/deployment-web/status";

fn writer(
    client: kube::Client,
    metrics: std::sync::Arc<Metrics>,
) -> (WriterHandle, watch::Sender<bool>) {
    let (lease_tx, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.metrics = metrics;
    cfg.backoff = Duration::from_millis(10);
    cfg.read_only = false;
    (Writer::spawn_with(client, lease_rx, cfg), lease_tx)
}

fn body(cpu: &str) -> Value {
    json!({"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}})
}

fn resize_op(pods: &[&str]) -> WriteOp {
    let key = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    let requests: ContainerRequests = [(
        "app".to_string(),
        ResourceRequests {
            cpu_millis: Some(700),
            memory_bytes: None,
        },
    )]
    .into_iter()
    .collect();
    let pods: Vec<PodResize> = pods
        .iter()
        .map(|p| PodResize {
            namespace: "shop".into(),
            pod: p.to_string(),
            body: body("700m"),
            requests: requests.clone(),
            restarts: Vec::new(),
        })
        .collect();
    let status: RecommendationStatus = serde_json::from_value(json!({
        "phase": "applied", "applyMethod": "inPlace",
        "applied": {"requests": {"app": {"cpu": "700m"}}},
        "resize": {"podsResized": 0, "podsPending": pods.len(), "podsInfeasible": 0, "podsWaiting": 0}
    }))
    .unwrap();
    WriteOp::Resize(Box::new(ResizeWrite {
        workload: key.clone(),
        event: EventWrite {
            regarding: key,
            uid: Some("uid-web".into()),
            warning: false,
            reason: "Resized".into(),
            action: "Resize".into(),
            note: format!("resizing {} running pods in place", pods.len()),
            details: Default::default(),
        },
        pods,
        fallback: None,
        recommendation: ("shop".into(), "deployment-web".into()),
        status,
    }))
}

fn resizes(metrics: &Metrics, outcome: &str) -> u64 {
    metrics
        .resizes
        .get_or_create(&kerf::telemetry::ResizeLabels {
            outcome: outcome.into(),
        })
        .get()
}

#[tokio::test]
async fn each_pod_is_resized_through_its_resize_subresource_one_after_another() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let metrics = Metrics::new();
    let (w, _lease) = writer(client, metrics.clone());
    let started = Instant::now();
    let outcome = w.apply(resize_op(&["web-1", "web-2", "web-3"])).await;
    assert_eq!(outcome, WriteOutcome::Written { requests: 4 });
    assert!(
        started.elapsed() >= RESIZE_PACE * 2,
        "paced: {:?}",
        started.elapsed()
    );
    let seen = requests(&log);
    assert_eq!(
        calls(&seen),
        [
            ("PATCH", "/api/v1/namespaces/shop/pods/web-1/resize"),
            ("PATCH", "/api/v1/namespaces/shop/pods/web-2/resize"),
            ("PATCH", "/api/v1/namespaces/shop/pods/web-3/resize"),
            ("POST", "/apis/events.k8s.io/v1/namespaces/shop/events"),
        ]
    );
    for r in &seen[..3] {
        assert_eq!(r.content_type, STRATEGIC);
        assert_eq!(r.body, body("700m"));
        assert!(r.query_has("fieldManager=kerf"), "{}", r.query);
    }
    assert_eq!(seen[3].body["reason"], "Resized");
    assert_eq!(resizes(&metrics, "accepted"), 3);
}

/// The API server refuses a resize (422): the others still go, and the refusal is recorded on
/// the RightsizingRecommendation as a fallback to a rollout, with its Event and metric.
#[tokio::test]
async fn a_refused_resize_is_recorded_as_a_fallback_to_a_rollout() {
    let (client, log) = mock(|r: &Recorded| {
        if r.path.ends_with("/pods/web-1/resize") {
            return kube_support::status(422, "Invalid");
        }
        if r.path == STATUS_PATH {
            // The API server answers with the whole object.
            let mut rec = json!({"apiVersion": "rightsizing.kubex.ai/v1alpha1",
                "kind": "RightsizingRecommendation",
                "metadata": {"name": "deployment-web", "namespace": "shop"},
                "spec": {"workload": {"kind": "Deployment", "name": "web"}}});
            rec["status"] = r.body["status"].clone();
            return Reply::Json(200, rec);
        }
        Reply::Json(200, r.body.clone())
    });
    let metrics = Metrics::new();
    let (w, _lease) = writer(client, metrics.clone());
    let outcome = w.apply(resize_op(&["web-1", "web-2"])).await;
    assert!(matches!(outcome, WriteOutcome::Failed(_)), "{outcome:?}");
    let seen = requests(&log);
    let paths: Vec<&str> = calls(&seen).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/shop/pods/web-1/resize",
            "/api/v1/namespaces/shop/pods/web-2/resize",
            "/apis/events.k8s.io/v1/namespaces/shop/events",
            STATUS_PATH,
            "/apis/events.k8s.io/v1/namespaces/shop/events",
        ]
    );
    let status = &seen[3].body["status"];
    assert_eq!(status["resize"]["fallback"]["reason"], "Refused");
    assert!(
        status["resize"]["fallback"]["message"]
            .as_str()
            .unwrap()
            .contains("Invalid"),
        "{status}"
    );
    assert_eq!(
        status["resize"]["fallback"]["requests"],
        json!({"app": {"cpu": "700m"}})
    );
    assert_eq!(seen[4].body["reason"], "ResizeFallback");
    assert_eq!(resizes(&metrics, "refused"), 1);
    assert_eq!(resizes(&metrics, "accepted"), 1);
    assert_eq!(resizes(&metrics, "fallback"), 1);
}

#[tokio::test]
async fn read_only_resizes_nothing() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, _lease) = writer(client, Metrics::new());
    w.set_read_only(true);
    assert_eq!(w.apply(resize_op(&["web-1"])).await, WriteOutcome::ReadOnly);
    assert!(requests(&log).is_empty());
}
