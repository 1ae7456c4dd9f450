//! The writer against a mock API server: exact requests, no-op suppression, readOnly, Lease
//! gating, retries. Each writer reports to a metrics registry of its own.

use crate::kube_support;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kerf::api::{PolicyStatus, Signal, WorkloadKind};
use kerf::core::model::{
    ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION, ANNOTATION_RESTARTED_AT,
    ContainerRequests, CoordinatedHpa, GpuMap, GpuRecommendation, PolicyId, ResourceRequests,
    WorkloadKey, render_baseline,
};
use kerf::core::snapshot::Workload;
use kerf::core::writes::WriteOp;
use kerf::core::writes::{ConditionUpdate, GpuAnnotations, WorkloadWrite};
use kerf::core::writes::{CoordinatedChange, EventWrite, HpaTarget, PolicyStatusWrite};
use kerf::telemetry::Metrics;
use kerf::writers::kube::{WriteOutcome, Writer, WriterConfig, WriterHandle};
use kube_support::{Recorded, Reply, calls, mock, requests, status};
use serde_json::{Value, json};
use tokio::sync::watch;

const APPLY: &str = "application/apply-patch+yaml";
const DEPLOYMENT_PATH: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
const MERGE: &str = "application/merge-patch+json";
const GPU_POLICY_STATUS_PATH: &str =
    "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/shop/gpureactivepolicies/gpu/status";

fn template() -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [
            {"name": "app", "image": "app:1", "resources": {
                "requests": {"cpu": "500m", "memory": "256Mi"},
                "limits": {"nvidia.com/gpu": "1"}}},
        ]}
    }))
    .unwrap()
}

fn workload(annotations: BTreeMap<String, String>) -> Workload {
    Workload {
        key: WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
        uid: Some("uid-web".into()),
        labels: [("app".to_string(), "web".to_string())].into(),
        annotations: annotations.into_iter().collect(),
        template: template().into(),
        replicas: Some(2),
        field_managers: Vec::new(),
        ownership: Default::default(),
    }
}

fn recommendation(gpu: f64, minute: u32) -> GpuRecommendation {
    GpuRecommendation {
        containers: GpuMap::from([("app".into(), gpu)]),
        driving_metric: Some(Signal::Compute),
        policy: PolicyId::parse("GpuReactivePolicy/shop/gpu"),
        updated_at: Some(format!("2026-07-01T12:{minute:02}:00Z").parse().unwrap()),
        by_policy: Default::default(),
    }
}

fn gpu(baseline: f64, rec: Option<GpuRecommendation>) -> GpuAnnotations {
    GpuAnnotations {
        baseline: Some(GpuMap::from([("app".into(), baseline)])),
        recommendation: rec,
    }
}

