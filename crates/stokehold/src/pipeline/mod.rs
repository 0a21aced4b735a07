//! The one loading engine: the order's positions for this rank ([`crate::order::Order`], the
//! loader's shuffle by default), fetched and filled by a [`Samples`] implementation on a pool of
//! native threads, collated into recycled batch buffers, delivered in order through a bounded
//! prefetch window; with groups ([`crate::order::Groups`]), delivery keeps each group's
//! figures and skip budget.
//!
//! Follow one batch: [`Loader::iter`] plans the epoch ([`RankPlan`]) and starts the workers
//! (`run.rs`); a worker takes the next task (a few slots of one batch), waits for the prefetch
//! window, creates the step's `SharedBatch` if it is the first of its tasks, has the samples
//! fetch the task's bytes and fill each slot, and sends the batch when its last task is done. The
//! consumer ([`BatchIter::next_timeout`], `deliver.rs`) reorders by step, applies the error policy,
//! lets the autotuner decide (`tune.rs`) and moves the shared cursor.
//!
//! Work is split into tasks of a few samples; a task writes only its own slots of its batch, so
//! workers never wait for each other, and the order of delivery (and every random choice) is
//! independent of which thread did what.
//!
//! **Ownership.** The loader and its iterators share one `Core` (`Arc`): the iterator owns what
//! it needs, and the loader's position (a cursor behind a mutex) follows the batches the
//! iterator delivers. Run one iterator of a loader at a time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use stokehold_storage::Dataset;

use crate::batch::BufferPool;
use crate::error::{EngineError, Result};
use crate::order::{Loadable, Order};
use crate::sampler::RankPlan;
use crate::samples::{Cache, Records, Samples};
use crate::stages::Column;
use crate::state::{ResumeState, STATE_VERSION};
use crate::stats::{Collector, Stats};

mod build;
pub mod config;
mod deliver;
mod groups;
mod run;
mod tune;

pub use build::Built;

pub use config::{
    Budget, ByteSize, DecodedCacheConfig, EngineSpec, ErrorPolicy, LoaderConfig, MixtureSourceSpec,
    MixtureSpec, SamplesSpec, ScheduleEntry, Weights, default_memory_budget, half_of_memory,
    parse_bytes,
};
pub use deliver::{BatchIter, Next};

pub(crate) use groups::GroupAccounts;
use run::Spawned;

/// Deepest prefetch window the autotuner uses.
const MAX_AUTO_PREFETCH: u64 = 32;

pub(crate) use crate::sync::lock;

/// Where the loader is: the epoch the next iteration runs and the global position in it, with
/// the epoch's skip counts so far (they belong to the epoch, not to one iteration: a resumed run
/// must accept exactly what the uninterrupted run would).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) epoch: u64,
    pub(crate) position: u64,
    /// Samples this rank skipped in the epoch before `position`.
    pub(crate) skipped: u64,
    /// Failures in a row at `position`.
    pub(crate) in_a_row: u64,
}

impl Cursor {
    /// The start of `epoch`.
    pub(crate) fn epoch_start(epoch: u64) -> Cursor {
        Cursor {
            epoch,
            ..Cursor::default()
        }
    }
}

