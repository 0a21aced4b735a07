//! The loader: the sampler's order for this rank, read and transformed on a pool of native
//! threads, collated into preallocated batch buffers, delivered in order through a bounded
//! prefetch window.
//!
//! Work is split into tasks of a few samples; a task writes only its own slots of its batch, so
//! workers never wait for each other, and the order of delivery (and every random choice) is
//! independent of which thread did what.

use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use stokehold_format::{Dataset, FieldValue, RecordView};

use crate::batch::{Batch, BufferPool, SharedBatch, copy_slot, finish_batch};
use crate::cache::{DecodedCache, RecordCache, dataset_key};
use crate::disk_cache::{CacheProgress, DiskCache};
use crate::error::{EngineError, Result};
use crate::fetch::{self, TaskBytes};
use crate::rng::SampleRng;
use crate::sampler::{EpochOrder, RankPlan, Shuffle, Slot, Tail};
use crate::state::{ResumeState, STATE_VERSION, fingerprint};
use crate::stats::{Collector, Stats, WorkerStats};
use crate::transform::{Column, Output, SampleCtx, write_value};

/// What to do with a sample that cannot be read or transformed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ErrorPolicy {
    /// Stop with an error naming the sample (the default).
    Fail,
    /// Skip it: its slot is filled with a copy of another sample of the same batch, flagged as
    /// padding, so batch shapes stay the same and ranks stay in step. The ids are counted and
    /// reported. Fails anyway once more than `max_fraction` of this rank's samples in the epoch,
    /// or more than `max_consecutive` samples in a row, have failed.
    Skip {
        /// Largest fraction of the epoch's samples (on this rank) that may be skipped.
        max_fraction: f64,
        /// Longest run of consecutive failures.
        max_consecutive: u64,
    },
}

impl ErrorPolicy {
    /// `Skip` with the default bounds: 5% of the epoch, 64 in a row.
    pub fn skip() -> ErrorPolicy {
        ErrorPolicy::Skip {
            max_fraction: 0.05,
            max_consecutive: 64,
        }
    }
}

/// How to load.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderConfig {
    /// Samples per batch (per rank).
    pub batch_size: u32,
    /// Seed of the order and of every random augmentation.
    pub seed: u64,
    /// The order.
    pub shuffle: Shuffle,
    /// What to do with the end of an epoch that does not fill a step of all ranks.
    pub tail: Tail,
    /// This process's rank.
    pub rank: u32,
    /// Number of ranks.
    pub world_size: u32,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Batches prepared ahead of the consumer (at least 1); with `prefetch_auto`, the starting
    /// depth.
    pub prefetch: usize,
    /// Adjust the prefetch depth while running: deeper when the consumer waits for data while
    /// workers sit blocked on the prefetch window (bursty stages), never beyond what
    /// `memory_budget` allows (and shallower when a deeper window would exceed it).
    pub prefetch_auto: bool,
    /// Bytes that batches prepared ahead may take, for `prefetch_auto`: the depth is kept at or
    /// below `memory_budget / bytes per batch` (at least 1). 0: the default,
    /// [`default_memory_budget`].
    pub memory_budget: u64,
    /// Count and time the stages (the statistics' items, busy time and latencies): each worker
    /// times its first sample and then one in 8 (its latencies make the histograms; busy time is scaled to all
    /// items). Off, the workers read no clock per sample; throughput, waits, queue and bytes read
    /// are still counted.
    pub profile: bool,
    /// Keep the newest `trace_capacity` stage spans (stage, thread, start, duration, sample id)
    /// for [`Loader::trace_json`]: 32 bytes each in a bounded ring. 0 (the default): no tracing,
    /// no cost.
    pub trace_capacity: usize,
    /// Samples per task; 0 picks one from the batch size and thread count.
    pub task_size: usize,
    /// Adjust the number of working threads while running (between 1 and `threads`): fewer
    /// when the consumer is slower than the pipeline (the workers wait on a full prefetch
    /// window), more again when the consumer waits for data. Saves CPU for the training process
    /// without making it wait.
    pub autotune: bool,
    /// When an epoch delivers its last batch, start the next epoch's workers at once, so its
    /// first batches are ready when the next iteration begins (no stall at epoch boundaries).
    /// Bindings whose stages need a lock the consumer may hold while dropping the loader (the
    /// Python GIL) turn this off.
    pub prepare_next_epoch: bool,
    /// Failed samples.
    pub on_error: ErrorPolicy,
    /// Byte budget of the RAM cache of record bytes (whole shards, shared by the loaders of this
    /// process that read the same dataset); 0 turns it off.
    pub cache_bytes: u64,
    /// Keep the output of the image columns' deterministic prefix (decode + resize to a shorter
    /// side) in RAM, and optionally in a local directory; the random stages start from it.
    pub decoded_cache: Option<DecodedCacheConfig>,
}

/// The decoded cache of image columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedCacheConfig {
    /// Shorter side of the cached images (images already smaller keep their size).
    pub size: u32,
    /// Byte budget (shared by the loaders of this process with the same dataset and prefix).
    pub budget: u64,
    /// A local directory that keeps the images across runs and processes (see
    /// [`crate::decoded_disk`]); `None`: RAM only.
    pub dir: Option<std::path::PathBuf>,
    /// The most bytes the directory may hold for one dataset and prefix.
    pub dir_limit: u64,
}

