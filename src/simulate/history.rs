//! A [`MetricSource`] that answers the replay's range queries from history fetched once.
//!
//! Every query of a cycle has a *shape* (metric, labels, step, counter, aggregation) and a
//! selection and time range that change from tick to tick. The first query of a shape fetches
//! that shape for every namespace and pod of the simulation over the whole replay (in chunks
//! below Prometheus's 11,000-points-per-series limit), on a grid anchored at `--from`; every
//! later query of the shape is a slice of it. When `--every` and the windows are multiples of
//! the step, a slice is exactly what the inner source would answer for the tick's query.
//!
//! Samples of metrics interpreted as `currentAllocation` are percentages of the allocation the
//! pod *really* had; the simulated pod may have another one, so [`HistorySource::set_scale`]
//! rescales them (real ÷ simulated) before the engine multiplies by the simulated allocation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::lock::Mutex;
use jiff::Timestamp;

use crate::metrics::{Aggregation, MetricError, MetricSource, RangeQuery, SeriesKey, SeriesSet};

/// Points per series and fetch: below Prometheus's hard limit of 11,000.
const CHUNK_POINTS: i64 = 10_000;

/// What identifies one fetched history: everything of a query but its selection and range.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Shape {
    metric: String,
    namespace_label: String,
    pod_label: String,
    container_label: String,
    /// Whether the query selects pods (HPA replica queries select whole namespaces).
    by_pod: bool,
    step_seconds: i64,
    counter: Option<bool>,
    aggregation: Aggregation,
    matchers: Vec<crate::metrics::promql::LabelMatcher>,
}

impl Shape {
    fn of(q: &RangeQuery) -> Self {
        Self {
            metric: q.metric.clone(),
            namespace_label: q.namespace_label.clone(),
            pod_label: q.pod_label.clone(),
            container_label: q.container_label.clone(),
            by_pod: !q.pods.is_empty(),
            step_seconds: q.step_seconds,
            counter: q.counter,
            aggregation: q.aggregation,
            matchers: q.matchers.clone(),
        }
    }
}

/// One shape's history on the grid `start + i × step`, `i < len`; a missing sample is NaN.
#[derive(Debug)]
struct Fetched {
    start: i64,
    step: i64,
    len: usize,
    /// By namespace, then (pod, container).
    series: HashMap<String, BTreeMap<(String, String), Vec<f64>>>,
    warnings: Vec<String>,
}

impl Fetched {
    fn end(&self) -> i64 {
        self.start + (self.len as i64 - 1) * self.step
    }

    fn covers(&self, start: i64, end: i64) -> bool {
        self.len > 0 && self.start <= start && end <= self.end()
    }

    /// Grid indexes inside `[start, end]`.
    fn indexes(&self, start: i64, end: i64) -> std::ops::Range<usize> {
        let first = ((start - self.start).max(0) + self.step - 1) / self.step;
        let last = ((end - self.start) / self.step + 1).min(self.len as i64);
        (first as usize)..(last.max(first) as usize)
    }
}

/// History answered from memory; see the module documentation.
pub struct HistorySource<'a, S> {
    inner: &'a S,
    /// The grid anchor (`--from`) and the last tick.
    anchor: i64,
    last: i64,
    namespaces: Vec<String>,
    /// Shared by every chunk query that selects pods (no copy of the list per query).
    pods: Arc<[String]>,
    fetched: Mutex<HashMap<Shape, Arc<Fetched>>>,
    fetches: AtomicUsize,
    /// Metrics whose values are percentages of the pod's allocation.
    relative: HashSet<String>,
    /// Per container series: real allocation ÷ simulated allocation.
    scale: HashMap<SeriesKey, f64>,
}

