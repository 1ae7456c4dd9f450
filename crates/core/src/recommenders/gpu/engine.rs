//! The GPU reactive engine (docs/design/gpu-engine.md#g2 to #g10): a pure function of
//! (policy, pods with their allocations, metric samples, baseline, previous recommendation, now).

use std::collections::BTreeSet;

use crate::hash::HashMap;

use crate::pod::{Pod, PodSpec, PodTemplateSpec, Strings};
use jiff::Timestamp;

use crate::allocation::{Allocation, container_allocations, scoped_container_names};
use crate::model::{GpuMap, GpuRecommendation, PolicyId};
use crate::quantity::Fixed;
use crate::recommenders::gpu::samples::{MissingSamples, query_window};
use kerf_api::{GpuReactivePolicySpec, Interpretation, Signal};
use kerf_support::small_map::SmallMap;

/// One pod's series of one signal by container: (unix seconds, value) ascending.
pub type PodSamples = SmallMap<String, Vec<(i64, f64)>>;

/// Raw metric values of one signal by pod, then container. Keyed by pod first so the engine
/// finds a pod's series with one lookup by its borrowed name (a `(pod, container)` key had to be
/// built as two owned strings per lookup).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SignalSamples {
    by_pod: HashMap<String, PodSamples>,
}

impl SignalSamples {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the series of (`pod`, `container`); a series already there is replaced.
    pub fn insert(&mut self, pod: String, container: String, samples: Vec<(i64, f64)>) {
        self.by_pod
            .entry(pod)
            .or_default()
            .insert(container, samples);
    }

    /// The pod's series by container.
    pub fn pod(&self, pod: &str) -> Option<&PodSamples> {
        self.by_pod.get(pod)
    }
}

/// Tests build samples from `((pod, container), series)` entries.
#[cfg(test)]
impl FromIterator<((String, String), Vec<(i64, f64)>)> for SignalSamples {
    fn from_iter<I: IntoIterator<Item = ((String, String), Vec<(i64, f64)>)>>(iter: I) -> Self {
        let mut out = Self::new();
        for ((pod, container), samples) in iter {
            out.insert(pod, container, samples);
        }
        out
    }
}

#[cfg(test)]
impl<const N: usize> From<[((String, String), Vec<(i64, f64)>); N]> for SignalSamples {
    fn from(entries: [((String, String), Vec<(i64, f64)>); N]) -> Self {
        entries.into_iter().collect()
    }
}

/// Totals closer than this are equal (GPU units; far below any meaningful allocation step).
const EPSILON: f64 = 1e-9;

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= EPSILON * a.abs().max(b.abs()).max(1.0)
}

pub struct EngineInput<'a> {
    pub policy_id: &'a PolicyId,
    pub policy: &'a GpuReactivePolicySpec,
    /// Overrides `policy.scope.containers` when several policies share a workload
    /// (multi-policy container rightsizing): the containers this policy won.
    pub containers_override: Option<&'a BTreeSet<String>>,
    pub template: &'a PodTemplateSpec,
    /// Pods owned by the workload (eligibility is decided here).
    pub pods: &'a [&'a Pod],
    pub compute: &'a SignalSamples,
    pub memory: &'a SignalSamples,
    pub baseline: Option<&'a GpuMap>,
    pub previous: Option<&'a GpuRecommendation>,
    pub now: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Upsize,
    ScaleBack,
    Reuse,
    None,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Upsize => "upsize",
            Action::ScaleBack => "scaleBack",
            Action::Reuse => "reuse",
            Action::None => "none",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerOutcome {
    pub current: Option<f64>,
    pub baseline: Option<f64>,
    pub recommended: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EngineOutput {
    pub action: Action,
    pub driving_metric: Option<Signal>,
    /// Every scoped container, in pod order of the template.
    pub containers: SmallMap<String, ContainerOutcome>,
    /// The emitted recommendation (None = emit nothing).
    pub recommendation: Option<GpuRecommendation>,
    /// The baseline to persist (None = none recorded).
    pub baseline: Option<GpuMap>,
    /// Human-readable reasons, in evaluation order.
    pub reasons: Vec<String>,
    /// Per signal whose metric some eligible pod had no sample of (docs/design/gpu-engine.md#g13):
    /// said in the reasons instead of "no condition met", with the metric file's range once
    /// the cycle knows it.
    pub missing_samples: Vec<MissingSamples>,
}

/// One eligible pod as the engine sees it.
struct PodView<'a> {
    name: &'a str,
    /// Included containers that have an allocation.
    alloc: GpuMap,
}

