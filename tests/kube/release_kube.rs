//! Release per resource and per container (docs/hpa-coordination.md, "Release"): every way a
//! request, the HPA target or a GPU recommendation leaves auto-patch, planned by `plan_writes`
//! and sent through a real `Writer` to a mock API server that keeps managedFields as the API
//! server does (tests/support/kube/ssa.rs) — so a request an apply would delete is deleted, and each
//! test checks the exact requests and what the workload is left with.
//!
//! The fixture: Deployment `shop/web` with `app` (cpu 1, memory 512Mi) and `sidecar` (cpu 200m,
//! no memory request), an HPA on CPU utilization at 50 %, and a RightsizingPolicy with static
//! recommendations (app 700m/384Mi, sidecar 100m/64Mi), so no metrics are needed. Applying both
//! resources moves the HPA target to round(50 × 1200 / 800) = 75 %.

use crate::kube_support;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use kerf::core::model::ContainerRequests;
use kerf::core::persisted::PersistedRecommendation;
use kerf::core::snapshot::{Snapshot, Workload};
use kerf::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};
use kerf::reconcile::plan_writes;
use kerf::reconcile::run_cycle;
use kerf::sources::dir::{Manifests, load_text};
use kerf::writers::kube::{WriteOutcome, Writer, WriterConfig, WriterHandle};
use kube_support::ssa::{self, APPLY, MERGE, STRATEGIC, State};
use kube_support::{Log, Recorded, mock, requests};
use serde_json::{Value, json};
use tokio::sync::watch;

const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
const HPA: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web";
const REC: &str =
    "/apis/rightsizing.kubex.ai/v1alpha1/namespaces/shop/rightsizingrecommendations/deployment-web";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

fn now() -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap()
}

/// No usage samples: the policy's static recommendations drive everything.
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

fn cpu_metric(target: i64) -> Value {
    json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": target}}}])
}

fn web() -> State {
    State::new(
        "shop",
        "web",
        &[
            ("app", &[("cpu", "1"), ("memory", "512Mi")]),
            ("sidecar", &[("cpu", "200m")]),
        ],
        Some(("web", cpu_metric(50))),
    )
}

const STRATEGY: &str = "
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {name: shop-strategy, namespace: shop}
spec: {}
";

/// One cycle's RightsizingPolicy.
#[derive(Clone, Copy, Debug)]
struct Policy {
    cpu: bool,
    memory: bool,
    coordinate: bool,
    /// `scope.containers` (empty: every container).
    scope: &'static [&'static str],
    app_cpu: &'static str,
}

const BOTH: Policy = Policy {
    cpu: true,
    memory: true,
    coordinate: true,
    scope: &[],
    app_cpu: "700m",
};

impl Policy {
    fn yaml(&self) -> String {
        let mode = |auto: bool| if auto { "auto-patch" } else { "audit-only" };
        format!(
            "
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: RightsizingPolicy
metadata: {{name: web, namespace: shop}}
spec:
  scope: {{labelSelector: {{matchLabels: {{app: web}}}}, containers: {:?}}}
  automationStrategyRef: {{name: shop-strategy}}
  resources:
    cpu: {{mode: {}}}
    memory: {{mode: {}}}
  static:
    app: {{cpu: {}, memory: 384Mi}}
    sidecar: {{cpu: 100m, memory: 64Mi}}
  hpa: {{coordinate: {}}}
",
            self.scope,
            mode(self.cpu),
            mode(self.memory),
            self.app_cpu,
            self.coordinate
        )
    }

    /// The policy and its strategy.
    fn with_strategy(&self) -> String {
        format!("{}---{STRATEGY}", self.yaml())
    }
}

/// The mock API server, the writer, and the RightsizingRecommendations kerf wrote.
struct Cluster {
    state: Arc<Mutex<State>>,
    log: Log,
    writer: WriterHandle,
    _lease: watch::Sender<bool>,
    seen: usize,
}

impl Cluster {
    fn new(state: State) -> Self {
        let state = Arc::new(Mutex::new(state));
        let (client, log) = mock(ssa::server(state.clone()));
        let (lease, lease_rx) = watch::channel(true);
        let mut cfg = WriterConfig::new("kerf-system");
        cfg.backoff = Duration::from_millis(10);
        cfg.timeout = Duration::from_secs(5);
        cfg.read_only = false;
        Self {
            state,
            log,
            writer: Writer::spawn_with(client, lease_rx, cfg),
            _lease: lease,
            seen: 0,
        }
    }

    fn state(&self) -> State {
        self.state.lock().unwrap().clone()
    }

    /// The objects as the server holds them, plus `manifests` (policies, strategies).
    fn snapshot(&self, manifests: &str, read_only: bool) -> Snapshot {
        let mut m = Manifests::default();
        load_text(manifests, "test", &mut m).unwrap();
        let mut s = m.snapshot;
        s.global.read_only = read_only;
        let st = self.state();
        let d: Deployment = serde_json::from_value(st.deployment()).unwrap();
        s.workloads.push(Arc::new(Workload::from(d)));
        if let Some(h) = st.hpa() {
            s.hpas.push(serde_json::from_value(h).unwrap());
        }
        s
    }

