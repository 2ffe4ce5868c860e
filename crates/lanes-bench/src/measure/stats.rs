//! Latency statistics (exact percentiles from all samples) and histograms.

use serde::{Deserialize, Serialize};

/// Summary of a set of latencies, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LatencySummary {
    pub avg: f64,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub samples: usize,
}

impl LatencySummary {
    /// Summarises `ns` (sorted in place).
    pub fn from_samples(ns: &mut [f64]) -> Self {
        if ns.is_empty() {
            return Self::default();
        }
        ns.sort_by(|a, b| a.total_cmp(b));
        // Nearest rank: the smallest sample with at least p% of the samples at or below it.
        let pct = |p: f64| {
            let rank = ((p / 100.0) * ns.len() as f64).ceil() as usize;
            ns[rank.clamp(1, ns.len()) - 1]
        };
        LatencySummary {
            avg: ns.iter().sum::<f64>() / ns.len() as f64,
            min: ns[0],
            p50: pct(50.0),
            p99: pct(99.0),
            p999: pct(99.9),
            max: ns[ns.len() - 1],
            samples: ns.len(),
        }
    }

    /// Every figure scaled by `f` (one-way = round trip / 2).
    pub fn scaled(&self, f: f64) -> Self {
        LatencySummary {
            avg: self.avg * f,
            min: self.min * f,
            p50: self.p50 * f,
            p99: self.p99 * f,
            p999: self.p999 * f,
            max: self.max * f,
            samples: self.samples,
        }
    }
}

/// Counts of samples per latency bucket; bucket edges run 1-2-5 per decade.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Histogram {
    /// (upper edge in ns, count); the last bucket's edge is infinite (f64::MAX).
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    pub fn from_samples(ns: &[f64]) -> Self {
        Self::from_weighted(ns.iter().map(|&v| (v, 1)))
    }

    /// From (value in ns, how many times it occurred) pairs.
    pub fn from_weighted(values: impl IntoIterator<Item = (f64, u64)>) -> Self {
        let mut edges = Vec::new();
        let mut decade = 10.0;
        while decade <= 1e10 {
            for m in [1.0, 2.0, 5.0] {
                edges.push(decade * m);
            }
            decade *= 10.0;
        }
        edges.push(f64::MAX);
        let mut counts = vec![0u64; edges.len()];
        for (v, n) in values {
            let i = edges.partition_point(|&e| e < v);
            counts[i.min(edges.len() - 1)] += n;
        }
        // Trim empty buckets at both ends.
        let first = counts.iter().position(|&c| c > 0).unwrap_or(0);
        let last = counts.iter().rposition(|&c| c > 0).unwrap_or(0);
        Histogram { buckets: edges[first..=last].iter().copied().zip(counts[first..=last].iter().copied()).collect() }
    }

    /// A text rendering with bars, one bucket per line.
    pub fn render(&self, indent: &str) -> String {
        let total: u64 = self.buckets.iter().map(|b| b.1).sum();
        let peak = self.buckets.iter().map(|b| b.1).max().unwrap_or(1).max(1);
        let mut out = String::new();
        let mut lower = 0.0;
        for &(edge, count) in &self.buckets {
            let bar = "#".repeat(((count as f64 / peak as f64) * 40.0).ceil() as usize);
            let upper = if edge == f64::MAX { "inf".to_string() } else { fmt_ns(edge) };
            out.push_str(&format!(
                "{indent}{:>9} - {:>9}  {:>10}  {:>6.2}%  {bar}\n",
                fmt_ns(lower),
                upper,
                count,
                100.0 * count as f64 / total.max(1) as f64
            ));
            lower = edge;
        }
        out
    }
}

/// Formats nanoseconds with a unit that keeps 3-4 significant digits.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.2} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_histogram() {
        let mut v: Vec<f64> = (1..=1000).map(|i| i as f64).collect();
        let s = LatencySummary::from_samples(&mut v);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 1000.0);
        assert_eq!(s.p50, 500.0);
        assert_eq!(s.p99, 990.0);
        assert!((s.avg - 500.5).abs() < 1e-9);
        let h = Histogram::from_samples(&v);
        assert_eq!(h.buckets.iter().map(|b| b.1).sum::<u64>(), 1000);
        assert_eq!(h.buckets[0], (10.0, 10));
        assert!(h.render("").contains("10 ns"));
    }
}
