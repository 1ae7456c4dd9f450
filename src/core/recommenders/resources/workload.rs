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
//! - **previousHPATarget** is the HPA target before kerf's *first* coordinated change; later changes
//!   keep it, so release restores the user's own target together with the recorded original
//!   requests (the two belong together: restoring one without the other would change scaling).
//! - **Original requests** are recorded per container for the resources kerf applies, the first time
//!   it applies them (`originalRequests`); a resource that had no request at all (nor a limit) is
//!   recorded as created (`createdRequests`), so a release removes kerf's value there instead of
//!   restoring one.
//! - **Release is per field** (docs/design/hpa-coordination.md#h13): a request kerf took that the
//!   outcome no longer [`Managed`]s — its resource left auto-patch, its container left the scope —
//!   and the HPA target once coordination is off, are given back ([`plan_release`]); the HPA
//!   target goes together with the requests of its resource.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::{
    AppliedChange, ContainerRecommendation, HpaRecommendation, RecommendationPhase,
    RecommendationStatus, ResourceMode, ResourceValues, RightsizingPolicySpec,
    RightsizingRecommendationSpec, Savings, WorkloadRef,
};
use crate::core::hpa::{
    self, Coordination, CountedRequest, HpaResource, REASON_HPA_COUPLED, RISK_HPA_COUPLED,
    SkipReason, analyze_metrics,
};
use crate::core::model::{
    ContainerRequests, CoordinatedHpa, PolicyId, RequestSet, ResourceRequests, WorkloadKey,
    format_gpu,
};
use crate::core::quantity::{self, MIB};
use crate::core::recommenders::gpu::WorkloadResult;
use crate::core::recommenders::resources::container::{
    ContainerRec, ContainerSignals, PolicyError, PolicyParams, Source, recommend_container,
};
use crate::core::snapshot::REASON_STRATEGY_UNRESOLVED;

pub const REASON_NO_USAGE_DATA: &str = "NoUsageData";
/// The pod template requests a resource in auto-patch at pod level (docs/hpa-coordination.md#pod-level-resources).
pub const REASON_POD_LEVEL_RESOURCES: &str = "PodLevelResources";
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
    /// A VPA on the workload that applies its recommendations ([`crate::core::vpa`]).
    pub vpa: Option<crate::core::vpa::Vpa>,
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

/// One workload's CPU/memory result: its outcome under the policy that won it.
#[derive(Clone, Debug)]
pub struct RsResult {
    pub key: WorkloadKey,
    pub policy: PolicyId,
    /// Err = the policy cannot be used (field-named message).
    pub outcome: Result<RightsizingOutcome, String>,
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
}

