//! One test per rule of docs/gitops.md, named after it.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use super::*;
use crate::model::{ANNOTATION_GPU_RECOMMENDATION, WorkloadKey};
use kerf_api::{AppliedChange, HpaRecommendation, ResourceValues, WorkloadKind};
use kerf_support::small_map::SmallMap;

fn at(min: i64) -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap() + Duration::from_mins(min)
}

fn cpu() -> TrackedField {
    TrackedField::Request {
        container: "app".into(),
        init: false,
        resource: "cpu".into(),
    }
}

fn manager(name: &str, op: &str, time: Option<i64>, fields: &[TrackedField]) -> FieldManager {
    FieldManager {
        manager: name.into(),
        operation: op.into(),
        time: time.map(at),
        fields: fields.iter().cloned().collect(),
    }
}

/// `shop/web` whose template has `app` at `cpu`, with `managers`.
fn workload(cpu: &str, managers: Vec<FieldManager>) -> Workload {
    let template: k8s_openapi::api::core::v1::PodTemplateSpec = serde_json::from_value(json!({
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}
    }))
    .unwrap();
    Workload {
        key: WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
        uid: None,
        labels: Default::default(),
        annotations: Default::default(),
        template: template.into(),
        replicas: Some(3),
        field_managers: managers,
        ownership: Default::default(),
    }
}

/// kerf applies app cpu 700m, last planned at minute `applied`.
fn status(applied: i64, conflict: Option<ConflictStatus>) -> RecommendationStatus {
    RecommendationStatus {
        applied: Some(Box::new(AppliedChange {
            requests: SmallMap::from([(
                "app".to_string(),
                ResourceValues {
                    cpu: Some(Quantity("700m".into())),
                    ..Default::default()
                },
            )]),
            limits: SmallMap::new(),
            hpa: None,
            gpu_annotations: SmallMap::new(),
        })),
        last_applied_time: Some(render(at(applied))),
        conflict: conflict.map(Box::new),
        ..Default::default()
    }
}

/// Argo CD took app cpu back to 1 at minute `t`; kerf last wrote at `kerf`.
fn taken_back_at(t: i64, kerf: i64) -> Workload {
    workload(
        "1",
        vec![
            manager("kerf", "Apply", Some(kerf), &[]),
            manager("argocd-controller", "Apply", Some(t), &[cpu()]),
        ],
    )
}

fn input<'a>(w: &'a Workload, previous: &'a RecommendationStatus, now: i64) -> ConflictInput<'a> {
    ConflictInput {
        workload: w,
        hpas: &[],
        previous: Some(previous),
        now: at(now),
        rules: ConflictRules::default(),
    }
}

const CPU_PATH: &str = "spec.template.spec.containers[app].resources.requests.cpu";

/// docs/gitops.md#detection.
#[test]
fn takeback_rule_counts_another_managers_change_after_kerfs_write() {
    let prev = status(0, None);
    let w = taken_back_at(2, 1);
    let found = takebacks(&input(&w, &prev, 5), None);
    assert_eq!(found.len(), 1, "{found:?}");
    let (field, record, t) = &found[0];
    assert_eq!(field, &cpu());
    assert_eq!(record.field, CPU_PATH);
    assert_eq!(record.manager, "argocd-controller");
    assert_eq!(*t, at(2));

    // Counted already: not again.
    assert!(takebacks(&input(&w, &prev, 5), Some(at(2))).is_empty());
    // Before kerf's last write (a write of kerf's that failed leaves the older change).
    let w = taken_back_at(2, 3);
    assert!(takebacks(&input(&w, &prev, 5), None).is_empty());
    let later_plan = status(4, None);
    let w = taken_back_at(2, 1);
    assert!(takebacks(&input(&w, &later_plan, 5), None).is_empty());
    // kerf shares the field: the other manager applied kerf's value.
    let shared = workload(
        "1",
        vec![
            manager("kerf", "Apply", Some(1), &[cpu()]),
            manager("argocd-controller", "Apply", Some(2), &[cpu()]),
        ],
    );
    assert!(takebacks(&input(&shared, &prev, 5), None).is_empty());
    // The other manager holds kerf's own value: no fight.
    let same = workload(
        "700m",
        vec![manager("argocd-controller", "Apply", Some(2), &[cpu()])],
    );
    assert!(takebacks(&input(&same, &prev, 5), None).is_empty());
    // A request kerf does not apply (none in status.applied) is not kerf's.
    let not_applied = RecommendationStatus {
        applied: None,
        ..status(0, None)
    };
    let w = taken_back_at(2, 1);
    assert!(takebacks(&input(&w, &not_applied, 5), None).is_empty());
    // kerf's annotation written by someone else is taken whatever its value.
    let ann = TrackedField::Annotation(ANNOTATION_GPU_RECOMMENDATION.into());
    let w = workload(
        "700m",
        vec![
            manager("kerf", "Apply", Some(1), &[]),
            manager("flux-kustomize", "Apply", Some(2), &[ann]),
        ],
    );
    let found = takebacks(&input(&w, &prev, 5), None);
    assert_eq!(
        found[0].1.field,
        "metadata.annotations[rightsizing.kubex.ai/gpu-recommendation]"
    );
    assert_eq!(found[0].1.manager, "flux-kustomize");
    // An entry without a time cannot be placed.
    let w = workload(
        "1",
        vec![manager("argocd-controller", "Apply", None, &[cpu()])],
    );
    assert!(takebacks(&input(&w, &prev, 5), None).is_empty());
}

