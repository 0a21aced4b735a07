//! Statistics of a running loader: per stage items and busy time, the workers' waiting, the
//! queue's occupancy and the consumer's wait (the time the training loop was blocked on data,
//! i.e. how idle the accelerator would be).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::cache::CacheStats;

/// One stage's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageStats {
    /// "read", "parse", "image/decode", "write", ...
    pub name: String,
    /// Items processed.
    pub items: u64,
    /// Time spent in it, summed over threads.
    pub busy: Duration,
    /// Median time per item (upper edge of its histogram bucket: within 19%).
    pub p50: Duration,
    /// 99th percentile time per item (same resolution).
    pub p99: Duration,
}

/// Buckets of the per-stage latency histograms: four per power of two of nanoseconds, from 1 ns
/// to about 18 minutes.
const BUCKETS: usize = 160;

fn bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let log = 63 - u64::from(ns.leading_zeros());
    let frac = (ns >> (log - 2)) & 3;
    ((log as usize) * 4 + frac as usize).min(BUCKETS - 1)
}

fn bucket_upper(b: usize) -> u64 {
    if b < 4 {
        return b as u64;
    }
    let (log, frac) = ((b / 4) as u32, (b % 4) as u64);
    (1u64 << log) + ((frac + 1) << (log - 2)) - 1
}

fn quantile(hist: &[AtomicU64], q: f64) -> Duration {
    let total: u64 = hist.iter().map(|h| h.load(Ordering::Relaxed)).sum();
    if total == 0 {
        return Duration::ZERO;
    }
    let want = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (b, h) in hist.iter().enumerate() {
        seen += h.load(Ordering::Relaxed);
        if seen >= want {
            return Duration::from_nanos(bucket_upper(b));
        }
    }
    Duration::ZERO
}

/// A snapshot of a loader's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Each stage, in pipeline order.
    pub stages: Vec<StageStats>,
    /// Batches delivered.
    pub batches: u64,
    /// Samples delivered (padding included).
    pub samples: u64,
    /// Time the consumer spent blocked in `next()` waiting for a batch.
    pub consumer_wait: Duration,
    /// Time workers spent idle because the prefetch queue was full (summed over threads).
    pub worker_wait: Duration,
    /// Mean number of finished batches waiting when the consumer asked for one.
    pub mean_queue: f64,
    /// Ids of samples skipped under the `skip` policy, in the order they were found.
    pub skipped: Vec<u64>,
    /// Worker threads.
    pub threads: usize,
    /// Threads currently working (less than `threads` when autotuning parked some).
    pub active_threads: usize,
    /// The caches in use (RAM cache of records, decoded caches).
    pub caches: Vec<CacheStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_bound_the_value_within_a_quarter_octave() {
        for ns in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            100,
            1000,
            12_345,
            1 << 30,
            987_654_321_000,
        ] {
            let b = bucket(ns);
            assert!(bucket_upper(b) >= ns, "{ns}");
            if ns >= 4 {
                assert!(
                    (bucket_upper(b) as f64) < ns as f64 * 1.26 + 1.0,
                    "{ns} -> {}",
                    bucket_upper(b)
                );
            }
        }
        let hist: Vec<AtomicU64> = (0..BUCKETS).map(|_| AtomicU64::new(0)).collect();
        for ns in 1..=1000u64 {
            hist[bucket(ns * 1000)].fetch_add(1, Ordering::Relaxed);
        }
        let p50 = quantile(&hist, 0.5).as_nanos() as f64;
        let p99 = quantile(&hist, 0.99).as_nanos() as f64;
        assert!((500_000.0..=630_000.0).contains(&p50), "{p50}");
        assert!((990_000.0..=1_250_000.0).contains(&p99), "{p99}");
    }
}