impl<'a, S: MetricSource> HistorySource<'a, S> {
    /// History of `namespaces`/`pods` (sorted, deduplicated) for ticks `anchor..=last`.
    pub fn new(
        inner: &'a S,
        anchor: Timestamp,
        last: Timestamp,
        namespaces: Vec<String>,
        pods: Vec<String>,
        relative: HashSet<String>,
    ) -> Self {
        Self {
            inner,
            anchor: anchor.as_second(),
            last: last.as_second(),
            namespaces,
            pods: pods.into(),
            fetched: Mutex::new(HashMap::new()),
            fetches: AtomicUsize::new(0),
            relative,
            scale: HashMap::new(),
        }
    }

    /// Range queries sent to the inner source so far.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Sets the factor applied to `currentAllocation` samples of one container (1 removes it).
    pub fn set_scale(&mut self, namespace: &str, pod: &str, container: &str, factor: f64) {
        let key = SeriesKey {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
            container: container.to_string(),
        };
        if (factor - 1.0).abs() < 1e-12 {
            self.scale.remove(&key);
        } else {
            self.scale.insert(key, factor);
        }
    }

    /// The history of `q`'s shape covering `[start, end]`, fetched on first use (or again,
    /// wider, when a query reaches outside what was fetched).
    async fn history(&self, q: &RangeQuery) -> Result<Arc<Fetched>, MetricError> {
        let shape = Shape::of(q);
        let (start, end) = (q.start.as_second(), q.end.as_second());
        let mut cache = self.fetched.lock().await;
        if let Some(f) = cache.get(&shape).filter(|f| f.covers(start, end)) {
            return Ok(f.clone());
        }
        let step = q.step_seconds.max(1);
        // Grid points are anchor + k × step, so slices match the tick's own grid.
        let mut from = self.anchor.min(start);
        from = self.anchor - (self.anchor - from + step - 1) / step * step;
        if let Some(old) = cache.get(&shape) {
            from = from.min(old.start);
        }
        let to = self.last.max(end);
        let len = ((to - from) / step + 1) as usize;
        let mut series: HashMap<String, BTreeMap<(String, String), Vec<f64>>> = HashMap::new();
        let mut warnings = Vec::new();
        let mut chunk_start = from;
        while chunk_start <= to {
            let chunk_end = (chunk_start + (CHUNK_POINTS - 1) * step).min(to);
            let query = RangeQuery {
                namespaces: self.namespaces.clone(),
                pods: if shape.by_pod {
                    Arc::clone(&self.pods)
                } else {
                    Default::default()
                },
                start: Timestamp::from_second(chunk_start).unwrap_or_default(),
                end: Timestamp::from_second(chunk_end).unwrap_or_default(),
                ..q.clone()
            };
            self.fetches.fetch_add(1, Ordering::Relaxed);
            let set = self.inner.range_query(&query).await?;
            warnings.extend(set.warnings);
            for (key, samples) in set.series {
                let values = series
                    .entry(key.namespace)
                    .or_default()
                    .entry((key.pod, key.container))
                    .or_insert_with(|| vec![f64::NAN; len]);
                for (t, v) in samples {
                    let offset = t - from;
                    if offset >= 0 && offset % step == 0 && ((offset / step) as usize) < len {
                        values[(offset / step) as usize] = v;
                    }
                }
            }
            chunk_start = chunk_end + step;
        }
        let fetched = Arc::new(Fetched {
            start: from,
            step,
            len,
            series,
            warnings,
        });
        cache.insert(shape, fetched.clone());
        Ok(fetched)
    }

    /// `q` answered from the history without the `currentAllocation` rescaling: the samples as
    /// recorded.
    pub async fn recorded(&self, q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        self.answer(q, false).await
    }

