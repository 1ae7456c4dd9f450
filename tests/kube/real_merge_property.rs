//! Random sequences of writes by kerf, an Argo-CD-like applier, `kubectl edit` and the HPA
//! controller, merged by the API server's own library (structured-merge-diff), over a
//! Deployment, a StatefulSet, a Rollout on Argo Rollouts v1.8's schema (atomic containers) and
//! on v1.9's (keyed by name), and an HPA. After every step: no container lost a field kerf did
//! not mean to change, and what kerf reads from `managedFields` (who owns each request, who
//! owns the HPA's target) is who last set it.

use std::collections::{BTreeMap, BTreeSet};

use crate::kube_support::real_merge::{APPLY, JSON_PATCH, STRATEGIC, Store};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kerf::api::{WorkloadKind, WriteMethod};
use kerf::core::managed_fields::{TrackedField, project, project_hpa};
use kerf::core::model::{ContainerRequests, ResourceRequests, WorkloadKey};
use kerf::core::writes::write_method::{json_patch, template_write_method};
use kerf::core::writes::{Live, Released, kerf_apply};
use proptest::prelude::*;
use serde_json::{Value, json};

const ARGO: &str = "argocd-controller";
const CONTAINERS: [&str; 2] = ["app", "sidecar"];

#[derive(Clone, Copy, Debug)]
enum Target {
    Deployment,
    StatefulSet,
    Rollout18,
    Rollout19,
}

impl Target {
    fn kind(self) -> WorkloadKind {
        match self {
            Target::Deployment => WorkloadKind::Deployment,
            Target::StatefulSet => WorkloadKind::StatefulSet,
            _ => WorkloadKind::Rollout,
        }
    }

    fn path(self) -> String {
        let k = self.kind();
        let (group, version) = k.api_version().split_once('/').unwrap();
        format!("/apis/{group}/{version}/namespaces/shop/{}/web", k.plural())
    }

    fn schema(self) -> Option<Value> {
        let map = match self {
            Target::Rollout18 => false,
            Target::Rollout19 => true,
            _ => return None,
        };
        let mut containers = json!({"type": "array", "items": {"type": "object",
            "properties": {"name": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true}});
        if map {
            containers["x-kubernetes-list-type"] = json!("map");
            containers["x-kubernetes-list-map-keys"] = json!(["name"]);
        }
        Some(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer"},
            "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "serviceName": {"type": "string"},
            "template": {"type": "object", "properties": {
                "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"containers": containers}}}}}}}}),
        )
    }
}

/// One write of the sequence.
#[derive(Clone, Debug)]
enum Step {
    /// kerf sets a container's cpu (millicores) and/or memory (MiB).
    Kerf(usize, Option<i64>, Option<i64>),
    /// Argo CD syncs git: requests of both containers (cpu millicores), images at `tag`.
    Argo(i64, i64, u8),
    /// `kubectl edit` changes the app's image tag (an Update of the whole object).
    Edit(u8),
    /// kerf's coordinated HPA target (apply), Argo's (git: 50), the HPA controller's status.
    KerfHpa(i64),
    ArgoHpa,
    HpaStatus(i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (
            0..2usize,
            proptest::option::of(100..2000i64),
            proptest::option::of(64..1024i64)
        )
            .prop_map(|(c, cpu, mem)| Step::Kerf(c, cpu, mem)),
        (
            prop_oneof![Just(1000i64), Just(500)],
            prop_oneof![Just(100i64), Just(200)],
            1..3u8
        )
            .prop_map(|(a, s, t)| Step::Argo(a, s, t)),
        (1..3u8).prop_map(Step::Edit),
        (40..90i64).prop_map(Step::KerfHpa),
        Just(Step::ArgoHpa),
        (1..10i64).prop_map(Step::HpaStatus),
    ]
}

fn manifest(t: Target, app_cpu: i64, sidecar_cpu: i64, tag: u8) -> Value {
    let k = t.kind();
    let mut spec = json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "app", "image": format!("app:{tag}"), "env": [{"name": "MODEL", "value": "m"}],
             "resources": {"requests": {"cpu": format!("{app_cpu}m"), "memory": "512Mi"},
                           "limits": {"nvidia.com/gpu": "1"}}},
            {"name": "sidecar", "image": "proxy:1",
             "resources": {"requests": {"cpu": format!("{sidecar_cpu}m")}}}]}}});
    if matches!(t, Target::StatefulSet) {
        spec["serviceName"] = json!("web");
    }
    json!({"apiVersion": k.api_version(), "kind": k.kind_name(),
           "metadata": {"name": "web", "namespace": "shop"}, "spec": spec})
}

const HPA: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers/web";

fn hpa_body(target: i64) -> Value {
    json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": target}}}]}})
}

type Owners = BTreeSet<&'static str>;

