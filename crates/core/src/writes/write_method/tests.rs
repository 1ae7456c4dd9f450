use super::*;
use crate::model::ResourceRequests;

/// `spec.template.spec.containers` as Argo Rollouts v1.8.4's CRD declares it (a plain array) and
/// as v1.9.0's does (a map keyed by name): `manifests/crds/rollout-crd.yaml` upstream.
fn rollout_crd(markers: Value) -> Value {
    let mut containers = json!({"type": "array", "items": {"type": "object",
        "properties": {"name": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true}});
    if let (Some(c), Some(m)) = (containers.as_object_mut(), markers.as_object()) {
        c.extend(m.clone());
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "spec": {"group": "argoproj.io", "names": {"kind": "Rollout"}, "versions": [{"name": "v1alpha1",
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"template": {"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"containers": containers}}}}}}}}}}]}})
}

fn v18() -> Value {
    rollout_crd(json!({}))
}

fn v19() -> Value {
    rollout_crd(json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}))
}

#[test]
fn container_list_reads_the_list_markers_of_the_crd() {
    let schema = |crd: &Value| {
        crd_version_schema(crd, WorkloadKind::Rollout)
            .cloned()
            .unwrap()
    };
    let path = WorkloadKind::Rollout.template_path();
    assert_eq!(container_list(&schema(&v18()), path), ContainerList::Atomic);
    assert_eq!(
        container_list(&schema(&v19()), path),
        ContainerList::MapByName
    );
    let preserved = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-preserve-unknown-fields": true}}});
    assert_eq!(container_list(&preserved, path), ContainerList::Deduced);
    // Keyed by another field: not by name.
    let by_image = rollout_crd(
        json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["image"]}),
    );
    assert_eq!(
        container_list(&schema(&by_image), path),
        ContainerList::Atomic
    );
}

#[test]
fn crd_version_schema_matches_group_kind_and_version() {
    assert!(crd_version_schema(&v18(), WorkloadKind::Rollout).is_some());
    assert!(crd_version_schema(&v18(), WorkloadKind::Deployment).is_none());
    let mut other_version = v18();
    other_version["spec"]["versions"][0]["name"] = json!("v2");
    assert!(crd_version_schema(&other_version, WorkloadKind::Rollout).is_none());
}

#[test]
fn template_write_method_follows_the_schema_and_is_safe_without_one() {
    let schema = |crd: &Value| crd_version_schema(crd, WorkloadKind::Rollout).cloned();
    let method = |kind, crd: Option<Value>| template_write_method(kind, crd.as_ref()).0;
    assert_eq!(method(WorkloadKind::Deployment, None), WriteMethod::Apply);
    assert_eq!(method(WorkloadKind::CronJob, None), WriteMethod::Apply);
    assert_eq!(
        method(WorkloadKind::Rollout, schema(&v19())),
        WriteMethod::Apply
    );
    assert_eq!(
        method(WorkloadKind::Rollout, schema(&v18())),
        WriteMethod::JsonPatch
    );
    let (m, why) = template_write_method(WorkloadKind::Rollout, None);
    assert_eq!(m, WriteMethod::JsonPatch);
    assert!(why.contains("no CRD"), "{why}");
    assert_eq!(
        method(WorkloadKind::InferenceService, None),
        WriteMethod::Evict
    );
    assert_eq!(
        method(WorkloadKind::LeaderWorkerSet, None),
        WriteMethod::Evict
    );
}

fn rollout() -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {"a/b~c": "x"}},
        "spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "1", "memory": "512M"}},
             "env": [{"name": "X", "value": "1"}]},
            {"name": "sidecar", "image": "proxy:1"}]}}}})
}

fn requests(cpu: Option<i64>, memory: Option<i64>) -> ResourceRequests {
    ResourceRequests {
        cpu_millis: cpu,
        memory_bytes: memory,
    }
}

