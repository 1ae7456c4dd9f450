//! The recommenders: each turns the shared snapshot and its metric answers into one part of a
//! workload's outcome. [`gpu`] sizes fractional GPUs (KAI); [`resources`] sizes CPU and memory
//! requests with HPA coordination.
//!
//! Every recommender has the same small interface ([`Recommender`], pure): it plans its batched
//! queries over the snapshot, takes their answers one by one as the IO glue
//! (`reconcile::run_cycle`) gets them, and adds its results to the cycle's per-workload
//! outcomes. The glue runs the registered recommenders in order — a later one may read what an
//! earlier one put in the [`CycleOutput`] (the CPU/memory recommendation shows the GPU values) —
//! and owns everything IO: concurrency, splitting refused queries, per-policy query status,
//! warnings. A new recommender (another accelerator, another resource) is one module
//! implementing [`Recommender`] plus one line in `run_cycle`'s list.

pub mod cycle;
pub mod gpu;
pub mod resources;

use jiff::Timestamp;

use crate::model::PolicyId;
use crate::query::{MetricError, RangeQuery, SeriesSet, WindowQuery, WindowSet};
use crate::recommenders::cycle::CycleOutput;
use crate::snapshot::Snapshot;

/// A query a recommender needs answered, borrowed from its plan.
#[derive(Clone, Copy, Debug)]
pub enum QueryRef<'p> {
    /// Samples on a grid (GPU signals, HPA replica history).
    Range(&'p RangeQuery),
    /// One value per (workload, container) over a window; the glue splits it when refused.
    Window(&'p WindowQuery),
    /// The per-step values of a window query over a few steps (the incremental history).
    Steps(&'p crate::query::window::StepQuery),
}

/// The answer to a [`QueryRef`], of the same variant.
#[derive(Debug)]
pub enum Answer {
    Range(SeriesSet),
    Window(WindowSet),
    Steps(crate::query::window::StepSet),
}

impl Answer {
    pub fn warnings(&self) -> &[String] {
        match self {
            Answer::Range(s) => &s.warnings,
            Answer::Window(s) => &s.warnings,
            Answer::Steps(s) => &s.warnings,
        }
    }
}

/// One planned query: the policy it serves (its status reports the query's failure) and what
/// it asks, for messages.
#[derive(Clone, Copy, Debug)]
pub struct PlannedQuery<'p> {
    pub policy: &'p PolicyId,
    /// The signal or metric, e.g. `gpu_compute`, `container_memory_working_set_bytes`.
    pub what: &'p str,
    pub query: QueryRef<'p>,
}

/// A recommender: plan (pure), then an [`Evaluation`] fed with the answers.
pub trait Recommender {
    /// Its batched queries and per-workload assignments for one cycle.
    type Plan: Send + Sync;
    /// The evaluation in progress, borrowing the snapshot and the plan.
    type Evaluation<'p>: Evaluation + Send
    where
        Self: 'p;

    /// What the recommender is called in messages and logs.
    fn name(&self) -> &'static str;

    fn plan(&self, snapshot: &Snapshot, now: Timestamp, step_seconds: i64) -> Self::Plan;

    /// The plan's queries, in the order they are asked.
    fn queries<'p>(&self, snapshot: &'p Snapshot, plan: &'p Self::Plan) -> Vec<PlannedQuery<'p>>;

    /// Starts evaluating; answers follow through [`Evaluation::answer`].
    fn start<'p>(
        &'p self,
        snapshot: &'p Snapshot,
        plan: &'p Self::Plan,
        now: Timestamp,
    ) -> Self::Evaluation<'p>;
}

/// A recommender's evaluation of one cycle.
pub trait Evaluation {
    /// The answer to query `index` of [`Recommender::queries`]; every query is answered once,
    /// in order, a few at a time, so an evaluation may evaluate and drop what it no longer
    /// needs as answers arrive.
    fn answer(&mut self, index: usize, answer: Result<Answer, MetricError>);

    /// Adds the results to `out`: one [`crate::recommenders::cycle::WorkloadOutcome`] per workload
    /// (joined with the earlier recommenders' ones) and a `PolicyRun` for each of its policies
    /// (the glue has filled in their query status).
    fn finish(self, out: &mut CycleOutput);
}