/// docs/gitops.md#blocking: three take-backs of one field within an hour block, with the
/// event message naming the manager; two do not.
#[test]
fn blocking_rule_blocks_after_three_takebacks_within_the_window() {
    let mut prev = status(0, None);
    let mut verdicts = Vec::new();
    for round in 0..3 {
        let kerf = round * 10;
        let w = taken_back_at(kerf + 2, kerf + 1);
        prev.last_applied_time = Some(render(at(kerf)));
        let a = assess(&input(&w, &prev, kerf + 5));
        prev.conflict = a.status.clone();
        verdicts.push(a);
    }
    assert!(!verdicts[0].blocked && !verdicts[1].blocked);
    assert_eq!(verdicts[1].counted.len(), 1);
    let last = &verdicts[2];
    assert!(last.blocked);
    let (t, message) = last.blocking.clone().unwrap();
    assert_eq!(t.manager, "argocd-controller");
    assert_eq!(
        message,
        "argocd-controller took back spec.template.spec.containers[app].resources.requests.cpu \
         3 times within 1h (last at 2026-01-01T12:22:00Z): kerf stops writing this workload \
         until argocd-controller's value has been stable for 1h or the workload is annotated \
         rightsizing.kubex.ai/conflict-acknowledged; admission still sets kerf's values on \
         new pods. Let kerf own its fields in the GitOps tool (docs/gitops.md)"
    );
    let c = last.condition.clone().unwrap();
    assert_eq!(
        (c.type_.as_str(), c.status, c.reason.as_str()),
        ("Conflict", true, "TakenBack")
    );
    let st = last.status.clone().unwrap();
    assert_eq!(st.blocked_since.as_deref(), Some("2026-01-01T12:25:00Z"));
    assert_eq!(st.takebacks.len(), 3);

    // Blocked: the next cycle neither counts nor blocks again (no second event).
    let w = taken_back_at(22, 21);
    let again = assess(&input(&w, &prev, 30));
    assert!(again.blocked && again.blocking.is_none() && again.counted.is_empty());
    assert_eq!(again.condition, None);
}

/// docs/gitops.md#blocking: take-backs older than the window are forgotten.
#[test]
fn blocking_rule_counts_only_the_window() {
    let mut prev = status(0, None);
    // 40 minutes apart: the third comes 80 minutes after the first.
    for (i, kerf) in [0, 40, 80].into_iter().enumerate() {
        let w = taken_back_at(kerf + 2, kerf + 1);
        prev.last_applied_time = Some(render(at(kerf)));
        let a = assess(&input(&w, &prev, kerf + 5));
        assert!(!a.blocked, "round {i}");
        prev.conflict = a.status.clone();
    }
    assert_eq!(
        prev.conflict.unwrap().takebacks.len(),
        2,
        "the first fell out"
    );
}

