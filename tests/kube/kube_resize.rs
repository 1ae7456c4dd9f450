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

pub(crate) fn writer(
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

pub(crate) fn resize_op(pods: &[&str]) -> WriteOp {
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
            limits: Default::default(),
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

/// The worked example (examples/hpa) with its strategy resizing in place; without its HPA
/// unless `keep_hpa`.
fn example(keep_hpa: bool) -> kerf::core::snapshot::Snapshot {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hpa/manifests");
    let mut s = kerf::sources::dir::load_dir(&dir).unwrap().snapshot;
    for strategy in s.strategies.values_mut() {
        std::sync::Arc::make_mut(strategy).enablement.resize =
            Some(kerf::api::Resize::InPlaceOrRollout);
    }
    if !keep_hpa {
        s.hpas.clear();
    }
    s.resize = kerf::core::snapshot::ResizeSupport::Served;
    s
}

/// The example evaluated, planned and sent through a real writer to the mock API server: the
/// request log shows what reached the cluster.
async fn sent(s: &kerf::core::snapshot::Snapshot) -> Vec<Recorded> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hpa/metrics.om");
    let source = kerf::metrics::file::FileSource::from_path(&path).unwrap();
    let now = "2026-01-01T12:00:00Z".parse().unwrap();
    let cycle = kerf::reconcile::run_cycle(s, &source, now, 15).await;
    let ops = kerf::reconcile::plan_writes(s, &cycle, &[], &[], now);
    let (client, log) = mock(|r: &Recorded| {
        if r.method == "GET" && r.path == DEPLOYMENT {
            return Reply::Json(200, live_deployment());
        }
        Reply::Json(200, r.body.clone())
    });
    let (w, _lease) = writer(client, Metrics::new());
    for op in ops {
        w.apply(op).await;
    }
    requests(&log)
}

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";

/// The example's Deployment as the API server serves it.
fn live_deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "app", "image": "ghcr.io/example/web:1.0",
                 "resources": {"requests": {"cpu": "1000m", "memory": "512Mi"}}}]}}}})
}

/// A non-HPA CPU change under `inPlaceOrRollout`: one resize per running pod, exact bodies, and
/// no request to the Deployment at all.
#[tokio::test]
async fn the_cluster_sees_pod_resizes_and_no_write_to_the_template() {
    let seen = sent(&example(false)).await;
    assert!(
        !seen.iter().any(|r| r.path.starts_with(DEPLOYMENT)),
        "{:?}",
        calls(&seen)
    );
    let resizes: Vec<&Recorded> = seen
        .iter()
        .filter(|r| r.path.ends_with("/resize"))
        .collect();
    let paths: Vec<&str> = resizes.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/shop/pods/web-6d4b8c7f9-a1b2c/resize",
            "/api/v1/namespaces/shop/pods/web-6d4b8c7f9-d3e4f/resize",
            "/api/v1/namespaces/shop/pods/web-6d4b8c7f9-g5h6i/resize",
        ]
    );
    for r in resizes {
        assert_eq!(r.method, "PATCH");
        assert_eq!(r.content_type, STRATEGIC);
        assert_eq!(r.body, body("700m"));
    }
}

/// The HPA-coordinated change rolls out as before: the Deployment's template and the HPA are
/// applied, no pod is resized.
#[tokio::test]
async fn an_hpa_coordinated_change_reaches_the_cluster_as_a_template_write() {
    let seen = sent(&example(true)).await;
    assert!(!seen.iter().any(|r| r.path.ends_with("/resize")));
    assert!(
        seen.iter()
            .any(|r| r.method == "PATCH" && r.path == DEPLOYMENT),
        "{:?}",
        calls(&seen)
    );
    assert!(
        seen.iter()
            .any(|r| r.path.contains("horizontalpodautoscalers/web"))
    );
}

pub(crate) fn evict_op(pod: &str) -> WriteOp {
    let key = WorkloadKey::new("ml", WorkloadKind::InferenceService, "llm");
    WriteOp::Evict(Box::new(kerf::core::writes::EvictWrite {
        workload: key.clone(),
        pod: kerf::core::writes::eviction::PodEviction {
            namespace: "ml".into(),
            pod: pod.into(),
        },
        event: EventWrite {
            regarding: key,
            uid: None,
            warning: false,
            reason: "Evicted".into(),
            action: "Evict".into(),
            note: format!("evicting pod {pod}"),
            details: Default::default(),
        },
    }))
}

fn evictions(metrics: &Metrics, outcome: &str) -> u64 {
    metrics
        .evictions
        .get_or_create(&kerf::telemetry::EvictionLabels {
            outcome: outcome.into(),
        })
        .get()
}