impl PodView<'_> {
    fn total_alloc(&self) -> f64 {
        self.alloc.values().sum()
    }
}

/// A per-signal candidate: the total per pod and the pod it was taken from.
#[derive(Clone, Debug)]
struct Candidate {
    signal: Signal,
    action: Action,
    total: f64,
    pod: usize,
}

/// Terminating or finished: not a live pod of the workload (docs/design/gpu-engine.md#g4).
pub fn pod_is_terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
        || matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        )
}

/// The highest pod total over the sample timestamps within (now − window, now]
/// (docs/design/gpu-engine.md#g2, docs/design/gpu-engine.md#g3); `None` without samples.
fn max_pod_total(
    pod: &PodView<'_>,
    samples: Option<&PodSamples>,
    interpretation: Interpretation,
    from: i64,
    to: i64,
) -> Option<f64> {
    let samples = samples?;
    let mut max: Option<f64> = None;
    pod_totals(
        &pod.alloc,
        |c| samples.get(c).map(Vec::as_slice),
        interpretation,
        (from, to),
        |_, total| max = Some(max.map_or(total, |m| m.max(total))),
    );
    max
}

/// A pod's total GPU usage at each sample timestamp within (from, to], in time order
/// (docs/design/gpu-engine.md#g2, #g3): the usages of the containers of `alloc` (container →
/// its allocation) that have a series, summed per timestamp in container order. The one
/// reading of the rule: the engine takes the maximum, the charts (`kerf simulate`, `/debug`)
/// draw every total.
pub fn pod_totals<'s>(
    alloc: &GpuMap,
    series_of: impl Fn(&str) -> Option<&'s [(i64, f64)]>,
    interpretation: Interpretation,
    (from, to): (i64, i64),
    each: impl FnMut(i64, f64),
) {
    fn usages_of(
        series: &[(i64, f64)],
        alloc: f64,
        interpretation: Interpretation,
        (from, to): (i64, i64),
    ) -> impl Iterator<Item = (i64, f64)> + '_ {
        series.iter().filter_map(move |&(t, v)| {
            if t <= from || t > to || !v.is_finite() {
                return None;
            }
            Some((t, interpretation.gpus(v, alloc)))
        })
    }
    let mut series = alloc
        .iter()
        .filter_map(|(c, alloc)| Some((series_of(c.as_str())?, *alloc)));
    // The usual pod: one container with a series, sorted already; its usages are the sorted
    // sequence as they are (no buffer per pod and signal).
    if let (Some((only, alloc)), None) = (series.next(), series.next())
        && only.is_sorted_by_key(|&(t, _)| t)
    {
        // Sorted: the window's samples are one run, found by binary search.
        let start = only.partition_point(|&(t, _)| t <= from);
        let end = start + only[start..].partition_point(|&(t, _)| t <= to);
        timestamp_totals(
            usages_of(&only[start..end], alloc, interpretation, (from, to)),
            each,
        );
        return;
    }
    let mut usages: Vec<(i64, f64)> = Vec::new();
    for (container, alloc) in alloc {
        let Some(series) = series_of(container.as_str()) else {
            continue;
        };
        // At most the whole series: one allocation instead of growing sample by sample.
        usages.reserve(series.len());
        usages.extend(usages_of(series, *alloc, interpretation, (from, to)));
    }
    // Stable: equal timestamps keep container (then sample) order.
    if !usages.is_sorted_by_key(|&(t, _)| t) {
        usages.sort_by_key(|&(t, _)| t);
    }
    timestamp_totals(usages.into_iter(), each);
}

/// The sums of the usages sharing a timestamp, over usages sorted by timestamp, each given to
/// `each` in order.
fn timestamp_totals(usages: impl Iterator<Item = (i64, f64)>, mut each: impl FnMut(i64, f64)) {
    let mut current: Option<(i64, f64)> = None;
    for (t, u) in usages {
        match current.as_mut() {
            Some((ct, total)) if *ct == t => *total += u,
            _ => {
                if let Some((ct, total)) = current {
                    each(ct, total);
                }
                // `0.0 + u`, as the sum from 0.0 it replaces: a lone -0.0 usage totals +0.0
                // (a reason would print "-0.0000" otherwise).
                current = Some((t, 0.0 + u));
            }
        }
    }
    if let Some((ct, total)) = current {
        each(ct, total);
    }
}

