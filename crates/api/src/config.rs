//! Cluster-wide singletons: GlobalConfiguration (`global-config`) and PolicyEvaluation
//! (`policy-evaluation`).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::*;

pub const GLOBAL_CONFIGURATION_NAME: &str = "global-config";
pub const POLICY_EVALUATION_NAME: &str = "policy-evaluation";

fn default_request_timeout() -> DurationStr {
    DurationStr::parse("30s").expect("valid literal")
}
fn default_check_interval() -> DurationStr {
    DurationStr::parse("1m").expect("valid literal")
}
fn default_kai_scheduler() -> String {
    "kai-scheduler".into()
}
fn default_protected_namespaces() -> Vec<String> {
    vec!["kube-system".into(), "kerf-system".into()]
}
fn default_prometheus_url() -> String {
    "http://prometheus.monitoring.svc:9090".into()
}

/// How kerf reaches Prometheus (or Thanos, Mimir, VictoriaMetrics: anything serving the
/// Prometheus query API). Credentials and keys are never written here: the fields name files
/// mounted into kerf's pod (a Secret volume, a projected service-account token).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.bearerTokenFile) || !has(self.basicAuth)").message("prometheus.bearerTokenFile and prometheus.basicAuth exclude each other: both set the Authorization header").field_path(".basicAuth"))]
#[x_kube(validation = Rule::new("!has(self.tls) || self.url.startsWith('https://')").message("prometheus.tls needs an https:// url").field_path(".tls"))]
pub struct PrometheusSettings {
    #[serde(default = "default_prometheus_url")]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("prometheus.url must be an http(s) URL"))]
    pub url: String,
    #[serde(default = "default_request_timeout")]
    #[x_kube(validation = Rule::new(CEL_NOT_ZERO).message("requestTimeout must be > 0"))]
    pub request_timeout: DurationStr,
    /// File holding a bearer token, sent as `Authorization: Bearer <token>`. Read again at every
    /// request, so a rotated token (a projected service-account token) is picked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub bearer_token_file: Option<String>,
    /// HTTP basic authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<PrometheusBasicAuth>,
    /// TLS towards an https:// url: a private CA, a client certificate (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<PrometheusTls>,
    /// HTTP headers sent with every request (e.g. `X-Scope-OrgID` for a Mimir/Cortex tenant).
    /// Not for credentials: `Authorization` is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub headers: Vec<PrometheusHeader>,
    /// URL query parameters added to every request (e.g. `dedup=true` for Thanos).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub query_params: Vec<PrometheusQueryParam>,
    /// A label matcher added to every selector kerf sends, for a Prometheus that stores many
    /// clusters (e.g. `cluster="prod-eu"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_label: Option<PrometheusClusterLabel>,
    /// Which cAdvisor series the CPU/memory recommendations read: the metric names and label
    /// matchers that pick one scrape of them (a cluster scraping cAdvisor twice, through the
    /// kubelet and a standalone cAdvisor, otherwise counts both).
    #[serde(default, skip_serializing_if = "ResourceMetrics::is_default")]
    pub resource_metrics: ResourceMetrics,
}

/// cAdvisor's metric names (namespace/pod/container labels): the defaults of
/// [`ResourceMetrics`].
pub const CPU_USAGE_METRIC: &str = "container_cpu_usage_seconds_total";
pub const MEMORY_METRIC: &str = "container_memory_working_set_bytes";
pub const THROTTLED_PERIODS_METRIC: &str = "container_cpu_cfs_throttled_periods_total";
pub const PERIODS_METRIC: &str = "container_cpu_cfs_periods_total";

fn default_cpu_metric() -> String {
    CPU_USAGE_METRIC.into()
}
fn default_memory_metric() -> String {
    MEMORY_METRIC.into()
}
fn default_throttling_metric() -> String {
    THROTTLED_PERIODS_METRIC.into()
}
fn default_periods_metric() -> String {
    PERIODS_METRIC.into()
}

