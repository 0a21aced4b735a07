//! What one sample is. The engine ([`crate::pipeline`]) knows orders, tasks, batches, the prefetch
//! window, the error policy and statistics, and reads bytes through the one fetcher
//! ([`crate::fetch`]); a [`Samples`] implementation knows how many samples there are, which
//! columns each gives, which byte ranges a task's samples need ([`Samples::plan`]) and how to fill
//! one sample's slot of every column from those bytes ([`Samples::fill`]).
//!
//! - [`Records`]: the records of a packed dataset, each field through its transform stages
//!   (images, labels, anything packed).
//! - [`Tokens`]: a token dataset as packed windows of `seq_len + 1` tokens, or as padded
//!   documents (`stokehold pack --tokenizer`).

use crate::batch::SharedBatch;
use crate::blend::BlendState;
use crate::cache::CacheStats;
use crate::error::Result;
use crate::fetch::{ByteSource, Fetched, TaskPlan};
use crate::sampler::{EpochOrder, Shuffle, Slot};
use crate::stages::Output;
use crate::stats::{SourceStats, WorkerStats};

pub mod mixture;
pub mod records;
pub mod tokens;

pub use mixture::{Mixture, MixtureSource};
pub use records::Records;
pub use tokens::{IGNORE_LABEL, TokenDataset, TokenMode, TokenOptions, Tokens, VERIFY_MAX_RECORD};

pub use crate::fetch::{MAX_WAVE, REMOTE_WAVE_BYTES, Readahead};