/// Every included container of the pod has at least one sample in the window.
fn complete_samples(pod: &PodView<'_>, samples: Option<&PodSamples>, from: i64, to: i64) -> bool {
    pod.alloc.keys().all(|c| {
        samples
            .and_then(|s| s.get(c.as_str()))
            .is_some_and(|s| s.iter().any(|&(t, v)| t > from && t <= to && v.is_finite()))
    })
}

/// Some included container of the pod has a sample in the window.
fn any_sample(pod: &PodView<'_>, samples: Option<&PodSamples>, from: i64, to: i64) -> bool {
    pod.alloc.keys().any(|c| {
        samples
            .and_then(|s| s.get(c.as_str()))
            .is_some_and(|s| s.iter().any(|&(t, v)| t > from && t <= to && v.is_finite()))
    })
}

/// Summed baseline of the pod's included containers; containers without a recorded entry count
/// with their current allocation (they have never been upsized).
fn summed_baseline(pod: &PodView<'_>, baseline: Option<&GpuMap>) -> f64 {
    pod.alloc
        .iter()
        .map(|(c, a)| baseline.and_then(|b| b.get(c)).copied().unwrap_or(*a))
        .sum()
}

/// What a recorded baseline still means for the workload's template
/// (docs/design/gpu-engine.md#g7). The one reading of this rule: the engine and restart recovery
/// (`core/recovery.rs`) both apply it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BaselineCheck {
    /// The entries of the containers in scope.
    pub kept: GpuMap,
    /// Containers of the template the scope no longer includes: their entries are dropped.
    pub narrowed: Vec<String>,
    /// Containers in scope whose template allocation differs from their entry, and containers
    /// the template no longer has: the template's own GPU allocation changed, so the baseline
    /// and the recommendation reset.
    pub changed: Vec<String>,
}

/// Checks `baseline` against the template (`spec` and its per-container `alloc`), `scope` being
/// the template's containers the policy includes.
pub fn check_baseline(
    baseline: &GpuMap,
    spec: &PodSpec,
    alloc: &SmallMap<String, Allocation>,
    scope: &BTreeSet<String>,
) -> BaselineCheck {
    let in_template = |c: &str| {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|x| x.name == c)
    };
    let mut out = BaselineCheck::default();
    for (c, v) in baseline {
        if scope.contains(c) {
            out.kept.insert(c.clone(), *v);
            if !alloc
                .get(c)
                .and_then(Allocation::gpus)
                .is_some_and(|t| same(t, *v))
            {
                out.changed.push(c.clone());
            }
        } else if in_template(c) {
            out.narrowed.push(c.clone());
        } else {
            out.changed.push(c.clone());
        }
    }
    out
}

pub fn evaluate(input: &EngineInput<'_>) -> EngineOutput {
    let mut reasons = Vec::new();
    let template_spec = input.template.pod_spec();
    // Scope: exact names (or the override) else regular + restartable init containers.
    let scope: Vec<String> = match input.containers_override {
        Some(set) => set.iter().cloned().collect(),
        None => input.policy.scope.containers.clone(),
    };
    let template_scope: BTreeSet<String> = scoped_container_names(template_spec, &scope)
        .into_iter()
        .collect();
    let template_alloc = container_allocations(template_spec, input.template.annotations());
    let (baseline, previous) = baseline(input, &template_alloc, &template_scope, &mut reasons);
    let (views, all_live_views) = eligibility(input, &scope, &mut reasons);
    let (candidates, missing_samples) = candidates(input, &views, baseline.as_ref(), &mut reasons);
    let accepted = driving_metric(&candidates, previous.as_ref(), &mut reasons);

    let reference = accepted
        .map(|(c, _)| &views[c.pod])
        .or_else(|| views.first())
        .or_else(|| all_live_views.iter().find(|p| !p.alloc.is_empty()));
    let mut containers: SmallMap<String, ContainerOutcome> = SmallMap::new();
    for c in &template_scope {
        containers.insert(
            c.clone(),
            ContainerOutcome {
                current: reference.and_then(|p| p.alloc.get(c).copied()),
                baseline: None,
                recommended: None,
            },
        );
    }

    let mut out_baseline = baseline.clone();
    let (action, driving, recommendation) = match accepted {
        Some((cand, drive)) => redistribute(
            input,
            &views[cand.pod],
            cand,
            drive,
            previous.as_ref(),
            &mut out_baseline,
            &mut reasons,
        ),
        None => {
            let nothing_read = candidates.is_empty() && missing_samples.is_empty();
            reuse(
                baseline.as_ref(),
                previous.as_ref(),
                &all_live_views,
                nothing_read,
                &mut reasons,
            )
        }
    };

    for (c, o) in containers.iter_mut() {
        o.baseline = out_baseline.as_ref().and_then(|b| b.get(c).copied());
        o.recommended = recommendation
            .as_ref()
            .and_then(|r| r.containers.get(c).copied());
    }

    EngineOutput {
        action,
        driving_metric: driving,
        containers,
        recommendation,
        baseline: out_baseline,
        reasons,
        missing_samples,
    }
}

