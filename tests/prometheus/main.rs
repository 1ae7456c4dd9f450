//! The metrics edge against a real Prometheus and VictoriaMetrics: queries, connection settings, parity with the file source.
//!
//! One test binary per IO edge: each links the dependency tree once (see DEVELOPERS.md).

#[path = "../support/auth_proxy.rs"]
mod auth_proxy;
#[path = "../support/kerf_cli.rs"]
mod kerf_cli;
#[path = "../support/pki.rs"]
mod pki;
#[path = "../support/metrics.rs"]
mod process_metrics;
#[path = "../support/prometheus.rs"]
mod prometheus_support;
#[path = "../support/usage_history.rs"]
mod usage_history;
#[path = "../support/victoria.rs"]
mod victoria;

mod gpu_metrics;
mod incremental_history;
mod peer_definition;
mod prometheus_reach;
mod prometheus_source;
mod victoria_metrics;
mod workload_history;