/// What a loader and its iterators share.
pub(crate) struct Core {
    pub(crate) samples: Arc<dyn Samples>,
    /// The order of an epoch.
    pub(crate) order: Arc<dyn Order>,
    /// The groups' accounts, when the samples have groups.
    pub(crate) groups: Option<GroupAccounts>,
    /// The caches the samples fill.
    pub(crate) caches: Vec<Arc<dyn Cache>>,
    pub(crate) config: LoaderConfig,
    pub(crate) threads: usize,
    /// Threads currently allowed to work (autotuning moves it; kept across epochs).
    pub(crate) active: AtomicUsize,
    /// The prefetch depth now (autotuning moves it; kept across epochs).
    pub(crate) prefetch: AtomicU64,
    /// `config.memory_budget`, or the default.
    pub(crate) memory_budget: u64,
    /// Estimated bytes of one batch (for the memory budget).
    pub(crate) batch_bytes: u64,
    fingerprint: String,
    pub(crate) pool: Arc<BufferPool>,
    pub(crate) stats: Arc<Collector>,
    pub(crate) cursor: Mutex<Cursor>,
    /// The next epoch's run, started when the previous epoch delivered its last batch, so that
    /// its first batches are ready when the next iteration begins. `closed` once the loader is
    /// dropped: the prepared run holds the core, so the loader breaks that cycle, and an iterator
    /// that outlives its loader prepares nothing.
    pub(crate) prepared: Mutex<PreparedSlot>,
    /// The scratch of workers that ended (an epoch's workers end with it): the next epoch's
    /// take it back, so that their buffers are not grown (and zeroed) again every epoch.
    pub(crate) spare_io: Mutex<Vec<crate::samples::TaskIo>>,
    /// The runs of steps of an epoch so far (`ResumeState::runs`), for the epoch they belong to;
    /// a loader that started the epoch itself has one run, `[0, 0, world_size, batch_size]`.
    runs: Mutex<(u64, Vec<[u64; 4]>)>,
    /// This loader's share of the node's memory budget, held while it lives.
    #[allow(dead_code)] // held for its Drop (the lease file is released)
    node_lease: Option<stokehold_storage::node_budget::Lease>,
}

/// The node's memory budget of `total` bytes, and a lease of `want` bytes of it (or what is
/// left, at least one batch of `batch_bytes`).
fn node_lease(
    total: u64,
    want: u64,
    batch_bytes: u64,
) -> Result<(
    stokehold_storage::node_budget::NodeBudget,
    stokehold_storage::node_budget::Lease,
)> {
    use stokehold_storage::node_budget::NodeBudget;
    let budget = NodeBudget::open(NodeBudget::default_dir("memory"), total);
    let dir = NodeBudget::default_dir("memory");
    let io = |e: std::io::Error| {
        EngineError::Config(format!(
            "the node memory budget's directory {}: {e}",
            dir.display()
        ))
    };
    let budget = budget.map_err(io)?;
    let min = batch_bytes.clamp(1, want.max(1));
    match budget.reserve(want.max(min), min).map_err(io)? {
        Some(lease) => Ok((budget, lease)),
        None => Err(EngineError::Config(format!(
            "the node memory budget of {} has less than one batch ({}) left: the other \
             loaders on this node hold {} (leases in {}); give a larger node budget or a \
             smaller batch_size",
            ByteSize(total),
            ByteSize(batch_bytes),
            ByteSize(budget.used().unwrap_or(0)),
            dir.display()
        ))),
    }
}

/// The run prepared ahead, if any, and whether the loader is gone.
#[derive(Default)]
pub(crate) struct PreparedSlot {
    pub(crate) run: Option<Prepared>,
    pub(crate) closed: bool,
}

impl Core {
    pub(crate) fn cursor(&self) -> Cursor {
        *lock(&self.cursor)
    }

    /// Move the cursor; a run prepared for another position is dropped (stopped and joined).
    fn set_cursor(&self, c: Cursor) {
        let stale = {
            let mut p = lock(&self.prepared);
            if p.run
                .as_ref()
                .is_some_and(|p| (p.epoch, p.position) != (c.epoch, c.position))
            {
                p.run.take()
            } else {
                None
            }
        };
        drop(stale);
        if c.position == 0 {
            lock(&self.runs).1.clear();
        }
        *lock(&self.cursor) = c;
    }

    /// This loader's shape as a run starting at (`step`, `position`).
    fn run_here(&self, step: u64, position: u64) -> [u64; 4] {
        [
            step,
            position,
            u64::from(self.config.world_size),
            u64::from(self.config.batch_size),
        ]
    }

    /// The step (counted from the epoch's start across resumes) at `position` of `epoch`.
    pub(crate) fn step_at(&self, epoch: u64, position: u64) -> u64 {
        let runs = self.runs_of(epoch);
        let i = runs.partition_point(|r| r[1] <= position).saturating_sub(1);
        let [first, start, world, batch] = runs[i];
        first + (position - start.min(position)) / (world * batch).max(1)
    }

