//! The reconciler's pure write planning on real inputs (the shipped examples evaluated from the
//! OpenMetrics file), and store refresh when Prometheus is unavailable.

use std::path::PathBuf;

use jiff::Timestamp;
use kerf::api::WorkloadKind;
use kerf::core::model::{ContainerRequests, GpuRecommendation, ResourceRequests, WorkloadKey};
use kerf::core::recommenders::cycle::CycleOutput;
use kerf::core::writes::WriteOp;
use kerf::metrics::file::FileSource;
use kerf::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};
use kerf::reconcile::plan_writes;
use kerf::reconcile::run_cycle;
use kerf::sources::dir::load_dir;

fn at() -> Timestamp {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Down;
impl MetricSource for Down {
    async fn range_query(&self, _q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        Err(MetricError::Unavailable("connection refused".into()))
    }
    async fn window_query(
        &self,
        _q: &kerf::metrics::WindowQuery,
    ) -> Result<kerf::metrics::WindowSet, MetricError> {
        Err(MetricError::Unavailable("connection refused".into()))
    }
}

async fn cycle(dir: &str, metrics: &str) -> (kerf::sources::dir::Manifests, CycleOutput) {
    let m = load_dir(&root().join(dir)).unwrap();
    let src = FileSource::from_path(&root().join(metrics)).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    (m, c)
}

fn coordinated_op(ops: &[WriteOp]) -> Option<&kerf::core::writes::CoordinatedChange> {
    ops.iter().find_map(|op| match op {
        WriteOp::Coordinated(c) => Some(&**c),
        _ => None,
    })
}

fn workload_op<'a>(
    ops: &'a [WriteOp],
    name: &str,
) -> Option<&'a kerf::core::writes::WorkloadWrite> {
    ops.iter().find_map(|op| match op {
        WriteOp::Workload(w) if w.observed.key.name == name => Some(&**w),
        _ => None,
    })
}

#[tokio::test]
async fn gpu_upsize_persists_baseline_and_recommendation_annotations() {
    let (m, c) = cycle("examples/manifests", "examples/metrics.om").await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let llm = workload_op(&ops, "llm").expect("a write for llm");
    let gpu = llm.gpu.as_ref().unwrap();
    assert_eq!(gpu.baseline.as_ref().unwrap()["inference"], 0.5);
    let rec: &GpuRecommendation = gpu.recommendation.as_ref().unwrap();
    assert!((rec.containers["inference"] - 0.84).abs() < 1e-9);
    assert_eq!(rec.driving_metric.map(|d| d.as_str()), Some("compute"));
    assert!(
        llm.requests.is_none(),
        "GPU changes go through admission, not the template"
    );
    let status = ops.iter().find_map(|op| match op {
        WriteOp::PolicyStatus(p) if p.policy.name == "gpu-reactive" => Some(p),
        _ => None,
    });
    let status = status.expect("policy status");
    let avail = status
        .conditions
        .iter()
        .find(|c| c.type_ == "PrometheusAvailable")
        .unwrap();
    assert!(avail.status);
    assert_eq!(status.matched_workloads, Some(2));
}

#[tokio::test]
async fn prometheus_down_writes_no_workload_and_sets_the_condition() {
    let m = load_dir(&root().join("examples/manifests")).unwrap();
    let c = run_cycle(&m.snapshot, &Down, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    assert!(
        workload_op(&ops, "llm").is_none() && workload_op(&ops, "embedder").is_none(),
        "baselines untouched"
    );
    let status = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::PolicyStatus(p) => Some(p),
            _ => None,
        })
        .unwrap();
    let avail = status
        .conditions
        .iter()
        .find(|c| c.type_ == "PrometheusAvailable")
        .unwrap();
    assert!(!avail.status);
    assert!(
        avail.message.contains("connection refused"),
        "{}",
        avail.message
    );
}

#[tokio::test]
async fn store_keeps_the_last_state_while_prometheus_is_down() {
    let file = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(root().join("examples/manifests"));
    dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    let key = WorkloadKey::new("ml", kerf::api::WorkloadKind::Deployment, "llm");
    let before = store.get(&key).expect("llm served");
    assert!((before.gpu.as_ref().unwrap().containers["inference"] - 0.84).abs() < 1e-9);
    dir_loop.run_once(&Down, at(), 15, &store).await.unwrap();
    assert_eq!(
        *store.get(&key).unwrap(),
        *before,
        "no flapping while metrics are unavailable"
    );
}

#[tokio::test]
async fn coordinated_change_and_applied_event_for_the_hpa_example() {
    let (m, c) = cycle("examples/hpa/manifests", "examples/hpa/metrics.om").await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let coordinated = coordinated_op(&ops).expect("one coordinated change");
    assert_eq!(coordinated.hpa.name, "web");
    assert_eq!(coordinated.hpa.average_utilization, 71);
    let req = &coordinated.workload.requests.as_ref().unwrap()["app"];
    assert_eq!(req.cpu_millis, Some(700));
    let event = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::Event(e) if e.reason == "Applied" => Some(e),
            _ => None,
        })
        .expect("Applied event");
    assert_eq!(event.details["hpaTargetFrom"], "50");
    assert_eq!(event.details["hpaTargetTo"], "71");
    let rec = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::Recommendation(r) => Some(r),
            _ => None,
        })
        .expect("RightsizingRecommendation");
    assert_eq!(rec.name, "deployment-web");
    assert_eq!(rec.status.as_ref().unwrap().previous_hpa_target, Some(50));
    // What every replica's webhook serves from now on.
    let applied = rec.status.as_ref().unwrap().applied.as_ref().unwrap();
    assert_eq!(
        applied.requests["app"].cpu.as_ref().map(|q| q.0.as_str()),
        Some("700m")
    );
    assert_eq!(applied.requests["app"].memory, None, "memory is audit-only");
    let hpa = applied.hpa.as_ref().unwrap();
    assert_eq!((hpa.target_before, hpa.target_after), (Some(50), Some(71)));
}

/// The HPA half of a coordinated change failed (the template took 700m, the HPA kept 50 %): the
/// next cycle writes the HPA target planned from the pre-change pair (71 %), not one recomputed
/// from the half-changed pair (round(50 × 700/700) = 50, which would pass for done), and the
/// recommendation keeps saying 50 → 71.
#[tokio::test]
async fn a_failed_hpa_half_is_written_again_with_the_target_planned_before_the_change() {
    let (m, c) = cycle("examples/hpa/manifests", "examples/hpa/metrics.om").await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let rec = recommendation_op(&ops, "deployment-web").unwrap();
    let recorded = std::sync::Arc::new(kerf::core::persisted::PersistedRecommendation {
        namespace: rec.namespace.as_str().into(),
        name: rec.name.as_str().into(),
        owner_uids: Vec::new(),
        spec: rec.spec.clone(),
        status: rec.status.clone().map(Box::new),
    });
    // The template half went through; the HPA still says 50 %.
    let dir = tempfile::tempdir().unwrap();
    for f in ["web.yaml", "pods.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/hpa/manifests").join(f)).unwrap();
        let text = match f {
            "web.yaml" => text.replace(
                "requests: {cpu: 1000m, memory: 512Mi}",
                "requests: {cpu: 700m, memory: 512Mi}",
            ),
            _ => text,
        };
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    let half = load_dir(dir.path()).unwrap();
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let c = run_cycle(&half.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&half.snapshot, &c, &[], &[recorded], at());
    let coordinated = coordinated_op(&ops).expect("the change is written again");
    assert_eq!(coordinated.hpa.average_utilization, 71);
    let req = &coordinated.workload.requests.as_ref().unwrap()["app"];
    assert_eq!(req.cpu_millis, Some(700));
    let rec = recommendation_op(&ops, "deployment-web").unwrap();
    let hpa = rec.status.as_ref().unwrap().applied.as_ref().unwrap();
    let hpa = hpa.hpa.as_ref().unwrap();
    assert_eq!((hpa.target_before, hpa.target_after), (Some(50), Some(71)));
    let spec = rec.spec.hpa.as_ref().unwrap();
    assert_eq!(
        (spec.target_before, spec.target_after),
        (Some(50), Some(71))
    );
}

