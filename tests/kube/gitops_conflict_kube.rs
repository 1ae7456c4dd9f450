//! No rollout loop against Argo CD or Flux (docs/gitops.md): the scenario against the mock API
//! server that keeps managedFields (tests/support/kube/ssa.rs), with its clock, so each manager's
//! entry carries the time it last wrote. kerf applies `app`'s CPU request (1 → 700m, a static
//! recommendation); Argo CD with self-heal re-applies git's manifest with server-side apply as
//! `argocd-controller` (tests/fixtures/gitops/argocd-apply-shop-web.yaml) and takes it back.
//! Each cycle is planned by `plan_writes` from the server's objects and sent through a real
//! `Writer`; admission is answered from the persisted state as every replica does.

use crate::kube_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use kerf::api::RecommendationPhase;
use kerf::core::model::ANNOTATION_CONFLICT_ACKNOWLEDGED;
use kerf::core::persisted::PersistedRecommendation;
use kerf::core::snapshot::{Snapshot, Workload};
use kerf::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};
use kerf::reconcile::{plan_writes, run_cycle, serve_persisted};
use kerf::sources::dir::{Manifests, load_text};
use kerf::state::{ObjectName, Store};
use kerf::writers::kube::{WriteOutcome, Writer, WriterConfig, WriterHandle};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube_support::ssa::{self, Field, Owner, State};
use kube_support::{Log, Recorded, mock, requests};
use serde_json::{Value, json};
use tokio::sync::watch;

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
const HPA: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web";
const ARGO: &str = "argocd-controller";

pub(crate) fn at(min: i64) -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_mins(min)
}

fn policy(coordinate: bool) -> String {
    format!(
        "
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: RightsizingPolicy
metadata: {{name: web, namespace: shop}}
spec:
  scope: {{labelSelector: {{matchLabels: {{app: web}}}}}}
  automationStrategyRef: {{name: shop-strategy}}
  resources:
    cpu: {{mode: auto-patch}}
    memory: {{mode: audit-only}}
  static:
    app: {{cpu: 700m, memory: 512Mi}}
  hpa: {{coordinate: {coordinate}}}
---
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {{name: shop-strategy, namespace: shop}}
spec: {{}}
"
    )
}

struct NoSamples;
impl MetricSource for NoSamples {
    async fn range_query(&self, _q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        Ok(SeriesSet::default())
    }
    async fn window_query(
        &self,
        _q: &kerf::metrics::WindowQuery,
    ) -> Result<kerf::metrics::WindowSet, MetricError> {
        Ok(Default::default())
    }
}

