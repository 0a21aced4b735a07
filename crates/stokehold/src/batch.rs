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
    /// Image patches in merge blocks (the `qwen2vl` stage): each sample puts a float32 array
    /// `[grid_h / merge, grid_w / merge, merge² · grid_t, row]` in a list slot, and the
    /// delivered batch has them one after another as a `[Σ patches, row]` float32 column
    /// (Qwen2-VL's `pixel_values`, rows in the model's order) beside a `{name}_grid_thw` int64
    /// `[batch, 3]` column (`deliver_patches`), as `Qwen2VLImageProcessor` returns them.
    Patches {
        /// The merge size.
        merge: usize,
        /// Floats per patch.
        row: usize,
    },
    /// One tensor of `[Σ rows, row_shape...]` elements of `dtype` for the whole batch, sample
    /// `i` filling its `rows[i]` rows after those of the samples before it: arrays of varying
    /// length known before they are made (a packed row's image patches, from the plan), written
    /// in place by the workers and delivered with no concatenation. Only per batch
    /// ([`crate::samples::Samples::batch_outputs`]); a column declares itself a `List`.
    Ragged {
        /// Element type.
        dtype: DType,
        /// The shape of one row.
        row_shape: Vec<usize>,
        /// Rows of each sample, in slot order.
        rows: Vec<usize>,
    },
}

impl Output {
    /// Bytes of one slot (0 for lists).
    pub fn slot_bytes(&self) -> usize {
        match self {
            Output::Fixed { dtype, shape } => shape.iter().product::<usize>() * dtype.size(),
            Output::List | Output::Ragged { .. } | Output::Patches { .. } => 0,
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
        let mut words = vec![0u64; len.div_ceil(8)];
        // a large fresh buffer is faulted in 2 MiB at a time when it is first written
        advise_huge_pages(&mut words);
        Buffer { words, len }
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
        // the smallest that fits: a large buffer (a batch's image patches) stays for the next
        // large request instead of holding a small column
        let reused = self.free.lock().ok().and_then(|mut f| {
            let i = (0..f.len())
                .filter(|&i| f[i].capacity() >= len)
                .min_by_key(|&i| f[i].capacity())?;
            Some(f.swap_remove(i))
        });
        match reused {
            Some(mut b) => {
                // only ever grown: the bytes past `len` stay as they were (initialised), so a
                // reused buffer is not zeroed again for a request larger than its last one
                let words = len.div_ceil(8);
                if b.words.len() < words {
                    b.words.resize(words, 0);
                }
                b.len = len;
                b
            }
            None => {
                // a large buffer is made a quarter larger than asked (pages never written are
                // never faulted in), so that it also holds the somewhat larger requests of
                // later batches whose sizes vary (rows of image patches) when it comes back
                let mut b = Buffer::zeroed(if len >= 1 << 20 { len + len / 4 } else { len });
                b.len = len;
                b
            }
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
    /// A `[Σ rows, row...]` tensor of `dtype`, the samples' rows one after another
    /// ([`Output::Ragged`]).
    Ragged {
        /// Element type.
        dtype: DType,
        /// Shape, the samples' rows together first.
        shape: Vec<usize>,
        /// Rows of each sample.
        rows: Vec<usize>,
        /// The elements.
        data: Buffer,
    },
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
                if let ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } = c {
                    pool.put(data);
                }
            }
        }
    }
}

