//! GitOps field conflicts, pure (docs/gitops.md): a field kerf set that another field manager
//! takes back — Argo CD or Flux re-applying the value from git — is counted per workload, and a
//! workload whose field is taken back [`ConflictRules::takebacks`] times within
//! [`ConflictRules::window`] is no longer written (phase `blocked`, reason `Conflict`) until the
//! other manager's value has been stable for the window or the user acknowledges. An HPA's
//! `spec.metrics` is never fought for: the first take-back blocks.
//!
//! Who changed a field, and when, comes from `managedFields`: [`project`] keeps, per manager,
//! only the fields kerf tracks and the entry's `time` (the time that manager last changed the
//! object), so the snapshot carries it without whole objects. The count lives in the
//! RightsizingRecommendation's `status.conflict`, written by the Lease holder; a new leader
//! reads it back and goes on ([`assess`] is a function of it, the objects and `now`).

use std::borrow::Cow;
use std::collections::BTreeSet;

use jiff::{SignedDuration as Duration, Timestamp};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;

use crate::hpa::HpaResource;
use crate::managed_fields::{FieldManager, TrackedField, project_hpa};
use crate::model::RequestSet;
use crate::model::{ANNOTATION_CONFLICT_ACKNOWLEDGED, rfc3339_secs};
use crate::quantity;
use crate::recommenders::resources::workload::Managed;
use crate::snapshot::Workload;
use crate::writes::{ConditionUpdate, template_requests};
use crate::writes::{RestorePlan, plan_release};
use kerf_api::{
    AppliedChange, CONDITION_CONFLICT, ConflictStatus, FieldTakeback, RecommendationStatus,
    RightsizingRecommendationSpec,
};

/// When kerf stops fighting (docs/gitops.md, "Defaults").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConflictRules {
    /// Take-backs of one field within [`Self::window`] that stop kerf writing the workload.
    pub takebacks: usize,
    /// The counting window, and how long the other manager's value must stay unchanged before
    /// kerf writes again.
    pub window: Duration,
}

impl Default for ConflictRules {
    fn default() -> Self {
        Self {
            takebacks: 3,
            window: Duration::from_hours(1),
        }
    }
}

/// What [`assess`] reads for one workload.
#[derive(Clone, Copy, Debug)]
pub struct ConflictInput<'a> {
    pub workload: &'a Workload,
    /// The HPAs of the cluster (the one kerf set the target of is looked up by name).
    pub hpas: &'a [HorizontalPodAutoscaler],
    /// The workload's RightsizingRecommendation status as last written.
    pub previous: Option<&'a RecommendationStatus>,
    pub now: Timestamp,
    pub rules: ConflictRules,
}

/// Why kerf writes a blocked workload again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resumed {
    /// The other managers' values were unchanged for the window.
    Stable,
    /// `rightsizing.kubex.ai/conflict-acknowledged` got a new value.
    Acknowledged(String),
}

/// One cycle's verdict for a workload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assessment {
    /// What `status.conflict` becomes (`None`: nothing to remember).
    pub status: Option<Box<ConflictStatus>>,
    /// kerf does not write the workload or its HPA this cycle.
    pub blocked: bool,
    /// Take-backs counted this cycle (for the metric).
    pub counted: Vec<FieldTakeback>,
    /// Set in the cycle that blocks: the take-back that did it and the message for the Event
    /// and the condition.
    pub blocking: Option<(FieldTakeback, String)>,
    pub resumed: Option<Resumed>,
    /// The `Conflict` condition to set (`None`: leave it as it is).
    pub condition: Option<ConditionUpdate>,
    /// The HPA target kerf sets back when half of a coordinated pair was taken back
    /// ([`half_pair_restore`]): the HPA's name, resource and target.
    pub restore_hpa: Option<(String, String, i32)>,
    /// The requests kerf sets back when the HPA half of a coordinated pair was taken back
    /// ([`half_pair_requests_restore`]).
    pub restore_requests: Option<RequestsRestore>,
}

