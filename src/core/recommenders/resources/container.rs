//! CPU and memory recommendations of one container (pure).
//!
//! Decisions (documented in `docs/`-facing comments here because the seeds are silent):
//! - **Percentile method: nearest rank.** The p-th percentile of n samples (sorted ascending) is the
//!   sample at rank ⌈p/100 × n⌉ (rank at least 1). It is always a sample that was observed, never
//!   an interpolation, so p100 is the maximum and p95 of 20 samples is the 19th.
//! - **Window.** Only samples with `now − window ≤ t ≤ now` count. Samples that are NaN, infinite
//!   or negative are ignored (a usage rate is never negative; such points are scrape artefacts).
//! - **CPU** = percentile × (1 + headroom/100), rounded UP to a whole millicore.
//!   **Memory** = peak working set × (1 + headroom/100), rounded UP to a whole MiB.
//!   Floating-point noise is removed before rounding up (a computed 700.0000000001m is 700m).
//!   At least 1m / 1Mi: a zero request is never recommended.
//! - **min/max** are applied after rounding, so a bound the user wrote is kept exactly as written.
//! - **No samples in the window** → no recommendation for that resource (the current request stays).
//! - **Static recipe**: `static["<container>"]` wins over `static["*"]`, per resource: an exact entry
//!   that sets only `cpu` still takes `memory` from `"*"`. A static value replaces the usage recipe
//!   (min/max and headroom do not apply to it).
//! - **Must not decrease**: a container that was CPU-throttled (cpu) or OOM-killed (memory) in the
//!   window never gets a recommended request below its current request — usage-based or static.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::pod::{Container, ContainerStatus, Pod, PodSpec};
use jiff::Timestamp;

use crate::api::{CpuRecipe, MemoryRecipe, ResourceMode, RightsizingPolicySpec};
use crate::core::model::ResourceRequests;
use crate::core::quantity::{self, MIB, QuantityError};

/// (unix seconds, value), as the metric edge returns them.
pub type Sample = (i64, f64);

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
    pub static_requests: BTreeMap<String, ResourceRequests>,
}

