use super::*;
use crate::quantity;
use crate::writes::{
    RestoreHpa, coordinated_after_release, plan_release, plan_restore, recommendation_spec,
    recommendation_status,
};
use kerf_api::{
    CpuRecipe, HpaCoordination, MemoryRecipe, RecommendationStatus, ResourceRecipes,
    ResourceValues, RightsizingRecommendationSpec, TargetBounds, WorkloadKind,
};
use serde_json::json;

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

/// The window's usage aggregate.
fn series(v: f64) -> Option<f64> {
    Some(v)
}

/// A whole 7-day window of history.
fn full_history() -> History {
    History {
        seconds: Some(7 * 86_400),
        window_seconds: 7 * 86_400,
        slack_seconds: 120,
    }
}

fn policy(cpu: ResourceMode, memory: ResourceMode, coordinate: bool) -> RightsizingPolicySpec {
    RightsizingPolicySpec {
        resources: ResourceRecipes {
            cpu: Some(CpuRecipe {
                mode: cpu,
                headroom_percent: 0.0,
                ..CpuRecipe::default()
            }),
            memory: Some(MemoryRecipe {
                mode: memory,
                headroom_percent: 0.0,
                ..MemoryRecipe::default()
            }),
        },
        hpa: HpaCoordination {
            coordinate,
            target_bounds: None,
        },
        ..Default::default()
    }
}

const AUTO: ResourceMode = ResourceMode::AutoPatch;
const AUDIT: ResourceMode = ResourceMode::AuditOnly;

/// A container requesting `cpu_m` millicores and `mem_mi` MiB, using `use_m` millicores and `use_mi` MiB.
fn container(name: &str, cpu_m: i64, mem_mi: i64, use_m: i64, use_mi: i64) -> ContainerInput {
    ContainerInput {
        signals: ContainerSignals {
            name: name.into(),
            current: ResourceRequests {
                cpu_millis: Some(cpu_m),
                memory_bytes: Some(mem_mi * MIB),
            },
            cpu: series(use_m as f64 / 1000.0),
            memory: series((use_mi * MIB) as f64),
            throttled: false,
            oom_killed: false,
            ..Default::default()
        },
        limits: ResourceRequests::default(),
        in_scope: true,
        gpu_current: None,
        gpu_recommended: None,
    }
}

fn hpa_with(metrics: serde_json::Value) -> HpaInput {
    HpaInput {
        hpa: serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "maxReplicas": 10, "metrics": metrics}
        }))
        .unwrap(),
        max_replicas_reached: false,
        replica_history: true,
        pod_level_requests: false,
        owner_managed: None,
    }
}

fn util(resource: &str, target: i32) -> serde_json::Value {
    json!({"type": "Resource", "resource": {"name": resource, "target": {"type": "Utilization", "averageUtilization": target}}})
}

fn cpu_hpa(target: i32) -> HpaInput {
    hpa_with(json!([util("cpu", target)]))
}

fn input(
    policy: RightsizingPolicySpec,
    containers: Vec<ContainerInput>,
    hpa: Option<HpaInput>,
) -> WorkloadInput {
    WorkloadInput {
        policy,
        strategy_unresolved: None,
        containers,
        hpa,
        pod_level_resources: Vec::new(),
        vpa: None,
        limit_range: None,
        regular_containers: usize::MAX,
        quotas: Vec::new(),
        replicas: 4,
        history: full_history(),
        now: now(),
    }
}

fn eval(i: &WorkloadInput) -> RightsizingOutcome {
    evaluate_workload(i).unwrap()
}

fn hpa_of(o: &RightsizingOutcome) -> &HpaOutcome {
    o.hpa.as_ref().expect("hpa outcome")
}

fn assert_blocked(o: &RightsizingOutcome, skip: Option<SkipReason>) {
    assert_eq!(o.phase, RecommendationPhase::Blocked, "{}", o.message);
    assert_eq!(o.reason.as_deref(), Some("HPACoupled"));
    assert_eq!(o.apply, None, "a blocked workload gets no change at all");
    let h = hpa_of(o);
    assert!(h.blocked && !h.coordinated);
    assert_eq!(h.reason.as_deref(), Some("HPACoupled"));
    assert_eq!(h.skip_reason, skip, "{}", h.message);
}

#[test]
fn worked_example_cpu_50_percent_1000m_to_700m_gives_71() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied, "{}", o.message);
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(700));
    let h = hpa_of(&o);
    assert_eq!((h.target_before, h.target_after), (Some(50), Some(71)));
    assert!(h.coordinated);
}

#[test]
fn coordinated_change_applies_requests_and_hpa_target_in_one_plan() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    let plan = o.apply.expect("applied");
    assert_eq!(
        plan.requests,
        ContainerRequests::from([(
            "app".to_string(),
            ResourceRequests {
                cpu_millis: Some(700),
                memory_bytes: None, // memory is audit-only: not applied
            }
        )])
    );
    assert_eq!(
        plan.hpa,
        Some(CoordinatedHpa {
            hpa_name: "web".into(),
            resource: "cpu".into(),
            target_before: 50,
            target_after: 71
        })
    );
}

