//! Sequence loading for language models, over a *token dataset* (`stokehold pack --tokenizer`,
//! docs/text.md): one record per document holding its token ids.
//!
//! **Packed mode** ([`SequenceMode::Packed`]): the documents, in dataset order, form one stream of
//! `N` tokens. Window `w` is the `seq_len + 1` tokens from `w * seq_len`; there are
//! `(N - 1) / seq_len` windows (the last partial one is never read). Each window gives
//! `input_ids = window[..seq_len]` and `labels = window[1..]`, and optionally `position_ids`
//! (counting from 0 at the window start and at every document start inside it) and
//! `segment_ids` (the index, within the window, of the document each input token belongs to).
//!
//! **Document mode** ([`SequenceMode::Documents`]): one document per sample, truncated to
//! `max_len + 1` tokens, inputs and labels shifted by one as above, padded to the longest in the
//! batch (`pad_id` in the inputs, -100 in the labels, 0 in `attention_mask`). With `bucket > 1`,
//! each run of `bucket` consecutive epoch positions is sorted by length (then position) so batches
//! hold documents of similar lengths; buckets are fixed positions of the epoch order, so the order
//! is still a pure function of (seed, epoch) and does not depend on the world size.
//!
//! **Order, ranks, resume.** Windows (or documents) are the samples of the usual
//! [`EpochOrder`] (sequential or keyed global permutation) and [`RankPlan`] (ranks split each
//! step of `world_size * batch_size` positions). The [`ResumeState`] is the global position in
//! windows, exact to the token because a window is a fixed token range; it resumes any world
//! size. Its dataset fingerprint includes the mode (`seq_len`, or `max_len`/`bucket`), so a state
//! cannot be loaded into a loader whose windows differ.
//!
//! **Threads.** Worker threads take whole batches in step order; at most `prefetch` batches are
//! in flight; the consumer delivers them in order. Output never depends on the thread count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use stokehold_format::record::RecordError;
use stokehold_format::{Compression, DType, Dataset, FieldType, FormatError};
use stokehold_ops::text::TokenDType;

use crate::batch::{Batch, BufferPool, ColumnData};
use crate::error::{EngineError, Result};
use crate::sampler::{EpochOrder, RankPlan, Shuffle, Tail};
use crate::state::{ResumeState, STATE_VERSION, fingerprint};

/// Records up to this size are read whole and checksummed the first time this process reads them
/// (when the dataset verifies records); afterwards, and for longer documents, only the pieces a
/// window needs are read (field table checked; the checksum of a longer document is left to
/// `stokehold verify`), so a window never costs a whole book, nor a document's checksum twice.
pub const VERIFY_MAX_RECORD: u64 = 1 << 20;

/// The label of padded positions (PyTorch's `ignore_index` default).
pub const IGNORE_LABEL: i64 = -100;

/// A token dataset opened for sequence loading: the dataset and the prefix sums of its document
/// lengths (8 bytes per document), computed from the shard indexes at open without reading data.
#[derive(Debug)]
pub struct TokenDataset {
    ds: Arc<Dataset>,
    dtype: TokenDType,
    /// `starts[d]` is the stream position of document `d`'s first token; `starts[docs]` = total.
    starts: Vec<u64>,
    vocab_size: Option<u64>,
    bos: Option<u32>,
    eos: Option<u32>,
    fingerprint: String,
    /// One bit per document: its checksum was checked in this process.
    verified: Vec<std::sync::atomic::AtomicU64>,
}

fn corrupt(ds: &Dataset, doc: u64, offset: u64, detail: String) -> EngineError {
    let source = match ds.locate(doc) {
        Ok((k, local)) => ds.shards()[k].record_error(
            local,
            RecordError::Corrupt {
                field: 0,
                offset,
                detail,
            },
        ),
        Err(e) => e,
    };
    EngineError::Sample { id: doc, source }
}

