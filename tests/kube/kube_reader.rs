//! The reader driven by a mock API server's list responses: malformed and invalid custom
//! resources are skipped (and reported) while everything else is indexed into the Snapshot.

use crate::kube_support;
use std::time::Duration;

use kerf::api::{PolicyType, WorkloadKind};
use kerf::core::model::WorkloadKey;
use kerf::sources::kube::Reader;
use kerf::state::{ObjectName, Store};
use kube_support::{Recorded, Reply, mock, requests};
use serde_json::{Value, json};

fn gpu_policy(ns: &str, name: &str, weight: Value, window: &str) -> Value {
    let signal = |metric: &str| {
        json!({"prometheus": {"metric": metric, "interpretation": "currentAllocation"},
               "upsize": {"metricsWindow": window}})
    };
    json!({
        "apiVersion": "rightsizing.kubex.ai/v1alpha1", "kind": "GpuReactivePolicy",
        "metadata": {"name": name, "namespace": ns, "generation": 2,
                     "creationTimestamp": "2026-06-01T00:00:00Z", "resourceVersion": "5",
                     "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        "spec": {
            "experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
            "automationStrategyRef": {"name": "s"},
            "weight": weight,
            "metrics": {"compute": signal("DCGM_FI_PROF_SM_ACTIVE"), "memory": signal("DCGM_FI_DEV_FB_USED")}
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "",
                                   "lastTransitionTime": "2026-06-01T00:00:00Z"}]}
    })
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Reply {
    Reply::Json(
        200,
        json!({"apiVersion": api_version, "kind": format!("{kind}List"),
               "metadata": {"resourceVersion": "100"}, "items": items}),
    )
}

fn container(name: &str, gpus: &str) -> Value {
    json!({"name": name, "image": "app:1", "env": [{"name": "SECRET", "value": "x"}],
           "resources": {"limits": {"nvidia.com/gpu": gpus}}})
}

/// A VerticalPodAutoscaler on the Deployment `target` (upstream v1 shape: `spec.targetRef`,
/// `spec.updatePolicy.updateMode`, `spec.resourcePolicy.containerPolicies`).
fn vpa(target: &str, mode: &str) -> Value {
    json!({"metadata": {"name": format!("{target}-vpa"), "namespace": "shop",
                        "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                    "updatePolicy": {"updateMode": mode},
                    "resourcePolicy": {"containerPolicies": [
                        {"containerName": "app", "controlledResources": ["memory"]}]}},
           "status": {"recommendation": {"containerRecommendations": [
               {"containerName": "app", "target": {"memory": "1Gi"}}]}}})
}

