//! The in-cluster reconcile loop: every GlobalConfiguration `gpuReactiveCheckInterval`, take a
//! snapshot of the watch-fed indexes, run one evaluation cycle against Prometheus, refresh the
//! store the webhook reads, and queue the writes (the writer performs them only while this
//! replica holds the Lease; every replica computes and serves).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::{OptionNames, PrometheusSettings};
use crate::core::snapshot::{InvalidPolicy, Snapshot};
use crate::core::writes::{CheckpointWrite, WriteOp};
use crate::metrics::prometheus::PrometheusSource;
use crate::reconcile::{PROMETHEUS, record_query_health, serve_persisted};
use crate::sources::kube::Reader;
use crate::writers::kube::WriterHandle;

use crate::state::Store;

pub struct ReconcilerConfig {
    /// kerf's own namespace (Lease, events' reporting instance), always protected
    /// (docs/design/runtime.md#r12).
    pub namespace: String,
    pub step_seconds: i64,
    /// How long the caches may stay unsynced while a list or watch keeps failing (403, a
    /// missing CRD, the API server unreachable) before the reconciler gives up.
    pub cache_sync_timeout: Duration,
}

/// How often every replica refreshes the store it serves from the persisted state.
pub const SERVE_REFRESH: Duration = Duration::from_secs(10);

/// Runs until something it needs stops: readiness after restart recovery, then every
/// [`SERVE_REFRESH`] the store is refilled from the persisted state, and — on the Lease holder
/// only — a cycle every interval (missed ticks are skipped; a changed interval or `spec.prometheus`
/// is picked up at the next cycle). Followers never query Prometheus: Prometheus sees one client
/// per cluster. Returns an error — it never returns `Ok` — when the caches cannot sync (see
/// [`ReconcilerConfig::cache_sync_timeout`]), a watch, the Lease or the writer task stopped, or
/// a cycle failed (`docs/design/runtime.md#r14`).
pub async fn run(
    client: ::kube::Client,
    store: Arc<Store>,
    cfg: ReconcilerConfig,
) -> Result<(), LoopError> {
    let reader = Reader::start_with_store(client.clone(), store.clone()).protecting(&cfg.namespace);
    let lease = crate::writers::kube::lease::Lease::spawn(
        client.clone(),
        &cfg.namespace,
        crate::writers::kube::lease::default_identity(),
        store.metrics().clone(),
        store.health().clone(),
    );
    let mut lease_alive = lease.clone();
    let writer: WriterHandle = crate::writers::kube::Writer::spawn(
        client.clone(),
        &cfg.namespace,
        lease.clone(),
        store.metrics().clone(),
    );
    let writer_alive = writer.clone();
    let work = async {
        wait_for_caches(&reader, cfg.cache_sync_timeout).await?;
        prime_store(&reader, &store).await;
        every_interval(&mut ReconcileCycle::new(
            reader.clone(),
            writer,
            lease,
            store.clone(),
            cfg.step_seconds,
        ))
        .await
    };
    tokio::select! {
        r = work => r,
        why = reader.stopped() => Err(LoopError::ReaderStopped(why)),
        () = async { while lease_alive.changed().await.is_ok() {} } => {
            Err(LoopError::LeaseStopped)
        }
        () = writer_alive.stopped() => Err(LoopError::WriterStopped),
    }
}

/// Why the in-cluster loop stopped: kerf exits 1 and a new process (or replica) takes over.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// Past the sync timeout, kinds whose list or watch keeps failing, each with its error.
    #[error("the caches did not sync within {seconds}s; still failing: {}", .failing.join("; "))]
    CachesNotSynced { seconds: u64, failing: Vec<String> },
    /// A watch task ended or panicked (its message).
    #[error("{0}")]
    ReaderStopped(String),
    #[error("the writer Lease task stopped")]
    LeaseStopped,
    #[error("the writer task stopped")]
    WriterStopped,
}