/// The live Deployment the mock serves on GET; `managed` = kerf's managedFields entry, if any.
fn live_deployment(annotations: Value, managed: Option<Value>) -> Value {
    let mut managed_fields = vec![
        json!({"manager": "kubectl", "operation": "Update", "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}),
    ];
    if let Some(m) = managed {
        managed_fields.push(
            json!({"manager": "kerf", "operation": "Apply", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": m}),
        );
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7",
                     "annotations": annotations, "managedFields": managed_fields},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "app:1", "resources": {
                "requests": {"cpu": "700m", "memory": "256Mi"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}
    })
}

fn writer(
    client: kube::Client,
    leader: bool,
    read_only: bool,
) -> (WriterHandle, watch::Sender<bool>) {
    writer_reporting_to(client, leader, read_only, Metrics::new())
}

fn writer_reporting_to(
    client: kube::Client,
    leader: bool,
    read_only: bool,
    metrics: Arc<Metrics>,
) -> (WriterHandle, watch::Sender<bool>) {
    let (lease_tx, lease_rx) = watch::channel(leader);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.metrics = metrics;
    cfg.identity = "kerf-0".into();
    cfg.backoff = Duration::from_millis(10);
    cfg.timeout = Duration::from_secs(5);
    cfg.read_only = read_only;
    (Writer::spawn_with(client, lease_rx, cfg), lease_tx)
}

/// Answers every request with `live` (GET reads it; a patch returns the object).
fn echo_with(live: Value) -> impl FnMut(&Recorded) -> Reply + Send + 'static {
    move |_: &Recorded| Reply::Json(200, live.clone())
}

#[tokio::test]
async fn annotations_are_server_side_applied_by_kerf_and_restart_follows_a_new_recommendation() {
    let (client, log) = mock(echo_with(live_deployment(json!({}), None)));
    let (w, _lease) = writer(client, true, false);
    let rec = recommendation(1.5, 0);
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: workload(BTreeMap::new()).into(),
        gpu: Some(gpu(1.0, Some(rec.clone()))),
        requests: None,
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 3 });

    let seen = requests(&log);
    assert_eq!(seen.len(), 3, "{seen:#?}");
    // 1: read the live object to carry forward what kerf owns there.
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", DEPLOYMENT_PATH)
    );
    // 2: the apply.
    let apply = &seen[1];
    assert_eq!(
        (apply.method.as_str(), apply.path.as_str()),
        ("PATCH", DEPLOYMENT_PATH)
    );
    assert_eq!(apply.content_type, APPLY);
    assert!(apply.query_has("fieldManager=kerf"), "{}", apply.query);
    assert!(apply.query_has("force=true"), "{}", apply.query);
    assert_eq!(
        apply.body,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "annotations": {
                ANNOTATION_GPU_BASELINE: "{\"app\":\"1\"}",
                ANNOTATION_GPU_RECOMMENDATION: rec.render(),
            }}
        })
    );
    // 3: the rolling restart, a merge patch on the pod template.
    let restart = &seen[2];
    assert_eq!(
        (restart.method.as_str(), restart.path.as_str()),
        ("PATCH", DEPLOYMENT_PATH)
    );
    assert_eq!(restart.content_type, "application/merge-patch+json");
    assert!(restart.query_has("fieldManager=kerf"));
    let at = restart.body["spec"]["template"]["metadata"]["annotations"][ANNOTATION_RESTARTED_AT]
        .as_str()
        .expect("restartedAt set");
    at.parse::<jiff::Timestamp>()
        .expect("restartedAt is RFC3339");
    assert_eq!(
        restart.body.as_object().unwrap().len(),
        1,
        "restart patch touches only the template"
    );
}

#[tokio::test]
async fn nothing_is_sent_when_the_workload_already_matches() {
    let (client, log) = mock(echo_with(live_deployment(json!({}), None)));
    let (w, _lease) = writer(client, true, false);
    let rec = recommendation(1.5, 0);
    let annotations = BTreeMap::from([
        (
            ANNOTATION_GPU_BASELINE.to_string(),
            render_baseline(&GpuMap::from([("app".into(), 1.0)])),
        ),
        (ANNOTATION_GPU_RECOMMENDATION.to_string(), rec.render()),
    ]);
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: workload(annotations).into(),
        gpu: Some(gpu(1.0, Some(rec))),
        requests: Some(ContainerRequests::from([(
            "app".to_string(),
            ResourceRequests {
                cpu_millis: Some(500),
                memory_bytes: Some(256 << 20),
            },
        )])),
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::Unchanged);
    assert!(requests(&log).is_empty(), "{:#?}", requests(&log));
}

#[tokio::test]
async fn same_values_with_a_new_timestamp_update_the_annotation_without_a_restart() {
    let old = recommendation(1.5, 0);
    let new = recommendation(1.5, 5);
    let annotations = BTreeMap::from([
        (
            ANNOTATION_GPU_BASELINE.to_string(),
            "{\"app\":\"1\"}".to_string(),
        ),
        (ANNOTATION_GPU_RECOMMENDATION.to_string(), old.render()),
    ]);
    let (client, log) = mock(echo_with(live_deployment(json!(annotations.clone()), None)));
    let (w, _lease) = writer(client, true, false);
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: workload(annotations).into(),
        gpu: Some(gpu(1.0, Some(new.clone()))),
        requests: None,
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 2 });
    let seen = requests(&log);
    assert_eq!(
        seen.iter().filter(|r| r.method == "PATCH").count(),
        1,
        "{seen:#?}"
    );
    assert_eq!(
        seen[1].body["metadata"]["annotations"][ANNOTATION_GPU_RECOMMENDATION],
        json!(new.render())
    );
}

