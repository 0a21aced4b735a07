//! Token datasets (`docs/format.md` §9): the storage type of token ids ([`TokenDType`]), the
//! manifest's `source.tokens` object ([`TokenMeta`]), and the document index of a token dataset
//! ([`TokenIndex`]): prefix sums of document lengths computed from the shard indexes alone, and
//! [`TokenIndex::pieces`], which maps a token range of the stream onto the byte ranges to read,
//! one per shard, without doing any I/O.
//!
//! A reader of a token range does, per [`ShardRead`]: one [`ShardReader::read_range`] of
//! `lo..hi`, then for each [`DocPiece`] of the read [`DocPiece::check`] (field table, and the
//! checksum of a whole record where the plan asked for it) and [`DocPiece::bytes`].

use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Result};
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::record::RecordError;
use crate::schema::{Compression, Field, FieldType, Schema};
use crate::shard::{IndexEntry, ShardReader};

/// The name of the one field of a token dataset.
pub const TOKENS_FIELD: &str = "tokens";
/// The copy of the tokenizer inside a token dataset.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Bytes of a token record's field table (one `u32`: the number of token bytes).
pub const TOKEN_TABLE_LEN: u64 = 4;

/// How token ids are stored: little-endian `u16` when the vocabulary has at most 65,536 entries,
/// `u32` otherwise. Serialised as its [`TokenDType::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenDType {
    /// 2 bytes per token.
    U16,
    /// 4 bytes per token.
    U32,
}

/// A token id that does not fit a [`TokenDType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("token id {id} does not fit {dtype} (vocabulary size {vocab_size})")]
pub struct TokenIdOutOfRange {
    /// The id.
    pub id: u32,
    /// The storage type's name.
    pub dtype: &'static str,
    /// The tokenizer's vocabulary size.
    pub vocab_size: u32,
}

impl TokenDType {
    /// The narrowest type that holds every id of a vocabulary of `vocab_size` entries.
    pub fn for_vocab(vocab_size: u32) -> TokenDType {
        if vocab_size <= 1 << 16 {
            TokenDType::U16
        } else {
            TokenDType::U32
        }
    }

    /// Bytes per token.
    pub fn size(self) -> usize {
        match self {
            TokenDType::U16 => 2,
            TokenDType::U32 => 4,
        }
    }

    /// `"u16"` or `"u32"`, as written in manifests.
    pub fn name(self) -> &'static str {
        match self {
            TokenDType::U16 => "u16",
            TokenDType::U32 => "u32",
        }
    }

    /// Parse [`TokenDType::name`].
    pub fn parse(s: &str) -> Option<TokenDType> {
        match s {
            "u16" => Some(TokenDType::U16),
            "u32" => Some(TokenDType::U32),
            _ => None,
        }
    }

    /// Append `ids` to `out` little-endian, checking that each fits.
    pub fn append(
        self,
        ids: &[u32],
        vocab_size: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), TokenIdOutOfRange> {
        out.reserve(ids.len() * self.size());
        match self {
            TokenDType::U16 => {
                for &id in ids {
                    let v = u16::try_from(id).map_err(|_| TokenIdOutOfRange {
                        id,
                        dtype: "u16",
                        vocab_size,
                    })?;
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            TokenDType::U32 => {
                for &id in ids {
                    out.extend_from_slice(&id.to_le_bytes());
                }
            }
        }
        Ok(())
    }

    /// Token `i` of little-endian `bytes` of this type (panics when out of range).
    #[inline]
    pub fn get(self, bytes: &[u8], i: usize) -> u32 {
        match self {
            TokenDType::U16 => u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
            TokenDType::U32 => u32::from_le_bytes([
                bytes[4 * i],
                bytes[4 * i + 1],
                bytes[4 * i + 2],
                bytes[4 * i + 3],
            ]),
        }
    }
}

impl std::fmt::Display for TokenDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for TokenDType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for TokenDType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TokenDType::parse(&s).ok_or_else(|| {
            serde::de::Error::invalid_value(serde::de::Unexpected::Str(&s), &"\"u16\" or \"u32\"")
        })
    }
}

/// The schema of every token dataset: one uncompressed `bytes` field `tokens`.
pub fn token_schema() -> Schema {
    Schema {
        fields: vec![Field {
            name: TOKENS_FIELD.into(),
            ty: FieldType::Bytes,
            compression: Compression::None,
        }],
    }
}

/// Whether `schema` is [`token_schema`].
pub fn is_token_schema(schema: &Schema) -> bool {
    schema.fields.len() == 1
        && schema.fields[0].name == TOKENS_FIELD
        && schema.fields[0].ty == FieldType::Bytes
        && schema.fields[0].compression == Compression::None
}