/// docs/design/hpa-coordination.md#h11: a coordinated change goes through the pod template (a
/// rollout), never in place. The plan writes the new requests into the workload's template,
/// together with the HPA target, and nothing else touches the workload or its pods: every op
/// is that change, the RightsizingRecommendation, its event or a policy status (`WriteOp` has
/// no write for a pod).
#[tokio::test]
async fn a_coordinated_change_is_always_a_rollout_never_in_place() {
    let (m, c) = cycle("examples/hpa/manifests", "examples/hpa/metrics.om").await;
    let web = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    assert!(
        m.snapshot
            .pods
            .iter()
            .any(|p| p.metadata.namespace.as_deref() == Some("shop")),
        "the workload has running pods"
    );
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let mut coordinated = Vec::new();
    for op in &ops {
        match op {
            WriteOp::Coordinated(change) => coordinated.push(change),
            WriteOp::Recommendation(_) | WriteOp::Event(_) | WriteOp::PolicyStatus(_) => {}
            other => panic!("not part of a coordinated change: {other:?}"),
        }
    }
    let [change] = coordinated[..] else {
        panic!("one coordinated change: {ops:?}");
    };
    // The template's requests: the live template asks for cpu 1000m, so writing 700m rolls the
    // pods through the Deployment's own update strategy.
    assert_eq!(change.workload.observed.key, web);
    assert_eq!(
        change.workload.requests,
        Some(ContainerRequests::from([(
            "app".to_string(),
            ResourceRequests {
                cpu_millis: Some(700),
                memory_bytes: None
            }
        )]))
    );
    assert!(change.workload.gpu.is_none());
    let live = serde_json::to_value(&change.workload.observed.template).unwrap();
    assert_eq!(
        live["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "1000m"
    );
    assert_eq!(
        (change.hpa.name.as_str(), change.hpa.average_utilization),
        ("web", 71)
    );
}

#[tokio::test]
async fn read_only_plans_no_template_or_hpa_change() {
    let (mut m, _) = cycle("examples/hpa/manifests", "examples/hpa/metrics.om").await;
    m.snapshot.global.read_only = true;
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    assert!(
        !ops.iter()
            .any(|op| matches!(op, WriteOp::Coordinated(_) | WriteOp::Workload(_)))
    );
    let rec = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::Recommendation(r) => Some(r),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        rec.status.as_ref().unwrap().reason.as_deref(),
        Some("ReadOnly")
    );
}

/// The GPU result of `key` in a cycle over a directory.
fn gpu_result(
    e: &kerf::reconcile::standalone::Evaluated,
    key: &WorkloadKey,
) -> kerf::core::recommenders::gpu::WorkloadResult {
    e.cycle
        .gpu_results()
        .find(|r| &r.key == key)
        .cloned()
        .unwrap()
}

/// The standalone loop is the cluster's loop with the in-memory writer: what one cycle writes
/// (baseline, recommendation, policy conditions, restarts) is what the next one reads, so a cycle
/// whose queries fail keeps the last recommendation and baseline and says why.
#[tokio::test]
async fn dir_loop_feeds_its_own_writes_to_the_next_cycle() {
    let file = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(root().join("examples/manifests"));
    let key = WorkloadKey::new("ml", kerf::api::WorkloadKind::Deployment, "llm");
    let llm = |e: &kerf::reconcile::standalone::Evaluated| gpu_result(e, &key);
    let condition = |dir_loop: &kerf::reconcile::standalone::DirLoop,
                     e: &kerf::reconcile::standalone::Evaluated| {
        let id = &e.snapshot.gpu_policies[0].id;
        let status = dir_loop.writer().policy_status(id).cloned().unwrap();
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "PrometheusAvailable")
            .unwrap()
    };

    let first = dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    assert_eq!(llm(&first).action.as_str(), "upsize");
    assert_eq!(condition(&dir_loop, &first).status, "True");
    assert_eq!(dir_loop.writer().restarts(&key), 1);

    let down = dir_loop.run_once(&Down, at(), 15, &store).await.unwrap();
    let r = llm(&down);
    assert!(r.metrics_unavailable);
    assert_eq!(
        r.action.as_str(),
        "reuse",
        "the recommendation written by the first cycle is read back"
    );
    let rec = r.recommendation.as_ref().unwrap();
    assert!((rec.containers["inference"] - 0.84).abs() < 1e-9);
    assert_eq!(r.baseline.as_ref().unwrap()["inference"], 0.5);
    let avail = condition(&dir_loop, &down);
    assert_eq!(avail.status, "False");
    assert!(
        avail.message.contains("connection refused"),
        "{}",
        avail.message
    );
    let served = store.get(&key).unwrap();
    assert!((served.gpu.as_ref().unwrap().containers["inference"] - 0.84).abs() < 1e-9);

    let back = dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    assert_eq!(condition(&dir_loop, &back).status, "True");
    assert!((llm(&back).recommendation.unwrap().containers["inference"] - 0.84).abs() < 1e-9);
    assert_eq!(
        dir_loop.writer().restarts(&key),
        1,
        "the same recommendation again is no new rollout"
    );
}

/// CPU/memory too: a cycle whose queries fail keeps serving the applied requests and the
/// coordinated HPA target (carried over in the recommendation's `status.applied`).
#[tokio::test]
async fn applied_cpu_requests_and_hpa_target_survive_a_failed_cycle() {
    let file = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop =
        kerf::reconcile::standalone::DirLoop::new(root().join("examples/hpa/manifests"));
    let key = WorkloadKey::new("shop", kerf::api::WorkloadKind::Deployment, "web");
    dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    let before = store.get(&key).expect("web served");
    assert_eq!(before.resources["app"].cpu_millis, Some(700));
    assert_eq!(before.hpa.as_ref().unwrap().target_after, 71);
    let down = dir_loop.run_once(&Down, at(), 15, &store).await.unwrap();
    assert!(down.cycle.resource_results().all(|r| r.metrics_unavailable));
    assert_eq!(*store.get(&key).unwrap(), *before);
}

/// A Prometheus outage never empties the persisted state: the RightsizingRecommendation keeps
/// its recommendation and `status.applied` as the last good cycle wrote them, its phase stays
/// with reason `MetricsUnavailable` (not `NoUsageData`: an outage, not missing data), admission
/// keeps serving it, and the next good cycle writes the same again.
#[tokio::test]
async fn a_prometheus_outage_keeps_the_recommendation_and_says_metrics_unavailable() {
    let file = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop =
        kerf::reconcile::standalone::DirLoop::new(root().join("examples/hpa/manifests"));
    let key = WorkloadKey::new("shop", kerf::api::WorkloadKind::Deployment, "web");
    let name = kerf::core::writes::recommendation_name(&key);
    let written = |dir_loop: &kerf::reconcile::standalone::DirLoop| {
        dir_loop
            .writer()
            .recommendation_named("shop", &name)
            .cloned()
            .expect("web's RightsizingRecommendation")
    };
    // Twice: the second cycle sees the first one's writes (steady from there on).
    dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    let good = written(&dir_loop);
    let good_status = good.status.clone().unwrap();
    assert_eq!(good_status.phase, kerf::api::RecommendationPhase::Applied);
    assert!(good_status.applied.is_some());
    assert!(!good.spec.containers.is_empty());
    let served = store.get(&key).expect("web served");

    let down = dir_loop.run_once(&Down, at(), 15, &store).await.unwrap();
    assert!(down.cycle.resource_results().all(|r| r.metrics_unavailable));
    let kept = written(&dir_loop);
    let status = kept.status.clone().unwrap();
    assert_eq!(kept.spec, good.spec, "the recommendation as it was");
    assert_eq!(
        status.applied, good_status.applied,
        "status.applied as it was"
    );
    assert_eq!(status.phase, good_status.phase);
    assert_eq!(status.reason.as_deref(), Some("MetricsUnavailable"));
    assert_eq!(
        *store.get(&key).unwrap(),
        *served,
        "admission serves the same"
    );

    dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    let back = written(&dir_loop);
    assert_eq!(back.spec, good.spec);
    assert_eq!(back.status.as_ref().unwrap().phase, good_status.phase);
    assert_eq!(back.status.as_ref().unwrap().reason, good_status.reason);
}