/// The cAdvisor series kerf reads for CPU/memory (`namespace`, `pod`, `container` labels), as
/// the VPA recommender makes its Prometheus names configurable. Defaults: cAdvisor's names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceMetrics {
    /// CPU usage counter, in seconds (rated).
    #[serde(default = "default_cpu_metric")]
    #[x_kube(validation = Rule::new(CEL_METRIC_NAME).message("resourceMetrics.cpu must be a Prometheus metric name"))]
    pub cpu: String,
    /// Memory working-set gauge, in bytes.
    #[serde(default = "default_memory_metric")]
    #[x_kube(validation = Rule::new(CEL_METRIC_NAME).message("resourceMetrics.memory must be a Prometheus metric name"))]
    pub memory: String,
    /// Throttled CFS periods counter.
    #[serde(default = "default_throttling_metric")]
    #[x_kube(validation = Rule::new(CEL_METRIC_NAME).message("resourceMetrics.throttling must be a Prometheus metric name"))]
    pub throttling: String,
    /// CFS periods counter (the throttled share's denominator).
    #[serde(default = "default_periods_metric")]
    #[x_kube(validation = Rule::new(CEL_METRIC_NAME).message("resourceMetrics.periods must be a Prometheus metric name"))]
    pub periods: String,
    /// Label matchers `name="value"` added to every selector of these series (not to
    /// kube-state-metrics'), e.g. `job="kubelet"`, `metrics_path="/metrics/cadvisor"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(m, !m.matches('^(namespace|pod|container)='))").message("matchers: kerf selects namespace, pod and container itself"))]
    pub matchers: Vec<PrometheusMatcher>,
}

/// A Prometheus metric name (the CRD's check; [`GlobalConfigurationSpec::validate`] the same).
const CEL_METRIC_NAME: &str = "self.matches('^[a-zA-Z_:][a-zA-Z0-9_:]*$')";

impl Default for ResourceMetrics {
    fn default() -> Self {
        Self {
            cpu: default_cpu_metric(),
            memory: default_memory_metric(),
            throttling: default_throttling_metric(),
            periods: default_periods_metric(),
            matchers: Vec::new(),
        }
    }
}

impl ResourceMetrics {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    fn check(&self, v: &mut Validator) {
        let field = "spec.prometheus.resourceMetrics";
        for (name, value) in [
            ("cpu", &self.cpu),
            ("memory", &self.memory),
            ("throttling", &self.throttling),
            ("periods", &self.periods),
        ] {
            v.check(
                kerf_support::metric_name::is_metric_name(value),
                format!("{field}.{name}"),
                format!("{value:?} is not a Prometheus metric name"),
            );
        }
        for (i, m) in self.matchers.iter().enumerate() {
            let parsed = m.parse();
            v.check(
                parsed.is_ok(),
                format!("{field}.matchers[{i}]"),
                parsed.as_ref().err().cloned().unwrap_or_default(),
            );
            let name = parsed.map(|(n, _)| n).unwrap_or_default();
            v.check(
                !matches!(name.as_str(), "namespace" | "pod" | "container"),
                format!("{field}.matchers[{i}]"),
                format!("{name:?} is selected by kerf itself (the workload's pods and containers)"),
            );
        }
    }
}

/// One equality matcher as PromQL writes it, `name="value"` (e.g. `job="kubelet"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct PrometheusMatcher(
    #[schemars(
        length(max = 4352),
        regex(pattern = r#"^[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"$"#)
    )]
    pub String,
);

impl PrometheusMatcher {
    /// The label name and the value (PromQL's `\"` and `\\` escapes undone), or why the text
    /// is not `name="value"`.
    pub fn parse(&self) -> Result<(String, String), String> {
        let text = self.0.as_str();
        let (name, quoted) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?} is not name=\"value\""))?;
        if !kerf_support::metric_name::is_label_name(name) {
            return Err(format!("{name:?} is not a Prometheus label name"));
        }
        let inner = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .filter(|q| !q.is_empty() || quoted.len() == 2)
            .ok_or_else(|| {
                format!("{text:?}: the value must be in double quotes, as in job=\"kubelet\"")
            })?;
        let mut value = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(e @ ('"' | '\\')) => value.push(e),
                    _ => return Err(format!("{text:?}: unknown escape in the value")),
                },
                '"' => {
                    return Err(format!(
                        "{text:?}: a quote inside the value must be escaped"
                    ));
                }
                c => value.push(c),
            }
        }
        Ok((name.to_string(), value))
    }
}