fn cluster(r: &Recorded) -> Reply {
    if r.query.split('&').any(|p| p == "watch=true") {
        return Reply::Hang;
    }
    let kerf = "rightsizing.kubex.ai/v1alpha1";
    match r.path.as_str() {
        "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies" => list(
            "GpuReactivePolicy",
            kerf,
            vec![
                gpu_policy("shop", "good", json!(5), "10m"),
                // Malformed: weight is not an integer. Must not stop the watch.
                gpu_policy("shop", "malformed", json!("heavy"), "10m"),
                // Decodes but fails validation (window below 1m is rejected by the duration check).
                gpu_policy("shop", "too-short", json!(0), "30s"),
            ],
        ),
        "/apis/rightsizing.kubex.ai/v1alpha1/globalconfigurations" => list(
            "GlobalConfiguration",
            kerf,
            vec![json!({"apiVersion": kerf, "kind": "GlobalConfiguration",
                        "metadata": {"name": "global-config"},
                        "spec": {"readOnly": true, "gpuReactiveCheckInterval": "2m"}})],
        ),
        "/apis/rightsizing.kubex.ai/v1alpha1/automationstrategies" => list(
            "AutomationStrategy",
            kerf,
            vec![
                json!({"apiVersion": kerf, "kind": "AutomationStrategy", "metadata": {"name": "s", "namespace": "shop"},
                       "spec": {"experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
                                "enablement": {"overrideScheduler": "kai"}}}),
                // KAI field without the contract: invalid, skipped.
                json!({"apiVersion": kerf, "kind": "AutomationStrategy", "metadata": {"name": "bad", "namespace": "shop"},
                       "spec": {"kai": {"queue": "q"}}}),
            ],
        ),
        "/apis/apps/v1/deployments" => list(
            "Deployment",
            "apps/v1",
            vec![json!({
                "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": {"app": "web"},
                             "annotations": {"rightsizing.kubex.ai/gpu-baseline": "{\"app\":\"1\"}",
                                             "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                             "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [container("app", "1")]}}}
            })],
        ),
        "/apis/apps/v1/replicasets" => list(
            "ReplicaSet",
            "apps/v1",
            vec![json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "metadata": {"name": "web-5d4f", "namespace": "shop",
                                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                          "name": "web", "uid": "u1", "controller": true}]}})],
        ),
        "/apis/batch/v1/jobs" => list(
            "Job",
            "batch/v1",
            vec![
                json!({"metadata": {"name": "nightly-29000", "namespace": "shop",
                                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                                                         "name": "nightly", "uid": "u2", "controller": true}]},
                       "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container("train", "1")]}}}}),
                json!({"metadata": {"name": "once", "namespace": "shop"},
                       "spec": {"parallelism": 2,
                                "template": {"spec": {"restartPolicy": "Never", "containers": [container("train", "2")]}}}}),
            ],
        ),
        "/apis/batch/v1/cronjobs" => list(
            "CronJob",
            "batch/v1",
            vec![json!({"metadata": {"name": "nightly", "namespace": "shop"},
                        "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": {
                            "metadata": {"annotations": {"gpu-fraction": "0.5"}},
                            "spec": {"restartPolicy": "Never", "containers": [container("train", "1")]}}}}}})],
        ),
        "/api/v1/pods" => list(
            "Pod",
            "v1",
            vec![json!({
                "metadata": {"name": "web-5d4f-abc", "namespace": "shop",
                             "labels": {"app": "web", "pod-template-hash": "5d4f"},
                             "managedFields": [{"manager": "kubelet", "operation": "Update"}],
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                  "name": "web-5d4f", "uid": "u3", "controller": true}]},
                "spec": {"containers": [container("app", "1")], "volumes": [{"name": "v", "emptyDir": {}}]},
                "status": {"phase": "Running", "startTime": "2026-07-01T00:00:00Z"}
            })],
        ),
        "/apis/autoscaling.k8s.io/v1/verticalpodautoscalers" => list(
            "VerticalPodAutoscaler",
            "autoscaling.k8s.io/v1",
            vec![vpa("web", "Recreate")],
        ),
        p if p.starts_with("/apis/rightsizing.kubex.ai/") => list("X", kerf, vec![]),
        "/api/v1/limitranges" => list(
            "LimitRange",
            "v1",
            vec![json!({"metadata": {"name": "bounds", "namespace": "shop"},
                        "spec": {"limits": [{"type": "Container", "min": {"cpu": "100m"}}]}})],
        ),
        "/api/v1/resourcequotas" => list(
            "ResourceQuota",
            "v1",
            vec![json!({"metadata": {"name": "team", "namespace": "shop"},
                        "spec": {"hard": {"requests.cpu": "4"}},
                        "status": {"used": {"requests.cpu": "3"}}})],
        ),
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" => list(
            "CustomResourceDefinition",
            "apiextensions.k8s.io/v1",
            vec![],
        ),
        "/apis/apps/v1/statefulsets" | "/apis/apps/v1/daemonsets" => list("X", "apps/v1", vec![]),
        "/apis/autoscaling/v2/horizontalpodautoscalers" => {
            list("HorizontalPodAutoscaler", "autoscaling/v2", vec![])
        }
        "/api/v1" => kube_support::core_v1_discovery(true),
        // The controllers GPU inference runs under: their CRDs are not installed here.
        p if [
            "/apis/serving.kserve.io/",
            "/apis/serving.knative.dev/",
            "/apis/leaderworkerset.x-k8s.io/",
            "/apis/argoproj.io/",
            "/apis/ray.io/",
            "/apis/grove.io/",
        ]
        .iter()
        .any(|g| p.starts_with(g)) =>
        {
            Reply::Text(404, "404 page not found".into())
        }
        other => panic!("unexpected request {other}"),
    }
}

