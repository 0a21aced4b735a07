//! The one fetcher: the bytes the samples of a task need, for every kind of sample. A sample
//! source ([`crate::samples::Samples`]) names its byte sources (datasets, each with its RAM
//! cache: [`ByteSource`]; a mixture has its sources' together) and says which byte ranges of
//! which shards of which source each sample of a task needs (a [`TaskPlan`]: one range per
//! record, the pieces of a token window, ...; a range carries its source's index); this module
//! gets them, order-aware, in one fetch per task whatever the number of sources:
//!
//! - ranges already in memory (a map, a memory backend, the RAM cache) are borrowed, not read;
//! - the other ranges of the task are sorted by position in their shard, and neighbours
//!   (overlapping, or with a gap no larger than the ranges themselves and at most [`MAX_GAP`]) are
//!   coalesced into one positional read of at most [`MAX_RUN`] bytes, so a sequential or
//!   shard-block order reads in large requests;
//! - the reads of a task go out together: with direct I/O in parallel lanes ([`IO_DEPTH`]), else
//!   in one `io_uring` submission where the kernel allows it ([`ReadBatch`]), else one `pread`
//!   each;
//! - [`hint`] tells storage which ranges a batch a few steps ahead will need (readahead:
//!   page-cache advice locally, fetches ahead from object storage), and [`readahead`] is the one
//!   place that decides which of the two the sources get.
//!
//! A failed coalesced read falls back to one read per range, so that an error names the exact
//! record and byte range.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use stokehold_format::FormatError;
use stokehold_storage::Dataset;
use stokehold_storage::read_batch::{self, ReadBatch, ReadRequest};

use crate::cache::RecordCache;
use crate::sampler::Shuffle;

/// Largest gap between two ranges read in one request (the gap's bytes are read and dropped).
pub const MAX_GAP: u64 = stokehold_format::source::HINT_GAP;
/// Largest single coalesced read.
pub const MAX_RUN: u64 = 8 << 20;
/// With direct I/O, runs are cut at this size so that their pieces are read in parallel lanes
/// (the device sees several requests at once, as the kernel's readahead would give buffered
/// reads).
pub const MAX_DIRECT_RUN: u64 = 1 << 20;

/// Requests a task keeps in flight at once with direct I/O (which has no kernel readahead to
/// overlap requests): fast devices need many to reach their throughput.
pub const IO_DEPTH: usize = 8;

/// Mean sample size from which readahead advice is sent to local storage: below it, a hint (one
/// system call per record in a shuffled order) would cost more than the small read it announces.
/// Object storage always gets hints (it fetches the hinted ranges ahead).
pub const READAHEAD_MIN_SAMPLE: u64 = 32 << 10;

/// Bytes of records announced at once to object storage in an order that keeps to a few shards
/// at a time ([`Readahead::Fetch`]): a few shards of the usual 16-256 MiB, well within the
/// prefetch's default budget (512 MiB).
pub const REMOTE_WAVE_BYTES: u64 = 64 << 20;

/// Most batches announced at once (a wave; see [`Readahead::wave`]).
pub const MAX_WAVE: u64 = 16;

/// How storage is told ahead which samples will be read ([`readahead`] decides; the engine
/// announces a batch's ranges with [`hint`], a few steps ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readahead {
    /// Nothing is announced (samples in memory, or too small for a hint to pay).
    Off,
    /// Advice to the page cache (local files): each batch is announced once it is created, one
    /// batch at a time, outside any lock (a read before the advice is only a read without it).
    Advise,
    /// Storage fetches what is announced (object storage): a batch is announced before any
    /// worker can read from it (a record read before it was asked for would cost a request of
    /// its own, and the range fetched for it later would be wasted), and in an order that keeps
    /// to a few shards at a time several batches at once, about [`REMOTE_WAVE_BYTES`], so that
    /// records of one shard that several batches share are fetched in GETs of several MiB.
    Fetch,
}

impl Readahead {
    /// Batches announced at once in `shuffle` when a batch holds about `batch_bytes`: 1 but
    /// where storage fetches ahead in an order that keeps to a few shards (sequential,
    /// shard-block); in a global shuffle batches share no shards worth coalescing.
    pub fn wave(self, shuffle: Shuffle, batch_bytes: u64) -> u64 {
        match (self, shuffle) {
            (Readahead::Fetch, Shuffle::Sequential | Shuffle::ShardBlock { .. }) => {
                REMOTE_WAVE_BYTES
                    .div_ceil(batch_bytes.max(1))
                    .clamp(1, MAX_WAVE)
            }
            _ => 1,
        }
    }
}

/// Bytes `[lo, hi)` of shard `shard` of byte source `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// The byte source's index in the samples' [`crate::samples::Samples::sources`] (0 for
    /// samples of one dataset).
    pub source: u16,
    /// The shard's index in the source's dataset.
    pub shard: usize,
    /// First byte.
    pub lo: u64,
    /// One past the last byte.
    pub hi: u64,
}