    /// The runs of steps of epoch `epoch` (see `ResumeState::runs`).
    fn runs_of(&self, epoch: u64) -> Vec<[u64; 4]> {
        let r = lock(&self.runs);
        if r.0 == epoch && !r.1.is_empty() {
            r.1.clone()
        } else {
            vec![self.run_here(0, 0)]
        }
    }

    /// Where the loader is (after the last batch delivered).
    pub(crate) fn state(&self) -> ResumeState {
        let c = self.cursor();
        ResumeState {
            version: STATE_VERSION,
            dataset: self.fingerprint.clone(),
            seed: self.config.seed,
            shuffle: self.config.shuffle,
            epoch: c.epoch,
            position: c.position,
            skipped: c.skipped,
            failures_in_a_row: c.in_a_row,
            order: self.order.state(c.epoch, c.position),
            runs: if c.position > 0 {
                self.runs_of(c.epoch)
            } else {
                Vec::new()
            },
        }
    }

    /// Statistics since the loader was made.
    pub(crate) fn stats(&self) -> Stats {
        let mut s = self.stats.snapshot();
        s.active_threads = self.active.load(Ordering::Relaxed);
        s.caches = crate::samples::cache_stats(&self.caches, false);
        s.storage = crate::fetch::remote_stats(self.samples.sources());
        let c = self.cursor();
        if let Some(g) = &self.groups {
            s.groups = g.stats(c.epoch, c.position);
        }
        s.prefetch = self.prefetch.load(Ordering::Relaxed) as usize;
        s
    }

    pub(crate) fn plan(&self, c: Cursor) -> Result<RankPlan> {
        let order = self
            .order
            .epoch(&self.config.shuffle, self.config.seed, c.epoch)?;
        Ok(RankPlan::new(
            order,
            c.position,
            self.config.world_size,
            self.config.rank,
            self.config.batch_size,
            self.config.tail,
        )?)
    }
}

/// A run started ahead (see [`BatchIter`]'s end of epoch). Dropping it stops and joins its
/// workers, except in a forked child, where those threads do not exist: there it is forgotten.
pub(crate) struct Prepared {
    pub(crate) epoch: u64,
    pub(crate) position: u64,
    pub(crate) pid: u32,
    pub(crate) spawned: Option<Spawned>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(s) = self.spawned.take() {
            if self.pid != std::process::id() {
                // forked child: the workers are not here; joining would wait forever
                std::mem::forget(s);
                return;
            }
            s.stop();
        }
    }
}

/// A loader over one set of samples: iterate it once per epoch; save and restore its position.
pub struct Loader {
    core: Arc<Core>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.core.cursor();
        f.debug_struct("Loader")
            .field("samples", &self.core.samples)
            .field("config", &self.core.config)
            .field("epoch", &c.epoch)
            .field("position", &c.position)
            .finish()
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        let prepared = {
            let mut p = lock(&self.core.prepared);
            p.closed = true;
            p.run.take()
        };
        drop(prepared); // stops and joins its workers
    }
}

/// The next epoch's run started ahead, taken from its loader ([`Loader::take_prepared`]):
/// dropping it stops and joins its workers.
#[derive(Default)]
pub struct PreparedRun(Option<Prepared>);

impl std::fmt::Debug for PreparedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PreparedRun")
            .field(&self.0.as_ref().map(|p| (p.epoch, p.position)))
            .finish()
    }
}

impl Loader {
    /// Take the run started ahead for the next epoch, if any (dropping it joins its workers;
    /// the next iteration starts its own). What `close()` does besides stopping the iterator,
    /// so that no thread outlives it.
    pub fn take_prepared(&self) -> PreparedRun {
        PreparedRun(lock(&self.core.prepared).run.take())
    }

    /// A loader producing `columns` from the records of `dataset` (with the RAM and decoded
    /// caches that `config` asks for).
    pub fn new(
        dataset: Arc<Dataset>,
        columns: Vec<Column>,
        config: LoaderConfig,
    ) -> Result<Loader> {
        config.validate()?;
        let records = Records::new(
            dataset,
            columns,
            config.cache_budget_bytes(),
            config.decoded_cache.as_ref(),
        )?;
        Loader::from_samples(Arc::new(records), config)
    }

