//! Pure write planning (see `docs/design/runtime.md`): [`plan_writes`] turns one cycle's outcome
//! into [`WriteOp`]s; `fields` holds what an apply carries and the comparisons that decide
//! whether a write or a restart is due. No IO: the cluster writer (`writers/kube`) and the
//! in-memory writer (`writers/memory.rs`) execute the ops.

pub mod conflict;
pub mod eviction;
mod fields;
pub mod method;
mod ops;
pub mod pending;
mod plan;
mod recommendation;
pub mod resize;
pub mod write_method;

pub use fields::{
    KerfApply, Live, Released, gpu_restart_due, has_any, kerf_apply, limits_match, live_template,
    merge_conditions, nest, release_patch, requests_match, restart_body, restored_limits, same_gpu,
    template_limits, template_requests, workload_body,
};
pub use ops::{
    ChangeWrite, CheckpointWrite, ConditionUpdate, CoordinatedChange, EventWrite, EvictWrite,
    GpuAnnotations, HpaTarget, Kept, PlanWarning, PolicyStatusWrite, RecommendationWrite,
    ResizeWrite, RestoreKind, RestoreWrite, WorkloadWrite, WriteOp,
};
pub use plan::{held_back, plan_writes, recommendation_name, rollback_requested, rolled_back};
pub use recommendation::{
    Gates, REASON_NO_RECOMMENDATION, REASON_READ_ONLY, RestoreHpa, RestorePlan, applied_change,
    coordinated_after_release, plan_release, plan_restore, recommendation_phase,
    recommendation_spec, recommendation_status, recorded_values, served_change, served_values,
};
