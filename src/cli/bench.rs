//! `kerf bench scale`: see `crate::bench`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use jiff::Timestamp;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::core::snapshot::Snapshot;
use crate::metrics::MetricSource;

use crate::bench::scale::{
    ScaleSpec, SynthSource, cpu_seconds, peak_rss_mib, rss_mib, synth_snapshot, write_openmetrics,
};

#[derive(Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// One full GPU reconcile cycle over a synthetic cluster.
    Scale(ScaleArgs),
    /// A `kerf simulate` replay: the shipped examples over a synthetic week, or a synthetic
    /// cluster (`--workloads N --days 1`).
    Simulate(super::bench_simulate::SimulateBenchArgs),
    /// Decoding speed of a range-query answer: kerf's decoder against `serde_json::Value`,
    /// typed serde structs and serde_json's streaming (reader) decoder.
    Decode(DecodeArgs),
    /// One CPU/memory reconcile cycle with 7-day windows against a Prometheus loaded with
    /// synthetic history (docs/performance.md).
    Resources(ResourcesArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ResourcesArgs {
    /// Synthetic workloads under a CPU/memory policy.
    #[arg(long, env = "KERF_BENCH_WORKLOADS", default_value_t = 25_000)]
    pub workloads: usize,
    /// Synthetic pods, spread over the workloads.
    #[arg(long, env = "KERF_BENCH_PODS", default_value_t = 33_000)]
    pub pods: usize,
    /// Namespaces the workloads are spread over.
    #[arg(long, env = "KERF_BENCH_NAMESPACES", default_value_t = 50)]
    pub namespaces: usize,
    /// Evaluation time (RFC 3339) — the synthetic history ends here.
    #[arg(long, env = "KERF_BENCH_AT", default_value = "2026-01-08T00:00:00Z")]
    pub at: String,
    /// Seconds between two synthetic scrapes (coarse keeps the backfill small).
    #[arg(long, env = "KERF_BENCH_SCRAPE_SECONDS", default_value_t = 3_600)]
    pub scrape_seconds: i64,
    /// The cycle's query step (the CPU grid's is at most the policies' rate window, two
    /// scrapes).
    #[arg(long, env = "KERF_BENCH_STEP_SECONDS", default_value_t = 1_800)]
    pub step_seconds: i64,
    /// The Prometheus holding the `--write-openmetrics` history.
    #[arg(
        long,
        env = "KERF_BENCH_PROMETHEUS",
        required_unless_present = "write_openmetrics"
    )]
    pub prometheus: Option<String>,
    /// Write the synthetic history as OpenMetrics to this file and exit.
    #[arg(long, env = "KERF_BENCH_WRITE_OPENMETRICS")]
    pub write_openmetrics: Option<std::path::PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct DecodeArgs {
    /// Series in the answer (one bench policy's pods: 33,000 / 50).
    #[arg(long, env = "KERF_BENCH_SERIES", default_value_t = 660)]
    pub series: usize,
    /// Samples per series (20 minutes every 15 s).
    #[arg(long, env = "KERF_BENCH_POINTS", default_value_t = 81)]
    pub points: usize,
    /// Repetitions per decoder (the fastest is reported).
    #[arg(long, env = "KERF_BENCH_ROUNDS", default_value_t = 7)]
    pub rounds: usize,
}

