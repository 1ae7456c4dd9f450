//! Metric source backed by an OpenMetrics file (standalone mode). It evaluates
//! `sum by (ns,pod,container) (m{…})` / `sum by (…) (rate(m{…}[R]))` (or `max by`, per the
//! query's aggregation and key labels) with Prometheus's range-query semantics, so it answers
//! exactly like a Prometheus holding the same file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::openmetrics::{self, MetricType, OpenMetrics, ParseError, Series};
use super::promql::{self, Group};
use super::window::{self, WindowAggregate, WindowKey, WindowQuery, WindowSet};
use super::{MetricError, MetricSource, RangeQuery, SeriesSet};

/// Prometheus's default `--query.lookback-delta`.
pub const LOOKBACK_DELTA_MS: i64 = 5 * 60 * 1000;

/// Which Prometheus evaluation rules to reproduce. They differ only at exact boundaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Semantics {
    /// Prometheus 3: lookback and range windows are left-open, `(t-δ, t]`; in `rate`, the
    /// start extrapolation is capped by the counter's zero point after the 1.1× rule.
    #[default]
    Prometheus3,
    /// Prometheus 2: windows are closed, `[t-δ, t]`; the zero-point cap applies before the
    /// 1.1× rule.
    Prometheus2,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read metrics file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metrics file {path}: {source}")]
    Parse { path: PathBuf, source: ParseError },
}

/// Per grid point of one key: the accumulated value and how many series gave one.
type Accumulated = BTreeMap<i64, (f64, usize)>;

pub struct FileSource {
    data: OpenMetrics,
    by_name: HashMap<String, Vec<usize>>,
    semantics: Semantics,
    /// The first and last sample time in the file.
    coverage: Option<(jiff::Timestamp, jiff::Timestamp)>,
}