    /// A loader of any kind of samples: samples alone (in the loader's shuffle), or with their
    /// own order and groups (a [`crate::Mixture`], a [`Loadable`]).
    pub fn from_samples(samples: impl Into<Loadable>, config: LoaderConfig) -> Result<Loader> {
        config.validate()?;
        let Loadable {
            samples,
            order,
            groups,
        } = samples.into();
        let threads = match config.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        // Build one epoch's order now, so that a bad configuration fails here rather than later.
        let epoch0 = order.epoch(&config.shuffle, config.seed, 0)?;
        RankPlan::new(
            epoch0,
            0,
            config.world_size,
            config.rank,
            config.batch_size,
            config.tail,
        )?;
        let mut memory_budget = config.memory_budget_bytes();
        let batch_bytes = crate::samples::batch_bytes(&*samples, config.batch_size);
        let caches = samples.caches();
        let node_lease = match config.node_memory_budget {
            None => None,
            Some(ByteSize(total)) => {
                // no more than the deepest window the autotuner would ever use
                let want = memory_budget.min(batch_bytes.saturating_mul(MAX_AUTO_PREFETCH));
                let (budget, lease) = node_lease(total, want, batch_bytes)?;
                memory_budget = lease.bytes();
                // the RAM and decoded caches keep what they hold within what is left
                let share = Arc::new(crate::cache::NodeShare::new(budget));
                for c in &caches {
                    c.under_node_budget(&share);
                }
                Some(lease)
            }
        };
        let ram = stokehold_storage::file::physical_memory();
        if ram > 0 && batch_bytes > ram / 2 {
            return Err(EngineError::Config(format!(
                "one batch of {} samples would take about {}, more than half this machine's \
                 memory ({}): give a smaller batch_size",
                config.batch_size,
                ByteSize(batch_bytes),
                ByteSize(ram)
            )));
        }
        if !config.prefetch_auto
            && ram > 0
            && (config.prefetch as u64).saturating_mul(batch_bytes) > ram / 2
        {
            return Err(EngineError::Config(format!(
                "prefetch {} batches of about {} each would hold {}, more than half this \
                 machine's memory ({}): give a smaller prefetch or batch_size, or \
                 prefetch=\"auto\" (kept within memory_budget)",
                config.prefetch,
                ByteSize(batch_bytes),
                ByteSize((config.prefetch as u64).saturating_mul(batch_bytes)),
                ByteSize(ram)
            )));
        }
        let mut prefetch = config.prefetch.max(1) as u64;
        // the deepest window: the pool keeps enough free buffers for it
        let mut deepest = prefetch;
        if config.prefetch_auto {
            deepest = (memory_budget / batch_bytes).clamp(1, MAX_AUTO_PREFETCH);
            prefetch = prefetch.min(deepest);
        }
        let columns = samples.columns().len();
        let crate::samples::Layout {
            stage_names,
            fingerprint,
            ..
        } = samples.layout();
        let stats = Collector::new(stage_names, threads, config.profile, config.trace_capacity);
        Ok(Loader {
            core: Arc::new(Core {
                fingerprint,
                order,
                groups: groups.map(GroupAccounts::new),
                caches,
                threads,
                pool: Arc::new(BufferPool::new(4 * (deepest as usize + 2) * columns)),
                stats: Arc::new(stats),
                active: AtomicUsize::new(threads),
                prefetch: AtomicU64::new(prefetch),
                memory_budget,
                batch_bytes,
                cursor: Mutex::new(Cursor::default()),
                prepared: Mutex::new(PreparedSlot::default()),
                spare_io: Mutex::new(Vec::new()),
                runs: Mutex::new((0, Vec::new())),
                node_lease,
                samples,
                config,
            }),
        })
    }

    pub(crate) fn core(&self) -> Arc<Core> {
        Arc::clone(&self.core)
    }

    /// The samples.
    pub fn samples(&self) -> &Arc<dyn Samples> {
        &self.core.samples
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.core.config
    }

