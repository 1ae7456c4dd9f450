//! Metric source backed by the Prometheus HTTP API — Prometheus, Thanos, Mimir/Cortex,
//! VictoriaMetrics: one POSTed range query per [`RangeQuery`], over reqwest with rustls (ring).
//!
//! The connection settings (GlobalConfiguration `spec.prometheus` in-cluster, the
//! `--prometheus-*` flags otherwise) add credentials read from files (a bearer token or basic
//! auth, read again at every request so rotated secrets are picked up), TLS (a private CA, a
//! client certificate), headers, query parameters, and the cluster label added to every
//! selector. Credentials never appear in an error: messages name the setting and its file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::decode;
use super::promql::{self, Group, LabelMatcher};
use super::window::{self, WindowKey, WindowQuery, WindowSet};
use super::{MetricError, MetricSource, RangeQuery, SeriesSet};
use crate::api::{OptionNames, PrometheusOption as O, PrometheusSettings};
use crate::telemetry::{Metrics, QueryFailureLabels, QueryLabels};

/// Longest part of an error body quoted in an error message.
const MAX_QUOTED_BODY: usize = 512;

/// How kerf authenticates: the secret stays in its file and is read at every request.
enum Auth {
    Bearer {
        file: PathBuf,
    },
    Basic {
        user: String,
        password_file: PathBuf,
    },
}

pub struct PrometheusSource {
    http: reqwest::Client,
    timeout: Duration,
    /// Where and how to ask (boxed: kept out of [`super::AnySource`]'s size).
    conn: Box<Connection>,
    /// Counter-ness per metric name from `/api/v1/metadata` (asked once per name).
    counters: Mutex<HashMap<String, bool>>,
    /// Where query latency and failures are reported: the process's registry
    /// ([`PrometheusSource::reporting_to`]), else one of its own.
    metrics: Arc<Metrics>,
}

struct Connection {
    /// `…/api/v1/query_range`, `…/api/v1/query` and `…/api/v1/metadata`, with the configured
    /// query parameters.
    query_range_url: Url,
    query_url: Url,
    metadata_url: Url,
    auth: Option<Auth>,
    /// The URL carries `user:password@` (reqwest sends it as basic auth).
    url_credentials: bool,
    cluster: Option<LabelMatcher>,
    /// How messages name the settings: GlobalConfiguration fields or command-line flags.
    names: OptionNames,
}