impl Default for PrometheusSettings {
    fn default() -> Self {
        Self {
            url: default_prometheus_url(),
            request_timeout: default_request_timeout(),
            bearer_token_file: None,
            basic_auth: None,
            tls: None,
            headers: Vec::new(),
            query_params: Vec::new(),
            cluster_label: None,
            resource_metrics: ResourceMetrics::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusBasicAuth {
    #[schemars(length(min = 1))]
    pub user: String,
    /// File holding the password (e.g. a mounted Secret key), read again at every request.
    #[schemars(length(min = 1))]
    pub password_file: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.certFile) == has(self.keyFile)").message("tls.certFile and tls.keyFile go together (the client certificate and its key)").field_path(".keyFile"))]
#[x_kube(validation = Rule::new("!has(self.caFile) || !has(self.insecureSkipVerify) || !self.insecureSkipVerify").message("tls.insecureSkipVerify ignores tls.caFile: set one of them").field_path(".insecureSkipVerify"))]
pub struct PrometheusTls {
    /// PEM file of the CA(s) the server certificate must chain to, instead of the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub ca_file: Option<String>,
    /// PEM client certificate for mutual TLS (with `keyFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub cert_file: Option<String>,
    /// PEM private key of `certFile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub key_file: Option<String>,
    /// Accept any server certificate (logged as a warning at start). For trials only.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("self.name.matches('^[!#$%&\\'*+.^_`|~0-9A-Za-z-]+$')").message("headers[].name must be an HTTP header name").field_path(".name"))]
#[x_kube(validation = Rule::new("!self.name.matches('^(?i)authorization$')").message("headers[].name: Authorization is set from bearerTokenFile or basicAuth, never inline").field_path(".name"))]
#[x_kube(validation = Rule::new("!self.value.contains('\\n') && !self.value.contains('\\r')").message("headers[].value must be one line").field_path(".value"))]
pub struct PrometheusHeader {
    #[schemars(length(max = 256))]
    pub name: String,
    #[schemars(length(max = 4096))]
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("!(self.name in ['query', 'start', 'end', 'step', 'timeout', 'metric'])").message("queryParams[].name: kerf sets query, start, end, step, timeout and metric itself").field_path(".name"))]
pub struct PrometheusQueryParam {
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    #[schemars(length(max = 4096))]
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
pub struct PrometheusClusterLabel {
    #[schemars(length(max = 256))]
    #[x_kube(validation = Rule::new("self.matches('^[a-zA-Z_][a-zA-Z0-9_]*$')").message("clusterLabel.name must be a Prometheus label name"))]
    pub name: String,
    #[schemars(length(max = 4096))]
    pub value: String,
}

/// Most headers and query parameters (CRD `maxItems`), longest name and value (`maxLength`).
pub const MAX_CONNECTION_ITEMS: usize = 32;
pub const MAX_NAME_LENGTH: usize = 256;
pub const MAX_VALUE_LENGTH: usize = 4096;

/// Query parameters kerf sets itself on `/api/v1/query_range` and `/api/v1/metadata`.
pub const RESERVED_QUERY_PARAMS: [&str; 6] = ["query", "start", "end", "step", "timeout", "metric"];

/// One connection setting, as named in a GlobalConfiguration (`spec.prometheus.…`) or by a
/// `kerf recommend` / `kerf serve --standalone` flag: messages name what the user wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrometheusOption {
    Url,
    BearerTokenFile,
    BasicAuthUser,
    BasicAuthPasswordFile,
    CaFile,
    ClientCert,
    ClientKey,
    InsecureSkipVerify,
    Header,
    QueryParam,
    ClusterLabel,
}

impl PrometheusOption {
    pub fn field(self) -> &'static str {
        match self {
            Self::Url => "spec.prometheus.url",
            Self::BearerTokenFile => "spec.prometheus.bearerTokenFile",
            Self::BasicAuthUser => "spec.prometheus.basicAuth.user",
            Self::BasicAuthPasswordFile => "spec.prometheus.basicAuth.passwordFile",
            Self::CaFile => "spec.prometheus.tls.caFile",
            Self::ClientCert => "spec.prometheus.tls.certFile",
            Self::ClientKey => "spec.prometheus.tls.keyFile",
            Self::InsecureSkipVerify => "spec.prometheus.tls.insecureSkipVerify",
            Self::Header => "spec.prometheus.headers",
            Self::QueryParam => "spec.prometheus.queryParams",
            Self::ClusterLabel => "spec.prometheus.clusterLabel",
        }
    }

    pub fn flag(self) -> &'static str {
        match self {
            Self::Url => "--prometheus",
            Self::BearerTokenFile => "--prometheus-bearer-token-file",
            Self::BasicAuthUser => "--prometheus-basic-auth-user",
            Self::BasicAuthPasswordFile => "--prometheus-basic-auth-password-file",
            Self::CaFile => "--prometheus-ca-file",
            Self::ClientCert => "--prometheus-client-cert",
            Self::ClientKey => "--prometheus-client-key",
            Self::InsecureSkipVerify => "--prometheus-insecure-skip-verify",
            Self::Header => "--prometheus-header",
            Self::QueryParam => "--prometheus-query-param",
            Self::ClusterLabel => "--prometheus-cluster-label",
        }
    }
}

/// Which names messages use for [`PrometheusOption`]s: the GlobalConfiguration's fields
/// (in-cluster) or the command-line flags (`kerf recommend`, `kerf serve --standalone`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OptionNames {
    #[default]
    Fields,
    Flags,
}

