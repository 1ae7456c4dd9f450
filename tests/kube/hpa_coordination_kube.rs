//! HPA coordination end to end against a mock API server: the documentation's worked example
//! (examples/hpa: CPU target 50 %, 1000m → 700m ⇒ 71 %) evaluated by the real pipeline, planned by
//! `plan_writes` and sent through a real `Writer`; blocking, readOnly, rollback and release, and
//! `kerf rollback`.

use crate::kube_support;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kerf::api::{
    RecommendationPhase, ResourceMode, RightsizingRecommendation, RightsizingRecommendationSpec,
    WorkloadKind,
};
use kerf::core::model::{ANNOTATION_ROLLBACK, WorkloadKey};
use kerf::core::persisted::PersistedRecommendation;
use kerf::core::recommenders::cycle::CycleOutput;
use kerf::core::snapshot::Snapshot;
use kerf::core::writes::WriteOp;
use kerf::core::writes::{RecommendationWrite, RestoreKind, RestoreWrite};
use kerf::reconcile::run_cycle;
use kerf::reconcile::{held_back, plan_writes, serve_persisted};
use kerf::writers::kube::{WriteOutcome, Writer, WriterConfig, WriterHandle};
use kube_support::{Recorded, Reply, calls, mock, requests, status};
use serde_json::{Value, json};
use tokio::sync::watch;

const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
const HPA: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";
const REC: &str =
    "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/shop/rightsizingrecommendations/deployment-web";

fn now() -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap()
}

fn key() -> WorkloadKey {
    WorkloadKey::new("shop", WorkloadKind::Deployment, "web")
}

fn example() -> Snapshot {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hpa/manifests");
    kerf::sources::dir::load_dir(&dir).unwrap().snapshot
}

async fn cycle(s: &Snapshot) -> CycleOutput {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hpa/metrics.om");
    let source = kerf::metrics::file::FileSource::from_path(&path).unwrap();
    run_cycle(s, &source, now(), 15).await
}

/// The example after kerf's coordinated change: template at `cpu`, HPA at `target`.
fn example_at(cpu: &str, target: i32) -> Snapshot {
    let mut s = example();
    let w = s.workloads.iter_mut().find(|w| w.key == key()).unwrap();
    let w = std::sync::Arc::make_mut(w);
    let c = &mut w.template.spec.as_mut().unwrap().containers[0];
    c.resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap()
        .insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
        );
    let hpa = s.hpas.iter_mut().next().unwrap();
    hpa.spec.metrics.as_mut().unwrap()[0]
        .resource
        .as_mut()
        .unwrap()
        .target
        .average_utilization = Some(target);
    s
}

fn annotate_rollback(s: &mut Snapshot) {
    let w = s.workloads.iter_mut().find(|w| w.key == key()).unwrap();
    std::sync::Arc::make_mut(w)
        .annotations
        .insert(ANNOTATION_ROLLBACK.into(), "2026-01-01T11:59:00Z".into());
}

fn writer(client: kube::Client, read_only: bool) -> (WriterHandle, watch::Sender<bool>) {
    let (lease_tx, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.identity = "kerf-0".into();
    cfg.backoff = Duration::from_millis(10);
    cfg.timeout = Duration::from_secs(5);
    cfg.read_only = read_only;
    (Writer::spawn_with(client, lease_rx, cfg), lease_tx)
}

async fn send_all(w: &WriterHandle, ops: Vec<WriteOp>) -> Vec<WriteOutcome> {
    let mut out = Vec::new();
    for op in ops {
        out.push(w.apply(op).await);
    }
    out
}

/// The live Deployment: `cpu` request, extra annotations, kerf's managedFields entry if any.
fn live_deployment(cpu: &str, annotations: Value, kerf_fields: Option<Value>) -> Value {
    let mut managed = vec![
        json!({"manager": "kubectl-client-side-apply", "operation": "Update",
        "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {},
                "f:resources": {"f:requests": {"f:memory": {}}}}}}}}}}),
    ];
    if let Some(f) = kerf_fields {
        managed.push(
            json!({"manager": "kerf", "operation": "Apply", "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1", "fieldsV1": f}),
        );
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web", "resourceVersion": "9",
                     "annotations": annotations, "managedFields": managed},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "ghcr.io/example/web:1.0",
                "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]}}}
    })
}

