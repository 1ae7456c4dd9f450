//! Per-workload CPU/memory evaluation with HPA coordination (pure): recommendations, the HPA
//! outcome, risk flags, savings, phase, what the agent applies, the RightsizingRecommendation it
//! is recorded as, and rollback/release planning.
//!
//! Decisions (the user documents are silent):
//! - **Which containers.** `WorkloadInput::containers` are the containers the HPA counts (regular
//!   plus restartable init containers). Those outside the policy's `scope.containers` are not
//!   rightsized but still count in the HPA sums with their current request.
//! - **Blocked means the whole workload.** When the HPA's resource is auto-patch and coordination
//!   is not possible, kerf changes nothing on the workload (neither resource): phase `blocked`,
//!   reason `HPACoupled`. The recommendation is still computed and shown, with its savings.
//! - **skipReason.** Only the four documented values. `coordinate: false` blocks without a skip
//!   reason of its own: `skipReason` then says what would *also* prevent coordination (if anything),
//!   and the outcome's `message` says coordination is off. Checks run in the order
//!   unsupported-metrics, max-replicas-reached, missing-request, then the bounds
//!   (`target-out-of-bounds` covers both the hub's 40–90 % when it cannot be kept without trimming a
//!   must-not-decrease request, and the policy's `targetBounds`).
//! - **targetAfter** is `None` when no target was computed (coordination off, the HPA's resource not
//!   in auto-patch, or a structural skip reason); for `target-out-of-bounds` it is the target the
//!   change would have needed, so the user sees why.
//! - **Policy targetBounds** block a change whose new target is outside them; a target that does
//!   not change (new = current) is not a change and is not blocked.
//! - **Savings** = current − recommended over the rightsized containers (cores, bytes, GPU units),
//!   per replica and × current replicas. Negative when kerf recommends more than the workload asks
//!   for (upsizing). A resource with no container having both values has no savings entry.
//! - **Phase.** `blocked` (HPA); `audit-only` (no resource in auto-patch); `applied` (at least one
//!   auto-patch request to set); `pending` (auto-patch, but no sample yet: reason `NoUsageData`).
//! - **The RightsizingRecommendation** this outcome is written as, and what a release gives
//!   back of what kerf took, are write planning's (`core/writes/recommendation.rs`).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;

use crate::hpa::{
    self, Coordination, CountedRequest, HpaResource, REASON_HPA_COUPLED, RISK_HPA_COUPLED,
    SkipReason, analyze_metrics,
};
use crate::model::{
    ContainerRequests, CoordinatedHpa, PolicyId, RequestSet, ResourceRequests, WorkloadKey,
};
use crate::quantity::MIB;
use crate::recommenders::resources::container::{
    ContainerRec, ContainerSignals, PolicyError, PolicyParams, Source, recommend_container,
};
use crate::snapshot::REASON_STRATEGY_UNRESOLVED;
use kerf_api::{RecommendationPhase, ResourceMode, RightsizingPolicySpec, Savings};

pub const REASON_NO_USAGE_DATA: &str = "NoUsageData";
/// An upsize that would take the namespace past a ResourceQuota: held, still published.
pub const REASON_QUOTA_EXCEEDED: &str = "QuotaExceeded";
/// The pod template requests a resource in auto-patch at pod level (docs/hpa-coordination.md#pod-level-resources).
pub const REASON_POD_LEVEL_RESOURCES: &str = "PodLevelResources";
/// An HPA-coordinated change on a workload another controller owns (docs/workloads.md).
pub const REASON_OWNER_MANAGED: &str = "OwnerManaged";
/// Phase `pending`: less usage history than [`MIN_HISTORY_SECONDS`] (or the window, if
/// shorter); nothing is applied yet.
pub const REASON_INSUFFICIENT_HISTORY: &str = "InsufficientHistory";
/// Risk flag: the usage history is shorter than the policy's window (a 7-day window on a
/// Prometheus that keeps 2 days, a workload created yesterday): the recommendation is from the
/// data there is.
pub const RISK_INSUFFICIENT_HISTORY: &str = "insufficient-history";
/// Auto-patch waits until the workload has this much usage history (24 h), or the policy's
/// whole window when that is shorter: a day covers one daily peak.
pub const MIN_HISTORY_SECONDS: i64 = 24 * 3600;

/// How far back a workload's usage history reaches (the earliest sample of any of its pods in
/// the policy's longest window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Seconds of history before `now`; `None` when there is no sample at all.
    pub seconds: Option<i64>,
    /// The policy's longest window (cpu, memory).
    pub window_seconds: i64,
    /// History this close to a requirement meets it: the sampling grid's step and timing.
    pub slack_seconds: i64,
}

impl History {
    /// Less history than the window: flagged `insufficient-history`.
    pub fn insufficient(&self) -> bool {
        self.seconds
            .is_some_and(|s| s + self.slack_seconds < self.window_seconds)
    }

    /// Enough history for auto-patch: [`MIN_HISTORY_SECONDS`], or the window when shorter.
    pub fn enough_to_apply(&self) -> bool {
        let needed = MIN_HISTORY_SECONDS.min(self.window_seconds);
        self.seconds
            .is_none_or(|s| s + self.slack_seconds >= needed)
    }
}

