//! [`Tokens`]: a *token dataset* (`stokehold pack --tokenizer`, docs/text.md: one record per
//! document holding its token ids) as samples for language models.
//!
//! **Packed mode** ([`TokenMode::Packed`]): the documents, in dataset order, form one stream of
//! `N` tokens. Window `w` is the `seq_len + 1` tokens from `w * seq_len`; there are
//! `(N - 1) / seq_len` windows (the last partial one is never read). Each window gives
//! `input_ids = window[..seq_len]` and `labels = window[1..]`, and optionally `position_ids`
//! (counting from 0 at the window start and at every document start inside it) and
//! `segment_ids` (the index, within the window, of the document each input token belongs to).
//!
//! **Document mode** ([`TokenMode::Documents`]): one document per sample, truncated to
//! `max_len + 1` tokens, inputs and labels shifted by one as above, padded to the longest in the
//! batch (`pad_id` in the inputs, -100 in the labels, 0 in `attention_mask`). With `bucket > 1`,
//! the order adapter [`crate::sampler::LengthBuckets`] sorts each run of `bucket` consecutive
//! epoch positions by length (then position), so batches hold documents of similar lengths;
//! buckets are fixed positions of the epoch order, so the order is still a pure function of
//! (seed, epoch) and does not depend on the world size.
//!
//! The resume state counts windows (or documents), exact to the token because a window is a fixed
//! token range. The fingerprint includes the mode (`seq_len`, or `max_len`/`bucket`), so a state
//! cannot be loaded into a loader whose windows differ.

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use stokehold_format::tokens::{DocPiece, TokenIndex, TokenMeta, TokenReads};
use stokehold_format::{DType, IndexEntry, TokenDType};
use stokehold_storage::Dataset;
use stokehold_storage::{TokenIndexOf, TokenMetaOf};

use crate::cache::{CacheStats, RecordCache, dataset_key};
use crate::error::{EngineError, Result};
use crate::fetch::{ByteRange, ByteSource, Fetched, TaskPlan};
use crate::order::{Loadable, Shuffled};
use crate::sampler::{EpochOrder, LengthBuckets, Slot};
use crate::samples::{Cache, Layout, Samples, SlotWriter, TaskCtx, TaskIo};
use crate::stages::Output;
use crate::state::fingerprint;

/// Records up to this size are read whole and checksummed the first time this process reads them
/// (when the dataset verifies records); afterwards, and for longer documents, only the pieces a
/// window needs are read (field table checked; the checksum of a longer document is left to
/// `stokehold verify`), so a window never costs a whole book, nor a document's checksum twice.
pub const VERIFY_MAX_RECORD: u64 = 1 << 20;

/// The label of padded positions (PyTorch's `ignore_index` default).
pub const IGNORE_LABEL: i64 = -100;

/// A token dataset opened for sequence loading: the dataset, its `source.tokens` meta and the
/// format crate's [`TokenIndex`] (prefix sums of document lengths from the shard indexes, 8
/// bytes per document, no data read), plus which documents' checksums this process checked.
#[derive(Debug)]
pub struct TokenDataset {
    ds: Arc<Dataset>,
    meta: TokenMeta,
    index: TokenIndex,
    fingerprint: String,
    /// One bit per document: its checksum was checked in this process.
    verified: Vec<AtomicU64>,
    /// The shards, with the RAM cache of whole shards when a loader asked for one (`cache=`):
    /// ranges of a loaded shard are slices of it, no reads.
    bytes: [ByteSource; 1],
}

/// The RAM cache of a token dataset's shards, when one was set (see
/// [`TokenDataset::use_cache`]).
#[derive(Debug)]
struct TokenCache(ByteSource);

impl Cache for TokenCache {
    fn stats(&self) -> Vec<CacheStats> {
        self.0.cache().map(|c| c.stats()).into_iter().collect()
    }

