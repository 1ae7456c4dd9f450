//! End to end without a cluster: the shipped manifests + a real Prometheus (or the OpenMetrics
//! file) → the real `kerf` binary (`recommend`, `serve --standalone`) → AdmissionReviews over TLS.

use crate::kerf_cli;
use crate::prometheus_support;
use crate::support;
use std::process::Command;
use std::time::{Duration, Instant};

use kerf_cli::{AT, root};
use prometheus_support::TestPrometheus;
use serde_json::{Value, json};
use support::*;

fn recommend(manifests: &str, source: &[&str]) -> Value {
    kerf_cli::recommend(manifests, source, &[])
}

fn prometheus_with(file: &str) -> TestPrometheus {
    TestPrometheus::start_with_openmetrics(&std::fs::read_to_string(root().join(file)).unwrap())
}

#[test]
fn gpu_scenario_gives_the_same_recommendation_from_the_file_and_from_prometheus() {
    let prom = prometheus_with("examples/metrics.om");
    let from_file = recommend("examples/manifests", &["--metrics", "examples/metrics.om"]);
    let from_prom = recommend("examples/manifests", &["--prometheus", &prom.url()]);
    assert_eq!(from_file, from_prom);
    let llm = &from_prom["recommendations"][0];
    assert_eq!(llm["name"], "llm");
    assert!(
        (llm["gpu"]["containers"]["inference"]["recommended"]
            .as_f64()
            .unwrap()
            - 0.84)
            .abs()
            < 1e-9
    );
}

#[test]
fn hpa_scenario_gives_the_same_coordinated_target_from_the_file_and_from_prometheus() {
    let prom = prometheus_with("examples/hpa/metrics.om");
    let from_file = recommend(
        "examples/hpa/manifests",
        &["--metrics", "examples/hpa/metrics.om"],
    );
    let from_prom = recommend("examples/hpa/manifests", &["--prometheus", &prom.url()]);
    for v in [&from_file, &from_prom] {
        let web = &v["recommendations"][0];
        assert_eq!(web["resources"]["app"]["cpu"]["recommended"], "700m", "{v}");
        assert_eq!(web["hpa"]["targetAfter"], 71, "{v}");
    }
    assert_eq!(
        from_file["recommendations"][0]["hpa"],
        from_prom["recommendations"][0]["hpa"]
    );
}

#[test]
fn prometheus_down_keeps_the_persisted_recommendations_and_says_why() {
    let mut prom = prometheus_with("examples/metrics.om");
    let url = prom.url();
    prom.stop();
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args([
            "recommend",
            "--manifests",
            "examples/manifests",
            "--prometheus",
            &url,
            "--at",
            AT,
            "-o",
            "json",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    // Every query failed: the output is printed, and the exit code says nothing was read.
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("query failed"), "{stderr}");
    assert!(stderr.contains("every metric query failed"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recs = v["recommendations"].as_array().unwrap();
    let embedder = recs.iter().find(|r| r["name"] == "embedder").unwrap();
    assert_eq!(
        embedder["gpu"]["action"], "reuse",
        "last recommendation stays in force"
    );
    assert_eq!(embedder["gpu"]["containers"]["encoder"]["recommended"], 0.9);
    assert_eq!(
        embedder["gpu"]["containers"]["encoder"]["baseline"], 0.5,
        "baseline untouched"
    );
    let llm = recs.iter().find(|r| r["name"] == "llm").unwrap();
    assert_eq!(
        llm["gpu"]["action"], "none",
        "no flapping: nothing new without data"
    );
    prom.restart();
    let back = recommend("examples/manifests", &["--prometheus", &prom.url()]);
    assert_eq!(
        back["recommendations"][0]["gpu"]["action"], "upsize",
        "recovers automatically"
    );
}

async fn serve_standalone(manifests: &str, source: &[&str]) -> Serve {
    serve_standalone_with(manifests, source, &[]).await
}

/// [`support::serve_standalone`] on `manifests` at the examples' time, with extra environment.
async fn serve_standalone_with(manifests: &str, source: &[&str], env: &[(&str, &str)]) -> Serve {
    let args = [&["--manifests", manifests, "--at", AT][..], source].concat();
    support::serve_standalone(&args, env, None).await
}

fn new_llm_pod_review() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "e2e-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "generateName": "llm-5f7c9d8b6-",
                    "namespace": "ml",
                    "labels": {"app": "llm", "tier": "gpu-inference", "pod-template-hash": "5f7c9d8b6"},
                    "annotations": {"gpu-fraction": "0.5"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-5f7c9d8b6",
                                         "uid": "u", "controller": true}]
                },
                "spec": {"containers": [{"name": "inference", "image": "i"}, {"name": "proxy", "image": "p"}]}
            }
        }
    })
}

