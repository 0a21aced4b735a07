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

use stokehold_format::record::RecordError;
use stokehold_format::{Compression, DType, Dataset, FieldType, FormatError};
use stokehold_ops::text::TokenDType;

use crate::error::{EngineError, Result};
use crate::sampler::{EpochOrder, LengthBuckets, Slot};
use crate::samples::{Samples, SlotWriter, TaskCtx, TaskIo};
use crate::state::fingerprint;
use crate::transform::Output;

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
        if let Some(t) = meta["total_tokens"].as_u64()
            && t != total
        {
            return Err(EngineError::Format(FormatError::Manifest {
                path: ds.dir().join(stokehold_format::MANIFEST_FILE),
                detail: format!(
                    "source.tokens.total_tokens is {t} but the shards hold {total} tokens"
                ),
            }));
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

    fn fill_as<E: Elem>(
        &self,
        id: u64,
        scratch: &mut Vec<u8>,
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
            TokenMode::Packed { seq_len } => {
                let start = id * u64::from(seq_len);
                let mut j = 0usize; // window token index of the piece's first token
                let mut last = E::from_u32(0);
                self.data
                    .for_each_piece(start, t as u64 + 1, scratch, |piece, raw| {
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
                let start = self.data.doc_start(id);
                let mut at = 0usize;
                let mut last = E::from_u32(0);
                self.data
                    .for_each_piece(start, len as u64, scratch, |_, raw| {
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

impl Samples for Tokens {
    fn len(&self) -> u64 {
        self.samples
    }

    fn blocks(&self) -> Option<Vec<u64>> {
        None
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

    fn adapt_order(&self, order: &EpochOrder, slots: &mut [Slot]) {
        if let Some(b) = &self.buckets {
            b.apply(order, slots, |d| self.data.doc_len(d));
        }
    }

    fn stage_names(&self) -> Vec<String> {
        vec![match self.options.mode {
            TokenMode::Packed { .. } => "window".to_string(),
            TokenMode::Documents { .. } => "document".to_string(),
        }]
    }

    fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    fn mean_bytes(&self) -> u64 {
        let w = self.data.dtype().size() as u64;
        match self.options.mode {
            TokenMode::Packed { seq_len } => (u64::from(seq_len) + 1) * w,
            TokenMode::Documents { .. } => {
                self.data.total_tokens() / self.data.documents().max(1) * w
            }
        }
    }

    fn whole_batch_tasks(&self) -> bool {
        true
    }

    fn fill(
        &self,
        id: u64,
        _k: usize,
        io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let mut clock = cx.ws.clock();
        let r = match self.options.dtype {
            DType::I64 => self.fill_as::<i64>(id, &mut io.scratch, out),
            _ => self.fill_as::<i32>(id, &mut io.scratch, out),
        };
        cx.ws
            .read(self.read_len(id) as usize * self.data.dtype().size());
        cx.ws.lap(0, id, &mut clock);
        r
    }
}