/// The requests half of a coordinated pair kerf sets back ([`half_pair_requests_restore`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RequestsRestore {
    /// The HPA whose target another manager took back.
    pub hpa: String,
    /// The resource it measures: the requests of that resource go back.
    pub resource: String,
    /// The requests from before kerf (recorded in `status.originalRequests`), and those kerf
    /// created where there were none, removed; never the HPA.
    pub plan: RestorePlan,
}

fn time(t: &str) -> Option<Timestamp> {
    t.parse().ok()
}

fn render(t: Timestamp) -> String {
    rfc3339_secs(t)
}

/// `1h`, `90m`, `45s`: the window as the docs and messages write it.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s % 3600 == 0 {
        format!("{}h", s / 3600)
    } else if s % 60 == 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The fields kerf set on the workload (and its HPA), with the live value check: a request is
/// kerf's only while kerf applies one (`status.applied`), and another manager holding it at
/// kerf's own value is no fight.
fn kerf_set<'a>(input: &ConflictInput<'a>) -> Vec<(TrackedField, Cow<'a, [FieldManager]>)> {
    let w = input.workload;
    let applied = input.previous.and_then(|p| p.applied.as_ref());
    let mut out: Vec<(TrackedField, Cow<'a, [FieldManager]>)> = Vec::new();
    let mut fields: BTreeSet<TrackedField> = BTreeSet::new();
    for m in &w.field_managers {
        for f in &m.fields {
            match f {
                TrackedField::Annotation(_) | TrackedField::TemplateAnnotation(_) => {
                    fields.insert(f.clone());
                }
                TrackedField::Request {
                    container,
                    resource,
                    ..
                } => {
                    let want = applied
                        .and_then(|a| a.requests.get(container))
                        .and_then(|v| match resource.as_str() {
                            "cpu" => v.cpu.as_ref().and_then(|q| quantity::cpu_millis(q).ok()),
                            _ => v
                                .memory
                                .as_ref()
                                .and_then(|q| quantity::memory_bytes(q).ok()),
                        });
                    let Some(want) = want else { continue };
                    let have =
                        template_requests(&w.template, container).and_then(|r| {
                            match resource.as_str() {
                                "cpu" => r.cpu_millis,
                                _ => r.memory_bytes,
                            }
                        });
                    if have != Some(want) {
                        fields.insert(f.clone());
                    }
                }
                TrackedField::HpaMetrics(_) => {}
            }
        }
    }
    for f in fields {
        out.push((f, Cow::Borrowed(w.field_managers.as_slice())));
    }
    if let Some(h) = applied.and_then(|a| a.hpa.as_ref()) {
        if let Some(hpa) = hpa_named(input, &h.name) {
            let owners = Cow::Owned(project_hpa(hpa));
            out.push((TrackedField::HpaMetrics(h.name.clone()), owners));
        }
    }
    out
}

fn hpa_named<'a>(input: &ConflictInput<'a>, name: &str) -> Option<&'a HorizontalPodAutoscaler> {
    input.hpas.iter().find(|h| {
        h.metadata.namespace.as_deref() == Some(input.workload.key.namespace.as_str())
            && h.metadata.name.as_deref() == Some(name)
    })
}

/// The owners of `field` among `managers`, kerf included.
fn owners<'a>(
    managers: &'a [FieldManager],
    field: &'a TrackedField,
) -> impl Iterator<Item = &'a FieldManager> {
    managers.iter().filter(move |m| m.fields.contains(field))
}

/// When kerf last wrote: its own `managedFields` entries' times and `status.lastAppliedTime`
/// (a write that failed left the entry older than the plan's time, so a change by another
/// manager before it is not taken for a take-back).
fn kerf_last_write(
    managers: &[FieldManager],
    previous: Option<&RecommendationStatus>,
) -> Option<Timestamp> {
    managers
        .iter()
        .filter(|m| m.is_kerf())
        .filter_map(|m| m.time)
        .chain(
            previous
                .and_then(|p| p.last_applied_time.as_deref())
                .and_then(time),
        )
        .max()
}

