//! A change is one unit until it is whole (docs/design/runtime.md#r17): the parts of a workload's
//! change (template and HPA, GPU annotations and restart) travel together with the
//! RightsizingRecommendation that records them. The status says `pending` with the parts left
//! before any is sent, `applied` only once every part went through; a failed part is named with
//! its error and retried, backing off, until done or superseded. Pure: the writer passes `now`.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use super::fields::{gpu_restart_due, limits_match};
use super::ops::{ChangeWrite, EventWrite, RecommendationWrite, WorkloadWrite, WriteOp};
use super::plan::recommendation_name;
use crate::model::{ANNOTATION_GPU_RECOMMENDATION, WorkloadKey};
use kerf_api::{AppliedChange, PendingChange, RecommendationPhase, RecommendationStatus};

/// The phase's reason while a change is not whole.
pub const REASON_CHANGE_INCOMPLETE: &str = "ChangeIncomplete";

/// The first retry's delay; each further attempt doubles it, up to [`RETRY_MAX`].
pub const RETRY_FIRST: SignedDuration = SignedDuration::from_secs(30);
pub const RETRY_MAX: SignedDuration = SignedDuration::from_secs(600);

/// One part of a change, as `status.pending.parts` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangePart {
    Template,
    Hpa,
    GpuAnnotations,
    Restart,
}

impl ChangePart {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangePart::Template => "template",
            ChangePart::Hpa => "hpa",
            ChangePart::GpuAnnotations => "gpuAnnotations",
            ChangePart::Restart => "restart",
        }
    }
}

/// The parts one write op sends, in the order the writer sends them; none when the cluster
/// already has it all.
pub fn parts_of(op: &WriteOp) -> Vec<ChangePart> {
    match op {
        WriteOp::Workload(w) => workload_parts(w),
        WriteOp::Coordinated(c) => {
            let template = workload_parts(&c.workload);
            let hpa = (!c.hpa.in_place()).then_some(ChangePart::Hpa);
            match c.hpa.goes_first() {
                true => hpa.into_iter().chain(template).collect(),
                false => template.into_iter().chain(hpa).collect(),
            }
        }
        WriteOp::Restart(_) => vec![ChangePart::Restart],
        _ => Vec::new(),
    }
}

fn workload_parts(w: &WorkloadWrite) -> Vec<ChangePart> {
    let mut parts = Vec::new();
    let limits = w.limits.clone().unwrap_or_default();
    if w.in_place() && limits_match(&w.observed.template, &limits) {
        return parts;
    }
    if w.requests.is_some() {
        parts.push(ChangePart::Template);
    } else if w.gpu.is_some() {
        parts.push(ChangePart::GpuAnnotations);
    }
    if w.gpu
        .as_ref()
        .is_some_and(|g| gpu_restart_due(&w.observed, g))
    {
        parts.push(ChangePart::Restart);
    }
    parts
}

/// The delay before attempt `attempts + 1`, after `attempts` failed: doubling from
/// [`RETRY_FIRST`], at most [`RETRY_MAX`].
pub fn retry_delay(attempts: u32) -> SignedDuration {
    let doublings = attempts.saturating_sub(1).min(16);
    let delay = RETRY_FIRST.saturating_mul(1i32 << doublings);
    delay.min(RETRY_MAX)
}

/// A recorded pending change may be attempted again at `now` (its backoff has run out).
pub fn retry_due(pending: &PendingChange, now: Timestamp) -> bool {
    pending
        .next_attempt_after
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_none_or(|after| after <= now)
}

/// This cycle's plan is another change than the one recorded as pending: it goes at once.
pub fn superseded(
    pending: &PendingChange,
    change: Option<&AppliedChange>,
    gpu_recommendation: Option<&str>,
) -> bool {
    pending.change.as_deref() != change
        || pending.gpu_recommendation.as_deref() != gpu_recommendation
}

/// A pending record lists a restart still to do: the GPU annotations equal the plan, so only
/// this record says the pods were never rolled.
pub fn restart_left(status: Option<&RecommendationStatus>) -> bool {
    status.and_then(|s| s.pending.as_deref()).is_some_and(|p| {
        p.parts
            .iter()
            .any(|part| part == ChangePart::Restart.as_str())
    })
}

/// The status written before a change's parts are sent: what the change leaves the status at
/// (`done`) but `pending`, with the parts left and this attempt counted, and nothing claimed
/// that is not true yet: `status.applied` and `lastAppliedTime` stay as `previous` had them.
pub fn intent_status(
    done: &RecommendationStatus,
    previous: Option<&RecommendationStatus>,
    parts: &[ChangePart],
    gpu_recommendation: Option<String>,
) -> RecommendationStatus {
    let attempts = previous
        .and_then(|s| s.pending.as_deref())
        .map_or(0, |p| p.attempts);
    RecommendationStatus {
        phase: RecommendationPhase::Pending,
        reason: Some(REASON_CHANGE_INCOMPLETE.into()),
        applied: previous.and_then(|s| s.applied.clone()),
        last_applied_time: previous.and_then(|s| s.last_applied_time.clone()),
        pending: Some(Box::new(PendingChange {
            parts: parts.iter().map(|p| p.as_str().to_string()).collect(),
            failed_part: None,
            error: None,
            attempts: attempts + 1,
            next_attempt_after: None,
            change: done.applied.clone(),
            gpu_recommendation,
        })),
        ..done.clone()
    }
}

