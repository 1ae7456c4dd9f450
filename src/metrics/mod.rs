//! Metric sources (IO edge). The engine never sees these types' IO: the reconciler asks a
//! [`MetricSource`] for batched range queries and hands plain samples to the pure core.

use std::collections::BTreeMap;

use jiff::Timestamp;

/// How the series sharing one key (namespace, pod, container labels) are combined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Aggregation {
    /// `sum by (…)`: a container's series (cAdvisor, GPUs used on each device) add up.
    #[default]
    Sum,
    /// `max by (…)`: copies of one value (several kube-state-metrics replicas) are one value.
    Max,
    /// `avg by (…)`: per-device percentages of one container's share (GPU Process Exporter's
    /// memory footprint) are one percentage of the whole share (docs/design/gpu-engine.md#g2).
    Avg,
}

impl Aggregation {
    /// How a container's series of one sample time combine — one per device with GPU Process
    /// Exporter and DCGM exporter (docs/design/gpu-engine.md#g2): percentages of one GPU add
    /// up to the GPUs used (`fullGPU`); percentages of the container's share of each device
    /// average to a percentage of its whole allocation (`currentAllocation`), so a container
    /// on two devices at 50 % of each is at 50 %, not 100 %.
    pub fn of(interpretation: crate::api::Interpretation) -> Self {
        match interpretation {
            crate::api::Interpretation::FullGpu => Aggregation::Sum,
            crate::api::Interpretation::CurrentAllocation => Aggregation::Avg,
        }
    }

    /// The PromQL aggregation operator.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregation::Sum => "sum",
            Aggregation::Max => "max",
            Aggregation::Avg => "avg",
        }
    }

    /// Combines a value into the one already there; `Avg` accumulates the sum, which
    /// [`Aggregation::finish`] divides by the count.
    pub fn combine(self, acc: f64, v: f64) -> f64 {
        match self {
            Aggregation::Sum | Aggregation::Avg => acc + v,
            Aggregation::Max => acc.max(v),
        }
    }

    /// The value of `count` combined values whose accumulator is `acc`.
    pub fn finish(self, acc: f64, count: usize) -> f64 {
        match self {
            Aggregation::Avg => acc / count as f64,
            Aggregation::Sum | Aggregation::Max => acc,
        }
    }
}

/// One batched range query: every series of `metric` whose `namespace_label` is one of
/// `namespaces` and whose `pod_label` is one of `pods`, evaluated on the grid
/// `start, start+step, …, end` (Prometheus range-query semantics) and combined per key with
/// `aggregation`. The "pod" label is any second identity label: kube-state-metrics' HPA series
/// use `horizontalpodautoscaler` there, with no container label.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeQuery {
    pub metric: String,
    pub namespace_label: String,
    pub pod_label: String,
    /// Empty: the series have no container label (keys then carry an empty container).
    pub container_label: String,
    /// Namespaces selected (exact values).
    pub namespaces: Vec<String>,
    /// Pod names selected (exact values); empty = every pod of the namespaces. Shared: a
    /// policy's queries (one per signal) select the same pods, up to one per pod in the cluster.
    pub pods: std::sync::Arc<[String]>,
    pub start: Timestamp,
    pub end: Timestamp,
    pub step_seconds: i64,
    /// `Some(true)`/`Some(false)` when the caller knows; `None` = let the source decide
    /// (name ends in `_total`, or typed counter in metadata). Counters are turned into rates.
    pub counter: Option<bool>,
    pub aggregation: Aggregation,
    /// More `label="value"` matchers on the selector (GlobalConfiguration
    /// `resourceMetrics.matchers` on the cAdvisor series; none elsewhere).
    pub matchers: Vec<promql::LabelMatcher>,
}

/// Identity of one container series.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// Samples as (unix seconds, value), ascending, on the query grid.
pub type Samples = Vec<(i64, f64)>;

/// Result of one range query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeriesSet {
    pub series: BTreeMap<SeriesKey, Samples>,
    /// Non-fatal problems (series without the required labels, NaN/Inf samples dropped…).
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum MetricError {
    #[error("metric source unavailable: {0}")]
    Unavailable(String),
    #[error("metric source timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("bad response from metric source: {0}")]
    BadResponse(String),
    /// HTTP 401 or 403: the server refused kerf's credentials (or their absence).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The source refused the query as too big: it would load more samples than its limit
    /// (Prometheus `--query.max-samples`, HTTP 422) or ran past its own query timeout. A
    /// smaller query may succeed.
    #[error("query refused as too big: {0}")]
    Refused(String),
    #[error("{0}")]
    Other(String),
}