/// Take-back rule (docs/gitops.md#detection): a field kerf set that another manager owns and
/// kerf no longer does, changed by that manager at or after kerf's last write and after
/// everything already counted, is one take-back, named after that manager. kerf sharing the
/// field (the other manager applied kerf's value) or a request at kerf's value is no take-back;
/// an entry without a `time` cannot be placed and is not counted.
pub fn takebacks(
    input: &ConflictInput<'_>,
    counted_through: Option<Timestamp>,
) -> Vec<(TrackedField, FieldTakeback, Timestamp)> {
    let kind = input.workload.key.kind;
    let mut out = Vec::new();
    for (field, managers) in kerf_set(input) {
        if owners(&managers, &field).any(FieldManager::is_kerf) {
            continue;
        }
        let Some(since) = kerf_last_write(&managers, input.previous) else {
            continue;
        };
        let latest = owners(&managers, &field)
            .filter_map(|m| m.time.map(|t| (t, m)))
            .filter(|(t, _)| *t >= since && counted_through.is_none_or(|c| *t > c))
            .max_by_key(|(t, _)| *t);
        if let Some((t, m)) = latest {
            let record = FieldTakeback {
                field: field.path(kind),
                manager: m.manager.clone(),
                time: render(t),
            };
            out.push((field, record, t));
        }
    }
    out
}

/// Block rule (docs/gitops.md#blocking): the same field taken back `rules.takebacks` times
/// within `rules.window` — an HPA's `spec.metrics` once, any field once while `probation` —
/// blocks the workload. Returns the latest take-back of the field that blocks, with how many
/// there were.
pub fn blocking(
    recorded: &[FieldTakeback],
    now: Timestamp,
    rules: ConflictRules,
    probation: bool,
) -> Option<(FieldTakeback, usize)> {
    let recent: Vec<&FieldTakeback> = recorded
        .iter()
        .filter(|t| time(&t.time).is_some_and(|t| now.duration_since(t) < rules.window))
        .collect();
    let fields: BTreeSet<&str> = recent.iter().map(|t| t.field.as_str()).collect();
    fields
        .into_iter()
        .filter_map(|f| {
            let of: Vec<&FieldTakeback> = recent.iter().copied().filter(|t| t.field == f).collect();
            let hpa = matches!(TrackedField::parse(f), Some(TrackedField::HpaMetrics(_)));
            let needed = if hpa || probation {
                1
            } else {
                rules.takebacks.max(1)
            };
            let last = (*of.last()?).clone();
            (of.len() >= needed).then_some((last, of.len()))
        })
        .max_by(|a, b| a.0.time.cmp(&b.0.time))
}

/// The request of `resource` on `container` in the workload's template.
fn template_request(w: &Workload, container: &str, resource: &str) -> Option<i64> {
    let r = template_requests(&w.template, container)?;
    match resource {
        "cpu" => r.cpu_millis,
        _ => r.memory_bytes,
    }
}

/// kerf's requests of `resource` in a pair, by container.
fn pair_requests<'p>(
    pair: &'p AppliedChange,
    resource: &'p str,
) -> impl Iterator<Item = (&'p String, i64)> + 'p {
    pair.requests.iter().filter_map(move |(c, v)| {
        let q = match resource {
            "cpu" => v.cpu.as_ref().and_then(|q| quantity::cpu_millis(q).ok()),
            _ => v
                .memory
                .as_ref()
                .and_then(|q| quantity::memory_bytes(q).ok()),
        }?;
        Some((c, q))
    })
}

/// The HPA of a pair with its live target, and whether kerf still owns its metrics.
fn pair_hpa<'a>(
    input: &ConflictInput<'a>,
    pair: &AppliedChange,
) -> Option<(&'a HorizontalPodAutoscaler, i32, bool)> {
    let h = pair.hpa.as_deref()?;
    let hpa = hpa_named(input, &h.name)?;
    let (_, target) = crate::hpa::utilization_target(hpa)?;
    let field = TrackedField::HpaMetrics(h.name.clone());
    let kerfs = owners(&project_hpa(hpa), &field).any(FieldManager::is_kerf);
    Some((hpa, target, kerfs))
}

