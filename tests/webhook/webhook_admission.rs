//! Real AdmissionReview bodies (tests/fixtures/admission) sent over real TLS by reqwest to the
//! in-process server; the returned patch is applied with json-patch and checked field by field.

use crate::process_metrics;
use crate::support;
use std::sync::Arc;

use kerf::api::{Enablement, KaiStrategy, OverrideScheduler, StrategyView, WorkloadKind};
use kerf::core::model::{
    CoordinatedHpa, GpuRecommendation, PolicyId, ResourceRequests, WorkloadKey, WorkloadState,
};
use kerf::state::{ObjectName, Store};
use serde_json::{Value, json};
use support::*;

struct Env {
    _dir: tempfile::TempDir,
    pki: Pki,
    server: Running,
    client: reqwest::Client,
}

fn gpu_state(pairs: &[(&str, f64)]) -> WorkloadState {
    WorkloadState {
        gpu: Some(GpuRecommendation {
            containers: pairs.iter().map(|(c, v)| (c.to_string(), *v)).collect(),
            driving_metric: None,
            policy: PolicyId::parse("GpuReactivePolicy/ml/gpu"),
            updated_at: None,
            by_policy: Default::default(),
        }),
        policy: PolicyId::parse("GpuReactivePolicy/ml/gpu"),
        ..Default::default()
    }
}

/// The server and a client; the server reports to `store`'s own metrics registry.
async fn env(store: Arc<Store>) -> Env {
    install_provider();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let (cert, key) = write_pair(dir.path(), &pki.leaf("kerf"));
    let server = start(store, &cert, &key, |_| {}).await;
    let client = client(&pki.ca_pem(), server.webhook, false);
    Env {
        _dir: dir,
        pki,
        server,
        client,
    }
}

/// Sends the fixture, checks the envelope, applies the patch, checks reinvocation is a no-op.
async fn admit(e: &Env, review_body: &Value) -> Value {
    let resp = review(&e.client, e.server.webhook, review_body).await;
    assert_eq!(resp["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(resp["kind"], "AdmissionReview");
    assert_eq!(resp["response"]["uid"], review_body["request"]["uid"]);
    assert_eq!(resp["response"]["allowed"], true);
    let object = &review_body["request"]["object"];
    let patched = apply(object, &resp);
    let again = review(
        &e.client,
        e.server.webhook,
        &with_object(review_body, patched.clone(), "reinvoke-1"),
    )
    .await;
    assert_eq!(again["response"]["uid"], "reinvoke-1");
    assert!(
        again["response"].get("patch").is_none(),
        "reinvocation must not patch again: {again}"
    );
    patched
}

fn ann<'a>(p: &'a Value, k: &str) -> Option<&'a str> {
    p["metadata"]["annotations"].get(k).and_then(Value::as_str)
}

#[tokio::test]
async fn kai_fraction_pod_of_deployment_resized_and_scheduled_by_kai() {
    let store = Store::new();
    // No ReplicaSet link in the store: the Deployment is derived from pod-template-hash.
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
        gpu_state(&[("server", 0.8400000001)]),
    );
    let e = env(store).await;
    let body = fixture("pod-kai-fraction.json");
    let out = admit(&e, &body).await;
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.84"));
    assert_eq!(ann(&out, "gpu-fraction-container-name"), None);
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
    assert_eq!(
        out["metadata"]["labels"]["kai.scheduler/queue"],
        "kerf-gpu-queue"
    );
    assert_eq!(
        out["metadata"]["labels"]["app"], "llm-serve",
        "other labels kept"
    );
    let mutated: Value =
        serde_json::from_str(ann(&out, "rightsizing.kubex.ai/mutated").unwrap()).unwrap();
    assert_eq!(mutated["policy"], "GpuReactivePolicy/ml/gpu");
    assert_eq!(mutated["containers"]["server"]["gpu"], "0.84");
    // Everything else untouched.
    let mut rest = out.clone();
    let mut orig = body["request"]["object"].clone();
    for v in [&mut rest, &mut orig] {
        v["metadata"].as_object_mut().unwrap().remove("annotations");
        v["metadata"].as_object_mut().unwrap().remove("labels");
        v["spec"].as_object_mut().unwrap().remove("schedulerName");
    }
    assert_eq!(rest, orig);
}

