//! Beside a peer's definition (docs/policies.md#cpu-percentile): on usage with short bursts,
//! scraped every 30 s, the CPU percentile kerf reports is the p95 of one-minute rates computed
//! directly from the raw samples — within 5 % — for 1-day, 7-day and 14-day windows alike, and
//! the memory peak is the raw maximum, a single sample between two grid steps included; through
//! a real Prometheus, the file source and the kept history. And a floor that holds a request
//! says so. Needs `prometheus` and `promtool`.

use std::sync::{Arc, Mutex};

use crate::prometheus_support::{EPOCH, Lcg, TestPrometheus};
use crate::workload_history::{
    MIB, at, cycle, cycle_agreeing, file, manifests, openmetrics, openmetrics_with, pod_series,
    prom,
};
use kerf::core::recommenders::cycle::CycleOutput;
use kerf::metrics::window::quantile;
use kerf::reconcile::run_cycle_keeping;
use kerf::sources::dir::load_dir;

const SCRAPE: i64 = 30;
const END: i64 = EPOCH + 15 * 86_400;
const FROM: i64 = END - 14 * 86_400 - 3_600;
const POD: &str = "web-6b7c8d9f2-b2c4d";

/// Per 30 s scrape interval from [`FROM`], the cores used: 0.10–0.12 at rest, and in every
/// 10 minutes one burst of 2 minutes at a random time, 0.9–1.0 cores more.
fn usage() -> Vec<f64> {
    let mut rng = Lcg(54);
    let n = ((END - FROM) / SCRAPE + 1) as usize;
    let mut cores: Vec<f64> = (0..n).map(|_| rng.between(0.10, 0.12)).collect();
    for block in (0..n).step_by(20) {
        let start = block + (rng.next() * 16.0) as usize;
        for c in cores.iter_mut().skip(start).take(4) {
            *c += rng.between(0.9, 1.0);
        }
    }
    cores
}

/// A scrape time in the last day that a read of the working set at the grid steps of 61 s and
/// 121 s (the 7-day and 14-day windows' memory grids) misses: the next sample comes before the
/// next grid step.
fn between_grid_steps() -> i64 {
    (END - 43_200..END)
        .step_by(SCRAPE as usize)
        .find(|t| {
            [61, 121].iter().all(|s| {
                let next = (t + s - 1) / s * s;
                next != *t && t + SCRAPE <= next
            })
        })
        .unwrap()
}

/// The p95 of the one-minute rates of the raw counter samples at the scrapes in
/// `(END − window, END]`: (c(t) − c(t − 60 s)) / 60 s, interpolated as Prometheus does.
fn p95_of_one_minute_rates(cores: &[f64], window: i64) -> f64 {
    let mut counter = vec![0.0];
    for c in cores {
        counter.push(counter.last().unwrap() + c * SCRAPE as f64);
    }
    let mut rates: Vec<f64> = (2..cores.len())
        .filter(|i| FROM + *i as i64 * SCRAPE > END - window)
        .map(|i| (counter[i] - counter[i - 2]) / 60.0)
        .collect();
    quantile(0.95, &mut rates).unwrap()
}

/// The CPU percentile (cores) and memory peak (bytes) kerf's cycle rests on.
fn usage_of(out: &CycleOutput) -> (f64, f64) {
    let r = out.resource_results().next().unwrap();
    let c = &r.outcome.as_ref().unwrap().containers[0];
    (c.cpu_usage.unwrap(), c.memory_usage.unwrap())
}

