//! Object sources: where a cycle's objects come from. [`kube`] keeps watch-fed indexes of the
//! API server; [`dir`] reads a directory of manifests. Both build the same plain
//! [`Snapshot`](crate::core::snapshot::Snapshot).

pub mod dir;
pub mod kube;
