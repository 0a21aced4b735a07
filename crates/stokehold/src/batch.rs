//! Batches: preallocated, recycled buffers that samples are written into, slot by slot, by
//! several worker threads at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use stokehold_format::{DType, FieldValue};

/// Ask for transparent huge pages over the 2 MiB-aligned interior of a large buffer not yet
/// touched (a fresh zeroed allocation, such as a row of image patches): its first writes then
/// fault in 2 MiB at a time, not 4 KiB. Only advice: where the kernel does not take it nothing
/// changes.
pub fn advise_huge_pages<T>(buf: &mut [T]) {
    const HUGE: usize = 2 << 20;
    let bytes = std::mem::size_of_val(buf);
    if bytes < 2 * HUGE {
        return;
    }
    let start = buf.as_mut_ptr() as usize;
    let (lo, hi) = (start.next_multiple_of(HUGE), (start + bytes) / HUGE * HUGE);
    if hi > lo {
        // SAFETY: `lo..hi` lies inside `buf`, memory this function borrows mutably;
        // MADV_HUGEPAGE changes how the kernel backs the pages, never their contents.
        let _ = unsafe {
            rustix::mm::madvise(
                lo as *mut std::ffi::c_void,
                hi - lo,
                rustix::mm::Advice::LinuxHugepage,
            )
        };
    }
}

/// Where a column's values go in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A tensor of `[batch, shape...]` elements of `dtype`; each sample fills one slot of
    /// `prod(shape) * dtype.size()` bytes.
    Fixed {
        /// Element type.
        dtype: DType,
        /// Per-sample shape.
        shape: Vec<usize>,
    },
    /// A list with one owned value per sample (bytes, strings, arrays of varying shape).
    List,
}

impl Output {
    /// Bytes of one slot (0 for lists).
    pub fn slot_bytes(&self) -> usize {
        match self {
            Output::Fixed { dtype, shape } => shape.iter().product::<usize>() * dtype.size(),
            Output::List => 0,
        }
    }
}

/// A byte buffer with 8-byte alignment (so any element type can be viewed in place), recycled
/// through a [`BufferPool`].
#[derive(Debug, Default)]
pub struct Buffer {
    words: Vec<u64>,
    len: usize,
}

impl Buffer {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Buffer {
        Buffer {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    /// The bytes, mutably.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity in bytes.
    fn capacity(&self) -> usize {
        self.words.capacity() * 8
    }
}

/// Recycles batch buffers so steady-state iteration allocates nothing.
#[derive(Debug, Default)]
pub struct BufferPool {
    free: Mutex<Vec<Buffer>>,
    max: usize,
}

impl BufferPool {
    /// A pool keeping at most `max` free buffers.
    pub fn new(max: usize) -> BufferPool {
        BufferPool {
            free: Mutex::new(Vec::new()),
            max,
        }
    }

    /// A buffer of `len` bytes (contents unspecified but initialised).
    pub fn get(&self, len: usize) -> Buffer {
        let reused = self.free.lock().ok().and_then(|mut f| {
            let i = f.iter().position(|b| b.capacity() >= len)?;
            Some(f.swap_remove(i))
        });
        match reused {
            Some(mut b) => {
                b.words.resize(len.div_ceil(8), 0);
                b.len = len;
                b
            }
            None => Buffer::zeroed(len),
        }
    }

    /// Give a buffer back.
    pub fn put(&self, b: Buffer) {
        if let Ok(mut f) = self.free.lock()
            && f.len() < self.max
        {
            f.push(b);
        }
    }

