//! The CPU/memory plan and answers when the usage history is kept between cycles
//! (docs/metrics.md#incremental-history): a batch of workloads whose history is folded up to the
//! last cycle asks for the steps since then and the steps that left the window
//! ([`summary::steps_to_ask`]); a batch new to the history asks for its whole window once,
//! in small batches and at most a third of the workloads a cycle ([`backfill_budget`]); the others
//! wait and are answered by the window queries meanwhile. The answers are folded into the
//! [`HistoryStore`] and the window values read back from it, so evaluation is the same.

use std::collections::BTreeMap;

use super::summary::{self, Asked, Coverage, Covered, HistoryStore, Series};
use super::{
    RsSignal, THROTTLED_RATIO, cpu_step_for, rate_window, step_for, window_query, windows,
};
use crate::query::window::{StepQuery, StepSet};
use crate::query::{WindowKey, WorkloadSelector};
use kerf_api::{ResourceMetrics, RightsizingPolicySpec};

/// Workloads per backfill query: a week of steps per pod makes answers large.
pub const BACKFILL_WORKLOADS_PER_QUERY: usize = 25;

/// Workloads whose whole window is read in a cycle of `workloads`: a third of them (at least
/// one), so the warm-up after a first start (or a new leader without the history) is over in
/// three or four cycles. A first reading costs Prometheus about twice a window query per
/// workload (every step's look-back of a range query counts), and the workloads still waiting
/// are answered by the window queries meanwhile: a third keeps a warm-up cycle well under twice
/// a whole-window cycle (docs/performance.md).
pub fn backfill_budget(workloads: usize) -> usize {
    (workloads / 3).max(1)
}

/// Which steps a step query asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// New settled steps (or the whole window): kept.
    New,
    /// The steps too young to be final: counted this cycle only, read again the next.
    Fresh,
    /// New settled steps through `settled`, then the fresh ones: one query for both, split
    /// when answered ([`split_answer`]); Prometheus's cost of a steady cycle is mostly per
    /// query.
    NewThenFresh { settled: i64 },
    /// Steps that left the window: taken out.
    Expired,
}

/// Prometheus answers at most 11,000 points per series: longer intervals are asked in parts.
const MAX_STEPS_PER_QUERY: i64 = 10_000;

/// How a group of workloads of one batch is asked this cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// (namespace, `<Kind>/<name>`) of its workloads.
    pub workloads: Vec<(String, String)>,
    pub cpu: Asked,
    pub memory: Asked,
    /// The grids: (window, step) of CPU and memory, and the history's window.
    pub cpu_grid: (i64, i64),
    pub memory_grid: (i64, i64),
    pub history_window: i64,
    /// The CPU percentile as a quantile.
    pub quantile: f64,
    pub now: i64,
    /// Its workloads' selectors: a pod of the history none selects any more (one selected by
    /// name, deleted) no longer counts, as in the window query. Its batch's, shared with its
    /// queries (`batch_selectors`); none until the batch is planned.
    pub selectors: std::sync::Arc<[WorkloadSelector]>,
}

/// The workloads of `selectors` grouped by what they ask this cycle (the same steps on both
/// grids), each with the indexes of its selectors.
pub fn group_of(
    history: &HistoryStore,
    spec: &RightsizingPolicySpec,
    selectors: &[WorkloadSelector],
    now: i64,
    step_seconds: i64,
) -> Vec<(Group, Vec<usize>)> {
    let (cpu_window, mem_window) = windows(spec);
    let cpu_step = cpu_step_for(cpu_window, step_seconds, rate_window(spec));
    let mem_step = step_for(mem_window, step_seconds);
    let history_window = cpu_window.max(mem_window);
    let mut groups: BTreeMap<String, (Group, Vec<usize>)> = BTreeMap::new();
    for (i, s) in selectors.iter().enumerate() {
        let key = (s.namespace.clone(), s.label());
        let covered = history.covered(&key);
        let cpu = summary::steps_to_ask(covered.map(|c| c.cpu), cpu_window, cpu_step, now);
        let memory = summary::steps_to_ask(covered.map(|c| c.memory), mem_window, mem_step, now);
        // Both grids read from the start when either is.
        let (cpu, memory) = match (cpu, memory) {
            (Asked::Steady { .. }, Asked::Steady { .. }) => (cpu, memory),
            _ => (
                backfill(now, cpu_window, cpu_step),
                backfill(now, history_window, mem_step),
            ),
        };
        let g = groups
            .entry(format!("{cpu:?}{memory:?}"))
            .or_insert_with(|| {
                (
                    Group {
                        workloads: Vec::new(),
                        cpu,
                        memory,
                        cpu_grid: (cpu_window, cpu_step),
                        memory_grid: (mem_window, mem_step),
                        history_window,
                        quantile: spec.resources.cpu.clone().unwrap_or_default().percentile / 100.0,
                        now,
                        selectors: Vec::new().into(),
                    },
                    Vec::new(),
                )
            });
        g.0.workloads.push(key);
        g.1.push(i);
    }
    groups.into_values().collect()
}

