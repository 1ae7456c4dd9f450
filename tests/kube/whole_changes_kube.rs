//! A change is one unit until it is whole (docs/design/runtime.md#r17), against the mock API
//! server that keeps managedFields (tests/support/kube/ssa.rs): the coordinated change of
//! `shop/web` (1 → 700m, HPA 50 → 71 %) with faults injected, each cycle run as the Lease
//! holder runs it (`whole_changes`, then the writer).

use std::sync::{Arc, Mutex};

use kerf::api::RecommendationPhase;
use kerf::writers::kube::WriteOutcome;
use serde_json::Value;

use crate::gitops_conflict_kube::{Cluster, kerf_wrote};
use crate::kube_support::{Recorded, status};

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
const HPA: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web";
const REC_STATUS: &str = "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/shop/rightsizingrecommendations/deployment-web/status";

fn patches_to<'a>(reqs: &'a [Recorded], path: &str) -> Vec<&'a Recorded> {
    reqs.iter()
        .filter(|r| r.method == "PATCH" && r.path == path)
        .collect()
}

fn applied_events(c: &Cluster) -> Vec<Value> {
    c.state()
        .events
        .into_iter()
        .filter(|e| e["reason"] == "Applied")
        .collect()
}

/// The HPA half fails (500 on every attempt): the status says `pending`, names the part and its
/// error, and nothing says applied; a cycle later the HPA reaches the target planned from the
/// pre-change pair (71 %, not round(50 × 700/700) = 50) and only then the status says applied
/// and the `Applied` Event is emitted.
#[tokio::test]
async fn a_failed_hpa_half_stays_pending_until_the_next_cycle_writes_it_and_only_then_says_applied()
{
    let mut c = Cluster::new(true);
    let hpa_fails = Arc::new(Mutex::new(true));
    let fails = hpa_fails.clone();
    *c.fault.lock().unwrap() = Some(Box::new(move |r: &Recorded| {
        (*fails.lock().unwrap() && r.method == "PATCH" && r.path == HPA)
            .then(|| status(500, "InternalError"))
    }));

    let (reqs, outcomes) = c.cluster_cycle(0).await;
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, WriteOutcome::Failed(_))),
        "{outcomes:?}"
    );
    assert_eq!(
        kerf_wrote(&reqs, DEPLOYMENT),
        1,
        "the template half went through"
    );
    assert_eq!(patches_to(&reqs, HPA).len(), 3, "three attempts at the HPA");
    let statuses = patches_to(&reqs, REC_STATUS);
    assert_eq!(statuses.len(), 2, "the intent, then the failure: {reqs:#?}");
    // The intent is written before any part, and claims nothing.
    let first_part = reqs.iter().position(|r| r.path == DEPLOYMENT).unwrap();
    let intent_at = reqs.iter().position(|r| r.path == REC_STATUS).unwrap();
    assert!(intent_at < first_part);
    for s in &statuses {
        assert_eq!(s.body["status"]["phase"], "pending", "{:#}", s.body);
        assert!(s.body["status"].get("applied").is_none(), "{:#}", s.body);
    }
    let rec = c.recommendation().status.unwrap();
    assert_eq!(rec.phase, RecommendationPhase::Pending);
    assert_eq!(rec.reason.as_deref(), Some("ChangeIncomplete"));
    let pending = rec.pending.as_deref().unwrap();
    assert_eq!(pending.parts, ["hpa"]);
    assert_eq!(pending.failed_part.as_deref(), Some("hpa"));
    assert!(
        pending.error.as_deref().unwrap().contains("500")
            || pending.error.as_deref().unwrap().contains("mock"),
        "{pending:?}"
    );
    assert_eq!(pending.attempts, 1);
    assert!(rec.applied.is_none(), "admission serves nothing new");
    assert!(
        applied_events(&c).is_empty(),
        "no Applied Event before the change is whole"
    );
    assert_eq!(c.state().hpa_target().unwrap().0, 50);
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "700m");

    // The API server recovers; the next cycle writes the HPA half, planned before the change.
    *hpa_fails.lock().unwrap() = false;
    let (reqs, outcomes) = c.cluster_cycle(1).await;
    assert!(
        !outcomes
            .iter()
            .any(|o| matches!(o, WriteOutcome::Failed(_))),
        "{outcomes:?}"
    );
    assert_eq!(
        kerf_wrote(&reqs, DEPLOYMENT),
        0,
        "the template is already 700m"
    );
    assert_eq!(patches_to(&reqs, HPA).len(), 1);
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (71, vec!["kerf".to_string()])
    );
    let hpa_at = reqs.iter().position(|r| r.path == HPA).unwrap();
    let applied_at = reqs
        .iter()
        .position(|r| r.path == REC_STATUS && r.body["status"]["phase"] == "applied")
        .expect("the status says applied");
    assert!(hpa_at < applied_at, "applied is said after the HPA write");
    let rec = c.recommendation().status.unwrap();
    assert_eq!(rec.phase, RecommendationPhase::Applied);
    assert!(rec.pending.is_none(), "{rec:?}");
    let hpa = rec.applied.as_deref().unwrap().hpa.as_deref().unwrap();
    assert_eq!((hpa.target_before, hpa.target_after), (Some(50), Some(71)));
    let events = applied_events(&c);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["metadata"]["annotations"]["hpaTargetTo"], "71");

    // Whole: the cycles after send nothing to the workload or the HPA.
    let (reqs, _) = c.cluster_cycle(2).await;
    assert_eq!(
        kerf_wrote(&reqs, DEPLOYMENT) + kerf_wrote(&reqs, HPA),
        0,
        "{reqs:#?}"
    );
    assert_eq!(applied_events(&c).len(), 1);
}