/// docs/design/gpu-engine.md#g7: narrowing the scope drops excluded entries; a changed template
/// resets state; a container without an entry gets one. Returns the baseline and the previous
/// recommendation to evaluate against (None when empty or reset).
fn baseline(
    input: &EngineInput<'_>,
    template_alloc: &SmallMap<String, Allocation>,
    template_scope: &BTreeSet<String>,
    reasons: &mut Vec<String>,
) -> (Option<GpuMap>, Option<GpuRecommendation>) {
    let check = input
        .baseline
        .map(|b| check_baseline(b, input.template.pod_spec(), template_alloc, template_scope));
    let mut baseline: Option<GpuMap> = check.as_ref().map(|c| c.kept.clone());
    // With several policies on the workload (an override), the other entries are other
    // policies' containers, not a narrowed scope.
    let narrowed = check
        .as_ref()
        .filter(|c| !c.narrowed.is_empty() && input.containers_override.is_none());
    if let Some(c) = narrowed {
        reasons.push(format!(
            "scope excludes {}: their baseline and recommendation entries are removed",
            c.narrowed.join(", ")
        ));
    }
    let mut previous: Option<GpuRecommendation> = input.previous.map(|r| GpuRecommendation {
        containers: r
            .containers
            .iter()
            .filter(|(c, _)| template_scope.contains(*c))
            .map(|(c, v)| (c.clone(), *v))
            .collect(),
        ..r.clone()
    });
    if let Some(c) = check.as_ref().filter(|c| !c.changed.is_empty()) {
        reasons.push(format!(
            "template GPU allocation of {} changed since the baseline was recorded: baseline and recommendation reset",
            c.changed.join(", ")
        ));
        baseline = None;
        previous = None;
    }
    if let Some(b) = baseline.as_mut().filter(|b| !b.is_empty()) {
        // Before any upsize of it, a container's allocation is its template's (admission changes
        // pods, never templates): that is its baseline entry from now on.
        let added: Vec<(String, f64)> = template_scope
            .iter()
            .filter(|c| !b.contains_key(*c))
            .filter_map(|c| Some((c.clone(), template_alloc.get(c)?.gpus()?)))
            .collect();
        b.extend(added.iter().cloned());
        let added: Vec<String> = added.into_iter().map(|(c, _)| c).collect();
        if !added.is_empty() {
            reasons.push(format!(
                "baseline of {} recorded from the allocation before any upsize of it",
                added.join(", ")
            ));
        }
    }
    (
        baseline.filter(|b| !b.is_empty()),
        previous.filter(|r| !r.containers.is_empty()),
    )
}

