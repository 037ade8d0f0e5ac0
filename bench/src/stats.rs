//! Order statistics and the small random source for interleaving.

use std::time::Duration;

/// Nearest-rank summary of a set of samples.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub n: usize,
    pub median: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut s = samples.to_vec();
        s.sort();
        Summary {
            n: s.len(),
            median: pct(&s, 0.5),
            p90: pct(&s, 0.9),
            p99: pct(&s, 0.99),
            max: s.last().copied().unwrap_or_default(),
        }
    }
}

/// The nearest-rank percentile of sorted samples.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// xorshift64*: enough to shuffle an order and pick delays.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        Rng(t | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0; the tiny modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let sum = Summary::of(&s);
        assert_eq!(sum.median, Duration::from_millis(5));
        assert_eq!(sum.p90, Duration::from_millis(9));
        assert_eq!(sum.p99, Duration::from_millis(10));
        assert_eq!(sum.max, Duration::from_millis(10));
        assert_eq!(Summary::of(&[]).median, Duration::ZERO);
    }

    #[test]
    fn shuffle_keeps_elements() {
        let mut v: Vec<u32> = (0..20).collect();
        Rng::seeded().shuffle(&mut v);
        v.sort();
        assert_eq!(v, (0..20).collect::<Vec<_>>());
    }
}
