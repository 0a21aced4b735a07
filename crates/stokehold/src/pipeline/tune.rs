//! The autotuner: working threads and prefetch depth, decided on the consumer's thread from the
//! waits of the consumer and the workers.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::pipeline::run::Run;
use crate::pipeline::{Core, MAX_AUTO_PREFETCH};
use crate::stats::Collector;

/// The autotuner's window: consumer and worker waits since the last decision.
#[derive(Debug)]
pub(crate) struct Tuner {
    since: Instant,
    batches: u32,
    consumer_wait: u64,
    worker_wait: u64,
}

impl Tuner {
    pub(crate) fn new(stats: &Collector) -> Tuner {
        Tuner {
            since: Instant::now(),
            batches: 0,
            consumer_wait: stats.consumer_wait.load(Ordering::Relaxed),
            worker_wait: stats.worker_wait.load(Ordering::Relaxed),
        }
    }

    /// One decision every few batches (at least 100 ms apart). When the consumer waited for data
    /// more than 2% of the window: a deeper prefetch window (`prefetch_auto`) if the workers also
    /// sat blocked on the window more than 10% of their time (the window, not the CPU, was the
    /// limit), else one more working thread (`autotune`). One fewer thread when the consumer
    /// (almost) never waited and the workers spent over half their time blocked on a full
    /// window. The depth never exceeds the memory budget over the bytes of a batch.
    pub(crate) fn tune(&mut self, core: &Core, run: &Run, workers: usize) {
        let config = &core.config;
        let depth = core.prefetch.load(Ordering::Relaxed);
        let most = if config.prefetch_auto {
            (core.memory_budget / core.batch_bytes).clamp(1, MAX_AUTO_PREFETCH)
        } else {
            depth
        };
        if depth > most {
            // over the memory budget: shrink to it
            core.prefetch.store(most, Ordering::Relaxed);
        }
        self.batches += 1;
        let dt = self.since.elapsed();
        if self.batches < 4 || dt < Duration::from_millis(100) {
            return;
        }
        let stats = &core.stats;
        let cw = stats.consumer_wait.load(Ordering::Relaxed);
        let ww = stats.worker_wait.load(Ordering::Relaxed);
        let active = core.active.load(Ordering::Relaxed);
        let window = dt.as_nanos() as f64;
        let consumer = (cw - self.consumer_wait) as f64 / window;
        let busy = (ww - self.worker_wait) as f64 / (window * active.max(1) as f64);
        if consumer > 0.02 && config.prefetch_auto && busy > 0.1 && depth < most {
            core.prefetch
                .store((depth * 2).min(most), Ordering::Relaxed);
            run.widen();
        } else if consumer > 0.02 && config.autotune && active < workers {
            core.active.store(active + 1, Ordering::Relaxed);
            run.parked.notify_all();
        } else if consumer < 0.005 && busy > 0.5 && config.autotune && active > 1 {
            core.active.store(active - 1, Ordering::Relaxed);
        }
        *self = Tuner::new(stats);
    }
}