/// docs/design/gpu-engine.md#g4: the live pods (sorted by name) and, of them, the eligible ones
/// with a GPU allocation in scope.
fn eligibility<'a>(
    input: &EngineInput<'a>,
    scope: &[String],
    reasons: &mut Vec<String>,
) -> (Vec<PodView<'a>>, Vec<PodView<'a>>) {
    let empty_annotations = Strings::new();
    let min_age = input.policy.min_pod_metrics_age.signed();
    let mut live_pods: Vec<&'a Pod> = input
        .pods
        .iter()
        .copied()
        .filter(|p| !pod_is_terminating(p))
        .collect();
    live_pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut views: Vec<PodView<'a>> = Vec::new();
    let mut missing_reported: BTreeSet<String> = BTreeSet::new();
    let mut all_live_views: Vec<PodView<'a>> = Vec::new();
    for pod in &live_pods {
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let annotations = pod
            .metadata
            .annotations
            .as_ref()
            .unwrap_or(&empty_annotations);
        let allocs = container_allocations(spec, annotations);
        let mut alloc = GpuMap::new();
        for c in scoped_container_names(spec, scope) {
            match allocs.get(&c) {
                Some(Allocation::Gpus(g)) => {
                    alloc.insert(c, *g);
                }
                Some(Allocation::Missing(why)) if missing_reported.insert(c.clone()) => {
                    reasons.push(format!(
                        "container {c} has no current GPU allocation ({why}): excluded from aggregation and from the recommendation"
                    ));
                }
                Some(Allocation::Missing(_)) | None => {}
            }
        }
        let view = PodView { name, alloc };
        let start = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0);
        match start {
            None => reasons.push(format!("pod {name} has no status.startTime: ineligible")),
            Some(t) if input.now.duration_since(t) < min_age => reasons.push(format!(
                "pod {name} is younger than minPodMetricsAge {}: ineligible",
                input.policy.min_pod_metrics_age
            )),
            Some(_) if view.alloc.is_empty() => {}
            Some(_) => {
                views.push(PodView {
                    name: view.name,
                    alloc: view.alloc.clone(),
                });
            }
        }
        all_live_views.push(view);
    }
    if live_pods.is_empty() {
        reasons.push("no running pods".into());
    } else if views.is_empty() {
        reasons.push("no eligible pod with a GPU allocation".into());
    }
    (views, all_live_views)
}

