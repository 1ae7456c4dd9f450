//! kerf's metrics are one registry per process (`kerf::telemetry::metrics()`). nextest runs each
//! test in its own process, but `cargo test` runs the tests of a binary as threads of one. So a
//! test reads a series before and after and asserts the change, and while it does, it holds
//! [`alone`]: the tests of its binary that move the same series hold [`shared`], so none of them
//! moves it in between. Take either once per test: a second `shared()` waits behind a queued
//! `alone()` that waits for the first.
#![allow(dead_code)]

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static METRICS: RwLock<()> = RwLock::const_new(());

/// Held by a test that moves series another test of its binary asserts exact changes of.
pub async fn shared() -> RwLockReadGuard<'static, ()> {
    METRICS.read().await
}

/// Held by a test asserting an exact change of a series: no test holding [`shared`] runs.
pub async fn alone() -> RwLockWriteGuard<'static, ()> {
    METRICS.write().await
}

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
