//! `kerf recommend` as a user runs it: the real binary on the shipped examples and on bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const AT: &str = "2026-01-01T12:00:00Z";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kerf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("kerf runs")
}

fn recommend_json(manifests: &Path, metrics: &Path) -> Value {
    let out = recommend(manifests, metrics, &["-o", "json"]);
    serde_json::from_slice(&out).expect("stdout is JSON")
}

/// `kerf recommend`'s standard output for `manifests` and `metrics` at [`AT`], with `extra`
/// arguments; it must succeed.
fn recommend(manifests: &Path, metrics: &Path, extra: &[&str]) -> Vec<u8> {
    let mut args = vec![
        "recommend",
        "--manifests",
        manifests.to_str().unwrap(),
        "--metrics",
        metrics.to_str().unwrap(),
        "--at",
        AT,
    ];
    args.extend_from_slice(extra);
    let out = kerf(&args);
    assert!(
        out.status.success(),
        "kerf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `kerf recommend`'s table for `manifests` and `metrics` at [`AT`].
fn recommend_table(manifests: &Path, metrics: &Path) -> String {
    String::from_utf8(recommend(manifests, metrics, &[])).expect("the table is text")
}

fn entry<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no recommendation for {name}: {v}"))
}

#[test]
fn examples_produce_an_upsize_and_a_scale_back() {
    let v = recommend_json(
        &root().join("examples/manifests"),
        &root().join("examples/metrics.om"),
    );
    assert_eq!(
        v["recommendations"].as_array().unwrap().len(),
        2,
        "one entry per GPU-policy workload"
    );
    let llm = entry(&v, "llm");
    assert_eq!(llm["namespace"], "ml");
    assert_eq!(llm["kind"], "Deployment");
    assert_eq!(
        llm["policy"],
        serde_json::json!({"kind": "GpuReactivePolicy", "namespace": "ml", "name": "gpu-reactive"})
    );
    assert_eq!(llm["gpu"]["action"], "upsize");
    assert_eq!(llm["gpu"]["drivingMetric"], "compute");
    let inference = &llm["gpu"]["containers"]["inference"];
    assert_eq!(inference["current"], 0.5);
    assert_eq!(inference["baseline"], 0.5);
    assert!((inference["recommended"].as_f64().unwrap() - 0.84).abs() < 1e-9);
    let proxy = &llm["gpu"]["containers"]["proxy"];
    assert!(proxy["current"].is_null() && proxy["recommended"].is_null());
    assert!(
        llm["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("proxy"))
    );

    let emb = entry(&v, "embedder");
    assert_eq!(emb["gpu"]["action"], "scaleBack");
    assert_eq!(emb["gpu"]["containers"]["encoder"]["current"], 0.9);
    assert_eq!(emb["gpu"]["containers"]["encoder"]["recommended"], 0.5);
}

#[test]
fn json_keys_follow_the_documented_order() {
    let out = kerf(&[
        "recommend",
        "--manifests",
        "examples/manifests",
        "--metrics",
        "examples/metrics.om",
        "--at",
        AT,
        "-o",
        "json",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let pos = |k: &str| {
        text.find(&format!("\"{k}\""))
            .unwrap_or_else(|| panic!("{k} missing"))
    };
    assert!(
        pos("namespace") < pos("kind") && pos("kind") < pos("name") && pos("name") < pos("policy")
    );
    assert!(pos("policy") < pos("gpu") && pos("gpu") < pos("reasons"));
    assert!(pos("action") < pos("drivingMetric") && pos("drivingMetric") < pos("containers"));
    assert!(pos("current") < pos("baseline") && pos("baseline") < pos("recommended"));
}

#[test]
fn table_output_lists_every_container() {
    let text = recommend_table(
        Path::new("examples/manifests"),
        Path::new("examples/metrics.om"),
    );
    let mut lines = text.lines().skip_while(|l| !l.starts_with("WORKLOAD"));
    assert_eq!(
        lines
            .next()
            .map(|h| h.split_whitespace().collect::<Vec<_>>()),
        Some(vec![
            "WORKLOAD",
            "CONTAINER",
            "ACTION",
            "DRIVER",
            "CURRENT",
            "BASELINE",
            "RECOMMENDED",
            "POLICY"
        ]),
        "{text}"
    );
    // One row per container of every workload (reasons are indented under their workload).
    let rows: Vec<Vec<&str>> = lines
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let policy = "GpuReactivePolicy/ml/gpu-reactive";
    assert_eq!(
        rows,
        [
            [
                "ml/Deployment/llm",
                "inference",
                "upsize",
                "compute",
                "0.5",
                "0.5",
                "0.84",
                policy
            ],
            [
                "ml/Deployment/llm",
                "proxy",
                "upsize",
                "compute",
                "-",
                "-",
                "-",
                policy
            ],
            [
                "ml/Deployment/embedder",
                "encoder",
                "scaleBack",
                "compute",
                "0.9",
                "0.5",
                "0.5",
                policy
            ],
        ],
        "{text}"
    );
}

/// Copies the examples into a temp dir, lets `edit` break one file, and returns kerf's stderr.
fn fails_with(edit: impl FnOnce(&Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    for f in std::fs::read_dir(root().join("examples/manifests")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, manifests.join(f.file_name().unwrap())).unwrap();
    }
    std::fs::copy(
        root().join("examples/metrics.om"),
        dir.path().join("metrics.om"),
    )
    .unwrap();
    edit(dir.path());
    let out = kerf(&[
        "recommend",
        "--manifests",
        manifests.to_str().unwrap(),
        "--metrics",
        dir.path().join("metrics.om").to_str().unwrap(),
        "--at",
        AT,
    ]);
    assert!(!out.status.success(), "kerf accepted bad input");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn invalid_policy_is_rejected_naming_file_object_and_field() {
    let err = fails_with(|d| {
        let p = d.join("manifests/policies.yaml");
        let text = std::fs::read_to_string(&p).unwrap().replacen(
            "metricsWindow: 10m",
            "metricsWindow: 30s",
            1,
        );
        std::fs::write(p, text).unwrap();
    });
    assert!(err.contains("policies.yaml"), "{err}");
    assert!(err.contains("GpuReactivePolicy gpu-reactive"), "{err}");
    assert!(
        err.contains("spec.metrics.compute.upsize.metricsWindow"),
        "{err}"
    );
}

#[test]
fn wrong_contract_is_rejected() {
    let err = fails_with(|d| {
        let p = d.join("manifests/policies.yaml");
        let text = std::fs::read_to_string(&p).unwrap().replacen(
            "gpuKaiContract: v1alpha1-2026-07",
            "gpuKaiContract: v0",
            1,
        );
        std::fs::write(p, text).unwrap();
    });
    assert!(err.contains("spec.experimental.gpuKaiContract"), "{err}");
}

#[test]
fn malformed_yaml_is_rejected_naming_the_file() {
    let err = fails_with(|d| {
        std::fs::write(d.join("manifests/broken.yaml"), "kind: [unclosed\n").unwrap()
    });
    assert!(
        err.contains("broken.yaml") && err.contains("invalid YAML"),
        "{err}"
    );
}

#[test]
fn wrong_field_type_names_the_field_path() {
    let err = fails_with(|d| {
        let p = d.join("manifests/policies.yaml");
        let text = std::fs::read_to_string(&p).unwrap().replacen(
            "thresholdPercent: 125",
            "thresholdPercent: lots",
            1,
        );
        std::fs::write(p, text).unwrap();
    });
    assert!(
        err.contains("spec.metrics.compute.upsize.thresholdPercent"),
        "{err}"
    );
}

#[test]
fn malformed_metrics_line_is_rejected_naming_the_file_and_the_line() {
    let err = fails_with(|d| {
        let p = d.join("metrics.om");
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replacen("} 55 ", "} fifty-five ", 1);
        std::fs::write(p, text).unwrap();
    });
    assert!(
        err.contains("metrics file") && err.contains("metrics.om"),
        "{err}"
    );
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn bad_at_timestamp_is_rejected() {
    let out = kerf(&[
        "recommend",
        "--manifests",
        "examples/manifests",
        "--metrics",
        "examples/metrics.om",
        "--at",
        "yesterday",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--at"));
}

/// The HPA example's manifests with `edit` applied to web.yaml, in a temporary directory.
pub fn hpa_example_edited(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["pods.yaml", "web.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/hpa/manifests").join(f)).unwrap();
        let text = if f == "web.yaml" { edit(&text) } else { text };
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    dir
}

/// Pod-level requests (`spec.resources`, PodLevelResources): the HPA divides usage by them, not
/// by the containers' (kubernetes `calculateRequests`), so the container math does not hold: the
/// recommendation is published, blocked, `skipReason: pod-level-resources`.
#[test]
fn pod_level_requests_make_the_hpa_not_coordinable() {
    let dir = hpa_example_edited(|t| {
        t.replace(
            "    spec:\n      containers:",
            "    spec:\n      resources: {requests: {cpu: 1000m}}\n      containers:",
        )
    });
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(web["resources"]["app"]["cpu"]["recommended"], "700m");
    assert_eq!(web["hpa"]["skipReason"], "pod-level-resources", "{web:#}");
    assert_eq!(web["hpa"]["blocked"], true);
    assert_eq!(web["hpa"]["reason"], "HPACoupled");
    assert_eq!(web["phase"], "blocked", "{web:#}");
    // CPU is in auto-patch and requested at pod level: nothing applied, said so.
    assert_eq!(web["reason"], "PodLevelResources", "{web:#}");
}

/// A 0 tolerance (`spec.behavior.scaleUp/scaleDown.tolerance`): the worked example's 71 % does
/// not keep requests × target exactly (71 × 700 ≠ 50 × 1000), and no request up to 770m does:
/// blocked, `target-out-of-bounds`.
#[test]
fn a_zero_tolerance_hpa_blocks_the_worked_example() {
    let dir = hpa_example_edited(|t| {
        t.replace(
            "  minReplicas: 2\n",
            "  minReplicas: 2\n  behavior: {scaleUp: {tolerance: \"0\"}, scaleDown: {tolerance: \"0\"}}\n",
        )
    });
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(web["hpa"]["skipReason"], "target-out-of-bounds", "{web:#}");
    assert_eq!(web["hpa"]["targetAfter"], 71);
    assert_eq!(web["phase"], "blocked", "{web:#}");
}

/// A VerticalPodAutoscaler on the same Deployment that applies its recommendations (its default
/// update mode) sets the same requests at admission: kerf publishes its recommendation and
/// applies nothing, phase `blocked`, reason `VPAConflict`, naming the VPA and the requests. A VPA
/// in `Off` mode, or one whose policy leaves the container alone, is no conflict.
#[test]
fn a_vpa_applying_to_the_workload_blocks_it_naming_the_vpa() {
    let with_vpa = |spec: &'static str| {
        hpa_example_edited(move |t| {
            format!(
                "{t}---\napiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\nmetadata: {{name: web-vpa, namespace: shop}}\nspec:\n  targetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n{spec}"
            )
        })
    };
    let metrics = root().join("examples/hpa/metrics.om");
    let dir = with_vpa("");
    let v = recommend_json(dir.path(), &metrics);
    let web = entry(&v, "web");
    assert_eq!(web["phase"], "blocked", "{web:#}");
    assert_eq!(web["reason"], "VPAConflict", "{web:#}");
    assert_eq!(web["resources"]["app"]["cpu"]["recommended"], "700m");
    let message = web["reasons"][0].as_str().unwrap();
    assert!(
        message.contains("VerticalPodAutoscaler shop/web-vpa"),
        "{message}"
    );
    assert!(message.contains("app cpu"), "{message}");

    for spec in [
        "  updatePolicy: {updateMode: \"Off\"}\n",
        "  resourcePolicy: {containerPolicies: [{containerName: app, mode: \"Off\"}]}\n",
        "  resourcePolicy: {containerPolicies: [{containerName: \"*\", controlledResources: [memory]}]}\n",
    ] {
        let dir = with_vpa(spec);
        let v = recommend_json(dir.path(), &metrics);
        let web = entry(&v, "web");
        assert_eq!(web["phase"], "applied", "{spec}: {web:#}");
        assert_eq!(web["reason"], serde_json::Value::Null);
    }
}

#[test]
fn hpa_example_coordinates_the_target_with_the_requests() {
    let v = recommend_json(
        &root().join("examples/hpa/manifests"),
        &root().join("examples/hpa/metrics.om"),
    );
    let web = entry(&v, "web");
    assert_eq!(web["resources"]["app"]["cpu"]["current"], "1");
    assert_eq!(web["resources"]["app"]["cpu"]["recommended"], "700m");
    assert_eq!(
        web["hpa"],
        serde_json::json!({"name": "web", "resource": "cpu", "targetBefore": 50, "targetAfter": 71,
                           "skipReason": null, "blocked": false, "reason": null})
    );
    assert_eq!(web["riskFlags"], serde_json::json!(["hpa-coupled"]));
    assert_eq!(web["savings"]["replicas"], 3);
    assert!((web["savings"]["cpuCores"].as_f64().unwrap() - 0.3).abs() < 1e-9);
    assert_eq!(web["gpu"]["action"], "none");
}

#[test]
fn hpa_with_coordination_off_is_blocked_with_hpa_coupled_but_still_reported() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    for f in ["web.yaml", "pods.yaml"] {
        let text = std::fs::read_to_string(root().join("examples/hpa/manifests").join(f)).unwrap();
        std::fs::write(
            m.join(f),
            text.replace("coordinate: true", "coordinate: false"),
        )
        .unwrap();
    }
    let v = recommend_json(&m, &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(web["hpa"]["blocked"], true);
    assert_eq!(web["hpa"]["reason"], "HPACoupled");
    assert_eq!(web["hpa"]["targetAfter"], serde_json::Value::Null);
    assert_eq!(
        web["resources"]["app"]["cpu"]["recommended"], "700m",
        "recommendation still shown"
    );
    assert_eq!(web["phase"], "blocked");
}

#[test]
fn table_output_shows_the_hpa_column() {
    let text = recommend_table(
        Path::new("examples/hpa/manifests"),
        Path::new("examples/hpa/metrics.om"),
    );
    let header = text
        .lines()
        .find(|l| l.contains("PHASE"))
        .expect("CPU/memory table");
    assert!(header.contains("HPA"), "{header}");
    let row = text
        .lines()
        .find(|l| l.starts_with("shop/Deployment/web"))
        .expect("web row");
    assert!(
        row.contains("700m") && row.contains("web cpu 50%→71%") && row.contains("hpa-coupled"),
        "{row}"
    );
}

/// A policy pointed at a metric the data does not hold — a DCGM name with the `exported_*`
/// labels a new user tries — reads nothing, and says so: `MetricsFound=False` (`NoSamples`) in
/// the `policies` array exactly as written to the status, the same message in the workloads'
/// reasons and under the table, and never "no upsize or scale-back condition met".
#[test]
fn a_metric_that_does_not_exist_yields_metrics_found_false_in_json_and_table() {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(root().join("examples/manifests")).unwrap() {
        let f = f.unwrap().path();
        let text = std::fs::read_to_string(&f).unwrap().replace(
            "metric: kubex_gpu_container_sm_utilization_percent\n        interpretation: fullGPU\n        namespaceLabel: namespace\n        podLabel: pod\n        containerLabel: container",
            "metric: DCGM_FI_PROF_GR_ENGINE_ACTIVE\n        interpretation: fullGPU\n        namespaceLabel: exported_namespace\n        podLabel: exported_pod\n        containerLabel: exported_container",
        );
        std::fs::write(dir.path().join(f.file_name().unwrap()), text).unwrap();
    }
    let v = recommend_json(dir.path(), &root().join("examples/metrics.om"));
    let policies = v["policies"].as_array().expect("a policies array");
    let gpu = policies
        .iter()
        .find(|p| p["kind"] == "GpuReactivePolicy" && p["name"] == "gpu-reactive")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(gpu["namespace"], "ml");
    let message = "DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_namespace,exported_pod,exported_container}: \
                   no samples for 3 of 3 pods in the 10m before 2026-01-01T12:00:00Z (the file \
                   covers 11:40–12:00) — is the GPU exporter installed and scraped? see \
                   docs/gpu-metrics.md";
    let found = gpu["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "MetricsFound")
        .unwrap_or_else(|| panic!("{gpu}"));
    assert_eq!(
        found,
        &serde_json::json!({"type": "MetricsFound", "status": "False", "reason": "NoSamples", "message": message})
    );
    // Each workload counts its own pods.
    for (name, pods) in [("llm", "2 of 2"), ("embedder", "1 of 1")] {
        let reasons = entry(&v, name)["reasons"].as_array().unwrap();
        let own = message.replace("3 of 3", pods);
        assert!(reasons.iter().any(|r| *r == own), "{name}: {reasons:?}");
        assert!(
            !reasons
                .iter()
                .any(|r| r == "no upsize or scale-back condition met"),
            "{name}: {reasons:?}"
        );
    }
    // The memory signal still reads: the policy's other conditions are True.
    let ready = gpu["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PrometheusAvailable")
        .unwrap();
    assert_eq!(ready["status"], "True");

    let table = recommend_table(dir.path(), Path::new("examples/metrics.om"));
    assert!(
        table.contains(&format!(
            "GpuReactivePolicy/ml/gpu-reactive: MetricsFound=False (NoSamples): {message}"
        )),
        "{table}"
    );
}

/// The worked example with its strategy resizing in place and, unless `keep_hpa`, without its
/// HPA.
pub fn in_place_example(keep_hpa: bool) -> tempfile::TempDir {
    hpa_example_edited(move |t| {
        let t = t.replace(
            "kind: AutomationStrategy\nmetadata:\n  name: shop-strategy\n  namespace: shop\nspec: {}",
            "kind: AutomationStrategy\nmetadata:\n  name: shop-strategy\n  namespace: shop\nspec:\n  enablement: {resize: inPlaceOrRollout}",
        );
        assert!(t.contains("inPlaceOrRollout"), "the strategy was edited");
        match t.split_once("---\napiVersion: autoscaling/v2") {
            Some((without_hpa, _)) if !keep_hpa => without_hpa.to_string(),
            _ => t,
        }
    })
}

/// `enablement.resize: inPlaceOrRollout`: a CPU change with no HPA is applied to the running pods
/// in place (planned as a cluster serving `pods/resize` would, and said so); the pods are asked
/// and counted as pending.
#[test]
fn an_in_place_strategy_resizes_a_change_without_an_hpa_in_place() {
    let dir = in_place_example(false);
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(web["resources"]["app"]["cpu"]["recommended"], "700m");
    assert_eq!(web["applyMethod"], "inPlace", "{web:#}");
    assert_eq!(v["inPlaceResize"], "assumed");
    assert_eq!(
        web["resize"],
        serde_json::json!({"podsResized": 0, "podsPending": 3, "podsInfeasible": 0,
                           "podsWaiting": 0, "fallback": null})
    );
    let reasons = web["reasons"].to_string();
    assert!(reasons.contains("no API server was asked"), "{reasons}");
}

/// An HPA-coordinated change is always a rollout, whatever the strategy says.
#[test]
fn an_hpa_coordinated_change_still_rolls_out_under_an_in_place_strategy() {
    let dir = in_place_example(true);
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(web["hpa"]["targetAfter"], 71);
    assert_eq!(web["applyMethod"], "rollout", "{web:#}");
    assert_eq!(web["resize"], serde_json::Value::Null);
}

/// The default strategy rolls out.
#[test]
fn the_default_strategy_rolls_out() {
    let v = recommend_json(
        &root().join("examples/hpa/manifests"),
        &root().join("examples/hpa/metrics.om"),
    );
    assert_eq!(entry(&v, "web")["applyMethod"], "rollout");
}

/// Argo Rollouts' CRD as `kubectl get crd rollouts.argoproj.io -o yaml` gives it, reduced to
/// the containers list: v1.8.4's plain array, or v1.9.0's map keyed by `name`.
fn rollout_crd_yaml(map_list: bool) -> String {
    let markers = if map_list {
        "\n                          x-kubernetes-list-type: map\n                          x-kubernetes-list-map-keys: [name]"
    } else {
        ""
    };
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: rollouts.argoproj.io}}
spec:
  group: argoproj.io
  names: {{kind: Rollout, plural: rollouts}}
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                template:
                  type: object
                  properties:
                    spec:
                      type: object
                      properties:
                        containers:
                          type: array{markers}
                          items: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"
    )
}

/// How a Rollout's template write is sent follows the CRD found beside it: a plain array
/// (v1.8) is written by JSON Patch, a map keyed by name (v1.9) by server-side apply, none at
/// hand by JSON Patch with the reason; a workload whose template another controller owns is
/// evicted.
#[test]
fn the_write_method_follows_the_crd_in_the_directory() {
    let fixture = root().join("tests/fixtures/workloads");
    let metrics = fixture.join("metrics.om");
    let objects = std::fs::read_to_string(fixture.join("manifests/objects.yaml")).unwrap();
    let with = |crd: Option<bool>| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("objects.yaml"), &objects).unwrap();
        if let Some(map_list) = crd {
            std::fs::write(dir.path().join("crd.yaml"), rollout_crd_yaml(map_list)).unwrap();
        }
        let v = recommend_json(dir.path(), &metrics);
        let canary = entry(&v, "canary").clone();
        let llm = entry(&v, "llm").clone();
        (canary, llm)
    };
    let (v18, llm) = with(Some(false));
    assert_eq!(v18["writeMethod"], "jsonPatch", "{v18}");
    assert!(
        v18["writeMethodReason"]
            .as_str()
            .unwrap()
            .contains("atomic"),
        "{v18}"
    );
    assert_eq!(llm["writeMethod"], "evict");
    assert_eq!(llm["applyMethod"], "evict");
    let (v19, _) = with(Some(true));
    assert_eq!(v19["writeMethod"], "apply", "{v19}");
    let (none, _) = with(None);
    assert_eq!(none["writeMethod"], "jsonPatch");
    assert!(
        none["writeMethodReason"]
            .as_str()
            .unwrap()
            .contains("no CRD"),
        "{none}"
    );
}

/// Limits as VPA keeps them (docs/policies.md#limits): with requests equal to limits (a
/// Guaranteed pod), the worked example's CPU request moves 1000m → 700m and its limit with it,
/// so the pod stays Guaranteed; the HPA target still moves 50 → 71 % (the HPA divides by
/// requests). A 2:1 limit keeps its ratio; `RequestsOnly` leaves the limit and never takes the
/// request above it.
#[test]
fn limits_keep_their_ratio_and_the_hpa_target_is_unchanged() {
    let cpu_limit = |limit: &str, extra: &str| {
        let limit = limit.to_string();
        let extra = extra.to_string();
        hpa_example_edited(move |t| {
            t.replace(
                "requests: {cpu: 1000m, memory: 512Mi}",
                &format!(
                    "requests: {{cpu: 1000m, memory: 512Mi}}\n            limits: {{cpu: {limit}}}"
                ),
            )
            .replace("window: 1h}", &format!("window: 1h{extra}}}"))
        })
    };
    let run = |dir: &tempfile::TempDir| {
        let v = recommend_json(
            &dir.path().join("."),
            &root().join("examples/hpa/metrics.om"),
        );
        entry(&v, "web").clone()
    };
    let guaranteed = run(&cpu_limit("1000m", ""));
    let cpu = &guaranteed["resources"]["app"]["cpu"];
    assert_eq!(cpu["recommended"], "700m", "{guaranteed}");
    assert_eq!(
        cpu["limit"],
        serde_json::json!({"current": "1", "recommended": "700m"})
    );
    assert_eq!(
        guaranteed["resources"]["app"]["memory"]["limit"],
        Value::Null
    );
    assert_eq!(guaranteed["hpa"]["targetAfter"], 71);
    let qos = |r: &Value| {
        let pair = |x: &Value, k: &str| {
            let parse = |s: &Value| s.as_str().map(|t| t.to_string());
            (
                parse(&x[k]["recommended"]),
                parse(&x[k]["limit"]["recommended"]),
            )
        };
        let (req, lim) = pair(&r["resources"]["app"], "cpu");
        req.is_some() && req == lim
    };
    assert!(qos(&guaranteed), "requests equal limits after the change");
    let double = run(&cpu_limit("2000m", ""));
    assert_eq!(
        double["resources"]["app"]["cpu"]["limit"],
        serde_json::json!({"current": "2", "recommended": "1400m"})
    );
    // RequestsOnly with a limit below what usage asks: the request is capped at the limit.
    let only = run(&cpu_limit("500m", ", controlledValues: RequestsOnly"));
    let cpu = &only["resources"]["app"]["cpu"];
    assert_eq!(cpu["recommended"], "500m", "{only}");
    assert_eq!(
        cpu["limit"],
        serde_json::json!({"current": "500m", "recommended": "500m"})
    );
}

/// The namespace's LimitRange bounds what kerf recommends (docs/policies.md#limits): a minimum
/// above what usage asks raises the request to it, and the reason names the LimitRange.
#[test]
fn a_limit_range_keeps_the_recommendation_within_its_bounds() {
    let dir = hpa_example_edited(|t| t.to_string());
    std::fs::write(
        dir.path().join("limitrange.yaml"),
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: bounds, namespace: shop}\n\
         spec:\n  limits:\n    - type: Container\n      min: {cpu: 800m}\n      max: {memory: 8Gi}\n",
    )
    .unwrap();
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(
        web["resources"]["app"]["cpu"]["recommended"], "800m",
        "{web}"
    );
    let reasons = web["reasons"].to_string();
    assert!(
        reasons.contains("cpu request kept within LimitRange shop/bounds: 800m (without it: 700m)"),
        "{reasons}"
    );
    // Without it, the worked example's 700m.
    let plain = recommend_json(
        &root().join("examples/hpa/manifests"),
        &root().join("examples/hpa/metrics.om"),
    );
    assert_eq!(
        entry(&plain, "web")["resources"]["app"]["cpu"]["recommended"],
        "700m"
    );
}

/// An upsize the namespace's ResourceQuota cannot take is held: `blocked`, reason
/// `QuotaExceeded` naming the quota, the recommendation still published (docs/policies.md#limits).
#[test]
fn an_upsize_past_a_resource_quota_is_held_and_still_published() {
    let quota = |hard: &str| {
        // No HPA; a LimitRange minimum above usage makes the change an upsize (3 × +200m).
        let dir = hpa_example_edited(|t| {
            t.split_once("---\napiVersion: autoscaling/v2")
                .map_or(t.to_string(), |(before, _)| before.to_string())
        });
        std::fs::write(
            dir.path().join("bounds.yaml"),
            format!(
                "apiVersion: v1\nkind: LimitRange\nmetadata: {{name: bounds, namespace: shop}}\n\
                 spec:\n  limits:\n    - type: Container\n      min: {{cpu: 1200m}}\n---\n\
                 apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: team, namespace: shop}}\n\
                 spec:\n  hard: {{requests.cpu: \"{hard}\"}}\nstatus:\n  hard: {{requests.cpu: \"{hard}\"}}\n  used: {{requests.cpu: \"3\"}}\n"
            ),
        )
        .unwrap();
        let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
        entry(&v, "web").clone()
    };
    let held = quota("3");
    assert_eq!(held["phase"], "blocked", "{held}");
    assert_eq!(held["reason"], "QuotaExceeded");
    assert_eq!(held["resources"]["app"]["cpu"]["recommended"], "1200m");
    assert!(
        held["reasons"]
            .to_string()
            .contains("ResourceQuota shop/team: requests.cpu would pass its hard limit"),
        "{held}"
    );
    let room = quota("4");
    assert_eq!(room["phase"], "applied", "{room}");
}

/// The table shows each container's limit beside its request (`request/limit`, `-` where
/// there is none), now and recommended.
#[test]
fn table_output_shows_limits_beside_requests() {
    let dir = hpa_example_edited(|t| {
        t.replace(
            "requests: {cpu: 1000m, memory: 512Mi}",
            "requests: {cpu: 1000m, memory: 512Mi}\n            limits: {cpu: 2000m}",
        )
    });
    let text = recommend_table(dir.path(), Path::new("examples/hpa/metrics.om"));
    assert!(text.contains("(request/limit, - where none)"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("shop/Deployment/web"))
        .expect("web row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[2..4], ["1/2", "700m/1400m"], "{row}");
    assert!(cells[4].starts_with("512Mi/-"), "no memory limit: {row}");
}

/// A Guaranteed pod under `RequestsOnly` keeps its QoS class: lowering the CPU request under
/// its limit would make it Burstable, so the request stays at the limit and a reason says so.
#[test]
fn a_guaranteed_pod_under_requests_only_keeps_its_qos_class() {
    let dir = hpa_example_edited(|t| {
        t.replace(
            "requests: {cpu: 1000m, memory: 512Mi}",
            "requests: {cpu: 1000m, memory: 512Mi}\n            limits: {cpu: 1000m, memory: 512Mi}",
        )
        .replace(
            "window: 1h}\n    memory",
            "window: 1h, controlledValues: RequestsOnly}\n    memory",
        )
    });
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    let cpu = &web["resources"]["app"]["cpu"];
    assert_eq!(cpu["recommended"], "1", "{web}");
    assert_eq!(
        cpu["limit"],
        serde_json::json!({"current": "1", "recommended": "1"})
    );
    let reasons = web["reasons"].to_string();
    assert!(
        reasons.contains("app: cpu request kept at 1: the pod stays Guaranteed"),
        "{reasons}"
    );
}

/// A LimitRange's `type: Pod` bounds hold over the sum of the pod's containers: a minimum above
/// what usage asks raises the request to it, and the reason names the LimitRange.
#[test]
fn a_pod_limit_range_keeps_the_pod_within_its_bounds() {
    let dir = hpa_example_edited(|t| t.to_string());
    std::fs::write(
        dir.path().join("limitrange.yaml"),
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: pods, namespace: shop}\n\
         spec:\n  limits:\n    - type: Pod\n      min: {cpu: 800m}\n",
    )
    .unwrap();
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    assert_eq!(
        web["resources"]["app"]["cpu"]["recommended"], "800m",
        "{web}"
    );
    let reasons = web["reasons"].to_string();
    assert!(
        reasons.contains(
            "cpu requests kept within LimitRange shop/pods (type Pod): 800m over the pod (without it: 700m)"
        ),
        "{reasons}"
    );
}

/// A Guaranteed workload (requests = limits) shrunk under an in-place strategy: the resize
/// carries the limits with the requests, so the pods stay Guaranteed and are resized in place
/// instead of falling back to a rollout (`QoSClassChange`).
#[test]
fn a_guaranteed_workload_is_resized_in_place_with_its_limits() {
    let dir = in_place_example(false);
    let guaranteed = |f: &str, indent: &str| {
        let path = dir.path().join(f);
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "requests: {cpu: 1000m, memory: 512Mi}",
            &format!("requests: {{cpu: 1000m, memory: 512Mi}}\n{indent}limits: {{cpu: 1000m, memory: 512Mi}}"),
        );
        std::fs::write(path, text).unwrap();
    };
    guaranteed("web.yaml", "            ");
    guaranteed("pods.yaml", "        ");
    let v = recommend_json(dir.path(), &root().join("examples/hpa/metrics.om"));
    let web = entry(&v, "web");
    let cpu = &web["resources"]["app"]["cpu"];
    assert_eq!(cpu["recommended"], "700m", "{web:#}");
    assert_eq!(
        cpu["limit"],
        serde_json::json!({"current": "1", "recommended": "700m"})
    );
    assert_eq!(web["applyMethod"], "inPlace", "{web:#}");
    assert_eq!(
        web["resize"]["fallback"],
        serde_json::Value::Null,
        "{web:#}"
    );
    assert_eq!(web["resize"]["podsPending"], 3, "{web:#}");
}