/// What the engine needs to know of the samples it loads. Implementations must be deterministic:
/// what `fill` writes for a sample depends only on the sample id, the epoch, the seed and the
/// samples' own definition, never on the thread or the task that runs it.
pub trait Samples: Send + Sync + std::fmt::Debug + 'static {
    /// Samples per epoch (what the order permutes and the resume state counts).
    fn len(&self) -> u64;

    /// True when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sizes of the blocks a shard-block order keeps together (records per shard), or `None`
    /// when these samples have no blocks (the order is then sequential or global only).
    fn blocks(&self) -> Option<Vec<u64>>;

    /// The output columns: name and per-sample output.
    fn columns(&self) -> &[(String, Output)];

    /// The outputs of one batch when they depend on its samples (padded documents: padded to the
    /// longest, known from the index before any read); `None`: [`Samples::columns`].
    fn batch_outputs(&self, ids: &[u64]) -> Option<Vec<Output>> {
        let _ = ids;
        None
    }

    /// An order adapter: change which sample each slot of a batch gets (length bucketing). The
    /// default keeps the order's choice.
    fn adapt_order(&self, order: &EpochOrder, slots: &mut [Slot]) {
        let _ = (order, slots);
    }

    /// Names of the stages the statistics report, in the order of their indices.
    fn stage_names(&self) -> Vec<String>;

    /// Identifies the dataset and the definition of a sample, for resume states: a state is only
    /// loaded into a loader whose samples have the same fingerprint.
    fn fingerprint(&self) -> String;

    /// Mean bytes read per sample (task sizing and readahead).
    fn mean_bytes(&self) -> u64;

    /// Bytes one batch of `batch_size` holds (the memory budget of batches prepared ahead).
    fn batch_bytes(&self, batch_size: u32) -> u64 {
        self.columns()
            .iter()
            .map(|(_, o)| match o {
                Output::Fixed { .. } => o.slot_bytes() as u64,
                Output::List => self.mean_bytes(),
            })
            .sum::<u64>()
            .saturating_mul(u64::from(batch_size))
            .max(1)
    }

    /// Whether a task is a whole batch (cheap samples: one task per batch saves the hand-offs).
    fn whole_batch_tasks(&self) -> bool {
        false
    }

    /// Where the samples' bytes are (their dataset and RAM cache), for the fetcher; `None` for
    /// samples that read no bytes. When there is one, stage 0 of [`Samples::stage_names`] is the
    /// read stage ("read"), which the engine times (one fetch per task, its time shared by the
    /// task's samples).
    fn source(&self) -> Option<ByteSource<'_>> {
        None
    }

    /// Which byte ranges of [`Samples::source`] each of the samples `ids` of one task needs: for
    /// each in order, its ranges pushed to `io`'s plan, then [`TaskPlan::end_sample`]
    /// (a sample whose ranges cannot be known gets none and reports why when filled). What
    /// else the samples need to fill from those bytes may be kept in [`TaskIo::scratch`].
    fn plan(&self, ids: &[u64], io: &mut TaskIo) {
        for _ in ids {
            io.plan.end_sample();
        }
    }

    /// Write sample `id` (the `k`-th of its task) into its slot of every column.
    fn fill(
        &self,
        id: u64,
        k: usize,
        io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()>;

    /// An epoch delivered its last batch (caches publish what they hold).
    fn epoch_done(&self) {}

    /// The caches' figures, for the statistics.
    fn cache_stats(&self) -> Vec<CacheStats> {
        Vec::new()
    }

    /// The order of epoch `epoch` when these samples bring their own (a mixture's blend);
    /// `None`: the loader's `shuffle` over `0..len`.
    fn order(&self, shuffle: &Shuffle, seed: u64, epoch: u64) -> Option<Result<EpochOrder>> {
        let _ = (shuffle, seed, epoch);
        None
    }

    /// Whether a task's samples read bytes: the engine then times each task's fetch as stage 0
    /// ("read").
    fn reads(&self) -> bool {
        self.source().is_some()
    }

    /// How storage is told ahead which samples will be read.
    fn readahead(&self) -> Readahead {
        self.source()
            .map_or(Readahead::Off, |s| s.readahead(self.mean_bytes()))
    }

    /// Plan the samples `ids` of one task and fetch what they need into `io` (the engine's read
    /// of a task): [`Samples::plan`], then the one fetcher over [`Samples::source`].
    fn fetch(&self, ids: &[u64], io: &mut TaskIo) {
        io.plan.clear();
        self.plan(ids, io);
        if let Some(src) = self.source() {
            io.bytes.fetch(src, io.plan.ranges());
        }
    }

    /// Tell storage that `ids` will be read soon (their planned ranges; see
    /// [`ByteSource::hint`]).
    fn hint(&self, ids: &[u64], io: &mut TaskIo, scratch: &mut Vec<(usize, u64, u64)>) {
        io.plan.clear();
        self.plan(ids, io);
        if let Some(src) = self.source() {
            src.hint(io.plan.ranges(), scratch);
        }
    }

    /// The requests made to the object store the samples are read from (`None`: local).
    fn remote_stats(&self) -> Option<stokehold_storage::remote::RemoteStats> {
        self.source().and_then(|s| s.dataset.remote_stats())
    }

    /// Per-source figures of a mixture, with each source's passes at the loader's position
    /// (`epoch`, `position`); empty for one dataset.
    fn source_stats(&self, epoch: u64, position: u64) -> Vec<SourceStats> {
        let _ = (epoch, position);
        Vec::new()
    }

    /// A batch of `ids` was delivered (a mixture counts its sources' samples).
    fn delivered(&self, ids: &[u64]) {
        let _ = ids;
    }

    /// Samples `ids` of epoch `epoch` were skipped (under `on_error = skip`, in the order of
    /// delivery; `epoch_samples`: this rank's samples in the epoch): `Err` with what was
    /// exceeded when these samples hold parts of the epoch to budgets of their own (a
    /// mixture's per-source `max_skip_fraction`).
    fn check_skips(
        &self,
        epoch: u64,
        ids: &[u64],
        epoch_samples: u64,
    ) -> std::result::Result<(), String> {
        let _ = (epoch, ids, epoch_samples);
        Ok(())
    }

    /// What a resume state keeps of the order at (`epoch`, `position`): a mixture's blend.
    fn order_state(&self, epoch: u64, position: u64) -> Option<BlendState> {
        let _ = (epoch, position);
        None
    }

    /// Continue from a resume state's order state (a mixture checks that it continues the same
    /// blend, or starts a new one when told to). `Ok(true)`: these samples checked the state's
    /// sources themselves, so its `dataset` fingerprint is not compared.
    fn resume_order(&self, state: Option<&BlendState>, epoch: u64, position: u64) -> Result<bool> {
        let _ = (epoch, position);
        if state.is_some() {
            return Err(crate::error::EngineError::IncompatibleResume {
                field: "mixture",
                expected: "the state of a loader of one dataset".into(),
                found: "the state of a mixture".into(),
            });
        }
        Ok(false)
    }
}

/// A worker's scratch space for one task, kept across tasks so steady state allocates nothing:
/// the task's plan (which ranges each sample needs), their fetched bytes, and what the samples
/// keep of their own between planning and filling.
#[derive(Default)]
pub struct TaskIo {
    pub(crate) plan: TaskPlan,
    pub(crate) bytes: Fetched,
    scratch: Option<Box<dyn std::any::Any + Send>>,
}

