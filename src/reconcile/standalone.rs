//! The reconcile loop without an API server: objects from a directory of manifests
//! ([`crate::sources::dir`]), the one cycle ([`crate::reconcile::reconcile_once`]) and the
//! in-memory writer ([`crate::writers::memory`]). Used by `kerf serve --standalone`,
//! `kerf recommend` and `kerf bench scale`.

use std::path::{Path, PathBuf};

use jiff::Timestamp;

use crate::core::recommenders::cycle::CycleOutput;
use crate::core::snapshot::{InvalidPolicy, Snapshot};
use crate::metrics::MetricSource;
use crate::sources::dir::{ManifestError, Manifests, load_dir};
use crate::state::{ObjectName, Store};
use crate::writers::memory::MemoryWriter;

/// The owner links the webhook reads, from the manifests (in-cluster the reader's watches keep
/// them).
fn fill_owners(store: &Store, snapshot: &Snapshot) {
    store.replicaset_owners.clear();
    for ((ns, rs), d) in &snapshot.replicaset_owners {
        store
            .replicaset_owners
            .insert(ObjectName::new(ns.as_str(), rs.as_str()), d.to_string());
    }
    store.job_owners.clear();
    for ((ns, job), c) in &snapshot.job_owners {
        store
            .job_owners
            .insert(ObjectName::new(ns.as_str(), job.as_str()), c.to_string());
    }
    store.set_controllers(&snapshot.controllers);
}

/// One cycle's result in a mode without an API server.
#[derive(Debug)]
pub struct Evaluated {
    /// The objects as the cycle's writes left them (the manifests with kerf's writes laid over).
    pub snapshot: Snapshot,
    pub cycle: CycleOutput,
    /// Documents of the directory kerf ignored.
    pub notes: Vec<String>,
    /// Invalid policies, left out of the cycle (see [`Manifests::invalid`]).
    pub invalid: Vec<InvalidPolicy>,
}

/// The reconcile loop over a directory of manifests: the same cycle as in-cluster
/// ([`crate::reconcile::reconcile_once`]) with the in-memory writer, so kerf's writes of one
/// cycle (baselines, recommendations, applied requests, HPA targets) are what the next one reads.
#[derive(Debug)]
pub struct DirLoop {
    dir: PathBuf,
    writer: MemoryWriter,
    /// kerf's own namespace, protected whatever the manifests' GlobalConfiguration says.
    own_namespace: Option<String>,
    /// The usage history kept between cycles, for a loop that runs many
    /// ([`DirLoop::keeping_history`]); a one-shot `kerf recommend` asks each window whole.
    history: Option<crate::reconcile::History>,
}

impl DirLoop {
    /// The loop over `dir`, protecting kerf's own namespace when this process has one
    /// ([`crate::own_namespace::detect`] with the service-account namespace file).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let file = std::path::Path::new(crate::own_namespace::SERVICE_ACCOUNT_NAMESPACE_FILE);
        Self::protecting(dir, crate::own_namespace::detect(file))
    }

    /// The loop over `dir`, protecting `own_namespace` (docs/design/runtime.md#r12).
    pub fn protecting(dir: impl Into<PathBuf>, own_namespace: Option<String>) -> Self {
        Self {
            dir: dir.into(),
            writer: MemoryWriter::new(),
            own_namespace,
            history: None,
        }
    }

    /// Keeps the CPU/memory usage history between this loop's cycles: a steady cycle asks the
    /// metric source only for the steps since the last one (docs/metrics.md#incremental-history).
    pub fn keeping_history(mut self) -> Self {
        self.history = Some(Default::default());
        self
    }

    /// The directory read every cycle.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What kerf has written so far.
    pub fn writer(&self) -> &MemoryWriter {
        &self.writer
    }

    /// Reads the directory, lays kerf's earlier writes over it, runs one cycle at `now` against
    /// `source`, refreshes `store` (marking it ready) and applies the cycle's writes in memory.
    /// A directory that cannot be read is an error and changes nothing.
    pub async fn run_once<S: MetricSource>(
        &mut self,
        source: &S,
        now: Timestamp,
        step_seconds: i64,
        store: &Store,
    ) -> Result<Evaluated, ManifestError> {
        let manifests = self.read()?;
        Ok(self
            .run_on(manifests, source, now, step_seconds, store)
            .await)
    }

    /// The directory as the next cycle sees it (kerf's own namespace protected). A caller that
    /// needs the GlobalConfiguration before the cycle (to reach Prometheus) reads once and hands
    /// the result to [`DirLoop::run_on`].
    pub fn read(&self) -> Result<Manifests, ManifestError> {
        let mut manifests = load_dir(&self.dir)?;
        if let Some(ns) = &self.own_namespace {
            manifests.snapshot.global.protect(ns);
        }
        Ok(manifests)
    }

    /// One cycle over `manifests` (from [`DirLoop::read`]).
    pub async fn run_on<S: MetricSource>(
        &mut self,
        manifests: Manifests,
        source: &S,
        now: Timestamp,
        step_seconds: i64,
        store: &Store,
    ) -> Evaluated {
        for bad in &manifests.invalid {
            tracing::warn!(policy = %bad.id, "invalid policy left out: {}", bad.error);
        }
        let evaluated = run_in_memory(
            &mut self.writer,
            manifests,
            source,
            now,
            step_seconds,
            store,
            self.history.as_ref(),
        )
        .await;
        if let Some(history) = &self.history {
            crate::reconcile::report_history(store, history, &evaluated.cycle);
        }
        evaluated
    }
}