/// The manifest's `source.tokens` object (`docs/format.md` §9). Keys are serialised in this
/// order; absent optional values are written as `null`. Unknown keys are ignored when reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenMeta {
    /// The token width (required).
    pub dtype: TokenDType,
    /// The tokenizer's vocabulary size, added tokens included.
    #[serde(default)]
    pub vocab_size: Option<u64>,
    /// The file name of the tokenizer's copy in the dataset directory.
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// `crc32c:<8 hex digits>:<length>` of that tokenizer.json.
    #[serde(default)]
    pub tokenizer_fingerprint: Option<String>,
    /// The id the packer put before every document.
    #[serde(default)]
    pub bos_id: Option<u32>,
    /// The id the packer put after every document.
    #[serde(default)]
    pub eos_id: Option<u32>,
    /// Number of documents.
    #[serde(default)]
    pub documents: Option<u64>,
    /// Number of tokens (checked against the records by [`TokenIndex::check_meta`]).
    #[serde(default)]
    pub total_tokens: Option<u64>,
}

impl TokenMeta {
    /// `manifest.source.tokens`; `path` (the manifest's) names it in errors, which are
    /// [`FormatError::Manifest`]: the key missing, or not an object of the right types.
    pub fn from_manifest(manifest: &Manifest, path: &Path) -> Result<TokenMeta> {
        let err = |detail: String| FormatError::Manifest {
            path: path.to_path_buf(),
            detail,
        };
        let Some(v) = manifest.source.get("tokens") else {
            return Err(err(
                "source.tokens is missing: not a token dataset (make one with `stokehold pack \
                 --tokenizer`)"
                    .into(),
            ));
        };
        TokenMeta::deserialize(v).map_err(|e| err(format!("source.tokens is invalid: {e}")))
    }

    /// The token meta of the dataset in `dir` described by `manifest`, after checking that its
    /// schema is [`token_schema`] (errors name the dataset's manifest). `stokehold-storage` calls
    /// it for an open dataset (`TokenMeta::from_dataset`).
    pub fn of_dataset(manifest: &Manifest, dir: &Path) -> Result<TokenMeta> {
        let path = dir.join(MANIFEST_FILE);
        if !is_token_schema(&manifest.schema) {
            return Err(FormatError::Manifest {
                path,
                detail: format!(
                    "not a token dataset: the schema is {}, not {}",
                    manifest.schema,
                    token_schema()
                ),
            });
        }
        TokenMeta::from_manifest(manifest, &path)
    }

    /// As JSON, for `source.tokens`.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("token meta always serialises")
    }
}

/// A token record whose length is not a 4-byte field table plus whole tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "shard {shard} record {record}: a token record of {len} bytes is not a 4-byte field table \
     plus whole {dtype} tokens"
)]
pub struct BadTokenRecord {
    /// Shard position in the dataset.
    pub shard: usize,
    /// Record in that shard.
    pub record: u64,
    /// Its length in the index.
    pub len: u32,
    /// The token type.
    pub dtype: TokenDType,
}

impl BadTokenRecord {
    fn detail(&self) -> String {
        format!(
            "a token record of {} bytes is not a 4-byte field table plus whole {} tokens",
            self.len,
            self.dtype.name()
        )
    }
}

/// The documents of a token dataset: prefix sums of their token counts (8 bytes per document),
/// computed from the shard indexes without reading data, and where each shard's documents start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIndex {
    dtype: TokenDType,
    /// `starts[d]` is the stream position of document `d`'s first token; `starts[docs]` = total.
    starts: Vec<u64>,
    /// `shard_docs[k]` is shard `k`'s first document; `shard_docs[shards]` = documents.
    shard_docs: Vec<u64>,
}

/// One positional read of a token range: bytes `lo..hi` of shard `shard`, holding the
/// [`DocPiece`]s of [`TokenReads::pieces`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardRead {
    /// The shard's position in the dataset.
    pub shard: usize,
    /// The shard record (= document `first_doc`) that holds `lo`.
    pub record: u64,
    /// The document of `record`.
    pub first_doc: u64,
    /// First byte to read.
    pub lo: u64,
    /// One past the last byte to read.
    pub hi: u64,
    pieces: Range<usize>,
}

impl ShardRead {
    /// Bytes to read.
    pub fn len(&self) -> u64 {
        self.hi - self.lo
    }

    /// True when nothing is to be read (never, in a plan).
    pub fn is_empty(&self) -> bool {
        self.hi == self.lo
    }
}

