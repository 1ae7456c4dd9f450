//! The managedFields reader: what each manager owns, for conflicts and for release alike.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use serde_json::json;

use super::*;

fn at(min: i64) -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap() + jiff::SignedDuration::from_mins(min)
}

fn cpu() -> TrackedField {
    TrackedField::Request {
        container: "app".into(),
        init: false,
        resource: "cpu".into(),
    }
}

const CPU_PATH: &str = "spec.template.spec.containers[app].resources.requests.cpu";

#[test]
fn tracked_field_paths_round_trip() {
    let fields = [
        cpu(),
        TrackedField::Request {
            container: "init-db".into(),
            init: true,
            resource: "memory".into(),
        },
        TrackedField::Annotation(ANNOTATION_GPU_RECOMMENDATION.into()),
        TrackedField::TemplateAnnotation(ANNOTATION_RESTARTED_AT.into()),
        TrackedField::HpaMetrics("web".into()),
    ];
    for kind in [WorkloadKind::Deployment, WorkloadKind::CronJob] {
        for f in &fields {
            assert_eq!(
                TrackedField::parse(&f.path(kind)).as_ref(),
                Some(f),
                "{f:?}"
            );
        }
    }
    assert_eq!(cpu().path(WorkloadKind::Deployment), CPU_PATH);
    assert_eq!(
        TrackedField::Request {
            container: "app".into(),
            init: false,
            resource: "cpu".into()
        }
        .path(WorkloadKind::CronJob),
        "spec.jobTemplate.spec.template.spec.containers[app].resources.requests.cpu"
    );
    assert_eq!(TrackedField::parse("spec.replicas"), None);
}

#[test]
fn project_keeps_the_tracked_fields_of_each_manager_and_their_time() {
    let entries: Vec<ManagedFieldsEntry> = serde_json::from_value(json!([
        {"manager": "argocd-controller", "operation": "Apply", "time": "2026-01-01T12:05:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:annotations": {"f:team": {}, "f:rightsizing.kubex.ai/gpu-recommendation": {},
                "f:rightsizing.kubex.ai/conflict-acknowledged": {}, "f:rightsizing.kubex.ai/rollback": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {
                "f:metadata": {"f:annotations": {"f:rightsizing.kubex.ai/restartedAt": {}, "f:other": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {},
                    "f:resources": {"f:requests": {"f:cpu": {}, "f:memory": {}}, "f:limits": {"f:cpu": {}}}}}}}}}},
        {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-01-01T12:06:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": "kerf", "operation": "Update", "subresource": "status",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:rightsizing.kubex.ai/x": {}}}}}
    ]))
    .unwrap();
    let projected = project(&entries, WorkloadKind::Deployment, None);
    assert_eq!(projected.len(), 1, "{projected:?}");
    let p = &projected[0];
    assert_eq!(p.manager, "argocd-controller");
    assert_eq!(p.time, Some(at(5)));
    let memory = TrackedField::Request {
        container: "app".into(),
        init: false,
        resource: "memory".into(),
    };
    assert_eq!(
        p.fields,
        BTreeSet::from([
            cpu(),
            memory,
            TrackedField::Annotation(ANNOTATION_GPU_RECOMMENDATION.into()),
            TrackedField::TemplateAnnotation(ANNOTATION_RESTARTED_AT.into()),
        ])
    );
}

#[test]
fn prune_hpa_managed_fields_keeps_only_the_owners_of_spec_metrics() {
    let mut hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "managedFields": [
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-01-01T12:05:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}, "f:maxReplicas": {}}}},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}},
            {"manager": "helm", "operation": "Update",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:minReplicas": {}}}}
        ]},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}
    }))
    .unwrap();
    prune_hpa_managed_fields(&mut hpa.metadata);
    let kept = hpa.metadata.managed_fields.clone().unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].fields_v1.as_ref().unwrap().0,
        json!({"f:spec": {"f:metrics": {}}})
    );
    let owners = project_hpa(&hpa);
    assert_eq!(owners[0].manager, "argocd-controller");
    assert_eq!(owners[0].time, Some(at(5)));
    assert!(
        owners[0]
            .fields
            .contains(&TrackedField::HpaMetrics("web".into()))
    );
}

/// The entries of a workload with kerf's apply, another manager's and a status entry.
fn entries() -> Vec<ManagedFieldsEntry> {
    serde_json::from_value(json!([
        {"manager": "kerf", "operation": "Apply", "time": "2026-01-01T12:01:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:annotations": {"f:rightsizing.kubex.ai/gpu-recommendation": {}}},
            "f:spec": {"f:jobTemplate": {"f:spec": {"f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"app\"}": {"f:resources": {"f:requests": {"f:cpu": {}}}}},
                "f:initContainers": {"k:{\"name\":\"proxy\"}": {"f:resources": {"f:requests": {"f:memory": {}}}}}}}}}}}},
        {"manager": "flux", "operation": "Apply", "time": "2026-01-01T12:02:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:annotations": {"f:team": {}}},
            "f:spec": {"f:jobTemplate": {"f:spec": {"f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"app\"}": {"f:resources": {"f:requests": {"f:memory": {}}}}}}}}}}}},
        {"manager": "kerf", "operation": "Update", "subresource": "status",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:jobTemplate": {"f:spec": {"f:template": {"f:spec": {
                "f:containers": {"k:{\"name\":\"app\"}": {"f:resources": {"f:requests": {"f:memory": {}}}}}}}}}}}}
    ]))
    .unwrap()
}

