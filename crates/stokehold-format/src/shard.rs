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
use std::collections::BTreeMap;

use crate::record::{FieldValue, RecordCodec, RecordEncoder, RecordFields, RecordView, list_items};
use crate::schema::{FieldType, MAX_LIST_ITEMS, Schema};
pub use crate::source::ShardSource;
use crate::source::Storage;

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
    /// Per `list` field, its items per record and, for a list of images, each image's width and
    /// height (`docs/format.md` §4.3); absent in shards without lists.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lists: BTreeMap<String, ListTable>,
}

/// Most list items (a list of images: images) one shard holds, so that its meta block's table
/// stays within [`Limits::max_meta_bytes`] (about 12 bytes of JSON an image).
pub const MAX_SHARD_LIST_ITEMS: u64 = 1 << 20;

/// What is wrong with a [`ListTable`] (checked against its shard's record count).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListTableError {
    /// Not one count per record.
    #[error("{counts} counts for {records} records")]
    Counts {
        /// The counts.
        counts: usize,
        /// The records.
        records: u64,
    },
    /// A record's count over [`MAX_LIST_ITEMS`].
    #[error(
        "record {record} has {count} items, over the limit of {}",
        MAX_LIST_ITEMS
    )]
    RecordItems {
        /// The record.
        record: usize,
        /// Its count.
        count: u32,
    },
    /// Items over [`MAX_SHARD_LIST_ITEMS`] in all.
    #[error(
        "{total} items in one shard, over the limit of {}",
        MAX_SHARD_LIST_ITEMS
    )]
    ShardItems {
        /// The items.
        total: u64,
    },
    /// Not two sizes per image.
    #[error("{sizes} sizes for {total} images (two numbers each)")]
    Sizes {
        /// The numbers of sizes.
        sizes: usize,
        /// The images.
        total: u64,
    },
    /// Sizes for a list that is not of images.
    #[error("sizes for a list that is not of images")]
    SizesNotImages,
    /// A list of images without sizes.
    #[error("no sizes for a list of images")]
    NoSizes,
}

/// What is wrong with a meta block's list tables ([`ShardMeta::lists`]) as a whole.
#[derive(Debug, thiserror::Error)]
enum ListsError {
    /// A list field without its table.
    #[error("no list table for the list field {field:?}")]
    Missing { field: String },
    /// A table of a field that is not a list.
    #[error("a list table for {name:?}, which is no list field")]
    NotAList { name: String },
    /// A table that does not check.
    #[error("list table of {name:?}: {source}")]
    Table {
        name: String,
        source: ListTableError,
    },
}

/// What a shard's meta block keeps of one `list` field ([`ShardMeta::lists`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListTable {
    /// Items of each record's list, by record.
    pub counts: Vec<u32>,
    /// For a list of images: width and height of every item, records in order, items in order
    /// (`2 × sum(counts)` numbers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<u32>>,
    /// Where each record's items start among all the shard's items (`counts`' prefix sums,
    /// `records + 1` entries), computed when checked.
    #[serde(skip)]
    starts: Vec<u64>,
}

impl ListTable {
    /// A table of `counts` items per record and, for a list of images, their `sizes` (`[w0, h0,
    /// w1, h1, ...]`), checked as a meta block's is at open (for files read in place, whose
    /// index gives them).
    pub fn new(
        counts: Vec<u32>,
        sizes: Option<Vec<u32>>,
    ) -> std::result::Result<Self, ListTableError> {
        let records = counts.len() as u64;
        let has_sizes = sizes.is_some();
        let mut t = ListTable {
            counts,
            sizes,
            starts: Vec::new(),
        };
        t.check(records, has_sizes)?;
        Ok(t)
    }

    /// Check the table against `records` records of a field that `has_sizes` (a list of
    /// images), and compute where each record's items start.
    fn check(&mut self, records: u64, has_sizes: bool) -> std::result::Result<(), ListTableError> {
        if self.counts.len() as u64 != records {
            return Err(ListTableError::Counts {
                counts: self.counts.len(),
                records,
            });
        }
        let mut starts = Vec::with_capacity(self.counts.len() + 1);
        let mut total = 0u64;
        starts.push(0);
        for (i, &c) in self.counts.iter().enumerate() {
            if c as usize > MAX_LIST_ITEMS {
                return Err(ListTableError::RecordItems {
                    record: i,
                    count: c,
                });
            }
            total += u64::from(c);
            starts.push(total);
        }
        if total > MAX_SHARD_LIST_ITEMS {
            return Err(ListTableError::ShardItems { total });
        }
        match (&self.sizes, has_sizes) {
            (Some(sizes), true) if sizes.len() as u64 == 2 * total => {}
            (Some(sizes), true) => {
                return Err(ListTableError::Sizes {
                    sizes: sizes.len(),
                    total,
                });
            }
            (None, false) => {}
            (Some(_), false) => return Err(ListTableError::SizesNotImages),
            (None, true) => return Err(ListTableError::NoSizes),
        }
        self.starts = starts;
        Ok(())
    }

