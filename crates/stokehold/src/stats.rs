//! Statistics of a running loader: per stage items and busy time, the workers' waiting, the
//! queue's occupancy and the consumer's wait (the time the training loop was blocked on data,
//! i.e. how idle the accelerator would be).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// Bytes of records read (the read stage's input: what the pipeline takes from storage).
    pub bytes_read: u64,
    /// Records read.
    pub records_read: u64,
    /// The prefetch depth now (moved by autotuning when `prefetch_auto` is on).
    pub prefetch: usize,
    /// Whether stage timing was on (`LoaderConfig::profile`); without it the stages' items, busy
    /// time and latencies stay zero.
    pub profiled: bool,
    /// Requests to the object store the dataset is read from (since it was opened; `None` for a
    /// local dataset): retries, failures, bytes, and how the order-aware prefetch fared.
    pub storage: Option<stokehold_storage::remote::RemoteStats>,
    /// The groups of the samples ([`crate::order::Groups`]: a mixture's sources), in order
    /// (empty without groups).
    pub groups: Vec<GroupStats>,
    /// The exposed wait of the last [`WAIT_HISTORY`] steps, oldest first.
    pub waits: Vec<StepWait>,
}

/// Steps whose exposed wait [`Stats::waits`] keeps.
pub const WAIT_HISTORY: usize = 1000;

/// How long the training loop waited for one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct StepWait {
    /// The epoch.
    pub epoch: u64,
    /// The step, counted from the epoch's start across resumes (as `samples_at` counts it).
    pub step: u64,
    /// Time the consumer spent waiting for this batch.
    pub wait: Duration,
    /// Time from the previous batch's delivery to this one's (the step as the loop sees it;
    /// zero for the first batch of an iteration).
    pub step_time: Duration,
    /// The stage that took most worker time since the previous batch (with profiling).
    pub bound: Option<String>,
}

/// What one group of the samples (a mixture's source) gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupStats {
    /// The group's name.
    pub name: String,
    /// Its weight at the loader's position (a fraction of 1).
    pub weight: f64,
    /// Its samples delivered (padding included, as the loader's `samples`).
    pub samples: u64,
    /// Bytes its samples read from storage (or the RAM cache), batches prepared ahead included.
    pub bytes: u64,
    /// Its samples that failed in batches delivered (skipped under `on_error = skip`).
    pub failed: u64,
    /// Worker time its samples took to fill (their stages; with profiling on, one sample in 8
    /// timed and scaled to all, as the stages are).
    pub busy: Duration,
    /// Passes over it at the loader's position: its samples in the order so far over its
    /// length (2.5: two whole passes and half of a third).
    pub passes: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cameras_line_says_frames_decoded_and_kept_indexes_not_a_hit_rate() {
        let c = CacheStats {
            kind: "video:observation.images.front".into(),
            hits: 2,
            misses: 40,
            bytes: 0,
            budget: 0,
            entries: 3,
            saved: Duration::ZERO,
            shared: 0,
        };
        assert_eq!(
            c.report_line(),
            "camera observation.images.front: 40 frames decoded · 3 video files, 2 with a kept index"
        );
    }

    #[test]
    fn each_step_is_bound_by_the_stage_with_the_most_time_even_when_it_is_rarely_timed() {
        // "read" times every item (a shared stage, 1 µs each); "slow" is counted for every item
        // but timed for one sample in TIME_EVERY (50 ms each): 4 samples a step, so only every
        // other step holds a timed "slow" sample
        let c = Collector::new(vec!["read".into(), "slow".into()], 1, true, 0);
        let mut sample = 0u32;
        for step in 0..10u64 {
            for _ in 0..4 {
                c.items[0].fetch_add(1, Ordering::Relaxed);
                c.timed[0].fetch_add(1, Ordering::Relaxed);
                c.nanos[0].fetch_add(1_000, Ordering::Relaxed);
                c.items[1].fetch_add(1, Ordering::Relaxed);
                if sample.is_multiple_of(TIME_EVERY) {
                    c.timed[1].fetch_add(1, Ordering::Relaxed);
                    c.nanos[1].fetch_add(50_000_000, Ordering::Relaxed);
                }
                sample += 1;
            }
            c.step_waited(
                0,
                step,
                Duration::from_millis(200),
                Duration::from_millis(201),
            );
        }
        let waits = c.snapshot().waits;
        assert_eq!(waits.len(), 10);
        for w in &waits {
            assert_eq!(w.bound.as_deref(), Some("slow"), "step {}", w.step);
        }
        // a step in which no stage did anything names none
        c.step_waited(0, 10, Duration::from_millis(1), Duration::from_millis(1));
        assert_eq!(c.last_wait().unwrap().bound, None);
    }

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
    /// Items that were timed (one sample in [`TIME_EVERY`] per worker, or all when tracing).
    timed: Vec<AtomicU64>,
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
    bytes_read: AtomicU64,
    records_read: AtomicU64,
    profile: bool,
    /// The span ring (None: tracing off).
    trace: Option<Mutex<TraceRing>>,
    origin: Instant,
    /// The last steps' waits, and each stage's items at the last one.
    waits: Mutex<(VecDeque<StepWait>, Vec<u64>)>,
}