fn get(r: &ResourceRequests, res: HpaResource) -> Option<i64> {
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
    let hpa_out = input
        .hpa
        .as_ref()
        .map(|h| evaluate_hpa(&ctx, h, &mut recommended, &mut risk_flags, &mut reasons));

    let containers: Vec<ContainerOutcome> = input
        .containers
        .iter()
        .zip(&ctx.recs)
        .zip(&recommended)
        .map(|((c, rec), recd)| ContainerOutcome {
            name: c.signals.name.clone(),
            in_scope: c.in_scope,
            current: c.signals.current.clone(),
            recommended: recd.clone(),
            cpu_source: rec.map_or(Source::NoData, |r| r.cpu.source),
            memory_source: rec.map_or(Source::NoData, |r| r.memory.source),
            cpu_usage: c.signals.cpu,
            memory_usage: c.signals.memory,
            throttled: c.signals.throttled,
            oom_killed: c.signals.oom_killed,
            gpu_current: c.gpu_current,
            gpu_recommended: c.gpu_recommended,
        })
        .collect();
    let savings = savings(&containers, input.replicas);

    let auto: Vec<HpaResource> = [HpaResource::Cpu, HpaResource::Memory]
        .into_iter()
        .filter(|r| ctx.auto(*r))
        .collect();
    let (phase, reason, message, apply) = if let Some(why) = &input.strategy_unresolved {
        (
            RecommendationPhase::AuditOnly,
            Some(REASON_STRATEGY_UNRESOLVED.to_string()),
            format!("{why}: recommendation only"),
            None,
        )
    } else if let Some(pod_level) = Some(
        auto.iter()
            .filter(|r| input.pod_level_resources.contains(r))
            .map(|r| r.as_str())
            .collect::<Vec<_>>(),
    )
    .filter(|p| !p.is_empty())
    {
        (
            RecommendationPhase::Blocked,
            Some(REASON_POD_LEVEL_RESOURCES.to_string()),
            format!(
                "the pod template requests {} at pod level (spec.resources.requests): the scheduler reserves that request, not the containers', and kerf sizes containers only: recommendation only",
                pod_level.join(" and ")
            ),
            None,
        )
    } else if let Some((vpa, controlled)) = vpa_conflict(input, &containers, &auto) {
        (
            RecommendationPhase::Blocked,
            Some(crate::core::vpa::REASON_VPA_CONFLICT.to_string()),
            format!(
                "VerticalPodAutoscaler {} (updateMode {}) sets {} at admission, as kerf would: kerf applies nothing while it does; set its updateMode to Off (recommendations only), or mode Off in its containerPolicies for these containers",
                vpa.id(),
                vpa.update_mode.as_deref().unwrap_or("default"),
                controlled.join(", ")
            ),
            None,
        )
    } else if let Some(h) = hpa_out.as_ref().filter(|h| h.blocked) {
        (
            RecommendationPhase::Blocked,
            Some(REASON_HPA_COUPLED.to_string()),
            h.message.clone(),
            None,
        )
    } else if auto.is_empty() || !containers.iter().any(|c| c.in_scope) {
        (
            RecommendationPhase::AuditOnly,
            None,
            "no resource is in auto-patch: recommendation only".to_string(),
            None,
        )
    } else {
        let mut requests = ContainerRequests::new();
        for c in containers.iter().filter(|c| c.in_scope) {
            let mut r = ResourceRequests::default();
            for res in &auto {
                set(&mut r, *res, get(&c.recommended, *res));
            }
            if r.cpu_millis.is_some() || r.memory_bytes.is_some() {
                requests.insert(c.name.clone(), r);
            }
        }
        if requests.is_empty() {
            (
                RecommendationPhase::Pending,
                Some(REASON_NO_USAGE_DATA.to_string()),
                "no usage sample in the window yet".to_string(),
                None,
            )
        } else if !input.history.enough_to_apply() {
            (
                RecommendationPhase::Pending,
                Some(REASON_INSUFFICIENT_HISTORY.to_string()),
                format!(
                    "only {} of usage history: auto-patch waits for {}",
                    span(input.history.seconds.unwrap_or(0)),
                    span(MIN_HISTORY_SECONDS.min(input.history.window_seconds))
                ),
                None,
            )
        } else {
            let hpa = hpa_out.as_ref().filter(|h| h.coordinated).and_then(|h| {
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
                Some(AgentPlan { requests, hpa }),
            )
        }
    };

    let auto_set = RequestSet {
        cpu: ctx.auto(HpaResource::Cpu),
        memory: ctx.auto(HpaResource::Memory),
    };
    let hpa_resource = hpa_out.as_ref().and_then(|h| h.resource);
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
    let managed = Managed {
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
    };
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
    })
}