    async fn answer(&self, q: &RangeQuery, rescale: bool) -> Result<SeriesSet, MetricError> {
        let h = self.history(q).await?;
        let range = h.indexes(q.start.as_second(), q.end.as_second());
        let relative = rescale && self.relative.contains(&q.metric);
        // Collected in key order (namespaces, then the history's (pod, container) order) and
        // built into the map at once rather than inserted one by one.
        let mut series: Vec<(SeriesKey, Vec<(i64, f64)>)> = Vec::new();
        for ns in &q.namespaces {
            let Some(by_pod) = h.series.get(ns) else {
                continue;
            };
            for ((pod, container), values) in by_pod {
                if !q.pods.is_empty() && q.pods.binary_search(pod).is_err() {
                    continue;
                }
                let key = SeriesKey {
                    namespace: ns.clone(),
                    pod: pod.clone(),
                    container: container.clone(),
                };
                let factor = if relative {
                    self.scale.get(&key).copied().unwrap_or(1.0)
                } else {
                    1.0
                };
                let mut samples: Vec<(i64, f64)> = Vec::with_capacity(range.len());
                samples.extend(
                    range
                        .clone()
                        .filter(|&i| !values[i].is_nan())
                        .map(|i| (h.start + i as i64 * h.step, values[i] * factor)),
                );
                if !samples.is_empty() {
                    series.push((key, samples));
                }
            }
        }
        Ok(SeriesSet {
            series: series.into_iter().collect(),
            // Said once, by the fetch; repeating them every tick would drown the report.
            warnings: Vec::new(),
        })
    }

    /// Warnings the inner source gave for the fetched history.
    pub async fn warnings(&self) -> Vec<String> {
        let cache = self.fetched.lock().await;
        let mut out: Vec<String> = cache.values().flat_map(|f| f.warnings.clone()).collect();
        out.sort();
        out.dedup();
        out
    }
}