impl MetricError {
    /// Worth retrying as smaller queries: refused as too big, or timed out.
    pub fn is_too_big(&self) -> bool {
        matches!(self, MetricError::Refused(_) | MetricError::Timeout(_))
    }
}

/// A source of range-query results: the OpenMetrics file (standalone) or Prometheus.
pub trait MetricSource: Send + Sync {
    fn range_query(
        &self,
        query: &RangeQuery,
    ) -> impl std::future::Future<Output = Result<SeriesSet, MetricError>> + Send;

    /// One value per (namespace, workload, container) over a window ([`window`]).
    fn window_query(
        &self,
        query: &WindowQuery,
    ) -> impl std::future::Future<Output = Result<WindowSet, MetricError>> + Send;

    /// The per-step values of a window query over a few steps ([`window::StepQuery`]): the
    /// incremental history's. A source that cannot answer says so, and the caller asks the
    /// whole window instead.
    fn step_query(
        &self,
        query: &window::StepQuery,
    ) -> impl std::future::Future<Output = Result<window::StepSet, MetricError>> + Send {
        let _ = query;
        async {
            Err(MetricError::Other(
                "this source answers no step queries".into(),
            ))
        }
    }

    /// The first and last sample time the source holds, when it is a file (said beside "no
    /// samples": a file from another time than `--at` is the usual cause). `None`: unknown.
    fn coverage(&self) -> Option<(Timestamp, Timestamp)> {
        None
    }

    /// A window query this source refused was split in two (counted where the source reports
    /// its metrics: `kerf_prometheus_query_splits_total`).
    fn record_split(&self) {}
}

/// A batch of workloads asked in one query, which the source may refuse as too big: a window
/// query or a step query.
pub trait Batch: Sized + Sync {
    type Answer: Send;
    /// The two halves of the batch, or `None` for one workload.
    fn halves(&self) -> Option<(Self, Self)>;
    fn ask<S: MetricSource>(
        &self,
        source: &S,
    ) -> impl std::future::Future<Output = Result<Self::Answer, MetricError>> + Send;
    /// The answer of both halves: the refused attempt and its split counted.
    fn joined(left: Self::Answer, right: Self::Answer) -> Self::Answer;
    /// The metric and the number of workloads, for the log.
    fn describe(&self) -> (&str, usize);
    /// Queries sent, refused batches split, samples loaded (when the source says).
    fn counts(answer: &Self::Answer) -> (usize, usize, Option<u64>);
}

impl Batch for WindowQuery {
    type Answer = WindowSet;
    fn halves(&self) -> Option<(Self, Self)> {
        self.split()
    }
    async fn ask<S: MetricSource>(&self, source: &S) -> Result<WindowSet, MetricError> {
        source.window_query(self).await
    }
    fn joined(mut left: WindowSet, right: WindowSet) -> WindowSet {
        left.merge(right);
        left.splits += 1;
        left.queries += 1;
        left
    }
    fn describe(&self) -> (&str, usize) {
        (&self.metric, self.workloads.len())
    }
    fn counts(a: &WindowSet) -> (usize, usize, Option<u64>) {
        (a.queries, a.splits, a.samples_loaded)
    }
}

impl Batch for window::StepQuery {
    type Answer = window::StepSet;
    fn halves(&self) -> Option<(Self, Self)> {
        self.split()
    }
    async fn ask<S: MetricSource>(&self, source: &S) -> Result<window::StepSet, MetricError> {
        source.step_query(self).await
    }
    fn joined(mut left: window::StepSet, right: window::StepSet) -> window::StepSet {
        left.merge(right);
        left.splits += 1;
        left.queries += 1;
        left
    }
    fn describe(&self) -> (&str, usize) {
        (&self.window.metric, self.window.workloads.len())
    }
    fn counts(a: &window::StepSet) -> (usize, usize, Option<u64>) {
        (a.queries, a.splits, a.samples_loaded)
    }
}

