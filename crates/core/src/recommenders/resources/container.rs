//! CPU and memory recommendations of one container (pure).
//!
//! Decisions (the user documents are silent; docs/design/hpa-coordination.md#h15 is the rule):
//! - **The usage is the workload's, per container name.** The metric source aggregates every
//!   pod the workload had in the window — pods replaced by a rollout included — and matches
//!   containers by name across them (`crate::query::window`, docs/metrics.md).
//! - **Percentile method: Prometheus's `quantile_over_time`.** Per pod, the p-th percentile of
//!   the container's usage rate on the window's grid, interpolated as Prometheus does
//!   ([`crate::query::window::quantile`]: rank = p/100 × (n − 1), linear between the two
//!   neighbouring samples, so p100 is the maximum and p95 of 1..20 is 19.05); the workload's
//!   value is the highest across its pods. Prometheus computes it where the data is, and
//!   `--metrics FILE` computes the same number.
//! - **Window.** `(now − window, now]` (Prometheus 3; Prometheus 2 includes the start).
//! - **CPU** = percentile × (1 + headroom/100), rounded UP to a whole millicore.
//!   **Memory** = peak working set × (1 + headroom/100), rounded UP to a whole MiB.
//!   Floating-point noise is removed before rounding up (a computed 700.0000000001m is 700m).
//!   At least 1m / 1Mi: a zero request is never recommended. Negative or non-finite usage
//!   (scrape artefacts) recommends nothing.
//! - **min/max** are applied after rounding, so a bound the user wrote is kept exactly as written.
//! - **No samples in the window** → no recommendation for that resource (the current request stays).
//! - **Static recipe**: `static["<container>"]` wins over `static["*"]`, per resource: an exact entry
//!   that sets only `cpu` still takes `memory` from `"*"`. A static value replaces the usage recipe
//!   (min/max and headroom do not apply to it).
//! - **Must not decrease**: a container that was CPU-throttled (cpu) or OOM-killed (memory) in the
//!   window never gets a recommended request below its current request — usage-based or static.

use std::collections::BTreeMap;

use crate::pod::{Container, ContainerStatus, Pod, PodSpec};
use jiff::Timestamp;

use crate::model::{ContainerRequests, ResourceRequests};
use crate::quantity::{self, MIB, QuantityError, ceil_clean};
use kerf_api::{ControlledValues, CpuRecipe, MemoryRecipe, ResourceMode, RightsizingPolicySpec};

/// Default share of CFS periods that must be throttled at one sample for the container to count
/// as throttled: 5 %. Below that, throttling is noise that a smaller request would not worsen
/// noticeably; above it, the container is visibly CPU-starved.
pub const DEFAULT_THROTTLE_RATIO: f64 = 0.05;

/// The `reason` the kubelet records for a container killed by the OOM killer.
pub const OOM_KILLED: &str = "OOMKilled";

/// A policy problem that makes evaluation impossible; names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PolicyError {
    pub field: String,
    pub message: String,
}

fn policy_err(field: impl Into<String>, e: impl ToString) -> PolicyError {
    PolicyError {
        field: field.into(),
        message: e.to_string(),
    }
}

/// The CPU recipe with its quantities parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuParams {
    pub mode: ResourceMode,
    pub percentile: f64,
    pub headroom_percent: f64,
    pub window_secs: i64,
    pub min_millis: Option<i64>,
    pub max_millis: Option<i64>,
}

/// The memory recipe with its quantities parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryParams {
    pub mode: ResourceMode,
    pub headroom_percent: f64,
    pub window_secs: i64,
    pub min_bytes: Option<i64>,
    pub max_bytes: Option<i64>,
}

fn check_headroom(headroom_percent: f64, field: &str) -> Result<(), PolicyError> {
    if headroom_percent.is_finite() && headroom_percent >= 0.0 {
        Ok(())
    } else {
        Err(policy_err(
            format!("{field}.headroomPercent"),
            "must be a number >= 0",
        ))
    }
}