/// One document of a [`ShardRead`]: where its tokens lie in the read's bytes and what to check.
/// A document whose field table lies in the read appears even when it gives no tokens (an empty
/// document between two others), so that its table is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocPiece {
    /// The document (= global sample index).
    pub doc: u64,
    /// Its record in the shard.
    pub record: u64,
    /// Offset, within the read, of the record's start (its field table) when the table lies in
    /// the read: [`DocPiece::check`] checks it against the index.
    pub table: Option<usize>,
    /// The whole record lies in the read (at `table`) and is to be checksummed: `whole(doc)` said
    /// so.
    pub checksum: bool,
    /// Offset, within the read, of the piece's first token.
    pub at: usize,
    /// Bytes of the piece's tokens (0 for a document that only has its table checked).
    pub bytes: usize,
    /// Tokens of the piece.
    pub tokens: u64,
    /// Position of the piece's first token within its document.
    pub offset_in_doc: u64,
}

impl DocPiece {
    /// The piece's tokens (little-endian) in the read's bytes `data`.
    pub fn bytes<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        &data[self.at..self.at + self.bytes]
    }

    /// Run the checks the plan asks for on the read's bytes `data` of `shard`: the record's CRC-32C
    /// when [`DocPiece::checksum`] ([`FormatError::Checksum`] naming the shard and record), then
    /// its field table against the index when [`DocPiece::table`] is set
    /// ([`FormatError::Corrupt`]). Returns whether the checksum was checked (so the caller can
    /// remember the document as checked).
    pub fn check(&self, shard: &ShardReader, dtype: TokenDType, data: &[u8]) -> Result<bool> {
        let Some(rel) = self.table else {
            return Ok(false);
        };
        if self.checksum {
            let len = shard.entry(self.record).len as usize;
            shard.check_record(self.record, &data[rel..rel + len])?;
        }
        shard.check_token_table(self.record, &data[rel..rel + 4], dtype)?;
        Ok(self.checksum)
    }
}

/// The reads of a token range, in stream order: see [`TokenIndex::pieces`]. Reusable with
/// [`TokenIndex::pieces_into`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenReads {
    reads: Vec<ShardRead>,
    pieces: Vec<DocPiece>,
}

impl TokenReads {
    /// The reads, one per shard touched, in order.
    pub fn reads(&self) -> &[ShardRead] {
        &self.reads
    }

    /// The documents of `read` (one of [`TokenReads::reads`]), in order.
    pub fn pieces(&self, read: &ShardRead) -> &[DocPiece] {
        &self.pieces[read.pieces.clone()]
    }

    /// Every document piece of every read, in order.
    pub fn all_pieces(&self) -> &[DocPiece] {
        &self.pieces
    }

    fn clear(&mut self) {
        self.reads.clear();
        self.pieces.clear();
    }
}

impl ShardReader {
    /// Check token record `i`'s field table (`table`: its first 4 bytes) against the index: the
    /// table must say `length - 4` token bytes. [`FormatError::Corrupt`] naming the shard, the
    /// record and its offset otherwise.
    pub fn check_token_table(&self, i: u64, table: &[u8], dtype: TokenDType) -> Result<()> {
        let e = self.entry(i);
        let w = dtype.size() as u64;
        let index_bytes = u64::from(e.len).saturating_sub(TOKEN_TABLE_LEN);
        let stored = match table {
            [a, b, c, d, ..] => u64::from(u32::from_le_bytes([*a, *b, *c, *d])),
            _ => u64::MAX,
        };
        if stored != index_bytes {
            return Err(self.record_error(
                i,
                RecordError::Corrupt {
                    field: 0,
                    offset: 0,
                    detail: format!(
                        "the field table says {stored} token bytes, the index {index_bytes} ({} tokens)",
                        index_bytes / w
                    ),
                },
            ));
        }
        Ok(())
    }
}