/// An answer as the parts it holds: a [`Part::NewThenFresh`] one split at its last settled
/// step into its new and its fresh steps, any other whole.
pub fn split_answer(part: Part, set: StepSet) -> Vec<(Part, StepSet)> {
    let Part::NewThenFresh { settled } = part else {
        return vec![(part, set)];
    };
    let mut fresh = StepSet {
        steps: Vec::new(),
        ..Default::default()
    };
    let mut new = set;
    for pod in &mut new.steps {
        let at = pod.steps.partition_point(|(t, _)| *t <= settled);
        if at < pod.steps.len() {
            fresh.steps.push(crate::query::window::PodSteps {
                key: pod.key.clone(),
                pod: pod.pod.clone(),
                steps: pod.steps.split_off(at),
            });
        }
    }
    new.steps.retain(|p| !p.steps.is_empty());
    vec![(Part::New, new), (Part::Fresh, fresh)]
}

fn backfill(now: i64, window: i64, step: i64) -> Asked {
    summary::steps_to_ask(None, window, step, now)
}

/// `(from, to]` in parts of at most [`MAX_STEPS_PER_QUERY`] steps of `step`.
fn parts(from: i64, to: i64, step: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        let end = (at + MAX_STEPS_PER_QUERY * step).min(to);
        out.push((at, end));
        at = end;
    }
    out
}

impl Group {
    pub fn is_backfill(&self) -> bool {
        matches!(self.cpu, Asked::Backfill { .. })
    }

    /// The step queries of the group over its workloads' selectors: per signal, the new steps
    /// and, steady, the expired ones.
    pub fn queries(
        &self,
        spec: &RightsizingPolicySpec,
        metrics: &ResourceMetrics,
        init_oom: bool,
        now: jiff::Timestamp,
        step_seconds: i64,
    ) -> Vec<(RsSignal, Part, StepQuery)> {
        let mut out = Vec::new();
        let signals = [
            RsSignal::Cpu,
            RsSignal::Throttled,
            RsSignal::Memory,
            RsSignal::OomKilled,
        ];
        let init = init_oom.then_some(RsSignal::InitOomKilled);
        for signal in signals.into_iter().chain(init) {
            let window = window_query(
                signal,
                spec,
                metrics,
                self.selectors.clone(),
                now,
                step_seconds,
            );
            let asked = match signal {
                RsSignal::Cpu | RsSignal::Throttled => self.cpu,
                _ => self.memory,
            };
            let step = |(from, to): (i64, i64), part| {
                let mut w = window.clone();
                // Memory and the OOM kills on the memory grid (their window's step).
                w.step_seconds = match signal {
                    RsSignal::Cpu | RsSignal::Throttled => self.cpu_grid.1,
                    _ => self.memory_grid.1,
                };
                (
                    signal,
                    part,
                    StepQuery {
                        window: w,
                        from,
                        to,
                    },
                )
            };
            // An OOM kill is remembered by its last step: nothing to take out.
            let expires = matches!(
                signal,
                RsSignal::Cpu | RsSignal::Throttled | RsSignal::Memory
            );
            let grid = match signal {
                RsSignal::Cpu | RsSignal::Throttled => self.cpu_grid.1,
                _ => self.memory_grid.1,
            };
            let (new, fresh, expired) = match asked {
                Asked::Backfill { from, to, fresh } => ((from, to), (to, fresh), None),
                Asked::Steady {
                    new,
                    fresh,
                    expired,
                } => (new, (new.1, fresh), Some(expired).filter(|_| expires)),
            };
            let new_parts = parts(new.0, new.1, grid);
            match new_parts.split_last() {
                Some((last, rest)) => {
                    for range in rest {
                        out.push(step(*range, Part::New));
                    }
                    let settled = Part::NewThenFresh { settled: last.1 };
                    out.push(step((last.0, fresh.1), settled));
                }
                None => out.push(step(fresh, Part::Fresh)),
            }
            for range in expired.map(|(a, b)| parts(a, b, grid)).unwrap_or_default() {
                out.push(step(range, Part::Expired));
            }
        }
        out
    }