impl OptionNames {
    pub fn of(self, option: PrometheusOption) -> &'static str {
        match self {
            Self::Fields => option.field(),
            Self::Flags => option.flag(),
        }
    }

    /// The name of the `i`th entry of a list option (`headers[1].name`; a flag is just repeated).
    pub fn item(self, option: PrometheusOption, i: usize, part: &str) -> String {
        match self {
            Self::Fields => format!("{}[{i}].{part}", option.field()),
            Self::Flags => option.flag().to_string(),
        }
    }
}

/// An HTTP header name (RFC 9110 token).
pub fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

impl PrometheusSettings {
    /// The connection settings' own rules (the CRD checks the same with CEL), each error named
    /// as `names` says. Files are not read here: `kerf::metrics::prometheus::PrometheusSource`
    /// reads them when it is built, and names an unreadable one the same way.
    pub fn check_connection(&self, names: OptionNames) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        self.check_credentials(&mut v, names);
        self.check_tls(&mut v, names);
        self.check_headers_and_parameters(&mut v, names);
        v.finish()
    }

    /// A bearer token file or basic auth, each complete.
    fn check_credentials(&self, v: &mut Validator, names: OptionNames) {
        use PrometheusOption as O;
        let name = |o| names.of(o);
        v.check(
            self.bearer_token_file.is_none() || self.basic_auth.is_none(),
            name(O::BasicAuthUser),
            format!(
                "excludes {}: both set the Authorization header",
                name(O::BearerTokenFile)
            ),
        );
        v.check(
            self.bearer_token_file
                .as_ref()
                .is_none_or(|f| !f.is_empty()),
            name(O::BearerTokenFile),
            "must not be empty",
        );
        if let Some(b) = &self.basic_auth {
            v.check(
                !b.user.is_empty(),
                name(O::BasicAuthUser),
                "must not be empty",
            );
            v.check(
                !b.password_file.is_empty(),
                name(O::BasicAuthPasswordFile),
                format!("is required with {}", name(O::BasicAuthUser)),
            );
        }
    }

    /// TLS over https only, a client certificate with its key, verification either skipped or with a CA.
    fn check_tls(&self, v: &mut Validator, names: OptionNames) {
        use PrometheusOption as O;
        let name = |o| names.of(o);
        if let Some(t) = &self.tls {
            v.check(
                self.url.starts_with("https://"),
                match names {
                    OptionNames::Fields => "spec.prometheus.tls",
                    OptionNames::Flags => t.first_flag(),
                },
                format!("needs an https:// URL (got {})", name(O::Url)),
            );
            for (file, option) in [
                (&t.ca_file, O::CaFile),
                (&t.cert_file, O::ClientCert),
                (&t.key_file, O::ClientKey),
            ] {
                v.check(
                    file.as_ref().is_none_or(|f| !f.is_empty()),
                    name(option),
                    "must not be empty",
                );
            }
            match (&t.cert_file, &t.key_file) {
                (Some(_), None) => v.check(
                    false,
                    name(O::ClientKey),
                    format!("is required with {} (mutual TLS)", name(O::ClientCert)),
                ),
                (None, Some(_)) => v.check(
                    false,
                    name(O::ClientCert),
                    format!("is required with {} (mutual TLS)", name(O::ClientKey)),
                ),
                _ => {}
            }
            v.check(
                !(t.insecure_skip_verify && t.ca_file.is_some()),
                name(O::InsecureSkipVerify),
                format!("ignores {}: set one of them", name(O::CaFile)),
            );
        }
    }

    /// Headers, query parameters and the cluster label: bounded, well-formed, none that kerf sets itself.
    fn check_headers_and_parameters(&self, v: &mut Validator, names: OptionNames) {
        use PrometheusOption as O;
        let name = |o| names.of(o);
        for (option, n) in [
            (O::Header, self.headers.len()),
            (O::QueryParam, self.query_params.len()),
        ] {
            v.check(
                n <= MAX_CONNECTION_ITEMS,
                name(option),
                format!("at most {MAX_CONNECTION_ITEMS} (got {n})"),
            );
        }
        let pairs = self
            .headers
            .iter()
            .map(|h| (O::Header, &h.name, &h.value))
            .chain(
                self.query_params
                    .iter()
                    .map(|p| (O::QueryParam, &p.name, &p.value)),
            )
            .chain(
                self.cluster_label
                    .iter()
                    .map(|l| (O::ClusterLabel, &l.name, &l.value)),
            );
        for (option, n, value) in pairs {
            v.check(
                n.len() <= MAX_NAME_LENGTH && value.len() <= MAX_VALUE_LENGTH,
                name(option),
                format!(
                    "names are at most {MAX_NAME_LENGTH} characters, values at most {MAX_VALUE_LENGTH}"
                ),
            );
        }
        for (i, h) in self.headers.iter().enumerate() {
            let field = names.item(O::Header, i, "name");
            v.check(
                is_header_name(&h.name),
                field.clone(),
                format!("{:?} is not an HTTP header name", h.name),
            );
            v.check(
                !h.name.eq_ignore_ascii_case("authorization"),
                field,
                format!(
                    "Authorization is set from {} or {}, never written inline",
                    name(O::BearerTokenFile),
                    name(O::BasicAuthUser)
                ),
            );
            // The value is not quoted: a header may carry something private.
            v.check(
                !h.value.contains(['\n', '\r']),
                names.item(O::Header, i, "value"),
                format!("the value of {} must be one line", h.name),
            );
        }
        for (i, p) in self.query_params.iter().enumerate() {
            let field = names.item(O::QueryParam, i, "name");
            v.check(
                !p.name.is_empty(),
                field.clone(),
                "the name must not be empty",
            );
            v.check(
                !RESERVED_QUERY_PARAMS.contains(&p.name.as_str()),
                field,
                format!(
                    "{:?} is set by kerf itself ({})",
                    p.name,
                    RESERVED_QUERY_PARAMS.join(", ")
                ),
            );
        }
        if let Some(l) = &self.cluster_label {
            v.check(
                kerf_support::metric_name::is_label_name(&l.name),
                match names {
                    OptionNames::Fields => format!("{}.name", O::ClusterLabel.field()),
                    OptionNames::Flags => O::ClusterLabel.flag().to_string(),
                },
                format!("{:?} is not a Prometheus label name", l.name),
            );
        }
    }
}

