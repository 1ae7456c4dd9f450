//! Recorded GPU usage as the charts show it, shared by the replay report and the live `/debug`
//! page: per pod and signal, the pod total at each sample (the engine's own
//! [`engine::pod_totals`], docs/design/gpu-engine.md#g2, #g3), and the hottest pod's.

use crate::api::Interpretation;
use crate::core::model::GpuMap;
use crate::core::recommenders::gpu::engine;

use super::Points;
use crate::views::pods::PodAlloc;

/// Per pod (in `pods` order), the pod's total GPU usage at each sample time, in time order:
/// the engine's pod total over the pod's containers with a GPU allocation.
/// `samples(pod, container)` gives a container's samples.
pub fn pod_totals<'a>(
    pods: &[(&str, &PodAlloc)],
    interpretation: Interpretation,
    samples: impl Fn(&str, &str) -> Option<&'a [(i64, f64)]>,
) -> Vec<Points> {
    pods.iter()
        .map(|(pod, alloc)| {
            let gpus: GpuMap = alloc
                .iter()
                .filter_map(|(c, a)| Some((c.clone(), a.gpu?)))
                .collect();
            let mut totals = Points::new();
            engine::pod_totals(
                &gpus,
                |c| samples(pod, c),
                interpretation,
                (i64::MIN, i64::MAX),
                |t, v| totals.push((t, v)),
            );
            totals
        })
        .collect()
}

/// The highest of the per-pod series at each time (the hottest pod's value).
pub fn hottest(per_pod: &[Points]) -> Points {
    let all: Vec<(i64, f64)> = per_pod.iter().flatten().copied().collect();
    fold_by_time(all, f64::MIN, f64::max)
}

/// `values` folded per time from `init`, in their order within a time (a stable sort keeps
/// it, so sums come out as a map filled in that order would give them), ascending by time.
/// A sort instead of a map entry per sample: a day of 15 s samples per pod is thousands.
pub fn fold_by_time(
    mut values: Vec<(i64, f64)>,
    init: f64,
    fold: impl Fn(f64, f64) -> f64,
) -> Points {
    if !values.is_sorted_by_key(|&(t, _)| t) {
        values.sort_by_key(|&(t, _)| t);
    }
    // Sized exactly: the report keeps the hottest pod's points for the whole replay, and a
    // vector grown by doubling would keep up to twice the memory (shrinking may not return it).
    let times = 1 + values.windows(2).filter(|w| w[0].0 != w[1].0).count();
    let mut out: Points = Vec::with_capacity(times.min(values.len()));
    for (t, v) in values {
        match out.last_mut() {
            Some((last, acc)) if *last == t => *acc = fold(*acc, v),
            _ => out.push((t, fold(init, v))),
        }
    }
    out
}
