//! The consumer's side: batches in step order, the error policy, the cursor, the end of an
//! epoch (and the next epoch's run started ahead).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::batch::{Batch, SharedBatch, copy_slot, finish_batch};
use crate::error::{EngineError, Result};
use crate::pipeline::run::{Run, Spawned, spawn};
use crate::pipeline::tune::Tuner;
use crate::pipeline::{Core, Cursor, ErrorPolicy, Prepared, lock};
use crate::state::ResumeState;
use crate::stats::Stats;

/// What [`BatchIter::next_timeout`] found.
#[derive(Debug)]
pub enum Next {
    /// The next batch, or the error that ended the epoch.
    Batch(Result<Batch>),
    /// Not ready within the time-out (a binding checks for signals, then waits again).
    Pending,
    /// The epoch is over (or ended with an error).
    End,
}

/// The batches of one epoch (the rest of it, when resumed), in order. Dropping it stops and joins
/// the workers.
pub struct BatchIter {
    core: Arc<Core>,
    run: Arc<Run>,
    workers: Vec<JoinHandle<()>>,
    rx: Receiver<Arc<SharedBatch>>,
    reorder: BTreeMap<u64, Arc<SharedBatch>>,
    next_step: u64,
    finished: bool,
    skipped_in_epoch: u64,
    consecutive_failures: u64,
    tuner: Tuner,
    /// The epoch's step (counted across resumes) of this run's first batch.
    first_step: u64,
    /// What the consumer waited for the next batch so far (over `Pending` returns).
    waiting: Duration,
    /// When the last batch was delivered.
    delivered_at: Option<Instant>,
}

impl std::fmt::Debug for BatchIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchIter")
            .field("epoch", &self.run.epoch)
            .field("next_step", &self.next_step)
            .field("steps", &self.run.steps)
            .finish()
    }
}

impl BatchIter {
    /// Start the workers of the rest of the current epoch (or take over the run prepared for it
    /// at the end of the previous epoch).
    pub(crate) fn start(core: Arc<Core>) -> Result<BatchIter> {
        let c = core.cursor();
        let ready = lock(&core.prepared).run.take().and_then(|mut p| {
            if (p.epoch, p.position, p.pid) == (c.epoch, c.position, std::process::id()) {
                p.spawned.take()
            } else {
                None
            }
        });
        let Spawned { run, workers, rx } = match ready {
            Some(s) => s,
            None => spawn(&core, core.plan(c)?, c.epoch)?,
        };
        let mut it = BatchIter {
            tuner: Tuner::new(&core.stats),
            core,
            run,
            workers,
            rx,
            reorder: BTreeMap::new(),
            next_step: 0,
            finished: false,
            skipped_in_epoch: c.skipped,
            consecutive_failures: c.in_a_row,
            first_step: 0,
            waiting: Duration::ZERO,
            delivered_at: None,
        };
        it.first_step = it.core.step_at(c.epoch, c.position);
        if !it.run.plan.has_step(0) {
            it.finish_epoch();
        }
        Ok(it)
    }

    /// Batches left in this epoch.
    pub fn remaining(&self) -> u64 {
        if self.finished {
            0
        } else {
            match self.run.plan.known_steps() {
                Some(steps) => steps - self.next_step,
                // an order whose length is known late: its estimate
                None => self
                    .run
                    .plan
                    .estimated_epoch_steps()
                    .saturating_sub(self.first_step + self.next_step)
                    .max(1),
            }
        }
    }

    /// The loader's state after the batches delivered so far.
    pub fn state(&self) -> ResumeState {
        self.core.state()
    }

    /// Statistics.
    pub fn stats(&self) -> Stats {
        self.core.stats()
    }