/// kerf's Apply entry after the coordinated change: app's cpu request.
fn kerf_owns_cpu() -> Value {
    json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
        ".": {}, "f:name": {}, "f:resources": {"f:requests": {"f:cpu": {}}}}}}}}})
}

fn live_hpa(target: i32, managed: Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "4",
                     "managedFields": managed},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                     "target": {"type": "Utilization", "averageUtilization": target}}}]}
    })
}

fn metrics(target: i32) -> Value {
    json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": target}}}])
}

/// The patch as the object the server returns: `null`s (removals) gone.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A request answered with its own body, completed with what a typed client needs back (the
/// metadata and spec a status patch leaves out).
fn echo(r: &Recorded) -> Reply {
    let mut body = without_nulls(&r.body);
    if body.get("metadata").is_none() {
        body["metadata"] = json!({"name": "x", "namespace": "shop"});
    }
    if r.path.contains("rightsizingrecommendations") && body.get("spec").is_none() {
        body["spec"] = json!({"workload": {"kind": "Deployment", "name": "web"}});
    }
    Reply::Json(if r.method == "POST" { 201 } else { 200 }, body)
}

/// Deployment GETs get `live`; every other request is echoed.
fn serve(live: Value) -> impl FnMut(&Recorded) -> Reply + Send + 'static {
    move |r: &Recorded| {
        if r.method == "GET" && r.path == DEPLOYMENT {
            Reply::Json(200, live.clone())
        } else {
            echo(r)
        }
    }
}

fn recommendation_write(ops: &[WriteOp]) -> &RecommendationWrite {
    ops.iter()
        .find_map(|op| match op {
            WriteOp::Recommendation(r) if r.name == "deployment-web" => Some(&**r),
            _ => None,
        })
        .expect("a RightsizingRecommendation write for deployment-web")
}

/// The RightsizingRecommendation as the API server holds it after `w` was written.
/// Admission sets none of kerf's CPU/memory values or HPA target on the example workload.
fn serves_no_cpu_memory_or_hpa_target(store: &kerf::state::Store) {
    let state = store.get(&key());
    assert!(
        state
            .as_ref()
            .is_none_or(|st| st.resources.is_empty() && st.hpa.is_none()),
        "{state:?}"
    );
}

fn as_written(w: &RecommendationWrite) -> Arc<PersistedRecommendation> {
    let mut rec = RightsizingRecommendation::new(&w.name, w.spec.clone());
    rec.metadata.namespace = Some(w.namespace.clone());
    rec.status = w.status.clone();
    Arc::new(PersistedRecommendation::of(rec).unwrap())
}

/// Cycle one on the example: kerf applies 700m and 71 % and records what it replaced.
async fn applied_recommendation() -> Arc<PersistedRecommendation> {
    let s = example();
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[], now());
    as_written(recommendation_write(&ops))
}

fn restore_op(ops: &[WriteOp]) -> &RestoreWrite {
    let restores: Vec<&RestoreWrite> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Restore(r) => Some(&**r),
            _ => None,
        })
        .collect();
    assert_eq!(restores.len(), 1, "{ops:#?}");
    restores[0]
}

fn touches_workload_or_hpa(r: &Recorded) -> bool {
    r.path.starts_with("/apis/apps/") || r.path.contains("horizontalpodautoscalers")
}

// ---- the coordinated change ----