impl FileSource {
    pub fn from_path(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_str(&text).map_err(|source| LoadError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    #[allow(clippy::should_implement_trait)] // mirrors from_path; FromStr adds nothing here
    pub fn from_str(text: &str) -> Result<Self, ParseError> {
        Ok(Self::from_openmetrics(openmetrics::parse(text)?))
    }

    pub fn from_openmetrics(data: OpenMetrics) -> Self {
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, s) in data.series.iter().enumerate() {
            by_name.entry(s.name.clone()).or_default().push(i);
        }
        let times = data.series.iter().flat_map(|s| {
            let first = s.samples.iter().map(|(t, _)| *t).min();
            let last = s.samples.iter().map(|(t, _)| *t).max();
            first.into_iter().chain(last)
        });
        let (lo, hi) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let at = |ms: i64| jiff::Timestamp::from_millisecond(ms).ok();
        let coverage = (lo <= hi).then(|| at(lo).zip(at(hi))).flatten();
        Self {
            data,
            by_name,
            semantics: Semantics::default(),
            coverage,
        }
    }

    /// Reproduce another Prometheus generation's boundary rules (tests compare against the
    /// locally installed Prometheus, whatever its version).
    pub fn with_semantics(mut self, semantics: Semantics) -> Self {
        self.semantics = semantics;
        self
    }

    fn is_counter(&self, q: &RangeQuery) -> bool {
        q.counter.unwrap_or_else(|| {
            q.metric.ends_with("_total")
                || self.data.type_of(&q.metric) == Some(MetricType::Counter)
        })
    }

    /// Synchronous core of [`MetricSource::range_query`].
    pub fn evaluate(&self, q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        promql::validate(q)?;
        let counter = self.is_counter(q);
        let (start, end, step) = (q.start.as_second(), q.end.as_second(), q.step_seconds);
        let grid: Vec<i64> = (0..)
            .map(|k| start + k * step)
            .take_while(|t| *t <= end)
            .collect();
        let range_ms = promql::range_rate_window_seconds(step) * 1000;

        let mut groups: BTreeMap<(String, String, String), Accumulated> = BTreeMap::new();
        for series in self
            .by_name
            .get(&q.metric)
            .into_iter()
            .flatten()
            .map(|&i| &self.data.series[i])
        {
            if !selected(series, q) {
                continue;
            }
            let label = |l: &str| series.labels.get(l).cloned().unwrap_or_default();
            let key = (
                label(&q.namespace_label),
                label(&q.pod_label),
                label(&q.container_label),
            );
            let sums = groups.entry(key).or_default();
            for &t in &grid {
                let t_ms = t * 1000;
                let value = if counter {
                    rate(&series.samples, t_ms, range_ms, self.semantics)
                } else {
                    instant(&series.samples, t_ms, self.semantics)
                };
                if let Some(v) = value {
                    sums.entry(t)
                        .and_modify(|(acc, n)| {
                            *acc = q.aggregation.combine(*acc, v);
                            *n += 1;
                        })
                        .or_insert((v, 1));
                }
            }
        }
        let groups = groups
            .into_iter()
            .filter(|(_, points)| !points.is_empty())
            .map(|((namespace, pod, container), points)| Group {
                namespace,
                pod,
                container,
                points: points
                    .into_iter()
                    .map(|(t, (acc, n))| (t, q.aggregation.finish(acc, n)))
                    .collect(),
            })
            .collect();
        Ok(promql::finish(q, groups, Vec::new()))
    }
}

impl FileSource {
    /// Synchronous core of [`MetricSource::window_query`]: the PromQL of [`window::build`],
    /// evaluated term by term with Prometheus's subquery, `rate`, `*_over_time` and
    /// `label_replace` rules.
    pub fn evaluate_window(&self, q: &WindowQuery) -> Result<WindowSet, MetricError> {
        window::validate(q)?;
        let grid = window::grid(q);
        let mut values: BTreeMap<WindowKey, f64> = BTreeMap::new();
        for pod in self.pod_steps(q, &grid)? {
            let steps = || pod.steps.iter().map(|(_, v)| *v);
            let last_where = |keep: &dyn Fn(f64) -> bool| {
                pod.steps
                    .iter()
                    .rev()
                    .find(|(_, v)| keep(*v))
                    .map(|(t, _)| *t as f64)
            };
            let per_pod = match &q.aggregate {
                WindowAggregate::RateQuantile { quantile } => {
                    window::quantile(*quantile, &mut steps().collect::<Vec<f64>>())
                }
                WindowAggregate::Peak | WindowAggregate::RateRatioPeak { .. } => {
                    steps().reduce(f64::max)
                }
                WindowAggregate::RateRatioAbove { ratio, last, .. } => {
                    if *last {
                        last_where(&|v| v >= *ratio)
                    } else {
                        let n = steps().filter(|v| *v >= *ratio).count();
                        (n > 0).then_some(n as f64)
                    }
                }
                WindowAggregate::LastPositive => last_where(&|v| v > 0.0),
                WindowAggregate::FirstSeen => pod.steps.first().map(|(t, _)| *t as f64),
            };
            let Some(v) = per_pod else { continue };
            let first = matches!(q.aggregate, WindowAggregate::FirstSeen);
            values
                .entry(pod.key)
                .and_modify(|acc| *acc = if first { acc.min(v) } else { acc.max(v) })
                .or_insert(v);
        }
        Ok(WindowSet {
            values,
            queries: 1,
            ..Default::default()
        })
    }

    /// The values a step query asks for ([`window::StepQuery`]), as Prometheus's range query
    /// of the same expression gives them.
    pub fn evaluate_steps(&self, q: &window::StepQuery) -> Result<window::StepSet, MetricError> {
        window::validate(&q.window)?;
        let steps = self.pod_steps(&q.window, &q.grid())?;
        Ok(window::StepSet {
            steps: steps.into_iter().filter(|p| !p.steps.is_empty()).collect(),
            queries: 1,
            ..Default::default()
        })
    }

