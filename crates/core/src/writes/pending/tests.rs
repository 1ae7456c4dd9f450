use super::*;
use kerf_api::{HpaRecommendation, ResourceValues};
use kerf_support::small_map::SmallMap;

fn at(secs: i64) -> Timestamp {
    "2026-01-01T12:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_secs(secs)
}

fn change(cpu: &str, before: i32, after: i32) -> AppliedChange {
    AppliedChange {
        requests: SmallMap::from_iter([(
            "app".to_string(),
            ResourceValues {
                cpu: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    cpu.into(),
                )),
                ..Default::default()
            },
        )]),
        hpa: Some(Box::new(HpaRecommendation {
            name: "web".into(),
            resource: Some("cpu".into()),
            target_before: Some(before),
            target_after: Some(after),
            skip_reason: None,
        })),
        ..Default::default()
    }
}

#[test]
fn retry_delay_doubles_from_thirty_seconds_to_ten_minutes() {
    let secs: Vec<i64> = (1..=7).map(|a| retry_delay(a).as_secs()).collect();
    assert_eq!(secs, [30, 60, 120, 240, 480, 600, 600]);
    assert_eq!(retry_delay(u32::MAX).as_secs(), 600);
}

#[test]
fn retry_due_once_the_backoff_ran_out() {
    let p = |after: Option<i64>| PendingChange {
        next_attempt_after: after.map(|s| at(s).to_string()),
        ..Default::default()
    };
    assert!(retry_due(&p(None), at(0)), "written before any part failed");
    assert!(!retry_due(&p(Some(30)), at(29)));
    assert!(retry_due(&p(Some(30)), at(30)));
}

#[test]
fn superseded_by_another_plan_only() {
    let p = PendingChange {
        change: Some(Box::new(change("700m", 50, 71))),
        ..Default::default()
    };
    assert!(!superseded(&p, Some(&change("700m", 50, 71)), None));
    assert!(superseded(&p, Some(&change("650m", 50, 76)), None));
    assert!(superseded(&p, Some(&change("700m", 50, 71)), Some("{}")));
}