/// One rule for invalid policies in every object source: an invalid policy is left out and says
/// why in its status, and the other policies are evaluated — from a directory as in a cluster.
#[tokio::test]
async fn an_invalid_policy_in_a_directory_is_left_out_and_reported_in_its_status() {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(root().join("examples/manifests")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: rightsizing.kubex.ai/v1alpha1\nkind: RightsizingPolicy\n\
         metadata: {name: broken, namespace: ml}\n\
         spec:\n  automationStrategyRef: {name: s}\n  resources:\n    cpu: {percentile: 150}\n",
    )
    .unwrap();
    let file = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(dir.path());
    let e = dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    assert_eq!(e.invalid.len(), 1);
    assert!(
        e.invalid[0].error.contains("bad.yaml"),
        "{}",
        e.invalid[0].error
    );
    assert!(
        e.invalid[0].error.contains("spec.resources.cpu.percentile"),
        "{}",
        e.invalid[0].error
    );
    assert_eq!(
        e.cycle.gpu_results().count(),
        2,
        "the valid policies are evaluated"
    );
    let status = dir_loop
        .writer()
        .policy_status(&e.invalid[0].id)
        .cloned()
        .expect("the invalid policy has a status");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Invalid")
    );
    assert!(
        ready.message.contains("spec.resources.cpu.percentile"),
        "{}",
        ready.message
    );
}

// ---- issue 11: the rules the reconcile loop must follow end to end ----------------------------

fn recommendation_op<'a>(
    ops: &'a [WriteOp],
    name: &str,
) -> Option<&'a kerf::core::writes::RecommendationWrite> {
    ops.iter().find_map(|op| match op {
        WriteOp::Recommendation(r) if r.name == name => Some(&**r),
        _ => None,
    })
}

/// An AdmissionReview creating a pod of the HPA example's `web` Deployment (requests 1000m).
fn web_pod_review() -> serde_json::Value {
    let p = root().join("tests/fixtures/admission/pod-web.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// docs/design/runtime.md#r8 and gpu-engine.md#g11: a policy whose `automationStrategyRef` does
/// not resolve is not applied — for every kind. A CPU auto-patch RightsizingPolicy naming a
/// missing strategy changes no template, no HPA, and no pod at admission; its recommendation is
/// still published, and its phase says why.
#[tokio::test]
async fn a_policy_whose_strategy_does_not_resolve_is_not_applied() {
    let mut m = load_dir(&root().join("examples/hpa/manifests")).unwrap();
    m.snapshot.rightsizing_policies[0]
        .spec
        .automation_strategy_ref
        .name = "missing".into();
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let (cycle, ops) = kerf::reconcile::reconcile_once(
        &m.snapshot,
        &[],
        &[],
        &src,
        at(),
        15,
        &kerf::telemetry::Metrics::default(),
    )
    .await;
    assert!(
        !ops.iter().any(|op| matches!(
            op,
            WriteOp::Coordinated(_) | WriteOp::Workload(_) | WriteOp::Event(_)
        )),
        "no template change, no HPA change: {ops:#?}"
    );
    let rec = recommendation_op(&ops, "deployment-web").expect("the recommendation is published");
    let cpu = &rec.spec.containers[0].recommended.cpu;
    assert_eq!(cpu.as_ref().map(|q| q.0.as_str()), Some("700m"));
    let status = rec.status.as_ref().unwrap();
    assert_eq!(status.phase, kerf::api::RecommendationPhase::AuditOnly);
    assert_eq!(status.reason.as_deref(), Some("StrategyUnresolved"));
    assert!(status.applied.is_none(), "nothing for admission to serve");
    drop(cycle);

    // The same cycle in memory: the webhook serves no CPU request and no HPA target.
    let store = kerf::state::Store::new();
    let mut writer = kerf::writers::memory::MemoryWriter::new();
    kerf::reconcile::standalone::in_memory_cycle(
        &mut writer,
        m.snapshot.clone(),
        &[],
        &src,
        at(),
        15,
        &store,
    )
    .await;
    let body = serde_json::to_vec(&web_pod_review()).unwrap();
    let reply = kerf::server::review::handle_review(&body, &store);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert!(
        answer["response"].get("patch").is_none(),
        "no CPU/memory patch at admission: {answer}"
    );

    // The GPU kind too: the embedder's persisted recommendation (0.9) is not served once its
    // policy's strategy no longer resolves, not even before the next cycle.
    let mut m = load_dir(&root().join("examples/manifests")).unwrap();
    m.snapshot.gpu_policies[0].spec.automation_strategy_ref.name = "missing".into();
    let store = kerf::state::Store::new();
    let warnings = kerf::reconcile::serve_persisted(&store, &m.snapshot, &[]);
    let embedder = WorkloadKey::new("ml", kerf::api::WorkloadKind::Deployment, "embedder");
    assert!(store.get(&embedder).is_none(), "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.contains("does not resolve")),
        "{warnings:?}"
    );
}

/// The HPA example's snapshot with the HPA at `current` replicas now and the OpenMetrics file
/// extended with kube-state-metrics replica history: `history` = (seconds before `at`, replicas).
async fn hpa_example_with_history(
    current: i32,
    history: &[(i64, i32)],
) -> (kerf::sources::dir::Manifests, CycleOutput) {
    let mut m = load_dir(&root().join("examples/hpa/manifests")).unwrap();
    let status = m.snapshot.hpas[0]
        .status
        .get_or_insert_with(Default::default);
    status.current_replicas = Some(current);
    let mut text = std::fs::read_to_string(root().join("examples/hpa/metrics.om")).unwrap();
    text.truncate(text.rfind("# EOF").unwrap());
    let end = at().as_second();
    let mut history = history.to_vec();
    history.sort_by_key(|(ago, _)| -ago);
    if !history.is_empty() {
        text += "# TYPE kube_horizontalpodautoscaler_status_current_replicas gauge\n";
        for (ago, n) in &history {
            text += &format!(
                "kube_horizontalpodautoscaler_status_current_replicas{{namespace=\"shop\",horizontalpodautoscaler=\"web\",job=\"kube-state-metrics\"}} {n} {}\n",
                end - ago
            );
        }
        text += "# TYPE kube_horizontalpodautoscaler_spec_max_replicas gauge\n";
        for (ago, _) in &history {
            text += &format!(
                "kube_horizontalpodautoscaler_spec_max_replicas{{namespace=\"shop\",horizontalpodautoscaler=\"web\",job=\"kube-state-metrics\"}} 10 {}\n",
                end - ago
            );
        }
    }
    text += "# EOF\n";
    let src = FileSource::from_str(&text).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    (m, c)
}

fn web_json(c: &CycleOutput) -> serde_json::Value {
    let w = c.workloads.iter().find(|w| w.key().name == "web").unwrap();
    kerf::cli::recommend::workload_json(
        w.key(),
        w.gpu.as_deref(),
        w.resources.as_deref(),
        None,
        kerf::core::snapshot::ResizeSupport::Assumed,
    )
}

/// docs/design/hpa-coordination.md#h7: `max-replicas-reached` means the HPA was at
/// `maxReplicas` at any time in the recommendation window, read from kube-state-metrics. Check:
/// maxReplicas 10, at 10 forty minutes ago, 6 now, window 1h → blocked; never at 10 →
/// coordinated; without the series, `status.currentReplicas`, and the reasons say so.
#[tokio::test]
async fn max_replicas_reached_is_read_from_the_kube_state_metrics_history_of_the_window() {
    // Every minute of the hour: 6 replicas, except 10 forty minutes ago.
    let at_max: Vec<(i64, i32)> = (0..=60)
        .map(|m| (m * 60, if m == 40 { 10 } else { 6 }))
        .collect();
    let (_, c) = hpa_example_with_history(6, &at_max).await;
    let web = web_json(&c);
    assert_eq!(web["hpa"]["skipReason"], "max-replicas-reached", "{web:#}");
    assert_eq!(web["hpa"]["blocked"], true);
    assert_eq!(web["phase"], "blocked");

    let never: Vec<(i64, i32)> = (0..=60).map(|m| (m * 60, 6)).collect();
    let (_, c) = hpa_example_with_history(6, &never).await;
    let web = web_json(&c);
    assert_eq!(web["hpa"]["skipReason"], serde_json::Value::Null, "{web:#}");
    assert_eq!(web["hpa"]["targetAfter"], 71);
    assert_eq!(web["phase"], "applied");

    // At 10 only before the window (61 minutes ago): not in the window.
    let before: Vec<(i64, i32)> = (0..=70)
        .map(|m| (m * 60, if m == 70 { 10 } else { 6 }))
        .collect();
    let (_, c) = hpa_example_with_history(6, &before).await;
    assert_eq!(web_json(&c)["hpa"]["skipReason"], serde_json::Value::Null);

    // Without the series: the HPA's status, and the reasons say so.
    let (_, c) = hpa_example_with_history(6, &[]).await;
    let web = web_json(&c);
    assert_eq!(web["hpa"]["skipReason"], serde_json::Value::Null);
    let reasons = web["reasons"].to_string();
    assert!(
        reasons.contains("kube_horizontalpodautoscaler_status_current_replicas")
            && reasons.contains("status.currentReplicas"),
        "{reasons}"
    );
    let (_, c) = hpa_example_with_history(10, &[]).await;
    assert_eq!(web_json(&c)["hpa"]["skipReason"], "max-replicas-reached");
}

/// docs/design/gpu-engine.md#g10: the RightsizingRecommendation holds cpu, memory, gpu and the
/// driving GPU metric for every workload kerf recommends for — one covered only by a GPU policy
/// too (`kubectl get rightsizingrecommendations` lists it).
#[tokio::test]
async fn a_workload_covered_only_by_a_gpu_policy_gets_a_rightsizing_recommendation() {
    let (m, c) = cycle("examples/manifests", "examples/metrics.om").await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let rec =
        recommendation_op(&ops, "deployment-llm").expect("a RightsizingRecommendation for llm");
    assert_eq!(rec.namespace, "ml");
    assert_eq!(rec.spec.driving_metric.as_deref(), Some("compute"));
    assert_eq!(rec.spec.policies, ["GpuReactivePolicy/ml/gpu-reactive"]);
    let inference = rec
        .spec
        .containers
        .iter()
        .find(|c| c.name == "inference")
        .expect("inference");
    assert_eq!(inference.current.gpu.as_deref(), Some("0.5"));
    assert_eq!(inference.recommended.gpu.as_deref(), Some("0.84"));
    let status = rec.status.as_ref().unwrap();
    assert_eq!(status.phase, kerf::api::RecommendationPhase::Applied);
    assert!(
        status.applied.is_none(),
        "GPU sizes are served from the workload annotations"
    );
    let embedder = recommendation_op(&ops, "deployment-embedder").expect("embedder");
    assert_eq!(embedder.spec.driving_metric.as_deref(), Some("compute"));
}

/// docs/design/gpu-engine.md#g10: a workload covered by a GPU policy and a RightsizingPolicy
/// records the driving GPU metric (and the GPU policy) in its one recommendation.
#[tokio::test]
async fn the_recommendation_records_the_driving_gpu_metric() {
    let mut m = load_dir(&root().join("examples/manifests")).unwrap();
    let hpa = load_dir(&root().join("examples/hpa/manifests")).unwrap();
    let mut rs = hpa.snapshot.rightsizing_policies[0].clone();
    rs.id.namespace = Some("ml".into());
    rs.spec.scope = m.snapshot.gpu_policies[0].spec.scope.clone();
    rs.spec.automation_strategy_ref.name = "gpu-strategy".into();
    m.snapshot.rightsizing_policies.push(rs);
    let src = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let rec = recommendation_op(&ops, "deployment-llm").expect("llm");
    assert_eq!(rec.spec.driving_metric.as_deref(), Some("compute"));
    assert_eq!(
        rec.spec.policies,
        [
            "RightsizingPolicy/ml/web",
            "GpuReactivePolicy/ml/gpu-reactive"
        ]
    );
    let inference = rec
        .spec
        .containers
        .iter()
        .find(|c| c.name == "inference")
        .unwrap();
    assert_eq!(inference.recommended.gpu.as_deref(), Some("0.84"));
}

/// A GPU reactive policy in `ml` sizing container `container` of the pods labelled `app: w`;
/// `upsize` is the upsize settings of both signals.
fn gpu_policy(name: &str, container: &str, upsize: &str) -> String {
    format!(
        r#"apiVersion: rightsizing.kubex.ai/v1alpha1
kind: GpuReactivePolicy
metadata: {{name: {name}, namespace: ml}}
spec:
  experimental: {{gpuKaiContract: v1alpha1-2026-07}}
  scope: {{containers: [{container}], labelSelector: {{matchLabels: {{app: w}}}}}}
  metrics:
    compute: {{upsize: {upsize}, prometheus: {{metric: sm, interpretation: fullGPU}}}}
    memory: {{upsize: {upsize}, prometheus: {{metric: mem, interpretation: currentAllocation}}}}
  automationStrategyRef: {{name: s}}
"#
    )
}

/// Multi-policy container rightsizing on Deployment `w`: policy `a` sizes container `a` (upsize
/// capped at 120 %), policy `b` container `b`.
fn multi_policy_manifests() -> String {
    let objects = r#"apiVersion: rightsizing.kubex.ai/v1alpha1
kind: GlobalConfiguration
metadata: {name: global-config}
spec: {multiPolicyContainerRightsizingEnabled: true}
---
apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {name: s, namespace: ml}
spec: {}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: w, namespace: ml, labels: {app: w}}
spec:
  selector: {matchLabels: {app: w}}
  template:
    metadata:
      labels: {app: w}
      annotations: {gpu-fraction: "0.5"}
    spec:
      containers:
        - {name: a, image: a}
        - {name: b, image: b, resources: {limits: {nvidia.com/gpu: "1"}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: w-abc
  namespace: ml
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: w, uid: u1, controller: true}]
spec:
  selector: {matchLabels: {app: w}}
"#;
    [
        gpu_policy("a", "a", "{maxPercent: 120}"),
        gpu_policy("b", "b", "{}"),
        objects.to_string(),
    ]
    .join("---\n")
}

/// A pod of `w` (ReplicaSet `w-abc`) with `a` at the KAI fraction `a` and `b` at `b` GPUs.
fn multi_policy_pod(name: &str, a: &str, b: &str, started: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {{app: w, pod-template-hash: abc}}
  annotations: {{gpu-fraction: "{a}"}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: w-abc, uid: u2, controller: true}}]
