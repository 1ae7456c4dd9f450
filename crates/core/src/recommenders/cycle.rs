//! What one cycle produced: one outcome per workload (GPU, CPU/memory and HPA from the
//! recommenders) and, per policy, the status of its queries and of its strategy.

use std::collections::BTreeMap;

use crate::hash::HashMap;

use crate::model::{PolicyId, WorkloadKey};
use crate::recommenders::gpu::WorkloadResult;
use crate::recommenders::gpu::samples::MissingSamples;
use crate::recommenders::resources::workload::RsResult;

/// Everything the recommenders said about one workload this cycle: at least one result (the
/// workload's key is the results', not a third copy).
#[derive(Clone, Debug)]
pub struct WorkloadOutcome {
    /// The GPU recommender's result (a GPU reactive policy covers the workload). Boxed as the
    /// recommender built it: moving results into outcomes then copies no result.
    pub gpu: Option<Box<WorkloadResult>>,
    /// The CPU/memory recommender's result, with the HPA coordination outcome (a rightsizing
    /// policy covers the workload). Boxed: most GPU workloads have none, and an outcome is kept
    /// per workload for the whole cycle.
    pub resources: Option<Box<RsResult>>,
}

impl WorkloadOutcome {
    /// The workload.
    pub fn key(&self) -> &WorkloadKey {
        match (&self.gpu, &self.resources) {
            (Some(g), _) => &g.key,
            (None, Some(r)) => &r.key,
            // `CycleOutput::add` makes an outcome only with a result.
            (None, None) => &NO_RESULT,
        }
    }
}

/// The key of an outcome without a result (none is made).
static NO_RESULT: WorkloadKey = WorkloadKey {
    namespace: crate::model::Name::new_static(""),
    kind: kerf_api::WorkloadKind::Deployment,
    name: crate::model::Name::new_static(""),
};

/// A query of a policy that failed this cycle: which, and the source's answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{policy} {what} query failed: {reason}")]
pub struct QueryFailed {
    pub policy: PolicyId,
    /// The signal or metric asked.
    pub what: String,
    /// The metric source's error.
    pub reason: String,
}

/// One policy's cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyRun {
    /// `None`: the policy issued no query; `Err`: one of its queries failed, and why.
    pub queries: Option<Result<(), QueryFailed>>,
    /// Why its `automationStrategyRef` does not resolve (the policy is then not applied).
    pub unresolved_strategy: Option<String>,
    /// GPU policies whose queries were answered: the signals some selected pod had no sample
    /// of (empty: every pod had samples). `None`: nothing was read.
    pub missing_samples: Option<Vec<MissingSamples>>,
}

#[derive(Debug, Default)]
pub struct CycleOutput {
    /// The cycle's id, in its span and in the span of every write it planned (set by the loop
    /// that runs it; 0 where none does).
    pub id: u64,
    /// Workloads covered by a GPU policy first (in evaluation order), then those only a
    /// rightsizing policy covers.
    pub workloads: Vec<WorkloadOutcome>,
    pub policies: BTreeMap<PolicyId, PolicyRun>,
    /// Queries sent to the metric source (a refused batch's halves included).
    pub queries: usize,
    /// Times a window query the source refused as too big was split in two.
    pub query_splits: usize,
    /// Samples the metric source says it loaded for the window queries (Prometheus `stats`).
    pub samples_loaded: u64,
    /// Non-fatal problems reported by the metric source.
    pub warnings: Vec<String>,
    /// Planned queries answered and failed (a split window query counts once).
    pub queries_answered: usize,
    pub queries_failed: usize,
    /// The first and last sample time of a metrics file (`--metrics`), said beside "no
    /// samples"; none from Prometheus.
    pub coverage: Option<(jiff::Timestamp, jiff::Timestamp)>,
}

impl CycleOutput {
    /// Adds the GPU recommender's results, one outcome per workload, in evaluation order.
    pub fn add_gpu(&mut self, gpu: Vec<Box<WorkloadResult>>) {
        self.add(gpu, |r| &r.key, |w, r| w.gpu = Some(r));
    }

