//! kerf's in-place resize against Kubernetes' own rules (the oracle in
//! tests/support/resize_oracle.rs, from `ComputePodQOS` and `ValidatePodResize`): over every
//! combination of requests and limits a container can have, kerf's QoS class is Kubernetes',
//! every resize kerf sends — requests and the limits kerf's one rule carries with them, as
//! the template write and admission carry them — passes the API server's validation, and kerf
//! rolls out exactly where the API server would refuse the resize.

use kerf::api::ControlledValues;
use kerf::core::limits::container_resources;
use kerf::core::model::{ContainerRequests, ResourceRequests};
use kerf::core::pod::Pod;
use kerf::core::writes::resize::{
    PodResources, QosClass, plan_workload_resize, pod_resources, qos_class, resize_body,
};
use serde_json::{Value, json};

use crate::resize_oracle::{self as oracle, Qos};

fn resources(cpu: (Option<&str>, Option<&str>), memory: (Option<&str>, Option<&str>)) -> Value {
    let mut r = json!({});
    for (name, (req, lim)) in [("cpu", cpu), ("memory", memory)] {
        if let Some(v) = req {
            r["requests"][name] = json!(v);
        }
        if let Some(v) = lim {
            r["limits"][name] = json!(v);
        }
    }
    r
}

/// Every container shape with requests at or below their limits.
fn container_shapes() -> Vec<Value> {
    let cpu = [
        (None, None),
        (Some("500m"), None),
        (None, Some("500m")),
        (Some("500m"), Some("500m")),
        (Some("500m"), Some("1")),
    ];
    let memory = [
        (None, None),
        (Some("256Mi"), None),
        (None, Some("256Mi")),
        (Some("256Mi"), Some("256Mi")),
        (Some("256Mi"), Some("512Mi")),
    ];
    let mut out = Vec::new();
    for c in cpu {
        for m in memory {
            out.push(resources(c, m));
        }
    }
    out
}

