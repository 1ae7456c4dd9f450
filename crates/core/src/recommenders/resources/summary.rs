//! The CPU/memory usage history kept between cycles (docs/metrics.md#incremental-history): per
//! (workload, container) and pod, the values the window queries aggregate — the CPU usage rate,
//! the working set, the throttled share at every grid step — folded into histograms as they
//! arrive, and taken out again when their step leaves the window. A steady cycle then asks the
//! metric source only for the steps since the last one and for the steps that just left the
//! window, instead of the whole window.
//! The values are held in [`Histogram`]s (`histogram.rs`).

use crate::hash::HashMap;
use kerf_support::small_map::SmallMap;

use super::histogram::Histogram;

/// Which of a pod's values a step carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Series {
    /// The CPU usage rate (cores).
    Cpu,
    /// The working set (bytes); its first and last steps are also the history's.
    Memory,
    /// The throttled share of CFS periods.
    Throttled,
}

/// One pod's values in one container.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PodHistory {
    pub cpu: Histogram,
    pub memory: Histogram,
    pub throttled: Histogram,
    /// The first and last grid steps with a working-set value (unix seconds).
    pub first_seen: Option<i64>,
    pub last_seen: Option<i64>,
}

impl PodHistory {
    fn histogram(&mut self, s: Series) -> &mut Histogram {
        match s {
            Series::Cpu => &mut self.cpu,
            Series::Memory => &mut self.memory,
            Series::Throttled => &mut self.throttled,
        }
    }

    fn is_empty(&self) -> bool {
        self.cpu.is_empty()
            && self.memory.is_empty()
            && self.throttled.is_empty()
            && self.last_seen.is_none()
    }
}

/// One container of a workload: its pods' histories and the last step an OOM kill showed.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContainerHistory {
    /// One to a few pods: a sorted vector, not a tree (docs/performance.md).
    pub pods: SmallMap<String, PodHistory>,
    /// The last grid step at which kube-state-metrics reported an OOM kill as one of the
    /// container's last terminations.
    pub last_oom: Option<i64>,
    /// The last grid step at which one of its pods was throttled (at least the throttling
    /// ratio): when the throttling floor's reason says it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_throttled: Option<i64>,
}

impl ContainerHistory {
    /// Adds the value of `series` a pod had at grid step `at`.
    pub fn add(&mut self, pod: &str, series: Series, at: i64, v: f64) {
        if series == Series::Memory {
            self.seen(pod, at);
        }
        let p = self.pods.entry(pod.to_string()).or_default();
        p.histogram(series).add(v);
    }

    /// Adds the values of `series` a pod had at the grid steps of `steps`.
    pub fn add_all(&mut self, pod: &str, series: Series, steps: &[(i64, f64)]) {
        if steps.is_empty() {
            return;
        }
        if series == Series::Memory {
            self.seen_at_all(pod, steps);
        }
        let p = self.pods.entry(pod.to_string()).or_default();
        p.histogram(series).add_all(steps.iter().map(|&(_, v)| v));
    }

    /// [`Self::seen`] at every step of `steps`: only the first and the last move anything.
    pub fn seen_at_all(&mut self, pod: &str, steps: &[(i64, f64)]) {
        let first = steps.iter().map(|&(t, _)| t).min();
        let last = steps.iter().map(|&(t, _)| t).max();
        for at in first.into_iter().chain(last) {
            self.seen(pod, at);
        }
    }

    /// Records that a pod had a working set at grid step `at`, before the memory window (the
    /// history's start only).
    pub fn seen(&mut self, pod: &str, at: i64) {
        let p = self.pods.entry(pod.to_string()).or_default();
        p.first_seen = Some(p.first_seen.map_or(at, |f| f.min(at)));
        p.last_seen = Some(p.last_seen.map_or(at, |l| l.max(at)));
    }

    /// Takes out the value of `series` a pod had at a step that left the window.
    pub fn remove(&mut self, pod: &str, series: Series, v: f64) {
        if let Some(p) = self.pods.get_mut(pod) {
            p.histogram(series).remove(v);
        }
    }

    /// Records an OOM kill seen at grid step `at`.
    pub fn oom_at(&mut self, at: i64) {
        self.last_oom = Some(self.last_oom.map_or(at, |l| l.max(at)));
    }

    /// A pod was throttled at grid step `at`.
    pub fn throttled_at(&mut self, at: i64) {
        self.last_throttled = Some(self.last_throttled.map_or(at, |l| l.max(at)));
    }