impl TokenDataset {
    /// Check that `ds` is a token dataset (one uncompressed `bytes` field `tokens`, and
    /// `source.tokens` in the manifest) and index its documents.
    pub fn open(ds: Arc<Dataset>) -> Result<TokenDataset> {
        let not_tokens = |why: String| {
            EngineError::Config(format!(
                "{} is not a token dataset ({why}); make one with `stokehold pack --tokenizer`",
                ds.dir().display()
            ))
        };
        let fields = &ds.schema().fields;
        if fields.len() != 1
            || fields[0].name != "tokens"
            || fields[0].ty != FieldType::Bytes
            || fields[0].compression != Compression::None
        {
            return Err(not_tokens(format!("schema is {}", ds.schema())));
        }
        let meta = &ds.manifest().source["tokens"];
        let dtype = meta["dtype"]
            .as_str()
            .and_then(TokenDType::parse)
            .ok_or_else(|| {
                not_tokens(format!(
                    "manifest source.tokens.dtype is {}, not \"u16\" or \"u32\"",
                    meta["dtype"]
                ))
            })?;
        let id = |k: &str| meta[k].as_u64().and_then(|v| u32::try_from(v).ok());
        let w = dtype.size() as u64;
        let mut starts = Vec::with_capacity(usize::try_from(ds.len()).unwrap_or(0) + 1);
        let mut total = 0u64;
        starts.push(0);
        let mut doc = 0u64;
        for shard in ds.shards() {
            for i in 0..shard.len() {
                let len = u64::from(shard.entry(i).len);
                if len < 4 || (len - 4) % w != 0 {
                    return Err(corrupt(
                        &ds,
                        doc,
                        0,
                        format!(
                            "a token record of {len} bytes is not a 4-byte field table plus whole {} tokens",
                            dtype.name()
                        ),
                    ));
                }
                total += (len - 4) / w;
                starts.push(total);
                doc += 1;
            }
        }
        if let Some(t) = meta["total_tokens"].as_u64() {
            if t != total {
                return Err(EngineError::Format(FormatError::Manifest {
                    path: ds.dir().join(stokehold_format::MANIFEST_FILE),
                    detail: format!(
                        "source.tokens.total_tokens is {t} but the shards hold {total} tokens"
                    ),
                }));
            }
        }
        let fingerprint = fingerprint(&ds);
        let verified = (0..ds.len().div_ceil(64))
            .map(|_| std::sync::atomic::AtomicU64::new(0))
            .collect();
        Ok(TokenDataset {
            verified,
            dtype,
            starts,
            vocab_size: meta["vocab_size"].as_u64(),
            bos: id("bos_id"),
            eos: id("eos_id"),
            fingerprint,
            ds,
        })
    }

