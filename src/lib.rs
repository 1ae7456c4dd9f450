//! kerf: a Kubernetes rightsizer for fractional GPUs (NVIDIA KAI), CPU and memory, that keeps
//! HorizontalPodAutoscalers consistent.
//!
//! Layout: [`api`] (CRD types), [`core`] (pure logic: no IO, no clock), and the IO edges —
//! [`metrics`] (OpenMetrics file, Prometheus), [`kube`] (reader, writer, Lease), [`server`]
//! (admission webhook, health), [`pipeline`] (one evaluation cycle), [`standalone`]
//! (manifests directory), [`cli`] (commands).
#![forbid(unsafe_code)]

pub mod api;
pub mod bench;
pub mod cli;
pub mod core;
pub mod health;
pub mod kube;
pub mod metrics;
pub mod own_namespace;
pub mod pipeline;
pub mod reconciler;
pub mod server;
pub mod standalone;
pub mod state;
pub mod telemetry;
pub mod writers;