/// A fixed or ragged column's buffer while workers write into it.
struct FixedSlots {
    /// Start of the buffer; the buffer lives in `buffer` and is neither moved nor resized until
    /// every task has finished.
    base: *mut u8,
    /// Where each slot starts, and the end (`slots + 1` offsets in bytes).
    starts: Vec<usize>,
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
            let starts: Vec<usize> = match o {
                Output::Fixed { .. } => (0..=b).map(|i| i * o.slot_bytes()).collect(),
                Output::Ragged {
                    dtype,
                    row_shape,
                    rows,
                } => {
                    let row = row_shape.iter().product::<usize>() * dtype.size();
                    std::iter::once(0)
                        .chain((0..b).scan(0, |at, i| {
                            *at += rows.get(i).copied().unwrap_or(0) * row;
                            Some(*at)
                        }))
                        .collect()
                }
                Output::List | Output::Patches { .. } => Vec::new(),
            };
            match o {
                Output::Fixed { .. } | Output::Ragged { .. } => {
                    let mut buf = pool.get(starts[b]);
                    let base = buf.as_bytes_mut().as_mut_ptr();
                    fixed.push(Some(FixedSlots {
                        base,
                        starts,
                        buffer: Mutex::new(Some(buf)),
                    }));
                    lists.push(None);
                }
                Output::List | Output::Patches { .. } => {
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

    /// The slot of `slot` in fixed or ragged column `col`.
    ///
    /// # Safety
    /// The caller must be the only one accessing this (column, slot) until it calls
    /// [`SharedBatch::task_done`] for the task covering the slot, and `col` must be a fixed or
    /// ragged column and `slot < ids.len()`.
    // A `&mut` from `&self` is the point: disjoint slots are written concurrently, and the
    // exclusivity that `&mut self` would prove is the caller's obligation instead (see Safety).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slot_mut(&self, col: usize, slot: usize) -> &mut [u8] {
        let f = self.fixed[col].as_ref().expect("a fixed column");
        assert!(slot < self.ids.len(), "slot {slot} out of range");
        let (at, end) = (f.starts[slot], f.starts[slot + 1]);
        // SAFETY: `base` points to a live buffer of `starts[ids.len()]` bytes (it is only taken
        // out after all tasks are done), `at..end` is in bounds (the offsets rise to that
        // length; `slot` checked above) and no other slot's range overlaps it, and the caller
        // guarantees exclusive access to this slot.
        unsafe { std::slice::from_raw_parts_mut(f.base.add(at), end - at) }
    }

    /// Whether column `col` is a fixed (tensor) column.
    pub(crate) fn is_fixed(&self, col: usize) -> bool {
        matches!(self.outputs.get(col), Some(Output::Fixed { .. }))
    }

    /// Whether column `col` is a ragged column.
    pub(crate) fn is_ragged(&self, col: usize) -> bool {
        matches!(self.outputs.get(col), Some(Output::Ragged { .. }))
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
            let buf = || {
                self.fixed[k]
                    .as_ref()
                    .and_then(|f| crate::sync::lock(&f.buffer).take())
                    .unwrap_or_default()
            };
            let data = match o {
                Output::Ragged {
                    dtype,
                    row_shape,
                    rows,
                } => {
                    let mut shape = vec![rows.iter().sum()];
                    shape.extend_from_slice(row_shape);
                    ColumnData::Ragged {
                        dtype: *dtype,
                        shape,
                        rows: rows.clone(),
                        data: buf(),
                    }
                }
                Output::Fixed { dtype, shape } => {
                    let buf = buf();
                    let mut full = vec![b];
                    full.extend_from_slice(shape);
                    ColumnData::Fixed {
                        dtype: *dtype,
                        shape: full,
                        data: buf,
                    }
                }
                Output::List | Output::Patches { .. } => {
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

/// Per-sample value buffers given back by [`deliver_patches`] once copied into their batch's
/// column, for the next samples' values ([`spare_bytes`]): a large array made per sample (an
/// image's patches, megabytes) is then written into memory already faulted in, not into fresh
/// pages each time.
static SPARE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Spare buffers kept at most, and their bytes at most (an image's patches at the default
/// `max_pixels` are ~24 MB: a few batches' worth are kept, not the largest ever seen forever).
const SPARE_MAX: usize = 64;
const SPARE_MAX_BYTES: usize = 256 << 20;

/// A buffer of `len` bytes for a sample's value (contents unspecified but initialised): a
/// spare one when one holds `len` bytes, else a new one.
pub(crate) fn spare_bytes(len: usize) -> Vec<u8> {
    let reused = {
        let mut spare = crate::sync::lock(&SPARE);
        let i = spare.iter().position(|v| v.capacity() >= len);
        i.map(|i| spare.swap_remove(i))
    };
    match reused {
        Some(mut v) => {
            // a shorter buffer grows (the new bytes zeroed), a longer one is cut: no pass over
            // what the caller overwrites anyway
            v.resize(len, 0);
            v
        }
        None => vec![0u8; len],
    }
}

fn give_spare(v: Vec<u8>) {
    let mut spare = crate::sync::lock(&SPARE);
    let held: usize = spare.iter().map(Vec::capacity).sum();
    if spare.len() < SPARE_MAX && held + v.capacity() <= SPARE_MAX_BYTES {
        spare.push(v);
    }
}

/// A value of an [`Output::Patches`] column that is not image patches ([`deliver_patches`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "column {column:?}, slot {slot}: not image patches in blocks of {merge}x{merge} of {row} \
     floats: {kind}"
)]
pub(crate) struct NotPatches<'a> {
    /// The column.
    column: &'a str,
    /// The slot of the batch.
    slot: usize,
    /// The blocks' side, in patches.
    merge: usize,
    /// The floats of a patch.
    row: usize,
    /// What the value is.
    kind: &'static str,
}

/// Turn each [`Output::Patches`] column of `batch` (per `names`, the loader's columns) from its
/// list of per-sample arrays into the `[Σ patches, row]` float32 column and its
/// `{name}_grid_thw` int64 `[batch, 3]` column (appended after the loader's columns): one copy
/// into a buffer of `pool`; the per-sample buffers go back for the next samples. Run after
/// failed slots are filled ([`copy_slot`]). An error when a value is not such an array.
pub(crate) fn deliver_patches<'a>(
    batch: &mut Batch,
    names: &'a [(String, Output)],
    pool: &BufferPool,
) -> Result<(), NotPatches<'a>> {
    for (k, (name, o)) in names.iter().enumerate() {
        let &Output::Patches { merge, row } = o else {
            continue;
        };
        let Some((_, ColumnData::List(items))) = batch.columns.get_mut(k) else {
            continue;
        };
        let items = std::mem::take(items);
        let mm = merge * merge;
        let mut rows = Vec::with_capacity(items.len());
        let mut grid = Vec::with_capacity(items.len() * 3);
        for (slot, v) in items.iter().enumerate() {
            let shape = match v {
                FieldValue::Array(a)
                    if a.dtype == DType::F32
                        && a.shape.len() == 4
                        && a.shape[3] as usize == row
                        && mm > 0
                        && (a.shape[2] as usize).is_multiple_of(mm)
                        && a.shape.iter().try_fold(4u64, |p, &d| p.checked_mul(d))
                            == Some(a.data.len() as u64) =>
                {
                    &a.shape
                }
                other => {
                    return Err(NotPatches {
                        column: name,
                        slot,
                        merge,
                        row,
                        kind: other.kind(),
                    });
                }
            };
            let n = (shape[0] * shape[1] * shape[2]) as usize;
            rows.push(n);
            let m = merge as i64;
            grid.extend([
                shape[2] as i64 / (m * m),
                shape[0] as i64 * m,
                shape[1] as i64 * m,
            ]);
        }
        let total: usize = rows.iter().sum();
        let mut data = pool.get(total * row * 4);
        let out = data.as_bytes_mut();
        let mut at = 0;
        for v in items {
            if let FieldValue::Array(a) = v {
                out[at..at + a.data.len()].copy_from_slice(&a.data);
                at += a.data.len();
                if let std::borrow::Cow::Owned(bytes) = a.data {
                    give_spare(bytes);
                }
            }
        }
        let mut thw = pool.get(grid.len() * 8);
        thw.as_bytes_mut()
            .copy_from_slice(bytemuck::cast_slice(&grid));
        batch.columns[k].1 = ColumnData::Ragged {
            dtype: DType::F32,
            shape: vec![total, row],
            rows: rows.clone(),
            data,
        };
        batch.columns.push((
            format!("{name}_grid_thw"),
            ColumnData::Fixed {
                dtype: DType::I64,
                shape: vec![rows.len(), 3],
                data: thw,
            },
        ));
    }
    Ok(())
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
            ColumnData::Ragged {
                dtype,
                shape,
                rows,
                data,
            } => {
                // the slot's rows change in number: the column is made again around them
                let row = shape[1..].iter().product::<usize>() * dtype.size();
                let start = |i: usize| rows[..i].iter().sum::<usize>() * row;
                let old = data.as_bytes();
                let (from, to) = (start(src)..start(src + 1), start(dst)..start(dst + 1));
                let mut next = Buffer::zeroed(old.len() - to.len() + from.len());
                let out = next.as_bytes_mut();
                out[..to.start].copy_from_slice(&old[..to.start]);
                out[to.start..to.start + from.len()].copy_from_slice(&old[from.clone()]);
                out[to.start + from.len()..].copy_from_slice(&old[to.end..]);
                rows[dst] = rows[src];
                shape[0] = rows.iter().sum();
                *data = next;
            }
        }
    }
    batch.ids[dst] = batch.ids[src];
    batch.padding[dst] = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fill a ragged column of 3 slots (2, 0 and 3 rows of 2 floats), each slot with its index.
    fn ragged_batch(pool: &Arc<BufferPool>) -> Batch {
        let outputs = vec![Output::Ragged {
            dtype: DType::F32,
            row_shape: vec![2],
            rows: vec![2, 0, 3],
        }];
        let names = vec![("pixels".to_string(), Output::List)];
        let shared = SharedBatch::new(0, 0, vec![10, 11, 12], vec![false; 3], outputs, pool, 3);
        for slot in 0..3 {
            // SAFETY: one writer per slot, before its task is done
            let bytes = unsafe { shared.slot_mut(0, slot) };
            let floats: &mut [f32] = bytemuck::cast_slice_mut(bytes);
            floats.fill(slot as f32);
            shared.task_done();
        }
        finish_batch(&shared, &names, pool)
    }

    fn floats(b: &Batch) -> (Vec<usize>, Vec<usize>, Vec<f32>) {
        match &b.columns[0].1 {
            ColumnData::Ragged {
                shape, rows, data, ..
            } => (
                shape.clone(),
                rows.clone(),
                bytemuck::cast_slice(data.as_bytes()).to_vec(),
            ),
            other => panic!("not ragged: {other:?}"),
        }
    }

    #[test]
    fn ragged_slots_lie_one_after_another_in_one_tensor() {
        let pool = Arc::new(BufferPool::new(4));
        let b = ragged_batch(&pool);
        let (shape, rows, values) = floats(&b);
        assert_eq!(shape, vec![5, 2]);
        assert_eq!(rows, vec![2, 0, 3]);
        assert_eq!(values, vec![0., 0., 0., 0., 2., 2., 2., 2., 2., 2.]);
        drop(b);
        // the buffer went back to the pool, and is what the next batch gets
        assert_eq!(pool.free_count(), 1);
        let again = ragged_batch(&pool);
        assert_eq!(pool.free_count(), 0);
        assert_eq!(floats(&again).2, values);
    }

    #[test]
    fn a_copied_slot_takes_its_sources_rows_and_the_rest_move() {
        let pool = Arc::new(BufferPool::new(4));
        let mut b = ragged_batch(&pool);
        copy_slot(&mut b, 0, 1);
        let (shape, rows, values) = floats(&b);
        assert_eq!(rows, vec![2, 2, 3]);
        assert_eq!(shape, vec![7, 2]);
        let mut want = vec![0f32; 8];
        want.extend([2f32; 6]);
        assert_eq!(values, want);
        assert!(b.padding[1]);
        copy_slot(&mut b, 2, 0);
        let (shape, rows, values) = floats(&b);
        assert_eq!((shape, rows), (vec![8, 2], vec![3, 2, 3]));
        assert_eq!(values[..6], [2f32; 6]);
        assert_eq!(values[6..10], [0f32; 4]);
    }

    #[test]
    fn image_patches_are_delivered_as_one_tensor_and_their_grids() {
        let (merge, row) = (2usize, 3usize);
        let patches = vec![("image".to_string(), Output::Patches { merge, row })];
        let pool = Arc::new(BufferPool::new(4));
        // sample 0: grid (1, 2, 4), 8 patches; sample 1: grid (1, 4, 2); sample 2: grid (2, 2, 2)
        let shapes: [[u64; 4]; 3] = [[1, 2, 4, 3], [2, 1, 4, 3], [1, 1, 8, 3]];
        let shared = SharedBatch::new(
            0,
            0,
            vec![5, 6, 7],
            vec![false; 3],
            vec![patches[0].1.clone()],
            &pool,
            3,
        );
        for (slot, shape) in shapes.iter().enumerate() {
            let n = shape.iter().product::<u64>() as usize;
            let values: Vec<f32> = (0..n).map(|i| (slot * 100 + i) as f32).collect();
            let v = FieldValue::Array(stokehold_format::ArrayValue {
                dtype: DType::F32,
                shape: shape.to_vec(),
                data: bytemuck::cast_slice(&values).to_vec().into(),
            });
            shared.set_list(0, slot, v);
            shared.task_done();
        }
        let mut b = finish_batch(&shared, &patches, &pool);
        deliver_patches(&mut b, &patches, &pool).unwrap();
        assert_eq!(b.columns.len(), 2);
        match &b.columns[0] {
            (
                name,
                ColumnData::Ragged {
                    dtype,
                    shape,
                    rows,
                    data,
                },
            ) => {
                assert_eq!((name.as_str(), *dtype), ("image", DType::F32));
                assert_eq!((shape.clone(), rows.clone()), (vec![24, 3], vec![8, 8, 8]));
                let got: &[f32] = bytemuck::cast_slice(data.as_bytes());
                // each sample's values, in order, one after another
                let want: Vec<f32> = (0..3)
                    .flat_map(|s| (0..24).map(move |i| (s * 100 + i) as f32))
                    .collect();
                assert_eq!(got, &want[..]);
            }
            other => panic!("not patches: {other:?}"),
        }
        match &b.columns[1] {
            (name, ColumnData::Fixed { dtype, shape, data }) => {
                assert_eq!((name.as_str(), *dtype), ("image_grid_thw", DType::I64));
                assert_eq!(shape, &vec![3, 3]);
                let got: &[i64] = bytemuck::cast_slice(data.as_bytes());
                assert_eq!(got, &[1, 2, 4, 1, 4, 2, 2, 2, 2]);
            }
            other => panic!("not the grids: {other:?}"),
        }
        // the per-sample buffers are there for the next samples' values
        let again = spare_bytes(24 * 4);
        assert_eq!(again.len(), 96);
        assert!(again.capacity() >= 96);
    }

    #[test]
    fn a_value_that_is_not_image_patches_is_an_error_naming_the_slot() {
        let patches = vec![("image".to_string(), Output::Patches { merge: 2, row: 3 })];
        let pool = Arc::new(BufferPool::new(4));
        let shared = SharedBatch::new(
            0,
            0,
            vec![1, 2],
            vec![false; 2],
            vec![patches[0].1.clone()],
            &pool,
            2,
        );
        let ok = FieldValue::Array(stokehold_format::ArrayValue {
            dtype: DType::F32,
            shape: vec![1, 1, 4, 3],
            data: vec![0u8; 48].into(),
        });
        // a row of 2 floats where the column's rows are 3
        let bad = FieldValue::Array(stokehold_format::ArrayValue {
            dtype: DType::F32,
            shape: vec![1, 1, 4, 2],
            data: vec![0u8; 32].into(),
        });
        shared.set_list(0, 0, ok);
        shared.set_list(0, 1, bad);
        shared.task_done();
        shared.task_done();
        let mut b = finish_batch(&shared, &patches, &pool);
        let e = deliver_patches(&mut b, &patches, &pool)
            .unwrap_err()
            .to_string();
        assert!(e.contains("slot 1") && e.contains("\"image\""), "{e}");
    }

    #[test]
    fn a_reused_buffer_keeps_its_bytes_and_a_large_one_has_room_to_grow() {
        let pool = BufferPool::new(4);
        let mut b = pool.get(2 << 20);
        assert_eq!(b.len(), 2 << 20);
        assert!(b.capacity() >= (2 << 20) + (1 << 19), "a quarter more room");
        b.as_bytes_mut().fill(7);
        pool.put(b);
        // smaller, then larger than the first (within its room): the same buffer, not zeroed
        let small = pool.get(1000);
        assert_eq!(small.as_bytes(), &[7u8; 1000][..]);
        pool.put(small);
        let large = pool.get((2 << 20) + 100);
        assert_eq!(large.len(), (2 << 20) + 100);
        assert_eq!(&large.as_bytes()[..2 << 20], &vec![7u8; 2 << 20][..]);
        assert_eq!(
            &large.as_bytes()[2 << 20..],
            &[0u8; 100][..],
            "grown bytes are zeroed"
        );
        assert_eq!(pool.free_count(), 0);
    }

    #[test]
    fn the_pool_gives_the_smallest_buffer_that_fits() {
        let pool = BufferPool::new(4);
        pool.put(Buffer::zeroed(1 << 20));
        pool.put(Buffer::zeroed(64));
        let small = pool.get(48);
        assert!(
            small.capacity() < 1 << 20,
            "a small request took the large buffer"
        );
        assert!(pool.get(1000).capacity() >= 1 << 20);
    }
}