fn check_min_max(min: Option<i64>, max: Option<i64>, field: &str) -> Result<(), PolicyError> {
    match (min, max) {
        (Some(lo), Some(hi)) if lo > hi => Err(policy_err(field, "min must not be above max")),
        _ => Ok(()),
    }
}

impl CpuParams {
    pub fn from_recipe(r: &CpuRecipe) -> Result<Self, PolicyError> {
        let f = "spec.resources.cpu";
        if !(r.percentile > 0.0 && r.percentile <= 100.0) {
            return Err(policy_err(
                format!("{f}.percentile"),
                format!("must be in (0, 100] (got {})", r.percentile),
            ));
        }
        check_headroom(r.headroom_percent, f)?;
        let parse = |q: &Option<_>, name: &str| {
            q.as_ref()
                .map(quantity::cpu_millis)
                .transpose()
                .map_err(|e| policy_err(format!("{f}.{name}"), e))
        };
        let p = Self {
            mode: r.mode,
            percentile: r.percentile,
            headroom_percent: r.headroom_percent,
            window_secs: i64::try_from(r.window.seconds()).unwrap_or(i64::MAX),
            min_millis: parse(&r.min, "min")?,
            max_millis: parse(&r.max, "max")?,
        };
        check_min_max(p.min_millis, p.max_millis, f)?;
        Ok(p)
    }
}

impl MemoryParams {
    pub fn from_recipe(r: &MemoryRecipe) -> Result<Self, PolicyError> {
        let f = "spec.resources.memory";
        check_headroom(r.headroom_percent, f)?;
        let parse = |q: &Option<_>, name: &str| {
            q.as_ref()
                .map(quantity::memory_bytes)
                .transpose()
                .map_err(|e| policy_err(format!("{f}.{name}"), e))
        };
        let p = Self {
            mode: r.mode,
            headroom_percent: r.headroom_percent,
            window_secs: i64::try_from(r.window.seconds()).unwrap_or(i64::MAX),
            min_bytes: parse(&r.min, "min")?,
            max_bytes: parse(&r.max, "max")?,
        };
        check_min_max(p.min_bytes, p.max_bytes, f)?;
        Ok(p)
    }
}

/// A policy's CPU/memory recipes with every quantity parsed (absent recipes take their defaults:
/// audit-only, p95 + 15 % CPU, peak + 20 % memory, 7d).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyParams {
    pub cpu: CpuParams,
    pub memory: MemoryParams,
    /// container name (or `"*"`) → fixed requests.
    pub static_requests: ContainerRequests,
    /// `controlledValues` of cpu and memory.
    pub controlled: (ControlledValues, ControlledValues),
}

impl PolicyParams {
    pub fn from_spec(spec: &RightsizingPolicySpec) -> Result<Self, PolicyError> {
        let cpu = CpuParams::from_recipe(&spec.resources.cpu.clone().unwrap_or_default())?;
        let memory = MemoryParams::from_recipe(&spec.resources.memory.clone().unwrap_or_default())?;
        let mut static_requests = ContainerRequests::new();
        for (name, s) in &spec.static_requests {
            let cpu_millis = s
                .cpu
                .as_ref()
                .map(quantity::cpu_millis)
                .transpose()
                .map_err(|e| policy_err(format!("spec.static.{name}.cpu"), e))?;
            let memory_bytes = s
                .memory
                .as_ref()
                .map(quantity::memory_bytes)
                .transpose()
                .map_err(|e| policy_err(format!("spec.static.{name}.memory"), e))?;
            static_requests.insert(
                name.clone(),
                ResourceRequests {
                    cpu_millis,
                    memory_bytes,
                },
            );
        }
        let controlled = (
            spec.resources
                .cpu
                .as_ref()
                .map(|c| c.controlled_values)
                .unwrap_or_default(),
            spec.resources
                .memory
                .as_ref()
                .map(|m| m.controlled_values)
                .unwrap_or_default(),
        );
        Ok(Self {
            cpu,
            memory,
            static_requests,
            controlled,
        })
    }