#[tokio::test]
async fn worked_example_applies_700m_and_71_percent_in_one_step() {
    let s = example();
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[], now());
    let coordinated: Vec<_> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Coordinated(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(coordinated.len(), 1, "{ops:#?}");
    assert_eq!(coordinated[0].hpa.average_utilization, 71);
    assert_eq!(
        coordinated[0].workload.requests.as_ref().unwrap()["app"].cpu_millis,
        Some(700)
    );

    let (client, log) = mock(serve(live_deployment("1", json!({}), None)));
    let (w, _lease) = writer(client, false);
    for outcome in send_all(&w, ops).await {
        assert!(
            !matches!(outcome, WriteOutcome::Failed(_)),
            "{outcome:?}: {:#?}",
            requests(&log)
        );
    }
    let seen = requests(&log);
    let patches: Vec<&Recorded> = seen
        .iter()
        .filter(|r| r.method == "PATCH" && touches_workload_or_hpa(r))
        .collect();
    assert_eq!(patches.len(), 2, "{seen:#?}");
    // Requests shrink, so the target rises: the template goes first.
    let (template, hpa) = (patches[0], patches[1]);
    assert_eq!(template.path, DEPLOYMENT);
    assert_eq!(template.content_type, APPLY);
    assert!(template.query_has("fieldManager=kerf") && template.query_has("force=true"));
    assert_eq!(
        template.body,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"template": {"spec": {"containers": [
                   {"name": "app", "resources": {"requests": {"cpu": "700m"}}}]}}}})
    );
    assert_eq!(hpa.path, HPA);
    assert_eq!(hpa.content_type, APPLY);
    assert!(hpa.query_has("fieldManager=kerf") && hpa.query_has("force=true"));
    assert_eq!(
        hpa.body,
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"metrics": metrics(71)}})
    );
    assert_eq!(
        hpa.body["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        71
    );

    let events: Vec<&Recorded> = seen.iter().filter(|r| r.path == EVENTS).collect();
    assert_eq!(events.len(), 1, "{seen:#?}");
    assert_eq!(events[0].body["reason"], "Applied");
    assert_eq!(
        events[0].body["metadata"]["annotations"],
        json!({"hpa": "web", "hpaResource": "cpu", "hpaTargetFrom": "50", "hpaTargetTo": "71"})
    );

    let status = seen
        .iter()
        .find(|r| r.path == format!("{REC}/status"))
        .expect("recommendation status written");
    assert!(status.query_has("fieldManager=kerf"));
    let st = &status.body["status"];
    assert_eq!(st["phase"], "applied");
    assert_eq!(st["previousHPATarget"], 50);
    assert_eq!(st["originalRequests"], json!({"app": {"cpu": "1"}}));
    assert_eq!(st["lastAppliedTime"], "2026-01-01T12:00:00Z");
}

#[tokio::test]
async fn coordinate_false_blocks_with_hpacoupled_and_writes_neither_template_nor_hpa() {
    let mut s = example();
    s.rightsizing_policies[0].spec.hpa.coordinate = false;
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[], now());
    assert!(
        !ops.iter()
            .any(|op| matches!(op, WriteOp::Coordinated(_) | WriteOp::Workload(_))),
        "{ops:#?}"
    );
    let (client, log) = mock(serve(live_deployment("1", json!({}), None)));
    let (w, _lease) = writer(client, false);
    send_all(&w, ops).await;
    let seen = requests(&log);
    assert!(
        !seen.iter().any(touches_workload_or_hpa),
        "nothing written to the Deployment or the HPA: {seen:#?}"
    );
    let events: Vec<&Recorded> = seen.iter().filter(|r| r.path == EVENTS).collect();
    assert_eq!(events.len(), 1, "{seen:#?}");
    let e = &events[0].body;
    assert_eq!(e["reason"], "Blocked");
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["metadata"]["annotations"]["reason"], "HPACoupled");
    assert!(
        e["note"]
            .as_str()
            .unwrap()
            .contains("spec.hpa.coordinate is off"),
        "{e}"
    );
    let status = seen
        .iter()
        .find(|r| r.path == format!("{REC}/status"))
        .unwrap();
    assert_eq!(status.body["status"]["phase"], "blocked");
    assert_eq!(status.body["status"]["reason"], "HPACoupled");
    assert!(status.body["status"].get("previousHPATarget").is_none());
}