/// The Argo CD fixture: the Deployment and the HPA as Argo CD applies them.
fn argocd_fixture() -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gitops/argocd-apply-shop-web.yaml");
    serde_saphyr::from_multiple::<Value>(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn cpu_metric(target: i64) -> Value {
    json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": target}}}])
}

/// A fault the API server answers a request with instead of serving it (`None`: served;
/// `Reply::Late(after, _)`: served, answered `after` later).
pub(crate) type Fault = Box<dyn FnMut(&Recorded) -> Option<kube_support::Reply> + Send>;

pub(crate) struct Cluster {
    pub(crate) state: Arc<Mutex<State>>,
    /// Consulted before every request is served.
    pub(crate) fault: Arc<Mutex<Option<Fault>>>,
    client: Client,
    log: Log,
    writer: WriterHandle,
    lease: watch::Sender<bool>,
    seen: usize,
    manifests: String,
    /// The writer's metrics registry.
    pub(crate) metrics: Arc<kerf::telemetry::Metrics>,
}

impl Cluster {
    /// `shop/web` as Argo CD created it (its manager owns the request), with an HPA on CPU at
    /// 50 % when `hpa`.
    pub(crate) fn new(hpa: bool) -> Self {
        let mut st = State::new(
            "shop",
            "web",
            &[("app", &[("cpu", "1"), ("memory", "512Mi")])],
            hpa.then(|| ("web", cpu_metric(50))),
        );
        let argo = Owner::new(ARGO, "Apply");
        for c in &mut st.containers {
            for f in c.requests.values_mut() {
                f.owners = [argo.clone()].into();
            }
        }
        if let Some(h) = st.hpa.as_mut() {
            h.metrics.as_mut().unwrap().owners = [argo.clone()].into();
        }
        st.clock = Some(at(-60).to_string());
        st.times.insert((false, argo.clone()), at(-60).to_string());
        st.times.insert((true, argo), at(-60).to_string());
        let state = Arc::new(Mutex::new(st));
        let fault: Arc<Mutex<Option<Fault>>> = Arc::default();
        let mut serve = ssa::server(state.clone());
        let injected = fault.clone();
        let (client, log) = mock(move |r: &Recorded| {
            let reply = injected.lock().unwrap().as_mut().and_then(|f| f(r));
            match reply {
                // A slow API server: the request takes effect, its answer comes late.
                Some(kube_support::Reply::Late(after, _)) => {
                    kube_support::Reply::Late(after, Box::new(serve(r)))
                }
                Some(fault) => fault,
                None => serve(r),
            }
        });
        let (lease, lease_rx) = watch::channel(true);
        let mut cfg = WriterConfig::new("kerf-system");
        cfg.backoff = Duration::from_millis(10);
        cfg.read_only = false;
        Self {
            state,
            fault,
            metrics: cfg.metrics.clone(),
            writer: Writer::spawn_with(client.clone(), lease_rx, cfg),
            client,
            log,
            lease,
            seen: 0,
            manifests: policy(hpa),
        }
    }

    pub(crate) fn state(&self) -> State {
        self.state.lock().unwrap().clone()
    }

    /// The Lease moves: the old writer stops holding it and a new one (another replica, with
    /// nothing in memory) writes from now on.
    pub(crate) fn new_leader(&mut self) {
        self.lease.send_replace(false);
        let (lease, lease_rx) = watch::channel(true);
        let mut cfg = WriterConfig::new("kerf-system");
        cfg.backoff = Duration::from_millis(10);
        cfg.read_only = false;
        self.metrics = cfg.metrics.clone();
        self.writer = Writer::spawn_with(self.client.clone(), lease_rx, cfg);
        self.lease = lease;
    }

    fn set_clock(&self, min: i64) {
        self.state.lock().unwrap().clock = Some(at(min).to_string());
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let mut m = Manifests::default();
        load_text(&self.manifests, "test", &mut m).unwrap();
        let mut s = m.snapshot;
        let st = self.state();
        let d: Deployment = serde_json::from_value(st.deployment()).unwrap();
        s.workloads.push(Arc::new(Workload::from(d)));
        if let Some(h) = st.hpa() {
            s.hpas.push(serde_json::from_value(h).unwrap());
        }
        s
    }

    pub(crate) fn recommendations(&self) -> Vec<Arc<PersistedRecommendation>> {
        self.state()
            .recommendations
            .into_values()
            .filter(|rec| rec.get("spec").is_some())
            .map(|rec| {
                Arc::new(PersistedRecommendation::of(serde_json::from_value(rec).unwrap()).unwrap())
            })
            .collect()
    }

    pub(crate) fn recommendation(&self) -> PersistedRecommendation {
        let recs = self.recommendations();
        assert_eq!(recs.len(), 1);
        (*recs[0]).clone()
    }

    /// One reconcile cycle at minute `min` (the server's clock too); the requests it made.
    pub(crate) async fn cycle(&mut self, min: i64) -> Vec<Recorded> {
        self.set_clock(min);
        let s = self.snapshot();
        let c = run_cycle(&s, &NoSamples, at(min), 15).await;
        let ops = plan_writes(&s, &c, &[], &self.recommendations(), at(min));
        for op in ops {
            let outcome = self.writer.apply(op).await;
            assert!(!matches!(outcome, WriteOutcome::Failed(_)), "{outcome:?}");
        }
        self.new_requests()
    }

    /// One cycle at minute `min` as the Lease holder runs it in a cluster (each change one unit,
    /// `whole_changes`), failures allowed: the requests made and the writes' outcomes.
    pub(crate) async fn cluster_cycle(&mut self, min: i64) -> (Vec<Recorded>, Vec<WriteOutcome>) {
        self.set_clock(min);
        let s = self.snapshot();
        let c = run_cycle(&s, &NoSamples, at(min), 15).await;
        let ops = plan_writes(&s, &c, &[], &self.recommendations(), at(min));
        let mut outcomes = Vec::new();
        for op in kerf::core::writes::pending::whole_changes(ops, at(min)) {
            outcomes.push(self.writer.apply(op).await);
        }
        (self.new_requests(), outcomes)
    }

    pub(crate) fn new_requests(&mut self) -> Vec<Recorded> {
        let all = requests(&self.log);
        let new = all[self.seen..].to_vec();
        self.seen = all.len();
        new
    }

    /// Argo CD's self-heal at minute `min`: the fixture's `kinds` applied as `argocd-controller`.
    pub(crate) async fn argocd_sync(&mut self, min: i64, kinds: &[&str]) {
        self.set_clock(min);
        for doc in argocd_fixture() {
            let kind = doc["kind"].as_str().unwrap();
            if !kinds.contains(&kind) {
                continue;
            }
            let ar =
                match kind {
                    "Deployment" => ApiResource::erase::<Deployment>(&()),
                    _ => ApiResource::erase::<
                        k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
                    >(&()),
                };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), "shop", &ar);
            api.patch(
                "web",
                &PatchParams::apply(ARGO).force(),
                &Patch::Apply(&doc),
            )
            .await
            .unwrap();
        }
        self.new_requests();
    }
}