    fn under_node_budget(&self, share: &Arc<crate::cache::NodeShare>) {
        if let Some(c) = self.0.cache() {
            c.under_node_budget(share);
        }
    }
}

/// What a task's samples keep between planning and filling ([`TaskIo::scratch`]): per sample,
/// its planned reads (the byte ranges the fetcher gets, one per shard touched, and how their
/// bytes split into pieces).
#[derive(Debug, Default)]
struct TokenTask {
    planned: Vec<Planned>,
}

/// One token range's reads, planned by [`TokenIndex::pieces_into`].
#[derive(Debug, Default)]
struct Planned {
    reads: TokenReads,
    /// The planning's own error (a range past the stream's end), reported when the sample is
    /// filled.
    error: Option<EngineError>,
}

impl TokenDataset {
    /// Check that `ds` is a token dataset (one uncompressed `bytes` field `tokens`, and
    /// `source.tokens` in the manifest) and index its documents.
    pub fn open(ds: Arc<Dataset>) -> Result<TokenDataset> {
        let meta = TokenMeta::from_dataset(&ds).map_err(|e| {
            EngineError::Config(format!(
                "{} is not a token dataset ({e}); make one with `stokehold pack --tokenizer`",
                ds.dir().display()
            ))
        })?;
        let index = TokenIndex::from_dataset(&ds, &meta)?;
        let verified = (0..ds.len().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        Ok(TokenDataset {
            fingerprint: fingerprint(&ds),
            verified,
            bytes: [ByteSource::new(Arc::clone(&ds), None)],
            meta,
            index,
            ds,
        })
    }

    /// Whether document `d`'s checksum was checked in this process.
    fn checked(&self, d: u64) -> bool {
        self.verified
            .get((d / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (d % 64)) != 0)
    }

    fn mark_checked(&self, d: u64) {
        if let Some(w) = self.verified.get((d / 64) as usize) {
            w.fetch_or(1 << (d % 64), Ordering::Relaxed);
        }
    }

    /// The dataset.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.ds
    }

    /// The manifest's `source.tokens`.
    pub fn meta(&self) -> &TokenMeta {
        &self.meta
    }

    /// The document index.
    pub fn index(&self) -> &TokenIndex {
        &self.index
    }

    /// How tokens are stored.
    pub fn dtype(&self) -> TokenDType {
        self.index.dtype()
    }

    /// Number of documents.
    pub fn documents(&self) -> u64 {
        self.index.documents()
    }

    /// Tokens in the whole stream.
    pub fn total_tokens(&self) -> u64 {
        self.index.total_tokens()
    }

    /// The stream position of document `d`'s first token.
    pub fn doc_start(&self, d: u64) -> u64 {
        self.index.doc_start(d)
    }

    /// Tokens of document `d`.
    pub fn doc_len(&self, d: u64) -> u64 {
        self.index.doc_len(d)
    }

    /// The document holding stream token `t` (`t < total_tokens()`).
    pub fn document_of(&self, t: u64) -> u64 {
        self.index.document_of(t)
    }

    /// The vocabulary size recorded by the packer.
    pub fn vocab_size(&self) -> Option<u64> {
        self.meta.vocab_size
    }

    /// The BOS id the packer put before every document, if any.
    pub fn bos_id(&self) -> Option<u32> {
        self.meta.bos_id
    }

    /// The EOS id the packer put after every document, if any.
    pub fn eos_id(&self) -> Option<u32> {
        self.meta.eos_id
    }