    /// `controlledValues` of cpu and memory (docs/policies.md#limits).
    pub fn controlled_values(&self) -> (ControlledValues, ControlledValues) {
        self.controlled
    }

    /// Fixed requests for `container`: the exact entry wins over `"*"`, resource by resource.
    pub fn static_for(&self, container: &str) -> ResourceRequests {
        let exact = self.static_requests.get(container);
        let any = self.static_requests.get("*");
        ResourceRequests {
            cpu_millis: exact
                .and_then(|s| s.cpu_millis)
                .or(any.and_then(|s| s.cpu_millis)),
            memory_bytes: exact
                .and_then(|s| s.memory_bytes)
                .or(any.and_then(|s| s.memory_bytes)),
        }
    }
}

/// Round `x` up to a whole multiple of `unit`, ignoring float noise.
fn ceil_to_unit(x: f64, unit: i64) -> i64 {
    let q = ceil_clean(x / unit as f64);
    (q as i64).saturating_mul(unit)
}

fn clamp_opt(v: i64, min: Option<i64>, max: Option<i64>) -> i64 {
    let v = min.map_or(v, |lo| v.max(lo));
    max.map_or(v, |hi| v.min(hi))
}

/// Usable usage: finite and not negative.
fn usable(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite() && *v >= 0.0)
}

/// Recommended CPU request in millicores from the window's CPU usage percentile (cores), or
/// `None` without usage.
pub fn recommend_cpu_millis(usage: Option<f64>, p: &CpuParams) -> Option<i64> {
    let usage = usable(usage)?;
    let raw = ceil_to_unit(usage * (1.0 + p.headroom_percent / 100.0) * 1000.0, 1).max(1);
    Some(clamp_opt(raw, p.min_millis, p.max_millis))
}

/// Recommended memory request in bytes from the window's peak working set (bytes), or `None`
/// without usage.
pub fn recommend_memory_bytes(peak: Option<f64>, p: &MemoryParams) -> Option<i64> {
    let peak = usable(peak)?;
    let raw = ceil_to_unit(peak * (1.0 + p.headroom_percent / 100.0), MIB).max(MIB);
    Some(clamp_opt(raw, p.min_bytes, p.max_bytes))
}

/// Must-not-decrease: a throttled / OOM-killed container's request is never below its current one.
pub fn never_below_current(recommended: i64, current: Option<i64>, must_not_decrease: bool) -> i64 {
    match current {
        Some(c) if must_not_decrease => recommended.max(c),
        _ => recommended,
    }
}

/// Where a recommended value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Usage,
    Static,
    /// No sample in the window and no static value: nothing is recommended.
    NoData,
}

/// The recommendation of one resource of one container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceRec {
    pub value: Option<i64>,
    pub source: Source,
    /// Throttled (cpu) / OOM-killed (memory): never below the current request.
    pub must_not_decrease: bool,
    /// That floor set the value: usage alone recommends `from_usage`, less.
    pub held: Option<i64>,
}

/// What the hub knows about one counted container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerSignals {
    pub name: String,
    pub current: ResourceRequests,
    /// The CPU usage rate's percentile (cores) over the CPU window, across the workload's pods.
    pub cpu: Option<f64>,
    /// The peak memory working set (bytes) over the memory window, across the workload's pods.
    pub memory: Option<f64>,
    pub throttled: bool,
    pub oom_killed: bool,
    /// What a floor's reason says: the peak throttled share, how long a pod was throttled
    /// (seconds) and when last (unix seconds); when an OOM kill was last seen (unix seconds).
    pub throttling: Option<Episode>,
    pub oom_killed_at: Option<OomSeen>,
}

/// When an OOM kill was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomSeen {
    /// A today's pod's termination finished then (unix seconds).
    Killed(i64),
    /// kube-state-metrics last showed one as a pod's last termination then (unix seconds).
    Shown(i64),
}