#[tokio::test]
async fn apply_carries_forward_requests_kerf_owns_and_removes_dropped_annotations() {
    // kerf owns app's cpu request (from an earlier coordinated change) and the baseline.
    let managed = json!({
        "f:metadata": {"f:annotations": {format!("f:{ANNOTATION_GPU_BASELINE}"): {},
                                         format!("f:{ANNOTATION_GPU_RECOMMENDATION}"): {}}},
        "f:spec": {"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:resources": {"f:requests": {"f:cpu": {}}}}}}}}
    });
    let annotations = BTreeMap::from([
        (
            ANNOTATION_GPU_BASELINE.to_string(),
            "{\"app\":\"1\"}".to_string(),
        ),
        (
            ANNOTATION_GPU_RECOMMENDATION.to_string(),
            recommendation(1.5, 0).render(),
        ),
    ]);
    let (client, log) = mock(echo_with(live_deployment(
        json!(annotations.clone()),
        Some(managed),
    )));
    let (w, _lease) = writer(client, true, false);
    // The policy went away: both annotations are dropped.
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: workload(annotations).into(),
        gpu: Some(GpuAnnotations::default()),
        requests: None,
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 3 });
    let seen = requests(&log);
    assert_eq!(
        seen[1].body,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "resources": {"requests": {"cpu": "700m"}}}]}}}
        }),
        "the apply omits the annotations (SSA removes them) but keeps kerf's cpu request"
    );
    // The recommendation went away: pods go back to the template's allocation.
    assert!(
        seen[2].body["spec"]["template"]["metadata"]["annotations"][ANNOTATION_RESTARTED_AT]
            .is_string()
    );
}

/// An Argo Rollout restarts through its own `spec.restartAt` (Argo evicts the older pods, no
/// canary steps), never its template: a Rollout with `workloadRef` must keep an empty template,
/// and a template change would start a canary.
#[tokio::test]
async fn a_rollout_restarts_through_spec_restart_at_never_its_template() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, _lease) = writer(client, true, false);
    let key = WorkloadKey::new("shop", WorkloadKind::Rollout, "canary");
    assert_eq!(
        w.apply(WriteOp::Restart(key)).await,
        WriteOutcome::Written { requests: 1 }
    );
    let seen = requests(&log);
    assert_eq!(
        calls(&seen),
        [(
            "PATCH",
            "/apis/argoproj.io/v1alpha1/namespaces/shop/rollouts/canary"
        )]
    );
    let body = &seen[0].body;
    assert!(body["spec"]["restartAt"].as_str().is_some(), "{body}");
    assert!(body["spec"].get("template").is_none(), "{body}");
}

/// A Rollout with `spec.workloadRef` takes its template from the Deployment it names (Argo's
/// `rollout/templateref.go`) and must keep its own empty: its CPU/memory change is
/// server-side applied to that Deployment's template, and nothing is sent to the Rollout.
#[tokio::test]
async fn a_workload_ref_rollout_writes_its_cpu_memory_change_into_the_deployment() {
    let (client, log) = mock(echo_with(live_deployment(json!({}), None)));
    let (w, _lease) = writer(client, true, false);
    let mut rollout = workload(BTreeMap::new());
    rollout.key = WorkloadKey::new("shop", WorkloadKind::Rollout, "canary");
    rollout.ownership.template_ref = Some("web".into());
    rollout.ownership.template_ref_found = true;
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: rollout.into(),
        gpu: None,
        requests: Some(ContainerRequests::from([(
            "app".to_string(),
            ResourceRequests {
                cpu_millis: Some(700),
                memory_bytes: Some(256 << 20),
            },
        )])),
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 2 });
    let seen = requests(&log);
    assert_eq!(
        calls(&seen),
        [("GET", DEPLOYMENT_PATH), ("PATCH", DEPLOYMENT_PATH)]
    );
    assert_eq!(seen[1].content_type, APPLY);
    let body = &seen[1].body;
    assert_eq!(body["apiVersion"], "apps/v1", "{body}");
    assert_eq!(body["kind"], "Deployment", "{body}");
    assert_eq!(
        body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"], "700m",
        "{body}"
    );
    assert!(
        seen.iter().all(|r| !r.path.contains("rollouts")),
        "{seen:#?}"
    );
}

