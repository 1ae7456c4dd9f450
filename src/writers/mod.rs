//! Writers: where one cycle's planned writes go. [`kube`] is the cluster writer (Lease-gated,
//! server-side apply as `kerf`); [`memory`] is the in-memory writer of the modes without an API
//! server, which lays kerf's writes over the objects the next cycle reads.

pub mod kube;
pub mod memory;