    /// The number of items of record `record` (`None` past the shard's records).
    pub fn count(&self, record: u64) -> Option<u32> {
        self.counts.get(record as usize).copied()
    }

    /// Width and height of each image of record `record`, as `[w0, h0, w1, h1, ...]` (`None`
    /// past the shard's records or for a list that is not of images).
    pub fn sizes_of(&self, record: u64) -> Option<&[u32]> {
        let sizes = self.sizes.as_ref()?;
        let r = record as usize;
        let (a, b) = (*self.starts.get(r)?, *self.starts.get(r + 1)?);
        sizes.get(2 * a as usize..2 * b as usize)
    }

    fn push(&mut self, sizes: Option<&[u32]>, count: u32) {
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        self.counts.push(count);
        let last = *self.starts.last().unwrap_or(&0);
        self.starts.push(last + u64::from(count));
        if let (Some(all), Some(new)) = (&mut self.sizes, sizes) {
            all.extend_from_slice(new);
        }
    }

    /// Items in all.
    pub fn items(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }
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
    /// The meta block's table of each list field (empty without lists).
    lists: BTreeMap<String, ListTable>,
    /// Scratch: the sizes of one record's images.
    sizes: Vec<u32>,
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
            lists: BTreeMap::new(),
            sizes: Vec::new(),
        };
        for f in &s.schema.fields {
            if matches!(f.ty, FieldType::List { .. }) {
                let table = ListTable {
                    sizes: f.ty.is_image_list().then(Vec::new),
                    ..ListTable::default()
                };
                s.lists.insert(f.name.clone(), table);
            }
        }
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
        let view = RecordView::parse(record, self.schema.len()).map_err(WriteError::Value)?;
        // each list's items (and its images' sizes), checked before anything is written
        let mut counts = Vec::new();
        let mut sizes = std::mem::take(&mut self.sizes);
        sizes.clear();
        let listed = self.list_items(&view, &mut counts, &mut sizes);
        if let Err(e) = listed {
            self.sizes = sizes;
            return Err(WriteError::Value(e));
        }
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
        let (mut k, mut at) = (0usize, 0usize);
        for f in &self.schema.fields {
            if let FieldType::List { .. } = f.ty {
                let table = self.lists.get_mut(&f.name).expect("a table per list field");
                let n = counts[k] as usize;
                let own = f.ty.is_image_list().then(|| &sizes[at..at + 2 * n]);
                if own.is_some() {
                    at += 2 * n;
                }
                table.push(own, counts[k]);
                k += 1;
            }
        }
        self.sizes = sizes;
        Ok(self.records - 1)
    }

    /// The items of each list field of `view` (into `counts`) and the sizes of each image of a
    /// list of images (into `sizes`), read from the images' headers.
    fn list_items(
        &self,
        view: &RecordView<'_>,
        counts: &mut Vec<u32>,
        sizes: &mut Vec<u32>,
    ) -> Result<(), crate::record::RecordError> {
        use crate::record::RecordError;
        for (i, f) in self.schema.fields.iter().enumerate() {
            if !matches!(f.ty, FieldType::List { .. }) {
                continue;
            }
            let (raw, offset) = view.raw(i);
            let items = list_items(raw).map_err(|e| RecordError::Corrupt {
                field: i,
                offset: offset as u64,
                detail: e.to_string(),
            })?;
            let table = &self.lists[&f.name];
            if table.items() + items.len() as u64 > MAX_SHARD_LIST_ITEMS {
                return Err(RecordError::Mismatch {
                    field: f.name.clone(),
                    detail: format!(
                        "{} items more would put over {MAX_SHARD_LIST_ITEMS} in one shard",
                        items.len()
                    ),
                });
            }
            if f.ty.is_image_list() {
                for (k, r) in items.iter().enumerate() {
                    let (w, h) = crate::image_size::image_size(&raw[r.clone()]).map_err(|e| {
                        RecordError::Mismatch {
                            field: format!("{}[{k}]", f.name),
                            detail: e.to_string(),
                        }
                    })?;
                    sizes.extend_from_slice(&[w, h]);
                }
            }
            counts.push(items.len() as u32);
        }
        Ok(())
    }

    /// List items (a list of images: images) written to this shard so far, all list fields
    /// together; a writer starts a new shard well before [`MAX_SHARD_LIST_ITEMS`].
    pub fn list_items_written(&self) -> u64 {
        self.lists.values().map(ListTable::items).sum()
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
            lists: std::mem::take(&mut self.lists),
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

/// A shard of `file_len` bytes is at least a header and a trailer long.
fn check_min_len(file_len: u64, path: &Path) -> Result<()> {
    if file_len < HEADER_LEN + TRAILER_LEN {
        // keeps the message exact: the smallest valid shard
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "header and trailer".into(),
            start: 0,
            end: HEADER_LEN + TRAILER_LEN,
            file_len,
        });
    }
    Ok(())
}