impl ByteRange {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.hi.saturating_sub(self.lo)
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One place a sample source's bytes are: a dataset and, when on, the RAM cache of its shards
/// (set once, possibly after the source was made: [`ByteSource::set_cache`]). Cheap to clone
/// (shared handles): a mixture's sources are its sources' byte sources, together.
#[derive(Debug, Clone)]
pub struct ByteSource {
    dataset: Arc<Dataset>,
    cache: Arc<OnceLock<Arc<RecordCache>>>,
}

impl ByteSource {
    /// The shards of `dataset`, through `cache` when given.
    pub fn new(dataset: Arc<Dataset>, cache: Option<Arc<RecordCache>>) -> ByteSource {
        let slot = OnceLock::new();
        if let Some(c) = cache {
            let _ = slot.set(c);
        }
        ByteSource {
            dataset,
            cache: Arc::new(slot),
        }
    }

    /// The dataset whose shards the ranges are in.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The RAM cache of whole shards, when on.
    pub fn cache(&self) -> Option<&RecordCache> {
        self.cache.get().map(|c| &**c)
    }

    /// Whether `other` is this source (the same dataset and cache slot).
    pub fn same(&self, other: &ByteSource) -> bool {
        Arc::ptr_eq(&self.dataset, &other.dataset) && Arc::ptr_eq(&self.cache, &other.cache)
    }

    /// Read through `cache` from now on (for this source and its clones; the first cache set
    /// stays).
    pub fn set_cache(&self, cache: Arc<RecordCache>) {
        let _ = self.cache.set(cache);
    }

    /// How storage is told ahead which samples will be read, for samples of `mean_bytes` on
    /// average: nothing when the shards are in memory (or all in the RAM cache), fetches ahead
    /// from object storage, page-cache advice for local files when samples are large enough for
    /// it to pay ([`READAHEAD_MIN_SAMPLE`]).
    pub fn readahead(&self, mean_bytes: u64) -> Readahead {
        let shards = self.dataset.shards();
        let in_memory = shards
            .first()
            .is_none_or(|s| s.source().slice(0, 0).is_some());
        if in_memory || self.cache().is_some_and(|c| c.complete()) {
            Readahead::Off
        } else if shards
            .first()
            .is_some_and(|s| s.source().profile().is_network())
        {
            // every read is a request with its latency: hints always pay (a shard behind a disk
            // cache has its source's profile until its copy lands, a local file's after)
            Readahead::Fetch
        } else if mean_bytes >= READAHEAD_MIN_SAMPLE {
            Readahead::Advise
        } else {
            Readahead::Off
        }
    }

    /// `r`'s bytes when they are in memory (a map, a memory source or the RAM cache). With
    /// `touch`, a RAM cache miss on the shard queues its load.
    fn memory(&self, r: &ByteRange, touch: bool) -> Option<&[u8]> {
        let len = usize::try_from(r.len()).ok()?;
        let shard = self.dataset.shards().get(r.shard)?;
        if let Some(s) = shard.source().slice(r.lo, len) {
            return Some(s);
        }
        let c = self.cache()?;
        let bytes = if touch {
            c.shard(&self.dataset, r.shard)?
        } else {
            c.peek(r.shard)?
        };
        let start = usize::try_from(r.lo).ok()?;
        bytes.get(start..start.checked_add(len)?)
    }
}

/// How storage is told ahead which samples of `sources` will be read, for samples of
/// `mean_bytes` on average: the most any source needs ([`ByteSource::readahead`]); off for
/// samples that read no bytes.
pub fn readahead(sources: &[ByteSource], mean_bytes: u64) -> Readahead {
    let rank = |r: Readahead| match r {
        Readahead::Off => 0,
        Readahead::Advise => 1,
        Readahead::Fetch => 2,
    };
    sources
        .iter()
        .map(|s| s.readahead(mean_bytes))
        .max_by_key(|r| rank(*r))
        .unwrap_or(Readahead::Off)
}

/// The requests made to the object stores `sources` are read from, summed (`None`: all local).
pub fn remote_stats(sources: &[ByteSource]) -> Option<stokehold_storage::remote::RemoteStats> {
    if let [one] = sources {
        return one.dataset.remote_stats();
    }
    let mut total: Option<stokehold_storage::remote::RemoteStats> = None;
    for r in sources.iter().filter_map(|s| s.dataset.remote_stats()) {
        let t = total.get_or_insert_with(Default::default);
        t.requests += r.requests;
        t.http_requests += r.http_requests;
        t.retries += r.retries;
        t.failures += r.failures;
        t.short_bodies += r.short_bodies;
        t.bytes += r.bytes;
        t.prefetch.requests += r.prefetch.requests;
        t.prefetch.bytes += r.prefetch.bytes;
        t.prefetch.hits += r.prefetch.hits;
        t.prefetch.misses += r.prefetch.misses;
        t.prefetch.wasted_bytes += r.prefetch.wasted_bytes;
        t.prefetch.refused += r.prefetch.refused;
    }
    total
}

/// Readahead: tell storage that `ranges` of `sources` will be read soon, in this order (ranges
/// in memory need no hint): one `Storage::will_read` per shard with its ranges (storage coalesces
/// them, or fetches them ahead), the shards in the order of their first range, so that what is
/// read first is asked for first.
pub fn hint(
    sources: &[ByteSource],
    ranges: &[ByteRange],
    scratch: &mut Vec<(u16, usize, u64, u64)>,
) {
    scratch.clear();
    scratch.extend(
        ranges
            .iter()
            .filter(|r| {
                sources
                    .get(usize::from(r.source))
                    .is_some_and(|s| s.memory(r, false).is_none())
            })
            .map(|r| (r.source, r.shard, r.lo, r.hi)),
    );
    // a shard named by source and index in one word (shards are fewer than 2^48)
    let key = |s: u16, k: usize| (u64::from(s) << 48) | k as u64;
    let mut first: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    for (i, &(s, k, _, _)) in scratch.iter().enumerate() {
        first.entry(key(s, k)).or_insert(i);
    }
    scratch.sort_unstable_by_key(|&(s, k, lo, hi)| (first[&key(s, k)], lo, hi));
    let mut records: Vec<(u64, u64)> = Vec::new();
    let mut i = 0;
    while i < scratch.len() {
        let (s, k) = (scratch[i].0, scratch[i].1);
        records.clear();
        while i < scratch.len() && (scratch[i].0, scratch[i].1) == (s, k) {
            records.push((scratch[i].2, scratch[i].3));
            i += 1;
        }
        if let Some(shard) = sources[usize::from(s)].dataset.shards().get(k) {
            shard.source().will_read(&records);
        }
    }
}

/// The byte ranges each sample of a task needs, in the task's order (what a sample source's
/// [`crate::samples::Samples::plan`] writes).
#[derive(Debug, Default)]
pub struct TaskPlan {
    ranges: Vec<ByteRange>,
    /// `ends[k]`: one past sample `k`'s last range.
    ends: Vec<usize>,
    /// Added to the source of each range pushed (the first byte source of the part of the
    /// samples being planned: a mixture's source).
    source_base: u16,
}

impl TaskPlan {
    /// Forget the last task's plan.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.ends.clear();
        self.source_base = 0;
    }