#[test]
fn coordination_off_by_default_blocks_with_hpa_coupled() {
    assert!(
        !RightsizingPolicySpec::default().hpa.coordinate,
        "off by default"
    );
    let o = eval(&input(
        policy(AUTO, AUDIT, false),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    // No skip reason of its own: the message says coordination is off.
    assert_blocked(&o, None);
    assert!(
        o.message.contains("spec.hpa.coordinate is off"),
        "{}",
        o.message
    );
    assert_eq!(
        hpa_of(&o).target_after,
        None,
        "no target computed when not coordinating"
    );
    // The recommendation itself is the raw one.
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(700));
}

#[test]
fn coordination_off_still_reports_other_skip_reason() {
    let mut h = cpu_hpa(50);
    h.max_replicas_reached = true;
    let o = eval(&input(
        policy(AUTO, AUDIT, false),
        vec![container("app", 1000, 512, 700, 256)],
        Some(h),
    ));
    assert_blocked(&o, Some(SkipReason::MaxReplicasReached));
}

/// docs/design/hpa-coordination.md#h1: the engine reads an HPA without metrics (absent or an
/// empty list) as the writer and admission do, at CPU utilization 80 %, and coordinates it.
#[test]
fn an_hpa_without_metrics_is_cpu_utilization_80_percent() {
    for metrics in [serde_json::Value::Null, json!([])] {
        let o = eval(&input(
            policy(AUTO, AUDIT, true),
            vec![container("app", 1000, 512, 900, 256)],
            Some(hpa_with(metrics)),
        ));
        assert_eq!(o.phase, RecommendationPhase::Applied, "{}", o.message);
        assert_eq!(o.risk_flags, vec!["hpa-coupled"]);
        let h = hpa_of(&o);
        assert_eq!(h.resource, Some(HpaResource::Cpu));
        // round(80 × 1000 / 900) = 89.
        assert_eq!((h.target_before, h.target_after), (Some(80), Some(89)));
        assert_eq!(
            o.apply.expect("applied").hpa,
            Some(CoordinatedHpa {
                hpa_name: "web".into(),
                resource: "cpu".into(),
                target_before: 80,
                target_after: 89
            })
        );
    }
}

#[test]
fn two_utilization_metrics_is_unsupported_metrics() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(hpa_with(json!([util("cpu", 50), util("memory", 70)]))),
    ));
    assert_blocked(&o, Some(SkipReason::UnsupportedMetrics));
    assert_eq!(hpa_of(&o).target_after, None);
}

#[test]
fn container_resource_metric_is_unsupported_metrics() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(hpa_with(
            json!([{"type": "ContainerResource", "containerResource": {
            "name": "cpu", "container": "app", "target": {"type": "Utilization", "averageUtilization": 60}}}]),
        )),
    ));
    assert_blocked(&o, Some(SkipReason::UnsupportedMetrics));
    assert_eq!(o.risk_flags, vec!["hpa-coupled"]);
}

/// One `Pods`, one `Object` and one `External` HPA metric.
fn pods_object_external() -> [serde_json::Value; 3] {
    [
        json!({"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}),
        json!({"type": "Object", "object": {"metric": {"name": "rps"}, "describedObject": {"kind": "Ingress", "name": "web"}, "target": {"type": "Value", "value": "10"}}}),
        json!({"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}),
    ]
}

#[test]
fn pods_object_external_metrics_are_unsupported() {
    for extra in pods_object_external() {
        let o = eval(&input(
            policy(AUTO, AUDIT, true),
            vec![container("app", 1000, 512, 700, 256)],
            Some(hpa_with(json!([util("cpu", 50), extra]))),
        ));
        assert_blocked(&o, Some(SkipReason::UnsupportedMetrics));
    }
}

#[test]
fn hpa_without_utilization_metric_is_not_coupled() {
    let o = eval(&input(
        policy(AUTO, AUDIT, false),
        vec![container("app", 1000, 512, 700, 256)],
        Some(hpa_with(
            json!([{"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}]),
        )),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied);
    assert!(o.risk_flags.is_empty());
    let h = hpa_of(&o);
    assert!(!h.blocked && h.resource.is_none());
    assert_eq!(o.apply.unwrap().hpa, None);
}

/// docs/design/hpa-coordination.md#h1 and #h9: an HPA that scales only on `Pods`, `Object` or
/// `External` metrics is not coupled — no risk flag, not blocked, requests do not move it — but
/// the recommendation says why kerf does not coordinate it.
#[test]
fn an_hpa_on_pods_object_or_external_metrics_only_is_skipped_as_unsupported_metrics() {
    for only in pods_object_external() {
        for coordinate in [true, false] {
            let o = eval(&input(
                policy(AUTO, AUDIT, coordinate),
                vec![container("app", 1000, 512, 700, 256)],
                Some(hpa_with(json!([only.clone()]))),
            ));
            assert_eq!(o.phase, RecommendationPhase::Applied, "{}", o.message);
            assert!(o.risk_flags.is_empty(), "not coupled: no risk flag");
            let h = hpa_of(&o);
            assert!(!h.blocked && !h.coordinated && h.reason.is_none());
            assert_eq!(
                h.skip_reason,
                Some(SkipReason::UnsupportedMetrics),
                "{only}"
            );
            let spec = recommendation_spec(
                &o,
                &WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
                None,
            );
            assert_eq!(
                spec.hpa.and_then(|h| h.skip_reason).as_deref(),
                Some("unsupported-metrics")
            );
            assert_eq!(o.apply.unwrap().hpa, None, "the HPA is left alone");
        }
    }
}

#[test]
fn max_replicas_in_window_blocks() {
    let mut h = cpu_hpa(50);
    h.max_replicas_reached = true;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(h),
    ));
    assert_blocked(&o, Some(SkipReason::MaxReplicasReached));
}

#[test]
fn missing_request_blocks() {
    let mut side = container("proxy", 100, 64, 50, 32);
    side.signals.current.cpu_millis = None;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256), side],
        Some(cpu_hpa(50)),
    ));
    assert_blocked(&o, Some(SkipReason::MissingRequest));
    assert!(o.message.contains("proxy"), "{}", o.message);
    // The container out of the policy's scope still counts for the HPA.
    let mut side = container("proxy", 100, 64, 50, 32);
    side.signals.current.cpu_millis = None;
    side.in_scope = false;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256), side],
        Some(cpu_hpa(50)),
    ));
    assert_blocked(&o, Some(SkipReason::MissingRequest));
}