/// One counted container of the workload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerInput {
    pub signals: ContainerSignals,
    /// The container's current limits (cpu millicores, memory bytes; `None`: no limit).
    pub limits: ResourceRequests,
    /// Selected by the policy's `scope.containers` (empty scope = every counted container).
    pub in_scope: bool,
    /// GPU units, when the GPU engine has them (shown and counted in savings only).
    pub gpu_current: Option<f64>,
    pub gpu_recommended: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HpaInput {
    pub hpa: HorizontalPodAutoscaler,
    /// The HPA was at `maxReplicas` at some time in the recommendation window
    /// (see [`hpa::max_replicas_reached`]).
    pub max_replicas_reached: bool,
    /// `max_replicas_reached` comes from the kube-state-metrics replica history; `false`: from
    /// `status.currentReplicas` alone (no series), which the reasons then say.
    pub replica_history: bool,
    /// The pod template sets pod-level requests ([`hpa::pod_level_requests_set`]).
    pub pod_level_requests: bool,
    /// The controller that owns the workload's template and HPA, when kerf writes neither
    /// (docs/workloads.md).
    pub owner_managed: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadInput {
    pub policy: RightsizingPolicySpec,
    /// Why the policy's `automationStrategyRef` does not resolve: the policy is then not applied
    /// — recommendation only, phase `audit-only`, reason `StrategyUnresolved`
    /// (docs/design/runtime.md#r8).
    pub strategy_unresolved: Option<String>,
    pub containers: Vec<ContainerInput>,
    pub hpa: Option<HpaInput>,
    /// The resources the pod template requests at pod level ([`hpa::pod_level_resources`]).
    pub pod_level_resources: Vec<HpaResource>,
    /// A VPA on the workload that applies its recommendations ([`crate::vpa`]).
    pub vpa: Option<crate::vpa::Vpa>,
    /// The namespace's LimitRange bounds for containers (docs/policies.md#limits).
    pub limit_range: Option<crate::limits::ContainerLimitRange>,
    /// The first this many of `containers` are the regular ones (the rest sidecars): a
    /// LimitRange's `type: Pod` bounds sum those.
    pub regular_containers: usize,
    /// The namespace's ResourceQuotas: an upsize past one is held (`QuotaExceeded`).
    pub quotas: Vec<crate::limits::QuotaView>,
    /// Current replicas (for total savings).
    pub replicas: i32,
    /// How much usage history the recommendation rests on.
    pub history: History,
    pub now: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ContainerOutcome {
    pub name: String,
    pub in_scope: bool,
    pub current: ResourceRequests,
    /// After any hub adjustment for the HPA bounds. `None` = nothing recommended.
    pub recommended: ResourceRequests,
    /// The current limits, and the limits that go with the recommended requests
    /// ([`crate::limits::container_resources`]; `None`: no limit, none added).
    pub current_limits: ResourceRequests,
    pub recommended_limits: ResourceRequests,
    pub cpu_source: Source,
    pub memory_source: Source,
    /// The usage the recommendation rests on (the charts show it): the CPU percentile (cores)
    /// and the peak memory working set (bytes) over their windows.
    pub cpu_usage: Option<f64>,
    pub memory_usage: Option<f64>,
    pub throttled: bool,
    pub oom_killed: bool,
    pub gpu_current: Option<f64>,
    pub gpu_recommended: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HpaOutcome {
    pub name: String,
    /// The resource the HPA measures as utilization (`None`: it does not).
    pub resource: Option<HpaResource>,
    pub target_before: Option<i32>,
    pub target_after: Option<i32>,
    pub skip_reason: Option<SkipReason>,
    pub blocked: bool,
    /// `HPACoupled` when blocked.
    pub reason: Option<String>,
    /// Human explanation (events, conditions).
    pub message: String,
    /// The target is changed together with the requests.
    pub coordinated: bool,
}

/// What the agent writes, in one step (server-side apply, field manager `kerf`, as a rollout).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentPlan {
    /// Requests of the auto-patch resources, per container.
    pub requests: ContainerRequests,
    /// The limits that go with them (`RequestsAndLimits`), per container: only those a
    /// container has.
    pub limits: ContainerRequests,
    pub hpa: Option<CoordinatedHpa>,
}

/// What kerf manages on a workload under its policy (docs/design/hpa-coordination.md#h13): what
/// it took and no longer manages is released.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Managed {
    /// Per counted container in the policy's scope: the requests whose resource is in
    /// auto-patch.
    pub requests: BTreeMap<String, RequestSet>,
    /// kerf coordinates the HPA's target: `spec.hpa.coordinate` is on and the HPA measures a
    /// resource in auto-patch.
    pub hpa_target: bool,
    /// The resource the workload's HPA measures as utilization, if any.
    pub hpa_resource: Option<HpaResource>,
}

/// Why a workload's CPU/memory cannot be evaluated under the policy that won it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvaluationError {
    /// A field of the policy.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A request of the workload's own template that is not a quantity.
    #[error("container {container}: {error}")]
    Request {
        container: String,
        error: crate::quantity::QuantityError,
    },
}

/// One workload's CPU/memory result: its outcome under the policy that won it.
#[derive(Clone, Debug)]
pub struct RsResult {
    pub key: WorkloadKey,
    pub policy: PolicyId,
    /// Err = the workload cannot be evaluated under the policy (the field named).
    pub outcome: Result<RightsizingOutcome, EvaluationError>,
    pub metrics_unavailable: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RightsizingOutcome {
    pub containers: Vec<ContainerOutcome>,
    pub hpa: Option<HpaOutcome>,
    pub risk_flags: Vec<String>,
    pub savings: Savings,
    pub phase: RecommendationPhase,
    pub reason: Option<String>,
    pub message: String,
    /// `Some` only when `phase` is `applied`.
    pub apply: Option<AgentPlan>,
    /// What kerf manages on the workload, whatever the phase.
    pub managed: Managed,
    /// What else the user should know (e.g. where `max-replicas-reached` was read from).
    pub reasons: Vec<String>,
    /// The reasons of the floors that hold a request (risk flags `throttled`, `oom-killed`),
    /// also in `reasons`: the RightsizingRecommendation's `spec.riskReasons`.
    pub risk_reasons: Vec<String>,
}

pub fn get(r: &ResourceRequests, res: HpaResource) -> Option<i64> {
    match res {
        HpaResource::Cpu => r.cpu_millis,
        HpaResource::Memory => r.memory_bytes,
    }
}

fn set(r: &mut ResourceRequests, res: HpaResource, v: Option<i64>) {
    match res {
        HpaResource::Cpu => r.cpu_millis = v,
        HpaResource::Memory => r.memory_bytes = v,
    }
}

fn must_not_decrease(rec: &ContainerRec, res: HpaResource) -> bool {
    match res {
        HpaResource::Cpu => rec.cpu.must_not_decrease,
        HpaResource::Memory => rec.memory.must_not_decrease,
    }
}

struct Ctx<'a> {
    input: &'a WorkloadInput,
    params: PolicyParams,
    recs: Vec<Option<ContainerRec>>,
}

