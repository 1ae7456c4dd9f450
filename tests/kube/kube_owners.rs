//! Workloads under other controllers, read by the in-cluster reader from a mock API server that
//! serves the objects of tests/fixtures/workloads (the owner references and labels KServe,
//! Knative, LeaderWorkerSet, Argo Rollouts, KubeRay and Grove set), each at the path its CRD
//! serves it: the reader groups them as the directory source does, and a whole cycle sent
//! through the real writer never writes an owned Deployment or StatefulSet.

use std::path::Path;
use std::time::Duration;

use kerf::sources::kube::Reader;
use kerf::telemetry::Metrics;
use kerf::writers::kube::{Writer, WriterConfig};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::kube_support::{self, Recorded, Reply, calls, mock, requests};

fn fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workloads")
}

/// A KServe InferenceService and a LeaderWorkerSet on KAI half GPUs, running hot.
fn owned_gpu_fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/owned-gpu")
}

/// Two RayServices, one rolling to a new cluster on a change, one not.
fn rayservice_fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rayservice")
}

fn listed_fixture() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/listed-kinds")
}

/// Every object of a fixture, in file order.
fn objects_in(dir: &Path) -> Vec<Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir.join("manifests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&std::fs::read_to_string(f).unwrap()).unwrap();
        out.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    out
}

fn objects() -> Vec<Value> {
    objects_in(&fixture())
}

/// Where the API server serves a kind: `/api/v1/<plural>` or `/apis/<group>/<version>/<plural>`,
/// the plurals as each project's CRD names them (KServe `serving.kserve.io_inferenceservices`,
/// Knative `300-resources`, LWS `leaderworkerset.x-k8s.io_leaderworkersets`, Argo Rollouts
/// `rollout-crd`, KubeRay `ray.io_rayclusters`, Grove `grove.io_podcliquesets`).
fn collection(api_version: &str, kind: &str) -> String {
    let plural = match kind {
        "Pod" => "pods",
        "Deployment" => "deployments",
        "StatefulSet" => "statefulsets",
        "ReplicaSet" => "replicasets",
        "InferenceService" => "inferenceservices",
        "Service" => "services",
        "Configuration" => "configurations",
        "Revision" => "revisions",
        "LeaderWorkerSet" => "leaderworkersets",
        "Rollout" => "rollouts",
        "RayCluster" => "rayclusters",
        "RayService" => "rayservices",
        "RayJob" => "rayjobs",
        "PodCliqueSet" => "podcliquesets",
        "PodClique" => "podcliques",
        "RightsizingPolicy" => "rightsizingpolicies",
        "AutomationStrategy" => "automationstrategies",
        "GlobalConfiguration" => "globalconfigurations",
        "GpuReactivePolicy" => "gpureactivepolicies",
        "PolicyEvaluation" => "policyevaluations",
        // The listed kinds' CRDs (tests/fixtures/listed-kinds).
        "ModelDeployment" => "modeldeployments",
        "Server" => "servers",
        other => panic!("the fixture has a {other}: add its plural"),
    };
    if api_version == "v1" {
        format!("/api/v1/{plural}")
    } else {
        format!("/apis/{api_version}/{plural}")
    }
}