#[test]
fn restartable_init_containers_counted_in_target_sums() {
    // app 1000m → 700m, sidecar (restartable init container, out of scope) 1000m kept:
    // 50 × 2000 / 1700 = 58.8 → 59 (not 71 as it would be for app alone).
    let mut side = container("proxy", 1000, 64, 900, 32);
    side.in_scope = false;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256), side],
        Some(cpu_hpa(50)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(59));
    let plan = o.apply.unwrap();
    assert!(
        !plan.requests.contains_key("proxy"),
        "out-of-scope containers are not patched"
    );
}

#[test]
fn throttled_container_request_never_decreases() {
    let mut c = container("app", 1000, 512, 300, 256);
    c.signals.throttled = true;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![c],
        Some(cpu_hpa(60)),
    ));
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(1000));
    assert_eq!(hpa_of(&o).target_after, Some(60));
    assert_eq!(o.phase, RecommendationPhase::Applied);
}

#[test]
fn throttled_container_recommendation_is_a_floor_for_hub_adjustment() {
    // Target 80 %, two containers; b is throttled and goes up to 3000m; a drops to 100m.
    // Σ 2000m → 3100m: 52 % — inside. Then with target 45: 29 % → the hub must lower requests,
    // but only a may shrink; b's 3000m alone gives 45 × 2000 / 3000 = 30 % → blocked.
    let a = container("a", 1000, 512, 100, 256);
    let mut b = container("b", 1000, 512, 3000, 256);
    b.signals.throttled = true;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![a.clone(), b.clone()],
        Some(cpu_hpa(80)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(52));
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![a, b],
        Some(cpu_hpa(45)),
    ));
    assert_blocked(&o, Some(SkipReason::TargetOutOfBounds));
    assert!(o.message.contains("must not decrease"), "{}", o.message);
}

#[test]
fn oom_killed_memory_increase_pushing_target_below_40_blocks() {
    // Memory HPA at 60 %; the container was OOM-killed and its peak asks for 1024Mi instead of 512Mi:
    // 30 % < 40 %, and the hub may not trim an OOM-driven request → blocked.
    let mut c = container("app", 1000, 512, 700, 1024);
    c.signals.oom_killed = true;
    let o = eval(&input(
        policy(AUDIT, AUTO, true),
        vec![c.clone()],
        Some(hpa_with(json!([util("memory", 60)]))),
    ));
    assert_blocked(&o, Some(SkipReason::TargetOutOfBounds));
    assert_eq!(hpa_of(&o).target_after, Some(30));
    assert_eq!(o.containers[0].recommended.memory_bytes, Some(1024 * MIB));
    // Without the OOM kill, the hub trims the increase to keep the target at 40 %.
    c.signals.oom_killed = false;
    let o = eval(&input(
        policy(AUDIT, AUTO, true),
        vec![c],
        Some(hpa_with(json!([util("memory", 60)]))),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied);
    assert_eq!(hpa_of(&o).target_after, Some(40));
    assert_eq!(o.containers[0].recommended.memory_bytes, Some(777 * MIB));
}

#[test]
fn hub_keeps_target_within_40_90_by_adjusting_requests() {
    // 80 % target, 1000m → 200m would be 400 %: the hub raises the request to 884m (90 %).
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 200, 256)],
        Some(cpu_hpa(80)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(90));
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(884));
    assert_eq!(o.apply.unwrap().requests["app"].cpu_millis, Some(884));
}

#[test]
fn current_target_outside_hub_bounds_left_as_is() {
    // 95 % stays 95 % when the requests do not change (not pulled into 40–90) …
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 1000, 256)],
        Some(cpu_hpa(95)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(95));
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(1000));
    // … and a downsize does not push it further out.
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 500, 256)],
        Some(cpu_hpa(95)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(95));
}