    fn recommendations(&self) -> Vec<Arc<PersistedRecommendation>> {
        self.state()
            .recommendations
            .into_values()
            .filter(|rec| rec.get("spec").is_some())
            .map(|rec| {
                Arc::new(PersistedRecommendation::of(serde_json::from_value(rec).unwrap()).unwrap())
            })
            .collect()
    }

    /// One reconcile cycle over the server's objects and `manifests`; the requests it made.
    async fn cycle(&mut self, manifests: &str, read_only: bool) -> Vec<Recorded> {
        let s = self.snapshot(manifests, read_only);
        let c = run_cycle(&s, &NoSamples, now(), 15).await;
        let ops = plan_writes(&s, &c, &[], &self.recommendations(), now());
        self.writer.set_read_only(read_only);
        for op in ops {
            let outcome = self.writer.apply(op).await;
            assert!(
                !matches!(outcome, WriteOutcome::Failed(_)),
                "{outcome:?}: {:#?}",
                requests(&self.log)
            );
        }
        let all = requests(&self.log);
        let new = all[self.seen..].to_vec();
        self.seen = all.len();
        new
    }

    /// The first cycle: `policy` applied from the manifest's requests.
    async fn applied(policy: Policy) -> Self {
        let mut c = Cluster::new(web());
        c.cycle(&policy.with_strategy(), false).await;
        c
    }

    fn request(&self, container: &str, resource: &str) -> Option<(String, Vec<String>)> {
        self.state().request(container, resource)
    }

    /// Asserts the HPA's target is `target`, with `spec.metrics` owned by `owner` alone.
    #[track_caller]
    fn expect_hpa(&self, target: i64, owner: &str) {
        assert_eq!(
            self.state().hpa_target(),
            Some((target, vec![owner.to_string()]))
        );
    }

    /// Asserts `container`'s `resource` request is `want` (value, its only owner), or absent.
    #[track_caller]
    fn expect(&self, container: &str, resource: &str, want: Option<(&str, &str)>) {
        let want = want.map(|(v, owner)| (v.to_string(), vec![owner.to_string()]));
        assert_eq!(
            self.request(container, resource),
            want,
            "{container} {resource}"
        );
    }

    fn status(&self) -> Value {
        self.state().recommendations["deployment-web"]["status"].clone()
    }
}

/// (method, path, content type, field manager) of each request (policy status left out).
fn sequence(seen: &[Recorded]) -> Vec<(String, String, String, String)> {
    seen.iter()
        .filter(|r| !r.path.contains("policies/"))
        .map(|r| {
            let manager = r
                .query
                .split('&')
                .find_map(|p| p.strip_prefix("fieldManager="))
                .unwrap_or_default();
            (
                r.method.clone(),
                r.path.clone(),
                r.content_type.clone(),
                manager.to_string(),
            )
        })
        .collect()
}

fn req(
    method: &str,
    path: &str,
    content_type: &str,
    manager: &str,
) -> (String, String, String, String) {
    (
        method.into(),
        path.into(),
        content_type.into(),
        manager.into(),
    )
}

/// The requests of a cycle, by name, comma-separated (the web fixture).
fn steps(names: &str) -> Vec<(String, String, String, String)> {
    names
        .split(", ")
        .map(|n| match n {
            "template release" => req("PATCH", DEPLOYMENT, STRATEGIC, "kerf-release"),
            "template apply" => req("PATCH", DEPLOYMENT, APPLY, "kerf"),
            "hpa release" => req("PATCH", HPA, MERGE, "kerf-release"),
            "hpa apply" => req("PATCH", HPA, APPLY, "kerf"),
            "recommendation" => req("PATCH", REC, APPLY, "kerf"),
            "recommendation status" => req("PATCH", &format!("{REC}/status"), APPLY, "kerf"),
            "event" => req("POST", EVENTS, "application/json", "kerf"),
            other => panic!("no step {other}"),
        })
        .collect()
}

fn body<'a>(seen: &'a [Recorded], path: &str, content_type: &str) -> &'a Value {
    &seen
        .iter()
        .find(|r| r.method == "PATCH" && r.path == path && r.content_type == content_type)
        .unwrap_or_else(|| panic!("no {content_type} patch of {path}: {:#?}", sequence(seen)))
        .body
}

fn kerf_apply(containers: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"template": {"spec": {"containers": containers}}}})
}

/// kerf's apply once it owns nothing on the workload any more.
fn kerf_apply_nothing() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "shop"}})
}

fn release_patch(containers: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": containers}}}})
}

#[track_caller]
fn assert_phase(status: &Value, phase: &str, reason: &str) {
    assert_eq!(
        (&status["phase"], &status["reason"]),
        (&json!(phase), &json!(reason))
    );
}

/// The recommendation's status records nothing kerf took.
#[track_caller]
fn assert_nothing_taken(status: &Value) {
    for k in ["originalRequests", "createdRequests", "previousHPATarget"] {
        assert!(status.get(k).is_none(), "{k}: {status}");
    }
}