    /// A range of the sample being planned (its source counted from the part's first).
    pub fn push(&mut self, mut r: ByteRange) {
        r.source += self.source_base;
        self.ranges.push(r);
    }

    /// What is added to the source of each range pushed.
    pub fn source_base(&self) -> u16 {
        self.source_base
    }

    /// Add `base` to the source of each range pushed from now on.
    pub fn set_source_base(&mut self, base: u16) {
        self.source_base = base;
    }

    /// The sample being planned has all its ranges (possibly none: a sample whose location
    /// failed reports the error when it is filled).
    pub fn end_sample(&mut self) {
        self.ends.push(self.ranges.len());
    }

    /// Every range of the task.
    pub fn ranges(&self) -> &[ByteRange] {
        &self.ranges
    }

    /// Samples planned.
    pub fn samples(&self) -> usize {
        self.ends.len()
    }

    /// Indices (into [`TaskPlan::ranges`]) of the `k`-th sample's ranges (empty when it was not
    /// planned).
    pub fn sample(&self, k: usize) -> Range<usize> {
        let end = self.ends.get(k).copied().unwrap_or(0);
        let start = match k {
            0 => 0,
            _ => self.ends.get(k - 1).copied().unwrap_or(end),
        };
        start..end.max(start)
    }
}

/// One coalesced read: ranges `ranges` of the sorted pending list, from shard `shard` of source
/// `source` at `offset`, into `buf[base..base + len]`.
#[derive(Debug)]
struct Run {
    ranges: Range<usize>,
    source: u16,
    shard: usize,
    offset: u64,
    base: usize,
    len: usize,
}