fn corrupt(path: &Path, what: &str, offset: u64, detail: String) -> FormatError {
    FormatError::Corrupt {
        path: path.to_path_buf(),
        what: what.to_string(),
        offset,
        detail,
    }
}

/// A parsed shard header (`docs/format.md` §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The shard version (always [`SHARD_VERSION`] once parsed).
    pub version: u16,
}

impl Header {
    /// Check the 16 header bytes (at offset 0 of the file named `path`): magic, version, and that
    /// flags and reserved bytes are zero. Pure: no I/O. Fewer than 16 bytes is
    /// [`FormatError::Truncated`] (with `file_len` = `bytes.len()`).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Header> {
        if (bytes.len() as u64) < HEADER_LEN {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "header".into(),
                start: 0,
                end: HEADER_LEN,
                file_len: bytes.len() as u64,
            });
        }
        if &bytes[0..8] != HEADER_MAGIC {
            return Err(FormatError::BadMagic {
                path: path.to_path_buf(),
                what: "shard header",
                offset: 0,
                expected: escape(HEADER_MAGIC),
                found: escape(&bytes[0..8]),
            });
        }
        let version = le_u16(bytes, 8);
        if version != SHARD_VERSION {
            return Err(FormatError::UnsupportedVersion {
                path: path.to_path_buf(),
                what: "shard",
                found: version.into(),
                supported: SHARD_VERSION.into(),
            });
        }
        if le_u16(bytes, 10) != 0 || le_u32(bytes, 12) != 0 {
            return Err(corrupt(
                path,
                "shard header",
                10,
                "flags and reserved bytes must be zero in version 1".into(),
            ));
        }
        Ok(Header { version })
    }
}

/// A parsed, checked shard trailer (`docs/format.md` §4.5): where the meta block and the index
/// are, and the stored checksums. Once parsed, the regions are known to tile the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Offset of the meta block (= end of the record area).
    pub meta_offset: u64,
    /// Length of the meta block.
    pub meta_len: u64,
    /// Offset of the index.
    pub index_offset: u64,
    /// Number of records (and index entries).
    pub records: u64,
    /// CRC-32C of the meta block.
    pub meta_crc: u32,
    /// CRC-32C of the index.
    pub index_crc: u32,
    /// CRC-32C of every byte before the trailer.
    pub file_crc: u32,
    /// The file's length.
    pub file_len: u64,
}