#[test]
fn target_outside_policy_bounds_is_target_out_of_bounds() {
    let mut p = policy(AUTO, AUDIT, true);
    p.hpa.target_bounds = Some(TargetBounds {
        min_utilization: 50,
        max_utilization: 70,
    });
    let o = eval(&input(
        p.clone(),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    assert_blocked(&o, Some(SkipReason::TargetOutOfBounds));
    assert_eq!(
        hpa_of(&o).target_after,
        Some(71),
        "the target the change would need is shown"
    );
    // Inside the bounds it proceeds.
    let o = eval(&input(
        p.clone(),
        vec![container("app", 1000, 512, 750, 256)],
        Some(cpu_hpa(50)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(67));
    assert_eq!(o.phase, RecommendationPhase::Applied);
    // An unchanged target is not a change, even outside the policy's bounds.
    let o = eval(&input(
        p,
        vec![container("app", 1000, 512, 1000, 256)],
        Some(cpu_hpa(80)),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied);
}

#[test]
fn only_hpa_resource_matters_memory_change_proceeds_when_hpa_scales_on_cpu_audit_only() {
    let o = eval(&input(
        policy(AUDIT, AUTO, false),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied, "{}", o.message);
    let h = hpa_of(&o);
    assert!(!h.blocked && !h.coordinated);
    assert_eq!(h.target_after, None);
    let plan = o.apply.unwrap();
    assert_eq!(
        plan.requests["app"],
        ResourceRequests {
            cpu_millis: None,
            memory_bytes: Some(256 * MIB)
        }
    );
    assert_eq!(plan.hpa, None);
    assert_eq!(o.risk_flags, vec!["hpa-coupled"], "still flagged");
}

#[test]
fn risk_flag_hpa_coupled_on_utilization_hpa() {
    for (cpu, mem) in [(AUDIT, AUDIT), (AUTO, AUDIT), (AUDIT, AUTO)] {
        let o = eval(&input(
            policy(cpu, mem, true),
            vec![container("app", 1000, 512, 700, 256)],
            Some(hpa_with(json!([util("memory", 70)]))),
        ));
        assert_eq!(o.risk_flags, vec!["hpa-coupled"]);
    }
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        None,
    ));
    assert!(o.risk_flags.is_empty());
}

#[test]
fn recommendation_still_reported_with_savings_when_blocked() {
    let mut c = container("app", 1000, 512, 700, 256);
    c.gpu_current = Some(1.0);
    c.gpu_recommended = Some(0.5);
    let o = eval(&input(
        policy(AUTO, AUTO, false),
        vec![c],
        Some(cpu_hpa(50)),
    ));
    assert_eq!(o.phase, RecommendationPhase::Blocked);
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(700));
    assert_eq!(o.containers[0].recommended.memory_bytes, Some(256 * MIB));
    let s = &o.savings;
    assert!((s.cpu_cores.unwrap() - 0.3).abs() < 1e-9);
    assert_eq!(s.memory_bytes, Some((256 * MIB) as f64));
    assert_eq!(s.gpu_units, Some(0.5));
    assert_eq!(s.replicas, Some(4));
    assert!((s.total_cpu_cores.unwrap() - 1.2).abs() < 1e-9);
    assert_eq!(s.total_memory_bytes, Some((1024 * MIB) as f64));
    assert_eq!(s.total_gpu_units, Some(2.0));
    let spec = recommendation_spec(
        &o,
        &WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
        None,
    );
    assert_eq!(
        spec.containers[0].recommended.cpu.as_ref().unwrap().0,
        "700m"
    );
    assert_eq!(spec.hpa.as_ref().unwrap().name, "web");
}

#[test]
fn upsizing_gives_negative_savings() {
    let o = eval(&input(
        policy(AUTO, AUTO, false),
        vec![container("app", 500, 256, 750, 512)],
        None,
    ));
    assert!((o.savings.cpu_cores.unwrap() + 0.25).abs() < 1e-9);
    assert_eq!(o.savings.memory_bytes, Some(-((256 * MIB) as f64)));
}

#[test]
fn phases_audit_only_and_pending() {
    let o = eval(&input(
        policy(AUDIT, AUDIT, false),
        vec![container("app", 1000, 512, 700, 256)],
        None,
    ));
    assert_eq!(o.phase, RecommendationPhase::AuditOnly);
    assert_eq!(o.apply, None);
    assert_eq!(
        o.containers[0].recommended.cpu_millis,
        Some(700),
        "audit-only still recommends"
    );
    let mut c = container("app", 1000, 512, 700, 256);
    c.signals.cpu = None;
    c.signals.memory = None;
    let o = eval(&input(policy(AUTO, AUTO, false), vec![c], None));
    assert_eq!(o.phase, RecommendationPhase::Pending);
    assert_eq!(o.reason.as_deref(), Some("NoUsageData"));
}

#[test]
fn bad_policy_quantity_is_a_clear_error() {
    let mut p = policy(AUTO, AUDIT, false);
    p.resources.memory.as_mut().unwrap().max = Some(
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1GB".into()),
    );
    let e = evaluate_workload(&input(p, vec![container("app", 1000, 512, 700, 256)], None))
        .unwrap_err();
    assert_eq!(e.field, "spec.resources.memory.max");
    assert!(e.to_string().contains("\"1GB\""), "{e}");
}

#[test]
fn spec_and_status_record_the_coordinated_change() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    let key = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    let pid = PolicyId {
        kind: "RightsizingPolicy".into(),
        namespace: Some("shop".into()),
        name: "web".into(),
    };
    let spec = recommendation_spec(&o, &key, Some(&pid));
    assert_eq!(spec.workload.kind, "Deployment");
    assert_eq!(spec.policies, vec!["RightsizingPolicy/shop/web"]);
    assert_eq!(spec.containers[0].current.cpu.as_ref().unwrap().0, "1");
    assert_eq!(
        spec.containers[0].current.memory.as_ref().unwrap().0,
        "512Mi"
    );
    assert_eq!(
        spec.containers[0].recommended.memory.as_ref().unwrap().0,
        "256Mi"
    );
    let h = spec.hpa.as_ref().unwrap();
    assert_eq!(
        (
            h.resource.as_deref(),
            h.target_before,
            h.target_after,
            h.skip_reason.as_deref()
        ),
        (Some("cpu"), Some(50), Some(71), None)
    );
    assert_eq!(spec.risk_flags, vec!["hpa-coupled"]);
    let status = recommendation_status(&o, None);
    assert_eq!(status.phase, RecommendationPhase::Applied);
    assert_eq!(status.previous_hpa_target, Some(50));
    // Only the applied resource (cpu) is recorded as original.
    assert_eq!(
        status.original_requests["app"],
        ResourceValues {
            cpu: Some(quantity::cpu_quantity(1000)),
            memory: None,
            gpu: None
        }
    );
    // The serialized status uses the documented field name.
    let j = serde_json::to_value(&status).unwrap();
    assert_eq!(j["previousHPATarget"], 50);
    assert_eq!(
        serde_json::to_value(&spec).unwrap()["hpa"]["targetAfter"],
        71
    );
}

#[test]
fn previous_hpa_target_and_original_requests_kept_across_later_changes() {
    let first = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    let s1 = recommendation_status(&first, None);
    // Next reconcile: the workload now runs 700m with a 71 % target; usage moved to 600m.
    let second = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 700, 512, 600, 256)],
        Some(cpu_hpa(71)),
    ));
    assert_eq!(hpa_of(&second).target_after, Some(83));
    let s2 = recommendation_status(&second, Some(&s1));
    assert_eq!(s2.previous_hpa_target, Some(50));
    assert_eq!(
        s2.original_requests["app"].cpu,
        Some(quantity::cpu_quantity(1000))
    );
}