/// The pods: the shape on `app` alone, beside a Guaranteed sidecar, beside an init container;
/// and alone with a memory `resizePolicy` of `RestartContainer`.
fn pods() -> Vec<Value> {
    let guaranteed = resources((None, Some("100m")), (None, Some("64Mi")));
    let mut out = Vec::new();
    for shape in container_shapes() {
        let app = json!({"name": "app", "image": "a", "resources": shape});
        let restarts = json!({"name": "app", "image": "a", "resources": shape,
            "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]});
        let base = |spec: Value| {
            oracle::defaulted(&json!({
                "metadata": {"name": "web-1", "namespace": "shop"},
                "spec": spec,
                "status": {"phase": "Running"}
            }))
        };
        out.push(base(json!({"containers": [app.clone()]})));
        out.push(base(json!({"containers": [restarts]})));
        out.push(base(
            json!({"containers": [app.clone()], "initContainers": [
            {"name": "proxy", "image": "p", "restartPolicy": "Always", "resources": guaranteed}]}),
        ));
        out.push(base(json!({"containers": [app], "initContainers": [
            {"name": "migrate", "image": "m", "resources": {"requests": {"cpu": "1"}}}]})));
    }
    out
}

fn wanted(cpu: Option<i64>, memory: Option<i64>) -> ContainerRequests {
    let mut w = ContainerRequests::new();
    for c in ["app", "proxy", "migrate"] {
        w.insert(
            c.into(),
            ResourceRequests {
                cpu_millis: cpu,
                memory_bytes: memory,
            },
        );
    }
    w
}

fn recommendations() -> Vec<ContainerRequests> {
    vec![
        wanted(Some(250), None),
        wanted(Some(2000), None),
        wanted(None, Some(128 << 20)),
        wanted(Some(250), Some(1 << 30)),
    ]
}

fn kerf_qos(c: QosClass) -> Qos {
    match c {
        QosClass::BestEffort => Qos::BestEffort,
        QosClass::Burstable => Qos::Burstable,
        QosClass::Guaranteed => Qos::Guaranteed,
    }
}

/// A container's (requests, limits) of cpu and memory, read independently of kerf.
fn current(c: &Value) -> (ResourceRequests, ResourceRequests) {
    let of = |which: &str, r: &str| {
        c["resources"][which]
            .get(r)
            .map(|q| oracle::quantity(r, q) as i64)
    };
    let pair = |which: &str| ResourceRequests {
        cpu_millis: of(which, "cpu"),
        memory_bytes: of(which, "memory"),
    };
    (pair("requests"), pair("limits"))
}

/// The change for `want` as the template write and admission carry it: kerf's one rule over
/// each container's current requests and limits (`RequestsOnly` caps the request).
fn change(
    pod: &Value,
    want: &ContainerRequests,
    controlled: ControlledValues,
) -> (ContainerRequests, ContainerRequests) {
    let (mut requests, mut limits) = (ContainerRequests::new(), ContainerRequests::new());
    for list in ["containers", "initContainers"] {
        for c in pod["spec"][list].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap();
            let Some(w) = want.get(name) else { continue };
            let (req, lim) = current(c);
            let (r, l) = container_resources((controlled, controlled), &req, &lim, w);
            let r = ResourceRequests {
                cpu_millis: w.cpu_millis.and(r.cpu_millis),
                memory_bytes: w.memory_bytes.and(r.memory_bytes),
            };
            requests.insert(name.to_string(), r);
            if l.cpu_millis.is_some() || l.memory_bytes.is_some() {
                limits.insert(name.to_string(), l);
            }
        }
    }
    (requests, limits)
}

#[test]
fn the_qos_class_is_the_one_kubernetes_computes() {
    let mut classes = std::collections::BTreeSet::new();
    for v in pods() {
        let pod: Pod = serde_json::from_value(v.clone()).unwrap();
        let ours = kerf_qos(qos_class(
            pod.spec.as_ref().unwrap(),
            &PodResources::default(),
        ));
        assert_eq!(ours, oracle::compute_pod_qos(&v), "{v}");
        classes.insert(format!("{ours:?}"));
    }
    assert_eq!(classes.len(), 3, "every class is covered: {classes:?}");
}

/// The API server's reason for each of kerf's fallbacks.
fn refusal(reason: &str) -> &'static str {
    match reason {
        "QoSClassChange" => "Pod QOS Class may not change as a result of resizing",
        "MemoryLimitDecrease" => "memory limits cannot be",
        other => panic!("kerf rolled out for a reason the API server does not give: {other}"),
    }
}

#[test]
fn every_resize_kerf_sends_passes_validate_pod_resize_and_kerf_rolls_out_where_it_would_not() {
    let (mut sent, mut rolled_out, mut with_limits) = (0, 0, 0);
    let mut reasons = std::collections::BTreeSet::new();
    let controls = [
        ControlledValues::RequestsAndLimits,
        ControlledValues::RequestsOnly,
    ];
    for v in pods() {
        let pod: Pod = serde_json::from_value(v.clone()).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        for want in recommendations() {
            for controlled in controls {
                let (want, limits) = change(&v, &want, controlled);
                let mut budget = 10;
                let plan = plan_workload_resize(
                    &[&pod],
                    (&want, &limits),
                    ("2026-07-01T12:00:00Z".parse().unwrap(), None),
                    &mut budget,
                );
                // What kerf would send for this pod, asked or not.
                let set = pod_resources(spec, &want, &limits);
                let body = resize_body(spec, &set);
                let verdict = oracle::validate_pod_resize(&v, &oracle::apply_resize(&v, &body));
                match (&plan.fallback, plan.requests.first()) {
                    (None, Some(r)) => {
                        sent += 1;
                        assert_eq!(r.body, body);
                        assert_eq!(verdict, Ok(()), "kerf sent {body} to {v}");
                        // The limits sent are those the template write carries.
                        assert_eq!(r.limits, set.limits);
                        with_limits += usize::from(body.to_string().contains("limits"));
                    }
                    (Some(f), _) => {
                        rolled_out += 1;
                        reasons.insert(f.reason);
                        let err = verdict.expect_err(&format!("kerf rolled out {v} for {want:?}"));
                        assert!(
                            err.starts_with(refusal(f.reason)),
                            "{}: the API server says {err}",
                            f.reason
                        );
                    }
                    (None, None) => assert_eq!(plan.resized, 1, "nothing to change: {v}"),
                }
            }
        }
    }
    assert!(
        sent > 100 && rolled_out > 20 && with_limits > 20,
        "every outcome covered: {sent} sent ({with_limits} with limits), {rolled_out} rolled out"
    );
    assert_eq!(reasons.len(), 2, "both refusals met: {reasons:?}");
}