impl Trailer {
    /// Check the 64 trailer bytes of a file of `file_len` bytes named `path`: magic,
    /// `trailer_crc`, version, that the regions tile the file (overflow-checked: a count or length
    /// that does not fit the file is an error), and the meta block's length against `limits`.
    /// Pure: no I/O. A `bytes` of another length than 64, or a `file_len` under 80, is
    /// [`FormatError::Truncated`].
    pub fn parse(bytes: &[u8], file_len: u64, limits: &Limits, path: &Path) -> Result<Trailer> {
        check_min_len(file_len, path)?;
        let trailer_start = file_len - TRAILER_LEN;
        if bytes.len() as u64 != TRAILER_LEN {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "trailer".into(),
                start: trailer_start,
                end: file_len,
                file_len,
            });
        }
        let t = bytes;
        if &t[48..56] != TRAILER_MAGIC {
            return Err(FormatError::BadMagic {
                path: path.to_path_buf(),
                what: "shard trailer",
                offset: trailer_start + 48,
                expected: escape(TRAILER_MAGIC),
                found: escape(&t[48..56]),
            });
        }
        let tcrc = crc::crc32c(&t[0..60]);
        if tcrc != le_u32(t, 60) {
            return Err(FormatError::Checksum {
                path: path.to_path_buf(),
                what: "trailer".into(),
                start: trailer_start,
                end: file_len,
                stored: le_u32(t, 60),
                computed: tcrc,
            });
        }
        let tversion = le_u16(t, 44);
        if tversion != SHARD_VERSION {
            return Err(FormatError::UnsupportedVersion {
                path: path.to_path_buf(),
                what: "shard trailer",
                found: tversion.into(),
                supported: SHARD_VERSION.into(),
            });
        }
        let (meta_offset, meta_len, index_offset, records) =
            (le_u64(t, 0), le_u64(t, 8), le_u64(t, 16), le_u64(t, 24));
        // The layout must tile the file exactly: header ≤ meta, meta | index | trailer adjacent.
        let index_len = records.checked_mul(INDEX_ENTRY_LEN);
        let layout_ok = meta_offset >= HEADER_LEN
            && meta_offset.checked_add(meta_len) == Some(index_offset)
            && index_len.and_then(|l| index_offset.checked_add(l)) == Some(trailer_start);
        if !layout_ok {
            return Err(corrupt(
                path,
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
                path: path.to_path_buf(),
                what: "meta block length".into(),
                value: meta_len,
                max: limits.max_meta_bytes,
            });
        }
        Ok(Trailer {
            meta_offset,
            meta_len,
            index_offset,
            records,
            meta_crc: le_u32(t, 32),
            index_crc: le_u32(t, 36),
            file_crc: le_u32(t, 40),
            file_len,
        })
    }

    /// Offset of the trailer (= end of the index).
    pub fn start(&self) -> u64 {
        self.file_len.saturating_sub(TRAILER_LEN)
    }

    /// Length of the index: 16 bytes per record (fits the file once parsed).
    pub fn index_len(&self) -> u64 {
        self.records.saturating_mul(INDEX_ENTRY_LEN)
    }
}

impl ShardMeta {
    /// Check and parse the meta block `bytes` (read at `trailer.meta_offset`, `trailer.meta_len`
    /// bytes) of the shard named `path`: `meta_crc`, the JSON, the schema, the record count against
    /// the trailer's, the alignment. Pure: no I/O.
    pub fn parse(bytes: &[u8], trailer: &Trailer, path: &Path) -> Result<ShardMeta> {
        let meta_offset = trailer.meta_offset;
        let c = crc::crc32c(bytes);
        if c != trailer.meta_crc || bytes.len() as u64 != trailer.meta_len {
            return Err(FormatError::Checksum {
                path: path.to_path_buf(),
                what: "meta block".into(),
                start: meta_offset,
                end: trailer.index_offset,
                stored: trailer.meta_crc,
                computed: c,
            });
        }
        let mut meta: ShardMeta = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(path, "meta block", meta_offset, e.to_string()))?;
        meta.schema
            .validate()
            .map_err(|e| corrupt(path, "meta block", meta_offset, e.to_string()))?;
        if meta.records != trailer.records {
            return Err(corrupt(
                path,
                "meta block",
                meta_offset,
                format!(
                    "meta says {} records, trailer says {}",
                    meta.records, trailer.records
                ),
            ));
        }
        if !meta.align.is_power_of_two() || meta.align > MAX_ALIGN {
            return Err(corrupt(
                path,
                "meta block",
                meta_offset,
                format!("invalid alignment {}", meta.align),
            ));
        }
        meta.check_lists()
            .map_err(|e| corrupt(path, "meta block", meta_offset, e.to_string()))?;
        Ok(meta)
    }

    /// Every `list` field has its table and every table a `list` field, each checked against
    /// the record count ([`ListTable`]).
    fn check_lists(&mut self) -> std::result::Result<(), ListsError> {
        for f in &self.schema.fields {
            if matches!(f.ty, FieldType::List { .. }) && !self.lists.contains_key(&f.name) {
                return Err(ListsError::Missing {
                    field: f.name.clone(),
                });
            }
        }
        let records = self.records;
        for (name, table) in &mut self.lists {
            let field = self.schema.index_of(name).map(|i| &self.schema.fields[i]);
            let Some(field) = field.filter(|f| matches!(f.ty, FieldType::List { .. })) else {
                return Err(ListsError::NotAList { name: name.clone() });
            };
            table
                .check(records, field.ty.is_image_list())
                .map_err(|source| ListsError::Table {
                    name: name.clone(),
                    source,
                })?;
        }
        Ok(())
    }

    /// The table that the meta block keeps of the list field `field`.
    pub fn list(&self, field: &str) -> Option<&ListTable> {
        self.lists.get(field)
    }
}