#[tokio::test]
async fn read_only_writes_no_hpa_or_workload_not_even_a_rollback() {
    let mut s = example();
    s.global.read_only = true;
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[], now());
    let (client, log) = mock(serve(live_deployment("1", json!({}), None)));
    let (w, _lease) = writer(client, true);
    send_all(&w, ops).await;
    let seen = requests(&log);
    assert!(
        !seen.is_empty(),
        "status and recommendations are still written"
    );
    assert!(!seen.iter().any(touches_workload_or_hpa), "{seen:#?}");
    let status = seen
        .iter()
        .find(|r| r.path == format!("{REC}/status"))
        .unwrap();
    assert_eq!(status.body["status"]["phase"], "audit-only");
    assert_eq!(status.body["status"]["reason"], "ReadOnly");

    // A rollback asked for under readOnly waits for it to be lifted.
    let rec = applied_recommendation().await;
    let mut s = example_at("700m", 71);
    s.global.read_only = true;
    annotate_rollback(&mut s);
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[rec], now());
    assert!(
        !ops.iter().any(|op| matches!(
            op,
            WriteOp::Restore(_) | WriteOp::Coordinated(_) | WriteOp::Workload(_)
        )),
        "{ops:#?}"
    );
}

// ---- rollback ----

#[tokio::test]
async fn plan_rollback_restores_both_and_then_holds_until_the_recommendation_is_deleted() {
    let rec = applied_recommendation().await;
    assert_eq!(rec.status.as_ref().unwrap().previous_hpa_target, Some(50));
    let mut s = example_at("700m", 71);
    annotate_rollback(&mut s);
    let c = cycle(&s).await;
    let ops = plan_writes(&s, &c, &[], std::slice::from_ref(&rec), now());
    assert!(
        !ops.iter()
            .any(|op| matches!(op, WriteOp::Coordinated(_) | WriteOp::Workload(_))),
        "a rollback replaces this cycle's apply: {ops:#?}"
    );
    assert!(
        !ops.iter()
            .any(|op| matches!(op, WriteOp::Recommendation(r) if r.name == "deployment-web")),
        "the recommendation is written by the restore, after it"
    );
    let r = restore_op(&ops);
    assert_eq!(r.kind, RestoreKind::Rollback);
    assert_eq!(r.observed.key, key());
    assert_eq!(r.requests["app"].cpu_millis, Some(1000));
    assert_eq!(
        r.requests["app"].memory_bytes, None,
        "memory was never applied"
    );
    let hpa = r.hpa.as_ref().unwrap();
    assert_eq!((hpa.name.as_str(), hpa.resource.as_str()), ("web", "cpu"));
    assert_eq!(hpa.average_utilization, 50);
    let status = r.recommendation.as_ref().unwrap().status.clone().unwrap();
    assert_eq!(status.phase, RecommendationPhase::AuditOnly);
    assert_eq!(status.reason.as_deref(), Some("RolledBack"));
    assert_eq!(status.previous_hpa_target, None);
    assert!(status.original_requests.is_empty());
    assert_eq!(r.event.reason, "RolledBack");
    assert_eq!(r.event.details["hpaTargetFrom"], "71");
    assert_eq!(r.event.details["hpaTargetTo"], "50");
    // Admission stops setting kerf's values at once, though the recommendation still records
    // the applied change.
    assert!(held_back(&s, std::slice::from_ref(&rec)).contains(&key()));
    let store = kerf::state::Store::default();
    serve_persisted(&store, &s, std::slice::from_ref(&rec));
    serves_no_cpu_memory_or_hpa_target(&store);

    // The next cycles: annotation gone, values restored, the recommendation says RolledBack.
    let rolled_back = as_written(r.recommendation.as_ref().unwrap());
    let s = example_at("1", 50);
    let c = cycle(&s).await;
    let ops = plan_writes(&s, &c, &[], std::slice::from_ref(&rolled_back), now());
    assert!(
        !ops.iter().any(|op| matches!(
            op,
            WriteOp::Coordinated(_) | WriteOp::Workload(_) | WriteOp::Restore(_)
        )),
        "{ops:#?}"
    );
    let st = recommendation_write(&ops).status.clone().unwrap();
    assert_eq!(st.phase, RecommendationPhase::AuditOnly);
    assert_eq!(st.reason.as_deref(), Some("RolledBack"));
    assert!(st.original_requests.is_empty() && st.previous_hpa_target.is_none());
    let held = held_back(&s, std::slice::from_ref(&rolled_back));
    assert_eq!(held.len(), 1);
    let store = kerf::state::Store::default();
    serve_persisted(&store, &s, std::slice::from_ref(&rolled_back));
    serves_no_cpu_memory_or_hpa_target(&store);
    let store = kerf::state::Store::default();
    serve_persisted(&store, &s, std::slice::from_ref(&rec));
    assert_eq!(
        store
            .get(&key())
            .unwrap()
            .hpa
            .as_ref()
            .unwrap()
            .target_after,
        71,
        "without the hold admission would enforce 71 % again"
    );

    // Deleting the RightsizingRecommendation resumes: a fresh coordinated change.
    let ops = plan_writes(&s, &c, &[], &[], now());
    assert!(
        ops.iter()
            .any(|op| matches!(op, WriteOp::Coordinated(c) if c.hpa.average_utilization == 71)),
        "{ops:#?}"
    );
}