    /// Free buffers held.
    pub fn free_count(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }
}

/// One column of a batch.
#[derive(Debug)]
pub enum ColumnData {
    /// A `[batch, shape...]` tensor of `dtype`, little-endian, C order.
    Fixed {
        /// Element type.
        dtype: DType,
        /// Shape, batch dimension first.
        shape: Vec<usize>,
        /// The elements.
        data: Buffer,
    },
    /// One value per sample.
    List(Vec<FieldValue<'static>>),
}

/// A batch, delivered in order.
#[derive(Debug)]
pub struct Batch {
    /// Epoch it belongs to.
    pub epoch: u64,
    /// Its step within the epoch (0-based, counted from the epoch's start).
    pub step: u64,
    /// Global sample id of each slot.
    pub ids: Vec<u64>,
    /// Whether each slot is padding (a duplicate that fills the last step, or stands in for a
    /// skipped sample); drop these in evaluation.
    pub padding: Vec<bool>,
    /// The columns, in the loader's column order, with their names.
    pub columns: Vec<(String, ColumnData)>,
    pool: Option<Arc<BufferPool>>,
}

impl Batch {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True for an empty batch (never delivered).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&ColumnData> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// The pool this batch's fixed buffers go back to when it is dropped. A binding that takes
    /// the columns out ([`Batch::into_columns`]) can give each buffer back itself, once the
    /// memory is no longer used (e.g. when Python drops the numpy array that views it).
    pub fn pool(&self) -> Option<&Arc<BufferPool>> {
        self.pool.as_ref()
    }

    /// Take the columns out (their buffers are then not recycled).
    pub fn into_columns(mut self) -> Vec<(String, ColumnData)> {
        std::mem::take(&mut self.columns)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            for (_, c) in self.columns.drain(..) {
                if let ColumnData::Fixed { data, .. } = c {
                    pool.put(data);
                }
            }
        }
    }
}

/// A fixed column's buffer while workers write into it.
struct FixedSlots {
    /// Start of the buffer; the buffer lives in `buffer` and is neither moved nor resized until
    /// every task has finished.
    base: *mut u8,
    slot_bytes: usize,
    buffer: Mutex<Option<Buffer>>,
}

/// A batch being filled: every slot range (task) is written by exactly one worker.
pub(crate) struct SharedBatch {
    pub epoch: u64,
    pub step: u64,
    pub ids: Vec<u64>,
    pub padding: Vec<bool>,
    /// The outputs of this batch (per-batch shapes for padded samples).
    pub outputs: Vec<Output>,
    fixed: Vec<Option<FixedSlots>>,
    lists: Vec<Option<Mutex<Vec<Option<FieldValue<'static>>>>>>,
    /// (slot, error) of samples that failed.
    pub failures: Mutex<Vec<(usize, crate::error::EngineError)>>,
    remaining: AtomicUsize,
}

// SAFETY: the raw `base` pointers are only dereferenced through `slot_mut`, whose contract is that
// each slot is written by one thread at a time (tasks cover disjoint slot ranges) and that the
// buffers are taken out (`take_columns`) only after every task has finished, which the
// `remaining` counter's AcqRel decrements order before the take. Everything else is behind
// mutexes or immutable after construction.
unsafe impl Send for SharedBatch {}
// SAFETY: see the Send impl above: shared access only touches disjoint slots, atomics and mutexes.
unsafe impl Sync for SharedBatch {}

impl SharedBatch {
    pub(crate) fn new(
        epoch: u64,
        step: u64,
        ids: Vec<u64>,
        padding: Vec<bool>,
        outputs: Vec<Output>,
        pool: &BufferPool,
        tasks: usize,
    ) -> SharedBatch {
        let b = ids.len();
        let mut fixed = Vec::with_capacity(outputs.len());
        let mut lists = Vec::with_capacity(outputs.len());
        for o in &outputs {
            match o {
                Output::Fixed { .. } => {
                    let slot_bytes = o.slot_bytes();
                    let mut buf = pool.get(slot_bytes * b);
                    let base = buf.as_bytes_mut().as_mut_ptr();
                    fixed.push(Some(FixedSlots {
                        base,
                        slot_bytes,
                        buffer: Mutex::new(Some(buf)),
                    }));
                    lists.push(None);
                }
                Output::List => {
                    fixed.push(None);
                    lists.push(Some(Mutex::new((0..b).map(|_| None).collect())));
                }
            }
        }
        SharedBatch {
            epoch,
            step,
            ids,
            padding,
            outputs,
            fixed,
            lists,
            failures: Mutex::new(Vec::new()),
            remaining: AtomicUsize::new(tasks),
        }
    }

