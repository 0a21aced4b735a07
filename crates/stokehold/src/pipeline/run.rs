//! One epoch's run: the worker threads, their shared state and the tasks they take.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::batch::SharedBatch;
use crate::error::{EngineError, Result};
use crate::fetch::Readahead;
use crate::pipeline::{Core, lock};
use crate::sampler::{RankPlan, Slot};
use crate::samples::{TaskCtx, TaskFill, TaskIo, panic_message};

/// Steps between a batch being started and the batch whose samples are then announced to
/// storage (readahead).
const READAHEAD: u64 = 2;

/// The same for object storage in an order whose batches are announced one at a time (a global
/// shuffle: each sample its own request): further ahead, so that a batch's few hundred
/// requests, a few rounds of the store's latency at the prefetch's concurrency, are done before
/// a worker needs them (at 20 ms a request, 4 steps ahead took the decode from 0.70-0.75x to
/// 0.83-0.84x its rate from local disk, with 1 decode thread on one core, #50).
const FETCH_LEAD: u64 = 4;

/// The read stage's index in the statistics of samples that read bytes ([`crate::samples::Samples::sources`]).
const STAGE_READ: usize = 0;

/// What the workers of one iteration share.
pub(crate) struct Run {
    pub(crate) core: Arc<Core>,
    pub(crate) plan: RankPlan,
    pub(crate) epoch: u64,
    pub(crate) batch_size: usize,
    task_size: usize,
    tasks_per_batch: usize,
    pub(crate) steps: u64,
    /// How storage is told ahead ([`readahead`](crate::fetch::readahead)).
    readahead: Readahead,
    /// Batches announced to storage at once: every `wave` steps, the `wave` batches from
    /// `lead` steps on ([`Readahead::wave`]).
    wave: u64,
    /// Steps between a batch being started and the first batch it announces.
    lead: u64,
    next_task: AtomicU64,
    /// Steps the consumer has taken; workers stay within the prefetch depth of it.
    pub(crate) delivered: Mutex<u64>,
    pub(crate) window: Condvar,
    batches: Mutex<HashMap<u64, Arc<SharedBatch>>>,
    stop: AtomicBool,
    tx: Sender<Arc<SharedBatch>>,
    /// Workers with an index at or above `core.active` wait here (autotuning).
    pub(crate) parked: Condvar,
    park_lock: Mutex<()>,
}

impl Run {
    /// Ask the workers to stop (they finish the sample in hand) and wake every waiting one.
    pub(crate) fn signal_stop(&self) {
        self.stop.store(true, Ordering::Release);
        {
            let _d = lock(&self.delivered);
            self.window.notify_all();
        }
        let _p = lock(&self.park_lock);
        self.parked.notify_all();
    }

    /// The consumer took `steps` batches: let the workers move on.
    pub(crate) fn set_delivered(&self, steps: u64) {
        *lock(&self.delivered) = steps;
        self.window.notify_all();
    }

    /// Wake the workers waiting on the window (its depth changed).
    pub(crate) fn widen(&self) {
        let _d = lock(&self.delivered);
        self.window.notify_all();
    }
}

/// A started run: its shared state, its workers and the channel of finished batches.
pub(crate) struct Spawned {
    pub(crate) run: Arc<Run>,
    pub(crate) workers: Vec<JoinHandle<()>>,
    pub(crate) rx: Receiver<Arc<SharedBatch>>,
}