spec:
  containers:
    - {{name: a, image: a}}
    - {{name: b, image: b, resources: {{limits: {{nvidia.com/gpu: "{b}"}}}}}}
status: {{phase: Running, startTime: "{started}"}}
"#
    )
}

/// Samples every 15 s over [from, to] (unix seconds).
fn om_series(
    out: &mut String,
    metric: &str,
    pod: &str,
    container: &str,
    value: f64,
    from: i64,
    to: i64,
) {
    for t in (from..=to).step_by(15) {
        *out += &format!(
            "{metric}{{namespace=\"ml\",pod=\"{pod}\",container=\"{container}\"}} {value} {t}\n"
        );
    }
}

/// The multi-policy workload's samples. Cycle 1 (pod w-abc-1, a at 0.5, b at 1, ending at
/// `t1`): a's memory runs at 140 % (0.7 GPU: upsize, capped at 120 % of 0.5 = 0.6,
/// memory-driven); b's compute at 1.9 GPUs (upsize, capped at 200 % of 1 = 2.0,
/// compute-driven). Cycle 2 when `t2` is given (pod w-abc-2 at a 0.6, b 2): a's compute has no
/// samples (no compute candidate), its memory is at 50 % of 0.6 (scale-back, floored at the
/// baseline 0.5); b stays put.
fn multi_policy_samples(t1: i64, t2: Option<i64>) -> FileSource {
    let mut om = String::from("# TYPE sm gauge\n");
    om_series(&mut om, "sm", "w-abc-1", "a", 20.0, t1 - 1200, t1);
    om_series(&mut om, "sm", "w-abc-1", "b", 190.0, t1 - 1200, t1);
    if let Some(t2) = t2 {
        om_series(&mut om, "sm", "w-abc-2", "b", 190.0, t2 - 1200, t2);
    }
    om += "# TYPE mem gauge\n";
    om_series(&mut om, "mem", "w-abc-1", "a", 140.0, t1 - 1200, t1);
    om_series(&mut om, "mem", "w-abc-1", "b", 50.0, t1 - 1200, t1);
    if let Some(t2) = t2 {
        om_series(&mut om, "mem", "w-abc-2", "a", 50.0, t2 - 1200, t2);
        om_series(&mut om, "mem", "w-abc-2", "b", 90.0, t2 - 1200, t2);
    }
    om += "# EOF\n";
    FileSource::from_str(&om).unwrap()
}