/// docs/gitops.md#hpa: an HPA's `spec.metrics` taken back once blocks at once.
#[test]
fn hpa_rule_blocks_at_the_first_takeback_of_spec_metrics() {
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "managedFields": [
            {"manager": "argocd-controller", "operation": "Apply", "time": "2026-01-01T12:02:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}}}},
            {"manager": "kerf", "operation": "Apply", "time": "2026-01-01T12:01:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}
        ]},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}
    }))
    .unwrap();
    let prev = hpa_pair_applied();
    let w = workload("700m", vec![manager("kerf", "Apply", Some(1), &[cpu()])]);
    let hpas = [hpa];
    let a = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &prev, 5)
    });
    assert!(a.blocked);
    let (t, message) = a.blocking.unwrap();
    assert_eq!(t.field, "HorizontalPodAutoscaler/web spec.metrics");
    assert!(
        message.starts_with(
            "argocd-controller changed HorizontalPodAutoscaler/web spec.metrics after kerf set it \
             (at 2026-01-01T12:02:00Z); kerf does not take an HPA's metrics back"
        ),
        "{message}"
    );
    // kerf still owning spec.metrics (applied as it is) is no take-back.
    let mut shared = hpas[0].clone();
    shared.metadata.managed_fields.as_mut().unwrap()[1]
        .fields_v1
        .as_mut()
        .unwrap()
        .0 = json!({"f:spec": {"f:metrics": {}}});
    let shared = [shared];
    let a = assess(&ConflictInput {
        hpas: &shared,
        ..input(&w, &prev, 5)
    });
    assert!(!a.blocked && a.counted.is_empty());
}

fn blocked_since(min: i64, last_takeback: i64) -> ConflictStatus {
    ConflictStatus {
        takebacks: vec![FieldTakeback {
            field: CPU_PATH.into(),
            manager: "argocd-controller".into(),
            time: render(at(last_takeback)),
        }],
        blocked_since: Some(render(at(min))),
        counted_through: Some(render(at(last_takeback))),
        resumed_at: None,
        acknowledged: None,
        half_pair: None,
    }
}

/// docs/gitops.md#resuming: blocked until the other manager's value is an hour old.
#[test]
fn stability_rule_resumes_once_the_other_managers_value_is_unchanged_for_the_window() {
    let prev = status(0, Some(blocked_since(25, 22)));
    let w = taken_back_at(22, 21);
    let a = assess(&input(&w, &prev, 81));
    assert!(
        a.blocked && a.resumed.is_none(),
        "59 minutes: still blocked"
    );
    let a = assess(&input(&w, &prev, 82));
    assert!(!a.blocked);
    assert_eq!(a.resumed, Some(Resumed::Stable));
    let c = a.condition.unwrap();
    assert_eq!((c.status, c.reason.as_str()), (false, "Stable"));
    assert_eq!(
        c.message,
        "argocd-controller left kerf's fields unchanged for 1h: kerf writes the workload again"
    );
    let st = a.status.unwrap();
    assert!(st.blocked_since.is_none() && st.takebacks.is_empty());
    assert_eq!(st.counted_through.as_deref(), Some("2026-01-01T13:22:00Z"));
    assert_eq!(st.resumed_at.as_deref(), Some("2026-01-01T13:22:00Z"));
    // The old take-back is forgiven: not counted again after the resume.
    let next = status(0, Some(*st));
    assert!(assess(&input(&w, &next, 83)).counted.is_empty());

    // The manager changed the object again meanwhile: the hour starts over.
    let w = taken_back_at(50, 21);
    let a = assess(&input(&w, &prev, 82));
    assert!(a.blocked && a.resumed.is_none());
}

/// docs/gitops.md#resuming: a new value of the acknowledge annotation resumes at once and
/// forgets the count; the same value again does nothing.
#[test]
fn acknowledge_rule_resumes_at_once_and_forgets_the_count() {
    let prev = status(0, Some(blocked_since(25, 22)));
    let mut w = taken_back_at(22, 21);
    w.annotations
        .insert(ANNOTATION_CONFLICT_ACKNOWLEDGED.into(), "2026-01-01".into());
    let a = assess(&input(&w, &prev, 30));
    assert!(!a.blocked);
    assert_eq!(a.resumed, Some(Resumed::Acknowledged("2026-01-01".into())));
    let c = a.condition.unwrap();
    assert_eq!((c.status, c.reason.as_str()), (false, "Acknowledged"));
    let st = a.status.unwrap();
    assert_eq!(st.acknowledged.as_deref(), Some("2026-01-01"));
    assert!(st.takebacks.is_empty() && st.blocked_since.is_none());

    // Blocked again later with the annotation still there: it does not resume by itself.
    let again = status(
        0,
        Some(ConflictStatus {
            acknowledged: Some("2026-01-01".into()),
            ..blocked_since(40, 38)
        }),
    );
    let a = assess(&input(&w, &again, 45));
    assert!(a.blocked && a.resumed.is_none());
}

