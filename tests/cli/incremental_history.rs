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
    assert_eq!(h.containers.len(), 2, "web's and late's container");
}