impl Collector {
    pub(crate) fn new(
        names: Vec<String>,
        threads: usize,
        profile: bool,
        trace_capacity: usize,
    ) -> Collector {
        let n = names.len();
        Collector {
            names,
            items: (0..n).map(|_| AtomicU64::new(0)).collect(),
            timed: (0..n).map(|_| AtomicU64::new(0)).collect(),
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
            bytes_read: AtomicU64::new(0),
            records_read: AtomicU64::new(0),
            profile,
            trace: (trace_capacity > 0).then(|| {
                Mutex::new(TraceRing {
                    spans: VecDeque::new(),
                    capacity: trace_capacity,
                    dropped: 0,
                })
            }),
            origin: Instant::now(),
            waits: Mutex::new((VecDeque::new(), vec![0; n])),
        }
    }

    /// The last step's wait.
    pub(crate) fn last_wait(&self) -> Option<StepWait> {
        self.waits.lock().ok().and_then(|w| w.0.back().cloned())
    }

    /// A batch of `epoch`'s step `step` was delivered after the consumer waited `wait`,
    /// `step_time` after the one before.
    pub(crate) fn step_waited(&self, epoch: u64, step: u64, wait: Duration, step_time: Duration) {
        let Ok(mut w) = self.waits.lock() else {
            return;
        };
        let (history, last) = &mut *w;
        // the stage that took the most time since the last step: the items each stage did since
        // then, at its mean timed time per item (most items are counted, not timed: one sample
        // in TIME_EVERY is, while a shared stage times them all, so raw timed nanoseconds would
        // credit a rarely timed slow stage only in the steps where its timed sample fell)
        let mut bound = None;
        let mut most = 0.0;
        for (i, l) in last.iter_mut().enumerate() {
            let items = self.items[i].load(Ordering::Relaxed);
            let done = items.saturating_sub(*l);
            *l = items;
            let timed = self.timed[i].load(Ordering::Relaxed);
            if timed == 0 || done == 0 {
                continue;
            }
            let per_item = self.nanos[i].load(Ordering::Relaxed) as f64 / timed as f64;
            let d = done as f64 * per_item;
            if d > most {
                most = d;
                bound = Some(i);
            }
        }
        if history.len() == WAIT_HISTORY {
            history.pop_front();
        }
        history.push_back(StepWait {
            epoch,
            step,
            wait,
            step_time,
            bound: bound.map(|i| self.names[i].clone()),
        });
    }

    /// A worker's recorder, flushed into this collector after each task (and when dropped).
    pub(crate) fn worker(&self, tid: usize) -> WorkerStats<'_> {
        let n = self.names.len();
        WorkerStats {
            collector: self,
            on: self.profile,
            tracing: self.trace.is_some(),
            tid: tid as u32,
            items: vec![0; n],
            timed: vec![0; n],
            nanos: vec![0; n],
            samples: 0,
            hist: vec![0; n * BUCKETS],
            dirty: Vec::new(),
            bytes: 0,
            records: 0,
            spans: Vec::new(),
        }
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
                    busy: {
                        // the timed items' time, scaled to all items
                        let timed = self.timed[i].load(Ordering::Relaxed);
                        let items = self.items[i].load(Ordering::Relaxed);
                        if timed == 0 {
                            Duration::ZERO
                        } else {
                            ns(&self.nanos[i]).mul_f64(items as f64 / timed as f64)
                        }
                    },
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
            groups: Vec::new(),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            records_read: self.records_read.load(Ordering::Relaxed),
            prefetch: 0,
            profiled: self.profile,
            storage: None,
            waits: self
                .waits
                .lock()
                .map(|w| w.0.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// The trace's spans as Chrome Trace Event JSON (`{"traceEvents": [...]}`, complete events
    /// `"ph": "X"` with microsecond times, one track per worker thread), or `None` when tracing
    /// is off.
    pub(crate) fn trace_json(&self) -> Option<String> {
        let ring = self.trace.as_ref()?.lock().ok()?;
        let pid = std::process::id();
        let mut events = Vec::with_capacity(ring.spans.len() + self.threads + 1);
        let mut tids: Vec<u32> = ring.spans.iter().map(|s| s.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        events.push(serde_json::json!({
            "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": { "name": "stokehold loader" }
        }));
        for t in tids {
            events.push(serde_json::json!({
                "name": "thread_name", "ph": "M", "pid": pid, "tid": t,
                "args": { "name": format!("stokehold-worker-{t}") }
            }));
        }
        for s in &ring.spans {
            events.push(serde_json::json!({
                "name": self.names[s.stage as usize],
                "cat": "stage",
                "ph": "X",
                "ts": s.start_ns as f64 / 1e3,
                "dur": s.dur_ns as f64 / 1e3,
                "pid": pid,
                "tid": s.tid,
                "args": { "id": s.id },
            }));
        }
        let doc = serde_json::json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": { "dropped_spans": ring.dropped, "capacity": ring.capacity },
        });
        Some(doc.to_string())
    }
}

