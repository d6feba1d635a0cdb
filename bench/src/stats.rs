//! Percentiles of measured durations.

use std::time::Duration;

/// Sorted samples.
#[derive(Debug, Clone)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// Sorts the samples.
    pub fn new(mut v: Vec<Duration>) -> Self {
        v.sort_unstable();
        Samples(v)
    }

    /// The `p`-th percentile (0..=100), nearest rank.
    pub fn pct(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil() as usize;
        self.0[rank.clamp(1, self.0.len()) - 1]
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        self.0.last().copied().unwrap_or_default()
    }

    /// Count.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Microseconds with one decimal.
pub fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}
