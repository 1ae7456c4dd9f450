//! What both sources share: query validation, the rate window, the PromQL text, and the
//! post-processing of grouped results into a [`SeriesSet`] (so warnings and skipping rules are
//! identical whether the numbers came from the file or from Prometheus).

use std::collections::BTreeMap;

use super::{MetricError, RangeQuery, SeriesKey, SeriesSet};
use kerf_support::metric_name::{is_label_name, is_metric_name};

/// Prometheus refuses range queries with more points per series than this.
pub const MAX_POINTS: i64 = 11_000;

/// Smallest rate window of a range query's counter (the GPU signals): four scrapes at GPU
/// Process Exporter's default 60 s cadence (its `SCRAPE_INTERVAL`), so the window always holds
/// at least two samples, and still two after a missed scrape (docs/design/gpu-engine.md#g2).
pub const MIN_RANGE_RATE_WINDOW_SECONDS: i64 = 240;

/// Window `R` of `rate(m[R])` for a counter read by a range query at `step_seconds`: four steps,
/// never under [`MIN_RANGE_RATE_WINDOW_SECONDS`]. The GPU exporters are scraped every 60 s by
/// default, where a 60 s window holds one sample at most grid points and the counter silently
/// yields nothing. A window of exactly one step holds a single sample when scrapes are as far
/// apart as the step (rate needs ≥ 2), so the window is 4 steps (the Grafana
/// `$__rate_interval` rule of thumb; one missed scrape still leaves a rate) — kerf's reading in
/// docs/design/gpu-engine.md#g2. Both sources use this one function; the shipped recording rule
/// rates over the same 4 minutes. (The CPU/memory window queries rate over the policy's
/// `rateWindow` instead.)
pub fn range_rate_window_seconds(step_seconds: i64) -> i64 {
    (4 * step_seconds).max(MIN_RANGE_RATE_WINDOW_SECONDS)
}

/// Rejects queries neither source can answer, with the same message for both.
pub fn validate(q: &RangeQuery) -> Result<(), MetricError> {
    if !is_metric_name(&q.metric) {
        return Err(MetricError::Other(format!(
            "invalid metric name {:?}",
            q.metric
        )));
    }
    for (what, l) in [
        ("namespace", &q.namespace_label),
        ("pod", &q.pod_label),
        ("container", &q.container_label),
    ]
    .into_iter()
    .chain(q.matchers.iter().map(|m| ("matcher", &m.name)))
    {
        // An empty container label: the series have none (kube-state-metrics).
        let none = what == "container" && l.is_empty();
        if !(none || is_label_name(l)) {
            return Err(MetricError::Other(format!(
                "invalid {what} label name {l:?}"
            )));
        }
    }
    if q.step_seconds <= 0 {
        return Err(MetricError::Other(format!(
            "query step must be positive, got {} s",
            q.step_seconds
        )));
    }
    let (start, end) = (q.start.as_second(), q.end.as_second());
    if end < start {
        return Err(MetricError::Other(format!(
            "query end {} is before start {}",
            q.end, q.start
        )));
    }
    let points = (end - start) / q.step_seconds + 1;
    if points > MAX_POINTS {
        return Err(MetricError::Other(format!(
            "query would return {points} points per series; Prometheus allows at most {MAX_POINTS}: use a larger step"
        )));
    }
    Ok(())
}

/// Escapes regex metacharacters (RE2 syntax) so a value matches only itself.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Quotes a string as a PromQL double-quoted literal.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn alternation(values: &[String]) -> String {
    let parts: Vec<String> = values.iter().map(|v| regex_escape(v)).collect();
    quote(&parts.join("|"))
}

/// The labels a query's results are keyed by: namespace, pod and — when the query has one —
/// container.
pub fn key_labels(q: &RangeQuery) -> String {
    let mut labels = format!("{},{}", q.namespace_label, q.pod_label);
    if !q.container_label.is_empty() {
        labels.push(',');
        labels.push_str(&q.container_label);
    }
    labels
}

/// A label matcher `name="value"` added to a selector (a Prometheus that stores many
/// clusters: GlobalConfiguration `spec.prometheus.clusterLabel`, `--prometheus-cluster-label`;
/// one scrape of cAdvisor: `resourceMetrics.matchers`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LabelMatcher {
    pub name: String,
    pub value: String,
}