/// When and how much a container was throttled in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Episode {
    pub peak_share: f64,
    pub seconds: Option<i64>,
    pub last_at: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerRec {
    pub cpu: ResourceRec,
    pub memory: ResourceRec,
}

/// CPU and memory recommendation of one container under a policy.
pub fn recommend_container(c: &ContainerSignals, p: &PolicyParams) -> ContainerRec {
    let fixed = p.static_for(&c.name);
    fn pick(fixed: Option<i64>, usage: impl FnOnce() -> Option<i64>) -> (Option<i64>, Source) {
        match fixed {
            Some(v) => (Some(v), Source::Static),
            None => usage().map_or((None, Source::NoData), |v| (Some(v), Source::Usage)),
        }
    }
    let (cpu, cpu_src) = pick(fixed.cpu_millis, || recommend_cpu_millis(c.cpu, &p.cpu));
    let (mem, mem_src) = pick(fixed.memory_bytes, || {
        recommend_memory_bytes(c.memory, &p.memory)
    });
    ContainerRec {
        cpu: floored(cpu, cpu_src, c.current.cpu_millis, c.throttled),
        memory: floored(mem, mem_src, c.current.memory_bytes, c.oom_killed),
    }
}

/// One resource's recommendation after its floor ([`never_below_current`]), saying whether
/// the floor set it.
fn floored(
    value: Option<i64>,
    source: Source,
    current: Option<i64>,
    must_not_decrease: bool,
) -> ResourceRec {
    let after = value.map(|v| never_below_current(v, current, must_not_decrease));
    ResourceRec {
        value: after,
        source,
        must_not_decrease,
        held: value.filter(|v| Some(*v) != after),
    }
}

/// Whether a container was CPU-throttled: at some step of the window, the rate of throttled
/// CFS periods was at least `ratio` × the rate of CFS periods
/// (`container_cpu_cfs_throttled_periods_total` over `container_cpu_cfs_periods_total`, steps
/// without periods skipped). `peak_ratio` is that share's highest value in the window, the
/// highest across the workload's pods.
pub fn throttled(peak_ratio: Option<f64>, ratio: f64) -> bool {
    peak_ratio.is_some_and(|r| r.is_finite() && r >= ratio)
}

/// Whether the workload's history records an OOM kill of the container in the memory window:
/// `peak` is the highest value across the workload's pods of kube-state-metrics'
/// `kube_pod_container_status_last_terminated_reason{reason="OOMKilled"}` (1 while a pod's
/// last termination was an OOM kill; older kube-state-metrics also export 0 for the reasons that
/// were not). No series — kube-state-metrics not installed — is no OOM history, not an error.
pub fn oom_killed_in_history(peak: Option<f64>) -> bool {
    peak.is_some_and(|v| v > 0.0)
}

fn ts_in(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    start: Timestamp,
    end: Timestamp,
) -> bool {
    let ms = t.0.as_millisecond();
    ms >= start.as_millisecond() && ms <= end.as_millisecond()
}

/// Whether `container` was OOM-killed with a termination that finished in `[start, end]`: its current
/// or last state is `terminated` with reason `OOMKilled` and `finishedAt` in the window. The
/// latest such `finishedAt` (unix seconds).
pub fn oom_killed_in_window(
    statuses: &[ContainerStatus],
    container: &str,
    start: Timestamp,
    end: Timestamp,
) -> Option<i64> {
    statuses
        .iter()
        .filter(|s| s.name == container)
        .flat_map(|s| [s.last_state.as_ref(), s.state.as_ref()])
        .flatten()
        .filter_map(|st| st.terminated.as_ref())
        .filter(|t| t.reason.as_deref() == Some(OOM_KILLED))
        .filter_map(|t| t.finished_at.as_ref().filter(|f| ts_in(f, start, end)))
        .map(|f| f.0.as_second())
        .max()
}