impl PrometheusSource {
    /// `url` is GlobalConfiguration `prometheus.url`, `timeout` its `requestTimeout`: the limit
    /// for each whole HTTP exchange (connect, query, body). No credentials, TLS defaults.
    /// Reports query latency and failures to `metrics` (the registry `/metrics` serves) instead
    /// of a registry of its own.
    pub fn reporting_to(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn new(url: &str, timeout: Duration) -> Result<Self, MetricError> {
        let settings = PrometheusSettings {
            url: url.to_string(),
            ..PrometheusSettings::default()
        };
        Self::build(&settings, timeout, OptionNames::Flags)
    }

    /// A source with every connection setting of `settings` (timeout: its `requestTimeout`).
    /// Invalid settings and unreadable files fail here, each named as `names` says; the bearer
    /// token and the password are read again at every request.
    pub fn connect(settings: &PrometheusSettings, names: OptionNames) -> Result<Self, MetricError> {
        let timeout = Duration::from_secs(settings.request_timeout.seconds());
        Self::build(settings, timeout, names)
    }

    fn build(
        settings: &PrometheusSettings,
        timeout: Duration,
        names: OptionNames,
    ) -> Result<Self, MetricError> {
        settings
            .check_connection(names)
            .map_err(|e| MetricError::Other(e.to_string()))?;
        let base: Url = crate::api::check_http_url(&settings.url)
            .map_err(|e| MetricError::Other(format!("{}: {e}", names.of(O::Url))))?;
        let url_credentials = !base.username().is_empty() || base.password().is_some();
        let auth = match (&settings.bearer_token_file, &settings.basic_auth) {
            (Some(file), _) => Some((
                O::BearerTokenFile,
                Auth::Bearer {
                    file: PathBuf::from(file),
                },
            )),
            (None, Some(b)) => Some((
                O::BasicAuthUser,
                Auth::Basic {
                    user: b.user.clone(),
                    password_file: PathBuf::from(&b.password_file),
                },
            )),
            (None, None) => None,
        };
        if let Some((option, _)) = &auth
            && url_credentials
        {
            return Err(MetricError::Other(format!(
                "{}: the URL ({}) carries credentials already; give one or the other",
                names.of(*option),
                names.of(O::Url)
            )));
        }
        let auth = auth.map(|(_, a)| a);
        // Fail at start on a secret file kerf cannot use (it is read again at every request).
        if let Some(a) = &auth {
            let (option, file) = match a {
                Auth::Bearer { file } => (O::BearerTokenFile, file),
                Auth::Basic { password_file, .. } => (O::BasicAuthPasswordFile, password_file),
            };
            read_secret_sync(file, names.of(option))?;
        }

        // reqwest is built without a bundled crypto provider; kerf uses ring everywhere.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .default_headers(default_headers(settings, names)?);
        if let Some(tls) = &settings.tls {
            if let Some(ca) = &tls.ca_file {
                let pem = read_file(ca, names.of(O::CaFile))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .ok()
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| {
                        MetricError::Other(format!(
                            "{} {ca}: no PEM certificate in the file",
                            names.of(O::CaFile)
                        ))
                    })?;
                http = http.tls_certs_only(certs);
            }
            if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
                let mut pem = read_file(cert, names.of(O::ClientCert))?;
                pem.push(b'\n');
                pem.extend(read_file(key, names.of(O::ClientKey))?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                    MetricError::Other(format!(
                        "{} {cert} with {} {key}: not a PEM certificate and private key: {}",
                        names.of(O::ClientCert),
                        names.of(O::ClientKey),
                        error_chain(&e)
                    ))
                })?;
                http = http.identity(identity);
            }
            if tls.insecure_skip_verify {
                tracing::warn!(
                    "{} is set: the certificate of {} is not verified, so anyone on the path can \
                     read and change kerf's queries and the credentials it sends",
                    names.of(O::InsecureSkipVerify),
                    crate::support::redact::redact(&settings.url)
                );
                http = http.tls_danger_accept_invalid_certs(true);
            }
        }
        let http = http
            .build()
            .map_err(|e| MetricError::Other(format!("cannot build HTTP client: {e}")))?;
        let params: Vec<(&str, &str)> = settings
            .query_params
            .iter()
            .map(|p| (p.name.as_str(), p.value.as_str()))
            .collect();
        Ok(Self {
            http,
            timeout,
            conn: Box::new(Connection {
                query_range_url: endpoint(&base, "api/v1/query_range", &params),
                query_url: endpoint(&base, "api/v1/query", &params),
                metadata_url: endpoint(&base, "api/v1/metadata", &params),
                auth,
                url_credentials,
                cluster: settings.cluster_label.as_ref().map(|l| LabelMatcher {
                    name: l.name.clone(),
                    value: l.value.clone(),
                }),
                names,
            }),
            counters: Mutex::new(HashMap::new()),
            metrics: Metrics::new(),
        })
    }

    /// The `Authorization` header for the next request, from the files as they are now.
    async fn authorization(&self) -> Result<Option<HeaderValue>, MetricError> {
        let value = match &self.conn.auth {
            None => return Ok(None),
            Some(Auth::Bearer { file }) => {
                let token = read_secret(file, self.conn.names.of(O::BearerTokenFile)).await?;
                format!("Bearer {token}")
            }
            Some(Auth::Basic {
                user,
                password_file,
            }) => {
                let password =
                    read_secret(password_file, self.conn.names.of(O::BasicAuthPasswordFile))
                        .await?;
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                format!("Basic {pair}")
            }
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            MetricError::Other(format!(
                "{}: the credential read from the file is not a valid header value",
                self.auth_option_name()
            ))
        })?;
        value.set_sensitive(true);
        Ok(Some(value))
    }

    fn auth_option_name(&self) -> &'static str {
        match &self.conn.auth {
            Some(Auth::Basic { .. }) => self.conn.names.of(O::BasicAuthPasswordFile),
            _ => self.conn.names.of(O::BearerTokenFile),
        }
    }

    /// Sends `request` with the current credentials; a request that got no HTTP answer is
    /// a timeout or an unavailable source.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, MetricError> {
        let request = match self.authorization().await? {
            Some(v) => request.header(AUTHORIZATION, v),
            None => request,
        };
        request.send().await.map_err(|e| {
            if e.is_timeout() {
                MetricError::Timeout(self.timeout)
            } else {
                MetricError::Unavailable(describe(e))
            }
        })
    }

    /// HTTP 401/403: the server refused kerf's credentials (or their absence).
    fn refused(&self, url: &Url, status: StatusCode, body: &[u8]) -> Option<MetricError> {
        if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
            return None;
        }
        let sent = match &self.conn.auth {
            Some(Auth::Bearer { file }) => format!(
                "the bearer token read from {} {}",
                self.conn.names.of(O::BearerTokenFile),
                file.display()
            ),
            Some(Auth::Basic {
                user,
                password_file,
            }) => format!(
                "basic auth as {user:?} with the password read from {} {}",
                self.conn.names.of(O::BasicAuthPasswordFile),
                password_file.display()
            ),
            None if self.conn.url_credentials => "the credentials in the URL".to_string(),
            None => format!(
                "no credentials (see {} and {})",
                self.conn.names.of(O::BearerTokenFile),
                self.conn.names.of(O::BasicAuthUser)
            ),
        };
        let verdict = if status == StatusCode::UNAUTHORIZED {
            "refused"
        } else {
            "not allowed to query (forbidden)"
        };
        Some(MetricError::Unauthorized(format!(
            "HTTP {status} from {}: kerf sent {sent}, {verdict}: {}",
            bare(url),
            quoted(body)
        )))
    }

    async fn is_counter(
        &self,
        q: &RangeQuery,
        warnings: &mut Vec<String>,
    ) -> Result<bool, MetricError> {
        if let Some(known) = q.counter {
            return Ok(known);
        }
        if q.metric.ends_with("_total") {
            return Ok(true);
        }
        if let Some(known) = self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&q.metric)
        {
            return Ok(*known);
        }
        let mut url = self.conn.metadata_url.clone();
        url.query_pairs_mut().append_pair("metric", &q.metric);
        // Unreachable: the range query would fail the same way.
        let response = self.send(self.http.get(url.clone())).await?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.body_error(&e))?;
        if let Some(refused) = self.refused(&url, status, &body) {
            return Err(refused);
        }
        match parse_metadata(status, &body) {
            Ok(counter) => {
                self.counters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(q.metric.clone(), counter);
                Ok(counter)
            }
            // Metadata unsupported (e.g. some proxies): answer the query, treat as a gauge.
            Err(why) => {
                warnings.push(format!(
                    "{}: metadata lookup failed ({why}); treated as a gauge",
                    q.metric
                ));
                Ok(false)
            }
        }
    }

    /// Failure while reading an answer's body.
    fn body_error(&self, e: &reqwest::Error) -> MetricError {
        if e.is_timeout() {
            MetricError::Timeout(self.timeout)
        } else {
            MetricError::Unavailable(format!(
                "connection lost while reading the answer: {}",
                error_chain(e)
            ))
        }
    }

    async fn query(&self, q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        promql::validate(q)?;
        if q.namespaces.is_empty() {
            return Ok(SeriesSet::default()); // no namespace can match: nothing to ask
        }
        let mut warnings = Vec::new();
        let counter = self.is_counter(q, &mut warnings).await?;
        let text = promql::build_query_matching(q, counter, self.conn.cluster.as_ref());
        let form = [
            ("query", text),
            ("start", q.start.as_second().to_string()),
            ("end", q.end.as_second().to_string()),
            ("step", q.step_seconds.to_string()),
        ];
        let (status, body) = self.post(&self.conn.query_range_url, &form).await?;
        let groups = parse_response(q, status, &body, &mut warnings)?;
        Ok(promql::finish(q, groups, warnings))
    }
}

