//! The recommenders: each turns the shared snapshot and its metric samples into one part of a
//! workload's outcome. [`gpu`] sizes fractional GPUs (KAI); [`resources`] sizes CPU and memory
//! requests with HPA coordination.

pub mod gpu;
pub mod resources;