/// docs/design/gpu-engine.md#g8 with #g11 (multi-policy): each policy's engine compares its
/// candidate with the driver of the containers *that policy* owns. Check: policy A owns `a`
/// (memory-driven 0.6), B owns `b` (compute-driven 2.0); A's memory scale-back to 0.5 is
/// accepted.
#[tokio::test]
async fn each_policy_compares_against_the_driving_metric_of_the_containers_it_owns() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("objects.yaml"), multi_policy_manifests()).unwrap();
    let t1 = at().as_second();
    let t2 = t1 + 3600;
    let src = multi_policy_samples(t1, Some(t2));
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(dir.path());
    let key = WorkloadKey::new("ml", kerf::api::WorkloadKind::Deployment, "w");
    let w = |e: &kerf::reconcile::standalone::Evaluated| gpu_result(e, &key);

    let pods = dir.path().join("pods.yaml");
    std::fs::write(
        &pods,
        multi_policy_pod("w-abc-1", "0.5", "1", "2026-01-01T10:00:00Z"),
    )
    .unwrap();
    let first = dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let r = w(&first).recommendation.unwrap();
    assert!(
        (r.containers["a"] - 0.6).abs() < 1e-9,
        "{r:?}\n{:#?}",
        w(&first).reasons
    );
    assert!((r.containers["b"] - 2.0).abs() < 1e-9, "{r:?}");
    // Every replica's webhook serves both policies' containers from the annotation.
    let served = store.get(&key).expect("w served");
    let served = &served.gpu.as_ref().unwrap().containers;
    assert_eq!(served.keys().collect::<Vec<_>>(), ["a", "b"], "{served:?}");

    // The pods were replaced with the recommended sizes.
    std::fs::write(
        &pods,
        multi_policy_pod("w-abc-2", "0.6", "2", "2026-01-01T12:10:00Z"),
    )
    .unwrap();
    let t2 = Timestamp::from_second(t2).unwrap();
    let second = dir_loop.run_once(&src, t2, 15, &store).await.unwrap();
    let r = w(&second);
    let rec = r.recommendation.clone().unwrap();
    assert!(
        (rec.containers["a"] - 0.5).abs() < 1e-9,
        "A's memory scale-back is accepted: {rec:?}\n{:#?}",
        r.reasons
    );
    assert!((rec.containers["b"] - 2.0).abs() < 1e-9, "{rec:?}");
}

/// The multi-policy workload `w` with policy `b` on strategy `no-up` (GPU upsize off); `a` keeps
/// strategy `s` (everything allowed).
fn multi_policy_manifests_b_without_upsize() -> String {
    let no_up = r#"apiVersion: rightsizing.kubex.ai/v1alpha1
kind: AutomationStrategy
metadata: {name: no-up, namespace: ml}
spec:
  experimental: {gpuKaiContract: v1alpha1-2026-07}
  enablement: {gpu: {requests: {upsize: false, downsize: true}}}
"#;
    let docs: Vec<String> = multi_policy_manifests()
        .split("---\n")
        .map(|d| {
            if d.contains("metadata: {name: b, namespace: ml}") {
                d.replace(
                    "automationStrategyRef: {name: s}",
                    "automationStrategyRef: {name: no-up}",
                )
            } else {
                d.to_string()
            }
        })
        .chain([no_up.to_string()])
        .collect();
    docs.join("---\n")
}

/// A pod of `w` as admission gets it (`a` at the KAI fraction 0.5, `b` at one GPU), answered
/// from `store`; the admitted pod.
fn admit_multi_policy_pod(store: &kerf::state::Store) -> serde_json::Value {
    let pod = serde_json::json!({
        "metadata": {
            "namespace": "ml",
            "labels": {"app": "w", "pod-template-hash": "abc"},
            "annotations": {"gpu-fraction": "0.5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w-abc",
                                 "uid": "u2", "controller": true}]
        },
        "spec": {"containers": [
            {"name": "a", "image": "a"},
            {"name": "b", "image": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]}
    });
    admitted(pod, "ml", store)
}

/// docs/design/gpu-engine.md#g11 with runtime.md#r8: when several policies share a workload, a
/// container's GPU upsize/downsize follow the strategy of the policy whose part it is — in the
/// cycle's state and in the state recovered from the annotation after a restart — and a part
/// whose policy's strategy no longer resolves is not served while the others still are.
#[tokio::test]
async fn each_policys_strategy_governs_its_own_containers_at_admission() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("objects.yaml"),
        multi_policy_manifests_b_without_upsize(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pods.yaml"),
        multi_policy_pod("w-abc-1", "0.5", "1", "2026-01-01T10:00:00Z"),
    )
    .unwrap();
    // a upsized to 0.6 (memory-driven), b to 2 (compute-driven).
    let src = multi_policy_samples(at().as_second(), None);
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(dir.path());
    let key = WorkloadKey::new("ml", kerf::api::WorkloadKind::Deployment, "w");
    let first = dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let rec = gpu_result(&first, &key).recommendation.unwrap();
    assert_eq!(rec.by_policy.len(), 2, "{rec:?}");
    assert!((rec.containers["b"] - 2.0).abs() < 1e-9, "{rec:?}");
    // The recommendation keeps a's 0.6; its reasons say the pods take whole GPUs under KAI.
    assert!((rec.containers["a"] - 0.6).abs() < 1e-9, "{rec:?}");
    let reasons = gpu_result(&first, &key).reasons;
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("KAI accepts one fractional container per pod")),
        "{reasons:?}"
    );

    let check = |store: &kerf::state::Store, when: &str| {
        let pod = admit_multi_policy_pod(store);
        let annotations = &pod["metadata"]["annotations"];
        // a's 0.6 cannot be a fraction beside b's whole GPU (KAI refuses that pod,
        // docs/design/kai-admission.md#k4): a is upsized under s to one whole GPU.
        assert!(annotations.get("gpu-fraction").is_none(), "{when}: {pod}");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "1",
            "{when}: a upsized under s: {pod}"
        );
        assert!(
            annotations["rightsizing.kubex.ai/mutated"]
                .as_str()
                .unwrap()
                .contains("a gets 1 whole GPU instead of 0.6"),
            "{when}: {pod}"
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/gpu"], "1",
            "{when}: b not upsized under no-up: {pod}"
        );
    };
    check(&store, "cycle");

    // A restart: the state comes back from the annotation alone.
    let mut m = load_dir(dir.path()).unwrap();
    let w = m
        .snapshot
        .workloads
        .iter_mut()
        .find(|w| w.key == key)
        .unwrap();
    std::sync::Arc::make_mut(w).annotations.insert(
        kerf::core::model::ANNOTATION_GPU_RECOMMENDATION.into(),
        rec.render(),
    );
    let recovered = kerf::state::Store::new();
    let warnings = kerf::reconcile::serve_persisted(&recovered, &m.snapshot, &[]);
    assert!(warnings.is_empty(), "{warnings:?}");
    check(&recovered, "recovered");

    // Policy b's strategy is gone: b's part is not served, a's still is.
    let b = m
        .snapshot
        .gpu_policies
        .iter_mut()
        .find(|p| p.id.to_string().ends_with("/b"))
        .unwrap();
    b.spec.automation_strategy_ref.name = "missing".into();
    let recovered = kerf::state::Store::new();
    let warnings = kerf::reconcile::serve_persisted(&recovered, &m.snapshot, &[]);
    assert!(
        warnings.iter().any(|w| w.contains("does not resolve")),
        "{warnings:?}"
    );
    let state = recovered.get(&key).expect("a's part still served");
    let served = &state.gpu.as_ref().unwrap().containers;
    assert_eq!(served.keys().collect::<Vec<_>>(), ["a"], "{served:?}");
    // b was the main part: the pod now follows a, the part still served.
    assert_eq!(
        state.policy.as_ref().map(ToString::to_string).as_deref(),
        Some("GpuReactivePolicy/ml/a"),
        "{state:?}"
    );
    assert!(
        state.strategy.gpu_upsize(),
        "a's strategy, not b's: {state:?}"
    );
}