    /// Per pod and container of `q`'s workloads, the value the window aggregates at each step
    /// of `grid` (`sum by (namespace,pod,container)` of the rate, the gauge or the rate ratio;
    /// steps without a value left out), with the workload it belongs to.
    fn pod_steps(
        &self,
        q: &WindowQuery,
        grid: &[i64],
    ) -> Result<Vec<window::PodSteps>, MetricError> {
        let range_ms = q.rate_seconds * 1000;
        let step_ms = q.step_seconds * 1000;
        let metrics = q.metrics();
        let mut out = Vec::new();
        for term in window::terms(q) {
            let anchored = |re: &str| {
                regex::Regex::new(&format!("^(?:{re})$"))
                    .map_err(|e| MetricError::Other(format!("invalid pod pattern {re:?}: {e}")))
            };
            let (select, capture) = (anchored(&term.pod_regex)?, anchored(&term.capture)?);
            // (pod, container) → the selected series of each metric.
            let mut pods: BTreeMap<(&str, &str), Vec<Vec<&Series>>> = BTreeMap::new();
            for (mi, metric) in metrics.iter().enumerate() {
                for s in self
                    .by_name
                    .get(*metric)
                    .into_iter()
                    .flatten()
                    .map(|&i| &self.data.series[i])
                {
                    let label = |l: &str| s.labels.get(l).map(String::as_str).unwrap_or("");
                    let (ns, pod, container) = (
                        label(&q.namespace_label),
                        label(&q.pod_label),
                        label(&q.container_label),
                    );
                    if !q.matchers.iter().all(|m| m.matches(&s.labels))
                        || ns != term.namespace
                        || container.is_empty()
                        || !select.is_match(pod)
                    {
                        continue;
                    }
                    let lists = pods
                        .entry((pod, container))
                        .or_insert_with(|| vec![Vec::new(); metrics.len()]);
                    lists[mi].push(s);
                }
            }
            let sem = self.semantics;
            // `sum by (namespace,pod,container)` of the rate, the instant value or the step
            // interval's highest sample at `t`.
            let at = |list: &[&Series], t: i64, read: Read| -> Option<f64> {
                list.iter()
                    .filter_map(|s| match read {
                        Read::Rate => rate(&s.samples, t * 1000, range_ms, sem),
                        Read::Instant => instant(&s.samples, t * 1000, sem),
                        Read::StepMax => window(&s.samples, t * 1000, step_ms, sem)
                            .iter()
                            .map(|(_, v)| *v)
                            .reduce(f64::max),
                    })
                    .reduce(|a, b| a + b)
            };
            for ((pod, container), lists) in pods {
                let value = |t: i64| match &q.aggregate {
                    WindowAggregate::RateQuantile { .. } => at(&lists[0], t, Read::Rate),
                    WindowAggregate::Peak | WindowAggregate::LastPositive => {
                        at(&lists[0], t, Read::StepMax)
                    }
                    WindowAggregate::FirstSeen => at(&lists[0], t, Read::Instant),
                    WindowAggregate::RateRatioPeak { .. }
                    | WindowAggregate::RateRatioAbove { .. } => {
                        let d = at(&lists[1], t, Read::Rate).filter(|d| *d > 0.0)?;
                        Some(at(&lists[0], t, Read::Rate)? / d)
                    }
                };
                let Some(caps) = capture.captures(pod) else {
                    continue;
                };
                let mut workload = String::new();
                caps.expand(&term.replacement, &mut workload);
                out.push(window::PodSteps {
                    key: WindowKey {
                        namespace: term.namespace.clone(),
                        workload,
                        container: container.to_string(),
                    },
                    pod: pod.to_string(),
                    steps: grid.iter().filter_map(|&t| Some((t, value(t)?))).collect(),
                });
            }
        }
        Ok(out)
    }
}

impl MetricSource for FileSource {
    async fn range_query(&self, query: &RangeQuery) -> Result<SeriesSet, MetricError> {
        self.evaluate(query)
    }

    async fn window_query(&self, query: &WindowQuery) -> Result<WindowSet, MetricError> {
        self.evaluate_window(query)
    }

    async fn step_query(&self, query: &window::StepQuery) -> Result<window::StepSet, MetricError> {
        self.evaluate_steps(query)
    }

