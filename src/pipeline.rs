//! One GPU evaluation cycle: plan (pure) → batched metric queries (IO) → engine (pure).
//! Shared by `kerf recommend`, standalone `kerf serve` and the in-cluster reconciler.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use futures::StreamExt;

use crate::api::Signal;
use crate::core::evaluate::{self, WorkloadResult};
use crate::core::snapshot::Snapshot;
use crate::metrics::{MetricSource, SeriesSet};

/// Queries in flight at once (Prometheus handles a few concurrent range queries well).
const QUERY_CONCURRENCY: usize = 4;

#[derive(Debug, Default)]
pub struct CycleOutput {
    pub results: Vec<WorkloadResult>,
    /// Per GPU policy index: Err(reason) when one of its queries failed.
    pub prometheus: BTreeMap<usize, Result<(), String>>,
    /// Per GPU policy index whose automationStrategyRef does not resolve.
    pub unresolved_strategies: BTreeMap<usize, String>,
    /// Range queries issued.
    pub queries: usize,
    /// Non-fatal problems reported by the metric source.
    pub warnings: Vec<String>,
}

pub async fn run_gpu_cycle<S: MetricSource>(
    snapshot: &Snapshot,
    source: &S,
    now: DateTime<Utc>,
    step_seconds: i64,
) -> CycleOutput {
    let plan = evaluate::plan(snapshot, now, step_seconds);
    let answers: Vec<(
        usize,
        Signal,
        Result<SeriesSet, crate::metrics::MetricError>,
    )> = futures::stream::iter(plan.queries.iter())
        .map(|(pi, signal, q)| async move { (*pi, *signal, source.range_query(q).await) })
        .buffered(QUERY_CONCURRENCY)
        .collect()
        .await;
    let mut out = CycleOutput {
        queries: answers.len(),
        unresolved_strategies: plan.unresolved.clone(),
        ..Default::default()
    };
    let mut results = BTreeMap::new();
    let mut failed = BTreeSet::new();
    for (pi, signal, answer) in answers {
        let policy = &snapshot.gpu_policies[pi].id;
        match answer {
            Ok(set) => {
                out.warnings.extend(
                    set.warnings
                        .iter()
                        .map(|w| format!("{policy} {}: {w}", signal.as_str())),
                );
                out.prometheus.entry(pi).or_insert(Ok(()));
                results.insert((pi, signal), set);
            }
            Err(e) => {
                failed.insert(pi);
                out.prometheus
                    .insert(pi, Err(format!("{} query failed: {e}", signal.as_str())));
            }
        }
    }
    out.results = evaluate::evaluate(snapshot, &plan, results, &failed, now);
    out
}
