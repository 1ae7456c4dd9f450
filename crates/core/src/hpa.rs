//! HPA analysis and target math (pure).
//!
//! An HPA on `Utilization` divides the pods' usage by the sum of their requests, so kerf keeps
//! requests × target constant: `new target = round(old × Σbefore / Σafter)` (Σ over the containers
//! the HPA counts: regular plus restartable init containers; half rounds up).
//!
//! Decisions:
//! - The HPA of a workload is the one in its namespace whose `scaleTargetRef` has the workload's
//!   kind and name (several: the first by name, so the choice is stable).
//! - An HPA with no `metrics` (absent or an empty list) is the Kubernetes autoscaling/v2 default:
//!   CPU utilization 80 %. The API server fills that in on create and on read in most versions, but
//!   an object can lack it (a manifest read by standalone mode, an object read back from some
//!   versions); kerf reads it the way the HPA controller acts on it. docs/design/hpa-coordination.md#h1
//! - [`analyze_metrics`] (over [`analyze_metric_specs`]) is the one reading of an HPA's metrics:
//!   the engine (`evaluate_hpa`), the cluster writer (ordering and no-op checks, via
//!   [`utilization_target`]) and admission (`mutate_hpa`) all take it from here, so they agree on
//!   what an HPA scales on. [`utilization_metrics`] is the one shape kerf writes back.
//! - The HPA *couples* to the resources it measures as utilization (`Resource` or
//!   `ContainerResource` with `target.type: Utilization` on cpu or memory): those workloads carry
//!   the risk flag `hpa-coupled`. Coordination is supported only for exactly one metric, a
//!   `Resource` utilization metric on cpu or memory; anything else is `unsupported-metrics`.
//! - Hub bounds are [40, 90] %. A current target outside them widens them to include it
//!   ([min(40, cur), max(90, cur)]): the hub never pulls an existing target into 40–90 on its own
//!   and never pushes it further out.
//! - Adjustment to stay inside the bounds scales the adjustable containers' recommended requests
//!   proportionally (one common factor), each kept within its own limits: never below its floor
//!   and never above the recipe `max`. The floor is the recipe `min` (at least one unit), except
//!   for a container that was throttled (cpu) / OOM-killed (memory): its recommendation, already
//!   never below its current request, is not trimmed at all — when the bounds would need it
//!   trimmed (an OOM-driven memory increase pushing the target under 40 %), coordination is blocked. Containers without a recommendation, or outside the policy's scope, keep their
//!   request. When no factor can satisfy the bounds, coordination is blocked.

use std::collections::BTreeSet;

use crate::hash::{HashMap, HashMapExt};

use k8s_openapi::api::autoscaling::v2::{HorizontalPodAutoscaler, MetricSpec};
use serde_json::{Value, json};

use super::model::Sample;
use kerf_api::WorkloadKind;

pub const RISK_HPA_COUPLED: &str = "hpa-coupled";
pub const REASON_HPA_COUPLED: &str = "HPACoupled";
pub const HUB_MIN_TARGET: i32 = 40;
pub const HUB_MAX_TARGET: i32 = 90;
/// Kubernetes' default when an HPA lists no metrics.
pub const DEFAULT_HPA_CPU_TARGET: i32 = 80;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HpaResource {
    Cpu,
    Memory,
}

impl HpaResource {
    pub fn as_str(self) -> &'static str {
        match self {
            HpaResource::Cpu => "cpu",
            HpaResource::Memory => "memory",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(HpaResource::Cpu),
            "memory" => Some(HpaResource::Memory),
            _ => None,
        }
    }
}

/// Why the hub does not coordinate (`spec.hpa.skipReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    MaxReplicasReached,
    UnsupportedMetrics,
    MissingRequest,
    TargetOutOfBounds,
    /// The pod template sets pod-level requests: the HPA divides usage by them.
    PodLevelResources,
    /// Another controller owns the workload's template and its HPA (docs/workloads.md).
    OwnerManaged,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::MaxReplicasReached => "max-replicas-reached",
            SkipReason::UnsupportedMetrics => "unsupported-metrics",
            SkipReason::MissingRequest => "missing-request",
            SkipReason::TargetOutOfBounds => "target-out-of-bounds",
            SkipReason::PodLevelResources => "pod-level-resources",
            SkipReason::OwnerManaged => "owner-managed",
        }
    }
}

/// The HPA that scales the workload: one naming it, else one naming a Deployment or
/// StatefulSet its pods' owner chain passes through (KServe's HPA scales its predictor
/// Deployment, not the InferenceService).
pub fn workload_hpa<'a>(
    index: &HashMap<(&str, &str, &str), &'a HorizontalPodAutoscaler>,
    w: &crate::snapshot::Workload,
) -> Option<&'a HorizontalPodAutoscaler> {
    let ns = w.key.namespace.as_str();
    index
        .get(&(ns, w.key.kind.kind_name(), w.key.name.as_str()))
        .or_else(|| {
            w.ownership
                .chain
                .iter()
                .filter(|l| l.kind == "Deployment" || l.kind == "StatefulSet")
                .find_map(|l| index.get(&(ns, l.kind.as_str(), l.name.as_str())))
        })
        .copied()
}