#[tokio::test]
async fn serve_standalone_with_real_prometheus_sets_the_recommended_gpu_fraction() {
    let prom = prometheus_with("examples/metrics.om");
    let s = serve_standalone("examples/manifests", &["--prometheus", &prom.url()]).await;
    let review_body = new_llm_pod_review();
    let resp = review(
        &client(&s.pki.ca_pem(), s.webhook, false),
        s.webhook,
        &review_body,
    )
    .await;
    assert_eq!(resp["response"]["uid"], "e2e-1");
    let pod = apply(&review_body["request"]["object"], &resp);
    assert_eq!(pod["metadata"]["annotations"]["gpu-fraction"], "0.84");
    assert_eq!(pod["spec"]["schedulerName"], "kai-scheduler");
    assert_eq!(
        pod["metadata"]["labels"]["kai.scheduler/queue"],
        "kerf-gpu-queue"
    );
    assert!(
        pod["metadata"]["annotations"]["rightsizing.kubex.ai/mutated"]
            .as_str()
            .unwrap()
            .contains("gpu-reactive")
    );
    // Reinvocation on the patched pod changes nothing.
    let again = review(
        &client(&s.pki.ca_pem(), s.webhook, false),
        s.webhook,
        &with_object(&review_body, pod.clone(), "e2e-2"),
    )
    .await;
    assert_eq!(apply(&pod, &again), pod);
}