impl PrometheusTls {
    /// The first TLS flag given (names a TLS setting that needs https).
    fn first_flag(&self) -> &'static str {
        use PrometheusOption as O;
        if self.ca_file.is_some() {
            O::CaFile.flag()
        } else if self.cert_file.is_some() {
            O::ClientCert.flag()
        } else if self.key_file.is_some() {
            O::ClientKey.flag()
        } else {
            O::InsecureSkipVerify.flag()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KaiSettings {
    #[serde(default = "default_kai_scheduler")]
    #[schemars(length(min = 1))]
    pub scheduler_name: String,
    /// The pod label KAI reads a pod's queue from: KAI's own `global.queueLabelKey` (default
    /// `kai.scheduler/queue`). kerf reads and writes the queue under this key.
    #[serde(default = "default_queue_label_key")]
    #[schemars(length(min = 1))]
    pub queue_label_key: String,
}

/// KAI's default queue label key (its chart's `global.queueLabelKey`).
pub const KAI_DEFAULT_QUEUE_LABEL: &str = "kai.scheduler/queue";

fn default_queue_label_key() -> String {
    KAI_DEFAULT_QUEUE_LABEL.into()
}

impl Default for KaiSettings {
    fn default() -> Self {
        Self {
            scheduler_name: default_kai_scheduler(),
            queue_label_key: default_queue_label_key(),
        }
    }
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "rightsizing.kubex.ai",
    derive = "PartialEq",
    version = "v1alpha1",
    kind = "GlobalConfiguration",
    shortname = "kerfconfig",
    printcolumn = r#"{"name":"Prometheus","type":"string","jsonPath":".spec.prometheus.url"}"#,
    printcolumn = r#"{"name":"Interval","type":"string","jsonPath":".spec.gpuReactiveCheckInterval"}"#,
    printcolumn = r#"{"name":"ReadOnly","type":"boolean","jsonPath":".spec.readOnly"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name == 'global-config'").message("metadata.name must be global-config: GlobalConfiguration is a cluster singleton")
)]
#[serde(rename_all = "camelCase")]
pub struct GlobalConfigurationSpec {
    #[serde(default)]
    pub prometheus: PrometheusSettings,
    /// How often GPU reactive policies are re-evaluated; at least 1m (default 1m).
    #[serde(default = "default_check_interval")]
    #[x_kube(validation = Rule::new(CEL_AT_LEAST_1M).message("gpuReactiveCheckInterval must be at least 1m"))]
    pub gpu_reactive_check_interval: DurationStr,
    /// Per-container winners among GPU policies (default false).
    #[serde(default)]
    pub multi_policy_container_rightsizing_enabled: bool,
    #[serde(default)]
    pub kai: KaiSettings,
    /// Namespaces kerf never mutates (default kube-system and kerf's own).
    #[serde(default = "default_protected_namespaces")]
    pub protected_namespaces: Vec<String>,
    /// When true kerf writes nothing to workloads or HPAs: recommendations only.
    #[serde(default)]
    pub read_only: bool,
    /// More controllers whose objects are workloads (topmost owners of their pods), besides
    /// the kinds kerf knows (docs/workloads.md#listed-kinds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_kinds: Vec<super::listed_kinds::WorkloadKindSpec>,
}

impl Default for GlobalConfigurationSpec {
    fn default() -> Self {
        Self {
            prometheus: PrometheusSettings::default(),
            gpu_reactive_check_interval: default_check_interval(),
            multi_policy_container_rightsizing_enabled: false,
            kai: KaiSettings::default(),
            protected_namespaces: default_protected_namespaces(),
            read_only: false,
            workload_kinds: Vec::new(),
        }
    }
}

impl GlobalConfigurationSpec {
    /// kerf never mutates `namespace` (the one reader of `protectedNamespaces`).
    pub fn is_protected(&self, namespace: &str) -> bool {
        self.protected_namespaces.iter().any(|n| n == namespace)
    }

