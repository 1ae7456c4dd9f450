//! Filling the admission store before readiness (see [`crate::core::recovery`] for the rules).

use crate::reconcile::serve_persisted;
use crate::sources::kube::Reader;
use crate::state::{ObjectName, Store};

/// Waits for the reader's initial listings, then loads the store from the persisted state
/// (workload annotations, RightsizingRecommendations), owner links and the GlobalConfiguration.
/// Marks the store ready: from here on this replica answers admission like every other.
/// Returns the number of workloads served.
pub async fn prime_store(reader: &Reader, store: &Store) -> usize {
    reader.wait_synced().await;
    let (snapshot, _invalid) = reader.snapshot();
    for ((ns, rs), deployment) in &snapshot.replicaset_owners {
        store.replicaset_owners.insert(
            ObjectName::new(ns.as_str(), rs.as_str()),
            deployment.to_string(),
        );
    }
    for ((ns, job), cron) in &snapshot.job_owners {
        store
            .job_owners
            .insert(ObjectName::new(ns.as_str(), job.as_str()), cron.to_string());
    }
    for w in serve_persisted(store, &snapshot, &reader.recommendations()) {
        tracing::warn!("restart recovery: {w}");
    }
    store.health().annotations_read_back(store.len());
    tracing::info!(
        workloads = store.len(),
        "store recovered from the persisted state"
    );
    store.set_ready(true);
    store.len()
}