    /// Drops the pods with nothing left: no value in any window, no working set since
    /// `history_from` (the start of the longest window).
    pub fn forget_before(&mut self, history_from: i64) {
        self.pods.retain(|_, p| {
            if p.last_seen.is_some_and(|l| l <= history_from) {
                p.first_seen = None;
                p.last_seen = None;
            }
            !p.is_empty()
        });
    }

    /// The window answers' CPU value: the highest of the pods' `φ` quantiles.
    pub fn cpu_quantile(&self, phi: f64) -> Option<f64> {
        highest(self.pods.values().filter_map(|p| p.cpu.quantile(phi)))
    }

    /// The highest working set of any pod.
    pub fn memory_peak(&self) -> Option<f64> {
        highest(self.pods.values().filter_map(|p| p.memory.max()))
    }

    /// The highest throttled share of any pod.
    pub fn throttled_peak(&self) -> Option<f64> {
        highest(self.pods.values().filter_map(|p| p.throttled.max()))
    }

    /// The earliest grid step with a working set in the window starting after `from` (the
    /// first grid step after it, `first_step`, for a pod seen before it).
    pub fn first_seen(&self, from: i64, first_step: i64) -> Option<i64> {
        self.pods
            .values()
            .filter(|p| p.last_seen.is_some_and(|l| l > from))
            .filter_map(|p| p.first_seen.map(|f| if f <= from { first_step } else { f }))
            .min()
    }

    /// The last step after `from` at which an OOM kill was seen.
    pub fn oom_killed_since(&self, from: i64) -> Option<i64> {
        self.last_oom.filter(|l| *l > from)
    }

    /// The last step after `from` at which a pod was throttled.
    pub fn throttled_since(&self, from: i64) -> Option<i64> {
        self.last_throttled.filter(|l| *l > from)
    }

    /// The most steps any pod spent throttled (a throttled share at least `ratio`), if any.
    pub fn throttled_steps(&self, ratio: f64) -> Option<u64> {
        let most = self
            .pods
            .values()
            .map(|p| p.throttled.count_at_least(ratio))
            .max()?;
        (most > 0).then_some(most)
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.pods.heap_bytes()
            + self
                .pods
                .iter()
                .map(|(name, p)| {
                    name.capacity()
                        + p.cpu.heap_bytes()
                        + p.memory.heap_bytes()
                        + p.throttled.heap_bytes()
                })
                .sum::<usize>()
    }
}

fn highest(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.reduce(f64::max)
}

/// The grid a workload's history was folded on, and how far: it holds the steps in
/// `(since, through]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Coverage {
    pub window_seconds: i64,
    pub step_seconds: i64,
    /// The window's lower edge at the last cycle (`now − window`, unix seconds).
    pub since: i64,
    /// The last grid step folded in (unix seconds).
    pub through: i64,
}

/// How long after its time a step's value is taken as final: the last scrapes of its rate
/// window may still be on their way (scrape duration, remote-write lag). Younger steps are read
/// every cycle and counted for that cycle only.
pub const SETTLE_SECONDS: i64 = 300;

/// What the steps to ask next are for one grid: the new ones and the ones that left the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Nothing is folded on this grid yet (or on another grid): the whole window, `(from, to]`
    /// kept, `(to, fresh]` counted this cycle only.
    Backfill { from: i64, to: i64, fresh: i64 },
    /// The steps in `new` kept, `(new.1, fresh]` counted this cycle only, and those in
    /// `expired` (which left the window since the last cycle) taken out.
    Steady {
        new: (i64, i64),
        fresh: i64,
        expired: (i64, i64),
    },
}

impl Asked {
    /// The last step kept after this cycle.
    pub fn through(self) -> i64 {
        match self {
            Asked::Backfill { to, .. } | Asked::Steady { new: (_, to), .. } => to,
        }
    }
}

/// What a cycle at `now` asks on a grid of `step` over `window`, given what is folded.
/// Intervals are left-open, right-closed in unix seconds, as the window query's
/// `(now − window, now]`: the steps kept are those settled ([`SETTLE_SECONDS`]); the others, up
/// to `now`, are read again every cycle.
pub fn steps_to_ask(folded: Option<Coverage>, window: i64, step: i64, now: i64) -> Asked {
    let fresh = now.div_euclid(step) * step;
    let settled = (now - SETTLE_SECONDS).div_euclid(step) * step;
    let from = now - window;
    match folded {
        Some(c)
            if c.window_seconds == window
                && c.step_seconds == step
                && c.through <= settled
                && c.since <= from
                && from - c.since < window =>
        {
            Asked::Steady {
                new: (c.through, settled),
                fresh,
                expired: (c.since, from),
            }
        }
        _ => Asked::Backfill {
            from,
            to: settled,
            fresh,
        },
    }
}