/// The `MetricsFound` condition the cycle writes to a GPU policy's status
/// (docs/design/gpu-engine.md#g13).
fn metrics_found(ops: &[WriteOp], policy: &str) -> Option<kerf::core::writes::ConditionUpdate> {
    ops.iter()
        .find_map(|op| match op {
            WriteOp::PolicyStatus(p) if p.policy.name == policy => Some(p),
            _ => None,
        })
        .expect("policy status")
        .conditions
        .iter()
        .find(|c| c.type_ == "MetricsFound")
        .cloned()
}

/// Every selected pod read: `MetricsFound=True`. An evaluation time the file does not cover:
/// `False`, reason `NoSamples`, naming both metrics, the labels, the counts, the window and
/// the file's range. Prometheus down: not said (PrometheusAvailable is).
#[tokio::test]
async fn metrics_found_says_when_the_selected_pods_have_no_samples() {
    let (m, c) = cycle("examples/manifests", "examples/metrics.om").await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let found = metrics_found(&ops, "gpu-reactive").expect("MetricsFound");
    assert!(found.status, "{found:?}");
    assert_eq!(found.reason, "SamplesFound");

    let later: Timestamp = "2026-01-01T13:00:00Z".parse().unwrap();
    let src = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, later, 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], later);
    let found = metrics_found(&ops, "gpu-reactive").expect("MetricsFound");
    assert!(!found.status);
    assert_eq!(found.reason, "NoSamples");
    let hint = "is the GPU exporter installed and scraped? see docs/gpu-metrics.md";
    assert_eq!(
        found.message,
        format!(
            "kubex_gpu_container_sm_utilization_percent{{namespace,pod,container}}: no samples \
             for 3 of 3 pods in the 10m before 2026-01-01T13:00:00Z (the file covers \
             11:40–12:00) — {hint}; kubex_gpu_container_memory_footprint_percent\
             {{namespace,pod,container}}: no samples for 3 of 3 pods in the 10m before \
             2026-01-01T13:00:00Z (the file covers 11:40–12:00) — {hint}"
        )
    );
    // The workloads say the same, never "no condition met".
    for r in c.gpu_results() {
        assert!(
            r.reasons.iter().any(|x| x.contains("no samples for")),
            "{:?}",
            r.reasons
        );
        assert!(
            !r.reasons
                .iter()
                .any(|x| x.contains("no upsize or scale-back")),
            "{:?}",
            r.reasons
        );
    }

    let c = run_cycle(&m.snapshot, &Down, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    assert_eq!(metrics_found(&ops, "gpu-reactive"), None);
    assert!(c.every_query_failed());
}

fn resize_ops(ops: &[WriteOp]) -> Vec<&kerf::core::writes::ResizeWrite> {
    ops.iter()
        .filter_map(|op| match op {
            WriteOp::Resize(r) => Some(&**r),
            _ => None,
        })
        .collect()
}

fn writes_the_template(ops: &[WriteOp], name: &str) -> bool {
    ops.iter().any(|op| match op {
        WriteOp::Workload(w) => w.observed.key.name == name && w.requests.is_some(),
        WriteOp::Coordinated(c) => c.workload.observed.key.name == name,
        _ => false,
    })
}

/// With `resize: inPlaceOrRollout` and no HPA, the CPU change is one resize per running pod
/// (the exact `pods/resize` body) and no template write; under readOnly nothing at all.
#[tokio::test]
async fn an_in_place_change_plans_pod_resizes_and_no_template_write() {
    let dir = crate::recommend_cli::in_place_example(false);
    let m = load_dir(dir.path()).unwrap();
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    assert!(!writes_the_template(&ops, "web"), "{ops:#?}");
    let resizes = resize_ops(&ops);
    assert_eq!(resizes.len(), 1, "one op for the workload");
    let pods: Vec<&str> = resizes[0].pods.iter().map(|p| p.pod.as_str()).collect();
    assert_eq!(
        pods,
        [
            "web-6d4b8c7f9-a1b2c",
            "web-6d4b8c7f9-d3e4f",
            "web-6d4b8c7f9-g5h6i"
        ]
    );
    for p in &resizes[0].pods {
        assert_eq!(
            p.body,
            serde_json::json!({"spec": {"containers": [
                {"name": "app", "resources": {"requests": {"cpu": "700m"}}}]}})
        );
    }
    assert_eq!(resizes[0].event.reason, "Resized");
    let status = &resizes[0].status;
    assert_eq!(status.apply_method, Some(kerf::api::ApplyMethod::InPlace));
    // New pods get the change at admission: it is what every replica serves.
    let served = status.applied.as_ref().unwrap();
    assert_eq!(served.requests["app"].cpu.as_ref().unwrap().0, "700m");

    let mut read_only = load_dir(dir.path()).unwrap();
    read_only.snapshot.global.read_only = true;
    let c = run_cycle(&read_only.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&read_only.snapshot, &c, &[], &[], at());
    assert!(resize_ops(&ops).is_empty() && !writes_the_template(&ops, "web"));
}

/// A cluster that does not serve `pods/resize` (before 1.33) rolls the change out; so does an
/// HPA-coordinated one.
#[tokio::test]
async fn without_pods_resize_or_with_a_coordinated_hpa_the_change_rolls_out() {
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let dir = crate::recommend_cli::in_place_example(false);
    let mut m = load_dir(dir.path()).unwrap();
    m.snapshot.resize = kerf::core::snapshot::ResizeSupport::NotServed;
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    assert!(resize_ops(&ops).is_empty());
    assert!(writes_the_template(&ops, "web"));

    let dir = crate::recommend_cli::in_place_example(true);
    let m = load_dir(dir.path()).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    assert!(resize_ops(&ops).is_empty());
    assert!(ops.iter().any(|op| matches!(op, WriteOp::Coordinated(_))));
}

/// The in-memory writer lays a resize over the pods: the next cycle counts them resized and
/// asks nothing more.
#[tokio::test]
async fn resized_pods_are_counted_and_not_asked_again() {
    let dir = crate::recommend_cli::in_place_example(false);
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(dir.path());
    dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let second = dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let recs = dir_loop.writer().recommendations();
    let web = recs.iter().find(|r| r.name == "deployment-web").unwrap();
    let resize = web.status.as_ref().unwrap().resize.as_ref().unwrap();
    assert_eq!((resize.pods_resized, resize.pods_pending), (3, 0));
    let pod = second
        .snapshot
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("web-6d4b8c7f9-a1b2c"))
        .unwrap();
    let requests = pod.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap();
    assert_eq!(requests.get("cpu").unwrap().0, "700m");
}

/// The in-place example's snapshot with each web pod as the API server serves it after kerf's
/// resize (the spec at 700m) and, when given, the kubelet's resize condition on it.
fn resized_pods(m: &mut kerf::sources::dir::Manifests, condition: Option<(&str, &str, Timestamp)>) {
    for pod in &mut m.snapshot.pods {
        let mut v = serde_json::to_value(&**pod).unwrap();
        v["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "700m".into();
        if let Some((type_, reason, since)) = condition {
            v["status"]["conditions"] = serde_json::json!([
                {"type": "Ready", "status": "True"},
                {"type": type_, "status": "True", "reason": reason,
                 "message": "Node didn't have enough capacity: cpu, requested: 700, capacity: 500",
                 "lastTransitionTime": since.to_string()}
            ]);
        }
        *pod = std::sync::Arc::new(serde_json::from_value(v).unwrap());
    }
}

/// One cycle of the in-place example at `now` over `m`, after the writes `writer` recorded.
async fn in_place_cycle(
    m: &kerf::sources::dir::Manifests,
    writer: &mut kerf::writers::memory::MemoryWriter,
    now: Timestamp,
) -> Vec<WriteOp> {
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &writer.recommendations(), now);
    writer.apply_all(ops.clone(), false, now);
    ops
}

fn web_resize(writer: &kerf::writers::memory::MemoryWriter) -> kerf::api::ResizeStatus {
    let recs = writer.recommendations();
    let web = recs.iter().find(|r| r.name == "deployment-web").unwrap();
    let status = web.status.as_ref().unwrap();
    *status.resize.clone().expect("status.resize")
}

