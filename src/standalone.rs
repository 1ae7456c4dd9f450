//! Standalone mode: objects from a directory of YAML manifests instead of the API server.
//! (Loader and evaluation land with `kerf recommend`.)

use std::path::Path;

use chrono::{DateTime, Utc};

use crate::metrics::MetricSource;
use crate::state::Store;

/// Loads `dir`, evaluates every policy against `source` at `at` and replaces the store's
/// content (workload states, owner links, GlobalConfiguration). Marks the store ready.
/// Returns the GlobalConfiguration's `gpuReactiveCheckInterval` in seconds.
pub async fn refresh_store<S: MetricSource>(
    dir: &Path,
    source: &S,
    at: DateTime<Utc>,
    step_seconds: i64,
    store: &Store,
) -> anyhow::Result<u64> {
    let _ = (dir, source, at, step_seconds, store);
    anyhow::bail!("standalone evaluation is not implemented yet")
}
