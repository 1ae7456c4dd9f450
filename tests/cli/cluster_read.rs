//! `kerf recommend` against a live cluster, read-only: a fake API server holding the shipped
//! examples' objects gives, through `--kubeconfig`, the same answer as `--manifests`; the fake
//! refuses writes and watches and the tests assert none was attempted. `kubectl get -o yaml`
//! output of the same fake (a `kind: List`, server fields included) is read as manifests. The
//! fake itself is checked with the real `kubectl`.

use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::fake_cluster::{FakeCluster, objects_of};
use crate::kerf_cli::{AT, root, stderr};

fn kerf(args: Vec<String>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        // An environment setting must not pick the objects for the test.
        .env_remove("KERF_MANIFESTS")
        .env_remove("KERF_KUBECONFIG")
        .output()
        .unwrap()
}

/// `kerf recommend … -o json` with `objects` (`--manifests DIR` or `--kubeconfig K …`).
async fn recommend(objects: &[&str], metrics: &str) -> Value {
    let mut args: Vec<String> = vec!["recommend".into()];
    args.extend(objects.iter().map(|s| s.to_string()));
    args.extend(["--metrics", metrics, "--at", AT, "-o", "json"].map(String::from));
    let out = tokio::task::spawn_blocking(move || kerf(args))
        .await
        .unwrap();
    assert!(out.status.success(), "{objects:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The output without `inPlaceResize`: a cluster says whether it serves `pods/resize`, a
/// directory assumes it.
fn without_resize(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("inPlaceResize");
    v
}

/// What the API server adds to what was applied: identity, version, a field manager, status.
fn as_served(mut o: Value, n: usize) -> Value {
    let md = o["metadata"].as_object_mut().unwrap();
    md.insert(
        "uid".into(),
        json!(format!("00000000-0000-0000-0000-{n:012}")),
    );
    md.insert("resourceVersion".into(), json!(format!("{}", 100 + n)));
    md.entry("namespace").or_insert(json!("default"));
    // Created in the order the files list them, as `kubectl apply -f` does.
    md.entry("creationTimestamp").or_insert(json!(format!(
        "2025-12-02T00:{:02}:{:02}Z",
        n / 60,
        n % 60
    )));
    let kerf_kind = o["apiVersion"]
        .as_str()
        .unwrap()
        .starts_with("rightsizing.kubex.ai/");
    if kerf_kind || o["kind"] == "Pod" {
        // Fields kerf's kinds must accept from a server (kerf ignores a pod's managers).
        o["metadata"]["managedFields"] = json!([{
            "manager": "kubectl-client-side-apply", "operation": "Update",
            "apiVersion": o["apiVersion"], "time": "2025-12-01T00:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}
        }]);
        o["metadata"]["generation"] = json!(1);
    }
    // The policy kinds have a status (a strategy or the configuration has none).
    if o["kind"].as_str().is_some_and(|k| k.ends_with("Policy")) {
        o["status"] = json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "Evaluated", "message": "", "lastTransitionTime": "2025-12-01T00:00:00Z"}]});
    }
    o
}

fn served_objects(dirs: &[&str]) -> Vec<Value> {
    dirs.iter()
        .flat_map(|d| objects_of(&root().join(d)))
        .enumerate()
        .map(|(n, o)| {
            // Cluster-scoped kinds carry no namespace on a server.
            let cluster_scoped = matches!(
                o["kind"].as_str(),
                Some("GlobalConfiguration" | "PolicyEvaluation" | "ClusterGpuReactivePolicy")
            );
            let mut o = as_served(o, n);
            if cluster_scoped {
                o["metadata"].as_object_mut().unwrap().remove("namespace");
            }
            o
        })
        .collect()
}

