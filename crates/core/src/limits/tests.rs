use super::*;

fn rr(cpu: Option<i64>, memory: Option<i64>) -> ResourceRequests {
    ResourceRequests {
        cpu_millis: cpu,
        memory_bytes: memory,
    }
}

const MIB: i64 = 1 << 20;
const BOTH: (ControlledValues, ControlledValues) = (
    ControlledValues::RequestsAndLimits,
    ControlledValues::RequestsAndLimits,
);

#[test]
fn proportional_limit_keeps_the_ratio_as_vpa_does() {
    // 2:1 limit to request, rounded down.
    assert_eq!(proportional_limit(Some(500), Some(1000), 333), Some(666));
    // Equal request and limit, or no request: the limit follows the request.
    assert_eq!(proportional_limit(Some(1000), Some(1000), 700), Some(700));
    assert_eq!(proportional_limit(None, Some(1000), 700), Some(700));
    // No limit: none is added.
    assert_eq!(proportional_limit(Some(1000), None, 700), None);
    assert_eq!(proportional_limit(Some(1000), Some(0), 700), None);
    // Overflow is capped, not wrapped.
    assert_eq!(
        proportional_limit(Some(1), Some(i64::MAX), 4),
        Some(i64::MAX)
    );
}

#[test]
fn container_resources_keep_a_guaranteed_pod_guaranteed_when_it_shrinks() {
    let requests = rr(Some(4000), Some(16 * 1024 * MIB));
    let limits = requests.clone();
    assert_eq!(
        qos_class(&[(requests.clone(), limits.clone())]),
        "Guaranteed"
    );
    let (r, l) = container_resources(
        BOTH,
        &requests,
        &limits,
        &rr(Some(2500), Some(10 * 1024 * MIB)),
    );
    assert_eq!(r, rr(Some(2500), Some(10 * 1024 * MIB)));
    assert_eq!(l, r);
    assert_eq!(qos_class(&[(r, l)]), "Guaranteed");
}

#[test]
fn container_resources_raise_memory_past_an_old_limit_after_an_oom_kill() {
    let requests = rr(None, Some(512 * MIB));
    let limits = rr(None, Some(512 * MIB));
    let (r, l) = container_resources(BOTH, &requests, &limits, &rr(None, Some(768 * MIB)));
    assert_eq!(r.memory_bytes, Some(768 * MIB));
    assert_eq!(
        l.memory_bytes,
        Some(768 * MIB),
        "the limit rises with the request"
    );
    // RequestsOnly: the request is capped at the limit instead.
    let only = (
        ControlledValues::RequestsAndLimits,
        ControlledValues::RequestsOnly,
    );
    let (r, l) = container_resources(only, &requests, &limits, &rr(None, Some(768 * MIB)));
    assert_eq!(r.memory_bytes, Some(512 * MIB));
    assert_eq!(l.memory_bytes, Some(512 * MIB));
}

#[test]
fn container_resources_never_add_a_limit_and_keep_burstable() {
    let requests = rr(Some(1000), Some(1024 * MIB));
    let limits = rr(Some(2000), None);
    let (r, l) = container_resources(BOTH, &requests, &limits, &rr(Some(700), Some(800 * MIB)));
    assert_eq!(l, rr(Some(1400), None));
    assert_eq!(qos_class(&[(requests, limits)]), "Burstable");
    assert_eq!(qos_class(&[(r, l)]), "Burstable");
}

#[test]
fn qos_class_follows_compute_pod_qos() {
    assert_eq!(qos_class(&[(rr(None, None), rr(None, None))]), "BestEffort");
    // A limit without a request defaults the request to it: Guaranteed.
    assert_eq!(
        qos_class(&[(rr(None, None), rr(Some(1), Some(1)))]),
        "Guaranteed"
    );
    let g = (rr(Some(1), Some(1)), rr(Some(1), Some(1)));
    let b = (rr(Some(1), None), rr(None, None));
    assert_eq!(qos_class(&[g.clone(), b]), "Burstable");
    assert_eq!(qos_class(&[g.clone(), g]), "Guaranteed");
}

