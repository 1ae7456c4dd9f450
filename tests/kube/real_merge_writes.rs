//! kerf's writes through the API server's own merge (structured-merge-diff, `tests/ssa-merge`):
//! what a write keeps of fields kerf did not mean to change, on Argo Rollouts' two CRD schemas,
//! through releases, renames in git, an `autoscaling/v1` HPA and a quantity written in git.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::kube_support::real_merge::{APPLY, Store};
use crate::kube_support::{mock, requests};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kerf::api::{WorkloadKind, WriteMethod};
use kerf::core::managed_fields::{TrackedField, project_hpa};
use kerf::core::model::{ContainerRequests, RequestSet, ResourceRequests, WorkloadKey};
use kerf::core::quantity;
use kerf::core::snapshot::Workload;
use kerf::core::writes::{
    EventWrite, Kept, RestoreKind, RestoreWrite, WorkloadWrite, WriteOp, live_template,
};
use kerf::telemetry::Metrics;
use kerf::writers::kube::{WriteOutcome, Writer, WriterConfig, WriterHandle};
use serde_json::{Value, json};
use tokio::sync::watch;

const ROLLOUT: &str = "/apis/argoproj.io/v1alpha1/namespaces/shop/rollouts/web";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/shop/deployments/web";
const HPA: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web";
const ARGO: &str = "argocd-controller";

/// Argo Rollouts' CRD schema of `spec.template.spec.containers`: v1.8.4's
/// `manifests/crds/rollout-crd.yaml` has a plain `type: array` (atomic); v1.9.0 added
/// `x-kubernetes-list-type: map` keyed by `name`. The rest of the template is left to
/// `x-kubernetes-preserve-unknown-fields`, as both versions do for a container's fields.
fn rollout_schema(map_list: bool) -> Value {
    let mut containers = json!({"type": "array", "items": {"type": "object", "required": ["name"],
        "properties": {"name": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true}});
    if map_list {
        containers["x-kubernetes-list-type"] = json!("map");
        containers["x-kubernetes-list-map-keys"] = json!(["name"]);
    }
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "replicas": {"type": "integer"},
        "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "template": {"type": "object", "properties": {
            "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                     "properties": {"containers": containers}}}}}}}})
}

/// git's manifest: `app` with image, env, GPU limit and requests; a `sidecar` (renamed `proxy`
/// in `git_renamed`).
fn manifest(kind: WorkloadKind, sidecar: &str, sidecar_cpu: &str) -> Value {
    json!({"apiVersion": kind.api_version(), "kind": kind.kind_name(),
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
          "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "MODEL", "value": "m"}],
             "resources": {"requests": {"cpu": "1", "memory": "512M"},
                           "limits": {"nvidia.com/gpu": "1"}}},
            {"name": sidecar, "image": "proxy:1", "resources": {"requests": {"cpu": sidecar_cpu}}}]}}}})
}

struct Cluster {
    store: Arc<Mutex<Store>>,
    writer: WriterHandle,
    _lease: watch::Sender<bool>,
    log: crate::kube_support::Log,
}

impl Cluster {
    /// `shop/web` of `kind` as Argo CD's server-side apply created it.
    fn new(kind: WorkloadKind, map_list: bool) -> Self {
        let mut store = Store::new("2026-01-01T12:00:00Z");
        let path = path_of(kind);
        if kind == WorkloadKind::Rollout {
            store
                .schemas
                .insert("/apis/argoproj.io/".into(), rollout_schema(map_list));
        }
        if kind == WorkloadKind::Deployment {
            // The API server validates a Deployment's containers (an image each); a custom
            // resource only against its CRD's schema.
            store
                .validated
                .insert(path.into(), vec!["spec", "template"]);
        }
        store
            .write(path, APPLY, &manifest(kind, "sidecar", "100m"), ARGO, true)
            .unwrap();
        let store = Arc::new(Mutex::new(store));
        let served = store.clone();
        let (client, log) = mock(move |r| {
            served
                .lock()
                .unwrap()
                .answer(r)
                .unwrap_or_else(|| panic!("unexpected request {} {}", r.method, r.path))
        });
        let (lease_tx, lease_rx) = watch::channel(true);
        let mut cfg = WriterConfig::new("kerf-system");
        cfg.metrics = Metrics::new();
        cfg.identity = "kerf-0".into();
        cfg.backoff = Duration::from_millis(10);
        cfg.timeout = Duration::from_secs(5);
        cfg.read_only = false;
        Cluster {
            store,
            writer: Writer::spawn_with(client, lease_rx, cfg),
            _lease: lease_tx,
            log,
        }
    }