#[tokio::test]
async fn malformed_and_invalid_objects_are_skipped_while_the_rest_is_indexed() {
    let (client, log) = mock(cluster);
    let store = Store::new();
    let reader = Reader::start_with_store(client, store.clone());
    tokio::time::timeout(Duration::from_secs(10), reader.wait_synced())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "reader never synced; still waiting for {:?}",
                reader.unsynced_kinds()
            )
        });
    assert!(reader.is_synced());
    // The API server's discovery lists pods/resize: in-place resize is served.
    kube_support::eventually(5, "pods/resize discovered", || {
        reader.snapshot().0.resize == kerf::core::snapshot::ResizeSupport::Served
    })
    .await;

    let (snap, invalid) = reader.snapshot();

    // The namespace's bounds kerf keeps to (docs/policies.md#limits).
    assert_eq!(snap.limit_ranges.len(), 1);
    assert_eq!(snap.limit_ranges[0].name, "shop/bounds");
    assert_eq!(snap.limit_ranges[0].min.cpu_millis, Some(100));
    assert_eq!(snap.resource_quotas.len(), 1);
    assert_eq!(snap.resource_quotas[0].requests.0.cpu_millis, Some(4000));
    assert_eq!(snap.resource_quotas[0].requests.1.cpu_millis, Some(3000));

    // Policies: only the good one; the two others are reported with a reason.
    assert_eq!(snap.gpu_policies.len(), 1);
    let good = &snap.gpu_policies[0];
    assert_eq!(good.id.to_string(), "GpuReactivePolicy/shop/good");
    assert_eq!(good.policy_type, PolicyType::GpuReactivePolicy);
    assert_eq!(good.spec.weight, 5);
    assert_eq!(good.generation, Some(2));
    assert!(good.creation.is_some());
    assert_eq!(good.status.as_ref().unwrap().conditions[0].type_, "Ready");
    let mut invalid = invalid;
    invalid.sort_by(|a, b| a.id.name.cmp(&b.id.name));
    assert_eq!(invalid.len(), 2, "{invalid:#?}");
    assert_eq!(
        invalid[0].id.to_string(),
        "GpuReactivePolicy/shop/malformed"
    );
    assert!(
        invalid[0].error.starts_with("cannot decode"),
        "{}",
        invalid[0].error
    );
    assert_eq!(invalid[0].generation, Some(2));
    assert!(
        invalid[0].status.is_some(),
        "status is kept so conditions keep their times"
    );
    assert_eq!(
        invalid[1].id.to_string(),
        "GpuReactivePolicy/shop/too-short"
    );
    assert!(
        invalid[1]
            .error
            .contains("spec.metrics.compute.upsize.metricsWindow"),
        "the message names the field: {}",
        invalid[1].error
    );

    // The VPA: what it sets, read from its spec.
    assert_eq!(snap.vpas.len(), 1, "{:?}", snap.vpas);
    let v = &snap.vpas[0];
    assert_eq!(v.id(), "shop/web-vpa");
    assert_eq!(
        (v.target_kind.as_str(), v.target_name.as_str()),
        ("Deployment", "web")
    );
    assert!(v.applies());
    assert!(v.controls("app", "memory"));
    assert!(
        !v.controls("app", "cpu"),
        "controlledResources: memory only"
    );

    // Singletons and strategies.
    assert!(snap.global.read_only);
    assert_eq!(snap.global.gpu_reactive_check_interval.seconds(), 120);
    assert_eq!(snap.strategies.len(), 1, "the invalid strategy is skipped");
    assert!(snap.strategies.values().next().unwrap().override_kai());
    assert_eq!(snap.precedence.priority(PolicyType::GpuReactivePolicy), 120);

    // Workloads: Deployment, the standalone Job and the CronJob (its Job is not a workload).
    let keys: Vec<WorkloadKey> = snap.workloads.iter().map(|w| w.key.clone()).collect();
    assert_eq!(
        keys,
        vec![
            WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
            WorkloadKey::new("shop", WorkloadKind::Job, "once"),
            WorkloadKey::new("shop", WorkloadKind::CronJob, "nightly"),
        ]
    );
    let web = &snap.workloads[0];
    assert_eq!(web.replicas, Some(3));
    assert_eq!(web.uid.as_deref(), Some("u1"));
    assert_eq!(
        web.annotations.len(),
        1,
        "last-applied-configuration is dropped: {:?}",
        web.annotations
    );
    assert_eq!(snap.workloads[1].replicas, Some(2));
    let cron = &snap.workloads[2];
    assert_eq!(
        cron.template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()["gpu-fraction"],
        "0.5",
        "a CronJob's workload template is its job template's pod template"
    );

    // Owner maps, in the snapshot and kept live in the webhook's store.
    assert_eq!(
        snap.replicaset_owners[&("shop".into(), "web-5d4f".into())],
        "web"
    );
    assert_eq!(
        snap.job_owners[&("shop".into(), "nightly-29000".into())],
        "nightly"
    );
    assert_eq!(
        store
            .replicaset_owners
            .get(&ObjectName::new("shop", "web-5d4f"))
            .unwrap()
            .as_str(),
        "web"
    );
    assert_eq!(
        store
            .job_owners
            .get(&ObjectName::new("shop", "nightly-29000"))
            .unwrap()
            .as_str(),
        "nightly"
    );

    // Pods are projected to what evaluation reads (`kerf::core::pod`: no env, volumes, probes…).
    assert_eq!(snap.pods.len(), 1);
    let pod = &snap.pods[0];
    // Metadata too: the slim `Meta` has no managedFields; the pod's name and owner are kept.
    assert_eq!(pod.metadata.name.as_deref(), Some("web-5d4f-abc"));
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.containers[0].name, "app");
    assert!(spec.containers[0].resources.is_some());
    assert!(pod.status.as_ref().unwrap().start_time.is_some());

    // ReplicaSets are read metadata-only; every kind was listed, then watched.
    let seen = requests(&log);
    let rs_list = seen
        .iter()
        .find(|r| r.path == "/apis/apps/v1/replicasets")
        .unwrap();
    assert!(
        rs_list.accept.contains("as=PartialObjectMetadataList"),
        "{}",
        rs_list.accept
    );
    let lists = seen
        .iter()
        .filter(|r| !r.query.contains("watch=true") && r.path != "/api/v1")
        .map(|r| r.path.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(
        lists, 33,
        "a list of every kind (9 of kerf, 8 built-in, the VPA, the CRDs, the LimitRanges and \
         ResourceQuotas, 12 of \
         the controllers GPU inference runs under, retried while their CRDs are not installed)"
    );
    assert!(
        seen.iter().any(|r| r.path == "/api/v1"),
        "discovery asked whether pods/resize is served"
    );
    assert!(
        seen.iter()
            .filter(|r| r.query.contains("watch=true"))
            .count()
            >= 17
    );
}