#[test]
fn rollback_and_release_restore_requests_and_hpa_target() {
    let o = eval(&input(
        policy(AUTO, AUTO, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa(50)),
    ));
    let key = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    let spec = recommendation_spec(&o, &key, None);
    let status = recommendation_status(&o, None);
    let plan = plan_restore(&spec, &status).unwrap();
    assert_eq!(
        plan.requests["app"],
        ResourceRequests {
            cpu_millis: Some(1000),
            memory_bytes: Some(512 * MIB)
        }
    );
    assert_eq!(
        plan.hpa,
        Some(RestoreHpa {
            name: "web".into(),
            resource: "cpu".into(),
            target: 50
        })
    );
    // Nothing coordinated → the HPA is left alone.
    let o = eval(&input(
        policy(AUTO, AUTO, false),
        vec![container("app", 1000, 512, 700, 256)],
        None,
    ));
    let plan = plan_restore(
        &recommendation_spec(&o, &key, None),
        &recommendation_status(&o, None),
    )
    .unwrap();
    assert_eq!(plan.hpa, None);
    assert_eq!(plan.requests["app"].cpu_millis, Some(1000));
    // A corrupted record is a clear error, not a panic.
    let mut bad = status.clone();
    bad.original_requests.get_mut("app").unwrap().cpu = Some(
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("x".into()),
    );
    assert_eq!(
        plan_restore(&spec, &bad).unwrap_err().field,
        "status.originalRequests.app.cpu"
    );
}

// ---- release per field (docs/design/hpa-coordination.md#h13) ----