impl PrometheusSource {
    /// One instant query at `q.at` (`stats=all`: the answer says how many samples it loaded).
    async fn window(&self, q: &WindowQuery) -> Result<WindowSet, MetricError> {
        window::validate(q)?;
        if q.workloads.is_empty() {
            return Ok(WindowSet::default());
        }
        let text = window::build(q, self.conn.cluster.as_ref());
        let form = [
            ("query", text),
            ("time", q.at.as_second().to_string()),
            ("stats", "all".to_string()),
        ];
        let (status, body) = self.post(&self.conn.query_url, &form).await?;
        parse_vector(q, status, &body)
    }
}

impl PrometheusSource {
    /// POSTs a query `form` (with the request timeout as Prometheus's own `timeout`) to `url`:
    /// the answer's status and body, or the refusal of a query too big.
    async fn post(
        &self,
        url: &Url,
        form: &[(&str, String)],
    ) -> Result<(StatusCode, bytes::Bytes), MetricError> {
        let timeout_ms = i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX);
        let mut form = form.to_vec();
        form.push(("timeout", format!("{timeout_ms}ms")));
        let response = self.send(self.http.post(url.clone()).form(&form)).await?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.body_error(&e))?;
        if let Some(refused) = self.refused(url, status, &body) {
            return Err(refused);
        }
        Ok((status, body))
    }

    /// One range query on the window's grid over the steps of `q` (`stats=all`).
    async fn steps(&self, q: &window::StepQuery) -> Result<window::StepSet, MetricError> {
        window::validate(&q.window)?;
        let grid = q.grid();
        let (Some(start), Some(end)) = (grid.first(), grid.last()) else {
            return Ok(window::StepSet::default());
        };
        if q.window.workloads.is_empty() {
            return Ok(window::StepSet::default());
        }
        let owners = window::PodOwners::new(&q.window)?;
        let text = window::build_steps(&q.window, self.conn.cluster.as_ref());
        let form = [
            ("query", text),
            ("start", start.to_string()),
            ("end", end.to_string()),
            ("step", q.window.step_seconds.to_string()),
            ("stats", "all".to_string()),
        ];
        let (status, body) = self.post(&self.conn.query_range_url, &form).await?;
        parse_steps(&q.window, &owners, status, &body)
    }
}