#[tokio::test]
async fn replicaset_link_from_store_wins() {
    let store = Store::new();
    store.replicaset_owners.insert(
        ObjectName::new("ml", "llm-serve-5c7d9b8f6d"),
        "renamed".into(),
    );
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "renamed"),
        gpu_state(&[("server", 0.3)]),
    );
    let e = env(store).await;
    let out = admit(&e, &fixture("pod-kai-fraction.json")).await;
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.3"));
}

#[tokio::test]
async fn whole_gpu_statefulset_pod_becomes_fraction_over_devices() {
    let store = Store::new();
    let mut st = gpu_state(&[("trainer", 1.5)]);
    st.template_gpu.insert("trainer".into(), 2.0);
    st.strategy = std::sync::Arc::new(StrategyView {
        enablement: Enablement {
            override_scheduler: Some(OverrideScheduler::Kai),
            ..Default::default()
        },
        kai: Some(KaiStrategy {
            queue: "research".into(),
            set_queue_when_specified: false,
        }),
        ..Default::default()
    });
    store.put(
        WorkloadKey::new("ml", WorkloadKind::StatefulSet, "trainer"),
        st,
    );
    let e = env(store).await;
    let out = admit(&e, &fixture("pod-nvidia-gpu.json")).await;
    let c = &out["spec"]["containers"][0]["resources"];
    assert!(c["requests"].get("nvidia.com/gpu").is_none(), "{c}");
    assert!(c["limits"].get("nvidia.com/gpu").is_none(), "{c}");
    assert_eq!(c["requests"]["cpu"], "4", "cpu untouched");
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.75"));
    assert_eq!(ann(&out, "gpu-fraction-num-devices"), Some("2"));
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
    assert_eq!(out["metadata"]["labels"]["kai.scheduler/queue"], "research");
}

#[tokio::test]
async fn cronjob_pod_with_sidecar_and_init_containers() {
    let store = Store::new();
    store.job_owners.insert(
        ObjectName::new("ml", "nightly-eval-29034720"),
        "nightly-eval".into(),
    );
    let mut st = gpu_state(&[("evaluator", 0.3)]);
    st.resources.insert(
        "istio-proxy".into(),
        ResourceRequests {
            cpu_millis: Some(200),
            memory_bytes: Some(256 << 20),
        },
    );
    st.resources.insert(
        "log-shipper".into(),
        ResourceRequests {
            cpu_millis: Some(20),
            memory_bytes: None,
        },
    );
    store.put(
        WorkloadKey::new("ml", WorkloadKind::CronJob, "nightly-eval"),
        st,
    );
    let e = env(store).await;
    let out = admit(&e, &fixture("pod-sidecar-init.json")).await;
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.3"));
    assert_eq!(ann(&out, "gpu-fraction-container-name"), Some("evaluator"));
    assert_eq!(
        ann(&out, "batch.kubernetes.io/job-tracking"),
        Some(""),
        "existing annotation kept"
    );
    let evaluator = &out["spec"]["containers"][1];
    assert_eq!(evaluator["name"], "evaluator");
    assert!(
        evaluator["resources"]["limits"]
            .get("nvidia.com/gpu")
            .is_none()
    );
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "20m"
    );
    assert_eq!(
        out["spec"]["containers"][0]["resources"]["requests"]["memory"],
        "64Mi"
    );
    let sidecar = &out["spec"]["initContainers"][1];
    assert_eq!(sidecar["name"], "istio-proxy");
    assert_eq!(sidecar["resources"]["requests"]["cpu"], "200m");
    assert_eq!(sidecar["resources"]["requests"]["memory"], "256Mi");
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"],
        json!({}),
        "plain init container untouched"
    );
}

#[tokio::test]
async fn pod_without_maps_or_namespace_gets_parent_maps_added() {
    let store = Store::new();
    // The object has no namespace: the request's namespace (`ops`) is used.
    store.put(
        WorkloadKey::new("ops", WorkloadKind::DaemonSet, "gpu-probe"),
        gpu_state(&[("probe", 0.25)]),
    );
    let e = env(store).await;
    let body = fixture("pod-no-maps.json");
    assert!(
        body["request"]["object"]["metadata"]
            .get("annotations")
            .is_none()
    );
    let out = admit(&e, &body).await;
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.25"));
    assert_eq!(
        out["metadata"]["labels"]["kai.scheduler/queue"],
        "kerf-gpu-queue"
    );
    assert_eq!(out["spec"]["schedulerName"], "kai-scheduler");
}