/// Who owns each tracked field, by the model of the sequence: a write that changes a field makes
/// its writer the only owner; an apply that leaves it as it is adds its applier.
#[derive(Default)]
struct Authors {
    /// (container, resource) → its owners.
    requests: BTreeMap<(String, String), Owners>,
    hpa: Owners,
    /// The app's image as git or `kubectl edit` last set it.
    image: String,
}

fn entries(obj: &Value) -> Vec<ManagedFieldsEntry> {
    serde_json::from_value(obj["metadata"]["managedFields"].clone()).unwrap()
}

fn run(t: Target, steps: &[Step]) {
    let path = t.path();
    let kind = t.kind();
    let key = WorkloadKey::new("shop", kind, "web");
    let mut store = Store::new("2026-01-01T12:00:00Z");
    if let Some(s) = t.schema() {
        store.schemas.insert(path.clone(), s);
    }
    store
        .write(&path, APPLY, &manifest(t, 1000, 100, 1), ARGO, true)
        .unwrap();
    store.write(HPA, APPLY, &hpa_body(50), ARGO, true).unwrap();
    let method = template_write_method(kind, t.schema().as_ref()).0;
    let mut authors = Authors {
        hpa: [ARGO].into(),
        image: "app:1".into(),
        ..Authors::default()
    };
    for c in CONTAINERS {
        authors
            .requests
            .insert((c.into(), "cpu".into()), [ARGO].into());
    }
    authors
        .requests
        .insert(("app".into(), "memory".into()), [ARGO].into());
    for (i, s) in steps.iter().enumerate() {
        let live = store.get(&path).clone();
        let list_before = live["spec"]["template"]["spec"]["containers"].clone();
        match s {
            Step::Kerf(c, cpu, mem) => {
                let name = CONTAINERS[*c];
                let set = ContainerRequests::from([(
                    name.to_string(),
                    ResourceRequests {
                        cpu_millis: *cpu,
                        memory_bytes: mem.map(|m| m << 20),
                    },
                )]);
                let before =
                    live["spec"]["template"]["spec"]["containers"][*c]["resources"]["requests"]
                        .clone();
                let dynamic: kube::api::DynamicObject =
                    serde_json::from_value(live.clone()).unwrap();
                let view = Live {
                    metadata: &dynamic.metadata,
                    data: &dynamic.data,
                };
                match method {
                    WriteMethod::JsonPatch => {
                        let (p, _) = json_patch(
                            &live,
                            kind,
                            &BTreeMap::new(),
                            &set,
                            &ContainerRequests::new(),
                            &BTreeMap::new(),
                        );
                        store
                            .write(
                                &path,
                                JSON_PATCH,
                                &serde_json::to_value(&p).unwrap(),
                                "kerf",
                                false,
                            )
                            .unwrap();
                    }
                    _ => {
                        let body = kerf_apply(
                            &key,
                            view,
                            None,
                            &set,
                            &ContainerRequests::new(),
                            Released::NONE,
                        )
                        .body;
                        store.write(&path, APPLY, &body, "kerf", true).unwrap();
                    }
                }
                let after = &store.get(&path)["spec"]["template"]["spec"]["containers"][*c]["resources"]
                    ["requests"];
                for (r, set) in [("cpu", cpu.is_some()), ("memory", mem.is_some())] {
                    if set {
                        let owners = authors.requests.entry((name.into(), r.into())).or_default();
                        let applied = method == WriteMethod::Apply;
                        wrote(owners, "kerf", after.get(r) != before.get(r), applied);
                    }
                }
            }
            Step::Argo(app, side, tag) => {
                let before = live["spec"]["template"]["spec"]["containers"].clone();
                store
                    .write(&path, APPLY, &manifest(t, *app, *side, *tag), ARGO, true)
                    .unwrap();
                let after = store.get(&path)["spec"]["template"]["spec"]["containers"].clone();
                for (ci, c) in CONTAINERS.iter().enumerate() {
                    for r in ["cpu", "memory"] {
                        let git_has = !(ci == 1 && r == "memory");
                        if git_has {
                            let changed = after[ci]["resources"]["requests"].get(r)
                                != before[ci]["resources"]["requests"].get(r);
                            let owners = authors
                                .requests
                                .entry((c.to_string(), r.into()))
                                .or_default();
                            wrote(owners, ARGO, changed, true);
                        }
                    }
                }
                authors.image = format!("app:{tag}");
            }
            Step::Edit(tag) => {
                let mut new = live.clone();
                new["spec"]["template"]["spec"]["containers"][0]["image"] =
                    json!(format!("app:edited-{tag}"));
                store
                    .write(&path, "put", &new, "kubectl-edit", false)
                    .unwrap();
                authors.image = format!("app:edited-{tag}");
            }
            Step::KerfHpa(target) => {
                let before = store.get(HPA)["spec"]["metrics"].clone();
                let body = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "web", "namespace": "shop"},
                    "spec": {"metrics": hpa_body(*target)["spec"]["metrics"]}});
                store.write(HPA, APPLY, &body, "kerf", true).unwrap();
                let changed = store.get(HPA)["spec"]["metrics"] != before;
                wrote(&mut authors.hpa, "kerf", changed, true);
            }
            Step::ArgoHpa => {
                let before = store.get(HPA)["spec"]["metrics"].clone();
                store.write(HPA, APPLY, &hpa_body(50), ARGO, true).unwrap();
                let changed = store.get(HPA)["spec"]["metrics"] != before;
                wrote(&mut authors.hpa, ARGO, changed, true);
            }
            Step::HpaStatus(n) => {
                let mut new = store.get(HPA).clone();
                new["status"] = json!({"currentReplicas": n, "desiredReplicas": n});
                store
                    .write(
                        HPA,
                        STRATEGIC,
                        &json!({"status": new["status"]}),
                        "kube-controller-manager",
                        false,
                    )
                    .unwrap();
            }
        }
        // An atomic list is owned whole: whoever changed it last owns every request in it.
        let manager = match s {
            Step::Kerf(..) => "kerf",
            Step::Argo(..) => ARGO,
            Step::Edit(_) => "kubectl-edit",
            _ => "",
        };
        let list_after = &store.get(&path)["spec"]["template"]["spec"]["containers"];
        if matches!(t, Target::Rollout18) && !manager.is_empty() {
            let changed = *list_after != list_before;
            let applied = matches!(s, Step::Argo(..));
            for owners in authors.requests.values_mut() {
                wrote(owners, manager, changed, applied);
            }
        }
        // A request the step removed (git's atomic list replacing kerf's) has no owner left.
        let containers = store.get(&path)["spec"]["template"]["spec"]["containers"].clone();
        authors.requests.retain(|(c, r), _| {
            containers
                .as_array()
                .into_iter()
                .flatten()
                .any(|x| x["name"] == c.as_str() && x["resources"]["requests"].get(r).is_some())
        });
        check(
            &store,
            &path,
            kind,
            &authors,
            &format!("{t:?} step {i} {s:?} of {steps:?}"),
        );
    }
}

