//! One shard file: writer and reader. The byte layout is specified in `docs/format.md`.
//!
//! ```text
//! header   16 B   "STKHSHRD" | u16 version=1 | u16 flags=0 | u32 reserved=0
//! records         each at an offset that is a multiple of `align`; zero padding between
//! meta            UTF-8 JSON: {"schema": .., "align": .., "records": ..}
//! index    16 B × records: u64 offset | u32 length | u32 crc32c(record)
//! trailer  64 B   u64 meta_offset | u64 meta_len | u64 index_offset | u64 records |
//!                 u32 meta_crc | u32 index_crc | u32 file_crc | u16 version | u16 flags |
//!                 "STKHTRLR" | u32 reserved=0 | u32 trailer_crc
//! ```

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::crc;
use crate::error::{FormatError, Result, escape};
use crate::limits::Limits;
use crate::record::{FieldValue, RecordEncoder, RecordView};
use crate::schema::Schema;
use crate::storage::{PreadFile, Storage};

/// Magic bytes that open every shard.
pub const HEADER_MAGIC: &[u8; 8] = b"STKHSHRD";
/// Magic bytes near the end of every shard's trailer.
pub const TRAILER_MAGIC: &[u8; 8] = b"STKHTRLR";
/// The shard format version this build writes and reads.
pub const SHARD_VERSION: u16 = 1;
/// Size of the header.
pub const HEADER_LEN: u64 = 16;
/// Size of the trailer.
pub const TRAILER_LEN: u64 = 64;
/// Size of one index entry.
pub const INDEX_ENTRY_LEN: u64 = 16;
/// Largest allowed record alignment.
pub const MAX_ALIGN: u32 = 1 << 20;

/// Options of a shard (or dataset) writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Every record starts at a multiple of this (a power of two, 1 to 1 MiB); 4096 suits direct
    /// I/O. 1 means no padding.
    pub align: u32,
    /// zstd level for compressed fields.
    pub zstd_level: i32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            align: 1,
            zstd_level: 3,
        }
    }
}

impl WriteOptions {
    /// Check the options.
    pub fn validate(&self) -> Result<()> {
        if !self.align.is_power_of_two() || self.align > MAX_ALIGN {
            return Err(FormatError::Schema(format!(
                "align must be a power of two from 1 to {MAX_ALIGN}, got {}",
                self.align
            )));
        }
        Ok(())
    }
}

/// The shard's meta block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardMeta {
    /// The dataset's schema.
    pub schema: Schema,
    /// Record alignment.
    pub align: u32,
    /// Number of records (repeats the trailer, as a cross-check).
    pub records: u64,
}

/// Where a record lies in its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Byte offset of the record in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// CRC-32C of the record's bytes.
    pub crc: u32,
}

impl IndexEntry {
    fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.crc.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> IndexEntry {
        IndexEntry {
            offset: le_u64(b, 0),
            len: le_u32(b, 8),
            crc: le_u32(b, 12),
        }
    }

    /// One past the record's last byte.
    pub fn end(&self) -> u64 {
        self.offset + u64::from(self.len)
    }
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// What a finished shard looks like, for the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSummary {
    /// Records written.
    pub records: u64,
    /// Bytes in the file.
    pub bytes: u64,
    /// CRC-32C of the whole file.
    pub crc32c: u32,
}

/// Writes one shard to any [`Write`]: header, records, then (in [`ShardWriter::finish`]) meta,
/// index and trailer. Output is a pure function of the schema, the options and the records.
#[derive(Debug)]
pub struct ShardWriter<W: Write> {
    w: W,
    schema: Schema,
    options: WriteOptions,
    encoder: RecordEncoder,
    buf: Vec<u8>,
    pos: u64,
    file_crc: u32,
    index: Vec<u8>,
    records: u64,
}