/// A resize the kubelet defers (`PodResizePending`, `Deferred`) is waited for — pending, nothing
/// asked again, no template written — and counted resized once the condition is gone; deferred
/// for more than 5 minutes, the change rolls out instead, with a `ResizeFallback` Event.
#[tokio::test]
async fn a_deferred_resize_is_waited_for_then_resized_or_rolled_out_after_five_minutes() {
    let dir = crate::recommend_cli::in_place_example(false);
    let mut writer = kerf::writers::memory::MemoryWriter::new();
    let m = load_dir(dir.path()).unwrap();
    let first = in_place_cycle(&m, &mut writer, at()).await;
    assert_eq!(resize_ops(&first).len(), 1);

    let later = at() + jiff::SignedDuration::from_mins(2);
    let mut deferred = load_dir(dir.path()).unwrap();
    resized_pods(&mut deferred, Some(("PodResizePending", "Deferred", at())));
    let ops = in_place_cycle(&deferred, &mut writer, later).await;
    assert!(resize_ops(&ops).is_empty(), "nothing asked again: {ops:#?}");
    assert!(!writes_the_template(&ops, "web"));
    let r = web_resize(&writer);
    assert_eq!(
        (r.pods_resized, r.pods_pending, r.pods_infeasible),
        (0, 3, 0)
    );
    assert!(r.fallback.is_none());

    let mut settled = load_dir(dir.path()).unwrap();
    resized_pods(&mut settled, None);
    let ops = in_place_cycle(&settled, &mut writer, later).await;
    assert!(resize_ops(&ops).is_empty() && !writes_the_template(&ops, "web"));
    let r = web_resize(&writer);
    assert_eq!((r.pods_resized, r.pods_pending), (3, 0));

    // The same deferral seen six minutes on: rolled out.
    let mut writer = kerf::writers::memory::MemoryWriter::new();
    in_place_cycle(&m, &mut writer, at()).await;
    let too_late = at() + jiff::SignedDuration::from_mins(6);
    let ops = in_place_cycle(&deferred, &mut writer, too_late).await;
    assert!(writes_the_template(&ops, "web"), "{ops:#?}");
    let fallback = resize_ops(&ops);
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0].fallback, Some("DeferredTooLong"));
    assert_eq!(fallback[0].event.reason, "ResizeFallback");
    assert!(fallback[0].pods.is_empty());
    assert_eq!(
        web_resize(&writer).fallback.unwrap().reason,
        "DeferredTooLong"
    );
}

/// An infeasible resize rolls the change out at once, and it stays a rollout (no second Event)
/// while the recommendation is the same.
#[tokio::test]
async fn an_infeasible_resize_falls_back_to_a_rollout_that_holds_for_the_same_recommendation() {
    let dir = crate::recommend_cli::in_place_example(false);
    let mut writer = kerf::writers::memory::MemoryWriter::new();
    let m = load_dir(dir.path()).unwrap();
    in_place_cycle(&m, &mut writer, at()).await;
    let mut infeasible = load_dir(dir.path()).unwrap();
    resized_pods(
        &mut infeasible,
        Some(("PodResizePending", "Infeasible", at())),
    );
    let ops = in_place_cycle(&infeasible, &mut writer, at()).await;
    assert!(writes_the_template(&ops, "web"));
    let r = web_resize(&writer);
    assert_eq!(r.pods_infeasible, 3);
    let f = r.fallback.unwrap();
    assert_eq!(f.reason, "Infeasible");
    assert!(
        f.message.contains("Node didn't have enough capacity"),
        "{}",
        f.message
    );
    let recs = writer.recommendations();
    let web = recs.iter().find(|r| r.name == "deployment-web").unwrap();
    assert_eq!(
        web.status.as_ref().unwrap().apply_method,
        Some(kerf::api::ApplyMethod::Rollout)
    );

    // The next cycle (the rollout under way, the pods as they were): still a rollout, said once.
    let again = in_place_cycle(&m, &mut writer, at()).await;
    assert!(resize_ops(&again).is_empty(), "{again:#?}");
    assert_eq!(web_resize(&writer).fallback.unwrap().reason, "Infeasible");
}

/// A GPU change recreates the pods: the CPU/memory change of the same workload goes with that
/// rollout, never in place.
#[tokio::test]
async fn a_gpu_change_recreates_the_pods_and_the_cpu_change_rolls_out_with_it() {
    let (ops, c) = llm_with_cpu_in_place(true).await;
    let llm = c
        .workloads
        .iter()
        .find(|w| w.key().name == "llm")
        .and_then(|w| w.resources.as_deref())
        .and_then(|r| r.outcome.as_ref().ok())
        .expect("a CPU result for llm");
    assert!(
        llm.apply.is_some(),
        "the CPU change is in auto-patch: {llm:#?}"
    );
    assert!(resize_ops(&ops).is_empty(), "{ops:#?}");
    assert!(writes_the_template(&ops, "llm"));
    let rec = ops.iter().find_map(|op| match op {
        WriteOp::Recommendation(r) if r.name == "deployment-llm" => Some(r),
        _ => None,
    });
    assert_eq!(
        rec.unwrap().status.as_ref().unwrap().apply_method,
        Some(kerf::api::ApplyMethod::Rollout)
    );
    // The same change without the GPU policy is resized in place.
    let (ops, _) = llm_with_cpu_in_place(false).await;
    assert!(!writes_the_template(&ops, "llm"), "{ops:#?}");
    assert_eq!(resize_ops(&ops)[0].workload.name, "llm");
}

/// The GPU example with a CPU auto-patch policy on llm and its strategy resizing in place; the
/// GPU policy covers llm when `gpu`.
async fn llm_with_cpu_in_place(gpu: bool) -> (Vec<WriteOp>, CycleOutput) {
    let dir = tempfile::tempdir().unwrap();
    for f in ["pods.yaml", "policies.yaml", "workloads.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/manifests").join(f)).unwrap();
        let mut text = text.replace(
            "    overrideScheduler: kai\n",
            "    overrideScheduler: kai\n    resize: inPlaceOrRollout\n",
        );
        if !gpu {
            text = text.replace(
                "      matchLabels:\n        tier: gpu-inference\n",
                "      matchLabels:\n        tier: none\n",
            );
        }
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    std::fs::write(
        dir.path().join("rightsizing.yaml"),
        "apiVersion: rightsizing.kubex.ai/v1alpha1\nkind: RightsizingPolicy\nmetadata: {name: llm-cpu, namespace: ml}\nspec:\n  scope: {labelSelector: {matchLabels: {app: llm}}}\n  automationStrategyRef: {name: gpu-strategy}\n  resources:\n    cpu: {mode: auto-patch, percentile: 95, headroomPercent: 0, window: 15m}\n    memory: {mode: audit-only, window: 15m}\n",
    )
    .unwrap();
    let m = load_dir(dir.path()).unwrap();
    assert!(
        std::fs::read_to_string(dir.path().join("policies.yaml"))
            .unwrap()
            .contains("inPlaceOrRollout")
    );
    let src = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    (plan_writes(&m.snapshot, &c, &[], &[], at()), c)
}

