//! Requests and limits together, as VPA keeps them (docs/policies.md#limits): one function,
//! [`container_resources`], gives what every path writes — the template write, the admission
//! patch, the in-place resize, `kerf recommend` and `kerf simulate`.
//!
//! VPA's rule (`vertical-pod-autoscaler/pkg/utils/vpa/limit_and_request_scaling.go`,
//! `GetProportionalLimit`): under `controlledValues: RequestsAndLimits` (VPA's default) a
//! container's limit keeps its ratio to the request — the new limit is the old limit × the new
//! request ÷ the old request, in millicores for CPU and bytes for memory, rounded down; a limit
//! equal to its request (or without a request) follows the request exactly; a container without
//! a limit never gets one. Under `RequestsOnly` the limit stays and the request is capped at it.
//! A pod whose containers all have requests equal to limits (Guaranteed) stays Guaranteed, and a
//! Burstable one stays Burstable (a limit is never added or removed).

use crate::api::ControlledValues;
use crate::core::model::ResourceRequests;

/// VPA's `getProportionalResourceLimit`: the limit keeping `limit`'s ratio to `request` at
/// `new_request`. `None` where there is no limit (none is added).
pub fn proportional_limit(
    request: Option<i64>,
    limit: Option<i64>,
    new_request: i64,
) -> Option<i64> {
    let limit = limit.filter(|l| *l > 0)?;
    match request.filter(|r| *r > 0) {
        None => Some(new_request),
        Some(r) if r == limit => Some(new_request),
        Some(r) => {
            let scaled = i128::from(limit) * i128::from(new_request) / i128::from(r);
            Some(i64::try_from(scaled).unwrap_or(i64::MAX))
        }
    }
}

/// `RequestsOnly`: the request never goes above the container's limit (the API server refuses
/// a request above its limit).
pub fn request_capped_at_limit(new_request: i64, limit: Option<i64>) -> i64 {
    limit.map_or(new_request, |l| new_request.min(l))
}

/// One resource of a container: the request and limit kerf writes for a recommended request.
pub fn resource_values(
    controlled: ControlledValues,
    request: Option<i64>,
    limit: Option<i64>,
    recommended: i64,
) -> (i64, Option<i64>) {
    match controlled {
        ControlledValues::RequestsAndLimits => {
            (recommended, proportional_limit(request, limit, recommended))
        }
        ControlledValues::RequestsOnly => (request_capped_at_limit(recommended, limit), limit),
    }
}

/// What a container gets: its `recommended` requests (a resource without one is left as it is)
/// and the limits that go with them, from its current `requests` and `limits`.
pub fn container_resources(
    controlled: (ControlledValues, ControlledValues),
    requests: &ResourceRequests,
    limits: &ResourceRequests,
    recommended: &ResourceRequests,
) -> (ResourceRequests, ResourceRequests) {
    let one = |c, req: Option<i64>, lim: Option<i64>, rec: Option<i64>| match rec {
        Some(rec) => {
            let (r, l) = resource_values(c, req, lim, rec);
            (Some(r), l)
        }
        None => (req, lim),
    };
    let (cpu, cpu_limit) = one(
        controlled.0,
        requests.cpu_millis,
        limits.cpu_millis,
        recommended.cpu_millis,
    );
    let (memory, memory_limit) = one(
        controlled.1,
        requests.memory_bytes,
        limits.memory_bytes,
        recommended.memory_bytes,
    );
    (
        ResourceRequests {
            cpu_millis: cpu,
            memory_bytes: memory,
        },
        ResourceRequests {
            cpu_millis: cpu_limit,
            memory_bytes: memory_limit,
        },
    )
}

/// Kubernetes' QoS class of a pod from its containers' (requests, limits) of cpu and memory
/// (`pkg/apis/core/helper/qos/qos.go`, `ComputePodQOS`): Guaranteed when every container has
/// both limits and requests equal to them, BestEffort when none has any, else Burstable.
pub fn qos_class(containers: &[(ResourceRequests, ResourceRequests)]) -> &'static str {
    let any = containers.iter().any(|(r, l)| {
        r.cpu_millis.is_some()
            || r.memory_bytes.is_some()
            || l.cpu_millis.is_some()
            || l.memory_bytes.is_some()
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|(r, l)| {
        let eq = |req: Option<i64>, lim: Option<i64>| {
            lim.is_some() && req.is_none_or(|r| Some(r) == lim)
        };
        eq(r.cpu_millis, l.cpu_millis) && eq(r.memory_bytes, l.memory_bytes)
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

#[cfg(test)]
mod tests;