    fn object(&self, path: &str) -> Value {
        self.store.lock().unwrap().get(path).clone()
    }

    /// The workload as kerf's reader sees it now.
    fn observed(&self, kind: WorkloadKind) -> Arc<Workload> {
        let obj = self.object(path_of(kind));
        let dynamic: kube::api::DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        let live = kerf::core::writes::Live {
            metadata: &dynamic.metadata,
            data: &dynamic.data,
        };
        Arc::new(Workload {
            key: WorkloadKey::new("shop", kind, "web"),
            uid: None,
            labels: Default::default(),
            annotations: Default::default(),
            template: live_template(live, kind),
            replicas: Some(2),
            field_managers: Vec::new(),
            ownership: Default::default(),
        })
    }

    async fn write(&self, op: WriteOp) {
        let outcome = self.writer.apply(op).await;
        assert!(
            matches!(outcome, WriteOutcome::Written { .. }),
            "{outcome:?}; refused: {:?}",
            self.store.lock().unwrap().refused
        );
    }

    /// kerf sets `requests` on the workload, sent as `method`.
    async fn set(&self, kind: WorkloadKind, requests: ContainerRequests, method: WriteMethod) {
        self.write(WriteOp::Workload(Box::new(WorkloadWrite {
            observed: self.observed(kind),
            gpu: None,
            requests: Some(requests),
            limits: None,
            method,
        })))
        .await;
    }

    /// A release restoring `restored`, kerf keeping `keep`.
    async fn release(
        &self,
        kind: WorkloadKind,
        restored: ContainerRequests,
        keep: ContainerRequests,
        method: WriteMethod,
    ) {
        let observed = self.observed(kind);
        let none = BTreeMap::new();
        let event = EventWrite::restored(
            &observed,
            RestoreKind::Release,
            (&restored, &none),
            None,
            None,
            None,
        );
        self.write(WriteOp::Restore(Box::new(RestoreWrite {
            kind: RestoreKind::Release,
            observed,
            requests: restored,
            removed: BTreeMap::new(),
            hpa: None,
            keep: (!keep.is_empty()).then_some(Kept {
                requests: keep,
                limits: ContainerRequests::new(),
                hpa: None,
            }),
            recommendation: None,
            event,
            method,
        })))
        .await;
    }

    fn container(&self, kind: WorkloadKind, name: &str) -> Option<Value> {
        self.object(path_of(kind))["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
    }

    /// Argo CD syncs git's `manifest` again (a forced server-side apply).
    fn sync(&self, kind: WorkloadKind, manifest: &Value) -> Result<Value, String> {
        self.store
            .lock()
            .unwrap()
            .write(path_of(kind), APPLY, manifest, ARGO, true)
            .map_err(|e| e.message)
    }
}

fn path_of(kind: WorkloadKind) -> &'static str {
    match kind {
        WorkloadKind::Rollout => ROLLOUT,
        _ => DEPLOYMENT,
    }
}

fn req(c: &str, cpu: Option<i64>, memory: Option<i64>) -> ContainerRequests {
    ContainerRequests::from([(
        c.to_string(),
        ResourceRequests {
            cpu_millis: cpu,
            memory_bytes: memory,
        },
    )])
}

/// `app` as git has it, but for its requests.
fn assert_app_intact(app: &Value) {
    assert_eq!(app["image"], "app:1", "{app}");
    assert_eq!(
        app["env"],
        json!([{"name": "MODEL", "value": "m"}]),
        "{app}"
    );
    assert_eq!(
        app["resources"]["limits"],
        json!({"nvidia.com/gpu": "1"}),
        "{app}"
    );
}