impl Ctx<'_> {
    fn mode(&self, r: HpaResource) -> ResourceMode {
        match r {
            HpaResource::Cpu => self.params.cpu.mode,
            HpaResource::Memory => self.params.memory.mode,
        }
    }

    fn auto(&self, r: HpaResource) -> bool {
        self.mode(r) == ResourceMode::AutoPatch
    }

    fn limits(&self, r: HpaResource) -> (i64, Option<i64>) {
        match r {
            HpaResource::Cpu => (
                self.params.cpu.min_millis.unwrap_or(1).max(1),
                self.params.cpu.max_millis,
            ),
            HpaResource::Memory => (
                self.params.memory.min_bytes.unwrap_or(MIB).max(1),
                self.params.memory.max_bytes,
            ),
        }
    }
}

/// Evaluate one workload under a RightsizingPolicy. Errors only on an unusable policy
/// (unparseable quantity, min above max), naming the field.
pub fn evaluate_workload(input: &WorkloadInput) -> Result<RightsizingOutcome, PolicyError> {
    let params = PolicyParams::from_spec(&input.policy)?;
    let recs: Vec<Option<ContainerRec>> = input
        .containers
        .iter()
        .map(|c| c.in_scope.then(|| recommend_container(&c.signals, &params)))
        .collect();
    let ctx = Ctx {
        input,
        params,
        recs,
    };
    let mut recommended: Vec<ResourceRequests> = ctx
        .recs
        .iter()
        .map(|r| match r {
            Some(r) => ResourceRequests {
                cpu_millis: r.cpu.value,
                memory_bytes: r.memory.value,
            },
            None => ResourceRequests::default(),
        })
        .collect();
    let range_reasons = limit_range_reasons(input, &ctx.params, &recommended);
    requests_only_caps(input, &ctx.params, &mut recommended);
    let pod_range_reasons = keep_within_pod_limit_range(input, &ctx.params, &mut recommended);
    let qos_reasons = keep_qos_class(input, &ctx.params, &mut recommended);

    let mut risk_flags = Vec::new();
    let mut reasons = Vec::new();
    if input.history.insufficient() {
        risk_flags.push(RISK_INSUFFICIENT_HISTORY.to_string());
        reasons.push(format!(
            "{}: the usage history reaches back {} of the {} window; recommended from the data there is",
            RISK_INSUFFICIENT_HISTORY,
            span(input.history.seconds.unwrap_or(0)),
            span(input.history.window_seconds)
        ));
    }
    let signals: Vec<&ContainerSignals> = input.containers.iter().map(|c| &c.signals).collect();
    let (floor_flags, risk_reasons) = super::floors::floor_reasons(&signals, &ctx.recs);
    risk_flags.extend(floor_flags);
    reasons.extend(risk_reasons.iter().cloned());
    reasons.extend(range_reasons);
    reasons.extend(pod_range_reasons);
    reasons.extend(qos_reasons);
    let mut hpa_out = input
        .hpa
        .as_ref()
        .map(|h| evaluate_hpa(&ctx, h, &mut recommended, &mut risk_flags, &mut reasons));
    capped_after_hpa(input, &ctx.params, &mut recommended, hpa_out.as_mut());

    let containers = container_outcomes(&ctx, &recommended);
    let savings = savings(&containers, input.replicas);

    let auto: Vec<HpaResource> = [HpaResource::Cpu, HpaResource::Memory]
        .into_iter()
        .filter(|r| ctx.auto(*r))
        .collect();
    let (phase, reason, message, apply) =
        match not_applied(input, &containers, &auto, hpa_out.as_ref()) {
            Some((phase, reason, message)) => (phase, reason, message, None),
            None => held_by_quota(input, &containers)
                .map(|m| {
                    let reason = Some(REASON_QUOTA_EXCEEDED.to_string());
                    (RecommendationPhase::Blocked, reason, m, None)
                })
                .unwrap_or_else(|| applied_or_pending(input, &containers, &auto, hpa_out.as_ref())),
        };
    let managed = managed(&ctx, &containers, hpa_out.as_ref());
    Ok(RightsizingOutcome {
        containers,
        hpa: hpa_out,
        risk_flags,
        savings,
        phase,
        reason,
        message,
        apply,
        managed,
        reasons,
        risk_reasons,
    })
}