impl DecodedCacheConfig {
    /// A RAM-only decoded cache of images with shorter side `size`, within `budget` bytes.
    pub fn in_ram(size: u32, budget: u64) -> DecodedCacheConfig {
        DecodedCacheConfig {
            size,
            budget,
            dir: None,
            dir_limit: u64::MAX,
        }
    }
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            batch_size: 32,
            seed: 0,
            shuffle: Shuffle::Global,
            tail: Tail::Drop,
            rank: 0,
            world_size: 1,
            threads: 0,
            prefetch: 4,
            task_size: 0,
            autotune: false,
            prefetch_auto: false,
            memory_budget: 0,
            profile: true,
            trace_capacity: 0,
            prepare_next_epoch: true,
            on_error: ErrorPolicy::Fail,
            cache_bytes: 0,
            decoded_cache: None,
        }
    }
}

/// The default memory budget of batches prepared ahead: 10% of physical memory, at most 2 GiB
/// (2 GiB where physical memory is unknown).
pub fn default_memory_budget() -> u64 {
    const CAP: u64 = 2 << 30;
    physical_memory().map_or(CAP, |m| (m / 10).clamp(64 << 20, CAP))
}

/// Physical memory in bytes (Linux: `MemTotal` of /proc/meminfo).
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A loader over one dataset: iterate it once per epoch; save and restore its position.
pub struct Loader {
    dataset: Arc<Dataset>,
    columns: Vec<Column>,
    field_index: Vec<usize>,
    config: LoaderConfig,
    threads: usize,
    /// Threads currently allowed to work (autotuning moves it; kept across epochs).
    active: Arc<AtomicUsize>,
    /// The prefetch depth now (autotuning moves it; kept across epochs).
    prefetch: Arc<AtomicU64>,
    /// `config.memory_budget`, or the default.
    memory_budget: u64,
    /// Estimated bytes of one batch (for the memory budget).
    batch_bytes: u64,
    fingerprint: String,
    blocks: Vec<u64>,
    epoch: u64,
    position: u64,
    pool: Arc<BufferPool>,
    stats: Arc<Collector>,
    /// The RAM cache of record bytes, when on.
    cache: Option<Arc<RecordCache>>,
    /// The decoded caches of image columns, when on.
    decoded: Vec<Arc<DecodedCache>>,
    /// The disk cache the dataset was opened through, when any.
    disk: Option<(Arc<DiskCache>, CacheProgress)>,
    /// The next epoch's run, started when the previous epoch delivered its last batch, so that
    /// its first batches are ready when the next iteration begins.
    prepared: Option<Prepared>,
}

/// A run started ahead (see [`Loader::iter`]). Dropping it stops and joins its workers, except
/// in a forked child, where those threads do not exist: there it is forgotten.
struct Prepared {
    epoch: u64,
    position: u64,
    pid: u32,
    spawned: Option<Spawned>,
}

impl Prepared {
    /// The run, if it was started in this process for `(epoch, position)`.
    fn take_for(mut self, epoch: u64, position: u64) -> Option<Spawned> {
        if self.epoch == epoch && self.position == position && self.pid == std::process::id() {
            self.spawned.take()
        } else {
            None
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some((run, workers, ..)) = self.spawned.take() {
            if self.pid != std::process::id() {
                // forked child: the workers are not here; joining would wait forever
                std::mem::forget(workers);
                std::mem::forget(run);
                return;
            }
            run.stop.store(true, Ordering::Release);
            if let Ok(_d) = run.delivered.lock() {
                run.window.notify_all();
            }
            if let Ok(_p) = run.park_lock.lock() {
                run.parked.notify_all();
            }
            for w in workers {
                let _ = w.join();
            }
        }
    }
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("dataset", &self.dataset.dir())
            .field("columns", &self.columns)
            .field("config", &self.config)
            .field("epoch", &self.epoch)
            .field("position", &self.position)
            .finish()
    }
}