#[tokio::test]
async fn read_only_writes_nothing_to_workloads_or_hpas_but_still_writes_status() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, _lease) = writer(client, true, false);
    w.set_read_only(true);
    let op = WriteOp::Workload(Box::new(WorkloadWrite {
        observed: workload(BTreeMap::new()).into(),
        gpu: Some(gpu(1.0, Some(recommendation(1.5, 0)))),
        requests: None,
        limits: None,
        method: kerf::api::WriteMethod::Apply,
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::ReadOnly);
    assert_eq!(
        w.apply(WriteOp::Restart(WorkloadKey::new(
            "shop",
            WorkloadKind::Deployment,
            "web"
        )))
        .await,
        WriteOutcome::ReadOnly
    );
    assert_eq!(w.apply(coordinated(None)).await, WriteOutcome::ReadOnly);
    assert!(requests(&log).is_empty());
    let status = WriteOp::PolicyStatus(Box::new(PolicyStatusWrite {
        policy: PolicyId::parse("GpuReactivePolicy/shop/gpu").unwrap(),
        generation: Some(1),
        observed: None,
        conditions: vec![ConditionUpdate::new(
            "Ready",
            true,
            "Valid",
            "policy is valid",
        )],
        matched_workloads: None,
    }));
    assert_eq!(w.apply(status).await, WriteOutcome::Written { requests: 1 });
    assert_one_patch(&log, GPU_POLICY_STATUS_PATH, APPLY);
}

/// The one request sent was a PATCH of `path` (subresource included) as `content_type`.
fn assert_one_patch(log: &kube_support::Log, path: &str, content_type: &str) {
    let seen = requests(log);
    assert_eq!(calls(&seen), [("PATCH", path)]);
    assert_eq!(seen[0].content_type, content_type);
}

#[tokio::test]
async fn writer_defaults_to_read_only_until_told() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (lease_tx, lease_rx) = watch::channel(true);
    let w = Writer::spawn(client, "kerf-system", lease_rx, Metrics::new());
    let op = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    assert_eq!(w.apply(op.clone()).await, WriteOutcome::ReadOnly);
    w.set_read_only(false);
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 1 });
    assert_one_patch(&log, DEPLOYMENT_PATH, MERGE);
    drop(lease_tx);
}

fn t(secs: i64) -> Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::from_second(secs).unwrap())
}

#[tokio::test]
async fn policy_status_keeps_transition_times_and_writes_only_on_change() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, _lease) = writer(client, true, true);
    let observed = PolicyStatus {
        conditions: vec![
            Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Valid".into(),
                message: "policy is valid".into(),
                observed_generation: Some(1),
                last_transition_time: t(1_700_000_000),
            },
            Condition {
                type_: "AutomationStrategyResolved".into(),
                status: "True".into(),
                reason: "Resolved".into(),
                message: "strategy shop/s".into(),
                observed_generation: Some(1),
                last_transition_time: t(1_700_000_100),
            },
        ],
        observed_generation: Some(1),
        matched_workloads: Some(3),
    };
    let policy = PolicyId::parse("GpuReactivePolicy/shop/gpu").unwrap();
    let same = PolicyStatusWrite {
        policy: policy.clone(),
        generation: Some(1),
        observed: Some(observed.clone()),
        conditions: vec![
            ConditionUpdate::new("Ready", true, "Valid", "policy is valid"),
            ConditionUpdate::new(
                "AutomationStrategyResolved",
                true,
                "Resolved",
                "strategy shop/s",
            ),
        ],
        matched_workloads: Some(3),
    };
    assert_eq!(
        w.apply(WriteOp::PolicyStatus(Box::new(same.clone()))).await,
        WriteOutcome::Unchanged
    );
    assert!(requests(&log).is_empty());

    let changed = PolicyStatusWrite {
        generation: Some(2),
        conditions: vec![
            ConditionUpdate::new("Ready", false, "InvalidSpec", "spec.weight: bad"),
            ConditionUpdate::new(
                "AutomationStrategyResolved",
                true,
                "Resolved",
                "strategy shop/s",
            ),
            ConditionUpdate::new("PrometheusAvailable", true, "QueriesSucceeded", "ok"),
        ],
        ..same
    };
    assert_eq!(
        w.apply(WriteOp::PolicyStatus(Box::new(changed))).await,
        WriteOutcome::Written { requests: 1 }
    );
    let seen = requests(&log);
    let r = &seen[0];
    assert_eq!(r.method, "PATCH");
    assert_eq!(r.path, GPU_POLICY_STATUS_PATH);
    assert_eq!(r.content_type, APPLY);
    assert!(r.query_has("fieldManager=kerf"));
    assert_eq!(r.body["apiVersion"], "rightsizing.kubex.ai/v1alpha1");
    assert_eq!(r.body["kind"], "GpuReactivePolicy");
    let status = &r.body["status"];
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["matchedWorkloads"], 3);
    let conds = status["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 3);
    assert_eq!(conds[0]["type"], "Ready");
    assert_eq!(conds[0]["status"], "False");
    assert_eq!(conds[0]["reason"], "InvalidSpec");
    assert_eq!(conds[0]["message"], "spec.weight: bad");
    assert_ne!(
        conds[0]["lastTransitionTime"],
        json!("2023-11-14T22:13:20Z"),
        "status changed: new time"
    );
    assert_eq!(
        conds[1]["lastTransitionTime"],
        json!("2023-11-14T22:15:00Z"),
        "status unchanged: time kept"
    );
    assert_eq!(conds[1]["observedGeneration"], 2);
    assert_eq!(conds[2]["type"], "PrometheusAvailable");
}