/// Check and parse the index `bytes` (read at `trailer.index_offset`, [`Trailer::index_len`]
/// bytes) of the shard named `path` whose records are aligned to `align`: `index_crc`, then every
/// entry (in order, not overlapping, within the record area, aligned, within
/// `limits.max_record_bytes`). Pure: no I/O.
pub fn parse_index(
    bytes: &[u8],
    trailer: &Trailer,
    align: u32,
    limits: &Limits,
    path: &Path,
) -> Result<Vec<IndexEntry>> {
    let (index_offset, meta_offset) = (trailer.index_offset, trailer.meta_offset);
    let c = crc::crc32c(bytes);
    if c != trailer.index_crc || bytes.len() as u64 != trailer.index_len() {
        return Err(FormatError::Checksum {
            path: path.to_path_buf(),
            what: "index".into(),
            start: index_offset,
            end: trailer.start(),
            stored: trailer.index_crc,
            computed: c,
        });
    }
    let mut index = Vec::with_capacity(bytes.len() / INDEX_ENTRY_LEN as usize);
    let mut prev_end = HEADER_LEN;
    let align = u64::from(align.max(1));
    for (i, chunk) in bytes.chunks_exact(INDEX_ENTRY_LEN as usize).enumerate() {
        let e = IndexEntry::from_bytes(chunk);
        let at = index_offset + i as u64 * INDEX_ENTRY_LEN;
        let end = e.offset.checked_add(u64::from(e.len));
        if e.offset < prev_end
            || !e.offset.is_multiple_of(align)
            || end.is_none_or(|end| end > meta_offset)
        {
            return Err(corrupt(
                path,
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
                path: path.to_path_buf(),
                what: format!("record {i} length"),
                value: e.len.into(),
                max: limits.max_record_bytes,
            });
        }
        prev_end = e.end();
        index.push(e);
    }
    Ok(index)
}

/// One read that the opening of a shard asks for: `len` bytes at `offset`, holding `what` (for
/// messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedRead {
    /// Offset in the file.
    pub offset: u64,
    /// Bytes to read (bounded: see [`ShardOpening::step`]).
    pub len: u64,
    /// What the bytes hold: "header", "trailer", "meta block", "index".
    pub what: &'static str,
}

/// What [`ShardOpening::step`] says to do.
#[derive(Debug)]
pub enum OpenStep {
    /// Read these ranges and [`ShardOpening::supply`] them (in any order, from anywhere).
    Read(Vec<PlannedRead>),
    /// The structure is read and checked.
    Done(ShardStructure),
}

/// The checked structure of a shard: its trailer, meta block and index (what
/// [`ShardReader::from_structure`] needs besides a source of its records).
#[derive(Debug, Clone)]
pub struct ShardStructure {
    /// The trailer.
    pub trailer: Trailer,
    /// The meta block.
    pub meta: ShardMeta,
    /// The index.
    pub index: Vec<IndexEntry>,
}

/// The opening of one shard as data, sans I/O (`docs/format.md` §5): [`ShardOpening::step`]
/// says which byte ranges to read; the caller reads them however and from wherever it likes
/// (one file with `pread`, or many objects at once over the network) and hands them back with
/// [`ShardOpening::supply`], until `step` says [`OpenStep::Done`] (at most two steps: the header
/// and the tail, then what the tail missed). Each region is checked by its
/// pure parse function ([`Header::parse`], [`Trailer::parse`], [`ShardMeta::parse`],
/// [`parse_index`]) as soon as its bytes are there, and no range is asked for before the checks
/// that bound its length.
#[derive(Debug)]
pub struct ShardOpening {
    path: PathBuf,
    file_len: u64,
    limits: Limits,
    /// Bytes of the file's end asked for with the header.
    tail: u64,
    /// The ranges supplied: (offset, bytes).
    held: Vec<(u64, Vec<u8>)>,
    trailer: Option<Trailer>,
}

impl ShardOpening {
    /// Start opening the shard named `path` (in messages), `file_len` bytes long. The first
    /// step asks for the header and the last `tail` bytes of the file (at least the trailer, at
    /// most all but the header): a reader with costly requests (object storage) asks for
    /// enough that the meta block and the index usually come with the trailer; a local file
    /// asks for the trailer alone ([`TRAILER_LEN`]).
    pub fn new(
        path: impl Into<PathBuf>,
        file_len: u64,
        limits: Limits,
        tail: u64,
    ) -> Result<ShardOpening> {
        let path = path.into();
        check_min_len(file_len, &path)?;
        Ok(ShardOpening {
            tail: tail.clamp(TRAILER_LEN, file_len - HEADER_LEN),
            path,
            file_len,
            limits,
            held: Vec::new(),
            trailer: None,
        })
    }