/// The pod `v` after the one resize kerf asks of it for `want` (none refused).
fn resized(v: &Value, want: &ContainerRequests, controlled: ControlledValues) -> Value {
    let pod: Pod = serde_json::from_value(v.clone()).unwrap();
    let (want, limits) = change(v, want, controlled);
    let plan = plan_workload_resize(
        &[&pod],
        (&want, &limits),
        ("2026-07-01T12:00:00Z".parse().unwrap(), None),
        &mut 10,
    );
    assert_eq!(plan.fallback, None, "{v}");
    oracle::apply_resize(v, &plan.requests[0].body)
}

/// A Guaranteed pod (requests = limits) that kerf shrinks stays Guaranteed on the resize path:
/// the limits follow the requests, so the resize is sent, not refused.
#[test]
fn a_guaranteed_pod_shrinking_stays_guaranteed_on_the_resize_path() {
    let v = oracle::defaulted(&json!({
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "a",
            "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
            "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]},
        "status": {"phase": "Running"}
    }));
    for want in [wanted(Some(1500), None), wanted(Some(1500), Some(6 << 30))] {
        let after = resized(&v, &want, ControlledValues::RequestsAndLimits);
        assert_eq!(oracle::compute_pod_qos(&after), Qos::Guaranteed, "{after}");
        assert_eq!(oracle::validate_pod_resize(&v, &after), Ok(()));
        assert_eq!(
            after["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "1500m"
        );
    }
}

/// Memory raised past an old limit after an OOM kill: the resize raises the limit with the
/// request (a raise is allowed under `NotRequired`); under `RequestsOnly` the request is
/// capped at the limit on the resize path as on every other.
#[test]
fn memory_raised_past_an_old_limit_through_resize_and_requests_only_capped() {
    let v = oracle::defaulted(&json!({
        "metadata": {"name": "web-1", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "a",
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                          "limits": {"memory": "512Mi"}}}]},
        "status": {"phase": "Running"}
    }));
    let pod: Pod = serde_json::from_value(v.clone()).unwrap();
    let want = wanted(None, Some(768 << 20));
    let after = resized(&v, &want, ControlledValues::RequestsAndLimits);
    assert_eq!(oracle::validate_pod_resize(&v, &after), Ok(()));
    let raised = &after["spec"]["containers"][0]["resources"];
    assert_eq!(raised["requests"]["memory"], "768Mi");
    assert_eq!(raised["limits"]["memory"], "768Mi");
    let (capped, limits) = change(&v, &want, ControlledValues::RequestsOnly);
    assert_eq!(capped.get("app").unwrap().memory_bytes, Some(512 << 20));
    let plan = plan_workload_resize(
        &[&pod],
        (&capped, &limits),
        ("2026-07-01T12:00:00Z".parse().unwrap(), None),
        &mut 10,
    );
    // RequestsOnly: capped at the 512Mi limit, which the pod already requests.
    assert!(
        plan.requests.is_empty() && plan.fallback.is_none(),
        "{plan:?}"
    );
    assert_eq!(plan.resized, 1);
}
