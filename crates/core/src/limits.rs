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

use crate::model::ResourceRequests;
use crate::quantity::capped_at_limit;
use kerf_api::ControlledValues;

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
        ControlledValues::RequestsOnly => (capped_at_limit(recommended, limit).0, limit),
    }
}

/// One resource of a running or admitted pod's container: the request the change carries and
/// the limit it carries with it (`status.applied.limits`); where it carries none, the request
/// capped at the pod's own limit (the API server refuses a request above its limit). The one
/// rule of admission and in-place resize, so both write what the template write does.
/// Returns (request, limit to set, the limit the request was capped at).
pub fn pod_resource_value(
    request: i64,
    carried_limit: Option<i64>,
    pod_limit: Option<i64>,
) -> (i64, Option<i64>, Option<i64>) {
    match carried_limit {
        Some(l) => (request, Some(l), None),
        None => {
            let (request, cap) = capped_at_limit(request, pod_limit);
            (request, None, cap)
        }
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

/// [`container_resources`] kept within the namespace's LimitRange (`limit_range`, its
/// Container item): what every path writes.
pub fn bounded_resources(
    controlled: (ControlledValues, ControlledValues),
    requests: &ResourceRequests,
    limits: &ResourceRequests,
    recommended: &ResourceRequests,
    limit_range: Option<&ContainerLimitRange>,
) -> (ResourceRequests, ResourceRequests) {
    let (mut r, mut l) = container_resources(controlled, requests, limits, recommended);
    let Some(lr) = limit_range else {
        return (r, l);
    };
    if let Some(req) = r.cpu_millis.filter(|_| recommended.cpu_millis.is_some()) {
        let (req, lim) = within_limit_range(
            req,
            l.cpu_millis,
            lr.min.cpu_millis,
            lr.max.cpu_millis,
            lr.max_ratio.0,
        );
        (r.cpu_millis, l.cpu_millis) = (Some(req), lim);
    }
    if let Some(req) = r
        .memory_bytes
        .filter(|_| recommended.memory_bytes.is_some())
    {
        let (req, lim) = within_limit_range(
            req,
            l.memory_bytes,
            lr.min.memory_bytes,
            lr.max.memory_bytes,
            lr.max_ratio.1,
        );
        (r.memory_bytes, l.memory_bytes) = (Some(req), lim);
    }
    (r, l)
}

/// Whether the object named `<namespace>/<name>` (as LimitRanges and ResourceQuotas are kept)
/// is in `namespace`.
fn in_namespace(name: &str, namespace: &str) -> bool {
    name.split_once('/').is_some_and(|(ns, _)| ns == namespace)
}

/// The ResourceQuotas of `namespace`.
pub fn namespace_quotas(quotas: &[QuotaView], namespace: &str) -> Vec<QuotaView> {
    quotas
        .iter()
        .filter(|q| in_namespace(&q.name, namespace))
        .cloned()
        .collect()
}

/// The Container bounds of every LimitRange of `namespace` together, as the API server checks
/// each: the highest `min`, the lowest `max` and ratio (`None`: the namespace has none).
pub fn namespace_limit_range(
    ranges: &[ContainerLimitRange],
    namespace: &str,
) -> Option<ContainerLimitRange> {
    let mut here = ranges.iter().filter(|r| in_namespace(&r.name, namespace));
    let first = here.next()?.clone();
    Some(here.fold(first, |mut acc, r| {
        acc.name = format!("{}, {}", acc.name, r.name);
        tighten(
            (&mut acc.min, &mut acc.max, &mut acc.max_ratio),
            (&r.min, &r.max, &r.max_ratio),
        );
        acc.pod = match (acc.pod.take(), &r.pod) {
            (Some(mut a), Some(b)) => {
                tighten(
                    (&mut a.min, &mut a.max, &mut a.max_ratio),
                    (&b.min, &b.max, &b.max_ratio),
                );
                Some(a)
            }
            (a, b) => a.or_else(|| b.clone()),
        };
        acc
    }))
}

/// One LimitRange item's bounds and another's together, as the API server checks both: the
/// highest `min`, the lowest `max` and ratio.
fn tighten(
    (min, max, ratio): (
        &mut ResourceRequests,
        &mut ResourceRequests,
        &mut (Option<f64>, Option<f64>),
    ),
    (o_min, o_max, o_ratio): (
        &ResourceRequests,
        &ResourceRequests,
        &(Option<f64>, Option<f64>),
    ),
) {
    fn lowest<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if y < x { y } else { x }),
            (x, y) => x.or(y),
        }
    }
    min.cpu_millis = min.cpu_millis.max(o_min.cpu_millis);
    min.memory_bytes = min.memory_bytes.max(o_min.memory_bytes);
    max.cpu_millis = lowest(max.cpu_millis, o_max.cpu_millis);
    max.memory_bytes = lowest(max.memory_bytes, o_max.memory_bytes);
    *ratio = (lowest(ratio.0, o_ratio.0), lowest(ratio.1, o_ratio.1));
}