    /// The next batch, waiting at most `timeout` for it.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        if self.finished {
            return Next::End;
        }
        if !self.run.plan.has_step(self.next_step) {
            self.finish_epoch();
            return Next::End;
        }
        let waited = Instant::now();
        self.core.stats.queue(self.reorder.len() + self.rx.len());
        let shared = loop {
            if let Some(b) = self.reorder.remove(&self.next_step) {
                break b;
            }
            let left = timeout.saturating_sub(waited.elapsed());
            match self.rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(b) => {
                    self.reorder.insert(b.step, b);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.workers.iter().all(JoinHandle::is_finished) && self.rx.is_empty() {
                        return self.fail(EngineError::Worker(
                            "the worker threads stopped unexpectedly".into(),
                        ));
                    }
                    if waited.elapsed() >= timeout {
                        self.waiting += waited.elapsed();
                        self.add_wait(waited);
                        return Next::Pending;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return self.fail(EngineError::Worker(
                        "the worker threads stopped unexpectedly".into(),
                    ));
                }
            }
        };
        self.add_wait(waited);
        let now = Instant::now();
        let wait = self.waiting + now.duration_since(waited);
        self.waiting = Duration::ZERO;
        let step_time = self
            .delivered_at
            .map_or(Duration::ZERO, |t| now.duration_since(t));
        self.delivered_at = Some(now);
        self.core.stats.step_waited(
            self.run.epoch,
            self.first_step + self.next_step,
            wait,
            step_time,
        );
        let mut batch = finish_batch(&shared, self.core.samples.columns(), &self.core.pool);
        let mut failures = std::mem::take(&mut *lock(&shared.failures));
        failures.sort_by_key(|(slot, _)| *slot);
        if let Some(g) = &self.core.groups {
            g.failed(failures.iter().map(|(slot, _)| batch.ids[*slot]));
        }
        if let Err(e) = self.apply_policy(&mut batch, failures) {
            return self.fail(e);
        }
        let columns = self.core.samples.columns();
        if let Err(e) = crate::batch::deliver_patches(&mut batch, columns, &self.core.pool) {
            return self.fail(EngineError::Worker(e.to_string()));
        }
        if self.core.config.autotune || self.core.config.prefetch_auto {
            self.tuner.tune(&self.core, &self.run, self.workers.len());
        }
        self.next_step += 1;
        self.run.set_delivered(self.next_step);
        *lock(&self.core.cursor) = Cursor {
            epoch: self.run.epoch,
            position: self.run.plan.position_after(self.next_step),
            skipped: self.skipped_in_epoch,
            in_a_row: self.consecutive_failures,
        };
        let stats = &self.core.stats;
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .samples
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if let Some(g) = &self.core.groups {
            g.delivered(&batch.ids);
        }
        if !self.run.plan.has_step(self.next_step) {
            self.finish_epoch();
        }
        Next::Batch(Ok(batch))
    }

    fn add_wait(&self, since: Instant) {
        self.core
            .stats
            .consumer_wait
            .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// End the epoch with `e`: the workers are stopped now; the position stays after the last
    /// batch delivered, so a new iteration retries from there.
    fn fail(&mut self, e: EngineError) -> Next {
        self.finished = true;
        self.shutdown();
        Next::Batch(Err(e))
    }

    fn finish_epoch(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let core = &self.core;
        for c in &core.caches {
            c.epoch_done();
        }
        let next = Cursor::epoch_start(self.run.epoch + 1);
        *lock(&core.cursor) = next;
        // Start the next epoch now, so that its first batches are being prepared while the
        // consumer works on this epoch's last one (no stall at the epoch boundary). An error
        // here is reported by the next iteration instead.
        if !core.config.prepare_next_epoch {
            return;
        }
        if let Ok(plan) = core.plan(next)
            && plan.has_step(0)
            && let Ok(spawned) = spawn(core, plan, next.epoch)
        {
            let prepared = Prepared {
                epoch: next.epoch,
                position: 0,
                pid: std::process::id(),
                spawned: Some(spawned),
            };
            let mut slot = lock(&core.prepared);
            if slot.closed {
                drop(slot);
                drop(prepared); // the loader is gone: stop it again
            } else {
                slot.run = Some(prepared);
            }
        }
    }

    fn apply_policy(
        &mut self,
        batch: &mut Batch,
        failures: Vec<(usize, EngineError)>,
    ) -> Result<()> {
        if failures.is_empty() {
            self.consecutive_failures = 0;
            return Ok(());
        }
        let (max_fraction, max_consecutive) = match self.core.config.on_error {
            ErrorPolicy::Fail => {
                let (_, first) = failures.into_iter().next().expect("not empty");
                return Err(first);
            }
            ErrorPolicy::Skip {
                max_fraction,
                max_consecutive,
            } => (max_fraction, max_consecutive),
        };
        if let Some(i) = failures.iter().position(|(_, e)| !e.is_sample_failure()) {
            let (_, e) = failures.into_iter().nth(i).expect("found above");
            return Err(EngineError::TooManyFailures {
                detail: "a failure that is not about one sample's data".into(),
                first: Box::new(e),
            });
        }
        let failed: Vec<usize> = failures.iter().map(|(s, _)| *s).collect();
        // consecutive failures, counted across batch boundaries in slot order
        let mut run = self.consecutive_failures;
        let mut longest = 0;
        for slot in 0..batch.len() {
            if failed.binary_search(&slot).is_ok() {
                run += 1;
                longest = longest.max(run);
            } else {
                run = 0;
            }
        }
        self.consecutive_failures = run;
        self.skipped_in_epoch += failed.len() as u64;
        // the budget is of the whole epoch on this rank, wherever this iteration started
        let epoch_samples = self.run.plan.epoch_steps() * self.run.batch_size as u64;
        let too_many = self.skipped_in_epoch as f64 > max_fraction * epoch_samples as f64;
        // groups of the samples may hold parts of the epoch to budgets of their own (a
        // mixture's sources), checked here, in the order of delivery
        let failed_ids: Vec<u64> = failed.iter().map(|&slot| batch.ids[slot]).collect();
        let groups = self.core.groups.as_ref();
        if let Err(over) = groups.map_or(Ok(()), |g| {
            g.check_skips(self.run.epoch, &failed_ids, epoch_samples)
        }) {
            let (_, first) = failures.into_iter().next().expect("not empty");
            return Err(EngineError::TooManyFailures {
                detail: over.to_string(),
                first: Box::new(first),
            });
        }
        if longest > max_consecutive || too_many || failed.len() == batch.len() {
            let (_, first) = failures.into_iter().next().expect("not empty");
            let all = match failed.len() == batch.len() {
                // the skip policy fills a failed slot with another sample of its batch
                true => format!(
                    "every sample of a batch of {} failed, none is left to take their places; ",
                    batch.len()
                ),
                false => String::new(),
            };
            return Err(EngineError::TooManyFailures {
                detail: format!(
                    "{all}{} samples skipped this epoch (limit {:.1}% of {epoch_samples}), {longest} in a row (limit {max_consecutive})",
                    self.skipped_in_epoch,
                    max_fraction * 100.0
                ),
                first: Box::new(first),
            });
        }
        // listed once per epoch: a padding slot of the last step repeats a sample that has its
        // own place in the epoch (where it is listed), so its failure is not listed again
        lock(&self.core.stats.skipped).extend(
            failed
                .iter()
                .filter(|&&slot| !batch.padding.get(slot).copied().unwrap_or(false))
                .map(|&slot| batch.ids[slot]),
        );
        // Fill each failed slot with the next good slot (cyclically): deterministic.
        let n = batch.len();
        for &slot in &failed {
            let src = (1..n)
                .map(|d| (slot + d) % n)
                .find(|s| failed.binary_search(s).is_err())
                .expect("a good slot exists");
            copy_slot(batch, src, slot);
        }
        Ok(())
    }

    /// Stop the workers (they finish the sample in hand) and join them. Idempotent.
    fn shutdown(&mut self) {
        self.run.signal_stop();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Iterator for BatchIter {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Next::End => return None,
                Next::Batch(b) => return Some(b),
                Next::Pending => {}
            }
        }
    }
}

impl Drop for BatchIter {
    fn drop(&mut self) {
        self.shutdown();
    }
}