    fn coverage(&self) -> Option<(jiff::Timestamp, jiff::Timestamp)> {
        self.coverage
    }
}

/// How a window query reads one series at a step.
#[derive(Clone, Copy)]
enum Read {
    /// `rate(m[R])`.
    Rate,
    /// `m`: the newest sample within the lookback.
    Instant,
    /// `max_over_time(m[step])`: the step's interval's highest sample.
    StepMax,
}

fn selected(s: &Series, q: &RangeQuery) -> bool {
    let ns_ok = s
        .labels
        .get(&q.namespace_label)
        .is_some_and(|ns| q.namespaces.contains(ns));
    let pod_ok = q.pods.is_empty()
        || s.labels
            .get(&q.pod_label)
            .is_some_and(|p| q.pods.contains(p));
    ns_ok && pod_ok && q.matchers.iter().all(|m| m.matches(&s.labels))
}

/// Samples inside the window ending at `t_ms` of length `len_ms`, by the version's boundary rule.
fn window(samples: &[(i64, f64)], t_ms: i64, len_ms: i64, semantics: Semantics) -> &[(i64, f64)] {
    let lo = t_ms - len_ms;
    let first = match semantics {
        Semantics::Prometheus3 => samples.partition_point(|(ts, _)| *ts <= lo),
        Semantics::Prometheus2 => samples.partition_point(|(ts, _)| *ts < lo),
    };
    let last = samples.partition_point(|(ts, _)| *ts <= t_ms);
    &samples[first..last.max(first)]
}

/// Instant-vector selection: the newest sample within the lookback delta.
fn instant(samples: &[(i64, f64)], t_ms: i64, semantics: Semantics) -> Option<f64> {
    window(samples, t_ms, LOOKBACK_DELTA_MS, semantics)
        .last()
        .map(|(_, v)| *v)
}

/// Prometheus's `extrapolatedRate` for `rate()` on float samples.
fn rate(samples: &[(i64, f64)], t_ms: i64, range_ms: i64, semantics: Semantics) -> Option<f64> {
    let w = window(samples, t_ms, range_ms, semantics);
    if w.len() < 2 {
        return None;
    }
    let (first_t, first_v) = w[0];
    let (last_t, last_v) = w[w.len() - 1];
    let mut result = last_v - first_v;
    for pair in w.windows(2) {
        // Counter reset: the counter restarted from zero, so everything before it counts.
        if pair[1].1 < pair[0].1 {
            result += pair[0].1;
        }
    }
    let range_start = t_ms - range_ms;
    let mut to_start = (first_t - range_start) as f64 / 1000.0;
    let mut to_end = (t_ms - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let avg = sampled / (w.len() - 1) as f64;
    let threshold = avg * 1.1;
    // Counters cannot go below zero: never extrapolate the start past the zero point.
    let to_zero = (result > 0.0 && first_v >= 0.0).then(|| sampled * (first_v / result));
    match semantics {
        Semantics::Prometheus2 => {
            if let Some(z) = to_zero
                && z < to_start
            {
                to_start = z;
            }
            if to_start >= threshold {
                to_start = avg / 2.0;
            }
        }
        Semantics::Prometheus3 => {
            if to_start >= threshold {
                to_start = avg / 2.0;
            }
            if let Some(z) = to_zero
                && z < to_start
            {
                to_start = z;
            }
        }
    }
    if to_end >= threshold {
        to_end = avg / 2.0;
    }
    let factor = (sampled + to_start + to_end) / sampled / (range_ms as f64 / 1000.0);
    Some(result * factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::SeriesKey;
    use jiff::Timestamp;

    const T0: i64 = 1_767_225_600;

    fn q(metric: &str, start: i64, end: i64, step: i64) -> RangeQuery {
        RangeQuery {
            metric: metric.into(),
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            namespaces: vec!["a".into()],
            pods: Default::default(),
            start: Timestamp::from_second(start).unwrap(),
            end: Timestamp::from_second(end).unwrap(),
            step_seconds: step,
            counter: None,
            aggregation: Default::default(),
            matchers: Vec::new(),
        }
    }

    fn key(c: &str) -> SeriesKey {
        SeriesKey {
            namespace: "a".into(),
            pod: "p".into(),
            container: c.into(),
        }
    }

    #[test]
    fn lookback_boundary_differs_between_generations() {
        let text = format!("m{{namespace=\"a\",pod=\"p\",container=\"c\"}} 7 {T0}\n# EOF\n");
        let v3 = FileSource::from_str(&text).unwrap();
        let v2 = FileSource::from_str(&text)
            .unwrap()
            .with_semantics(Semantics::Prometheus2);
        let query = q("m", T0, T0 + 300, 60);
        let times = |s: &FileSource| -> Vec<i64> {
            s.evaluate(&query).unwrap().series[&key("c")]
                .iter()
                .map(|(t, _)| t - T0)
                .collect()
        };
        assert_eq!(times(&v3), vec![0, 60, 120, 180, 240]);
        assert_eq!(times(&v2), vec![0, 60, 120, 180, 240, 300]);
    }

    #[test]
    fn counter_rate_handles_reset_and_extrapolation() {
        // 0,10,20,(reset)5,15 at 60 s spacing: increase 35 over 240 s sampled.
        let mut text = String::from("# TYPE r counter\n");
        for (i, v) in [0, 10, 20, 5, 15].iter().enumerate() {
            text.push_str(&format!(
                "r_total{{namespace=\"a\",pod=\"p\",container=\"c\"}} {v} {}\n",
                T0 + 60 * i as i64
            ));
        }
        text.push_str("# EOF\n");
        let src = FileSource::from_str(&text).unwrap();
        // step 15 → range window 240 s; at T0+240 the window (T0, T0+240] holds 4 samples (v3).
        let set = src.evaluate(&q("r_total", T0 + 240, T0 + 240, 15)).unwrap();
        // v3: samples 10,20,5,15: increase 25 over 180 s, start 60 s away (< 1.1×60) →
        // extrapolate to the whole 240 s: 25 × 240/180 / 240.
        let got = set.series[&key("c")][0].1;
        assert!((got - 25.0 * 240.0 / 180.0 / 240.0).abs() < 1e-12, "{got}");
        let v2 = FileSource::from_str(&text)
            .unwrap()
            .with_semantics(Semantics::Prometheus2);
        let got = v2
            .evaluate(&q("r_total", T0 + 240, T0 + 240, 15))
            .unwrap()
            .series[&key("c")][0]
            .1;
        // v2: all 5 samples, increase 35 over 240 s, zero point at 0 s → no extrapolation.
        assert!((got - 35.0 / 240.0).abs() < 1e-12, "{got}");
    }

    #[test]
    fn sums_series_of_one_container_and_skips_unlabelled() {
        let text = format!(
            "m{{namespace=\"a\",pod=\"p\",container=\"c\",gpu=\"0\"}} 1 {T0}\n\
             m{{namespace=\"a\",pod=\"p\",container=\"c\",gpu=\"1\"}} 2 {T0}\n\
             m{{namespace=\"a\",pod=\"p\"}} 5 {T0}\n\
             m{{namespace=\"b\",pod=\"p\",container=\"c\"}} 9 {T0}\n# EOF\n"
        );
        let set = FileSource::from_str(&text)
            .unwrap()
            .evaluate(&q("m", T0, T0, 60))
            .unwrap();
        assert_eq!(set.series.len(), 1);
        assert_eq!(set.series[&key("c")], vec![(T0, 3.0)]);
        assert_eq!(set.warnings.len(), 1);
        assert!(
            set.warnings[0].contains("no container label"),
            "{:?}",
            set.warnings
        );
    }

    /// `avg by`: a container's per-device percentages of its share (docs/design/gpu-engine.md#g2)
    /// are one percentage, whatever the number of devices; as Prometheus's `avg`.
    #[test]
    fn averages_series_of_one_container_for_avg() {
        let text = format!(
            "m{{namespace=\"a\",pod=\"p\",container=\"c\",gpu_uuid=\"GPU-0\"}} 40 {T0}\n\
             m{{namespace=\"a\",pod=\"p\",container=\"c\",gpu_uuid=\"GPU-1\"}} 60 {T0}\n# EOF\n"
        );
        let src = FileSource::from_str(&text).unwrap();
        let avg = RangeQuery {
            aggregation: crate::metrics::Aggregation::Avg,
            ..q("m", T0, T0, 60)
        };
        assert_eq!(
            src.evaluate(&avg).unwrap().series[&key("c")],
            vec![(T0, 50.0)]
        );
        assert_eq!(
            src.evaluate(&q("m", T0, T0, 60)).unwrap().series[&key("c")],
            vec![(T0, 100.0)]
        );
    }

    #[test]
    fn counter_detection_uses_name_family_type_and_caller_choice() {
        let mut text = String::from("# TYPE busy counter\n");
        for i in 0..5 {
            text.push_str(&format!(
                "busy{{namespace=\"a\",pod=\"p\",container=\"c\"}} {} {}\n",
                10 * i,
                T0 + 60 * i
            ));
        }
        text.push_str("# EOF\n");
        let src = FileSource::from_str(&text).unwrap();
        let at = |counter: Option<bool>| {
            let query = RangeQuery {
                counter,
                ..q("busy", T0 + 240, T0 + 240, 15)
            };
            src.evaluate(&query).unwrap().series[&key("c")][0].1
        };
        assert!(
            (at(None) - 10.0 / 60.0).abs() < 1e-12,
            "typed counter is rated"
        );
        assert_eq!(at(Some(false)), 40.0);
        assert!((at(Some(true)) - 10.0 / 60.0).abs() < 1e-12);
    }

    /// The OOM signal of the CPU/memory recommender: `max_over_time` of kube-state-metrics' last
    /// termination reason with the matcher `reason="OOMKilled"`, per workload and container. A
    /// replaced pod's OOM kill counts; another reason, another workload's pod, a kill only
    /// before the window do not; without the series there is no value, and no error.
    #[test]
    fn window_query_selects_by_its_label_matchers() {
        use crate::api::WorkloadKind;
        use crate::core::recommenders::resources::{LAST_TERMINATED_METRIC, container::OOM_KILLED};
        use crate::metrics::promql::LabelMatcher;
        use crate::metrics::{WindowAggregate, WorkloadSelector};
        let mut text = format!("# TYPE {LAST_TERMINATED_METRIC} gauge\n");
        let series = |pod: &str, container: &str, reason: &str, from: i64, to: i64| {
            (from..=to)
                .step_by(60)
                .map(|t| {
                    format!(
                        "{LAST_TERMINATED_METRIC}{{namespace=\"a\",pod=\"{pod}\",container=\"{container}\",reason=\"{reason}\",uid=\"u-{pod}\"}} 1 {t}\n"
                    )
                })
                .collect::<String>()
        };
        // web's old ReplicaSet: `app` OOM-killed, then the pod replaced mid-window.
        text += &series(
            "web-7d9c8b5f6d-x2x4z",
            "app",
            OOM_KILLED,
            T0 + 600,
            T0 + 1_800,
        );
        // Today's pod: `proxy` restarted for another reason.
        text += &series(
            "web-5f6d7c8b9d-b2c4d",
            "proxy",
            "Error",
            T0 + 1_800,
            T0 + 3_600,
        );
        // A pod of web OOM-killed, its series gone before the window.
        text += &series(
            "web-5f6d7c8b9d-k7m8n",
            "init",
            OOM_KILLED,
            T0 - 7_200,
            T0 - 3_600,
        );
        // Another workload whose pods' names start with `web-`.
        text += &series(
            "web-api-7d9c8b5f6d-q5w6z",
            "app",
            OOM_KILLED,
            T0,
            T0 + 3_600,
        );
        text += "# EOF\n";
        let src = FileSource::from_str(&text).unwrap();
        let mut q = WindowQuery {
            metric: LAST_TERMINATED_METRIC.into(),
            aggregate: WindowAggregate::Peak,
            matchers: vec![LabelMatcher {
                name: "reason".into(),
                value: OOM_KILLED.into(),
            }],
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            workloads: vec![WorkloadSelector {
                namespace: "a".into(),
                kind: WorkloadKind::Deployment,
                name: "web".into(),
                other_pods: vec![],
            }]
            .into(),
            at: Timestamp::from_second(T0 + 3_600).unwrap(),
            window_seconds: 3_600,
            step_seconds: 60,
            rate_seconds: 240,
        };
        let values = |q: &WindowQuery| -> Vec<(String, String, f64)> {
            let set = src.evaluate_window(q).unwrap();
            assert!(set.warnings.is_empty(), "{:?}", set.warnings);
            set.values
                .into_iter()
                .map(|(k, v)| (k.workload, k.container, v))
                .collect()
        };
        assert_eq!(values(&q), [("Deployment/web".into(), "app".into(), 1.0)]);
        q.matchers[0].value = "Error".into();
        assert_eq!(values(&q), [("Deployment/web".into(), "proxy".into(), 1.0)]);
        // As in PromQL, `label=""` selects the series without the label: none here.
        q.matchers[0].value = String::new();
        assert_eq!(values(&q), []);
        // kube-state-metrics not installed: no series, no value, no warning.
        q.matchers[0].value = OOM_KILLED.into();
        let without = FileSource::from_str("# EOF\n")
            .unwrap()
            .evaluate_window(&q)
            .unwrap();
        assert_eq!(
            without,
            WindowSet {
                queries: 1,
                ..Default::default()
            }
        );
    }

    #[test]
    fn load_errors_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.om");
        std::fs::write(&path, "m 1 10\n").unwrap();
        let e = FileSource::from_path(&path).err().unwrap().to_string();
        assert!(
            e.contains("m.om") && e.contains("line 2: missing # EOF"),
            "{e}"
        );
        let e = FileSource::from_path(&dir.path().join("absent.om"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot read metrics file"), "{e}");
    }
}
