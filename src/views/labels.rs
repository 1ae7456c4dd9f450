//! The words the charts of `/debug` and `kerf simulate` share: durations, what a CPU/memory
//! recommendation rests on, and the reason a GPU change gives.

use std::fmt::Write as _;

/// `90s` → `1m30s`: the `--every` duration as the policies write durations.
pub fn format_duration(seconds: i64) -> String {
    let mut s = String::new();
    let mut rest = seconds;
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= len {
            let _ = write!(s, "{}{unit}", rest / len);
            rest %= len;
        }
    }
    if s.is_empty() { "0s".into() } else { s }
}

/// What the CPU and memory recommendations of a policy rest on, as the charts label it:
/// `p95 over 1h`, `peak over 1h`.
pub fn usage_basis(
    params: &crate::core::recommenders::resources::container::PolicyParams,
) -> [String; 2] {
    [
        format!(
            "p{} over {}",
            params.cpu.percentile,
            format_duration(params.cpu.window_secs)
        ),
        format!("peak over {}", format_duration(params.memory.window_secs)),
    ]
}

/// The reason a GPU change gives: the driver's candidate line of the cycle's reasons.
pub fn change_reason(reasons: &[String], driver: Option<crate::api::Signal>) -> String {
    let prefix = driver.map(|d| format!("{}: ", d.as_str()));
    reasons
        .iter()
        .find(|r| {
            r.contains("candidate") && prefix.as_ref().is_none_or(|p| r.starts_with(p.as_str()))
        })
        .or_else(|| reasons.iter().find(|r| r.contains("candidate")))
        .or_else(|| reasons.last())
        .cloned()
        .unwrap_or_else(|| "the served recommendation changed".into())
}

/// A request and its limit as one cell, `500m/1` (`-` for a missing one); `None` where there
/// is neither.
pub fn request_limit(
    request: Option<i64>,
    limit: Option<i64>,
    f: fn(i64) -> String,
) -> Option<String> {
    if request.is_none() && limit.is_none() {
        return None;
    }
    let q = |v: Option<i64>| v.map_or_else(|| "-".to_string(), f);
    Some(format!("{}/{}", q(request), q(limit)))
}

/// A container's CPU and memory, request/limit, now and recommended, as the `kerf recommend`
/// table and `/debug` show them: cpu now, cpu recommended, memory now, memory recommended. A
/// resource with nothing recommended shows nothing recommended.
pub fn resource_cells(
    c: &crate::core::recommenders::resources::workload::ContainerOutcome,
) -> [Option<String>; 4] {
    use crate::core::quantity::{format_cpu_millis as cpu, format_memory_bytes as memory};
    let (r, l) = (&c.recommended, &c.recommended_limits);
    [
        request_limit(c.current.cpu_millis, c.current_limits.cpu_millis, cpu),
        r.cpu_millis
            .and_then(|_| request_limit(r.cpu_millis, l.cpu_millis, cpu)),
        request_limit(
            c.current.memory_bytes,
            c.current_limits.memory_bytes,
            memory,
        ),
        r.memory_bytes
            .and_then(|_| request_limit(r.memory_bytes, l.memory_bytes, memory)),
    ]
}