/// What kerf took on `app` (1000m/512Mi) and `side` (200m, no memory) after applying both
/// resources with the HPA coordinated: the recommendation as written.
fn taken() -> (RightsizingRecommendationSpec, RecommendationStatus) {
    let without_memory = |mut c: ContainerInput| {
        c.signals.current.memory_bytes = None;
        c
    };
    let containers = vec![
        container("app", 1000, 512, 700, 256),
        without_memory(container("side", 200, 0, 100, 64)),
    ];
    let o = eval(&input(
        policy(AUTO, AUTO, true),
        containers,
        Some(cpu_hpa(50)),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied);
    let key = WorkloadKey::new("shop", WorkloadKind::Deployment, "web");
    (
        recommendation_spec(&o, &key, None),
        recommendation_status(&o, None),
    )
}

/// The outcome of the next cycle on the workload as kerf left it.
fn next(policy: RightsizingPolicySpec, scope: &[&str]) -> RightsizingOutcome {
    let mut app = container("app", 700, 256, 700, 256);
    let mut side = container("side", 100, 64, 100, 64);
    app.in_scope = scope.is_empty() || scope.contains(&"app");
    side.in_scope = scope.is_empty() || scope.contains(&"side");
    eval(&input(policy, vec![app, side], Some(cpu_hpa(67))))
}

fn req(cpu: Option<i64>, memory_mi: Option<i64>) -> ResourceRequests {
    ResourceRequests {
        cpu_millis: cpu,
        memory_bytes: memory_mi.map(|m| m * MIB),
    }
}

const MEMORY: RequestSet = RequestSet {
    cpu: false,
    memory: true,
};

#[test]
fn a_request_with_nothing_before_kerf_is_recorded_as_created() {
    let (_, status) = taken();
    assert_eq!(
        serde_json::to_value(&status.original_requests).unwrap(),
        json!({"app": {"cpu": "1", "memory": "512Mi"}, "side": {"cpu": "200m"}})
    );
    assert_eq!(
        serde_json::to_value(&status).unwrap()["createdRequests"],
        json!({"side": ["memory"]})
    );
    // Recorded once: the next apply (now at kerf's value) keeps the record.
    let again = recommendation_status(&next(policy(AUTO, AUTO, true), &[]), Some(&status));
    assert_eq!(again.original_requests, status.original_requests);
    assert_eq!(again.created_requests, status.created_requests);
}

#[test]
fn both_resources_to_one_releases_the_other_only() {
    let (spec, status) = taken();
    let o = next(policy(AUTO, AUDIT, true), &[]);
    let plan = plan_release(&spec, &status, &o.managed).unwrap();
    assert_eq!(
        plan.requests,
        ContainerRequests::from([("app".into(), req(None, Some(512)))])
    );
    assert_eq!(plan.removed, BTreeMap::from([("side".into(), MEMORY)]));
    assert_eq!(plan.hpa, None, "cpu stays coordinated");
    let mut after = recommendation_status(&o, Some(&status));
    plan.settle(&mut after);
    assert_eq!(
        serde_json::to_value(&after.original_requests).unwrap(),
        json!({"app": {"cpu": "1"}, "side": {"cpu": "200m"}})
    );
    assert!(after.created_requests.is_empty());
    assert_eq!(after.previous_hpa_target, Some(50));
}

#[test]
fn one_resource_to_none_releases_the_whole_record() {
    let (spec, status) = taken();
    let o = next(policy(AUDIT, AUDIT, true), &[]);
    assert_eq!(o.phase, RecommendationPhase::AuditOnly);
    let plan = plan_release(&spec, &status, &o.managed).unwrap();
    assert_eq!(plan, plan_restore(&spec, &status).unwrap());
    assert_eq!(
        plan.requests,
        ContainerRequests::from([
            ("app".into(), req(Some(1000), Some(512))),
            ("side".into(), req(Some(200), None)),
        ])
    );
    assert_eq!(plan.removed, BTreeMap::from([("side".into(), MEMORY)]));
    assert_eq!(plan.hpa.map(|h| h.target), Some(50));
}

#[test]
fn a_container_leaving_the_scope_releases_its_requests_and_moves_the_target() {
    let (spec, status) = taken();
    let o = next(policy(AUTO, AUTO, true), &["app"]);
    let plan = plan_release(&spec, &status, &o.managed).unwrap();
    assert_eq!(
        plan.requests,
        ContainerRequests::from([("side".into(), req(Some(200), None))])
    );
    assert_eq!(plan.removed, BTreeMap::from([("side".into(), MEMORY)]));
    assert_eq!(plan.hpa, None);
    // side goes back from 100m to 200m: the target moves so requests × target stays.
    let agent = o.apply.as_ref().unwrap();
    let h = coordinated_after_release(&o, agent, &plan).unwrap();
    let before = agent.hpa.as_ref().unwrap();
    let sum_now = 700 + 100;
    let sum_after = agent.requests["app"].cpu_millis.unwrap() + 200;
    assert_eq!(
        h.target_after,
        hpa::new_target(before.target_before, sum_now, sum_after).unwrap()
    );
    assert!(h.target_after < before.target_after);
}

#[test]
fn a_deleted_policy_releases_everything() {
    let (spec, status) = taken();
    let plan = plan_release(&spec, &status, &Managed::default()).unwrap();
    assert_eq!(plan.requests.len(), 2);
    assert_eq!(plan.removed, BTreeMap::from([("side".into(), MEMORY)]));
    assert_eq!(plan.hpa.as_ref().map(|h| h.target), Some(50));
    let mut after = status.clone();
    plan.settle(&mut after);
    assert!(
        after.original_requests.is_empty()
            && after.created_requests.is_empty()
            && after.previous_hpa_target.is_none()
    );
}

#[test]
fn coordination_turned_off_releases_the_target_with_the_requests_of_its_resource() {
    let (spec, status) = taken();
    let o = next(policy(AUTO, AUTO, false), &[]);
    assert_eq!(o.phase, RecommendationPhase::Blocked);
    let plan = plan_release(&spec, &status, &o.managed).unwrap();
    assert_eq!(plan.hpa.as_ref().map(|h| h.target), Some(50));
    assert_eq!(
        plan.requests,
        ContainerRequests::from([
            ("app".into(), req(Some(1000), None)),
            ("side".into(), req(Some(200), None)),
        ]),
        "cpu goes back with the target; memory stays kerf's"
    );
    assert!(plan.removed.is_empty());
    // Blocked for another reason, coordination on: nothing is released.
    let mut blocked = cpu_hpa(67);
    blocked.max_replicas_reached = true;
    let mut i = input(
        policy(AUTO, AUTO, true),
        vec![container("app", 700, 256, 700, 256)],
        Some(blocked),
    );
    i.containers.push(container("side", 100, 64, 100, 64));
    let o = eval(&i);
    assert_eq!(o.phase, RecommendationPhase::Blocked);
    assert!(plan_release(&spec, &status, &o.managed).unwrap().is_empty());
}

#[test]
fn nothing_taken_nothing_released() {
    let (spec, _) = taken();
    let o = next(policy(AUDIT, AUDIT, false), &[]);
    let none = RecommendationStatus::default();
    assert!(plan_release(&spec, &none, &o.managed).unwrap().is_empty());
}

/// docs/metrics.md#history: a window longer than the history there is (a 7-day window on a
/// 2-day Prometheus) recommends from the data there is, flagged `insufficient-history`; with
/// less than 24 h nothing is auto-patched yet.
#[test]
fn short_history_is_flagged_and_holds_auto_patch_until_a_day() {
    let mut i = input(
        policy(AUTO, AUDIT, false),
        vec![container("app", 1000, 512, 400, 200)],
        None,
    );
    i.history.seconds = Some(2 * 86_400);
    let o = eval(&i);
    assert_eq!(o.risk_flags, [RISK_INSUFFICIENT_HISTORY]);
    assert_eq!(
        o.phase,
        RecommendationPhase::Applied,
        "2 days ≥ 24 h: applied"
    );
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(400));
    assert!(
        o.reasons
            .iter()
            .any(|r| r.contains("reaches back 48h of the 168h window")),
        "{:?}",
        o.reasons
    );

    i.history.seconds = Some(5 * 3600);
    let o = eval(&i);
    assert_eq!(o.risk_flags, [RISK_INSUFFICIENT_HISTORY]);
    assert_eq!(o.phase, RecommendationPhase::Pending);
    assert_eq!(o.reason.as_deref(), Some(REASON_INSUFFICIENT_HISTORY));
    assert!(o.apply.is_none());
    assert_eq!(
        o.containers[0].recommended.cpu_millis,
        Some(400),
        "still recommended"
    );
    assert!(
        o.message
            .contains("only 5h of usage history: auto-patch waits for 24h"),
        "{}",
        o.message
    );
    // What kerf manages does not change: a short history is no reason to release anything.
    assert_eq!(
        o.managed,
        eval(&input(
            policy(AUTO, AUDIT, false),
            vec![container("app", 1000, 512, 400, 200)],
            None
        ))
        .managed
    );

    // History within the slack of the window is the whole window.
    i.history.seconds = Some(7 * 86_400 - 100);
    assert!(eval(&i).risk_flags.is_empty());
    // A window shorter than a day needs only the window.
    i.history = History {
        seconds: Some(3600),
        window_seconds: 3600,
        slack_seconds: 30,
    };
    assert_eq!(eval(&i).phase, RecommendationPhase::Applied);
    assert!(eval(&i).risk_flags.is_empty());
}

