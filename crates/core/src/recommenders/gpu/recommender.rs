//! The GPU recommender behind the common [`Recommender`] interface: the plan and the streaming
//! evaluation of this module, unchanged.

use jiff::Timestamp;

use super::{Plan, StreamingEvaluation};
use crate::query::MetricError;
use crate::recommenders::cycle::CycleOutput;
use crate::recommenders::{Answer, Evaluation, PlannedQuery, QueryRef, Recommender};
use crate::snapshot::Snapshot;

/// GPU reactive policies (docs/design/gpu-engine.md).
pub struct Gpu;

pub struct GpuEvaluation<'p> {
    plan: &'p Plan,
    snapshot: &'p Snapshot,
    now: Timestamp,
    streaming: StreamingEvaluation<'p>,
}

impl Recommender for Gpu {
    type Plan = Plan;
    type Evaluation<'p> = GpuEvaluation<'p>;

    fn name(&self) -> &'static str {
        "gpu"
    }

    fn plan(&self, snapshot: &Snapshot, now: Timestamp, step_seconds: i64) -> Plan {
        super::plan(snapshot, now, step_seconds)
    }

    fn queries<'p>(&self, snapshot: &'p Snapshot, plan: &'p Plan) -> Vec<PlannedQuery<'p>> {
        plan.queries
            .iter()
            .map(|(pi, signal, q)| PlannedQuery {
                policy: &snapshot.gpu_policies[*pi].id,
                what: signal.as_str(),
                query: QueryRef::Range(q),
            })
            .collect()
    }

    fn start<'p>(
        &'p self,
        snapshot: &'p Snapshot,
        plan: &'p Plan,
        now: Timestamp,
    ) -> GpuEvaluation<'p> {
        GpuEvaluation {
            plan,
            snapshot,
            now,
            streaming: StreamingEvaluation::new(snapshot, plan, now),
        }
    }
}

impl Evaluation for GpuEvaluation<'_> {
    fn answer(&mut self, index: usize, answer: Result<Answer, MetricError>) {
        let (pi, signal, _) = &self.plan.queries[index];
        let set = match answer {
            Ok(Answer::Range(set)) => Some(set),
            _ => None,
        };
        self.streaming.answer(*pi, *signal, set);
    }

    fn finish(self, out: &mut CycleOutput) {
        let mut missing = super::policy_missing_samples(
            self.snapshot,
            self.plan,
            self.streaming.pods_found(),
            self.now,
        );
        let mut results = self.streaming.finish();
        // The missing samples are said with the file's range, known to the cycle only.
        // Taken as they are said: the results are held to the end of the cycle.
        for r in &mut results {
            for m in std::mem::take(&mut r.missing_samples) {
                r.reasons.push(m.message(out.coverage));
            }
        }
        out.add_gpu(results);
        for (i, p) in self.snapshot.gpu_policies.iter().enumerate() {
            let run = out.policies.entry(p.id.clone()).or_default();
            run.unresolved_strategy = self.plan.unresolved.get(&i).cloned();
            run.missing_samples = missing.remove(&i);
        }
    }
}