#[tokio::test]
async fn rollback_requests_restore_hpa_then_template_then_drop_the_annotation() {
    let rec = applied_recommendation().await;
    let mut s = example_at("700m", 71);
    annotate_rollback(&mut s);
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[rec], now());
    let op = WriteOp::Restore(Box::new(restore_op(&ops).clone()));
    let live = live_deployment(
        "700m",
        json!({ANNOTATION_ROLLBACK: "2026-01-01T11:59:00Z"}),
        Some(kerf_owns_cpu()),
    );
    let (client, log) = mock(serve(live));
    let (w, _lease) = writer(client, false);
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 7 });
    let seen = requests(&log);
    let sequence: Vec<(&str, &str, &str)> = seen
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.content_type.as_str()))
        .collect();
    let rec_status = format!("{REC}/status");
    assert_eq!(
        sequence,
        vec![
            // The target falls (71 → 50: requests grow back), so the HPA goes first.
            ("PATCH", HPA, APPLY),
            ("GET", DEPLOYMENT, ""),
            ("PATCH", DEPLOYMENT, APPLY),
            ("PATCH", DEPLOYMENT, MERGE),
            ("PATCH", REC, APPLY),
            ("PATCH", rec_status.as_str(), APPLY),
            ("POST", EVENTS, "application/json"),
        ]
    );
    for r in seen.iter().filter(|r| r.method == "PATCH") {
        assert!(r.query_has("fieldManager=kerf"), "{} {}", r.path, r.query);
    }
    assert_eq!(seen[0].body["spec"]["metrics"], metrics(50));
    assert!(seen[0].query_has("force=true"));
    assert_eq!(
        seen[2].body,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"template": {"spec": {"containers": [
                   {"name": "app", "resources": {"requests": {"cpu": "1"}}}]}}}}),
        "one apply restores the original request"
    );
    assert_eq!(
        seen[3].body,
        json!({"metadata": {"annotations": {ANNOTATION_ROLLBACK: null}}})
    );
    assert_eq!(seen[5].body["status"]["phase"], "audit-only");
    assert_eq!(seen[5].body["status"]["reason"], "RolledBack");
    assert!(seen[5].body["status"].get("previousHPATarget").is_none());
    let e = &seen[6].body;
    assert_eq!(e["reason"], "RolledBack");
    assert_eq!(e["type"], "Normal");
    assert_eq!(
        e["metadata"]["annotations"],
        json!({"hpa": "web", "hpaResource": "cpu", "hpaTargetFrom": "71", "hpaTargetTo": "50"})
    );
    assert!(
        e["note"].as_str().unwrap().contains("app cpu 1"),
        "{}",
        e["note"]
    );
}