impl Loader {
    /// A loader producing `columns` from `dataset`.
    pub fn new(
        dataset: Arc<Dataset>,
        columns: Vec<Column>,
        config: LoaderConfig,
    ) -> Result<Loader> {
        let schema = dataset.schema();
        if columns.is_empty() {
            return Err(EngineError::Config(
                "a loader needs at least one column".into(),
            ));
        }
        let mut field_index = Vec::with_capacity(columns.len());
        for c in &columns {
            field_index.push(schema.index_of(&c.field).ok_or_else(|| {
                EngineError::Config(format!(
                    "column {:?} reads field {:?}, which the dataset does not have ({schema})",
                    c.name, c.field
                ))
            })?);
            if let Output::Fixed { shape, .. } = &c.output {
                if shape.iter().product::<usize>() == 0 && !shape.is_empty() {
                    return Err(EngineError::Config(format!(
                        "column {:?} has an empty fixed shape {shape:?}",
                        c.name
                    )));
                }
            }
        }
        if config.batch_size == 0 {
            return Err(EngineError::Config("batch_size must be at least 1".into()));
        }
        if config.world_size == 0 || config.rank >= config.world_size {
            return Err(EngineError::Config(format!(
                "rank {} is not in 0..{}",
                config.rank, config.world_size
            )));
        }
        if let ErrorPolicy::Skip { max_fraction, .. } = config.on_error {
            if !(0.0..=1.0).contains(&max_fraction) {
                return Err(EngineError::Config(format!(
                    "max_fraction {max_fraction} is not in 0..=1"
                )));
            }
        }
        let threads = match config.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let blocks: Vec<u64> = dataset
            .manifest()
            .shards
            .iter()
            .map(|s| s.records)
            .collect();
        // Build one epoch's order now, so that a bad configuration fails here rather than later.
        EpochOrder::new(
            dataset.len(),
            Some(&blocks),
            &config.shuffle,
            config.seed,
            0,
        )?;
        let fp = fingerprint(&dataset);
        let in_memory = dataset
            .shards()
            .first()
            .is_none_or(|s| s.source().slice(0, 0).is_some());
        let cache = (config.cache_bytes > 0 && !in_memory)
            .then(|| RecordCache::shared(&dataset, &dataset_key(&dataset), config.cache_bytes));
        let mut columns = columns;
        let decoded = std::cell::RefCell::new(Vec::new());
        if let Some(dc) = &config.decoded_cache {
            if dc.size == 0 {
                return Err(EngineError::Config(
                    "the decoded cache's size must be at least 1".into(),
                ));
            }
            for c in &mut columns {
                for t in &mut c.transforms {
                    let get = |prefix: &str| {
                        let key = format!("{}/{}/{prefix}", dataset_key(&dataset), c.name);
                        let cache = match &dc.dir {
                            None => DecodedCache::shared(&key, dc.budget),
                            Some(dir) => {
                                // the directory's key names the content, not where it is
                                let disk_key = format!("{fp}/{}/{prefix}", c.name);
                                DecodedCache::shared_on_disk(
                                    &key,
                                    dc.budget,
                                    dir,
                                    &disk_key,
                                    dc.dir_limit,
                                )?
                            }
                        };
                        decoded.borrow_mut().push(Arc::clone(&cache));
                        Ok(cache)
                    };
                    if let Some(cached) = t.with_decoded_cache(dc.size, &get)? {
                        *t = cached;
                    }
                }
            }
            if decoded.borrow().is_empty() {
                return Err(EngineError::Config(
                    "decoded_cache is set but no column has a stage with a deterministic prefix to cache (an image decode)".into(),
                ));
            }
        }
        let names = stage_names(&columns);
        let memory_budget = match config.memory_budget {
            0 => default_memory_budget(),
            b => b,
        };
        let batch_bytes = batch_bytes(&dataset, &columns, config.batch_size);
        let mut prefetch = config.prefetch.max(1) as u64;
        // the deepest window: the pool keeps enough free buffers for it
        let mut deepest = prefetch;
        if config.prefetch_auto {
            deepest = (memory_budget / batch_bytes).clamp(1, MAX_AUTO_PREFETCH);
            prefetch = prefetch.min(deepest);
        }
        Ok(Loader {
            cache,
            decoded: decoded.into_inner(),
            disk: None,
            fingerprint: fp,
            dataset,
            field_index,
            threads,
            blocks,
            epoch: 0,
            position: 0,
            pool: Arc::new(BufferPool::new(4 * (deepest as usize + 2) * columns.len())),
            stats: Arc::new(Collector::new(
                names,
                threads,
                config.profile,
                config.trace_capacity,
            )),
            active: Arc::new(AtomicUsize::new(threads)),
            prefetch: Arc::new(AtomicU64::new(prefetch)),
            memory_budget,
            batch_bytes,
            prepared: None,
            columns,
            config,
        })
    }

    /// Report the disk cache the dataset was opened through
    /// ([`crate::disk_cache::open_dataset`]) in this loader's statistics.
    pub fn with_disk_cache(mut self, cache: Arc<DiskCache>, progress: CacheProgress) -> Loader {
        self.disk = Some((cache, progress));
        self
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// The columns.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The epoch the next iteration runs.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Start epoch `epoch` from its beginning at the next iteration.
    pub fn set_epoch(&mut self, epoch: u64) {
        if (epoch, 0) != (self.epoch, self.position) {
            self.prepared = None;
        }
        self.epoch = epoch;
        self.position = 0;
    }

    fn plan(&self) -> Result<RankPlan> {
        let order = EpochOrder::new(
            self.dataset.len(),
            Some(&self.blocks),
            &self.config.shuffle,
            self.config.seed,
            self.epoch,
        )?;
        Ok(RankPlan::new(
            order,
            self.position,
            self.config.world_size,
            self.config.rank,
            self.config.batch_size,
            self.config.tail,
        )?)
    }

    /// Batches this rank gets in the rest of the current epoch.
    pub fn steps(&self) -> Result<u64> {
        Ok(self.plan()?.steps())
    }

    /// Where the loader is: resume any number of ranks from it with [`Loader::load_state`].
    pub fn state(&self) -> ResumeState {
        ResumeState {
            version: STATE_VERSION,
            dataset: self.fingerprint.clone(),
            seed: self.config.seed,
            shuffle: self.config.shuffle,
            epoch: self.epoch,
            position: self.position,
        }
    }

    /// Continue from a saved state (of this dataset, seed and order; any world size).
    pub fn load_state(&mut self, state: &ResumeState) -> Result<()> {
        state.check(
            &self.fingerprint,
            self.config.seed,
            &self.config.shuffle,
            self.dataset.len(),
        )?;
        if (state.epoch, state.position) != (self.epoch, self.position) {
            self.prepared = None;
        }
        self.epoch = state.epoch;
        self.position = state.position;
        Ok(())
    }

    /// Statistics since the loader was made.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.snapshot();
        s.active_threads = self.active.load(Ordering::Relaxed);
        s.caches = self.cache.iter().map(|c| c.stats()).collect();
        s.caches.extend(self.decoded.iter().flat_map(|c| c.stats()));
        s.caches.extend(self.disk.iter().map(|(c, p)| p.stats(c)));
        s.prefetch = self.prefetch.load(Ordering::Relaxed) as usize;
        s
    }