    /// Whether document `d`'s checksum was checked in this process.
    fn checked(&self, d: u64) -> bool {
        self.verified
            .get((d / 64) as usize)
            .is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed) & (1 << (d % 64)) != 0)
    }

    fn mark_checked(&self, d: u64) {
        if let Some(w) = self.verified.get((d / 64) as usize) {
            w.fetch_or(1 << (d % 64), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.ds
    }

    /// How tokens are stored.
    pub fn dtype(&self) -> TokenDType {
        self.dtype
    }

    /// Number of documents.
    pub fn documents(&self) -> u64 {
        self.starts.len() as u64 - 1
    }

    /// Tokens in the whole stream.
    pub fn total_tokens(&self) -> u64 {
        *self.starts.last().expect("starts is never empty")
    }

    /// The stream position of document `d`'s first token.
    pub fn doc_start(&self, d: u64) -> u64 {
        self.starts[d as usize]
    }

    /// Tokens of document `d`.
    pub fn doc_len(&self, d: u64) -> u64 {
        self.starts[d as usize + 1] - self.starts[d as usize]
    }

    /// The document holding stream token `t` (`t < total_tokens()`).
    pub fn document_of(&self, t: u64) -> u64 {
        (self.starts.partition_point(|&s| s <= t) - 1) as u64
    }

    /// The vocabulary size recorded by the packer.
    pub fn vocab_size(&self) -> Option<u64> {
        self.vocab_size
    }

    /// The BOS id the packer put before every document, if any.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS id the packer put after every document, if any.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Call `f(piece, raw)` for the tokens `[start, start + n)` of the stream, one document piece
    /// at a time in order: `piece` counts from 0, `raw` holds the piece's tokens little-endian.
    ///
    /// The documents of one shard are contiguous records, so the pieces in one shard are one
    /// positional read (or one slice of a map): from the first needed token (or its record's
    /// start) to the last needed token (or its record's end). Every record field table in the
    /// range is checked against the index; with a dataset opened to verify checksums, the first
    /// and last records are read whole when they are at most [`VERIFY_MAX_RECORD`] bytes and not
    /// yet checked in this process, and every whole record read is checksummed once.
    pub fn for_each_piece(
        &self,
        start: u64,
        n: u64,
        scratch: &mut Vec<u8>,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        let end = start + n;
        let total = self.total_tokens();
        if end > total {
            return Err(EngineError::Config(format!(
                "tokens {start}..{end} are past the stream's end ({total})"
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let w = self.dtype.size() as u64;
        let verify = self.ds.verifies_records();
        let whole =
            |d: u64, len: u32| verify && u64::from(len) <= VERIFY_MAX_RECORD && !self.checked(d);
        let last_needed = self.document_of(end - 1);
        let mut doc = self.document_of(start);
        let mut t = start;
        let mut piece = 0usize;
        while t < end {
            while self.doc_len(doc) == 0 {
                doc += 1;
            }
            let (k, local) = self.ds.locate(doc)?;
            let shard = &self.ds.shards()[k];
            let first_doc = doc - local;
            let last = last_needed.min(first_doc + shard.len() - 1);
            let (e0, e1) = (shard.entry(local), shard.entry(last - first_doc));
            let off = t - self.doc_start(doc);
            let lo = if off == 0 || whole(doc, e0.len) {
                e0.offset
            } else {
                e0.offset + 4 + off * w
            };
            let need_end =
                end.min(self.doc_start(last) + self.doc_len(last)) - self.doc_start(last);
            let hi = if whole(last, e1.len) {
                e1.end()
            } else {
                e1.offset + 4 + need_end * w
            };
            let data = self.read_range(doc, local, shard, lo, hi, scratch)?;
            for d in doc..=last {
                let e = shard.entry(d - first_doc);
                let len = self.doc_len(d);
                if e.offset >= lo && e.offset + 4 <= hi {
                    let rel = (e.offset - lo) as usize;
                    if whole(d, e.len) && e.end() <= hi {
                        let record = &data[rel..rel + e.len as usize];
                        let computed = stokehold_format::crc::crc32c(record);
                        if computed != e.crc {
                            return Err(EngineError::Sample {
                                id: d,
                                source: FormatError::Checksum {
                                    path: shard.path().to_path_buf(),
                                    what: shard.describe(d - first_doc),
                                    start: e.offset,
                                    end: e.end(),
                                    stored: e.crc,
                                    computed,
                                },
                            });
                        }
                        self.mark_checked(d);
                    }
                    let table = &data[rel..rel + 4];
                    let stored =
                        u64::from(u32::from_le_bytes([table[0], table[1], table[2], table[3]]));
                    if stored != len * w {
                        return Err(corrupt(
                            &self.ds,
                            d,
                            0,
                            format!(
                                "the field table says {stored} token bytes, the index {} ({len} tokens)",
                                len * w
                            ),
                        ));
                    }
                }
                let ds0 = self.doc_start(d);
                let (a, b) = (t.max(ds0) - ds0, end.min(ds0 + len) - ds0);
                if a >= b {
                    continue;
                }
                let at = (e.offset + 4 + a * w - lo) as usize;
                f(piece, &data[at..at + ((b - a) * w) as usize]);
                piece += 1;
                t = ds0 + b;
            }
            doc = last + 1;
        }
        Ok(())
    }

    /// Bytes `[lo, hi)` of `shard` (whose record `local` is document `doc`, named in errors): a
    /// slice of the map, or one positional read into `scratch`.
    fn read_range<'s>(
        &self,
        doc: u64,
        local: u64,
        shard: &'s stokehold_format::ShardReader,
        lo: u64,
        hi: u64,
        scratch: &'s mut Vec<u8>,
    ) -> Result<&'s [u8]> {
        let bytes = (hi - lo) as usize;
        if let Some(s) = shard.source().slice(lo, bytes) {
            return Ok(s);
        }
        // Grow only: a read overwrites what it uses, so no zeroing per read.
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        let buf = &mut scratch[..bytes];
        shard
            .source()
            .read_at(lo, buf)
            .map_err(|e| EngineError::Sample {
                id: doc,
                source: if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    FormatError::Truncated {
                        path: shard.path().to_path_buf(),
                        what: shard.describe(local),
                        start: lo,
                        end: hi,
                        file_len: shard.file_len(),
                    }
                } else {
                    FormatError::io(shard.path(), Some(lo), e)
                },
            })?;
        Ok(buf)
    }
}

/// What a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceMode {
    /// Fixed windows of `seq_len + 1` tokens over the concatenated stream.
    Packed {
        /// Tokens per sample (inputs and labels each have this many).
        seq_len: u32,
    },
    /// One document per sample, padded to the longest in the batch.
    Documents {
        /// Longest sample, in input tokens (documents are truncated to `max_len + 1` tokens).
        max_len: u32,
        /// The input id of padding.
        pad_id: u32,
        /// Sort runs of this many epoch positions by length (1: no bucketing).
        bucket: u32,
    },
}

impl SequenceMode {
    fn tag(&self) -> String {
        match *self {
            SequenceMode::Packed { seq_len } => format!("packed:{seq_len}"),
            SequenceMode::Documents {
                max_len, bucket, ..
            } => format!("documents:{max_len}:{bucket}"),
        }
    }
}

/// Options of a [`SequenceLoader`].
#[derive(Debug, Clone)]
pub struct SequenceConfig {
    /// Packed windows or whole documents.
    pub mode: SequenceMode,
    /// Samples per batch per rank.
    pub batch_size: u32,
    /// [`Shuffle::Sequential`] or [`Shuffle::Global`] (over windows or documents).
    pub shuffle: Shuffle,
    /// The seed of the order.
    pub seed: u64,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub world_size: u32,
    /// The end of the epoch.
    pub tail: Tail,
    /// `I32` or `I64`.
    pub dtype: DType,
    /// Add `position_ids`.
    pub position_ids: bool,
    /// Add `segment_ids` (packed mode).
    pub segment_ids: bool,
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Batches in flight (at least 1).
    pub prefetch: usize,
}

impl Default for SequenceConfig {
    fn default() -> Self {
        SequenceConfig {
            mode: SequenceMode::Packed { seq_len: 2048 },
            batch_size: 32,
            shuffle: Shuffle::Global,
            seed: 0,
            rank: 0,
            world_size: 1,
            tail: Tail::Drop,
            dtype: DType::I32,
            position_ids: false,
            segment_ids: false,
            threads: 2,
            prefetch: 4,
        }
    }
}

/// Counters of a [`SequenceLoader`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SequenceStats {
    /// Batches delivered.
    pub batches: u64,
    /// Input tokens delivered (padding included).
    pub tokens: u64,
    /// Time the consumer waited for a batch.
    pub wait: Duration,
    /// Worker time spent making batches (summed over threads).
    pub busy: Duration,
}