#[tokio::test]
async fn a_malformed_object_on_the_watch_is_skipped_and_the_watch_goes_on() {
    let mut first_watch = true;
    let (client, _log) = mock(move |r: &Recorded| {
        let is_watch = r.query.split('&').any(|p| p == "watch=true");
        if is_watch
            && r.path == "/apis/rightsizing.kubex.ai/v1alpha1/gpureactivepolicies"
            && first_watch
        {
            first_watch = false;
            return Reply::Events(vec![
                json!({"type": "ADDED", "object": gpu_policy("shop", "late-bad", json!({"not": "a number"}), "10m")}),
                json!({"type": "ADDED", "object": gpu_policy("shop", "late-good", json!(1), "10m")}),
                json!({"type": "DELETED", "object": gpu_policy("shop", "too-short", json!(0), "30s")}),
            ]);
        }
        cluster(r)
    });
    let reader = Reader::start(client);
    tokio::time::timeout(Duration::from_secs(10), reader.wait_synced())
        .await
        .unwrap();
    kube_support::eventually(10, "the watched policy", || {
        reader
            .snapshot()
            .0
            .gpu_policies
            .iter()
            .any(|p| p.id.name == "late-good")
    })
    .await;
    let (snap, invalid) = reader.snapshot();
    let mut names: Vec<&str> = snap
        .gpu_policies
        .iter()
        .map(|p| p.id.name.as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["good", "late-good"]);
    let mut bad: Vec<&str> = invalid.iter().map(|p| p.id.name.as_str()).collect();
    bad.sort();
    assert_eq!(
        bad,
        ["late-bad", "malformed"],
        "the deleted invalid policy is no longer reported"
    );
}

/// docs/design/runtime.md#r12: in-cluster too, kerf's own namespace is protected in every
/// snapshot the reconciler and the webhook's store are built from, whatever the list says.
#[tokio::test]
async fn kerfs_own_namespace_is_protected_in_every_snapshot() {
    let (client, _log) = mock(cluster);
    let reader = Reader::start_with_store(client, Store::new()).protecting("platform");
    tokio::time::timeout(Duration::from_secs(10), reader.wait_synced())
        .await
        .expect("synced");
    for r in [reader.clone(), reader] {
        let (snap, _) = r.snapshot();
        assert_eq!(
            snap.global.protected_namespaces,
            ["kube-system", "kerf-system", "platform"]
        );
    }
}

