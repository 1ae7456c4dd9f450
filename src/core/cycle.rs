//! What one cycle produced: the engines' results per workload and each policy's query status.

use std::collections::BTreeMap;

use crate::core::evaluate::WorkloadResult;
use crate::core::rs_evaluate::RsResult;
use crate::core::snapshot::Snapshot;

#[derive(Debug, Default)]
pub struct CycleOutput {
    pub results: Vec<WorkloadResult>,
    pub rightsizing: Vec<RsResult>,
    /// Per GPU policy index: Err(reason) when one of its queries failed.
    pub prometheus: BTreeMap<usize, Result<(), String>>,
    /// Per rightsizing policy index: Err(reason) when one of its queries failed.
    pub rs_prometheus: BTreeMap<usize, Result<(), String>>,
    /// Per GPU policy index whose automationStrategyRef does not resolve.
    pub unresolved_strategies: BTreeMap<usize, String>,
    /// Range queries issued.
    pub queries: usize,
    /// Non-fatal problems reported by the metric source.
    pub warnings: Vec<String>,
}

impl CycleOutput {
    /// Every policy whose queries failed this cycle, with the reason.
    pub fn query_failures(
        &self,
        snapshot: &Snapshot,
    ) -> Vec<(crate::core::model::PolicyId, String)> {
        let gpu = self.prometheus.iter().filter_map(|(pi, r)| {
            r.as_ref()
                .err()
                .map(|e| (snapshot.gpu_policies[*pi].id.clone(), e.clone()))
        });
        let rs = self.rs_prometheus.iter().filter_map(|(pi, r)| {
            r.as_ref()
                .err()
                .map(|e| (snapshot.rightsizing_policies[*pi].id.clone(), e.clone()))
        });
        gpu.chain(rs).collect()
    }
}
