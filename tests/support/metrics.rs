//! Reading kerf's metrics in tests. Every test gives the code under test a registry of its own
//! (a `Store`'s, or `kerf::telemetry::Metrics::new()`), so counts are exact and no test moves
//! another's series.
#![allow(dead_code)]

/// The value of `series` (its name and labels as exposed, e.g. `kerf_x_total{kind="ok"}`) in a
/// Prometheus text exposition; 0 when the series is not there yet.
pub fn value(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| {
            v.split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{series}: not a number: {v}"))
        })
}
