//! One evaluation cycle: plan (pure) → batched metric queries (IO) → engines (pure).
//! Shared by `kerf recommend`, standalone `kerf serve` and the in-cluster reconciler.

pub mod cluster;
pub mod standalone;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;

use jiff::Timestamp;
use std::pin::Pin;

use crate::api::RightsizingRecommendation;
use crate::api::Signal;
pub use crate::core::cycle::{CycleOutput, PolicyRun};
use crate::core::model::WorkloadKey;
use crate::core::recommenders::gpu;
use crate::core::recommenders::resources;
use crate::core::recovery::serving_state_each;
use crate::core::snapshot::{InvalidPolicy, Snapshot};
use crate::core::writes::WriteOp;
pub use crate::core::writes::{
    held_back, plan_writes, recommendation_name, rollback_requested, rolled_back,
};
use crate::state::Store;
use std::collections::HashSet;
use std::sync::Arc;

use crate::metrics::{MetricError, MetricSource, RangeQuery, SeriesSet};

/// Queries in flight at once (Prometheus handles a few concurrent range queries well).
const QUERY_CONCURRENCY: usize = 4;

type Answer<K> = (usize, K, Result<SeriesSet, MetricError>);

/// Runs the queries, `QUERY_CONCURRENCY` at a time; answers in query order. (Boxed futures keep
/// the caller's future `Send` for `tokio::spawn`; a stream-with-closure trips rustc's
/// higher-ranked lifetime inference there.)
async fn run_queries<S: MetricSource, K: Copy + Send + Sync>(
    source: &S,
    queries: &[(usize, K, RangeQuery)],
) -> Vec<Answer<K>> {
    let mut out = Vec::with_capacity(queries.len());
    for chunk in queries.chunks(QUERY_CONCURRENCY) {
        let mut batch: Vec<Pin<Box<dyn Future<Output = Answer<K>> + Send + '_>>> = Vec::new();
        for (pi, k, q) in chunk {
            let (pi, k) = (*pi, *k);
            batch.push(Box::pin(
                async move { (pi, k, source.range_query(q).await) },
            ));
        }
        out.extend(futures::future::join_all(batch).await);
    }
    out
}

/// Records one answer's availability and warnings for its policy.
fn record_answer<K: Copy>(
    pi: usize,
    k: K,
    answer: &Result<SeriesSet, MetricError>,
    name: &impl Fn(usize, K) -> String,
    status: &mut BTreeMap<usize, Result<(), String>>,
    warnings: &mut Vec<String>,
) {
    match answer {
        Ok(set) => {
            warnings.extend(set.warnings.iter().map(|w| format!("{}: {w}", name(pi, k))));
            status.entry(pi).or_insert(Ok(()));
        }
        Err(e) => {
            status.insert(pi, Err(format!("{} query failed: {e}", name(pi, k))));
        }
    }
}

/// Splits answers into results, failed policies and per-policy availability.
#[allow(clippy::type_complexity)]
fn sort_answers<K: Ord + Copy>(
    answers: Vec<(usize, K, Result<SeriesSet, MetricError>)>,
    name: impl Fn(usize, K) -> String,
    warnings: &mut Vec<String>,
) -> (
    BTreeMap<(usize, K), SeriesSet>,
    BTreeSet<usize>,
    BTreeMap<usize, Result<(), String>>,
) {
    let mut results = BTreeMap::new();
    let mut failed = BTreeSet::new();
    let mut status = BTreeMap::new();
    for (pi, k, answer) in answers {
        record_answer(pi, k, &answer, &name, &mut status, warnings);
        match answer {
            Ok(set) => {
                results.insert((pi, k), set);
            }
            Err(_) => {
                failed.insert(pi);
            }
        }
    }
    (results, failed, status)
}