    /// The stage spans kept so far (the newest `trace_capacity`) as Chrome Trace Event JSON,
    /// loadable in chrome://tracing or Perfetto; `None` when tracing is off
    /// (`trace_capacity` 0).
    pub fn trace_json(&self) -> Option<String> {
        self.stats.trace_json()
    }

    /// The memory budget of batches prepared ahead, in bytes.
    pub fn memory_budget(&self) -> u64 {
        self.memory_budget
    }

    /// Iterate the rest of the current epoch. When the iterator has delivered the epoch's last
    /// batch, the loader moves on to the next epoch; dropping it earlier keeps the position of
    /// the last batch delivered.
    pub fn iter(&mut self) -> Result<BatchIter<'_>> {
        start(LoaderRef::Borrowed(self)).map_err(|(_, e)| e)
    }

    /// Like [`Loader::iter`], but the iterator owns the loader (for bindings that cannot hold a
    /// borrow, such as a Python iterator object). Take the loader back with
    /// [`BatchIter::into_loader`]. On error the loader is handed back with it.
    #[allow(clippy::result_large_err)] // the error hands the loader back: rare, and moved once
    pub fn into_batches(self) -> std::result::Result<BatchIter<'static>, (Loader, EngineError)> {
        start(LoaderRef::Owned(Box::new(self))).map_err(|(l, e)| match l {
            LoaderRef::Owned(b) => (*b, e),
            // `start` hands back the reference it was given.
            LoaderRef::Borrowed(_) | LoaderRef::Released => unreachable!("an owned loader"),
        })
    }
}

/// The loader a [`BatchIter`] advances: borrowed ([`Loader::iter`]) or owned
/// ([`Loader::into_batches`]).
enum LoaderRef<'l> {
    Borrowed(&'l mut Loader),
    Owned(Box<Loader>),
    /// Only between [`BatchIter::into_loader`] taking the loader out and the iterator's drop,
    /// which does not look at it.
    Released,
}

impl std::ops::Deref for LoaderRef<'_> {
    type Target = Loader;

    fn deref(&self) -> &Loader {
        match self {
            LoaderRef::Borrowed(l) => l,
            LoaderRef::Owned(l) => l,
            LoaderRef::Released => unreachable!("a released loader is never used"),
        }
    }
}

impl std::ops::DerefMut for LoaderRef<'_> {
    fn deref_mut(&mut self) -> &mut Loader {
        match self {
            LoaderRef::Borrowed(l) => l,
            LoaderRef::Owned(l) => l,
            LoaderRef::Released => unreachable!("a released loader is never used"),
        }
    }
}

/// Start the workers of the rest of the loader's current epoch (or take over the run prepared
/// for it at the end of the previous epoch).
fn start(
    mut loader: LoaderRef<'_>,
) -> std::result::Result<BatchIter<'_>, (LoaderRef<'_>, EngineError)> {
    let (epoch, position) = (loader.epoch, loader.position);
    let ready = loader
        .prepared
        .take()
        .and_then(|p| p.take_for(epoch, position));
    let this: &Loader = &loader;
    let spawned = match ready {
        Some(s) => Ok(s),
        None => match this.plan() {
            Ok(p) => this.spawn_run(p),
            Err(e) => return Err((loader, e)),
        },
    };
    match spawned {
        Ok((run, workers, rx, names, outputs)) => Ok(BatchIter {
            loader,
            tuner: Tuner::new(&run.stats),
            run,
            workers,
            rx,
            reorder: BTreeMap::new(),
            next_step: 0,
            names,
            outputs,
            finished: false,
            skipped_in_epoch: 0,
            consecutive_failures: 0,
        }),
        Err(e) => Err((loader, e)),
    }
}

type Spawned = (
    Arc<Run>,
    Vec<JoinHandle<()>>,
    Receiver<Arc<SharedBatch>>,
    Vec<String>,
    Vec<Output>,
);