impl TokenIndex {
    /// Index the documents of shards given by their index entries (`shards[k]` lists shard `k`'s
    /// records). Every record must be a 4-byte field table plus whole tokens of `dtype`.
    pub fn from_entries<S: AsRef<[IndexEntry]>>(
        shards: &[S],
        dtype: TokenDType,
    ) -> Result<TokenIndex, BadTokenRecord> {
        let w = dtype.size() as u64;
        let docs: usize = shards.iter().map(|s| s.as_ref().len()).sum();
        let mut starts = Vec::with_capacity(docs + 1);
        let mut shard_docs = Vec::with_capacity(shards.len() + 1);
        let mut total = 0u64;
        starts.push(0);
        for (k, shard) in shards.iter().enumerate() {
            shard_docs.push(starts.len() as u64 - 1);
            for (i, e) in shard.as_ref().iter().enumerate() {
                let len = u64::from(e.len);
                if len < TOKEN_TABLE_LEN || !(len - TOKEN_TABLE_LEN).is_multiple_of(w) {
                    return Err(BadTokenRecord {
                        shard: k,
                        record: i as u64,
                        len: e.len,
                        dtype,
                    });
                }
                total += (len - TOKEN_TABLE_LEN) / w;
                starts.push(total);
            }
        }
        shard_docs.push(starts.len() as u64 - 1);
        Ok(TokenIndex {
            dtype,
            starts,
            shard_docs,
        })
    }

    /// Index the documents of open shards (a dataset's, in order). A record that is not a 4-byte
    /// field table plus whole tokens is [`FormatError::Corrupt`] naming its shard, record, global
    /// sample and offset.
    pub fn from_shards(shards: &[ShardReader], dtype: TokenDType) -> Result<TokenIndex> {
        TokenIndex::from_entries(shards, dtype).map_err(|b| {
            shards[b.shard].record_error(
                b.record,
                RecordError::Corrupt {
                    field: 0,
                    offset: 0,
                    detail: b.detail(),
                },
            )
        })
    }

    /// Index the documents of a token dataset with the meta of its manifest, and check the
    /// meta's `total_tokens` against them ([`TokenIndex::check_meta`]).
    /// `dir` is the dataset's (its manifest is named in errors); `stokehold-storage` calls it
    /// for an open dataset (`TokenIndex::from_dataset`).
    pub fn of_dataset(shards: &[ShardReader], dir: &Path, meta: &TokenMeta) -> Result<TokenIndex> {
        let index = TokenIndex::from_shards(shards, meta.dtype)?;
        index.check_meta(meta, &dir.join(MANIFEST_FILE))?;
        Ok(index)
    }

    /// Check `meta.total_tokens` (when present) against the records: [`FormatError::Manifest`]
    /// naming `manifest_path` and both counts otherwise.
    pub fn check_meta(&self, meta: &TokenMeta, manifest_path: &Path) -> Result<()> {
        if let Some(t) = meta.total_tokens
            && t != self.total_tokens()
        {
            return Err(FormatError::Manifest {
                path: manifest_path.to_path_buf(),
                detail: format!(
                    "source.tokens.total_tokens is {t} but the shards hold {} tokens",
                    self.total_tokens()
                ),
            });
        }
        Ok(())
    }

    /// How tokens are stored.
    pub fn dtype(&self) -> TokenDType {
        self.dtype
    }

    /// Number of documents.
    pub fn documents(&self) -> u64 {
        self.starts.len() as u64 - 1
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shard_docs.len() - 1
    }

    /// Tokens in the whole stream.
    pub fn total_tokens(&self) -> u64 {
        *self.starts.last().expect("starts is never empty")
    }

    /// The stream position of document `d`'s first token (panics when `d > documents()`).
    pub fn doc_start(&self, d: u64) -> u64 {
        self.starts[d as usize]
    }

    /// Tokens of document `d` (panics when `d >= documents()`).
    pub fn doc_len(&self, d: u64) -> u64 {
        self.starts[d as usize + 1] - self.starts[d as usize]
    }

    /// The document holding stream token `t` (panics when `t >= total_tokens()`). Empty documents
    /// hold no token, so are never returned.
    pub fn document_of(&self, t: u64) -> u64 {
        assert!(
            t < self.total_tokens(),
            "token {t} past the stream's end ({})",
            self.total_tokens()
        );
        (self.starts.partition_point(|&s| s <= t) - 1) as u64
    }

    /// The shard holding document `d` and its record there (panics when `d >= documents()`).
    pub fn locate(&self, d: u64) -> (usize, u64) {
        assert!(d < self.documents(), "document {d} out of range");
        // Empty shards share a first document with their successor: take the last match.
        let k = self.shard_docs.partition_point(|&s| s <= d) - 1;
        (k, d - self.shard_docs[k])
    }

    /// Heap bytes held (8 per document and per shard).
    pub fn memory_bytes(&self) -> usize {
        (self.starts.capacity() + self.shard_docs.capacity()) * 8
    }

    /// The reads of stream tokens `[start, start + n)`: see [`TokenIndex::pieces_into`].
    pub fn pieces<S: AsRef<[IndexEntry]>>(
        &self,
        shards: &[S],
        start: u64,
        n: u64,
        whole: impl FnMut(u64, IndexEntry) -> bool,
    ) -> Result<TokenReads> {
        let mut out = TokenReads::default();
        self.pieces_into(shards, start, n, whole, &mut out)?;
        Ok(out)
    }