/// The status once a part failed: the parts left from it on, the part and its error, and when
/// the next attempt is due.
pub fn failed_status(
    intent: &RecommendationStatus,
    left: &[ChangePart],
    error: &str,
    now: Timestamp,
) -> RecommendationStatus {
    let mut status = intent.clone();
    if let Some(p) = status.pending.as_deref_mut() {
        p.parts = left.iter().map(|p| p.as_str().to_string()).collect();
        p.failed_part = left.first().map(|p| p.as_str().to_string());
        p.error = Some(error.to_string());
        let after = now.saturating_add(retry_delay(p.attempts)).unwrap_or(now);
        p.next_attempt_after = Some(crate::model::rfc3339_secs(after));
    }
    status
}

/// The GPU recommendation annotation a part writes.
fn gpu_recommendation_of(op: &WriteOp) -> Option<String> {
    let WriteOp::Workload(w) = op else {
        return None;
    };
    w.gpu
        .as_ref()?
        .rendered()
        .remove(ANNOTATION_GPU_RECOMMENDATION)
}

/// A workload's ops of one cycle that [`whole_changes`] makes one unit.
#[derive(Default)]
struct Unit {
    parts: Vec<WriteOp>,
    recommendation: Option<(usize, RecommendationWrite)>,
    events: Vec<EventWrite>,
}

/// One cycle's flat writes with each workload's change made one unit ([`ChangeWrite`]): the
/// parts that send something, the RightsizingRecommendation that records them and the
/// `Applied` Event. A pending change whose backoff has not run out is not attempted (nor its
/// record rewritten) unless this cycle's plan supersedes it. Other ops, and workloads whose
/// change goes through evictions or in-place resizes (those need the status published first),
/// stay as they were, in order.
pub fn whole_changes(ops: Vec<WriteOp>, now: Timestamp) -> Vec<WriteOp> {
    let name_of = |k: &WorkloadKey| (k.namespace.to_string(), recommendation_name(k));
    let mut sends: HashMap<(String, String), (WorkloadKey, bool)> = HashMap::new();
    let mut otherwise = Vec::new();
    for op in &ops {
        if let Some(key) = part_key(op) {
            let entry = sends.entry(name_of(&key)).or_insert((key, false));
            entry.1 |= !parts_of(op).is_empty();
        }
        match op {
            WriteOp::Evict(e) => otherwise.push(name_of(&e.workload)),
            WriteOp::Resize(r) => otherwise.push(name_of(&r.workload)),
            _ => {}
        }
    }
    let recorded: Vec<(String, String)> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::Recommendation(r) => Some((r.namespace.clone(), r.name.clone())),
            _ => None,
        })
        .collect();
    sends.retain(|name, (_, any)| *any && recorded.contains(name) && !otherwise.contains(name));
    let mut units: HashMap<(String, String), Unit> = HashMap::new();
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let name = match &op {
            WriteOp::Recommendation(r) => (r.namespace.clone(), r.name.clone()),
            WriteOp::Event(e) if e.reason == "Applied" => name_of(&e.regarding),
            other => match part_key(other) {
                Some(k) => name_of(&k),
                None => {
                    out.push(op);
                    continue;
                }
            },
        };
        if !sends.contains_key(&name) {
            out.push(op);
            continue;
        }
        let unit = units.entry(name).or_default();
        match op {
            WriteOp::Recommendation(r) => unit.recommendation = Some((out.len(), *r)),
            WriteOp::Event(e) => unit.events.push(*e),
            part => unit.parts.push(part),
        }
    }
    let mut placed: Vec<(usize, WriteOp)> = Vec::new();
    for (name, unit) in units {
        let Some((key, _)) = sends.remove(&name) else {
            continue;
        };
        placed.extend(unit_op(key, unit, now));
    }
    // Each unit where its recommendation was; later positions first, so earlier ones hold.
    placed.sort_by_key(|p| std::cmp::Reverse(p.0));
    for (at, op) in placed {
        out.insert(at.min(out.len()), op);
    }
    out
}

/// The workload a part is about.
fn part_key(op: &WriteOp) -> Option<WorkloadKey> {
    match op {
        WriteOp::Workload(w) => Some(w.observed.key.clone()),
        WriteOp::Coordinated(c) => Some(c.workload.observed.key.clone()),
        WriteOp::Restart(k) => Some(k.clone()),
        _ => None,
    }
}

/// One workload's unit and the position it takes; `None` while a pending change backs off.
fn unit_op(key: WorkloadKey, unit: Unit, now: Timestamp) -> Option<(usize, WriteOp)> {
    let (at, done) = unit.recommendation?;
    let previous = done.observed.as_ref().and_then(|o| o.status.as_deref());
    let planned = done.status.as_ref().and_then(|s| s.applied.as_deref());
    let gpu = unit.parts.iter().find_map(gpu_recommendation_of);
    let pending = previous.and_then(|s| s.pending.as_deref());
    if pending.is_some_and(|p| !retry_due(p, now) && !superseded(p, planned, gpu.as_deref())) {
        return None; // backing off: the record stays as it is
    }
    let parts: Vec<ChangePart> = unit.parts.iter().flat_map(parts_of).collect();
    let intent = RecommendationWrite {
        status: Some(intent_status(
            done.status
                .as_ref()
                .unwrap_or(&RecommendationStatus::default()),
            previous,
            &parts,
            gpu,
        )),
        ..done.clone()
    };
    let change = ChangeWrite {
        workload: key,
        intent,
        parts: unit.parts,
        done,
        events: unit.events,
        planned_at: now,
    };
    Some((at, WriteOp::Change(Box::new(change))))
}

#[cfg(test)]
mod tests;