#[derive(Debug, Default)]
struct Counters {
    batches: AtomicU64,
    tokens: AtomicU64,
    wait_ns: AtomicU64,
    busy_ns: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    epoch: u64,
    position: u64,
}

/// Fixed-length or per-document token batches from a [`TokenDataset`]: deterministic,
/// split across ranks, resumable. See the module documentation.
#[derive(Debug)]
pub struct SequenceLoader {
    data: Arc<TokenDataset>,
    config: SequenceConfig,
    samples: u64,
    fingerprint: String,
    cursor: Arc<Mutex<Cursor>>,
    pool: Arc<BufferPool>,
    counters: Arc<Counters>,
}

impl SequenceLoader {
    /// A loader over `data`.
    pub fn new(data: Arc<TokenDataset>, config: SequenceConfig) -> Result<SequenceLoader> {
        let cfg = |m: &str| Err(EngineError::Config(m.into()));
        if !matches!(config.dtype, DType::I32 | DType::I64) {
            return cfg("dtype must be int32 or int64");
        }
        if config.threads == 0 || config.prefetch == 0 {
            return cfg("threads and prefetch must be at least 1");
        }
        if matches!(config.shuffle, Shuffle::ShardBlock { .. }) {
            return cfg("sequence loaders shuffle globally or not at all (no shard-block order)");
        }
        if config.dtype == DType::I32 && data.dtype() == TokenDType::U32 {
            if let Some(v) = data.vocab_size() {
                if v > i32::MAX as u64 {
                    return cfg("the vocabulary does not fit int32: use dtype int64");
                }
            }
        }
        let samples = match config.mode {
            SequenceMode::Packed { seq_len: 0 } => return cfg("seq_len must be at least 1"),
            SequenceMode::Packed { seq_len } => {
                data.total_tokens().saturating_sub(1) / u64::from(seq_len)
            }
            SequenceMode::Documents { max_len: 0, .. } => return cfg("max_len must be at least 1"),
            SequenceMode::Documents { bucket: 0, .. } => return cfg("bucket must be at least 1"),
            SequenceMode::Documents { .. } => {
                if config.segment_ids {
                    return cfg(
                        "segment_ids are for packed sequences (one document per sample here)",
                    );
                }
                data.documents()
            }
        };
        // Validates world size, rank and batch size.
        RankPlan::new(
            EpochOrder::new(samples, None, &config.shuffle, config.seed, 0)?,
            0,
            config.world_size,
            config.rank,
            config.batch_size,
            config.tail,
        )?;
        let fingerprint = format!("{}/{}", data.fingerprint, config.mode.tag());
        let pool = Arc::new(BufferPool::new(4 * (config.prefetch + 2)));
        Ok(SequenceLoader {
            data,
            samples,
            fingerprint,
            cursor: Arc::new(Mutex::new(Cursor {
                epoch: 0,
                position: 0,
            })),
            pool,
            counters: Arc::new(Counters::default()),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SequenceConfig {
        &self.config
    }

    /// The token dataset.
    pub fn data(&self) -> &Arc<TokenDataset> {
        &self.data
    }

    /// Samples (windows or documents) in an epoch, over all ranks.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    fn cursor(&self) -> Cursor {
        *self.cursor.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn plan(&self, c: Cursor) -> Result<RankPlan> {
        let order = EpochOrder::new(
            self.samples,
            None,
            &self.config.shuffle,
            self.config.seed,
            c.epoch,
        )?;
        Ok(RankPlan::new(
            order,
            c.position,
            self.config.world_size,
            self.config.rank,
            self.config.batch_size,
            self.config.tail,
        )?)
    }

    /// Batches this rank gets in a whole epoch.
    pub fn steps_per_epoch(&self) -> Result<u64> {
        Ok(self
            .plan(Cursor {
                epoch: 0,
                position: 0,
            })?
            .steps())
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.cursor().epoch
    }

    /// Start epoch `epoch` from its beginning at the next iteration.
    pub fn set_epoch(&mut self, epoch: u64) {
        *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = Cursor { epoch, position: 0 };
    }

    /// Where the loader is (after the last batch delivered).
    pub fn state(&self) -> ResumeState {
        let c = self.cursor();
        ResumeState {
            version: STATE_VERSION,
            dataset: self.fingerprint.clone(),
            seed: self.config.seed,
            shuffle: self.config.shuffle,
            epoch: c.epoch,
            position: c.position,
        }
    }

    /// Continue from a saved state (same dataset, mode, seed and order; any world size).
    pub fn load_state(&mut self, state: &ResumeState) -> Result<()> {
        state.check(
            &self.fingerprint,
            self.config.seed,
            &self.config.shuffle,
            self.samples,
        )?;
        *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = Cursor {
            epoch: state.epoch,
            position: state.position,
        };
        Ok(())
    }

    /// Counters since the loader was made.
    pub fn stats(&self) -> SequenceStats {
        let c = &self.counters;
        SequenceStats {
            batches: c.batches.load(Ordering::Relaxed),
            tokens: c.tokens.load(Ordering::Relaxed),
            wait: Duration::from_nanos(c.wait_ns.load(Ordering::Relaxed)),
            busy: Duration::from_nanos(c.busy_ns.load(Ordering::Relaxed)),
        }
    }

    /// Iterate the rest of the current epoch on worker threads. The iterator owns what it needs;
    /// the loader's position follows the batches it delivers, and moves to the next epoch once
    /// the last one is delivered. Run one iterator at a time.
    pub fn iter(&self) -> Result<SequenceIter> {
        let start = self.cursor();
        let plan = Arc::new(self.plan(start)?);
        let steps = plan.steps();
        if steps == 0 {
            *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = Cursor {
                epoch: start.epoch + 1,
                position: 0,
            };
        }
        let ctrl = Arc::new(Ctrl {
            state: Mutex::new(CtrlState {
                next: 0,
                delivered: 0,
                stop: false,
            }),
            cv: Condvar::new(),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let threads = (0..self.config.threads.min(steps.max(1) as usize))
            .map(|i| {
                let w = Worker {
                    data: Arc::clone(&self.data),
                    config: self.config.clone(),
                    plan: Arc::clone(&plan),
                    ctrl: Arc::clone(&ctrl),
                    pool: Arc::clone(&self.pool),
                    counters: Arc::clone(&self.counters),
                    tx: tx.clone(),
                    epoch: start.epoch,
                };
                std::thread::Builder::new()
                    .name(format!("stokehold-seq-{i}"))
                    .spawn(move || w.run())
                    .map_err(|e| EngineError::Config(format!("cannot start a thread: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SequenceIter {
            rx,
            pending: BTreeMap::new(),
            next: 0,
            steps,
            failed: false,
            plan,
            epoch: start.epoch,
            ctrl,
            threads,
            cursor: Arc::clone(&self.cursor),
            counters: Arc::clone(&self.counters),
        })
    }
}

struct CtrlState {
    /// The next step a worker takes.
    next: u64,
    /// Steps delivered to the consumer.
    delivered: u64,
    stop: bool,
}

struct Ctrl {
    state: Mutex<CtrlState>,
    cv: Condvar,
}

impl Ctrl {
    fn lock(&self) -> std::sync::MutexGuard<'_, CtrlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Worker {
    data: Arc<TokenDataset>,
    config: SequenceConfig,
    plan: Arc<RankPlan>,
    ctrl: Arc<Ctrl>,
    pool: Arc<BufferPool>,
    counters: Arc<Counters>,
    tx: Sender<(u64, Result<Batch>)>,
    epoch: u64,
}

/// An element type of the output.
trait Elem: bytemuck::Pod {
    fn from_u32(v: u32) -> Self;
    fn from_i64(v: i64) -> Self;
}

impl Elem for i32 {
    #[inline]
    fn from_u32(v: u32) -> Self {
        v as i32
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v as i32
    }
}

impl Elem for i64 {
    #[inline]
    fn from_u32(v: u32) -> Self {
        i64::from(v)
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v
    }
}

/// Widen little-endian tokens of `dtype` into `out` (`out.len()` tokens from the start of `raw`).
#[inline]
fn widen<E: Elem>(dtype: TokenDType, raw: &[u8], out: &mut [E]) {
    // Token data is naturally aligned in shards (16-byte header, records of 4 + k*w bytes), so
    // the typed view almost always works; it lets the compiler vectorise the widening.
    match dtype {
        TokenDType::U16 => {
            if let Ok(src) =
                bytemuck::try_cast_slice::<u8, u16>(&raw[..out.len().min(raw.len() / 2) * 2])
            {
                for (o, &v) in out.iter_mut().zip(src) {
                    *o = E::from_u32(u32::from(u16::from_le(v)));
                }
                return;
            }
        }
        TokenDType::U32 => {
            if let Ok(src) =
                bytemuck::try_cast_slice::<u8, u32>(&raw[..out.len().min(raw.len() / 4) * 4])
            {
                for (o, &v) in out.iter_mut().zip(src) {
                    *o = E::from_u32(u32::from_le(v));
                }
                return;
            }
        }
    }
    match dtype {
        TokenDType::U16 => {
            for (o, c) in out.iter_mut().zip(raw.chunks_exact(2)) {
                *o = E::from_u32(u32::from(u16::from_le_bytes([c[0], c[1]])));
            }
        }
        TokenDType::U32 => {
            for (o, c) in out.iter_mut().zip(raw.chunks_exact(4)) {
                *o = E::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            }
        }
    }
}

/// One batch's output columns while being filled.
struct Columns<'a, E> {
    input: &'a mut [E],
    labels: &'a mut [E],
    position: Option<&'a mut [E]>,
    segment: Option<&'a mut [E]>,
    mask: Option<&'a mut [E]>,
}

impl Worker {
    fn run(self) {
        loop {
            let step = {
                let mut s = self.ctrl.lock();
                loop {
                    if s.stop || s.next >= self.plan.steps() {
                        return;
                    }
                    if s.next < s.delivered + self.config.prefetch as u64 {
                        break;
                    }
                    s = self.ctrl.cv.wait(s).unwrap_or_else(|p| p.into_inner());
                }
                s.next += 1;
                s.next - 1
            };
            let t0 = Instant::now();
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.batch(step)))
                .unwrap_or_else(|p| {
                    Err(EngineError::Panic {
                        id: step,
                        message: p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default(),
                    })
                });
            self.counters
                .busy_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let failed = out.is_err();
            if self.tx.send((step, out)).is_err() || failed {
                return;
            }
        }
    }

    fn batch(&self, step: u64) -> Result<Batch> {
        let slots: Vec<_> = self.plan.batch(step)?.collect();
        let b = slots.len();
        let ids: Vec<u64> = slots.iter().map(|s| s.id).collect();
        let padding: Vec<bool> = slots.iter().map(|s| s.padding).collect();
        let (ids, t) = match self.config.mode {
            SequenceMode::Packed { seq_len } => (ids, seq_len as usize),
            SequenceMode::Documents {
                max_len, bucket, ..
            } => {
                let ids = if bucket > 1 {
                    let mut cache = None;
                    slots
                        .iter()
                        .map(|s| self.bucketed(s.position, bucket, &mut cache))
                        .collect()
                } else {
                    ids
                };
                let longest = ids
                    .iter()
                    .map(|&d| self.data.doc_len(d).min(u64::from(max_len) + 1))
                    .max()
                    .unwrap_or(0);
                (ids, (longest.saturating_sub(1)).max(1) as usize)
            }
        };
        let esize = self.config.dtype.size();
        let mut names = vec!["input_ids", "labels"];
        let packed = matches!(self.config.mode, SequenceMode::Packed { .. });
        if !packed {
            names.push("attention_mask");
        }
        if self.config.position_ids {
            names.push("position_ids");
        }
        if self.config.segment_ids {
            names.push("segment_ids");
        }
        let mut bufs: Vec<_> = names.iter().map(|_| self.pool.get(b * t * esize)).collect();
        match self.config.dtype {
            DType::I64 => self.fill_buffers::<i64>(&ids, t, packed, &mut bufs)?,
            _ => self.fill_buffers::<i32>(&ids, t, packed, &mut bufs)?,
        }
        let columns = names
            .iter()
            .zip(bufs)
            .map(|(n, data)| {
                (
                    n.to_string(),
                    ColumnData::Fixed {
                        dtype: self.config.dtype,
                        shape: vec![b, t],
                        data,
                    },
                )
            })
            .collect();
        self.counters
            .tokens
            .fetch_add((b * t) as u64, Ordering::Relaxed);
        Ok(crate::batch::new_batch(
            self.epoch,
            step,
            ids,
            padding,
            columns,
            Arc::clone(&self.pool),
        ))
    }

    /// The document at epoch `position` under length bucketing: positions are grouped in runs of
    /// `bucket`, each run sorted by (length, position).
    fn bucketed(&self, position: u64, bucket: u32, cache: &mut Option<(u64, Vec<u64>)>) -> u64 {
        let order = self.plan.order();
        let len = order.len();
        let p = if position < len {
            position
        } else {
            (position - len) % len.max(1)
        };
        let first = p - p % u64::from(bucket);
        if cache.as_ref().is_none_or(|(f, _)| *f != first) {
            let last = (first + u64::from(bucket)).min(len);
            // (length, position, document): ties keep the epoch order.
            let mut run: Vec<(u64, u64, u64)> = (first..last)
                .filter_map(|q| order.id_at(q).map(|d| (self.data.doc_len(d), q, d)))
                .collect();
            run.sort_unstable();
            *cache = Some((first, run.into_iter().map(|r| r.2).collect()));
        }
        let (_, run) = cache.as_ref().expect("just filled");
        run[(p - first) as usize]
    }

    /// View the column buffers (in column order) as `E` and fill them.
    fn fill_buffers<E: Elem>(
        &self,
        ids: &[u64],
        t: usize,
        packed: bool,
        bufs: &mut [crate::batch::Buffer],
    ) -> Result<()> {
        let mut it = bufs.iter_mut();
        let mut next =
            || bytemuck::cast_slice_mut(it.next().expect("one buffer per column").as_bytes_mut());
        let mut cols = Columns::<E> {
            input: next(),
            labels: next(),
            mask: (!packed).then(&mut next),
            position: self.config.position_ids.then(&mut next),
            segment: self.config.segment_ids.then(&mut next),
        };
        self.fill(ids, t, &mut cols)
    }

    fn fill<E: Elem>(&self, ids: &[u64], t: usize, cols: &mut Columns<'_, E>) -> Result<()> {
        let mut scratch = Vec::new();
        let dtype = self.data.dtype();
        let w = dtype.size();
        match self.config.mode {
            SequenceMode::Packed { seq_len } => {
                for (row, &win) in ids.iter().enumerate() {
                    let start = win * u64::from(seq_len);
                    let base = row * t;
                    let mut j = 0usize; // window token index of the piece's first token
                    let input = &mut cols.input[base..base + t];
                    let labels = &mut cols.labels[base..base + t];
                    let mut position = cols.position.as_deref_mut().map(|p| &mut p[base..base + t]);
                    let mut segment = cols.segment.as_deref_mut().map(|s| &mut s[base..base + t]);
                    let mut last = E::from_u32(0);
                    self.data
                        .for_each_piece(start, t as u64 + 1, &mut scratch, |piece, raw| {
                            let n = raw.len() / w;
                            // inputs: window tokens j..j+n ∩ 0..t
                            let in_end = (j + n).min(t);
                            if j < in_end {
                                widen(dtype, raw, &mut input[j..in_end]);
                                if let Some(p) = position.as_deref_mut() {
                                    for (k, v) in p[j..in_end].iter_mut().enumerate() {
                                        *v = E::from_i64(k as i64);
                                    }
                                }
                                if let Some(s) = segment.as_deref_mut() {
                                    s[j..in_end].fill(E::from_i64(piece as i64));
                                }
                            }
                            if j + n > t {
                                last = E::from_u32(dtype.get(raw, t - j));
                            }
                            j += n;
                        })?;
                    // labels are the inputs shifted by one, then the window's last token
                    labels[..t - 1].copy_from_slice(&input[1..]);
                    labels[t - 1] = last;
                }
            }
            SequenceMode::Documents {
                max_len, pad_id, ..
            } => {
                let mask = cols.mask.as_deref_mut().expect("documents have a mask");
                for (row, &doc) in ids.iter().enumerate() {
                    let base = row * t;
                    let len = self.data.doc_len(doc).min(u64::from(max_len) + 1) as usize;
                    let n = len.saturating_sub(1); // inputs
                    let input = &mut cols.input[base..base + t];
                    let labels = &mut cols.labels[base..base + t];
                    input[n..].fill(E::from_u32(pad_id));
                    labels[n..].fill(E::from_i64(IGNORE_LABEL));
                    mask[base..base + n].fill(E::from_i64(1));
                    mask[base + n..base + t].fill(E::from_i64(0));
                    if let Some(p) = cols.position.as_deref_mut() {
                        for (k, v) in p[base..base + t].iter_mut().enumerate() {
                            *v = E::from_i64(if k < n { k as i64 } else { 0 });
                        }
                    }
                    if n == 0 {
                        continue;
                    }
                    let start = self.data.doc_start(doc);
                    let mut at = 0usize;
                    let mut last = E::from_u32(0);
                    self.data
                        .for_each_piece(start, len as u64, &mut scratch, |_, raw| {
                            let k = raw.len() / w;
                            let in_end = (at + k).min(n);
                            if at < in_end {
                                widen(dtype, raw, &mut input[at..in_end]);
                            }
                            if at + k > n {
                                last = E::from_u32(dtype.get(raw, n - at));
                            }
                            at += k;
                        })?;
                    labels[..n - 1].copy_from_slice(&input[1..n]);
                    labels[n - 1] = last;
                }
            }
        }
        Ok(())
    }
}

/// What [`SequenceIter::next_timeout`] found.
#[derive(Debug)]
pub enum Next {
    /// The next batch, or the error that ended the epoch.
    Batch(Result<Batch>),
    /// Not ready within the time-out.
    Pending,
    /// The epoch is over (or ended with an error).
    End,
}

/// The batches of one epoch (from the loader's position), in order. Dropping it stops and joins
/// the workers.
#[derive(Debug)]
pub struct SequenceIter {
    rx: Receiver<(u64, Result<Batch>)>,
    pending: BTreeMap<u64, Result<Batch>>,
    next: u64,
    steps: u64,
    failed: bool,
    plan: Arc<RankPlan>,
    epoch: u64,
    ctrl: Arc<Ctrl>,
    threads: Vec<JoinHandle<()>>,
    cursor: Arc<Mutex<Cursor>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Ctrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ctrl")
    }
}

impl SequenceIter {
    /// Batches left.
    pub fn remaining(&self) -> u64 {
        if self.failed {
            0
        } else {
            self.steps - self.next
        }
    }

    /// The next batch, waiting at most `timeout`.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        if self.failed || self.next >= self.steps {
            return Next::End;
        }
        let t0 = Instant::now();
        let got = loop {
            if let Some(b) = self.pending.remove(&self.next) {
                break b;
            }
            let left = timeout.saturating_sub(t0.elapsed());
            match self.rx.recv_timeout(left) {
                Ok((step, b)) => {
                    self.pending.insert(step, b);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.counters
                        .wait_ns
                        .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    return Next::Pending;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    break Err(EngineError::Config("the sequence workers stopped".into()));
                }
            }
        };
        self.counters
            .wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match &got {
            Ok(_) => {
                self.next += 1;
                {
                    let mut s = self.ctrl.lock();
                    s.delivered = self.next;
                }
                self.ctrl.cv.notify_all();
                let c = if self.next >= self.steps {
                    Cursor {
                        epoch: self.epoch + 1,
                        position: 0,
                    }
                } else {
                    Cursor {
                        epoch: self.epoch,
                        position: self.plan.position_after(self.next),
                    }
                };
                *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = c;
                self.counters.batches.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.failed = true;
                self.shutdown();
            }
        }
        Next::Batch(got)
    }

    fn shutdown(&mut self) {
        self.ctrl.lock().stop = true;
        self.ctrl.cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Iterator for SequenceIter {
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

impl Drop for SequenceIter {
    fn drop(&mut self) {
        self.shutdown();
    }
}