#[tokio::test]
async fn cpu_p95_is_the_p95_of_one_minute_rates_and_memory_the_raw_peak_for_every_window() {
    let cores = usage();
    let spike = between_grid_steps();
    let mut s = (String::new(), String::new());
    pod_series(
        &mut s,
        POD,
        (FROM, END, SCRAPE),
        |t| cores[((t - FROM) / SCRAPE) as usize],
        |t| {
            if t == spike {
                500.0 * MIB
            } else {
                (100 + (t / SCRAPE) % 7) as f64 * MIB
            }
        },
    );
    let text = openmetrics(s);
    let p = TestPrometheus::start_with_openmetrics(&text);
    let mut kerf_p95 = Vec::new();
    for (window, seconds) in [("1d", 86_400), ("7d", 7 * 86_400), ("14d", 14 * 86_400)] {
        let direct = p95_of_one_minute_rates(&cores, seconds);
        let dir = manifests(window, &[("web", &[POD])]);
        let from_prometheus = usage_of(&cycle_agreeing(dir.path(), &text, &p, at(END)).await);
        let from_file = usage_of(&cycle(dir.path(), &file(&text, &p), at(END)).await);
        for (source, (cpu, memory)) in [("Prometheus", from_prometheus), ("file", from_file)] {
            eprintln!(
                "{window} through {source}: p95 {cpu:.4} cores, one-minute rates' p95 {direct:.4} \
                 ({:+.2} %); memory peak {} MiB",
                100.0 * (cpu - direct) / direct,
                memory / MIB
            );
            assert!(
                (cpu - direct).abs() <= 0.05 * direct,
                "{window} through {source}: {cpu} vs {direct}"
            );
            assert_eq!(memory, 500.0 * MIB, "{window} through {source}");
        }
        kerf_p95.push(from_prometheus.0);
    }
    let (lo, hi) = (
        kerf_p95.iter().copied().fold(f64::MAX, f64::min),
        kerf_p95.iter().copied().fold(0.0, f64::max),
    );
    assert!(
        hi <= 1.05 * lo,
        "the same usage, the same p95: {kerf_p95:?}"
    );

    // The kept history: a first reading of the 7-day window (its CPU grid in two range
    // queries), then a steady cycle.
    let dir = manifests("7d", &[("web", &[POD])]);
    let snapshot = load_dir(dir.path()).unwrap().snapshot;
    let history = Arc::new(Mutex::new(Default::default()));
    let direct = p95_of_one_minute_rates(&cores, 7 * 86_400);
    for t in [END - 600, END] {
        let kept = run_cycle_keeping(&snapshot, &prom(&p), at(t), 15, Some(&history)).await;
        assert_eq!(kept.queries_failed, 0);
        let (cpu, memory) = usage_of(&kept);
        eprintln!(
            "7d kept at {t}: p95 {cpu:.4} cores, memory peak {} MiB",
            memory / MIB
        );
        assert_eq!(memory, 500.0 * MIB);
        // The history's 0.5 %, and ten minutes less of the window at the first cycle.
        assert!((cpu - direct).abs() <= 0.05 * direct, "{cpu} vs {direct}");
    }
}

/// A held request says what held it: a container throttled for ten minutes keeps its 1-CPU
/// request where its usage alone asks 200m; the JSON (and the table) say the risk flag and the
/// signal, its value and when — through Prometheus and the file source alike.
#[tokio::test]
async fn a_throttling_floor_says_what_held_the_request() {
    let (from, end) = (END - 86_400 - 600, END);
    let throttled_from = END - 7_200;
    let mut s = (String::new(), String::new());
    pod_series(&mut s, POD, (from, end, SCRAPE), |_| 0.2, |_| 100.0 * MIB);
    let labels = format!("namespace=\"shop\",pod=\"{POD}\",container=\"app\"");
    let (mut periods, mut throttled, mut cfs) = (0.0, 0.0, String::new());
    let mut thr = String::new();
    for t in (from..=end).step_by(SCRAPE as usize) {
        writeln_cfs(
            &mut cfs,
            "container_cpu_cfs_periods_total",
            &labels,
            periods,
            t,
        );
        writeln_cfs(
            &mut thr,
            "container_cpu_cfs_throttled_periods_total",
            &labels,
            throttled,
            t,
        );
        // 100 ms periods: 300 a scrape; a fifth of them throttled for ten minutes.
        periods += 300.0;
        if (throttled_from..throttled_from + 600).contains(&t) {
            throttled += 60.0;
        }
    }
    let text = openmetrics_with(
        s,
        &format!(
            "# TYPE container_cpu_cfs_periods counter\n{cfs}# TYPE container_cpu_cfs_throttled_periods counter\n{thr}"
        ),
    );
    let p = TestPrometheus::start_with_openmetrics(&text);
    let dir = manifests("1d", &[("web", &[POD])]);
    let out = cycle_agreeing(dir.path(), &text, &p, at(END)).await;
    let json = kerf::cli::recommend::to_json(&out);
    let web = &json["recommendations"][0];
    assert_eq!(
        web["riskFlags"],
        serde_json::json!(["throttled"]),
        "{web:#}"
    );
    assert_eq!(
        web["resources"]["app"]["cpu"]["recommended"], "1",
        "{web:#}"
    );
    let reasons: Vec<&str> = web["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    let said = reasons
        .iter()
        .find(|r| r.starts_with("app: throttled"))
        .unwrap_or_else(|| panic!("{reasons:?}"));
    eprintln!("{said}");
    assert_eq!(
        *said,
        "app: throttled 20 % of CFS periods for 10m (last at 2026-01-15 22:10 UTC); CPU request \
         held at 1 (usage alone: 200m)"
    );
    let table =
        kerf::cli::recommend::to_table(&out, at(END), &kerf::writers::memory::MemoryWriter::new());
    assert!(table.contains(said), "{table}");
}

fn writeln_cfs(out: &mut String, metric: &str, labels: &str, value: f64, t: i64) {
    use std::fmt::Write as _;
    writeln!(out, "{metric}{{{labels}}} {value} {t}").unwrap();
}