/// What a workload's two grids cover: the CPU grid (CPU, throttling) and the memory grid
/// (working set, OOM kills, history).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Covered {
    pub cpu: Coverage,
    pub memory: Coverage,
}

/// One workload's history: its containers', and what its grids cover once a cycle folded
/// every answer for it (until then it is being read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeptWorkload {
    pub covered: Option<Covered>,
    /// By container name.
    pub containers: SmallMap<String, ContainerHistory>,
}

/// Every workload's history, by (namespace, `<Kind>/<name>`): a cycle's group reaches its own
/// workloads without going through the others'.
#[derive(Clone, Debug, Default)]
pub struct HistoryStore {
    pub workloads: HashMap<(String, String), KeptWorkload>,
    /// What the history was read with (GlobalConfiguration `resourceMetrics`, as JSON): other
    /// metric names or matchers make it another history.
    pub source: Option<String>,
}

impl HistoryStore {
    /// Bytes held by the histories (their pods and bins).
    pub fn heap_bytes(&self) -> usize {
        self.workloads
            .iter()
            .map(|((ns, w), k)| {
                ns.capacity()
                    + w.capacity()
                    + std::mem::size_of::<KeptWorkload>()
                    + k.containers.heap_bytes()
                    + k.containers
                        .iter()
                        .map(|(c, h)| c.capacity() + h.heap_bytes())
                        .sum::<usize>()
            })
            .sum()
    }

    /// What a workload's grids cover, once read.
    pub fn covered(&self, key: &(String, String)) -> Option<Covered> {
        self.workloads.get(key)?.covered
    }

    /// How many workloads are read (their grids covered).
    pub fn covered_workloads(&self) -> usize {
        self.workloads
            .values()
            .filter(|k| k.covered.is_some())
            .count()
    }

    /// A container's history, new if there is none.
    pub fn container(
        &mut self,
        namespace: &str,
        workload: &str,
        container: &str,
    ) -> &mut ContainerHistory {
        self.workloads
            .entry((namespace.to_string(), workload.to_string()))
            .or_default()
            .containers
            .entry(container.to_string())
            .or_default()
    }

    /// Keeps the history only if it was read with `source` (the `resourceMetrics` now); else
    /// starts over with it.
    pub fn keep_source(&mut self, source: &str) {
        if self.source.as_deref() != Some(source) {
            *self = HistoryStore {
                source: Some(source.to_string()),
                ..Default::default()
            };
        }
    }

    /// Forgets `workloads` (read from the start next time).
    pub fn forget(&mut self, workloads: &[(String, String)]) {
        for w in workloads {
            self.workloads.remove(w);
        }
    }

    /// Forgets every workload not in `keep` (deleted, or no longer covered by a policy).
    pub fn retain_workloads(&mut self, keep: &crate::hash::HashSet<(String, String)>) {
        self.workloads.retain(|k, _| keep.contains(k));
    }
}

/// One workload's history as a checkpoint keeps it (borrowed from the store when written).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkloadHistory<'a> {
    pub namespace: std::borrow::Cow<'a, str>,
    /// `<Kind>/<name>`.
    pub workload: std::borrow::Cow<'a, str>,
    pub cpu: Coverage,
    pub memory: Coverage,
    /// By container name.
    pub containers: std::borrow::Cow<'a, SmallMap<String, ContainerHistory>>,
}

/// The format of a checkpoint's content; another one is not read (the windows are read again).
pub const CHECKPOINT_VERSION: u32 = 2;

/// A part of the history, as written to the cluster (docs/metrics.md#incremental-history).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    /// [`HistoryStore::source`].
    #[serde(default)]
    pub source: Option<String>,
    pub workloads: Vec<WorkloadHistory<'static>>,
}