pub async fn run_cycle<S: MetricSource>(
    snapshot: &Snapshot,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
) -> CycleOutput {
    let plan = gpu::plan(snapshot, now, step_seconds);
    let rs_plan = resources::plan(snapshot, now, step_seconds);
    let mut out = CycleOutput {
        queries: plan.queries.len() + rs_plan.queries.len(),
        ..Default::default()
    };
    // GPU: a few queries at a time, each workload evaluated once its policies are answered, so
    // only the samples of the policies in flight are held (see docs/performance.md).
    let gpu_name =
        |pi: usize, s: Signal| format!("{} {}", snapshot.gpu_policies[pi].id, s.as_str());
    let mut gpu_status = BTreeMap::new();
    let mut streaming = gpu::StreamingEvaluation::new(snapshot, &plan, now);
    for chunk in plan.queries.chunks(QUERY_CONCURRENCY) {
        for (pi, signal, answer) in run_queries(source, chunk).await {
            record_answer(
                pi,
                signal,
                &answer,
                &gpu_name,
                &mut gpu_status,
                &mut out.warnings,
            );
            streaming.answer(pi, signal, answer.ok());
        }
    }
    let gpu_results = streaming.finish();
    let rs_answers = run_queries(source, &rs_plan.queries).await;
    let (rs_results, rs_failed, rs_status) = sort_answers(
        rs_answers,
        |pi, s| format!("{} {}", snapshot.rightsizing_policies[pi].id, s.metric()),
        &mut out.warnings,
    );
    let gpu: HashMap<&WorkloadKey, _> = gpu_results
        .iter()
        .map(|r| (&r.key, &r.containers))
        .collect();
    let rs = resources::evaluate(snapshot, &rs_plan, rs_results, &rs_failed, &gpu, now);
    drop(gpu);
    for (i, p) in snapshot.gpu_policies.iter().enumerate() {
        let run = PolicyRun {
            queries: gpu_status.remove(&i),
            unresolved_strategy: plan.unresolved.get(&i).cloned(),
        };
        out.policies.insert(p.id.clone(), run);
    }
    for (i, p) in snapshot.rightsizing_policies.iter().enumerate() {
        let run = PolicyRun {
            queries: rs_status.get(&i).cloned(),
            unresolved_strategy: rs_plan.unresolved.get(&i).cloned(),
        };
        out.policies.insert(p.id.clone(), run);
    }
    out.workloads = CycleOutput::join(gpu_results, rs);
    out
}

/// One reconcile cycle, the same in every mode (in-cluster, standalone, `kerf recommend`):
/// batched queries and engines over `snapshot`, the failure reported, and the writes the cycle
/// calls for — for the caller's writer (the Lease-gated cluster writer or the in-memory one).
/// `recommendations` are the RightsizingRecommendations as the writer last left them. The store
/// the webhook reads is not touched here: every replica fills it from what the writes persist
/// ([`serve_persisted`]).
pub async fn reconcile_once<S: crate::metrics::MetricSource>(
    snapshot: &Snapshot,
    invalid: &[InvalidPolicy],
    recommendations: &[Arc<RightsizingRecommendation>],
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    metrics: &crate::telemetry::Metrics,
) -> (CycleOutput, Vec<WriteOp>) {
    let cycle = run_cycle(snapshot, source, now, step_seconds).await;
    let failures = cycle.query_failures();
    if !failures.is_empty() {
        metrics.reconcile_errors.inc();
        for (policy, e) in &failures {
            tracing::warn!(%policy, "{e}; the last recommendations stay in force");
        }
    }
    let ops = plan_writes(snapshot, &cycle, invalid, recommendations, now);
    metrics.reconcile_cycles.inc();
    (cycle, ops)
}

/// Fills the admission store from the persisted state — workload annotations and
/// RightsizingRecommendations (see [`serving_state_each`]) — and the GlobalConfiguration. Every
/// replica does this, the leader included, so every replica answers a review identically.
pub fn serve_persisted(
    store: &Store,
    snapshot: &Snapshot,
    recommendations: &[Arc<RightsizingRecommendation>],
) -> Vec<String> {
    store.set_global(snapshot.global.clone());
    store.set_conflicts(crate::core::conflict::blocked_workloads(recommendations));
    let held = held_back(snapshot, recommendations);
    // One workload at a time: each new state replaces the old one in place, so the store never
    // holds two generations.
    let mut present = HashSet::new();
    let warnings = serving_state_each(snapshot, recommendations, &held, |key, state| {
        present.insert(key.clone());
        store.put(key, state);
    });
    store.retain(|k| present.contains(k));
    warnings
}

/// The dependency name of Prometheus on `/readyz`.
pub(crate) const PROMETHEUS: &str = "prometheus";

/// Shows the cycle's query failures (or their end) on `/readyz`.
pub fn record_query_health(store: &Store, cycle: &CycleOutput) {
    let failures = cycle.query_failures();
    match failures.first() {
        None => store.health().clear_error(PROMETHEUS),
        Some((_, e)) => {
            let more = match failures.len() {
                1 => String::new(),
                n => format!(" (and {} more policies)", n - 1),
            };
            store
                .health()
                .record_error(PROMETHEUS, &format!("{e}{more}"));
        }
    }
}