#[test]
fn within_limit_range_keeps_min_max_and_the_ratio() {
    // Below min: raised; above max: lowered (the limit too).
    assert_eq!(
        within_limit_range(50, None, Some(100), Some(4000), None),
        (100, None)
    );
    assert_eq!(
        within_limit_range(6000, Some(8000), Some(100), Some(4000), None),
        (4000, Some(4000))
    );
    // A 2:1 maximum ratio: a request shrunk under half its limit is raised to it.
    assert_eq!(
        within_limit_range(300, Some(1000), None, None, Some(2.0)),
        (500, Some(1000))
    );
    // Nothing set: unchanged.
    assert_eq!(
        within_limit_range(300, Some(1000), None, None, None),
        (300, Some(1000))
    );
}

#[test]
fn container_limit_range_reads_the_container_item() {
    let lr = serde_json::json!({"apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": "bounds", "namespace": "shop"},
        "spec": {"limits": [
            {"type": "Pod", "max": {"cpu": "16"}},
            {"type": "Container", "min": {"cpu": "100m", "memory": "64Mi"},
             "max": {"cpu": "4", "memory": "8Gi"}, "maxLimitRequestRatio": {"cpu": "2"}}]}});
    let c = ContainerLimitRange::from_object(&lr).unwrap();
    assert_eq!(c.name, "shop/bounds");
    assert_eq!(c.min, rr(Some(100), Some(64 * MIB)));
    assert_eq!(c.max, rr(Some(4000), Some(8 * 1024 * MIB)));
    assert_eq!(c.max_ratio, (Some(2.0), None));
}

#[test]
fn quota_exceeded_names_the_quota_an_upsize_would_pass() {
    let q = QuotaView::from_object(
        &serde_json::json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "team", "namespace": "shop"},
        "spec": {"hard": {"cpu": "4", "limits.memory": "8Gi"}},
        "status": {"used": {"cpu": "3500m", "limits.memory": "6Gi"}}}),
    )
    .unwrap();
    assert_eq!(q.requests.0.cpu_millis, Some(4000), "`cpu` is requests.cpu");
    let quotas = [q];
    assert_eq!(
        quota_exceeded(&quotas, &rr(Some(500), None), &rr(None, None)),
        None
    );
    assert_eq!(
        quota_exceeded(&quotas, &rr(Some(501), None), &rr(None, None)).as_deref(),
        Some("ResourceQuota shop/team: requests.cpu would pass its hard limit")
    );
    assert_eq!(
        quota_exceeded(&quotas, &rr(None, None), &rr(None, Some(3 * 1024 * MIB))).as_deref(),
        Some("ResourceQuota shop/team: limits.memory would pass its hard limit")
    );
    // A downsize never exceeds.
    assert_eq!(
        quota_exceeded(&quotas, &rr(Some(-1000), None), &rr(None, None)),
        None
    );
}

#[test]
fn capped_at_limit_under_requests_only() {
    use crate::quantity::capped_at_limit;
    assert_eq!(
        capped_at_limit(768 * MIB, Some(512 * MIB)),
        (512 * MIB, Some(512 * MIB))
    );
    assert_eq!(
        capped_at_limit(256 * MIB, Some(512 * MIB)),
        (256 * MIB, None)
    );
    assert_eq!(capped_at_limit(768 * MIB, None), (768 * MIB, None));
}

#[test]
fn pod_resource_value() {
    // The change carries a limit: the pod gets it with the request, past its old limit.
    assert_eq!(
        super::pod_resource_value(768 * MIB, Some(768 * MIB), Some(512 * MIB)),
        (768 * MIB, Some(768 * MIB), None)
    );
    // It carries none (RequestsOnly, no limit): the request is capped at the pod's own.
    assert_eq!(
        super::pod_resource_value(768 * MIB, None, Some(512 * MIB)),
        (512 * MIB, None, Some(512 * MIB))
    );
    assert_eq!(
        super::pod_resource_value(300, None, None),
        (300, None, None)
    );
}