/// The API server of a cluster holding `objects`: every collection listed (watches hang), each
/// object served by name; a collection of a CRD that is not installed (RayService,
/// PodCliqueScalingGroup here) answers 404 as the API server does; writes are echoed.
fn cluster(objects: Vec<Value>) -> impl FnMut(&Recorded) -> Reply + Send + 'static {
    let served = [
        "/apis/serving.kserve.io/v1beta1/inferenceservices",
        "/apis/serving.knative.dev/v1/services",
        "/apis/serving.knative.dev/v1/configurations",
        "/apis/serving.knative.dev/v1/revisions",
        "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets",
        "/apis/argoproj.io/v1alpha1/rollouts",
        "/apis/ray.io/v1/rayclusters",
        "/apis/grove.io/v1alpha1/podcliquesets",
        "/apis/grove.io/v1alpha1/podcliques",
        "/apis/serving.example.com/v1/modeldeployments",
        "/apis/apps.example.com/v1/servers",
    ];
    move |r: &Recorded| {
        if r.method != "GET" {
            return Reply::Json(200, r.body.clone());
        }
        if r.path == "/api/v1" {
            return kube_support::core_v1_discovery(true);
        }
        if r.query_has("watch=true") {
            return Reply::Hang;
        }
        let of = |o: &&Value| {
            collection(
                o["apiVersion"].as_str().unwrap(),
                o["kind"].as_str().unwrap(),
            )
        };
        // One object by name: `<collection>/namespaces/<ns>/<plural>/<name>` has the
        // collection's prefix and plural around the namespace.
        if let Some(o) = objects.iter().find(|o| {
            let c = of(o);
            let (prefix, plural) = c.rsplit_once('/').unwrap();
            r.path
                == format!(
                    "{prefix}/namespaces/{}/{plural}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or("default"),
                    o["metadata"]["name"].as_str().unwrap()
                )
        }) {
            return Reply::Json(200, o.clone());
        }
        let items: Vec<Value> = objects
            .iter()
            .filter(|o| of(o) == r.path)
            .cloned()
            .collect();
        let builtin = r.path.starts_with("/api/v1/")
            || r.path.starts_with("/apis/apps/")
            || r.path.starts_with("/apis/batch/")
            || r.path.starts_with("/apis/autoscaling/v2/")
            || r.path.starts_with("/apis/rightsizing.kubex.ai/");
        if items.is_empty() && !builtin && !served.contains(&r.path.as_str()) {
            return Reply::Text(404, "404 page not found".into());
        }
        Reply::Json(
            200,
            json!({"apiVersion": "v1", "kind": "List",
                   "metadata": {"resourceVersion": "100"}, "items": items}),
        )
    }
}

/// One cycle over `snap` with the usage of `fixture`, planned and sent through the real writer to
/// a cluster holding the fixture's objects: what reached the API server.
async fn cycle_sent(snap: &kerf::core::snapshot::Snapshot, fixture: &Path) -> Vec<Recorded> {
    let source = kerf::metrics::file::FileSource::from_path(&fixture.join("metrics.om")).unwrap();
    let now = "2026-01-01T12:00:00Z".parse().unwrap();
    let cycle = kerf::reconcile::run_cycle(snap, &source, now, 15).await;
    let ops = kerf::reconcile::plan_writes(snap, &cycle, &[], &[], now);
    let (client, log) = mock(cluster(objects_in(fixture)));
    let (_lease, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.metrics = Metrics::new();
    cfg.backoff = Duration::from_millis(10);
    cfg.read_only = false;
    let writer = Writer::spawn_with(client, lease_rx, cfg);
    for op in ops {
        writer.apply(op).await;
    }
    requests(&log)
}

async fn synced_reader(client: kube::Client) -> Reader {
    let reader = Reader::start(client);
    tokio::time::timeout(Duration::from_secs(10), reader.wait_synced())
        .await
        .unwrap_or_else(|_| panic!("still waiting for {:?}", reader.unsynced_kinds()));
    reader
}

/// The reader's snapshot groups the fixture's pods under their topmost owners exactly as the
/// directory source does: the same workloads (kind, name, template, replicas, owner chain), the
/// same owner of every pod; CRDs that are not installed are no error and hold no readiness.
#[tokio::test]
async fn the_reader_groups_pods_under_their_topmost_owners_as_the_directory_source_does() {
    let (client, log) = mock(cluster(objects()));
    let reader = synced_reader(client).await;
    let (snap, invalid) = reader.snapshot();
    assert!(invalid.is_empty(), "{invalid:?}");
    assert!(reader.failing_unsynced().is_empty());
    let dir = kerf::sources::dir::load_dir(&fixture().join("manifests"))
        .unwrap()
        .snapshot;
    let keys = |s: &kerf::core::snapshot::Snapshot| -> Vec<String> {
        s.workloads.iter().map(|w| w.key.to_string()).collect()
    };
    assert_eq!(
        keys(&snap),
        [
            "ml/Rollout/canary",
            "ml/InferenceService/llm",
            "ml/KnativeService/hello",
            "ml/LeaderWorkerSet/vllm",
            "ml/RayCluster/raycluster-kuberay",
            "ml/PodCliqueSet/dynamo",
        ]
    );
    let mut dir_workloads = dir.workloads.clone();
    dir_workloads.sort_by(|a, b| a.key.cmp(&b.key));
    for (cluster, file) in snap.workloads.iter().zip(&dir_workloads) {
        assert_eq!(cluster, file, "{} read alike", cluster.key);
    }
    let canary = snap
        .workloads
        .iter()
        .find(|w| w.key.name.as_str() == "canary")
        .unwrap();
    assert!(canary.template_writable(), "a Rollout's template is kerf's");
    assert!(!canary.template.pod_spec().containers.is_empty());
    let owner_of = |s: &kerf::core::snapshot::Snapshot| -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = s
            .pods
            .iter()
            .map(|p| {
                let chain = kerf::core::grouping::pod_owner(p, s);
                (
                    p.metadata.name.as_deref().unwrap_or_default().to_string(),
                    chain.map(|c| c.key.to_string()).unwrap_or_default(),
                )
            })
            .collect();
        out.sort();
        out
    };
    let owners = owner_of(&snap);
    assert_eq!(owners, owner_of(&dir));
    assert_eq!(owners.len(), 9);
    assert!(
        owners
            .iter()
            .all(|(_, w)| keys(&snap).contains(&w.to_string())),
        "every pod under one of the topmost owners: {owners:?}"
    );
    // Metadata only, except the Rollout (its template is the one kerf writes).
    let seen = requests(&log);
    let list = |path: &str| seen.iter().find(|r| r.path == path).unwrap();
    assert!(
        list("/apis/serving.kserve.io/v1beta1/inferenceservices")
            .accept
            .contains("PartialObjectMetadataList"),
        "{:?}",
        list("/apis/serving.kserve.io/v1beta1/inferenceservices").accept
    );
    assert!(
        !list("/apis/argoproj.io/v1alpha1/rollouts")
            .accept
            .contains("PartialObjectMetadata")
    );
}