pub(crate) fn kerf_wrote(reqs: &[Recorded], path: &str) -> usize {
    reqs.iter()
        .filter(|r| r.method == "PATCH" && r.path == path && r.query_has("fieldManager=kerf"))
        .count()
}

fn events(st: &State) -> Vec<Value> {
    st.events.clone()
}

/// What admission does to a new pod of `web` (requests 1000m): the cpu it sets, if any.
fn admitted_cpu(s: &Snapshot, recs: &[Arc<PersistedRecommendation>]) -> Option<String> {
    let store = Store::new();
    serve_persisted(&store, s, recs);
    store
        .replicaset_owners
        .insert(ObjectName::new("shop", "web-6d4b8c7f9"), "web".into());
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/admission/pod-web.json");
    let body = std::fs::read(p).unwrap();
    let reply = kerf::server::review::handle_review(&body, &store);
    let answer: Value = serde_json::from_slice(&reply.body).unwrap();
    let patch = answer["response"]["patch"].as_str()?;
    use base64::Engine as _;
    let ops: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap(),
    )
    .unwrap();
    ops.as_array()?.iter().find_map(|op| {
        let path = op["path"].as_str()?;
        if path.ends_with("/requests/cpu") {
            op["value"].as_str().map(str::to_string)
        } else if path.ends_with("/requests") {
            op["value"]["cpu"].as_str().map(str::to_string)
        } else {
            None
        }
    })
}

