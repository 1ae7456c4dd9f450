//! The reconciler's pure write planning on real inputs (the shipped examples evaluated from the
//! OpenMetrics file), and store refresh when Prometheus is unavailable.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use kerf::api::WorkloadKind;
use kerf::core::model::{GpuRecommendation, ResourceRequests, WorkloadKey};
use kerf::kube::writer::WriteOp;
use kerf::metrics::file::FileSource;
use kerf::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};
use kerf::pipeline::{CycleOutput, run_cycle};
use kerf::reconciler::plan_writes;
use kerf::standalone::load_dir;

fn at() -> DateTime<Utc> {
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
}

async fn cycle(dir: &str, metrics: &str) -> (kerf::standalone::Manifests, CycleOutput) {
    let m = load_dir(&root().join(dir)).unwrap();
    let src = FileSource::from_path(&root().join(metrics)).unwrap();
    let c = run_cycle(&m.snapshot, &src, at(), 15).await;
    (m, c)
}

fn workload_op<'a>(
    ops: &'a [WriteOp],
    name: &str,
) -> Option<&'a kerf::kube::writer::WorkloadWrite> {
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
    let mut dir_loop = kerf::standalone::DirLoop::new(root().join("examples/manifests"));
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
    let coordinated = ops
        .iter()
        .find_map(|op| match op {
            WriteOp::Coordinated(c) => Some(c),
            _ => None,
        })
        .expect("one coordinated change");
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
        Some(BTreeMap::from([(
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

/// The standalone loop is the cluster's loop with the in-memory writer: what one cycle writes
/// (baseline, recommendation, policy conditions, restarts) is what the next one reads, so a cycle
/// whose queries fail keeps the last recommendation and baseline and says why.
#[tokio::test]
async fn dir_loop_feeds_its_own_writes_to_the_next_cycle() {
    let file = FileSource::from_path(&root().join("examples/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::standalone::DirLoop::new(root().join("examples/manifests"));
    let key = WorkloadKey::new("ml", kerf::api::WorkloadKind::Deployment, "llm");
    let llm = |e: &kerf::standalone::Evaluated| {
        e.cycle
            .gpu_results()
            .find(|r| r.key == key)
            .cloned()
            .unwrap()
    };
    let condition = |dir_loop: &kerf::standalone::DirLoop, e: &kerf::standalone::Evaluated| {
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
    assert_eq!(dir_loop.writer().restarts().get(&key), Some(&1));

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
        dir_loop.writer().restarts().get(&key),
        Some(&1),
        "the same recommendation again is no new rollout"
    );
}

/// CPU/memory too: a cycle whose queries fail keeps serving the applied requests and the
/// coordinated HPA target (carried over in the recommendation's `status.applied`).
#[tokio::test]
async fn applied_cpu_requests_and_hpa_target_survive_a_failed_cycle() {
    let file = FileSource::from_path(&root().join("examples/hpa/metrics.om")).unwrap();
    let store = kerf::state::Store::new();
    let mut dir_loop = kerf::standalone::DirLoop::new(root().join("examples/hpa/manifests"));
    let key = WorkloadKey::new("shop", kerf::api::WorkloadKind::Deployment, "web");
    dir_loop.run_once(&file, at(), 15, &store).await.unwrap();
    let before = store.get(&key).expect("web served");
    assert_eq!(before.resources["app"].cpu_millis, Some(700));
    assert_eq!(before.hpa.as_ref().unwrap().target_after, 71);
    let down = dir_loop.run_once(&Down, at(), 15, &store).await.unwrap();
    assert!(down.cycle.resource_results().all(|r| r.metrics_unavailable));
    assert_eq!(*store.get(&key).unwrap(), *before);
}
