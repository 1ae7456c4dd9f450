//! Command-line interface. Every flag has an environment variable (`KERF_*`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod bench;
pub mod recommend;
pub mod rollback;
pub mod serve;

#[derive(Parser, Debug)]
#[command(
    name = "kerf",
    version,
    about = "Kubernetes rightsizer: fractional GPUs (KAI), CPU/memory, HPA-aware"
)]
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
    /// Roll a workload back: restore its original requests and HPA target, stop applying.
    Rollback(rollback::RollbackArgs),
    /// Benchmarks (reported in docs/performance.md).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
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

/// How kerf finds its own namespace (always protected, docs/design/runtime.md#r12):
/// `POD_NAMESPACE`, else this file.
#[derive(Args, Debug, Clone)]
pub struct OwnNamespaceArgs {
    /// The service-account namespace file, read when `POD_NAMESPACE` is not set.
    #[arg(
        long,
        env = "KERF_NAMESPACE_FILE",
        default_value = crate::own_namespace::SERVICE_ACCOUNT_NAMESPACE_FILE
    )]
    pub namespace_file: PathBuf,
}

impl OwnNamespaceArgs {
    /// kerf's own namespace, if this process has one.
    pub fn detect(&self) -> Option<String> {
        crate::own_namespace::detect(&self.namespace_file)
    }
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
    #[command(flatten)]
    pub own_namespace: OwnNamespaceArgs,
}

/// `--at` as a timestamp (default: now — the only clock read of a standalone run).
pub fn parse_at(at: Option<&str>) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    match at {
        None => Ok(chrono::Utc::now()),
        Some(t) => Ok(chrono::DateTime::parse_from_rfc3339(t)
            .map_err(|e| anyhow::anyhow!("--at {t:?} is not RFC 3339: {e}"))?
            .with_timezone(&chrono::Utc)),
    }
}

/// The metric source a standalone command reads.
pub async fn metric_source(
    args: &MetricSourceArgs,
    global: &crate::api::GlobalConfigurationSpec,
) -> anyhow::Result<crate::metrics::AnySource> {
    crate::metrics::AnySource::from_args(
        args.metrics.as_deref(),
        args.prometheus.as_deref(),
        global,
    )
    .await
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Recommend(args) => recommend::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Bench(cmd) => bench::run(cmd).await,
        Command::Rollback(args) => rollback::run(args).await,
    }
}
