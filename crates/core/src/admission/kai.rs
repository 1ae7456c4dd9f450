//! KAI-Scheduler's own admission rules, as they bind the GPU shape kerf gives a pod
//! (docs/design/kai-admission.md#k4). KAI validates every pod whose `schedulerName` is its own
//! with a webhook whose failurePolicy is Fail (`ValidateGpuRequests`,
//! `pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go`): a pod holding a
//! `gpu-fraction` may hold no `nvidia.com/gpu` in any container, init containers included; the
//! fraction is one pod annotation, so one container holds it. A pod KAI refuses cannot be
//! created at all, so when the recommended sizes cannot be expressed under these rules kerf
//! picks the nearest shape KAI accepts.

use super::GpuTarget;
use crate::accelerator::Holds;

/// One container of the pod: what it holds as admitted and the size kerf plans for it.
#[derive(Clone, Debug)]
pub struct Slot<'a> {
    pub name: &'a str,
    pub holds: Holds,
    pub target: Option<GpuTarget>,
}

/// The planned sizes after the rule, and why they differ from the recommendation.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub targets: Vec<Option<GpuTarget>>,
    pub why: Option<String>,
}

fn holds_after(holds: Holds, target: Option<GpuTarget>) -> Holds {
    match target {
        Some(GpuTarget::Fraction { .. }) => Holds::Fraction,
        Some(GpuTarget::Whole(_)) => Holds::Whole,
        None => holds,
    }
}

/// KAI's rule over what a pod's containers hold: at most one fraction, and no whole GPUs
/// beside a fraction.
pub fn kai_accepts_holdings(holdings: impl IntoIterator<Item = Holds>) -> bool {
    let (mut fractions, mut wholes) = (0, 0);
    for h in holdings {
        match h {
            Holds::Fraction => fractions += 1,
            Holds::Whole => wholes += 1,
            Holds::Nothing => {}
        }
    }
    fractions == 0 || (fractions == 1 && wholes == 0)
}

/// Whether the pod KAI would see after `targets` are applied to `slots` is one it accepts.
pub fn accepted(slots: &[Slot<'_>], targets: &[Option<GpuTarget>]) -> bool {
    kai_accepts_holdings(
        slots
            .iter()
            .zip(targets)
            .map(|(s, t)| holds_after(s.holds, *t)),
    )
}

/// docs/design/kai-admission.md#k4: one fractional container per pod and no whole GPUs beside
/// it. When the plan breaks that (a fraction beside another GPU container, in scope or not,
/// regular or init), every planned fraction becomes whole GPUs, each rounded up (⌈r⌉: never
/// below the recommendation) — unless `whole_allowed` refuses one (the strategy's upsize), or a
/// fraction kerf does not size stays beside the whole GPUs: then the pod's GPU setup is left
/// as admitted. `whole_allowed(i, target)` says whether slot i may take `target`.
pub fn one_fraction_and_no_whole_gpus_beside_it(
    slots: &[Slot<'_>],
    whole_allowed: impl Fn(usize, GpuTarget) -> bool,
) -> Shape {
    let planned: Vec<Option<GpuTarget>> = slots.iter().map(|s| s.target).collect();
    if accepted(slots, &planned) {
        return Shape {
            targets: planned,
            why: None,
        };
    }
    let mut rounded = Vec::new();
    let mut refused = None;
    let targets: Vec<Option<GpuTarget>> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| match s.target {
            Some(t @ GpuTarget::Fraction { .. }) => {
                let whole = GpuTarget::Whole(t.devices());
                if whole_allowed(i, whole) {
                    let n = t.devices();
                    rounded.push(format!(
                        "{} gets {n} whole GPU{} instead of {}",
                        s.name,
                        if n == 1 { "" } else { "s" },
                        t.describe()
                    ));
                    Some(whole)
                } else {
                    refused.get_or_insert(s.name);
                    None
                }
            }
            t => t,
        })
        .collect();
    const RULE: &str = "KAI accepts one fractional container per pod and no whole GPUs beside it";
    if refused.is_none() && accepted(slots, &targets) {
        return Shape {
            targets,
            why: Some(format!("{RULE}: {}", rounded.join(", "))),
        };
    }
    let why = match refused {
        Some(c) => format!(
            "{RULE}, and whole GPUs for {c} are not allowed by the automation strategy: the pod's GPU setup is left as is"
        ),
        None => format!(
            "{RULE}, and a fraction kerf does not size stays beside the planned whole GPUs: the pod's GPU setup is left as is"
        ),
    };
    Shape {
        targets: vec![None; slots.len()],
        why: Some(why),
    }
}
