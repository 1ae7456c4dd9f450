//! Command-line interface. Every flag has an environment variable (`KERF_*`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod recommend;
pub mod serve;

#[derive(Parser, Debug)]
#[command(name = "kerf", version, about = "Kubernetes rightsizer: fractional GPUs (KAI), CPU/memory, HPA-aware")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Evaluate policies from a directory of manifests and a metric source; print recommendations.
    Recommend(RecommendArgs),
    /// Run the admission webhook (and, in-cluster, the reconciler).
    Serve(serve::ServeArgs),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Table,
    Json,
}

/// Where metrics come from in standalone mode.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct MetricSourceArgs {
    /// OpenMetrics file (the format `promtool tsdb create-blocks-from openmetrics` reads).
    #[arg(long, env = "KERF_METRICS")]
    pub metrics: Option<PathBuf>,
    /// Prometheus base URL (e.g. http://127.0.0.1:9090).
    #[arg(long, env = "KERF_PROMETHEUS")]
    pub prometheus: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct RecommendArgs {
    /// Directory of YAML manifests (policies, strategies, configuration, workloads, pods, HPAs).
    #[arg(long, env = "KERF_MANIFESTS")]
    pub manifests: PathBuf,
    #[command(flatten)]
    pub source: MetricSourceArgs,
    /// Evaluation time (RFC 3339); default now.
    #[arg(long, env = "KERF_AT")]
    pub at: Option<String>,
    /// Query step in seconds.
    #[arg(long, env = "KERF_STEP_SECONDS", default_value_t = 15)]
    pub step_seconds: i64,
    #[arg(short = 'o', long, env = "KERF_OUTPUT", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Recommend(args) => recommend::run(args).await,
        Command::Serve(args) => serve::run(args).await,
    }
}