/// A namespace's ResourceQuota as kerf keeps to it: `hard` and `status.used` of the
/// requests and limits of cpu (millicores) and memory (bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaView {
    /// `<namespace>/<name>`, for the reason.
    pub name: String,
    /// (hard, used) of requests and of limits.
    pub requests: (ResourceRequests, ResourceRequests),
    pub limits: (ResourceRequests, ResourceRequests),
}

impl QuotaView {
    /// A ResourceQuota object's cpu and memory bounds (`requests.cpu` or `cpu`, `limits.cpu`, …);
    /// `None` when it bounds neither.
    pub fn from_object(obj: &serde_json::Value) -> Option<Self> {
        let name = namespaced_name(obj)?;
        // A quota's `cpu` and `memory` are its requests' (`requests.cpu` the same bound).
        let read = |m: Option<&serde_json::Value>, keys: &[String], cpu: bool| {
            let text = keys
                .iter()
                .find_map(|k| m.and_then(|m| m.get(k.as_str())).and_then(|v| v.as_str()))?;
            let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(text.to_string());
            match cpu {
                true => crate::quantity::cpu_millis(&q).ok(),
                false => crate::quantity::memory_bytes(&q).ok(),
            }
        };
        let keys = |prefix: &str, r: &str| match prefix {
            "requests" => vec![format!("requests.{r}"), r.to_string()],
            _ => vec![format!("{prefix}.{r}")],
        };
        let of = |m: Option<&serde_json::Value>, prefix: &str| ResourceRequests {
            cpu_millis: read(m, &keys(prefix, "cpu"), true),
            memory_bytes: read(m, &keys(prefix, "memory"), false),
        };
        let hard = obj.get("spec").and_then(|s| s.get("hard"));
        let used = obj.get("status").and_then(|s| s.get("used"));
        let q = Self {
            name,
            requests: (of(hard, "requests"), of(used, "requests")),
            limits: (of(hard, "limits"), of(used, "limits")),
        };
        let bounds = [
            q.requests.0.cpu_millis,
            q.requests.0.memory_bytes,
            q.limits.0.cpu_millis,
            q.limits.0.memory_bytes,
        ];
        bounds.iter().any(Option::is_some).then_some(q)
    }
}

