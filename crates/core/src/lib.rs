//! The pure core: plain functions over plain data. No tokio, no kube client, no clock reads —
//! `now` is always a parameter. Its Cargo.toml has no IO dependency, so the compiler keeps it so.
#![forbid(unsafe_code)]

pub mod accelerator;
pub mod admission;
pub mod allocation;
pub mod grouping;
pub mod hash;
pub mod hpa;
pub mod limits;
pub mod managed_fields;
pub mod model;
pub mod owner;
pub mod persisted;
pub mod pod;
pub mod quantity;
pub mod query;
pub mod recommenders;
pub mod recovery;
pub mod selection;
pub mod snapshot;
pub mod vpa;
pub mod writes;