impl std::fmt::Debug for TaskIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskIo")
            .field("plan", &self.plan)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl TaskIo {
    /// Scratch for a worker whose fetcher uses `io_uring` or not ([`Fetched::new`]).
    pub fn new(io_uring: bool) -> TaskIo {
        TaskIo {
            bytes: Fetched::new(io_uring),
            ..TaskIo::default()
        }
    }

    /// The plan being written ([`Samples::plan`]).
    pub fn plan_mut(&mut self) -> &mut TaskPlan {
        &mut self.plan
    }

    /// The samples' own scratch of type `T` (made on first use; a worker serves one kind of
    /// samples, so it is made once).
    pub fn scratch<T: Default + Send + 'static>(&mut self) -> &mut T {
        self.split::<T>().2
    }

    /// The plan being written and the samples' scratch at once (for planning).
    pub fn plan_and_scratch<T: Default + Send + 'static>(&mut self) -> (&mut TaskPlan, &mut T) {
        self.scratch::<T>();
        let s = self
            .scratch
            .as_mut()
            .and_then(|s| s.downcast_mut::<T>())
            .expect("the scratch was made of this type just above");
        (&mut self.plan, s)
    }

    /// The plan, the fetched bytes and the samples' scratch at once (for filling).
    pub fn split<T: Default + Send + 'static>(&mut self) -> (&TaskPlan, &Fetched, &mut T) {
        if !self.scratch.as_ref().is_some_and(|s| s.is::<T>()) {
            self.scratch = Some(Box::new(T::default()));
        }
        let s = self
            .scratch
            .as_mut()
            .and_then(|s| s.downcast_mut::<T>())
            .expect("the scratch was made of this type just above");
        (&self.plan, &self.bytes, s)
    }

    /// The bytes of the `j`-th range of the task's `k`-th sample (see [`Fetched::get`]).
    pub fn bytes<'a>(
        &'a self,
        src: ByteSource<'a>,
        k: usize,
        j: usize,
    ) -> std::result::Result<&'a [u8], stokehold_format::FormatError> {
        let r = self.plan.sample(k);
        self.bytes.get(src, r.start + j)
    }

    /// Plan `ids` with `samples` and fetch what they need (the engine's read of a task).
    pub(crate) fn fetch(&mut self, samples: &dyn Samples, ids: &[u64]) {
        samples.fetch(ids, self);
    }

    /// Tell storage that `ids` will be read soon ([`Samples::hint`]).
    pub(crate) fn hint(
        &mut self,
        samples: &dyn Samples,
        ids: &[u64],
        scratch: &mut Vec<(usize, u64, u64)>,
    ) {
        samples.hint(ids, self, scratch);
    }

    /// A scratch of the same kind (its fetcher uses `io_uring` when this one may).
    pub fn sibling(&self) -> TaskIo {
        TaskIo::new(self.bytes.may_use_io_uring())
    }
}

/// What a task's samples get besides their bytes: the run's seed and epoch, and the worker's
/// statistics.
#[derive(Debug)]
pub struct TaskCtx<'w, 'c> {
    pub(crate) seed: u64,
    pub(crate) epoch: u64,
    pub(crate) ws: &'w mut WorkerStats<'c>,
}

impl TaskCtx<'_, '_> {
    /// The loader's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The epoch being loaded.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// Write access to one sample's slot of every column of a batch being filled.
pub struct SlotWriter<'b> {
    batch: &'b SharedBatch,
    slot: usize,
}

impl std::fmt::Debug for SlotWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotWriter")
            .field("step", &self.batch.step)
            .field("slot", &self.slot)
            .finish()
    }
}

impl<'b> SlotWriter<'b> {
    /// The writer of `slot`.
    ///
    /// # Safety
    /// (This constructor's own body does nothing unsafe; the contract is what makes
    /// [`SlotWriter::fixed`] and [`SlotWriter::fixed_columns`] sound.)
    ///
    /// The caller's task must own `slot` (tasks cover disjoint slot ranges), must not have
    /// reported itself done ([`SharedBatch::task_done`]) and must make no other writer of this
    /// slot while this one lives.
    pub(crate) unsafe fn new(batch: &'b SharedBatch, slot: usize) -> SlotWriter<'b> {
        SlotWriter { batch, slot }
    }

    /// The sample's slot of fixed column `col` (`slot_bytes` of its output).
    pub fn fixed(&mut self, col: usize) -> &mut [u8] {
        // SAFETY: `new`'s contract: this writer is the only one of `slot`, and its task is still
        // running; the `&mut self` borrow stops two live slices of the same column.
        unsafe { self.batch.slot_mut(col, self.slot) }
    }

    /// The sample's slot of every fixed column at once (`None` for list columns), for samples
    /// that fill several columns together.
    pub fn fixed_columns(&mut self) -> Vec<Option<&mut [u8]>> {
        (0..self.batch.outputs.len())
            .map(|c| {
                self.batch.is_fixed(c).then(|| {
                    // SAFETY: `new`'s contract (this writer is the only one of `slot`, its task is
                    // running); each column's slot is a distinct buffer, handed out once here,
                    // and the `&mut self` borrow outlives the slices.
                    unsafe { self.batch.slot_mut(c, self.slot) }
                })
            })
            .collect()
    }

    /// The sample's value of list column `col`.
    pub fn set_list(&mut self, col: usize, v: stokehold_format::FieldValue<'static>) {
        self.batch.set_list(col, self.slot, v);
    }

    /// The outputs of this batch (with per-batch shapes, see [`Samples::batch_outputs`]).
    pub fn outputs(&self) -> &[Output] {
        &self.batch.outputs
    }
}
