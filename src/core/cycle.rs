//! What one cycle produced: one outcome per workload (GPU, CPU/memory and HPA from the
//! recommenders) and, per policy, the status of its queries and of its strategy.

use std::collections::{BTreeMap, HashMap};

use crate::core::model::{PolicyId, WorkloadKey};
use crate::core::recommenders::gpu::WorkloadResult;
use crate::core::recommenders::resources::RsResult;

/// Everything the recommenders said about one workload this cycle.
#[derive(Clone, Debug)]
pub struct WorkloadOutcome {
    pub key: WorkloadKey,
    /// The GPU recommender's result (a GPU reactive policy covers the workload).
    pub gpu: Option<WorkloadResult>,
    /// The CPU/memory recommender's result, with the HPA coordination outcome (a rightsizing
    /// policy covers the workload). Boxed: most GPU workloads have none, and an outcome is kept
    /// per workload for the whole cycle.
    pub resources: Option<Box<RsResult>>,
}

/// One policy's cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyRun {
    /// `None`: the policy issued no query; `Err`: one of its queries failed, and why.
    pub queries: Option<Result<(), String>>,
    /// Why its `automationStrategyRef` does not resolve (the policy is then not applied).
    pub unresolved_strategy: Option<String>,
}

#[derive(Debug, Default)]
pub struct CycleOutput {
    /// Workloads covered by a GPU policy first (in evaluation order), then those only a
    /// rightsizing policy covers.
    pub workloads: Vec<WorkloadOutcome>,
    pub policies: BTreeMap<PolicyId, PolicyRun>,
    /// Range queries issued.
    pub queries: usize,
    /// Non-fatal problems reported by the metric source.
    pub warnings: Vec<String>,
}

impl CycleOutput {
    /// One outcome per workload from the two recommenders' results.
    pub fn join(gpu: Vec<WorkloadResult>, resources: Vec<RsResult>) -> Vec<WorkloadOutcome> {
        let mut out: Vec<WorkloadOutcome> = Vec::with_capacity(gpu.len());
        let mut at: HashMap<WorkloadKey, usize> = HashMap::with_capacity(gpu.len());
        for r in gpu {
            at.insert(r.key.clone(), out.len());
            out.push(WorkloadOutcome {
                key: r.key.clone(),
                gpu: Some(r),
                resources: None,
            });
        }
        for r in resources {
            match at.get(&r.key) {
                Some(&i) => out[i].resources = Some(Box::new(r)),
                None => out.push(WorkloadOutcome {
                    key: r.key.clone(),
                    gpu: None,
                    resources: Some(Box::new(r)),
                }),
            }
        }
        out
    }

    /// The GPU recommender's results.
    pub fn gpu_results(&self) -> impl Iterator<Item = &WorkloadResult> {
        self.workloads.iter().filter_map(|w| w.gpu.as_ref())
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
    pub fn query_status(&self, policy: &PolicyId) -> Option<&Result<(), String>> {
        self.policies.get(policy).and_then(|p| p.queries.as_ref())
    }

    /// Every policy whose queries failed this cycle, with the reason.
    pub fn query_failures(&self) -> Vec<(PolicyId, String)> {
        self.policies
            .iter()
            .filter_map(|(id, p)| match &p.queries {
                Some(Err(e)) => Some((id.clone(), e.clone())),
                _ => None,
            })
            .collect()
    }
}