/// Turns a `/api/v1/query_range` answer to a step query into a [`window::StepSet`]; never
/// panics. A series whose pod is no workload's of the query, or without a container, is skipped;
/// values that are not finite are dropped, with a warning.
fn parse_steps(
    q: &WindowQuery,
    owners: &window::PodOwners,
    status: StatusCode,
    body: &[u8],
) -> Result<window::StepSet, MetricError> {
    let labels = decode::KeyLabels {
        namespace: &q.namespace_label,
        pod: &q.pod_label,
        container: &q.container_label,
    };
    let r = checked(status, body, decode::decode(labels, body))?;
    let data = result_of(r.data, |d| &d.result_type, "matrix")?;
    if let Some(v) = data.bad_value {
        return Err(MetricError::BadResponse(format!(
            "sample value {v:?} is not a number"
        )));
    }
    let mut out = window::StepSet {
        warnings: r
            .warnings
            .into_iter()
            .map(|w| format!("prometheus: {w}"))
            .collect(),
        samples_loaded: data.samples_loaded,
        queries: 1,
        ..Default::default()
    };
    for g in data.result {
        let Some(workload) = owners
            .workload(&g.namespace, &g.pod)
            .filter(|_| !g.container.is_empty())
        else {
            out.warnings.push(format!(
                "{}: skipped series namespace={:?} pod={:?} container={:?}: no workload or container",
                q.metric, g.namespace, g.pod, g.container
            ));
            continue;
        };
        let total = g.points.len();
        let steps: Vec<(i64, f64)> = g
            .points
            .into_iter()
            .filter(|(_, v)| v.is_finite())
            .collect();
        if steps.len() != total {
            out.warnings.push(format!(
                "{}: dropped {} NaN/Inf sample(s) of {}/{}/{}",
                q.metric,
                total - steps.len(),
                g.namespace,
                g.pod,
                g.container
            ));
        }
        out.steps.push(window::PodSteps {
            key: WindowKey {
                namespace: g.namespace,
                workload,
                container: g.container,
            },
            pod: g.pod,
            steps,
        });
    }
    Ok(out)
}