impl Loader {
    fn spawn_run(&self, plan: RankPlan) -> Result<Spawned> {
        let steps = plan.steps();
        let b = self.config.batch_size as usize;
        let task_size = match self.config.task_size {
            0 => {
                // Enough tasks per batch to share it between the threads; with large records,
                // tasks of a few MiB, so that records neighbouring in the order are read in
                // large requests (coalesced in `fetch`).
                let by_count = (b / (self.threads * 4)).clamp(1, 64);
                let mean = self.dataset.bytes() / self.dataset.len().max(1);
                if mean >= 64 << 10 {
                    let by_bytes = ((4u64 << 20) / mean) as usize;
                    by_count.max(by_bytes.min(b / self.threads).max(1))
                } else {
                    by_count
                }
            }
            n => n.min(b),
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let outputs: Vec<Output> = self.columns.iter().map(|c| c.output.clone()).collect();
        let names: Vec<String> = self.columns.iter().map(|c| c.name.clone()).collect();
        let run = Arc::new(Run {
            dataset: Arc::clone(&self.dataset),
            plan,
            epoch: self.epoch,
            seed: self.config.seed,
            columns: self.columns.clone(),
            field_index: self.field_index.clone(),
            outputs: outputs.clone(),
            cache: self.cache.clone(),
            readahead: self
                .dataset
                .shards()
                .first()
                .is_some_and(|s| s.source().slice(0, 0).is_none())
                && self.dataset.bytes() / self.dataset.len().max(1) >= READAHEAD_MIN_RECORD,
            batch_size: b,
            task_size,
            tasks_per_batch: b.div_ceil(task_size),
            steps,
            next_task: AtomicU64::new(0),
            delivered: Mutex::new(0),
            window: Condvar::new(),
            prefetch: Arc::clone(&self.prefetch),
            batches: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
            tx,
            pool: Arc::clone(&self.pool),
            stats: Arc::clone(&self.stats),
            active: Arc::clone(&self.active),
            parked: Condvar::new(),
            park_lock: Mutex::new(()),
        });
        let workers = if steps == 0 {
            Ok(Vec::new())
        } else {
            (0..self.threads)
                .map(|i| {
                    let run = Arc::clone(&run);
                    std::thread::Builder::new()
                        .name(format!("stokehold-worker-{i}"))
                        .spawn(move || worker(&run, i))
                        .map_err(|e| {
                            EngineError::Config(format!("cannot start a worker thread: {e}"))
                        })
                })
                .collect::<Result<Vec<_>>>()
        };
        match workers {
            Ok(workers) => Ok((run, workers, rx, names, outputs)),
            Err(e) => {
                // Stop and join the workers already started.
                run.stop.store(true, Ordering::Release);
                Err(e)
            }
        }
    }
}

/// Bytes one batch holds: the fixed-shape columns' buffers exactly, and for each list column
/// the dataset's mean record size (an upper bound of one field's share).
fn batch_bytes(dataset: &Dataset, columns: &[Column], batch_size: u32) -> u64 {
    let b = u64::from(batch_size);
    let mean_record = || {
        let bytes: u64 = dataset.shards().iter().map(|s| s.file_len()).sum();
        bytes / dataset.len().max(1)
    };
    columns
        .iter()
        .map(|c| match c.output {
            Output::Fixed { .. } => c.output.slot_bytes() as u64 * b,
            Output::List => mean_record() * b,
        })
        .sum::<u64>()
        .max(1)
}

/// Deepest prefetch window the autotuner uses.
const MAX_AUTO_PREFETCH: u64 = 32;

/// Stage names: read, parse, then each column's stages.
fn stage_names(columns: &[Column]) -> Vec<String> {
    let mut names = vec!["read".to_string(), "parse".to_string()];
    for c in columns {
        if c.transforms.is_empty() {
            names.push(format!("{}/collate", c.name));
        }
        for t in &c.transforms {
            names.push(format!("{}/{}", c.name, t.name()));
        }
    }
    names
}

/// Steps between a batch being started and the batch whose records are then announced to
/// storage (readahead).
const READAHEAD: u64 = 2;

/// Mean record size from which readahead hints are sent: below it, a hint (one system call per
/// record in a shuffled order) would cost more than the small read it announces.
const READAHEAD_MIN_RECORD: u64 = 32 << 10;

/// What the workers of one iteration share.
struct Run {
    dataset: Arc<Dataset>,
    plan: RankPlan,
    epoch: u64,
    seed: u64,
    columns: Vec<Column>,
    field_index: Vec<usize>,
    outputs: Vec<Output>,
    /// The RAM cache of record bytes, when on.
    cache: Option<Arc<RecordCache>>,
    /// Whether to send readahead hints (storage not already in memory, records large enough).
    readahead: bool,
    batch_size: usize,
    task_size: usize,
    tasks_per_batch: usize,
    steps: u64,
    next_task: AtomicU64,
    /// Steps the consumer has taken; workers stay within `prefetch` steps of it.
    delivered: Mutex<u64>,
    window: Condvar,
    prefetch: Arc<AtomicU64>,
    batches: Mutex<HashMap<u64, Arc<SharedBatch>>>,
    stop: AtomicBool,
    tx: Sender<Arc<SharedBatch>>,
    pool: Arc<BufferPool>,
    stats: Arc<Collector>,
    /// Workers with an index at or above this wait (autotuning).
    active: Arc<AtomicUsize>,
    parked: Condvar,
    park_lock: Mutex<()>,
}

fn worker(run: &Run, index: usize) {
    let mut bytes = TaskBytes::default();
    let mut hints = Vec::new();
    let mut ws = run.stats.worker(index);
    let total = run.steps * run.tasks_per_batch as u64;
    loop {
        if run.stop.load(Ordering::Acquire) {
            return;
        }
        if index >= run.active.load(Ordering::Relaxed) {
            // parked by the autotuner: wait to be needed again (checking for stop)
            if let Ok(g) = run.park_lock.lock() {
                let _ = run.parked.wait_timeout(g, Duration::from_millis(50));
            }
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
            let Ok(mut d) = run.delivered.lock() else {
                return;
            };
            while step >= *d + run.prefetch.load(Ordering::Relaxed)
                && !run.stop.load(Ordering::Acquire)
            {
                match run.window.wait_timeout(d, Duration::from_millis(100)) {
                    Ok((g, _)) => d = g,
                    Err(_) => return,
                }
            }
            run.stats
                .worker_wait
                .fetch_add(waited.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if run.stop.load(Ordering::Acquire) {
            return;
        }
        let (batch, created) = match batch_for(run, step) {
            Some(b) => b,
            None => return,
        };
        if created && run.readahead && !run.cache.as_ref().is_some_and(|c| c.complete()) {
            // Order-aware readahead: the batch `READAHEAD` steps on will be read soon (the
            // first batch of a run also announces the ones before it).
            let from = if step == 0 { 0 } else { step + READAHEAD };
            for s in from..=(step + READAHEAD).min(run.steps.saturating_sub(1)) {
                if let Ok(slots) = run.plan.batch(s) {
                    let ids: Vec<u64> = slots.map(|x| x.id).collect();
                    fetch::hint(&run.dataset, run.cache.as_deref(), &ids, &mut hints);
                }
            }
        }
        let first = task * run.task_size;
        let last = (first + run.task_size).min(run.batch_size);
        // the read stage: one fetch per task (coalesced reads), its time shared by the samples
        let t0 = ws.profiling().then(Instant::now);
        bytes.fetch(&run.dataset, run.cache.as_deref(), &batch.ids[first..last]);
        let now = t0.map(|_| Instant::now());
        let per_sample = t0
            .zip(now)
            .map(|(a, b)| b.duration_since(a) / (last - first).max(1) as u32);
        for &id in &batch.ids[first..last] {
            if let (Some(a), Some(b)) = (t0, now) {
                ws.span(0, id, a, b);
            }
            ws.add(0, per_sample);
        }
        for slot in first..last {
            let id = batch.ids[slot];
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let got = bytes.get(
                    &run.dataset,
                    run.cache.as_deref(),
                    slot - first,
                    run.dataset.verifies_records(),
                );
                match got {
                    Ok(record) => process(run, &batch, slot, id, record, &mut ws),
                    Err(e) => Err(EngineError::Sample { id, source: e }),
                }
            }));
            let err = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(panic) => EngineError::Panic {
                    id,
                    message: panic_message(&panic),
                },
            };
            if let Ok(mut f) = batch.failures.lock() {
                f.push((slot, err));
            }
        }
        ws.flush();
        if batch.task_done() {
            if let Ok(mut m) = run.batches.lock() {
                m.remove(&step);
            }
            if run.tx.send(batch).is_err() {
                return; // the consumer is gone
            }
        }
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}