/// The HPA in `namespace` that scales the workload `kind`/`name`.
pub fn find_hpa<'a>(
    hpas: &'a [HorizontalPodAutoscaler],
    namespace: &str,
    kind: WorkloadKind,
    name: &str,
) -> Option<&'a HorizontalPodAutoscaler> {
    hpas.iter()
        .filter(|h| h.metadata.namespace.as_deref().unwrap_or_default() == namespace)
        .filter(|h| {
            h.spec.scale_target_ref.kind == kind.as_str() && h.spec.scale_target_ref.name == name
        })
        .min_by(|a, b| a.metadata.name.cmp(&b.metadata.name))
}

/// Workload (namespace, kind, name) → its HPA, as [`find_hpa`] picks it, built in one pass so a
/// cycle over every workload does not scan every HPA for each.
pub fn hpa_index(
    hpas: &[HorizontalPodAutoscaler],
) -> HashMap<(&str, &str, &str), &HorizontalPodAutoscaler> {
    let mut out: HashMap<(&str, &str, &str), &HorizontalPodAutoscaler> = HashMap::new();
    for h in hpas {
        let target = &h.spec.scale_target_ref;
        let key = (
            h.metadata.namespace.as_deref().unwrap_or_default(),
            target.kind.as_str(),
            target.name.as_str(),
        );
        out.entry(key)
            .and_modify(|e| {
                if h.metadata.name < e.metadata.name {
                    *e = h;
                }
            })
            .or_insert(h);
    }
    out
}

/// What an HPA's metrics mean for coordination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsAnalysis {
    /// cpu/memory measured as utilization (by `Resource` or `ContainerResource`): what the HPA couples to.
    pub utilization_resources: BTreeSet<HpaResource>,
    /// The single supported metric (`Resource`, `Utilization`, cpu|memory) and its target.
    pub supported: Option<(HpaResource, i32)>,
    /// The first utilization target found (for display when unsupported).
    pub first_target: Option<(HpaResource, i32)>,
    /// Why the metrics are unsupported (empty when supported).
    pub detail: String,
}

impl MetricsAnalysis {
    pub fn coupled(&self) -> bool {
        !self.utilization_resources.is_empty()
    }

    /// The single metric kerf can coordinate, or why not (`skipReason: unsupported-metrics`).
    pub fn coordinable(&self) -> Result<(HpaResource, i32), &str> {
        self.supported.ok_or(self.detail.as_str())
    }
}

fn utilization(name: &str, type_: &str, avg: Option<i32>) -> Option<(HpaResource, Option<i32>)> {
    (type_ == "Utilization").then_some(())?;
    Some((HpaResource::parse(name)?, avg))
}

/// Analyse the metrics of `hpa` (see module docs).
pub fn analyze_metrics(hpa: &HorizontalPodAutoscaler) -> MetricsAnalysis {
    analyze_metric_specs(hpa.spec.metrics.as_deref())
}

/// The single supported utilization target of `hpa` ([`MetricsAnalysis::supported`]): what the
/// writer compares with the target it is about to set.
pub fn utilization_target(hpa: &HorizontalPodAutoscaler) -> Option<(HpaResource, i32)> {
    analyze_metrics(hpa).supported
}

/// Analyse an HPA's `spec.metrics` (`None` when the field is absent); see module docs.
pub fn analyze_metric_specs(metrics: Option<&[MetricSpec]>) -> MetricsAnalysis {
    let metrics: &[MetricSpec] = metrics.unwrap_or(&[]);
    if metrics.is_empty() {
        let cpu = (HpaResource::Cpu, DEFAULT_HPA_CPU_TARGET);
        return MetricsAnalysis {
            utilization_resources: BTreeSet::from([HpaResource::Cpu]),
            supported: Some(cpu),
            first_target: Some(cpu),
            detail: String::new(),
        };
    }
    let mut resources = BTreeSet::new();
    let mut first_target = None;
    let mut problems = Vec::new();
    let mut single = None;
    for m in metrics {
        match m.type_.as_str() {
            "Resource" => {
                let Some(r) = &m.resource else {
                    problems.push("a Resource metric without its resource field".to_string());
                    continue;
                };
                match utilization(&r.name, &r.target.type_, r.target.average_utilization) {
                    Some((res, avg)) => {
                        resources.insert(res);
                        match avg.filter(|a| *a > 0) {
                            Some(a) => {
                                first_target.get_or_insert((res, a));
                                single = Some((res, a));
                            }
                            None => problems.push(format!(
                                "{} utilization without a positive averageUtilization",
                                r.name
                            )),
                        }
                    }
                    None => problems.push(format!(
                        "Resource metric {} with target type {}",
                        r.name, r.target.type_
                    )),
                }
            }
            "ContainerResource" => {
                if let Some(r) = &m.container_resource
                    && let Some((res, avg)) =
                        utilization(&r.name, &r.target.type_, r.target.average_utilization)
                {
                    resources.insert(res);
                    if let Some(a) = avg.filter(|a| *a > 0) {
                        first_target.get_or_insert((res, a));
                    }
                }
                problems.push("a ContainerResource (per-container) metric".to_string());
            }
            other => problems.push(format!("a {other} metric")),
        }
    }
    if metrics.len() > 1 {
        problems.insert(
            0,
            format!("{} metrics (coordination needs exactly one)", metrics.len()),
        );
    }
    let supported = if problems.is_empty() { single } else { None };
    MetricsAnalysis {
        utilization_resources: resources,
        supported,
        first_target,
        detail: problems.join("; "),
    }
}