#[tokio::test]
async fn a_failed_rollback_writes_no_status_so_the_next_cycle_tries_again() {
    let rec = applied_recommendation().await;
    let mut s = example_at("700m", 71);
    annotate_rollback(&mut s);
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[rec], now());
    let op = WriteOp::Restore(Box::new(restore_op(&ops).clone()));
    let (client, log) = mock(|r: &Recorded| {
        if r.path == HPA {
            status(422, "Invalid")
        } else {
            echo(r)
        }
    });
    let (w, _lease) = writer(client, false);
    assert!(matches!(w.apply(op).await, WriteOutcome::Failed(_)));
    let seen = requests(&log);
    assert_eq!(
        calls(&seen),
        [("PATCH", HPA)],
        "the HPA restore failed: nothing after it, no status: {seen:#?}"
    );
}

// ---- release ----

#[tokio::test]
async fn plan_release_when_the_policy_goes_away_or_cpu_leaves_auto_patch() {
    let rec = applied_recommendation().await;

    // Policy deleted: no result for the workload this cycle.
    let mut s = example_at("700m", 71);
    s.rightsizing_policies.clear();
    let ops = plan_writes(&s, &cycle(&s).await, &[], std::slice::from_ref(&rec), now());
    let r = restore_op(&ops);
    assert_eq!(r.kind, RestoreKind::Release);
    assert_eq!(r.requests["app"].cpu_millis, Some(1000));
    assert_eq!(r.hpa.as_ref().unwrap().average_utilization, 50);
    let w = r.recommendation.as_ref().unwrap();
    assert_eq!(w.spec, rec.spec, "no new evaluation: the spec stays");
    let st = w.status.clone().unwrap();
    assert_eq!(
        (st.phase, st.reason.as_deref()),
        (RecommendationPhase::AuditOnly, Some("Released"))
    );
    assert!(st.original_requests.is_empty() && st.previous_hpa_target.is_none());
    assert_eq!(r.event.reason, "Released");

    // cpu switched to audit-only: released, with this cycle's recommendation as the spec.
    let mut s = example_at("700m", 71);
    s.rightsizing_policies[0]
        .spec
        .resources
        .cpu
        .as_mut()
        .unwrap()
        .mode = ResourceMode::AuditOnly;
    let ops = plan_writes(&s, &cycle(&s).await, &[], std::slice::from_ref(&rec), now());
    let r = restore_op(&ops);
    assert_eq!(r.kind, RestoreKind::Release);
    let spec: &RightsizingRecommendationSpec = &r.recommendation.as_ref().unwrap().spec;
    assert_eq!(spec.containers[0].current.cpu.as_ref().unwrap().0, "700m");
    assert!(
        !ops.iter()
            .any(|op| matches!(op, WriteOp::Recommendation(r) if r.name == "deployment-web")),
        "only the restore writes the recommendation"
    );

    // Released once: the next cycle has nothing left to give back.
    let released = as_written(r.recommendation.as_ref().unwrap());
    let s = example_at("1", 50);
    let mut s2 = s.clone();
    s2.rightsizing_policies.clear();
    let ops = plan_writes(&s2, &cycle(&s2).await, &[], &[released], now());
    assert!(
        !ops.iter().any(|op| matches!(op, WriteOp::Restore(_))),
        "{ops:#?}"
    );

    // Coordination switched off (issue 20): the HPA target is released with the cpu request it
    // was coordinated with.
    let mut s = example_at("700m", 71);
    s.rightsizing_policies[0].spec.hpa.coordinate = false;
    let ops = plan_writes(&s, &cycle(&s).await, &[], std::slice::from_ref(&rec), now());
    let r = restore_op(&ops);
    assert_eq!(r.kind, RestoreKind::Release);
    assert_eq!(r.requests["app"].cpu_millis, Some(1000));
    assert_eq!(r.hpa.as_ref().unwrap().average_utilization, 50);

    // Still auto-patch but blocked for now, or metrics unavailable: nothing is released.
    let mut s = example_at("700m", 71);
    let hpa = s.hpas.iter_mut().next().unwrap();
    hpa.status
        .get_or_insert_with(Default::default)
        .current_replicas = Some(hpa.spec.max_replicas);
    let ops = plan_writes(&s, &cycle(&s).await, &[], std::slice::from_ref(&rec), now());
    assert!(
        ops.iter()
            .any(|op| matches!(op, WriteOp::Recommendation(r) if r.status.as_ref().unwrap().phase == RecommendationPhase::Blocked)),
        "{ops:#?}"
    );
    assert!(!ops.iter().any(|op| matches!(op, WriteOp::Restore(_))));
    let s = example_at("700m", 71);
    let mut c = cycle(&s).await;
    for r in c.resource_results_mut() {
        r.metrics_unavailable = true;
    }
    let ops = plan_writes(&s, &c, &[], std::slice::from_ref(&rec), now());
    assert!(!ops.iter().any(|op| matches!(op, WriteOp::Restore(_))));
}

