//! Writers: where one cycle's planned writes go. The cluster writer
//! ([`crate::kube::writer`], Lease-gated, server-side apply as `kerf`) and the in-memory writer
//! ([`memory::MemoryWriter`]) for the modes without an API server.

pub mod memory;
