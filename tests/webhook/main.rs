//! The admission webhook over real TLS: reviews, certificates, the CLI, fuzzed bodies.
//!
//! One test binary per IO edge: each links the dependency tree once (see DEVELOPERS.md).

#[path = "../support/apiserver.rs"]
mod apiserver;
#[path = "../support/metrics.rs"]
mod process_metrics;
#[path = "../support/webhook.rs"]
mod support;

mod webhook_admission;
mod webhook_cli;
mod webhook_fuzz;
mod webhook_limits;
mod webhook_tls;
