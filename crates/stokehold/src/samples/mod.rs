//! What one sample is. The engine ([`crate::pipeline`]) knows orders, tasks, batches, the prefetch
//! window, the error policy and statistics, and reads bytes through the one fetcher
//! ([`crate::fetch`]); a [`Samples`] implementation says what to read and how to fill a slot:
//! how many samples there are, which columns each gives, where its bytes are
//! ([`Samples::sources`]), which byte ranges a task's samples need ([`Samples::plan`]) and how
//! to fill one sample's slot of every column from those bytes ([`Samples::fill`]). The order of
//! an epoch and what a resume state keeps of it are a value beside the samples
//! ([`crate::order::Order`]), and so are the groups whose skips and figures delivery counts
//! ([`crate::order::Groups`]): [`crate::order::Loadable`] carries the three.
//!
//! - [`Records`]: the records of a packed dataset (or of files read in place), each field
//!   through its transform stages (images, labels, anything packed).
//! - [`Tokens`]: a token dataset as packed windows of `seq_len + 1` tokens, or as padded
//!   documents (`stokehold pack --tokenizer`).
//! - [`ChatRows`]: rows of whole conversations, packed best-fit-decreasing (supervised
//!   fine-tuning; the row order is the samples' own order).
//! - [`ChatMixRows`]: rows of whole conversations (or documents) of several datasets, blended
//!   by weight, then packed.
//! - [`Mixture`]: several of these as one, blended.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use crate::batch::SharedBatch;
use crate::cache::CacheStats;
use crate::error::{EngineError, Result};
use crate::fetch::{ByteSource, Fetched, TaskPlan};
use crate::stages::Output;
use crate::stats::WorkerStats;

pub mod chat_mix;
mod chat_vision;
pub mod chats;
mod kept_counts;
mod kept_videos;
pub mod lerobot;
pub mod mixture;
pub mod records;
pub mod tokens;
mod video_reads;

pub use chat_mix::{ChatMixRows, ChatMixture, MixPackSummary, SourcePack};
pub use chat_vision::VisionSpec;
pub use chats::{
    ChatPlanner, ChatRowOptions, ChatRows, ChatSpec, DocumentSpec, Overlong, PackSummary,
};
pub use lerobot::{LeRobotOptions, LeRobotSteps};
pub use mixture::{Mixture, MixtureSource};
pub use records::Records;
pub use tokens::{IGNORE_LABEL, TokenDataset, TokenMode, TokenOptions, Tokens, VERIFY_MAX_RECORD};

pub use crate::fetch::{MAX_WAVE, REMOTE_WAVE_BYTES, Readahead};

/// What the engine learns of the samples once, when a loader is made: how they lie for its
/// planning (the bytes a sample reads, the blocks a shard-block order keeps together, whether
/// tasks are whole batches), the stages its statistics report, and the fingerprint resume
/// states carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// Names of the stages the statistics report, in the order of their indices. When the
    /// samples read bytes ([`Samples::sources`] not empty), stage 0 is the read stage ("read"),
    /// which the engine times (one fetch per task, its time shared by the task's samples).
    pub stage_names: Vec<String>,
    /// Identifies the dataset and the definition of a sample, for resume states: a state is only
    /// loaded into a loader whose samples have the same fingerprint.
    pub fingerprint: String,
    /// Mean bytes read per sample (task sizing, readahead, the memory of a batch of list
    /// columns).
    pub mean_bytes: u64,
    /// The sizes of the blocks a shard-block order keeps together (records per shard), or
    /// `None` when these samples have no blocks (the order is then sequential or global only).
    pub blocks: Option<Vec<u64>>,
    /// Whether a task is a whole batch (cheap samples: one task per batch saves the hand-offs).
    pub whole_batch_tasks: bool,
}