#[tokio::test]
async fn annotation_keys_with_slash_and_tilde_survive() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("search", WorkloadKind::Deployment, "embedder"),
        gpu_state(&[("embedder", 0.6)]),
    );
    let e = env(store).await;
    let body = fixture("pod-escaped-keys.json");
    let resp = review(&e.client, e.server.webhook, &body).await;
    let ops = serde_json::to_value(patch_of(&resp).expect("a patch")).unwrap();
    let paths: Vec<String> = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap().to_string())
        .collect();
    assert!(
        paths.contains(&"/metadata/labels/kai.scheduler~1queue".to_string()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/spec/containers/0/resources/limits/nvidia.com~1gpu".to_string()),
        "{paths:?}"
    );
    let out = admit(&e, &body).await;
    assert_eq!(ann(&out, "example.com/owner~team"), Some("search-infra"));
    assert_eq!(ann(&out, "a~/b"), Some("1"));
    assert_eq!(out["metadata"]["labels"]["team~x/y"], "search");
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.6"));
}

#[tokio::test]
async fn hpa_create_and_update_get_coordinated_target() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
        WorkloadState {
            hpa: Some(CoordinatedHpa {
                hpa_name: "web".into(),
                resource: "cpu".into(),
                target_before: 60,
                target_after: 75,
            }),
            ..Default::default()
        },
    );
    let e = env(store).await;
    let mut body = fixture("hpa-cpu.json");
    let out = admit(&e, &body).await;
    assert_eq!(
        out["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        75
    );
    assert_eq!(
        out["spec"]["metrics"][0]["resource"]["target"]["type"],
        "Utilization"
    );
    assert_eq!(out["spec"]["maxReplicas"], 10);
    body["request"]["operation"] = json!("UPDATE");
    let out = admit(&e, &body).await;
    assert_eq!(
        out["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        75
    );
}

#[tokio::test]
async fn dry_run_is_patched_the_same_way() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
        gpu_state(&[("server", 0.4)]),
    );
    let e = env(store).await;
    let body = fixture("pod-kai-fraction.json");
    let mut dry = body.clone();
    dry["request"]["dryRun"] = json!(true);
    let a = review(&e.client, e.server.webhook, &body).await;
    let b = review(&e.client, e.server.webhook, &dry).await;
    assert!(a["response"]["patch"].is_string());
    assert_eq!(a["response"]["patch"], b["response"]["patch"]);
}

/// docs/design/kai-admission.md#k10: a CronJob's pods come within milliseconds of their Job, often
/// before the watch has delivered the Job; the Job's name (`<cronjob>-<minutes>`) still finds
/// the CronJob's recommendation, and a Job's own recommendation still comes first.
#[tokio::test]
async fn cronjob_pod_before_its_job_is_known_gets_the_cronjob_recommendation() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("ml", WorkloadKind::CronJob, "nightly-eval"),
        gpu_state(&[("evaluator", 0.3)]),
    );
    let e = env(store.clone()).await;
    let body = fixture("pod-sidecar-init.json");
    let out = admit(&e, &body).await;
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.3"));
    assert_eq!(ann(&out, "gpu-fraction-container-name"), Some("evaluator"));

    // A Job named otherwise is not taken for the CronJob's.
    let mut manual = body.clone();
    manual["request"]["object"]["metadata"]["ownerReferences"][0]["name"] =
        json!("nightly-eval-manual");
    let resp = review(&e.client, e.server.webhook, &manual).await;
    assert!(resp["response"].get("patch").is_none(), "{resp}");

    // The Job's own recommendation wins over the name's CronJob.
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Job, "nightly-eval-29034720"),
        gpu_state(&[("evaluator", 0.5)]),
    );
    let out = admit(&e, &body).await;
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.5"));
}