/// The shared batch of `step`, created by the first task that needs it (then `true`).
fn batch_for(run: &Run, step: u64) -> Option<(Arc<SharedBatch>, bool)> {
    let mut m = run.batches.lock().ok()?;
    if let Some(b) = m.get(&step) {
        return Some((Arc::clone(b), false));
    }
    let mut slots: Vec<Slot> = Vec::with_capacity(run.batch_size);
    run.plan.fill_batch(step, &mut slots).ok()?;
    let ids = slots.iter().map(|s| s.id).collect();
    let padding = slots.iter().map(|s| s.padding).collect();
    let b = Arc::new(SharedBatch::new(
        run.epoch,
        step,
        ids,
        padding,
        &run.outputs,
        &run.pool,
        run.tasks_per_batch,
    ));
    m.insert(step, Arc::clone(&b));
    Some((b, true))
}

/// Parse and transform sample `id` (record `local` of shard `k`: `bytes`) into `slot` of
/// `batch`.
fn process(
    run: &Run,
    batch: &SharedBatch,
    slot: usize,
    id: u64,
    (k, local, bytes): (usize, u64, &[u8]),
    ws: &mut WorkerStats<'_>,
) -> Result<()> {
    let ds = &*run.dataset;
    let sample_err = |source| EngineError::Sample { id, source };
    // one clock read per stage boundary of the timed samples (see `stats::TIME_EVERY`); the
    // read stage was counted with the task's fetch
    let mut clock = ws.clock();
    ws.read(bytes.len());
    let shard = &ds.shards()[k];
    let schema = ds.schema();
    let view = RecordView::parse(bytes, schema.len())
        .map_err(|e| sample_err(shard.record_error(local, e)))?;
    let mut stage = 2;
    let mut parse_time = Duration::ZERO;
    for (c, col) in run.columns.iter().enumerate() {
        let value = view
            .field(
                schema,
                run.field_index[c],
                shard.limits().max_decompressed_bytes,
            )
            .map_err(|e| sample_err(shard.record_error(local, e)))?;
        ws.lap_into(&mut parse_time, 1, id, &mut clock);
        let mut rng = SampleRng::for_sample(run.seed, run.epoch, id, c as u64);
        let mut ctx = SampleCtx {
            id,
            epoch: run.epoch,
            rng: &mut rng,
        };
        let fail = |stage_name: &str, message: String| EngineError::Transform {
            id,
            stage: stage_name.to_string(),
            column: col.name.clone(),
            message,
        };
        if col.transforms.is_empty() {
            match &col.output {
                Output::Fixed { .. } => {
                    // SAFETY: this task owns `slot` (tasks cover disjoint slot ranges) and has not
                    // yet reported itself done.
                    let out = unsafe { batch.slot_mut(c, slot) };
                    write_value(&value, out).map_err(|m| fail("collate", m))?;
                }
                Output::List => batch.set_list(c, slot, value.into_owned()),
            }
            ws.lap(stage, id, &mut clock);
            stage += 1;
            continue;
        }
        let n = col.transforms.len();
        let mut v: FieldValue<'_> = value;
        for (i, t) in col.transforms.iter().enumerate() {
            if i + 1 == n {
                match &col.output {
                    Output::Fixed { .. } => {
                        // SAFETY: as above: this task owns `slot`.
                        let out = unsafe { batch.slot_mut(c, slot) };
                        t.apply_into(v, &mut ctx, out)
                            .map_err(|m| fail(t.name(), m))?;
                    }
                    Output::List => {
                        let r = t.apply(v, &mut ctx).map_err(|m| fail(t.name(), m))?;
                        batch.set_list(c, slot, r.into_owned());
                    }
                }
                ws.lap(stage, id, &mut clock);
                stage += 1;
                break;
            }
            v = t.apply(v, &mut ctx).map_err(|m| fail(t.name(), m))?;
            ws.lap(stage, id, &mut clock);
            stage += 1;
        }
    }
    ws.add(1, clock.map(|_| parse_time));
    Ok(())
}