    /// Before its answers: a group reading its whole window starts from nothing.
    pub fn begin(&self, history: &mut HistoryStore) {
        if self.is_backfill() {
            history.forget(&self.workloads);
        }
    }

    /// Folds one answer into `history`: new steps added, expired ones taken out, OOM kills
    /// remembered by their step.
    pub fn fold_answer(
        &self,
        history: &mut HistoryStore,
        signal: RsSignal,
        part: Part,
        set: &StepSet,
    ) {
        let mem_from = self.now - self.memory_grid.0;
        for pod in &set.steps {
            let k = &pod.key;
            let c = history.container(&k.namespace, &k.workload, &k.container);
            let steps = pod.steps.as_slice();
            match (signal, part) {
                (RsSignal::Cpu, Part::New | Part::Fresh) => c.add_all(&pod.pod, Series::Cpu, steps),
                (RsSignal::Throttled, Part::New | Part::Fresh) => {
                    c.add_all(&pod.pod, Series::Throttled, steps);
                    if let Some(&(t, _)) = steps.iter().rev().find(|(_, v)| *v >= THROTTLED_RATIO) {
                        c.throttled_at(t);
                    }
                }
                (RsSignal::Memory, Part::New | Part::Fresh) => {
                    // A backfill reads the working set over the history's window: the steps
                    // before the memory window only say since when there is history.
                    let (before, within): (Vec<(i64, f64)>, Vec<_>) = steps
                        .iter()
                        .partition(|&&(t, _)| part == Part::New && t <= mem_from);
                    c.seen_at_all(&pod.pod, &before);
                    c.add_all(&pod.pod, Series::Memory, &within);
                }
                (RsSignal::Cpu | RsSignal::Throttled | RsSignal::Memory, Part::Expired) => {
                    let series = match signal {
                        RsSignal::Cpu => Series::Cpu,
                        RsSignal::Throttled => Series::Throttled,
                        _ => Series::Memory,
                    };
                    for &(_, v) in steps {
                        c.remove(&pod.pod, series, v);
                    }
                }
                (RsSignal::OomKilled | RsSignal::InitOomKilled, Part::New | Part::Fresh) => {
                    for &(t, v) in steps {
                        if v > 0.0 {
                            c.oom_at(t);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Takes a [`Part::Fresh`] answer out again once the cycle's values are read: its steps are
    /// read again, settled, the next cycle.
    pub fn unfold_fresh(&self, history: &mut HistoryStore, signal: RsSignal, set: &StepSet) {
        let series = match signal {
            RsSignal::Cpu => Series::Cpu,
            RsSignal::Throttled => Series::Throttled,
            RsSignal::Memory => Series::Memory,
            _ => return,
        };
        for pod in &set.steps {
            let k = &pod.key;
            let key = (k.namespace.clone(), k.workload.clone());
            if let Some(c) = history
                .workloads
                .get_mut(&key)
                .and_then(|w| w.containers.get_mut(&k.container))
            {
                for &(_, v) in &pod.steps {
                    c.remove(&pod.pod, series, v);
                }
            }
        }
    }

    /// Once every answer is folded: what each grid of the group's workloads now covers.
    pub fn cover(&self, history: &mut HistoryStore) {
        let (cpu_window, cpu_step) = self.cpu_grid;
        let (mem_window, mem_step) = self.memory_grid;
        let covered = Covered {
            cpu: Coverage {
                window_seconds: cpu_window,
                step_seconds: cpu_step,
                since: self.now - cpu_window,
                through: self.cpu.through(),
            },
            memory: Coverage {
                window_seconds: mem_window,
                step_seconds: mem_step,
                since: self.now - mem_window,
                through: self.memory.through(),
            },
        };
        for w in &self.workloads {
            history.workloads.entry(w.clone()).or_default().covered = Some(covered);
        }
    }

    /// The window values of the group's workloads, as the window queries would answer them,
    /// by signal.
    pub fn values(&self, history: &mut HistoryStore) -> Vec<(RsSignal, WindowKey, f64)> {
        let history_from = self.now - self.history_window;
        let mem_step = self.memory_grid.1;
        let first_step = (history_from.div_euclid(mem_step) + 1) * mem_step;
        let oom_from = self.now - self.memory_grid.0;
        let cpu_from = self.now - self.cpu_grid.0;
        let owners = self.owners();
        let mut out = Vec::new();
        for key in &self.workloads {
            let Some(kept) = history.workloads.get_mut(key) else {
                continue;
            };
            let (ns, w) = key;
            for (container, c) in kept.containers.iter_mut() {
                if let Some(owners) = &owners {
                    c.pods
                        .retain(|pod, _| owners.workload(ns, pod).as_deref() == Some(w.as_str()));
                }
                c.forget_before(history_from);
                let key = WindowKey {
                    namespace: ns.clone(),
                    workload: w.clone(),
                    container: container.clone(),
                };
                let mut put = |signal, v: Option<f64>| {
                    if let Some(v) = v {
                        out.push((signal, key.clone(), v));
                    }
                };
                put(RsSignal::Cpu, c.cpu_quantile(self.quantile));
                put(RsSignal::Memory, c.memory_peak());
                put(RsSignal::Throttled, c.throttled_peak());
                let throttled = c.throttled_steps(THROTTLED_RATIO);
                put(RsSignal::ThrottledFor, throttled.map(|n| n as f64));
                put(
                    RsSignal::ThrottledAt,
                    c.throttled_since(cpu_from).map(|t| t as f64),
                );
                put(
                    RsSignal::History,
                    c.first_seen(history_from, first_step).map(|t| t as f64),
                );
                put(
                    RsSignal::OomKilled,
                    c.oom_killed_since(oom_from).map(|t| t as f64),
                );
            }
            kept.containers
                .retain(|_, c| !c.pods.is_empty() || c.last_oom.is_some_and(|t| t > oom_from));
            // Held for days: no room kept for pods that came and went.
            kept.containers.shrink_to_fit();
            for (_, c) in kept.containers.iter_mut() {
                c.pods.shrink_to_fit();
            }
        }
        out
    }

    /// Which workload each pod belongs to, as the group's queries select them.
    fn owners(&self) -> Option<crate::query::window::PodOwners> {
        let q = crate::query::WindowQuery {
            metric: String::new(),
            aggregate: crate::query::WindowAggregate::Peak,
            matchers: Vec::new(),
            namespace_label: String::new(),
            pod_label: String::new(),
            container_label: String::new(),
            workloads: self.selectors.clone(),
            at: jiff::Timestamp::UNIX_EPOCH,
            window_seconds: 1,
            step_seconds: 1,
            rate_seconds: 1,
        };
        crate::query::window::PodOwners::new(&q).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::window::PodSteps;

    #[test]
    fn split_answer_parts_settled_from_fresh_steps() {
        let pod = |name: &str, steps: Vec<(i64, f64)>| PodSteps {
            key: crate::query::WindowKey {
                namespace: "shop".into(),
                workload: "Deployment/web".into(),
                container: "app".into(),
            },
            pod: name.into(),
            steps,
        };
        let set = StepSet {
            steps: vec![
                pod("a", vec![(60, 1.0), (120, 2.0), (180, 3.0)]),
                pod("b", vec![(180, 4.0)]),
            ],
            ..Default::default()
        };
        let parts = split_answer(Part::NewThenFresh { settled: 120 }, set.clone());
        assert_eq!(parts[0].0, Part::New);
        assert_eq!(parts[0].1.steps, [pod("a", vec![(60, 1.0), (120, 2.0)])]);
        assert_eq!(parts[1].0, Part::Fresh);
        assert_eq!(
            parts[1].1.steps,
            [pod("a", vec![(180, 3.0)]), pod("b", vec![(180, 4.0)])]
        );
        // Any other part is left whole.
        assert_eq!(
            split_answer(Part::Expired, set.clone()),
            [(Part::Expired, set)]
        );
    }

    #[test]
    fn backfill_budget_reads_a_third_of_the_workloads_a_cycle() {
        // The default fleet: four cycles (8,333 + 8,333 + 8,333 + 1).
        assert_eq!(backfill_budget(25_000), 8_333);
        assert_eq!(backfill_budget(250), 83);
        assert_eq!(backfill_budget(2), 1);
        assert_eq!(backfill_budget(0), 1);
    }
}