/// `cpu_hpa(target)` with `spec.behavior.scaleUp/scaleDown.tolerance` (KEP-4951).
fn cpu_hpa_tolerance(target: i32, tolerance: &str) -> HpaInput {
    let mut h = cpu_hpa(target);
    h.hpa.spec.behavior = Some(
        serde_json::from_value(json!({
            "scaleUp": {"tolerance": tolerance}, "scaleDown": {"tolerance": tolerance}
        }))
        .unwrap(),
    );
    h
}

/// docs/hpa-coordination.md#tolerance: the worked example rounds 50 × 1000 / 700 = 71.43 to 71 %,
/// which raises the HPA's usage ratio by 0.6 % at unchanged usage. The default 10 % tolerance
/// absorbs it; a 0 tolerance does not, and no sum of requests from 700m to 770m rounds exactly
/// (50 × 1000 has no divisor in 65–71): blocked, target-out-of-bounds, nothing applied.
#[test]
fn a_zero_tolerance_hpa_blocks_a_target_that_does_not_round_exactly() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa_tolerance(50, "0")),
    ));
    assert_blocked(&o, Some(SkipReason::TargetOutOfBounds));
    let h = hpa_of(&o);
    assert!(
        h.message.contains("scaleUp tolerance of 0.0 %"),
        "{}",
        h.message
    );
    assert_eq!(h.target_after, Some(71));
    // A tolerance above the rounding error (1 %) coordinates as the default does.
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(cpu_hpa_tolerance(50, "0.01")),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied, "{}", o.message);
    assert_eq!(hpa_of(&o).target_after, Some(71));
}

/// With a 0 tolerance kerf takes the requests that round exactly when a sum at most a tenth above
/// the recommendation has one: 60 % × 1000m at 790m rounds to 76 % (60,040 ≠ 60,000); 800m at
/// 75 % keeps the product exactly, so the HPA's replicas do not move at unchanged usage.
#[test]
fn a_zero_tolerance_hpa_gets_the_requests_that_round_exactly() {
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 790, 256)],
        Some(cpu_hpa_tolerance(60, "0")),
    ));
    assert_eq!(o.phase, RecommendationPhase::Applied, "{}", o.message);
    let h = hpa_of(&o);
    assert_eq!((h.target_before, h.target_after), (Some(60), Some(75)));
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(800));
    assert_eq!(
        75 * 800,
        60 * 1000,
        "the oracle: requests × target kept exactly"
    );
    // The default tolerance keeps the plain rounding.
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 790, 256)],
        Some(cpu_hpa(60)),
    ));
    assert_eq!(hpa_of(&o).target_after, Some(76));
    assert_eq!(o.containers[0].recommended.cpu_millis, Some(790));
}