/// The pair a half-pair rule looks at: the one kerf applies when a take-back is first seen,
/// else, while blocked, the one recorded then (`status.conflict.halfPair`: a restore that did
/// not go through is written again).
fn pair_of<'a>(
    input: &ConflictInput<'a>,
    recorded: Option<&'a AppliedChange>,
) -> Option<&'a AppliedChange> {
    recorded.or_else(|| input.previous?.applied.as_deref())
}

/// Half-pair rule (docs/gitops.md#half-a-coordinated-pair): another manager took back the
/// requests of a change coordinated with an HPA target (a take-back counted this cycle, or the
/// pair `recorded` when the workload blocked on it) while the HPA still has kerf's target: that
/// pair was never planned (1 core at 71 % runs fewer replicas than intended). kerf sets the HPA
/// back to the target planned with the live requests, the one before the change, and the
/// workload blocks at once. Returns the HPA's name, resource and that target; `None` when the
/// HPA is not at kerf's target any more (or kerf no longer owns its metrics), so a restore that
/// went through is not written again.
pub fn half_pair_restore(
    input: &ConflictInput<'_>,
    seen: &[(TrackedField, FieldTakeback, Timestamp)],
    recorded: Option<&AppliedChange>,
) -> Option<(String, String, i32)> {
    let pair = pair_of(input, recorded)?;
    let h = pair.hpa.as_deref()?;
    let (before, after) = (h.target_before?, h.target_after?);
    let resource = h.resource.as_deref()?;
    // Taken back: seen this cycle, or (retry) the template no longer has kerf's requests.
    let requests_taken = match recorded {
        None => seen
            .iter()
            .any(|(f, _, _)| matches!(f, TrackedField::Request { .. })),
        Some(pair) => pair_requests(pair, resource)
            .any(|(c, v)| template_request(input.workload, c, resource) != Some(v)),
    };
    let (_, target, kerfs) = pair_hpa(input, pair)?;
    (requests_taken && kerfs && target == after && before != after)
        .then(|| (h.name.clone(), resource.to_string(), before))
}

/// Half-pair rule, the other way round (docs/gitops.md#half-a-coordinated-pair): another
/// manager took back the HPA's target of a coordinated change (its `spec.metrics`, counted this
/// cycle, or the pair `recorded` when the workload blocked on it) while the template still has
/// kerf's requests of the resource the HPA measures: git's target on kerf's requests is a pair
/// never planned either. kerf sets those requests back to the ones from before its change (as a
/// rollback does, from `status.originalRequests`; the HPA stays the other manager's) and the
/// workload blocks at once. `None` when no container has kerf's request any more (a restore
/// that went through is not written again) or nothing was recorded to restore.
pub fn half_pair_requests_restore(
    input: &ConflictInput<'_>,
    seen: &[(TrackedField, FieldTakeback, Timestamp)],
    recorded: Option<&AppliedChange>,
) -> Option<RequestsRestore> {
    let pair = pair_of(input, recorded)?;
    let h = pair.hpa.as_deref()?;
    let resource = h.resource.as_deref()?;
    let measured = HpaResource::parse(resource)?;
    let (before, after) = (h.target_before?, h.target_after?);
    let hpa_taken = match recorded {
        None => seen
            .iter()
            .any(|(f, _, _)| matches!(f, TrackedField::HpaMetrics(_))),
        Some(_) => pair_hpa(input, pair).is_some_and(|(_, t, kerfs)| !kerfs || t != after),
    };
    // kerf's requests still on the template: the half left standing.
    let kerfs: Vec<&String> = pair_requests(pair, resource)
        .filter(|(c, v)| template_request(input.workload, c, resource) == Some(*v))
        .map(|(c, _)| c)
        .collect();
    if !hpa_taken || kerfs.is_empty() || before == after {
        return None;
    }
    // The release of the measured resource's requests alone (everything else stays kerf's):
    // the rollback's values, the same reading of `status.originalRequests`.
    let status = input.previous?;
    let keep_other = RequestSet {
        cpu: measured != HpaResource::Cpu,
        memory: measured != HpaResource::Memory,
    };
    let managed = Managed {
        requests: status
            .original_requests
            .keys()
            .chain(status.created_requests.keys())
            .map(|c| {
                let released = kerfs.contains(&c);
                (
                    c.clone(),
                    if released {
                        keep_other
                    } else {
                        RequestSet {
                            cpu: true,
                            memory: true,
                        }
                    },
                )
            })
            .collect(),
        // The HPA is the other manager's now: nothing of it is given back.
        hpa_target: true,
        hpa_resource: Some(measured),
    };
    let plan = plan_release(&RightsizingRecommendationSpec::default(), status, &managed).ok()?;
    (!plan.requests.is_empty() || !plan.removed.is_empty()).then(|| RequestsRestore {
        hpa: h.name.clone(),
        resource: resource.to_string(),
        plan,
    })
}

