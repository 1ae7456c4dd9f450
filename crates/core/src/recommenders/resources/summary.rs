//! The CPU/memory usage history kept between cycles (docs/metrics.md#incremental-history): per
//! (workload, container) and pod, the values the window queries aggregate — the CPU usage rate,
//! the working set, the throttled share at every grid step — folded into histograms as they
//! arrive, and taken out again when their step leaves the window. A steady cycle then asks the
//! metric source only for the steps since the last one and for the steps that just left the
//! window, instead of the whole window.
//!
//! A histogram holds up to [`EXACT_VALUES`] distinct values exactly, then in logarithmic bins
//! [`BIN_RATIO`] apart, answering with each bin's geometric middle: every value it gives is
//! within [`RELATIVE_ERROR`] of a value it was given. Quantiles interpolate between ranks as Prometheus's `quantile_over_time` does, so a
//! percentile read here is within that error of the exact one over the same steps.

use crate::hash::HashMap;
use kerf_support::small_map::SmallMap;

/// Successive bin edges differ by this factor.
pub const BIN_RATIO: f64 = 1.01;
/// The largest relative error of a value read from a histogram: half a bin (in log scale).
pub const RELATIVE_ERROR: f64 = 0.005;
/// Values at or below this are counted as zero (an idle container's CPU rate).
const ZERO: f64 = 1e-12;
/// The bin of zero and of anything at or below [`ZERO`].
const ZERO_BIN: i16 = i16::MIN;

/// The bin of `v`.
fn bin_of(v: f64) -> i16 {
    if v <= ZERO || v.is_nan() {
        return ZERO_BIN;
    }
    let b = (v.ln() / BIN_RATIO.ln()).floor();
    b.clamp(f64::from(i16::MIN + 1), f64::from(i16::MAX)) as i16
}

/// The value a bin stands for: its geometric middle.
fn value_of(bin: i16) -> f64 {
    if bin == ZERO_BIN {
        return 0.0;
    }
    BIN_RATIO.powf(f64::from(bin) + 0.5)
}

/// Distinct values a histogram keeps exactly before it bins them: a short window, or a
/// container whose usage takes few values, reads exact percentiles (as the whole-window
/// queries give them); a long, varied one costs at most a few hundred bytes per pod.
pub const EXACT_VALUES: usize = 64;

/// A multiset of values: exact while it holds at most [`EXACT_VALUES`] distinct ones, then in
/// logarithmic bins. Both sorted, without empty entries.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Histogram {
    exact: Vec<(f64, u32)>,
    /// (bin, count): a window holds at most 10,000 steps (`step_for`), so a bin's count fits.
    bins: Vec<(i16, u16)>,
}

impl Histogram {
    /// Binned once it held too many distinct values, until it is empty again.
    fn binned(&self) -> bool {
        !self.bins.is_empty()
    }

    /// Adds `v` once.
    pub fn add(&mut self, v: f64) {
        if !self.binned() {
            match self.exact.binary_search_by(|(x, _)| x.total_cmp(&v)) {
                Ok(i) => self.exact[i].1 += 1,
                Err(i) => self.exact.insert(i, (v, 1)),
            }
            if self.exact.len() > EXACT_VALUES {
                for (x, c) in std::mem::take(&mut self.exact) {
                    self.add_bin(bin_of(x), c);
                }
                self.exact.shrink_to_fit();
            }
            return;
        }
        self.add_bin(bin_of(v), 1);
    }