impl<S: MetricSource> MetricSource for HistorySource<'_, S> {
    async fn range_query(&self, query: &RangeQuery) -> Result<SeriesSet, MetricError> {
        // Queries select pods in sorted order (the planners build them from sets); a slice
        // lookup below relies on it. Sorted already, the query is not copied (its pod list is
        // the cluster's pods).
        if query.pods.is_sorted() {
            return self.answer(query, true).await;
        }
        let mut q = query.clone();
        let mut pods = q.pods.to_vec();
        pods.sort();
        q.pods = pods.into();
        self.answer(&q, true).await
    }

    /// Window queries are asked of the source itself at the tick's time (the replay's history
    /// holds range samples only).
    async fn window_query(
        &self,
        query: &crate::metrics::WindowQuery,
    ) -> Result<crate::metrics::WindowSet, MetricError> {
        self.inner.window_query(query).await
    }

    /// The kept usage history's steps, asked of the source itself as window queries are.
    async fn step_query(
        &self,
        query: &crate::metrics::window::StepQuery,
    ) -> Result<crate::metrics::window::StepSet, MetricError> {
        self.inner.step_query(query).await
    }

    fn coverage(&self) -> Option<(Timestamp, Timestamp)> {
        self.inner.coverage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::file::FileSource;

    const T0: i64 = 1_767_225_600;

    fn file() -> FileSource {
        let mut text = String::from("# TYPE c counter\n");
        for i in 0..400 {
            let t = T0 + 15 * i;
            text.push_str(&format!(
                "g{{namespace=\"a\",pod=\"p\",container=\"c\"}} {} {t}\n",
                (i * 7 % 13) as f64
            ));
            text.push_str(&format!(
                "g{{namespace=\"a\",pod=\"q\",container=\"c\"}} {} {t}\n",
                (i % 5) as f64
            ));
            text.push_str(&format!(
                "c_total{{namespace=\"a\",pod=\"p\",container=\"c\"}} {} {t}\n",
                i * 3
            ));
        }
        text.push_str("# EOF\n");
        FileSource::from_str(&text).unwrap()
    }

    fn q(metric: &str, now: i64, window: i64, pods: &[&str]) -> RangeQuery {
        RangeQuery {
            metric: metric.into(),
            namespace_label: "namespace".into(),
            pod_label: "pod".into(),
            container_label: "container".into(),
            namespaces: vec!["a".into()],
            pods: pods.iter().map(|p| p.to_string()).collect(),
            start: Timestamp::from_second(now - window).unwrap(),
            end: Timestamp::from_second(now).unwrap(),
            step_seconds: 15,
            counter: None,
            aggregation: Aggregation::Sum,
            matchers: Vec::new(),
        }
    }

    /// Fetch once, slice per tick: every tick's answer equals the inner source's own answer to
    /// the tick's query, gauges and rated counters alike, with one fetch per shape.
    #[test]
    fn slices_of_the_history_equal_the_inner_sources_answers() {
        let inner = file();
        let from = T0 + 1200;
        let last = T0 + 5400;
        let h = HistorySource::new(
            &inner,
            Timestamp::from_second(from).unwrap(),
            Timestamp::from_second(last).unwrap(),
            vec!["a".into()],
            vec!["p".into(), "q".into()],
            HashSet::new(),
        );
        let mut ticks = 0;
        for now in (from..=last).step_by(60) {
            for (metric, pods) in [
                ("g", vec!["p", "q"]),
                ("g", vec!["q"]),
                ("c_total", vec!["p"]),
            ] {
                let query = q(metric, now, 600, &pods);
                let got = futures::executor::block_on(h.range_query(&query)).unwrap();
                let want = inner.evaluate(&query).unwrap();
                assert_eq!(got.series, want.series, "{metric} {pods:?} at {now}");
            }
            ticks += 1;
        }
        assert_eq!(ticks, 71);
        assert_eq!(
            h.fetches(),
            2,
            "one fetch per shape (g, c_total), not per tick"
        );
    }

    #[test]
    fn history_longer_than_a_prometheus_query_is_fetched_in_chunks() {
        let inner = file();
        // 15 s step over 50 days: 288,000 points, fetched 10,000 at a time.
        let from = T0 + 50 * 86_400;
        let h = HistorySource::new(
            &inner,
            Timestamp::from_second(from).unwrap(),
            Timestamp::from_second(from).unwrap(),
            vec!["a".into()],
            vec!["p".into()],
            HashSet::new(),
        );
        let query = q("g", from, 50 * 86_400, &["p"]);
        // Prometheus (and the file source) refuse this in one query.
        assert!(inner.evaluate(&query).is_err());
        let got = futures::executor::block_on(h.range_query(&query)).unwrap();
        assert_eq!(h.fetches(), 29, "⌈288,001 / 10,000⌉ chunks");
        // The data (the file's first 100 minutes and 5 minutes of lookback) is all there.
        let around = q("g", T0 + 7_200, 7_200, &["p"]);
        assert_eq!(got.series, inner.evaluate(&around).unwrap().series);
    }

    #[test]
    fn current_allocation_samples_are_rescaled_per_container() {
        let inner = file();
        let mut h = HistorySource::new(
            &inner,
            Timestamp::from_second(T0 + 600).unwrap(),
            Timestamp::from_second(T0 + 600).unwrap(),
            vec!["a".into()],
            vec!["p".into(), "q".into()],
            HashSet::from(["g".to_string()]),
        );
        h.set_scale("a", "p", "c", 0.5);
        let query = q("g", T0 + 600, 300, &["p", "q"]);
        let got = futures::executor::block_on(h.range_query(&query)).unwrap();
        let want = inner.evaluate(&query).unwrap();
        for (k, samples) in &got.series {
            let factor = if k.pod == "p" { 0.5 } else { 1.0 };
            let expected: Vec<(i64, f64)> = want.series[k]
                .iter()
                .map(|(t, v)| (*t, v * factor))
                .collect();
            assert_eq!(samples, &expected, "{k:?}");
        }
        let recorded = futures::executor::block_on(h.recorded(&query)).unwrap();
        assert_eq!(
            recorded.series, want.series,
            "recorded values stay as recorded"
        );
    }
}