#[tokio::test]
async fn cluster_policy_status_goes_to_the_cluster_scoped_path() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, _lease) = writer(client, true, true);
    let op = WriteOp::PolicyStatus(Box::new(PolicyStatusWrite {
        policy: PolicyId::parse("ClusterGpuReactivePolicy//all").unwrap(),
        generation: Some(4),
        observed: None,
        conditions: vec![ConditionUpdate::new("Ready", true, "Valid", "")],
        matched_workloads: Some(0),
    }));
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 1 });
    assert_eq!(
        requests(&log)[0].path,
        "/apis/rightsizing.kubex.ai/v1alpha1/clustergpureactivepolicies/all/status"
    );
}

#[tokio::test]
async fn a_server_error_is_retried_then_succeeds() {
    let mut answered = 0;
    let (client, log) = mock(move |r: &Recorded| {
        answered += 1;
        if answered == 1 {
            status(500, "InternalError")
        } else {
            Reply::Json(200, r.body.clone())
        }
    });
    let metrics = Metrics::new();
    let (w, _lease) = writer_reporting_to(client, true, false, metrics.clone());
    let writes = |outcome: &str| {
        metrics
            .cluster_writes
            .get_or_create(&kerf::telemetry::WriteLabels {
                target: "template".into(),
                outcome: outcome.into(),
            })
            .get()
    };
    let op = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::StatefulSet, "db"));
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 1 });
    let seen = requests(&log);
    let db = "/apis/apps/v1/namespaces/shop/statefulsets/db";
    assert_eq!(calls(&seen), [("PATCH", db), ("PATCH", db)]);
    assert_eq!(seen[0].body, seen[1].body);
    assert_eq!(
        (writes("ok"), writes("error")),
        (1, 0),
        "one write, counted once after its retry"
    );
}

#[tokio::test]
async fn gives_up_after_three_tries_and_does_not_retry_client_errors() {
    let (client, log) = mock(|_: &Recorded| status(503, "ServiceUnavailable"));
    let (w, _lease) = writer(client, true, false);
    let op = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    match w.apply(op).await {
        WriteOutcome::Failed(m) => assert!(m.contains("after 3 attempts"), "{m}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(
        calls(&requests(&log)),
        [("PATCH", DEPLOYMENT_PATH); 3],
        "the same restart, tried three times"
    );

    let (client, log) = mock(|_: &Recorded| status(422, "Invalid"));
    let (w, _lease) = writer(client, true, false);
    let op = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    assert!(matches!(w.apply(op).await, WriteOutcome::Failed(_)));
    assert_eq!(
        calls(&requests(&log)),
        [("PATCH", DEPLOYMENT_PATH)],
        "a 422 is not retried"
    );
}

#[tokio::test]
async fn a_follower_sends_nothing_and_losing_the_lease_stops_writes() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, lease) = writer(client, false, false);
    let op = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    assert_eq!(w.apply(op.clone()).await, WriteOutcome::NotLeader);
    assert!(requests(&log).is_empty());
    lease.send(true).unwrap();
    assert_eq!(
        w.apply(op.clone()).await,
        WriteOutcome::Written { requests: 1 }
    );
    lease.send(false).unwrap();
    for _ in 0..5 {
        assert_eq!(w.apply(op.clone()).await, WriteOutcome::NotLeader);
    }
    assert_eq!(
        calls(&requests(&log)),
        [("PATCH", DEPLOYMENT_PATH)],
        "only the restart made while leader"
    );
}

