//! Which selected pods had samples of a GPU signal (docs/design/gpu-engine.md#g13): a policy
//! whose metric reads nothing says so (`MetricsFound=False`, reason `NoSamples`), and so do its
//! workloads' reasons, instead of passing "no data" off as "no condition met".

use jiff::Timestamp;

use crate::model::rfc3339_secs;
use kerf_api::{DurationStr, GpuReactivePolicySpec, Signal};

/// Reason of `MetricsFound=False`.
pub const REASON_NO_SAMPLES: &str = "NoSamples";
/// Reason of `MetricsFound=True`.
pub const REASON_SAMPLES_FOUND: &str = "SamplesFound";

/// Where an operator finds which exporter to run and how to scrape it.
const HINT: &str = "is the GPU exporter installed and scraped? see docs/gpu-metrics.md";

/// Of `total` selected pods, `missing` had no sample of one signal's metric in the window its
/// query covers (the longer of the signal's two windows) before `at`.
#[derive(Clone, Debug, PartialEq)]
pub struct MissingSamples {
    pub signal: Signal,
    pub metric: String,
    /// The label names the policy selects by, comma-separated (`namespace,pod,container`).
    pub labels: String,
    /// The window, as the policy writes it (`10m`).
    pub window: String,
    pub missing: usize,
    pub total: usize,
    pub at: Timestamp,
}

impl MissingSamples {
    /// The entry of `signal` of `policy`, `missing` of `total` pods without samples.
    pub fn of(
        policy: &GpuReactivePolicySpec,
        signal: Signal,
        missing: usize,
        total: usize,
        at: Timestamp,
    ) -> Self {
        let cfg = policy.metrics.signal(signal);
        let p = &cfg.prometheus;
        let labels = [&p.namespace_label, &p.pod_label, &p.container_label]
            .into_iter()
            .filter(|l| !l.is_empty())
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(",");
        Self {
            signal,
            metric: p.metric.clone(),
            labels,
            window: query_window(policy, signal).to_string(),
            missing,
            total,
            at,
        }
    }

    /// What an operator reads, e.g. `m{namespace,pod,container}: no samples for 12 of 12 pods
    /// in the 10m before 2026-01-01T12:00:00Z (the file covers 11:40–12:00) — is the GPU
    /// exporter installed and scraped? see docs/gpu-metrics.md`. `coverage` is the first and
    /// last sample time of a metrics file (none from Prometheus).
    pub fn message(&self, coverage: Option<(Timestamp, Timestamp)>) -> String {
        let covers = coverage.map_or_else(String::new, |(from, to)| {
            format!(" (the file covers {})", span(from, to, self.at))
        });
        format!(
            "{}{{{}}}: no samples for {} of {} pods in the {} before {}{covers} — {HINT}",
            self.metric,
            self.labels,
            self.missing,
            self.total,
            self.window,
            rfc3339_secs(self.at),
        )
    }
}

/// The window a signal's query covers: the longer of its upsize and scale-back windows.
pub fn query_window(policy: &GpuReactivePolicySpec, signal: Signal) -> &DurationStr {
    let cfg = policy.metrics.signal(signal);
    if cfg.upsize.metrics_window.seconds() >= cfg.scale_back.metrics_window.seconds() {
        &cfg.upsize.metrics_window
    } else {
        &cfg.scale_back.metrics_window
    }
}

/// `11:40–12:00` when both ends fall on the day of `at` (UTC), else full times: a file from
/// another day (a forgotten `--at`) shows its dates.
fn span(from: Timestamp, to: Timestamp, at: Timestamp) -> String {
    let utc = |t: Timestamp| t.to_zoned(jiff::tz::TimeZone::UTC);
    let day = utc(at).date();
    if utc(from).date() == day && utc(to).date() == day {
        format!(
            "{}–{}",
            utc(from).strftime("%H:%M"),
            utc(to).strftime("%H:%M")
        )
    } else {
        format!("{}–{}", rfc3339_secs(from), rfc3339_secs(to))
    }
}

/// The message of a policy's `MetricsFound=False`: its signals' entries, in signal order.
pub fn condition_message(
    missing: &[MissingSamples],
    coverage: Option<(Timestamp, Timestamp)>,
) -> String {
    missing
        .iter()
        .map(|m| m.message(coverage))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn policy() -> GpuReactivePolicySpec {
        serde_json::from_value(serde_json::json!({
            "experimental": {"gpuKaiContract": "v1alpha1-2026-07"},
            "automationStrategyRef": {"name": "s"},
            "metrics": {
                "compute": {"prometheus": {"metric": "kubex_gpu_container_sm_utilization_percent", "interpretation": "fullGPU"}},
                "memory": {
                    "scaleBack": {"metricsWindow": "30m"},
                    "prometheus": {"metric": "m", "interpretation": "currentAllocation", "containerLabel": ""}
                }
            }
        }))
        .unwrap()
    }

    /// The message's shape is a contract: metric{labels}, X of Y pods, the window, the time,
    /// the file's range and the pointer to the exporter page.
    #[test]
    fn the_message_names_metric_labels_window_counts_and_the_files_range() {
        let m = MissingSamples::of(
            &policy(),
            Signal::Compute,
            12,
            12,
            at("2026-01-01T12:00:00Z"),
        );
        assert_eq!(
            m.message(Some((
                at("2026-01-01T11:40:00Z"),
                at("2026-01-01T12:00:00Z")
            ))),
            "kubex_gpu_container_sm_utilization_percent{namespace,pod,container}: no samples for \
             12 of 12 pods in the 10m before 2026-01-01T12:00:00Z (the file covers 11:40–12:00) \
             — is the GPU exporter installed and scraped? see docs/gpu-metrics.md"
        );
        // From Prometheus: no file range.
        assert!(!m.message(None).contains("the file covers"));
    }

    /// The longer window, the label names actually used, and a file of another day in full.
    #[test]
    fn the_window_is_the_longer_one_and_another_days_file_shows_its_dates() {
        let m = MissingSamples::of(&policy(), Signal::Memory, 1, 3, at("2026-03-05T08:00:00Z"));
        let text = m.message(Some((
            at("2026-01-01T11:40:00Z"),
            at("2026-01-01T12:00:00Z"),
        )));
        assert!(
            text.starts_with("m{namespace,pod}: no samples for 1 of 3 pods in the 30m before 2026-03-05T08:00:00Z (the file covers 2026-01-01T11:40:00Z–2026-01-01T12:00:00Z)"),
            "{text}"
        );
    }
}