/// The containers (regular and init) OOM-killed in `[start, end]` in any of `pods`, by name,
/// with the latest kill's `finishedAt` (unix seconds).
pub fn oom_killed_containers(
    pods: &[&Pod],
    start: Timestamp,
    end: Timestamp,
) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for status in pods.iter().filter_map(|p| p.status.as_ref()) {
        for list in [&status.container_statuses, &status.init_container_statuses]
            .into_iter()
            .flatten()
        {
            for s in list {
                if let Some(at) = oom_killed_in_window(std::slice::from_ref(s), &s.name, start, end)
                {
                    let latest: &mut i64 = out.entry(s.name.to_string()).or_insert(at);
                    *latest = (*latest).max(at);
                }
            }
        }
    }
    out
}

/// The containers an HPA counts (and kerf rightsizes by default): regular containers plus
/// restartable init containers (sidecars, `restartPolicy: Always`), in that order.
/// The same set as an empty GPU `scope.containers` covers.
pub fn counted_containers(spec: &PodSpec) -> Vec<&Container> {
    crate::allocation::default_scope_containers(spec)
}

/// A container's effective requests: `requests`, else `limits` (the API server defaults a missing
/// request to the limit).
pub fn effective_requests(c: &Container) -> Result<ResourceRequests, QuantityError> {
    let res = c.resources.as_ref();
    let get = |name: &str| {
        res.and_then(|r| r.requests.as_ref().and_then(|m| m.get(name)))
            .or_else(|| res.and_then(|r| r.limits.as_ref().and_then(|m| m.get(name))))
    };
    Ok(ResourceRequests {
        cpu_millis: get("cpu").map(quantity::cpu_millis).transpose()?,
        memory_bytes: get("memory").map(quantity::memory_bytes).transpose()?,
    })
}

