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
            let mut totals: BTreeMap<i64, f64> = BTreeMap::new();
            for (container, a) in alloc.iter() {
                let (Some(gpus), Some(series)) = (a.gpu, samples(pod, container)) else {
                    continue;
                };
                for &(t, v) in series {
                    if !v.is_finite() {
                        continue;
                    }
                    let used = match interpretation {
                        Interpretation::FullGpu => v / 100.0,
                        Interpretation::CurrentAllocation => v / 100.0 * gpus,
                    };
                    *totals.entry(t).or_default() += used;
                }
            }
            totals
        })
        .collect()
}

/// The hottest pod's total at each sample time.
pub fn hottest(totals: &[BTreeMap<i64, f64>]) -> Points {
    let mut out: BTreeMap<i64, f64> = BTreeMap::new();
    for per in totals {
        for (&t, &v) in per {
            let e = out.entry(t).or_insert(f64::MIN);
            *e = e.max(v);
        }
    }
    out.into_iter().collect()
}