/// The managedFields the API server reports after `kerf-release`'s patch changed `field`:
/// the changed field moved to `kerf-release`.
fn after_release_patch_deployment(cpu: &str, kerf_still_owns_cpu: bool) -> Value {
    let mut live = live_deployment(
        cpu,
        json!({}),
        Some(if kerf_still_owns_cpu {
            kerf_owns_cpu()
        } else {
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {".": {}, "f:name": {}}}}}}})
        }),
    );
    if !kerf_still_owns_cpu {
        live["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(
                json!({"manager": "kerf-release", "operation": "Update", "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"app\"}": {"f:resources": {"f:requests": {
                        "f:cpu": {}}}}}}}}}}),
            );
    }
    live
}

fn after_release_patch_hpa(kerf_still_owns_metrics: bool) -> Value {
    let user = json!({"manager": "kubectl-client-side-apply", "operation": "Update",
        "apiVersion": "autoscaling/v2", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:maxReplicas": {}, "f:minReplicas": {}, "f:scaleTargetRef": {}}}});
    let metrics_owner = if kerf_still_owns_metrics {
        json!({"manager": "kerf", "operation": "Apply", "apiVersion": "autoscaling/v2",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}}}})
    } else {
        json!({"manager": "kerf-release", "operation": "Update", "apiVersion": "autoscaling/v2",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}}}})
    };
    live_hpa(50, json!([user, metrics_owner]))
}

async fn release_op() -> WriteOp {
    let rec = applied_recommendation().await;
    let mut s = example_at("700m", 71);
    s.rightsizing_policies.clear();
    let ops = plan_writes(&s, &cycle(&s).await, &[], &[rec], now());
    WriteOp::Restore(Box::new(restore_op(&ops).clone()))
}

#[tokio::test]
async fn release_restores_as_kerf_release_then_kerf_gives_up_the_fields() {
    let op = release_op().await;
    let (client, log) = mock(|r: &Recorded| match (r.method.as_str(), r.path.as_str()) {
        ("PATCH", HPA) if r.content_type == MERGE => {
            Reply::Json(200, after_release_patch_hpa(false))
        }
        ("PATCH", DEPLOYMENT) if r.content_type == STRATEGIC => {
            Reply::Json(200, after_release_patch_deployment("1", false))
        }
        _ => echo(r),
    });
    let (w, _lease) = writer(client, false);
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 6 });
    let seen = requests(&log);
    let sequence: Vec<(&str, &str, &str)> = seen
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.content_type.as_str()))
        .collect();
    let rec_status = format!("{REC}/status");
    assert_eq!(
        sequence,
        vec![
            ("PATCH", HPA, MERGE),
            ("PATCH", HPA, APPLY),
            ("PATCH", DEPLOYMENT, STRATEGIC),
            ("PATCH", DEPLOYMENT, APPLY),
            ("PATCH", rec_status.as_str(), APPLY),
            ("POST", EVENTS, "application/json"),
        ],
        "the spec is unchanged, so only the recommendation's status is written"
    );
    // 1–2: the HPA target, restored by kerf-release; kerf's apply no longer has spec.metrics.
    assert!(seen[0].query_has("fieldManager=kerf-release"));
    assert_eq!(seen[0].body, json!({"spec": {"metrics": metrics(50)}}));
    assert!(seen[1].query_has("fieldManager=kerf") && seen[1].query_has("force=true"));
    assert_eq!(
        seen[1].body,
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "web", "namespace": "shop"}})
    );
    // 3–4: the template requests, the same way.
    assert!(seen[2].query_has("fieldManager=kerf-release"));
    assert_eq!(
        seen[2].body,
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "resources": {"requests": {"cpu": "1"}}}]}}}})
    );
    assert!(seen[3].query_has("fieldManager=kerf"));
    assert_eq!(
        seen[3].body,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop"}})
    );
    assert_eq!(seen[4].body["status"]["reason"], "Released");
    assert_eq!(seen[4].body["status"]["phase"], "audit-only");
    let e = &seen[5].body;
    assert_eq!(e["reason"], "Released");
    assert_eq!(
        e["metadata"]["annotations"],
        json!({"hpa": "web", "hpaResource": "cpu", "hpaTargetFrom": "71", "hpaTargetTo": "50"})
    );
}