/// A whole cycle over what the reader read, planned and sent through the real writer: the
/// Rollout is applied through its own template; the owned Deployments and StatefulSets (the
/// KServe predictor, the Knative Revision's, the LeaderWorkerSet's) receive no request at all;
/// the other workloads' running pods are evicted, one per workload.
#[tokio::test]
async fn a_cycle_over_the_cluster_writes_no_owned_template_and_evicts_one_pod_per_workload() {
    let (client, _) = mock(cluster(objects()));
    let reader = synced_reader(client).await;
    let (snap, _) = reader.snapshot();
    let seen = cycle_sent(&snap, &fixture()).await;
    let owned = [
        "/apis/apps/v1/namespaces/ml/deployments/",
        "/apis/apps/v1/namespaces/ml/statefulsets/",
    ];
    assert!(
        !seen
            .iter()
            .any(|r| owned.iter().any(|o| r.path.starts_with(o))),
        "no request to an owned template: {:?}",
        calls(&seen)
    );
    assert!(
        seen.iter().any(|r| r.method == "PATCH"
            && r.path == "/apis/argoproj.io/v1alpha1/namespaces/ml/rollouts/canary"),
        "{:?}",
        calls(&seen)
    );
    let evicted = evictions(&seen);
    assert_eq!(evicted.len(), 5, "one pod per owned workload: {evicted:?}");
    assert!(
        evicted.contains(&"/api/v1/namespaces/ml/pods/llm-predictor-6f9c8d7b5-b6c7d/eviction"),
        "{evicted:?}"
    );
}