/// One stage of one sample on one thread.
#[derive(Debug, Clone, Copy)]
struct Span {
    stage: u16,
    tid: u32,
    start_ns: u64,
    dur_ns: u64,
    id: u64,
}

/// The newest `capacity` spans (older ones are dropped and counted).
#[derive(Debug)]
struct TraceRing {
    spans: VecDeque<Span>,
    capacity: usize,
    dropped: u64,
}

/// With profiling on, each worker times one sample in this many (all of them when tracing): the
/// latency histograms are made of those, and busy time is their time scaled to all items. Every
/// item is counted. Reading the clock at each stage boundary of every sample would cost a few
/// percent of a cheap pipeline's throughput.
pub(crate) const TIME_EVERY: u32 = 8;

/// One worker thread's statistics since its last flush: plain (non-atomic) counters, added into
/// the shared [`Collector`] once per task, so that a stage costs a few local additions (and, for
/// the timed samples, one clock read) rather than shared cache-line traffic per sample.
#[derive(Debug)]
pub(crate) struct WorkerStats<'c> {
    collector: &'c Collector,
    /// Profiling is on (count items; time one sample in `TIME_EVERY`).
    on: bool,
    tracing: bool,
    tid: u32,
    items: Vec<u64>,
    timed: Vec<u64>,
    nanos: Vec<u64>,
    /// Samples started on this worker.
    samples: u32,
    /// `stage * BUCKETS + bucket` counts; `dirty` lists the non-zero ones.
    hist: Vec<u32>,
    dirty: Vec<u32>,
    bytes: u64,
    records: u64,
    spans: Vec<Span>,
}