/// What a query's answer says about its cost, for its span: series or values returned, and
/// the samples Prometheus loaded when it said.
trait Answered {
    fn returned(&self) -> usize;
    fn loaded(&self) -> Option<u64> {
        None
    }
}

impl Answered for SeriesSet {
    fn returned(&self) -> usize {
        self.series.values().map(Vec::len).sum()
    }
}

impl Answered for WindowSet {
    fn returned(&self) -> usize {
        self.values.len()
    }
    fn loaded(&self) -> Option<u64> {
        self.samples_loaded
    }
}

impl Answered for window::StepSet {
    fn returned(&self) -> usize {
        self.steps.iter().map(|p| p.steps.len()).sum()
    }
    fn loaded(&self) -> Option<u64> {
        self.samples_loaded
    }
}

/// Times `answer` and counts its failure, by signal (the metric name), in a span naming the
/// query kind and signal that records its duration, the values it returned and the samples it
/// loaded (or its error's reason).
async fn observed<T: Answered>(
    m: &Metrics,
    kind: &'static str,
    metric: &str,
    answer: impl std::future::Future<Output = Result<T, MetricError>>,
) -> Result<T, MetricError> {
    use tracing::Instrument as _;
    let span = tracing::debug_span!(
        "prometheus_query",
        kind,
        signal = metric,
        duration_ms = tracing::field::Empty,
        returned = tracing::field::Empty,
        samples_loaded = tracing::field::Empty,
        error = tracing::field::Empty,
    );
    let labels = QueryLabels {
        signal: metric.to_string(),
    };
    let started = Instant::now();
    let result = answer.instrument(span.clone()).await;
    let elapsed = started.elapsed();
    span.record("duration_ms", elapsed.as_millis() as u64);
    m.prometheus_query_duration_seconds
        .get_or_create(&labels)
        .observe(elapsed.as_secs_f64());
    match &result {
        Ok(a) => {
            span.record("returned", a.returned() as u64);
            if let Some(n) = a.loaded() {
                span.record("samples_loaded", n);
            }
        }
        Err(e) => {
            span.record("error", e.label());
            m.prometheus_query_failures
                .get_or_create(&QueryFailureLabels {
                    signal: labels.signal.clone(),
                    reason: e.label(),
                })
                .inc();
        }
    }
    span.in_scope(|| tracing::debug!("prometheus query answered"));
    result
}

/// `kerf_prometheus_samples_loaded_total`: what a query cost Prometheus, when it said
/// (`stats=all`; VictoriaMetrics does not).
fn count_loaded(m: &Metrics, metric: &str, loaded: Option<u64>) {
    if let Some(n) = loaded {
        let labels = QueryLabels {
            signal: metric.to_string(),
        };
        m.prometheus_samples_loaded.get_or_create(&labels).inc_by(n);
    }
}

impl MetricSource for PrometheusSource {
    async fn range_query(&self, query: &RangeQuery) -> Result<SeriesSet, MetricError> {
        observed(&self.metrics, "range", &query.metric, self.query(query)).await
    }

    async fn window_query(&self, query: &WindowQuery) -> Result<WindowSet, MetricError> {
        let answer = observed(&self.metrics, "window", &query.metric, self.window(query)).await;
        let loaded = answer.as_ref().ok().and_then(|a| a.samples_loaded);
        count_loaded(&self.metrics, &query.metric, loaded);
        answer
    }

    async fn step_query(&self, query: &window::StepQuery) -> Result<window::StepSet, MetricError> {
        let answer = observed(
            &self.metrics,
            "step",
            &query.window.metric,
            self.steps(query),
        )
        .await;
        let loaded = answer.as_ref().ok().and_then(|a| a.samples_loaded);
        count_loaded(&self.metrics, &query.window.metric, loaded);
        answer
    }

    fn record_split(&self) {
        self.metrics.prometheus_query_splits.inc();
    }
}

/// `base` + `/path`, keeping a path prefix (`https://mimir/prometheus`) and the base's own query,
/// with `params` added.
fn endpoint(base: &Url, path: &str, params: &[(&str, &str)]) -> Url {
    let mut url = base.clone();
    url.set_path(&format!("{}/{path}", base.path().trim_end_matches('/')));
    if !params.is_empty() {
        url.query_pairs_mut().extend_pairs(params);
    }
    url
}