/// `spec.metrics` holding the single utilization metric kerf writes (the one supported shape).
pub fn utilization_metrics(resource: &str, target: i32) -> Value {
    json!([{
        "type": "Resource",
        "resource": {"name": resource, "target": {"type": "Utilization", "averageUtilization": target}},
    }])
}

/// kube-state-metrics: an HPA's current replica count (labels `namespace`,
/// `horizontalpodautoscaler`).
pub const KSM_CURRENT_REPLICAS: &str = "kube_horizontalpodautoscaler_status_current_replicas";
/// kube-state-metrics: an HPA's `spec.maxReplicas` (same labels).
pub const KSM_MAX_REPLICAS: &str = "kube_horizontalpodautoscaler_spec_max_replicas";
/// kube-state-metrics' label naming the HPA.
pub const KSM_HPA_LABEL: &str = "horizontalpodautoscaler";

/// An HPA's replica history over the recommendation window, from kube-state-metrics
/// (docs/design/hpa-coordination.md#h7), on one query grid.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaHistory {
    /// [`KSM_CURRENT_REPLICAS`] samples.
    pub current: Vec<Sample>,
    /// [`KSM_MAX_REPLICAS`] samples; where one is missing, the HPA's own `spec.maxReplicas`.
    pub max: Vec<Sample>,
}

/// Whether the HPA was at `maxReplicas` at any time in the window: a sample of its replica
/// history at or above the `maxReplicas` in force then, or its current status. Without a
/// history (`None`: kube-state-metrics has no series for it), the status alone.
pub fn max_replicas_reached(
    hpa: &HorizontalPodAutoscaler,
    history: Option<&ReplicaHistory>,
) -> bool {
    let spec_max = hpa.spec.max_replicas;
    let now = hpa
        .status
        .as_ref()
        .and_then(|s| s.current_replicas)
        .is_some_and(|c| c >= spec_max);
    let Some(h) = history else { return now };
    let max: HashMap<i64, f64> = h
        .max
        .iter()
        .filter(|(_, v)| v.is_finite())
        .copied()
        .collect();
    now || h
        .current
        .iter()
        .any(|(t, v)| v.is_finite() && *v >= max.get(t).copied().unwrap_or(f64::from(spec_max)))
}

/// `round(old × before / after)`, half up, in exact integer arithmetic. `None` when `after` ≤ 0
/// or the result does not fit.
pub fn new_target(old: i32, before: i64, after: i64) -> Option<i32> {
    if after <= 0 || before < 0 {
        return None;
    }
    let num = 2 * i128::from(old) * i128::from(before) + i128::from(after);
    i32::try_from(num / (2 * i128::from(after))).ok()
}

/// Pod-level requests an HPA on `Resource` metrics divides usage by instead of the containers'
/// (`IsPodLevelRequestsSet`, kubernetes `staging/src/k8s.io/component-helpers/resource/helpers.go`:
/// a request of a supported pod-level resource, cpu, memory or hugepages; used by
/// `calculateRequests` in `pkg/controller/podautoscaler/replica_calculator.go`).
pub fn pod_level_requests_set(spec: &crate::pod::PodSpec) -> bool {
    spec.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|m| {
            m.keys()
                .any(|k| matches!(k.as_str(), "cpu" | "memory") || k.starts_with("hugepages-"))
        })
}

/// Whether a pod sets pod-level resources at all (`IsPodLevelResourcesSet`, same file: a request
/// or a limit of a supported pod-level resource; an empty `spec.resources: {}` is none).
pub fn pod_level_resources_set(spec: &crate::pod::PodSpec) -> bool {
    let supported = |m: Option<&kerf_support::small_map::SmallMap<String, _>>| {
        m.is_some_and(|m| {
            m.keys()
                .any(|k| matches!(k.as_str(), "cpu" | "memory") || k.starts_with("hugepages-"))
        })
    };
    spec.resources
        .as_ref()
        .is_some_and(|r| supported(r.requests.as_ref()) || supported(r.limits.as_ref()))
}

/// The resources (cpu, memory) the pod template requests at pod level: for those the scheduler
/// reserves the pod-level request, not the containers' sum (`PodRequests`, same file).
pub fn pod_level_resources(spec: &crate::pod::PodSpec) -> Vec<HpaResource> {
    let requests = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    [HpaResource::Cpu, HpaResource::Memory]
        .into_iter()
        .filter(|r| requests.is_some_and(|m| m.get(r.as_str()).is_some()))
        .collect()
}

/// The HPA controller's tolerance when an HPA sets none (`--horizontal-pod-autoscaler-tolerance`).
pub const DEFAULT_HPA_TOLERANCE: f64 = 0.1;

/// An HPA's tolerances on its usage ratio, (scale-down, scale-up): `spec.behavior.scaleDown` /
/// `.scaleUp` `.tolerance` (KEP-4951), else [`DEFAULT_HPA_TOLERANCE`]. The controller keeps its
/// replicas while `1 − down ≤ ratio ≤ 1 + up` (`Tolerances.isWithin`, kubernetes
/// `pkg/controller/podautoscaler/replica_calculator.go`). Read to the thousandth, rounded up.
pub fn tolerances(h: &HorizontalPodAutoscaler) -> (f64, f64) {
    let behavior = h.spec.behavior.as_ref();
    let read = |rules: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>| {
        rules
            .and_then(|r| r.tolerance.as_ref())
            .and_then(|q| super::quantity::parse_scaled(&q.0, 3).ok())
            .map_or(DEFAULT_HPA_TOLERANCE, |m| m.max(0) as f64 / 1000.0)
    };
    (
        read(behavior.and_then(|b| b.scale_down.as_ref())),
        read(behavior.and_then(|b| b.scale_up.as_ref())),
    )
}