impl WorkerStats<'_> {
    /// The clock at the start of a sample: `Some` when this sample is timed (one in
    /// [`TIME_EVERY`] with profiling, every one when tracing), else `None`.
    #[inline]
    pub(crate) fn clock(&mut self) -> Option<Instant> {
        // the first sample of each worker is timed (then one in TIME_EVERY), so that even a
        // short run has a figure for every stage
        let timed = self.samples.is_multiple_of(TIME_EVERY);
        self.samples = self.samples.wrapping_add(1);
        if self.tracing || (self.on && timed) {
            Some(Instant::now())
        } else {
            None
        }
    }

    /// Whether the next sample ([`WorkerStats::clock`]) is timed, and how many samples its time
    /// stands for (1 when tracing, else [`TIME_EVERY`]): a wrapper around a sample (a mixture's
    /// per-source time) times the same samples the stages do.
    #[inline]
    pub(crate) fn next_timed(&self) -> Option<u32> {
        if self.tracing {
            Some(1)
        } else if self.on && self.samples.is_multiple_of(TIME_EVERY) {
            Some(TIME_EVERY)
        } else {
            None
        }
    }

    /// `stage` of sample `id` is done: counted, and when the sample is timed, it ran from
    /// `*clock` until now and the clock moves to now (one clock read per stage boundary).
    #[inline]
    pub(crate) fn lap(&mut self, stage: usize, id: u64, clock: &mut Option<Instant>) {
        let d = clock.map(|t0| {
            let now = Instant::now();
            self.span(stage, id, t0, now);
            *clock = Some(now);
            now.duration_since(t0)
        });
        self.add(stage, d);
    }

    /// A piece of a stage timed in pieces (per column): its time is added to `acc`; count the
    /// stage once per sample with [`WorkerStats::add`].
    #[inline]
    pub(crate) fn lap_into(
        &mut self,
        acc: &mut Duration,
        stage: usize,
        id: u64,
        clock: &mut Option<Instant>,
    ) {
        if let Some(t0) = *clock {
            let now = Instant::now();
            self.span(stage, id, t0, now);
            *acc += now.duration_since(t0);
            *clock = Some(now);
        }
    }

    #[inline]
    pub(crate) fn span(&mut self, stage: usize, id: u64, t0: Instant, now: Instant) {
        if self.tracing {
            let origin = self.collector.origin;
            self.spans.push(Span {
                stage: stage as u16,
                tid: self.tid,
                start_ns: t0.saturating_duration_since(origin).as_nanos() as u64,
                dur_ns: now.duration_since(t0).as_nanos() as u64,
                id,
            });
        }
    }

    /// One item of `stage`, which took `d` when it was timed (nothing when profiling is off).
    #[inline]
    pub(crate) fn add(&mut self, stage: usize, d: Option<Duration>) {
        if !self.on {
            return;
        }
        self.items[stage] += 1;
        if let Some(d) = d {
            let ns = d.as_nanos() as u64;
            self.timed[stage] += 1;
            self.nanos[stage] += ns;
            let h = stage * BUCKETS + bucket(ns);
            if self.hist[h] == 0 {
                self.dirty.push(h as u32);
            }
            self.hist[h] += 1;
        }
    }

    /// Whether profiling is on.
    #[inline]
    /// Run `work` for the samples `ids` together (a task's reads) as stage `stage`: its time,
    /// when profiling, is shared equally by the samples (one item and one span each).
    pub(crate) fn shared_stage(&mut self, stage: usize, ids: &[u64], work: impl FnOnce()) {
        let t0 = self.profiling().then(Instant::now);
        work();
        let now = t0.map(|_| Instant::now());
        let per_sample = t0
            .zip(now)
            .map(|(a, b)| b.duration_since(a) / ids.len().max(1) as u32);
        for &id in ids {
            if let (Some(a), Some(b)) = (t0, now) {
                self.span(stage, id, a, b);
            }
            self.add(stage, per_sample);
        }
    }

    pub(crate) fn profiling(&self) -> bool {
        self.on
    }

    /// Bytes of records read since the last flush (a mixture's per-source count takes the
    /// difference around one sample).
    pub(crate) fn bytes_since_flush(&self) -> u64 {
        self.bytes
    }

    /// A record of `n` bytes was read.
    #[inline]
    pub(crate) fn read(&mut self, n: usize) {
        self.bytes += n as u64;
        self.records += 1;
    }

    /// `n` more bytes of the record counted last (a value read from a file of its own).
    pub(crate) fn read_more(&mut self, n: usize) {
        self.bytes += n as u64;
    }

    /// Add everything since the last flush into the collector.
    pub(crate) fn flush(&mut self) {
        let c = self.collector;
        if self.records > 0 {
            c.bytes_read.fetch_add(self.bytes, Ordering::Relaxed);
            c.records_read.fetch_add(self.records, Ordering::Relaxed);
            self.bytes = 0;
            self.records = 0;
        }
        if c.profile {
            for (i, n) in self.items.iter_mut().enumerate() {
                if *n > 0 {
                    c.items[i].fetch_add(*n, Ordering::Relaxed);
                    *n = 0;
                }
                if self.timed[i] > 0 {
                    c.timed[i].fetch_add(self.timed[i], Ordering::Relaxed);
                    c.nanos[i].fetch_add(self.nanos[i], Ordering::Relaxed);
                    self.timed[i] = 0;
                    self.nanos[i] = 0;
                }
            }
            for h in self.dirty.drain(..) {
                let h = h as usize;
                c.hist[h / BUCKETS][h % BUCKETS]
                    .fetch_add(u64::from(self.hist[h]), Ordering::Relaxed);
                self.hist[h] = 0;
            }
        }
        if !self.spans.is_empty() {
            if let Some(Ok(mut ring)) = c.trace.as_ref().map(Mutex::lock) {
                for s in self.spans.drain(..) {
                    if ring.spans.len() == ring.capacity {
                        ring.spans.pop_front();
                        ring.dropped += 1;
                    }
                    ring.spans.push_back(s);
                }
            }
            self.spans.clear();
        }
    }
}