/// Read `runs` with up to [`IO_DEPTH`] requests in flight (scoped threads, each taking every
/// `IO_DEPTH`-th run); whether each succeeded.
fn read_parallel(sources: &[ByteSource], runs: &[Run], buf: &mut [u8]) -> Vec<bool> {
    // split the buffer into the runs' disjoint slices (runs are laid out in order)
    let mut slices: Vec<(usize, &mut [u8])> = Vec::with_capacity(runs.len());
    let mut rest = buf;
    for (j, r) in runs.iter().enumerate() {
        let (head, tail) = rest.split_at_mut(r.len);
        slices.push((j, head));
        rest = tail;
    }
    let lanes = IO_DEPTH.min(runs.len());
    let mut groups: Vec<Vec<(usize, &mut [u8])>> = (0..lanes).map(|_| Vec::new()).collect();
    for (n, item) in slices.into_iter().enumerate() {
        groups[n % lanes].push(item);
    }
    let mut ok = vec![false; runs.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| {
                scope.spawn(move || {
                    group
                        .into_iter()
                        .map(|(j, dst)| {
                            let r = &runs[j];
                            (
                                j,
                                storage(sources, r.source, r.shard)
                                    .read_at(r.offset, dst)
                                    .is_ok(),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            // a lane that panicked leaves its runs marked failed: they are read again one by one
            if let Ok(done) = h.join() {
                for (j, good) in done {
                    ok[j] = good;
                }
            }
        }
    });
    ok
}

/// Read `runs`: each from the page cache when it is all there (one `preadv2(RWF_NOWAIT)`, which
/// never waits for the device: the cost of one `pread`), the others together in one batch (one
/// `io_uring` submission where the kernel allows it), so that a cold task waits for the device
/// once, not once per run, and a warm one makes no more system calls than plain reads would
/// (nor sets up a ring). Whether each succeeded.
fn read_cached_then_batch(
    sources: &[ByteSource],
    runs: &[Run],
    buf: &mut [u8],
    batch: &mut ReadBatch,
) -> Vec<bool> {
    let mut ok = vec![true; runs.len()];
    let mut missed = Vec::new();
    for (j, r) in runs.iter().enumerate() {
        let source = storage(sources, r.source, r.shard);
        match read_batch::read_if_cached(source, r.offset, &mut buf[r.base..r.base + r.len]) {
            Ok(true) => {}
            Ok(false) => missed.push(j),
            Err(_) => ok[j] = false,
        }
    }
    if missed.is_empty() {
        return ok;
    }
    // the missed runs' disjoint slices of the buffer (runs are laid out in order)
    let mut reqs = Vec::with_capacity(missed.len());
    let mut rest = buf;
    let mut at = 0usize;
    for &j in &missed {
        let r = &runs[j];
        let (_, tail) = rest.split_at_mut(r.base - at);
        let (head, tail) = tail.split_at_mut(r.len);
        rest = tail;
        at = r.base + r.len;
        reqs.push(ReadRequest::new(
            storage(sources, r.source, r.shard),
            r.offset,
            head,
        ));
    }
    batch.read_all(&mut reqs);
    for (&j, q) in missed.iter().zip(&reqs) {
        ok[j] = q.result.is_ok();
    }
    ok
}

/// The storage of shard `k` of source `source` (both checked when the range was taken).
fn storage(sources: &[ByteSource], source: u16, k: usize) -> &dyn stokehold_format::Storage {
    &**sources[usize::from(source)].dataset.shards()[k].source()
}

/// Largest gap coalesced in a task's read, between ranges of `before` and `after` bytes: one
/// that costs less than the request it saves. At most [`MAX_GAP`], and at most the larger of the
/// two ranges (at least [`MIN_GAP`]): reading 64 KiB of gap to join two 8 KiB token windows copies
/// four times the bytes wanted, which a warm page cache makes slower than a second read.
/// Object storage: none (ranges side by side or overlapping only): the bytes come from ranges
/// fetched ahead, which count each hinted range read by the read that covers it, so a read must
/// not cover another task's range in a gap.
pub fn max_gap(sources: &[ByteSource], source: u16, k: usize, before: u64, after: u64) -> u64 {
    gap(
        storage(sources, source, k).profile().is_network(),
        before,
        after,
    )
}

/// [`max_gap`] once the run's storage is known (`remote`: it reads from object storage).
fn gap(remote: bool, before: u64, after: u64) -> u64 {
    if remote {
        0
    } else {
        before.max(after).clamp(MIN_GAP, MAX_GAP)
    }
}

/// The smallest gap always read through (a page: the device reads it anyway).
pub const MIN_GAP: u64 = 4 << 10;

/// Where one range's bytes are.
#[derive(Debug)]
enum Src {
    /// Borrowed from memory (map, memory source or RAM cache).
    Memory,
    /// In the task buffer.
    Buffer(Range<usize>),
    /// Its read failed: the error's kind, OS code and text (rebuilt into the range's error when
    /// asked for, so that asking twice gives the same error).
    Failed(std::io::ErrorKind, Option<i32>, String),
}

/// The fetched bytes of one task's ranges (a worker's, kept across tasks so that steady state
/// allocates nothing).
#[derive(Debug, Default)]
pub struct Fetched {
    /// The bytes read, `buf[..used]` this task's (the rest left from earlier tasks: the buffer
    /// only grows).
    buf: Vec<u8>,
    used: usize,
    /// Per range of the plan: the range and where its bytes are.
    slots: Vec<(ByteRange, Src)>,
    /// Ranges to read (indices into `slots`), sorted by position.
    pending: Vec<usize>,
    runs: Vec<Run>,
    /// Per source of the last fetch: RAM cache (hits, misses).
    counts: Vec<(u64, u64)>,
    batch: ReadBatch,
    /// Bytes fetched from storage by the last [`Fetched::fetch`] (not from memory).
    pub read_bytes: u64,
    /// Storage requests made by the last fetch.
    pub requests: u64,
}

impl Fetched {
    /// A fetcher that submits reads through `io_uring` where the kernel allows it (the default),
    /// or never (`io_uring` false).
    pub fn new(io_uring: bool) -> Fetched {
        Fetched {
            batch: if io_uring {
                ReadBatch::new()
            } else {
                ReadBatch::without_io_uring()
            },
            ..Fetched::default()
        }
    }

    /// Whether reads that need the device may go through `io_uring` (as made by
    /// [`Fetched::new`]).
    pub fn may_use_io_uring(&self) -> bool {
        self.batch.mode() != "pread"
    }

    /// How reads that need the device are made: `"io_uring"`, `"pread"`, or `"untried"` before
    /// the first such read.
    pub fn mode(&self) -> &'static str {
        self.batch.mode()
    }

    /// Fetch `ranges` of `sources` (memory borrowed, the rest read in coalesced requests that go
    /// out together, whatever source they are of). Errors are kept per range and given by
    /// [`Fetched::get`].
    pub fn fetch(&mut self, sources: &[ByteSource], ranges: &[ByteRange]) {
        self.slots.clear();
        self.pending.clear();
        self.runs.clear();
        self.read_bytes = 0;
        self.requests = 0;
        self.used = 0;
        // per source with a RAM cache: (hits, misses), counted in bulk
        let counting = sources.iter().any(|s| s.cache().is_some());
        self.counts.clear();
        if counting {
            self.counts.resize(sources.len(), (0, 0));
        }
        for (i, r) in ranges.iter().enumerate() {
            let Some(src) = sources
                .get(usize::from(r.source))
                .filter(|s| r.shard < s.dataset.shards().len() && r.hi >= r.lo)
            else {
                let e = std::io::Error::other("a range outside the sources' shards");
                self.slots.push((*r, failed(&e)));
                continue;
            };
            let hit = src.memory(r, true).is_some();
            if let Some(c) = self.counts.get_mut(usize::from(r.source)) {
                if hit {
                    c.0 += 1;
                } else {
                    c.1 += 1;
                }
            }
            if hit {
                self.slots.push((*r, Src::Memory));
            } else {
                self.pending.push(i);
                self.slots.push((*r, Src::Buffer(0..0)));
            }
        }
        for (src, &(hits, misses)) in sources.iter().zip(&self.counts) {
            if let Some(c) = src.cache() {
                c.count(hits, misses);
            }
        }
        if self.pending.is_empty() {
            return;
        }
        let slots = &self.slots;
        // by source, shard and position (source and shard in one word: shards are fewer than
        // 2^48)
        self.pending.sort_unstable_by_key(|&i| {
            let r = &slots[i].0;
            ((u64::from(r.source) << 48) | r.shard as u64, r.lo, r.hi)
        });
        // runs: [start, end) of `pending`, same shard, small gaps (or overlaps), bounded size
        let mut too_large = Vec::new();
        let mut total = 0usize;
        let mut start = 0;
        while start < self.pending.len() {
            let first = slots[self.pending[start]].0;
            let (source, k, lo) = (first.source, first.shard, first.lo);
            // the run's storage decides its gaps and length (asked once per run)
            let profile = storage(sources, source, k).profile();
            let remote = profile.is_network();
            let run_max = if profile.is_direct() {
                MAX_DIRECT_RUN
            } else {
                MAX_RUN
            };
            let mut last_end = first.hi;
            let mut prev_len = first.len();
            let mut end = start + 1;
            while end < self.pending.len() {
                let r = slots[self.pending[end]].0;
                let new_end = last_end.max(r.hi);
                if r.source != source
                    || r.shard != k
                    || r.lo > last_end + gap(remote, prev_len, r.len())
                    || new_end - lo > run_max
                {
                    break;
                }
                last_end = new_end;
                prev_len = r.len();
                end += 1;
            }
            // ranges come from indexes checked against the shard's length at open: they fit
            // memory as the shard's own bytes do; one that does not is a failed read, never an
            // allocation
            let len = usize::try_from(last_end - lo).unwrap_or(usize::MAX);
            let Some(next) = total.checked_add(len).filter(|&t| t <= isize::MAX as usize) else {
                too_large.extend_from_slice(&self.pending[start..end]);
                start = end;
                continue;
            };
            self.runs.push(Run {
                ranges: start..end,
                source,
                shard: k,
                offset: lo,
                base: total,
                len,
            });
            total = next;
            start = end;
        }
        for i in too_large {
            let e = std::io::Error::other("the range does not fit in memory");
            self.slots[i].1 = failed(&e);
        }
        // never shrunk and not cleared first: the reads overwrite the old bytes, so only what
        // the buffer grows by is ever zeroed (zeroing a whole batch's records each time was ~1%
        // of a crop pipeline's instructions; shrinking it to each task's size and growing it
        // back zeroed a fifth of a token pipeline's)
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        }
        self.used = total;
        self.requests += self.runs.len() as u64;
        let runs = &self.runs;
        let direct = runs
            .iter()
            .any(|r| storage(sources, r.source, r.shard).profile().is_direct());
        let buf = &mut self.buf[..total];
        let ok = if direct && runs.len() > 1 {
            read_parallel(sources, runs, buf)
        } else {
            read_cached_then_batch(sources, runs, buf, &mut self.batch)
        };
        let runs = std::mem::take(&mut self.runs);
        for (r, ok) in runs.iter().zip(ok) {
            if ok {
                self.read_bytes += r.len as u64;
                for &i in &self.pending[r.ranges.clone()] {
                    let at = r.base + (self.slots[i].0.lo - r.offset) as usize;
                    self.slots[i].1 = Src::Buffer(at..at + self.slots[i].0.len() as usize);
                }
            } else {
                self.read_each(sources, r);
            }
        }
        self.runs = runs;
    }

    /// After a failed read of a run: one read per range, so that an error says which one.
    fn read_each(&mut self, sources: &[ByteSource], r: &Run) {
        let source = storage(sources, r.source, r.shard);
        for &i in &self.pending[r.ranges.clone()] {
            let range = self.slots[i].0;
            self.requests += 1;
            let s = self.used;
            let len = range.len() as usize;
            if self.buf.len() < s + len {
                self.buf.resize(s + len, 0);
            }
            self.slots[i].1 = match source.read_at(range.lo, &mut self.buf[s..s + len]) {
                Ok(()) => {
                    self.read_bytes += len as u64;
                    self.used = s + len;
                    Src::Buffer(s..s + len)
                }
                Err(e) => failed(&e),
            };
        }
    }

    /// The bytes of range `i` of the last fetch (from `sources`, the sources it fetched from),
    /// or the error of its read, naming the shard's file, the record and the byte range.
    pub fn get<'a>(&'a self, sources: &'a [ByteSource], i: usize) -> Result<&'a [u8], FormatError> {
        let Some(((r, at), (src, shard))) = self.slots.get(i).and_then(|s| {
            let src = sources.get(usize::from(s.0.source))?;
            Some((s, (src, src.dataset.shards().get(s.0.shard)?)))
        }) else {
            return Err(FormatError::Corrupt {
                path: sources
                    .first()
                    .map(|s| s.dataset.dir().to_path_buf())
                    .unwrap_or_default(),
                what: format!("range {i} of a task"),
                offset: 0,
                detail: "a range outside what the task fetched or the dataset's shards".into(),
            });
        };
        match at {
            Src::Buffer(b) => Ok(&self.buf[b.clone()]),
            Src::Memory => src.memory(r, false).ok_or_else(|| FormatError::Corrupt {
                path: shard.path().to_path_buf(),
                what: format!("bytes {}..{}", r.lo, r.hi),
                offset: r.lo,
                detail: "the bytes vanished from memory".into(),
            }),
            Src::Failed(kind, code, text) => {
                let e = match code {
                    Some(c) => std::io::Error::from_raw_os_error(*c),
                    None => std::io::Error::new(*kind, text.clone()),
                };
                Err(shard.range_error(r.lo, r.hi, e))
            }
        }
    }
}

fn failed(e: &std::io::Error) -> Src {
    Src::Failed(e.kind(), e.raw_os_error(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stokehold_format::{FieldValue, Schema};
    use stokehold_storage::{Access, DatasetWriteOptions, DatasetWriter, OpenOptions};

    fn dataset(dir: &std::path::Path, access: Access) -> Arc<Dataset> {
        dataset_salted(dir, access, 0)
    }

    /// The test dataset, its bytes xored with `salt` (the same layout, other bytes).
    fn dataset_salted(dir: &std::path::Path, access: Access, salt: u8) -> Arc<Dataset> {
        let path = dir.join(if salt == 0 {
            "ds".to_string()
        } else {
            format!("ds{salt}")
        });
        if !path.exists() {
            let schema = Schema::from_specs([("b", "bytes")]).unwrap();
            let opts = DatasetWriteOptions {
                target_shard_bytes: 64 << 10,
                ..DatasetWriteOptions::default()
            };
            let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
            for i in 0..100u64 {
                let b: Vec<u8> = (0..(1000 + i * 7)).map(|k| (k ^ i) as u8 ^ salt).collect();
                w.write(&[FieldValue::Bytes(b.into())]).unwrap();
            }
            w.finish().unwrap();
        }
        Arc::new(Dataset::open_with(&path, OpenOptions::with_access(access)).unwrap())
    }

    fn expect(ds: &Dataset, id: u64) -> Vec<u8> {
        let mut v = Vec::new();
        ds.read_record(id, &mut v).unwrap();
        v
    }

    fn range_of(ds: &Dataset, id: u64) -> ByteRange {
        let (k, local) = ds.locate(id).unwrap();
        let e = ds.shards()[k].entry(local);
        ByteRange {
            source: 0,
            shard: k,
            lo: e.offset,
            hi: e.end(),
        }
    }

    fn source(ds: &Arc<Dataset>) -> [ByteSource; 1] {
        [ByteSource::new(Arc::clone(ds), None)]
    }

    /// Fetch the records `ids` (one range each) and check every one against a plain read.
    fn fetch_records(ds: &Arc<Dataset>, f: &mut Fetched, ids: &[u64], what: &str) {
        let ranges: Vec<ByteRange> = ids.iter().map(|&id| range_of(ds, id)).collect();
        f.fetch(&source(ds), &ranges);
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(
                f.get(&source(ds), i).unwrap(),
                expect(ds, id),
                "{what} slot {i}"
            );
        }
    }

    #[test]
    fn neighbours_are_read_in_one_request_and_every_range_gets_its_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        for access in [Access::Pread, Access::Direct] {
            let ds = dataset(tmp.path(), Access::Pread);
            let probe = ds.shards()[0].path().to_path_buf();
            if access == Access::Direct && !stokehold_storage::file::supports_direct(&probe) {
                continue;
            }
            let ds = dataset(tmp.path(), access);
            let mut f = Fetched::default();
            let ids: Vec<u64> = (10..20).collect();
            fetch_records(&ds, &mut f, &ids, &format!("{access:?}"));
            let (k0, _) = ds.locate(10).unwrap();
            let (k1, _) = ds.locate(19).unwrap();
            assert_eq!(
                f.requests,
                1 + (k1 - k0) as u64,
                "one read per shard touched"
            );
            // scattered ids in any order (with direct I/O: read in parallel lanes), right bytes
            let ids = [90u64, 3, 55, 71, 20, 99, 0, 44, 63, 8];
            fetch_records(&ds, &mut f, &ids, &format!("{access:?}"));
            let mut shards: Vec<usize> = ids.iter().map(|&i| ds.locate(i).unwrap().0).collect();
            shards.sort();
            shards.dedup();
            assert!(shards.len() > 1, "reads in several lanes");
            assert!(
                (shards.len() as u64..=ids.len() as u64).contains(&f.requests),
                "{} requests",
                f.requests
            );
        }
    }

    /// Drop `ds`'s shards from the page cache (their pages are clean once synced).
    fn evict(ds: &Dataset) {
        for s in ds.shards() {
            let f = std::fs::File::open(s.path()).unwrap();
            f.sync_all().unwrap();
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
    }

    #[test]
    fn cold_ranges_are_read_together_and_right_with_or_without_io_uring() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Pread);
        let ids = [90u64, 3, 55, 71, 20, 99, 0, 44, 63, 8];
        for io_uring in [true, false] {
            evict(&ds);
            let mut f = Fetched::new(io_uring);
            fetch_records(&ds, &mut f, &ids, &format!("io_uring {io_uring}"));
            // with the ring refused (an old kernel, a seccomp profile) or off: pread each
            let modes: &[&str] = if io_uring {
                &["io_uring", "pread", "untried"]
            } else {
                &["pread"]
            };
            assert!(modes.contains(&f.mode()), "{}", f.mode());
        }
    }

    #[test]
    fn overlapping_and_repeated_ranges_are_read_once_and_sliced_right() {
        // token windows share their boundary token, and a task may plan one range twice
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Pread);
        let shard = std::fs::read(ds.shards()[0].path()).unwrap();
        let r = range_of(&ds, 2);
        let ranges = [
            ByteRange {
                hi: r.lo + 300,
                ..r
            },
            ByteRange {
                lo: r.lo + 299,
                hi: r.lo + 700,
                ..r
            },
            r,
            ByteRange {
                lo: r.lo + 10,
                hi: r.lo + 10,
                ..r
            },
            r,
        ];
        let mut f = Fetched::default();
        f.fetch(&source(&ds), &ranges);
        assert_eq!(f.requests, 1, "one read covers them all");
        for (i, q) in ranges.iter().enumerate() {
            let want = &shard[q.lo as usize..q.hi as usize];
            assert_eq!(f.get(&source(&ds), i).unwrap(), want, "range {i}");
        }
    }

    #[test]
    fn a_gap_is_read_through_only_when_smaller_than_the_ranges_it_joins() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Pread);
        let at = |lo: u64, len: u64| ByteRange {
            source: 0,
            shard: 0,
            lo,
            hi: lo + len,
        };
        let base = range_of(&ds, 0).lo;
        let mut f = Fetched::default();
        // 8 KiB ranges 6 KiB apart: one read; 9 KiB apart: two
        f.fetch(
            &source(&ds),
            &[at(base, 8192), at(base + 8192 + 6144, 8192)],
        );
        assert_eq!(f.requests, 1);
        f.fetch(
            &source(&ds),
            &[at(base, 8192), at(base + 8192 + 9216, 8192)],
        );
        assert_eq!(f.requests, 2);
        // small ranges: a page of gap is always read through, more is not
        f.fetch(&source(&ds), &[at(base, 100), at(base + 100 + 4096, 100)]);
        assert_eq!(f.requests, 1);
        f.fetch(&source(&ds), &[at(base, 100), at(base + 100 + 5000, 100)]);
        assert_eq!(f.requests, 2);
        let shard = std::fs::read(ds.shards()[0].path()).unwrap();
        let src = source(&ds);
        let got = f.get(&src, 1).unwrap();
        assert_eq!(got, &shard[(base + 5100) as usize..(base + 5200) as usize]);
    }

    #[test]
    fn ranges_of_several_sources_are_fetched_together_each_from_its_own_source() {
        let tmp = tempfile::tempdir().unwrap();
        let a = dataset_salted(tmp.path(), Access::Pread, 0);
        let b = dataset_salted(tmp.path(), Access::Pread, 7);
        let m = dataset_salted(tmp.path(), Access::Memory, 9);
        let sources = [
            ByteSource::new(Arc::clone(&a), None),
            ByteSource::new(Arc::clone(&b), None),
            ByteSource::new(Arc::clone(&m), None),
        ];
        let dss = [&a, &b, &m];
        // the same records of two files side by side, and a range of a memory source
        let wanted = [(0u16, 10u64), (1, 10), (0, 11), (1, 11), (2, 12), (2, 10)];
        let ranges: Vec<ByteRange> = wanted
            .iter()
            .map(|&(src, id)| ByteRange {
                source: src,
                ..range_of(&a, id)
            })
            .collect();
        let mut f = Fetched::default();
        f.fetch(&sources, &ranges);
        for (i, &(src, id)) in wanted.iter().enumerate() {
            assert_eq!(
                f.get(&sources, i).unwrap(),
                expect(dss[usize::from(src)], id),
                "range {i}: record {id} of source {src}"
            );
        }
        assert_eq!(
            f.requests, 2,
            "one read per source's neighbours, none across sources, none from memory"
        );
        // a range of no source: an error, not a panic
        let bad = [ByteRange {
            source: 9,
            ..range_of(&a, 1)
        }];
        f.fetch(&sources, &bad);
        assert!(f.get(&sources, 0).is_err());
    }

    #[test]
    fn memory_sources_are_borrowed_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Memory);
        let mut f = Fetched::default();
        fetch_records(&ds, &mut f, &[1, 2, 3], "memory");
        assert_eq!((f.requests, f.read_bytes), (0, 0));
    }

    #[test]
    fn a_failed_range_fails_alone_with_its_location() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Pread);
        let (k, local) = ds.locate(12).unwrap();
        let shard = &ds.shards()[k];
        let e = shard.entry(local);
        let bytes = std::fs::read(shard.path()).unwrap();
        // a truncated shard: the coalesced read fails, and per-range reads name the lost ones
        std::fs::write(shard.path(), &bytes[..e.offset as usize + 10]).unwrap();
        let ranges: Vec<ByteRange> = [11, 12, 13].iter().map(|&i| range_of(&ds, i)).collect();
        let mut f = Fetched::default();
        f.fetch(&source(&ds), &ranges);
        assert_eq!(
            f.get(&source(&ds), 0).unwrap(),
            expect_prefix(&bytes, &ranges[0])
        );
        for i in [1, 2] {
            let err = f.get(&source(&ds), i).unwrap_err().to_string();
            let what = format!("global sample {}", 11 + i);
            assert!(err.contains(&what), "{err}");
            assert!(err.contains(&shard.path().display().to_string()), "{err}");
            // asked twice, the same error
            assert_eq!(f.get(&source(&ds), i).unwrap_err().to_string(), err);
        }
        // a range of no shard, and a range index the task did not plan: errors, not panics
        let bad = [ByteRange {
            source: 0,
            shard: 999,
            lo: 0,
            hi: 10,
        }];
        f.fetch(&source(&ds), &bad);
        assert!(f.get(&source(&ds), 0).is_err());
        assert!(f.get(&source(&ds), 5).is_err());
    }

    fn expect_prefix<'a>(bytes: &'a [u8], r: &ByteRange) -> &'a [u8] {
        &bytes[r.lo as usize..r.hi as usize]
    }

    #[test]
    fn the_plan_gives_each_sample_its_ranges() {
        let mut p = TaskPlan::default();
        let r = |lo| ByteRange {
            source: 0,
            shard: 0,
            lo,
            hi: lo + 1,
        };
        p.push(r(0));
        p.push(r(5));
        p.end_sample();
        p.end_sample(); // a sample with no ranges
        p.push(r(9));
        p.end_sample();
        assert_eq!(p.samples(), 3);
        assert_eq!((p.sample(0), p.sample(1), p.sample(2)), (0..2, 2..2, 2..3));
        assert_eq!(p.sample(7), 0..0, "an unplanned sample has none");
        p.clear();
        assert_eq!((p.samples(), p.ranges().len()), (0, 0));
    }

    #[test]
    fn readahead_follows_where_the_bytes_are() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Pread);
        assert_eq!(
            source(&ds)[0].readahead(READAHEAD_MIN_SAMPLE),
            Readahead::Advise
        );
        assert_eq!(
            source(&ds)[0].readahead(READAHEAD_MIN_SAMPLE - 1),
            Readahead::Off
        );
        let mem = dataset(tmp.path(), Access::Memory);
        assert_eq!(source(&mem)[0].readahead(u64::MAX), Readahead::Off);
    }
}
