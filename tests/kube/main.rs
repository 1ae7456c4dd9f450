//! The Kubernetes edge against the mock API server: reader, writer, Lease, recovery, replicas, HPA coordination, releases.
//!
//! One test binary per IO edge: each links the dependency tree once (see DEVELOPERS.md).

#[path = "../support/auth_proxy.rs"]
mod auth_proxy;
#[path = "../support/kerf_cli.rs"]
mod kerf_cli;
#[path = "../support/kube/mod.rs"]
mod kube_support;
#[path = "../support/prometheus.rs"]
mod prometheus_support;
#[path = "../support/webhook.rs"]
mod support;
#[path = "../support/usage_history.rs"]
mod usage_history;

mod cycle_trace;
mod gitops_conflict_kube;
mod hpa_coordination_kube;
mod kube_checkpoint;
mod kube_lease;
mod kube_no_churn;
mod kube_owners;
mod kube_prometheus_connection;
mod kube_reader;
mod kube_recovery;
mod kube_replicas;
mod kube_resize;
mod kube_watch_errors;
mod kube_writer;
mod monitoring;
mod real_merge_property;
mod real_merge_writes;
mod release_kube;
mod whole_changes_kube;