/// The batches of one epoch (the rest of it, when resumed), in order.
pub struct BatchIter<'l> {
    loader: LoaderRef<'l>,
    run: Arc<Run>,
    workers: Vec<JoinHandle<()>>,
    rx: Receiver<Arc<SharedBatch>>,
    reorder: BTreeMap<u64, Arc<SharedBatch>>,
    next_step: u64,
    names: Vec<String>,
    outputs: Vec<Output>,
    finished: bool,
    skipped_in_epoch: u64,
    consecutive_failures: u64,
    tuner: Tuner,
}

/// The autotuner's window: consumer and worker waits since the last decision.
#[derive(Debug)]
struct Tuner {
    since: Instant,
    batches: u32,
    consumer_wait: u64,
    worker_wait: u64,
}

impl Tuner {
    fn new(stats: &Collector) -> Tuner {
        Tuner {
            since: Instant::now(),
            batches: 0,
            consumer_wait: stats.consumer_wait.load(Ordering::Relaxed),
            worker_wait: stats.worker_wait.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for BatchIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchIter")
            .field("epoch", &self.run.epoch)
            .field("next_step", &self.next_step)
            .field("steps", &self.run.steps)
            .finish()
    }
}

impl BatchIter<'_> {
    /// Batches left in this epoch.
    pub fn remaining(&self) -> u64 {
        self.run.steps - self.next_step
    }

    /// The loader's state after the batches delivered so far.
    pub fn state(&self) -> ResumeState {
        self.loader.state()
    }

    /// Statistics.
    pub fn stats(&self) -> Stats {
        self.loader.stats()
    }

    /// The trace so far (see [`Loader::trace_json`]).
    pub fn trace_json(&self) -> Option<String> {
        self.loader.trace_json()
    }

    /// Stop the workers, join them, and give back the loader of an iterator made by
    /// [`Loader::into_batches`] (`None` for one borrowing its loader). The loader's position is
    /// after the last batch delivered, as when the iterator is dropped.
    pub fn into_loader(mut self) -> Option<Loader> {
        self.shutdown();
        match std::mem::replace(&mut self.loader, LoaderRef::Released) {
            LoaderRef::Owned(l) => Some(*l),
            LoaderRef::Borrowed(_) | LoaderRef::Released => None,
        }
    }

