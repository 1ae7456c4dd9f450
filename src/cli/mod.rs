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
    /// How log lines are written to stderr: `text` (one readable line each) or `json` (one JSON
    /// object each, with the spans it is in: a cycle's `id`, a write's `cycle`; docs/metrics.md).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "KERF_LOG_FORMAT")]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Evaluate policies over manifests or a cluster (read-only) and a metric source; print
    /// recommendations.
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
    #[command(flatten)]
    pub objects: ObjectSourceArgs,
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
    /// Output format: table (for people) or json (the stable machine-readable contract).
    #[arg(short = 'o', long, env = "KERF_FORMAT", value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
    #[command(flatten)]
    pub output: OutputFileArgs,
    #[command(flatten)]
    pub own_namespace: OwnNamespaceArgs,
}

/// Where a one-shot command reads the cluster's objects: manifests, or a live cluster read-only.
/// Exactly one is required, so a cluster is never read by surprise.
#[derive(Args, Debug, Clone)]
#[group(skip)]
#[command(group(clap::ArgGroup::new("objects").required(true).args(["manifests", "kubeconfig"])))]
pub struct ObjectSourceArgs {
    /// YAML manifests (policies, strategies, configuration, workloads, pods, HPAs): a directory
    /// (read recursively), one file, or `kubectl get -o yaml` output (a `kind: List`).
    #[arg(long, env = "KERF_MANIFESTS", value_name = "PATH")]
    pub manifests: Option<PathBuf>,
    /// Read the objects from the cluster of this kubeconfig instead, read-only: list calls only,
    /// nothing is written.
    #[arg(long, env = "KERF_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    // Not `requires`: clap waives it when a conflicting flag (--manifests) is given.
    #[arg(
        long,
        env = "KERF_CONTEXT",
        value_name = "NAME",
        conflicts_with = "manifests"
    )]
    pub context: Option<String>,
    /// With --kubeconfig: list namespaced objects in this namespace only (cluster-scoped
    /// policies and configuration are still read).
    #[arg(
        short = 'n',
        long,
        env = "KERF_NAMESPACE",
        value_name = "NAMESPACE",
        conflicts_with = "manifests"
    )]
    pub namespace: Option<String>,
    /// A field of a Kubernetes kind (Deployment, Pod, …) that kerf's types do not know is an
    /// error, not a warning (kerf's own kinds are always read strictly).
    #[arg(long, env = "KERF_STRICT")]
    pub strict: bool,
}

impl ObjectSourceArgs {
    /// The objects, from the manifests or listed from the cluster, with kerf's own namespace
    /// (when it has one) protected. A cluster without kerf's CRDs is said on stderr.
    pub async fn read(
        &self,
        own_namespace: Option<&str>,
    ) -> anyhow::Result<crate::sources::dir::Manifests> {
        let mut manifests = match (&self.manifests, &self.kubeconfig) {
            (Some(path), _) => crate::sources::dir::load_dir(path)?,
            (None, Some(kubeconfig)) => {
                let client = self.client(kubeconfig).await?;
                let listed =
                    crate::sources::kube::list::list_cluster(&client, self.namespace.as_deref())
                        .await?;
                if !listed.missing_crds.is_empty() {
                    eprintln!(
                        "warning: the cluster does not serve {} (kerf's CRDs are not installed): \
                         no such objects read; `kubectl apply -f manifests/crds/` and a policy \
                         let kerf recommend without running in the cluster",
                        listed.missing_crds.join(", ")
                    );
                }
                listed.manifests
            }
            (None, None) => anyhow::bail!("give --manifests PATH or --kubeconfig PATH"),
        };
        if self.strict {
            manifests.reject_warnings()?;
        }
        for w in &manifests.warnings {
            eprintln!("warning: {w}");
        }
        if let Some(skipped) = manifests.skipped() {
            eprintln!("{skipped}");
        }
        if let Some(ns) = own_namespace {
            manifests.snapshot.global.protect(ns);
        }
        Ok(manifests)
    }

    async fn client(&self, path: &std::path::Path) -> anyhow::Result<::kube::Client> {
        let kubeconfig = ::kube::config::Kubeconfig::read_from(path)
            .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {e}", path.display()))?;
        let options = ::kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let config = ::kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| {
                let what = match &self.context {
                    Some(c) => format!("--kubeconfig {} --context {c}", path.display()),
                    None => format!("--kubeconfig {}", path.display()),
                };
                anyhow::anyhow!("{what}: {e}")
            })?;
        ::kube::Client::try_from(config)
            .map_err(|e| anyhow::anyhow!("--kubeconfig {}: {e}", path.display()))
    }
}