/// Per signal, an upsize candidate (docs/design/gpu-engine.md#g5) or else a scale-back one
/// (#g6); and the signals some eligible pod had no sample of (#g13).
fn candidates(
    input: &EngineInput<'_>,
    views: &[PodView<'_>],
    baseline: Option<&GpuMap>,
    reasons: &mut Vec<String>,
) -> (Vec<Candidate>, Vec<MissingSamples>) {
    let policy = input.policy;
    let now_s = input.now.as_second();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut missing_samples: Vec<MissingSamples> = Vec::new();
    for signal in Signal::BOTH {
        let samples = match signal {
            Signal::Compute => input.compute,
            Signal::Memory => input.memory,
        };
        // Each pod's series looked up once per signal.
        let pod_samples: Vec<Option<&PodSamples>> =
            views.iter().map(|p| samples.pod(p.name)).collect();
        // Pods with no sample at all in the window the query covers: "no data" is said.
        let query_from = now_s - query_window(policy, signal).seconds() as i64;
        let without = views
            .iter()
            .zip(&pod_samples)
            .filter(|(p, s)| !any_sample(p, **s, query_from, now_s))
            .count();
        if without > 0 {
            missing_samples.push(MissingSamples::of(
                policy,
                signal,
                without,
                views.len(),
                input.now,
            ));
        }
        let candidate = upsize(
            policy,
            signal,
            views,
            &pod_samples,
            baseline,
            now_s,
            reasons,
        )
        .or_else(|| {
            let base = baseline?;
            scale_back(policy, signal, views, &pod_samples, base, now_s, reasons)
        });
        candidates.extend(candidate);
    }
    (candidates, missing_samples)
}

/// docs/design/gpu-engine.md#g5: pod-level; the hottest pod above the threshold sets the total,
/// capped at `maxPercent` of its baseline.
fn upsize(
    policy: &GpuReactivePolicySpec,
    signal: Signal,
    views: &[PodView<'_>],
    pod_samples: &[Option<&PodSamples>],
    baseline: Option<&GpuMap>,
    now_s: i64,
    reasons: &mut Vec<String>,
) -> Option<Candidate> {
    let cfg = policy.metrics.signal(signal);
    let interp = cfg.prometheus.interpretation;
    let up_from = now_s - cfg.upsize.metrics_window.seconds() as i64;
    let up_values: Vec<Option<f64>> = views
        .iter()
        .zip(pod_samples)
        .map(|(p, s)| max_pod_total(p, *s, interp, up_from, now_s))
        .collect();
    let triggered = views.iter().zip(&up_values).any(|(p, v)| {
        v.is_some_and(|v| v > p.total_alloc() * cfg.upsize.threshold_percent / 100.0 + EPSILON)
    });
    let hottest = up_values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .fold(None::<(usize, f64)>, |best, (i, v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((i, v)),
        });
    if !triggered {
        return None;
    }
    let (i, hot) = hottest?;
    let wanted = hot * (1.0 + cfg.upsize.headroom_percent / 100.0);
    let cap = summed_baseline(&views[i], baseline) * cfg.upsize.max_percent / 100.0;
    let total = wanted.min(cap);
    reasons.push(format!(
        "{}: pod {} uses {} GPU, above {}% of its allocation {}: upsize candidate {}{}",
        signal.as_str(),
        views[i].name,
        Fixed(hot, 4),
        cfg.upsize.threshold_percent,
        Fixed(views[i].total_alloc(), 4),
        Fixed(total, 4),
        if wanted > cap {
            format!(" (capped at {}% of baseline)", cfg.upsize.max_percent)
        } else {
            String::new()
        }
    ));
    Some(Candidate {
        signal,
        action: Action::Upsize,
        total,
        pod: i,
    })
}

/// docs/design/gpu-engine.md#g6: owner-wide, only above a recorded baseline, with complete
/// samples, when every pod stays below the threshold; floored at the baseline.
fn scale_back(
    policy: &GpuReactivePolicySpec,
    signal: Signal,
    views: &[PodView<'_>],
    pod_samples: &[Option<&PodSamples>],
    base: &GpuMap,
    now_s: i64,
    reasons: &mut Vec<String>,
) -> Option<Candidate> {
    let cfg = policy.metrics.signal(signal);
    let interp = cfg.prometheus.interpretation;
    let name = signal.as_str();
    let above_baseline = views
        .iter()
        .any(|p| p.total_alloc() > summed_baseline(p, Some(base)) + EPSILON);
    if !above_baseline || views.is_empty() {
        return None;
    }
    let sb_from = now_s - cfg.scale_back.metrics_window.seconds() as i64;
    if let Some((p, _)) = views
        .iter()
        .zip(pod_samples)
        .find(|(p, s)| !complete_samples(p, **s, sb_from, now_s))
    {
        reasons.push(format!(
            "{name}: no scale-back: pod {} lacks samples for an included container in the scale-back window",
            p.name
        ));
        return None;
    }
    let sb_values: Vec<f64> = views
        .iter()
        .zip(pod_samples)
        .map(|(p, s)| max_pod_total(p, *s, interp, sb_from, now_s).unwrap_or(0.0))
        .collect();
    let all_below = views
        .iter()
        .zip(&sb_values)
        .all(|(p, v)| *v < p.total_alloc() * cfg.scale_back.threshold_percent / 100.0);
    if !all_below {
        return None;
    }
    let (i, hot) = sb_values
        .iter()
        .copied()
        .enumerate()
        .fold(
            (0, f64::MIN),
            |(bi, bv), (i, v)| if v > bv { (i, v) } else { (bi, bv) },
        );
    let wanted = hot * (1.0 + cfg.scale_back.headroom_percent / 100.0);
    let floor = summed_baseline(&views[i], Some(base));
    let total = wanted.max(floor);
    reasons.push(format!(
        "{name}: every pod stays below {}% of its allocation (hottest {} at {} GPU): scale-back candidate {}{}",
        cfg.scale_back.threshold_percent,
        views[i].name,
        Fixed(hot, 4),
        Fixed(total, 4),
        if wanted < floor { " (floored at baseline)" } else { "" }
    ));
    Some(Candidate {
        signal,
        action: Action::ScaleBack,
        total,
        pod: i,
    })
}

/// docs/design/gpu-engine.md#g8: choose between metrics and against the existing
/// recommendation; the accepted candidate and the driving metric it records.
fn driving_metric<'c>(
    candidates: &'c [Candidate],
    previous: Option<&GpuRecommendation>,
    reasons: &mut Vec<String>,
) -> Option<(&'c Candidate, Signal)> {
    let driver = previous.and_then(|r| r.driving_metric);
    let winner: Option<&Candidate> = candidates.iter().fold(None, |best, c| match best {
        None => Some(c),
        Some(b) if c.total > b.total && !same(c.total, b.total) => Some(c),
        Some(b)
            if same(c.total, b.total) && Some(c.signal) == driver && Some(b.signal) != driver =>
        {
            Some(c)
        }
        _ => best,
    });
    let w = winner?;
    let Some(r) = previous else {
        return Some((w, w.signal));
    };
    let r_total = r.total();
    match r.driving_metric {
        None if w.total > r_total || same(w.total, r_total) => {
            reasons.push("existing recommendation has no driving metric: accepted the non-decreasing candidate, which sets one".into());
            Some((w, w.signal))
        }
        None => {
            reasons.push(format!(
                "existing recommendation {} has no driving metric: never lowered (candidate {})",
                Fixed(r_total, 4),
                Fixed(w.total, 4)
            ));
            None
        }
        Some(d) if same(w.total, r_total) => Some((w, d)),
        Some(_) if w.total > r_total => Some((w, w.signal)),
        Some(d) if w.signal == d => Some((w, d)),
        Some(d) => match candidates.iter().find(|c| c.signal == d) {
            Some(dc) if same(dc.total, w.total) => Some((w, d)),
            Some(_) => Some((w, w.signal)),
            None => {
                reasons.push(format!(
                    "lower {} candidate {} not accepted: the driving metric {} emitted no candidate",
                    w.signal.as_str(),
                    Fixed(w.total, 4),
                    d.as_str()
                ));
                None
            }
        },
    }
}

/// docs/design/gpu-engine.md#g9: the accepted total over the selected pod's containers
/// ∝ current allocation; the first upsize records the baseline.
fn redistribute(
    input: &EngineInput<'_>,
    pod: &PodView<'_>,
    cand: &Candidate,
    drive: Signal,
    previous: Option<&GpuRecommendation>,
    out_baseline: &mut Option<GpuMap>,
    reasons: &mut Vec<String>,
) -> (Action, Option<Signal>, Option<GpuRecommendation>) {
    let sum = pod.total_alloc();
    let rec: GpuMap = pod
        .alloc
        .iter()
        .map(|(c, a)| (c.clone(), cand.total * a / sum))
        .collect();
    if cand.action == Action::Upsize && out_baseline.is_none() {
        *out_baseline = Some(pod.alloc.clone());
        reasons.push("baseline recorded from the live allocation before the first upsize".into());
    }
    let unchanged = previous.is_some_and(|r| {
        r.driving_metric == Some(drive)
            && r.policy.as_ref() == Some(input.policy_id)
            && r.containers.len() == rec.len()
            && r.containers
                .iter()
                .all(|(c, v)| rec.get(c).is_some_and(|x| same(*x, *v)))
    });
    let updated_at = if unchanged {
        previous.and_then(|r| r.updated_at)
    } else {
        Some(input.now)
    };
    (
        cand.action,
        Some(drive),
        Some(GpuRecommendation {
            containers: rec,
            driving_metric: Some(drive),
            policy: Some(input.policy_id.clone()),
            updated_at,
            by_policy: Default::default(),
        }),
    )
}

/// docs/design/gpu-engine.md#g8: nothing accepted: the previous recommendation is reused while
/// pods still differ from the baseline. `nothing_read` is true when no candidate was emitted
/// and every pod had samples.
fn reuse(
    baseline: Option<&GpuMap>,
    previous: Option<&GpuRecommendation>,
    all_live_views: &[PodView<'_>],
    nothing_read: bool,
    reasons: &mut Vec<String>,
) -> (Action, Option<Signal>, Option<GpuRecommendation>) {
    let differs = baseline.is_some_and(|b| {
        all_live_views.iter().any(|p| {
            p.alloc
                .iter()
                .any(|(c, a)| b.get(c).is_some_and(|v| !same(*v, *a)))
        })
    });
    match (previous, differs) {
        (Some(r), true) => {
            reasons.push("no accepted candidate and the allocation differs from the baseline: previous recommendation reused".into());
            (Action::Reuse, r.driving_metric, Some(r.clone()))
        }
        _ => {
            // Without samples nothing was read: the missing samples are the reason.
            if nothing_read {
                reasons.push("no upsize or scale-back condition met".into());
            }
            (Action::None, None, None)
        }
    }
}

#[cfg(test)]
mod tests;
