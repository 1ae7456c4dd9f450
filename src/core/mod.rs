//! The pure core: plain functions over plain data. No tokio, no kube client, no clock reads —
//! `now` is always a parameter.

pub mod admission;
pub mod model;
pub mod owner;
