//! The pure core: plain functions over plain data. No tokio, no kube client, no clock reads —
//! `now` is always a parameter.

pub mod accelerator;
pub mod admission;
pub mod allocation;
pub mod cycle;
pub mod evaluate;
pub mod gpu_engine;
pub mod hpa;
pub mod model;
pub mod owner;
pub mod pod;
pub mod quantity;
pub mod recovery;
pub mod resources;
pub mod rightsizing;
pub mod rs_evaluate;
pub mod selection;
pub mod snapshot;
pub mod writes;
