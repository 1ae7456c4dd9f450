//! Synthetic history for `kerf bench simulate` (docs/performance.md): a week of GPU usage for
//! the shipped examples' pods with a daily cycle, so a replay has upsizes and scale-backs to
//! make. Values are a pure function of (metric, pod, time), evaluated on the query grid.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::metrics::{MetricError, MetricSource, RangeQuery, SeriesKey, SeriesSet};

pub const COMPUTE_METRIC: &str = "kubex_gpu_container_sm_utilization_percent";
pub const MEMORY_METRIC: &str = "kubex_gpu_container_memory_footprint_percent";

/// The examples' GPU series: the llm's first pod busy in the daytime (UTC 08–20, 70 % of a
/// GPU on a 0.5 share in one minute of three), its second pod moderate, the embedder quiet but
/// for a two-hour batch at 02:00; memory footprints steady.
pub struct ExampleHistory {
    pub queries: AtomicUsize,
}

impl ExampleHistory {
    pub fn new() -> Self {
        Self {
            queries: AtomicUsize::new(0),
        }
    }

    fn value(metric: &str, pod: &str, container: &str, t: i64) -> Option<f64> {
        let hour = (t % 86_400) / 3_600;
        let day = (8..20).contains(&hour);
        let busy_minute = (t / 60) % 3 == 0;
        match (metric, container) {
            (COMPUTE_METRIC, "inference") if pod.ends_with("x2k4p") => {
                Some(match (day, busy_minute) {
                    (true, true) => 70.0,
                    (true, false) => 55.0,
                    _ => 15.0,
                })
            }
            (COMPUTE_METRIC, "inference") => Some(if day { 40.0 } else { 10.0 }),
            (COMPUTE_METRIC, "encoder") => Some(if (2..4).contains(&hour) { 75.0 } else { 20.0 }),
            (MEMORY_METRIC, "inference") => Some(60.0),
            (MEMORY_METRIC, "encoder") => Some(30.0),
            _ => None,
        }
    }
}

impl Default for ExampleHistory {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricSource for ExampleHistory {
    /// The examples' synthetic week is GPU signals only.
    async fn window_query(
        &self,
        _q: &crate::metrics::WindowQuery,
    ) -> Result<crate::metrics::WindowSet, MetricError> {
        Ok(Default::default())
    }

    async fn range_query(&self, q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        let mut set = SeriesSet::default();
        let containers = ["inference", "encoder"];
        for ns in &q.namespaces {
            for pod in q.pods.iter() {
                for container in containers {
                    let samples: Vec<(i64, f64)> = (0..)
                        .map(|i| q.start.as_second() + i * q.step_seconds)
                        .take_while(|t| *t <= q.end.as_second())
                        .filter_map(|t| Some((t, Self::value(&q.metric, pod, container, t)?)))
                        .collect();
                    if !samples.is_empty() {
                        set.series.insert(
                            SeriesKey {
                                namespace: ns.clone(),
                                pod: pod.clone(),
                                container: container.to_string(),
                            },
                            samples,
                        );
                    }
                }
            }
        }
        Ok(set)
    }
}

/// Only the GPU metrics of `inner` (the synthetic cluster's source answers any metric name).
pub struct GpuOnly<'a, S>(pub &'a S);

impl<S: MetricSource> MetricSource for GpuOnly<'_, S> {
    async fn range_query(&self, q: &RangeQuery) -> Result<SeriesSet, MetricError> {
        if q.metric == COMPUTE_METRIC || q.metric == MEMORY_METRIC {
            self.0.range_query(q).await
        } else {
            Ok(SeriesSet::default())
        }
    }

    async fn window_query(
        &self,
        _q: &crate::metrics::WindowQuery,
    ) -> Result<crate::metrics::WindowSet, MetricError> {
        Ok(Default::default())
    }
}
