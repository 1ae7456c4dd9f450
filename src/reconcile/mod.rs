//! One evaluation cycle: plan (pure) → batched metric queries (IO) → engines (pure).
//! Shared by `kerf recommend`, standalone `kerf serve` and the in-cluster reconciler.

pub mod cluster;
pub mod standalone;

use jiff::Timestamp;

use crate::core::hash::{HashSet, HashSetExt};
use crate::core::persisted::PersistedRecommendation;
use crate::core::recommenders::cycle::{CycleOutput, QueryFailed};
use crate::core::recommenders::gpu::recommender::Gpu;
use crate::core::recommenders::resources::Resources;
use crate::core::recommenders::{Answer, Evaluation, PlannedQuery, QueryRef, Recommender};
use crate::core::recovery::serving_state_each;
use crate::core::snapshot::{InvalidPolicy, Snapshot};
use crate::core::writes::WriteOp;
pub use crate::core::writes::{
    held_back, plan_writes, recommendation_name, rollback_requested, rolled_back,
};
use crate::state::Store;
use std::sync::Arc;

use crate::metrics::{Batch, MetricError, MetricSource, asked_splitting};

/// Queries in flight at once (Prometheus handles a few concurrent queries well; a refused
/// window query is split and retried within its slot, so this bounds the splits too).
const QUERY_CONCURRENCY: usize = 4;

/// The usage history a long-running loop keeps between its cycles.
pub type History =
    Arc<std::sync::Mutex<crate::core::recommenders::resources::summary::HistoryStore>>;

/// What asking one query cost, beside its answer.
#[derive(Default)]
struct Asked {
    queries: usize,
    splits: usize,
    samples: u64,
}

/// Asks one batch, split when the source refuses it ([`asked_splitting`]), with what it cost.
async fn batched<S: MetricSource, Q: Batch>(
    source: &S,
    q: &Q,
    answer: fn(Q::Answer) -> Answer,
) -> (Asked, Result<Answer, MetricError>) {
    match asked_splitting(source, q).await {
        Ok(set) => {
            let (queries, splits, samples) = Q::counts(&set);
            let asked = Asked {
                queries,
                splits,
                samples: samples.unwrap_or(0),
            };
            (asked, Ok(answer(set)))
        }
        Err(e) => {
            let asked = Asked {
                queries: 1,
                ..Default::default()
            };
            (asked, Err(e))
        }
    }
}

/// Asks one planned query; a window query the source refuses as too big is split and retried.
async fn ask<S: MetricSource>(source: &S, q: QueryRef<'_>) -> (Asked, Result<Answer, MetricError>) {
    match q {
        QueryRef::Range(q) => {
            let asked = Asked {
                queries: 1,
                ..Default::default()
            };
            (asked, source.range_query(q).await.map(Answer::Range))
        }
        QueryRef::Steps(q) => batched(source, q, Answer::Steps).await,
        QueryRef::Window(q) => batched(source, q, Answer::Window).await,
    }
}

/// Records one answer: its cost, warnings, and the query status of its policy.
fn record(
    out: &mut CycleOutput,
    q: &PlannedQuery<'_>,
    asked: &Asked,
    answer: &Result<Answer, MetricError>,
) {
    out.queries += asked.queries;
    out.query_splits += asked.splits;
    out.samples_loaded += asked.samples;
    let run = out.policies.entry(q.policy.clone()).or_default();
    match answer {
        Ok(a) => {
            out.queries_answered += 1;
            run.queries.get_or_insert(Ok(()));
            let warnings = a.warnings().iter();
            out.warnings
                .extend(warnings.map(|w| format!("{} {}: {w}", q.policy, q.what)));
        }
        Err(e) => {
            out.queries_failed += 1;
            run.queries = Some(Err(QueryFailed {
                policy: q.policy.clone(),
                what: q.what.to_string(),
                reason: e.to_string(),
            }));
        }
    }
}

/// Runs one recommender over the snapshot: its plan's queries `QUERY_CONCURRENCY` at a time,
/// each chunk's answers handed over as they arrive (so a streaming recommender holds only the
/// samples in flight, docs/performance.md), then its results into `out`.
async fn run_recommender<R: Recommender, S: MetricSource>(
    recommender: &R,
    snapshot: &Snapshot,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    out: &mut CycleOutput,
) {
    let plan = recommender.plan(snapshot, now, step_seconds);
    let queries = recommender.queries(snapshot, &plan);
    let mut evaluation = recommender.start(snapshot, &plan, now);
    for (c, chunk) in queries.chunks(QUERY_CONCURRENCY).enumerate() {
        // Boxed futures keep the caller's future `Send` for `tokio::spawn`.
        let asks: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>>> = chunk
            .iter()
            .map(|q| Box::pin(ask(source, q.query)) as std::pin::Pin<Box<_>>)
            .collect();
        for (k, (asked, answer)) in futures::future::join_all(asks)
            .await
            .into_iter()
            .enumerate()
        {
            let i = c * QUERY_CONCURRENCY + k;
            record(out, &queries[i], &asked, &answer);
            evaluation.answer(i, answer);
        }
    }
    drop(queries);
    evaluation.finish(out);
    tracing::debug!(recommender = recommender.name(), "recommender done");
}