/// What a source of samples says: what to read and how to fill a slot. Implementations must be
/// deterministic: what `fill` writes for a sample depends only on the sample id, the epoch, the
/// seed and the samples' own definition, never on the thread or the task that runs it.
///
/// The order of an epoch, a resume state's part of it, and per-group accounts are not here:
/// they are values beside the samples ([`crate::order::Loadable`]).
#[allow(clippy::len_without_is_empty)] // `len() == 0` says it; the trait stays narrow
pub trait Samples: Send + Sync + std::fmt::Debug + 'static {
    /// Samples per epoch (what the order permutes and the resume state counts).
    fn len(&self) -> u64;

    /// How the samples lie (mean bytes per sample, shard blocks, task shape), their stages'
    /// names and their fingerprint.
    fn layout(&self) -> Layout;

    /// The output columns: name and per-sample output.
    fn columns(&self) -> &[(String, Output)];

    /// The outputs of one batch when they depend on its samples (padded documents: padded to the
    /// longest, known from the index before any read); `None`: [`Samples::columns`].
    fn batch_outputs(&self, ids: &[u64]) -> Option<Vec<Output>> {
        let _ = ids;
        None
    }

    /// Where the samples' bytes are: datasets, each with its RAM cache (empty for samples that
    /// read no bytes). A planned range names its source by its index here.
    fn sources(&self) -> &[ByteSource] {
        &[]
    }

    /// Which byte ranges of [`Samples::sources`] each of the samples `ids` of one task needs:
    /// for each in order, its ranges pushed to the plan ([`TaskIo::plan_and_scratch`]), then
    /// [`TaskPlan::end_sample`] (a sample whose ranges cannot be known gets none and reports why
    /// when filled). What else the samples need to fill from those bytes may be kept in
    /// [`TaskIo::scratch`].
    fn plan(&self, ids: &[u64], io: &mut TaskIo) {
        for _ in ids {
            io.plan.end_sample();
        }
    }

    /// Write sample `id` (the `k`-th of its task) into its slot of every column; its bytes are
    /// [`TaskIo::bytes`]`(k, ..)`.
    fn fill(
        &self,
        id: u64,
        k: usize,
        io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()>;

    /// Fill the samples `ids` of one task (planned and fetched into `io`): each through
    /// [`TaskFill::sample`] with its index `k` in `ids`, once, in any order (what a sample
    /// writes depends on its id alone, and the engine catches each sample's panic and records
    /// each failure on its own). The default fills them in order with [`Samples::fill`];
    /// samples that hold others (a mixture) override it to fill each part's samples together,
    /// entering the part once per task instead of once per sample.
    fn fill_task(&self, ids: &[u64], io: &mut TaskIo, task: &mut TaskFill<'_, '_, '_>) {
        for (k, &id) in ids.iter().enumerate() {
            task.sample(k, |cx, out| self.fill(id, k, io, cx, out));
        }
    }

    /// The caches these samples fill (RAM cache, decoded caches, ...): their figures, and their
    /// end of epoch.
    fn caches(&self) -> Vec<Arc<dyn Cache>> {
        Vec::new()
    }

    /// Where sample `id` comes from, as a JSON object (`shard`, `record`, `file`, `offset`,
    /// a mixture's `source`, ...); with `read`, also what reading the record tells (its
    /// `key` or `path` kept at pack time). Empty when the samples say nothing.
    fn describe(&self, id: u64, read: bool) -> serde_json::Map<String, serde_json::Value> {
        let _ = (id, read);
        serde_json::Map::new()
    }
}

/// A cache that samples fill, as the loader sees it.
pub trait Cache: Send + Sync + std::fmt::Debug {
    /// Its figures (a cache may report several kinds).
    fn stats(&self) -> Vec<CacheStats>;

    /// An epoch delivered its last batch (a cache publishes what it holds).
    fn epoch_done(&self) {}

    /// Keep what it holds within `share` of the node's memory budget too.
    fn under_node_budget(&self, share: &Arc<crate::cache::NodeShare>);
}

/// The figures of `caches`, those of one kind summed (a mixture's sources each have theirs).
pub(crate) fn cache_stats(caches: &[Arc<dyn Cache>], merge: bool) -> Vec<CacheStats> {
    let mut out: Vec<CacheStats> = Vec::new();
    for c in caches.iter().flat_map(|c| c.stats()) {
        match out.iter_mut().find(|o| merge && o.kind == c.kind) {
            Some(o) => {
                o.hits += c.hits;
                o.misses += c.misses;
                o.bytes += c.bytes;
                o.budget += c.budget;
                o.entries += c.entries;
                o.saved += c.saved;
                o.shared += c.shared;
            }
            None => out.push(c),
        }
    }
    out
}