    /// Adds `namespace` to `protectedNamespaces`: kerf's own namespace is protected whatever the
    /// list says (docs/design/runtime.md#r12).
    pub fn protect(&mut self, namespace: &str) {
        if !self.is_protected(namespace) {
            self.protected_namespaces.push(namespace.to_string());
        }
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        v.at_least_1m(
            &self.gpu_reactive_check_interval,
            "spec.gpuReactiveCheckInterval",
        );
        for (i, k) in self.workload_kinds.iter().enumerate() {
            for (field, why) in k.problems(&format!("spec.workloadKinds[{i}]")) {
                v.check(false, &field, why);
            }
        }
        if let Err(e) = check_http_url(&self.prometheus.url) {
            v.check(false, "spec.prometheus.url", e);
        }
        v.check(
            self.prometheus.request_timeout.seconds() > 0,
            "spec.prometheus.requestTimeout",
            "must be > 0",
        );
        v.merge(self.prometheus.check_connection(OptionNames::Fields));
        self.prometheus.resource_metrics.check(&mut v);
        v.check(
            !self.kai.scheduler_name.is_empty(),
            "spec.kai.schedulerName",
            "must not be empty",
        );
        v.check(
            !self.kai.queue_label_key.is_empty(),
            "spec.kai.queueLabelKey",
            "must not be empty (KAI's default is kai.scheduler/queue)",
        );
        v.finish()
    }
}

impl GlobalConfiguration {
    /// Spec validation plus the singleton name, as the CRD checks it.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        singleton_name(
            &mut v,
            self.metadata.name.as_deref(),
            GLOBAL_CONFIGURATION_NAME,
        );
        v.merge(self.spec.validate());
        v.finish()
    }
}

