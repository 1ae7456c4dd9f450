//! kerf's in-place resize against Kubernetes' own rules (the oracle in
//! tests/support/resize_oracle.rs, from `ComputePodQOS` and `ValidatePodResize`): over every
//! combination of requests and limits a container can have, kerf's QoS class is Kubernetes',
//! every resize kerf sends passes the API server's validation, and kerf rolls out exactly where
//! the API server would refuse the resize.

use kerf::core::model::{ContainerRequests, ResourceRequests};
use kerf::core::pod::Pod;
use kerf::core::writes::resize::{
    QosClass, plan_workload_resize, pod_requests, qos_class, resize_body,
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

/// The pods: the shape on `app` alone, beside a Guaranteed sidecar, beside an init container.
fn pods() -> Vec<Value> {
    let guaranteed = resources((None, Some("100m")), (None, Some("64Mi")));
    let mut out = Vec::new();
    for shape in container_shapes() {
        let app = json!({"name": "app", "image": "a", "resources": shape});
        let base = |spec: Value| {
            oracle::defaulted(&json!({
                "metadata": {"name": "web-1", "namespace": "shop"},
                "spec": spec,
                "status": {"phase": "Running"}
            }))
        };
        out.push(base(json!({"containers": [app.clone()]})));
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

#[test]
fn the_qos_class_is_the_one_kubernetes_computes() {
    let mut classes = std::collections::BTreeSet::new();
    for v in pods() {
        let pod: Pod = serde_json::from_value(v.clone()).unwrap();
        let ours = kerf_qos(qos_class(
            pod.spec.as_ref().unwrap(),
            &ContainerRequests::new(),
        ));
        assert_eq!(ours, oracle::compute_pod_qos(&v), "{v}");
        classes.insert(format!("{ours:?}"));
    }
    assert_eq!(classes.len(), 3, "every class is covered: {classes:?}");
}

#[test]
fn every_resize_kerf_sends_passes_validate_pod_resize_and_kerf_rolls_out_where_it_would_not() {
    let (mut sent, mut rolled_out) = (0, 0);
    for v in pods() {
        let pod: Pod = serde_json::from_value(v.clone()).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        for want in recommendations() {
            let mut budget = 10;
            let plan = plan_workload_resize(
                &[&pod],
                &want,
                ("2026-07-01T12:00:00Z".parse().unwrap(), None),
                &mut budget,
            );
            // What kerf would send for this pod, asked or not.
            let body = resize_body(spec, &pod_requests(spec, &want));
            let verdict = oracle::validate_pod_resize(&v, &oracle::apply_resize(&v, &body));
            match (&plan.fallback, plan.requests.first()) {
                (None, Some(r)) => {
                    sent += 1;
                    assert_eq!(r.body, body);
                    assert_eq!(verdict, Ok(()), "kerf sent {body} to {v}");
                    assert!(
                        !body.to_string().contains("limits"),
                        "kerf never writes a limit: {body}"
                    );
                }
                (Some(f), _) => {
                    rolled_out += 1;
                    assert_eq!(f.reason, "QoSClassChange", "{v}");
                    assert_eq!(
                        verdict,
                        Err("Pod QOS Class may not change as a result of resizing".into()),
                        "kerf rolled out {v} for {want:?}"
                    );
                }
                (None, None) => assert_eq!(plan.resized, 1, "nothing to change: {v}"),
            }
        }
    }
    assert!(
        sent > 50 && rolled_out > 10,
        "both outcomes covered: {sent} sent, {rolled_out} rolled out"
    );
}