/// The first quota of `quotas` that an increase of the namespace's requests by `requests` and
/// limits by `limits` would take past its `hard` (`used` plus the increase), with what: the
/// API server refuses every new pod once it would (docs/policies.md#limits).
pub fn quota_exceeded(
    quotas: &[QuotaView],
    requests: &ResourceRequests,
    limits: &ResourceRequests,
) -> Option<String> {
    let over = |(hard, used): &(ResourceRequests, ResourceRequests),
                add: &ResourceRequests,
                what: &str| {
        let check = |h: Option<i64>, u: Option<i64>, a: Option<i64>, r: &str| {
            let (h, a) = (h?, a.filter(|a| *a > 0)?);
            (u.unwrap_or(0) + a > h).then(|| format!("{what}.{r}"))
        };
        check(hard.cpu_millis, used.cpu_millis, add.cpu_millis, "cpu").or_else(|| {
            check(
                hard.memory_bytes,
                used.memory_bytes,
                add.memory_bytes,
                "memory",
            )
        })
    };
    quotas.iter().find_map(|q| {
        over(&q.requests, requests, "requests")
            .or_else(|| over(&q.limits, limits, "limits"))
            .map(|field| {
                format!(
                    "ResourceQuota {}: {field} would pass its hard limit",
                    q.name
                )
            })
    })
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

/// kerf never changes a pod's QoS class (docs/policies.md#limits). Where the requests and limits
/// it would write do — a Guaranteed container's request lowered under a `RequestsOnly` limit, a
/// Burstable one's raised to its limit, a LimitRange bound reached by both — each resource whose
/// request stopped (or started) equalling its limit keeps its current request and limit.
/// `current` and `written` are every container's (requests, limits); returns the kept
/// (container index, `cpu` | `memory`). A BestEffort pod that gets its first requests becomes
/// Burstable, as with VPA: keeping it BestEffort would leave it unsized.
pub fn qos_class_kept(
    current: &[(ResourceRequests, ResourceRequests)],
    written: &mut [(ResourceRequests, ResourceRequests)],
) -> Vec<(usize, &'static str)> {
    let before = qos_class(current);
    if before == "BestEffort" || before == qos_class(written) {
        return Vec::new();
    }
    // The request equals the limit (a request left out is defaulted to it).
    let at_limit = |r: Option<i64>, l: Option<i64>| l.is_some() && r.is_none_or(|r| Some(r) == l);
    let mut kept = Vec::new();
    for (i, ((cr, cl), (wr, wl))) in current.iter().zip(written.iter_mut()).enumerate() {
        if at_limit(cr.cpu_millis, cl.cpu_millis) != at_limit(wr.cpu_millis, wl.cpu_millis) {
            (wr.cpu_millis, wl.cpu_millis) = (cr.cpu_millis, cl.cpu_millis);
            kept.push((i, "cpu"));
        }
        if at_limit(cr.memory_bytes, cl.memory_bytes) != at_limit(wr.memory_bytes, wl.memory_bytes)
        {
            (wr.memory_bytes, wl.memory_bytes) = (cr.memory_bytes, cl.memory_bytes);
            kept.push((i, "memory"));
        }
    }
    kept
}

/// `<namespace>/<name>` of an object (`default` where it names no namespace).
fn namespaced_name(obj: &serde_json::Value) -> Option<String> {
    let meta = obj.get("metadata")?;
    let text = |k: &str| meta.get(k).and_then(|v| v.as_str());
    Some(format!(
        "{}/{}",
        text("namespace").unwrap_or("default"),
        text("name").unwrap_or_default()
    ))
}

/// The `type: Container` item of a namespace's LimitRange, as kerf keeps to it: each bound in
/// millicores (cpu) and bytes (memory), `None` where the LimitRange sets none; and its
/// `type: Pod` item, the same bounds over the sum of a pod's containers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerLimitRange {
    /// `<namespace>/<name>` of the LimitRange, for the reason.
    pub name: String,
    pub min: ResourceRequests,
    pub max: ResourceRequests,
    /// `maxLimitRequestRatio` (limit ÷ request) per resource.
    pub max_ratio: (Option<f64>, Option<f64>),
    /// The `type: Pod` item, if any.
    pub pod: Option<PodLimitRange>,
}

/// The `type: Pod` item of a LimitRange: bounds over the summed requests and limits of a pod's
/// containers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodLimitRange {
    pub min: ResourceRequests,
    pub max: ResourceRequests,
    pub max_ratio: (Option<f64>, Option<f64>),
}