/// A GPU upsize of a KServe predictor and of a LeaderWorkerSet group, read from the cluster and
/// sent through the real writer: no owned Deployment, StatefulSet or the owners themselves are
/// written; one pod of each is evicted (the LeaderWorkerSet's leader, whose GPU changes), and
/// each RightsizingRecommendation says `applyMethod: evict` and publishes the GPU
/// recommendation admission serves to the replacement pods.
#[tokio::test]
async fn a_gpu_upsize_of_kserve_and_lws_evicts_one_pod_of_each_and_writes_no_template() {
    let (client, _) = mock(cluster(objects_in(&owned_gpu_fixture())));
    let reader = synced_reader(client).await;
    let (snap, _) = reader.snapshot();
    let seen = cycle_sent(&snap, &owned_gpu_fixture()).await;
    let never = [
        "/apis/apps/v1/",
        "/apis/serving.kserve.io/",
        "/apis/leaderworkerset.x-k8s.io/",
    ];
    assert!(
        !seen
            .iter()
            .any(|r| r.method != "GET" && never.iter().any(|o| r.path.starts_with(o))),
        "{:?}",
        calls(&seen)
    );
    let evicted = evictions(&seen);
    assert_eq!(
        evicted,
        [
            "/api/v1/namespaces/ml/pods/llm-predictor-6f9c8d7b5-b6c7d/eviction",
            "/api/v1/namespaces/ml/pods/vllm-0/eviction"
        ]
    );
    for name in ["inferenceservice-llm", "leaderworkerset-vllm"] {
        let status = seen
            .iter()
            .filter(|r| {
                r.method == "PATCH"
                    && r.path
                        .ends_with(&format!("/rightsizingrecommendations/{name}/status"))
            })
            .map(|r| &r.body["status"])
            .next_back()
            .unwrap_or_else(|| panic!("{name}: {:?}", calls(&seen)));
        assert_eq!(status["applyMethod"], "evict", "{name}: {status}");
        assert_eq!(
            status["eviction"]["podsToReplace"],
            json!(if name == "inferenceservice-llm" { 2 } else { 1 }),
            "{status}"
        );
        let published =
            status["applied"]["gpuAnnotations"]["rightsizing.kubex.ai/gpu-recommendation"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: {status}"));
        assert!(published.contains("1"), "{published}");
    }
}

/// A RayService read whole from the cluster: its change is written through the real writer to
/// `spec.rayClusterConfig` — a JSON Patch, every group holding the container written, each
/// worker group pinned by its `groupName` and each container by its name — and none of its pods
/// is evicted (KubeRay rolls to a new cluster). One whose zero-downtime upgrade is off
/// (`upgradeStrategy.type: None`) is never written: one of its pods is evicted, workers first.
/// A RayJob's cluster is neither written nor evicted: `applyMethod: admission`.
#[tokio::test]
async fn a_rayservice_change_is_written_to_its_ray_cluster_config_and_evicted_without_zero_downtime()
 {
    let (client, _) = mock(cluster(objects_in(&rayservice_fixture())));
    let reader = synced_reader(client).await;
    let (snap, _) = reader.snapshot();
    let by_name = |name: &str| {
        snap.workloads
            .iter()
            .find(|w| w.key.name.as_str() == name)
            .unwrap()
            .clone()
    };
    assert!(by_name("llm-serve").writes_ray_cluster_config());
    assert!(!by_name("plain-serve").writes_ray_cluster_config());
    let seen = cycle_sent(&snap, &rayservice_fixture()).await;
    let patch = seen
        .iter()
        .find(|r| {
            r.method == "PATCH" && r.path == "/apis/ray.io/v1/namespaces/ml/rayservices/llm-serve"
        })
        .unwrap_or_else(|| panic!("{:?}", calls(&seen)));
    assert_eq!(patch.content_type, "application/json-patch+json");
    let ops = patch.body.as_array().unwrap();
    let config = "/spec/rayClusterConfig";
    for op in [
        json!({"op": "test", "path": format!("{config}/workerGroupSpecs/1/groupName"), "value": "gpu-group"}),
        json!({"op": "test", "path": format!("{config}/workerGroupSpecs/0/template/spec/containers/0/name"), "value": "ray-worker"}),
        json!({"op": "replace", "path": format!("{config}/headGroupSpec/template/spec/containers/0/resources/requests/cpu"), "value": "500m"}),
        json!({"op": "replace", "path": format!("{config}/workerGroupSpecs/1/template/spec/containers/0/resources/requests/cpu"), "value": "500m"}),
    ] {
        assert!(ops.contains(&op), "{op} not in {}", patch.body);
    }
    let evicted = evictions(&seen);
    assert_eq!(
        evicted,
        ["/api/v1/namespaces/ml/pods/plain-serve-raycluster-bcdfg-gpu-group-worker-b6c7d/eviction"]
    );
    assert!(
        !seen.iter().any(|r| r.method == "PATCH"
            && r.path == "/apis/ray.io/v1/namespaces/ml/rayservices/plain-serve"),
        "{:?}",
        calls(&seen)
    );
    // The RayJob's cluster runs a job: nothing of it is evicted or written, new pods only.
    assert!(
        !seen
            .iter()
            .any(|r| r.method != "GET" && r.path.contains("/rayjobs/")),
        "{:?}",
        calls(&seen)
    );
    let job = seen
        .iter()
        .filter(|r| {
            r.path
                .ends_with("/rightsizingrecommendations/rayjob-train/status")
        })
        .map(|r| &r.body["status"])
        .next_back()
        .unwrap_or_else(|| panic!("{:?}", calls(&seen)));
    assert_eq!(job["applyMethod"], "admission", "{job}");
    assert!(job["eviction"].is_null(), "{job}");
}

/// Kinds kerf knows only because GlobalConfiguration `workloadKinds` lists them: once the reader
/// has read the configuration it watches them (their CRDs answer here), and groups their pods
/// as the directory source does; a whole cycle writes the kind with a `templatePath` through
/// it and evicts the other's pod, never writing the Deployment it owns.
#[tokio::test]
async fn the_kinds_the_configuration_lists_are_watched_and_written_only_through_their_template_path()
 {
    let (client, log) = mock(cluster(objects_in(&listed_fixture())));
    let reader = synced_reader(client).await;
    let dir = kerf::sources::dir::load_dir(&listed_fixture().join("manifests"))
        .unwrap()
        .snapshot;
    let keys = |s: &kerf::core::snapshot::Snapshot| -> Vec<String> {
        s.workloads.iter().map(|w| w.key.to_string()).collect()
    };
    assert_eq!(keys(&dir), ["ml/ModelDeployment/md", "ml/Server/srv"]);
    kube_support::eventually(10, "the listed kinds read", || {
        keys(&reader.snapshot().0) == keys(&dir)
    })
    .await;
    let (snap, _) = reader.snapshot();
    assert_eq!(snap.workloads, dir.workloads);
    let seen = requests(&log);
    let listed = |path: &str| {
        seen.iter()
            .find(|r| r.path == path)
            .map(|r| r.accept.clone())
    };
    assert!(
        listed("/apis/serving.example.com/v1/modeldeployments")
            .unwrap()
            .contains("PartialObjectMetadataList"),
        "without a template path, metadata only"
    );
    assert!(
        !listed("/apis/apps.example.com/v1/servers")
            .unwrap()
            .contains("PartialObjectMetadata"),
        "with one, the whole object: its template is read"
    );

    let seen = cycle_sent(&snap, &listed_fixture()).await;
    assert!(
        !seen.iter().any(|r| r
            .path
            .starts_with("/apis/apps/v1/namespaces/ml/deployments/")),
        "{:?}",
        calls(&seen)
    );
    let server = seen
        .iter()
        .find(|r| {
            r.method == "PATCH" && r.path == "/apis/apps.example.com/v1/namespaces/ml/servers/srv"
        })
        .unwrap_or_else(|| panic!("{:?}", calls(&seen)));
    // No CRD of the listed kind at hand: the safe way, a JSON Patch pinned to the container.
    assert_eq!(server.content_type, "application/json-patch+json");
    let ops = server.body.as_array().unwrap();
    assert!(
        ops.contains(
            &json!({"op": "test", "path": "/spec/template/spec/containers/0/name",
                             "value": "server"})
        ) && ops.iter().any(|op| op["path"]
            == "/spec/template/spec/containers/0/resources/requests/cpu"
            && op["value"] == "500m"),
        "{}",
        server.body
    );
    assert!(
        seen.iter().any(|r| r.method == "POST"
            && r.path == "/api/v1/namespaces/ml/pods/md-server-6f9c8d7b5-x2x4z/eviction"),
        "{:?}",
        calls(&seen)
    );
}

/// kerf's ClusterRole from before it read these kinds: listing InferenceServices is forbidden.
/// The reader still syncs (the error is counted), rather than hold readiness for good.
#[tokio::test]
async fn a_kind_kerf_may_not_read_holds_no_readiness() {
    let mut inner = cluster(objects());
    let (client, _) = mock(move |r: &Recorded| {
        if r.path == "/apis/serving.kserve.io/v1beta1/inferenceservices" {
            return kube_support::status(403, "Forbidden");
        }
        inner(r)
    });
    let reader = synced_reader(client).await;
    assert!(reader.is_synced());
    assert!(
        reader.health().last_error("InferenceService").is_some(),
        "the refusal is reported"
    );
}

/// An eviction that fails (500 on every attempt) is retried: the status recorded the pod asked,
/// the next cycle waits (`EvictionRefused`: the pod still runs with the old requests) and the
/// cycle after the pace asks the same pod again, which then goes.
#[tokio::test]
async fn a_failed_eviction_is_asked_again_once_paced() {
    use kerf::core::persisted::PersistedRecommendation;
    use kerf::core::writes::{WriteOp, recommendation_name};
    use std::sync::{Arc, Mutex};

    const EVICTION: &str = "/api/v1/namespaces/ml/pods/llm-predictor-6f9c8d7b5-b6c7d/eviction";
    let snap = kerf::sources::dir::load_dir(&fixture().join("manifests"))
        .unwrap()
        .snapshot;
    let source = kerf::metrics::file::FileSource::from_path(&fixture().join("metrics.om")).unwrap();
    let t0: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
    let cycle = kerf::reconcile::run_cycle(&snap, &source, t0, 15).await;
    let evicts = |ops: &[WriteOp]| -> Vec<kerf::core::writes::EvictWrite> {
        ops.iter()
            .filter_map(|op| match op {
                WriteOp::Evict(e) if e.pod.pod == "llm-predictor-6f9c8d7b5-b6c7d" => {
                    Some((**e).clone())
                }
                _ => None,
            })
            .collect()
    };
    let ops = kerf::reconcile::plan_writes(&snap, &cycle, &[], &[], t0);
    let key = evicts(&ops)
        .first()
        .expect("the predictor's pod is evicted")
        .workload
        .clone();
    let name = recommendation_name(&key);
    let recorded = |ops: &[WriteOp]| -> Arc<PersistedRecommendation> {
        let w = ops
            .iter()
            .find_map(|op| match op {
                WriteOp::Recommendation(r) if r.name == name => Some(r),
                _ => None,
            })
            .expect("the recommendation records the eviction");
        Arc::new(w.as_written())
    };

    let fails = Arc::new(Mutex::new(true));
    let failing = fails.clone();
    let (client, log) = mock(move |r: &Recorded| {
        if r.path == EVICTION {
            return match *failing.lock().unwrap() {
                true => kube_support::status(500, "InternalError"),
                false => Reply::Json(
                    201,
                    json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Success", "code": 201}),
                ),
            };
        }
        Reply::Json(200, r.body.clone())
    });
    let (_lease, lease_rx) = watch::channel(true);
    let mut cfg = WriterConfig::new("kerf-system");
    cfg.backoff = Duration::from_millis(10);
    cfg.read_only = false;
    let writer = Writer::spawn_with(client, lease_rx, cfg);
    let evict = WriteOp::Evict(Box::new(evicts(&ops).remove(0)));
    let outcome = writer.apply(evict).await;
    assert!(
        matches!(outcome, kerf::writers::kube::WriteOutcome::Failed(_)),
        "{outcome:?}"
    );
    let asked =
        |log: &kube_support::Log| requests(log).iter().filter(|r| r.path == EVICTION).count();
    assert_eq!(asked(&log), 1, "an eviction is asked once a turn");

    // A minute on the pod still runs with the old requests: kerf waits for the pace.
    let recs = [recorded(&ops)];
    let t1 = t0 + jiff::SignedDuration::from_mins(1);
    let ops = kerf::reconcile::plan_writes(&snap, &cycle, &[], &recs, t1);
    assert!(evicts(&ops).is_empty());
    let waiting = recorded(&ops)
        .status
        .clone()
        .unwrap()
        .eviction
        .unwrap()
        .waiting;
    assert_eq!(waiting.as_deref(), Some("EvictionRefused"));

    // Once paced, the same pod is asked again, and goes.
    let t5 = t0 + kerf::core::writes::eviction::EVICTION_INTERVAL;
    let ops = kerf::reconcile::plan_writes(&snap, &cycle, &[], &recs, t5);
    let again = evicts(&ops);
    assert_eq!(again.len(), 1, "asked again");
    *fails.lock().unwrap() = false;
    let outcome = writer
        .apply(WriteOp::Evict(Box::new(again[0].clone())))
        .await;
    assert!(
        matches!(outcome, kerf::writers::kube::WriteOutcome::Written { .. }),
        "{outcome:?}"
    );
    assert_eq!(asked(&log), 2);
}

/// The eviction requests among `seen`, by path, sorted.
fn evictions(seen: &[Recorded]) -> Vec<&str> {
    let mut evicted: Vec<&str> = seen
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .map(|r| r.path.as_str())
        .collect();
    evicted.sort();
    evicted
}