#[test]
fn restart_left_while_the_record_lists_it() {
    let status = |parts: &[&str]| RecommendationStatus {
        pending: Some(Box::new(PendingChange {
            parts: parts.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert!(restart_left(Some(&status(&["restart"]))));
    assert!(restart_left(Some(&status(&["gpuAnnotations", "restart"]))));
    assert!(!restart_left(Some(&status(&["hpa"]))));
    assert!(!restart_left(Some(&RecommendationStatus::default())));
    assert!(!restart_left(None));
}

#[test]
fn intent_status_claims_nothing_not_true_yet() {
    let previous = RecommendationStatus {
        phase: RecommendationPhase::Applied,
        applied: Some(Box::new(change("1", 40, 50))),
        last_applied_time: Some(at(-600).to_string()),
        pending: Some(Box::new(PendingChange {
            attempts: 2,
            ..Default::default()
        })),
        ..Default::default()
    };
    let done = RecommendationStatus {
        phase: RecommendationPhase::Applied,
        applied: Some(Box::new(change("700m", 50, 71))),
        last_applied_time: Some(at(0).to_string()),
        ..Default::default()
    };
    let parts = [ChangePart::Template, ChangePart::Hpa];
    let s = intent_status(&done, Some(&previous), &parts, None);
    assert_eq!(s.phase, RecommendationPhase::Pending);
    assert_eq!(s.reason.as_deref(), Some(REASON_CHANGE_INCOMPLETE));
    assert_eq!(s.applied, previous.applied, "admission serves what is true");
    assert_eq!(s.last_applied_time, previous.last_applied_time);
    let p = s.pending.unwrap();
    assert_eq!(p.parts, ["template", "hpa"]);
    assert_eq!(p.attempts, 3);
    assert_eq!(
        p.change.as_deref(),
        done.applied.as_deref(),
        "what a retry writes"
    );
    assert!(p.failed_part.is_none() && p.next_attempt_after.is_none());
}

#[test]
fn failed_status_names_the_part_its_error_and_the_next_attempt() {
    let done = RecommendationStatus {
        applied: Some(Box::new(change("700m", 50, 71))),
        ..Default::default()
    };
    let intent = intent_status(&done, None, &[ChangePart::Template, ChangePart::Hpa], None);
    let s = failed_status(&intent, &[ChangePart::Hpa], "500 (after 3 attempts)", at(0));
    let p = s.pending.unwrap();
    assert_eq!(p.parts, ["hpa"]);
    assert_eq!(p.failed_part.as_deref(), Some("hpa"));
    assert_eq!(p.error.as_deref(), Some("500 (after 3 attempts)"));
    assert_eq!(p.next_attempt_after, Some(at(30).to_string()));
    assert_eq!(s.phase, RecommendationPhase::Pending);
    assert!(s.applied.is_none());
}

mod units {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::model::ContainerRequests;
    use crate::persisted::PersistedRecommendation;
    use crate::snapshot::Workload;
    use crate::writes::eviction::PodEviction;
    use crate::writes::{CoordinatedChange, EvictWrite, HpaTarget};
    use kerf_api::{RightsizingRecommendationSpec, WorkloadKind, WriteMethod};

    fn web() -> Arc<Workload> {
        let template = serde_json::from_value(json!({
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}
        }))
        .unwrap();
        Arc::new(Workload {
            key: WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
            uid: None,
            labels: Default::default(),
            annotations: Default::default(),
            template,
            replicas: Some(3),
            field_managers: Vec::new(),
            ownership: Default::default(),
        })
    }

    fn coordinated() -> WriteOp {
        let mut requests = ContainerRequests::default();
        requests.insert(
            "app".into(),
            crate::model::ResourceRequests {
                cpu_millis: Some(700),
                memory_bytes: None,
            },
        );
        WriteOp::Coordinated(Box::new(CoordinatedChange {
            workload: WorkloadWrite {
                observed: web(),
                gpu: None,
                requests: Some(requests),
                limits: None,
                method: WriteMethod::Apply,
            },
            hpa: HpaTarget {
                namespace: "shop".into(),
                name: "web".into(),
                resource: "cpu".into(),
                average_utilization: 71,
                observed: None,
            },
        }))
    }

    fn event(reason: &str) -> WriteOp {
        WriteOp::Event(Box::new(EventWrite {
            regarding: web().key.clone(),
            uid: None,
            warning: false,
            reason: reason.into(),
            action: "Rightsize".into(),
            note: String::new(),
            details: BTreeMap::new(),
        }))
    }

    fn recommendation(previous: Option<RecommendationStatus>) -> WriteOp {
        let done = RecommendationStatus {
            phase: RecommendationPhase::Applied,
            applied: Some(Box::new(change("700m", 50, 71))),
            ..Default::default()
        };
        WriteOp::Recommendation(Box::new(RecommendationWrite {
            namespace: "shop".into(),
            name: "deployment-web".into(),
            spec: RightsizingRecommendationSpec::default(),
            status: Some(done),
            owner: None,
            observed: previous.map(|s| PersistedRecommendation {
                status: Some(Box::new(s)),
                ..Default::default()
            }),
        }))
    }

    fn kinds(ops: &[WriteOp]) -> Vec<String> {
        ops.iter()
            .map(|op| match op {
                WriteOp::Change(c) => format!(
                    "Change[{}; {}]",
                    c.parts
                        .iter()
                        .flat_map(parts_of)
                        .map(|p| p.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    c.events
                        .iter()
                        .map(|e| e.reason.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                WriteOp::Event(e) => format!("Event {}", e.reason),
                WriteOp::Recommendation(_) => "Recommendation".into(),
                WriteOp::Coordinated(_) => "Coordinated".into(),
                WriteOp::Evict(_) => "Evict".into(),
                other => other.subject(),
            })
            .collect()
    }

    #[test]
    fn whole_changes_make_the_parts_their_record_and_the_applied_event_one_unit() {
        let ops = vec![
            recommendation(None),
            event("Blocked"),
            coordinated(),
            event("Applied"),
        ];
        let out = whole_changes(ops, at(0));
        assert_eq!(
            kinds(&out),
            ["Change[template,hpa; Applied]", "Event Blocked"]
        );
        let WriteOp::Change(c) = &out[0] else {
            unreachable!()
        };
        let intent = c.intent.status.as_ref().unwrap();
        assert_eq!(intent.phase, RecommendationPhase::Pending);
        assert!(intent.applied.is_none());
        assert_eq!(
            c.done.status.as_ref().unwrap().phase,
            RecommendationPhase::Applied
        );
    }

    #[test]
    fn whole_changes_wait_out_the_backoff_of_the_same_change_only() {
        let backing_off = |planned: AppliedChange| RecommendationStatus {
            pending: Some(Box::new(PendingChange {
                parts: vec!["hpa".into()],
                next_attempt_after: Some(at(30).to_string()),
                change: Some(Box::new(planned)),
                attempts: 1,
                ..Default::default()
            })),
            ..Default::default()
        };
        let ops = || vec![coordinated(), event("Applied")];
        let same = [recommendation(Some(backing_off(change("700m", 50, 71))))];
        let out = whole_changes(same.iter().cloned().chain(ops()).collect(), at(10));
        assert!(out.is_empty(), "{:?}", kinds(&out));
        let out = whole_changes(same.iter().cloned().chain(ops()).collect(), at(30));
        assert_eq!(kinds(&out), ["Change[template,hpa; Applied]"], "due");
        let other = [recommendation(Some(backing_off(change("650m", 50, 76))))];
        let out = whole_changes(other.into_iter().chain(ops()).collect(), at(10));
        assert_eq!(kinds(&out), ["Change[template,hpa; Applied]"], "superseded");
    }

    #[test]
    fn whole_changes_leave_a_workload_delivered_by_eviction_as_it_was() {
        let evict = WriteOp::Evict(Box::new(EvictWrite {
            workload: web().key.clone(),
            pod: PodEviction {
                namespace: "shop".into(),
                pod: "web-1".into(),
            },
            event: match event("Evicted") {
                WriteOp::Event(e) => *e,
                _ => unreachable!(),
            },
        }));
        let ops = vec![recommendation(None), evict, coordinated(), event("Applied")];
        let out = whole_changes(ops, at(0));
        assert_eq!(
            kinds(&out),
            ["Recommendation", "Evict", "Coordinated", "Event Applied"]
        );
    }
}
