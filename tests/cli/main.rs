//! kerf as a user runs it: `kerf recommend`, standalone `kerf serve`, the reconcile loop over the shipped examples, failures at start.
//!
//! One test binary per IO edge: each links the dependency tree once (see DEVELOPERS.md).

#[path = "../support/apiserver.rs"]
mod apiserver;
#[path = "../support/fake_cluster.rs"]
mod fake_cluster;
#[path = "../support/kerf_cli.rs"]
mod kerf_cli;
#[path = "../support/prometheus.rs"]
mod prometheus_support;
#[path = "../support/webhook.rs"]
mod support;
#[path = "../support/usage_history.rs"]
mod usage_history;

mod bench_scale;
mod browser;
mod cluster_read;
mod core_over_built_clusters;
mod incremental_history;
mod input_errors;
mod recommend_cli;
mod reconciler_plan;
mod serve_failures;
mod simulate;
mod standalone_e2e;