    /// Call `f(piece, raw)` for the tokens `[start, start + n)` of the stream, one document piece
    /// at a time in order: `piece` counts the pieces with tokens from 0, `raw` holds the piece's
    /// tokens little-endian.
    ///
    /// The reads are planned by [`TokenIndex::pieces_into`] (one positional read, or one slice of
    /// a map, per shard touched) and made by the one fetcher ([`crate::fetch`]); every field
    /// table in a read is checked against the index, and with a dataset opened to verify
    /// checksums, records of at most [`VERIFY_MAX_RECORD`] bytes not yet checked in this process
    /// are read whole and checksummed once.
    pub fn for_each_piece(&self, start: u64, n: u64, f: impl FnMut(usize, &[u8])) -> Result<()> {
        let mut p = Planned::default();
        self.plan(start, n, &mut p);
        let mut plan = TaskPlan::default();
        push_reads(&p, &mut plan);
        plan.end_sample();
        let mut bytes = Fetched::default();
        bytes.fetch(&self.bytes, plan.ranges());
        self.visit(&mut p, |r| bytes.get(&self.bytes, r), f)
    }

    /// Call `f` for the pieces of the `k`-th sample of the task `io` planned and fetched (see
    /// [`TokenDataset::for_each_piece`]).
    fn visit_task(&self, k: usize, io: &mut TaskIo, f: impl FnMut(usize, &[u8])) -> Result<()> {
        let (bytes, task) = io.split::<TokenTask>();
        let Some(p) = task.planned.get_mut(k) else {
            return Err(EngineError::Worker(format!(
                "sample {k} of the task was not planned"
            )));
        };
        self.visit(p, |r| bytes.get(k, r), f)
    }

    /// Where the shards' bytes are, for the fetcher.
    fn sources(&self) -> &[ByteSource] {
        &self.bytes
    }

    /// Use the RAM cache of whole shards with `budget` bytes (shared by the loaders of this
    /// process over the same dataset; the first budget set stays). 0: none.
    pub fn use_cache(&self, budget: u64) {
        let in_memory = self
            .ds
            .shards()
            .first()
            .is_none_or(|s| s.source().slice(0, 0).is_some());
        if budget > 0 && !in_memory {
            let c = RecordCache::shared(&self.ds, &dataset_key(&self.ds), budget);
            self.bytes[0].set_cache(c);
        }
    }

    /// The RAM cache's figures, when there is one.
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.bytes[0].cache().map(|c| c.stats())
    }

    /// The reads of tokens `[start, start + n)`: see [`TokenIndex::pieces_into`]; records not yet
    /// checked in this process are read whole (see [`VERIFY_MAX_RECORD`]).
    fn pieces(
        &self,
        start: u64,
        n: u64,
        out: &mut TokenReads,
    ) -> std::result::Result<(), stokehold_format::FormatError> {
        let verify = self.ds.verifies_records();
        let whole = |d: u64, e: IndexEntry| {
            verify && u64::from(e.len) <= VERIFY_MAX_RECORD && !self.checked(d)
        };
        self.index
            .pieces_into(self.ds.shards(), start, n, whole, out)
    }

    /// Plan the reads of tokens `[start, start + n)` into `p`.
    fn plan(&self, start: u64, n: u64, p: &mut Planned) {
        p.error = self
            .pieces(start, n, &mut p.reads)
            .err()
            .map(EngineError::from);
        if p.error.is_some() {
            p.reads = TokenReads::default();
        }
    }

    /// Call `f(piece, raw)` for the pieces of `p`, in order, after their checks (see
    /// [`TokenDataset::for_each_piece`]); `bytes(r)` gives the bytes of `p`'s `r`-th read.
    fn visit<'b>(
        &self,
        p: &mut Planned,
        bytes: impl Fn(usize) -> std::result::Result<&'b [u8], stokehold_format::FormatError>,
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        if let Some(e) = p.error.take() {
            return Err(e);
        }
        let dtype = self.dtype();
        let mut piece = 0usize;
        for (r, read) in p.reads.reads().iter().enumerate() {
            let shard = &self.ds.shards()[read.shard];
            let data = bytes(r).map_err(|source| EngineError::Sample {
                id: read.first_doc,
                source,
            })?;
            for piece_plan in p.reads.pieces(read) {
                // a task is planned before any of its samples is filled, so samples sharing a
                // document all planned its checksum: the first one filled checks it, the others
                // only its field table
                let once = DocPiece {
                    checksum: piece_plan.checksum && !self.checked(piece_plan.doc),
                    ..*piece_plan
                };
                let checked =
                    once.check(shard, dtype, data)
                        .map_err(|source| EngineError::Sample {
                            id: piece_plan.doc,
                            source,
                        })?;
                if checked {
                    self.mark_checked(piece_plan.doc);
                }
                if piece_plan.tokens > 0 {
                    f(piece, piece_plan.bytes(data));
                    piece += 1;
                }
            }
        }
        Ok(())
    }
}