fn none_failed(outcomes: &[WriteOutcome]) {
    assert!(
        !outcomes
            .iter()
            .any(|o| matches!(o, WriteOutcome::Failed(_))),
        "{outcomes:?}"
    );
}

/// Counted in `kerf_conflict_blocked_workloads`, and the cycle at minute `min` (blocked) leaves
/// the pair as it now is.
async fn counted_blocked_then_left_alone(c: &mut Cluster, min: i64) {
    let store = kerf::state::Store::new();
    kerf::reconcile::serve_persisted(&store, &c.snapshot(), &c.recommendations());
    let text = store.metrics().encode();
    assert!(text.contains("kerf_conflict_blocked_workloads 1"), "{text}");
    let (reqs, _) = c.cluster_cycle(min).await;
    assert_eq!(
        kerf_wrote(&reqs, DEPLOYMENT) + kerf_wrote(&reqs, HPA),
        0,
        "{reqs:#?}"
    );
}

fn events_with_reason(c: &Cluster, reason: &str) -> Vec<Value> {
    c.state()
        .events
        .into_iter()
        .filter(|e| e["reason"] == reason)
        .collect()
}

/// Argo CD force-applies git's Deployment (1 core) and leaves kerf's HPA target (71 %): kerf sets
/// the HPA back to the target that fits the live requests (50 %, the one before the change),
/// writes no template, and blocks with `Conflict`, counted in `kerf_conflict_blocked_workloads`.
#[tokio::test]
async fn requests_taken_back_alone_get_the_hpa_target_restored_and_block_with_conflict() {
    let mut c = Cluster::new(true);
    c.cluster_cycle(0).await;
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (71, vec!["kerf".to_string()])
    );
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "700m");

    c.argocd_sync(2, &["Deployment"]).await;
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "1");
    let (reqs, outcomes) = c.cluster_cycle(4).await;
    assert!(
        !outcomes
            .iter()
            .any(|o| matches!(o, WriteOutcome::Failed(_))),
        "{outcomes:?}"
    );
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0, "{reqs:#?}");
    assert_eq!(kerf_wrote(&reqs, HPA), 1, "{reqs:#?}");
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (50, vec!["kerf".to_string()])
    );
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "1");
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Blocked);
    assert_eq!(status.reason.as_deref(), Some("Conflict"));
    let blocked = events_with_reason(&c, "Blocked");
    assert_eq!(blocked.len(), 1, "{blocked:#?}");
    let note = blocked[0]["note"].as_str().unwrap();
    assert!(note.contains("sets its cpu target back to 50%"), "{note}");
    counted_blocked_then_left_alone(&mut c, 10).await;
    assert_eq!(c.state().hpa_target().unwrap().0, 50);
}

/// The writes (anything but a read) among `reqs`: method and path.
fn writes(reqs: &[Recorded]) -> Vec<(String, String)> {
    reqs.iter()
        .filter(|r| r.method != "GET")
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect()
}