/// docs/gitops.md#resuming: within the window after a resume on stability, the first
/// take-back blocks again; after it, three are needed again.
#[test]
fn probation_rule_blocks_at_the_first_takeback_after_a_resume() {
    let resumed = ConflictStatus {
        counted_through: Some(render(at(82))),
        resumed_at: Some(render(at(82))),
        ..Default::default()
    };
    let prev = status(83, Some(resumed.clone()));
    let w = taken_back_at(90, 83);
    let a = assess(&input(&w, &prev, 95));
    assert!(a.blocked);
    let (_, message) = a.blocking.unwrap();
    assert!(
        message.starts_with(
            "argocd-controller took back spec.template.spec.containers[app].resources.requests.cpu \
             again within 1h of kerf resuming (at 2026-01-01T13:30:00Z)"
        ),
        "{message}"
    );
    // Past the window the probation is over.
    let prev = status(150, Some(resumed));
    let w = taken_back_at(155, 150);
    let a = assess(&input(&w, &prev, 160));
    assert!(!a.blocked);
    assert_eq!(a.counted.len(), 1);
    assert_eq!(a.status.unwrap().resumed_at, None);
}

/// The HPA `web` on CPU at `target`, its metrics owned by `owner` since minute `since`.
fn hpa_at(target: i32, owner: &str, since: i64) -> HorizontalPodAutoscaler {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop", "managedFields": [
            {"manager": owner, "operation": "Apply", "time": render(at(since)),
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:metrics": {}}}}
        ]},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": target}}}]}
    }))
    .unwrap()
}

/// kerf's applied status of a change that moved the HPA `web`'s cpu target 50 → 71 %.
fn hpa_pair_applied() -> RecommendationStatus {
    let mut prev = status(0, None);
    prev.applied.as_mut().unwrap().hpa = Some(Box::new(HpaRecommendation {
        name: "web".into(),
        resource: Some("cpu".into()),
        target_before: Some(50),
        target_after: Some(71),
        skip_reason: None,
    }));
    prev
}

/// kerf applies app cpu 700m with the HPA's target 50 → 71 %, from 1 core before its change.
fn pair_status() -> RecommendationStatus {
    let mut prev = hpa_pair_applied();
    prev.previous_hpa_target = Some(50);
    prev.original_requests = SmallMap::from([(
        "app".to_string(),
        ResourceValues {
            cpu: Some(Quantity("1".into())),
            ..Default::default()
        },
    )]);
    prev
}

/// The template has app cpu at `cpu`, kerf's apply (minute 0) owning it when `kerfs`.
fn kerf_template(value: &str, kerfs: bool) -> Workload {
    let owned = if kerfs { vec![cpu()] } else { Vec::new() };
    workload(value, vec![manager("kerf", "Apply", Some(0), &owned)])
}

/// Argo CD took the HPA's metrics back to 50 % at minute 2; the template has app cpu at
/// `value`, kerf's: the verdict at minute `now`.
fn hpa_taken_back(prev: &RecommendationStatus, value: &str, now: i64) -> Assessment {
    let w = kerf_template(value, true);
    let hpas = [hpa_at(50, "argocd-controller", 2)];
    assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, prev, now)
    })
}

/// docs/gitops.md#half-a-coordinated-pair, the other way round.
#[test]
fn half_pair_requests_restore_sets_the_requests_before_the_change_back_and_blocks_at_once() {
    let prev = pair_status();
    // The template still has kerf's 700m.
    let a = hpa_taken_back(&prev, "700m", 5);
    let restore = a
        .restore_requests
        .clone()
        .expect("the requests are set back");
    assert_eq!(restore.hpa, "web");
    assert_eq!(restore.resource, "cpu");
    assert_eq!(restore.plan.requests["app"].cpu_millis, Some(1000));
    assert_eq!(restore.plan.requests["app"].memory_bytes, None);
    assert!(restore.plan.hpa.is_none(), "the HPA is the other manager's");
    assert_eq!(a.restore_hpa, None);
    assert!(a.blocked, "one take-back of the pair blocks");
    let (_, message) = a.blocking.clone().unwrap();
    assert!(
        message.contains("sets those requests back to the ones before its change (app 1)"),
        "{message}"
    );
    assert_eq!(a.condition.as_ref().unwrap().message, message);
    assert_eq!(
        a.status.as_ref().unwrap().half_pair.as_deref(),
        prev.applied.as_deref(),
        "the pair is recorded for the retries"
    );
    // Argo CD took both halves back (git's 1 core): nothing to restore, the HPA rule blocks.
    let a = hpa_taken_back(&prev, "1", 5);
    assert_eq!(a.restore_requests, None);
    assert!(a.blocked);
    // The HPA still kerf's: a whole pair, nothing taken back.
    let w = kerf_template("700m", true);
    let hpas = [hpa_at(71, "kerf", 0)];
    let a = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &prev, 5)
    });
    assert_eq!(a.restore_requests, None);
    assert!(!a.blocked);
}