/// Waits for every cache's initial list. Past `timeout`, gives up as soon as a kind not synced
/// yet is failing (its last list or watch failed), naming each with its error; kinds that are
/// merely slow to list are waited for.
async fn wait_for_caches(reader: &Reader, timeout: Duration) -> Result<(), LoopError> {
    let Some(deadline) = tokio::time::Instant::now().checked_add(timeout) else {
        reader.wait_synced().await; // a timeout beyond any clock: no timeout
        return Ok(());
    };
    if tokio::time::timeout_at(deadline, reader.wait_synced())
        .await
        .is_ok()
    {
        return Ok(());
    }
    loop {
        let failing = reader.failing_unsynced();
        if !failing.is_empty() {
            return Err(LoopError::CachesNotSynced {
                seconds: timeout.as_secs(),
                failing: failing.iter().map(|(k, e)| format!("{k}: {e}")).collect(),
            });
        }
        if tokio::time::timeout(Duration::from_secs(1), reader.wait_synced())
            .await
            .is_ok()
        {
            return Ok(());
        }
    }
}

/// One reconcile cycle, run by [`every_interval`].
pub trait Cycle {
    /// Runs once; returns the interval to the next run.
    fn run_once(&mut self) -> impl Future<Output = Result<Duration, LoopError>> + Send;
}

/// The in-cluster cycle: compute (Lease holder only, every interval), then serve the persisted
/// state (every replica, every [`SERVE_REFRESH`]).
pub struct ReconcileCycle {
    reader: Reader,
    writer: WriterHandle,
    lease: tokio::sync::watch::Receiver<bool>,
    store: Arc<Store>,
    step_seconds: i64,
    /// The Prometheus source with the GlobalConfiguration `spec.prometheus` it was built for.
    source: Option<(PrometheusSettings, PrometheusSource)>,
    /// When the Lease holder computes next (`None`: at once, e.g. just after taking the Lease).
    next_compute: Option<tokio::time::Instant>,
    /// The CPU/memory usage history kept between this holder's cycles: a steady cycle asks
    /// Prometheus for the steps since the last one only (docs/metrics.md#incremental-history).
    history: crate::reconcile::History,
    /// Whether the checkpoint was read back (once, before the first computing cycle).
    history_loaded: bool,
    /// When the history was last checkpointed, and a hash of what was written.
    checkpointed: Option<(tokio::time::Instant, u64)>,
}

/// How often the Lease holder checkpoints the usage history: a new holder reads back at most
/// this much less than the old one had, and asks Prometheus for the steps since.
pub const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);
/// The largest checkpoint part (a ConfigMap holds at most 1 MiB).
pub const CHECKPOINT_PART_BYTES: usize = 900_000;

impl ReconcileCycle {
    pub fn new(
        reader: Reader,
        writer: WriterHandle,
        lease: tokio::sync::watch::Receiver<bool>,
        store: Arc<Store>,
        step_seconds: i64,
    ) -> Self {
        Self {
            reader,
            writer,
            lease,
            store,
            step_seconds,
            source: None,
            next_compute: None,
            history: Default::default(),
            history_loaded: false,
            checkpointed: None,
        }
    }

    /// Reads the usage history's checkpoint back, once: a new Lease holder, or a restarted
    /// kerf, asks Prometheus only for the steps since it. A checkpoint that cannot be read is
    /// logged; the windows are read again (paced, docs/metrics.md).
    #[tracing::instrument(name = "checkpoint_load", skip_all)]
    async fn load_history(&mut self) {
        if self.history_loaded {
            return;
        }
        match self.reader.history_checkpoints().await {
            Ok(parts) => {
                let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
                for part in &parts {
                    match crate::checkpoint::read_checkpoint(part) {
                        Ok(c) => history.restore(c),
                        Err(e) => tracing::warn!("usage history checkpoint unreadable: {e}"),
                    }
                }
                tracing::info!(
                    parts = parts.len(),
                    workloads = history.covered_workloads(),
                    "usage history read back from its checkpoint"
                );
                self.history_loaded = true;
            }
            Err(e) => tracing::warn!("usage history checkpoint not read ({e}): retrying"),
        }
    }