#[tokio::test]
async fn an_apply_of_a_partial_list_replaces_an_atomic_list_whole_on_argo_rollouts_1_8() {
    // What the merge library does with the body kerf sent before it read the schema.
    let c = Cluster::new(WorkloadKind::Rollout, false);
    let partial = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "app", "resources": {"requests": {"cpu": "700m"}}}]}}}});
    let after = c
        .store
        .lock()
        .unwrap()
        .write(ROLLOUT, APPLY, &partial, "kerf", true)
        .unwrap();
    let containers = &after["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers,
        &json!([{"name": "app", "resources": {"requests": {"cpu": "700m"}}}])
    );
}

#[tokio::test]
async fn argo_rollouts_1_8_keeps_every_container_field_through_kerfs_json_patch() {
    let c = Cluster::new(WorkloadKind::Rollout, false);
    let schema = rollout_schema(false);
    let (method, _) = kerf::core::writes::write_method::template_write_method(
        WorkloadKind::Rollout,
        Some(&schema),
    );
    assert_eq!(method, WriteMethod::JsonPatch);
    c.set(WorkloadKind::Rollout, req("app", Some(700), None), method)
        .await;
    let seen = requests(&c.log);
    assert!(
        seen.iter()
            .any(|r| r.content_type == "application/json-patch+json"
                && r.query.contains("fieldManager=kerf")),
        "{seen:#?}"
    );
    let app = c.container(WorkloadKind::Rollout, "app").unwrap();
    assert_app_intact(&app);
    assert_eq!(
        app["resources"]["requests"],
        json!({"cpu": "700m", "memory": "512M"})
    );
    assert_eq!(
        c.container(WorkloadKind::Rollout, "sidecar").unwrap(),
        json!({"name": "sidecar", "image": "proxy:1", "resources": {"requests": {"cpu": "100m"}}})
    );
    // kerf's Update owns the request it changed, nothing else of the container.
    let owners = c
        .store
        .lock()
        .unwrap()
        .owners(ROLLOUT, &["f:spec", "f:template", "f:spec", "f:containers"]);
    assert!(
        owners.contains(&("kerf".into(), "Update".into())),
        "{owners:?}"
    );
}

#[tokio::test]
async fn argo_rollouts_1_9_keeps_every_container_field_through_kerfs_apply() {
    let c = Cluster::new(WorkloadKind::Rollout, true);
    let schema = rollout_schema(true);
    let (method, _) = kerf::core::writes::write_method::template_write_method(
        WorkloadKind::Rollout,
        Some(&schema),
    );
    assert_eq!(method, WriteMethod::Apply);
    c.set(WorkloadKind::Rollout, req("app", Some(700), None), method)
        .await;
    let app = c.container(WorkloadKind::Rollout, "app").unwrap();
    assert_app_intact(&app);
    assert_eq!(
        app["resources"]["requests"],
        json!({"cpu": "700m", "memory": "512M"})
    );
    assert!(c.container(WorkloadKind::Rollout, "sidecar").is_some());
}

#[tokio::test]
async fn two_partial_releases_of_a_rollout_keep_both_values() {
    for (map_list, method) in [(true, WriteMethod::Apply), (false, WriteMethod::JsonPatch)] {
        let c = Cluster::new(WorkloadKind::Rollout, map_list);
        c.set(
            WorkloadKind::Rollout,
            req("app", Some(700), Some(400_000_000)),
            method,
        )
        .await;
        // cpu leaves auto-patch, memory stays kerf's.
        c.release(
            WorkloadKind::Rollout,
            req("app", Some(1000), None),
            req("app", None, Some(400_000_000)),
            method,
        )
        .await;
        // Then memory leaves too.
        c.release(
            WorkloadKind::Rollout,
            req("app", None, Some(512_000_000)),
            ContainerRequests::new(),
            method,
        )
        .await;
        let app = c.container(WorkloadKind::Rollout, "app").unwrap();
        assert_app_intact(&app);
        let r = &app["resources"]["requests"];
        let q = |v: &Value| Quantity(v.as_str().unwrap_or_default().to_string());
        assert_eq!(
            quantity::cpu_millis(&q(&r["cpu"])).ok(),
            Some(1000),
            "{method:?}: {r}"
        );
        assert_eq!(
            quantity::memory_bytes(&q(&r["memory"])).ok(),
            Some(512_000_000),
            "{method:?}: {r}"
        );
    }
}

