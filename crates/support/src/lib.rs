//! Leaf helpers that import nothing of kerf, so every layer may use them.
#![forbid(unsafe_code)]

pub mod metric_name;
pub mod redact;
pub mod small_map;