fn assert_read_only(fake: &FakeCluster) {
    let refused = fake.refused();
    assert!(
        refused.is_empty(),
        "kerf sent writes or watches: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_through_a_kubeconfig_gives_the_same_recommendations_as_its_manifests() {
    for (dir, metrics) in [
        ("examples/manifests", "examples/metrics.om"),
        ("examples/hpa/manifests", "examples/hpa/metrics.om"),
        // Workloads under KServe, Knative, LWS, Argo Rollouts, KubeRay and Grove.
        (
            "tests/fixtures/workloads/manifests",
            "tests/fixtures/workloads/metrics.om",
        ),
    ] {
        let fake = FakeCluster::start(served_objects(&[dir])).await;
        let tmp = tempfile::tempdir().unwrap();
        let kubeconfig = fake.kubeconfig(tmp.path());
        let from_cluster = recommend(
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--context",
                "fake",
            ],
            metrics,
        )
        .await;
        let from_files = recommend(&["--manifests", dir], metrics).await;
        assert!(
            !from_files["recommendations"].as_array().unwrap().is_empty(),
            "{dir}: {from_files}"
        );
        assert_eq!(from_cluster["inPlaceResize"], "notServed", "{dir}");
        assert_eq!(
            without_resize(from_cluster),
            without_resize(from_files),
            "{dir}"
        );
        assert_read_only(&fake);
        let lists = fake.lists();
        // Every kind the in-cluster reader watches was listed, cluster-wide…
        for plural in [
            "/api/v1/pods?",
            "/apis/apps/v1/deployments?",
            "/apis/apps/v1/statefulsets?",
            "/apis/apps/v1/daemonsets?",
            "/apis/apps/v1/replicasets?",
            "/apis/batch/v1/jobs?",
            "/apis/batch/v1/cronjobs?",
            "/apis/autoscaling/v2/horizontalpodautoscalers?",
        ] {
            assert!(
                lists.iter().any(|l| l.starts_with(plural)),
                "{plural} not listed: {lists:?}"
            );
        }
        for (_, crd) in kerf::api::crds() {
            let path = format!(
                "/apis/rightsizing.kubex.ai/v1alpha1/{}?",
                crd.spec.names.plural
            );
            assert!(
                lists.iter().any(|l| l.starts_with(&path)),
                "{path}: {lists:?}"
            );
        }
        // …and page by page (the fake answers one object per page).
        assert!(lists.iter().any(|l| l.contains("continue=")), "{lists:?}");
    }
}