/// Argo CD takes the request back three times: kerf stops writing, says so in a Warning Event
/// naming `argocd-controller` and in the recommendation's condition; admission goes on setting
/// 700m on new pods; an hour without another change from Argo CD resumes writing.
#[tokio::test]
async fn argocd_taking_the_request_back_three_times_stops_kerf_until_its_value_is_stable() {
    let mut c = Cluster::new(false);
    let first = c.cycle(0).await;
    assert_eq!(kerf_wrote(&first, DEPLOYMENT), 1, "kerf applies 700m");
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "700m");

    // Three rounds: Argo CD reverts, kerf counts it and (twice) applies again.
    for round in 1..=3 {
        let revert = 10 * round - 8;
        c.argocd_sync(revert, &["Deployment"]).await;
        assert_eq!(
            c.state().request("app", "cpu").unwrap(),
            ("1".to_string(), vec![ARGO.to_string()])
        );
        let reqs = c.cycle(10 * round).await;
        let rec = c.recommendation();
        let status = rec.status.unwrap();
        let conflict = status.conflict.clone().unwrap();
        assert_eq!(conflict.takebacks.len(), round as usize, "round {round}");
        if round < 3 {
            assert_eq!(
                kerf_wrote(&reqs, DEPLOYMENT),
                1,
                "round {round}: applied again"
            );
            assert_eq!(status.phase, RecommendationPhase::Applied);
            assert!(events(&c.state()).is_empty());
        } else {
            assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0, "blocked: {reqs:#?}");
            assert_eq!(status.phase, RecommendationPhase::Blocked);
            assert_eq!(status.reason.as_deref(), Some("Conflict"));
        }
    }
    assert_eq!(
        c.state().request("app", "cpu").unwrap().0,
        "1",
        "git's value stays"
    );

    // The Warning Event names the other manager, once.
    let evs = events(&c.state());
    assert_eq!(evs.len(), 1, "{evs:#?}");
    let e = &evs[0];
    let note = e["note"].as_str().unwrap();
    println!(
        "Event: type={} reason={} note={note}",
        e["type"], e["reason"]
    );
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "Blocked");
    assert_eq!(e["metadata"]["annotations"]["reason"], "Conflict");
    assert_eq!(e["metadata"]["annotations"]["manager"], ARGO);
    assert_eq!(
        note,
        "Conflict: argocd-controller took back \
         spec.template.spec.containers[app].resources.requests.cpu 3 times within 1h (last at \
         2026-01-01T12:22:00Z): kerf stops writing this workload until argocd-controller's \
         value has been stable for 1h or the workload is annotated \
         rightsizing.kubex.ai/conflict-acknowledged; admission still sets kerf's values on \
         new pods. Let kerf own its fields in the GitOps tool (docs/gitops.md)"
    );
    // The condition on the RightsizingRecommendation.
    let status = c.recommendation().status.unwrap();
    let cond = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Conflict")
        .unwrap();
    println!(
        "Condition: type={} status={} reason={} message={}",
        cond.type_, cond.status, cond.reason, cond.message
    );
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", "TakenBack")
    );
    assert_eq!(format!("Conflict: {}", cond.message), note);

    // Admission still patches new pods with kerf's value.
    let s = c.snapshot();
    assert_eq!(
        admitted_cpu(&s, &c.recommendations()).as_deref(),
        Some("700m")
    );

    // The metric and the debug page, as every replica serves them from the persisted state.
    let store = Store::new();
    serve_persisted(&store, &s, &c.recommendations());
    let text = store.metrics().encode();
    assert!(text.contains("kerf_conflict_blocked_workloads 1"), "{text}");
    // Counted by the writer when it recorded them.
    let text = c.metrics.encode();
    let takebacks: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("kerf_field_takebacks_total{manager=\"argocd-controller\"} "))
        .expect("the take-back counter")
        .parse()
        .unwrap();
    assert_eq!(takebacks, 3);
    let page = kerf::server::debug::html(&store);
    assert!(
        page.contains(
            "field conflict: <code>shop/Deployment/web</code> not written: argocd-controller took back"
        ),
        "{page}"
    );
    let json = kerf::server::debug::json(&store);
    assert_eq!(json["conflicts"][0]["workload"], "shop/Deployment/web");

    // Still blocked 59 minutes after Argo CD's last change: no write, no second event.
    let reqs = c.cycle(81).await;
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0);
    assert_eq!(events(&c.state()).len(), 1);
    assert_eq!(
        c.recommendation().status.unwrap().phase,
        RecommendationPhase::Blocked
    );

    // An hour after it: kerf writes again.
    let reqs = c.cycle(83).await;
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 1, "{reqs:#?}");
    assert_eq!(c.state().request("app", "cpu").unwrap().0, "700m");
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Applied);
    let cond = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Conflict")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "Stable")
    );
    assert!(status.conflict.unwrap().takebacks.is_empty());
    let evs = events(&c.state());
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[1]["type"], "Normal");
    assert_eq!(evs[1]["reason"], "Resumed");
    assert_eq!(
        evs[1]["note"],
        "argocd-controller left kerf's fields unchanged for 1h: kerf writes the workload again"
    );
}

