//! Filling the admission store before readiness (see [`crate::core::recovery`] for the rules).

use crate::core::recovery::{Recovered, recover};
use crate::kube::reader::Reader;
use crate::state::{ObjectName, Store};

/// Waits for the reader's initial listings, then loads the store from the persisted
/// annotations: workload states, owner links and the GlobalConfiguration. Marks the store ready:
/// from here on this replica answers admission like the leader. Returns what was loaded.
pub async fn prime_store(reader: &Reader, store: &Store) -> Recovered {
    reader.wait_synced().await;
    let (snapshot, _invalid) = reader.snapshot();
    for ((ns, rs), deployment) in &snapshot.replicaset_owners {
        store
            .replicaset_owners
            .insert(ObjectName::new(ns, rs), deployment.clone());
    }
    for ((ns, job), cron) in &snapshot.job_owners {
        store
            .job_owners
            .insert(ObjectName::new(ns, job), cron.clone());
    }
    store.set_global(snapshot.global.clone());
    let recovered = recover(&snapshot);
    for w in &recovered.warnings {
        tracing::warn!("restart recovery: {w}");
    }
    store.replace_all(recovered.entries.iter().cloned().collect());
    store
        .health()
        .annotations_read_back(recovered.entries.len());
    tracing::info!(
        workloads = recovered.entries.len(),
        "store recovered from workload annotations"
    );
    store.set_ready(true);
    recovered
}