/// The byte ranges of `p`'s reads, pushed to the plan of the sample being planned.
fn push_reads(p: &Planned, plan: &mut TaskPlan) {
    for r in p.reads.reads() {
        plan.push(ByteRange {
            source: 0,
            shard: r.shard,
            lo: r.lo,
            hi: r.hi,
        });
    }
}

/// What a sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenMode {
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

impl TokenMode {
    fn tag(&self) -> String {
        match *self {
            TokenMode::Packed { seq_len } => format!("packed:{seq_len}"),
            TokenMode::Documents {
                max_len, bucket, ..
            } => format!("documents:{max_len}:{bucket}"),
        }
    }
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

/// How token samples are laid out in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenOptions {
    /// Packed windows or whole documents.
    pub mode: TokenMode,
    /// `I32` or `I64`.
    pub dtype: DType,
    /// Add `position_ids`.
    pub position_ids: bool,
    /// Add `segment_ids` (packed mode).
    pub segment_ids: bool,
}

impl Default for TokenOptions {
    fn default() -> Self {
        TokenOptions {
            mode: TokenMode::Packed { seq_len: 2048 },
            dtype: DType::I32,
            position_ids: false,
            segment_ids: false,
        }
    }
}

/// The stage index of a sample's assembly (window or document; stage 0 is the task's read).
const STAGE_ASSEMBLE: usize = 1;

/// Column indices of a token batch (fixed order: inputs, labels, then the optional ones).
const INPUT: usize = 0;
const LABELS: usize = 1;

/// Windows or documents of a [`TokenDataset`].
#[derive(Debug)]
pub struct Tokens {
    data: Arc<TokenDataset>,
    options: TokenOptions,
    samples: u64,
    fingerprint: String,
    outputs: Vec<(String, Output)>,
    /// Where the optional columns are.
    mask: Option<usize>,
    position: Option<usize>,
    segment: Option<usize>,
    buckets: Option<LengthBuckets>,
}

impl Tokens {
    /// The samples of `data` laid out as `options` say.
    pub fn new(data: Arc<TokenDataset>, options: TokenOptions) -> Result<Tokens> {
        let cfg = |m: &str| Err(EngineError::Config(m.into()));
        if !matches!(options.dtype, DType::I32 | DType::I64) {
            return cfg("dtype must be int32 or int64");
        }
        if options.dtype == DType::I32
            && data.dtype() == TokenDType::U32
            && let Some(v) = data.vocab_size()
            && v > i32::MAX as u64
        {
            return cfg("the vocabulary does not fit int32: use dtype int64");
        }
        let (samples, packed, t) = match options.mode {
            TokenMode::Packed { seq_len: 0 } => return cfg("seq_len must be at least 1"),
            TokenMode::Packed { seq_len } => (
                data.total_tokens().saturating_sub(1) / u64::from(seq_len),
                true,
                seq_len as usize,
            ),
            TokenMode::Documents { max_len: 0, .. } => return cfg("max_len must be at least 1"),
            TokenMode::Documents { bucket: 0, .. } => return cfg("bucket must be at least 1"),
            TokenMode::Documents { max_len, .. } => {
                if options.segment_ids {
                    return cfg(
                        "segment_ids are for packed sequences (one document per sample here)",
                    );
                }
                (data.documents(), false, max_len as usize)
            }
        };
        let col = |name: &str| {
            (
                name.to_string(),
                Output::Fixed {
                    dtype: options.dtype,
                    shape: vec![t],
                },
            )
        };
        let mut outputs = vec![col("input_ids"), col("labels")];
        let mut add = |on: bool, name: &str| {
            on.then(|| {
                outputs.push(col(name));
                outputs.len() - 1
            })
        };
        let mask = add(!packed, "attention_mask");
        let position = add(options.position_ids, "position_ids");
        let segment = add(options.segment_ids, "segment_ids");
        let buckets = match options.mode {
            TokenMode::Documents { bucket, .. } if bucket > 1 => Some(LengthBuckets::new(bucket)),
            _ => None,
        };
        Ok(Tokens {
            fingerprint: format!("{}/{}", data.fingerprint, options.mode.tag()),
            data,
            options,
            samples,
            outputs,
            mask,
            position,
            segment,
            buckets,
        })
    }