/// One cycle: every registered recommender, in order, over the shared snapshot — the GPU one
/// first, since the CPU/memory recommendation shows its values. Registering a recommender is
/// one line here (docs: DEVELOPERS.md, `core::recommenders`).
pub async fn run_cycle<S: MetricSource>(
    snapshot: &Snapshot,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
) -> CycleOutput {
    run_cycle_keeping(snapshot, source, now, step_seconds, None).await
}

/// [`run_cycle`] with the CPU/memory usage history kept in `history` between cycles
/// (docs/metrics.md#incremental-history): a steady cycle reads only the steps since the last.
#[tracing::instrument(name = "recommenders", skip_all, fields(
    at = %now,
    gpu_policies = snapshot.gpu_policies.len(),
    workloads = snapshot.workloads.len(),
    queries = tracing::field::Empty,
))]
pub async fn run_cycle_keeping<S: MetricSource>(
    snapshot: &Snapshot,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    history: Option<&History>,
) -> CycleOutput {
    let mut out = CycleOutput {
        coverage: source.coverage(),
        ..Default::default()
    };
    run_recommender(&Gpu, snapshot, source, now, step_seconds, &mut out).await;
    let resources = history.map_or_else(Resources::default, |h| Resources::incremental(h.clone()));
    run_recommender(&resources, snapshot, source, now, step_seconds, &mut out).await;
    tracing::Span::current().record("queries", out.queries);
    tracing::debug!(
        queries = out.queries,
        splits = out.query_splits,
        samples_loaded = out.samples_loaded,
        "cycle queries: {} sent, {} refused batches split, {} samples loaded by the metric source",
        out.queries,
        out.query_splits,
        out.samples_loaded
    );
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
    recommendations: &[Arc<PersistedRecommendation>],
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    metrics: &crate::telemetry::Metrics,
) -> (CycleOutput, Vec<WriteOp>) {
    let cycle = Cycle {
        snapshot,
        invalid,
        recommendations,
        now,
        step_seconds,
        history: None,
    };
    reconcile_cycle(&cycle, source, metrics).await
}

/// What one reconcile cycle works on.
pub struct Cycle<'a> {
    pub snapshot: &'a Snapshot,
    pub invalid: &'a [InvalidPolicy],
    pub recommendations: &'a [Arc<PersistedRecommendation>],
    pub now: Timestamp,
    pub step_seconds: i64,
    /// The usage history a long-running loop keeps between cycles (docs/metrics.md).
    pub history: Option<&'a History>,
}

/// The next cycle's id: counted from 1 in each process, so a cycle's lines and its writes'
/// share one number in the log.
fn next_cycle_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// [`reconcile_once`] over `c`, its usage history kept when it has one: queries, recommenders
/// and write planning inside one `cycle` span whose `id` the planned writes carry
/// ([`CycleOutput::id`]).
#[tracing::instrument(name = "cycle", skip_all, fields(
    id = tracing::field::Empty,
    at = %c.now,
    writes = tracing::field::Empty,
))]
pub async fn reconcile_cycle<S: crate::metrics::MetricSource>(
    c: &Cycle<'_>,
    source: &S,
    metrics: &crate::telemetry::Metrics,
) -> (CycleOutput, Vec<WriteOp>) {
    let (snapshot, invalid, recommendations, now) =
        (c.snapshot, c.invalid, c.recommendations, c.now);
    let started = std::time::Instant::now();
    let id = next_cycle_id();
    tracing::Span::current().record("id", id);
    let mut cycle = run_cycle_keeping(snapshot, source, now, c.step_seconds, c.history).await;
    cycle.id = id;
    let failures = cycle.query_failures();
    if !failures.is_empty() {
        metrics.reconcile_errors.inc();
        for (policy, e) in &failures {
            tracing::warn!(%policy, "{e}; the last recommendations stay in force");
        }
    }
    let ops = tracing::debug_span!("plan_writes")
        .in_scope(|| plan_writes(snapshot, &cycle, invalid, recommendations, now));
    tracing::Span::current().record("writes", ops.len());
    tracing::debug!(
        queries = cycle.queries,
        writes = ops.len(),
        "cycle planned {} write(s)",
        ops.len()
    );
    metrics.cycle_done(started);
    (cycle, ops)
}

/// Fills the admission store from the persisted state — workload annotations and
/// RightsizingRecommendations (see [`serving_state_each`]) — and the GlobalConfiguration. Every
/// replica does this, the leader included, so every replica answers a review identically.
pub fn serve_persisted(
    store: &Store,
    snapshot: &Snapshot,
    recommendations: &[Arc<PersistedRecommendation>],
) -> Vec<String> {
    store.set_global(snapshot.global.clone());
    store.set_conflicts(crate::core::writes::conflict::blocked_workloads(
        recommendations,
    ));
    store.count_recommendations(recommendations);
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

/// How far the usage history is, on `/readyz` and `kerf_usage_history_workloads`: the workloads
/// kept, and those the cycle still answered by the window queries (the Lease holder's loop and
/// the standalone one).
pub fn report_history(store: &Store, history: &History, cycle: &CycleOutput) {
    let kept = history
        .lock()
        .map(|h| h.covered_workloads())
        .unwrap_or_default();
    let evaluated = cycle.resource_results().count();
    let reading = evaluated.saturating_sub(kept);
    store.health().history_progress(kept, reading);
    for (state, n) in [("kept", kept), ("reading", reading)] {
        let labels = crate::telemetry::HistoryLabels {
            state: state.into(),
        };
        let gauge = store
            .metrics()
            .history_workloads
            .get_or_create(&labels)
            .clone();
        gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
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