    /// Adds every value of `values` (one pod's steps of one answer). Into an empty histogram
    /// (a first reading: a week of steps per pod) in one allocation of its final size, instead
    /// of growing it value by value, which left the allocator's pages full of holes between
    /// the long-lived histograms (docs/performance.md).
    pub fn add_all(&mut self, values: impl Iterator<Item = f64>) {
        if !self.is_empty() {
            values.for_each(|v| self.add(v));
            return;
        }
        let mut sorted: Vec<f64> = values.collect();
        sorted.sort_by(f64::total_cmp);
        let runs = |keys: &mut dyn Iterator<Item = u64>| {
            let mut out: Vec<(u64, u32)> = Vec::new();
            for k in keys {
                match out.last_mut() {
                    Some((last, n)) if *last == k => *n += 1,
                    _ => out.push((k, 1)),
                }
            }
            out
        };
        let exact = runs(&mut sorted.iter().map(|v| v.to_bits()));
        if exact.len() <= EXACT_VALUES {
            self.exact = Vec::with_capacity(exact.len());
            self.exact
                .extend(exact.into_iter().map(|(bits, n)| (f64::from_bits(bits), n)));
            return;
        }
        let mut bins: Vec<i16> = sorted.iter().map(|v| bin_of(*v)).collect();
        bins.sort_unstable();
        // Offset so that the bins' order is the keys' order.
        let binned = runs(
            &mut bins
                .iter()
                .map(|b| (i32::from(*b) - i32::from(i16::MIN)) as u64),
        );
        self.bins = Vec::with_capacity(binned.len());
        self.bins.extend(binned.into_iter().map(|(k, n)| {
            let b = (k as i32 + i32::from(i16::MIN)) as i16;
            (b, u16::try_from(n).unwrap_or(u16::MAX))
        }));
    }

    fn add_bin(&mut self, b: i16, count: u32) {
        let count = u16::try_from(count).unwrap_or(u16::MAX);
        match self.bins.binary_search_by_key(&b, |(k, _)| *k) {
            Ok(i) => self.bins[i].1 = self.bins[i].1.saturating_add(count),
            Err(i) => self.bins.insert(i, (b, count)),
        }
    }

    /// Takes `v` out once (a step that left the window); a value never added is ignored.
    pub fn remove(&mut self, v: f64) {
        if !self.binned() {
            if let Ok(i) = self.exact.binary_search_by(|(x, _)| x.total_cmp(&v)) {
                self.exact[i].1 -= 1;
                if self.exact[i].1 == 0 {
                    self.exact.remove(i);
                }
            }
            return;
        }
        let b = bin_of(v);
        if let Ok(i) = self.bins.binary_search_by_key(&b, |(k, _)| *k) {
            self.bins[i].1 = self.bins[i].1.saturating_sub(1);
            if self.bins[i].1 == 0 {
                self.bins.remove(i);
            }
        }
    }