    /// Plan the reads of stream tokens `[start, start + n)` into `out` (replacing its contents),
    /// without I/O. `shards` are the index entries the index was built from (a dataset's
    /// [`ShardReader`]s, or the slices given to [`TokenIndex::from_entries`]; panics on others).
    ///
    /// The documents of one shard are contiguous records, so the pieces in one shard are one
    /// read: from the first needed token (or its record's start) to the last needed token (or
    /// its record's end). A read that starts at a document's first token starts at its record's
    /// start, so that its field table is checked; every document whose field table lies in the
    /// read gets a [`DocPiece`] with `table` set. `whole(doc, entry)` says whether document
    /// `doc` (record `entry`) is to be read whole and checksummed (say, when verifying, the
    /// record is at most 1 MiB and not yet checked in this process): the first and last record
    /// of a read are then read whole, and every record that lies whole in a read and for which
    /// `whole` is true gets `checksum` set. Empty documents before the range's first token of a
    /// shard are not read. A range past the stream's end is [`FormatError::TokenRange`].
    pub fn pieces_into<S: AsRef<[IndexEntry]>>(
        &self,
        shards: &[S],
        start: u64,
        n: u64,
        mut whole: impl FnMut(u64, IndexEntry) -> bool,
        out: &mut TokenReads,
    ) -> Result<()> {
        out.clear();
        let total = self.total_tokens();
        let end = start.checked_add(n).filter(|&e| e <= total);
        let Some(end) = end else {
            return Err(FormatError::TokenRange {
                start,
                end: start.saturating_add(n),
                total,
            });
        };
        if n == 0 {
            return Ok(());
        }
        let w = self.dtype.size() as u64;
        let last_needed = self.document_of(end - 1);
        let mut doc = self.document_of(start);
        let mut t = start;
        while t < end {
            while self.doc_len(doc) == 0 {
                doc += 1;
            }
            let (k, local) = self.locate(doc);
            let entries = shards[k].as_ref();
            let first_doc = doc - local;
            let last = last_needed.min(self.shard_docs[k + 1] - 1);
            let (e0, e1) = (
                entries[local as usize],
                entries[(last - first_doc) as usize],
            );
            let whole_first = whole(doc, e0);
            let whole_last = if last == doc {
                whole_first
            } else {
                whole(last, e1)
            };
            let off = t - self.doc_start(doc);
            let lo = if off == 0 || whole_first {
                e0.offset
            } else {
                e0.offset + TOKEN_TABLE_LEN + off * w
            };
            let last_start = self.doc_start(last);
            let need_end = end.min(last_start + self.doc_len(last)) - last_start;
            let hi = if whole_last {
                e1.end()
            } else {
                e1.offset + TOKEN_TABLE_LEN + need_end * w
            };
            let first_piece = out.pieces.len();
            for d in doc..=last {
                let e = entries[(d - first_doc) as usize];
                let len = self.doc_len(d);
                let mut table = None;
                let mut checksum = false;
                if e.offset >= lo && e.offset + TOKEN_TABLE_LEN <= hi {
                    table = Some((e.offset - lo) as usize);
                    let wh = if d == doc {
                        whole_first
                    } else if d == last {
                        whole_last
                    } else {
                        whole(d, e)
                    };
                    checksum = wh && e.end() <= hi;
                }
                let ds0 = self.doc_start(d);
                let (a, b) = (t.max(ds0) - ds0, end.min(ds0 + len) - ds0);
                let tokens = b.saturating_sub(a);
                if tokens == 0 && table.is_none() {
                    continue;
                }
                let at = if tokens == 0 {
                    table.unwrap_or(0) + TOKEN_TABLE_LEN as usize
                } else {
                    (e.offset + TOKEN_TABLE_LEN + a * w - lo) as usize
                };
                out.pieces.push(DocPiece {
                    doc: d,
                    record: d - first_doc,
                    table,
                    checksum,
                    at,
                    bytes: (tokens * w) as usize,
                    tokens,
                    offset_in_doc: if tokens == 0 { 0 } else { a },
                });
                if tokens > 0 {
                    t = ds0 + b;
                }
            }
            out.reads.push(ShardRead {
                shard: k,
                record: local,
                first_doc: doc,
                lo,
                hi,
                pieces: first_piece..out.pieces.len(),
            });
            doc = last + 1;
        }
        Ok(())
    }
}
