//! docs/gitops.md is what kerf does: the Argo CD Application and the Flux Kustomizations it
//! ships are parsed and checked against the fields kerf writes (kubernetes-validate does not know
//! Argo CD's or Flux's CRDs), applied to the Argo CD fixture's Deployment where they are patches,
//! and the defaults, the Event text and the anchors the code cites match the code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kerf::api::{FieldTakeback, WorkloadKind};
use kerf::core::managed_fields::FIELD_MANAGER;
use kerf::core::model::{
    ANNOTATION_CONFLICT_ACKNOWLEDGED, ANNOTATION_GPU_BASELINE, ANNOTATION_GPU_RECOMMENDATION,
    ANNOTATION_RESTARTED_AT,
};
use kerf::core::writes::conflict::{ConflictRules, blocked_message, human};
use kerf::writers::kube::workload_resource;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    std::fs::read_to_string(root().join("docs/gitops.md")).unwrap()
}

/// Every ```yaml block of the page, parsed.
fn yaml_blocks() -> Vec<Value> {
    let text = doc();
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("```yaml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").expect("a closed block");
        out.push(serde_saphyr::from_str::<Value>(&body[..end]).unwrap());
        rest = &body[end + 3..];
    }
    out
}

fn of_kind<'a>(blocks: &'a [Value], api: &str, kind: &str) -> Vec<&'a Value> {
    blocks
        .iter()
        .filter(|b| b["apiVersion"] == api && b["kind"] == kind)
        .collect()
}

/// The Argo CD fixture's Deployment (as git has it).
fn git_deployment() -> Value {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/gitops/argocd-apply-shop-web.yaml"))
            .unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap()
}

/// A JSON pointer's last token, unescaped (RFC 6901).
fn last_token(pointer: &str) -> String {
    pointer
        .rsplit('/')
        .next()
        .unwrap()
        .replace("~1", "/")
        .replace("~0", "~")
}