    /// (value, count) in ascending order.
    fn entries(&self) -> impl Iterator<Item = (f64, u32)> + '_ {
        self.exact
            .iter()
            .copied()
            .chain(self.bins.iter().map(|(b, c)| (value_of(*b), u32::from(*c))))
    }

    pub fn count(&self) -> u64 {
        self.entries().map(|(_, c)| u64::from(c)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.bins.is_empty()
    }

    /// The value at `rank` (0-based) of the sorted values.
    fn at_rank(&self, rank: u64) -> f64 {
        let mut seen = 0;
        let mut last = 0.0;
        for (v, c) in self.entries() {
            seen += u64::from(c);
            last = v;
            if rank < seen {
                return v;
            }
        }
        last
    }

    /// `quantile_over_time(φ)` of the values: rank φ × (n − 1), interpolated linearly between
    /// the values at its floor and the next rank (Prometheus `promql/quantile.go`).
    pub fn quantile(&self, phi: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = phi.clamp(0.0, 1.0) * (n - 1) as f64;
        let lower = rank.floor() as u64;
        let upper = (lower + 1).min(n - 1);
        let weight = rank - rank.floor();
        Some(self.at_rank(lower) * (1.0 - weight) + self.at_rank(upper) * weight)
    }

    /// How many values are at least `v` (`count_over_time` of the steps at or above it).
    pub fn count_at_least(&self, v: f64) -> u64 {
        self.entries()
            .filter(|(x, _)| *x >= v)
            .map(|(_, c)| u64::from(c))
            .sum()
    }

    /// `max_over_time` of the values.
    pub fn max(&self) -> Option<f64> {
        self.entries().last().map(|(v, _)| v)
    }

    /// Bytes held (for the memory figure in docs/metrics.md).
    pub fn heap_bytes(&self) -> usize {
        self.exact.capacity() * std::mem::size_of::<(f64, u32)>()
            + self.bins.capacity() * std::mem::size_of::<(i16, u16)>()
    }
}

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

    /// Prometheus's quantile over the exact values, as `metrics::window::quantile`.
    fn exact(phi: f64, values: &[f64]) -> f64 {
        let mut v = values.to_vec();
        crate::query::window::quantile(phi, &mut v).unwrap()
    }

    #[test]
    fn histogram_quantile_is_within_the_relative_error_of_prometheus_quantile() {
        // A CPU-like series: a base with noise, a spike of a few steps, idle steps.
        let mut values: Vec<f64> = (0..5000)
            .map(|i| {
                0.4 + 0.1 * ((i as f64) * 0.37).sin() + 0.02 * ((i * 7919 % 101) as f64) / 101.0
            })
            .collect();
        values.extend([3.5, 3.7, 3.6, 0.0, 0.0]);
        let mut h = Histogram::default();
        for v in &values {
            h.add(*v);
        }
        for phi in [0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0] {
            let (got, want) = (h.quantile(phi).unwrap(), exact(phi, &values));
            assert!(
                (got - want).abs() <= want * RELATIVE_ERROR + 1e-12,
                "φ {phi}: {got} vs {want}"
            );
        }
        let want = values.iter().copied().fold(0.0, f64::max);
        assert!((h.max().unwrap() - want).abs() <= want * RELATIVE_ERROR);
    }

    #[test]
    fn histogram_is_exact_up_to_its_distinct_values_then_binned() {
        let mut h = Histogram::default();
        let few: Vec<f64> = (0..EXACT_VALUES).map(|i| 0.7 + i as f64 * 0.001).collect();
        for v in few.iter().chain(&few) {
            h.add(*v);
        }
        assert_eq!(
            h.quantile(0.95),
            Some(exact(0.95, &[few.clone(), few.clone()].concat()))
        );
        assert_eq!(h.max(), Some(few[EXACT_VALUES - 1]));
        h.add(5.0);
        assert!(h.binned());
        assert!((h.max().unwrap() - 5.0).abs() <= 5.0 * RELATIVE_ERROR);
        assert_eq!(h.count(), 2 * EXACT_VALUES as u64 + 1);
    }

    #[test]
    fn histogram_add_all_is_adding_each_value() {
        let wave = |n: usize| -> Vec<f64> {
            (0..n)
                .map(|i| {
                    0.3 + 0.2 * ((i as f64) * 0.01).sin() + if i % 50 == 0 { 0.0 } else { 1e-3 }
                })
                .collect()
        };
        for values in [
            wave(10_000),
            wave(40),
            vec![0.0, 0.0, 1.5, f64::NAN],
            Vec::new(),
        ] {
            let mut one_by_one = Histogram::default();
            values.iter().for_each(|v| one_by_one.add(*v));
            let mut at_once = Histogram::default();
            at_once.add_all(values.iter().copied());
            assert_eq!(format!("{at_once:?}"), format!("{one_by_one:?}"));
            assert_eq!(
                at_once.exact.capacity(),
                at_once.exact.len(),
                "one allocation"
            );
            assert_eq!(at_once.bins.capacity(), at_once.bins.len());
            // Into a histogram that holds values: the same as adding them one by one.
            at_once.add_all(values.iter().copied());
            values.iter().for_each(|v| one_by_one.add(*v));
            assert_eq!(format!("{at_once:?}"), format!("{one_by_one:?}"));
        }
    }

    #[test]
    fn histogram_remove_takes_out_what_add_put_in() {
        let mut h = Histogram::default();
        for v in [1.0, 2.0, 2.0, 0.0, 5.0] {
            h.add(v);
        }
        for v in [2.0, 0.0, 5.0, 7.0] {
            h.remove(v);
        }
        assert_eq!(h.count(), 2, "7 was never added: ignored");
        assert!((h.max().unwrap() - 2.0).abs() <= 2.0 * RELATIVE_ERROR);
        h.remove(1.0);
        h.remove(2.0);
        assert!(h.is_empty());
        assert_eq!(h.quantile(0.5), None);
    }

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