#[tokio::test]
async fn a_container_renamed_in_git_syncs_on_a_json_patched_rollout() {
    let c = Cluster::new(WorkloadKind::Rollout, false);
    c.set(
        WorkloadKind::Rollout,
        req("sidecar", Some(50), None),
        WriteMethod::JsonPatch,
    )
    .await;
    // kerf's request is in place; git renames the sidecar.
    c.sync(
        WorkloadKind::Rollout,
        &manifest(WorkloadKind::Rollout, "proxy", "100m"),
    )
    .unwrap();
    assert!(c.container(WorkloadKind::Rollout, "sidecar").is_none());
    assert!(c.container(WorkloadKind::Rollout, "proxy").is_some());
}

#[tokio::test]
async fn a_container_renamed_in_git_syncs_once_its_request_was_taken_back() {
    let c = Cluster::new(WorkloadKind::Deployment, true);
    c.set(
        WorkloadKind::Deployment,
        req("sidecar", Some(50), None),
        WriteMethod::Apply,
    )
    .await;
    // Argo CD takes the sidecar's request back; kerf goes on applying app's only, which gives
    // up its ownership of the sidecar.
    c.sync(
        WorkloadKind::Deployment,
        &manifest(WorkloadKind::Deployment, "sidecar", "100m"),
    )
    .unwrap();
    c.set(
        WorkloadKind::Deployment,
        req("app", Some(700), None),
        WriteMethod::Apply,
    )
    .await;
    let owners = c.store.lock().unwrap().owners(
        DEPLOYMENT,
        &[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            "k:{\"name\":\"sidecar\"}",
        ],
    );
    assert_eq!(owners, vec![(ARGO.to_string(), "Apply".to_string())]);
    c.sync(
        WorkloadKind::Deployment,
        &manifest(WorkloadKind::Deployment, "proxy", "100m"),
    )
    .unwrap();
    assert!(c.container(WorkloadKind::Deployment, "sidecar").is_none());
    assert_app_intact(&c.container(WorkloadKind::Deployment, "app").unwrap());
}

#[tokio::test]
async fn a_request_equal_to_the_live_one_keeps_the_text_git_wrote() {
    let c = Cluster::new(WorkloadKind::Deployment, true);
    // 512M = 512,000,000 bytes: kerf's own rendering would be another text.
    c.set(
        WorkloadKind::Deployment,
        req("app", Some(700), Some(512_000_000)),
        WriteMethod::Apply,
    )
    .await;
    let app = c.container(WorkloadKind::Deployment, "app").unwrap();
    assert_eq!(
        app["resources"]["requests"],
        json!({"cpu": "700m", "memory": "512M"})
    );
    // The value did not change, so it did not change hands: Argo CD still owns it with kerf.
    let owners = c.store.lock().unwrap().owners(
        DEPLOYMENT,
        &[
            "f:spec",
            "f:template",
            "f:spec",
            "f:containers",
            "k:{\"name\":\"app\"}",
            "f:resources",
            "f:requests",
            "f:memory",
        ],
    );
    assert!(
        owners.contains(&(ARGO.to_string(), "Apply".to_string())),
        "{owners:?}"
    );
}

#[tokio::test]
async fn an_autoscaling_v1_hpa_in_git_is_seen_taking_the_target_back() {
    let mut store = Store::new("2026-01-01T12:00:00Z");
    let v1 = |target: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 2, "maxReplicas": 10, "targetCPUUtilizationPercentage": target}})
    };
    store.write(HPA, APPLY, &v1(50), ARGO, true).unwrap();
    // kerf's coordinated target, applied at autoscaling/v2 (forced).
    let kerfs = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 71}}}]}});
    store.write(HPA, APPLY, &kerfs, "kerf", true).unwrap();
    let owners = |store: &Store| {
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(store.get(HPA).clone()).unwrap();
        let mut managers: Vec<String> = project_hpa(&hpa)
            .into_iter()
            .filter(|m| m.fields.contains(&TrackedField::HpaMetrics("web".into())))
            .map(|m| m.manager)
            .collect();
        managers.sort();
        managers
    };
    assert_eq!(owners(&store), vec!["kerf".to_string()]);
    // Argo CD syncs git's v1 manifest: the target goes back to 50 under its v1 entry.
    store.write(HPA, APPLY, &v1(50), ARGO, true).unwrap();
    let hpa = store.get(HPA);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        50
    );
    let entry = hpa["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == ARGO)
        .unwrap();
    assert_eq!(entry["apiVersion"], "autoscaling/v1");
    assert!(entry["fieldsV1"]["f:spec"]["f:targetCPUUtilizationPercentage"].is_object());
    assert_eq!(owners(&store), vec![ARGO.to_string()]);
}