fn hpa(target: i32) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                     "target": {"type": "Utilization", "averageUtilization": target}}}]}
    }))
    .unwrap()
}

fn coordinated(observed_target: Option<i32>) -> WriteOp {
    WriteOp::Coordinated(Box::new(CoordinatedChange {
        workload: WorkloadWrite {
            observed: workload(BTreeMap::new()).into(),
            gpu: Some(GpuAnnotations::default()),
            requests: Some(ContainerRequests::from([(
                "app".to_string(),
                ResourceRequests {
                    cpu_millis: Some(400),
                    memory_bytes: None,
                },
            )])),
            limits: None,
            method: kerf::api::WriteMethod::Apply,
        },
        hpa: HpaTarget {
            namespace: "shop".into(),
            name: "web".into(),
            resource: "cpu".into(),
            average_utilization: 88,
            observed: observed_target.map(hpa),
        },
    }))
}

/// The live Deployment on GET (kerf reads what it owns before every apply); patches echoed.
fn live_then_echo(r: &Recorded) -> Reply {
    if r.method == "GET" {
        Reply::Json(200, live_deployment(json!({}), None))
    } else {
        Reply::Json(200, r.body.clone())
    }
}

/// The requests but the GET of the live workload.
fn patches(log: &kube_support::Log) -> Vec<Recorded> {
    requests(log)
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect()
}

#[tokio::test]
async fn a_coordinated_change_applies_template_requests_and_the_hpa_target_together() {
    let (client, log) = mock(live_then_echo);
    let (w, _lease) = writer(client, true, false);
    // Requests shrink (500m → 400m) so the target rises (70 → 88): template first.
    assert_eq!(
        w.apply(coordinated(Some(70))).await,
        WriteOutcome::Written { requests: 3 }
    );
    let seen = patches(&log);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, DEPLOYMENT_PATH);
    assert_eq!(seen[0].content_type, APPLY);
    assert!(seen[0].query_has("fieldManager=kerf"));
    assert_eq!(
        seen[0].body["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "resources": {"requests": {"cpu": "400m"}}}])
    );
    assert_eq!(
        seen[1].path,
        "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web"
    );
    assert_eq!(seen[1].content_type, APPLY);
    assert!(seen[1].query_has("fieldManager=kerf"));
    assert_eq!(
        seen[1].body,
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"metrics": [{"type": "Resource", "resource": {"name": "cpu",
                   "target": {"type": "Utilization", "averageUtilization": 88}}}]}})
    );

    // A falling target goes first; an HPA already at the target is not written.
    let (client, log) = mock(live_then_echo);
    let (w, _lease) = writer(client, true, false);
    assert_eq!(
        w.apply(coordinated(Some(95))).await,
        WriteOutcome::Written { requests: 3 }
    );
    let seen = patches(&log);
    assert!(seen[0].path.contains("horizontalpodautoscalers"));
    assert_eq!(seen[1].path, DEPLOYMENT_PATH);
    let (client, log) = mock(live_then_echo);
    let (w, _lease) = writer(client, true, false);
    assert_eq!(
        w.apply(coordinated(Some(88))).await,
        WriteOutcome::Written { requests: 2 }
    );
    assert_eq!(patches(&log)[0].path, DEPLOYMENT_PATH);
}