    /// Adds the CPU/memory recommender's results to the workloads' outcomes (a workload no
    /// earlier recommender covers gets its own, after the others).
    pub fn add_resources(&mut self, resources: Vec<Box<RsResult>>) {
        self.add(resources, |r| &r.key, |w, r| w.resources = Some(r));
    }

    /// Joins one recommender's results into the per-workload outcomes by workload key. The
    /// index borrows the keys (one key copy and one entry per workload were ≈20 MB at 150k
    /// pods); a key first seen here gets a new outcome, in the order of the results.
    fn add<R>(
        &mut self,
        results: Vec<R>,
        key: impl Fn(&R) -> &WorkloadKey,
        set: impl Fn(&mut WorkloadOutcome, R),
    ) {
        let targets: Vec<usize> = {
            let mut at: HashMap<&WorkloadKey, usize> = self
                .workloads
                .iter()
                .enumerate()
                .map(|(i, w)| (w.key(), i))
                .collect();
            let mut next = self.workloads.len();
            results
                .iter()
                .map(|r| {
                    *at.entry(key(r)).or_insert_with(|| {
                        next += 1;
                        next - 1
                    })
                })
                .collect()
        };
        self.workloads.reserve(results.len());
        for (r, i) in results.into_iter().zip(targets) {
            if i == self.workloads.len() {
                self.workloads.push(WorkloadOutcome {
                    gpu: None,
                    resources: None,
                });
            }
            set(&mut self.workloads[i], r);
        }
    }

    /// The GPU recommender's results.
    pub fn gpu_results(&self) -> impl Iterator<Item = &WorkloadResult> {
        self.workloads.iter().filter_map(|w| w.gpu.as_deref())
    }

    /// The CPU/memory recommender's results.
    pub fn resource_results(&self) -> impl Iterator<Item = &RsResult> {
        self.workloads.iter().filter_map(|w| w.resources.as_deref())
    }

    pub fn resource_results_mut(&mut self) -> impl Iterator<Item = &mut RsResult> {
        self.workloads
            .iter_mut()
            .filter_map(|w| w.resources.as_deref_mut())
    }

    /// The status of `policy`'s queries, if it issued any.
    pub fn query_status(&self, policy: &PolicyId) -> Option<&Result<(), QueryFailed>> {
        self.policies.get(policy).and_then(|p| p.queries.as_ref())
    }

    /// Every query of the cycle failed: nothing was read at all.
    pub fn every_query_failed(&self) -> bool {
        self.queries_failed > 0 && self.queries_answered == 0
    }

    /// Every policy whose queries failed this cycle, with the reason.
    pub fn query_failures(&self) -> Vec<(PolicyId, QueryFailed)> {
        self.policies
            .iter()
            .filter_map(|(id, p)| match &p.queries {
                Some(Err(e)) => Some((id.clone(), e.clone())),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommenders::resources::container::PolicyError;
    use crate::recommenders::resources::workload::EvaluationError;
    use kerf_api::WorkloadKind;

    /// A result joins the cycle's outcomes without a copy: the outcome holds the box the
    /// recommender built (25,000 results were held twice for a moment when each was boxed here).
    #[test]
    fn a_result_joins_the_outcomes_without_a_copy() {
        let result = Box::new(RsResult {
            key: WorkloadKey::new("shop", WorkloadKind::Deployment, "web"),
            policy: PolicyId {
                kind: "RightsizingPolicy".into(),
                namespace: Some("shop".into()),
                name: "rs".into(),
            },
            outcome: Err(EvaluationError::Policy(PolicyError {
                field: "spec".into(),
                message: "x".into(),
            })),
            metrics_unavailable: false,
        });
        let built: *const RsResult = &*result;
        let mut out = CycleOutput::default();
        out.add_resources(vec![result]);
        let joined = out.resource_results().next().unwrap();
        assert!(std::ptr::eq(built, joined));
    }
}
