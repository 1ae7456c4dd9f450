//! The incremental usage history against the whole-window method, cycle after cycle, over the
//! file source: a history kept between cycles (each asking only the steps since the last and the
//! steps that left the window) gives the recommendation the whole-window queries give at the
//! same moment, within the histograms' error — over hours of sliding, through a rollout, an OOM
//! kill, a CPU spike of a few minutes and a workload that appears mid-window.

use std::sync::{Arc, Mutex};

use crate::usage_history::{HOURS, SCRAPE, T0, assert_close, openmetrics, snapshot};
use kerf::metrics::file::FileSource;
use kerf::reconcile::{run_cycle, run_cycle_keeping};

#[tokio::test]
async fn a_kept_history_gives_the_whole_window_answer_cycle_after_cycle() {
    let snapshot = snapshot();
    let source = FileSource::from_str(&openmetrics()).unwrap();
    let history = Arc::new(Mutex::new(Default::default()));
    let mut compared = 0;
    let mut t = T0 + 600;
    while t <= T0 + HOURS * 3600 {
        let now = jiff::Timestamp::from_second(t).unwrap();
        let full = run_cycle(&snapshot, &source, now, SCRAPE).await;
        let kept = run_cycle_keeping(&snapshot, &source, now, SCRAPE, Some(&history)).await;
        compared += assert_close(&full, &kept, now);
        t += 60;
    }
    assert!(compared > 400, "{compared}");
    let h = history.lock().unwrap();
    let containers: usize = h.workloads.values().map(|w| w.containers.len()).sum();
    assert_eq!(containers, 2, "web's and late's container");
}

/// A source that counts the whole-window queries and the longest step query it is asked.
struct Watching {
    inner: FileSource,
    windows: std::sync::atomic::AtomicUsize,
    longest_steps: std::sync::atomic::AtomicI64,
}

impl kerf::metrics::MetricSource for Watching {
    async fn range_query(
        &self,
        q: &kerf::metrics::RangeQuery,
    ) -> Result<kerf::metrics::SeriesSet, kerf::metrics::MetricError> {
        self.inner.range_query(q).await
    }

    async fn window_query(
        &self,
        q: &kerf::metrics::WindowQuery,
    ) -> Result<kerf::metrics::WindowSet, kerf::metrics::MetricError> {
        self.windows
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.window_query(q).await
    }

    async fn step_query(
        &self,
        q: &kerf::metrics::window::StepQuery,
    ) -> Result<kerf::metrics::window::StepSet, kerf::metrics::MetricError> {
        self.longest_steps
            .fetch_max(q.to - q.from, std::sync::atomic::Ordering::SeqCst);
        self.inner.step_query(q).await
    }
}

/// A kerf restarted with the checkpoint of the history (its writer carried it) reads no window
/// again: its first cycle asks only for the steps since the checkpoint, and recommends as the
/// whole window does.
#[tokio::test]
async fn a_restart_with_the_checkpoint_reads_no_window_again() {
    use kerf::checkpoint::{checkpoints, read_checkpoint};
    use kerf::core::recommenders::resources::summary::HistoryStore;
    let snapshot = snapshot();
    let source = FileSource::from_str(&openmetrics()).unwrap();
    let history = Arc::new(Mutex::new(HistoryStore::default()));
    let before = jiff::Timestamp::from_second(T0 + 4 * 3600).unwrap();
    // The warm-up reads a third of the workloads' windows a cycle (at least one): two cycles.
    for _ in 0..2 {
        run_cycle_keeping(&snapshot, &source, before, SCRAPE, Some(&history)).await;
    }
    assert_eq!(history.lock().unwrap().covered_workloads(), 2);
    let saved = checkpoints(&history.lock().unwrap(), 1 << 20);
    assert!(!saved.is_empty());

    let mut restored = HistoryStore::default();
    for c in &saved {
        restored.restore(read_checkpoint(c).unwrap());
    }
    let restored = Arc::new(Mutex::new(restored));
    let watching = Watching {
        inner: FileSource::from_str(&openmetrics()).unwrap(),
        windows: Default::default(),
        longest_steps: Default::default(),
    };
    let now = jiff::Timestamp::from_second(T0 + 4 * 3600 + 120).unwrap();
    let kept = run_cycle_keeping(&snapshot, &watching, now, SCRAPE, Some(&restored)).await;
    assert_eq!(
        watching.windows.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no whole-window query"
    );
    let longest = watching
        .longest_steps
        .load(std::sync::atomic::Ordering::SeqCst);
    // The steps since the checkpoint (2 minutes), and the five minutes not settled yet.
    let settle = kerf::core::recommenders::resources::summary::SETTLE_SECONDS;
    assert!(
        longest <= 120 + settle,
        "only the steps since the checkpoint and the unsettled ones: {longest} s"
    );
    let full = run_cycle(&snapshot, &source, now, SCRAPE).await;
    assert_eq!(assert_close(&full, &kept, now), 2);
}

/// The same on a grid whose step does not divide the window (41 s into 1 hour, as 61 s into 7
/// days): what the kept history holds is the window query's steps exactly, cycle after cycle.
#[tokio::test]
async fn a_kept_history_follows_a_window_that_is_no_multiple_of_its_step() {
    let snapshot = snapshot();
    let source = FileSource::from_str(&openmetrics()).unwrap();
    let history = Arc::new(Mutex::new(Default::default()));
    let mut compared = 0;
    let mut t = T0 + 3 * 3600;
    while t <= T0 + HOURS * 3600 {
        let now = jiff::Timestamp::from_second(t).unwrap();
        let full = run_cycle(&snapshot, &source, now, 41).await;
        let kept = run_cycle_keeping(&snapshot, &source, now, 41, Some(&history)).await;
        compared += assert_close(&full, &kept, now);
        t += 67;
    }
    assert!(compared > 150, "{compared}");
}

/// A batch's selectors are held once: every query of a batch (one per signal and part) and its
/// incremental-history group share them, with the history kept or not.
#[tokio::test]
async fn a_batch_s_queries_share_its_selectors() {
    use kerf::core::recommenders::resources::{RsQuery, plan};
    let snapshot = snapshot();
    let source = FileSource::from_str(&openmetrics()).unwrap();
    let history: kerf::reconcile::History = Default::default();
    let now = jiff::Timestamp::from_second(T0 + 4 * 3600).unwrap();
    // The first warm-up cycle: one workload kept, the other still answered by the window.
    run_cycle_keeping(&snapshot, &source, now, SCRAPE, Some(&history)).await;
    let kept = history.lock().unwrap().clone();
    for p in [
        plan(&snapshot, now, SCRAPE, None),
        plan(&snapshot, now, SCRAPE, Some(&kept)),
    ] {
        let mut shared: std::collections::BTreeMap<usize, std::sync::Arc<_>> = Default::default();
        for (_, _, q) in &p.queries {
            let (batch, selectors) = match q {
                RsQuery::Window { batch, query } => (*batch, &query.workloads),
                RsQuery::Steps {
                    batch,
                    group,
                    query,
                    ..
                } => {
                    assert!(std::sync::Arc::ptr_eq(
                        &p.groups[*group].selectors,
                        &query.window.workloads
                    ));
                    (*batch, &query.window.workloads)
                }
                RsQuery::Range(_) => continue,
            };
            let first = shared.entry(batch).or_insert_with(|| selectors.clone());
            assert!(std::sync::Arc::ptr_eq(first, selectors), "batch {batch}");
        }
        assert!(!shared.is_empty());
    }
}