/// The other way round: Argo CD force-applies git's HPA alone (50 %) and leaves kerf's requests
/// (700m). kerf sets the template's requests back to git's, the ones before its change (1 core,
/// as a rollback writes them, kerf's apply), writes nothing to the HPA, and blocks with
/// `Conflict`, counted in `kerf_conflict_blocked_workloads`; the Event and the condition name
/// what was restored.
#[tokio::test]
async fn hpa_target_taken_back_alone_gets_the_requests_restored_and_blocks_with_conflict() {
    let mut c = Cluster::new(true);
    c.cluster_cycle(0).await;
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "700m");
    assert_eq!(c.state().hpa_target().unwrap().0, 71);

    c.argocd_sync(2, &["HorizontalPodAutoscaler"]).await;
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (50, vec!["argocd-controller".to_string()])
    );
    let (reqs, outcomes) = c.cluster_cycle(4).await;
    none_failed(&outcomes);
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 1, "{reqs:#?}");
    assert_eq!(patches_to(&reqs, HPA).len(), 0, "{reqs:#?}");
    let template_write = patches_to(&reqs, DEPLOYMENT)[0];
    let sent = &template_write.body["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(sent["resources"]["requests"]["cpu"], "1", "{sent:#}");
    // Nothing else written to a workload or an HPA: kerf's records and Events only.
    let objects: Vec<(String, String)> = writes(&reqs)
        .into_iter()
        .filter(|(_, path)| !path.contains("rightsizing.kubex.ai") && !path.ends_with("/events"))
        .collect();
    assert_eq!(
        objects,
        vec![("PATCH".to_string(), DEPLOYMENT.to_string())],
        "{reqs:#?}"
    );
    // The final objects: git's pair, the request kerf's apply with git's value.
    assert_eq!(
        c.state().request("app", "cpu").unwrap(),
        ("1".to_string(), vec!["kerf".to_string()])
    );
    assert_eq!(c.state().request("app", "memory").unwrap().0, "512Mi");
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (50, vec!["argocd-controller".to_string()])
    );
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Blocked);
    assert_eq!(status.reason.as_deref(), Some("Conflict"));
    let restored = "sets those requests back to the ones before its change (app 1)";
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Conflict")
        .unwrap();
    assert!(
        condition.message.contains(restored),
        "{}",
        condition.message
    );
    let blocked = events_with_reason(&c, "Blocked");
    assert_eq!(blocked.len(), 1, "{blocked:#?}");
    let note = blocked[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with(
            "Conflict: argocd-controller took back HorizontalPodAutoscaler/web spec.metrics"
        ),
        "{note}"
    );
    assert!(note.contains(restored), "{note}");
    let done = events_with_reason(&c, "Restored");
    assert_eq!(done.len(), 1, "{done:#?}");
    let note = done[0]["note"].as_str().unwrap();
    assert!(note.starts_with("restored requests app cpu 1"), "{note}");
    counted_blocked_then_left_alone(&mut c, 10).await;
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "1");
    assert_eq!(events_with_reason(&c, "Restored").len(), 1);
}

/// Refuses every PATCH to `path` with 500 while `on`.
fn refuse_patches(c: &Cluster, path: &'static str) -> Arc<Mutex<bool>> {
    let on = Arc::new(Mutex::new(true));
    let refusing = on.clone();
    *c.fault.lock().unwrap() = Some(Box::new(move |r: &Recorded| {
        (*refusing.lock().unwrap() && r.method == "PATCH" && r.path == path)
            .then(|| status(500, "InternalError"))
    }));
    on
}

/// kerf's pair applied, Argo CD takes back `taken` alone at minute 2 and the restore of the
/// other half, at `refused`, is answered 500 on every attempt at minute 4: the workload is
/// blocked all the same (`Conflict`, the recommendation written) and no `Restored` Event is
/// emitted. The API server serves again from then on.
async fn restore_refused_once(taken: &str, refused: &'static str) -> Cluster {
    let mut c = Cluster::new(true);
    c.cluster_cycle(0).await;
    c.argocd_sync(2, &[taken]).await;
    let refusing = refuse_patches(&c, refused);
    let (reqs, outcomes) = c.cluster_cycle(4).await;
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, WriteOutcome::Failed(_))),
        "{outcomes:?}"
    );
    assert!(!patches_to(&reqs, refused).is_empty(), "{reqs:#?}");
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Blocked);
    assert_eq!(status.reason.as_deref(), Some("Conflict"));
    assert!(events_with_reason(&c, "Restored").is_empty());
    *refusing.lock().unwrap() = false;
    c
}