/// One cycle over `manifests` with `writer` (kerf's earlier writes laid over them, this cycle's
/// applied): refreshes `store` (marking it ready). `kerf recommend` runs it once with a fresh
/// writer, over manifests or a cluster's objects.
pub async fn run_in_memory<S: MetricSource>(
    writer: &mut MemoryWriter,
    manifests: Manifests,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    store: &Store,
    history: Option<&crate::reconcile::History>,
) -> Evaluated {
    let Manifests {
        snapshot,
        notes,
        invalid,
        ..
    } = manifests;
    fill_owners(store, &snapshot);
    // The samples the cycle fetches are kept (bounded) for the /debug page's charts.
    let recording = crate::views::live::Recording::new(source);
    let (snapshot, cycle, _) = in_memory_cycle_keeping(
        writer,
        snapshot,
        &invalid,
        &recording,
        now,
        step_seconds,
        store,
        history,
    )
    .await;
    store.set_live(recording.view(&snapshot, &cycle, now));
    store.set_ready(true);
    Evaluated {
        snapshot,
        cycle,
        notes,
        invalid,
    }
}

/// One reconcile cycle over freshly read objects with the in-memory writer: kerf's earlier
/// writes laid over `snapshot`, [`crate::reconcile::reconcile_once`], the writes applied, and
/// `store` served from what they persisted — as in a cluster. Returns the objects as the cycle's
/// writes left them, its output and the number of writes it planned.
pub async fn in_memory_cycle<S: MetricSource>(
    writer: &mut MemoryWriter,
    snapshot: Snapshot,
    invalid: &[InvalidPolicy],
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    store: &Store,
) -> (Snapshot, CycleOutput, usize) {
    in_memory_cycle_keeping(
        writer,
        snapshot,
        invalid,
        source,
        now,
        step_seconds,
        store,
        None,
    )
    .await
}

/// [`in_memory_cycle`] keeping the usage history in `history` between cycles.
#[allow(clippy::too_many_arguments)]
pub async fn in_memory_cycle_keeping<S: MetricSource>(
    writer: &mut MemoryWriter,
    mut snapshot: Snapshot,
    invalid: &[InvalidPolicy],
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    store: &Store,
    history: Option<&crate::reconcile::History>,
) -> (Snapshot, CycleOutput, usize) {
    writer.overlay(&mut snapshot);
    let recommendations = writer.recommendations();
    let c = crate::reconcile::Cycle {
        snapshot: &snapshot,
        invalid,
        recommendations: &recommendations,
        now,
        step_seconds,
        history,
    };
    let (cycle, ops) = crate::reconcile::reconcile_cycle(&c, source, store.metrics()).await;
    drop(recommendations);
    crate::reconcile::record_query_health(store, &cycle);
    let planned = ops.len();
    writer.apply_all(ops, snapshot.global.read_only, now);
    // The objects as the writes left them (in place: no second copy of the workloads).
    writer.overlay(&mut snapshot);
    for w in crate::reconcile::serve_persisted(store, &snapshot, &writer.recommendations()) {
        tracing::debug!("serving persisted state: {w}");
    }
    (snapshot, cycle, planned)
}