/// At unchanged usage the HPA's usage ratio is multiplied by `old × before / (target × after)`
/// once the requests sum to `after` and the target is `target`. `Some((factor, tolerance,
/// "scaleUp"|"scaleDown"))` when that factor alone leaves the tolerance band the HPA keeps its
/// replicas in; `None` when the product is kept exactly or within the tolerance.
pub fn rounding_beyond_tolerance(
    old: i32,
    before: i64,
    target: i32,
    after: i64,
    (down, up): (f64, f64),
) -> Option<(f64, f64, &'static str)> {
    let (a, b) = (
        i128::from(old) * i128::from(before),
        i128::from(target) * i128::from(after),
    );
    if a == b || b <= 0 {
        return None;
    }
    let factor = a as f64 / b as f64;
    if factor > 1.0 {
        (factor > 1.0 + up).then_some((factor, up, "scaleUp"))
    } else {
        (factor < 1.0 - down).then_some((factor, down, "scaleDown"))
    }
}

/// Requests (same order as `containers`) whose sum rounds exactly, `target × Σ = old × Σbefore`,
/// for some target in `[lo, target]`: the smallest such Σ at or above the recommended sum and at
/// most a tenth above it, the difference added to one adjustable container within its ceiling.
/// More request, never less: the recommendation stays a floor. `None` when there is none.
pub fn exact_requests(
    old: i32,
    target: i32,
    containers: &[CountedRequest],
    unit: i64,
) -> Option<(i32, Vec<i64>)> {
    let before: i128 = containers.iter().map(|c| i128::from(c.current)).sum();
    let after: i128 = containers.iter().map(|c| i128::from(c.recommended)).sum();
    let product = i128::from(old) * before;
    let (lo, _) = hub_bounds(old);
    let limit = after + after / 10;
    for t in (lo.max(1)..=target).rev() {
        let t128 = i128::from(t);
        if product % t128 != 0 {
            continue;
        }
        let sum = product / t128;
        if sum > limit {
            break; // smaller targets only need larger sums
        }
        let delta = sum - after;
        if delta < 0 || delta % i128::from(unit) != 0 {
            continue;
        }
        let delta = i64::try_from(delta).ok()?;
        let room = |c: &CountedRequest| {
            c.ceiling
                .is_none_or(|m| c.recommended.saturating_add(delta) <= m.max(c.recommended))
        };
        if let Some(i) = containers.iter().position(|c| c.adjustable && room(c)) {
            let mut requests: Vec<i64> = containers.iter().map(|c| c.recommended).collect();
            requests[i] += delta;
            return Some((t, requests));
        }
    }
    None
}

/// Hub bounds for a current target: [40, 90] widened to include the current target.
pub fn hub_bounds(current: i32) -> (i32, i32) {
    (HUB_MIN_TARGET.min(current), HUB_MAX_TARGET.max(current))
}

/// One counted container's request of the HPA's resource (millicores or bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedRequest {
    pub name: String,
    pub current: i64,
    /// Recommended request; equals `current` for a container kerf does not change.
    pub recommended: i64,
    /// The hub may scale this container's recommendation to keep the target in bounds.
    pub adjustable: bool,
    /// Lowest acceptable value: the recommendation itself when must-not-decrease, else the
    /// recipe min (at least one unit).
    pub floor: i64,
    /// Throttled (cpu) / OOM-killed (memory): the hub must not trim this recommendation.
    pub must_not_decrease: bool,
    /// Highest acceptable value (recipe max), `None` = unbounded.
    pub ceiling: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coordination {
    /// The target stays in bounds with `requests` (same order as the input).
    Ok {
        target: i32,
        requests: Vec<i64>,
        adjusted: bool,
    },
    /// No request set keeps the target in bounds; `target` is the unadjusted new target.
    Blocked { target: i32, why: String },
}

fn scaled(a: i64, k: f64, unit: i64, up: bool) -> i64 {
    let x = a as f64 * k / unit as f64;
    let q = if up {
        super::quantity::ceil_clean(x)
    } else {
        // Floor, ignoring float noise just under an integer.
        let r = x.round();
        if (x - r).abs() <= 1e-9 * r.abs().max(1.0) {
            r
        } else {
            x.floor()
        }
    };
    (q as i64).saturating_mul(unit)
}

/// The smallest factor k ≥ 1 at which the requests' sum reaches `need` (bisection; the sum grows
/// with k). None when no finite factor does.
fn smallest_factor_reaching(sum_at: impl Fn(f64) -> i128, need: i128) -> Option<f64> {
    let (mut a, mut b) = (1.0f64, 2.0f64);
    while sum_at(b) < need {
        b *= 2.0;
        if !b.is_finite() {
            return None;
        }
    }
    for _ in 0..200 {
        let m = (a + b) / 2.0;
        if sum_at(m) >= need { b = m } else { a = m }
    }
    Some(b)
}

/// The largest factor k in [0, 1] at which the requests' sum stays at most `need` (bisection).
fn largest_factor_within(sum_at: impl Fn(f64) -> i128, need: i128) -> f64 {
    let (mut a, mut b) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let m = (a + b) / 2.0;
        if sum_at(m) <= need { a = m } else { b = m }
    }
    a
}

