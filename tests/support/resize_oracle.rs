//! Kubernetes' rules for an in-place pod resize, written independently of kerf from the
//! Kubernetes source, as a test oracle: every resize kerf sends must pass them, and kerf must
//! roll out exactly where they refuse.
//!
//! Sources (kubernetes/kubernetes):
//! - `pkg/apis/core/helper/qos/qos.go`, `ComputePodQOS`: over `spec.containers` and
//!   `spec.initContainers`, requests and limits of `cpu` and `memory` (the supported QoS
//!   resources) that are > 0 are summed per resource; a container whose limits lack either
//!   `cpu` or `memory` makes the pod not Guaranteed; no requests and no limits at all is
//!   BestEffort; Guaranteed when every summed request has an equal summed limit and there are as
//!   many limits as requests; else Burstable. With pod-level resources set, `spec.resources`
//!   alone decides. The pod is the stored one: a missing request was defaulted to its limit.
//! - `pkg/apis/core/validation/validation.go`, `ValidatePodResize`: a pod with pod-level
//!   resources cannot be resized (before 1.36); "Pod QOS Class may not change as a result of
//!   resizing"; only regular and restartable init (sidecar) containers' resources may change,
//!   and only `cpu` and `memory`; requests and limits cannot be removed; "resources for
//!   non-sidecar init containers are immutable"; `validateContainerResize` (Kubernetes 1.33):
//!   "memory limits cannot be decreased unless resizePolicy is RestartContainer", and a memory
//!   limit cannot be added either (the container's memory `resizePolicy`, `NotRequired` when
//!   absent).
//! - The request kerf sends is a strategic merge patch (`kubectl patch --subresource resize`):
//!   `containers` and `initContainers` merge by `name`, `resources.requests` merge by key.

#![allow(dead_code)]

use serde_json::Value;

/// A quantity in milli-units (CPU) or bytes (memory), parsed independently of kerf: enough for
/// the suffixes a pod spec carries here (`m`, `Ki`, `Mi`, `Gi`, plain numbers).
pub fn quantity(resource: &str, v: &Value) -> i128 {
    let s = v
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| v.to_string());
    let (num, mult): (&str, f64) = if let Some(n) = s.strip_suffix("Gi") {
        (n, (1u64 << 30) as f64)
    } else if let Some(n) = s.strip_suffix("Mi") {
        (n, (1u64 << 20) as f64)
    } else if let Some(n) = s.strip_suffix("Ki") {
        (n, 1024.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 0.001)
    } else {
        (s.as_str(), 1.0)
    };
    let base: f64 = num.parse().unwrap_or_else(|_| panic!("quantity {s}"));
    let value = base * mult;
    if resource == "cpu" {
        (value * 1000.0).round() as i128
    } else {
        value.round() as i128
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    BestEffort,
    Burstable,
    Guaranteed,
}

/// The pod as the API server stores it: each container's missing request defaulted to its
/// limit.
pub fn defaulted(pod: &Value) -> Value {
    let mut p = pod.clone();
    for list in ["containers", "initContainers"] {
        if let Some(cs) = p["spec"][list].as_array_mut() {
            for c in cs {
                let limits = c["resources"]["limits"].clone();
                if let Some(l) = limits.as_object() {
                    for (name, q) in l {
                        if c["resources"]["requests"].get(name).is_none() {
                            c["resources"]["requests"][name] = q.clone();
                        }
                    }
                }
            }
        }
    }
    p
}

