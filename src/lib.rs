//! kerf: a Kubernetes rightsizer for fractional GPUs (NVIDIA KAI), CPU and memory, that keeps
//! HorizontalPodAutoscalers consistent.
//!
//! Layout: [`api`] (CRD types), [`core`] (pure logic: no IO, no clock), and the IO edges —
//! [`metrics`] (OpenMetrics file, Prometheus), [`kube`] (reader, writer, lease), [`server`]
//! (admission webhook, health, metrics), [`cli`] (commands).
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod standalone;
pub mod metrics;
pub mod server;
pub mod core;
pub mod state;
pub mod telemetry;