/// Why the outcome applies nothing, before its requests are looked at: the policy's strategy
/// does not resolve (`audit-only`), pod-level requests of an auto-patch resource, a VPA setting
/// the same requests, an HPA that cannot be coordinated (`blocked`).
fn not_applied(
    input: &WorkloadInput,
    containers: &[ContainerOutcome],
    auto: &[HpaResource],
    hpa_out: Option<&HpaOutcome>,
) -> Option<(RecommendationPhase, Option<String>, String)> {
    if let Some(why) = &input.strategy_unresolved {
        return Some((
            RecommendationPhase::AuditOnly,
            Some(REASON_STRATEGY_UNRESOLVED.to_string()),
            format!("{why}: recommendation only"),
        ));
    }
    let pod_level: Vec<&str> = auto
        .iter()
        .filter(|r| input.pod_level_resources.contains(r))
        .map(|r| r.as_str())
        .collect();
    if !pod_level.is_empty() {
        return Some((
            RecommendationPhase::Blocked,
            Some(REASON_POD_LEVEL_RESOURCES.to_string()),
            format!(
                "the pod template requests {} at pod level (spec.resources.requests): the scheduler reserves that request, not the containers', and kerf sizes containers only: recommendation only",
                pod_level.join(" and ")
            ),
        ));
    }
    if let Some((vpa, controlled)) = vpa_conflict(input, containers, auto) {
        return Some((
            RecommendationPhase::Blocked,
            Some(crate::vpa::REASON_VPA_CONFLICT.to_string()),
            format!(
                "VerticalPodAutoscaler {} (updateMode {}) sets {} at admission, as kerf would: kerf applies nothing while it does; set its updateMode to Off (recommendations only), or mode Off in its containerPolicies for these containers",
                vpa.id(),
                vpa.update_mode.as_deref().unwrap_or("default"),
                controlled.join(", ")
            ),
        ));
    }
    if let Some(h) = hpa_out.filter(|h| h.blocked) {
        return Some((
            RecommendationPhase::Blocked,
            h.reason
                .clone()
                .or_else(|| Some(REASON_HPA_COUPLED.to_string())),
            h.message.clone(),
        ));
    }
    None
}

/// The outcome of a workload with something in auto-patch: `applied` with the requests to set
/// (and the HPA target with them), or `pending` while there is no usage sample or not enough
/// history.
fn applied_or_pending(
    input: &WorkloadInput,
    containers: &[ContainerOutcome],
    auto: &[HpaResource],
    hpa_out: Option<&HpaOutcome>,
) -> (
    RecommendationPhase,
    Option<String>,
    String,
    Option<AgentPlan>,
) {
    if auto.is_empty() || !containers.iter().any(|c| c.in_scope) {
        return (
            RecommendationPhase::AuditOnly,
            None,
            "no resource is in auto-patch: recommendation only".to_string(),
            None,
        );
    }
    let mut requests = ContainerRequests::new();
    let mut limits = ContainerRequests::new();
    for c in containers.iter().filter(|c| c.in_scope) {
        let mut r = ResourceRequests::default();
        let mut l = ResourceRequests::default();
        for res in auto {
            set(&mut r, *res, get(&c.recommended, *res));
            if get(&c.recommended, *res).is_some() {
                set(&mut l, *res, get(&c.recommended_limits, *res));
            }
        }
        if r.cpu_millis.is_some() || r.memory_bytes.is_some() {
            requests.insert(c.name.clone(), r);
        }
        if l.cpu_millis.is_some() || l.memory_bytes.is_some() {
            limits.insert(c.name.clone(), l);
        }
    }
    if requests.is_empty() {
        return (
            RecommendationPhase::Pending,
            Some(REASON_NO_USAGE_DATA.to_string()),
            "no usage sample in the window yet".to_string(),
            None,
        );
    }
    if !input.history.enough_to_apply() {
        return (
            RecommendationPhase::Pending,
            Some(REASON_INSUFFICIENT_HISTORY.to_string()),
            format!(
                "only {} of usage history: auto-patch waits for {}",
                span(input.history.seconds.unwrap_or(0)),
                span(MIN_HISTORY_SECONDS.min(input.history.window_seconds))
            ),
            None,
        );
    }
    let hpa = hpa_out.filter(|h| h.coordinated).and_then(|h| {
        Some(CoordinatedHpa {
            hpa_name: h.name.clone(),
            resource: h.resource?.as_str().to_string(),
            target_before: h.target_before?,
            target_after: h.target_after?,
        })
    });
    let message = match &hpa {
        Some(c) => format!(
            "requests and HPA {} {} target {} % → {} % applied together",
            c.hpa_name, c.resource, c.target_before, c.target_after
        ),
        None => "requests applied".to_string(),
    };
    (
        RecommendationPhase::Applied,
        None,
        message,
        Some(AgentPlan {
            requests,
            limits,
            hpa,
        }),
    )
}

/// What kerf manages on the workload, whatever the phase: the auto-patch requests of the
/// containers in scope and the HPA target when coordinated, less what a VPA sets.
fn managed(
    ctx: &Ctx<'_>,
    containers: &[ContainerOutcome],
    hpa_out: Option<&HpaOutcome>,
) -> Managed {
    let input = ctx.input;
    let auto_set = RequestSet {
        cpu: ctx.auto(HpaResource::Cpu),
        memory: ctx.auto(HpaResource::Memory),
    };
    let hpa_resource = hpa_out.and_then(|h| h.resource);
    // A policy that is not applied (its strategy does not resolve) manages nothing: what kerf
    // took under it is released (docs/design/hpa-coordination.md#h13).
    let applies = input.strategy_unresolved.is_none();
    // What a VPA sets is not kerf's: the requests kerf took before the VPA came are released,
    // and so is a coordinated target over them (docs/hpa-coordination.md#vpa).
    let vpa_sets = |c: &str, r: HpaResource| {
        input
            .vpa
            .as_ref()
            .is_some_and(|v| v.controls(c, r.as_str()))
    };
    Managed {
        requests: containers
            .iter()
            .filter(|c| applies && c.in_scope)
            .map(|c| {
                let set = RequestSet {
                    cpu: auto_set.cpu && !vpa_sets(&c.name, HpaResource::Cpu),
                    memory: auto_set.memory && !vpa_sets(&c.name, HpaResource::Memory),
                };
                (c.name.clone(), set)
            })
            .filter(|(_, set)| set.any())
            .collect(),
        hpa_target: applies
            && input.policy.hpa.coordinate
            && hpa_resource.is_some_and(|r| {
                ctx.auto(r)
                    && !containers
                        .iter()
                        .any(|c| c.in_scope && vpa_sets(&c.name, r))
            }),
        hpa_resource,
    }
}