impl LabelMatcher {
    /// Whether a series with these labels is selected, as PromQL's `name="value"` selects: a
    /// series without the label has it empty.
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        labels.get(&self.name).map_or("", String::as_str) == self.value
    }

    /// The matchers that pick one scrape of cAdvisor (GlobalConfiguration
    /// `resourceMetrics.matchers`, checked when the configuration is read).
    pub fn of_resource_metrics(metrics: &kerf_api::ResourceMetrics) -> Vec<Self> {
        metrics
            .matchers
            .iter()
            .filter_map(|m| m.parse().ok())
            .map(|(name, value)| LabelMatcher { name, value })
            .collect()
    }
}

/// `sum by (ns,pod,container) (metric{ns=~"a|b",pod=~"p"})`, the selector wrapped in
/// `rate(…[Rs])` for counters. Call [`validate`] first.
pub fn build_query(q: &RangeQuery, counter: bool) -> String {
    build_query_matching(q, counter, None)
}

/// [`build_query`] with `extra` (the cluster label) added to the selector: the one place kerf's
/// selectors are written. `extra.name` must be a label name (checked when the source is built).
pub fn build_query_matching(q: &RangeQuery, counter: bool, extra: Option<&LabelMatcher>) -> String {
    let mut selector = format!("{}{{", q.metric);
    for m in extra.into_iter().chain(&q.matchers) {
        selector.push_str(&format!("{}={},", m.name, quote(&m.value)));
    }
    selector.push_str(&format!(
        "{}=~{}",
        q.namespace_label,
        alternation(&q.namespaces)
    ));
    if !q.pods.is_empty() {
        selector.push_str(&format!(",{}=~{}", q.pod_label, alternation(&q.pods)));
    }
    selector.push('}');
    let inner = if counter {
        format!(
            "rate({selector}[{}s])",
            range_rate_window_seconds(q.step_seconds)
        )
    } else {
        selector
    };
    format!(
        "{} by ({}) ({inner})",
        q.aggregation.as_str(),
        key_labels(q)
    )
}

/// One output group of `sum by (ns,pod,container)`: label values ("" = label absent) and
/// (unix seconds, value) points in ascending time.
pub struct Group {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub points: Vec<(i64, f64)>,
}