#[derive(Debug)]
pub(crate) struct Collector {
    names: Vec<String>,
    items: Vec<AtomicU64>,
    nanos: Vec<AtomicU64>,
    hist: Vec<Vec<AtomicU64>>,
    pub batches: AtomicU64,
    pub samples: AtomicU64,
    pub consumer_wait: AtomicU64,
    pub worker_wait: AtomicU64,
    queue_sum: AtomicU64,
    queue_n: AtomicU64,
    pub skipped: Mutex<Vec<u64>>,
    threads: usize,
}

impl Collector {
    pub(crate) fn new(names: Vec<String>, threads: usize) -> Collector {
        let n = names.len();
        Collector {
            names,
            items: (0..n).map(|_| AtomicU64::new(0)).collect(),
            nanos: (0..n).map(|_| AtomicU64::new(0)).collect(),
            hist: (0..n)
                .map(|_| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            batches: AtomicU64::new(0),
            samples: AtomicU64::new(0),
            consumer_wait: AtomicU64::new(0),
            worker_wait: AtomicU64::new(0),
            queue_sum: AtomicU64::new(0),
            queue_n: AtomicU64::new(0),
            skipped: Mutex::new(Vec::new()),
            threads,
        }
    }

    #[inline]
    pub(crate) fn add(&self, stage: usize, d: Duration) {
        let ns = d.as_nanos() as u64;
        self.items[stage].fetch_add(1, Ordering::Relaxed);
        self.nanos[stage].fetch_add(ns, Ordering::Relaxed);
        self.hist[stage][bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn queue(&self, len: usize) {
        self.queue_sum.fetch_add(len as u64, Ordering::Relaxed);
        self.queue_n.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        let qn = self.queue_n.load(Ordering::Relaxed);
        Stats {
            stages: self
                .names
                .iter()
                .enumerate()
                .map(|(i, n)| StageStats {
                    name: n.clone(),
                    items: self.items[i].load(Ordering::Relaxed),
                    busy: ns(&self.nanos[i]),
                    p50: quantile(&self.hist[i], 0.5),
                    p99: quantile(&self.hist[i], 0.99),
                })
                .collect(),
            batches: self.batches.load(Ordering::Relaxed),
            samples: self.samples.load(Ordering::Relaxed),
            consumer_wait: ns(&self.consumer_wait),
            worker_wait: ns(&self.worker_wait),
            mean_queue: if qn == 0 {
                0.0
            } else {
                self.queue_sum.load(Ordering::Relaxed) as f64 / qn as f64
            },
            skipped: self.skipped.lock().map(|s| s.clone()).unwrap_or_default(),
            threads: self.threads,
            active_threads: self.threads,
            caches: Vec::new(),
        }
    }
}

impl Stats {
    /// A readable table: each stage's share of busy time and mean time per item, the consumer's
    /// wait and the queue.
    pub fn report(&self) -> String {
        let total: f64 = self
            .stages
            .iter()
            .map(|s| s.busy.as_secs_f64())
            .sum::<f64>()
            .max(1e-12);
        let mut out = String::new();
        out.push_str(&format!(
            "{:<26} {:>9} {:>7} {:>10} {:>10} {:>10}\n",
            "stage", "items", "share", "mean us", "p50 us", "p99 us"
        ));
        for s in &self.stages {
            out.push_str(&format!(
                "{:<26} {:>9} {:>6.1}% {:>10.2} {:>10.2} {:>10.2}\n",
                s.name,
                s.items,
                100.0 * s.busy.as_secs_f64() / total,
                s.busy.as_secs_f64() * 1e6 / s.items.max(1) as f64,
                s.p50.as_secs_f64() * 1e6,
                s.p99.as_secs_f64() * 1e6
            ));
        }
        out.push_str(&format!(
            "batches {} · samples {} · threads {} · consumer waited {:.3} s · workers waited {:.3} s · mean queue {:.2} · skipped {}\n",
            self.batches,
            self.samples,
            self.threads,
            self.consumer_wait.as_secs_f64(),
            self.worker_wait.as_secs_f64(),
            self.mean_queue,
            self.skipped.len()
        ));
        for c in &self.caches {
            out.push_str(&c.report_line());
            out.push('\n');
        }
        out
    }
}