    /// Worker threads (the configuration's, or one per core).
    pub fn threads(&self) -> usize {
        self.core.threads
    }

    /// The epoch the next iteration runs (or the one running).
    pub fn epoch(&self) -> u64 {
        self.core.cursor().epoch
    }

    /// Start epoch `epoch` from its beginning at the next iteration.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.core.set_cursor(Cursor::epoch_start(epoch));
    }

    /// Batches this rank gets in the rest of the current epoch.
    pub fn steps(&self) -> Result<u64> {
        Ok(self.core.plan(self.core.cursor())?.steps())
    }

    /// Samples in the current epoch over all ranks: its order's length (the samples' own count,
    /// or an order's own, such as the rows planned for packed conversations).
    pub fn epoch_samples(&self) -> Result<u64> {
        let epoch = self.core.cursor().epoch;
        Ok(self.core.plan(Cursor::epoch_start(epoch))?.order().len())
    }

    /// Batches this rank gets in a whole epoch. While an order's length is known late (packed
    /// conversations still being counted) an estimate, exact once the epoch is planned.
    pub fn steps_per_epoch(&self) -> Result<u64> {
        let plan = self.core.plan(Cursor::default())?;
        Ok(plan
            .known_steps()
            .unwrap_or_else(|| plan.estimated_epoch_steps()))
    }

    /// Where the loader is (after the last batch delivered): resume any number of ranks from it
    /// with [`Loader::load_state`].
    pub fn state(&self) -> ResumeState {
        self.core.state()
    }

    /// Continue from a saved state (of the same samples, seed and order; any world size).
    pub fn load_state(&mut self, state: &ResumeState) -> Result<()> {
        let check = |dataset| {
            state.check(
                dataset,
                self.core.config.seed,
                &self.core.config.shuffle,
                self.core.samples.len(),
            )
        };
        // everything but the dataset first: a mixture's samples take the state's blend only
        // when the rest of it fits
        check(None)?;
        let own = self.core.order.resume(
            state.order.as_ref(),
            state.epoch,
            state.position.min(self.core.samples.len()),
        )?;
        if !own {
            check(Some(self.core.fingerprint.as_str()))?;
        }
        let runs = self.resumed_runs(state)?;
        self.core.set_cursor(Cursor {
            epoch: state.epoch,
            position: state.position,
            skipped: state.skipped,
            in_a_row: state.failures_in_a_row,
        });
        *lock(&self.core.runs) = (state.epoch, runs);
        Ok(())
    }

    /// The runs of steps of the state's epoch, continued by this loader: the state's (checked),
    /// and this loader's shape from the state's position when it differs from the last one's.
    fn resumed_runs(&self, state: &ResumeState) -> Result<Vec<[u64; 4]>> {
        let core = &self.core;
        let here = core.run_here(0, 0);
        let stride = here[2] * here[3];
        if state.position == 0 {
            return Ok(Vec::new());
        }
        let mut runs = state.runs.clone();
        let bad = |detail: String| EngineError::InvalidState {
            field: Some("runs".into()),
            detail,
        };
        for (i, r) in runs.iter().enumerate() {
            if r[2] == 0 || r[3] == 0 || r[2] > u64::from(u32::MAX) || r[3] > u64::from(u32::MAX) {
                return Err(bad(format!(
                    "run {i} has world size {} and batch size {}",
                    r[2], r[3]
                )));
            }
            if r[1] > state.position
                || (i > 0 && (r[0] <= runs[i - 1][0] || r[1] <= runs[i - 1][1]))
            {
                return Err(bad(format!("run {i} does not follow the one before it")));
            }
        }
        let step = match runs.last() {
            // the steps the last run took up to the state's position (the last one may be
            // partial only at the end of an epoch)
            Some(r) => r[0] + (state.position - r[1]).div_ceil(r[2] * r[3]),
            // a state without runs: the steps before it counted in this loader's shape
            None => state.position.div_ceil(stride),
        };
        if runs.is_empty() && state.position.is_multiple_of(stride) {
            runs.push(here);
        } else if runs
            .last()
            .is_none_or(|r| (r[2], r[3]) != (here[2], here[3]))
        {
            runs.push(core.run_here(step, state.position));
        }
        Ok(runs)
    }

    /// The slots of rank `rank`'s batch at step `step` of epoch `epoch` (`None`: this loader's
    /// rank, its current epoch): the samples that batch holds, in order, as a pure function of
    /// the order, the seed and the position, computed without replaying the epoch. `step`
    /// counts the epoch's steps from its start across every resume, whatever the world size
    /// of each run (the runs of a resumed state say where each began); each slot's `id` is what
    /// `batch["id"]` holds with `include_ids`.
    pub fn samples_at(
        &self,
        step: u64,
        rank: Option<u32>,
        epoch: Option<u64>,
    ) -> Result<Vec<crate::sampler::Slot>> {
        let core = &self.core;
        let epoch = epoch.unwrap_or_else(|| core.cursor().epoch);
        let runs = core.runs_of(epoch);
        let i = runs.partition_point(|r| r[0] <= step).saturating_sub(1);
        let [first, start, world, batch] = runs[i];
        let (world, batch) = (world as u32, batch as u32);
        let rank = rank.unwrap_or(core.config.rank);
        if rank >= world {
            return Err(EngineError::Config(format!(
                "rank {rank} is out of range at step {step}: the world had {world} ranks then"
            )));
        }
        let stride = u64::from(world) * u64::from(batch);
        let len = core.samples.len();
        let position = (step - first)
            .checked_mul(stride)
            .and_then(|p| p.checked_add(start))
            .filter(|&p| p < len)
            .ok_or_else(|| {
                EngineError::Config(format!(
                    "step {step} is past the end of epoch {epoch} ({len} samples, {stride} a \
                     step)"
                ))
            })?;
        let order = core
            .order
            .epoch(&core.config.shuffle, core.config.seed, epoch)?;
        let plan = RankPlan::new(order, position, world, rank, batch, core.config.tail)?;
        let mut slots = Vec::with_capacity(batch as usize);
        plan.fill_batch(0, &mut slots)?;
        core.order.adapt(plan.order(), &mut slots);
        Ok(slots)
    }

    /// The world size of the run that took step `step` of `epoch` (`None`: the current one).
    pub fn world_size_at(&self, step: u64, epoch: Option<u64>) -> u32 {
        let epoch = epoch.unwrap_or_else(|| self.core.cursor().epoch);
        let runs = self.core.runs_of(epoch);
        let i = runs.partition_point(|r| r[0] <= step).saturating_sub(1);
        runs[i][2] as u32
    }

    /// What is known of sample `id` without reading it beyond its index: its source, shard and
    /// record (or file and offset), its key or path when asked to read it (`read`).
    pub fn describe(&self, id: u64, read: bool) -> serde_json::Map<String, serde_json::Value> {
        self.core.samples.describe(id, read)
    }

    /// Statistics since the loader was made.
    pub fn stats(&self) -> Stats {
        self.core.stats()
    }

    /// How long the training loop waited for the last batch delivered (`None` before the
    /// first): what `stats().waits` ends with, without the rest of the statistics.
    pub fn last_wait(&self) -> Option<crate::stats::StepWait> {
        self.core.stats.last_wait()
    }

    /// The stage spans kept so far (the newest `trace_capacity`) as Chrome Trace Event JSON,
    /// loadable in chrome://tracing or Perfetto; `None` when tracing is off
    /// (`trace_capacity` 0).
    pub fn trace_json(&self) -> Option<String> {
        self.core.stats.trace_json()
    }

    /// The memory budget of batches prepared ahead, in bytes.
    pub fn memory_budget(&self) -> u64 {
        self.core.memory_budget
    }

    /// Iterate the rest of the current epoch on the worker threads. The iterator owns what it
    /// needs; the loader's position follows the batches it delivers, and moves to the next epoch
    /// once the last one is delivered (dropping the iterator earlier keeps the position of the
    /// last batch delivered). Run one iterator at a time.
    pub fn iter(&mut self) -> Result<BatchIter> {
        BatchIter::start(Arc::clone(&self.core))
    }
}