/// Stability rule (docs/gitops.md#resuming): a blocked workload is written again once no
/// manager other than kerf has changed any field it took back for `rules.window` — measured
/// from the latest of the recorded take-backs and the current owners' entry times.
pub fn stable(input: &ConflictInput<'_>, recorded: &[FieldTakeback]) -> bool {
    let mut last: Option<Timestamp> = None;
    for t in recorded {
        last = last.max(time(&t.time));
        let Some(field) = TrackedField::parse(&t.field) else {
            continue;
        };
        let managers: Cow<'_, [FieldManager]> = match &field {
            TrackedField::HpaMetrics(name) => {
                Cow::Owned(hpa_named(input, name).map(project_hpa).unwrap_or_default())
            }
            _ => Cow::Borrowed(&input.workload.field_managers),
        };
        for m in owners(&managers, &field).filter(|m| !m.is_kerf()) {
            last = last.max(m.time);
        }
    }
    last.is_some_and(|l| input.now.duration_since(l) >= input.rules.window)
}

/// Acknowledge rule (docs/gitops.md#resuming): a new non-empty value of
/// `rightsizing.kubex.ai/conflict-acknowledged` on the workload — not the one last acted on.
pub fn acknowledgement<'a>(w: &'a Workload, state: &ConflictStatus) -> Option<&'a str> {
    w.annotations
        .get(ANNOTATION_CONFLICT_ACKNOWLEDGED)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty() && state.acknowledged.as_deref() != Some(*v))
}

/// The Event note and condition message of a workload kerf stops writing.
pub fn blocked_message(t: &FieldTakeback, count: usize, rules: ConflictRules) -> String {
    let window = human(rules.window);
    let hpa = matches!(
        TrackedField::parse(&t.field),
        Some(TrackedField::HpaMetrics(_))
    );
    let (what, admission) = if hpa {
        (
            format!(
                "{} changed {} after kerf set it (at {}); kerf does not take an HPA's metrics back",
                t.manager, t.field, t.time
            ),
            // The requests and the target change together or not at all.
            "admission sets neither the HPA target nor the requests coordinated with it",
        )
    } else if count == 1 {
        (
            format!(
                "{} took back {} again within {window} of kerf resuming (at {})",
                t.manager, t.field, t.time
            ),
            "admission still sets kerf's values on new pods",
        )
    } else {
        (
            format!(
                "{} took back {} {count} times within {window} (last at {})",
                t.manager, t.field, t.time
            ),
            "admission still sets kerf's values on new pods",
        )
    };
    format!(
        "{what}: kerf stops writing this workload until {}'s value has been stable for {window} \
         or the workload is annotated {ANNOTATION_CONFLICT_ACKNOWLEDGED}; {admission}. Let kerf \
         own its fields in the GitOps tool (docs/gitops.md)",
        t.manager
    )
}

/// The Event note and condition message of a workload blocked by the half-pair rule.
pub fn half_pair_message(
    t: &FieldTakeback,
    (hpa, resource, target): &(String, String, i32),
    rules: ConflictRules,
) -> String {
    let window = human(rules.window);
    format!(
        "{} took back {} (at {}), half of a change coordinated with HorizontalPodAutoscaler/{hpa}: \
         kerf sets its {resource} target back to {target}% (what fits the live requests) and \
         stops writing this workload until {}'s value has been stable for {window} or the \
         workload is annotated {ANNOTATION_CONFLICT_ACKNOWLEDGED}. Let kerf own its fields in \
         the GitOps tool (docs/gitops.md)",
        t.manager, t.field, t.time, t.manager
    )
}