/// `ComputePodQOS`.
pub fn compute_pod_qos(pod: &Value) -> Qos {
    const SUPPORTED: [&str; 2] = ["cpu", "memory"];
    let mut requests: std::collections::BTreeMap<&str, i128> = Default::default();
    let mut limits: std::collections::BTreeMap<&str, i128> = Default::default();
    let mut is_guaranteed = true;
    let mut process = |res: &Value| {
        for name in SUPPORTED {
            if let Some(q) = res["requests"].get(name) {
                let v = quantity(name, q);
                if v > 0 {
                    *requests.entry(name).or_default() += v;
                }
            }
        }
        let mut found = 0;
        for name in SUPPORTED {
            if let Some(q) = res["limits"].get(name) {
                let v = quantity(name, q);
                if v > 0 {
                    found += 1;
                    *limits.entry(name).or_default() += v;
                }
            }
        }
        found
    };
    let pod_level = &pod["spec"]["resources"];
    if !pod_level.is_null() {
        let found = process(pod_level);
        let has_limits = pod_level["limits"]
            .as_object()
            .is_some_and(|l| !l.is_empty());
        if has_limits && found < 2 {
            is_guaranteed = false;
        }
    } else {
        for list in ["containers", "initContainers"] {
            for c in pod["spec"][list].as_array().into_iter().flatten() {
                if process(&c["resources"]) < 2 {
                    is_guaranteed = false;
                }
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return Qos::BestEffort;
    }
    if is_guaranteed {
        for (name, req) in &requests {
            if limits.get(name) != Some(req) {
                is_guaranteed = false;
                break;
            }
        }
    }
    if is_guaranteed && requests.len() == limits.len() {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    }
}

/// The pod after a strategic merge patch of containers' resources by name.
pub fn apply_resize(pod: &Value, patch: &Value) -> Value {
    let mut p = pod.clone();
    for list in ["containers", "initContainers"] {
        for entry in patch["spec"][list].as_array().into_iter().flatten() {
            let name = &entry["name"];
            let target = p["spec"][list]
                .as_array_mut()
                .and_then(|cs| cs.iter_mut().find(|c| &c["name"] == name))
                .unwrap_or_else(|| panic!("the patch names a container the pod has not: {name}"));
            for which in ["requests", "limits"] {
                if let Some(m) = entry["resources"][which].as_object() {
                    for (k, v) in m {
                        target["resources"][which][k] = v.clone();
                    }
                }
            }
        }
    }
    p
}

/// `ValidatePodResize` (old, new) for what a patch of resources can change: `Err` with the API
/// server's reason.
pub fn validate_pod_resize(old: &Value, new: &Value) -> Result<(), String> {
    if !old["spec"]["resources"].is_null() {
        return Err("pods with pod-level resources cannot be resized".into());
    }
    if compute_pod_qos(&defaulted(old)) != compute_pod_qos(&defaulted(new)) {
        return Err("Pod QOS Class may not change as a result of resizing".into());
    }
    for list in ["containers", "initContainers"] {
        let olds = old["spec"][list].as_array().cloned().unwrap_or_default();
        let news = new["spec"][list].as_array().cloned().unwrap_or_default();
        for (o, n) in olds.iter().zip(&news) {
            let sidecar = o["restartPolicy"] == "Always";
            if list == "initContainers" && !sidecar && o["resources"] != n["resources"] {
                return Err("resources for non-sidecar init containers are immutable".into());
            }
            for which in ["requests", "limits"] {
                let before = o["resources"][which]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let after = n["resources"][which]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                if before.keys().any(|k| !after.contains_key(k)) {
                    return Err(format!("resource {which} cannot be removed"));
                }
                for (k, v) in &after {
                    if k != "cpu" && k != "memory" && before.get(k) != Some(v) {
                        return Err("only cpu and memory resources are mutable".into());
                    }
                }
            }
            if list == "containers" || sidecar {
                memory_limit_rule(o, n)?;
            }
        }
    }
    Ok(())
}

/// `validateContainerResize`'s memory-limit rule (1.33): under the memory `resizePolicy`
/// `NotRequired` (or none) a memory limit may be neither lowered nor added.
fn memory_limit_rule(old: &Value, new: &Value) -> Result<(), String> {
    let policy = new["resizePolicy"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["resourceName"] == "memory")
        .and_then(|p| p["restartPolicy"].as_str())
        .unwrap_or("");
    if policy != "NotRequired" && !policy.is_empty() {
        return Ok(());
    }
    let limit = |c: &Value| {
        c["resources"]["limits"]
            .get("memory")
            .map(|q| quantity("memory", q))
    };
    match (limit(old), limit(new)) {
        (Some(o), Some(n)) if n < o => {
            Err("memory limits cannot be decreased unless resizePolicy is RestartContainer".into())
        }
        (None, Some(_)) => {
            Err("memory limits cannot be added unless resizePolicy is RestartContainer".into())
        }
        _ => Ok(()),
    }
}
