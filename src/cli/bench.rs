//! `kerf bench scale`: see `crate::bench`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::bench::{
    ScaleSpec, SynthSource, cpu_seconds, peak_rss_mib, rss_mib, synth_snapshot, write_openmetrics,
};

#[derive(Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// One full GPU reconcile cycle over a synthetic cluster.
    Scale(ScaleArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    #[arg(long, default_value_t = 25_000)]
    pub workloads: usize,
    #[arg(long, default_value_t = 33_000)]
    pub pods: usize,
    #[arg(long, default_value_t = 50)]
    pub namespaces: usize,
    /// Evaluation time (RFC 3339) — the synthetic samples end here.
    #[arg(long, default_value = "2026-01-01T12:00:00Z")]
    pub at: String,
    /// Query a real Prometheus (loaded from `--write-openmetrics` output) instead of in-memory samples.
    #[arg(long)]
    pub prometheus: Option<String>,
    /// Write the synthetic samples as OpenMetrics to this file and exit.
    #[arg(long)]
    pub write_openmetrics: Option<std::path::PathBuf>,
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let BenchCommand::Scale(args) = cmd;
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
    // What the cluster view alone takes, before the cycle runs.
    let snapshot_rss = rss_mib();
    let cpu0 = cpu_seconds().unwrap_or(0.0);
    let t0 = Instant::now();
    let (cycle, queries, mode) = match &args.prometheus {
        None => {
            let source = SynthSource {
                spec,
                queries: AtomicUsize::new(0),
            };
            let cycle =
                crate::pipeline::run_gpu_cycle(&snapshot, &source, now, spec.step_seconds).await;
            (cycle, source.queries.load(Ordering::Relaxed), "engine-only")
        }
        Some(url) => {
            let source =
                crate::metrics::AnySource::from_args(None, Some(url), &snapshot.global).await?;
            let cycle =
                crate::pipeline::run_gpu_cycle(&snapshot, &source, now, spec.step_seconds).await;
            let q = cycle.queries;
            (cycle, q, "prometheus")
        }
    };
    // The rest of a reconcile cycle: the webhook's store and the writer's queue (planned, not sent).
    let store = crate::state::Store::new();
    crate::reconciler::refresh_store(&store, &snapshot, &cycle);
    let writes = crate::reconciler::plan_writes(&snapshot, &cycle, &[], &[], now);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds().unwrap_or(0.0) - cpu0;
    let failed = cycle.prometheus.values().filter(|r| r.is_err()).count();
    let with_rec = cycle
        .results
        .iter()
        .filter(|r| r.recommendation.is_some())
        .count();
    let report = json!({
        "mode": mode,
        "workloads": spec.workloads,
        "pods": spec.pods,
        "policies": snapshot.gpu_policies.len(),
        "queries": queries,
        "failedPolicies": failed,
        "workloadsEvaluated": cycle.results.len(),
        "workloadsWithRecommendation": with_rec,
        "storeEntries": store.len(),
        "writesPlanned": writes.len(),
        "wallSeconds": wall,
        "cpuSeconds": cpu,
        "rssBeforeCycleMiB": snapshot_rss,
        "peakRssMiB": peak_rss_mib(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