#[test]
fn json_patch_pins_each_container_and_changes_only_its_requests() {
    let live = rollout();
    let set = ContainerRequests::from([
        ("app".to_string(), requests(Some(700), Some(512_000_000))),
        ("sidecar".to_string(), requests(Some(50), None)),
    ]);
    let ann = BTreeMap::from([(
        "rightsizing.kubex.ai/gpu-baseline".to_string(),
        Some("{}".to_string()),
    )]);
    let (patch, missing) = json_patch(
        &live,
        WorkloadKind::Rollout,
        &ann,
        &set,
        &ContainerRequests::new(),
        &BTreeMap::new(),
    );
    assert!(missing.is_empty());
    let text = serde_json::to_value(&patch).unwrap();
    assert_eq!(
        text,
        json!([
            {"op": "add", "path": "/metadata/annotations/rightsizing.kubex.ai~1gpu-baseline", "value": "{}"},
            {"op": "test", "path": "/spec/template/spec/containers/0/name", "value": "app"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/resources/requests/cpu", "value": "700m"},
            {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "sidecar"},
            {"op": "add", "path": "/spec/template/spec/containers/1/resources", "value": {}},
            {"op": "add", "path": "/spec/template/spec/containers/1/resources/requests", "value": {}},
            {"op": "add", "path": "/spec/template/spec/containers/1/resources/requests/cpu", "value": "50m"},
        ]),
        "memory 512M equals 512000000: left as written"
    );
    let mut after = live.clone();
    json_patch::patch(&mut after, &patch).unwrap();
    let c = &after["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[0]["image"], "app:1");
    assert_eq!(
        c[0]["env"],
        live["spec"]["template"]["spec"]["containers"][0]["env"]
    );
    assert_eq!(
        c[0]["resources"]["requests"],
        json!({"cpu": "700m", "memory": "512M"})
    );
    assert_eq!(
        c[1],
        json!({"name": "sidecar", "image": "proxy:1", "resources": {"requests": {"cpu": "50m"}}})
    );
    assert_eq!(after["metadata"]["annotations"]["a/b~c"], "x");
}

#[test]
fn json_patch_fails_on_a_list_that_changed_under_it() {
    let live = rollout();
    let set = ContainerRequests::from([("sidecar".to_string(), requests(Some(50), None))]);
    let (patch, _) = json_patch(
        &live,
        WorkloadKind::Rollout,
        &BTreeMap::new(),
        &set,
        &ContainerRequests::new(),
        &BTreeMap::new(),
    );
    // Git reordered the containers since kerf read the object.
    let mut reordered = live.clone();
    reordered["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .reverse();
    let before = reordered.clone();
    assert!(json_patch::patch(&mut reordered, &patch).is_err());
    assert_eq!(reordered, before, "a failed patch changes nothing");
}

#[test]
fn json_patch_removes_requests_and_annotations_and_skips_missing_containers() {
    let live = rollout();
    let removed = BTreeMap::from([(
        "app".to_string(),
        RequestSet {
            cpu: true,
            memory: false,
        },
    )]);
    let set = ContainerRequests::from([("gone".to_string(), requests(Some(1), None))]);
    let ann = BTreeMap::from([("a/b~c".to_string(), None), ("not/there".to_string(), None)]);
    let (patch, missing) = json_patch(
        &live,
        WorkloadKind::Rollout,
        &ann,
        &set,
        &ContainerRequests::new(),
        &removed,
    );
    assert_eq!(missing, vec!["gone".to_string()]);
    let mut after = live.clone();
    json_patch::patch(&mut after, &patch).unwrap();
    assert!(after["metadata"]["annotations"].get("a/b~c").is_none());
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"],
        json!({"memory": "512M"})
    );
}

/// KubeRay's RayService: the head group's template and each worker group's, the worker groups
/// pinned by their `groupName` at their index; any other kind, its one template unpinned.
#[test]
fn template_locations() {
    let service = json!({"spec": {"rayClusterConfig": {
        "headGroupSpec": {"template": {}},
        "workerGroupSpecs": [{"groupName": "cpu-group", "template": {}},
                             {"groupName": "gpu-group", "template": {}}]}}});
    let got = super::template_locations(&service, WorkloadKind::RayService);
    let paths: Vec<String> = got.iter().map(|(p, _)| p.join(".")).collect();
    assert_eq!(
        paths,
        [
            "spec.rayClusterConfig.headGroupSpec.template",
            "spec.rayClusterConfig.workerGroupSpecs.0.template",
            "spec.rayClusterConfig.workerGroupSpecs.1.template"
        ]
    );
    assert!(got[0].1.is_none());
    let pin = serde_json::to_value(got[2].1.as_ref().unwrap()).unwrap();
    assert_eq!(
        pin,
        json!({"op": "test", "path": "/spec/rayClusterConfig/workerGroupSpecs/1/groupName",
               "value": "gpu-group"})
    );
    let rollout = super::template_locations(&json!({}), WorkloadKind::Rollout);
    assert_eq!(
        rollout,
        vec![(vec!["spec".to_string(), "template".to_string()], None)]
    );
}

/// A container two worker groups share is written in both, each group pinned.
#[test]
fn json_patch_writes_every_ray_group_holding_the_container() {
    let group = |name: &str| {
        json!({"groupName": name, "template": {"spec": {"containers": [
            {"name": "ray-worker", "resources": {"requests": {"cpu": "2"}}}]}}})
    };
    let service = json!({"spec": {"rayClusterConfig": {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head"}]}}},
        "workerGroupSpecs": [group("cpu-group"), group("gpu-group")]}}});
    let set = ContainerRequests::from([(
        "ray-worker".to_string(),
        ResourceRequests {
            cpu_millis: Some(500),
            memory_bytes: None,
        },
    )]);
    let (patch, missing) = json_patch(
        &service,
        WorkloadKind::RayService,
        &BTreeMap::new(),
        &set,
        &ContainerRequests::new(),
        &BTreeMap::new(),
    );
    assert!(missing.is_empty());
    let ops = serde_json::to_value(&patch).unwrap();
    let replaced: Vec<&str> = ops
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["op"] == "replace")
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        replaced,
        [
            "/spec/rayClusterConfig/workerGroupSpecs/0/template/spec/containers/0/resources/requests/cpu",
            "/spec/rayClusterConfig/workerGroupSpecs/1/template/spec/containers/0/resources/requests/cpu"
        ]
    );
    let mut patched = service.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    // The groups swapped under kerf: the pinned names fail the patch instead.
    let mut swapped = service.clone();
    swapped["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["groupName"] = json!("gpu-group");
    assert!(json_patch::patch(&mut swapped, &patch).is_err());
}

#[test]
fn ray_cluster_config_write_method() {
    let (method, reason) = super::ray_cluster_config_write_method();
    assert_eq!(method, WriteMethod::JsonPatch);
    assert!(reason.contains("rayClusterConfig"), "{reason}");
}
