//! A latency recorder for the hot loop: a log-linear histogram of clock ticks (HdrHistogram
//! style, 128 sub-buckets per power of two, so any value is kept within 0.8%) plus the exact
//! count, sum, minimum and maximum, and when the maximum happened.
//!
//! Recording is a few instructions and never allocates: the buckets are allocated once,
//! so a run of any length (24 hours included) records every round trip in constant memory.

const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// Every round trip of one measurement, in ticks.
#[derive(Clone, Debug)]
pub struct TickHistogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u64,
    min: u64,
    max: u64,
    max_at: u64,
}

impl Default for TickHistogram {
    fn default() -> Self {
        Self::new()
    }
}

#[inline(always)]
fn index(v: u64) -> usize {
    if v < SUB as u64 {
        v as usize
    } else {
        let m = 63 - v.leading_zeros() - SUB_BITS;
        ((m as usize + 1) << SUB_BITS) + ((v >> m) as usize & (SUB - 1))
    }
}

/// The smallest value and the width of bucket `i`.
fn bucket(i: usize) -> (u64, u64) {
    if i < SUB {
        (i as u64, 1)
    } else {
        let m = (i >> SUB_BITS) as u32 - 1;
        (((SUB + (i & (SUB - 1))) as u64) << m, 1u64 << m)
    }
}

impl TickHistogram {
    pub fn new() -> Self {
        TickHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            max_at: 0,
        }
    }

    /// Records one value; `at` is when (in ticks), kept for the maximum.
    #[inline(always)]
    pub fn record(&mut self, v: u64, at: u64) {
        if let Some(c) = self.counts.get_mut(index(v)) {
            *c += 1;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        if v < self.min {
            self.min = v;
        }
        if v > self.max {
            self.max = v;
            self.max_at = at;
        }
    }

    /// Forgets every value, keeping the buckets' memory.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.max_at = 0;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// When the maximum was recorded (the `at` passed with it).
    pub fn max_at(&self) -> u64 {
        self.max_at
    }

    /// The value below which `p` percent of the values lie (within the bucket precision).
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().clamp(1.0, self.count as f64) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, w) = bucket(i);
                return (lo + (w - 1) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// Non-empty buckets as (representative value, count), in increasing order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| {
            let (lo, w) = bucket(i);
            ((lo + (w - 1) / 2).clamp(self.min, self.max), c)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = None;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let i = index(v);
            assert!(i < BUCKETS, "{v}");
            let (lo, w) = bucket(i);
            assert!(lo <= v && v - lo < w, "{v} in bucket {i} = {lo}+{w}");
            if let Some(l) = last {
                assert!(i >= l);
            }
            last = Some(i);
        }
    }

    #[test]
    fn percentiles_within_precision() {
        let mut h = TickHistogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 10, v);
        }
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.min(), 10);
        assert_eq!(h.max(), 100_000);
        assert_eq!(h.max_at(), 10_000);
        assert!((h.mean() - 50_005.0).abs() < 1e-6);
        for (p, exact) in [(50.0, 50_000.0), (99.0, 99_000.0), (99.9, 99_900.0)] {
            let got = h.percentile(p) as f64;
            assert!((got - exact).abs() / exact < 0.01, "p{p}: {got} vs {exact}");
        }
        h.record(1_000_000, 7);
        assert_eq!(h.max(), 1_000_000);
        assert_eq!(h.max_at(), 7);
        assert_eq!(h.buckets().map(|b| b.1).sum::<u64>(), 10_001);
        h.clear();
        assert!(h.is_empty() && h.max() == 0 && h.percentile(50.0) == 0);
    }
}
