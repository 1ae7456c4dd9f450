//! `kerf simulate`: replay history through kerf's reconcile loop (docs/simulate.md).

use clap::{Args, ValueEnum};

use super::{MetricSourceArgs, ObjectSourceArgs, OutputFileArgs, PrometheusConnectionArgs};
use crate::api::DurationStr;
use crate::simulate::{Options, report};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum SimulateOutput {
    #[default]
    Table,
    Json,
    Html,
}

#[derive(Args, Debug, Clone)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub objects: ObjectSourceArgs,
    #[command(flatten)]
    pub source: MetricSourceArgs,
    #[command(flatten)]
    pub connection: PrometheusConnectionArgs,
    /// First tick (RFC 3339), included.
    #[arg(long, env = "KERF_FROM")]
    pub from: String,
    /// End of the replay (RFC 3339), excluded: ticks are from, from+every, … before it.
    #[arg(long, env = "KERF_TO")]
    pub to: String,
    /// Time between ticks (e.g. 1m, 5m, 1h); default GlobalConfiguration gpuReactiveCheckInterval.
    #[arg(long, env = "KERF_EVERY")]
    pub every: Option<String>,
    /// Query step in seconds (as `kerf recommend`).
    #[arg(long, env = "KERF_STEP_SECONDS", default_value_t = 15)]
    pub step_seconds: i64,
    /// Output format: table, json (the stable contract of docs/simulate.md) or html (one
    /// self-contained page).
    #[arg(short = 'o', long = "format", env = "KERF_FORMAT", value_enum, default_value_t = SimulateOutput::Table)]
    pub format: SimulateOutput,
    #[command(flatten)]
    pub output: OutputFileArgs,
}

pub async fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let from = super::parse_time_flag("--from", &args.from)?;
    let to = super::parse_time_flag("--to", &args.to)?;
    let manifests = args.objects.read(None).await?;
    manifests.reject_invalid()?;
    let every = match &args.every {
        Some(e) => DurationStr::parse(e).map_err(|e| anyhow::anyhow!("--every: {e}"))?,
        None => manifests
            .snapshot
            .global
            .gpu_reactive_check_interval
            .clone(),
    };
    let source =
        super::metric_source(&args.source, &args.connection, &manifests.snapshot.global).await?;
    let opts = Options {
        from,
        to,
        every_seconds: every.seconds() as i64,
        step_seconds: args.step_seconds,
    };
    let report = crate::simulate::run(manifests, &source, &opts).await?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let out = match args.format {
        SimulateOutput::Table => report::to_table(&report),
        SimulateOutput::Json => serde_json::to_string_pretty(&report::to_json(&report))? + "\n",
        SimulateOutput::Html => report::to_html(&report),
    };
    args.output.write(&out)
}