/// The acknowledge annotation resumes a blocked workload at once.
#[tokio::test]
async fn the_acknowledge_annotation_resumes_writing_at_once() {
    let mut c = Cluster::new(false);
    c.cycle(0).await;
    for round in 1..=3 {
        c.argocd_sync(10 * round - 8, &["Deployment"]).await;
        c.cycle(10 * round).await;
    }
    assert_eq!(
        c.recommendation().status.unwrap().phase,
        RecommendationPhase::Blocked
    );
    // `kubectl annotate` by the user (an Update).
    c.state.lock().unwrap().annotations.insert(
        ANNOTATION_CONFLICT_ACKNOWLEDGED.into(),
        Field {
            value: json!("argocd-ignore-differences"),
            owners: [Owner::new("kubectl-annotate", "Update")].into(),
        },
    );
    let reqs = c.cycle(35).await;
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 1);
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Applied);
    let cond = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Conflict")
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "Acknowledged")
    );
    // The next cycle leaves it: kerf owns its value again, nothing is counted.
    let reqs = c.cycle(40).await;
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0);
    let conflict = c.recommendation().status.unwrap().conflict.unwrap();
    assert!(conflict.takebacks.is_empty() && conflict.blocked_since.is_none());
}

/// docs/gitops.md#hpa: Argo CD re-applying the HPA's metrics blocks at once; kerf does not force
/// `spec.metrics` (or the template) back, and admission serves neither the target nor the
/// requests coordinated with it.
#[tokio::test]
async fn argocd_changing_the_hpa_metrics_blocks_at_once_without_forcing_them_back() {
    let mut c = Cluster::new(true);
    let first = c.cycle(0).await;
    assert_eq!(kerf_wrote(&first, HPA), 1);
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (71, vec!["kerf".to_string()])
    );

    c.argocd_sync(2, &["Deployment", "HorizontalPodAutoscaler"])
        .await;
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (50, vec![ARGO.to_string()])
    );
    let reqs = c.cycle(4).await;
    assert_eq!(kerf_wrote(&reqs, HPA), 0, "{reqs:#?}");
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0, "{reqs:#?}");
    assert_eq!(
        c.state().hpa_target().unwrap(),
        (50, vec![ARGO.to_string()])
    );
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Blocked);
    assert_eq!(status.reason.as_deref(), Some("Conflict"));
    assert!(status.applied.is_none(), "{status:?}");
    let evs = events(&c.state());
    let blocked: Vec<&Value> = evs.iter().filter(|e| e["reason"] == "Blocked").collect();
    assert_eq!(blocked.len(), 1, "{evs:#?}");
    println!(
        "Event: type={} reason={} note={}",
        blocked[0]["type"], blocked[0]["reason"], blocked[0]["note"]
    );
    assert_eq!(
        blocked[0]["metadata"]["annotations"]["field"],
        "HorizontalPodAutoscaler/web spec.metrics"
    );
    assert!(
        blocked[0]["note"].as_str().unwrap().starts_with(
            "Conflict: argocd-controller changed HorizontalPodAutoscaler/web spec.metrics after \
             kerf set it"
        ),
        "{}",
        blocked[0]["note"]
    );
    assert!(
        blocked[0]["note"]
            .as_str()
            .unwrap()
            .contains("admission sets neither the HPA target nor the requests coordinated with it"),
        "{}",
        blocked[0]["note"]
    );
    let s = c.snapshot();
    assert_eq!(admitted_cpu(&s, &c.recommendations()), None);

    // Later cycles keep out of it.
    let reqs = c.cycle(20).await;
    assert_eq!(kerf_wrote(&reqs, HPA) + kerf_wrote(&reqs, DEPLOYMENT), 0);
}