/// docs/gitops.md#half-a-coordinated-pair: a restore of either half that did not go through
/// is planned again each cycle while blocked, and no more once the object has it.
#[test]
fn a_half_pair_restore_that_did_not_go_through_is_planned_again_while_blocked() {
    let prev = pair_status();
    // The requests half: the restore failed, the template still has 700m.
    let first = hpa_taken_back(&prev, "700m", 5);
    // As the cycle wrote it: blocked, `status.applied` no longer carrying the pair.
    let blocked = RecommendationStatus {
        applied: None,
        conflict: first.status.clone(),
        ..prev.clone()
    };
    let again = hpa_taken_back(&blocked, "700m", 10);
    assert!(again.blocked && again.blocking.is_none());
    assert!(first.restore_requests.is_some());
    assert_eq!(again.restore_requests, first.restore_requests);
    // It went through: nothing more.
    let done = hpa_taken_back(&blocked, "1", 15);
    assert!(done.blocked);
    assert_eq!(done.restore_requests, None);

    // The HPA half: Argo CD took app's cpu back to 1; the HPA restore failed (still 71 %).
    let w = taken_back_at(2, 1);
    let hpas = [hpa_at(71, "kerf", 0)];
    let first = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &prev, 5)
    });
    assert_eq!(first.restore_hpa, Some(("web".into(), "cpu".into(), 50)));
    let blocked = RecommendationStatus {
        applied: None,
        conflict: first.status.clone(),
        ..prev.clone()
    };
    let again = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &blocked, 10)
    });
    assert_eq!(again.restore_hpa, Some(("web".into(), "cpu".into(), 50)));
    let hpas = [hpa_at(50, "kerf", 10)];
    let done = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &blocked, 15)
    });
    assert!(done.blocked);
    assert_eq!(done.restore_hpa, None);
    // Resumed (acknowledged): kerf writes the whole pair itself, no half is restored.
    let mut acked = w.clone();
    acked
        .annotations
        .insert(ANNOTATION_CONFLICT_ACKNOWLEDGED.into(), "now".into());
    let hpas = [hpa_at(71, "kerf", 0)];
    let resumed = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&acked, &blocked, 20)
    });
    assert!(!resumed.blocked);
    assert_eq!(resumed.restore_hpa, None);
}

/// docs/gitops.md#half-a-coordinated-pair.
#[test]
fn half_pair_rule_restores_the_hpa_target_before_the_change_and_blocks_at_once() {
    let hpa = |target: i32, owner: &str| hpa_at(target, owner, 0);
    let prev = pair_status();
    // Argo CD took app's cpu back to 1 core; the HPA is still at kerf's 71 %.
    let w = taken_back_at(2, 1);
    let hpas = [hpa(71, "kerf")];
    let a = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &prev, 5)
    });
    assert_eq!(a.restore_hpa, Some(("web".into(), "cpu".into(), 50)));
    assert!(a.blocked, "one take-back of the pair blocks");
    let (_, message) = a.blocking.unwrap();
    assert!(
        message.contains("sets its cpu target back to 50%"),
        "{message}"
    );
    // The HPA not at kerf's target any more: nothing to restore, and the request's take-back
    // counts as any other (one of three).
    let hpas = [hpa(50, "kerf")];
    let a = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &prev, 5)
    });
    assert_eq!(a.restore_hpa, None);
    assert!(!a.blocked);
    // The HPA no longer kerf's: nothing to restore (the HPA rule blocks).
    let hpas = [hpa(71, "argocd-controller")];
    let a = assess(&ConflictInput {
        hpas: &hpas,
        ..input(&w, &prev, 5)
    });
    assert_eq!(a.restore_hpa, None);
    // A change without an HPA: no pair.
    let a = assess(&input(&w, &status(0, None), 5));
    assert_eq!(a.restore_hpa, None);
}