/// Turns the grouped results of `q` into a [`SeriesSet`]: groups missing a key label are
/// skipped, NaN/Inf points are dropped, each with a warning; groups left without points are
/// omitted.
pub fn finish(q: &RangeQuery, groups: Vec<Group>, mut warnings: Vec<String>) -> SeriesSet {
    let metric = &q.metric;
    let with_container = !q.container_label.is_empty();
    let mut series = BTreeMap::new();
    for g in groups {
        let missing: Vec<&str> = [
            ("namespace", &g.namespace, true),
            ("pod", &g.pod, true),
            ("container", &g.container, with_container),
        ]
        .into_iter()
        .filter(|(_, v, keyed)| *keyed && v.is_empty())
        .map(|(n, _, _)| n)
        .collect();
        if !missing.is_empty() {
            warnings.push(format!(
                "{metric}: skipped series namespace={:?} pod={:?} container={:?}: no {} label",
                g.namespace,
                g.pod,
                g.container,
                missing.join("/")
            ));
            continue;
        }
        let total = g.points.len();
        let points: Vec<(i64, f64)> = g
            .points
            .into_iter()
            .filter(|(_, v)| v.is_finite())
            .collect();
        if points.len() != total {
            warnings.push(format!(
                "{metric}: dropped {} NaN/Inf sample(s) of {}/{}/{}",
                total - points.len(),
                g.namespace,
                g.pod,
                g.container
            ));
        }
        if points.is_empty() {
            continue;
        }
        let key = SeriesKey {
            namespace: g.namespace,
            pod: g.pod,
            container: g.container,
        };
        series.insert(key, points);
    }
    SeriesSet { series, warnings }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::{SignedDuration, Timestamp};

    fn query() -> RangeQuery {
        RangeQuery {
            metric: "gpu_util".into(),
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            namespaces: vec!["a.b".into(), "c".into()],
            pods: Default::default(),
            start: Timestamp::from_second(1_767_225_600).unwrap(),
            end: Timestamp::from_second(1_767_229_200).unwrap(),
            step_seconds: 60,
            counter: None,
            aggregation: Default::default(),
            matchers: Vec::new(),
        }
    }

    /// A range query's counter at GPU Process Exporter's 60 s scrapes: at kerf's default 15 s
    /// step the window holds four scrapes, never fewer.
    #[test]
    fn range_rate_window_holds_four_minute_scrapes() {
        assert_eq!(range_rate_window_seconds(15), 240);
        assert_eq!(range_rate_window_seconds(60), 240);
        assert_eq!(range_rate_window_seconds(120), 480);
    }

    #[test]
    fn query_text_escapes_values_and_wraps_counters() {
        let mut q = query();
        assert_eq!(
            build_query(&q, false),
            r#"sum by (namespace,pod,container) (gpu_util{namespace=~"a\\.b|c"})"#
        );
        q.pods = ["p(1)".to_string(), "q\"x".to_string()].into();
        assert_eq!(
            build_query(&q, true),
            r#"sum by (namespace,pod,container) (rate(gpu_util{namespace=~"a\\.b|c",pod=~"p\\(1\\)|q\"x"}[240s]))"#
        );
        let cluster = LabelMatcher {
            name: "cluster".into(),
            value: "eu \"1\"\\".into(),
        };
        assert_eq!(
            build_query_matching(&q, false, Some(&cluster)),
            r#"sum by (namespace,pod,container) (gpu_util{cluster="eu \"1\"\\",namespace=~"a\\.b|c",pod=~"p\\(1\\)|q\"x"})"#
        ); // A query's own matchers (one scrape of cAdvisor) follow the cluster label.
        q.matchers = vec![LabelMatcher {
            name: "job".into(),
            value: "kubelet".into(),
        }];
        assert_eq!(
            build_query_matching(&q, false, Some(&cluster)),
            r#"sum by (namespace,pod,container) (gpu_util{cluster="eu \"1\"\\",job="kubelet",namespace=~"a\\.b|c",pod=~"p\\(1\\)|q\"x"})"#
        );
        q.matchers[0].name = "bad-name".into();
        assert!(
            validate(&q)
                .unwrap_err()
                .to_string()
                .contains("invalid matcher label name")
        );
    }

    #[test]
    fn validation_rejects_bad_queries() {
        let mut q = query();
        q.step_seconds = 0;
        assert!(
            validate(&q)
                .unwrap_err()
                .to_string()
                .contains("step must be positive")
        );
        let mut q = query();
        q.metric = "bad-name".into();
        assert!(
            validate(&q)
                .unwrap_err()
                .to_string()
                .contains("invalid metric name")
        );
        let mut q = query();
        q.step_seconds = 1;
        q.end = q.start + SignedDuration::from_secs(MAX_POINTS);
        assert!(
            validate(&q)
                .unwrap_err()
                .to_string()
                .contains("at most 11000")
        );
        let mut q = query();
        std::mem::swap(&mut q.start, &mut q.end);
        assert!(
            validate(&q)
                .unwrap_err()
                .to_string()
                .contains("before start")
        );
        assert!(validate(&query()).is_ok());
    }

    #[test]
    fn finish_skips_unlabelled_groups_and_drops_non_finite_points() {
        let g = |c: &str, points: Vec<(i64, f64)>| Group {
            namespace: "a".into(),
            pod: "p".into(),
            container: c.into(),
            points,
        };
        let set = finish(
            &query(),
            vec![
                g("", vec![(1, 1.0)]),
                g("c", vec![(1, f64::NAN), (2, 2.0), (3, f64::INFINITY)]),
                g("d", vec![(1, f64::NAN)]),
            ],
            vec![],
        );
        assert_eq!(set.series.len(), 1);
        let key = SeriesKey {
            namespace: "a".into(),
            pod: "p".into(),
            container: "c".into(),
        };
        assert_eq!(set.series[&key], vec![(2, 2.0)]);
        assert_eq!(set.warnings.len(), 3, "{:?}", set.warnings);
        assert!(set.warnings[0].contains("no container label"));
        assert!(set.warnings[1].contains("dropped 2 NaN/Inf"));
    }
}
