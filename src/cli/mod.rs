//! Command-line interface. Every flag has an environment variable (`KERF_*`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod bench;
pub mod bench_simulate;
pub mod recommend;
pub mod rollback;
pub mod serve;
pub mod simulate;

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
    /// Replay recorded history through kerf's reconcile loop: what it would have done.
    Simulate(simulate::SimulateArgs),
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

/// How to reach `--prometheus`: credentials (from files), TLS, headers, query parameters, the
/// cluster label. The same settings as GlobalConfiguration `spec.prometheus` in-cluster. Each
/// flag needs `--prometheus` ([`Self::needs_prometheus`]).
#[derive(Args, Debug, Clone, Default)]
pub struct PrometheusConnectionArgs {
    /// File holding a bearer token sent as `Authorization: Bearer …`; read again at every
    /// request, so a rotated token (a projected service-account token) is picked up.
    #[arg(long, env = "KERF_PROMETHEUS_BEARER_TOKEN_FILE", value_name = "PATH")]
    pub prometheus_bearer_token_file: Option<PathBuf>,
    /// User for HTTP basic auth (with --prometheus-basic-auth-password-file).
    #[arg(long, env = "KERF_PROMETHEUS_BASIC_AUTH_USER", value_name = "USER")]
    pub prometheus_basic_auth_user: Option<String>,
    /// File holding the basic-auth password; read again at every request.
    #[arg(
        long,
        env = "KERF_PROMETHEUS_BASIC_AUTH_PASSWORD_FILE",
        value_name = "PATH"
    )]
    pub prometheus_basic_auth_password_file: Option<PathBuf>,
    /// PEM file of the CA(s) the server certificate must chain to, instead of the system's.
    #[arg(long, env = "KERF_PROMETHEUS_CA_FILE", value_name = "PATH")]
    pub prometheus_ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --prometheus-client-key).
    #[arg(long, env = "KERF_PROMETHEUS_CLIENT_CERT", value_name = "PATH")]
    pub prometheus_client_cert: Option<PathBuf>,
    /// PEM private key of --prometheus-client-cert.
    #[arg(long, env = "KERF_PROMETHEUS_CLIENT_KEY", value_name = "PATH")]
    pub prometheus_client_key: Option<PathBuf>,
    /// Accept any server certificate (logged as a warning at start). For trials only.
    #[arg(long, env = "KERF_PROMETHEUS_INSECURE_SKIP_VERIFY")]
    pub prometheus_insecure_skip_verify: bool,
    /// A header sent with every request, `'Name: value'` (e.g. `X-Scope-OrgID: team-a`);
    /// repeatable (in the environment variable: one per line).
    #[arg(
        long,
        env = "KERF_PROMETHEUS_HEADER",
        value_name = "NAME: VALUE",
        value_delimiter = '\n'
    )]
    pub prometheus_header: Vec<String>,
    /// A query parameter added to every request, `key=value` (e.g. `dedup=true` for Thanos);
    /// repeatable (in the environment variable: `&`-separated).
    #[arg(
        long,
        env = "KERF_PROMETHEUS_QUERY_PARAM",
        value_name = "KEY=VALUE",
        value_delimiter = '&'
    )]
    pub prometheus_query_param: Vec<String>,
    /// A label matcher `name=value` added to every selector, for a Prometheus that stores many
    /// clusters (e.g. `cluster=prod-eu`).
    #[arg(long, env = "KERF_PROMETHEUS_CLUSTER_LABEL", value_name = "NAME=VALUE")]
    pub prometheus_cluster_label: Option<String>,
}

/// `text` split at the first `sep`, or an error naming `option` and the `expected` form.
fn split_pair<'a>(
    text: &'a str,
    sep: char,
    option: crate::api::PrometheusOption,
    expected: &str,
) -> anyhow::Result<(&'a str, &'a str)> {
    text.split_once(sep).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: expected {expected}, got a value without {sep:?}",
            option.flag()
        )
    })
}

impl PrometheusConnectionArgs {
    /// Connection flags are for `--prometheus`: without it (with `--metrics`, or in-cluster,
    /// where GlobalConfiguration `spec.prometheus` says it) the first one given is an error.
    /// Checked here, not by clap: clap counts an environment variable set to `false` as given,
    /// and waives a requirement that conflicts with a flag given.
    pub fn needs_prometheus(&self, prometheus: Option<&str>) -> anyhow::Result<()> {
        use crate::api::PrometheusOption as O;
        if prometheus.is_some() {
            return Ok(());
        }
        let given = [
            (
                self.prometheus_bearer_token_file.is_some(),
                O::BearerTokenFile,
            ),
            (self.prometheus_basic_auth_user.is_some(), O::BasicAuthUser),
            (
                self.prometheus_basic_auth_password_file.is_some(),
                O::BasicAuthPasswordFile,
            ),
            (self.prometheus_ca_file.is_some(), O::CaFile),
            (self.prometheus_client_cert.is_some(), O::ClientCert),
            (self.prometheus_client_key.is_some(), O::ClientKey),
            (self.prometheus_insecure_skip_verify, O::InsecureSkipVerify),
            (!self.prometheus_header.is_empty(), O::Header),
            (!self.prometheus_query_param.is_empty(), O::QueryParam),
            (self.prometheus_cluster_label.is_some(), O::ClusterLabel),
        ];
        match given.iter().find(|(given, _)| *given) {
            None => Ok(()),
            Some((_, option)) => anyhow::bail!(
                "{} needs --prometheus (in-cluster: GlobalConfiguration {})",
                option.flag(),
                option.field()
            ),
        }
    }