    /// The token dataset.
    pub fn data(&self) -> &Arc<TokenDataset> {
        &self.data
    }

    /// The layout.
    pub fn options(&self) -> &TokenOptions {
        &self.options
    }

    /// Tokens of a sample as read: `seq_len + 1` for a window, the truncated length for a
    /// document.
    fn read_len(&self, id: u64) -> u64 {
        match self.options.mode {
            TokenMode::Packed { seq_len } => u64::from(seq_len) + 1,
            TokenMode::Documents { max_len, .. } => {
                self.data.doc_len(id).min(u64::from(max_len) + 1)
            }
        }
    }

    /// The token range sample `id` reads: (first stream token, tokens); `None` for a document
    /// too short to give an input.
    fn range_of(&self, id: u64) -> Option<(u64, u64)> {
        match self.options.mode {
            TokenMode::Packed { seq_len } => {
                Some((id * u64::from(seq_len), u64::from(seq_len) + 1))
            }
            TokenMode::Documents { .. } => {
                let len = self.read_len(id);
                (len >= 2).then(|| (self.data.doc_start(id), len))
            }
        }
    }

    fn fill_as<E: Elem>(
        &self,
        id: u64,
        k: usize,
        io: &mut TaskIo,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let mut slots = out.fixed_columns();
        let mut take = |c: Option<usize>| -> Option<&mut [E]> {
            c.and_then(|c| slots[c].take())
                .map(|s| bytemuck::cast_slice_mut::<u8, E>(s))
        };
        let input = take(Some(INPUT)).expect("inputs are a fixed column");
        let labels = take(Some(LABELS)).expect("labels are a fixed column");
        let mask = take(self.mask);
        let mut position = take(self.position);
        let mut segment = take(self.segment);
        let t = input.len();
        let dtype = self.data.dtype();
        let w = dtype.size();
        match self.options.mode {
            TokenMode::Packed { .. } => {
                let mut j = 0usize; // window token index of the piece's first token
                let mut last = E::from_u32(0);
                self.data.visit_task(k, io, |piece, raw| {
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
            TokenMode::Documents { pad_id, .. } => {
                let mask = mask.expect("documents have a mask");
                let len = self.read_len(id) as usize;
                let n = len.saturating_sub(1); // inputs
                input[n..].fill(E::from_u32(pad_id));
                labels[n..].fill(E::from_i64(IGNORE_LABEL));
                mask[..n].fill(E::from_i64(1));
                mask[n..].fill(E::from_i64(0));
                if let Some(p) = position {
                    for (k, v) in p.iter_mut().enumerate() {
                        *v = E::from_i64(if k < n { k as i64 } else { 0 });
                    }
                }
                if n == 0 {
                    return Ok(());
                }
                let mut at = 0usize;
                let mut last = E::from_u32(0);
                self.data.visit_task(k, io, |_, raw| {
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
        Ok(())
    }
}

impl From<Arc<Tokens>> for Loadable {
    /// The loader's shuffle of the samples, documents bucketed by length when asked.
    fn from(tokens: Arc<Tokens>) -> Loadable {
        let mut order = Shuffled::of(&*tokens);
        if tokens.buckets.is_some() {
            let t = Arc::clone(&tokens);
            order = order.with_adapter(Arc::new(move |o: &EpochOrder, slots: &mut [Slot]| {
                if let Some(b) = &t.buckets {
                    b.apply(o, slots, |d| t.data.doc_len(d));
                }
            }));
        }
        Loadable {
            samples: tokens,
            order: Arc::new(order),
            groups: None,
        }
    }
}

impl Samples for Tokens {
    fn describe(&self, id: u64, _read: bool) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        if id >= self.samples {
            return m;
        }
        if let Some((start, n)) = self.range_of(id) {
            m.insert("token".into(), serde_json::Value::from(start));
            m.insert("tokens".into(), serde_json::Value::from(n));
            m.insert(
                "document".into(),
                serde_json::Value::from(self.data.document_of(start)),
            );
        }
        m
    }

    fn caches(&self) -> Vec<Arc<dyn Cache>> {
        vec![Arc::new(TokenCache(self.data.bytes[0].clone()))]
    }

    fn len(&self) -> u64 {
        self.samples
    }

    fn layout(&self) -> Layout {
        let w = self.data.dtype().size() as u64;
        let mean_bytes = match self.options.mode {
            TokenMode::Packed { seq_len } => (u64::from(seq_len) + 1) * w,
            TokenMode::Documents { .. } => {
                self.data.total_tokens() / self.data.documents().max(1) * w
            }
        };
        Layout {
            mean_bytes,
            blocks: None,
            whole_batch_tasks: true,
            stage_names: {
                let sample = match self.options.mode {
                    TokenMode::Packed { .. } => "window",
                    TokenMode::Documents { .. } => "document",
                };
                vec!["read".to_string(), sample.to_string()]
            },
            fingerprint: self.fingerprint.clone(),
        }
    }

    fn columns(&self) -> &[(String, Output)] {
        &self.outputs
    }

    fn batch_outputs(&self, ids: &[u64]) -> Option<Vec<Output>> {
        if matches!(self.options.mode, TokenMode::Packed { .. }) {
            return None;
        }
        // padded to the longest document of the batch (at least one position)
        let longest = ids.iter().map(|&d| self.read_len(d)).max().unwrap_or(0);
        let t = (longest.saturating_sub(1)).max(1) as usize;
        Some(
            self.outputs
                .iter()
                .map(|_| Output::Fixed {
                    dtype: self.options.dtype,
                    shape: vec![t],
                })
                .collect(),
        )
    }

    fn sources(&self) -> &[ByteSource] {
        self.data.sources()
    }

    fn plan(&self, ids: &[u64], io: &mut TaskIo) {
        let (plan, task) = io.plan_and_scratch::<TokenTask>();
        if task.planned.len() < ids.len() {
            task.planned.resize_with(ids.len(), Planned::default);
        }
        for (&id, p) in ids.iter().zip(&mut task.planned) {
            match self.range_of(id) {
                Some((start, n)) => {
                    self.data.plan(start, n, p);
                    push_reads(p, plan);
                }
                None => {
                    // a document too short to give an input: nothing to read
                    p.reads = TokenReads::default();
                    p.error = None;
                }
            }
            plan.end_sample();
        }
    }

    fn fill(
        &self,
        id: u64,
        k: usize,
        io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let mut clock = cx.ws.clock();
        let r = match self.options.dtype {
            DType::I64 => self.fill_as::<i64>(id, k, io, out),
            _ => self.fill_as::<i32>(id, k, io, out),
        };
        cx.ws
            .read(self.read_len(id) as usize * self.data.dtype().size());
        cx.ws.lap(STAGE_ASSEMBLE, id, &mut clock);
        r
    }
}