impl Spawned {
    /// Stop the workers and join them.
    pub(crate) fn stop(self) {
        self.run.signal_stop();
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// Start the workers of `plan` (epoch `epoch`).
pub(crate) fn spawn(core: &Arc<Core>, plan: RankPlan, epoch: u64) -> Result<Spawned> {
    // an order whose length is known late: no bound but the first step past its end (workers
    // stop there: `fill_batch` answers `StepOutOfRange`)
    let steps = plan.known_steps().unwrap_or(u64::MAX);
    let b = core.config.batch_size as usize;
    let threads = core.threads;
    let layout = core.samples.layout();
    let task_size = match core.config.task_size {
        0 if layout.whole_batch_tasks => b,
        0 => {
            // Enough tasks per batch to share it between the threads; with large records,
            // tasks of a few MiB, so that records neighbouring in the order are read in
            // large requests (coalesced in `fetch`).
            let by_count = (b / (threads * 4)).clamp(1, 64);
            let mean = layout.mean_bytes;
            if mean >= 64 << 10 {
                let by_bytes = ((4u64 << 20) / mean) as usize;
                by_count.max(by_bytes.min(b / threads).max(1))
            } else {
                by_count
            }
        }
        n => n.min(b),
    };
    let readahead = crate::fetch::readahead(core.samples.sources(), layout.mean_bytes);
    let batch_bytes = layout.mean_bytes.max(1).saturating_mul(b as u64);
    let wave = readahead.wave(core.config.shuffle, batch_bytes);
    let (tx, rx) = crossbeam_channel::unbounded();
    let run = Arc::new(Run {
        core: Arc::clone(core),
        plan,
        epoch,
        batch_size: b,
        task_size,
        tasks_per_batch: b.div_ceil(task_size),
        steps,
        readahead,
        wave,
        // never beyond the prefetch window: a batch announced further ahead holds the store's
        // requests (and the prefetch's budget) before nearer ones (8 steps ahead halved the
        // rate)
        lead: if readahead == Readahead::Fetch && wave == 1 {
            let depth = core.prefetch.load(Ordering::Relaxed);
            FETCH_LEAD.min(depth).max(READAHEAD)
        } else {
            READAHEAD
        },
        next_task: AtomicU64::new(0),
        delivered: Mutex::new(0),
        window: Condvar::new(),
        batches: Mutex::new(HashMap::new()),
        stop: AtomicBool::new(false),
        tx,
        parked: Condvar::new(),
        park_lock: Mutex::new(()),
    });
    let mut workers = Vec::new();
    if steps > 0 {
        for i in 0..threads.min(steps.saturating_mul(run.tasks_per_batch as u64) as usize) {
            let r = Arc::clone(&run);
            let spawned = std::thread::Builder::new()
                .name(format!("stokehold-worker-{i}"))
                .spawn(move || worker(&r, i));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // stop and join the workers already started
                    Spawned { run, workers, rx }.stop();
                    return Err(EngineError::Worker(format!(
                        "cannot start a worker thread: {e}"
                    )));
                }
            }
        }
    }
    Ok(Spawned { run, workers, rx })
}

fn worker(run: &Run, index: usize) {
    let core = &*run.core;
    let samples = &*core.samples;
    let mut io = Spare::take(core);
    // the plan of the batches announced ahead (apart from the task's own)
    let mut ahead = TaskIo::default();
    let mut hints = Vec::new();
    let mut ws = core.stats.worker(index);
    // whether the samples read bytes: their fetch is then timed as the read stage
    let reads = !samples.sources().is_empty();
    // this worker's figures of the samples' groups, added once per task
    let mut tally: Vec<(u64, u64)> = Vec::new();
    // which samples of the task were filled
    let mut filled: Vec<bool> = Vec::new();
    let total = run.steps.saturating_mul(run.tasks_per_batch as u64);
    loop {
        if run.stop.load(Ordering::Acquire) {
            return;
        }
        if index >= core.active.load(Ordering::Relaxed) {
            // parked by the autotuner: wait to be needed again (checking for stop)
            let g = lock(&run.park_lock);
            let _ = run.parked.wait_timeout(g, Duration::from_millis(50));
            continue;
        }
        let t = run.next_task.fetch_add(1, Ordering::Relaxed);
        if t >= total {
            return;
        }
        let step = t / run.tasks_per_batch as u64;
        let task = (t % run.tasks_per_batch as u64) as usize;
        // Stay within the prefetch window.
        {
            let waited = Instant::now();
            let mut d = lock(&run.delivered);
            while step >= *d + core.prefetch.load(Ordering::Relaxed)
                && !run.stop.load(Ordering::Acquire)
            {
                d = run
                    .window
                    .wait_timeout(d, Duration::from_millis(100))
                    .map_or_else(|p| p.into_inner().0, |(g, _)| g);
            }
            core.stats
                .worker_wait
                .fetch_add(waited.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if run.stop.load(Ordering::Acquire) {
            return;
        }
        let Some((batch, created)) = batch_for(run, step, &mut ahead, &mut hints) else {
            return;
        };
        if created && run.readahead == Readahead::Advise {
            announce(run, step, &mut ahead, &mut hints);
        }
        let first = task * run.task_size;
        let last = (first + run.task_size).min(run.batch_size);
        let ids = &batch.ids[first..last];
        if reads {
            // the read stage: one fetch per task (coalesced reads), its time shared by the samples
            ws.shared_stage(STAGE_READ, ids, || io.fetch(samples, ids));
        } else {
            io.fetch(samples, ids);
        }
        let cx = TaskCtx {
            seed: core.config.seed,
            epoch: run.epoch,
            ws: &mut ws,
        };
        {
            let group_of = |id: u64| core.groups.as_ref().map_or(0, |g| g.group_of(id));
            let groups = core
                .groups
                .as_ref()
                .map(|g| (&group_of as &dyn Fn(u64) -> usize, g.len()));
            // SAFETY: this task owns the slots `first..last` (tasks cover disjoint slot ranges),
            // reports itself done only below, after its last use of `task`, and writes no slot itself.
            let mut task =
                unsafe { TaskFill::new(&batch, first..last, cx, groups, &mut tally, &mut filled) };
            // each sample's panic is caught in `TaskFill::sample`; one outside them (in the
            // samples' own bookkeeping) fails the samples not filled yet
            let outside = catch_unwind(AssertUnwindSafe(|| {
                samples.fill_task(ids, &mut io, &mut task);
            }))
            .err()
            .map(|p| panic_message(&p));
            if filled.iter().any(|d| !d) {
                let mut failures = lock(&batch.failures);
                for (k, _) in filled.iter().enumerate().filter(|(_, d)| !**d) {
                    let id = ids[k];
                    failures.push((
                        first + k,
                        match &outside {
                            Some(message) => EngineError::Panic {
                                id,
                                message: message.clone(),
                            },
                            None => EngineError::Worker(format!(
                                "sample {id} of a task was never filled (its samples' fill_task \
                                 skipped it)"
                            )),
                        },
                    ));
                }
            }
        }
        if let Some(g) = &core.groups {
            g.add(&mut tally);
        }
        ws.flush();
        if batch.task_done() {
            lock(&run.batches).remove(&step);
            if run.tx.send(batch).is_err() {
                return; // the consumer is gone
            }
        }
    }
}

/// A worker's task scratch, taken from the loader's spares (the scratch of an earlier epoch's
/// workers, buffers grown already) or made, and given back when the worker ends, however it
/// ends.
struct Spare<'c> {
    core: &'c Core,
    io: Option<TaskIo>,
}

impl<'c> Spare<'c> {
    fn take(core: &'c Core) -> Spare<'c> {
        let io = lock(&core.spare_io)
            .pop()
            .unwrap_or_else(|| TaskIo::new(core.config.io_uring));
        Spare { core, io: Some(io) }
    }
}

impl std::ops::Deref for Spare<'_> {
    type Target = TaskIo;
    fn deref(&self) -> &TaskIo {
        self.io.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Spare<'_> {
    fn deref_mut(&mut self) -> &mut TaskIo {
        self.io.as_mut().expect("held until dropped")
    }
}

impl Drop for Spare<'_> {
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            lock(&self.core.spare_io).push(io);
        }
    }
}