/// docs/design/runtime.md#r12: a pod kerf cannot read in a protected namespace is skipped, with
/// no warning and no internal error counted; elsewhere it is kerf's problem, and says so.
#[tokio::test]
async fn unreadable_pod_in_a_protected_namespace_is_skipped_without_a_warning() {
    let e = env(Store::new()).await;
    let internal_errors = "kerf_admission_internal_errors_total";
    let (_, before) = get_text(e.server.health, "/metrics").await;
    let mut body = fixture("pod-kai-fraction.json");
    body["request"]["namespace"] = json!("kube-system");
    body["request"]["object"] = json!({"spec": {"containers": []}});
    let resp = review(&e.client, e.server.webhook, &body).await;
    assert_eq!(resp["response"]["allowed"], true);
    assert!(resp["response"].get("patch").is_none(), "{resp}");
    assert!(resp["response"].get("warnings").is_none(), "{resp}");
    body["request"]["object"] = json!({"metadata": "nope"});
    let resp = review(&e.client, e.server.webhook, &body).await;
    assert!(resp["response"].get("warnings").is_none(), "{resp}");
    let (_, after) = get_text(e.server.health, "/metrics").await;
    assert_eq!(
        process_metrics::value(&after, internal_errors),
        process_metrics::value(&before, internal_errors),
        "{after}"
    );

    body["request"]["namespace"] = json!("ml");
    body["request"]["object"] = json!({"spec": {"containers": []}});
    let resp = review(&e.client, e.server.webhook, &body).await;
    let w = resp["response"]["warnings"][0].as_str().unwrap_or_default();
    assert!(w.contains("the pod has no metadata"), "{resp}");
}

#[tokio::test]
async fn protected_namespace_and_unknown_workload_are_not_patched() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("kube-system", WorkloadKind::Deployment, "llm-serve"),
        gpu_state(&[("server", 0.4)]),
    );
    let e = env(store).await;
    let mut body = fixture("pod-kai-fraction.json");
    body["request"]["object"]["metadata"]["namespace"] = json!("kube-system");
    body["request"]["namespace"] = json!("kube-system");
    let resp = review(&e.client, e.server.webhook, &body).await;
    assert_eq!(resp["response"]["allowed"], true);
    assert!(resp["response"].get("patch").is_none(), "{resp}");
    // No store entry for ml/Deployment/llm-serve.
    let resp = review(
        &e.client,
        e.server.webhook,
        &fixture("pod-kai-fraction.json"),
    )
    .await;
    assert_eq!(resp["response"]["allowed"], true);
    assert!(resp["response"].get("patch").is_none(), "{resp}");
    // A pod without owner.
    let mut bare = fixture("pod-kai-fraction.json");
    bare["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    let resp = review(&e.client, e.server.webhook, &bare).await;
    assert!(resp["response"].get("patch").is_none(), "{resp}");
}

#[tokio::test]
async fn undecodable_object_is_allowed_with_warning_and_metric() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
        gpu_state(&[("server", 0.4)]),
    );
    let e = env(store).await;
    let (internal_errors, errors) = (
        "kerf_admission_internal_errors_total",
        r#"kerf_admission_requests_total{kind="Pod",operation="CREATE",outcome="error"}"#,
    );
    let (_, before) = get_text(e.server.health, "/metrics").await;
    let mut body = fixture("pod-kai-fraction.json");
    body["request"]["object"]["spec"]["containers"] = json!("not-a-list");
    let resp = review(&e.client, e.server.webhook, &body).await;
    assert_eq!(resp["response"]["allowed"], true);
    assert!(resp["response"].get("patch").is_none());
    let warnings = resp["response"]["warnings"].as_array().expect("warnings");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("could not be decoded") && w.contains("not-a-list"),
        "{warnings:?}"
    );
    // Metadata that does not decode is reported the same way.
    let mut bad_meta = fixture("pod-kai-fraction.json");
    bad_meta["request"]["object"]["metadata"]["ownerReferences"] = json!("nope");
    let resp2 = review(&e.client, e.server.webhook, &bad_meta).await;
    assert!(resp2["response"].get("patch").is_none());
    let w2 = resp2["response"]["warnings"][0].as_str().unwrap();
    assert!(w2.contains("could not be decoded"), "{resp2}");
    let (status, after) = get_text(e.server.health, "/metrics").await;
    assert_eq!(status, 200);
    for series in [internal_errors, errors] {
        assert_eq!(
            process_metrics::value(&after, series) - process_metrics::value(&before, series),
            2.0,
            "{series}: {after}"
        );
    }
}

