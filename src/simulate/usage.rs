//! Recorded GPU usage as the charts show it, shared by the replay report and the live `/debug`
//! page: per pod and signal, the pod total at each sample (docs/design/gpu-engine.md#g2, #g3),
//! and the hottest pod's.

use std::collections::BTreeMap;

use crate::api::Interpretation;

use super::Points;
use super::pods::PodAlloc;

/// Per pod (in `pods` order), the pod's total GPU usage at each sample time: the sum over its
/// containers with a GPU allocation of value/100 (`fullGPU`) or value/100 × the container's
/// allocation (`currentAllocation`). `samples(pod, container)` gives a container's samples.
pub fn pod_totals<'a>(
    pods: &[(&str, &PodAlloc)],
    interpretation: Interpretation,
    samples: impl Fn(&str, &str) -> Option<&'a [(i64, f64)]>,
) -> Vec<BTreeMap<i64, f64>> {
    pods.iter()
        .map(|(pod, alloc)| {
            let mut used: Vec<(i64, f64)> = Vec::new();
            for (container, a) in alloc.iter() {
                let (Some(gpus), Some(series)) = (a.gpu, samples(pod, container)) else {
                    continue;
                };
                used.extend(
                    series
                        .iter()
                        .filter(|(_, v)| v.is_finite())
                        .map(|&(t, v)| (t, interpretation.gpus(v, gpus))),
                );
            }
            fold_by_time(used, 0.0, |total, v| total + v)
                .into_iter()
                .collect()
        })
        .collect()
}

/// The hottest pod's total at each sample time.
pub fn hottest(totals: &[BTreeMap<i64, f64>]) -> Points {
    let all: Vec<(i64, f64)> = totals
        .iter()
        .flat_map(|per| per.iter().map(|(&t, &v)| (t, v)))
        .collect();
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