/// Keep the new target within the hub bounds (see module docs); `unit` is the rounding step of
/// adjusted requests (1 millicore, 1 MiB).
pub fn coordinate(old_target: i32, containers: &[CountedRequest], unit: i64) -> Coordination {
    let before: i64 = containers.iter().map(|c| c.current).sum();
    let after: i64 = containers.iter().map(|c| c.recommended).sum();
    let blocked = |why: String| Coordination::Blocked {
        target: new_target(old_target, before, after).unwrap_or(old_target),
        why,
    };
    let Some(target) = new_target(old_target, before, after) else {
        return blocked("the recommended requests sum to zero".into());
    };
    let (lo, hi) = hub_bounds(old_target);
    if (lo..=hi).contains(&target) {
        return Coordination::Ok {
            target,
            requests: containers.iter().map(|c| c.recommended).collect(),
            adjusted: false,
        };
    }
    let fixed: i64 = containers
        .iter()
        .filter(|c| !c.adjustable)
        .map(|c| c.recommended)
        .sum();
    let adj: Vec<&CountedRequest> = containers.iter().filter(|c| c.adjustable).collect();
    let two_ob = 2 * i128::from(old_target) * i128::from(before);
    let up = target > hi;
    // Value of one adjustable container at factor k, within its limits.
    let value = |c: &CountedRequest, k: f64| {
        let v = scaled(c.recommended, k, unit, up).max(c.floor);
        c.ceiling.map_or(v, |m| v.min(m.max(c.recommended)))
    };
    let sum_at = |k: f64| -> i128 {
        adj.iter().map(|c| i128::from(value(c, k))).sum::<i128>() + i128::from(fixed)
    };
    let k = if up {
        // Smallest Σafter with round(old × before / Σafter) ≤ hi.
        let need = two_ob / i128::from(2 * hi + 1) + 1;
        let cap: i128 = adj
            .iter()
            .map(|c| i128::from(c.ceiling.map_or(i64::MAX / 4, |m| m.max(c.recommended))))
            .sum::<i128>()
            + i128::from(fixed);
        if adj.is_empty() || cap < need {
            return blocked(format!(
                "keeping the {target} % target at most {hi} % needs requests above the policy's max or of containers kerf does not change"
            ));
        }
        match smallest_factor_reaching(sum_at, need) {
            Some(k) => k,
            None => return blocked("the target bound cannot be met".into()),
        }
    } else {
        // Largest Σafter with round(old × before / Σafter) ≥ lo.
        let need = two_ob / i128::from(2 * lo - 1);
        if sum_at(0.0) > need {
            let pinned: Vec<&str> = adj
                .iter()
                .filter(|c| c.must_not_decrease)
                .map(|c| c.name.as_str())
                .collect();
            let why = if pinned.is_empty() {
                format!(
                    "keeping the {target} % target at least {lo} % needs requests below the policy's min"
                )
            } else {
                format!(
                    "keeping the {target} % target at least {lo} % would trim the recommended request of {}, which must not decrease (throttled or OOM-killed)",
                    pinned.join(", ")
                )
            };
            return blocked(why);
        }
        largest_factor_within(sum_at, need)
    };
    let requests: Vec<i64> = containers
        .iter()
        .map(|c| {
            if c.adjustable {
                value(c, k)
            } else {
                c.recommended
            }
        })
        .collect();
    let final_after: i64 = requests.iter().sum();
    match new_target(old_target, before, final_after) {
        Some(t) if (lo..=hi).contains(&t) => Coordination::Ok {
            target: t,
            requests,
            adjusted: true,
        },
        _ => blocked(format!("no adjustment keeps the target within {lo}–{hi} %")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn hpa(metrics: serde_json::Value) -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "maxReplicas": 10, "metrics": metrics}
        }))
        .unwrap()
    }

    fn cpu_util(t: i32) -> serde_json::Value {
        json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": t}}})
    }

    fn mem_util(t: i32) -> serde_json::Value {
        json!({"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": t}}})
    }

    /// Upstream counts a pod as having pod-level resources only when a supported resource is
    /// requested or limited there: `spec.resources: {}` is none, a GPU limit neither.
    #[test]
    fn pod_level_resources_set() {
        let spec = |resources: serde_json::Value| -> crate::pod::PodSpec {
            serde_json::from_value(json!({"containers": [], "resources": resources})).unwrap()
        };
        assert!(!super::pod_level_resources_set(&spec(json!({}))));
        assert!(!super::pod_level_resources_set(&spec(
            json!({"limits": {"nvidia.com/gpu": "1"}})
        )));
        assert!(super::pod_level_resources_set(&spec(
            json!({"limits": {"memory": "8Gi"}})
        )));
        assert!(super::pod_level_resources_set(&spec(
            json!({"requests": {"cpu": "2"}})
        )));
        let none: crate::pod::PodSpec = serde_json::from_value(json!({"containers": []})).unwrap();
        assert!(!super::pod_level_resources_set(&none));
    }

    #[test]
    fn new_target_worked_example_50_percent_1000m_to_700m() {
        assert_eq!(new_target(50, 1000, 700), Some(71));
        let c = [CountedRequest {
            name: "app".into(),
            current: 1000,
            recommended: 700,
            adjustable: true,
            floor: 1,
            must_not_decrease: false,
            ceiling: None,
        }];
        assert_eq!(
            coordinate(50, &c, 1),
            Coordination::Ok {
                target: 71,
                requests: vec![700],
                adjusted: false
            }
        );
    }

    #[test]
    fn new_target_rounds_half_up_to_integer_percent() {
        assert_eq!(new_target(50, 1000, 800), Some(63)); // 62.5 → 63
        assert_eq!(new_target(60, 1000, 1000), Some(60));
        assert_eq!(new_target(50, 1000, 0), None);
    }

    #[test]
    fn single_resource_utilization_metric_is_supported() {
        let a = analyze_metrics(&hpa(json!([mem_util(70)])));
        assert_eq!(a.supported, Some((HpaResource::Memory, 70)));
        assert!(a.coupled());
        let a = analyze_metrics(&hpa(json!([])));
        assert_eq!(
            a.supported,
            Some((HpaResource::Cpu, 80)),
            "no metrics = Kubernetes default CPU 80 %"
        );
    }

    /// docs/design/hpa-coordination.md#h1: the one reading every user shares.
    #[test]
    fn an_hpa_without_metrics_is_cpu_utilization_80_percent() {
        let mut absent = hpa(json!([]));
        absent.spec.metrics = None;
        for h in [absent, hpa(json!([]))] {
            let a = analyze_metrics(&h);
            assert_eq!(
                a.coordinable(),
                Ok((HpaResource::Cpu, DEFAULT_HPA_CPU_TARGET))
            );
            assert_eq!(a.utilization_resources, BTreeSet::from([HpaResource::Cpu]));
            assert_eq!(utilization_target(&h), Some((HpaResource::Cpu, 80)));
        }
        let a = analyze_metrics(&hpa(json!([cpu_util(50), mem_util(70)])));
        assert_eq!(
            a.coordinable(),
            Err("2 metrics (coordination needs exactly one)")
        );
    }

    #[test]
    fn analysis_two_utilization_metrics_unsupported() {
        let a = analyze_metrics(&hpa(json!([cpu_util(50), mem_util(70)])));
        assert_eq!(a.supported, None);
        assert_eq!(
            a.utilization_resources,
            BTreeSet::from([HpaResource::Cpu, HpaResource::Memory])
        );
        assert!(a.detail.contains("2 metrics"), "{}", a.detail);
    }

    #[test]
    fn analysis_container_resource_unsupported() {
        let a = analyze_metrics(&hpa(
            json!([{"type": "ContainerResource", "containerResource": {
            "name": "cpu", "container": "app", "target": {"type": "Utilization", "averageUtilization": 60}}}]),
        ));
        assert_eq!(a.supported, None);
        assert!(
            a.coupled(),
            "a per-container CPU utilization metric still couples to CPU requests"
        );
        assert_eq!(a.first_target, Some((HpaResource::Cpu, 60)));
        assert!(a.detail.contains("ContainerResource"));
    }

    #[test]
    fn analysis_pods_object_external_unsupported() {
        for (kind, body) in [
            (
                "Pods",
                json!({"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}),
            ),
            (
                "Object",
                json!({"type": "Object", "object": {"metric": {"name": "rps"}, "describedObject": {"kind": "Ingress", "name": "web"}, "target": {"type": "Value", "value": "10"}}}),
            ),
            (
                "External",
                json!({"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "10"}}}),
            ),
        ] {
            let a = analyze_metrics(&hpa(json!([cpu_util(50), body.clone()])));
            assert_eq!(a.supported, None, "{kind}");
            assert!(a.coupled(), "{kind}");
            assert!(a.detail.contains(kind), "{}", a.detail);
            // Alone, such a metric does not divide by requests: not coupled at all.
            let a = analyze_metrics(&hpa(json!([body])));
            assert!(!a.coupled(), "{kind}");
        }
        // AverageValue on CPU does not divide by requests either.
        let a = analyze_metrics(&hpa(
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "AverageValue", "averageValue": "500m"}}}]),
        ));
        assert!(!a.coupled());
    }

    #[test]
    fn find_hpa_matches_scale_target_kind_name_and_namespace() {
        let mut other_ns = hpa(json!([]));
        other_ns.metadata.namespace = Some("other".into());
        let mut other_name = hpa(json!([]));
        other_name.spec.scale_target_ref.name = "api".into();
        let mine = hpa(json!([]));
        let list = [other_ns, other_name, mine.clone()];
        assert_eq!(
            find_hpa(&list, "shop", WorkloadKind::Deployment, "web"),
            Some(&mine)
        );
        assert_eq!(
            find_hpa(&list, "shop", WorkloadKind::StatefulSet, "web"),
            None
        );
    }

    #[test]
    fn hpa_index_picks_what_find_hpa_picks() {
        let mut b = hpa(json!([]));
        b.metadata.name = Some("b".into());
        let mut a = hpa(json!([]));
        a.metadata.name = Some("a".into());
        let mut other_ns = hpa(json!([]));
        other_ns.metadata.namespace = Some("other".into());
        let list = [b, a.clone(), other_ns];
        let index = hpa_index(&list);
        for (ns, kind, name) in [
            ("shop", WorkloadKind::Deployment, "web"),
            ("other", WorkloadKind::Deployment, "web"),
            ("shop", WorkloadKind::StatefulSet, "web"),
        ] {
            assert_eq!(
                index.get(&(ns, kind.as_str(), name)).copied(),
                find_hpa(&list, ns, kind, name)
            );
        }
        assert_eq!(
            index[&("shop", "Deployment", "web")],
            &a,
            "lowest name wins"
        );
    }

    #[test]
    fn max_replicas_reached_from_series_or_status() {
        let history = |current: &[Sample]| ReplicaHistory {
            current: current.to_vec(),
            max: Vec::new(),
        };
        let mut h = hpa(json!([cpu_util(50)]));
        assert!(!max_replicas_reached(
            &h,
            Some(&history(&[(0, 3.0), (60, 9.0)]))
        ));
        assert!(max_replicas_reached(
            &h,
            Some(&history(&[(0, 3.0), (60, 10.0), (120, 4.0)]))
        ));
        h.status = Some(
            serde_json::from_value(json!({"currentReplicas": 10, "desiredReplicas": 10})).unwrap(),
        );
        assert!(max_replicas_reached(&h, Some(&history(&[]))));
        assert!(max_replicas_reached(&h, None));
    }

    /// docs/design/hpa-coordination.md#h7: the history is compared with the `maxReplicas` in
    /// force at each sample (kube-state-metrics' `spec_max_replicas`), the HPA's own where absent.
    #[test]
    fn max_replicas_reached_compares_each_sample_with_the_max_in_force_then() {
        let h = hpa(json!([cpu_util(50)])); // maxReplicas 10, no status
        let at = |current: &[Sample], max: &[Sample]| {
            max_replicas_reached(
                &h,
                Some(&ReplicaHistory {
                    current: current.to_vec(),
                    max: max.to_vec(),
                }),
            )
        };
        // maxReplicas was 6 an hour ago, when the HPA ran 6 replicas.
        assert!(at(&[(0, 6.0), (60, 7.0)], &[(0, 6.0), (60, 10.0)]));
        assert!(!at(&[(0, 5.0), (60, 7.0)], &[(0, 6.0), (60, 10.0)]));
        assert!(at(&[(0, 5.0), (60, 10.0)], &[(0, 6.0)]), "absent: spec");
        assert!(!max_replicas_reached(&h, None), "no history, no status");
    }

    fn req(name: &str, current: i64, recommended: i64) -> CountedRequest {
        CountedRequest {
            name: name.into(),
            current,
            recommended,
            adjustable: true,
            floor: 1,
            must_not_decrease: false,
            ceiling: None,
        }
    }

    #[test]
    fn hub_raises_requests_to_keep_target_at_most_90() {
        // 80 % target, 1000m → 500m would give 160 %: requests are raised until the target is ≤ 90.
        match coordinate(80, &[req("app", 1000, 500)], 1) {
            Coordination::Ok {
                target,
                requests,
                adjusted,
            } => {
                assert!(adjusted);
                assert_eq!(target, 90);
                assert_eq!(requests, vec![884]); // 80 × 1000 / 884 = 90.497 → 90; 883 would round to 91
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hub_lowers_requests_proportionally_to_keep_target_at_least_40() {
        // 50 % target, Σ 1000m → 2000m would give 25 %: scaled down together to the largest Σ that rounds to 40 %.
        let c = [req("a", 500, 1500), req("b", 500, 500)];
        match coordinate(50, &c, 1) {
            Coordination::Ok {
                target, requests, ..
            } => {
                assert_eq!(target, 40);
                assert_eq!(requests.iter().sum::<i64>(), 1265); // 50 × 1000 / 1265 = 39.53 → 40; 1266 → 39
                // Proportional: a stays three times b (within rounding).
                assert!((requests[0] - 3 * requests[1]).abs() <= 3, "{requests:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn coordinate_never_trims_oom_killed_increase() {
        // Memory target 60 %, 512Mi → 1024Mi: 30 %. Without an OOM kill the hub trims the increase
        // to 777Mi (60 × 512 / 777 = 39.5 → 40 %; 778Mi would round to 39 %) …
        let mib = 1 << 20;
        let c = req("app", 512 * mib, 1024 * mib);
        assert_eq!(
            coordinate(60, std::slice::from_ref(&c), mib),
            Coordination::Ok {
                target: 40,
                requests: vec![777 * mib],
                adjusted: true
            }
        );
        // … but an OOM-driven increase is a floor the hub must not trim: blocked.
        let oom = CountedRequest {
            must_not_decrease: true,
            floor: 1024 * mib,
            ..c
        };
        match coordinate(60, &[oom], mib) {
            Coordination::Blocked { target, why } => {
                assert_eq!(target, 30);
                assert!(
                    why.contains("must not decrease") && why.contains("app"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hub_bounds_widen_to_a_current_target_outside_them() {
        // 95 % is outside 40–90: unchanged requests keep it at 95 (not pulled into the bounds) …
        assert_eq!(hub_bounds(95), (40, 95));
        assert!(matches!(
            coordinate(95, &[req("app", 1000, 1000)], 1),
            Coordination::Ok {
                target: 95,
                adjusted: false,
                ..
            }
        ));
        // … a downsize may not push it further out: requests are raised so it stays at 95 …
        assert!(matches!(
            coordinate(95, &[req("app", 1000, 500)], 1),
            Coordination::Ok {
                target: 95,
                adjusted: true,
                ..
            }
        ));
        // … and an upsize may bring it back toward the bounds.
        assert!(matches!(
            coordinate(95, &[req("app", 1000, 1200)], 1),
            Coordination::Ok {
                target: 79,
                adjusted: false,
                ..
            }
        ));
        // Same below: 30 % stays 30 %.
        assert!(matches!(
            coordinate(30, &[req("app", 1000, 1000)], 1),
            Coordination::Ok { target: 30, .. }
        ));
    }

    #[test]
    fn non_adjustable_containers_keep_their_request() {
        let mut fixed = req("side", 1000, 1000);
        fixed.adjustable = false;
        match coordinate(80, &[req("app", 1000, 100), fixed], 1) {
            Coordination::Ok {
                requests, target, ..
            } => {
                assert_eq!(requests[1], 1000);
                assert!(target <= 90);
            }
            other => panic!("{other:?}"),
        }
        let mut only_fixed = req("side", 1000, 100);
        only_fixed.adjustable = false;
        assert!(matches!(
            coordinate(80, &[only_fixed], 1),
            Coordination::Blocked { .. }
        ));
    }

    fn counted() -> impl Strategy<Value = Vec<CountedRequest>> {
        proptest::collection::vec(
            (1i64..20_000, 1i64..20_000, any::<bool>(), any::<bool>()),
            1..5,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (cur, rec, adjustable, mnd))| {
                    let rec = if mnd && adjustable { rec.max(cur) } else { rec };
                    CountedRequest {
                        name: format!("c{i}"),
                        current: cur,
                        recommended: if adjustable { rec } else { cur },
                        adjustable,
                        floor: if mnd && adjustable { rec } else { 1 },
                        must_not_decrease: mnd && adjustable,
                        ceiling: None,
                    }
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn new_target_keeps_requests_times_target_constant(old in 1i32..200, before in 1i64..1_000_000, after in 1i64..1_000_000) {
            let t = new_target(old, before, after).unwrap();
            // |t × after − old × before| ≤ after / 2: the product is preserved up to rounding to 1 %.
            let diff = (i128::from(t) * i128::from(after) - i128::from(old) * i128::from(before)).abs();
            prop_assert!(2 * diff <= i128::from(after));
        }

        #[test]
        fn hub_bounded_targets_stay_in_40_90_unless_blocked_or_current_outside(old in 1i32..150, c in counted()) {
            match coordinate(old, &c, 1) {
                Coordination::Ok { target, requests, .. } => {
                    let (lo, hi) = hub_bounds(old);
                    prop_assert!((lo..=hi).contains(&target));
                    if (HUB_MIN_TARGET..=HUB_MAX_TARGET).contains(&old) {
                        prop_assert!((HUB_MIN_TARGET..=HUB_MAX_TARGET).contains(&target));
                    }
                    let before: i64 = c.iter().map(|x| x.current).sum();
                    let after: i64 = requests.iter().sum();
                    prop_assert_eq!(Some(target), new_target(old, before, after));
                    for (x, r) in c.iter().zip(&requests) {
                        prop_assert!(*r >= x.floor, "floor kept");
                        if !x.adjustable { prop_assert_eq!(*r, x.recommended); }
                    }
                }
                Coordination::Blocked { .. } => {
                    // Blocked only when even the floors (or only fixed containers) cannot reach the bounds.
                    let (lo, hi) = hub_bounds(old);
                    let before: i64 = c.iter().map(|x| x.current).sum();
                    let floors: i64 = c.iter().map(|x| if x.adjustable { x.floor } else { x.recommended }).sum();
                    let raw = new_target(old, before, c.iter().map(|x| x.recommended).sum()).unwrap();
                    let any_adj = c.iter().any(|x| x.adjustable);
                    prop_assert!(raw < lo || raw > hi, "an in-bounds target is never blocked");
                    prop_assert!(!any_adj || (raw < lo && new_target(old, before, floors).unwrap() < lo));
                }
            }
        }
    }

    /// KEP-4951: the tolerances come from spec.behavior (quantities), else the controller's 10 %.
    #[test]
    fn tolerances_are_read_from_behavior_else_the_controller_default() {
        let mut h = hpa(json!([]));
        assert_eq!(tolerances(&h), (0.1, 0.1));
        h.spec.behavior = Some(
            serde_json::from_value(
                json!({"scaleUp": {"tolerance": "0"}, "scaleDown": {"tolerance": "50m"}}),
            )
            .unwrap(),
        );
        assert_eq!(tolerances(&h), (0.05, 0.0));
    }

    /// The oracle is kubernetes' `Tolerances.isWithin`: `1 − down ≤ ratio ≤ 1 + up`, the ratio
    /// at unchanged usage being `old × before / (target × after)`.
    #[test]
    fn rounding_beyond_tolerance_is_the_controllers_tolerance_band() {
        let within = |r: f64, (down, up): (f64, f64)| (1.0 - down) <= r && r <= 1.0 + up;
        for (old, before, target, after) in [
            (50, 1000, 71, 700),
            (60, 1000, 76, 790),
            (60, 1000, 75, 800),
        ] {
            for tol in [(0.0, 0.0), (0.005, 0.005), (0.1, 0.1)] {
                let r = f64::from(old) * before as f64 / (f64::from(target) * after as f64);
                assert_eq!(
                    rounding_beyond_tolerance(old, before, target, after, tol).is_none(),
                    within(r, tol),
                    "{old} {before} {target} {after} {tol:?}"
                );
            }
        }
    }
}