/// A half-pair restore that fails is written again the next cycle while blocked, until it went
/// through; then nothing more. Both halves: the requests (the HPA taken back) and the HPA
/// target (the requests taken back).
#[tokio::test]
async fn a_half_pair_restore_that_fails_is_written_again_the_next_cycle_while_blocked() {
    let mut c = restore_refused_once("HorizontalPodAutoscaler", DEPLOYMENT).await;
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "700m");
    let (reqs, outcomes) = c.cluster_cycle(6).await;
    none_failed(&outcomes);
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 1, "{reqs:#?}");
    assert_eq!(patches_to(&reqs, HPA).len(), 0, "{reqs:#?}");
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "1");
    assert_eq!(c.state().hpa_target().unwrap().0, 50);
    assert_eq!(events_with_reason(&c, "Restored").len(), 1);
    assert_eq!(events_with_reason(&c, "Blocked").len(), 1);
    counted_blocked_then_left_alone(&mut c, 8).await;

    let mut c = restore_refused_once("Deployment", HPA).await;
    assert_eq!(c.state().hpa_target().unwrap().0, 71);
    let (reqs, _) = c.cluster_cycle(6).await;
    assert_eq!(kerf_wrote(&reqs, HPA), 1, "{reqs:#?}");
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0, "{reqs:#?}");
    let done = events_with_reason(&c, "Restored");
    assert_eq!(done.len(), 1, "{done:#?}");
    let note = done[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with("restored HPA web cpu target 71% -> 50%"),
        "{note}"
    );
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (50, vec!["kerf".to_string()])
    );
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "1");
    counted_blocked_then_left_alone(&mut c, 8).await;
}

const LLM: &str = "/apis/apps/v1/namespaces/ml/deployments/llm";
const LLM_STATUS: &str = "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/ml/rightsizingrecommendations/deployment-llm/status";

/// The example's `ml/llm` Deployment as the API server returns it.
fn llm_deployment() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/manifests/workloads.yaml");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut d = docs
        .into_iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "llm")
        .unwrap();
    d["metadata"]["uid"] = "uid-llm".into();
    d["metadata"]["resourceVersion"] = "3".into();
    d
}

/// Writes answered with their own body (what a typed client needs back filled in); the
/// Deployment read answered with `live`; restarts (merge patches) refused with 500 while
/// `restart_fails`.
fn gpu_server(
    live: Value,
    restart_fails: Arc<Mutex<bool>>,
) -> impl FnMut(&Recorded) -> crate::kube_support::Reply + Send + 'static {
    use crate::kube_support::Reply;
    move |r: &Recorded| {
        if r.method == "GET" && r.path == LLM {
            return Reply::Json(200, live.clone());
        }
        if r.path == LLM
            && r.content_type == "application/merge-patch+json"
            && *restart_fails.lock().unwrap()
        {
            return status(500, "InternalError");
        }
        let mut body = r.body.clone();
        if body.get("metadata").is_none() {
            body["metadata"] = serde_json::json!({"name": "x", "namespace": "ml"});
        }
        if r.path.contains("rightsizingrecommendations") && body.get("spec").is_none() {
            body["spec"] = serde_json::json!({"workload": {"kind": "Deployment", "name": "llm"}});
        }
        Reply::Json(if r.method == "POST" { 201 } else { 200 }, body)
    }
}

/// Whether `op` is the `llm` workload's change as one unit.
fn is_llm_change(op: &kerf::core::writes::WriteOp) -> bool {
    matches!(op, kerf::core::writes::WriteOp::Change(c) if c.workload.name == "llm")
}

/// The shipped example's first cycle at minute 0: its manifests, the cycle, and the `llm`
/// workload's GPU change (annotations and rolling restart) as one unit.
async fn example_llm_change() -> (
    kerf::sources::dir::Manifests,
    kerf::core::recommenders::cycle::CycleOutput,
    kerf::core::writes::WriteOp,
) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let m = kerf::sources::dir::load_dir(&root.join("examples/manifests")).unwrap();
    let src =
        kerf::metrics::file::FileSource::from_path(&root.join("examples/metrics.om")).unwrap();
    let t0 = crate::gitops_conflict_kube::at(0);
    let cycle = kerf::reconcile::run_cycle(&m.snapshot, &src, t0, 15).await;
    let ops = kerf::core::writes::pending::whole_changes(
        kerf::reconcile::plan_writes(&m.snapshot, &cycle, &[], &[], t0),
        t0,
    );
    let change = ops
        .into_iter()
        .find(is_llm_change)
        .expect("llm's change is one unit");
    (m, cycle, change)
}