/// docs/design/hpa-coordination.md#h1: the writer reads an HPA without metrics as the engine and
/// admission do, at CPU utilization 80 %.
#[tokio::test]
async fn an_hpa_without_metrics_is_cpu_utilization_80_percent() {
    let without_metrics = |target: i32| {
        let WriteOp::Coordinated(mut c) = coordinated(Some(0)) else {
            unreachable!()
        };
        c.hpa.observed.as_mut().unwrap().spec.metrics = None;
        c.hpa.average_utilization = target;
        WriteOp::Coordinated(c)
    };
    // 80 → 88 rises: the template goes first, then the metric is written out.
    let (client, log) = mock(live_then_echo);
    let (w, _lease) = writer(client, true, false);
    assert_eq!(
        w.apply(without_metrics(88)).await,
        WriteOutcome::Written { requests: 3 }
    );
    let seen = patches(&log);
    assert_eq!(seen[0].path, DEPLOYMENT_PATH);
    assert_eq!(
        seen[1].body["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 88}}}])
    );
    // 80 → 70 falls: the HPA goes first.
    let (client, log) = mock(live_then_echo);
    let (w, _lease) = writer(client, true, false);
    assert_eq!(
        w.apply(without_metrics(70)).await,
        WriteOutcome::Written { requests: 3 }
    );
    assert!(patches(&log)[0].path.contains("horizontalpodautoscalers"));
    // 80 is already the target: only the template is written.
    let (client, log) = mock(live_then_echo);
    let (w, _lease) = writer(client, true, false);
    assert_eq!(
        w.apply(without_metrics(80)).await,
        WriteOutcome::Written { requests: 2 }
    );
    assert_eq!(patches(&log)[0].path, DEPLOYMENT_PATH);
}

#[tokio::test]
async fn events_carry_the_hpa_details() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(201, r.body.clone()));
    let (w, _lease) = writer(client, true, true);
    let wl = workload(BTreeMap::new());
    let applied = EventWrite::applied(
        &wl,
        &CoordinatedHpa {
            hpa_name: "web".into(),
            resource: "cpu".into(),
            target_before: 70,
            target_after: 88,
        },
    );
    assert_eq!(
        w.apply(WriteOp::Event(Box::new(applied))).await,
        WriteOutcome::Written { requests: 1 }
    );
    let blocked = EventWrite::blocked(&wl, "HPACoupled", "target 95% is above maxUtilization 85%");
    assert_eq!(
        w.apply(WriteOp::Event(Box::new(blocked))).await,
        WriteOutcome::Written { requests: 1 }
    );
    let seen = requests(&log);
    let e = &seen[0];
    assert_eq!(
        (e.method.as_str(), e.path.as_str()),
        ("POST", "/apis/events.k8s.io/v1/namespaces/shop/events")
    );
    assert_eq!(e.body["reason"], "Applied");
    assert_eq!(e.body["type"], "Normal");
    assert_eq!(
        e.body["metadata"]["annotations"],
        json!({"hpa": "web", "hpaResource": "cpu", "hpaTargetFrom": "70", "hpaTargetTo": "88"})
    );
    assert_eq!(
        e.body["regarding"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "shop", "uid": "uid-web"})
    );
    assert_eq!(e.body["reportingController"], "kerf");
    assert_eq!(e.body["reportingInstance"], "kerf-0");
    assert!(e.body["eventTime"].is_string());
    let b = &seen[1];
    assert_eq!(b.body["reason"], "Blocked");
    assert_eq!(b.body["type"], "Warning");
    assert!(b.body["note"].as_str().unwrap().starts_with("HPACoupled: "));
    assert_eq!(b.body["metadata"]["annotations"]["reason"], "HPACoupled");
}

#[tokio::test]
async fn a_stopped_lease_task_is_not_trusted_to_hold_the_lease() {
    let (client, log) = mock(|r: &Recorded| Reply::Json(200, r.body.clone()));
    let (w, lease) = writer(client, true, false);
    let op = WriteOp::Restart(WorkloadKey::new("shop", WorkloadKind::Deployment, "web"));
    assert_eq!(
        w.apply(op.clone()).await,
        WriteOutcome::Written { requests: 1 }
    );
    // The Lease task is gone (its sender dropped) while its last word was "leader": nobody
    // renews the Lease any more, another replica may hold it.
    drop(lease);
    assert_eq!(w.apply(op).await, WriteOutcome::NotLeader);
    assert_eq!(
        calls(&requests(&log)),
        [("PATCH", DEPLOYMENT_PATH)],
        "only the restart made while the Lease task ran"
    );
}