/// A pod created after an in-place change (a scale-up, a replaced pod) is admitted with the new
/// requests: the template was not written, the webhook serves the change.
#[tokio::test]
async fn a_pod_admitted_after_an_in_place_change_gets_the_new_requests() {
    let dir = crate::recommend_cli::in_place_example(false);
    let src = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(dir.path());
    let evaluated = dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let web = evaluated
        .snapshot
        .workloads
        .iter()
        .find(|w| w.key.name == "web")
        .unwrap();
    assert_eq!(
        kerf::core::writes::template_requests(&web.template, "app")
            .unwrap()
            .cpu_millis,
        Some(1000),
        "the template keeps its requests"
    );
    let pod = serde_json::json!({
        "metadata": {
            "namespace": "shop",
            "labels": {"app": "web", "pod-template-hash": "6d4b8c7f9"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": "web-6d4b8c7f9", "uid": "r", "controller": true}]
        },
        "spec": {"containers": [{"name": "app", "image": "web",
                                 "resources": {"requests": {"cpu": "1000m", "memory": "512Mi"}}}]}
    });
    let admitted = admitted(pod, "shop", &store);
    assert_eq!(
        admitted["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "700m"
    );
}

/// Workloads under other controllers (tests/fixtures/workloads: the owner references and labels
/// KServe, Knative, LeaderWorkerSet, Argo Rollouts, KubeRay and Grove set): each group of pods
/// is one workload under its topmost owner; a KServe predictor's change is planned as an
/// eviction, never as a write to the predictor Deployment; a Rollout's through its template.
#[tokio::test]
async fn pods_are_grouped_under_their_topmost_owner_and_owned_templates_are_never_written() {
    let dir = root().join("tests/fixtures/workloads/manifests");
    let m = load_dir(&dir).unwrap();
    let kinds: Vec<String> = m
        .snapshot
        .workloads
        .iter()
        .map(|w| format!("{}/{}", w.key.kind.as_str(), w.key.name))
        .collect();
    assert_eq!(
        kinds,
        [
            "InferenceService/llm",
            "KnativeService/hello",
            "LeaderWorkerSet/vllm",
            "Rollout/canary",
            "RayCluster/raycluster-kuberay",
            "PodCliqueSet/dynamo"
        ],
        "the owned Deployments and StatefulSets are not workloads of their own"
    );
    let src = FileSource::from_path(&root().join("tests/fixtures/workloads/metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let template_writes: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Workload(w) => Some(w.observed.key.to_string()),
            WriteOp::Coordinated(c) => Some(c.workload.observed.key.to_string()),
            WriteOp::Restore(r) => Some(r.observed.key.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(template_writes, ["ml/Rollout/canary"], "{ops:#?}");
    let evicted: Vec<(String, String)> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Evict(e) => Some((e.workload.name.to_string(), e.pod.pod.clone())),
            _ => None,
        })
        .collect();
    assert!(
        evicted.contains(&("llm".into(), "llm-predictor-6f9c8d7b5-b6c7d".into())),
        "{evicted:?}"
    );
    assert_eq!(evicted.len(), 5, "one pod per owned workload: {evicted:?}");
}

/// A pod of the KServe predictor, created after the change, is admitted with it: the webhook
/// resolves it through ReplicaSet → Deployment → InferenceService.
#[tokio::test]
async fn a_kserve_predictor_pod_is_mutated_at_admission_under_its_inference_service() {
    let dir = root().join("tests/fixtures/workloads/manifests");
    let src = FileSource::from_path(&root().join("tests/fixtures/workloads/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(&dir);
    dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let pod = serde_json::json!({
        "metadata": {"namespace": "ml", "labels": {"component": "predictor", "pod-template-hash": "6f9c8d7b5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "llm-predictor-6f9c8d7b5", "uid": "r", "controller": true}]},
        "spec": {"containers": [{"name": "kserve-container", "image": "x",
            "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}
    });
    let admitted = admitted(pod, "ml", &store);
    assert_eq!(
        admitted["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "500m"
    );
}

/// A GPU upsize of a KServe predictor (a template KServe owns, so never written): `applyMethod:
/// evict`, one running pod evicted, and the pod that replaces it admitted with the GPU
/// recommendation, published in the RightsizingRecommendation since the object carries no
/// annotation of kerf's.
#[tokio::test]
async fn a_kserve_gpu_upsize_is_evicted_and_its_replacement_admitted_with_the_gpu() {
    let fixture = root().join("tests/fixtures/owned-gpu");
    let m = load_dir(&fixture.join("manifests")).unwrap();
    let src = FileSource::from_path(&fixture.join("metrics.om")).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
    let evicted: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Evict(e) => Some(e.pod.pod.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, ["llm-predictor-6f9c8d7b5-b6c7d", "vllm-0"]);
    assert!(
        !ops.iter()
            .any(|op| matches!(op, WriteOp::Workload(_) | WriteOp::Coordinated(_))),
        "{ops:#?}"
    );

    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(fixture.join("manifests"));
    dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let pod = serde_json::json!({
        "metadata": {"namespace": "ml", "annotations": {"gpu-fraction": "0.5"},
            "labels": {"component": "predictor", "pod-template-hash": "6f9c8d7b5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "llm-predictor-6f9c8d7b5", "uid": "r", "controller": true}]},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "kserve-container",
            "image": "x", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}
    });
    let admitted = admitted(pod, "ml", &store);
    let gpus = |p: &serde_json::Value| {
        let alloc = kerf::views::pods::pod_alloc(&serde_json::from_value(p.clone()).unwrap());
        alloc["kserve-container"].gpu
    };
    assert_eq!(gpus(&admitted), Some(1.0), "{admitted:#}");
}

/// A LeaderWorkerSet whose worker template requests CPU at pod level (`spec.resources`): the
/// template kerf reads for it keeps that, so in auto-patch it is `blocked` with
/// `PodLevelResources` as a Deployment would be, and nothing is evicted; an empty
/// `resources: {}` is no pod-level request.
#[tokio::test]
async fn a_lws_group_with_pod_level_requests_is_blocked() {
    let fixture = root().join("tests/fixtures/workloads");
    let objects = std::fs::read_to_string(fixture.join("manifests/objects.yaml")).unwrap();
    let worker = "    spec:\n      containers:\n        - name: vllm-worker";
    assert!(objects.contains(worker));
    let outcome = |pod_level: &str| {
        let dir = tempfile::tempdir().unwrap();
        let changed = objects.replace(
            worker,
            &format!("    spec:\n      resources: {pod_level}\n      containers:\n        - name: vllm-worker"),
        );
        std::fs::write(dir.path().join("objects.yaml"), changed).unwrap();
        let m = load_dir(dir.path()).unwrap();
        (m, dir)
    };
    let src = FileSource::from_path(&fixture.join("metrics.om")).unwrap();
    for (pod_level, blocked) in [("{requests: {cpu: \"4\"}}", true), ("{}", false)] {
        let (m, _dir) = outcome(pod_level);
        let c = run_cycle(&m.snapshot, &src, at(), 15).await;
        let lws = c
            .resource_results()
            .find(|r| r.key.name.as_str() == "vllm")
            .unwrap();
        let o = lws.outcome.as_ref().unwrap();
        assert_eq!(
            o.reason.as_deref() == Some("PodLevelResources"),
            blocked,
            "{pod_level}: {:?} {}",
            o.reason,
            o.message
        );
        let ops = plan_writes(&m.snapshot, &c, &[], &[], at());
        let evicts_lws = ops
            .iter()
            .any(|op| matches!(op, WriteOp::Evict(e) if e.workload.name.as_str() == "vllm"));
        assert_eq!(evicts_lws, !blocked, "{pod_level}");
    }
}

/// A LeaderWorkerSet recreates a group's worker StatefulSet when one of its pods goes; the new
/// workers are created before kerf has read that StatefulSet's link to the leader Pod. They are
/// admitted with the change all the same, by LeaderWorkerSet's name label; a pod of a
/// StatefulSet nothing links to and without the label is not.
#[tokio::test]
async fn a_new_lws_worker_is_mutated_at_admission_before_its_statefulset_is_read() {
    let dir = root().join("tests/fixtures/workloads/manifests");
    let src = FileSource::from_path(&root().join("tests/fixtures/workloads/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::reconcile::standalone::DirLoop::new(&dir);
    dir_loop.run_once(&src, at(), 15, &store).await.unwrap();
    let worker = |labels: serde_json::Value| {
        serde_json::json!({
            "metadata": {"namespace": "ml", "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "vllm-1", "uid": "new", "controller": true}]},
            "spec": {"containers": [{"name": "vllm-worker", "image": "x",
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}
        })
    };
    let cpu = |pod: &serde_json::Value| {
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"].clone()
    };
    let labelled = admitted(
        worker(serde_json::json!({"leaderworkerset.sigs.k8s.io/name": "vllm"})),
        "ml",
        &store,
    );
    assert_eq!(cpu(&labelled), "500m");
    let unlabelled = admitted(worker(serde_json::json!({})), "ml", &store);
    assert_eq!(cpu(&unlabelled), "2");
}

/// `pod` admitted in `namespace` by the webhook over `store`: the pod with kerf's patch applied.
fn admitted(
    pod: serde_json::Value,
    namespace: &str,
    store: &kerf::state::Store,
) -> serde_json::Value {
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "operation": "CREATE", "namespace": namespace, "object": pod}
    });
    let reply = kerf::server::review::handle_review(&serde_json::to_vec(&review).unwrap(), store);
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    let mut admitted = review["request"]["object"].clone();
    if let Some(p) = answer["response"]["patch"].as_str() {
        use base64::Engine as _;
        let ops = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        let ops: json_patch::Patch = serde_json::from_slice(&ops).unwrap();
        json_patch::patch(&mut admitted, &ops).unwrap();
    }
    admitted
}