impl ContainerLimitRange {
    /// The Container and Pod items of a LimitRange object (`spec.limits[]` with `type:
    /// Container` or `Pod`); `None` when it has neither.
    pub fn from_object(obj: &serde_json::Value) -> Option<Self> {
        let name = namespaced_name(obj)?;
        let items = obj.get("spec")?.get("limits")?.as_array()?;
        let item = |t: &str| {
            items
                .iter()
                .find(|i| i.get("type").and_then(|v| v.as_str()) == Some(t))
                .map(item_bounds)
        };
        let pod = item("Pod").map(|(min, max, max_ratio)| PodLimitRange {
            min,
            max,
            max_ratio,
        });
        let (min, max, max_ratio) = match item("Container") {
            Some(bounds) => bounds,
            None if pod.is_some() => Default::default(),
            None => return None,
        };
        Some(Self {
            name,
            min,
            max,
            max_ratio,
            pod,
        })
    }
}

/// One LimitRange item's `min`, `max` and `maxLimitRequestRatio` of cpu and memory.
fn item_bounds(
    item: &serde_json::Value,
) -> (
    ResourceRequests,
    ResourceRequests,
    (Option<f64>, Option<f64>),
) {
    let q =
        |which: &str, r: &str| -> Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
            item.get(which)?
                .get(r)?
                .as_str()
                .map(|t| k8s_openapi::apimachinery::pkg::api::resource::Quantity(t.to_string()))
        };
    let values = |which: &str| ResourceRequests {
        cpu_millis: q(which, "cpu").and_then(|v| crate::quantity::cpu_millis(&v).ok()),
        memory_bytes: q(which, "memory").and_then(|v| crate::quantity::memory_bytes(&v).ok()),
    };
    let ratio = |r: &str| {
        q("maxLimitRequestRatio", r)
            .and_then(|v| crate::quantity::cpu_millis(&v).ok())
            .map(|m| m as f64 / 1000.0)
    };
    (
        values("min"),
        values("max"),
        (ratio("cpu"), ratio("memory")),
    )
}

/// A request and limit kept within a LimitRange's Container bounds, as the API server's
/// LimitRanger admission checks them (`plugin/pkg/admission/limitranger/admission.go`): the
/// request and limit at least `min`, at most `max`, and the limit at most `maxLimitRequestRatio`
/// times the request (the request is raised to meet it). `None` bounds are no bounds.
pub fn within_limit_range(
    request: i64,
    limit: Option<i64>,
    min: Option<i64>,
    max: Option<i64>,
    max_ratio: Option<f64>,
) -> (i64, Option<i64>) {
    let clamp = |v: i64| {
        let v = min.map_or(v, |m| v.max(m));
        max.map_or(v, |m| v.min(m))
    };
    let limit = limit.map(clamp);
    let mut request = clamp(request);
    if let Some(l) = limit {
        request = request.min(l);
        if let Some(r) = max_ratio.filter(|r| *r > 0.0) {
            let least = (l as f64 / r).ceil() as i64;
            request = request.max(least).min(l);
        }
    }
    (request, limit)
}

/// One resource of a pod's regular containers, for its LimitRange's `type: Pod` bounds: each
/// container's request, its limit, and whether kerf sets its request (only those are moved).
/// `follow`: the limits move with the requests (`RequestsAndLimits`), else they stay.
#[derive(Clone, Debug, PartialEq)]
pub struct PodResource {
    pub containers: Vec<(i64, Option<i64>, bool)>,
    pub follow: bool,
}

impl PodResource {
    /// The summed request and limit with kerf's requests scaled by `f` (their limits too when
    /// they follow). The limit sum is `None` unless every container has a limit: LimitRanger
    /// sums a resource only over a pod whose every container names it.
    fn sums(&self, f: f64) -> (f64, Option<f64>) {
        let mut req = 0.0;
        let mut lim = Some(0.0);
        for (r, l, moved) in &self.containers {
            let g = if *moved { f } else { 1.0 };
            req += *r as f64 * g;
            let lg = if *moved && self.follow { f } else { 1.0 };
            lim = lim.zip(*l).map(|(s, l)| s + l as f64 * lg);
        }
        (req, lim)
    }
}