#[test]
fn the_release_never_deletes_what_it_gives_back_in_any_order() {
    // A removal kerf created and a restore, as one JSON Patch: nothing else goes.
    let live = manifest(WorkloadKind::Rollout, "sidecar", "100m");
    let removed = BTreeMap::from([(
        "sidecar".to_string(),
        RequestSet {
            cpu: true,
            memory: false,
        },
    )]);
    let (patch, _) = kerf::core::writes::write_method::json_patch(
        &live,
        WorkloadKind::Rollout,
        &BTreeMap::new(),
        &req("app", Some(1000), None),
        &ContainerRequests::new(),
        &removed,
    );
    let mut after = live.clone();
    json_patch::patch(&mut after, &patch).unwrap();
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"],
        json!({"cpu": "1", "memory": "512M"})
    );
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][1]["resources"]["requests"],
        json!({})
    );
}

/// A Guaranteed pod (requests = limits) that kerf shrinks stays Guaranteed through the real
/// merge: the template write carries the limits with the requests, and a release gives back
/// both (docs/policies.md#limits).
#[tokio::test]
async fn a_guaranteed_template_stays_guaranteed_through_a_write_and_its_release() {
    let c = Cluster::new(WorkloadKind::Deployment, true);
    let mut git = manifest(WorkloadKind::Deployment, "sidecar", "100m");
    git["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}});
    c.sync(WorkloadKind::Deployment, &git).unwrap();
    let requests = req("app", Some(2500), Some(10 << 30));
    let live = c.observed(WorkloadKind::Deployment);
    let spec = live.template.spec.as_ref().unwrap();
    let app = spec.containers.iter().find(|x| x.name == "app").unwrap();
    let current = kerf::core::recommenders::resources::container::effective_requests(app).unwrap();
    let current_limits = kerf::core::recommenders::resources::container::container_limits(app);
    let both = (
        kerf::api::ControlledValues::RequestsAndLimits,
        kerf::api::ControlledValues::RequestsAndLimits,
    );
    let (_, limits) =
        kerf::core::limits::container_resources(both, &current, &current_limits, &requests["app"]);
    c.write(WriteOp::Workload(Box::new(WorkloadWrite {
        observed: live,
        gpu: None,
        requests: Some(requests),
        limits: Some(ContainerRequests::from([("app".to_string(), limits)])),
        method: WriteMethod::Apply,
    })))
    .await;
    let app = c.container(WorkloadKind::Deployment, "app").unwrap();
    assert_eq!(
        app["resources"]["requests"],
        json!({"cpu": "2500m", "memory": "10Gi"})
    );
    assert_eq!(
        app["resources"]["limits"],
        json!({"cpu": "2500m", "memory": "10Gi", "nvidia.com/gpu": "1"})
    );
    let pair = |app: &Value| {
        let q = |v: &Value| Quantity(v.as_str().unwrap().to_string());
        let r = &app["resources"];
        let rr = |m: &Value| ResourceRequests {
            cpu_millis: quantity::cpu_millis(&q(&m["cpu"])).ok(),
            memory_bytes: quantity::memory_bytes(&q(&m["memory"])).ok(),
        };
        (rr(&r["requests"]), rr(&r["limits"]))
    };
    assert_eq!(kerf::core::limits::qos_class(&[pair(&app)]), "Guaranteed");
    // Released: the requests and the limits kerf scaled are the user's again.
    c.release(
        WorkloadKind::Deployment,
        req("app", Some(4000), Some(16 << 30)),
        ContainerRequests::new(),
        WriteMethod::Apply,
    )
    .await;
    let app = c.container(WorkloadKind::Deployment, "app").unwrap();
    assert_eq!(
        app["resources"]["requests"],
        json!({"cpu": "4", "memory": "16Gi"})
    );
    assert_eq!(
        app["resources"]["limits"],
        json!({"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"})
    );
    assert_eq!(kerf::core::limits::qos_class(&[pair(&app)]), "Guaranteed");
}