#[tokio::test]
async fn release_keeps_a_field_only_kerf_owns_rather_than_delete_it() {
    let op = release_op().await;
    // The patches changed nothing (values already restored), so kerf is still the only owner.
    let (client, log) = mock(|r: &Recorded| match (r.method.as_str(), r.path.as_str()) {
        ("PATCH", HPA) if r.content_type == MERGE => {
            Reply::Json(200, after_release_patch_hpa(true))
        }
        ("PATCH", DEPLOYMENT) if r.content_type == STRATEGIC => {
            Reply::Json(200, after_release_patch_deployment("1", true))
        }
        _ => echo(r),
    });
    let (w, _lease) = writer(client, false);
    assert_eq!(w.apply(op).await, WriteOutcome::Written { requests: 6 });
    let seen = requests(&log);
    assert_eq!(seen[1].body["spec"]["metrics"], metrics(50));
    assert_eq!(
        seen[3].body["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "resources": {"requests": {"cpu": "1"}}}])
    );
}

// ---- kerf rollback ----

#[tokio::test]
async fn kerf_rollback_annotates_the_workload() {
    let (client, log) = mock(serve(live_deployment("700m", json!({}), None)));
    let at = "2026-01-01T12:30:00Z".parse::<Timestamp>().unwrap();
    let out = kerf::cli::rollback::request_rollback(client, &key(), at)
        .await
        .unwrap();
    let seen = requests(&log);
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", DEPLOYMENT)
    );
    assert_eq!(seen[1].method, "PATCH");
    assert_eq!(seen[1].path, DEPLOYMENT);
    assert_eq!(seen[1].content_type, MERGE);
    assert!(seen[1].query_has("fieldManager=kerf-rollback"));
    assert_eq!(
        seen[1].body,
        json!({"metadata": {"annotations": {ANNOTATION_ROLLBACK: "2026-01-01T12:30:00Z"}}})
    );
    assert!(out.contains("Deployment shop/web"), "{out}");
    assert!(
        out.contains("kubectl delete rightsizingrecommendation deployment-web -n shop"),
        "{out}"
    );
}

#[tokio::test]
async fn kerf_rollback_of_a_missing_workload_is_a_clear_error() {
    let (client, log) = mock(|_: &Recorded| status(404, "NotFound"));
    let e = kerf::cli::rollback::request_rollback(client, &key(), now())
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(e, "Deployment shop/web not found");
    assert_eq!(
        calls(&requests(&log)),
        [("GET", DEPLOYMENT)],
        "only the read: nothing is patched"
    );
}

#[test]
fn hpa_example_is_the_documented_one() {
    let s = example();
    let hpa: &HorizontalPodAutoscaler = &s.hpas[0];
    assert_eq!(
        kerf::core::hpa::utilization_target(hpa).map(|(r, t)| (r.as_str(), t)),
        Some(("cpu", 50))
    );
}