/// Bytes one batch of `batch_size` holds (the memory budget of batches prepared ahead): fixed
/// columns by their shape, list columns by the mean bytes a sample reads.
pub fn batch_bytes(samples: &dyn Samples, batch_size: u32) -> u64 {
    let mean = samples.layout().mean_bytes;
    samples
        .columns()
        .iter()
        .map(|(_, o)| match o {
            Output::Fixed { .. } => o.slot_bytes() as u64,
            Output::List | Output::Ragged { .. } | Output::Patches { .. } => mean,
        })
        .sum::<u64>()
        .saturating_mul(u64::from(batch_size))
        .max(1)
}

/// A worker's scratch space for one task, kept across tasks so steady state allocates nothing:
/// the task's plan (which ranges each sample needs), their fetched bytes, and what the samples
/// keep of their own between planning and filling.
///
/// Samples that hold others (a mixture) plan and fill them through the same scratch: each part's
/// samples see their own sample indices from 0 and their own byte sources from 0 ([`TaskView`]).
#[derive(Default)]
pub struct TaskIo {
    pub(crate) plan: TaskPlan,
    pub(crate) bytes: Fetched,
    /// The byte sources of the samples this scratch last fetched for.
    sources: Vec<ByteSource>,
    scratch: Option<Box<dyn std::any::Any + Send>>,
    /// The plan's index of sample 0 of the samples being filled.
    first: usize,
}

impl std::fmt::Debug for TaskIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskIo")
            .field("plan", &self.plan)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// Where a part of the samples of a task starts (see [`TaskIo::enter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskView {
    /// The plan's index of the part's sample 0.
    pub first: usize,
    /// The index of the part's byte source 0 among the task's.
    pub source: u16,
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
        if !self.scratch.as_ref().is_some_and(|s| s.is::<T>()) {
            self.scratch = Some(Box::new(T::default()));
        }
        self.scratch
            .as_mut()
            .and_then(|s| s.downcast_mut::<T>())
            .expect("the scratch was made of this type just above")
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

    /// The task's fetched bytes and the samples' scratch at once (for filling).
    pub fn split<T: Default + Send + 'static>(&mut self) -> (TaskBytes<'_>, &mut T) {
        self.scratch::<T>();
        let s = self
            .scratch
            .as_mut()
            .and_then(|s| s.downcast_mut::<T>())
            .expect("the scratch was made of this type just above");
        (
            TaskBytes {
                plan: &self.plan,
                fetched: &self.bytes,
                sources: &self.sources,
                first: self.first,
            },
            s,
        )
    }

    /// The bytes of the `j`-th range of the `k`-th sample being filled (see [`Fetched::get`]).
    pub fn bytes(
        &self,
        k: usize,
        j: usize,
    ) -> std::result::Result<&[u8], stokehold_format::FormatError> {
        TaskBytes {
            plan: &self.plan,
            fetched: &self.bytes,
            sources: &self.sources,
            first: self.first,
        }
        .get(k, j)
    }

    /// Plan the samples `ids` of one task with `samples` and fetch what they need (the engine's
    /// read of a task): [`Samples::plan`], then the one fetcher over [`Samples::sources`].
    pub fn fetch(&mut self, samples: &dyn Samples, ids: &[u64]) {
        self.plan.clear();
        self.first = 0;
        samples.plan(ids, self);
        let sources = samples.sources();
        let same = self.sources.len() == sources.len()
            && self.sources.iter().zip(sources).all(|(a, b)| a.same(b));
        if !same {
            self.sources = sources.to_vec();
        }
        self.bytes.fetch(sources, self.plan.ranges());
    }

    /// Tell storage that `ids` will be read soon (their planned ranges; see [`crate::fetch::hint`]).
    pub(crate) fn hint(
        &mut self,
        samples: &dyn Samples,
        ids: &[u64],
        scratch: &mut Vec<(u16, usize, u64, u64)>,
    ) {
        self.plan.clear();
        self.first = 0;
        samples.plan(ids, self);
        crate::fetch::hint(samples.sources(), self.plan.ranges(), scratch);
    }

    /// Where the part being planned or filled starts now.
    pub fn view(&self) -> TaskView {
        TaskView {
            first: self.first,
            source: self.plan.source_base(),
        }
    }

    /// Plan or fill a part of the task's samples (a mixture's source) from `view` on, with its
    /// own scratch `scratch` (swapped in; [`TaskIo::leave`] swaps it back out). Returns the view
    /// to give back to [`TaskIo::leave`].
    pub fn enter(
        &mut self,
        view: TaskView,
        scratch: &mut Option<Box<dyn std::any::Any + Send>>,
    ) -> TaskView {
        let before = self.view();
        self.first = view.first;
        self.plan.set_source_base(view.source);
        std::mem::swap(&mut self.scratch, scratch);
        before
    }

    /// Back from a part entered with [`TaskIo::enter`] (its scratch swapped back out into
    /// `scratch`).
    pub fn leave(&mut self, before: TaskView, scratch: &mut Option<Box<dyn std::any::Any + Send>>) {
        std::mem::swap(&mut self.scratch, scratch);
        self.first = before.first;
        self.plan.set_source_base(before.source);
    }

    /// Take the samples' own scratch of type `T` out (made when absent), to hold it while parts
    /// are entered; give it back with [`TaskIo::put_scratch`].
    pub fn take_scratch<T: Default + Send + 'static>(&mut self) -> Box<T> {
        match self.scratch.take().map(|s| s.downcast::<T>()) {
            Some(Ok(s)) => s,
            _ => Box::default(),
        }
    }

    /// Give back a scratch taken with [`TaskIo::take_scratch`].
    pub fn put_scratch<T: Send + 'static>(&mut self, s: Box<T>) {
        self.scratch = Some(s);
    }

    /// A scratch of the same kind (its fetcher uses `io_uring` when this one may).
    pub fn sibling(&self) -> TaskIo {
        TaskIo::new(self.bytes.may_use_io_uring())
    }
}