/// The Event note and condition message of a workload blocked by the half-pair rule the other
/// way round ([`half_pair_requests_restore`]): the requests set back, named with their values.
pub fn half_pair_requests_message(
    t: &FieldTakeback,
    restore: &RequestsRestore,
    rules: ConflictRules,
) -> String {
    let window = human(rules.window);
    let mut back: Vec<String> = restore
        .plan
        .requests
        .iter()
        .filter_map(|(c, r)| {
            let v = match restore.resource.as_str() {
                "cpu" => quantity::format_cpu_millis(r.cpu_millis?),
                _ => quantity::format_memory_bytes(r.memory_bytes?),
            };
            Some(format!("{c} {v}"))
        })
        .collect();
    back.extend(
        restore
            .plan
            .removed
            .keys()
            .map(|c| format!("{c} none (kerf had set it)")),
    );
    format!(
        "{} took back {} (at {}), half of a change coordinated with the {} requests: kerf sets \
         those requests back to the ones before its change ({}) and stops writing this \
         workload until {}'s value has been stable for {window} or the workload is annotated \
         {ANNOTATION_CONFLICT_ACKNOWLEDGED}. Let kerf own its fields in the GitOps tool \
         (docs/gitops.md)",
        t.manager,
        t.field,
        t.time,
        restore.resource,
        back.join(", "),
        t.manager
    )
}

/// Workloads whose RightsizingRecommendation says kerf stopped writing them for a field
/// conflict, with the `Conflict` condition's message.
pub fn blocked_workloads(
    recommendations: &[std::sync::Arc<crate::persisted::PersistedRecommendation>],
) -> Vec<(crate::model::WorkloadKey, String)> {
    let mut out: Vec<_> = recommendations
        .iter()
        .filter_map(|rec| {
            let status = rec.status.as_ref()?;
            let since = status.conflict.as_ref()?.blocked_since.as_deref()?;
            let key = rec.workload()?;
            let message = status
                .conditions
                .iter()
                .find(|c| c.type_ == CONDITION_CONFLICT && c.status == "True")
                .map_or_else(|| format!("blocked since {since}"), |c| c.message.clone());
            Some((key, message))
        })
        .collect();
    out.sort();
    out
}

/// The take-backs `now` records that `before` did not: counted once, when written.
pub fn newly_recorded<'a>(
    now: Option<&'a ConflictStatus>,
    before: Option<&ConflictStatus>,
) -> Vec<&'a FieldTakeback> {
    let old = before.map(|b| b.takebacks.as_slice()).unwrap_or_default();
    now.map(|n| n.takebacks.iter().filter(|t| !old.contains(t)).collect())
        .unwrap_or_default()
}

/// The message of the cycle that blocks: the half-pair rules name what kerf sets back.
fn blocking_message(
    out: &Assessment,
    t: &FieldTakeback,
    count: usize,
    rules: ConflictRules,
) -> String {
    match (&out.restore_hpa, &out.restore_requests) {
        (Some(restore), _) => half_pair_message(t, restore, rules),
        (None, Some(restore)) => half_pair_requests_message(t, restore, rules),
        (None, None) => blocked_message(t, count, rules),
    }
}

/// The state of a workload written again because the other managers' values were stable, and
/// the condition that says so.
fn resume_on_stability(
    state: &mut ConflictStatus,
    now: Timestamp,
    rules: ConflictRules,
) -> ConditionUpdate {
    let managers: BTreeSet<&str> = state.takebacks.iter().map(|t| t.manager.as_str()).collect();
    let condition = ConditionUpdate::new(
        CONDITION_CONFLICT,
        false,
        "Stable",
        format!(
            "{} left kerf's fields unchanged for {}: kerf writes the workload again",
            managers.into_iter().collect::<Vec<_>>().join(", "),
            human(rules.window)
        ),
    );
    state.blocked_since = None;
    state.half_pair = None;
    state.takebacks.clear();
    state.counted_through = Some(render(now));
    state.resumed_at = Some(render(now));
    condition
}