/// A duration for messages: `36h`, `90m`, `45s`.
pub(super) fn span(seconds: i64) -> String {
    match seconds {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 3600 => format!("{:.1}h", s as f64 / 3600.0),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn evaluate_hpa(
    ctx: &Ctx<'_>,
    h: &HpaInput,
    recommended: &mut [ResourceRequests],
    risk_flags: &mut Vec<String>,
    reasons: &mut Vec<String>,
) -> HpaOutcome {
    let name = h.hpa.metadata.name.clone().unwrap_or_default();
    let a = analyze_metrics(&h.hpa);
    let mut out = HpaOutcome {
        name,
        resource: None,
        target_before: None,
        target_after: None,
        skip_reason: None,
        blocked: false,
        reason: None,
        message: String::new(),
        coordinated: false,
    };
    if !a.coupled() {
        // Not coupled: requests do not move it (no risk flag, never blocked), but kerf says why
        // it does not coordinate it (docs/design/hpa-coordination.md#h1, #h9).
        out.skip_reason = a
            .coordinable()
            .err()
            .map(|_| SkipReason::UnsupportedMetrics);
        out.message = format!(
            "the HPA does not scale on CPU or memory utilization ({}): requests do not affect it",
            a.detail
        );
        return out;
    }
    risk_flags.push(RISK_HPA_COUPLED.to_string());
    let (resource, target) = match (
        a.supported.or(a.first_target),
        a.utilization_resources.first(),
    ) {
        (Some((r, t)), _) => (r, Some(t)),
        (None, Some(r)) => (*r, None),
        (None, None) => return out, // not coupled; handled above
    };
    out.resource = Some(resource);
    out.target_before = target;
    if !a.utilization_resources.iter().any(|r| ctx.auto(*r)) {
        out.message = format!(
            "the HPA scales on {} utilization, which is not in auto-patch: it does not hold the workload back",
            resource.as_str()
        );
        return out;
    }
    if !h.replica_history {
        reasons.push(format!(
            "no kube-state-metrics replica history for HPA {} ({}): max-replicas-reached is judged from its status.currentReplicas only",
            out.name,
            hpa::KSM_CURRENT_REPLICAS
        ));
    }
    let skip = coordination_skip(ctx.input, h, &a, resource);
    if !ctx.input.policy.hpa.coordinate {
        let also = skip
            .as_ref()
            .map(|(_, m)| format!("; also, {m}"))
            .unwrap_or_default();
        out.block(
            skip.map(|(s, _)| s),
            format!(
                "the HPA scales on {} utilization and spec.hpa.coordinate is off (the default){also}",
                resource.as_str()
            ),
        );
        return out;
    }
    if let Some((s, m)) = skip {
        out.block(Some(s), m);
        return out;
    }
    // A supported metric always has a positive target; stay total anyway.
    let Some(old) = target else {
        out.block(Some(SkipReason::UnsupportedMetrics), a.detail.clone());
        return out;
    };
    coordinate_requests(ctx, h, old, resource, recommended, &mut out);
    out
}

impl HpaOutcome {
    /// Blocked: kerf changes nothing on the workload, and says why.
    fn block(&mut self, skip: Option<SkipReason>, message: String) {
        self.blocked = true;
        self.skip_reason = skip;
        self.reason = Some(match skip {
            Some(SkipReason::OwnerManaged) => REASON_OWNER_MANAGED.to_string(),
            _ => REASON_HPA_COUPLED.to_string(),
        });
        self.message = message;
    }
}

/// Why a coupled HPA cannot be coordinated (docs/design/hpa-coordination.md#h9), in the order
/// the checks run: unsupported metrics, pod-level requests, max replicas reached, a missing
/// request.
fn coordination_skip(
    input: &WorkloadInput,
    h: &HpaInput,
    a: &hpa::MetricsAnalysis,
    resource: HpaResource,
) -> Option<(SkipReason, String)> {
    if let Some(owner) = &h.owner_managed {
        return Some((
            SkipReason::OwnerManaged,
            format!(
                "{owner} owns the workload's template and its HPA {}: kerf writes neither, so requests and target cannot change together; new pods get the requests at admission",
                h.hpa.metadata.name.as_deref().unwrap_or_default()
            ),
        ));
    }
    if a.supported.is_none() {
        return Some((
            SkipReason::UnsupportedMetrics,
            format!("the HPA's metrics are unsupported: {}", a.detail),
        ));
    }
    if h.pod_level_requests {
        return Some((
            SkipReason::PodLevelResources,
            "the pod template sets pod-level requests (spec.resources.requests): the HPA divides usage by them, not by the containers' requests, and kerf sizes containers only".to_string(),
        ));
    }
    if h.max_replicas_reached {
        return Some((
            SkipReason::MaxReplicasReached,
            "the HPA was at maxReplicas in the recommendation window".to_string(),
        ));
    }
    let missing: Vec<&str> = input
        .containers
        .iter()
        .filter(|c| get(&c.signals.current, resource).is_none_or(|v| v <= 0))
        .map(|c| c.signals.name.as_str())
        .collect();
    (!missing.is_empty()).then(|| {
        (
            SkipReason::MissingRequest,
            format!(
                "container(s) {} have no {} request",
                missing.join(", "),
                resource.as_str()
            ),
        )
    })
}

/// The requests the HPA counts, as the coordination math reads them: current, recommended,
/// whether kerf may adjust each and within which floor and ceiling.
fn counted_requests(
    ctx: &Ctx<'_>,
    resource: HpaResource,
    recommended: &[ResourceRequests],
) -> Vec<CountedRequest> {
    let (min, max) = ctx.limits(resource);
    ctx.input
        .containers
        .iter()
        .zip(&ctx.recs)
        .zip(recommended.iter())
        .map(|((c, rec), recd)| {
            // Every counted container has this request (missing-request was checked before).
            let current = get(&c.signals.current, resource).unwrap_or_default();
            let value = get(recd, resource);
            let adjustable = c.in_scope && value.is_some();
            let recommended = value.unwrap_or(current);
            let mnd = adjustable && rec.is_some_and(|r| must_not_decrease(&r, resource));
            CountedRequest {
                name: c.signals.name.clone(),
                current,
                recommended,
                adjustable,
                floor: if mnd {
                    recommended
                } else {
                    min.min(recommended)
                },
                must_not_decrease: mnd,
                ceiling: max,
            }
        })
        .collect()
}

/// Rounding the target to a whole percent moves the HPA's usage ratio a little; an HPA whose
/// tolerance is smaller would change its replicas at unchanged usage
/// (docs/hpa-coordination.md#tolerance): the requests that round exactly, or why there are
/// none.
fn within_tolerance(
    h: &HpaInput,
    old: i32,
    counted: &[CountedRequest],
    (target, requests): (i32, Vec<i64>),
    unit: i64,
) -> Result<(i32, Vec<i64>), String> {
    let before: i64 = counted.iter().map(|c| c.current).sum();
    let after: i64 = requests.iter().sum();
    let Some((factor, tolerance, side)) =
        hpa::rounding_beyond_tolerance(old, before, target, after, hpa::tolerances(&h.hpa))
    else {
        return Ok((target, requests));
    };
    let adjusted: Vec<CountedRequest> = counted
        .iter()
        .zip(&requests)
        .map(|(c, &r)| CountedRequest {
            recommended: r,
            ..c.clone()
        })
        .collect();
    hpa::exact_requests(old, target, &adjusted, unit).ok_or_else(|| {
        format!(
            "rounding the new HPA target to {target} % changes the HPA's usage ratio by {:.2} % at unchanged usage, beyond its {side} tolerance of {:.1} %, and no request up to a tenth above the recommendation rounds exactly",
            (factor - 1.0) * 100.0,
            tolerance * 100.0
        )
    })
}

/// The new target and the requests that reach it (docs/design/hpa-coordination.md#h3–#h6),
/// set on `recommended`; blocked when the target leaves the policy's bounds or the tolerance.
fn coordinate_requests(
    ctx: &Ctx<'_>,
    h: &HpaInput,
    old: i32,
    resource: HpaResource,
    recommended: &mut [ResourceRequests],
    out: &mut HpaOutcome,
) {
    let counted = counted_requests(ctx, resource, recommended);
    let unit = match resource {
        HpaResource::Cpu => 1,
        HpaResource::Memory => MIB,
    };
    let (target, requests) = match hpa::coordinate(old, &counted, unit) {
        Coordination::Ok {
            target, requests, ..
        } => match within_tolerance(h, old, &counted, (target, requests), unit) {
            Ok(exact) => exact,
            Err(why) => {
                out.target_after = Some(target);
                out.block(Some(SkipReason::TargetOutOfBounds), why);
                return;
            }
        },
        Coordination::Blocked { target, why } => {
            out.target_after = Some(target);
            out.block(Some(SkipReason::TargetOutOfBounds), why);
            return;
        }
    };
    for ((r, c), v) in recommended.iter_mut().zip(&counted).zip(requests) {
        if c.adjustable {
            set(r, resource, Some(v));
        }
    }
    out.target_after = Some(target);
    let bounds = ctx.input.policy.hpa.target_bounds.as_ref();
    if let Some(b) = bounds
        .filter(|b| target != old && !(b.min_utilization..=b.max_utilization).contains(&target))
    {
        out.block(
            Some(SkipReason::TargetOutOfBounds),
            format!(
                "the new HPA target {target} % would leave the policy's bounds {}–{} %",
                b.min_utilization, b.max_utilization
            ),
        );
    } else {
        out.coordinated = true;
        out.message = format!("HPA {} target {old} % → {target} %", resource.as_str());
    }
}

/// The VPA on the workload and the `container cpu|memory` requests it sets that kerf would
/// apply (in scope, in auto-patch); `None` when there are none.
fn vpa_conflict<'a>(
    input: &'a WorkloadInput,
    containers: &[ContainerOutcome],
    auto: &[HpaResource],
) -> Option<(&'a crate::vpa::Vpa, Vec<String>)> {
    let vpa = input.vpa.as_ref()?;
    let controlled: Vec<String> = containers
        .iter()
        .filter(|c| c.in_scope)
        .flat_map(|c| {
            auto.iter()
                .filter(|r| vpa.controls(&c.name, r.as_str()))
                .map(|r| format!("{} {}", c.name, r.as_str()))
        })
        .collect();
    (!controlled.is_empty()).then_some((vpa, controlled))
}

pub fn savings(containers: &[ContainerOutcome], replicas: i32) -> Savings {
    fn total<F: Fn(&ContainerOutcome) -> (Option<f64>, Option<f64>)>(
        cs: &[ContainerOutcome],
        f: F,
    ) -> Option<f64> {
        let diffs: Vec<f64> = cs
            .iter()
            .filter(|c| c.in_scope)
            .filter_map(|c| match f(c) {
                (Some(cur), Some(rec)) => Some(cur - rec),
                _ => None,
            })
            .collect();
        (!diffs.is_empty()).then(|| diffs.iter().sum())
    }
    let cpu = total(containers, |c| {
        (
            c.current.cpu_millis.map(|v| v as f64 / 1000.0),
            c.recommended.cpu_millis.map(|v| v as f64 / 1000.0),
        )
    });
    let memory = total(containers, |c| {
        (
            c.current.memory_bytes.map(|v| v as f64),
            c.recommended.memory_bytes.map(|v| v as f64),
        )
    });
    let gpu = total(containers, |c| (c.gpu_current, c.gpu_recommended));
    let times = |v: Option<f64>| v.map(|v| v * f64::from(replicas));
    Savings {
        cpu_cores: cpu,
        memory_bytes: memory,
        gpu_units: gpu,
        replicas: Some(replicas),
        total_cpu_cores: times(cpu),
        total_memory_bytes: times(memory),
        total_gpu_units: times(gpu),
    }
}

/// Each container's outcome: current and recommended requests and limits, usage, floors.
fn container_outcomes(ctx: &Ctx<'_>, recommended: &[ResourceRequests]) -> Vec<ContainerOutcome> {
    ctx.input
        .containers
        .iter()
        .zip(&ctx.recs)
        .zip(recommended)
        .map(|((c, rec), recd)| ContainerOutcome {
            name: c.signals.name.clone(),
            in_scope: c.in_scope,
            current: c.signals.current.clone(),
            recommended: recd.clone(),
            current_limits: c.limits.clone(),
            recommended_limits: crate::limits::bounded_resources(
                ctx.params.controlled_values(),
                &c.signals.current,
                &c.limits,
                recd,
                ctx.input.limit_range.as_ref(),
            )
            .1,
            cpu_source: rec.map_or(Source::NoData, |r| r.cpu.source),
            memory_source: rec.map_or(Source::NoData, |r| r.memory.source),
            cpu_usage: c.signals.cpu,
            memory_usage: c.signals.memory,
            throttled: c.signals.throttled,
            oom_killed: c.signals.oom_killed,
            gpu_current: c.gpu_current,
            gpu_recommended: c.gpu_recommended,
        })
        .collect()
}

/// The HPA bounds may have raised a request past a `RequestsOnly` limit: the limit wins, and
/// the target that needed more cannot be coordinated.
fn capped_after_hpa(
    input: &WorkloadInput,
    params: &PolicyParams,
    recommended: &mut [ResourceRequests],
    hpa: Option<&mut HpaOutcome>,
) {
    let capped = requests_only_caps(input, params, recommended);
    let in_pod_range = !keep_within_pod_limit_range(input, params, recommended).is_empty();
    let kept = in_pod_range | !keep_qos_class(input, params, recommended).is_empty();
    if (capped || kept)
        && let Some(h) = hpa.filter(|h| h.coordinated)
    {
        h.coordinated = false;
        h.blocked = true;
        h.skip_reason = Some(SkipReason::TargetOutOfBounds);
        h.reason = Some(REASON_HPA_COUPLED.to_string());
        h.message = "keeping the HPA target within its bounds needs a request outside a \
                     RequestsOnly limit or the namespace's LimitRange"
            .to_string();
    }
}

/// The namespace's LimitRange `type: Pod` bounds over the pod's regular containers
/// ([`crate::limits::within_pod_limit_range`]): kerf's requests of a resource scaled
/// together to meet them, and a reason naming the LimitRange.
fn keep_within_pod_limit_range(
    input: &WorkloadInput,
    params: &PolicyParams,
    recommended: &mut [ResourceRequests],
) -> Vec<String> {
    use crate::limits::{PodResource, within_pod_limit_range};
    use kerf_api::ControlledValues;
    let Some((name, pod)) = input
        .limit_range
        .as_ref()
        .and_then(|lr| Some((&lr.name, lr.pod.as_ref()?)))
    else {
        return Vec::new();
    };
    let n = input.regular_containers.min(input.containers.len());
    let written: Vec<_> = input.containers[..n]
        .iter()
        .zip(recommended.iter())
        .map(|(c, r)| {
            let (req, lim) = crate::limits::bounded_resources(
                params.controlled_values(),
                &c.signals.current,
                &c.limits,
                r,
                input.limit_range.as_ref(),
            );
            (req, lim, r.clone())
        })
        .collect();
    let (cpu_c, memory_c) = params.controlled_values();
    let mut reasons = Vec::new();
    let get = |r: &ResourceRequests, cpu: bool| if cpu { r.cpu_millis } else { r.memory_bytes };
    for cpu in [true, false] {
        let (resource, controlled, ratio) = match cpu {
            true => ("cpu", cpu_c, pod.max_ratio.0),
            false => ("memory", memory_c, pod.max_ratio.1),
        };
        let fmt: fn(i64) -> String = match cpu {
            true => crate::quantity::format_cpu_millis,
            false => crate::quantity::format_memory_bytes,
        };
        // A container without a request: LimitRanger sums none, kerf leaves the bound alone.
        let Some(containers) = written
            .iter()
            .map(|(req, lim, rec)| Some((get(req, cpu)?, get(lim, cpu), get(rec, cpu).is_some())))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let p = PodResource {
            containers,
            follow: controlled == ControlledValues::RequestsAndLimits,
        };
        let kept = within_pod_limit_range(&p, (get(&pod.min, cpu), get(&pod.max, cpu), ratio));
        let before: i64 = p.containers.iter().map(|c| c.0).sum();
        if kept.iter().sum::<i64>() == before {
            continue;
        }
        for (r, v) in recommended.iter_mut().zip(&kept) {
            match cpu {
                true if r.cpu_millis.is_some() => r.cpu_millis = Some(*v),
                false if r.memory_bytes.is_some() => r.memory_bytes = Some(*v),
                _ => {}
            }
        }
        reasons.push(format!(
            "{resource} requests kept within LimitRange {name} (type Pod): {} over the pod (without it: {})",
            fmt(kept.iter().sum()),
            fmt(before)
        ));
    }
    reasons
}

/// The pod's QoS class kept ([`crate::limits::qos_class_kept`]): a resource whose write
/// would change it keeps its current request, and a reason says so.
fn keep_qos_class(
    input: &WorkloadInput,
    params: &PolicyParams,
    recommended: &mut [ResourceRequests],
) -> Vec<String> {
    let current: Vec<_> = input
        .containers
        .iter()
        .map(|c| (c.signals.current.clone(), c.limits.clone()))
        .collect();
    let mut written: Vec<_> = input
        .containers
        .iter()
        .zip(recommended.iter())
        .map(|(c, r)| {
            crate::limits::bounded_resources(
                params.controlled_values(),
                &c.signals.current,
                &c.limits,
                r,
                input.limit_range.as_ref(),
            )
        })
        .collect();
    let class = crate::limits::qos_class(&current);
    let kept = crate::limits::qos_class_kept(&current, &mut written);
    kept.into_iter()
        .filter_map(|(i, resource)| {
            let (c, r) = (&input.containers[i], &mut recommended[i]);
            let value = match resource {
                "cpu" => {
                    r.cpu_millis = r.cpu_millis.and(c.signals.current.cpu_millis);
                    crate::quantity::format_cpu_millis(c.signals.current.cpu_millis?)
                }
                _ => {
                    r.memory_bytes = r.memory_bytes.and(c.signals.current.memory_bytes);
                    crate::quantity::format_memory_bytes(c.signals.current.memory_bytes?)
                }
            };
            Some(format!(
                "{}: {resource} request kept at {value}: the pod stays {class} (a write never \
                 changes a pod's QoS class)",
                c.signals.name
            ))
        })
        .collect()
}

/// What the namespace's LimitRange changed of the recommended requests (docs/policies.md#limits),
/// naming it: a pod outside it would be refused at creation.
fn limit_range_reasons(
    input: &WorkloadInput,
    params: &PolicyParams,
    recommended: &[ResourceRequests],
) -> Vec<String> {
    let Some(lr) = input.limit_range.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (c, rec) in input.containers.iter().zip(recommended) {
        let (current, limits) = (&c.signals.current, &c.limits);
        let controlled = params.controlled_values();
        let free = crate::limits::container_resources(controlled, current, limits, rec).0;
        let kept = crate::limits::bounded_resources(controlled, current, limits, rec, Some(lr)).0;
        let pairs = [
            (
                "cpu",
                free.cpu_millis,
                kept.cpu_millis,
                crate::quantity::format_cpu_millis as fn(i64) -> String,
            ),
            (
                "memory",
                free.memory_bytes,
                kept.memory_bytes,
                crate::quantity::format_memory_bytes,
            ),
        ];
        for (r, free, kept, fmt) in pairs {
            if let (Some(f), Some(k)) = (free, kept)
                && f != k
            {
                out.push(format!(
                    "{}: {r} request kept within LimitRange {}: {} (without it: {})",
                    c.signals.name,
                    lr.name,
                    fmt(k),
                    fmt(f)
                ));
            }
        }
    }
    out
}

/// An upsize the namespace's ResourceQuota cannot take (docs/policies.md#limits): the added
/// requests and limits over the workload's replicas, against each quota's `hard` less `used`.
fn held_by_quota(input: &WorkloadInput, containers: &[ContainerOutcome]) -> Option<String> {
    if input.quotas.is_empty() {
        return None;
    }
    let replicas = i64::from(input.replicas.max(1));
    let added = |now: Option<i64>, then: Option<i64>| match (now, then) {
        (Some(n), t) => Some((n - t.unwrap_or(0)).max(0) * replicas),
        _ => None,
    };
    let sum = |f: &dyn Fn(&ContainerOutcome) -> Option<i64>| {
        containers
            .iter()
            .filter(|c| c.in_scope)
            .filter_map(f)
            .reduce(|a, b| a + b)
    };
    let requests = ResourceRequests {
        cpu_millis: sum(&|c| added(c.recommended.cpu_millis, c.current.cpu_millis)),
        memory_bytes: sum(&|c| added(c.recommended.memory_bytes, c.current.memory_bytes)),
    };
    let limits = ResourceRequests {
        cpu_millis: sum(&|c| added(c.recommended_limits.cpu_millis, c.current_limits.cpu_millis)),
        memory_bytes: sum(&|c| {
            added(
                c.recommended_limits.memory_bytes,
                c.current_limits.memory_bytes,
            )
        }),
    };
    crate::limits::quota_exceeded(&input.quotas, &requests, &limits)
}

/// `RequestsOnly` (docs/policies.md#limits): a recommended request never goes above the
/// container's limit; capped before HPA coordination, so the target is computed from what is
/// written.
fn requests_only_caps(
    input: &WorkloadInput,
    params: &PolicyParams,
    recommended: &mut [ResourceRequests],
) -> bool {
    let before = recommended.to_vec();
    for (c, r) in input.containers.iter().zip(recommended.iter_mut()) {
        let (bounded, _) = crate::limits::bounded_resources(
            params.controlled_values(),
            &c.signals.current,
            &c.limits,
            r,
            input.limit_range.as_ref(),
        );
        r.cpu_millis = r.cpu_millis.and(bounded.cpu_millis);
        r.memory_bytes = r.memory_bytes.and(bounded.memory_bytes);
    }
    before != recommended
}

#[cfg(test)]
mod tests;