impl PolicyParams {
    pub fn from_spec(spec: &RightsizingPolicySpec) -> Result<Self, PolicyError> {
        let cpu = CpuParams::from_recipe(&spec.resources.cpu.clone().unwrap_or_default())?;
        let memory = MemoryParams::from_recipe(&spec.resources.memory.clone().unwrap_or_default())?;
        let mut static_requests = BTreeMap::new();
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
        Ok(Self {
            cpu,
            memory,
            static_requests,
        })
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

/// Values in `[now − window, now]` that are finite and non-negative.
fn in_window(samples: &[Sample], window_secs: i64, now: Timestamp) -> Vec<f64> {
    let end = now.as_second();
    let start = end.saturating_sub(window_secs);
    samples
        .iter()
        .filter(|(t, v)| *t >= start && *t <= end && v.is_finite() && *v >= 0.0)
        .map(|(_, v)| *v)
        .collect()
}

/// Nearest-rank percentile (see module docs). `None` when there are no values or `p` is outside (0, 100].
pub fn percentile_nearest_rank(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let mut sorted: Vec<f64> = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    // Remove float noise so that e.g. p = 95, n = 20 gives rank 19 exactly, not 20.
    let exact = p / 100.0 * n as f64;
    let rank = ceil_clean(exact).clamp(1.0, n as f64) as usize;
    Some(sorted[rank - 1])
}

/// Ceiling that ignores floating-point noise: a value within 1e-9 (relative) of an integer is that integer.
pub fn ceil_clean(x: f64) -> f64 {
    let r = x.round();
    if (x - r).abs() <= 1e-9 * r.abs().max(1.0) {
        r
    } else {
        x.ceil()
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

/// Recommended CPU request in millicores from usage-rate samples (cores), or `None` without samples.
pub fn recommend_cpu_millis(samples: &[Sample], p: &CpuParams, now: Timestamp) -> Option<i64> {
    let values = in_window(samples, p.window_secs, now);
    let usage = percentile_nearest_rank(&values, p.percentile)?;
    let raw = ceil_to_unit(usage * (1.0 + p.headroom_percent / 100.0) * 1000.0, 1).max(1);
    Some(clamp_opt(raw, p.min_millis, p.max_millis))
}

/// Recommended memory request in bytes from working-set samples (bytes), or `None` without samples.
pub fn recommend_memory_bytes(samples: &[Sample], p: &MemoryParams, now: Timestamp) -> Option<i64> {
    let values = in_window(samples, p.window_secs, now);
    let peak = values.into_iter().reduce(f64::max)?;
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
}

/// What the hub knows about one counted container.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerSignals {
    pub name: String,
    pub current: ResourceRequests,
    /// CPU usage rate (cores) per timestamp, every pod of the workload.
    pub cpu: Vec<Sample>,
    /// Memory working set (bytes) per timestamp, every pod of the workload.
    pub memory: Vec<Sample>,
    pub throttled: bool,
    pub oom_killed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerRec {
    pub cpu: ResourceRec,
    pub memory: ResourceRec,
}

/// CPU and memory recommendation of one container under a policy.
pub fn recommend_container(c: &ContainerSignals, p: &PolicyParams, now: Timestamp) -> ContainerRec {
    let fixed = p.static_for(&c.name);
    fn pick(fixed: Option<i64>, usage: impl FnOnce() -> Option<i64>) -> (Option<i64>, Source) {
        match fixed {
            Some(v) => (Some(v), Source::Static),
            None => usage().map_or((None, Source::NoData), |v| (Some(v), Source::Usage)),
        }
    }
    let (cpu, cpu_src) = pick(fixed.cpu_millis, || {
        recommend_cpu_millis(&c.cpu, &p.cpu, now)
    });
    let (mem, mem_src) = pick(fixed.memory_bytes, || {
        recommend_memory_bytes(&c.memory, &p.memory, now)
    });
    ContainerRec {
        cpu: ResourceRec {
            value: cpu.map(|v| never_below_current(v, c.current.cpu_millis, c.throttled)),
            source: cpu_src,
            must_not_decrease: c.throttled,
        },
        memory: ResourceRec {
            value: mem.map(|v| never_below_current(v, c.current.memory_bytes, c.oom_killed)),
            source: mem_src,
            must_not_decrease: c.oom_killed,
        },
    }
}

/// Whether a container was CPU-throttled: at some timestamp of the window, the rate of throttled
/// CFS periods is at least `ratio` × the rate of CFS periods (`container_cpu_cfs_throttled_periods_total`
/// over `container_cpu_cfs_periods_total`). Samples are matched on their timestamp (the query grid);
/// timestamps with no periods are skipped.
pub fn throttled(throttled_periods: &[Sample], periods: &[Sample], ratio: f64) -> bool {
    let periods: BTreeMap<i64, f64> = periods.iter().copied().collect();
    throttled_periods.iter().any(|(t, thr)| {
        periods
            .get(t)
            .is_some_and(|p| p.is_finite() && *p > 0.0 && thr.is_finite() && thr / p >= ratio)
    })
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
/// or last state is `terminated` with reason `OOMKilled` and `finishedAt` in the window.
pub fn oom_killed_in_window(
    statuses: &[ContainerStatus],
    container: &str,
    start: Timestamp,
    end: Timestamp,
) -> bool {
    statuses.iter().filter(|s| s.name == container).any(|s| {
        [s.last_state.as_ref(), s.state.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|st| st.terminated.as_ref())
            .any(|t| {
                t.reason.as_deref() == Some(OOM_KILLED)
                    && t.finished_at.as_ref().is_some_and(|f| ts_in(f, start, end))
            })
    })
}

/// Names of the containers (regular and init) OOM-killed in `[start, end]` in any of `pods`.
pub fn oom_killed_containers(pods: &[&Pod], start: Timestamp, end: Timestamp) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for status in pods.iter().filter_map(|p| p.status.as_ref()) {
        for list in [&status.container_statuses, &status.init_container_statuses]
            .into_iter()
            .flatten()
        {
            for s in list {
                if oom_killed_in_window(std::slice::from_ref(s), &s.name, start, end) {
                    out.insert(s.name.clone());
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
    crate::core::allocation::default_scope_containers(spec)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DurationStr, StaticRequests};
    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use proptest::prelude::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    /// One sample per minute ending at `now`, oldest first.
    fn series(values: &[f64]) -> Vec<Sample> {
        let end = now().as_second();
        let n = values.len() as i64;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (end - (n - 1 - i as i64) * 60, *v))
            .collect()
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
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&v, 95.0), Some(19.0));
        assert_eq!(percentile_nearest_rank(&v, 100.0), Some(20.0));
        assert_eq!(percentile_nearest_rank(&v, 50.0), Some(10.0));
        assert_eq!(percentile_nearest_rank(&v, 1.0), Some(1.0));
        // Order of the input does not matter.
        let mut rev = v.clone();
        rev.reverse();
        assert_eq!(percentile_nearest_rank(&rev, 95.0), Some(19.0));
        assert_eq!(percentile_nearest_rank(&[0.3], 95.0), Some(0.3));
        assert_eq!(percentile_nearest_rank(&[], 95.0), None);
    }

    #[test]
    fn cpu_is_default_p95_times_headroom() {
        // 100 samples 0.01..1.00 cores: p95 = 0.95 cores; +15 % = 1.0925 cores → 1093m (rounded up).
        let v: Vec<f64> = (1..=100).map(|i| f64::from(i) / 100.0).collect();
        let p = CpuParams::from_recipe(&CpuRecipe::default()).unwrap();
        assert_eq!(p.percentile, 95.0);
        assert_eq!(recommend_cpu_millis(&series(&v), &p, now()), Some(1093));
    }

    #[test]
    fn cpu_rounds_up_to_millicores_without_float_noise() {
        // 0.6087 cores × 1.15 = 0.700005 → 701m (a real fraction rounds up) …
        assert_eq!(
            recommend_cpu_millis(&series(&[0.6087]), &cpu(95.0, 15.0), now()),
            Some(701)
        );
        // … but 0.7 × 1.0 is exactly 700m even though 0.7 * 1000 is not exact in binary.
        assert_eq!(
            recommend_cpu_millis(&series(&[0.7]), &cpu(95.0, 0.0), now()),
            Some(700)
        );
        // 0.1 × 1.1 × 1000 = 110.00000000000001 in f64: still 110m.
        assert_eq!(
            recommend_cpu_millis(&series(&[0.1]), &cpu(95.0, 10.0), now()),
            Some(110)
        );
        // Zero usage still gets the smallest request.
        assert_eq!(
            recommend_cpu_millis(&series(&[0.0]), &cpu(95.0, 15.0), now()),
            Some(1)
        );
    }

    #[test]
    fn memory_is_peak_times_headroom_rounded_up_to_mib() {
        let peak = 100.0 * MIB as f64 + 1.0;
        // (100 MiB + 1 B) × 1.2 = 120 MiB + 1.2 B → 121 MiB.
        let s = series(&[10.0 * MIB as f64, peak, 50.0 * MIB as f64]);
        assert_eq!(
            recommend_memory_bytes(&s, &mem(20.0), now()),
            Some(121 * MIB)
        );
        // Exactly 100 MiB × 1.2 = 120 MiB: no extra MiB from float noise.
        let s = series(&[100.0 * MIB as f64]);
        assert_eq!(
            recommend_memory_bytes(&s, &mem(20.0), now()),
            Some(120 * MIB)
        );
    }

    #[test]
    fn samples_outside_the_window_and_bad_values_are_ignored() {
        let p = cpu(100.0, 0.0);
        let end = now().as_second();
        let s = vec![
            (end - 8 * 86_400, 9.0), // older than 7d
            (end + 60, 9.0),         // after now
            (end - 60, f64::NAN),
            (end - 30, -1.0),
            (end, 0.25),
        ];
        assert_eq!(recommend_cpu_millis(&s, &p, now()), Some(250));
        assert_eq!(recommend_cpu_millis(&s[..2], &p, now()), None);
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
        assert_eq!(recommend_cpu_millis(&series(&[0.01]), &p, now()), Some(100));
        assert_eq!(recommend_cpu_millis(&series(&[5.0]), &p, now()), Some(2000));
        let m = MemoryParams::from_recipe(&MemoryRecipe {
            headroom_percent: 0.0,
            max: Some(Quantity("1G".into())),
            ..MemoryRecipe::default()
        })
        .unwrap();
        // 2 GiB peak, max 1G: the max is kept exactly as written, not rounded to MiB.
        assert_eq!(
            recommend_memory_bytes(&series(&[2.0 * (1u64 << 30) as f64]), &m, now()),
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
        let r = recommend_container(&app, &p, now());
        assert_eq!((r.cpu.value, r.cpu.source), (Some(700), Source::Static));
        assert_eq!(
            (r.memory.value, r.memory.source),
            (Some(256 * MIB), Source::Static)
        );
        let side = ContainerSignals {
            name: "sidecar".into(),
            ..Default::default()
        };
        let r = recommend_container(&side, &p, now());
        assert_eq!(r.cpu.value, Some(250));
        // Without any static entry and without samples there is nothing to recommend.
        let r = recommend_container(&side, &policy(&[]), now());
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
        };
        let r = recommend_container(&c, &p, now());
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
        assert_eq!(recommend_container(&c, &p, now()).cpu.value, Some(230));
        // An increase is still allowed.
        c.throttled = true;
        c.cpu = series(&[2.0]);
        assert_eq!(recommend_container(&c, &p, now()).cpu.value, Some(2300));
        // Static values obey the rule too.
        let st = policy(&[("app", Some("100m"), None)]);
        assert_eq!(recommend_container(&c, &st, now()).cpu.value, Some(1000));
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
        };
        let r = recommend_container(&c, &policy(&[]), now());
        assert_eq!(r.memory.value, Some(512 * MIB));
        assert_eq!(r.cpu.value, Some(230));
    }

    #[test]
    fn throttled_helper_uses_ratio_of_periods_at_any_point() {
        let periods = series(&[100.0, 100.0, 100.0, 0.0]);
        assert!(!throttled(
            &series(&[0.0, 4.0, 4.9, 50.0]),
            &periods,
            DEFAULT_THROTTLE_RATIO
        ));
        assert!(throttled(
            &series(&[0.0, 5.0, 0.0, 0.0]),
            &periods,
            DEFAULT_THROTTLE_RATIO
        ));
        assert!(throttled(&series(&[0.0, 1.0, 0.0, 0.0]), &periods, 0.01));
        // Samples at timestamps missing from the other series are not compared.
        let shifted: Vec<Sample> = series(&[50.0])
            .into_iter()
            .map(|(t, v)| (t + 1, v))
            .collect();
        assert!(!throttled(&shifted, &periods, DEFAULT_THROTTLE_RATIO));
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
        let inside = (end - SignedDuration::from_hours(24)).to_string();
        let outside = (end - SignedDuration::from_hours(24 * 8)).to_string();
        assert!(oom_killed_in_window(
            &[mk("OOMKilled", &inside)],
            "app",
            start,
            end
        ));
        assert!(!oom_killed_in_window(
            &[mk("OOMKilled", &outside)],
            "app",
            start,
            end
        ));
        assert!(!oom_killed_in_window(
            &[mk("Error", &inside)],
            "app",
            start,
            end
        ));
        assert!(!oom_killed_in_window(
            &[mk("OOMKilled", &inside)],
            "other",
            start,
            end
        ));
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "status": {
                "containerStatuses": [serde_json::to_value(mk("Completed", &inside)).unwrap()],
                "initContainerStatuses": [serde_json::to_value(ContainerStatus { name: "proxy".into(), ..mk("OOMKilled", &inside) }).unwrap()]
            }
        }))
        .unwrap();
        assert_eq!(
            oom_killed_containers(&[&pod], start, end),
            BTreeSet::from(["proxy".to_string()])
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

    /// The nearest-rank percentile by its definition, without sorting or ranks: the smallest
    /// sample with at least `pct` % of the samples at or below it (float noise in `pct` × n
    /// ignored, as documented).
    fn nearest_rank_by_counting(values: &[f64], pct: f64) -> f64 {
        let needed = pct / 100.0 * values.len() as f64;
        values
            .iter()
            .copied()
            .filter(|&v| {
                let at_or_below = values.iter().filter(|&&x| x <= v).count() as f64;
                at_or_below >= needed - 1e-9 * needed.max(1.0)
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn nearest_rank_by_counting_is_the_documented_percentile() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank_by_counting(&v, 95.0), 19.0);
        assert_eq!(nearest_rank_by_counting(&v, 100.0), 20.0);
        assert_eq!(nearest_rank_by_counting(&v, 1.0), 1.0);
        assert_eq!(nearest_rank_by_counting(&[3.0, 1.0, 2.0, 2.0], 50.0), 2.0);
    }

    proptest! {
        #[test]
        fn cpu_recommendation_covers_percentile_with_headroom(
            values in proptest::collection::vec(0.0f64..64.0, 1..200),
            pct in 1.0f64..=100.0,
            headroom in 0.0f64..100.0,
        ) {
            let p = cpu(pct, headroom);
            let millis = recommend_cpu_millis(&series(&values), &p, now()).unwrap();
            let want = nearest_rank_by_counting(&values, pct) * (1.0 + headroom / 100.0) * 1000.0;
            // Rounded up: never below the exact value (beyond float noise), less than one millicore above.
            prop_assert!(millis as f64 >= want - 1e-6 * want.max(1.0));
            prop_assert!((millis as f64) < want + 1.0 || millis == 1);
        }

        #[test]
        fn memory_recommendation_is_whole_mib_covering_peak(
            values in proptest::collection::vec(0.0f64..6.4e10, 1..200),
            headroom in 0.0f64..100.0,
        ) {
            let bytes = recommend_memory_bytes(&series(&values), &mem(headroom), now()).unwrap();
            let peak = values.iter().copied().fold(0.0, f64::max) * (1.0 + headroom / 100.0);
            prop_assert_eq!(bytes % MIB, 0);
            prop_assert!(bytes as f64 >= peak - 1e-6 * peak.max(1.0));
            prop_assert!((bytes as f64) < peak + MIB as f64 || bytes == MIB);
        }
    }
}