#[test]
fn the_fixture_is_an_argocd_server_side_apply_of_git_values() {
    let docs = argocd_fixture();
    assert_eq!(docs.len(), 2);
    let d = &docs[0];
    assert_eq!(d["kind"], "Deployment");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "1"
    );
    let h = &docs[1];
    assert_eq!(h["kind"], "HorizontalPodAutoscaler");
    assert_eq!(h["spec"]["metrics"], cpu_metric(50));
}

/// A GPU workload blocked for a conflict (here Flux took its `gpu-recommendation` annotation
/// back): no annotation write and no rolling restart, its recommendation says `blocked` /
/// `Conflict`, and admission still serves the GPU recommendation it has.
#[tokio::test]
async fn a_gpu_workload_in_a_conflict_gets_no_annotation_write_or_restart() {
    use kerf::api::{ConflictStatus, FieldTakeback};
    use kerf::core::writes::WriteOp;
    use kerf::metrics::file::FileSource;
    use kerf::sources::dir::load_dir;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let m = load_dir(&root.join("examples/manifests")).unwrap();
    let src = FileSource::from_path(&root.join("examples/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(0), 15).await;
    let llm = |op: &WriteOp| matches!(op, WriteOp::Workload(w) if w.observed.key.name == "llm");
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at(0));
    assert!(ops.iter().any(llm), "the example writes llm's annotations");
    let written = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::Recommendation(r) if r.name == "deployment-llm" => Some(r),
            _ => None,
        })
        .unwrap();
    let mut status = written.status.clone().unwrap();
    status.conflict = Some(Box::new(ConflictStatus {
        takebacks: vec![FieldTakeback {
            field: "metadata.annotations[rightsizing.kubex.ai/gpu-recommendation]".into(),
            manager: "kustomize-controller".into(),
            time: at(-10).to_string(),
        }],
        blocked_since: Some(at(-5).to_string()),
        ..Default::default()
    }));
    let rec = Arc::new(PersistedRecommendation {
        name: written.name.as_str().into(),
        namespace: written.namespace.as_str().into(),
        spec: written.spec.clone(),
        status: Some(Box::new(status)),
        ..Default::default()
    });
    let ops = plan_writes(&m.snapshot, &c, &[], std::slice::from_ref(&rec), at(0));
    assert!(!ops.iter().any(llm), "{ops:#?}");
    let st = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::Recommendation(r) if r.name == "deployment-llm" => r.status.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(st.phase, RecommendationPhase::Blocked);
    assert_eq!(st.reason.as_deref(), Some("Conflict"));
    // The other workloads are written as before.
    assert!(ops.iter().any(|op| matches!(op, WriteOp::Workload(_))));
}

/// docs/gitops.md "Where the count lives": the count is in the RightsizingRecommendation, not in
/// the leader's memory — a new leader after two take-backs blocks at the third.
#[tokio::test]
async fn the_count_survives_the_lease_moving_to_another_replica() {
    let mut c = Cluster::new(false);
    c.cycle(0).await;
    for round in 1..=2 {
        c.argocd_sync(10 * round - 8, &["Deployment"]).await;
        c.cycle(10 * round).await;
    }
    c.new_leader();
    c.argocd_sync(22, &["Deployment"]).await;
    let reqs = c.cycle(30).await;
    assert_eq!(kerf_wrote(&reqs, DEPLOYMENT), 0, "{reqs:#?}");
    let status = c.recommendation().status.unwrap();
    assert_eq!(status.phase, RecommendationPhase::Blocked);
    assert_eq!(status.conflict.unwrap().takebacks.len(), 3);
    let text = c.metrics.encode();
    assert!(
        text.contains("kerf_field_takebacks_total{manager=\"argocd-controller\"} 1"),
        "the new leader counted the one it recorded: {text}"
    );
}