/// Conflict detection and release read the same walk: what `project` says each manager owns
/// is what `kerf_owned` and `others_owned` say, for the requests of containers and init
/// containers at the kind's template path (a CronJob's here), subresource entries left out.
#[test]
fn one_walk_serves_conflict_detection_and_release() {
    let meta = ObjectMeta {
        managed_fields: Some(entries()),
        ..Default::default()
    };
    let kind = WorkloadKind::CronJob;
    let kerf = kerf_owned(&meta, kind, None);
    let others = others_owned(&meta, kind, None);
    assert_eq!(
        kerf.annotations,
        BTreeSet::from(["rightsizing.kubex.ai/gpu-recommendation".to_string()])
    );
    assert_eq!(others.annotations, BTreeSet::from(["team".to_string()]));
    let set = |cpu, memory| RequestSet { cpu, memory };
    assert_eq!(
        kerf.requests,
        BTreeMap::from([
            ("app".to_string(), set(true, false)),
            ("proxy".to_string(), set(false, true)),
        ])
    );
    assert_eq!(
        others.requests,
        BTreeMap::from([("app".to_string(), set(false, true))])
    );

    let projected = project(meta.managed_fields.as_deref().unwrap(), kind, None);
    let managers: Vec<&str> = projected.iter().map(|m| m.manager.as_str()).collect();
    assert_eq!(managers, ["kerf", "flux"], "the status entry is left out");
    assert_eq!(projected[0].time, Some(at(1)));
    for (p, owned) in projected.iter().zip([&kerf, &others]) {
        let requests: BTreeSet<(String, bool, String)> = p
            .fields
            .iter()
            .filter_map(|f| match f {
                TrackedField::Request {
                    container,
                    resource,
                    ..
                } => Some((container.clone(), true, resource.clone())),
                _ => None,
            })
            .collect();
        let expected: BTreeSet<(String, bool, String)> = owned
            .requests
            .iter()
            .flat_map(|(c, s)| {
                [("cpu", s.cpu), ("memory", s.memory)]
                    .into_iter()
                    .filter(|(_, on)| *on)
                    .map(|(r, _)| (c.clone(), true, r.to_string()))
            })
            .collect();
        assert_eq!(requests, expected, "{}", p.manager);
    }
}

/// An `autoscaling/v1` entry owns the target as `spec.targetCPUUtilizationPercentage`: it owns
/// the HPA's target as much as a v2 entry owning `spec.metrics`.
#[test]
fn owns_hpa_metrics_under_either_autoscaling_version() {
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "managedFields": [
            {"manager": "argocd-controller", "operation": "Apply", "apiVersion": "autoscaling/v1",
             "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:targetCPUUtilizationPercentage": {}, "f:maxReplicas": {}}}},
            {"manager": "kerf", "operation": "Apply", "apiVersion": "autoscaling/v2",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}}}},
            {"manager": "helm", "operation": "Update", "apiVersion": "autoscaling/v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:minReplicas": {}}}}
        ]},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}
    }))
    .unwrap();
    let owners: Vec<String> = project_hpa(&hpa).into_iter().map(|m| m.manager).collect();
    assert_eq!(owners, vec!["argocd-controller", "kerf"]);
    assert_eq!(hpa_metrics_owners(&hpa), (true, true));
}

/// A list without list markers (Argo Rollouts before v1.9) is owned whole (`f:containers: {}`):
/// its owner owns the requests of every container the template has.
#[test]
fn entry_fields_reads_an_atomic_containers_list_as_every_containers_requests() {
    let mf: ManagedFieldsEntry = serde_json::from_value(json!({
        "manager": "argocd-controller", "operation": "Apply", "apiVersion": "argoproj.io/v1alpha1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}
    }))
    .unwrap();
    let template: k8s_openapi::api::core::v1::PodSpec = serde_json::from_value(json!({
        "containers": [
            {"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "proxy", "resources": {"requests": {"cpu": "100m"}}}
        ]
    }))
    .unwrap();
    let template: PodSpec = template.into();
    let fields = entry_fields(&mf, WorkloadKind::Rollout, Some(&template)).unwrap();
    assert_eq!(
        fields.requests,
        vec![
            ("app".to_string(), false, "cpu"),
            ("app".to_string(), false, "memory"),
            ("proxy".to_string(), false, "cpu"),
        ]
    );
    // Without the template, nothing can be named.
    assert!(
        entry_fields(&mf, WorkloadKind::Rollout, None)
            .unwrap()
            .requests
            .is_empty()
    );
}
