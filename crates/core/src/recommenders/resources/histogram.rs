//! A histogram of one series' values over a window (the CPU usage rate, the working set, the
//! throttled share of one pod at every grid step): it holds up to [`EXACT_VALUES`] distinct
//! values exactly, then in logarithmic bins [`BIN_RATIO`] apart, answering with each bin's
//! geometric middle: every value it gives is within [`RELATIVE_ERROR`] of a value it was given.
//! Quantiles interpolate between ranks as Prometheus's `quantile_over_time` does, so a
//! percentile read here is within that error of the exact one over the same steps.

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
}
