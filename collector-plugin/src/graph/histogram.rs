//! Latency histograms with the servicegraph connector's default buckets.

use serde::{Deserialize, Serialize};

/// The OpenTelemetry Collector servicegraph connector's default latency buckets, in seconds.
pub const DEFAULT_BUCKETS: [f64; 16] = [
    0.002, 0.004, 0.006, 0.008, 0.01, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.4, 2.0, 5.0, 10.0, 15.0,
];

/// A cumulative-on-export latency histogram over [`DEFAULT_BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Non-cumulative counts per bucket; the last slot counts values above the largest bound.
    pub counts: [u64; DEFAULT_BUCKETS.len() + 1],
    /// Sum of observed values, seconds.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
    /// Largest observed value, seconds.
    pub max: f64,
}

impl Histogram {
    /// Records one observation in seconds (negative and NaN values count as 0).
    pub fn observe(&mut self, seconds: f64) {
        let v = if seconds.is_finite() && seconds > 0.0 {
            seconds
        } else {
            0.0
        };
        let slot = DEFAULT_BUCKETS
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(DEFAULT_BUCKETS.len());
        self.counts[slot] += 1;
        self.sum += v;
        self.count += 1;
        if v > self.max {
            self.max = v;
        }
    }

    /// Adds another histogram's observations to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
        self.max = self.max.max(other.max);
    }

    /// Mean in seconds, 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1), in seconds; the maximum for the overflow
    /// bucket.
    pub fn quantile_upper_bound(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return DEFAULT_BUCKETS.get(i).copied().unwrap_or(self.max);
            }
        }
        self.max
    }
}

impl From<&Histogram> for crate::views::Latency {
    fn from(h: &Histogram) -> Self {
        crate::views::Latency {
            count: h.count,
            mean_s: h.mean(),
            p50_s: h.quantile_upper_bound(0.5),
            p99_s: h.quantile_upper_bound(0.99),
            max_s: h.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_quantiles() {
        let mut h = Histogram::default();
        for v in [0.001, 0.003, 0.003, 0.09, 20.0] {
            h.observe(v);
        }
        assert_eq!(h.count, 5);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[1], 2);
        assert_eq!(h.counts[6], 1);
        assert_eq!(h.counts[16], 1);
        assert_eq!(h.quantile_upper_bound(0.5), 0.004);
        assert_eq!(h.quantile_upper_bound(1.0), 20.0);
        let mut g = Histogram::default();
        g.observe(f64::NAN);
        g.merge(&h);
        assert_eq!(g.count, 6);
        assert_eq!(g.counts[0], 2);
    }
}