/// One cycle of the conflict rules for a workload: acknowledge, count, block, resume, prune.
pub fn assess(input: &ConflictInput<'_>) -> Assessment {
    let rules = input.rules;
    let now = input.now;
    let previous = input
        .previous
        .and_then(|p| p.conflict.as_deref().cloned())
        .unwrap_or_default();
    let mut state = previous.clone();
    let mut out = Assessment::default();
    if let Some(ack) = acknowledgement(input.workload, &state) {
        if state.blocked_since.is_some() {
            out.resumed = Some(Resumed::Acknowledged(ack.to_string()));
        }
        // Everything up to now is forgiven: the user says the GitOps tool leaves kerf's fields.
        state = ConflictStatus {
            acknowledged: Some(ack.to_string()),
            counted_through: Some(render(now)),
            ..Default::default()
        };
    }
    let through = state.counted_through.as_deref().and_then(time);
    let seen = takebacks(input, through);
    // While blocked on half a pair, the other half is set back again until it went through.
    let recorded = previous
        .half_pair
        .as_deref()
        .filter(|_| previous.blocked_since.is_some());
    out.restore_hpa = half_pair_restore(input, &seen, recorded);
    out.restore_requests = half_pair_requests_restore(input, &seen, recorded);
    if let Some(latest) = seen.iter().map(|(_, _, t)| *t).max() {
        state.counted_through = Some(render(through.map_or(latest, |c| c.max(latest))));
    }
    if state.blocked_since.is_none() {
        // While blocked kerf writes nothing, so nothing more is taken back: changes only delay
        // the resume (see `stable`).
        out.counted = seen.into_iter().map(|(_, t, _)| t).collect();
        state.takebacks.extend(out.counted.iter().cloned());
        // Probation rule (docs/gitops.md#resuming): a fight that starts again right after a
        // resume on stability is not fought for another round.
        let probation = state
            .resumed_at
            .as_deref()
            .and_then(time)
            .is_some_and(|r| now.duration_since(r) < rules.window);
        let half = out.restore_hpa.is_some() || out.restore_requests.is_some();
        if let Some((t, count)) = blocking(&state.takebacks, now, rules, probation || half) {
            state.blocked_since = Some(render(now));
            if half {
                state.half_pair = input.previous.and_then(|p| p.applied.clone());
            }
            let message = blocking_message(&out, &t, count, rules);
            out.condition = Some(ConditionUpdate::new(
                CONDITION_CONFLICT,
                true,
                "TakenBack",
                message.clone(),
            ));
            out.blocking = Some((t, message));
        }
    } else if stable(input, &state.takebacks) {
        out.resumed = Some(Resumed::Stable);
        out.condition = Some(resume_on_stability(&mut state, now, rules));
    }
    if let Some(Resumed::Acknowledged(v)) = &out.resumed {
        out.condition = Some(ConditionUpdate::new(
            CONDITION_CONFLICT,
            false,
            "Acknowledged",
            format!("{ANNOTATION_CONFLICT_ACKNOWLEDGED}={v}: kerf writes the workload again"),
        ));
    }
    out.blocked = state.blocked_since.is_some();
    if !out.blocked {
        // Written again, kerf sets the whole pair itself.
        out.restore_hpa = None;
        out.restore_requests = None;
        // Only the window counts; while blocked the take-backs that blocked are kept.
        state
            .takebacks
            .retain(|t| time(&t.time).is_some_and(|t| now.duration_since(t) < rules.window));
        if out.resumed.is_none()
            && state
                .resumed_at
                .as_deref()
                .and_then(time)
                .is_none_or(|r| now.duration_since(r) >= rules.window)
        {
            state.resumed_at = None;
        }
    }
    out.status = (state != ConflictStatus::default()).then(|| Box::new(state));
    out
}

#[cfg(test)]
mod tests;