    /// The connection settings for `url` (the request timeout from `global`), as a
    /// GlobalConfiguration would write them; a malformed or invalid combination of flags is an
    /// error naming the flag. Header values are never quoted.
    pub fn settings(
        &self,
        url: &str,
        global: &crate::api::GlobalConfigurationSpec,
    ) -> anyhow::Result<crate::api::PrometheusSettings> {
        use crate::api::{
            OptionNames, PrometheusBasicAuth, PrometheusClusterLabel, PrometheusHeader,
            PrometheusOption as O, PrometheusQueryParam, PrometheusTls,
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let basic_auth = match (
            &self.prometheus_basic_auth_user,
            &self.prometheus_basic_auth_password_file,
        ) {
            (None, None) => None,
            (Some(user), Some(file)) => Some(PrometheusBasicAuth {
                user: user.clone(),
                password_file: file.display().to_string(),
            }),
            (Some(_), None) => anyhow::bail!(
                "{} is required with {}",
                O::BasicAuthPasswordFile.flag(),
                O::BasicAuthUser.flag()
            ),
            (None, Some(_)) => anyhow::bail!(
                "{} is required with {}",
                O::BasicAuthUser.flag(),
                O::BasicAuthPasswordFile.flag()
            ),
        };
        let tls = PrometheusTls {
            ca_file: path(&self.prometheus_ca_file),
            cert_file: path(&self.prometheus_client_cert),
            key_file: path(&self.prometheus_client_key),
            insecure_skip_verify: self.prometheus_insecure_skip_verify,
        };
        let mut headers = Vec::new();
        for h in &self.prometheus_header {
            // Not quoted: a header may carry something private.
            let (name, value) = split_pair(h, ':', O::Header, "'Name: value'")?;
            headers.push(PrometheusHeader {
                name: name.trim().to_string(),
                value: value.trim().to_string(),
            });
        }
        let mut query_params = Vec::new();
        for p in &self.prometheus_query_param {
            let (name, value) = split_pair(p, '=', O::QueryParam, "key=value")?;
            query_params.push(PrometheusQueryParam {
                name: name.to_string(),
                value: value.to_string(),
            });
        }
        let cluster_label = match &self.prometheus_cluster_label {
            None => None,
            Some(l) => {
                let (name, value) = split_pair(l, '=', O::ClusterLabel, "name=value")?;
                Some(PrometheusClusterLabel {
                    name: name.to_string(),
                    value: value.to_string(),
                })
            }
        };
        let settings = crate::api::PrometheusSettings {
            url: url.to_string(),
            request_timeout: global.prometheus.request_timeout.clone(),
            bearer_token_file: path(&self.prometheus_bearer_token_file),
            basic_auth,
            tls: (tls != PrometheusTls::default()).then_some(tls),
            headers,
            query_params,
            cluster_label,
            resource_metrics: global.prometheus.resource_metrics.clone(),
        };
        settings.check_connection(OptionNames::Flags)?;
        Ok(settings)
    }
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
    #[command(flatten)]
    pub connection: PrometheusConnectionArgs,
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
pub fn parse_at(at: Option<&str>) -> anyhow::Result<jiff::Timestamp> {
    match at {
        None => Ok(jiff::Timestamp::now()),
        Some(t) => parse_time_flag("--at", t),
    }
}

/// A time flag's RFC 3339 value; the error names the flag.
pub fn parse_time_flag(flag: &str, t: &str) -> anyhow::Result<jiff::Timestamp> {
    t.parse::<jiff::Timestamp>()
        .map_err(|e| anyhow::anyhow!("{flag} {t:?} is not RFC 3339: {e}"))
}

/// The metric source a standalone command reads: the file, or Prometheus reached as the
/// connection flags say (the request timeout from `global`).
pub async fn metric_source(
    args: &MetricSourceArgs,
    connection: &PrometheusConnectionArgs,
    global: &crate::api::GlobalConfigurationSpec,
) -> anyhow::Result<crate::metrics::AnySource> {
    connection.needs_prometheus(args.prometheus.as_deref())?;
    let settings = match &args.prometheus {
        Some(url) => Some(connection.settings(url, global)?),
        None => None,
    };
    crate::metrics::AnySource::open(
        args.metrics.as_deref(),
        settings.as_ref(),
        crate::api::OptionNames::Flags,
    )
    .await
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Recommend(args) => recommend::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Bench(cmd) => bench::run(cmd).await,
        Command::Rollback(args) => rollback::run(args).await,
    }
}