/// The fetched bytes of a task, as the samples being filled see them.
#[derive(Debug, Clone, Copy)]
pub struct TaskBytes<'a> {
    plan: &'a TaskPlan,
    fetched: &'a Fetched,
    sources: &'a [ByteSource],
    first: usize,
}

impl<'a> TaskBytes<'a> {
    /// The bytes of the `j`-th range of the `k`-th sample being filled, or the error of its
    /// read (naming the shard's file, the record and the byte range).
    pub fn get(
        self,
        k: usize,
        j: usize,
    ) -> std::result::Result<&'a [u8], stokehold_format::FormatError> {
        let r = self.plan.sample(self.first + k);
        self.fetched.get(self.sources, r.start + j)
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

/// The engine's side of filling one task ([`Samples::fill_task`]): each sample is filled
/// through [`TaskFill::sample`], which hands it its slot of every column, catches its panic,
/// records its failure and adds the bytes it read (and, for the samples the stages time, its
/// time) to its group's figures, so that a sample fails alone whatever order its task fills in.
pub struct TaskFill<'t, 'w, 'c> {
    batch: &'t SharedBatch,
    /// The batch slot of the task's sample 0.
    first: usize,
    cx: TaskCtx<'w, 'c>,
    /// The group of a sample id, when the samples have groups ([`crate::order::Groups`]).
    group_of: Option<&'t dyn Fn(u64) -> usize>,
    /// Per group: the bytes read and the (scaled) time of this worker's samples, added to the
    /// groups' figures once per task.
    tally: &'t mut Vec<(u64, u64)>,
    /// Per sample of the task: whether it was filled.
    filled: &'t mut Vec<bool>,
}

impl std::fmt::Debug for TaskFill<'_, '_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskFill")
            .field("step", &self.batch.step)
            .field("first", &self.first)
            .field("len", &self.filled.len())
            .finish_non_exhaustive()
    }
}