/// docs/gitops.md#detection: the reader keeps, of a workload's managedFields, who owns the
/// fields kerf sets and when (the rest of the object goes), and of an HPA's only the owners of
/// `spec.metrics` — what field conflicts are detected from.
#[tokio::test]
async fn the_reader_keeps_who_owns_the_fields_kerf_sets() {
    use kerf::core::managed_fields::{FieldManager, TrackedField};
    let managed = json!([
        {"manager": "argocd-controller", "operation": "Apply", "time": "2026-07-01T10:00:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {
            "f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {},
                "f:resources": {"f:requests": {"f:cpu": {}}}}}}}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-07-01T10:01:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}}
    ]);
    let (client, _log) = mock(move |r: &Recorded| {
        if r.query.split('&').any(|p| p == "watch=true") {
            return Reply::Hang;
        }
        match r.path.as_str() {
            "/apis/apps/v1/deployments" => list(
                "Deployment",
                "apps/v1",
                vec![json!({
                    "metadata": {"name": "web", "namespace": "shop", "managedFields": managed},
                    "spec": {"selector": {"matchLabels": {"app": "web"}},
                             "template": {"spec": {"containers": [
                                {"name": "app", "resources": {"requests": {"cpu": "1"}}}]}}}
                })],
            ),
            "/apis/autoscaling/v2/horizontalpodautoscalers" => list(
                "HorizontalPodAutoscaler",
                "autoscaling/v2",
                vec![json!({
                    "metadata": {"name": "web", "namespace": "shop", "managedFields": [
                        {"manager": "argocd-controller", "operation": "Apply", "time": "2026-07-01T10:00:00Z",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}, "f:maxReplicas": {}}}},
                        {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]},
                    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                             "maxReplicas": 5}
                })],
            ),
            _ => cluster(r),
        }
    });
    let reader = Reader::start(client);
    tokio::time::timeout(Duration::from_secs(10), reader.wait_synced())
        .await
        .expect("synced");
    let (snap, _) = reader.snapshot();
    let web = snap.workloads.iter().find(|w| w.key.name == "web").unwrap();
    assert_eq!(
        web.field_managers,
        vec![FieldManager {
            manager: "argocd-controller".into(),
            operation: "Apply".into(),
            time: Some("2026-07-01T10:00:00Z".parse().unwrap()),
            fields: [TrackedField::Request {
                container: "app".into(),
                init: false,
                resource: "cpu".into(),
            }]
            .into(),
        }]
    );
    let hpa = &snap.hpas[0];
    let kept = hpa.metadata.managed_fields.as_ref().unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].manager.as_deref(), Some("argocd-controller"));
    assert_eq!(
        kept[0].fields_v1.as_ref().unwrap().0,
        json!({"f:spec": {"f:metrics": {}}})
    );
}

/// A cluster without the VPA CRD (its path answers 404, as the API server does for a path
/// nothing serves) syncs with no VPA; once the CRD is installed, the watch reads its VPAs.
#[tokio::test]
async fn vpas_are_read_once_their_crd_is_installed_and_a_missing_crd_does_not_hold_readiness() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let installed = Arc::new(AtomicBool::new(false));
    let crd = installed.clone();
    let (client, log) = mock(move |r: &Recorded| {
        if r.path == "/apis/autoscaling.k8s.io/v1/verticalpodautoscalers" {
            if !crd.load(Ordering::SeqCst) {
                return Reply::Text(404, "404 page not found".into());
            }
            if r.query_has("watch=true") {
                return Reply::Hang;
            }
            return list(
                "VerticalPodAutoscaler",
                "autoscaling.k8s.io/v1",
                vec![vpa("web", "Off")],
            );
        }
        cluster(r)
    });
    let reader = Reader::start(client);
    tokio::time::timeout(Duration::from_secs(10), reader.wait_synced())
        .await
        .unwrap_or_else(|_| panic!("still waiting for {:?}", reader.unsynced_kinds()));
    assert!(reader.snapshot().0.vpas.is_empty());
    assert!(
        reader.failing_unsynced().is_empty(),
        "{:?}",
        reader.failing_unsynced()
    );

    installed.store(true, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let vpas = reader.snapshot().0.vpas;
        if let Some(v) = vpas.first() {
            assert_eq!(v.id(), "shop/web-vpa");
            assert!(!v.applies(), "updateMode Off sets nothing");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the VPA was never read after its CRD was installed: {:?}",
            requests(&log)
                .iter()
                .filter(|r| r.path.contains("verticalpodautoscalers"))
                .map(|r| r.query.clone())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