    /// The shard's name in messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hand over the bytes read at `offset` for a [`PlannedRead`].
    pub fn supply(&mut self, offset: u64, bytes: Vec<u8>) {
        self.held.push((offset, bytes));
    }

    /// The error of a failed [`PlannedRead`]: [`FormatError::Truncated`] when the read passed
    /// the end of the file (it is shorter than its stated length), else an I/O error at its
    /// offset.
    pub fn read_error(&self, read: &PlannedRead, e: io::Error) -> FormatError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            FormatError::Truncated {
                path: self.path.clone(),
                what: read.what.to_string(),
                start: read.offset,
                end: read.offset + read.len,
                file_len: self.file_len,
            }
        } else {
            FormatError::io(&self.path, Some(read.offset), e)
        }
    }

    /// The supplied bytes `offset..offset + len`, when one supplied range holds them.
    fn held(&self, offset: u64, len: u64) -> Option<&[u8]> {
        self.held.iter().find_map(|(start, bytes)| {
            let from = usize::try_from(offset.checked_sub(*start)?).ok()?;
            bytes.get(from..from.checked_add(usize::try_from(len).ok()?)?)
        })
    }

    /// The next step: the ranges still to read, or the checked structure. Every length asked
    /// for is fixed (header, trailer, the first step's tail, which is within the file) or was
    /// checked against the file's length and the limits by [`Trailer::parse`] (meta block,
    /// index: 16 bytes per record of a file that holds them).
    pub fn step(&mut self) -> Result<OpenStep> {
        let trailer = match self.trailer {
            Some(t) => t,
            None => {
                let trailer_start = self.file_len - TRAILER_LEN;
                let (Some(head), Some(tail)) = (
                    self.held(0, HEADER_LEN),
                    self.held(trailer_start, TRAILER_LEN),
                ) else {
                    return Ok(OpenStep::Read(vec![
                        PlannedRead {
                            offset: 0,
                            len: HEADER_LEN,
                            what: "header",
                        },
                        PlannedRead {
                            offset: self.file_len - self.tail,
                            len: self.tail,
                            what: "trailer",
                        },
                    ]));
                };
                Header::parse(head, &self.path)?;
                let t = Trailer::parse(tail, self.file_len, &self.limits, &self.path)?;
                self.trailer = Some(t);
                t
            }
        };
        // what the tail missed of the meta block and the index, asked for in one step (both
        // lengths were checked against the file and the limits by the trailer's parse)
        let meta_read = PlannedRead {
            offset: trailer.meta_offset,
            len: trailer.meta_len,
            what: "meta block",
        };
        let index_read = PlannedRead {
            offset: trailer.index_offset,
            len: trailer.index_len(),
            what: "index",
        };
        let (Some(meta_bytes), Some(index_bytes)) = (
            self.held(meta_read.offset, meta_read.len),
            self.held(index_read.offset, index_read.len),
        ) else {
            let missing = [meta_read, index_read]
                .into_iter()
                .filter(|r| self.held(r.offset, r.len).is_none())
                .collect();
            return Ok(OpenStep::Read(missing));
        };
        let meta = ShardMeta::parse(meta_bytes, &trailer, &self.path)?;
        let index = parse_index(index_bytes, &trailer, meta.align, &self.limits, &self.path)?;
        self.held = Vec::new();
        Ok(OpenStep::Done(ShardStructure {
            trailer,
            meta,
            index,
        }))
    }
}

/// Read and check the structure of the shard in `source` (named `path` in messages) by
/// driving a [`ShardOpening`] with the source's positional reads: the header and the trailer,
/// then the meta block and the index (`docs/format.md` §5).
pub fn read_structure(path: &Path, source: &dyn Storage, limits: Limits) -> Result<ShardStructure> {
    let file_len = source.size().map_err(|e| FormatError::io(path, None, e))?;
    let mut opening = ShardOpening::new(path, file_len, limits, TRAILER_LEN)?;
    loop {
        match opening.step()? {
            OpenStep::Done(structure) => return Ok(structure),
            OpenStep::Read(reads) => {
                for r in reads {
                    // `r.len` is bounded: the header and the trailer are fixed, and the meta
                    // block and the index were checked against the file's length and the
                    // limits before they were asked for.
                    let mut v = vec![0u8; r.len as usize];
                    source
                        .read_at(r.offset, &mut v)
                        .map_err(|e| opening.read_error(&r, e))?;
                    opening.supply(r.offset, v);
                }
            }
        }
    }
}

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
    /// The decoder of the records of a file read in place (`None`: stokehold records).
    codec: Option<std::sync::Arc<dyn RecordCodec>>,
}