/// The GPU annotations go through (200) and the rolling restart fails three times (500): the
/// status says `pending` with the restart left and its error, never `applied`; the next cycle
/// sees the annotations already equal yet restarts the workload from the record, and only
/// then says applied.
#[tokio::test]
async fn a_restart_refused_three_times_is_retried_the_next_cycle_from_the_pending_record() {
    use kerf::core::persisted::PersistedRecommendation;
    use kerf::core::writes::{WriteOp, pending::whole_changes};

    let (m, cycle, change) = example_llm_change().await;
    let fails = Arc::new(Mutex::new(true));
    let (client, log) = crate::kube_support::mock(gpu_server(llm_deployment(), fails.clone()));
    let (_lease, writer) = crate::kube_support::leading_writer(client);
    let outcome = writer.apply(change).await;
    assert!(matches!(outcome, WriteOutcome::Failed(_)), "{outcome:?}");
    let reqs = crate::kube_support::requests(&log);
    let restarts = reqs
        .iter()
        .filter(|r| r.path == LLM && r.content_type == "application/merge-patch+json")
        .count();
    assert_eq!(restarts, 3, "{reqs:#?}");
    assert!(
        reqs.iter()
            .any(|r| r.path == LLM && r.content_type == "application/apply-patch+yaml"),
        "the annotations went through"
    );
    let statuses = patches_to(&reqs, LLM_STATUS);
    assert_eq!(statuses.len(), 2, "the intent and the failure: {reqs:#?}");
    assert!(
        statuses
            .iter()
            .all(|s| s.body["status"]["phase"] == "pending")
    );
    let last = &statuses[1].body["status"];
    assert_eq!(last["pending"]["parts"], serde_json::json!(["restart"]));
    assert_eq!(last["pending"]["failedPart"], "restart");
    assert!(
        last["pending"]["error"]
            .as_str()
            .unwrap()
            .contains("restart"),
        "{last:#}"
    );
    assert!(
        !reqs
            .iter()
            .any(|r| r.method == "POST" && r.path.ends_with("/events"))
    );

    // The next cycle, a minute on: the annotations are on the object, the record says pending.
    let mut snapshot = m.snapshot.clone();
    let w = snapshot
        .workloads
        .iter_mut()
        .find(|w| w.key.name == "llm")
        .unwrap();
    let applied = reqs
        .iter()
        .find(|r| r.path == LLM && r.content_type == "application/apply-patch+yaml")
        .unwrap();
    for (k, v) in applied.body["metadata"]["annotations"].as_object().unwrap() {
        Arc::make_mut(w)
            .annotations
            .insert(k.clone(), v.as_str().unwrap().to_string());
    }
    let spec = statuses[0].body.get("spec").cloned();
    let intent_rec = reqs
        .iter()
        .find(|r| r.path == LLM_STATUS.trim_end_matches("/status") && r.method == "PATCH")
        .map(|r| r.body["spec"].clone())
        .or(spec)
        .unwrap();
    let rec: kerf::api::RightsizingRecommendation = serde_json::from_value(serde_json::json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "RightsizingRecommendation",
        "metadata": {"name": "deployment-llm", "namespace": "ml"},
        "spec": intent_rec, "status": last,
    }))
    .unwrap();
    let recs = vec![Arc::new(PersistedRecommendation::of(rec).unwrap())];
    *fails.lock().unwrap() = false;
    let t1 = crate::gitops_conflict_kube::at(1);
    let ops = whole_changes(
        kerf::reconcile::plan_writes(&snapshot, &cycle, &[], &recs, t1),
        t1,
    );
    let change = ops
        .into_iter()
        .find(is_llm_change)
        .expect("the restart is retried");
    let WriteOp::Change(c) = &change else {
        unreachable!()
    };
    assert!(
        matches!(c.parts.as_slice(), [WriteOp::Restart(_)]),
        "{:#?}",
        c.parts
    );
    let seen = reqs.len();
    assert_eq!(
        writer.apply(change).await,
        WriteOutcome::Written { requests: 3 }
    );
    let reqs = crate::kube_support::requests(&log)[seen..].to_vec();
    let restart_at = reqs
        .iter()
        .position(|r| r.path == LLM && r.content_type == "application/merge-patch+json")
        .expect("the restart");
    let statuses: Vec<(usize, &Recorded)> = reqs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.path == LLM_STATUS)
        .collect();
    let (done_at, done) = statuses.last().unwrap();
    assert!(*done_at > restart_at);
    assert_eq!(done.body["status"]["phase"], "applied", "{:#}", done.body);
    assert!(done.body["status"].get("pending").is_none());
}