impl HistoryStore {
    /// Every workload whose grids are covered, in (namespace, workload) order, borrowed.
    pub fn workload_histories(&self) -> Vec<WorkloadHistory<'_>> {
        let mut out: Vec<WorkloadHistory<'_>> = self
            .workloads
            .iter()
            .filter_map(|((ns, w), k)| {
                let covered = k.covered?;
                Some(WorkloadHistory {
                    namespace: ns.into(),
                    workload: w.into(),
                    cpu: covered.cpu,
                    memory: covered.memory,
                    containers: std::borrow::Cow::Borrowed(&k.containers),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.workload).cmp(&(&b.namespace, &b.workload)));
        out
    }

    /// Adds the workloads of a checkpoint (a workload already here is replaced).
    pub fn restore(&mut self, checkpoint: Checkpoint) {
        if checkpoint.version != CHECKPOINT_VERSION {
            return;
        }
        match (&self.source, &checkpoint.source) {
            (None, Some(_)) => self.source = checkpoint.source.clone(),
            (a, b) if a != b => return,
            _ => {}
        }
        for w in checkpoint.workloads {
            self.workloads.insert(
                (w.namespace.into_owned(), w.workload.into_owned()),
                KeptWorkload {
                    covered: Some(Covered {
                        cpu: w.cpu,
                        memory: w.memory,
                    }),
                    containers: w.containers.into_owned(),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommenders::resources::histogram::RELATIVE_ERROR;

    #[test]
    fn steps_to_ask_backfills_then_asks_new_and_expired_steps() {
        // A window that is no multiple of the step (7 days on a 61-s grid, 46 s over).
        let (w, s) = (604_800, 61);
        let now = 1_767_225_600;
        let settled = (now - SETTLE_SECONDS).div_euclid(s) * s;
        let fresh = now.div_euclid(s) * s;
        assert_eq!(
            steps_to_ask(None, w, s, now),
            Asked::Backfill {
                from: now - w,
                to: settled,
                fresh
            }
        );
        let c = Coverage {
            window_seconds: w,
            step_seconds: s,
            since: now - w,
            through: settled,
        };
        let later = now + 60;
        let later_settled = (later - SETTLE_SECONDS).div_euclid(s) * s;
        assert_eq!(
            steps_to_ask(Some(c), w, s, later),
            Asked::Steady {
                new: (settled, later_settled),
                fresh: later.div_euclid(s) * s,
                expired: (now - w, later - w)
            },
            "what left the window is (now − w, later − w]: the steps the window query no longer has"
        );
        // Another window or step, or a gap longer than the window: the whole window again.
        for other in [
            Coverage {
                window_seconds: 3600,
                ..c
            },
            Coverage {
                step_seconds: 30,
                ..c
            },
            Coverage {
                since: now - 3 * w,
                through: settled - 2 * w,
                ..c
            },
        ] {
            assert!(matches!(
                steps_to_ask(Some(other), w, s, later),
                Asked::Backfill { .. }
            ));
        }
    }

    #[test]
    fn container_history_takes_the_highest_pod_and_forgets_pods_gone_from_every_window() {
        let mut c = ContainerHistory::default();
        for (t, v) in [(60, 0.2), (120, 0.3), (180, 0.4)] {
            c.add("old", Series::Cpu, t, v);
            c.add("old", Series::Memory, t, 100.0);
        }
        for (t, v) in [(240, 0.9), (300, 1.0)] {
            c.add("new", Series::Cpu, t, v);
            c.add("new", Series::Memory, t, 50.0);
        }
        let q = c.cpu_quantile(1.0).unwrap();
        assert!((q - 1.0).abs() <= RELATIVE_ERROR);
        assert!((c.memory_peak().unwrap() - 100.0).abs() <= 100.0 * RELATIVE_ERROR);
        assert_eq!(c.first_seen(0, 60), Some(60));
        assert_eq!(c.first_seen(100, 120), Some(120), "seen before the window");
        assert_eq!(c.first_seen(200, 240), Some(240), "old's last step left it");
        c.oom_at(120);
        assert_eq!(
            (c.oom_killed_since(60), c.oom_killed_since(120)),
            (Some(120), None)
        );
        for (t, v) in [(60, 0.2), (120, 0.3), (180, 0.4)] {
            let _ = t;
            c.remove("old", Series::Cpu, v);
            c.remove("old", Series::Memory, 100.0);
        }
        c.forget_before(200);
        assert_eq!(c.pods.keys().collect::<Vec<_>>(), ["new"]);
        assert!((c.memory_peak().unwrap() - 50.0).abs() <= 50.0 * RELATIVE_ERROR);
    }
}