#[test]
fn qos_class_kept() {
    let only = (
        ControlledValues::RequestsOnly,
        ControlledValues::RequestsOnly,
    );
    let write = |controlled, req: &ResourceRequests, lim: &ResourceRequests, rec| {
        container_resources(controlled, req, lim, &rec)
    };
    // Guaranteed under RequestsOnly: lowering the cpu request would make it Burstable, so cpu
    // keeps its request (and limit); memory, unchanged, stays.
    let g = rr(Some(1000), Some(512 * MIB));
    let current = [(g.clone(), g.clone())];
    let mut written = [write(only, &g, &g, rr(Some(400), None))];
    assert_eq!(qos_class(&written), "Burstable");
    assert_eq!(
        super::qos_class_kept(&current, &mut written),
        vec![(0, "cpu")]
    );
    assert_eq!(written[0], (g.clone(), g.clone()));
    assert_eq!(qos_class(&written), "Guaranteed");
    // RequestsAndLimits: the limit follows, nothing to keep.
    let mut written = [write(BOTH, &g, &g, rr(Some(400), None))];
    assert!(super::qos_class_kept(&current, &mut written).is_empty());
    assert_eq!(written[0].1.cpu_millis, Some(400));
    // Burstable raised to its limit under RequestsOnly would become Guaranteed: kept.
    let (req, lim) = (
        rr(Some(500), Some(512 * MIB)),
        rr(Some(1000), Some(512 * MIB)),
    );
    let current = [(req.clone(), lim.clone())];
    let mut written = [write(only, &req, &lim, rr(Some(2000), None))];
    assert_eq!(qos_class(&written), "Guaranteed");
    assert_eq!(
        super::qos_class_kept(&current, &mut written),
        vec![(0, "cpu")]
    );
    assert_eq!(written[0].0.cpu_millis, Some(500));
    // A BestEffort pod's first requests make it Burstable, as with VPA.
    let none = rr(None, None);
    let current = [(none.clone(), none.clone())];
    let mut written = [(rr(Some(100), None), none)];
    assert!(super::qos_class_kept(&current, &mut written).is_empty());
}

/// Two containers: `app` (kerf sets its request) and `log` (left as it is).
fn two(app: (i64, Option<i64>), log: (i64, Option<i64>), follow: bool) -> PodResource {
    PodResource {
        containers: vec![(app.0, app.1, true), (log.0, log.1, false)],
        follow,
    }
}

#[test]
fn pod_min() {
    // Summed request 300m under a 500m minimum: kerf's request scales up to meet it.
    let p = two((200, None), (100, None), true);
    let f = super::pod_min(&p, Some(500), 1.0);
    assert!((200.0 * f - 400.0).abs() < 0.01, "{f}");
    assert_eq!(super::pod_min(&p, Some(300), 1.0), 1.0, "met already");
    assert_eq!(super::pod_min(&p, None, 1.0), 1.0);
}

#[test]
fn pod_max() {
    // Limits follow: summed limit 400m + 100m over a 300m maximum; app's scales down.
    let p = two((200, Some(400)), (100, Some(100)), true);
    let f = super::pod_max(&p, Some(300), 1.0);
    assert!((400.0 * f - 200.0).abs() < 0.01, "{f}");
    // No limit on one container: the summed request is held to it.
    let p = two((600, None), (100, Some(100)), true);
    let f = super::pod_max(&p, Some(500), 1.0);
    assert!((600.0 * f - 400.0).abs() < 0.01, "{f}");
    assert_eq!(super::pod_max(&p, Some(1000), 1.0), 1.0);
}