/// `url` without credentials and query: what an error message may show.
fn bare(url: &Url) -> Url {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url
}

/// A request error with its cause chain and the URL it was for, minus credentials and query.
fn describe(e: reqwest::Error) -> String {
    let e = match e.url().map(bare) {
        Some(url) => e.with_url(url),
        None => e,
    };
    error_chain(&e)
}

/// The headers of `settings` (sent with every request), each value marked sensitive.
fn default_headers(
    settings: &PrometheusSettings,
    names: OptionNames,
) -> Result<HeaderMap, MetricError> {
    let mut headers = HeaderMap::new();
    for (i, h) in settings.headers.iter().enumerate() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| {
            MetricError::Other(format!(
                "{}: {:?} is not an HTTP header name",
                names.item(O::Header, i, "name"),
                h.name
            ))
        })?;
        // The value is not quoted: a header may carry something private.
        let mut value = HeaderValue::from_str(&h.value).map_err(|_| {
            MetricError::Other(format!(
                "{}: the value of {} is not a valid header value",
                names.item(O::Header, i, "value"),
                h.name
            ))
        })?;
        value.set_sensitive(true);
        headers.append(name, value);
    }
    Ok(headers)
}

fn read_file(path: &str, option: &str) -> Result<Vec<u8>, MetricError> {
    std::fs::read(path)
        .map_err(|e| MetricError::Other(format!("{option} {path}: cannot read: {e}")))
}

/// A secret file's content, trimmed; an empty one is an error. Never quoted in a message.
fn secret_from(
    read: std::io::Result<String>,
    file: &Path,
    option: &str,
) -> Result<String, MetricError> {
    let text = read.map_err(|e| {
        MetricError::Other(format!("{option} {}: cannot read: {e}", file.display()))
    })?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(MetricError::Other(format!(
            "{option} {}: the file is empty",
            file.display()
        )));
    }
    Ok(secret.to_string())
}

fn read_secret_sync(file: &Path, option: &str) -> Result<String, MetricError> {
    secret_from(std::fs::read_to_string(file), file, option)
}

async fn read_secret(file: &Path, option: &str) -> Result<String, MetricError> {
    secret_from(tokio::fs::read_to_string(file).await, file, option)
}

/// `reqwest` hides the useful cause (e.g. "Connection refused") in its source chain.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[derive(Deserialize)]
struct MetadataResponse {
    status: String,
    #[serde(default)]
    data: HashMap<String, Vec<MetadataEntry>>,
}

#[derive(Deserialize)]
struct MetadataEntry {
    #[serde(default, rename = "type")]
    metric_type: String,
}

/// Whether a `/api/v1/metadata?metric=…` answer types the metric as a counter; `Err(why)` when
/// the answer is no usable metadata.
fn parse_metadata(status: StatusCode, body: &[u8]) -> Result<bool, String> {
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", quoted(body)));
    }
    let r: MetadataResponse = serde_json::from_slice(body)
        .map_err(|e| format!("malformed JSON ({e}): {}", quoted(body)))?;
    if r.status != "success" {
        return Err(format!("status {:?}", r.status));
    }
    Ok(r.data
        .values()
        .flatten()
        .any(|m| m.metric_type == "counter"))
}

fn quoted(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX_QUOTED_BODY) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// An error answer: refused as too big (too many samples: HTTP 422 `execution`; the query
/// timeout: `timeout`) or another bad response.
fn error_answer(
    status: StatusCode,
    // `errorType` and `error` of the answer, when its body was a Prometheus answer at all.
    reported: Option<(Option<&str>, Option<&str>)>,
    body: &[u8],
) -> MetricError {
    let (kind, error) = reported.unwrap_or((None, None));
    let detail = match error {
        Some(e) => format!("{}: {e}", kind.unwrap_or("error")),
        None => quoted(body),
    };
    let too_many = error.is_some_and(|e| e.contains("too many samples"));
    if too_many || kind == Some("timeout") {
        MetricError::Refused(format!("HTTP {status}: {detail}"))
    } else {
        MetricError::BadResponse(format!("HTTP {status}: {detail}"))
    }
}