impl Drop for WorkerStats<'_> {
    fn drop(&mut self) {
        self.flush();
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
        if !self.profiled {
            out.push_str("(stage timing was off)\n");
        }
        out.push_str(&format!(
            "batches {} · samples {} · threads {} ({} working) · prefetch {} · read {:.1} MB · consumer waited {:.3} s · workers waited {:.3} s · mean queue {:.2} · skipped {}\n",
            self.batches,
            self.samples,
            self.threads,
            self.active_threads,
            self.prefetch,
            self.bytes_read as f64 / 1e6,
            self.consumer_wait.as_secs_f64(),
            self.worker_wait.as_secs_f64(),
            self.mean_queue,
            self.skipped.len()
        ));
        for c in &self.caches {
            out.push_str(&c.report_line());
            out.push('\n');
        }
        if !self.groups.is_empty() {
            out.push_str(&format!(
                "{:<26} {:>7} {:>9} {:>10} {:>8} {:>10} {:>8}\n",
                "source", "weight", "samples", "MB read", "failed", "busy s", "passes"
            ));
            for s in &self.groups {
                out.push_str(&format!(
                    "{:<26} {:>7.3} {:>9} {:>10.1} {:>8} {:>10.3} {:>8.2}\n",
                    s.name,
                    s.weight,
                    s.samples,
                    s.bytes as f64 / 1e6,
                    s.failed,
                    s.busy.as_secs_f64(),
                    s.passes
                ));
            }
        }
        if let Some(r) = &self.storage {
            let p = &r.prefetch;
            out.push_str(&format!(
                "object storage: {} requests ({} HTTP, {} retries, {} failures, {} short bodies), {:.1} MB · prefetched {} ranges, {:.1} MB; reads {} from them, {} own requests; {:.1} MB dropped unread\n",
                r.requests,
                r.http_requests,
                r.retries,
                r.failures,
                r.short_bodies,
                r.bytes as f64 / 1e6,
                p.requests,
                p.bytes as f64 / 1e6,
                p.hits,
                p.misses,
                p.wasted_bytes as f64 / 1e6,
            ));
        }
        out
    }
}

/// What a cache did, for statistics and reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheStats {
    /// "records", "decoded" or "parquet-pages".
    pub kind: String,
    /// Lookups served from the cache.
    pub hits: u64,
    /// Lookups not served (and, for the decoded cache, computed).
    pub misses: u64,
    /// Bytes held.
    pub bytes: u64,
    /// The byte budget.
    pub budget: u64,
    /// Entries held (shards or samples).
    pub entries: u64,
    /// Worker time the hits saved (decoded cache: the mean time of the prefix on a miss, times
    /// the hits). Zero for the record cache.
    pub saved: Duration,
    /// Hits served by what other processes wrote (the decoded cache's directory: the other ranks
    /// of the node, in this run or before); 0 for the other caches.
    pub shared: u64,
}

impl CacheStats {
    /// One line for reports.
    pub fn report_line(&self) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        if self.kind == "disk" {
            return format!(
                "disk cache: {} shards local ({:.1} of {:.1} MiB) · {} found copied · {} copied or bypassed now",
                self.entries,
                mib(self.bytes),
                mib(self.budget),
                self.hits,
                self.misses
            );
        }
        if let Some(camera) = self.kind.strip_prefix("video:") {
            // a LeRobot camera (`samples/lerobot.rs`): frames decoded, its files and the kept
            // indexes used, no cache of its own
            return format!(
                "camera {camera}: {} frames decoded · {} video files, {} with a kept index",
                self.misses, self.entries, self.hits
            );
        }
        let total = (self.hits + self.misses).max(1);
        let held = if self.budget == u64::MAX {
            format!("{:.1} MiB, no limit", mib(self.bytes))
        } else {
            format!("{:.1} of {:.1} MiB", mib(self.bytes), mib(self.budget))
        };
        let mut line = format!(
            "{} cache: {:.1}% hits ({} of {}) · {} entries · {held}",
            self.kind,
            100.0 * self.hits as f64 / total as f64,
            self.hits,
            self.hits + self.misses,
            self.entries,
        );
        if self.kind == "decoded-disk" && self.shared > 0 {
            line.push_str(&format!(" · {} written by other processes", self.shared));
        }
        if self.kind.starts_with("decoded") && self.saved > Duration::ZERO {
            line.push_str(&format!(
                " · saved ~{:.2} s of worker time",
                self.saved.as_secs_f64()
            ));
        }
        line
    }
}
