//! `kerf serve`: the admission webhook (TLS) and the health listener, fed either by the
//! in-cluster reconciler or, with `--standalone`, by periodic evaluation of a manifest directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::Args;

use super::MetricSourceArgs;
use crate::metrics::MetricSource;
use crate::server::{BoundServer, ServeConfig};
use crate::state::Store;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// TLS listen address for `/mutate`.
    #[arg(long, env = "KERF_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain (reloaded when the file changes).
    #[arg(long, env = "KERF_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key (reloaded when the file changes).
    #[arg(long, env = "KERF_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Plain-HTTP listen address for /healthz, /readyz, /metrics and /debug.
    #[arg(long, env = "KERF_HEALTH_LISTEN", default_value = "0.0.0.0:8080")]
    pub health_listen: SocketAddr,
    /// Read objects from `--manifests` instead of the API server.
    #[arg(long, env = "KERF_STANDALONE", requires = "manifests")]
    pub standalone: bool,
    /// Directory of YAML manifests (standalone mode).
    #[arg(long, env = "KERF_MANIFESTS", requires = "standalone")]
    pub manifests: Option<PathBuf>,
    /// OpenMetrics file (standalone mode).
    #[arg(
        long,
        env = "KERF_METRICS",
        conflicts_with = "prometheus",
        requires = "standalone"
    )]
    pub metrics: Option<PathBuf>,
    /// Prometheus base URL (standalone mode).
    #[arg(long, env = "KERF_PROMETHEUS", requires = "standalone")]
    pub prometheus: Option<String>,
    /// Evaluation time (RFC 3339) for standalone mode; default now at each refresh.
    #[arg(long, env = "KERF_AT", requires = "standalone")]
    pub at: Option<String>,
    /// Seconds between cycles in standalone mode, instead of the GlobalConfiguration's
    /// `gpuReactiveCheckInterval` (which cannot go below 1m): for trying kerf out and for tests.
    #[arg(long, env = "KERF_INTERVAL_SECONDS", requires = "standalone")]
    pub interval_seconds: Option<u64>,
    /// Query step in seconds (standalone mode).
    #[arg(long, env = "KERF_STEP_SECONDS", default_value_t = 15)]
    pub step_seconds: i64,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let store = Store::new();
    let config = ServeConfig::new(
        args.listen,
        args.health_listen,
        args.tls_cert.clone(),
        args.tls_key.clone(),
    );
    let server = BoundServer::bind(config).await?;
    let feeder = if args.standalone {
        let dir = args
            .manifests
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--standalone needs --manifests DIR"))?;
        let source = match (&args.metrics, &args.prometheus) {
            (None, None) => anyhow::bail!("--standalone needs --metrics FILE or --prometheus URL"),
            (m, p) => MetricSourceArgs {
                metrics: m.clone(),
                prometheus: p.clone(),
            },
        };
        let at = match args.at.as_deref() {
            None => None,
            Some(t) => Some(
                DateTime::parse_from_rfc3339(t)
                    .map_err(|e| anyhow::anyhow!("--at {t:?} is not RFC 3339: {e}"))?
                    .with_timezone(&Utc),
            ),
        };
        if args.step_seconds <= 0 {
            anyhow::bail!("--step-seconds must be > 0 (got {})", args.step_seconds);
        }
        if args.interval_seconds == Some(0) {
            anyhow::bail!("--interval-seconds must be > 0");
        }
        tokio::spawn(run_standalone(
            dir,
            source,
            at,
            args.step_seconds,
            args.interval_seconds,
            store.clone(),
        ))
    } else {
        tokio::spawn(run_in_cluster(store.clone(), args.step_seconds))
    };
    let result = server.run(store, crate::server::shutdown_signal()).await;
    feeder.abort();
    result
}

/// In-cluster mode: the reconciler keeps `store` filled from the API server and Prometheus and
/// marks it ready once the caches synced and the annotations were read back.
pub async fn run_in_cluster(store: Arc<Store>, step_seconds: i64) -> anyhow::Result<()> {
    let client = ::kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("no Kubernetes client configuration: {e}"))?;
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "kerf-system".into());
    let result = crate::reconciler::run(
        client,
        store,
        crate::reconciler::ReconcilerConfig {
            namespace,
            step_seconds,
        },
    )
    .await;
    if let Err(e) = &result {
        tracing::error!("reconciler stopped: {e:#}");
    }
    result
}

/// Builds the metric source (Prometheus timeout from the directory's GlobalConfiguration) and
/// runs the standalone refresh loop with it.
async fn run_standalone(
    dir: PathBuf,
    source: MetricSourceArgs,
    at: Option<DateTime<Utc>>,
    step_seconds: i64,
    interval_seconds: Option<u64>,
    store: Arc<Store>,
) -> anyhow::Result<()> {
    let global = crate::standalone::load_dir(&dir)
        .map(|m| m.snapshot.global)
        .unwrap_or_default();
    let source = crate::metrics::AnySource::from_args(
        source.metrics.as_deref(),
        source.prometheus.as_deref(),
        &global,
    )
    .await
    .inspect_err(|e| tracing::error!("{e:#}"))?;
    standalone_loop(&dir, &source, at, step_seconds, interval_seconds, &store).await;
    Ok(())
}

/// Runs the reconcile loop over `dir` (see [`crate::standalone::DirLoop`]) now and then every
/// GlobalConfiguration `gpuReactiveCheckInterval` (or `interval_seconds`). A directory that cannot be read keeps the
/// previous content and is retried after `RETRY`; failed queries keep the last recommendations.
pub async fn standalone_loop<S: MetricSource>(
    dir: &Path,
    source: &S,
    at: Option<DateTime<Utc>>,
    step_seconds: i64,
    interval_seconds: Option<u64>,
    store: &Store,
) {
    const RETRY: Duration = Duration::from_secs(10);
    let mut dir_loop = crate::standalone::DirLoop::new(dir);
    loop {
        let now = at.unwrap_or_else(Utc::now);
        let wait = match dir_loop.run_once(source, now, step_seconds, store).await {
            Ok(e) => {
                tracing::info!(
                    workloads = store.len(),
                    failed_policies = e.cycle.query_failures().len(),
                    "standalone cycle done"
                );
                Duration::from_secs(interval_seconds.unwrap_or_else(|| {
                    e.snapshot
                        .global
                        .gpu_reactive_check_interval
                        .seconds()
                        .max(1)
                }))
            }
            Err(e) => {
                tracing::warn!("standalone cycle failed (retrying in {RETRY:?}): {e:#}");
                RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}