/// The least factor at or above `from` for which `ok` holds (`from` if none up to 1000×).
fn grow_until(from: f64, ok: impl Fn(f64) -> bool) -> f64 {
    let hi = from.max(1.0) * 1000.0;
    match (ok(from), ok(hi)) {
        (false, true) => boundary(hi, from, ok),
        _ => from,
    }
}

/// Bisection between a factor where `ok` holds and one where it does not: the last where it
/// holds, as close to the other as an f64 gets.
fn boundary(mut holds: f64, mut fails: f64, ok: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..64 {
        let mid = (holds + fails) / 2.0;
        if ok(mid) {
            holds = mid;
        } else {
            fails = mid;
        }
    }
    holds
}

/// LimitRange `type: Pod` `min` (LimitRanger's `minConstraint` over the pod's sums): the
/// summed request (and limit, where every container has one) at least `min`; kerf's requests
/// are scaled up together to meet it, as VPA's `applyPodLimitRange` scales them.
pub fn pod_min(pod: &PodResource, min: Option<i64>, f: f64) -> f64 {
    let Some(min) = min.map(|m| m as f64) else {
        return f;
    };
    grow_until(f, |f| {
        let (r, l) = pod.sums(f);
        r >= min && l.is_none_or(|l| l >= min || !pod.follow)
    })
}

/// LimitRange `type: Pod` `max` (`maxConstraint`): the summed limit — the summed request where
/// not every container has a limit — at most `max`, and the summed request too; kerf's
/// requests are scaled down together to meet it.
pub fn pod_max(pod: &PodResource, max: Option<i64>, f: f64) -> f64 {
    let Some(max) = max.map(|m| m as f64) else {
        return f;
    };
    let ok = |f: f64| {
        let (r, l) = pod.sums(f);
        r <= max && l.is_none_or(|l| l <= max || !pod.follow)
    };
    // The largest factor below `f` that fits (none when not even 0 does: left as it is).
    match (ok(f), ok(0.0)) {
        (false, true) => boundary(0.0, f, ok),
        _ => f,
    }
}

/// LimitRange `type: Pod` `maxLimitRequestRatio` (`limitRequestRatioConstraint`): the summed
/// limit at most the ratio times the summed request; kerf's requests are raised to meet it
/// (where their limits follow, only while that narrows the gap).
pub fn pod_max_ratio(pod: &PodResource, max_ratio: Option<f64>, f: f64) -> f64 {
    let Some(ratio) = max_ratio.filter(|r| *r > 0.0) else {
        return f;
    };
    grow_until(f, |f| {
        let (r, l) = pod.sums(f);
        l.is_none_or(|l| r > 0.0 && l <= ratio * r)
    })
}

/// A pod's requests of one resource kept within its LimitRange's `type: Pod` bounds, as the
/// API server's LimitRanger checks them over the sum of the regular containers
/// (`plugin/pkg/admission/limitranger/admission.go`, `PodLimitFunc`) and as VPA caps to them
/// (`vertical-pod-autoscaler/pkg/utils/vpa/capping.go`, `applyPodLimitRange`): kerf's
/// requests scaled together, `min` first, then `max`, then the ratio. Returns each
/// container's request.
pub fn within_pod_limit_range(
    pod: &PodResource,
    (min, max, max_ratio): (Option<i64>, Option<i64>, Option<f64>),
) -> Vec<i64> {
    let f = pod_min(pod, min, 1.0);
    let f = pod_max(pod, max, f);
    let f = pod_max_ratio(pod, max_ratio, f);
    pod.containers
        .iter()
        .map(|(r, _, moved)| match *moved && f != 1.0 {
            // Up rounded up, down rounded down, so the bound is met; the bisection's last
            // digits are not a unit more.
            true if f > 1.0 => (*r as f64 * f * (1.0 - 1e-9)).ceil() as i64,
            true => (*r as f64 * f * (1.0 + 1e-9)).floor() as i64,
            false => *r,
        })
        .collect()
}

#[cfg(test)]
mod tests;