#[tokio::test]
async fn serve_standalone_sets_the_coordinated_hpa_target_at_admission() {
    let s = serve_standalone(
        "examples/hpa/manifests",
        &["--metrics", "examples/hpa/metrics.om"],
    )
    .await;
    let body = fixture("hpa-cpu.json");
    let resp = review(&client(&s.pki.ca_pem(), s.webhook, false), s.webhook, &body).await;
    let hpa = apply(&body["request"]["object"], &resp);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        71
    );
    // A new pod of the Deployment gets the auto-patch CPU request.
    let pod_review = fixture("pod-web.json");
    let resp = review(
        &client(&s.pki.ca_pem(), s.webhook, false),
        s.webhook,
        &pod_review,
    )
    .await;
    let pod = apply(&pod_review["request"]["object"], &resp);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "700m"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["requests"]["memory"], "512Mi",
        "memory is audit-only"
    );
    let (code, debug) = get_text(s.health, "/debug/recommendations").await;
    assert_eq!(code, 200);
    // One key style, the CRDs' camelCase, all the way down.
    let debug: serde_json::Value = serde_json::from_str(&debug).unwrap();
    let web = &debug["workloads"][0];
    assert_eq!(web["workload"]["name"], "web", "{debug}");
    assert_eq!(web["resources"]["app"]["cpuMillis"], 700, "{debug}");
    assert_eq!(web["hpa"]["hpaName"], "web", "{debug}");
    assert_eq!(
        (&web["hpa"]["targetBefore"], &web["hpa"]["targetAfter"]),
        (&serde_json::json!(50), &serde_json::json!(71)),
        "{debug}"
    );
    fn snake_keys(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, child) in m {
                    // Container names and map keys are the user's; kerf's keys are camelCase.
                    if k.contains('_') {
                        out.push(format!("{path}.{k}"));
                    }
                    snake_keys(child, &format!("{path}.{k}"), out);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    snake_keys(child, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut snake = Vec::new();
    snake_keys(&debug, "", &mut snake);
    assert!(snake.is_empty(), "snake_case keys: {snake:?}");
    // Every cycle counted is timed, in standalone mode as in-cluster.
    let cycles = counter(s.health, "kerf_reconcile_cycles_total").await;
    assert!(cycles >= 1.0);
    assert_eq!(
        counter(s.health, "kerf_reconcile_duration_seconds_count").await,
        cycles
    );
}

/// The value of an unlabelled counter on `/metrics`.
async fn counter(health: std::net::SocketAddr, name: &str) -> f64 {
    let (code, text) = get_text(health, "/metrics").await;
    assert_eq!(code, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} not on /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits until `name` reaches `at_least` (the standalone loop runs every second here).
async fn wait_for_counter(health: std::net::SocketAddr, name: &str, at_least: f64) {
    let start = Instant::now();
    while counter(health, name).await < at_least {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{name} never reached {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One loop for every mode: standalone serve feeds the last recommendation back to the next
/// cycle (in-memory writer), so an outage longer than an interval changes no admission answer.
#[tokio::test]
async fn standalone_serve_keeps_its_recommendations_through_a_prometheus_outage() {
    let mut prom = prometheus_with("examples/metrics.om");
    let s = serve_standalone(
        "examples/manifests",
        &["--prometheus", &prom.url(), "--interval-seconds", "1"],
    )
    .await;
    let body = new_llm_pod_review();
    let fraction = |resp: &Value| {
        apply(&body["request"]["object"], resp)["metadata"]["annotations"]["gpu-fraction"].clone()
    };
    let webhook = client(&s.pki.ca_pem(), s.webhook, false);
    assert_eq!(fraction(&review(&webhook, s.webhook, &body).await), "0.84");

    prom.stop();
    let errors = counter(s.health, "kerf_reconcile_errors_total").await;
    // Three failed cycles: well over one interval without Prometheus.
    wait_for_counter(s.health, "kerf_reconcile_errors_total", errors + 3.0).await;
    assert_eq!(
        fraction(&review(&webhook, s.webhook, &body).await),
        "0.84",
        "the last recommendation stays in force while Prometheus is down"
    );
    let (_, debug) = get_text(s.health, "/debug/recommendations").await;
    assert!(debug.contains("0.84"), "{debug}");

    prom.restart();
    let errors = counter(s.health, "kerf_reconcile_errors_total").await;
    let cycles = counter(s.health, "kerf_reconcile_cycles_total").await;
    wait_for_counter(s.health, "kerf_reconcile_cycles_total", cycles + 3.0).await;
    assert!(
        counter(s.health, "kerf_reconcile_errors_total").await <= errors + 1.0,
        "cycles succeed again once Prometheus is back"
    );
    assert_eq!(fraction(&review(&webhook, s.webhook, &body).await), "0.84");
}

/// docs/design/runtime.md#r12: kerf's own namespace — `POD_NAMESPACE` (downward API), else the
/// service-account namespace file — is always protected, whatever `protectedNamespaces` says, in
/// every mode: `kerf serve --standalone` neither recommends for nor mutates pods there.
#[tokio::test]
async fn kerfs_own_namespace_is_protected_in_standalone_mode() {
    let files = tempfile::tempdir().unwrap();
    let namespace_file = files.path().join("namespace");
    std::fs::write(&namespace_file, "ml\n").unwrap();
    let namespace_file = namespace_file.to_str().unwrap().to_string();
    for env in [
        vec![("POD_NAMESPACE", "ml")],
        vec![("KERF_NAMESPACE_FILE", namespace_file.as_str())],
    ] {
        let s = serve_standalone_with(
            "examples/manifests",
            &["--metrics", "examples/metrics.om"],
            &env,
        )
        .await;
        let resp = review(
            &client(&s.pki.ca_pem(), s.webhook, false),
            s.webhook,
            &new_llm_pod_review(),
        )
        .await;
        assert!(
            resp["response"].get("patch").is_none(),
            "{env:?}: the pod of kerf's own namespace is admitted unchanged: {resp}"
        );
        let (_, debug) = get_text(s.health, "/debug/recommendations").await;
        assert!(!debug.contains("llm"), "{env:?}: {debug}");
    }
    // Elsewhere kerf still works: the same manifests without the namespace.
    let s = serve_standalone("examples/manifests", &["--metrics", "examples/metrics.om"]).await;
    let resp = review(
        &client(&s.pki.ca_pem(), s.webhook, false),
        s.webhook,
        &new_llm_pod_review(),
    )
    .await;
    assert!(resp["response"].get("patch").is_some(), "{resp}");
}
