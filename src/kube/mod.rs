//! The Kubernetes IO edge: [`reader`] (watch-fed indexes that build the plain
//! [`Snapshot`](crate::core::snapshot::Snapshot)), [`writer`] (the only code that writes to the
//! cluster), [`lease`] (who may write) and [`recovery`] (filling the admission store from the
//! persisted annotations before readiness).
//!
//! Inside this module the `kube` crate is always named `::kube` so it never reads as
//! `crate::kube`.

pub mod lease;
pub mod reader;
pub mod recovery;
pub mod writer;

pub use lease::{Lease, LeaseConfig};
pub use reader::{InvalidPolicy, Reader};
pub use writer::{WriteOp, WriteOutcome, Writer, WriterConfig, WriterHandle};

/// Field manager of every write kerf makes (server-side apply and patches).
pub use crate::core::writes::FIELD_MANAGER;

/// Name of the writer Lease in kerf's namespace.
pub const LEASE_NAME: &str = "kerf-writer";

/// This replica's identity: `POD_NAME` (downward API), else the hostname, else the process id.
pub fn default_identity() -> String {
    let from_env = |k: &str| {
        std::env::var(k)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    from_env("POD_NAME")
        .or_else(|| from_env("HOSTNAME"))
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| format!("kerf-{}", std::process::id()))
}