impl ShardReader {
    /// Open a shard from a source. `path` is used in messages.
    ///
    /// Drives a [`ShardOpening`] with the source's positional reads: the header and the trailer,
    /// then the meta block, then the index (`docs/format.md` §5), each checked by its pure parse
    /// function before the next read.
    pub fn from_source(
        path: impl Into<PathBuf>,
        source: ShardSource,
        limits: Limits,
    ) -> Result<ShardReader> {
        let path = path.into();
        let structure = read_structure(&path, &*source, limits)?;
        Ok(ShardReader::from_structure(path, source, structure, limits))
    }

    /// A shard whose structure was read and checked by a [`ShardOpening`] (from wherever its
    /// bytes came), read from now on through `source`.
    pub fn from_structure(
        path: impl Into<PathBuf>,
        source: ShardSource,
        structure: ShardStructure,
        limits: Limits,
    ) -> ShardReader {
        let ShardStructure {
            trailer,
            meta,
            index,
        } = structure;
        ShardReader {
            path: path.into(),
            source,
            file_len: trailer.file_len,
            meta,
            index,
            meta_offset: trailer.meta_offset,
            file_crc: trailer.file_crc,
            first_global: 0,
            limits,
            codec: None,
        }
    }

    /// A file read in place (not a shard): `file_len` bytes whose records `index` locates (each
    /// entry's CRC-32C is of the record's bytes as located: stored by the file's format, or
    /// computed when the file was indexed), holding `schema`'s fields as `codec` decodes them.
    pub fn in_place(
        path: impl Into<PathBuf>,
        source: ShardSource,
        file_len: u64,
        schema: Schema,
        index: Vec<IndexEntry>,
        codec: std::sync::Arc<dyn RecordCodec>,
        limits: Limits,
    ) -> ShardReader {
        let records = index.len() as u64;
        let trailer = Trailer {
            meta_offset: file_len,
            meta_len: 0,
            index_offset: file_len,
            records,
            meta_crc: 0,
            index_crc: 0,
            file_crc: 0,
            file_len,
        };
        let meta = ShardMeta {
            schema,
            align: 1,
            records,
            lists: BTreeMap::new(),
        };
        let mut r = ShardReader::from_structure(
            path,
            source,
            ShardStructure {
                trailer,
                meta,
                index,
            },
            limits,
        );
        r.codec = Some(codec);
        r
    }