#[test]
fn pod_max_ratio() {
    // RequestsOnly (limits stay): 2000m of limits over 500m of requests is 4:1; a 2:1 maximum
    // raises kerf's request until the pod's requests reach 1000m.
    let p = two((400, Some(1000)), (100, Some(1000)), false);
    let f = super::pod_max_ratio(&p, Some(2.0), 1.0);
    assert!((400.0 * f - 900.0).abs() < 0.01, "{f}");
    // Limits that follow with the same ratio as the pod's: nothing kerf's scaling changes.
    let p = two((400, Some(1600)), (100, Some(400)), true);
    assert_eq!(super::pod_max_ratio(&p, Some(2.0), 1.0), 1.0);
}

#[test]
fn within_pod_limit_range() {
    let p = two((200, None), (100, None), true);
    // Raised, rounded up: the bound is met.
    assert_eq!(
        super::within_pod_limit_range(&p, (Some(501), None, None)),
        vec![401, 100]
    );
    let p = two((900, Some(900)), (100, Some(100)), true);
    // Lowered, rounded down.
    assert_eq!(
        super::within_pod_limit_range(&p, (None, Some(700), None)),
        vec![600, 100]
    );
    assert_eq!(
        super::within_pod_limit_range(&p, (None, None, None)),
        vec![900, 100]
    );
}

#[test]
fn container_limit_range_reads_the_pod_item() {
    let lr = serde_json::json!({"apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": "pods", "namespace": "shop"},
        "spec": {"limits": [{"type": "Pod", "min": {"cpu": "500m"}, "max": {"memory": "2Gi"},
            "maxLimitRequestRatio": {"cpu": "3"}}]}});
    let c = ContainerLimitRange::from_object(&lr).unwrap();
    assert_eq!(
        c.min,
        rr(None, None),
        "no Container item: no container bounds"
    );
    let pod = c.pod.unwrap();
    assert_eq!(pod.min, rr(Some(500), None));
    assert_eq!(pod.max, rr(None, Some(2048 * MIB)));
    assert_eq!(pod.max_ratio, (Some(3.0), None));
}

#[test]
fn namespace_limit_range_keeps_the_tightest_bounds_of_every_item() {
    let lr = |name: &str, limits: serde_json::Value| {
        ContainerLimitRange::from_object(&serde_json::json!({"apiVersion": "v1",
            "kind": "LimitRange", "metadata": {"name": name, "namespace": "shop"},
            "spec": {"limits": limits}}))
        .unwrap()
    };
    let ranges = [
        lr(
            "a",
            serde_json::json!([{"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "4"}},
            {"type": "Pod", "min": {"cpu": "200m"}, "maxLimitRequestRatio": {"cpu": "4"}}]),
        ),
        lr(
            "b",
            serde_json::json!([{"type": "Container", "min": {"cpu": "50m"}, "max": {"cpu": "2"}},
            {"type": "Pod", "min": {"cpu": "300m"}, "maxLimitRequestRatio": {"cpu": "3"}}]),
        ),
        lr(
            "c",
            serde_json::json!([{"type": "Pod", "max": {"memory": "1Gi"}}]),
        ),
    ];
    let got = namespace_limit_range(&ranges, "shop").unwrap();
    assert_eq!(got.name, "shop/a, shop/b, shop/c");
    assert_eq!(
        (got.min.cpu_millis, got.max.cpu_millis),
        (Some(100), Some(2000))
    );
    let pod = got.pod.unwrap();
    assert_eq!(pod.min.cpu_millis, Some(300));
    assert_eq!(pod.max.memory_bytes, Some(1024 * MIB));
    assert_eq!(pod.max_ratio.0, Some(3.0));
    assert!(namespace_limit_range(&ranges, "other").is_none());
}

#[test]
fn namespace_quotas_are_the_namespaces_own() {
    let quota = |name: &str| QuotaView {
        name: name.into(),
        requests: Default::default(),
        limits: Default::default(),
    };
    let quotas = [
        quota("shop/compute"),
        quota("shopping/compute"),
        quota("shop/gpu"),
    ];
    let names: Vec<String> = namespace_quotas(&quotas, "shop")
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(names, ["shop/compute", "shop/gpu"]);
    assert!(namespace_quotas(&quotas, "sho").is_empty());
}
