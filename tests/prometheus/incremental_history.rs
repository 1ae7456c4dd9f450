//! The incremental usage history against a real Prometheus: cycle after cycle, a kept history
//! gives the recommendation the whole-window queries give at the same moment (within 1 % or the
//! recipe's rounding), through a rollout, an OOM kill, a CPU spike and a workload appearing
//! mid-window; steady cycles load a fraction of the samples the whole window loads
//! (Prometheus's own `stats`). Needs `prometheus` and `promtool` (`scripts/test` installs them).

use std::sync::{Arc, Mutex};

use crate::prometheus_support::TestPrometheus;
use crate::usage_history::{HOURS, SCRAPE, T0, assert_close, openmetrics, snapshot};
use kerf::metrics::prometheus::PrometheusSource;
use kerf::reconcile::{run_cycle, run_cycle_keeping};

#[tokio::test]
async fn a_kept_history_gives_prometheus_whole_window_answer_and_reads_a_fraction() {
    let prom = TestPrometheus::start_with_openmetrics(&openmetrics());
    let source = PrometheusSource::new(&prom.url(), std::time::Duration::from_secs(30)).unwrap();
    let snapshot = snapshot();
    let history = Arc::new(Mutex::new(Default::default()));
    let (mut compared, mut steady, mut full_samples) = (0, 0, 0);
    let mut t = T0 + 1800;
    while t <= T0 + HOURS * 3600 {
        let now = jiff::Timestamp::from_second(t).unwrap();
        let full = run_cycle(&snapshot, &source, now, SCRAPE).await;
        let kept = run_cycle_keeping(&snapshot, &source, now, SCRAPE, Some(&history)).await;
        assert_eq!(kept.queries_failed, 0);
        compared += assert_close(&full, &kept, now);
        if t > T0 + 1800 {
            steady += kept.samples_loaded;
            full_samples += full.samples_loaded;
        }
        // Every 3 minutes: several steps a cycle, each new and each expired one read once.
        t += 180;
    }
    assert!(compared > 150, "{compared}");
    // A 3-minute cycle over a 1-hour window reads 44 of its 240 steps (12 settled new ones,
    // the 20 of the last 5 minutes not settled yet, 12 expired), and `late` reads its window
    // once when it appears; the 1-minute cycle over 7 days is the bench's (docs/performance.md).
    assert!(
        steady * 2 < full_samples,
        "steady cycles loaded {steady} samples, the whole windows {full_samples}"
    );
}

/// Days of sliding: 1-day windows over five days sampled every minute, cycles every 30 minutes
/// from the end of the first day — through the rollout (day 2.5), the OOM kill (day 2), the
/// spike (day 1.17, leaving the window a day later) and the workload appearing on day 3. Every
/// cycle's kept history gives the whole window's recommendations.
#[tokio::test]
async fn a_kept_history_follows_days_of_sliding_against_prometheus() {
    use crate::usage_history::{Scale, openmetrics_at, snapshot_with_window};
    let scale = Scale {
        unit: 86_400,
        scrape: 60,
    };
    let prom = TestPrometheus::start_with_openmetrics(&openmetrics_at(scale));
    let source = PrometheusSource::new(&prom.url(), std::time::Duration::from_secs(30)).unwrap();
    let snapshot = snapshot_with_window("1d");
    let history = Arc::new(Mutex::new(Default::default()));
    let mut compared = 0;
    let mut t = T0 + 86_400;
    while t <= T0 + HOURS * 86_400 {
        let now = jiff::Timestamp::from_second(t).unwrap();
        let full = run_cycle(&snapshot, &source, now, 60).await;
        let kept = run_cycle_keeping(&snapshot, &source, now, 60, Some(&history)).await;
        assert_eq!(kept.queries_failed, 0, "at {now}");
        compared += assert_close(&full, &kept, now);
        t += 1800;
    }
    assert!(compared > 300, "{compared}");
}