/// Report formats: a value of `--output` that is one of these is a mistake for `-o`.
const FORMAT_NAMES: [&str; 3] = ["table", "json", "html"];

/// `--output FILE`, refusing a format name (`--output json` meant `-o json`).
fn output_file(value: &str) -> Result<PathBuf, String> {
    if FORMAT_NAMES.contains(&value) {
        return Err(format!(
            "{value:?} is a format: use -o {value} (--format {value}); --output takes a file \
             (./{value} for a file of that name)"
        ));
    }
    if value.is_empty() {
        return Err("a file name is required".into());
    }
    Ok(PathBuf::from(value))
}

/// Where a command writes its report.
#[derive(Args, Debug, Clone, Default)]
pub struct OutputFileArgs {
    /// Write the report to this file instead of stdout (the format is -o).
    #[arg(
        long = "output",
        env = "KERF_OUTPUT",
        value_name = "FILE",
        value_parser = output_file
    )]
    pub output: Option<PathBuf>,
}

impl OutputFileArgs {
    /// Writes `report` to the file, or to stdout.
    pub fn write(&self, report: &str) -> anyhow::Result<()> {
        match &self.output {
            Some(path) => std::fs::write(path, report)
                .map_err(|e| anyhow::anyhow!("--output {}: cannot write: {e}", path.display())),
            None => {
                print!("{report}");
                Ok(())
            }
        }
    }
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
    .map_err(Into::into)
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every flag of every subcommand (nested ones included), as clap builds them.
    fn flags(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for arg in cmd.get_arguments() {
            let generated = matches!(arg.get_id().as_str(), "help" | "version");
            if !arg.is_positional() && !generated {
                out.push((path.to_string(), arg.clone()));
            }
        }
        for sub in cmd.get_subcommands() {
            flags(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    /// README promises an environment variable for every flag: each flag has a description and
    /// a `KERF_*` variable, and no variable means two things within one command.
    #[test]
    fn every_flag_has_a_description_and_an_environment_variable() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut all = Vec::new();
        flags(&cmd, "kerf", &mut all);
        assert!(all.len() > 60, "{} flags", all.len());
        let mut missing = Vec::new();
        let mut by_command: std::collections::BTreeMap<(String, String), String> =
            Default::default();
        for (path, arg) in &all {
            let long = arg.get_long().unwrap_or_default();
            if arg
                .get_help()
                .is_none_or(|h| h.to_string().trim().is_empty())
            {
                missing.push(format!("{path} --{long}: no description"));
            }
            match arg.get_env().and_then(|e| e.to_str()) {
                Some(env) if env.starts_with("KERF_") => {
                    if let Some(other) =
                        by_command.insert((path.clone(), env.to_string()), long.to_string())
                    {
                        missing.push(format!("{path}: {env} is both --{other} and --{long}"));
                    }
                }
                Some(env) => missing.push(format!("{path} --{long}: {env} is not KERF_*")),
                None => missing.push(format!("{path} --{long}: no environment variable")),
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// One vocabulary: `-o/--format` picks the format wherever a report is printed, `--output`
    /// is always a file, and a format name given to `--output` is refused with the fix.
    #[test]
    fn format_and_output_mean_the_same_on_every_command() {
        for command in ["recommend", "simulate"] {
            let cmd = Cli::command();
            let sub = cmd.find_subcommand(command).unwrap();
            let format = sub
                .get_arguments()
                .find(|a| a.get_short() == Some('o'))
                .unwrap_or_else(|| panic!("{command}: no -o"));
            assert_eq!(format.get_long(), Some("format"), "{command}");
            let output = sub
                .get_arguments()
                .find(|a| a.get_long() == Some("output"))
                .unwrap_or_else(|| panic!("{command}: no --output"));
            assert_eq!(
                output.get_value_names().unwrap()[0].as_str(),
                "FILE",
                "{command}"
            );
            let base = match command {
                "recommend" => vec!["kerf", "recommend", "--manifests", "m", "--metrics", "x"],
                _ => vec![
                    "kerf",
                    "simulate",
                    "--manifests",
                    "m",
                    "--metrics",
                    "x",
                    "--from",
                    "a",
                    "--to",
                    "b",
                ],
            };
            for name in ["json", "table", "html"] {
                let mut argv = base.clone();
                argv.extend(["--output", name]);
                let err = Cli::try_parse_from(&argv).unwrap_err().to_string();
                assert!(
                    err.contains(&format!("use -o {name}")),
                    "{command} --output {name}: {err}"
                );
            }
            let mut argv = base.clone();
            argv.extend(["-o", "json", "--output", "./json"]);
            Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{command}: {e}"));
        }
    }
}
