//! The query vocabulary the recommenders speak: range queries and their series, window and step
//! queries over a workload's pods, label matchers, and the errors a source answers with. Plain
//! data and the PromQL text built from it; asking a source is the IO crate's (`kerf::metrics`).

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
    pub fn of(interpretation: kerf_api::Interpretation) -> Self {
        match interpretation {
            kerf_api::Interpretation::FullGpu => Aggregation::Sum,
            kerf_api::Interpretation::CurrentAllocation => Aggregation::Avg,
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
    /// The `reason` label it is counted under (`kerf_prometheus_query_failures_total`).
    pub fn label(&self) -> &'static str {
        match self {
            MetricError::Unavailable(_) => "unavailable",
            MetricError::Timeout(_) => "timeout",
            MetricError::BadResponse(_) => "bad_response",
            MetricError::Unauthorized(_) => "unauthorized",
            MetricError::Refused(_) => "refused",
            MetricError::Other(_) => "other",
        }
    }

    /// Worth retrying as smaller queries: refused as too big, or timed out.
    pub fn is_too_big(&self) -> bool {
        matches!(self, MetricError::Refused(_) | MetricError::Timeout(_))
    }
}

pub mod promql;
pub mod window;

pub use window::{WindowAggregate, WindowKey, WindowQuery, WindowSet, WorkloadSelector};
