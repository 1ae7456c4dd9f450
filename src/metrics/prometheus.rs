//! Metric source backed by the Prometheus HTTP API: one POSTed range query per [`RangeQuery`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_http_query::Client;
use serde::Deserialize;

use super::promql::{self, Group};
use super::{MetricError, MetricSource, RangeQuery, SeriesSet};
use crate::telemetry::{QueryLabels, metrics};

/// Longest part of an error body quoted in an error message.
const MAX_QUOTED_BODY: usize = 512;

pub struct PrometheusSource {
    client: Client,
    timeout: Duration,
    /// Counter-ness per metric name from `/api/v1/metadata` (asked once per name).
    counters: Mutex<HashMap<String, bool>>,
}

impl PrometheusSource {
    /// `url` is GlobalConfiguration `prometheus.url`, `timeout` its `requestTimeout`: the limit
    /// for each whole HTTP exchange (connect, query, body).
    pub fn new(url: &str, timeout: Duration) -> Result<Self, MetricError> {
        // reqwest is built without a bundled crypto provider; kerf uses ring everywhere.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| MetricError::Other(format!("cannot build HTTP client: {e}")))?;
        let client = Client::from(http, url)
            .map_err(|e| MetricError::Other(format!("invalid Prometheus URL {url:?}: {e}")))?;
        Ok(Self {
            client,
            timeout,
            counters: Mutex::new(HashMap::new()),
        })
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
        match self.client.metric_metadata().metric(&q.metric).get().await {
            Ok(meta) => {
                let counter = meta
                    .values()
                    .flatten()
                    .any(|m| m.metric_type().is_counter());
                self.counters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(q.metric.clone(), counter);
                Ok(counter)
            }
            Err(e) => match self.transport_error(&e) {
                // Prometheus is unreachable: the range query would fail the same way.
                Some(fault) => Err(fault),
                // Metadata unsupported (e.g. some proxies): answer the query, treat as a gauge.
                None => {
                    warnings.push(format!(
                        "{}: metadata lookup failed ({e}); treated as a gauge",
                        q.metric
                    ));
                    Ok(false)
                }
            },
        }
    }

    /// The request never got an HTTP answer (timeout, refused or dropped connection), if that
    /// is what `e` is.
    fn transport_error(&self, e: &prometheus_http_query::Error) -> Option<MetricError> {
        match e {
            prometheus_http_query::Error::Client(c) => c
                .inner()
                .filter(|r| !r.is_status() && (r.is_timeout() || r.is_connect() || r.is_request()))
                .map(|r| {
                    if r.is_timeout() {
                        MetricError::Timeout(self.timeout)
                    } else {
                        MetricError::Unavailable(error_chain(r))
                    }
                }),
            _ => None,
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
        let text = promql::build_query(q, counter);
        let response = self
            .client
            .query_range(
                text,
                q.start.timestamp(),
                q.end.timestamp(),
                q.step_seconds as f64,
            )
            .timeout(i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX))
            .post_raw()
            .await
            .map_err(|e| {
                self.transport_error(&e)
                    .unwrap_or_else(|| MetricError::Unavailable(e.to_string()))
            })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.body_error(&e))?;
        let groups = parse_response(q, status, &body, &mut warnings)?;
        Ok(promql::finish(q, groups, warnings))
    }
}

impl MetricSource for PrometheusSource {
    async fn range_query(&self, query: &RangeQuery) -> Result<SeriesSet, MetricError> {
        let labels = QueryLabels {
            signal: query.metric.clone(),
        };
        let started = Instant::now();
        let result = self.query(query).await;
        let m = metrics();
        m.prometheus_query_duration_seconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if result.is_err() {
            m.prometheus_query_failures.get_or_create(&labels).inc();
        }
        result
    }
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
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<ApiSeries>,
}

#[derive(Deserialize)]
struct ApiSeries {
    #[serde(default)]
    metric: HashMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

fn quoted(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(MAX_QUOTED_BODY) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Turns a `/api/v1/query_range` answer into groups keyed by the query's label names; never
/// panics on any input.
fn parse_response(
    q: &RangeQuery,
    status: reqwest::StatusCode,
    body: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Vec<Group>, MetricError> {
    let parsed: Result<ApiResponse, _> = serde_json::from_slice(body);
    if !status.is_success() {
        let detail = match &parsed {
            Ok(r) if r.error.is_some() => format!(
                "{}: {}",
                r.error_type.as_deref().unwrap_or("error"),
                r.error.as_deref().unwrap_or_default()
            ),
            _ => quoted(body),
        };
        return Err(MetricError::BadResponse(format!("HTTP {status}: {detail}")));
    }
    let r = parsed
        .map_err(|e| MetricError::BadResponse(format!("malformed JSON ({e}): {}", quoted(body))))?;
    if r.status != "success" {
        return Err(MetricError::BadResponse(format!(
            "status {:?}: {}: {}",
            r.status,
            r.error_type.as_deref().unwrap_or("error"),
            r.error.as_deref().unwrap_or_default()
        )));
    }
    warnings.extend(r.warnings.into_iter().map(|w| format!("prometheus: {w}")));
    let data = r
        .data
        .ok_or_else(|| MetricError::BadResponse("success response without data".into()))?;
    if data.result_type != "matrix" {
        return Err(MetricError::BadResponse(format!(
            "expected a matrix result, got {:?}",
            data.result_type
        )));
    }
    let mut groups = Vec::with_capacity(data.result.len());
    for s in data.result {
        let mut points = Vec::with_capacity(s.values.len());
        for (ts, v) in s.values {
            let value = v.parse::<f64>().map_err(|_| {
                MetricError::BadResponse(format!("sample value {v:?} is not a number"))
            })?;
            if !ts.is_finite() {
                return Err(MetricError::BadResponse(format!(
                    "sample timestamp {ts} is not finite"
                )));
            }
            points.push((ts.round() as i64, value));
        }
        let label = |l: &str| s.metric.get(l).cloned().unwrap_or_default();
        groups.push(Group {
            namespace: label(&q.namespace_label),
            pod: label(&q.pod_label),
            container: label(&q.container_label),
            points,
        });
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use reqwest::StatusCode;

    fn q() -> RangeQuery {
        RangeQuery {
            metric: "m".into(),
            namespace_label: "ns".into(),
            pod_label: "pod".into(),
            container_label: "ctr".into(),
            namespaces: vec!["a".into()],
            pods: vec![],
            start: Utc.timestamp_opt(0, 0).unwrap(),
            end: Utc.timestamp_opt(60, 0).unwrap(),
            step_seconds: 60,
            counter: Some(false),
            aggregation: Default::default(),
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