    /// The decoder of the records of a file read in place (`None` for a stokehold shard).
    pub fn codec(&self) -> Option<&dyn RecordCodec> {
        self.codec.as_deref()
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

    /// A file read in place with the tables of its list fields (made from its index: each
    /// record's items and images' sizes), which its meta block would keep were it a shard.
    pub fn with_lists(mut self, lists: BTreeMap<String, ListTable>) -> ShardReader {
        self.meta.lists = lists;
        self
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
        let c = match &self.codec {
            None => crc::crc32c(bytes),
            Some(codec) => codec.checksum(i, bytes),
        };
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

    /// Field `field` of record `i` read from the record's first `prefix` bytes when the record
    /// is larger and the prefix holds the field ([`crate::record::field_from_prefix`]: not
    /// checksummed); `None` when it does not, or for records of files read in place (read the
    /// whole record then) but those whose codec decodes fields apart
    /// ([`RecordCodec::fields_apart`]: a JSONL line, read whole and checked, for that field
    /// alone, not the image files it lists).
    pub fn field_from_prefix(
        &self,
        i: u64,
        field: usize,
        prefix: usize,
    ) -> Result<Option<FieldValue<'static>>> {
        let e = self.entry(i);
        if let Some(codec) = &self.codec {
            // a file read in place whose fields are decoded apart: the record is read whole
            // (checked) for that field alone
            if !codec.fields_apart() {
                return Ok(None);
            }
            let mut buf = Vec::new();
            self.read_record(i, &mut buf, true)?;
            return self
                .fields(i, &buf)?
                .field(&self.meta.schema, field, self.limits.max_decompressed_bytes)
                .map(|v| Some(v.into_owned()))
                .map_err(|err| self.record_error(i, err));
        }
        if (e.len as usize) <= prefix {
            return Ok(None);
        }
        let mut buf = vec![0u8; prefix];
        self.source
            .read_at(e.offset, &mut buf)
            .map_err(|err| FormatError::io(&self.path, Some(e.offset), err))?;
        crate::record::field_from_prefix(
            &buf,
            u64::from(e.len),
            &self.meta.schema,
            field,
            self.limits.max_decompressed_bytes,
        )
        .map(|v| v.map(FieldValue::into_owned))
        .map_err(|err| self.record_error(i, err))
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

    /// Bytes `[lo, hi)` of the file: a slice of the source when it holds the file in memory (a
    /// map, memory), otherwise one positional read into `scratch` (grown when too small, never
    /// shrunk or zeroed per read). A range past the file's end is [`FormatError::Truncated`]
    /// naming the record that holds `lo` (or the byte range); other failures are
    /// [`FormatError::Io`] naming the path and `lo`. Not checksummed.
    pub fn read_range<'a>(
        &'a self,
        lo: u64,
        hi: u64,
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8]> {
        let bytes = hi
            .checked_sub(lo)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                FormatError::io(
                    &self.path,
                    Some(lo),
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("invalid byte range {lo}..{hi}"),
                    ),
                )
            })?;
        if let Some(s) = self.source.slice(lo, bytes) {
            return Ok(s);
        }
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        let buf = &mut scratch[..bytes];
        self.source
            .read_at(lo, buf)
            .map_err(|e| self.range_error(lo, hi, e))?;
        Ok(buf)
    }

    /// What a failed read of bytes `[lo, hi)` is (as [`ShardReader::read_range`] reports it,
    /// for reads made elsewhere, e.g. in a batch of reads by `stokehold-storage`): past the file's end,
    /// [`FormatError::Truncated`] naming the record that holds `lo`; otherwise
    /// [`FormatError::Io`] naming the path and `lo`.
    pub fn range_error(&self, lo: u64, hi: u64, e: io::Error) -> FormatError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            FormatError::Truncated {
                path: self.path.clone(),
                what: self.describe_offset(lo, hi),
                start: lo,
                end: hi,
                file_len: self.file_len,
            }
        } else {
            FormatError::io(&self.path, Some(lo), e)
        }
    }

    /// "record 17 (global sample 1017)" for the record holding byte `lo` (the last record starting
    /// at or before it), or "bytes lo..hi" before the first record.
    fn describe_offset(&self, lo: u64, hi: u64) -> String {
        match self.index.partition_point(|e| e.offset <= lo) {
            0 => format!("bytes {lo}..{hi}"),
            p => self.describe(p as u64 - 1),
        }
    }

    /// Record `i`'s fields from its bytes: a stokehold record's field table checked, or the
    /// record of a file read in place, for its codec. Errors name the shard, record and offset.
    pub fn fields<'a>(&'a self, i: u64, bytes: &'a [u8]) -> Result<RecordFields<'a>> {
        match &self.codec {
            None => RecordView::parse(bytes, self.meta.schema.len())
                .map(RecordFields::Native)
                .map_err(|e| self.record_error(i, e)),
            Some(codec) => Ok(RecordFields::Foreign {
                codec: &**codec,
                record: i,
                bytes,
            }),
        }
    }

    /// What this shard's codec holds decoded for record `i`, when it does (files read in place:
    /// see [`RecordCodec::held`]); its fields then come from [`ShardReader::held_fields`]
    /// without reading its bytes.
    pub fn held(&self, i: u64) -> Option<crate::record::Held> {
        self.codec.as_ref()?.held(i)
    }

    /// Record `i`'s fields from what [`ShardReader::held`] gave for it (`None` for a shard
    /// without a codec, which holds nothing).
    pub fn held_fields<'a>(
        &'a self,
        i: u64,
        held: &'a crate::record::Held,
    ) -> Option<RecordFields<'a>> {
        let codec = self.codec.as_deref()?;
        Some(RecordFields::Held {
            codec,
            record: i,
            held,
        })
    }

    /// Check record `i`'s field table and decode its fields (borrowing from `bytes`).
    pub fn decode<'a>(&'a self, i: u64, bytes: &'a [u8]) -> Result<Vec<FieldValue<'a>>> {
        let schema = &self.meta.schema;
        self.fields(i, bytes)?
            .fields(schema, self.limits.max_decompressed_bytes)
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

impl AsRef<[IndexEntry]> for ShardReader {
    fn as_ref(&self) -> &[IndexEntry] {
        &self.index
    }
}