#[derive(Deserialize)]
struct VectorData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<VectorSample>,
    #[serde(default)]
    stats: Option<QueryStats>,
}

#[derive(Deserialize)]
struct VectorSample {
    #[serde(default)]
    metric: HashMap<String, String>,
    value: (f64, String),
}

#[derive(Deserialize)]
struct QueryStats {
    #[serde(default)]
    samples: Option<SampleStats>,
}

#[derive(Deserialize)]
struct SampleStats {
    #[serde(default, rename = "totalQueryableSamples")]
    total_queryable_samples: Option<u64>,
}

/// An `/api/v1/query` or `/api/v1/query_range` answer, its `data` typed by `D`.
#[derive(Deserialize)]
struct Response<D> {
    status: String,
    #[serde(default = "Option::default")]
    data: Option<D>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

type VectorResponse = Response<VectorData>;

/// Turns a `/api/v1/query` answer to a window query into a [`WindowSet`]; never panics on any
/// input. Values that are not finite and results without a workload or container are skipped
/// with a warning.
fn parse_vector(
    q: &WindowQuery,
    status: StatusCode,
    body: &[u8],
) -> Result<WindowSet, MetricError> {
    let r = checked(status, body, serde_json::from_slice::<VectorResponse>(body))?;
    let mut warnings: Vec<String> = r
        .warnings
        .into_iter()
        .map(|w| format!("prometheus: {w}"))
        .collect();
    let data = result_of(r.data, |d| &d.result_type, "vector")?;
    let mut values = std::collections::BTreeMap::new();
    for s in data.result {
        let v = s.value.1.parse::<f64>().map_err(|_| {
            MetricError::BadResponse(format!("sample value {:?} is not a number", s.value.1))
        })?;
        let label = |l: &str| s.metric.get(l).cloned().unwrap_or_default();
        let key = WindowKey {
            namespace: label(&q.namespace_label),
            workload: label(window::WORKLOAD_LABEL),
            container: label(&q.container_label),
        };
        if key.namespace.is_empty()
            || key.workload.is_empty()
            || key.container.is_empty()
            || !v.is_finite()
        {
            warnings.push(format!(
                "{}: skipped result {}/{}/{} = {v}",
                q.metric, key.namespace, key.workload, key.container
            ));
            continue;
        }
        values.insert(key, v);
    }
    Ok(WindowSet {
        values,
        warnings,
        samples_loaded: data
            .stats
            .and_then(|s| s.samples)
            .and_then(|s| s.total_queryable_samples),
        queries: 1,
        splits: 0,
    })
}

/// The `data` of a successful answer, of the result type expected.
fn result_of<D>(
    data: Option<D>,
    result_type: impl Fn(&D) -> &str,
    want: &str,
) -> Result<D, MetricError> {
    let data =
        data.ok_or_else(|| MetricError::BadResponse("success response without data".into()))?;
    if result_type(&data) != want {
        return Err(MetricError::BadResponse(format!(
            "expected a {want} result, got {:?}",
            result_type(&data)
        )));
    }
    Ok(data)
}

/// What every answer says of itself: its status and, failed, the error type and error.
trait Envelope {
    fn envelope(&self) -> (&str, Option<&str>, Option<&str>);
}

impl Envelope for decode::Answer {
    fn envelope(&self) -> (&str, Option<&str>, Option<&str>) {
        (
            &self.status,
            self.error_type.as_deref(),
            self.error.as_deref(),
        )
    }
}

impl<D> Envelope for Response<D> {
    fn envelope(&self) -> (&str, Option<&str>, Option<&str>) {
        (
            &self.status,
            self.error_type.as_deref(),
            self.error.as_deref(),
        )
    }
}

/// `parsed` (the decoded `body`), or the error the answer is: an HTTP error with what
/// Prometheus said, malformed JSON, a status other than `success`.
fn checked<R: Envelope, E: std::fmt::Display>(
    status: StatusCode,
    body: &[u8],
    parsed: Result<R, E>,
) -> Result<R, MetricError> {
    if !status.is_success() {
        let reported = parsed.as_ref().ok().map(|r| {
            let (_, kind, error) = r.envelope();
            (kind, error)
        });
        return Err(error_answer(status, reported, body));
    }
    let r = parsed
        .map_err(|e| MetricError::BadResponse(format!("malformed JSON ({e}): {}", quoted(body))))?;
    let (answer, kind, error) = r.envelope();
    if answer != "success" {
        return Err(MetricError::BadResponse(format!(
            "status {answer:?}: {}: {}",
            kind.unwrap_or("error"),
            error.unwrap_or_default()
        )));
    }
    Ok(r)
}

/// Turns a `/api/v1/query_range` answer into groups keyed by the query's label names; never
/// panics on any input.
fn parse_response(
    q: &RangeQuery,
    status: reqwest::StatusCode,
    body: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Vec<Group>, MetricError> {
    let labels = decode::KeyLabels {
        namespace: &q.namespace_label,
        pod: &q.pod_label,
        container: &q.container_label,
    };
    let r = checked(status, body, decode::decode(labels, body))?;
    warnings.extend(r.warnings.into_iter().map(|w| format!("prometheus: {w}")));
    let data = result_of(r.data, |d| &d.result_type, "matrix")?;
    if let Some(v) = data.bad_value {
        return Err(MetricError::BadResponse(format!(
            "sample value {v:?} is not a number"
        )));
    }
    Ok(data.result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn q() -> RangeQuery {
        RangeQuery {
            metric: "m".into(),
            namespace_label: "ns".into(),
            pod_label: "pod".into(),
            container_label: "ctr".into(),
            namespaces: vec!["a".into()],
            pods: Default::default(),
            start: Timestamp::from_second(0).unwrap(),
            end: Timestamp::from_second(60).unwrap(),
            step_seconds: 60,
            counter: Some(false),
            aggregation: Default::default(),
            matchers: Vec::new(),
        }
    }

    fn parse(status: u16, body: &str) -> Result<(Vec<Group>, Vec<String>), MetricError> {
        let mut w = Vec::new();
        parse_response(
            &q(),
            StatusCode::from_u16(status).unwrap(),
            body.as_bytes(),
            &mut w,
        )
        .map(|g| (g, w))
    }

    #[test]
    fn parses_matrix_with_special_values_and_warnings() {
        let body = r#"{"status":"success","warnings":["w1"],"data":{"resultType":"matrix","result":[
            {"metric":{"ns":"a","pod":"p","ctr":"c"},"values":[[0,"1.5"],[60,"NaN"],[120,"+Inf"]]},
            {"metric":{"ns":"a","pod":"p"},"values":[[0,"2"]]}]}}"#;
        let (groups, warnings) = parse(200, body).unwrap();
        assert_eq!(warnings, vec!["prometheus: w1".to_string()]);
        assert_eq!(groups[0].container, "c");
        assert_eq!(groups[0].points[0], (0, 1.5));
        assert!(groups[0].points[1].1.is_nan());
        assert_eq!(groups[1].container, "");
        let set = promql::finish(&q(), groups, warnings);
        assert_eq!(set.series.len(), 1);
        assert_eq!(set.warnings.len(), 3, "{:?}", set.warnings);
    }

    #[test]
    fn every_malformed_answer_is_a_bad_response() {
        let cases: &[(u16, &str, &str)] = &[
            (200, "garbage", "malformed JSON"),
            (200, "", "malformed JSON"),
            (200, r#"{"status":"success"}"#, "without data"),
            (
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                "expected a matrix",
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[0,"x"]]}]}}"#,
                "not a number",
            ),
            (
                200,
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[0]]}]}}"#,
                "malformed JSON",
            ),
            (
                200,
                r#"{"status":"error","errorType":"bad_data","error":"boom"}"#,
                "boom",
            ),
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
                "HTTP 400 Bad Request: bad_data: parse error at char 3",
            ),
            (
                500,
                "<html>oops</html>",
                "HTTP 500 Internal Server Error: <html>oops</html>",
            ),
            (503, &"x".repeat(5000), "…"),
        ];
        for (status, body, want) in cases {
            match parse(*status, body) {
                Err(MetricError::BadResponse(m)) => {
                    assert!(m.contains(want), "{status} {body}: {m}")
                }
                other => panic!("{status} {body}: {:?}", other.map(|_| ())),
            }
        }
    }
}
