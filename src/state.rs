//! The in-memory store: written by the reconciler (or standalone evaluation), read by the
//! admission path. Reads never block on IO.

use std::sync::Arc;

use crate::telemetry::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use dashmap::DashMap;

use crate::api::GlobalConfigurationSpec;
use crate::core::hash::RandomState;
use crate::core::model::{WorkloadKey, WorkloadState};
use crate::health::Health;

/// Owner links the webhook needs to find a pod's top owner without calling the API server.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectName {
    pub namespace: String,
    pub name: String,
}

impl ObjectName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

#[derive(Default)]
pub struct Store {
    workloads: DashMap<WorkloadKey, Arc<WorkloadState>, RandomState>,
    /// ReplicaSet → owning Deployment name.
    pub replicaset_owners: DashMap<ObjectName, String, RandomState>,
    /// Job → owning CronJob name.
    pub job_owners: DashMap<ObjectName, String, RandomState>,
    /// (namespace, `<Kind>/<name>`) → its controller reference, for the other objects an owner
    /// chain passes through (`Snapshot::controllers`): admission resolves a pod of a KServe
    /// predictor to its InferenceService.
    pub controllers: DashMap<ObjectName, crate::core::owner::Link, RandomState>,
    global: ArcSwap<GlobalConfigurationSpec>,
    ready: AtomicBool,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    /// Workloads kerf does not write for a field conflict, with why (docs/gitops.md).
    conflicts: ArcSwap<Vec<(WorkloadKey, String)>>,
    /// The last cycle as `/debug` shows it (set where this process runs cycles).
    live: arc_swap::ArcSwapOption<crate::views::live::LiveView>,
}

impl Store {
    /// Replaces the controller links (`Snapshot::controllers`) with those of a fresh snapshot.
    pub fn set_controllers(
        &self,
        controllers: &std::collections::BTreeMap<
            (crate::core::model::Name, crate::core::model::Name),
            crate::core::owner::Link,
        >,
    ) {
        self.controllers.retain(|k, _| {
            controllers.contains_key(&(k.namespace.as_str().into(), k.name.as_str().into()))
        });
        for ((ns, key), link) in controllers {
            self.controllers
                .insert(ObjectName::new(ns.as_str(), key.as_str()), link.clone());
        }
    }

    /// A store with its own metrics registry (tests; `kerf recommend`).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A store reporting to `metrics`, the registry this process serves on `/metrics`.
    pub fn with_metrics(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            ..Self::default()
        })
    }

    /// The metrics registry of this process: the webhook, the health listener and the cycle
    /// report to it.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn get(&self, key: &WorkloadKey) -> Option<Arc<WorkloadState>> {
        self.workloads.get(key).map(|e| e.value().clone())
    }

    pub fn put(&self, key: WorkloadKey, state: WorkloadState) {
        self.workloads.insert(key, Arc::new(state));
        self.update_gauge();
    }

    pub fn remove(&self, key: &WorkloadKey) {
        self.workloads.remove(key);
        self.update_gauge();
    }

    /// Keeps only the workloads `keep` accepts.
    pub fn retain(&self, keep: impl Fn(&WorkloadKey) -> bool) {
        self.workloads.retain(|k, _| keep(k));
        self.update_gauge();
    }

    pub fn snapshot(&self) -> Vec<(WorkloadKey, Arc<WorkloadState>)> {
        let mut v: Vec<_> = self
            .workloads
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub fn len(&self) -> usize {
        self.workloads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workloads.is_empty()
    }

    pub fn global(&self) -> Arc<GlobalConfigurationSpec> {
        self.global.load_full()
    }

    pub fn set_global(&self, g: GlobalConfigurationSpec) {
        self.global.store(Arc::new(g));
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Workloads blocked for a field conflict, from the persisted state (the `/debug` page and
    /// `kerf_conflict_blocked_workloads`).
    pub fn set_conflicts(&self, conflicts: Vec<(WorkloadKey, String)>) {
        self.metrics
            .conflict_blocked_workloads
            .set(conflicts.len() as i64);
        self.conflicts.store(Arc::new(conflicts));
    }

    /// `kerf_recommendations{phase,reason}` from the persisted state: series of counts that went
    /// to zero are dropped, not kept at 0.
    pub fn count_recommendations(
        &self,
        recommendations: &[Arc<crate::core::persisted::PersistedRecommendation>],
    ) {
        let mut counts: std::collections::BTreeMap<(String, String), i64> = Default::default();
        for r in recommendations {
            let status = r.status.clone().unwrap_or_default();
            let phase = serde_json::to_value(status.phase)
                .ok()
                .and_then(|p| p.as_str().map(str::to_string))
                .unwrap_or_default();
            *counts
                .entry((phase, status.reason.unwrap_or_default()))
                .or_default() += 1;
        }
        let family = &self.metrics.recommendations;
        family.clear();
        for ((phase, reason), n) in counts {
            family
                .get_or_create(&crate::telemetry::RecommendationLabels { phase, reason })
                .set(n);
        }
    }

    pub fn conflicts(&self) -> Arc<Vec<(WorkloadKey, String)>> {
        self.conflicts.load_full()
    }

    /// The last cycle as `/debug` shows it, if this process ran one.
    pub fn live(&self) -> Option<Arc<crate::views::live::LiveView>> {
        self.live.load_full()
    }

    pub fn set_live(&self, view: crate::views::live::LiveView) {
        self.live.store(Some(Arc::new(view)));
    }

    /// What `/readyz` and `/healthz` report (filled by the background tasks).
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    fn update_gauge(&self) {
        self.metrics
            .store_workloads
            .set(self.workloads.len() as i64);
    }
}