    /// The slot of `slot` in fixed column `col`.
    ///
    /// # Safety
    /// The caller must be the only one accessing this (column, slot) until it calls
    /// [`SharedBatch::task_done`] for the task covering the slot, and `col` must be a fixed
    /// column and `slot < ids.len()`.
    // A `&mut` from `&self` is the point: disjoint slots are written concurrently, and the
    // exclusivity that `&mut self` would prove is the caller's obligation instead (see Safety).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slot_mut(&self, col: usize, slot: usize) -> &mut [u8] {
        let f = self.fixed[col].as_ref().expect("a fixed column");
        assert!(slot < self.ids.len(), "slot {slot} out of range");
        // SAFETY: `base` points to a live buffer of `ids.len() * slot_bytes` bytes (it is only
        // taken out after all tasks are done), the range is in bounds (checked above), and the
        // caller guarantees exclusive access to this slot.
        unsafe { std::slice::from_raw_parts_mut(f.base.add(slot * f.slot_bytes), f.slot_bytes) }
    }

    /// Whether column `col` is a fixed (tensor) column.
    pub(crate) fn is_fixed(&self, col: usize) -> bool {
        self.fixed.get(col).is_some_and(Option::is_some)
    }

    /// Put a list column's value for `slot`.
    pub(crate) fn set_list(&self, col: usize, slot: usize, v: FieldValue<'static>) {
        if let Some(Some(l)) = self.lists.get(col) {
            crate::sync::lock(l)[slot] = Some(v);
        }
    }

    /// Record that one task finished; true when it was the last.
    pub(crate) fn task_done(&self) -> bool {
        self.remaining.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Take the filled columns out. Only after the last `task_done`.
    pub(crate) fn take_columns(&self, names: &[(String, Output)]) -> Vec<(String, ColumnData)> {
        debug_assert_eq!(self.remaining.load(Ordering::Acquire), 0);
        let b = self.ids.len();
        let mut out = Vec::with_capacity(self.outputs.len());
        for (k, o) in self.outputs.iter().enumerate() {
            let data = match o {
                Output::Fixed { dtype, shape } => {
                    let buf = self.fixed[k]
                        .as_ref()
                        .and_then(|f| crate::sync::lock(&f.buffer).take())
                        .unwrap_or_default();
                    let mut full = vec![b];
                    full.extend_from_slice(shape);
                    ColumnData::Fixed {
                        dtype: *dtype,
                        shape: full,
                        data: buf,
                    }
                }
                Output::List => {
                    let items = self.lists[k]
                        .as_ref()
                        .map(|l| std::mem::take(&mut *crate::sync::lock(l)))
                        .unwrap_or_default();
                    ColumnData::List(
                        items
                            .into_iter()
                            .map(|v| v.unwrap_or(FieldValue::Bytes(Vec::new().into())))
                            .collect(),
                    )
                }
            };
            out.push((names[k].0.clone(), data));
        }
        out
    }
}

/// Assemble the delivered batch.
pub(crate) fn finish_batch(
    shared: &SharedBatch,
    names: &[(String, Output)],
    pool: &Arc<BufferPool>,
) -> Batch {
    Batch {
        epoch: shared.epoch,
        step: shared.step,
        ids: shared.ids.clone(),
        padding: shared.padding.clone(),
        columns: shared.take_columns(names),
        pool: Some(Arc::clone(pool)),
    }
}

/// Fill slot `dst` of every column with a copy of slot `src` (used for skipped samples).
pub(crate) fn copy_slot(batch: &mut Batch, src: usize, dst: usize) {
    for (_, c) in &mut batch.columns {
        match c {
            ColumnData::Fixed { data, shape, dtype } => {
                let per = shape[1..].iter().product::<usize>() * dtype.size();
                data.as_bytes_mut()
                    .copy_within(src * per..(src + 1) * per, dst * per);
            }
            ColumnData::List(items) => {
                let v = items[src].clone();
                items[dst] = v;
            }
        }
    }
    batch.ids[dst] = batch.ids[src];
    batch.padding[dst] = true;
}