/// A small deterministic generator (xorshift64*): the same faults on every run.
struct Dice(u64);

impl Dice {
    fn roll(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % 100
    }
}

/// What 30 simulated minutes leave: the request, the HPA target and its owners, the
/// recommendation's phase, `status.applied` and `status.pending`.
async fn thirty_minutes(faults: Option<u64>) -> (Value, Vec<Vec<usize>>) {
    use crate::kube_support::Reply;
    let mut c = Cluster::new(true);
    let mut dice = faults.map(Dice);
    let mut skipped = Vec::new();
    if let Some(start) = faults {
        let mut d = Dice(start ^ 0x9E37_79B9_7F4A_7C15);
        *c.fault.lock().unwrap() = Some(Box::new(move |r: &Recorded| {
            if r.path.contains("/events") {
                return None; // an Event is not part of the objects compared
            }
            match d.roll() {
                0..20 => Some(status(500, "InternalError")),
                20..30 => Some(status(429, "TooManyRequests")),
                // Slow, and answered within the writer's timeout.
                30..40 => Some(Reply::Late(
                    std::time::Duration::from_secs(3),
                    Box::new(Reply::Hang),
                )),
                _ => None,
            }
        }));
    }
    let mut per_cycle = Vec::new();
    for min in 0..30 {
        // A dropped watch: the caches are listed again and this cycle computes nothing.
        if dice.as_mut().is_some_and(|d| d.roll() < 15) {
            skipped.push(min);
            per_cycle.push(vec![0, 0]);
            continue;
        }
        let (reqs, _) = c.cluster_cycle(min).await;
        per_cycle.push(vec![kerf_wrote(&reqs, DEPLOYMENT), kerf_wrote(&reqs, HPA)]);
    }
    let st = c.state();
    let status = c.recommendation().status.unwrap();
    let end = serde_json::json!({
        "cpu": st.request("app", "cpu"),
        "hpa": st.hpa_target(),
        "phase": status.phase,
        "applied": status.applied,
        "pending": status.pending,
    });
    (end, per_cycle)
}

/// 30 simulated minutes of cycles with 500s, 429s, slow answers and dropped watches injected
/// (the same on every run) end with the objects a fault-free run leaves; no write is sent
/// more often than the writer's tries within a cycle, and none once the change is whole.
#[tokio::test(start_paused = true)]
async fn thirty_minutes_of_api_faults_end_where_a_fault_free_run_does_without_repeated_writes() {
    let (clean, clean_writes) = thirty_minutes(None).await;
    assert_eq!(
        clean_writes[0],
        [1, 1],
        "the fault-free run writes the change once"
    );
    assert!(
        clean_writes[1..].iter().all(|w| w == &[0, 0]),
        "{clean_writes:?}"
    );
    for start in 1..=12 {
        let (end, writes) = thirty_minutes(Some(start)).await;
        println!("faults from {start}: kerf's PATCHes (Deployment, HPA) per cycle {writes:?}");
        assert_eq!(end, clean, "faults from {start}: {writes:?}");
        // Within a cycle a write is tried at most 3 times (the writer's tries).
        assert!(
            writes.iter().flatten().all(|n| *n <= 3),
            "faults from {start}: {writes:?}"
        );
        // Once whole, never written again.
        let whole = writes
            .iter()
            .rposition(|w| w.iter().any(|n| *n > 0))
            .unwrap();
        assert!(whole < 29, "faults from {start}: {writes:?}");
    }
}

/// Under `readOnly` a change's parts are not sent, yet its RightsizingRecommendation is written
/// as for any other workload.
#[tokio::test]
async fn read_only_sends_no_part_of_a_change_and_still_writes_its_recommendation() {
    use kerf::writers::kube::{Writer, WriterConfig};

    let (_, _, change) = example_llm_change().await;
    let (client, log) =
        crate::kube_support::mock(gpu_server(llm_deployment(), Arc::new(Mutex::new(false))));
    let (_lease, lease_rx) = tokio::sync::watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.read_only = true;
    let writer = Writer::spawn_with(client, lease_rx, cfg);
    let outcome = writer.apply(change).await;
    assert!(
        matches!(outcome, WriteOutcome::Written { .. }),
        "{outcome:?}"
    );
    let reqs = crate::kube_support::requests(&log);
    assert!(!reqs.iter().any(|r| r.path == LLM), "{reqs:#?}");
    assert_eq!(patches_to(&reqs, LLM_STATUS).len(), 1, "{reqs:#?}");
}