/// Pod-level requests: the HPA's usage ratio is over them (kubernetes `calculateRequests`), so
/// kerf's container math would move the HPA: blocked, `pod-level-resources`, even with
/// coordination on.
#[test]
fn pod_level_requests_block_coordination() {
    let mut h = cpu_hpa(50);
    h.pod_level_requests = true;
    let o = eval(&input(
        policy(AUTO, AUDIT, true),
        vec![container("app", 1000, 512, 700, 256)],
        Some(h),
    ));
    assert_blocked(&o, Some(SkipReason::PodLevelResources));
    assert_eq!(
        SkipReason::PodLevelResources.as_str(),
        "pod-level-resources"
    );
}

/// Without an HPA too: for a resource requested at pod level the scheduler reserves the
/// pod-level request, so changing the containers' saves nothing (and a container above it is
/// refused): recommendation only, blocked, `PodLevelResources`. A pod-level request of a resource
/// not in auto-patch changes nothing.
#[test]
fn pod_level_requests_of_an_auto_patch_resource_apply_nothing() {
    let mut i = input(
        policy(AUTO, AUDIT, false),
        vec![container("app", 1000, 512, 700, 256)],
        None,
    );
    i.pod_level_resources = vec![HpaResource::Cpu];
    let o = eval(&i);
    assert_eq!(o.phase, RecommendationPhase::Blocked, "{}", o.message);
    assert_eq!(o.reason.as_deref(), Some("PodLevelResources"));
    assert_eq!(o.apply, None);
    assert_eq!(
        o.containers[0].recommended.cpu_millis,
        Some(700),
        "still published"
    );
    i.pod_level_resources = vec![HpaResource::Memory];
    assert_eq!(eval(&i).phase, RecommendationPhase::Applied);
}

/// A VPA that comes after kerf applied: blocked, `VPAConflict`, and what the VPA sets is released
/// (the recorded originals of `app`'s and `side`'s cpu and memory, and the coordinated target
/// over cpu), so kerf's webhook stops setting it; a VPA that leaves `side`'s memory alone keeps
/// that one kerf's.
#[test]
fn a_vpa_on_the_workload_blocks_and_releases_what_it_sets() {
    let (spec, status) = taken();
    let vpa = |policies: serde_json::Value| {
        crate::vpa::Vpa::from_object(json!({
            "metadata": {"name": "web-vpa", "namespace": "shop"},
            "spec": {"targetRef": {"kind": "Deployment", "name": "web"},
                     "resourcePolicy": {"containerPolicies": policies}}
        }))
        .unwrap()
    };
    let with = |v: crate::vpa::Vpa| {
        let mut i = input(
            policy(AUTO, AUTO, true),
            vec![
                container("app", 700, 256, 700, 256),
                container("side", 100, 64, 100, 64),
            ],
            Some(cpu_hpa(67)),
        );
        i.vpa = Some(v);
        eval(&i)
    };
    let o = with(vpa(json!([])));
    assert_eq!(o.phase, RecommendationPhase::Blocked, "{}", o.message);
    assert_eq!(o.reason.as_deref(), Some("VPAConflict"));
    assert!(o.message.contains("shop/web-vpa"), "{}", o.message);
    assert_eq!(o.apply, None);
    let plan = plan_release(&spec, &status, &o.managed).unwrap();
    assert_eq!(
        plan,
        plan_restore(&spec, &status).unwrap(),
        "everything back"
    );

    let o = with(vpa(json!([
        {"containerName": "side", "controlledResources": ["cpu"]}
    ])));
    assert_eq!(o.reason.as_deref(), Some("VPAConflict"));
    let plan = plan_release(&spec, &status, &o.managed).unwrap();
    assert!(
        plan.removed.is_empty(),
        "side's memory stays kerf's: {plan:?}"
    );
    assert_eq!(plan.hpa.as_ref().map(|h| h.target), Some(50));
}

/// A container OOM-killed at its memory limit gets a larger request and limit (the limit
/// follows the request), and the agent's plan carries both; under `RequestsOnly` the request
/// stays capped at the limit (docs/policies.md#limits).
#[test]
fn an_oom_killed_container_at_its_limit_gets_a_larger_request_and_limit() {
    let mut c = container("app", 1000, 512, 700, 768);
    c.signals.oom_killed = true;
    c.limits = ResourceRequests {
        cpu_millis: Some(1000),
        memory_bytes: Some(512 * MIB),
    };
    let o = eval(&input(policy(AUDIT, AUTO, false), vec![c.clone()], None));
    assert_eq!(o.phase, RecommendationPhase::Applied);
    let out = &o.containers[0];
    assert_eq!(out.recommended.memory_bytes, Some(768 * MIB));
    assert_eq!(out.recommended_limits.memory_bytes, Some(768 * MIB));
    let plan = o.apply.as_ref().unwrap();
    assert_eq!(
        plan.limits.get("app").unwrap().memory_bytes,
        Some(768 * MIB)
    );
    let mut only = policy(AUDIT, AUTO, false);
    if let Some(m) = only.resources.memory.as_mut() {
        m.controlled_values = kerf_api::ControlledValues::RequestsOnly;
    }
    let o = eval(&input(only, vec![c], None));
    assert_eq!(o.containers[0].recommended.memory_bytes, Some(512 * MIB));
    assert_eq!(
        o.containers[0].recommended_limits.memory_bytes,
        Some(512 * MIB)
    );
}
