//! The pure core: plain functions over plain data. No tokio, no kube client, no clock reads —
//! `now` is always a parameter.

pub mod model;
pub mod snapshot;
pub mod allocation;
pub mod evaluate;
pub mod gpu_engine;
pub mod selection;
pub mod recovery;