/// Bytes per second of each decoder over the same body: the best of `rounds` runs, each
/// decoding the body as often as fits in ~0.3 s, decoders interleaved so load drifts hit all.
fn decode_bench(args: &DecodeArgs) -> anyhow::Result<()> {
    use crate::bench::decoders;
    let body = crate::bench::scale::query_range_body(args.series, args.points);
    let expected = args.series * args.points;
    type Decoder = fn(&[u8]) -> usize;
    let all: [(&str, Decoder); 4] = [
        ("kerf (metrics::decode)", decoders::kerf),
        ("serde_json::from_slice::<Value>", decoders::value_tree),
        ("typed serde structs (kerf before)", decoders::typed),
        (
            "serde_json streaming (from_reader, typed)",
            decoders::streaming,
        ),
    ];
    for (name, f) in &all {
        anyhow::ensure!(
            f(&body) == expected,
            "{name} decoded a different number of samples"
        );
    }
    let mut best = [0.0f64; 4];
    for _ in 0..args.rounds.max(1) {
        for (i, (_, f)) in all.iter().enumerate() {
            let t = Instant::now();
            let mut n = 0u64;
            while t.elapsed().as_secs_f64() < 0.3 {
                std::hint::black_box(f(std::hint::black_box(&body)));
                n += 1;
            }
            let rate = n as f64 * body.len() as f64 / t.elapsed().as_secs_f64();
            best[i] = best[i].max(rate);
        }
    }
    let report = json!({
        "bodyBytes": body.len(),
        "series": args.series,
        "samples": expected,
        "bytesPerSecond": all.iter().zip(best).map(|((n, _), r)| (n.to_string(), json!(r.round()))).collect::<serde_json::Map<_, _>>(),
        "kerfOverFastestOther": best[0] / best[1..].iter().copied().fold(0.0, f64::max),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Synthetic GPU workloads.
    #[arg(long, env = "KERF_BENCH_WORKLOADS", default_value_t = 25_000)]
    pub workloads: usize,
    /// Synthetic pods, spread over the workloads.
    #[arg(long, env = "KERF_BENCH_PODS", default_value_t = 33_000)]
    pub pods: usize,
    /// Namespaces the workloads are spread over.
    #[arg(long, env = "KERF_BENCH_NAMESPACES", default_value_t = 50)]
    pub namespaces: usize,
    /// Evaluation time (RFC 3339) — the synthetic samples end here.
    #[arg(long, env = "KERF_BENCH_AT", default_value = "2026-01-01T12:00:00Z")]
    pub at: String,
    /// Query a real Prometheus (loaded from `--write-openmetrics` output) instead of in-memory samples.
    #[arg(long, env = "KERF_BENCH_PROMETHEUS")]
    pub prometheus: Option<String>,
    /// Cycles to run; figures are reported for the last (from the second on, the store holds
    /// the previous cycle's states, as in a running replica).
    #[arg(long, env = "KERF_BENCH_CYCLES", default_value_t = 2)]
    pub cycles: usize,
    /// Write the synthetic samples as OpenMetrics to this file and exit.
    #[arg(long, env = "KERF_BENCH_WRITE_OPENMETRICS")]
    pub write_openmetrics: Option<std::path::PathBuf>,
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let args = match cmd {
        BenchCommand::Scale(args) => args,
        BenchCommand::Resources(args) => return run_resources(args).await,
        BenchCommand::Simulate(args) => return super::bench_simulate::run(args).await,
        BenchCommand::Decode(args) => return decode_bench(&args),
    };
    let spec = ScaleSpec {
        workloads: args.workloads,
        pods: args.pods,
        namespaces: args.namespaces,
        ..Default::default()
    };
    let now = super::parse_at(Some(&args.at))?;
    if let Some(path) = &args.write_openmetrics {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        write_openmetrics(&spec, now, &mut f)?;
        eprintln!("wrote {}", path.display());
        return Ok(());
    }
    let snapshot = synth_snapshot(&spec, now);
    // What the cluster view alone takes, before any cycle runs.
    let snapshot_rss = rss_mib();
    let cycles = args.cycles.max(1);
    let policies = snapshot.gpu_policies.len();
    let (mode, figures, peak_rss, direct) = match &args.prometheus {
        None => {
            let source = SynthSource {
                spec,
                queries: AtomicUsize::new(0),
            };
            let (figures, last_input) =
                measure(snapshot, &source, now, spec.step_seconds, cycles).await;
            // The pipeline's own count must be what the source actually answered.
            let answered = source.queries.load(Ordering::Relaxed);
            let counted: usize = figures.iter().map(|f| f.queries).sum();
            anyhow::ensure!(
                answered == counted,
                "source answered {answered} queries, pipeline counted {counted}"
            );
            let peak = peak_rss_mib();
            let direct = direct_digest(&last_input, &source, now, spec.step_seconds).await;
            ("engine-only", figures, peak, direct)
        }
        Some(url) => {
            let source =
                crate::metrics::AnySource::from_args(None, Some(url), &snapshot.global).await?;
            let (figures, last_input) =
                measure(snapshot, &source, now, spec.step_seconds, cycles).await;
            let peak = peak_rss_mib();
            let direct = direct_digest(&last_input, &source, now, spec.step_seconds).await;
            ("prometheus", figures, peak, direct)
        }
    };
    let last = figures.last().expect("at least one cycle");
    // The loop must give the answers the engine gives directly, or the figures mean nothing.
    anyhow::ensure!(
        direct == last.digest,
        "the cycle's recommendations (digest {:016x}) differ from a direct evaluation ({direct:016x})",
        last.digest
    );
    let report = json!({
        "mode": mode,
        "workloads": spec.workloads,
        "pods": spec.pods,
        "policies": policies,
        "cycles": cycles,
        "queries": last.queries,
        "failedPolicies": last.failed_policies,
        "workloadsEvaluated": last.evaluated,
        "workloadsWithRecommendation": last.with_recommendation,
        "storeEntries": last.store_entries,
        "writesPlanned": last.writes,
        "recommendationsDigest": format!("{:016x}", last.digest),
        "directEvaluationDigest": format!("{direct:016x}"),
        "wallSeconds": last.wall,
        "cpuSeconds": last.cpu,
        "wallSecondsPerCycle": figures.iter().map(|f| f.wall).collect::<Vec<_>>(),
        "cpuSecondsPerCycle": figures.iter().map(|f| f.cpu).collect::<Vec<_>>(),
        "rssBeforeCycleMiB": snapshot_rss,
        "peakRssMiB": peak_rss,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// The GPU answers without the loop: the plan, every query answered first, then the batch
/// `gpu::evaluate` over all answers at once (no streaming, writer or store). Measured after the
/// peak is read: it holds every sample at once.
async fn direct_digest<S: MetricSource>(
    snapshot: &Snapshot,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
) -> u64 {
    use crate::core::recommenders::gpu;
    let plan = gpu::plan(snapshot, now, step_seconds);
    let mut answers = std::collections::BTreeMap::new();
    let mut failed = std::collections::BTreeSet::new();
    for (policy, signal, q) in &plan.queries {
        match source.range_query(q).await {
            Ok(set) => {
                answers.insert((*policy, *signal), set);
            }
            Err(_) => {
                failed.insert(*policy);
            }
        }
    }
    let results = gpu::evaluate(snapshot, &plan, answers, &failed, now);
    digest(results.iter())
}

/// What one measured cycle did and cost.
struct CycleFigures {
    wall: f64,
    cpu: f64,
    queries: usize,
    failed_policies: usize,
    evaluated: usize,
    with_recommendation: usize,
    store_entries: usize,
    writes: usize,
    /// FNV-1a over every workload's recommendation (key, driver, per-container GPUs), in plan
    /// order: equal digests, equal answers (compare runs before and after a change).
    digest: u64,
}

/// See [`CycleFigures::digest`].
fn digest<'a>(
    results: impl Iterator<Item = &'a crate::core::recommenders::gpu::WorkloadResult>,
) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for r in results {
        eat(r.key.to_string().as_bytes());
        eat(r.action.as_str().as_bytes());
        if let Some(rec) = &r.recommendation {
            eat(format!("{:?}", rec.driving_metric).as_bytes());
            for (c, v) in &rec.containers {
                eat(c.as_bytes());
                eat(&v.to_bits().to_le_bytes());
            }
        }
        eat(b";");
    }
    h
}

/// Runs `cycles` reconcile cycles as the Lease holder does, with the in-memory writer standing
/// in for the API server and its watch: plan → queries → engine → write planning → writes
/// applied → store served from the persisted state. The store and the writes persist across
/// cycles, so from the second cycle on the previous cycle's state is held while the new one is
/// built (the steady state of a running replica). Also returns the cluster the last cycle read.
async fn measure<S: MetricSource>(
    snapshot: Snapshot,
    source: &S,
    now: Timestamp,
    step_seconds: i64,
    cycles: usize,
) -> (Vec<CycleFigures>, Snapshot) {
    let store = crate::state::Store::new();
    let mut writer = crate::writers::memory::MemoryWriter::new();
    let mut out = Vec::with_capacity(cycles);
    // The cluster: each cycle reads it as the previous cycle's writes left it.
    let mut cluster = snapshot;
    let mut last_input = Snapshot::default();
    for i in 0..cycles {
        if i + 1 == cycles {
            // Shares the workloads and pods (Arcs); a steady cycle writes none of them, so this
            // copies nothing (a first cycle copies the workloads it writes to).
            last_input = cluster.clone();
        }
        let cpu0 = cpu_seconds().unwrap_or(0.0);
        let t0 = Instant::now();
        let (after, cycle, writes_planned) = crate::reconcile::standalone::in_memory_cycle(
            &mut writer,
            cluster,
            &[],
            source,
            now,
            step_seconds,
            &store,
        )
        .await;
        cluster = after;
        out.push(CycleFigures {
            wall: t0.elapsed().as_secs_f64(),
            cpu: cpu_seconds().unwrap_or(0.0) - cpu0,
            queries: cycle.queries,
            failed_policies: cycle.query_failures().len(),
            evaluated: cycle.gpu_results().count(),
            with_recommendation: cycle
                .gpu_results()
                .filter(|r| r.recommendation.is_some())
                .count(),
            store_entries: store.len(),
            writes: writes_planned,
            digest: digest(cycle.gpu_results()),
        });
    }
    (out, last_input)
}

/// What the kept-history cycles of `kerf bench resources` cost.
struct KeptHistory {
    /// Each first cycle's (samples loaded, Prometheus CPU seconds, queries, workloads kept,
    /// wall seconds).
    warm_up: Vec<(u64, Option<f64>, usize, usize, f64)>,
    first_cycles: usize,
    first_samples: u64,
    first_queries: usize,
    steady_samples: u64,
    steady_queries: usize,
    steady_cpu: f64,
    steady_prometheus_cpu: Option<f64>,
    history_bytes: usize,
    checkpoint_parts: usize,
    checkpoint_bytes: usize,
    checkpoint_seconds: f64,
    /// Peak RSS once the history is read and checkpointed, before the whole-window cycle.
    peak_rss: Option<f64>,
    recommendations: Vec<(String, Option<i64>, Option<i64>)>,
    /// Held through the whole-window cycle, as a Lease holder holds it through its cycles.
    history: crate::reconcile::History,
}

/// The cycles of a Lease holder keeping its usage history: from one step before `now` until
/// every workload's window has been read once (the first cycles), then the steady cycle at
/// `now`. Each on the snapshot as it is (no writes laid over it: only the reads are measured).
async fn kept_history_cycles(
    snapshot: &crate::core::snapshot::Snapshot,
    source: &crate::metrics::AnySource,
    url: &str,
    now: jiff::Timestamp,
    step_seconds: i64,
) -> KeptHistory {
    let history: crate::reconcile::History = Default::default();
    let before = now - jiff::SignedDuration::from_secs(step_seconds);
    let mut first = (0, 0, 0);
    let mut warm_up = Vec::new();
    loop {
        let prom0 = prometheus_cpu_seconds(url).await;
        let t0 = Instant::now();
        let c = crate::reconcile::run_cycle_keeping(
            snapshot,
            source,
            before,
            step_seconds,
            Some(&history),
        )
        .await;
        let wall = t0.elapsed().as_secs_f64();
        let prometheus_cpu = delta(prom0, prometheus_cpu_seconds(url).await);
        first = (first.0 + 1, first.1 + c.samples_loaded, first.2 + c.queries);
        let failed = c.queries_failed > 0;
        let covered = history.lock().map(|h| h.covered_workloads()).unwrap_or(0);
        warm_up.push((c.samples_loaded, prometheus_cpu, c.queries, covered, wall));
        // Where the memory goes while the windows are read (stderr: the report is stdout).
        eprintln!(
            "first cycle {}: {covered} workloads kept, history {} MB, RSS {:.0} MiB, peak {:.0} MiB",
            first.0,
            history.lock().map(|h| h.heap_bytes()).unwrap_or(0) / 1_000_000,
            rss_mib().unwrap_or(0.0),
            peak_rss_mib().unwrap_or(0.0)
        );
        if covered >= c.resource_results().count() || failed || first.0 >= 200 {
            break;
        }
    }
    let prom0 = prometheus_cpu_seconds(url).await;
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let steady =
        crate::reconcile::run_cycle_keeping(snapshot, source, now, step_seconds, Some(&history))
            .await;
    let steady_cpu = cpu_seconds().unwrap_or(0.0) - cpu0;
    let steady_prometheus_cpu = delta(prom0, prometheus_cpu_seconds(url).await);
    let history_bytes = history.lock().map(|h| h.heap_bytes()).unwrap_or(0);
    let peak_before_checkpoint = peak_rss_mib();
    // The checkpoint a Lease holder writes every 10 minutes, built as it builds it.
    let t0 = Instant::now();
    let parts = history
        .lock()
        .map(|h| {
            crate::checkpoint::checkpoints(&h, crate::reconcile::cluster::CHECKPOINT_PART_BYTES)
        })
        .unwrap_or_default();
    let checkpoint_seconds = t0.elapsed().as_secs_f64();
    let peak_rss = peak_rss_mib();
    eprintln!(
        "steady cycle and checkpoint: peak {:.0} MiB before the checkpoint, {:.0} MiB after",
        peak_before_checkpoint.unwrap_or(0.0),
        peak_rss.unwrap_or(0.0)
    );
    KeptHistory {
        checkpoint_parts: parts.len(),
        checkpoint_bytes: parts.iter().map(Vec::len).sum(),
        checkpoint_seconds,
        peak_rss,
        history,
        warm_up,
        first_cycles: first.0,
        first_samples: first.1,
        first_queries: first.2,
        steady_samples: steady.samples_loaded,
        steady_queries: steady.queries,
        steady_cpu,
        steady_prometheus_cpu,
        history_bytes,
        recommendations: recommended_values(&steady),
    }
}

/// Every workload's (key, CPU millicores, memory bytes) of its first container.
pub fn recommended_values(
    cycle: &crate::core::recommenders::cycle::CycleOutput,
) -> Vec<(String, Option<i64>, Option<i64>)> {
    let mut v: Vec<_> = cycle
        .resource_results()
        .filter_map(|r| {
            let c = r.outcome.as_ref().ok()?.containers.first()?;
            Some((
                r.key.to_string(),
                c.recommended.cpu_millis,
                c.recommended.memory_bytes,
            ))
        })
        .collect();
    v.sort();
    v
}

/// How many of `got` differ from `want` (same workloads) by more than 1 % or the recipe's
/// rounding (1 millicore, 1 MiB); a workload missing from either counts.
fn beyond_one_percent(
    got: &[(String, Option<i64>, Option<i64>)],
    want: &[(String, Option<i64>, Option<i64>)],
) -> usize {
    let close = |a: Option<i64>, b: Option<i64>, rounding: u64| match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) <= (b.unsigned_abs() / 100).max(rounding),
        (a, b) => a == b,
    };
    let want: std::collections::BTreeMap<_, _> =
        want.iter().map(|(k, c, m)| (k, (*c, *m))).collect();
    let mut beyond = want.len().abs_diff(got.len());
    for (k, c, m) in got {
        match want.get(k) {
            Some((wc, wm)) if close(*c, *wc, 1) && close(*m, *wm, 1 << 20) => {}
            _ => beyond += 1,
        }
    }
    beyond
}

/// Each warm-up cycle's figures and the highest ratios of its samples and Prometheus CPU to a
/// whole-window cycle's (`samples`, `prometheus_cpu`).
fn warm_up_report(
    cycles: &[(u64, Option<f64>, usize, usize, f64)],
    samples: u64,
    prometheus_cpu: Option<f64>,
) -> (Vec<Value>, (Option<f64>, Option<f64>)) {
    let mut max = (None::<f64>, None::<f64>);
    let higher = |m: Option<f64>, v: Option<f64>| match (m, v) {
        (Some(m), Some(v)) => Some(m.max(v)),
        (m, v) => m.or(v),
    };
    let rows = cycles
        .iter()
        .map(|&(loaded, prom, queries, kept, wall)| {
            let (s, p) = (
                ratio(loaded, samples),
                prom.zip(prometheus_cpu).map(|(a, b)| a / b),
            );
            max = (higher(max.0, s), higher(max.1, p));
            json!({
                "samplesLoaded": loaded,
                "prometheusCpuSeconds": prom,
                "queries": queries,
                "workloadsKept": kept,
                "wallSeconds": wall,
                "samplesRatio": s,
                "prometheusCpuRatio": p,
            })
        })
        .collect();
    (rows, max)
}

fn delta(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some(after? - before?)
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Prometheus's own `process_cpu_seconds_total`, from its `/metrics`.
async fn prometheus_cpu_seconds(url: &str) -> Option<f64> {
    let text = reqwest::get(format!("{}/metrics", url.trim_end_matches('/')))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
        .and_then(|v| v.trim().parse().ok())
}

/// `kerf bench resources`: one CPU/memory cycle (plan → window queries → recommenders → write
/// planning → the in-memory writer) against Prometheus, and what it cost kerf.
async fn run_resources(args: ResourcesArgs) -> anyhow::Result<()> {
    use crate::bench::resources::{HistorySpec, synth_snapshot, write_openmetrics};
    let spec = HistorySpec {
        workloads: args.workloads,
        pods: args.pods,
        namespaces: args.namespaces,
        scrape_seconds: args.scrape_seconds,
        ..Default::default()
    };
    anyhow::ensure!(
        spec.workloads > 0 && spec.pods >= spec.workloads && spec.namespaces > 0,
        "need at least one namespace and one workload, and at least as many pods as workloads"
    );
    // The policies' CPU rate window holds two scrapes (`bench_resources::policy_spec`).
    anyhow::ensure!(args.step_seconds > 0, "--step-seconds must be positive");
    let now = super::parse_at(Some(&args.at))?;
    if let Some(path) = &args.write_openmetrics {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        write_openmetrics(&spec, now, &mut f)?;
        std::io::Write::flush(&mut f)?;
        eprintln!("wrote {}", path.display());
        return Ok(());
    }
    let url = args.prometheus.as_deref().expect("clap requires it");
    let snapshot = synth_snapshot(&spec, now);
    let snapshot_rss = rss_mib();
    let policies = snapshot.rightsizing_policies.len();
    let source = crate::metrics::AnySource::from_args(None, Some(url), &snapshot.global).await?;
    let kept = kept_history_cycles(&snapshot, &source, url, now, args.step_seconds).await;
    let store = crate::state::Store::new();
    let mut writer = crate::writers::memory::MemoryWriter::new();
    let prom0 = prometheus_cpu_seconds(url).await;
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let t0 = Instant::now();
    let (_after, cycle, writes) = crate::reconcile::standalone::in_memory_cycle(
        &mut writer,
        snapshot,
        &[],
        &source,
        now,
        args.step_seconds,
        &store,
    )
    .await;
    let (wall, cpu) = (
        t0.elapsed().as_secs_f64(),
        cpu_seconds().unwrap_or(0.0) - cpu0,
    );
    let prom_full = delta(prom0, prometheus_cpu_seconds(url).await);
    let results: Vec<_> = cycle.resource_results().collect();
    let ok = || results.iter().filter_map(|r| r.outcome.as_ref().ok());
    let recommended = ok()
        .filter(|o| {
            o.containers
                .iter()
                .any(|c| c.recommended.cpu_millis.is_some())
        })
        .count();
    let flagged = ok()
        .filter(|o| {
            o.risk_flags.iter().any(|f| {
                f == crate::core::recommenders::resources::workload::RISK_INSUFFICIENT_HISTORY
            })
        })
        .count();
    // The workloads kube-state-metrics' history (or a pod status) says were OOM-killed.
    let oom_killed = ok()
        .filter(|o| o.containers.iter().any(|c| c.oom_killed))
        .count();
    let (warm_up, warm_up_max) = warm_up_report(&kept.warm_up, cycle.samples_loaded, prom_full);
    let mut report = json!({
        "mode": "prometheus",
        "workloads": spec.workloads,
        "pods": spec.pods,
        "policies": policies,
        "windowDays": 7,
        "scrapeSeconds": spec.scrape_seconds,
        "stepSeconds": args.step_seconds,
        "queries": cycle.queries,
        "querySplits": cycle.query_splits,
        "samplesLoaded": cycle.samples_loaded,
        "failedPolicies": cycle.query_failures().len(),
        "queryFailures": cycle.query_failures().iter().take(3).map(|(p, e)| format!("{p}: {e}")).collect::<Vec<_>>(),
        "workloadsEvaluated": results.len(),
        "workloadsWithCpuRecommendation": recommended,
        "insufficientHistory": flagged,
        "oomKilled": oom_killed,
        "writesPlanned": writes,
        "wallSeconds": wall,
        "cpuSeconds": cpu,
        "rssBeforeCycleMiB": snapshot_rss,
        "peakRssMiB": peak_rss_mib(),
        // The incremental history (docs/metrics.md#incremental-history), in the same run: the
        // first cycles read each workload's window once, a steady cycle one step later reads
        // the new and the expired steps, against the whole-window method above at that moment.
        "samplesLoadedFullWindow": cycle.samples_loaded,
        "prometheusCpuSecondsFullWindow": prom_full,
        "queriesFullWindow": cycle.queries,
        "samplesLoadedFirstCycle": kept.first_samples,
        "firstCycles": kept.first_cycles,
        "queriesFirstCycle": kept.first_queries,
        "samplesLoadedSteadyCycle": kept.steady_samples,
        "prometheusCpuSecondsSteadyCycle": kept.steady_prometheus_cpu,
        "queriesSteadyCycle": kept.steady_queries,
        "cpuSecondsSteadyCycle": kept.steady_cpu,
        "historyBytes": kept.history_bytes,
        "historyBytesPerPod": kept.history_bytes / spec.pods.max(1),
        "checkpointParts": kept.checkpoint_parts,
        "checkpointBytes": kept.checkpoint_bytes,
        "checkpointSeconds": kept.checkpoint_seconds,
        "peakRssKeptHistoryMiB": kept.peak_rss,
        "steadySamplesRatio": ratio(kept.steady_samples, cycle.samples_loaded),
        "steadyPrometheusCpuRatio": kept.steady_prometheus_cpu.zip(prom_full).map(|(a, b)| a / b),
        "steadyBeyondOnePercent": beyond_one_percent(&kept.recommendations, &recommended_values(&cycle)),
    });
    // Every warm-up cycle (the first cycles: some workloads read whole, the others answered by
    // the window queries) against the whole-window cycle.
    report["warmUpCycles"] = Value::Array(warm_up);
    report["warmUpMaxSamplesRatio"] = json!(warm_up_max.0);
    report["warmUpMaxPrometheusCpuRatio"] = json!(warm_up_max.1);
    // How long the warm-up took: a cycle starts at most once per check interval.
    report["warmUpWallSeconds"] = json!(kept.warm_up.iter().map(|c| c.4).sum::<f64>());
    drop(kept.history);
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
