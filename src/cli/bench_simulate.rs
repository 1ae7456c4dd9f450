//! `kerf bench simulate`: how long a replay takes (docs/performance.md). Either the shipped
//! examples over a synthetic week of history ([`crate::simulate::synth::ExampleHistory`]), or
//! a synthetic cluster of `--workloads` GPU workloads ([`crate::bench::scale::synth_snapshot`]).

use std::sync::atomic::Ordering;
use std::time::Instant;

use clap::Args;
use serde_json::json;

use crate::bench::scale::{ScaleSpec, SynthSource, cpu_seconds, peak_rss_mib};
use crate::simulate::synth::{ExampleHistory, GpuOnly};
use crate::simulate::{Options, Report};

#[derive(Args, Debug, Clone)]
pub struct SimulateBenchArgs {
    /// Replay a synthetic cluster of this many GPU workloads (4 pods per 3 workloads) instead
    /// of the shipped examples.
    #[arg(long, env = "KERF_BENCH_WORKLOADS")]
    pub workloads: Option<usize>,
    /// The examples' manifests (without --workloads).
    #[arg(
        long,
        env = "KERF_BENCH_MANIFESTS",
        default_value = "examples/manifests"
    )]
    pub manifests: std::path::PathBuf,
    /// Days replayed.
    #[arg(long, env = "KERF_BENCH_DAYS", default_value_t = 7)]
    pub days: i64,
    /// Seconds between ticks.
    #[arg(long, env = "KERF_BENCH_EVERY_SECONDS", default_value_t = 60)]
    pub every_seconds: i64,
    /// Query step in seconds.
    #[arg(long, env = "KERF_BENCH_STEP_SECONDS", default_value_t = 15)]
    pub step_seconds: i64,
    /// First tick (RFC 3339).
    #[arg(long, env = "KERF_BENCH_FROM", default_value = "2026-01-01T12:00:00Z")]
    pub from: String,
    /// Also write the replay's HTML report here.
    #[arg(long, env = "KERF_BENCH_HTML")]
    pub html: Option<std::path::PathBuf>,
}

pub async fn run(args: SimulateBenchArgs) -> anyhow::Result<()> {
    let from = super::parse_at(Some(&args.from))?;
    let opts = Options {
        from,
        to: from + jiff::SignedDuration::from_hours(24 * args.days),
        every_seconds: args.every_seconds,
        step_seconds: args.step_seconds,
    };
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let t0 = Instant::now();
    let (mode, report, source_queries, pods) = match args.workloads {
        None => {
            let manifests = crate::sources::dir::load_dir(&args.manifests)?;
            let pods = manifests.snapshot.pods.len();
            let source = ExampleHistory::new();
            let report = crate::simulate::run(manifests, &source, &opts).await?;
            (
                "examples",
                report,
                source.queries.load(Ordering::Relaxed),
                pods,
            )
        }
        Some(workloads) => {
            let spec = ScaleSpec {
                workloads,
                pods: workloads * 4 / 3,
                namespaces: (workloads / 100).clamp(1, 50),
                step_seconds: args.step_seconds,
            };
            // Pods started two hours before the replay (synth_snapshot's `now`).
            let snapshot = crate::bench::scale::synth_snapshot(&spec, from);
            let manifests = crate::sources::dir::Manifests {
                snapshot,
                ..Default::default()
            };
            let source = SynthSource {
                spec,
                queries: Default::default(),
            };
            let report = crate::simulate::run(manifests, &GpuOnly(&source), &opts).await?;
            (
                "synthetic",
                report,
                source.queries.load(Ordering::Relaxed),
                spec.pods,
            )
        }
    };
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds().unwrap_or(0.0) - cpu0;
    if let Some(path) = &args.html {
        std::fs::write(path, crate::simulate::report::to_html(&report))?;
    }
    let figures = summary(&report);
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "mode": mode,
            "workloads": report.workloads.len(),
            "pods": pods,
            "cycles": report.cycles,
            "every": crate::views::labels::format_duration(opts.every_seconds),
            "stepSeconds": opts.step_seconds,
            "historyQueries": source_queries,
            "changes": figures.0,
            "rollouts": figures.1,
            "wallSeconds": wall,
            "cpuSeconds": cpu,
            "cpuMillisPerCycle": cpu * 1000.0 / report.cycles.max(1) as f64,
            "peakRssMiB": peak_rss_mib(),
        }))?
    );
    Ok(())
}

fn summary(r: &Report) -> (usize, usize) {
    (
        r.workloads.iter().map(|w| w.changes.len()).sum(),
        r.workloads.iter().map(|w| w.rollouts).sum(),
    )
}
