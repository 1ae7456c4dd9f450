//! kerf: a Kubernetes rightsizer for fractional GPUs (NVIDIA KAI), CPU and memory, that keeps
//! HorizontalPodAutoscalers consistent.
//!
//! Layout: [`api`] (CRD types), [`core`] (pure logic: no IO, no clock; the recommenders and
//! write planning), and the IO edges around the one loop — [`sources`] (API server, manifests
//! directory) → [`reconcile`] (the cycle of every mode) → [`writers`] (cluster, in memory);
//! [`metrics`] (OpenMetrics file, Prometheus), [`server`] (admission webhook, health), [`cli`].
#![forbid(unsafe_code)]

// The lower layers are crates of their own (the core's Cargo.toml has no IO dependency); their
// paths stay as the rest of kerf names them.
pub use kerf_api as api;
pub use kerf_core as core;
pub use kerf_support as support;

pub mod bench;
pub mod checkpoint;
pub mod cli;
pub mod health;
pub mod metrics;
pub mod own_namespace;
pub mod reconcile;
pub mod server;
pub mod simulate;
pub mod sources;
pub mod state;
pub mod telemetry;
pub mod views;
pub mod writers;