impl<W: Write> ShardWriter<W> {
    /// Start a shard: writes the header.
    pub fn new(w: W, schema: Schema, options: WriteOptions) -> io::Result<ShardWriter<W>> {
        let mut s = ShardWriter {
            w,
            schema,
            encoder: RecordEncoder::new(options.zstd_level),
            options,
            buf: Vec::new(),
            pos: 0,
            file_crc: 0,
            index: Vec::new(),
            records: 0,
        };
        let mut header = [0u8; HEADER_LEN as usize];
        header[0..8].copy_from_slice(HEADER_MAGIC);
        header[8..10].copy_from_slice(&SHARD_VERSION.to_le_bytes());
        s.put(&header)?;
        Ok(s)
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.w.write_all(bytes)?;
        self.file_crc = crc::append(self.file_crc, bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn pad_to(&mut self, align: u64) -> io::Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut pad = self.pos.next_multiple_of(align) - self.pos;
        while pad > 0 {
            let n = pad.min(ZEROS.len() as u64) as usize;
            self.put(&ZEROS[..n])?;
            pad -= n as u64;
        }
        Ok(())
    }

    /// Encode and append one record (one value per schema field). Returns its index in the shard.
    pub fn write(&mut self, values: &[FieldValue<'_>]) -> Result<u64, WriteError> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self
            .encoder
            .encode(&self.schema, values, &mut buf)
            .map_err(WriteError::Value)
            .and_then(|()| self.write_encoded(&buf));
        self.buf = buf;
        r
    }

    /// Append one record that is already encoded for this schema (its field table is checked).
    pub fn write_encoded(&mut self, record: &[u8]) -> Result<u64, WriteError> {
        RecordView::parse(record, self.schema.len()).map_err(WriteError::Value)?;
        let len = u32::try_from(record.len()).map_err(|_| {
            WriteError::Value(crate::record::RecordError::Mismatch {
                field: "<record>".into(),
                detail: format!("record of {} bytes is over 4 GiB", record.len()),
            })
        })?;
        self.pad_to(u64::from(self.options.align))?;
        let entry = IndexEntry {
            offset: self.pos,
            len,
            crc: crc::crc32c(record),
        };
        // Hash the record once: the running file CRC is combined from the record's CRC.
        self.w.write_all(record)?;
        self.file_crc = crc::combine(self.file_crc, entry.crc, u64::from(len));
        self.pos += u64::from(len);
        self.index.extend_from_slice(&entry.to_bytes());
        self.records += 1;
        Ok(self.records - 1)
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.pos
    }

    /// Write meta, index and trailer; flush; return the writer and the shard's summary.
    pub fn finish(mut self) -> io::Result<(W, ShardSummary)> {
        let meta = ShardMeta {
            schema: self.schema.clone(),
            align: self.options.align,
            records: self.records,
        };
        let meta = serde_json::to_vec(&meta).map_err(io::Error::other)?;
        let meta_offset = self.pos;
        self.put(&meta)?;
        let index_offset = self.pos;
        let index = std::mem::take(&mut self.index);
        self.put(&index)?;
        let mut t = [0u8; TRAILER_LEN as usize];
        t[0..8].copy_from_slice(&meta_offset.to_le_bytes());
        t[8..16].copy_from_slice(&(meta.len() as u64).to_le_bytes());
        t[16..24].copy_from_slice(&index_offset.to_le_bytes());
        t[24..32].copy_from_slice(&self.records.to_le_bytes());
        t[32..36].copy_from_slice(&crc::crc32c(&meta).to_le_bytes());
        t[36..40].copy_from_slice(&crc::crc32c(&index).to_le_bytes());
        t[40..44].copy_from_slice(&self.file_crc.to_le_bytes());
        t[44..46].copy_from_slice(&SHARD_VERSION.to_le_bytes());
        t[48..56].copy_from_slice(TRAILER_MAGIC);
        let tcrc = crc::crc32c(&t[0..60]);
        t[60..64].copy_from_slice(&tcrc.to_le_bytes());
        let file_crc = self.file_crc;
        self.w.write_all(&t)?;
        let bytes = self.pos + TRAILER_LEN;
        self.w.flush()?;
        Ok((
            self.w,
            ShardSummary {
                records: self.records,
                bytes,
                crc32c: file_crc_with_trailer(file_crc, &t),
            },
        ))
    }
}

/// The manifest's per-shard checksum covers the whole file, trailer included.
fn file_crc_with_trailer(prefix_crc: u32, trailer: &[u8]) -> u32 {
    crc::append(prefix_crc, trailer)
}

/// A failed write of one record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The values do not fit the schema; nothing was written, the writer can go on.
    #[error(transparent)]
    Value(crate::record::RecordError),
    /// Writing failed; the shard is unusable.
    #[error("write failed: {0}")]
    Io(#[from] io::Error),
}

/// Where a shard's bytes come from: any [`Storage`] backend.
pub type ShardSource = Box<dyn Storage>;

/// An open, validated shard: its meta, its index in memory (16 bytes per record), and the source
/// of its bytes. Reading a record is one positional read (or a slice of a map).
#[derive(Debug)]
pub struct ShardReader {
    path: PathBuf,
    source: ShardSource,
    file_len: u64,
    meta: ShardMeta,
    index: Vec<IndexEntry>,
    meta_offset: u64,
    file_crc: u32,
    first_global: u64,
    limits: Limits,
}

impl ShardReader {
    /// Open a shard file with positional reads.
    pub fn open(path: impl AsRef<Path>, limits: Limits) -> Result<ShardReader> {
        let path = path.as_ref();
        let f = PreadFile::open(path).map_err(|e| FormatError::io(path, None, e))?;
        ShardReader::from_source(path, Box::new(f), limits)
    }

    /// Open a shard from a source. `path` is used in messages.
    pub fn from_source(
        path: impl Into<PathBuf>,
        source: ShardSource,
        limits: Limits,
    ) -> Result<ShardReader> {
        let path = path.into();
        let file_len = source.size().map_err(|e| FormatError::io(&path, None, e))?;
        let truncated = |what: &str, start: u64, end: u64| FormatError::Truncated {
            path: path.clone(),
            what: what.to_string(),
            start,
            end,
            file_len,
        };
        if file_len < HEADER_LEN + TRAILER_LEN {
            return Err(truncated(
                "header and trailer",
                0,
                HEADER_LEN + TRAILER_LEN,
                // keeps the message exact: the smallest valid shard
            ));
        }
        let read = |offset: u64, len: u64, what: &str| -> Result<Vec<u8>> {
            // `len` has been checked against the file length by every caller.
            let mut v = vec![0u8; len as usize];
            source.read_at(offset, &mut v).map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    truncated(what, offset, offset + len)
                } else {
                    FormatError::io(&path, Some(offset), e)
                }
            })?;
            Ok(v)
        };
        let header = read(0, HEADER_LEN, "header")?;
        if &header[0..8] != HEADER_MAGIC {
            return Err(FormatError::BadMagic {
                path,
                what: "shard header",
                offset: 0,
                expected: escape(HEADER_MAGIC),
                found: escape(&header[0..8]),
            });
        }
        let version = le_u16(&header, 8);
        if version != SHARD_VERSION {
            return Err(FormatError::UnsupportedVersion {
                path,
                what: "shard",
                found: version.into(),
                supported: SHARD_VERSION.into(),
            });
        }
        let corrupt = |what: &str, offset: u64, detail: String| FormatError::Corrupt {
            path: path.clone(),
            what: what.to_string(),
            offset,
            detail,
        };
        if le_u16(&header, 10) != 0 || le_u32(&header, 12) != 0 {
            return Err(corrupt(
                "shard header",
                10,
                "flags and reserved bytes must be zero in version 1".into(),
            ));
        }
        let trailer_start = file_len - TRAILER_LEN;
        let t = read(trailer_start, TRAILER_LEN, "trailer")?;
        if &t[48..56] != TRAILER_MAGIC {
            return Err(FormatError::BadMagic {
                path,
                what: "shard trailer",
                offset: trailer_start + 48,
                expected: escape(TRAILER_MAGIC),
                found: escape(&t[48..56]),
            });
        }
        let tcrc = crc::crc32c(&t[0..60]);
        if tcrc != le_u32(&t, 60) {
            return Err(FormatError::Checksum {
                path,
                what: "trailer".into(),
                start: trailer_start,
                end: file_len,
                stored: le_u32(&t, 60),
                computed: tcrc,
            });
        }
        let tversion = le_u16(&t, 44);
        if tversion != SHARD_VERSION {
            return Err(FormatError::UnsupportedVersion {
                path,
                what: "shard trailer",
                found: tversion.into(),
                supported: SHARD_VERSION.into(),
            });
        }
        let (meta_offset, meta_len, index_offset, records) =
            (le_u64(&t, 0), le_u64(&t, 8), le_u64(&t, 16), le_u64(&t, 24));
        let (meta_crc, index_crc, file_crc) = (le_u32(&t, 32), le_u32(&t, 36), le_u32(&t, 40));
        // The layout must tile the file exactly: header ≤ meta, meta | index | trailer adjacent.
        let index_len = records.checked_mul(INDEX_ENTRY_LEN);
        let layout_ok = meta_offset >= HEADER_LEN
            && meta_offset.checked_add(meta_len) == Some(index_offset)
            && index_len.and_then(|l| index_offset.checked_add(l)) == Some(trailer_start);
        if !layout_ok {
            return Err(corrupt(
                "trailer",
                trailer_start,
                format!(
                    "meta at {meta_offset}+{meta_len}, index at {index_offset} with {records} entries \
                     do not fit a file of {file_len} bytes"
                ),
            ));
        }
        if meta_len > limits.max_meta_bytes {
            return Err(FormatError::LimitExceeded {
                path,
                what: "meta block length".into(),
                value: meta_len,
                max: limits.max_meta_bytes,
            });
        }
        let meta_bytes = read(meta_offset, meta_len, "meta block")?;
        let c = crc::crc32c(&meta_bytes);
        if c != meta_crc {
            return Err(FormatError::Checksum {
                path,
                what: "meta block".into(),
                start: meta_offset,
                end: index_offset,
                stored: meta_crc,
                computed: c,
            });
        }
        let meta: ShardMeta = serde_json::from_slice(&meta_bytes)
            .map_err(|e| corrupt("meta block", meta_offset, e.to_string()))?;
        meta.schema
            .validate()
            .map_err(|e| corrupt("meta block", meta_offset, e.to_string()))?;
        if meta.records != records {
            return Err(corrupt(
                "meta block",
                meta_offset,
                format!("meta says {} records, trailer says {records}", meta.records),
            ));
        }
        if !meta.align.is_power_of_two() || meta.align > MAX_ALIGN {
            return Err(corrupt(
                "meta block",
                meta_offset,
                format!("invalid alignment {}", meta.align),
            ));
        }
        // index_len fits in the file, so this allocation is bounded by the file's size.
        let index_bytes = read(index_offset, index_len.unwrap_or(0), "index")?;
        let c = crc::crc32c(&index_bytes);
        if c != index_crc {
            return Err(FormatError::Checksum {
                path,
                what: "index".into(),
                start: index_offset,
                end: trailer_start,
                stored: index_crc,
                computed: c,
            });
        }
        let mut index = Vec::with_capacity(records as usize);
        let mut prev_end = HEADER_LEN;
        let align = u64::from(meta.align);
        for (i, chunk) in index_bytes
            .chunks_exact(INDEX_ENTRY_LEN as usize)
            .enumerate()
        {
            let e = IndexEntry::from_bytes(chunk);
            let at = index_offset + i as u64 * INDEX_ENTRY_LEN;
            if e.offset < prev_end || e.offset % align != 0 || e.end() > meta_offset {
                return Err(corrupt(
                    &format!("index entry {i}"),
                    at,
                    format!(
                        "record at {}+{} must start at or after {prev_end}, at a multiple of {align}, \
                         and end by {meta_offset}",
                        e.offset, e.len
                    ),
                ));
            }
            if u64::from(e.len) > limits.max_record_bytes {
                return Err(FormatError::LimitExceeded {
                    path,
                    what: format!("record {i} length"),
                    value: e.len.into(),
                    max: limits.max_record_bytes,
                });
            }
            prev_end = e.end();
            index.push(e);
        }
        Ok(ShardReader {
            path,
            source,
            file_len,
            meta,
            index,
            meta_offset,
            file_crc,
            first_global: 0,
            limits,
        })
    }

    /// Set the global sample index of this shard's first record (used in messages).
    pub fn set_first_global(&mut self, first: u64) {
        self.first_global = first;
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema stored in the shard.
    pub fn schema(&self) -> &Schema {
        &self.meta.schema
    }

    /// The meta block.
    pub fn meta(&self) -> &ShardMeta {
        &self.meta
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.index.len() as u64
    }

    /// True when the shard has no records.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The file's size.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Offset of the meta block (= end of the record area).
    pub fn data_end(&self) -> u64 {
        self.meta_offset
    }

    /// CRC-32C of the bytes before the trailer, as stored in the trailer.
    pub fn stored_prefix_crc(&self) -> u32 {
        self.file_crc
    }

    /// The index.
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// The source of the shard's bytes.
    pub fn source(&self) -> &ShardSource {
        &self.source
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Index entry of record `i` (panics when out of range).
    #[inline]
    pub fn entry(&self, i: u64) -> IndexEntry {
        self.index[i as usize]
    }

    /// "record 17 (global sample 1017)".
    pub fn describe(&self, i: u64) -> String {
        format!("record {i} (global sample {})", self.first_global + i)
    }

    fn check_crc(&self, i: u64, e: IndexEntry, bytes: &[u8]) -> Result<()> {
        let c = crc::crc32c(bytes);
        if c != e.crc {
            return Err(FormatError::Checksum {
                path: self.path.clone(),
                what: self.describe(i),
                start: e.offset,
                end: e.end(),
                stored: e.crc,
                computed: c,
            });
        }
        Ok(())
    }

    /// Read record `i` into `buf` (replacing its contents) with one positional read, and check its
    /// checksum when `verify` is set.
    pub fn read_record(&self, i: u64, buf: &mut Vec<u8>, verify: bool) -> Result<()> {
        let e = self.entry(i);
        buf.clear();
        buf.resize(e.len as usize, 0);
        self.source.read_at(e.offset, buf).map_err(|err| {
            if err.kind() == io::ErrorKind::UnexpectedEof {
                FormatError::Truncated {
                    path: self.path.clone(),
                    what: self.describe(i),
                    start: e.offset,
                    end: e.end(),
                    file_len: self.file_len,
                }
            } else {
                FormatError::io(&self.path, Some(e.offset), err)
            }
        })?;
        if verify {
            self.check_crc(i, e, buf)?;
        }
        Ok(())
    }

    /// The bytes of record `i` without a copy, when the source is a map or memory (None for a
    /// plain file). Not checksummed: use [`ShardReader::record_slice_checked`] for that.
    #[inline]
    pub fn record_slice(&self, i: u64) -> Option<&[u8]> {
        let e = self.entry(i);
        self.source.slice(e.offset, e.len as usize)
    }

    /// Like [`ShardReader::record_slice`], with the checksum checked.
    pub fn record_slice_checked(&self, i: u64) -> Result<Option<&[u8]>> {
        let e = self.entry(i);
        match self.source.slice(e.offset, e.len as usize) {
            Some(s) => {
                self.check_crc(i, e, s)?;
                Ok(Some(s))
            }
            None => Ok(None),
        }
    }

    /// Check that `bytes` (obtained elsewhere, such as from a cache or a coalesced read) are record
    /// `i`: its length and CRC-32C.
    pub fn check_record(&self, i: u64, bytes: &[u8]) -> Result<()> {
        let e = self.entry(i);
        if bytes.len() as u64 != u64::from(e.len) {
            return Err(FormatError::Corrupt {
                path: self.path.clone(),
                what: self.describe(i),
                offset: e.offset,
                detail: format!("{} bytes given for a record of {}", bytes.len(), e.len),
            });
        }
        self.check_crc(i, e, bytes)
    }

    /// Check record `i`'s field table and decode its fields (borrowing from `bytes`).
    pub fn decode<'a>(&self, i: u64, bytes: &'a [u8]) -> Result<Vec<FieldValue<'a>>> {
        let schema = &self.meta.schema;
        RecordView::parse(bytes, schema.len())
            .and_then(|v| v.fields(schema, self.limits.max_decompressed_bytes))
            .map_err(|e| self.record_error(i, e))
    }

    /// Wrap a record-level error with this shard's file, record and offset.
    pub fn record_error(&self, i: u64, e: crate::record::RecordError) -> FormatError {
        let entry = self.entry(i);
        let (offset, detail) = match &e {
            crate::record::RecordError::Corrupt { offset, .. } => {
                (entry.offset + offset, e.to_string())
            }
            _ => (entry.offset, e.to_string()),
        };
        FormatError::Corrupt {
            path: self.path.clone(),
            what: self.describe(i),
            offset,
            detail,
        }
    }
}
