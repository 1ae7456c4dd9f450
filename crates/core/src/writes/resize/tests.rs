use serde_json::json;

use super::*;

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn running(containers: Value) -> Pod {
    pod(json!({
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"containers": containers},
        "status": {"phase": "Running"}
    }))
}

fn with_condition(mut p: Pod, type_: &str, reason: &str, at: &str) -> Pod {
    // The kubelet sets a message with a reason only (an InProgress being applied has neither).
    let message = if reason.is_empty() {
        ""
    } else {
        "node is full"
    };
    let c: PodCondition = serde_json::from_value(json!({
        "type": type_, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": at
    }))
    .unwrap();
    p.status.get_or_insert_with(Default::default).conditions = Some(vec![c].into());
    p
}

/// One container `app` requesting `m` millicores.
pub(crate) fn cpu(m: i64) -> ContainerRequests {
    [(
        "app".to_string(),
        ResourceRequests {
            cpu_millis: Some(m),
            memory_bytes: None,
        },
    )]
    .into_iter()
    .collect()
}

pub(crate) static NO_LIMITS: ContainerRequests = ContainerRequests::new();

/// Requests alone, as a resize sets them.
fn set(requests: ContainerRequests) -> PodResources {
    PodResources::requests(requests)
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn spec(p: &Pod) -> &PodSpec {
    p.spec.as_ref().unwrap()
}

#[test]
fn qos_class() {
    let none = PodResources::default();
    let best_effort = running(json!([{"name": "app"}]));
    assert_eq!(
        super::qos_class(spec(&best_effort), &none),
        QosClass::BestEffort
    );
    let guaranteed = running(json!([{"name": "app", "resources": {
        "limits": {"cpu": "1", "memory": "1Gi"}}}]));
    // Requests default to the limits.
    assert_eq!(
        super::qos_class(spec(&guaranteed), &none),
        QosClass::Guaranteed
    );
    let burstable = running(json!([{"name": "app", "resources": {
        "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]));
    assert_eq!(
        super::qos_class(spec(&burstable), &none),
        QosClass::Burstable
    );
    // A container without both limits makes the pod Burstable, whatever the others are.
    let mixed = running(json!([
        {"name": "app", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
        {"name": "log", "resources": {"requests": {"cpu": "10m"}}}
    ]));
    assert_eq!(super::qos_class(spec(&mixed), &none), QosClass::Burstable);
    // The requests of the pod after a resize are the ones given.
    assert_eq!(
        super::qos_class(spec(&guaranteed), &set(cpu(500))),
        QosClass::Burstable
    );
    assert_eq!(
        super::qos_class(spec(&best_effort), &set(cpu(500))),
        QosClass::Burstable
    );
}

#[test]
fn qos_class_kept() {
    let burstable = running(json!([{"name": "app", "resources": {
        "requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]));
    assert!(super::qos_class_kept(spec(&burstable), &set(cpu(250))).is_ok());
    let guaranteed = running(json!([{"name": "app", "resources": {
        "limits": {"cpu": "1", "memory": "1Gi"}}}]));
    let f = super::qos_class_kept(spec(&guaranteed), &set(cpu(250))).unwrap_err();
    assert_eq!(f.reason, "QoSClassChange");
    assert!(
        f.message.contains("from Guaranteed to Burstable"),
        "{}",
        f.message
    );
    let best_effort = running(json!([{"name": "app"}]));
    assert!(super::qos_class_kept(spec(&best_effort), &set(cpu(250))).is_err());
}

#[test]
fn no_pod_level_resources() {
    let plain = running(json!([{"name": "app"}]));
    assert!(super::no_pod_level_resources(spec(&plain)).is_ok());
    let pod_level = pod(json!({
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {"containers": [{"name": "app"}], "resources": {"requests": {"memory": "1Gi"}}}
    }));
    let f = super::no_pod_level_resources(spec(&pod_level)).unwrap_err();
    assert_eq!(f.reason, "PodLevelResources");
}

#[test]
fn not_windows() {
    let with_os = |os: Value| {
        pod(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "app"}], "os": os}
        }))
    };
    assert!(super::not_windows(spec(&running(json!([{"name": "app"}])))).is_ok());
    assert!(super::not_windows(spec(&with_os(json!({"name": "linux"})))).is_ok());
    let f = super::not_windows(spec(&with_os(json!({"name": "windows"})))).unwrap_err();
    assert_eq!(f.reason, "WindowsPod");
    // The whole workload's change rolls out, no pod asked.
    let mut p = with_os(json!({"name": "windows"}));
    p.status = running(json!([])).status;
    let mut budget = 10;
    let r = plan_workload_resize(
        &[&p],
        (&cpu(250), &NO_LIMITS),
        (at("2026-07-01T12:00:00Z"), None),
        &mut budget,
    );
    assert!(r.requests.is_empty());
    assert_eq!(r.fallback.unwrap().reason, "WindowsPod");
}

/// The bounds run from kerf's own last request when it is later than the condition's
/// transition (a Deferred left from an earlier resize does not time a new request out at once);
/// without one, from the condition; a request asked this cycle is recorded.
#[test]
fn resize_timer_start() {
    let (old, asked) = (at("2026-07-01T10:00:00Z"), at("2026-07-01T11:58:00Z"));
    assert_eq!(
        super::resize_timer_start(Some(old), Some(asked)),
        Some(asked)
    );
    assert_eq!(
        super::resize_timer_start(Some(asked), Some(old)),
        Some(asked)
    );
    assert_eq!(super::resize_timer_start(Some(old), None), Some(old));
    assert_eq!(super::resize_timer_start(None, Some(asked)), Some(asked));
    assert_eq!(super::resize_timer_start(None, None), None);

    let now = at("2026-07-01T12:00:00Z");
    let deferred = kubelet_resize(&with_condition(
        running(json!([{"name": "app"}])),
        POD_RESIZE_PENDING,
        "Deferred",
        "2026-07-01T10:00:00Z",
    ));
    let bounded = |last| super::kubelet_resize_within_bounds(&deferred, now, last);
    assert_eq!(bounded(None).unwrap_err().reason, "DeferredTooLong");
    assert!(bounded(Some(asked)).is_ok(), "2 minutes since kerf asked");
    assert_eq!(
        bounded(Some(at("2026-07-01T11:54:00Z")))
            .unwrap_err()
            .reason,
        "DeferredTooLong"
    );

    let p = running(json!([{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]));
    let mut budget = 1;
    let r = plan_workload_resize(
        &[&p],
        (&cpu(250), &NO_LIMITS),
        (now, Some(old)),
        &mut budget,
    );
    assert_eq!(r.requests.len(), 1);
    assert_eq!(
        r.last_request,
        Some(now),
        "this cycle's request is recorded"
    );
    let mut none_left = 0;
    let r = plan_workload_resize(
        &[&p],
        (&cpu(250), &NO_LIMITS),
        (now, Some(old)),
        &mut none_left,
    );
    assert_eq!(
        r.last_request,
        Some(old),
        "no request: the recorded one is kept"
    );
}

#[test]
fn kubelet_resize_within_bounds() {
    let now = at("2026-07-01T12:00:00Z");
    let base = running(json!([{"name": "app"}]));
    let state = |p: &Pod| kubelet_resize(p);
    let ok = |p: &Pod| super::kubelet_resize_within_bounds(&state(p), now, None);
    assert!(ok(&base).is_ok());
    let deferred_4m = with_condition(
        base.clone(),
        POD_RESIZE_PENDING,
        "Deferred",
        "2026-07-01T11:56:00Z",
    );
    assert_eq!(
        state(&deferred_4m),
        KubeletResize::Deferred(Some(at("2026-07-01T11:56:00Z")))
    );
    assert!(ok(&deferred_4m).is_ok(), "within the 5 minutes");
    let deferred_6m = with_condition(
        base.clone(),
        POD_RESIZE_PENDING,
        "Deferred",
        "2026-07-01T11:54:00Z",
    );
    assert_eq!(ok(&deferred_6m).unwrap_err().reason, "DeferredTooLong");
    let infeasible = with_condition(
        base.clone(),
        POD_RESIZE_PENDING,
        "Infeasible",
        "2026-07-01T11:59:00Z",
    );
    let f = ok(&infeasible).unwrap_err();
    assert_eq!(f.reason, "Infeasible");
    assert!(f.message.contains("node is full"));
    let in_progress_59m = with_condition(
        base.clone(),
        POD_RESIZE_IN_PROGRESS,
        "",
        "2026-07-01T11:01:00Z",
    );
    assert!(ok(&in_progress_59m).is_ok());
    let in_progress_61m = with_condition(
        base.clone(),
        POD_RESIZE_IN_PROGRESS,
        "",
        "2026-07-01T10:59:00Z",
    );
    assert_eq!(
        ok(&in_progress_61m).unwrap_err().reason,
        "InProgressTooLong"
    );
    let failed = with_condition(
        base,
        POD_RESIZE_IN_PROGRESS,
        "Error",
        "2026-07-01T11:59:00Z",
    );
    assert_eq!(ok(&failed).unwrap_err().reason, "ResizeError");
}

/// An in-progress condition the kubelet does not set while applying (another reason, or a
/// message) falls back at once, as VPA's updater does, not after the hour.
#[test]
fn in_progress_unexpected() {
    let now = at("2026-07-01T12:00:00Z");
    let base = running(json!([{"name": "app"}]));
    let condition = |reason: &str| {
        with_condition(
            base.clone(),
            POD_RESIZE_IN_PROGRESS,
            reason,
            "2026-07-01T11:59:00Z",
        )
    };
    let of = |p: &Pod| p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0].clone();
    assert!(!super::in_progress_unexpected(&of(&condition(""))));
    assert!(!super::in_progress_unexpected(&of(&condition("Error"))));
    let odd = condition("SomethingNew");
    assert!(super::in_progress_unexpected(&of(&odd)));
    let f = super::kubelet_resize_within_bounds(&kubelet_resize(&odd), now, None).unwrap_err();
    assert_eq!(f.reason, "ResizeError");
    assert!(f.message.contains("SomethingNew"), "{}", f.message);
}

#[test]
fn pod_requests_are_capped_at_the_limit_for_the_containers_the_pod_resizes() {
    let p = pod(json!({
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {
            "containers": [{"name": "app", "resources": {"limits": {"cpu": "800m"}}}],
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always"},
                {"name": "migrate"}
            ]
        }
    }));
    let mut wanted = cpu(1000);
    for c in ["proxy", "migrate"] {
        wanted.insert(
            c.into(),
            ResourceRequests {
                cpu_millis: Some(50),
                memory_bytes: None,
            },
        );
    }
    let got = pod_resources(spec(&p), &wanted, &NO_LIMITS).requests;
    assert_eq!(
        got.get("app").unwrap().cpu_millis,
        Some(800),
        "capped at the limit"
    );
    assert_eq!(
        got.get("proxy").unwrap().cpu_millis,
        Some(50),
        "a sidecar is resized"
    );
    assert!(
        got.get("migrate").is_none(),
        "an init container is immutable"
    );
}

#[test]
fn resize_body_patches_requests_of_containers_and_sidecars_by_name() {
    let p = pod(json!({
        "metadata": {"name": "p", "namespace": "shop"},
        "spec": {
            "containers": [{"name": "app"}],
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}]
        }
    }));
    let mut wanted = cpu(250);
    wanted.insert(
        "proxy".into(),
        ResourceRequests {
            cpu_millis: None,
            memory_bytes: Some(64 * 1024 * 1024),
        },
    );
    assert_eq!(
        resize_body(spec(&p), &set(wanted)),
        json!({"spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "250m"}}}],
            "initContainers": [{"name": "proxy", "resources": {"requests": {"memory": "64Mi"}}}]
        }})
    );
}

#[test]
fn restarted_containers_are_those_whose_resize_policy_restarts_a_changed_resource() {
    let p = running(json!([
        {"name": "app", "resources": {"requests": {"cpu": "500m"}},
         "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]},
        {"name": "log", "resources": {"requests": {"cpu": "10m"}},
         "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}
    ]));
    let mut wanted = cpu(250);
    wanted.insert(
        "log".into(),
        ResourceRequests {
            cpu_millis: Some(20),
            memory_bytes: None,
        },
    );
    assert_eq!(
        restarted_containers(spec(&p), &set(wanted)),
        vec!["app".to_string()]
    );
    // Unchanged: nothing restarts.
    assert!(restarted_containers(spec(&p), &set(cpu(500))).is_empty());
}

#[test]
fn plan_workload_resize_asks_pods_within_the_budget_and_counts_the_others() {
    let now = at("2026-07-01T12:00:00Z");
    let old = running(json!([{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]));
    let done = running(json!([{"name": "app", "resources": {"requests": {"cpu": "250m"}}}]));
    let deferred = with_condition(
        done.clone(),
        POD_RESIZE_PENDING,
        "Deferred",
        "2026-07-01T11:59:00Z",
    );
    let pods = [&old, &old, &done, &deferred];
    let mut budget = 1;
    let r = plan_workload_resize(&pods, (&cpu(250), &NO_LIMITS), (now, None), &mut budget);
    assert_eq!(budget, 0);
    assert_eq!(r.requests.len(), 1);
    assert_eq!(
        (r.resized, r.pending, r.waiting, r.infeasible),
        (1, 2, 1, 0)
    );
    assert!(r.fallback.is_none());
    assert_eq!(
        r.requests[0].body,
        json!({"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "250m"}}}]}})
    );
}

#[test]
fn plan_workload_resize_falls_back_for_the_whole_workload_and_asks_nothing() {
    let now = at("2026-07-01T12:00:00Z");
    let old = running(json!([{"name": "app", "resources": {"requests": {"cpu": "500m"}}}]));
    let infeasible = with_condition(
        running(json!([{"name": "app", "resources": {"requests": {"cpu": "250m"}}}])),
        POD_RESIZE_PENDING,
        "Infeasible",
        "2026-07-01T11:59:00Z",
    );
    let mut budget = 10;
    let r = plan_workload_resize(
        &[&old, &infeasible],
        (&cpu(250), &NO_LIMITS),
        (now, None),
        &mut budget,
    );
    assert_eq!(r.fallback.as_ref().unwrap().reason, "Infeasible");
    assert_eq!(r.infeasible, 1);
    assert!(r.requests.is_empty(), "a rollout replaces every pod");
}

/// A pod whose container `resizePolicy` restarts is resized one per workload and cycle.
#[test]
fn plan_workload_resize_restarts_one_container_pod_per_cycle() {
    let now = at("2026-07-01T12:00:00Z");
    let restarting = running(
        json!([{"name": "app", "resources": {"requests": {"cpu": "500m"}},
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]}]),
    );
    let mut budget = 10;
    let r = plan_workload_resize(
        &[&restarting, &restarting],
        (&cpu(250), &NO_LIMITS),
        (now, None),
        &mut budget,
    );
    assert_eq!((r.requests.len(), r.waiting), (1, 1));
    assert_eq!(r.requests[0].restarts, vec!["app".to_string()]);
}

/// One container `app` with `m` millicores and `b` bytes (limits or requests).
fn cpu_memory(m: Option<i64>, b: Option<i64>) -> ContainerRequests {
    [(
        "app".to_string(),
        ResourceRequests {
            cpu_millis: m,
            memory_bytes: b,
        },
    )]
    .into_iter()
    .collect()
}

#[test]
fn pod_resources_carry_the_limits_of_the_change() {
    let p = running(json!([{"name": "app", "resources": {
        "requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}}]));
    let mib = 1 << 20;
    let got = pod_resources(
        spec(&p),
        &cpu_memory(Some(700), Some(768 * mib)),
        &cpu_memory(Some(700), Some(768 * mib)),
    );
    assert_eq!(got.requests, cpu_memory(Some(700), Some(768 * mib)));
    assert_eq!(got.limits, got.requests, "Guaranteed: the limits follow");
    assert_eq!(
        resize_body(spec(&p), &got),
        json!({"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "700m", "memory": "768Mi"},
            "limits": {"cpu": "700m", "memory": "768Mi"}}}]}})
    );
    // A pod already at the change matches it, limits included.
    let resized = running(json!([{"name": "app", "resources": {
        "requests": {"cpu": "700m", "memory": "768Mi"}, "limits": {"cpu": "700m", "memory": "768Mi"}}}]));
    assert!(pod_matches(spec(&resized), &got));
    let limit_behind = running(json!([{"name": "app", "resources": {
        "requests": {"cpu": "700m", "memory": "768Mi"}, "limits": {"cpu": "1", "memory": "768Mi"}}}]));
    assert!(!pod_matches(spec(&limit_behind), &got));
}

#[test]
fn memory_limit_not_lowered() {
    let mib = 1 << 20;
    let lower = PodResources {
        requests: cpu_memory(None, Some(256 * mib)),
        limits: cpu_memory(None, Some(256 * mib)),
    };
    let raise = PodResources {
        requests: cpu_memory(None, Some(768 * mib)),
        limits: cpu_memory(None, Some(768 * mib)),
    };
    let not_required = running(json!([{"name": "app", "resources": {
        "limits": {"memory": "512Mi"}}}]));
    let f = super::memory_limit_not_lowered(spec(&not_required), &lower).unwrap_err();
    assert_eq!(f.reason, "MemoryLimitDecrease");
    assert!(super::memory_limit_not_lowered(spec(&not_required), &raise).is_ok());
    // Added where the pod has none: a decrease from unlimited.
    let unlimited = running(json!([{"name": "app"}]));
    assert!(super::memory_limit_not_lowered(spec(&unlimited), &raise).is_err());
    // RestartContainer: the kubelet restarts the container to lower it.
    let restarts = running(
        json!([{"name": "app", "resources": {"limits": {"memory": "512Mi"}},
        "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]),
    );
    assert!(super::memory_limit_not_lowered(spec(&restarts), &lower).is_ok());
    // The whole workload rolls out.
    let r = plan_workload_resize(
        &[&not_required],
        (&lower.requests, &lower.limits),
        (at("2026-07-01T12:00:00Z"), None),
        &mut 10,
    );
    assert_eq!(r.fallback.unwrap().reason, "MemoryLimitDecrease");
}