impl PolicyEvaluation {
    /// Spec validation plus the singleton name, as the CRD checks it.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        singleton_name(
            &mut v,
            self.metadata.name.as_deref(),
            POLICY_EVALUATION_NAME,
        );
        v.merge(self.spec.validate());
        v.finish()
    }
}

fn singleton_name(v: &mut Validator, name: Option<&str>, want: &str) {
    v.check(
        name == Some(want),
        "metadata.name",
        format!(
            "must be {want:?}: this kind is a cluster singleton (got {:?})",
            name.unwrap_or_default()
        ),
    );
}

/// Policy kinds ranked by PolicyEvaluation.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum PolicyType {
    GpuReactivePolicy,
    ClusterGpuReactivePolicy,
    RightsizingPolicy,
    ClusterRightsizingPolicy,
}

impl PolicyType {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyType::GpuReactivePolicy => "GpuReactivePolicy",
            PolicyType::ClusterGpuReactivePolicy => "ClusterGpuReactivePolicy",
            PolicyType::RightsizingPolicy => "RightsizingPolicy",
            PolicyType::ClusterRightsizingPolicy => "ClusterRightsizingPolicy",
        }
    }
    pub fn default_priority(self) -> i32 {
        match self {
            PolicyType::GpuReactivePolicy => 120,
            PolicyType::ClusterGpuReactivePolicy => 110,
            PolicyType::RightsizingPolicy | PolicyType::ClusterRightsizingPolicy => 90,
        }
    }
    pub fn is_cluster(self) -> bool {
        matches!(
            self,
            PolicyType::ClusterGpuReactivePolicy | PolicyType::ClusterRightsizingPolicy
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Precedence {
    #[serde(rename = "type")]
    pub policy_type: PolicyType,
    pub priority: i32,
}

fn default_precedence() -> Vec<Precedence> {
    [
        PolicyType::GpuReactivePolicy,
        PolicyType::ClusterGpuReactivePolicy,
        PolicyType::RightsizingPolicy,
        PolicyType::ClusterRightsizingPolicy,
    ]
    .into_iter()
    .map(|t| Precedence {
        policy_type: t,
        priority: t.default_priority(),
    })
    .collect()
}

#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "rightsizing.kubex.ai",
    derive = "PartialEq",
    version = "v1alpha1",
    kind = "PolicyEvaluation",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name == 'policy-evaluation'").message("metadata.name must be policy-evaluation: PolicyEvaluation is a cluster singleton")
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyEvaluationSpec {
    /// Type priorities; a type not listed keeps its default (GpuReactivePolicy 120,
    /// ClusterGpuReactivePolicy 110, RightsizingPolicy 90, ClusterRightsizingPolicy 90).
    #[serde(default = "default_precedence")]
    #[schemars(length(max = 4))]
    #[x_kube(validation = Rule::new("self.all(p, self.exists_one(q, q.type == p.type))").message("each policy type may appear once in precedence"))]
    pub precedence: Vec<Precedence>,
}

impl Default for PolicyEvaluationSpec {
    fn default() -> Self {
        Self {
            precedence: default_precedence(),
        }
    }
}

impl PolicyEvaluationSpec {
    pub fn priority(&self, t: PolicyType) -> i32 {
        self.precedence
            .iter()
            .find(|p| p.policy_type == t)
            .map_or_else(|| t.default_priority(), |p| p.priority)
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut v = Validator::default();
        for (i, p) in self.precedence.iter().enumerate() {
            let dup = self.precedence[..i]
                .iter()
                .any(|q| q.policy_type == p.policy_type);
            v.check(
                !dup,
                format!("spec.precedence[{i}].type"),
                format!("{} appears more than once", p.policy_type.as_str()),
            );
        }
        v.finish()
    }
}

/// An http(s) URL, or what is wrong with it, said for the user: `no scheme: did you mean
/// http://localhost:9090?`, `empty host`, a space. The one check of every URL kerf is given
/// (GlobalConfiguration `spec.prometheus.url`, `--prometheus`); credentials in it are never
/// repeated.
pub fn check_http_url(text: &str) -> Result<url::Url, String> {
    let shown = kerf_support::redact::redact(text);
    if text.trim().is_empty() {
        return Err("empty: give an http:// or https:// URL".into());
    }
    if text.chars().any(char::is_whitespace) {
        return Err("contains a space: a URL has none (percent-encode it as %20)".into());
    }
    if !text.contains("://") {
        // Without a scheme, `redact` does not see `user:password@`.
        let shown = match text.split_once('@') {
            Some((user_info, host)) if !user_info.contains('/') => format!("***@{host}"),
            _ => shown,
        };
        return Err(format!("no scheme: did you mean http://{shown}?"));
    }
    let url = url::Url::parse(text).map_err(|e| match e {
        url::ParseError::EmptyHost => "empty host".to_string(),
        e => format!("{shown:?} is not a URL: {e}"),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {} is not http or https", url.scheme()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("empty host".into());
    }
    Ok(url)
}

#[cfg(test)]
mod url_tests {
    use super::check_http_url;

    /// Each way a URL goes wrong is named, with the fix where there is one.
    #[test]
    fn a_bad_url_says_what_is_wrong() {
        for (text, expected) in [
            (
                "localhost:9090",
                "no scheme: did you mean http://localhost:9090?",
            ),
            ("http://", "empty host"),
            ("http://:9090", "empty host"),
            (
                "http://prom host:9090",
                "contains a space: a URL has none (percent-encode it as %20)",
            ),
            ("ftp://prom:21", "scheme ftp is not http or https"),
            ("", "empty: give an http:// or https:// URL"),
        ] {
            assert_eq!(check_http_url(text).unwrap_err(), expected, "{text}");
        }
        for good in ["http://127.0.0.1:9090", "https://prom.example/prefix/"] {
            assert_eq!(
                check_http_url(good).unwrap().as_str().trim_end_matches('/'),
                good.trim_end_matches('/')
            );
        }
        // Credentials are not repeated.
        let e = check_http_url("user:secret@prom:9090").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }
}

#[cfg(test)]
mod matcher_tests {
    use super::PrometheusMatcher;

    /// `resourceMetrics.matchers` are PromQL equality matchers, as written in a selector.
    #[test]
    fn matchers_are_read_as_promql_writes_them() {
        let m = |s: &str| PrometheusMatcher(s.into()).parse();
        assert_eq!(m(r#"job="kubelet""#), Ok(("job".into(), "kubelet".into())));
        assert_eq!(
            m(r#"metrics_path="/metrics/cadvisor""#),
            Ok(("metrics_path".into(), "/metrics/cadvisor".into()))
        );
        assert_eq!(
            m(r#"a="say \"hi\" \\ ok""#),
            Ok(("a".into(), r#"say "hi" \ ok"#.into()))
        );
        assert_eq!(m(r#"empty="""#), Ok(("empty".into(), String::new())));
        for bad in [
            "job=kubelet",
            "job",
            r#"1job="x""#,
            r#"job="x"y""#,
            r#"job="\q""#,
        ] {
            assert!(m(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod workload_kinds_tests {
    use super::GlobalConfigurationSpec;

    /// A `workloadKinds` entry kerf cannot use fails validation naming its field.
    #[test]
    fn workload_kinds_are_validated_by_field() {
        let spec: GlobalConfigurationSpec = serde_json::from_value(serde_json::json!({
            "workloadKinds": [
                {"group": "serving.example.com", "version": "v1", "kind": "ModelDeployment"},
                {"group": "apps", "version": "v1", "kind": "StatefulSet"},
                {"group": "apps.example.com", "version": "v1", "kind": "Server", "templatePath": "spec."}
            ]
        }))
        .unwrap();
        let e = spec.validate().unwrap_err().to_string();
        assert!(e.contains("spec.workloadKinds[1].kind"), "{e}");
        assert!(e.contains("spec.workloadKinds[2].templatePath"), "{e}");
        assert!(!e.contains("spec.workloadKinds[0]"), "{e}");
    }
}