/// A duration for messages: `36h`, `90m`, `45s`.
fn span(seconds: i64) -> String {
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
    let input = ctx.input;
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
    let held: Vec<HpaResource> = a
        .utilization_resources
        .iter()
        .copied()
        .filter(|r| ctx.auto(*r))
        .collect();
    if held.is_empty() {
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
    let block = |out: &mut HpaOutcome, skip: Option<SkipReason>, message: String| {
        out.blocked = true;
        out.skip_reason = skip;
        out.reason = Some(REASON_HPA_COUPLED.to_string());
        out.message = message;
    };
    let missing: Vec<&str> = input
        .containers
        .iter()
        .filter(|c| get(&c.signals.current, resource).is_none_or(|v| v <= 0))
        .map(|c| c.signals.name.as_str())
        .collect();
    let skip = if a.supported.is_none() {
        Some((
            SkipReason::UnsupportedMetrics,
            format!("the HPA's metrics are unsupported: {}", a.detail),
        ))
    } else if h.pod_level_requests {
        Some((
            SkipReason::PodLevelResources,
            "the pod template sets pod-level requests (spec.resources.requests): the HPA divides usage by them, not by the containers' requests, and kerf sizes containers only".to_string(),
        ))
    } else if h.max_replicas_reached {
        Some((
            SkipReason::MaxReplicasReached,
            "the HPA was at maxReplicas in the recommendation window".to_string(),
        ))
    } else if !missing.is_empty() {
        Some((
            SkipReason::MissingRequest,
            format!(
                "container(s) {} have no {} request",
                missing.join(", "),
                resource.as_str()
            ),
        ))
    } else {
        None
    };
    if !input.policy.hpa.coordinate {
        let also = skip
            .as_ref()
            .map(|(_, m)| format!("; also, {m}"))
            .unwrap_or_default();
        block(
            &mut out,
            skip.map(|(s, _)| s),
            format!(
                "the HPA scales on {} utilization and spec.hpa.coordinate is off (the default){also}",
                resource.as_str()
            ),
        );
        return out;
    }
    if let Some((s, m)) = skip {
        block(&mut out, Some(s), m);
        return out;
    }
    // A supported metric always has a positive target; stay total anyway.
    let Some(old) = target else {
        block(
            &mut out,
            Some(SkipReason::UnsupportedMetrics),
            a.detail.clone(),
        );
        return out;
    };
    let (min, max) = ctx.limits(resource);
    let counted: Vec<CountedRequest> = input
        .containers
        .iter()
        .zip(&ctx.recs)
        .zip(recommended.iter())
        .map(|((c, rec), recd)| {
            // Every counted container has this request (missing-request was checked above).
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
        .collect();
    let unit = match resource {
        HpaResource::Cpu => 1,
        HpaResource::Memory => MIB,
    };
    match hpa::coordinate(old, &counted, unit) {
        Coordination::Ok {
            target, requests, ..
        } => {
            // Rounding the target to a whole percent moves the HPA's usage ratio a little; an
            // HPA whose tolerance is smaller would change its replicas at unchanged usage
            // (docs/hpa-coordination.md#tolerance): take requests that round exactly, or block.
            let before: i64 = counted.iter().map(|c| c.current).sum();
            let after: i64 = requests.iter().sum();
            let (target, requests) = match hpa::rounding_beyond_tolerance(
                old,
                before,
                target,
                after,
                hpa::tolerances(&h.hpa),
            ) {
                None => (target, requests),
                Some((factor, tolerance, side)) => {
                    let adjusted: Vec<CountedRequest> = counted
                        .iter()
                        .zip(&requests)
                        .map(|(c, &r)| CountedRequest {
                            recommended: r,
                            ..c.clone()
                        })
                        .collect();
                    match hpa::exact_requests(old, target, &adjusted, unit) {
                        Some(exact) => exact,
                        None => {
                            out.target_after = Some(target);
                            block(
                                &mut out,
                                Some(SkipReason::TargetOutOfBounds),
                                format!(
                                    "rounding the new HPA target to {target} % changes the HPA's usage ratio by {:.2} % at unchanged usage, beyond its {side} tolerance of {:.1} %, and no request up to a tenth above the recommendation rounds exactly",
                                    (factor - 1.0) * 100.0,
                                    tolerance * 100.0
                                ),
                            );
                            return out;
                        }
                    }
                }
            };
            for ((r, c), v) in recommended.iter_mut().zip(&counted).zip(requests) {
                if c.adjustable {
                    set(r, resource, Some(v));
                }
            }
            out.target_after = Some(target);
            let bounds = input.policy.hpa.target_bounds.as_ref();
            if let Some(b) = bounds.filter(|b| {
                target != old && !(b.min_utilization..=b.max_utilization).contains(&target)
            }) {
                block(
                    &mut out,
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
        Coordination::Blocked { target, why } => {
            out.target_after = Some(target);
            block(&mut out, Some(SkipReason::TargetOutOfBounds), why);
        }
    }
    out
}

/// The VPA on the workload and the `container cpu|memory` requests it sets that kerf would
/// apply (in scope, in auto-patch); `None` when there are none.
fn vpa_conflict<'a>(
    input: &'a WorkloadInput,
    containers: &[ContainerOutcome],
    auto: &[HpaResource],
) -> Option<(&'a crate::core::vpa::Vpa, Vec<String>)> {
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

fn savings(containers: &[ContainerOutcome], replicas: i32) -> Savings {
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

fn values(r: &ResourceRequests, gpu: Option<f64>) -> ResourceValues {
    ResourceValues {
        cpu: r.cpu_millis.map(quantity::cpu_quantity),
        memory: r.memory_bytes.map(quantity::memory_quantity),
        gpu: gpu.map(format_gpu),
    }
}

/// The `RightsizingRecommendation` spec for an outcome (rightsized containers only).
/// A list kept in a recommendation for as long as it lives: without growth slack (a filtered
/// collect grows to four entries; ≈12 MB over 25,000 one-container recommendations).
fn held<T>(mut v: Vec<T>) -> Vec<T> {
    v.shrink_to_fit();
    v
}

pub fn recommendation_spec(
    outcome: &RightsizingOutcome,
    workload: &WorkloadKey,
    policy: Option<&PolicyId>,
) -> RightsizingRecommendationSpec {
    RightsizingRecommendationSpec {
        workload: WorkloadRef {
            kind: workload.kind.as_str().to_string(),
            name: workload.name.to_string(),
        },
        policies: policy.map(|p| vec![p.to_string()]).unwrap_or_default(),
        containers: held(
            outcome
                .containers
                .iter()
                .filter(|c| c.in_scope)
                .map(|c| ContainerRecommendation {
                    name: c.name.clone(),
                    current: values(&c.current, c.gpu_current),
                    recommended: values(&c.recommended, c.gpu_recommended),
                })
                .collect(),
        ),
        driving_metric: None,
        hpa: outcome.hpa.as_ref().map(|h| {
            Box::new(HpaRecommendation {
                name: h.name.clone(),
                resource: h.resource.map(|r| r.as_str().to_string()),
                target_before: h.target_before,
                target_after: h.target_after,
                skip_reason: h.skip_reason.map(|s| s.as_str().to_string()),
            })
        }),
        risk_flags: outcome.risk_flags.clone(),
        savings: outcome.savings.clone(),
    }
}

/// The GPU side of a workload's `RightsizingRecommendation` (docs/design/gpu-engine.md#g10): the
/// driving GPU metric of the recommendation in force and the GPU policies, added to `spec`.
pub fn add_gpu(spec: &mut RightsizingRecommendationSpec, gpu: &WorkloadResult) {
    spec.driving_metric = gpu
        .recommendation
        .as_ref()
        .and_then(|r| r.driving_metric)
        .map(|d| d.as_str().to_string());
    for p in &gpu.policies {
        let p = p.to_string();
        if !spec.policies.contains(&p) {
            spec.policies.push(p);
        }
    }
    // Held by the recommendation: no growth slack (a push grows the list to four).
    spec.policies.shrink_to_fit();
}

/// The `RightsizingRecommendation` spec of a workload only GPU reactive policies cover: per
/// container its current and recommended GPUs, the driving GPU metric, the GPU policies and the
/// GPU savings (docs/design/gpu-engine.md#g10).
pub fn gpu_recommendation_spec(
    gpu: &WorkloadResult,
    workload: &WorkloadKey,
    replicas: i32,
) -> RightsizingRecommendationSpec {
    let containers: Vec<ContainerOutcome> = gpu
        .containers
        .iter()
        .filter(|(_, o)| o.current.is_some() || o.recommended.is_some())
        .map(|(name, o)| ContainerOutcome {
            name: name.clone(),
            in_scope: true,
            current: ResourceRequests::default(),
            recommended: ResourceRequests::default(),
            cpu_source: Source::NoData,
            memory_source: Source::NoData,
            cpu_usage: None,
            memory_usage: None,
            throttled: false,
            oom_killed: false,
            gpu_current: o.current,
            gpu_recommended: o.recommended,
        })
        .collect();
    let mut spec = RightsizingRecommendationSpec {
        workload: WorkloadRef {
            kind: workload.kind.as_str().to_string(),
            name: workload.name.to_string(),
        },
        containers: containers
            .iter()
            .map(|c| ContainerRecommendation {
                name: c.name.clone(),
                current: values(&c.current, c.gpu_current),
                recommended: values(&c.recommended, c.gpu_recommended),
            })
            .collect(),
        savings: savings(&containers, replicas),
        ..Default::default()
    };
    add_gpu(&mut spec, gpu);
    spec
}

/// Reason of a GPU-only recommendation without a GPU recommendation in force.
pub const REASON_NO_RECOMMENDATION: &str = "NoRecommendation";

/// The status of a workload only GPU reactive policies cover: `applied` while a GPU
/// recommendation is in force (admission applies it), `pending` (reason `NoRecommendation`)
/// while there is none; what must survive is carried over from `previous` (see
/// [`recommendation_status`]).
pub fn gpu_recommendation_status(
    gpu: &WorkloadResult,
    previous: Option<&RecommendationStatus>,
) -> RecommendationStatus {
    let (phase, reason) = match &gpu.recommendation {
        Some(_) => (RecommendationPhase::Applied, None),
        None => (
            RecommendationPhase::Pending,
            Some(REASON_NO_RECOMMENDATION.to_string()),
        ),
    };
    RecommendationStatus {
        phase,
        reason,
        previous_hpa_target: previous.and_then(|p| p.previous_hpa_target),
        original_requests: previous
            .map(|p| p.original_requests.clone())
            .unwrap_or_default(),
        last_applied_time: gpu
            .recommendation
            .as_ref()
            .and_then(|r| r.updated_at)
            .map(crate::core::model::rfc3339_secs)
            .or_else(|| previous.and_then(|p| p.last_applied_time.clone())),
        created_requests: previous
            .map(|p| p.created_requests.clone())
            .unwrap_or_default(),
        applied: None,
        conditions: previous.map(|p| p.conditions.clone()).unwrap_or_default(),
        conflict: previous.and_then(|p| p.conflict.clone()),
    }
}

/// The status for an outcome, carrying over what must survive from `previous`: the original
/// requests, `previousHPATarget` (see module docs), last applied time and conditions (the IO
/// edge owns those two).
pub fn recommendation_status(
    outcome: &RightsizingOutcome,
    previous: Option<&RecommendationStatus>,
) -> RecommendationStatus {
    let mut status = RecommendationStatus {
        phase: outcome.phase,
        reason: outcome.reason.clone(),
        previous_hpa_target: previous.and_then(|p| p.previous_hpa_target),
        original_requests: previous
            .map(|p| p.original_requests.clone())
            .unwrap_or_default(),
        created_requests: previous
            .map(|p| p.created_requests.clone())
            .unwrap_or_default(),
        last_applied_time: previous.and_then(|p| p.last_applied_time.clone()),
        applied: previous.and_then(|p| p.applied.clone()),
        conditions: previous.map(|p| p.conditions.clone()).unwrap_or_default(),
        conflict: previous.and_then(|p| p.conflict.clone()),
    };
    if let Some(plan) = &outcome.apply {
        if let Some(h) = &plan.hpa {
            status.previous_hpa_target.get_or_insert(h.target_before);
        }
        for (name, applied) in &plan.requests {
            let Some(c) = outcome.containers.iter().find(|c| &c.name == name) else {
                continue;
            };
            let mut created = status
                .created_requests
                .get(name)
                .map(|n| RequestSet::from_names(n))
                .unwrap_or_default();
            let entry = status.original_requests.entry(name.clone()).or_default();
            if applied.cpu_millis.is_some() && entry.cpu.is_none() && !created.cpu {
                entry.cpu = c.current.cpu_millis.map(quantity::cpu_quantity);
                created.cpu = entry.cpu.is_none();
            }
            if applied.memory_bytes.is_some() && entry.memory.is_none() && !created.memory {
                entry.memory = c.current.memory_bytes.map(quantity::memory_quantity);
                created.memory = entry.memory.is_none();
            }
            if created.any() {
                status
                    .created_requests
                    .insert(name.clone(), created.names());
            }
        }
        status
            .original_requests
            .retain(|_, v| v.cpu.is_some() || v.memory.is_some());
    }
    status
}

/// `status` with what kerf took left as `previous` recorded it: nothing is taken in a cycle
/// that applies nothing (readOnly, a rollback held, metrics unavailable).
pub fn keep_taken(status: &mut RecommendationStatus, previous: Option<&RecommendationStatus>) {
    status.previous_hpa_target = previous.and_then(|p| p.previous_hpa_target);
    status.original_requests = previous
        .map(|p| p.original_requests.clone())
        .unwrap_or_default();
    status.created_requests = previous
        .map(|p| p.created_requests.clone())
        .unwrap_or_default();
}

/// The change kerf applies, as the RightsizingRecommendation records it (`status.applied`).
pub fn applied_change(requests: &ContainerRequests, hpa: Option<&CoordinatedHpa>) -> AppliedChange {
    AppliedChange {
        requests: requests
            .iter()
            .map(|(c, r)| {
                let values = ResourceValues {
                    cpu: r.cpu_millis.map(quantity::cpu_quantity),
                    memory: r.memory_bytes.map(quantity::memory_quantity),
                    gpu: None,
                };
                (c.clone(), values)
            })
            .collect(),
        hpa: hpa.map(|h| {
            Box::new(HpaRecommendation {
                name: h.hpa_name.clone(),
                resource: Some(h.resource.clone()),
                target_before: Some(h.target_before),
                target_after: Some(h.target_after),
                skip_reason: None,
            })
        }),
    }
}

/// [`applied_change`] read back: the requests and the HPA target the webhook serves. A value
/// that does not parse is left out (the webhook then leaves that field of the pod alone).
pub fn served_change(applied: &AppliedChange) -> (ContainerRequests, Option<CoordinatedHpa>) {
    let requests = applied
        .requests
        .iter()
        .map(|(c, v)| {
            let r = ResourceRequests {
                cpu_millis: v.cpu.as_ref().and_then(|q| quantity::cpu_millis(q).ok()),
                memory_bytes: v
                    .memory
                    .as_ref()
                    .and_then(|q| quantity::memory_bytes(q).ok()),
            };
            (c.clone(), r)
        })
        .collect();
    let hpa = applied.hpa.as_ref().and_then(|h| {
        Some(CoordinatedHpa {
            hpa_name: h.name.clone(),
            resource: h.resource.clone()?,
            target_before: h.target_before?,
            target_after: h.target_after?,
        })
    });
    (requests, hpa)
}

/// The HPA target to restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreHpa {
    pub name: String,
    pub resource: String,
    pub target: i32,
}

/// What a rollback or a release writes back (requests per container, HPA target), in one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestorePlan {
    /// The values from before kerf (a `None` resource is not restored).
    pub requests: ContainerRequests,
    /// Requests kerf created where the container had none: removed.
    pub removed: BTreeMap<String, RequestSet>,
    pub hpa: Option<RestoreHpa>,
}

impl RestorePlan {
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.removed.is_empty() && self.hpa.is_none()
    }

    /// `status` once this plan went through: what it gave back is no longer recorded as taken.
    pub fn settle(&self, status: &mut RecommendationStatus) {
        for (name, r) in &self.requests {
            if let Some(v) = status.original_requests.get_mut(name) {
                if r.cpu_millis.is_some() {
                    v.cpu = None;
                }
                if r.memory_bytes.is_some() {
                    v.memory = None;
                }
            }
        }
        status
            .original_requests
            .retain(|_, v| v.cpu.is_some() || v.memory.is_some());
        for (name, gone) in &self.removed {
            if let Some(names) = status.created_requests.get_mut(name) {
                let left = RequestSet::from_names(names);
                *names = RequestSet {
                    cpu: left.cpu && !gone.cpu,
                    memory: left.memory && !gone.memory,
                }
                .names();
            }
        }
        status.created_requests.retain(|_, v| !v.is_empty());
        if self.hpa.is_some() {
            status.previous_hpa_target = None;
        }
    }
}

/// Rollback and the release of a whole workload: every recorded original request restored,
/// every request kerf created removed, and — when kerf changed the HPA — `previousHPATarget` on
/// the HPA named in `spec.hpa`.
pub fn plan_restore(
    spec: &RightsizingRecommendationSpec,
    status: &RecommendationStatus,
) -> Result<RestorePlan, PolicyError> {
    plan_release(spec, status, &Managed::default())
}

fn recorded(name: &str, v: &ResourceValues) -> Result<ResourceRequests, PolicyError> {
    type Reader = fn(&Quantity) -> Result<i64, quantity::QuantityError>;
    let read = |resource: &str, q: Option<&Quantity>, reader: Reader| {
        q.map(reader).transpose().map_err(|e| PolicyError {
            field: format!("status.originalRequests.{name}.{resource}"),
            message: e.to_string(),
        })
    };
    Ok(ResourceRequests {
        cpu_millis: read("cpu", v.cpu.as_ref(), quantity::cpu_millis)?,
        memory_bytes: read("memory", v.memory.as_ref(), quantity::memory_bytes)?,
    })
}

/// docs/design/hpa-coordination.md#h13, per field: what kerf took (recorded in `status`) and no
/// longer manages. A request is released when `managed` does not have it (its resource left
/// auto-patch, its container left the scope, the policy is gone: nothing managed); the HPA
/// target when kerf no longer coordinates it, and with it the requests of the resource the HPA
/// still measures (the two were changed together; restoring one alone would change scaling).
pub fn plan_release(
    spec: &RightsizingRecommendationSpec,
    status: &RecommendationStatus,
    managed: &Managed,
) -> Result<RestorePlan, PolicyError> {
    let hpa = match (status.previous_hpa_target, spec.hpa.as_ref()) {
        (Some(_), _) if managed.hpa_target => None,
        (Some(target), Some(h)) => Some(RestoreHpa {
            name: h.name.clone(),
            resource: h.resource.clone().ok_or_else(|| PolicyError {
                field: "spec.hpa.resource".into(),
                message: "missing, but status.previousHPATarget is set".into(),
            })?,
            target,
        }),
        (Some(_), None) => {
            return Err(PolicyError {
                field: "spec.hpa".into(),
                message: "missing, but status.previousHPATarget is set".into(),
            });
        }
        (None, _) => None,
    };
    // Released with the HPA target: the requests of the resource it still measures.
    let with_target = hpa
        .as_ref()
        .and_then(|h| HpaResource::parse(&h.resource))
        .filter(|r| managed.hpa_resource == Some(*r));
    let kept = |name: &str| {
        let mut k = managed.requests.get(name).copied().unwrap_or_default();
        match with_target {
            Some(HpaResource::Cpu) => k.cpu = false,
            Some(HpaResource::Memory) => k.memory = false,
            None => {}
        }
        k
    };
    let mut requests = ContainerRequests::new();
    for (name, v) in &status.original_requests {
        let keep = kept(name);
        let mut r = recorded(name, v)?;
        r.cpu_millis = r.cpu_millis.filter(|_| !keep.cpu);
        r.memory_bytes = r.memory_bytes.filter(|_| !keep.memory);
        if r.cpu_millis.is_some() || r.memory_bytes.is_some() {
            requests.insert(name.clone(), r);
        }
    }
    let mut removed = BTreeMap::new();
    for (name, names) in &status.created_requests {
        let keep = kept(name);
        let created = RequestSet::from_names(names);
        let gone = RequestSet {
            cpu: created.cpu && !keep.cpu,
            memory: created.memory && !keep.memory,
        };
        if gone.any() {
            removed.insert(name.clone(), gone);
        }
    }
    Ok(RestorePlan {
        requests,
        removed,
        hpa,
    })
}

/// The coordinated change once `release` puts requests of the HPA's resource back on containers
/// kerf no longer manages: the target moves with them, so requests × target stays what it was
/// (docs/design/hpa-coordination.md#h3). Unchanged when the release touches no such request.
pub fn coordinated_after_release(
    outcome: &RightsizingOutcome,
    plan: &AgentPlan,
    release: &RestorePlan,
) -> Option<CoordinatedHpa> {
    let h = plan.hpa.as_ref()?;
    let Some(resource) = HpaResource::parse(&h.resource) else {
        return Some(h.clone());
    };
    let mut touched = false;
    let mut before = 0;
    let mut after = 0;
    for c in &outcome.containers {
        let current = get(&c.current, resource).unwrap_or_default();
        before += current;
        let removed = release
            .removed
            .get(&c.name)
            .is_some_and(|g| match resource {
                HpaResource::Cpu => g.cpu,
                HpaResource::Memory => g.memory,
            });
        let restored = release.requests.get(&c.name).and_then(|r| get(r, resource));
        let planned = plan.requests.get(&c.name).and_then(|r| get(r, resource));
        after += match (planned, restored) {
            (Some(v), _) => v,
            (None, Some(v)) => {
                touched = true;
                v
            }
            (None, None) if removed => {
                touched = true;
                0
            }
            (None, None) => current,
        };
    }
    let mut out = h.clone();
    if touched {
        out.target_after =
            hpa::new_target(h.target_before, before, after).unwrap_or(h.target_after);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