    /// The checkpoint of the usage history, every [`CHECKPOINT_INTERVAL`] and only when it
    /// changed.
    #[tracing::instrument(name = "checkpoint_save", skip_all, fields(parts = tracing::field::Empty, changed = tracing::field::Empty))]
    fn checkpoint_due(&mut self) -> Option<WriteOp> {
        let now = tokio::time::Instant::now();
        if self
            .checkpointed
            .as_ref()
            .is_some_and(|(at, _)| now.duration_since(*at) < CHECKPOINT_INTERVAL)
        {
            return None;
        }
        let parts = {
            let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
            crate::checkpoint::checkpoints(&history, CHECKPOINT_PART_BYTES)
        };
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            parts.hash(&mut h);
            h.finish()
        };
        let unchanged = self.checkpointed.is_some_and(|(_, p)| p == hash);
        self.checkpointed = Some((now, hash));
        let span = tracing::Span::current();
        span.record("parts", parts.len());
        span.record("changed", !unchanged);
        tracing::debug!("usage history checkpoint built");
        (!unchanged).then(|| WriteOp::Checkpoint(Box::new(CheckpointWrite { parts })))
    }

    /// Queries, engines and writes: the Lease holder's part.
    async fn compute(
        &mut self,
        snapshot: &Snapshot,
        invalid: &[InvalidPolicy],
    ) -> Result<(), LoopError> {
        let started = std::time::Instant::now();
        self.writer.set_read_only(snapshot.global.read_only);
        let settings = &snapshot.global.prometheus;
        // A changed setting (URL, timeout, credentials, TLS, headers…) takes effect now. One
        // that cannot work is logged and kept on /readyz, and the last working source goes on.
        let mut not_applied = None;
        if self.source.as_ref().is_none_or(|(s, _)| s != settings) {
            match PrometheusSource::connect(settings, OptionNames::Fields) {
                Ok(s) => {
                    let s = s.reporting_to(self.store.metrics().clone());
                    self.source = Some((settings.clone(), s));
                }
                Err(e) => {
                    let message = crate::support::redact::redact(&format!(
                        "spec.prometheus ({}): {e}",
                        settings.url
                    ));
                    tracing::error!("{message}");
                    self.store.health().record_error(PROMETHEUS, &message);
                    not_applied = Some(message);
                }
            }
        }
        self.load_history().await;
        if let Some((_, prom)) = &self.source {
            let recommendations = self.reader.recommendations();
            // The samples the cycle fetches are kept (bounded) for the /debug page's charts.
            let recording = crate::views::live::Recording::new(prom);
            let now = Timestamp::now();
            let c = crate::reconcile::Cycle {
                snapshot,
                invalid,
                recommendations: &recommendations,
                now,
                step_seconds: self.step_seconds,
                history: Some(&self.history),
            };
            let (cycle, ops) =
                crate::reconcile::reconcile_cycle(&c, &recording, self.store.metrics()).await;
            self.store.set_live(recording.view(snapshot, &cycle, now));
            super::report_history(&self.store, &self.history, &cycle);
            record_query_health(&self.store, &cycle);
            if let Some(message) = &not_applied {
                self.store.health().record_error(PROMETHEUS, message);
            }
            let cycle_id = cycle.id;
            drop(cycle);
            // Each change one unit: recorded as pending before its parts, applied once whole.
            let ops = crate::core::writes::pending::whole_changes(ops, now);
            for op in ops {
                if self.writer.send_planned(op, cycle_id).await.is_err() {
                    return Err(LoopError::WriterStopped);
                }
            }
            if let Some(op) = self.checkpoint_due() {
                if self.writer.send(op).await.is_err() {
                    return Err(LoopError::WriterStopped);
                }
            }
        } else {
            // No source to query: a failed cycle, counted as one.
            self.store.metrics().reconcile_errors.inc();
            self.store.metrics().cycle_done(started);
        }
        Ok(())
    }
}

impl Cycle for ReconcileCycle {
    /// Snapshot → (Lease holder, when due: queries → engines → writer queue) → store from the
    /// persisted state. Returns the time to the next refresh or computation, whichever is first.
    async fn run_once(&mut self) -> Result<Duration, LoopError> {
        let now = tokio::time::Instant::now();
        let (snapshot, invalid) = self.reader.snapshot();
        let leader = *self.lease.borrow();
        if !leader {
            self.next_compute = None;
        } else if self.next_compute.is_none_or(|t| t <= now) {
            self.compute(&snapshot, &invalid).await?;
            self.next_compute = Some(now + check_interval(&snapshot.global));
        }
        self.store.set_controllers(&snapshot.controllers);
        for w in serve_persisted(&self.store, &snapshot, &self.reader.recommendations()) {
            tracing::debug!("serving persisted state: {w}");
        }
        let until_compute = self
            .next_compute
            .map_or(SERVE_REFRESH, |t| t.saturating_duration_since(now));
        Ok(until_compute.min(SERVE_REFRESH))
    }
}