    /// The next batch, calling `check` about every 100 ms while waiting (a Python binding checks
    /// for signals there; an error from it is returned as is).
    pub fn next_checked(&mut self, check: &mut dyn FnMut() -> Result<()>) -> Option<Result<Batch>> {
        if self.finished {
            return None;
        }
        if self.next_step >= self.run.steps {
            self.finish_epoch();
            return None;
        }
        let waited = Instant::now();
        self.run.stats.queue(self.reorder.len() + self.rx.len());
        let shared = loop {
            if let Some(b) = self.reorder.remove(&self.next_step) {
                break b;
            }
            match self.rx.recv_timeout(Duration::from_millis(100)) {
                Ok(b) => {
                    self.reorder.insert(b.step, b);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = check() {
                        return Some(Err(e));
                    }
                    if self.workers.iter().all(JoinHandle::is_finished) && self.rx.is_empty() {
                        self.finished = true;
                        return Some(Err(EngineError::Config(
                            "the worker threads stopped unexpectedly".into(),
                        )));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.finished = true;
                    return Some(Err(EngineError::Config(
                        "the worker threads stopped unexpectedly".into(),
                    )));
                }
            }
        };
        self.run
            .stats
            .consumer_wait
            .fetch_add(waited.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let mut batch = finish_batch(&shared, &self.names, &self.outputs, &self.run.pool);
        let mut failures = shared
            .failures
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default();
        failures.sort_by_key(|(slot, _)| *slot);
        if let Err(e) = self.apply_policy(&mut batch, failures) {
            self.finished = true;
            return Some(Err(e));
        }
        if self.loader.config.autotune || self.loader.config.prefetch_auto {
            self.tune();
        }
        self.next_step += 1;
        if let Ok(mut d) = self.run.delivered.lock() {
            *d = self.next_step;
        }
        self.run.window.notify_all();
        self.loader.position = self.run.plan.position_after(self.next_step);
        self.run.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.run
            .stats
            .samples
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if self.next_step >= self.run.steps {
            self.finish_epoch();
        }
        Some(Ok(batch))
    }

    /// One autotuning decision every few batches (at least 100 ms apart). When the consumer
    /// waited for data more than 2% of the window: a deeper prefetch window (`prefetch_auto`) if
    /// the workers also sat blocked on the window more than 10% of their time (the window, not the
    /// CPU, was the limit), else one more working thread (`autotune`). One fewer thread when the
    /// consumer (almost) never waited and the workers spent over half their time blocked on a
    /// full window. The depth never exceeds the memory budget over the bytes of a batch.
    fn tune(&mut self) {
        let config = &self.loader.config;
        let depth = self.run.prefetch.load(Ordering::Relaxed);
        let most = if config.prefetch_auto {
            (self.loader.memory_budget / self.loader.batch_bytes).clamp(1, MAX_AUTO_PREFETCH)
        } else {
            depth
        };
        if depth > most {
            // over the memory budget: shrink to it
            self.run.prefetch.store(most, Ordering::Relaxed);
        }
        self.tuner.batches += 1;
        let dt = self.tuner.since.elapsed();
        if self.tuner.batches < 4 || dt < Duration::from_millis(100) {
            return;
        }
        let stats = &self.run.stats;
        let cw = stats.consumer_wait.load(Ordering::Relaxed);
        let ww = stats.worker_wait.load(Ordering::Relaxed);
        let active = self.run.active.load(Ordering::Relaxed);
        let window = dt.as_nanos() as f64;
        let consumer = (cw - self.tuner.consumer_wait) as f64 / window;
        let workers = (ww - self.tuner.worker_wait) as f64 / (window * active.max(1) as f64);
        let max = self.workers.len();
        if consumer > 0.02 && config.prefetch_auto && workers > 0.1 && depth < most {
            self.run
                .prefetch
                .store((depth * 2).min(most), Ordering::Relaxed);
            if let Ok(_d) = self.run.delivered.lock() {
                self.run.window.notify_all();
            }
        } else if consumer > 0.02 && config.autotune && active < max {
            self.run.active.store(active + 1, Ordering::Relaxed);
            self.run.parked.notify_all();
        } else if consumer < 0.005 && workers > 0.5 && config.autotune && active > 1 {
            self.run.active.store(active - 1, Ordering::Relaxed);
        }
        self.tuner = Tuner::new(stats);
    }

    fn finish_epoch(&mut self) {
        if !self.finished {
            self.finished = true;
            let loader = &mut *self.loader;
            // what the decoded caches' directories hold is published for later runs
            for c in &loader.decoded {
                c.flush();
            }
            loader.epoch = self.run.epoch + 1;
            loader.position = 0;
            // Start the next epoch now, so that its first batches are being prepared while the
            // consumer works on this epoch's last one (no stall at the epoch boundary). An error
            // here is reported by the next iteration instead.
            if !loader.config.prepare_next_epoch {
                return;
            }
            if let Ok(plan) = loader.plan() {
                if plan.steps() > 0 {
                    if let Ok(spawned) = loader.spawn_run(plan) {
                        loader.prepared = Some(Prepared {
                            epoch: loader.epoch,
                            position: 0,
                            pid: std::process::id(),
                            spawned: Some(spawned),
                        });
                    }
                }
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
        let (max_fraction, max_consecutive) = match self.loader.config.on_error {
            ErrorPolicy::Fail => {
                let (_, first) = failures.into_iter().next().expect("not empty");
                return Err(first);
            }
            ErrorPolicy::Skip {
                max_fraction,
                max_consecutive,
            } => (max_fraction, max_consecutive),
        };
        if let Some((_, e)) = failures.iter().find(|(_, e)| !e.is_sample_failure()) {
            return Err(EngineError::TooManyFailures {
                detail: "a failure that is not about one sample's data".into(),
                first: e.to_string(),
            });
        }
        let failed: Vec<usize> = failures.iter().map(|(s, _)| *s).collect();
        let first_msg = failures[0].1.to_string();
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
        let epoch_samples = self.run.steps * self.run.batch_size as u64;
        let too_many = self.skipped_in_epoch as f64 > max_fraction * epoch_samples as f64;
        if longest > max_consecutive || too_many || failed.len() == batch.len() {
            return Err(EngineError::TooManyFailures {
                detail: format!(
                    "{} samples skipped this epoch (limit {:.1}% of {epoch_samples}), {longest} in a row (limit {max_consecutive})",
                    self.skipped_in_epoch,
                    max_fraction * 100.0
                ),
                first: first_msg,
            });
        }
        if let Ok(mut s) = self.run.stats.skipped.lock() {
            s.extend(failed.iter().map(|&slot| batch.ids[slot]));
        }
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
}

impl Iterator for BatchIter<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        self.next_checked(&mut || Ok(()))
    }
}

impl Drop for BatchIter<'_> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl BatchIter<'_> {
    /// Stop the workers (they finish the sample in hand) and join them. Idempotent.
    fn shutdown(&mut self) {
        self.run.stop.store(true, Ordering::Release);
        if let Ok(_d) = self.run.delivered.lock() {
            self.run.window.notify_all();
        }
        if let Ok(_p) = self.run.park_lock.lock() {
            self.run.parked.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