/// `query` asked of `source`, splitting a batch the source refuses as too big (or that times
/// out) in two and retrying each half, down to one workload per query. Halves run one after the
/// other: the caller bounds how many batches are in flight, and a split never multiplies the
/// load on a source that is already struggling.
pub async fn asked_splitting<S: MetricSource, Q: Batch>(
    source: &S,
    query: &Q,
) -> Result<Q::Answer, MetricError> {
    match query.ask(source).await {
        Err(e) if e.is_too_big() => {
            let Some((a, b)) = query.halves() else {
                return Err(e);
            };
            source.record_split();
            let (metric, workloads) = query.describe();
            tracing::debug!(metric, workloads, "query refused ({e}); split in two");
            let left = Box::pin(asked_splitting(source, &a)).await?;
            let right = Box::pin(asked_splitting(source, &b)).await?;
            Ok(Q::joined(left, right))
        }
        other => other,
    }
}

/// [`MetricSource::window_query`], split when refused ([`asked_splitting`]).
pub async fn window_query_splitting<S: MetricSource>(
    source: &S,
    query: &WindowQuery,
) -> Result<WindowSet, MetricError> {
    asked_splitting(source, query).await
}

/// The source a command was given: an OpenMetrics file or a Prometheus URL.
pub enum AnySource {
    File(file::FileSource),
    Prometheus(prometheus::PrometheusSource),
}

impl AnySource {
    /// A file source, or a Prometheus source at `prometheus` with GlobalConfiguration's
    /// `prometheus.requestTimeout`.
    pub async fn from_args(
        file: Option<&std::path::Path>,
        prometheus: Option<&str>,
        global: &crate::api::GlobalConfigurationSpec,
    ) -> anyhow::Result<Self> {
        let settings = prometheus.map(|url| crate::api::PrometheusSettings {
            url: url.to_string(),
            request_timeout: global.prometheus.request_timeout.clone(),
            ..Default::default()
        });
        Self::open(file, settings.as_ref(), crate::api::OptionNames::Flags).await
    }

    /// Reports Prometheus query latency and failures to `metrics` (a file source reports none).
    pub fn reporting_to(self, metrics: std::sync::Arc<crate::telemetry::Metrics>) -> Self {
        match self {
            AnySource::Prometheus(p) => AnySource::Prometheus(p.reporting_to(metrics)),
            file => file,
        }
    }

    /// A file source, or a Prometheus source with every connection setting of `prometheus`
    /// (see [`prometheus::PrometheusSource::connect`]); errors name the settings as `names` says.
    pub async fn open(
        file: Option<&std::path::Path>,
        prometheus: Option<&crate::api::PrometheusSettings>,
        names: crate::api::OptionNames,
    ) -> anyhow::Result<Self> {
        match (file, prometheus) {
            (Some(path), _) => Ok(AnySource::File(
                file::FileSource::from_path(path).map_err(|e| anyhow::anyhow!("{e}"))?,
            )),
            (None, Some(settings)) => Ok(AnySource::Prometheus(
                prometheus::PrometheusSource::connect(settings, names).map_err(|e| {
                    anyhow::anyhow!("{}: {e}", crate::support::redact::redact(&settings.url))
                })?,
            )),
            (None, None) => anyhow::bail!("give --metrics FILE or --prometheus URL"),
        }
    }
}

impl MetricSource for AnySource {
    async fn range_query(&self, query: &RangeQuery) -> Result<SeriesSet, MetricError> {
        match self {
            AnySource::File(f) => f.range_query(query).await,
            AnySource::Prometheus(p) => p.range_query(query).await,
        }
    }

    fn record_split(&self) {
        if let AnySource::Prometheus(p) = self {
            p.record_split();
        }
    }

    fn coverage(&self) -> Option<(Timestamp, Timestamp)> {
        match self {
            AnySource::File(f) => f.coverage(),
            AnySource::Prometheus(p) => p.coverage(),
        }
    }

    async fn window_query(&self, query: &WindowQuery) -> Result<WindowSet, MetricError> {
        match self {
            AnySource::File(f) => f.window_query(query).await,
            AnySource::Prometheus(p) => p.window_query(query).await,
        }
    }

    async fn step_query(&self, query: &window::StepQuery) -> Result<window::StepSet, MetricError> {
        match self {
            AnySource::File(f) => f.step_query(query).await,
            AnySource::Prometheus(p) => p.step_query(query).await,
        }
    }
}

pub mod decode;
pub mod file;
pub mod openmetrics;
pub mod prometheus;
pub mod promql;
pub mod window;

pub use window::{WindowAggregate, WindowKey, WindowQuery, WindowSet, WorkloadSelector};