/// `gpuReactiveCheckInterval`, never under the documented minimum of one minute (the CRD rejects
/// less; this guards a configuration read some other way).
pub fn check_interval(global: &crate::api::GlobalConfigurationSpec) -> Duration {
    Duration::from_secs(global.gpu_reactive_check_interval.seconds().max(60))
}

/// Runs `cycle` until it fails, each run starting one interval after the previous one started.
/// `cycle` returns the interval from the GlobalConfiguration it just read, so a changed
/// `gpuReactiveCheckInterval` applies from the next wait. A cycle that overruns its interval is
/// followed at once by the next: missed ticks are skipped, never caught up in a burst.
pub async fn every_interval(cycle: &mut impl Cycle) -> Result<(), LoopError> {
    loop {
        let started = tokio::time::Instant::now();
        let interval = cycle.run_once().await?;
        tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
    }
}

/// Waits for the reader's initial listings, then loads the store from the persisted state
/// (workload annotations, RightsizingRecommendations), owner links and the GlobalConfiguration.
/// Marks the store ready: from here on this replica answers admission like every other.
/// Returns the number of workloads served.
pub async fn prime_store(reader: &Reader, store: &Store) -> usize {
    reader.wait_synced().await;
    let (snapshot, _invalid) = reader.snapshot();
    for ((ns, rs), deployment) in &snapshot.replicaset_owners {
        store.replicaset_owners.insert(
            crate::state::ObjectName::new(ns.as_str(), rs.as_str()),
            deployment.to_string(),
        );
    }
    for ((ns, job), cron) in &snapshot.job_owners {
        store.job_owners.insert(
            crate::state::ObjectName::new(ns.as_str(), job.as_str()),
            cron.to_string(),
        );
    }
    store.set_controllers(&snapshot.controllers);
    for w in super::serve_persisted(store, &snapshot, &reader.recommendations()) {
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

#[cfg(test)]
mod loop_tests {
    use std::collections::VecDeque;

    use tokio::time::Instant;

    use super::*;

    /// Each run takes `work`, then asks for `interval`; the script's end stops the loop.
    struct Scripted {
        script: VecDeque<(u64, u64)>,
        starts: Vec<Instant>,
    }

    impl Cycle for Scripted {
        async fn run_once(&mut self) -> Result<Duration, LoopError> {
            self.starts.push(Instant::now());
            let Some((work, interval)) = self.script.pop_front() else {
                // The script's end, as a stopped task ends the loop.
                return Err(LoopError::WriterStopped);
            };
            tokio::time::sleep(Duration::from_secs(work)).await;
            Ok(Duration::from_secs(interval))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn interval_changes_apply_from_the_next_wait_and_missed_ticks_are_skipped() {
        let mut cycle = Scripted {
            script: VecDeque::from([
                (1, 60),
                (1, 60),
                (1, 120), // interval raised
                (1, 120),
                (150, 120), // overruns its interval
                (1, 60),    // interval lowered
            ]),
            starts: Vec::new(),
        };
        let err = every_interval(&mut cycle).await.unwrap_err();
        assert!(matches!(err, LoopError::WriterStopped), "{err}");
        let gaps: Vec<u64> = cycle
            .starts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs())
            .collect();
        // After the overrun the next run starts at once (150 s), and only one run: no catch-up.
        assert_eq!(gaps, [60, 60, 120, 120, 150, 60]);
    }

    #[test]
    fn check_interval_is_the_global_configuration_interval_at_least_one_minute() {
        let global = |interval: &str| -> crate::api::GlobalConfigurationSpec {
            serde_json::from_value(serde_json::json!({ "gpuReactiveCheckInterval": interval }))
                .unwrap()
        };
        assert_eq!(check_interval(&global("5m")), Duration::from_secs(300));
        assert_eq!(check_interval(&global("1m")), Duration::from_secs(60));
        assert_eq!(check_interval(&global("10s")), Duration::from_secs(60));
        assert_eq!(
            check_interval(&Default::default()),
            Duration::from_secs(60),
            "default 1m"
        );
    }
}