#[test]
fn argocd_application_ignores_what_kerfs_field_manager_owns_on_every_kind_kerf_writes() {
    let blocks = yaml_blocks();
    let apps = of_kind(&blocks, "argoproj.io/v1alpha1", "Application");
    assert_eq!(apps.len(), 1);
    let app = apps[0];
    let options: Vec<&str> = app["spec"]["syncPolicy"]["syncOptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    assert!(
        options.contains(&"RespectIgnoreDifferences=true"),
        "{options:?}"
    );
    assert!(options.contains(&"ServerSideApply=true"), "{options:?}");
    assert_eq!(app["spec"]["syncPolicy"]["automated"]["selfHeal"], true);
    let ignored: BTreeSet<(String, String)> = app["spec"]["ignoreDifferences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(
                e["managedFieldsManagers"],
                serde_json::json!([FIELD_MANAGER]),
                "{e}"
            );
            (
                e["group"].as_str().unwrap().to_string(),
                e["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The kinds whose template kerf writes (docs/workloads.md): never one another controller owns.
    let mut written: BTreeSet<(String, String)> = WorkloadKind::ALL
        .iter()
        .filter(|k| k.template_writable())
        .map(|k| {
            let ar = workload_resource(*k);
            (ar.group, ar.kind)
        })
        .collect();
    written.insert(("autoscaling".into(), "HorizontalPodAutoscaler".into()));
    assert_eq!(ignored, written);
}

#[test]
fn flux_drift_ignore_rules_point_at_the_fields_kerf_writes() {
    let blocks = yaml_blocks();
    let ks = of_kind(&blocks, "kustomize.toolkit.fluxcd.io/v1", "Kustomization");
    assert_eq!(
        ks.len(),
        2,
        "drift ignore rules, and patches for older Flux"
    );
    let rules = ks
        .iter()
        .find(|k| k["spec"].get("driftIgnoreRules").is_some())
        .unwrap();
    let mut deployment_paths = Vec::new();
    let mut hpa_paths = Vec::new();
    for rule in rules["spec"]["driftIgnoreRules"].as_array().unwrap() {
        let paths = rule["paths"].as_array().unwrap().iter();
        let paths = paths.map(|p| p.as_str().unwrap().to_string());
        match rule["target"]["kind"].as_str().unwrap() {
            "Deployment" => deployment_paths.extend(paths),
            "HorizontalPodAutoscaler" => hpa_paths.extend(paths),
            other => panic!("unexpected target {other}"),
        }
    }
    assert_eq!(hpa_paths, ["/spec/metrics"]);
    // The request pointer resolves, on git's Deployment, to the requests kerf sets.
    let git = git_deployment();
    let template = format!("/{}", WorkloadKind::Deployment.template_path().join("/"));
    let requests = deployment_paths
        .iter()
        .find(|p| p.ends_with("/resources/requests"))
        .unwrap();
    assert!(requests.starts_with(&format!("{template}/spec/containers/")));
    assert_eq!(
        git.pointer(requests),
        Some(&serde_json::json!({"cpu": "1", "memory": "512Mi"}))
    );
    // kerf's annotations, escaped as JSON pointers.
    let annotations: BTreeSet<String> = deployment_paths
        .iter()
        .filter(|p| p.contains("/annotations/"))
        .map(|p| last_token(p))
        .collect();
    assert_eq!(
        annotations,
        BTreeSet::from(
            [
                ANNOTATION_GPU_BASELINE,
                ANNOTATION_GPU_RECOMMENDATION,
                ANNOTATION_RESTARTED_AT
            ]
            .map(String::from)
        )
    );
    let restart = deployment_paths
        .iter()
        .find(|p| p.ends_with("restartedAt"))
        .unwrap();
    assert!(restart.starts_with(&format!("{template}/metadata/annotations/")));
}

#[test]
fn flux_patch_for_older_versions_removes_only_the_request_kerf_sets() {
    let blocks = yaml_blocks();
    let ks = of_kind(&blocks, "kustomize.toolkit.fluxcd.io/v1", "Kustomization");
    let patched = ks
        .iter()
        .find(|k| k["spec"].get("patches").is_some())
        .unwrap();
    let p = &patched["spec"]["patches"][0];
    assert_eq!(p["target"]["kind"], "Deployment");
    let ops: json_patch::Patch = serde_saphyr::from_str(p["patch"].as_str().unwrap()).unwrap();
    let mut git = git_deployment();
    let before = git.clone();
    json_patch::patch(&mut git, &ops).unwrap();
    let requests = "/spec/template/spec/containers/0/resources/requests";
    assert_eq!(
        git.pointer(requests),
        Some(&serde_json::json!({"memory": "512Mi"}))
    );
    // Nothing else changed.
    git.pointer_mut(requests).unwrap()["cpu"] = "1".into();
    assert_eq!(git, before);
}

#[test]
fn gitops_doc_states_the_defaults_the_event_and_the_annotation_the_code_uses() {
    let text = doc();
    let rules = ConflictRules::default();
    let defaults = format!(
        "**Defaults: {} take-backs of one field within {}.**",
        rules.takebacks,
        human(rules.window)
    );
    assert!(text.contains(&defaults), "{defaults}");
    assert!(text.contains(ANNOTATION_CONFLICT_ACKNOWLEDGED));
    let sample = FieldTakeback {
        field: "spec.template.spec.containers[app].resources.requests.cpu".into(),
        manager: "argocd-controller".into(),
        time: "2026-01-01T12:22:00Z".into(),
    };
    let note = format!("Conflict: {}", blocked_message(&sample, 3, rules));
    assert!(text.contains(&note), "{note}");
}

/// Every `docs/gitops.md#<id>` a source file cites has its anchor on the page.
#[test]
fn the_anchors_the_code_cites_exist() {
    let text = doc();
    let mut cited = BTreeSet::new();
    let mut stack = vec![root().join("src"), root().join("crates")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                collect(&p, &mut cited);
            }
        }
    }
    assert!(cited.len() >= 4, "{cited:?}");
    for id in cited {
        assert!(text.contains(&format!("<a id=\"{id}\"></a>")), "{id}");
    }
}

fn collect(p: &Path, out: &mut BTreeSet<String>) {
    let text = std::fs::read_to_string(p).unwrap();
    for (i, _) in text.match_indices("docs/gitops.md#") {
        let id: String = text[i + 15..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        out.insert(id);
    }
}
