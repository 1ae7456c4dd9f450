//! Metric sources (IO edge). The engine never sees these types' IO: the reconciler asks a
//! [`MetricSource`] for batched range queries and hands plain samples to the pure core, in the
//! core's query vocabulary ([`kerf_core::query`], re-exported here).

use jiff::Timestamp;

pub use kerf_core::query::{
    Aggregation, MetricError, RangeQuery, Samples, SeriesKey, SeriesSet, WindowAggregate,
    WindowKey, WindowQuery, WindowSet, WorkloadSelector, promql, window,
};

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

/// Why the metric source a command was given cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file and what is wrong with it (said in one message).
    #[error("{0}")]
    File(file::LoadError),
    /// A Prometheus setting kerf cannot use; the URL is said without its credentials.
    #[error("{url}: {error}")]
    Prometheus { url: String, error: MetricError },
    #[error("give --metrics FILE or --prometheus URL")]
    Missing,
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
    ) -> Result<Self, SourceError> {
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
    ) -> Result<Self, SourceError> {
        match (file, prometheus) {
            (Some(path), _) => Ok(AnySource::File(
                file::FileSource::from_path(path).map_err(SourceError::File)?,
            )),
            (None, Some(settings)) => Ok(AnySource::Prometheus(
                prometheus::PrometheusSource::connect(settings, names).map_err(|error| {
                    SourceError::Prometheus {
                        url: crate::support::redact::redact(&settings.url),
                        error,
                    }
                })?,
            )),
            (None, None) => Err(SourceError::Missing),
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
