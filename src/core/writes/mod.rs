//! Pure write planning (see `docs/design/runtime.md`): [`plan_writes`] turns one cycle's outcome
//! into [`WriteOp`]s; `fields` holds what an apply carries and the comparisons that decide
//! whether a write or a restart is due. No IO: the cluster writer (`writers/kube`) and the
//! in-memory writer (`writers/memory.rs`) execute the ops.

mod fields;
mod ops;
mod plan;

pub use fields::*;
pub use ops::*;
pub use plan::*;

/// The field manager of every server-side apply kerf makes.
pub const FIELD_MANAGER: &str = "kerf";