fn check(store: &Store, path: &str, kind: WorkloadKind, authors: &Authors, at: &str) {
    let obj = store.get(path);
    let containers = obj["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2, "{at}: {obj}");
    let app = &containers[0];
    assert_eq!(app["image"], json!(authors.image), "{at}: {app}");
    assert_eq!(
        app["env"],
        json!([{"name": "MODEL", "value": "m"}]),
        "{at}: {app}"
    );
    assert_eq!(
        app["resources"]["limits"],
        json!({"nvidia.com/gpu": "1"}),
        "{at}: {app}"
    );
    assert_eq!(containers[1]["image"], "proxy:1", "{at}");
    // kerf's reading of managedFields: the author of each request owns it.
    let template: k8s_openapi::api::core::v1::PodTemplateSpec =
        serde_json::from_value(obj["spec"]["template"].clone()).unwrap();
    let template: kerf::core::pod::PodTemplateSpec = template.into();
    let projected = project(&entries(obj), kind, template.spec.as_ref());
    for ((c, r), expected) in &authors.requests {
        let field = TrackedField::Request {
            container: c.clone(),
            init: false,
            resource: r.clone(),
        };
        let owners: Owners = projected
            .iter()
            .filter(|m| m.fields.contains(&field))
            .filter_map(|m| MANAGERS.iter().find(|k| **k == m.manager).copied())
            .collect();
        assert_eq!(&owners, expected, "{at}: owners of {c} {r}");
    }
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(store.get(HPA).clone()).unwrap();
    let hpa_owners: Owners = project_hpa(&hpa)
        .iter()
        .filter_map(|m| MANAGERS.iter().find(|k| **k == m.manager).copied())
        .collect();
    assert_eq!(hpa_owners, authors.hpa, "{at}: owners of the HPA's target");
}

const MANAGERS: [&str; 3] = ["kerf", ARGO, "kubectl-edit"];

/// `writer` wrote a field: changed, it is the field's only owner; unchanged, an apply shares it.
fn wrote(owners: &mut Owners, writer: &'static str, changed: bool, apply: bool) {
    if changed {
        *owners = [writer].into();
    } else if apply {
        owners.insert(writer);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn writes_by_every_manager_keep_what_kerf_did_not_mean_to_change(
        target in prop_oneof![Just(Target::Deployment), Just(Target::StatefulSet),
                              Just(Target::Rollout18), Just(Target::Rollout19)],
        steps in proptest::collection::vec(step(), 1..10),
    ) {
        run(target, &steps);
    }
}