/// Nothing was written to the workload or the HPA.
#[track_caller]
fn assert_no_workload_write(seen: &[Recorded]) {
    assert!(
        !seen.iter().any(|r| r.path == DEPLOYMENT || r.path == HPA),
        "{:#?}",
        sequence(seen)
    );
}

fn events(seen: &[Recorded]) -> Vec<String> {
    seen.iter()
        .filter(|r| r.path == EVENTS)
        .map(|r| r.body["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

// ---- the first cycle ----

#[tokio::test]
async fn both_resources_applied_record_what_kerf_took() {
    let mut c = Cluster::new(web());
    let seen = c.cycle(&BOTH.with_strategy(), false).await;
    assert_eq!(
        body(&seen, DEPLOYMENT, APPLY),
        &kerf_apply(json!([
            {"name": "app", "resources": {"requests": {"cpu": "700m", "memory": "384Mi"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
        ]))
    );
    assert_eq!(body(&seen, HPA, APPLY)["spec"]["metrics"], cpu_metric(75));
    let st = c.status();
    assert_eq!(
        st["originalRequests"],
        json!({"app": {"cpu": "1", "memory": "512Mi"}, "sidecar": {"cpu": "200m"}})
    );
    assert_eq!(
        st["createdRequests"],
        json!({"sidecar": ["memory"]}),
        "the sidecar had no memory request: kerf created it"
    );
    assert_eq!(st["previousHPATarget"], 50);
    c.expect("sidecar", "memory", Some(("64Mi", "kerf")));
}

// ---- the transitions ----

/// cpu and memory in auto-patch → memory goes to audit-only (and the cpu recommendation moves):
/// memory is released in the same step as the cpu apply — app's restored, the sidecar's (kerf
/// created it) removed — and the cpu change goes on with the HPA.
#[tokio::test]
async fn both_resources_to_one_releases_the_other_in_the_apply_that_keeps_the_first() {
    let mut c = Cluster::applied(BOTH).await;
    let next = Policy {
        memory: false,
        app_cpu: "600m",
        ..BOTH
    };
    let seen = c.cycle(&next.with_strategy(), false).await;
    c.expect("app", "memory", Some(("512Mi", "kerf-release")));
    c.expect("sidecar", "memory", None);
    c.expect("app", "cpu", Some(("600m", "kerf")));
    assert_eq!(
        sequence(&seen),
        steps(
            "template release, template apply, hpa apply, recommendation, recommendation status, event, event"
        )
    );
    assert_eq!(
        body(&seen, DEPLOYMENT, STRATEGIC),
        &release_patch(json!([{"name": "app", "resources": {"requests": {"memory": "512Mi"}}}]))
    );
    assert_eq!(
        body(&seen, DEPLOYMENT, APPLY),
        &kerf_apply(json!([
            {"name": "app", "resources": {"requests": {"cpu": "600m"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}},
        ])),
        "kerf's apply keeps cpu and no longer carries memory"
    );
    // 75 × 800 / 700 = 85.7
    assert_eq!(body(&seen, HPA, APPLY)["spec"]["metrics"], cpu_metric(86));
    let st = c.status();
    assert_eq!(st["phase"], "applied");
    assert_eq!(
        st["originalRequests"],
        json!({"app": {"cpu": "1"}, "sidecar": {"cpu": "200m"}})
    );
    assert!(st.get("createdRequests").is_none(), "{st}");
    assert_eq!(st["previousHPATarget"], 50);
    assert_eq!(events(&seen), vec!["Released", "Applied"]);
}

/// memory alone in auto-patch → audit-only: nothing is left in auto-patch, the whole workload is
/// released: app's memory restored, the sidecar's removed (there was none before kerf).
#[tokio::test]
async fn one_resource_to_none_restores_it_and_removes_what_kerf_created() {
    let memory_only = Policy { cpu: false, ..BOTH };
    let mut c = Cluster::applied(memory_only).await;
    let none = Policy {
        memory: false,
        ..memory_only
    };
    let seen = c.cycle(&none.with_strategy(), false).await;
    c.expect("sidecar", "memory", None);
    c.expect("app", "memory", Some(("512Mi", "kerf-release")));
    assert_eq!(
        sequence(&seen),
        steps("template release, template apply, recommendation, recommendation status, event")
    );
    assert_eq!(
        body(&seen, DEPLOYMENT, STRATEGIC),
        &release_patch(json!([{"name": "app", "resources": {"requests": {"memory": "512Mi"}}}]))
    );
    assert_eq!(body(&seen, DEPLOYMENT, APPLY), &kerf_apply_nothing());
    c.expect("app", "cpu", Some(("1", ssa::USER)));
    let st = c.status();
    assert_phase(&st, "audit-only", "Released");
    assert!(st.get("originalRequests").is_none() && st.get("createdRequests").is_none());
    assert_eq!(events(&seen), vec!["Released"]);
}

/// `scope.containers` narrowed to `app`: the sidecar's requests are released (cpu restored,
/// memory removed) in the apply that keeps app's, and the HPA target follows the restored
/// request: round(75 × 800 / 900) = 67.
#[tokio::test]
async fn a_container_leaving_the_scope_is_released_in_the_apply_that_keeps_the_others() {
    let mut c = Cluster::applied(BOTH).await;
    let app_only = Policy {
        scope: &["app"],
        ..BOTH
    };
    let seen = c.cycle(&app_only.with_strategy(), false).await;
    c.expect("sidecar", "cpu", Some(("200m", "kerf-release")));
    c.expect("sidecar", "memory", None);
    c.expect_hpa(67, "kerf");
    assert_eq!(
        sequence(&seen),
        steps(
            // The target falls: the HPA goes first.
            "hpa apply, template release, template apply, recommendation, recommendation status, event, event"
        )
    );
    assert_eq!(body(&seen, HPA, APPLY)["spec"]["metrics"], cpu_metric(67));
    assert_eq!(
        body(&seen, DEPLOYMENT, STRATEGIC),
        &release_patch(json!([{"name": "sidecar", "resources": {"requests": {"cpu": "200m"}}}]))
    );
    assert_eq!(
        body(&seen, DEPLOYMENT, APPLY),
        &kerf_apply(json!([
            {"name": "app", "resources": {"requests": {"cpu": "700m", "memory": "384Mi"}}},
        ]))
    );
    let st = c.status();
    assert_eq!(
        st["originalRequests"],
        json!({"app": {"cpu": "1", "memory": "512Mi"}})
    );
    assert!(st.get("createdRequests").is_none(), "{st}");
    assert_eq!(st["previousHPATarget"], 50);
    assert_eq!(st["applied"]["hpa"]["targetAfter"], 67);
    assert_eq!(events(&seen), vec!["Released", "Applied"]);
}

/// The expected full release of the fixture after [`BOTH`]: the HPA back to 50 (it falls: first),
/// every request restored, the sidecar's memory removed.
fn assert_released_whole(c: &Cluster, seen: &[Recorded]) {
    assert_released_whole_in(
        c,
        seen,
        "hpa release, hpa apply, template release, template apply, recommendation status, event",
    );
}

/// [`assert_released_whole`] in the given sequence of requests.
fn assert_released_whole_in(c: &Cluster, seen: &[Recorded], expected_steps: &str) {
    for (container, resource, value) in [
        ("app", "cpu", "1"),
        ("app", "memory", "512Mi"),
        ("sidecar", "cpu", "200m"),
    ] {
        c.expect(container, resource, Some((value, "kerf-release")));
    }
    c.expect("sidecar", "memory", None);
    c.expect_hpa(50, "kerf-release");
    assert_eq!(sequence(seen), steps(expected_steps));
    assert_eq!(
        body(seen, HPA, MERGE),
        &json!({"spec": {"metrics": cpu_metric(50)}})
    );
    assert_eq!(
        body(seen, DEPLOYMENT, STRATEGIC),
        &release_patch(json!([
            {"name": "app", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "200m"}}},
        ]))
    );
    assert_eq!(body(seen, DEPLOYMENT, APPLY), &kerf_apply_nothing());
    let st = c.status();
    assert_phase(&st, "audit-only", "Released");
    assert_nothing_taken(&st);
    assert_eq!(events(seen), vec!["Released"]);
}

#[tokio::test]
async fn a_deleted_policy_releases_everything_kerf_took() {
    let mut c = Cluster::applied(BOTH).await;
    let seen = c.cycle(STRATEGY, false).await;
    assert_released_whole(&c, &seen);
}

/// docs/design/hpa-coordination.md#h13: a policy whose `automationStrategyRef` no longer resolves
/// is not applied, so what kerf took is released as for a deleted policy. Unlike a deleted
/// policy it still recommends, so its RightsizingRecommendation's spec is written too.
#[tokio::test]
async fn a_strategy_that_no_longer_resolves_releases_like_a_deleted_policy() {
    let mut c = Cluster::applied(BOTH).await;
    let seen = c.cycle(&BOTH.yaml(), false).await;
    assert_released_whole_in(
        &c,
        &seen,
        "hpa release, hpa apply, template release, template apply, recommendation, \
         recommendation status, event",
    );
}

/// `spec.hpa.coordinate` switched off: the workload is blocked (HPACoupled), and the HPA target
/// kerf set is released together with the cpu requests it was coordinated with; memory, still
/// auto-patch, stays as kerf set it.
#[tokio::test]
async fn coordination_turned_off_releases_the_hpa_target_with_its_requests() {
    let mut c = Cluster::applied(BOTH).await;
    let off = Policy {
        coordinate: false,
        ..BOTH
    };
    let seen = c.cycle(&off.with_strategy(), false).await;
    c.expect_hpa(50, "kerf-release");
    c.expect("app", "cpu", Some(("1", "kerf-release")));
    c.expect("app", "memory", Some(("384Mi", "kerf")));
    assert_eq!(
        sequence(&seen),
        steps(
            "hpa release, hpa apply, template release, template apply, recommendation, recommendation status, event, event"
        )
    );
    assert_eq!(
        body(&seen, DEPLOYMENT, STRATEGIC),
        &release_patch(json!([
            {"name": "app", "resources": {"requests": {"cpu": "1"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "200m"}}},
        ]))
    );
    assert_eq!(
        body(&seen, DEPLOYMENT, APPLY),
        &kerf_apply(json!([
            {"name": "app", "resources": {"requests": {"memory": "384Mi"}}},
            {"name": "sidecar", "resources": {"requests": {"memory": "64Mi"}}},
        ]))
    );
    let st = c.status();
    assert_phase(&st, "blocked", "HPACoupled");
    assert_eq!(st["originalRequests"], json!({"app": {"memory": "512Mi"}}));
    assert_eq!(st["createdRequests"], json!({"sidecar": ["memory"]}));
    assert!(st.get("previousHPATarget").is_none(), "{st}");
    assert_eq!(events(&seen), vec!["Released", "Blocked"]);
}

/// `readOnly` switched on: kerf writes nothing to the workload or the HPA — no apply, no release —
/// so nothing is dropped, and what kerf took stays recorded; a resource that left auto-patch in
/// the meantime is released once readOnly is lifted. Under readOnly nothing is taken, so nothing
/// is recorded either.
#[tokio::test]
async fn read_only_switched_on_writes_nothing_and_the_release_waits_for_it_to_be_lifted() {
    let mut fresh = Cluster::new(web());
    let seen = fresh.cycle(&BOTH.with_strategy(), true).await;
    assert_no_workload_write(&seen);
    let st = fresh.status();
    assert_phase(&st, "audit-only", "ReadOnly");
    assert_nothing_taken(&st);

    let mut c = Cluster::applied(BOTH).await;
    let taken = c.status();
    let memory_audit = Policy {
        memory: false,
        ..BOTH
    };
    let seen = c.cycle(&memory_audit.with_strategy(), true).await;
    assert_no_workload_write(&seen);
    let st = c.status();
    for k in ["originalRequests", "createdRequests", "previousHPATarget"] {
        assert_eq!(st[k], taken[k], "{k} kept under readOnly");
    }
    c.expect("app", "memory", Some(("384Mi", "kerf")));

    let seen = c.cycle(&memory_audit.with_strategy(), false).await;
    assert_eq!(
        body(&seen, DEPLOYMENT, STRATEGIC),
        &release_patch(json!([{"name": "app", "resources": {"requests": {"memory": "512Mi"}}}]))
    );
    c.expect("app", "memory", Some(("512Mi", "kerf-release")));
    c.expect("sidecar", "memory", None);
    c.expect("app", "cpu", Some(("700m", "kerf")));
}

// ---- GPU: the recommendation kerf serves at admission ----

mod gpu {
    use std::collections::BTreeSet;
    use std::path::Path;

    use kerf::core::model::{ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION};
    use kerf::core::writes::WriteOp;
    use kerf::metrics::file::FileSource;

    use super::kube_support::ssa::{Field, Owner};
    use super::*;

    const LLM: &str = "/apis/apps/v1/namespaces/ml/deployments/llm";

    fn examples() -> Snapshot {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/manifests");
        kerf::sources::dir::load_dir(&dir).unwrap().snapshot
    }

    async fn plan(s: &Snapshot) -> Vec<WriteOp> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/metrics.om");
        let source = FileSource::from_path(&path).unwrap();
        let c = run_cycle(s, &source, now(), 15).await;
        plan_writes(s, &c, &[], &[], now())
    }

    /// The llm Deployment after kerf's first cycle: the GPU annotations it wrote, as kerf's.
    async fn upsized() -> (Snapshot, State) {
        let mut s = examples();
        let ops = plan(&s).await;
        let annotations = ops
            .iter()
            .find_map(|op| match op {
                WriteOp::Workload(w) if w.observed.key.name == "llm" => {
                    w.gpu.as_ref().map(|g| g.rendered())
                }
                _ => None,
            })
            .expect("the GPU annotations of llm");
        assert!(annotations.contains_key(ANNOTATION_GPU_RECOMMENDATION));
        let w = s
            .workloads
            .iter_mut()
            .find(|w| w.key.name == "llm")
            .unwrap();
        Arc::make_mut(w).annotations.extend(annotations.clone());
        let mut state = State::new(
            "ml",
            "llm",
            &[
                ("inference", &[("cpu", "2"), ("memory", "8Gi")]),
                ("proxy", &[("cpu", "100m"), ("memory", "64Mi")]),
            ],
            None,
        );
        for (k, v) in annotations {
            state.annotations.insert(
                k,
                Field {
                    value: json!(v),
                    owners: BTreeSet::from([Owner::new("kerf", "Apply")]),
                },
            );
        }
        (s, state)
    }

    /// llm's writes of `s`, sent to the mock holding `state`; the requests made.
    async fn write_llm(s: &Snapshot, state: State) -> (Vec<Recorded>, State) {
        let ops: Vec<WriteOp> = plan(s)
            .await
            .into_iter()
            .filter(|op| matches!(op, WriteOp::Workload(w) if w.observed.key.name == "llm"))
            .collect();
        assert_eq!(ops.len(), 1, "one write of llm: {ops:#?}");
        let mut c = Cluster::new(state);
        for op in ops {
            let outcome = c.writer.apply(op).await;
            assert!(
                matches!(outcome, WriteOutcome::Written { .. }),
                "{outcome:?}"
            );
        }
        let seen = requests(&c.log);
        c.seen = seen.len();
        (seen, c.state())
    }

    /// What releasing llm's GPU looks like: kerf's apply leaves its annotations out (kerf created
    /// them, so they go) and the pods roll, to be admitted with the template's own `gpu-fraction`.
    fn assert_gpu_released(seen: &[Recorded], after: &State) {
        assert_eq!(
            sequence(seen),
            vec![
                req("GET", LLM, "", ""),
                req("PATCH", LLM, APPLY, "kerf"),
                req("PATCH", LLM, MERGE, "kerf"),
            ]
        );
        assert_eq!(
            body(seen, LLM, APPLY),
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "llm", "namespace": "ml"}})
        );
        assert!(
            !after
                .annotations
                .contains_key(ANNOTATION_GPU_RECOMMENDATION)
                && !after.annotations.contains_key(ANNOTATION_GPU_BASELINE),
            "{:?}",
            after.annotations
        );
        assert!(
            after
                .template_annotations
                .contains_key(kerf::core::model::ANNOTATION_RESTARTED_AT)
        );
    }

    /// The GPU policy is deleted: llm's pods go back to the template's GPU allocation.
    #[tokio::test]
    async fn a_deleted_gpu_policy_gives_the_pods_the_templates_gpu_back() {
        let (mut s, state) = upsized().await;
        s.gpu_policies.clear();
        let (seen, after) = write_llm(&s, state).await;
        assert_gpu_released(&seen, &after);
    }

    /// `scope.containers` narrowed to the proxy: the inference container leaves the GPU policy,
    /// its recommendation and baseline go, and its pods get the template's GPU again.
    #[tokio::test]
    async fn a_container_leaving_the_gpu_policy_gets_the_templates_gpu_back() {
        let (mut s, state) = upsized().await;
        s.gpu_policies[0].spec.scope.containers = vec!["proxy".into()];
        let (seen, after) = write_llm(&s, state).await;
        assert_gpu_released(&seen, &after);
    }
}

// ---- standalone: the in-memory writer releases the same way ----

const WEB: &str = "
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - {name: app, image: example/app:1, resources: {requests: {cpu: '1', memory: 512Mi}}}
        - {name: sidecar, image: example/sidecar:1, resources: {requests: {cpu: 200m}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 10
  metrics:
    - {type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}}
status: {currentReplicas: 3}
";

/// `kerf serve --standalone` / `kerf recommend`: the manifests are read afresh every cycle and
/// kerf's writes laid over them. A resource that leaves auto-patch is released there too: the
/// manifest's own request stands again (the sidecar's memory, which kerf created, is gone), while
/// the resource kerf keeps stays at kerf's value.
#[tokio::test]
async fn the_in_memory_writer_releases_per_resource_as_the_cluster_does() {
    use kerf::core::writes::template_requests;
    let read = |policy: &Policy| {
        let mut m = Manifests::default();
        load_text(
            &format!("{WEB}---{}", policy.with_strategy()),
            "test",
            &mut m,
        )
        .unwrap();
        m.snapshot
    };
    let mut writer = kerf::writers::memory::MemoryWriter::new();
    let store = kerf::state::Store::new();
    let memory_audit = Policy {
        memory: false,
        ..BOTH
    };
    for policy in [BOTH, memory_audit] {
        kerf::reconcile::standalone::in_memory_cycle(
            &mut writer,
            read(&policy),
            &[],
            &NoSamples,
            now(),
            15,
            &store,
        )
        .await;
    }
    let mut s = read(&memory_audit);
    writer.overlay(&mut s);
    let template = &s.workloads[0].template;
    let (app, sidecar) = (
        template_requests(template, "app").unwrap(),
        template_requests(template, "sidecar").unwrap(),
    );
    assert_eq!(
        (app.cpu_millis, app.memory_bytes),
        (Some(700), Some(512 << 20)),
        "app: kerf's cpu, the manifest's memory"
    );
    assert_eq!(
        (sidecar.cpu_millis, sidecar.memory_bytes),
        (Some(100), None)
    );
    let rec = &writer.recommendations()[0];
    let st = rec.status.as_ref().unwrap();
    assert_eq!(
        serde_json::to_value(&st.original_requests).unwrap(),
        json!({"app": {"cpu": "1"}, "sidecar": {"cpu": "200m"}})
    );
}

// ---- the invariant ----

/// What one cycle runs with.
#[derive(Clone, Copy, Debug)]
enum Step {
    Policy(Policy),
    /// The policy is gone.
    Deleted,
    /// The policy's strategy is gone.
    Unresolved(Policy),
    ReadOnly(Policy),
}

impl Step {
    fn manifests(&self) -> String {
        match self {
            Step::Policy(p) | Step::ReadOnly(p) => p.with_strategy(),
            Step::Deleted => STRATEGY.to_string(),
            Step::Unresolved(p) => p.yaml(),
        }
    }

    /// Whether kerf manages `container`'s `resource` under this step (cpu only while coordinated:
    /// the HPA scales on it).
    fn manages(&self, container: &str, resource: &str) -> bool {
        let Step::Policy(p) = self else {
            return false;
        };
        let in_scope = p.scope.is_empty() || p.scope.contains(&container);
        in_scope
            && match resource {
                "cpu" => p.cpu && p.coordinate,
                _ => p.memory,
            }
    }
}

fn every_step() -> Vec<Step> {
    let mut out = vec![Step::Deleted, Step::Unresolved(BOTH), Step::ReadOnly(BOTH)];
    for cpu in [true, false] {
        for memory in [true, false] {
            for coordinate in [true, false] {
                for scope in [&[][..], &["app"][..]] {
                    out.push(Step::Policy(Policy {
                        cpu,
                        memory,
                        coordinate,
                        scope,
                        app_cpu: "700m",
                    }));
                }
            }
        }
    }
    out
}

/// The manifest's requests.
const BEFORE_KERF: [(&str, &str, Option<&str>); 4] = [
    ("app", "cpu", Some("1")),
    ("app", "memory", Some("512Mi")),
    ("sidecar", "cpu", Some("200m")),
    ("sidecar", "memory", None),
];

/// Over every pair of steps (and back to the first with a new cpu recommendation, so kerf's
/// apply changes something), against managedFields as the API server keeps them: no apply ever
/// deletes a request the workload had before kerf, and after every cycle that may write, each
/// request kerf does not manage is the workload's own again (the sidecar's memory, which kerf
/// created, absent) and the HPA target is the user's unless kerf coordinates cpu.
#[tokio::test]
async fn no_transition_drops_a_request_or_leaves_one_kerf_no_longer_manages() {
    let steps = every_step();
    for first in &steps {
        for second in &steps {
            let third = match *first {
                Step::Policy(p) => Step::Policy(Policy {
                    app_cpu: "600m",
                    ..p
                }),
                other => other,
            };
            let mut c = Cluster::new(web());
            for step in [*first, *second, third] {
                let read_only = matches!(step, Step::ReadOnly(_));
                c.cycle(&step.manifests(), read_only).await;
                let st = c.state();
                let path = format!("{first:?} → {second:?}, at {step:?}");
                for (container, resource, before) in BEFORE_KERF {
                    if before.is_some() {
                        assert!(
                            !st.deleted
                                .contains(&(container.to_string(), resource.to_string())),
                            "{path}: an apply deleted {container}'s {resource} request"
                        );
                    }
                    if read_only || step.manages(container, resource) {
                        continue;
                    }
                    assert_eq!(
                        st.request(container, resource).map(|(v, _)| v).as_deref(),
                        before,
                        "{path}: {container} {resource} is not the workload's own"
                    );
                }
                if !read_only && !step.manages("app", "cpu") {
                    assert_eq!(
                        st.hpa_target().map(|(t, _)| t),
                        Some(50),
                        "{path}: the HPA target"
                    );
                }
            }
        }
    }
}

// ---- the invariant, field by field: kerf's bodies against any managedFields ----

mod bodies {
    use std::collections::BTreeMap;

    use kerf::api::WorkloadKind;
    use kerf::core::model::{RequestSet, ResourceRequests, WorkloadKey};
    use kerf::core::writes::{Live, Released, kerf_apply, live_template, release_patch};
    use kube::api::DynamicObject;
    use proptest::prelude::*;

    use super::*;

    const FIELDS: [(&str, &str); 4] =
        [("a", "cpu"), ("a", "memory"), ("b", "cpu"), ("b", "memory")];

    fn text(resource: &str, v: u8) -> String {
        match resource {
            "cpu" => format!("{}m", u32::from(v) * 100),
            _ => format!("{}Mi", u32::from(v) * 64),
        }
    }

    fn value(resource: &str, v: u8) -> i64 {
        match resource {
            "cpu" => i64::from(v) * 100,
            _ => i64::from(v) * 64 * (1 << 20),
        }
    }

    fn set_value(r: &mut ResourceRequests, resource: &str, v: i64) {
        match resource {
            "cpu" => r.cpu_millis = Some(v),
            _ => r.memory_bytes = Some(v),
        }
    }

    fn apply_body(fields: &[((&str, &str), u8)]) -> Value {
        let mut containers: BTreeMap<&str, serde_json::Map<String, Value>> = BTreeMap::new();
        for ((c, r), v) in fields {
            containers
                .entry(c)
                .or_default()
                .insert(r.to_string(), json!(text(r, *v)));
        }
        let list: Vec<Value> = containers
            .into_iter()
            .map(|(c, req)| json!({"name": c, "resources": {"requests": req}}))
            .collect();
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"template": {"spec": {"containers": list}}}})
    }

    /// One field's story: its value before kerf, whether kerf took it (and at what value,
    /// after which earlier value of its own), whether another applier shares it at kerf's
    /// value, and what this cycle does with it (0 nothing, 1 a new value, 2 release).
    type Story = (Option<u8>, bool, u8, bool, u8, u8, Option<u8>);

    fn story() -> impl Strategy<Value = Story> {
        (
            proptest::option::of(1u8..4),
            any::<bool>(),
            1u8..4,
            any::<bool>(),
            0u8..3,
            1u8..4,
            proptest::option::of(1u8..4),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever the managedFields (the user's manifest, kerf's forced apply, another applier
        /// sharing kerf's value), kerf's release patch and apply leave every request either at
        /// kerf's new value, at kerf's kept value, restored to the value from before kerf, or —
        /// only where there was none before kerf and nobody else claims it — gone. No apply
        /// drops a field kerf owns without restoring it.
        #[test]
        fn no_apply_drops_a_request_kerf_owns_without_restoring_it(
            stories in proptest::collection::vec(story(), 4)
        ) {
            let manifest: Vec<Vec<(&str, String)>> = ["a", "b"]
                .iter()
                .map(|c| {
                    FIELDS
                        .iter()
                        .zip(&stories)
                        .filter(|((fc, _), s)| fc == c && s.0.is_some())
                        .map(|((_, r), s)| (*r, text(r, s.0.unwrap())))
                        .collect()
                })
                .collect();
            let refs: Vec<Vec<(&str, &str)>> = manifest
                .iter()
                .map(|m| m.iter().map(|(r, v)| (*r, v.as_str())).collect())
                .collect();
            let mut state = State::new(
                "shop",
                "web",
                &[("a", &refs[0][..]), ("b", &refs[1][..])],
                None,
            );
            // kerf's earlier applies (a value it set before, where the story has one), then the
            // value it holds now.
            let earlier: Vec<((&str, &str), u8)> = FIELDS
                .iter()
                .zip(&stories)
                .filter(|(_, s)| s.1)
                .map(|(f, s)| (*f, s.6.unwrap_or(s.2)))
                .collect();
            state.apply_deployment("kerf", &apply_body(&earlier));
            let took: Vec<((&str, &str), u8)> = FIELDS
                .iter()
                .zip(&stories)
                .filter(|(_, s)| s.1)
                .map(|(f, s)| (*f, s.2))
                .collect();
            state.apply_deployment("kerf", &apply_body(&took));
            let shared: Vec<((&str, &str), u8)> = FIELDS
                .iter()
                .zip(&stories)
                .filter(|(_, s)| s.1 && s.3)
                .map(|(f, s)| (*f, s.2))
                .collect();
            if !shared.is_empty() {
                state.apply_deployment("gitops", &apply_body(&shared));
            }

            let mut set = ContainerRequests::new();
            let mut restored = ContainerRequests::new();
            let mut removed: BTreeMap<String, RequestSet> = BTreeMap::new();
            for ((c, r), s) in FIELDS.iter().zip(&stories) {
                match (s.4, s.1, s.0) {
                    (1, _, _) => set_value(set.entry(c.to_string()).or_default(), r, value(r, s.5)),
                    (2, true, Some(orig)) => {
                        set_value(restored.entry(c.to_string()).or_default(), r, value(r, orig))
                    }
                    (2, true, None) => {
                        let e = removed.entry(c.to_string()).or_default();
                        if *r == "cpu" { e.cpu = true } else { e.memory = true }
                    }
                    _ => {}
                }
            }
            let key = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
            let live: DynamicObject = serde_json::from_value(state.deployment()).unwrap();
            if let Some(patch) =
                release_patch(&key, &restored, &ContainerRequests::new(), &live_template(Live { metadata: &live.metadata, data: &live.data }, WorkloadKind::Deployment))
            {
                state.update_requests("kerf-release", &patch);
            }
            let live: DynamicObject = serde_json::from_value(state.deployment()).unwrap();
            let released = Released { restored: &restored, removed: &removed };
            let apply = kerf_apply(&key, Live { metadata: &live.metadata, data: &live.data }, None, &set, &ContainerRequests::new(), released);
            state.apply_deployment("kerf", &apply.body);

            for ((c, r), s) in FIELDS.iter().zip(&stories) {
                let (orig, took, kerfs, shared, action, new, _) = *s;
                let after = state.request(c, r).map(|(v, _)| v);
                let expected = match (action, took, orig) {
                    (1, _, _) => Some(text(r, new)),
                    (2, true, Some(o)) => Some(text(r, o)),
                    (2, true, None) => shared.then(|| text(r, kerfs)),
                    (_, true, _) => Some(text(r, kerfs)),
                    (_, false, o) => o.map(|o| text(r, o)),
                };
                let canonical = |t: String| {
                    let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(t);
                    match *r {
                        "cpu" => kerf::core::quantity::format_cpu_millis(
                            kerf::core::quantity::cpu_millis(&q).unwrap()),
                        _ => kerf::core::quantity::format_memory_bytes(
                            kerf::core::quantity::memory_bytes(&q).unwrap()),
                    }
                };
                prop_assert_eq!(
                    after.clone(),
                    expected.map(canonical),
                    "{} {}: {:?}; body {}", c, r, s, apply.body
                );
                if orig.is_some() {
                    prop_assert!(after.is_some(), "{} {} had a value before kerf", c, r);
                }
            }
        }
    }
}