/// Order-aware readahead, when batch `step` is started: every `wave` steps, the `wave` batches
/// from `lead` steps on are announced to storage in one hint (so that object storage
/// coalesces what they share; the shards in the order of need). The first batch of a run also
/// announces the batches before those: in the same hint with waves (their shards come first),
/// else one at a time, so that the first batches' requests go first (in a global shuffle every
/// batch touches most shards). Every batch is announced once.
fn announce(run: &Run, step: u64, io: &mut TaskIo, hints: &mut Vec<(u16, usize, u64, u64)>) {
    let samples = &*run.core.samples;
    let ids_of = |steps: std::ops::Range<u64>| -> Vec<u64> {
        steps
            .filter_map(|s| run.plan.batch(s).ok())
            .flat_map(|slots| slots.map(|x| x.id))
            .collect()
    };
    let end = run.steps;
    if step == 0 && run.wave == 1 {
        for s in 0..run.lead.min(end) {
            io.hint(samples, &ids_of(s..s + 1), hints);
        }
    }
    if step.is_multiple_of(run.wave) {
        let from = if step == 0 && run.wave > 1 {
            0
        } else {
            step + run.lead
        };
        let ids = ids_of(from.min(end)..(step + run.lead + run.wave).min(end));
        if !ids.is_empty() {
            io.hint(samples, &ids, hints);
        }
    }
}

/// The shared batch of `step`, created by the first task that needs it (then `true`; with
/// storage that fetches ahead, the readahead it starts is announced here, under the lock).
fn batch_for(
    run: &Run,
    step: u64,
    io: &mut TaskIo,
    hints: &mut Vec<(u16, usize, u64, u64)>,
) -> Option<(Arc<SharedBatch>, bool)> {
    let mut m = lock(&run.batches);
    if let Some(b) = m.get(&step) {
        return Some((Arc::clone(b), false));
    }
    let samples = &*run.core.samples;
    let mut slots: Vec<Slot> = Vec::with_capacity(run.batch_size);
    run.plan.fill_batch(step, &mut slots).ok()?;
    run.core.order.adapt(run.plan.order(), &mut slots);
    let ids: Vec<u64> = slots.iter().map(|s| s.id).collect();
    let padding = slots.iter().map(|s| s.padding).collect();
    let outputs = samples
        .batch_outputs(&ids)
        .unwrap_or_else(|| samples.columns().iter().map(|(_, o)| o.clone()).collect());
    let b = Arc::new(SharedBatch::new(
        run.epoch,
        step,
        ids,
        padding,
        outputs,
        &run.core.pool,
        run.tasks_per_batch,
    ));
    m.insert(step, Arc::clone(&b));
    if run.readahead == Readahead::Fetch {
        // before any worker can take a task of this batch (they wait for the lock)
        announce(run, step, io, hints);
    }
    Some((b, true))
}