#[tokio::test]
async fn not_json_and_wrong_version_are_400() {
    let e = env(Store::new()).await;
    let resp = e
        .client
        .post(url(e.server.webhook, "/mutate"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("not JSON"));
    let mut v1beta1 = fixture("pod-kai-fraction.json");
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let resp = e
        .client
        .post(url(e.server.webhook, "/mutate"))
        .json(&v1beta1)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let text = resp.text().await.unwrap();
    assert!(text.contains("admission.k8s.io/v1beta1"), "{text}");
    let resp = e
        .client
        .post(url(e.server.webhook, "/mutate"))
        .json(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("no request"));
}

#[tokio::test]
async fn body_over_3_mib_is_413() {
    let e = env(Store::new()).await;
    let mut body = fixture("pod-kai-fraction.json");
    body["request"]["object"]["metadata"]["annotations"]["big"] =
        json!("x".repeat(3 * 1024 * 1024));
    let resp = e
        .client
        .post(url(e.server.webhook, "/mutate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    // Just under the limit is fine.
    let mut ok = fixture("pod-kai-fraction.json");
    ok["request"]["object"]["metadata"]["annotations"]["big"] =
        json!("x".repeat(3 * 1024 * 1024 - 8 * 1024));
    let resp = e
        .client
        .post(url(e.server.webhook, "/mutate"))
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn http2_over_alpn_works() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
        gpu_state(&[("server", 0.4)]),
    );
    let e = env(store).await;
    let h2 = client(&e.pki.ca_pem(), e.server.webhook, true);
    let body = fixture("pod-kai-fraction.json");
    let resp = h2
        .post(url(e.server.webhook, "/mutate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let v: Value = resp.json().await.unwrap();
    let out = apply(&body["request"]["object"], &v);
    assert_eq!(ann(&out, "gpu-fraction"), Some("0.4"));
    // And HTTP/1.1 keep-alive on the same server.
    let resp = e
        .client
        .post(url(e.server.webhook, "/mutate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_11);
}

#[tokio::test]
async fn health_endpoints() {
    let store = Store::new();
    store.put(
        WorkloadKey::new("ml", WorkloadKind::Deployment, "llm-serve"),
        gpu_state(&[("server", 0.4)]),
    );
    let e = env(store.clone()).await;
    let h = e.server.health;
    assert_eq!(get_text(h, "/healthz").await.0, 200);
    let (status, text) = get_text(h, "/readyz").await;
    assert_eq!(status, 503, "{text}");
    store.set_ready(true);
    assert_eq!(get_text(h, "/readyz").await.0, 200);

    let (_, before) = get_text(h, "/metrics").await;
    let _ = review(
        &e.client,
        e.server.webhook,
        &fixture("pod-kai-fraction.json"),
    )
    .await;
    let (status, after) = get_text(h, "/metrics").await;
    assert_eq!(status, 200);
    for series in [
        r#"kerf_admission_requests_total{kind="Pod",operation="CREATE",outcome="patched"}"#,
        r#"kerf_admission_patches_total{kind="Pod"}"#,
        "kerf_admission_duration_seconds_count",
    ] {
        assert_eq!(
            process_metrics::value(&after, series) - process_metrics::value(&before, series),
            1.0,
            "{series}: {after}"
        );
    }

    let (status, body) = get_text(h, "/debug/recommendations").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["workloads"][0]["workload"]["name"], "llm-serve");
    assert_eq!(
        v["workloads"][0]["gpuRecommendation"]["containers"]["server"],
        "0.4"
    );
    let (status, page) = get_text(h, "/debug/recommendations?format=html").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<svg") && page.contains("ml/Deployment/llm-serve"),
        "{page}"
    );
    assert_eq!(get_text(h, "/debug").await.0, 200);
}

#[tokio::test]
async fn readyz_says_what_it_waits_for_and_healthz_fails_once_a_required_task_stopped() {
    let store = Store::new();
    let e = env(store.clone()).await;
    let h = e.server.health;
    let unsynced = std::collections::BTreeSet::from(["Pod"]);
    store.health().caches_pending(&unsynced, 17);
    store
        .health()
        .record_error("Pod", "list failed: 403 Forbidden: pods is forbidden");
    let (status, body) = get_text(h, "/readyz").await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        "not ready: waiting for the caches to sync\n\
         caches not synced (1 of 17): Pod\n\
         annotations read back: not yet (they are read once every cache has synced)\n\
         last errors:\n  \
         Pod (0s ago): list failed: 403 Forbidden: pods is forbidden\n"
    );
    assert_eq!(get_text(h, "/healthz").await, (200, "ok\n".to_string()));

    store.set_ready(true);
    store
        .health()
        .task_stopped("reconciler", "the writer task stopped");
    let why = "reconciler stopped: the writer task stopped";
    assert_eq!(
        get_text(h, "/healthz").await,
        (503, format!("unhealthy: {why}\n")),
        "the liveness probe fails: the kubelet restarts the pod"
    );
    assert_eq!(
        get_text(h, "/readyz").await,
        (503, format!("not ready: {why}\n"))
    );
}