/// A container's limits (cpu millicores, memory bytes); one that does not parse counts as none.
pub fn container_limits(c: &Container) -> ResourceRequests {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    let get = |name: &str| limits.and_then(|m| m.get(name));
    ResourceRequests {
        cpu_millis: get("cpu").and_then(|q| quantity::cpu_millis(q).ok()),
        memory_bytes: get("memory").and_then(|q| quantity::memory_bytes(q).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kerf_api::{DurationStr, StaticRequests};
    use proptest::prelude::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    /// The window's aggregate of one usage value.
    fn series(values: &[f64]) -> Option<f64> {
        values.iter().copied().reduce(f64::max)
    }

    fn cpu(pct: f64, headroom: f64) -> CpuParams {
        CpuParams::from_recipe(&CpuRecipe {
            percentile: pct,
            headroom_percent: headroom,
            ..CpuRecipe::default()
        })
        .unwrap()
    }

    fn mem(headroom: f64) -> MemoryParams {
        MemoryParams::from_recipe(&MemoryRecipe {
            headroom_percent: headroom,
            ..MemoryRecipe::default()
        })
        .unwrap()
    }

    #[test]
    fn cpu_is_default_p95_times_headroom() {
        // 100 samples 0.01..1.00 cores: p95 (Prometheus's interpolation, rank 94.05) = 0.9505
        // cores; +15 % = 1.093075 cores → 1094m (rounded up).
        let mut v: Vec<f64> = (1..=100).map(|i| f64::from(i) / 100.0).collect();
        let p = CpuParams::from_recipe(&CpuRecipe::default()).unwrap();
        assert_eq!(p.percentile, 95.0);
        let usage = crate::query::window::quantile(p.percentile / 100.0, &mut v);
        assert_eq!(recommend_cpu_millis(usage, &p), Some(1094));
    }

    #[test]
    fn cpu_rounds_up_to_millicores_without_float_noise() {
        // 0.6087 cores × 1.15 = 0.700005 → 701m (a real fraction rounds up) …
        assert_eq!(
            recommend_cpu_millis(series(&[0.6087]), &cpu(95.0, 15.0)),
            Some(701)
        );
        // … but 0.7 × 1.0 is exactly 700m even though 0.7 * 1000 is not exact in binary.
        assert_eq!(
            recommend_cpu_millis(series(&[0.7]), &cpu(95.0, 0.0)),
            Some(700)
        );
        // 0.1 × 1.1 × 1000 = 110.00000000000001 in f64: still 110m.
        assert_eq!(
            recommend_cpu_millis(series(&[0.1]), &cpu(95.0, 10.0)),
            Some(110)
        );
        // Zero usage still gets the smallest request.
        assert_eq!(
            recommend_cpu_millis(series(&[0.0]), &cpu(95.0, 15.0)),
            Some(1)
        );
    }

    #[test]
    fn memory_is_peak_times_headroom_rounded_up_to_mib() {
        let peak = 100.0 * MIB as f64 + 1.0;
        // (100 MiB + 1 B) × 1.2 = 120 MiB + 1.2 B → 121 MiB.
        let s = series(&[10.0 * MIB as f64, peak, 50.0 * MIB as f64]);
        assert_eq!(recommend_memory_bytes(s, &mem(20.0)), Some(121 * MIB));
        // Exactly 100 MiB × 1.2 = 120 MiB: no extra MiB from float noise.
        let s = series(&[100.0 * MIB as f64]);
        assert_eq!(recommend_memory_bytes(s, &mem(20.0)), Some(120 * MIB));
    }

    #[test]
    fn bad_usage_values_recommend_nothing() {
        let p = cpu(100.0, 0.0);
        assert_eq!(recommend_cpu_millis(Some(0.25), &p), Some(250));
        for bad in [None, Some(f64::NAN), Some(-1.0), Some(f64::INFINITY)] {
            assert_eq!(recommend_cpu_millis(bad, &p), None, "{bad:?}");
            assert_eq!(recommend_memory_bytes(bad, &mem(0.0)), None, "{bad:?}");
        }
    }

    #[test]
    fn min_max_clamp_after_rounding() {
        let mut r = CpuRecipe {
            headroom_percent: 0.0,
            min: Some(Quantity("100m".into())),
            max: Some(Quantity("2".into())),
            ..CpuRecipe::default()
        };
        let p = CpuParams::from_recipe(&r).unwrap();
        assert_eq!(recommend_cpu_millis(series(&[0.01]), &p), Some(100));
        assert_eq!(recommend_cpu_millis(series(&[5.0]), &p), Some(2000));
        let m = MemoryParams::from_recipe(&MemoryRecipe {
            headroom_percent: 0.0,
            max: Some(Quantity("1G".into())),
            ..MemoryRecipe::default()
        })
        .unwrap();
        // 2 GiB peak, max 1G: the max is kept exactly as written, not rounded to MiB.
        assert_eq!(
            recommend_memory_bytes(series(&[2.0 * (1u64 << 30) as f64]), &m),
            Some(1_000_000_000)
        );
        r.min = Some(Quantity("3".into()));
        let e = CpuParams::from_recipe(&r).unwrap_err();
        assert_eq!(e.field, "spec.resources.cpu");
        r.min = Some(Quantity("lots".into()));
        assert!(
            CpuParams::from_recipe(&r)
                .unwrap_err()
                .to_string()
                .contains("spec.resources.cpu.min")
        );
    }

    fn policy(static_requests: &[(&str, Option<&str>, Option<&str>)]) -> PolicyParams {
        let spec = RightsizingPolicySpec {
            static_requests: static_requests
                .iter()
                .map(|(n, c, m)| {
                    (
                        n.to_string(),
                        StaticRequests {
                            cpu: c.map(|c| Quantity(c.into())),
                            memory: m.map(|m| Quantity(m.into())),
                        },
                    )
                })
                .collect(),
            ..Default::default()
        };
        PolicyParams::from_spec(&spec).unwrap()
    }

    #[test]
    fn static_recipe_exact_name_wins_over_star_per_resource() {
        let p = policy(&[
            ("*", Some("250m"), Some("256Mi")),
            ("app", Some("700m"), None),
        ]);
        let app = ContainerSignals {
            name: "app".into(),
            cpu: series(&[3.0]),
            ..Default::default()
        };
        let r = recommend_container(&app, &p);
        assert_eq!((r.cpu.value, r.cpu.source), (Some(700), Source::Static));
        assert_eq!(
            (r.memory.value, r.memory.source),
            (Some(256 * MIB), Source::Static)
        );
        let side = ContainerSignals {
            name: "sidecar".into(),
            ..Default::default()
        };
        let r = recommend_container(&side, &p);
        assert_eq!(r.cpu.value, Some(250));
        // Without any static entry and without samples there is nothing to recommend.
        let r = recommend_container(&side, &policy(&[]));
        assert_eq!((r.cpu.value, r.cpu.source), (None, Source::NoData));
        let bad = RightsizingPolicySpec {
            static_requests: [(
                "app".to_string(),
                StaticRequests {
                    cpu: Some(Quantity("x".into())),
                    memory: None,
                },
            )]
            .into(),
            ..Default::default()
        };
        assert_eq!(
            PolicyParams::from_spec(&bad).unwrap_err().field,
            "spec.static.app.cpu"
        );
    }

    #[test]
    fn throttled_container_request_never_decreases() {
        let p = policy(&[]);
        let mut c = ContainerSignals {
            name: "app".into(),
            current: ResourceRequests {
                cpu_millis: Some(1000),
                memory_bytes: Some(512 * MIB),
            },
            cpu: series(&[0.2]),
            memory: series(&[100.0 * MIB as f64]),
            throttled: true,
            oom_killed: false,
            ..Default::default()
        };
        let r = recommend_container(&c, &p);
        assert_eq!(
            r.cpu.value,
            Some(1000),
            "throttled: CPU stays at the current request"
        );
        assert!(r.cpu.must_not_decrease);
        assert_eq!(
            r.memory.value,
            Some(120 * MIB),
            "memory is unaffected by CPU throttling"
        );
        c.throttled = false;
        assert_eq!(recommend_container(&c, &p).cpu.value, Some(230));
        // An increase is still allowed.
        c.throttled = true;
        c.cpu = series(&[2.0]);
        assert_eq!(recommend_container(&c, &p).cpu.value, Some(2300));
        // Static values obey the rule too.
        let st = policy(&[("app", Some("100m"), None)]);
        assert_eq!(recommend_container(&c, &st).cpu.value, Some(1000));
    }

    #[test]
    fn oom_killed_container_memory_never_decreases() {
        let c = ContainerSignals {
            name: "app".into(),
            current: ResourceRequests {
                cpu_millis: Some(1000),
                memory_bytes: Some(512 * MIB),
            },
            cpu: series(&[0.2]),
            memory: series(&[100.0 * MIB as f64]),
            throttled: false,
            oom_killed: true,
            ..Default::default()
        };
        let r = recommend_container(&c, &policy(&[]));
        assert_eq!(r.memory.value, Some(512 * MIB));
        assert_eq!(r.cpu.value, Some(230));
    }

    #[test]
    fn throttled_when_the_peak_share_of_throttled_periods_reaches_the_ratio() {
        assert!(!throttled(Some(0.049), DEFAULT_THROTTLE_RATIO));
        assert!(throttled(Some(0.05), DEFAULT_THROTTLE_RATIO));
        assert!(throttled(Some(0.01), 0.01));
        // No CFS periods in the window (no CPU limit): never throttled.
        assert!(!throttled(None, DEFAULT_THROTTLE_RATIO));
        assert!(!throttled(Some(f64::NAN), DEFAULT_THROTTLE_RATIO));
    }

    fn status(json: serde_json::Value) -> ContainerStatus {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn oom_killed_in_window_reads_last_state_terminated_reason() {
        let end = now();
        let start = end - DurationStr::parse("7d").unwrap().signed();
        let mk = |reason: &str, at: &str| {
            status(serde_json::json!({
                "name": "app", "image": "x", "imageID": "", "ready": true, "restartCount": 1,
                "lastState": {"terminated": {"exitCode": 137, "reason": reason, "finishedAt": at}}
            }))
        };
        let killed = end - SignedDuration::from_hours(24);
        let (inside, outside) = (
            killed.to_string(),
            (end - SignedDuration::from_hours(24 * 8)).to_string(),
        );
        assert_eq!(
            oom_killed_in_window(&[mk("OOMKilled", &inside)], "app", start, end),
            Some(killed.as_second()),
            "when it was killed"
        );
        assert!(oom_killed_in_window(&[mk("OOMKilled", &outside)], "app", start, end).is_none());
        assert!(oom_killed_in_window(&[mk("Error", &inside)], "app", start, end).is_none());
        assert!(oom_killed_in_window(&[mk("OOMKilled", &inside)], "other", start, end).is_none());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "status": {
                "containerStatuses": [serde_json::to_value(mk("Completed", &inside)).unwrap()],
                "initContainerStatuses": [serde_json::to_value(ContainerStatus { name: "proxy".into(), ..mk("OOMKilled", &inside) }).unwrap()]
            }
        }))
        .unwrap();
        assert_eq!(
            oom_killed_containers(&[&pod], start, end),
            BTreeMap::from([("proxy".to_string(), killed.as_second())])
        );
    }

    #[test]
    fn restartable_init_containers_are_counted() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "initContainers": [
                {"name": "migrate"},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}}
            ],
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}}}]
        }))
        .unwrap();
        let names: Vec<&str> = counted_containers(&spec)
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["app", "proxy"]);
        let reqs: Vec<ResourceRequests> = counted_containers(&spec)
            .iter()
            .map(|c| effective_requests(c).unwrap())
            .collect();
        assert_eq!(
            reqs[0],
            ResourceRequests {
                cpu_millis: Some(1000),
                memory_bytes: Some(1 << 30)
            }
        );
        assert_eq!(
            reqs[1],
            ResourceRequests {
                cpu_millis: Some(200),
                memory_bytes: Some(64 * MIB)
            }
        );
    }

    /// How many of `values` are at or below `v`.
    fn at_or_below(values: &[f64], v: f64) -> usize {
        values.iter().filter(|&&x| x <= v).count()
    }

    proptest! {
        #[test]
        fn cpu_recommendation_covers_percentile_with_headroom(
            values in proptest::collection::vec(0.0f64..64.0, 1..200),
            pct in 1.0f64..=100.0,
            headroom in 0.0f64..100.0,
        ) {
            let p = cpu(pct, headroom);
            let mut sorted = values.clone();
            let q = crate::query::window::quantile(pct / 100.0, &mut sorted).unwrap();
            // Prometheus's interpolation by its definition: between the samples at ranks
            // ⌊φ(n−1)⌋ and ⌈φ(n−1)⌉, so at least ⌊φ(n−1)⌋ + 1 samples are at or below it.
            let rank = pct / 100.0 * (values.len() - 1) as f64;
            prop_assert!(q >= sorted[rank.floor() as usize] && q <= sorted[rank.ceil() as usize]);
            prop_assert!(at_or_below(&values, q) > rank.floor() as usize);
            let millis = recommend_cpu_millis(Some(q), &p).unwrap();
            let want = q * (1.0 + headroom / 100.0) * 1000.0;
            // Rounded up: never below the exact value (beyond float noise), less than one millicore above.
            prop_assert!(millis as f64 >= want - 1e-6 * want.max(1.0));
            prop_assert!((millis as f64) < want + 1.0 || millis == 1);
        }

        #[test]
        fn memory_recommendation_is_whole_mib_covering_peak(
            values in proptest::collection::vec(0.0f64..6.4e10, 1..200),
            headroom in 0.0f64..100.0,
        ) {
            let bytes = recommend_memory_bytes(series(&values), &mem(headroom)).unwrap();
            let peak = values.iter().copied().fold(0.0, f64::max) * (1.0 + headroom / 100.0);
            prop_assert_eq!(bytes % MIB, 0);
            prop_assert!(bytes as f64 >= peak - 1e-6 * peak.max(1.0));
            prop_assert!((bytes as f64) < peak + MIB as f64 || bytes == MIB);
        }
    }
}