/// An eviction is a POST to the pod's eviction subresource (kube's `Api::evict`), then its
/// Event; a PodDisruptionBudget's 429 is counted and left for the next turn (no retry, no
/// Event, nothing forced).
#[tokio::test]
async fn evictions_go_through_the_eviction_api_and_a_disruption_budget_refusal_waits() {
    let (client, log) = mock(|r: &Recorded| {
        if r.path.ends_with("/pods/llm-predictor-b/eviction") {
            return Reply::Json(
                429,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                       "reason": "TooManyRequests", "code": 429}),
            );
        }
        if r.path.ends_with("/eviction") {
            return Reply::Json(
                201,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
            );
        }
        Reply::Json(200, r.body.clone())
    });
    let metrics = Metrics::new();
    let (w, _lease) = writer(client, metrics.clone());
    assert_eq!(
        w.apply(evict_op("llm-predictor-a")).await,
        WriteOutcome::Written { requests: 2 }
    );
    assert_eq!(
        w.apply(evict_op("llm-predictor-b")).await,
        WriteOutcome::Written { requests: 1 }
    );
    let seen = requests(&log);
    assert_eq!(
        calls(&seen),
        [
            (
                "POST",
                "/api/v1/namespaces/ml/pods/llm-predictor-a/eviction"
            ),
            ("POST", "/apis/events.k8s.io/v1/namespaces/ml/events"),
            (
                "POST",
                "/api/v1/namespaces/ml/pods/llm-predictor-b/eviction"
            ),
        ],
        "the refused eviction is sent once"
    );
    assert_eq!(evictions(&metrics, "evicted"), 1);
    assert_eq!(evictions(&metrics, "disruption_budget"), 1);
}

/// The Eviction API's other budget answers (kubernetes `pkg/registry/core/pod/storage/
/// eviction.go`): a pod under two PodDisruptionBudgets gets 500, a budget whose
/// `disruptionsAllowed` is negative 403. Each is counted as the budget's refusal, sent once and
/// left to the pace like a 429, not as a failure; another 500 stays a failure.
#[tokio::test]
async fn two_budgets_and_a_negative_budget_are_budget_refusals_paced_like_a_429() {
    let (client, log) = mock(|r: &Recorded| {
        let status = |code: u16, reason: &str, message: &str| {
            Reply::Json(
                code,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": message, "reason": reason, "code": code}),
            )
        };
        if r.path.ends_with("/pods/two-budgets/eviction") {
            return status(
                500,
                "InternalError",
                "Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            );
        }
        if r.path.ends_with("/pods/negative/eviction") {
            return status(
                403,
                "Forbidden",
                "poddisruptionbudgets.policy \"llm\" is forbidden: pdb disruptions allowed is negative",
            );
        }
        if r.path.ends_with("/pods/broken/eviction") {
            return status(500, "InternalError", "etcdserver: request timed out");
        }
        Reply::Json(200, r.body.clone())
    });
    let metrics = Metrics::new();
    let (w, _lease) = writer(client, metrics.clone());
    for pod in ["two-budgets", "negative"] {
        assert_eq!(
            w.apply(evict_op(pod)).await,
            WriteOutcome::Written { requests: 1 },
            "{pod}"
        );
    }
    assert_eq!(evictions(&metrics, "disruption_budget"), 2);
    assert_eq!(evictions(&metrics, "failed"), 0);
    let seen = requests(&log);
    assert_eq!(
        seen.len(),
        2,
        "each sent once, no Event: {:?}",
        calls(&seen)
    );
    assert!(!matches!(
        w.apply(evict_op("broken")).await,
        WriteOutcome::Written { .. }
    ));
    assert_eq!(
        evictions(&metrics, "failed"),
        1,
        "a server error is a failure"
    );
}

/// The example's pods as the API server serves them after kerf's resize (spec at 700m), with
/// the kubelet's `condition` (type, reason) set 2 minutes before the cycle, if any.
fn resized(
    mut s: kerf::core::snapshot::Snapshot,
    condition: Option<(&str, &str)>,
) -> kerf::core::snapshot::Snapshot {
    for pod in &mut s.pods {
        let mut v = serde_json::to_value(&**pod).unwrap();
        v["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "700m".into();
        if let Some((type_, reason)) = condition {
            v["status"]["conditions"] = json!([{"type": type_, "status": "True", "reason": reason,
                "message": "Node didn't have enough capacity: cpu",
                "lastTransitionTime": "2026-01-01T11:58:00Z"}]);
        }
        *pod = std::sync::Arc::new(serde_json::from_value(v).unwrap());
    }
    s
}

/// Deferred, then applied: while the kubelet defers (within its 5 minutes) and once the pods
/// run the new requests, the cluster sees neither a resize nor a template write.
#[tokio::test]
async fn a_deferred_then_applied_resize_sends_nothing_more() {
    for s in [
        resized(example(false), Some(("PodResizePending", "Deferred"))),
        resized(example(false), None),
    ] {
        let seen = sent(&s).await;
        assert!(
            !seen.iter().any(|r| r.path.ends_with("/resize")
                || r.path.starts_with(DEPLOYMENT) && r.method == "PATCH"),
            "{:?}",
            calls(&seen)
        );
    }
}

/// Infeasible: the change rolls out — the Deployment's template is applied, a `ResizeFallback`
/// Event says why, and no pod is resized.
#[tokio::test]
async fn an_infeasible_resize_reaches_the_cluster_as_a_template_write() {
    let seen = sent(&resized(
        example(false),
        Some(("PodResizePending", "Infeasible")),
    ))
    .await;
    assert!(!seen.iter().any(|r| r.path.ends_with("/resize")));
    assert!(
        seen.iter()
            .any(|r| r.method == "PATCH" && r.path == DEPLOYMENT),
        "{:?}",
        calls(&seen)
    );
    assert!(
        seen.iter()
            .any(|r| r.path.ends_with("/events") && r.body["reason"] == "ResizeFallback"),
        "{:?}",
        calls(&seen)
    );
}