/// A VerticalPodAutoscaler in the cluster is listed with the rest and blocks the workload it
/// sets requests of (`VPAConflict`), as from a directory; a cluster without the VPA CRD (the
/// test above) is not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vpa_in_the_cluster_blocks_its_workload_as_from_the_manifests() {
    let mut objects = served_objects(&["examples/hpa/manifests"]);
    let n = objects.len();
    objects.push(as_served(
        json!({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
               "metadata": {"name": "web-vpa", "namespace": "shop"},
               "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                        "updatePolicy": {"updateMode": "InPlaceOrRecreate"}}}),
        n,
    ));
    let fake = FakeCluster::with_vpa_crd(objects).await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path());
    let v = recommend(
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            "fake",
        ],
        "examples/hpa/metrics.om",
    )
    .await;
    let web = v["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "web")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(web["phase"], "blocked", "{web:#}");
    assert_eq!(web["reason"], "VPAConflict", "{web:#}");
    assert!(
        web["reasons"][0]
            .as_str()
            .unwrap()
            .contains("VerticalPodAutoscaler shop/web-vpa"),
        "{web:#}"
    );
    assert!(
        fake.lists()
            .iter()
            .any(|l| l.starts_with("/apis/autoscaling.k8s.io/v1/verticalpodautoscalers?")),
        "{:?}",
        fake.lists()
    );
    assert_read_only(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_lists_one_namespace_and_still_reads_the_cluster_configuration() {
    let fake = FakeCluster::start(served_objects(&[
        "examples/manifests",
        "examples/hpa/manifests",
    ]))
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path());
    let shop = recommend(
        &["--kubeconfig", kubeconfig.to_str().unwrap(), "-n", "shop"],
        "examples/hpa/metrics.om",
    )
    .await;
    let files = recommend(
        &["--manifests", "examples/hpa/manifests"],
        "examples/hpa/metrics.om",
    )
    .await;
    assert_eq!(
        shop["inPlaceResize"], "notServed",
        "the fake cluster serves 1.32's API"
    );
    assert_eq!(files["inPlaceResize"], "assumed");
    assert_eq!(without_resize(shop), without_resize(files));
    assert_read_only(&fake);
    let lists = fake.lists();
    assert!(
        lists
            .iter()
            .any(|l| l.starts_with("/api/v1/namespaces/shop/pods?")),
        "{lists:?}"
    );
    assert!(
        !lists.iter().any(|l| l.starts_with("/api/v1/pods?")),
        "pods listed cluster-wide: {lists:?}"
    );
    // The cluster-scoped configuration is read whatever the namespace.
    assert!(
        lists
            .iter()
            .any(|l| l.starts_with("/apis/rightsizing.kubex.ai/v1alpha1/globalconfigurations?")),
        "{lists:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_yaml_output_is_read_as_manifests() {
    let fake = FakeCluster::start(served_objects(&["examples/manifests"])).await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path());
    let list_file = tmp.path().join("cluster.yaml");
    let (k, f) = (kubeconfig.clone(), list_file.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&k)
            .args([
                "get",
                "globalconfigurations,gpureactivepolicies,automationstrategies,deployments,replicasets,pods",
                "-A",
                "-o",
                "yaml",
            ])
            .output()
            .expect("kubectl runs (scripts/test installs it)")
    })
    .await
    .unwrap();
    assert!(out.status.success(), "kubectl: {}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let list: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(list["kind"], "List", "{text}");
    // Server fields as kubectl prints them (managedFields only with --show-managed-fields).
    assert!(text.contains("uid:") && text.contains("status:"), "{text}");
    std::fs::write(&f, &text).unwrap();
    assert_read_only(&fake);

    let from_list = recommend(
        &["--manifests", list_file.to_str().unwrap()],
        "examples/metrics.om",
    )
    .await;
    let from_files = recommend(
        &["--manifests", "examples/manifests"],
        "examples/metrics.om",
    )
    .await;
    assert_eq!(from_list, from_files);
}

#[test]
fn manifests_and_kubeconfig_exclude_each_other_and_one_is_required() {
    let both = kerf(
        [
            "recommend",
            "--manifests",
            "examples/manifests",
            "--kubeconfig",
            "/nonexistent",
            "--metrics",
            "examples/metrics.om",
        ]
        .map(String::from)
        .to_vec(),
    );
    assert!(!both.status.success());
    assert!(
        stderr(&both).contains("cannot be used with"),
        "{}",
        stderr(&both)
    );
    let none = kerf(
        [
            "simulate",
            "--metrics",
            "examples/metrics.om",
            "--from",
            AT,
            "--to",
            AT,
        ]
        .map(String::from)
        .to_vec(),
    );
    assert!(!none.status.success());
    let err = stderr(&none);
    assert!(
        err.contains("--manifests <PATH>|--kubeconfig <PATH>"),
        "{err}"
    );
    // --context and --namespace are for a cluster.
    let context = kerf(
        [
            "recommend",
            "--manifests",
            "examples/manifests",
            "--context",
            "x",
            "--metrics",
            "examples/metrics.om",
        ]
        .map(String::from)
        .to_vec(),
    );
    assert!(!context.status.success());
    assert!(
        stderr(&context).contains("--kubeconfig"),
        "{}",
        stderr(&context)
    );
}

/// The kubeconfig's problems name the flag: a missing file, an unknown context.
#[test]
fn a_bad_kubeconfig_or_context_names_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let out = kerf(vec![
        "recommend".into(),
        "--kubeconfig".into(),
        missing.display().to_string(),
        "--metrics".into(),
        "examples/metrics.om".into(),
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("--kubeconfig {}", missing.display())),
        "{}",
        stderr(&out)
    );
    let config = crate::apiserver::kubeconfig(tmp.path(), "http://127.0.0.1:1", "t");
    let out = kerf(vec![
        "recommend".into(),
        "--kubeconfig".into(),
        config.display().to_string(),
        "--context".into(),
        "nope".into(),
        "--metrics".into(),
        "examples/metrics.om".into(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--context nope"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_through_a_kubeconfig_is_the_same_replay_as_through_the_manifests() {
    let fake = FakeCluster::start(served_objects(&["examples/manifests"])).await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path()).display().to_string();
    let replay = |objects: Vec<String>| {
        let mut args: Vec<String> = vec!["simulate".into()];
        args.extend(objects);
        args.extend(
            [
                "--metrics",
                "examples/metrics.om",
                "--from",
                "2026-01-01T11:40:00Z",
                "--to",
                "2026-01-01T12:00:00Z",
                "-o",
                "json",
            ]
            .map(String::from),
        );
        tokio::task::spawn_blocking(move || kerf(args))
    };
    let from_cluster = replay(vec!["--kubeconfig".into(), kubeconfig])
        .await
        .unwrap();
    let from_files = replay(vec!["--manifests".into(), "examples/manifests".into()])
        .await
        .unwrap();
    assert!(from_files.status.success(), "{}", stderr(&from_files));
    assert!(from_cluster.status.success(), "{}", stderr(&from_cluster));
    let (a, b): (Value, Value) = (
        serde_json::from_slice(&from_cluster.stdout).unwrap(),
        serde_json::from_slice(&from_files.stdout).unwrap(),
    );
    assert!(!b["workloads"].as_array().unwrap().is_empty(), "{b}");
    assert_eq!(a, b);
    assert_read_only(&fake);
}

/// Before kerf's CRDs are installed the cluster has no policies: said on stderr, not an error,
/// and nothing is recommended (no policy is not "no change").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_kerfs_crds_says_so() {
    let workloads: Vec<Value> = served_objects(&["examples/manifests"])
        .into_iter()
        .filter(|o| {
            !o["apiVersion"]
                .as_str()
                .unwrap()
                .starts_with("rightsizing.kubex.ai/")
        })
        .collect();
    let fake = FakeCluster::without_kerf_crds(workloads).await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = fake.kubeconfig(tmp.path()).display().to_string();
    let args: Vec<String> = [
        "recommend",
        "--kubeconfig",
        &kubeconfig,
        "--metrics",
        "examples/metrics.om",
        "--at",
        AT,
    ]
    .map(String::from)
    .to_vec();
    let out = tokio::task::spawn_blocking(move || kerf(args))
        .await
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("kerf's CRDs are not installed"), "{err}");
    assert!(err.contains("GpuReactivePolicy"), "{err}");
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("(no workload is matched by a GPU reactive policy)"),
        "{table}"
    );
    // Nothing refused: every kerf kind was asked for by a list, and answered 404.
    assert_read_only(&fake);
}

/// A list the kubeconfig's user may not make names the resource and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_list_names_the_resource_and_the_fix() {
    use crate::apiserver::{Answer, MockApiServer};
    let api = MockApiServer::start(|r| match r.path {
        "/api/v1/pods" => Answer::Json(
            403,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "pods is forbidden: User \"dev\" cannot list resource \"pods\"",
                   "reason": "Forbidden", "code": 403}),
        ),
        _ => Answer::Json(
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
        ),
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = api
        .kubeconfig(tmp.path(), "secret-token")
        .display()
        .to_string();
    let args: Vec<String> = [
        "recommend",
        "--kubeconfig",
        &kubeconfig,
        "--metrics",
        "examples/metrics.om",
        "--at",
        AT,
    ]
    .map(String::from)
    .to_vec();
    let out = tokio::task::spawn_blocking(move || kerf(args))
        .await
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("listing pods in every namespace"), "{err}");
    assert!(err.contains("cannot list resource"), "{err}");
    assert!(err.contains("--namespace lists one namespace"), "{err}");
    assert!(!err.contains("secret-token"), "{err}");
}