impl<'t, 'w, 'c> TaskFill<'t, 'w, 'c> {
    /// The filling of the task of `batch` whose samples are the slots `slots`; `groups` (the
    /// group of an id and how many groups there are) when the samples have groups, `tally` and
    /// `filled` the worker's, reused across tasks.
    ///
    /// # Safety
    /// The caller's task must own the slots `slots` (tasks cover disjoint slot ranges), must not
    /// have reported itself done ([`SharedBatch::task_done`]) while this lives, and must write
    /// none of these slots itself while this lives.
    // SAFETY: the body only stores its arguments; the function is marked so because
    // `TaskFill::sample` makes slot writers ([`SlotWriter::new`]) on the strength of this
    // contract, which only the caller can keep.
    pub(crate) unsafe fn new(
        batch: &'t SharedBatch,
        slots: std::ops::Range<usize>,
        cx: TaskCtx<'w, 'c>,
        groups: Option<(&'t dyn Fn(u64) -> usize, usize)>,
        tally: &'t mut Vec<(u64, u64)>,
        filled: &'t mut Vec<bool>,
    ) -> TaskFill<'t, 'w, 'c> {
        filled.clear();
        filled.resize(slots.len(), false);
        if let Some((_, n)) = groups
            && tally.len() < n
        {
            tally.resize(n, (0, 0));
        }
        TaskFill {
            batch,
            first: slots.start,
            cx,
            group_of: groups.map(|g| g.0),
            tally,
            filled,
        }
    }

    /// Fill the task's `k`-th sample with `fill` (given the task's context and the sample's slot
    /// writer): its panic is caught and its error recorded as the sample's failure. Panics
    /// when `k` is not a sample of the task (before anything is written).
    pub fn sample(
        &mut self,
        k: usize,
        fill: impl FnOnce(&mut TaskCtx<'_, '_>, &mut SlotWriter<'_>) -> Result<()>,
    ) {
        self.sample_in(k, None, fill);
    }

    /// [`TaskFill::sample`] of a sample whose group the caller knows (a mixture filling one
    /// source's samples together): its bytes and time go to `group` without asking the
    /// samples' grouping for it, one lookup a sample fewer. `group` must be the one the
    /// grouping gives the sample's id.
    pub fn sample_of_group(
        &mut self,
        k: usize,
        group: usize,
        fill: impl FnOnce(&mut TaskCtx<'_, '_>, &mut SlotWriter<'_>) -> Result<()>,
    ) {
        self.sample_in(k, Some(group), fill);
    }

    fn sample_in(
        &mut self,
        k: usize,
        known: Option<usize>,
        fill: impl FnOnce(&mut TaskCtx<'_, '_>, &mut SlotWriter<'_>) -> Result<()>,
    ) {
        let Some(done) = self.filled.get_mut(k) else {
            panic!(
                "sample {k} of a task of {} samples was filled",
                self.filled.len()
            );
        };
        *done = true;
        let slot = self.first + k;
        let id = self.batch.ids[slot];
        let (batch, cx, tally, group_of) =
            (self.batch, &mut self.cx, &mut *self.tally, self.group_of);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `new`'s contract: this task owns `slot` (k is one of its samples, checked
            // above), has not reported itself done, and this is the slot's one writer now.
            let mut out = unsafe { SlotWriter::new(batch, slot) };
            let Some(group_of) = group_of else {
                return fill(cx, &mut out);
            };
            debug_assert!(known.is_none_or(|g| g == group_of(id)), "the group told");
            let g = known.unwrap_or_else(|| group_of(id));
            let before = cx.ws.bytes_since_flush();
            // timed with the samples the stages time (one in 8), scaled to all
            let t0 = cx.ws.next_timed().map(|scale| (scale, Instant::now()));
            let r = fill(cx, &mut out);
            if let Some(p) = tally.get_mut(g) {
                p.0 += cx.ws.bytes_since_flush().saturating_sub(before);
                if let Some((scale, t0)) = t0 {
                    p.1 += t0.elapsed().as_nanos() as u64 * u64::from(scale);
                }
            }
            r
        }));
        let err = match outcome {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e,
            Err(panic) => EngineError::Panic {
                id,
                message: panic_message(&panic),
            },
        };
        crate::sync::lock(&batch.failures).push((slot, err));
    }
}

/// What a panic says (its message when it is a string).
pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
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

    /// The sample's slot of every fixed and ragged column at once (`None` for list columns),
    /// for samples that fill several columns together.
    pub fn fixed_columns(&mut self) -> Vec<Option<&mut [u8]>> {
        (0..self.batch.outputs.len())
            .map(|c| {
                (self.batch.is_fixed(c) || self.batch.is_ragged(c)).then(|| {
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
