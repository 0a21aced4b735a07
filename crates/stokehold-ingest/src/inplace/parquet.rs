//! Parquet files in place: the scan that indexes one, and the codec that gives a row's fields.
//!
//! A row's values are not one byte range of a Parquet file: each column is stored in its own
//! chunk of pages, compressed. The index makes one range per row all the same:
//! - the file's **large column** (the binary or string column with the most bytes, at least
//!   [`LARGE_ROW_BYTES`] a row: the images of a Hugging Face dataset) is read from the file, a
//!   page at a time: a row's range is the page that holds its value (with the column chunk's
//!   dictionary page and the pages before it, when its page is dictionary-encoded: those come
//!   first in a chunk, before any writer's fallback to plain pages), checked by the CRC-32C the
//!   scan took of it, and decoded by the `parquet` crate's page and column readers;
//! - every **other column** (labels, short strings, small lists) is decoded once by the scan and
//!   its values kept in the index, beside the row's place (a stokehold record of those fields).
//!
//! The columns map to fields as `stokehold pack` maps them ([`crate::sources::parquet`]): an image
//! is its bytes as stored (a Hugging Face `{bytes, path}` image with only a path is a null),
//! labels from a `ClassLabel` column give the class names.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::basic::{Compression, Repetition, Type as PhysicalType};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::ByteArrayType;
use parquet::errors::ParquetError;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::schema::types::{ColumnDescriptor, ColumnPath};
use stokehold_format::{
    Field, FieldType, FieldValue, Held, IndexEntry, ListTable, RecordCodec, RecordEncoder,
    RecordError, RecordView, Schema, Storage, crc,
};

use super::index::{DAMAGED, FileIndex, Member};
use super::pages::{DecodedRows, PageCache, PageKey};
use super::{Rows, ScanDetail, ScanError, Scanned, StorageReader};
use crate::parquet_pages::{
    MAX_PAGE_BYTES, MAX_PAGE_HEADER, PageHead, PageKind, Thrift, check_chunk, check_page,
    check_row_group,
};
use crate::sources::parquet::{
    Kind, class_names, hf_features, hf_image_type, image_by_name, kind_of, sniff_images, value_at,
};

/// A column whose values average at least this many bytes a row is read from the file; the
/// others are kept in the index.
pub(super) const LARGE_ROW_BYTES: u64 = 256;
/// Rows decoded at once by the scan.
const SCAN_BATCH: usize = 1024;
/// Bytes read at once by the Parquet reader's streamed reads (page headers, a footer).
const READ_CHUNK: usize = 64 << 10;

/// What a Parquet index keeps of its file besides the rows' places.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct PqStats {
    /// The file's columns that can be fields, in file order: name, kind, rows holding a value.
    pub columns: Vec<PqColumn>,
    /// The large column, read from the file (an index into `columns`).
    pub large: Option<LargeColumn>,
    /// Class names of Hugging Face `ClassLabel` columns.
    pub classes: BTreeMap<String, Vec<String>>,
    /// Columns left out, with why.
    pub unsupported: Vec<String>,
    /// Rows in the file.
    pub rows: u64,
}

/// A column that can be a field.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct PqColumn {
    pub name: String,
    pub kind: Kind,
    pub present: u64,
}

/// How the large column's pages are decoded.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct LargeColumn {
    /// Index into [`PqStats::columns`].
    pub column: usize,
    /// Its leaf's maximum definition level (a value is present at this level).
    pub max_def: i16,
    /// Each row group's compression of the leaf's chunk (`SNAPPY`, `ZSTD(1)`, ...).
    pub compression: Vec<String>,
}

/// The bytes of a row's key in the index: `u32 k` (the row's place among the rows its range
/// holds), `u32` row group, `u8` flags ([`LARGE_NULL`]), a bitmap of the kept columns' nulls,
/// then a stokehold record of the kept columns (nulls as empty values).
const KEY_HEAD: usize = 9;
const LARGE_NULL: u8 = 1;

/// A [`ChunkReader`] over a file's [`Storage`]: every length the footer gives is checked
/// against the file's size before anything is allocated.
#[derive(Clone)]
struct StorageChunks {
    storage: Arc<dyn Storage>,
    size: u64,
}

fn external(e: io::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

impl StorageChunks {
    fn check(&self, start: u64, len: u64) -> Result<(), ParquetError> {
        match start.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(ParquetError::EOF(format!(
                "bytes {start}..{} lie past the file's end ({} bytes)",
                start.saturating_add(len),
                self.size
            ))),
        }
    }

    fn read(&self, start: u64, len: usize) -> Result<Vec<u8>, ParquetError> {
        self.check(start, len as u64)?;
        let mut v = vec![0u8; len];
        self.storage.read_at(start, &mut v).map_err(external)?;
        Ok(v)
    }
}

impl StorageChunks {
    /// Check the page headers of the column chunks of `roots` in row group `g` (all their
    /// leaves but `except`), before the `parquet` crate decodes any of their pages.
    fn check_pages(
        &self,
        md: &parquet::file::metadata::ParquetMetaData,
        g: usize,
        roots: &[usize],
        except: Option<usize>,
        max: u64,
    ) -> Result<(), ScanError> {
        let read = |at: u64, n: usize| self.read(at, n).map_err(std::io::Error::other);
        check_row_group(md, (g, roots, except), self.size, read, max)
            .map_err(|(at, e)| ScanError::at(at, ScanDetail::RowGroupPages(e)))
    }
}

impl Length for StorageChunks {
    fn len(&self) -> u64 {
        self.size
    }
}

impl ChunkReader for StorageChunks {
    type T = StorageReader;

    fn get_read(&self, start: u64) -> Result<StorageReader, ParquetError> {
        self.check(start, 0)?;
        Ok(StorageReader::new(
            Arc::clone(&self.storage),
            start,
            self.size,
            READ_CHUNK,
        ))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<bytes::Bytes, ParquetError> {
        Ok(self.read(start, length)?.into())
    }
}

/// A record's bytes as the part of its file they are: reads at file offsets inside them.
struct RecordBytes {
    base: u64,
    bytes: bytes::Bytes,
}

impl RecordBytes {
    fn range(&self, start: u64, len: usize) -> Result<std::ops::Range<usize>, ParquetError> {
        let lo = start
            .checked_sub(self.base)
            .map(|v| v as usize)
            .filter(|&lo| lo.checked_add(len).is_some_and(|e| e <= self.bytes.len()));
        match lo {
            Some(lo) => Ok(lo..lo + len),
            None => Err(ParquetError::EOF(format!(
                "bytes {start}..{} are outside the row's pages ({}..{})",
                start.saturating_add(len as u64),
                self.base,
                self.base + self.bytes.len() as u64
            ))),
        }
    }
}

impl Length for RecordBytes {
    fn len(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }
}

impl ChunkReader for RecordBytes {
    type T = bytes::buf::Reader<bytes::Bytes>;

    fn get_read(&self, start: u64) -> Result<Self::T, ParquetError> {
        let r = self.range(start, 0)?;
        Ok(bytes::Buf::reader(self.bytes.slice(r.start..)))
    }

    fn get_bytes(&self, start: u64, length: usize) -> Result<bytes::Bytes, ParquetError> {
        Ok(self.bytes.slice(self.range(start, length)?))
    }
}

/// The message of a panic in the Parquet decoder.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    format!(
        "the Parquet decoder failed ({}): the file is damaged or uses what it does not support",
        crate::sources::parquet::panic_payload(p)
    )
}

/// Index the Parquet file in `storage` (`size` bytes; values of at most `max` bytes) into `ix`.
/// Errors give a byte offset (the footer's, or the page's) and what is wrong.
pub(super) fn scan(
    storage: Arc<dyn Storage>,
    size: u64,
    max: u64,
    ix: &mut FileIndex,
) -> Result<(), ScanError> {
    let chunks = StorageChunks { storage, size };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scan_file(&chunks, max, ix)))
        .unwrap_or_else(|p| {
            let payload = crate::sources::parquet::panic_payload(p.as_ref());
            Err(ScanError::at(0, ScanDetail::DecoderPanicked { payload }))
        })
}

fn scan_file(chunks: &StorageChunks, max: u64, ix: &mut FileIndex) -> Result<(), ScanError> {
    let footer = size_of_footer(chunks);
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let meta = ArrowReaderMetadata::load(chunks, options)
        .map_err(|e| ScanError::at(footer, ScanDetail::NotParquet(e)))?;
    let md = meta.metadata();
    let descr = md.file_metadata().schema_descr();
    let features = hf_features(&meta);
    let mut stats = PqStats {
        rows: md.file_metadata().num_rows().max(0) as u64,
        ..PqStats::default()
    };
    // the columns that can be fields, and each one's root in the file
    let mut roots = Vec::new();
    for (root, f) in meta.schema().fields().iter().enumerate() {
        let name = f.name();
        let hf_type = hf_image_type(features.get(name));
        let kind = match kind_of(f.data_type()) {
            _ if name.starts_with("__index_level_") => Err("a pandas index".to_string()),
            Some(k @ (Kind::Bytes | Kind::BytesList)) => match first_rows(md)
                .map_or(Ok(()), |g| chunks.check_pages(md, g, &[root], None, max))
                .map_err(|e| {
                    let detail = Box::new(e.detail);
                    ScanError::at(
                        e.offset,
                        ScanDetail::Column {
                            name: name.into(),
                            detail,
                        },
                    )
                })
                .map(|()| {
                    // first values that do not decode (a damaged page: its rows are named when
                    // the pages are walked below) leave the name to say what the column holds
                    sniff_images(chunks.clone(), &meta, root, name).unwrap_or_else(|(_, e)| {
                        ix.header.notes.push(format!(
                            "{}: column {name:?}: its first values do not decode ({e}): taken \
                             for {} by its name",
                            ix.header.file,
                            if image_by_name(name) {
                                "images"
                            } else {
                                "bytes"
                            }
                        ));
                        image_by_name(name)
                    })
                }) {
                Ok(true) if k == Kind::BytesList => Ok(Kind::ImageList),
                Ok(false) if k == Kind::BytesList => Ok(Kind::BytesList),
                Ok(true) => Ok(Kind::Image),
                Ok(false) => Ok(Kind::Bytes),
                Err(e) => return Err(e),
            },
            Some(Kind::ImageStruct | Kind::ImageList) if hf_type.is_some_and(|t| t != "Image") => {
                Err(format!(
                    "a Hugging Face {} feature",
                    hf_type.unwrap_or_default()
                ))
            }
            Some(k) => Ok(k),
            None => Err(format!("type {}", f.data_type())),
        };
        match kind {
            Ok(kind) => {
                if let Some(names) = features.get(name).and_then(class_names) {
                    stats.classes.insert(name.clone(), names);
                }
                stats.columns.push(PqColumn {
                    name: name.clone(),
                    kind,
                    present: 0,
                });
                roots.push(root);
            }
            Err(why) => stats.unsupported.push(format!("column {name:?} ({why})")),
        }
    }
    // the large column: a byte-array leaf of an image, bytes or string column, with the most
    // bytes, if it has enough a row
    let leaf_of = |root: usize, kind: Kind| {
        (0..descr.num_columns()).find(|&l| {
            descr.get_column_root_idx(l) == root
                && descr.column(l).physical_type() == PhysicalType::BYTE_ARRAY
                && descr.column(l).max_rep_level() == 0
                && (kind != Kind::ImageStruct
                    || descr.column(l).path().parts().last().map(String::as_str) == Some("bytes"))
        })
    };
    let large = stats
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            matches!(
                c.kind,
                Kind::Image | Kind::ImageStruct | Kind::Bytes | Kind::Str
            )
        })
        .filter_map(|(j, c)| {
            let leaf = leaf_of(roots[j], c.kind)?;
            let bytes: i64 = md
                .row_groups()
                .iter()
                .map(|rg| rg.column(leaf).compressed_size())
                .sum();
            Some((bytes.max(0) as u64, j, leaf))
        })
        .max()
        .filter(|&(bytes, _, _)| bytes >= LARGE_ROW_BYTES * stats.rows.max(1));
    if let Some((_, j, leaf)) = large {
        stats.large = Some(LargeColumn {
            column: j,
            max_def: descr.column(leaf).max_def_level(),
            compression: md
                .row_groups()
                .iter()
                .map(|rg| compression_name(rg.column(leaf).compression()))
                .collect(),
        });
    }
    for c in &stats.columns {
        ix.name_id(&c.name);
    }
    // the kept columns' record
    let kept: Vec<usize> = (0..stats.columns.len())
        .filter(|&j| large.is_none_or(|(_, l, _)| l != j))
        .collect();
    let kept_schema = kept_schema(&stats, &kept).map_err(|e| ScanError::at(footer, e))?;
    let mut encoder = RecordEncoder::new(3);
    let mut path_only_rows = 0u64;
    let mut record = Vec::new();
    let mut key = Vec::new();
    for (g, rg) in md.row_groups().iter().enumerate() {
        let rows = rg.num_rows().max(0) as usize;
        if rows == 0 {
            continue;
        }
        // where each row of the large column is
        let places = match large {
            Some((_, _, leaf)) => pages(chunks, rg.column(leaf), rows, max)?,
            None => vec![
                (
                    IndexEntry {
                        offset: 0,
                        len: 0,
                        crc: crc::crc32c(&[])
                    },
                    0,
                    false
                );
                rows
            ],
        };
        // the kept columns' values (and the large column's nulls, when it may have some)
        let mut large_nulls = large.is_some_and(|(_, _, leaf)| {
            rg.column(leaf)
                .statistics()
                .and_then(|s| s.null_count_opt())
                .is_none_or(|n| n > 0)
        });
        if large_nulls && places.iter().any(|p| p.2) {
            // a page that fails its writer's CRC would fail the decoder's pass over the whole
            // column: its rows are damaged (below), and the other rows' nulls are met when read
            large_nulls = false;
            ix.header.notes.push(format!(
                "{}: row group {g}: a page of the large column fails its CRC-32; the column's \
                 nulls are found when rows are read",
                ix.header.file
            ));
        }
        let mut wanted: Vec<usize> = kept.iter().map(|&j| roots[j]).collect();
        if large_nulls && let Some((_, j, _)) = large {
            wanted.push(roots[j]);
        }
        let rg_offset = rg.column(0).byte_range().0;
        chunks.check_pages(md, g, &wanted, large.map(|(_, _, leaf)| leaf), max)?;
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(chunks.clone(), meta.clone())
                .with_row_groups(vec![g])
                .with_projection(ProjectionMask::roots(meta.parquet_schema(), wanted))
                .with_batch_size(SCAN_BATCH)
                .build()
                .map_err(|source| {
                    ScanError::at(rg_offset, ScanDetail::RowGroupOpen { group: g, source })
                })?;
        let mut row = 0usize;
        for batch in reader {
            let batch = batch.map_err(|source| {
                ScanError::at(rg_offset, ScanDetail::RowGroupRead { group: g, source })
            })?;
            for i in 0..batch.num_rows() {
                if row >= rows {
                    return Err(ScanError::at(
                        rg_offset,
                        ScanDetail::MoreRows { group: g, rows },
                    ));
                }
                let (entry, k, page_bad) = places[row];
                key.clear();
                key.extend_from_slice(&k.to_le_bytes());
                key.extend_from_slice(&(g as u32).to_le_bytes());
                let mut flags = 0u8;
                if let Some((_, j, _)) = large {
                    let c = &stats.columns[j];
                    let null = large_nulls
                        && batch.column_by_name(&c.name).is_some_and(|a| {
                            value_at(a.as_ref(), i, c.kind, u64::MAX).is_ok_and(|v| v.is_none())
                        });
                    if null {
                        flags |= LARGE_NULL;
                    } else {
                        stats.columns[j].present += 1;
                    }
                }
                key.push(flags);
                let mut bitmap = vec![0u8; kept.len().div_ceil(8)];
                let mut values = Vec::with_capacity(kept.len());
                let mut bad = page_bad.then(|| {
                    format!(
                        "its page (bytes {}..{}) fails the CRC-32 its writer stored",
                        entry.offset,
                        entry.offset + u64::from(entry.len)
                    )
                });
                for (n, &j) in kept.iter().enumerate() {
                    let c = &stats.columns[j];
                    let v = match batch.column_by_name(&c.name) {
                        Some(a) => value_at(a.as_ref(), i, c.kind, max),
                        None => Err("missing from the decoded row group".into()),
                    };
                    match v {
                        Ok(Some(v)) => {
                            stats.columns[j].present += 1;
                            values.push(v);
                        }
                        Ok(None) => {
                            bitmap[n / 8] |= 1 << (n % 8);
                            values.push(placeholder(&kept_schema.fields[n].ty));
                            if c.kind == Kind::ImageStruct && path_only(&batch, &c.name, i) {
                                path_only_rows += 1;
                            }
                        }
                        Err(e) => {
                            bad.get_or_insert(format!("column {:?}: {e}", c.name));
                            values.push(placeholder(&kept_schema.fields[n].ty));
                        }
                    }
                }
                let members: &[Member] = match bad {
                    None => {
                        encoder
                            .encode(&kept_schema, &values, &mut record)
                            .map_err(|source| {
                                let detail = ScanDetail::Encode {
                                    group: g,
                                    row,
                                    source,
                                };
                                ScanError::at(rg_offset, detail)
                            })?;
                        key.extend_from_slice(&bitmap);
                        key.extend_from_slice(&record);
                        &[]
                    }
                    Some(why) => {
                        ix.header.notes.push(format!(
                            "{}: row {} of row group {g}: {why}",
                            ix.header.file, row
                        ));
                        &[Member {
                            name: DAMAGED,
                            offset: 0,
                            len: 0,
                        }]
                    }
                };
                ix.push(entry, members, &key);
                row += 1;
            }
        }
        if row != rows {
            return Err(ScanError::at(
                rg_offset,
                ScanDetail::RowCount {
                    group: g,
                    decoded: row,
                    rows,
                },
            ));
        }
    }
    if path_only_rows > 0 {
        ix.header.notes.push(format!(
            "{}: {path_only_rows} images are given only by their path (a Hugging Face Image \
             without its bytes): read in place they are nulls; `stokehold pack` reads the files",
            ix.header.file
        ));
    }
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

/// A value of type `ty` standing for a null in the kept record (the null bitmap says it is one).
fn placeholder(ty: &FieldType) -> FieldValue<'static> {
    crate::sources::empty_value(ty).unwrap_or(match ty {
        FieldType::Int64 => FieldValue::Int64(0),
        FieldType::Float64 => FieldValue::Float64(0.0),
        _ => FieldValue::Image(Cow::Borrowed(&[])),
    })
}

/// Whether row `i` of `{bytes, path}` column `name` has a path but no bytes.
fn path_only(batch: &arrow_array::RecordBatch, name: &str, i: usize) -> bool {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let Some(s) = batch.column_by_name(name).and_then(|a| a.as_struct_opt()) else {
        return false;
    };
    let has = |field: &str| {
        s.column_by_name(field)
            .is_some_and(|c| !s.is_null(i) && !c.is_null(i))
    };
    has("path") && !has("bytes")
}

/// The first row group that holds rows (the one [`sniff_images`] reads).
fn first_rows(md: &parquet::file::metadata::ParquetMetaData) -> Option<usize> {
    (0..md.num_row_groups()).find(|&g| md.row_group(g).num_rows() > 0)
}

/// Where the footer starts (for messages about it).
fn size_of_footer(chunks: &StorageChunks) -> u64 {
    let n = chunks.size;
    if n < 8 {
        return 0;
    }
    chunks
        .read(n - 8, 4)
        .ok()
        .map(|b| u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
        .map_or(0, |len| n.saturating_sub(8 + u64::from(len)))
}

/// The schema of the kept columns' record. A file whose only column is the large one (a
/// column of long strings, or of images) keeps none: its record is empty, a schema of no fields
/// (which a dataset's schema may not be, so it is not made by [`Schema::new`]).
fn kept_schema(stats: &PqStats, kept: &[usize]) -> Result<Schema, crate::Unusable> {
    if kept.is_empty() {
        return Ok(Schema { fields: Vec::new() });
    }
    Schema::new(
        kept.iter()
            .map(|&j| {
                Field::new(
                    stats.columns[j].name.clone(),
                    stats.columns[j].kind.field_type(),
                )
            })
            .collect(),
    )
    .map_err(|e| e.to_string().into())
}

fn compression_name(c: Compression) -> String {
    // the codec's name with a level its parser takes (levels do not matter for decoding)
    match c {
        Compression::UNCOMPRESSED => "UNCOMPRESSED".into(),
        Compression::SNAPPY => "SNAPPY".into(),
        Compression::GZIP(_) => "GZIP(6)".into(),
        Compression::LZO => "LZO".into(),
        Compression::BROTLI(_) => "BROTLI(1)".into(),
        Compression::LZ4 => "LZ4".into(),
        Compression::ZSTD(_) => "ZSTD(1)".into(),
        Compression::LZ4_RAW => "LZ4_RAW".into(),
    }
}

/// Where a row of the large column is read from: its range, its place among the range's rows,
/// and whether a page it needs fails its writer's CRC-32 ([`pages`]).
type RowPlace = (IndexEntry, u32, bool);

/// One page of a column chunk: its bytes and rows.
#[derive(Debug, Clone, Copy)]
struct Page {
    start: u64,
    end: u64,
    rows: u64,
    /// A data page of dictionary indices (it needs the chunk's dictionary page).
    dictionary_coded: bool,
    /// Its body fails the CRC-32 its header stores.
    bad: bool,
}

/// Each row of a column chunk (`rows` rows): the range it is read from (its page, with the
/// chunk's start when the page is dictionary-coded), with its CRC-32C, the row's place among
/// the rows of that range, and whether a page it needs fails the CRC-32 its writer stored.
fn pages(
    chunks: &StorageChunks,
    chunk: &ColumnChunkMetaData,
    rows: usize,
    max: u64,
) -> Result<Vec<RowPlace>, ScanError> {
    let (start, len) = chunk.byte_range();
    let end = start
        .checked_add(len)
        .filter(|&e| e <= chunks.size)
        .ok_or(ScanError::at(start, ScanDetail::ChunkPastEnd { len }))?;
    let mut r = Sequential::new(chunks, start, end);
    let mut found = Vec::new();
    let mut dictionary: Option<(u64, bool)> = None;
    while r.pos < end {
        let at = r.pos;
        let head: PageHead = r.header().map_err(|e| ScanError::at(at, e))?;
        check_page(&head, chunk.compression(), end - r.pos, max)
            .map_err(|e| ScanError::at(at, e))?;
        let body = r.pos;
        r.skip(head.compressed_size as u64)
            .map_err(|e| ScanError::at(at, e))?;
        // the writer's own checksum of the page, when it stored one
        let bad = match head.crc {
            Some(c) => r.crc32(body, r.pos).map_err(|e| ScanError::at(at, e))? != c,
            None => false,
        };
        match head.kind {
            PageKind::Dictionary => dictionary = Some((at, bad)),
            PageKind::Data {
                rows,
                dictionary_coded,
            } => found.push(Page {
                start: at,
                end: r.pos,
                rows,
                dictionary_coded,
                bad,
            }),
            PageKind::Other => {}
        }
    }
    let total: u64 = found.iter().map(|p| p.rows).sum();
    if total != rows as u64 {
        return Err(ScanError::at(
            start,
            ScanDetail::PageRows { pages: total, rows },
        ));
    }
    // CRCs: the dictionary-coded pages' ranges all start at the chunk's start, so one running
    // CRC gives each; a plain page's range is itself
    let mut out = Vec::with_capacity(rows);
    let mut first_row = 0u64;
    for p in &found {
        let (lo, k0, bad) = match (p.dictionary_coded, dictionary) {
            (true, Some((d, dict_bad))) => (d, 0, p.bad || dict_bad),
            (true, None) => {
                return Err(ScanError::at(p.start, ScanDetail::NoDictionary));
            }
            _ => (p.start, first_row, p.bad),
        };
        let len = u32::try_from(p.end - lo)
            .map_err(|_| ScanError::at(lo, ScanDetail::PageRangeTooLarge))?;
        let crc = r.crc(lo, p.end).map_err(|e| ScanError::at(lo, e))?;
        let entry = IndexEntry {
            offset: lo,
            len,
            crc,
        };
        for row in first_row..first_row + p.rows {
            out.push((entry, (row - k0) as u32, bad));
        }
        first_row += p.rows;
    }
    Ok(out)
}

/// A column chunk read front to back in large reads, keeping what was read so that ranges of it
/// can be checksummed (a chunk is held in memory while it is indexed: at most its size).
struct Sequential<'a> {
    chunks: &'a StorageChunks,
    base: u64,
    end: u64,
    buf: Vec<u8>,
    pos: u64,
}

impl<'a> Sequential<'a> {
    fn new(chunks: &'a StorageChunks, base: u64, end: u64) -> Sequential<'a> {
        Sequential {
            chunks,
            base,
            end,
            buf: Vec::new(),
            pos: base,
        }
    }

    /// Make bytes `..upto` of the file (at most the chunk's end) available.
    fn fill(&mut self, upto: u64) -> Result<(), crate::Unusable> {
        let upto = upto.min(self.end);
        let have = self.base + self.buf.len() as u64;
        if upto <= have {
            return Ok(());
        }
        // read ahead in steps of 8 MiB at least
        let want = (upto.max(have + (8 << 20))).min(self.end);
        let n = (want - have) as usize;
        let old = self.buf.len();
        self.buf.resize(old + n, 0);
        self.chunks
            .storage
            .read_at(have, &mut self.buf[old..])
            .map_err(|e| format!("reading the column chunk: {e}").into())
    }

    fn header(&mut self) -> Result<PageHead, crate::Unusable> {
        self.fill(self.pos + MAX_PAGE_HEADER as u64)?;
        let lo = (self.pos - self.base) as usize;
        let head = Thrift::new(&self.buf[lo..]).page_header()?;
        self.pos += head.len as u64;
        Ok(head)
    }

    fn skip(&mut self, n: u64) -> Result<(), crate::Unusable> {
        self.fill(self.pos + n)?;
        self.pos += n;
        Ok(())
    }

    /// The CRC-32 (IEEE, Parquet's page checksum) of bytes `lo..hi` read.
    fn crc32(&self, lo: u64, hi: u64) -> Result<u32, crate::Unusable> {
        let (a, b) = ((lo - self.base) as usize, (hi - self.base) as usize);
        self.buf
            .get(a..b)
            .map(crc32fast::hash)
            .ok_or_else(|| "a page outside the bytes read".into())
    }

    fn crc(&self, lo: u64, hi: u64) -> Result<u32, crate::Unusable> {
        let (a, b) = ((lo - self.base) as usize, (hi - self.base) as usize);
        self.buf
            .get(a..b)
            .map(crc::crc32c)
            .ok_or_else(|| "a page outside the bytes read".into())
    }
}

/// Where a schema field's values come from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    /// The large column, from the row's pages.
    Large,
    /// Field `n` of the kept columns' record.
    Kept(usize),
}

/// The fields of one Parquet file's rows.
#[derive(Debug)]
pub(super) struct PqCodec {
    pub index: Arc<FileIndex>,
    pub rows: Rows,
    /// Per schema field: where it comes from, and whether a row may lack it.
    pub fields: Vec<(Source, bool)>,
    /// The kept columns' record schema.
    pub kept: Schema,
    /// The large column's decoder.
    pub large: Option<LargeDecoder>,
}

/// What decoding the large column's pages needs.
#[derive(Debug)]
pub(super) struct LargeDecoder {
    id: u64,
    descr: Arc<ColumnDescriptor>,
    compression: Vec<Compression>,
    /// The opened dataset's cache of decoded pages, shared by its files and threads.
    pages: Option<Arc<PageCache>>,
}

impl LargeDecoder {
    pub(super) fn new(l: &LargeColumn) -> Result<LargeDecoder, crate::Unusable> {
        let repetition = if l.max_def > 0 {
            Repetition::OPTIONAL
        } else {
            Repetition::REQUIRED
        };
        let ty =
            parquet::schema::types::Type::primitive_type_builder("v", PhysicalType::BYTE_ARRAY)
                .with_repetition(repetition)
                .build()
                .map_err(|e| e.to_string())?;
        let compression = l
            .compression
            .iter()
            .map(|c| c.parse::<Compression>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        Ok(LargeDecoder {
            id: DECODERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            descr: Arc::new(ColumnDescriptor::new(
                Arc::new(ty),
                l.max_def,
                0,
                ColumnPath::new(vec!["v".into()]),
            )),
            compression,
            pages: None,
        })
    }

    /// Keep decoded pages in `pages` (the opened dataset's cache).
    pub(super) fn set_page_cache(&mut self, pages: Arc<PageCache>) {
        self.pages = Some(pages);
    }

    /// Value `k` of the rows in `bytes` (the pages at file offset `offset`, of row group `g`);
    /// `None`: a null.
    fn value(
        &self,
        bytes: &[u8],
        offset: u64,
        k: u32,
        g: u32,
    ) -> Result<Option<Vec<u8>>, crate::Unusable> {
        let key = (self.id, offset, bytes.len());
        Ok(self.page(key, bytes, offset, g)?.value(k)?)
    }

    /// The decoded rows of the pages `key` (`bytes`, checked against the index by the read that
    /// gave them): from the dataset's cache of decoded pages when it holds them, else from the
    /// pages this thread decoded last when the cache did not take them (it is off, or they are
    /// larger than its budget: a thread reading rows in order, as `verify` does, meets the rows
    /// of one page one after another), else decoded now.
    fn page(
        &self,
        key: PageKey,
        bytes: &[u8],
        offset: u64,
        g: u32,
    ) -> Result<Arc<DecodedRows>, crate::Unusable> {
        let cache = self.pages.as_deref();
        if let Some(rows) = cache.and_then(|c| c.get(key)) {
            return Ok(rows);
        }
        let last = LAST_PAGE.with(|last| {
            let last = last.borrow();
            last.as_ref()
                .filter(|(k, _)| *k == key)
                .map(|(_, rows)| Arc::clone(rows))
        });
        if let Some(rows) = last {
            if let Some(c) = cache {
                c.hit();
            }
            return Ok(rows);
        }
        let rows = Arc::new(self.rows(bytes, offset, g)?);
        let kept = cache.is_some_and(|c| c.put(key, &rows));
        // what the cache keeps is not kept twice
        LAST_PAGE.with(|last| *last.borrow_mut() = (!kept).then(|| (key, Arc::clone(&rows))));
        Ok(rows)
    }

    /// Every row's value in `bytes` (the pages at file offset `offset`, of row group `g`).
    fn rows(&self, bytes: &[u8], offset: u64, g: u32) -> Result<DecodedRows, crate::Unusable> {
        let compression = *self
            .compression
            .get(g as usize)
            .ok_or_else(|| format!("row group {g} is not in the index"))?;
        let chunk = ColumnChunkMetaData::builder(Arc::clone(&self.descr))
            .set_compression(compression)
            .set_data_page_offset(offset as i64)
            .set_total_compressed_size(bytes.len() as i64)
            .build()
            .map_err(|e| e.to_string())?;
        // the pages' headers checked before the decoder sizes anything by them
        let read = |at: u64, n: usize| {
            let lo = (at - offset) as usize;
            Ok(bytes[lo..(lo + n).min(bytes.len())].to_vec())
        };
        let end = offset + bytes.len() as u64;
        check_chunk(read, (offset, end), compression, MAX_PAGE_BYTES)
            .map_err(|(at, e)| format!("at byte {at}: {e}"))?;
        let reader = Arc::new(RecordBytes {
            base: offset,
            bytes: bytes::Bytes::copy_from_slice(bytes),
        });
        let max_def = self.descr.max_def_level();
        let run = || -> Result<Vec<Option<parquet::data_type::ByteArray>>, ParquetError> {
            let pages = SerializedPageReader::new(reader, &chunk, usize::MAX, None)?;
            let mut col =
                ColumnReaderImpl::<ByteArrayType>::new(Arc::clone(&self.descr), Box::new(pages));
            let mut rows = Vec::new();
            loop {
                let (mut defs, mut values) = (Vec::new(), Vec::new());
                let defs_out = (max_def > 0).then_some(&mut defs);
                let (records, nvalues, _) = col.read_records(1024, defs_out, None, &mut values)?;
                if records == 0 {
                    return Ok(rows);
                }
                let mut values = values.into_iter();
                if max_def == 0 {
                    rows.extend(values.by_ref().take(nvalues).map(Some));
                } else {
                    for d in defs.iter().take(records) {
                        rows.push(if *d == max_def { values.next() } else { None });
                    }
                }
            }
        };
        let rows = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
            .unwrap_or_else(|p| Err(ParquetError::General(panic_text(p.as_ref()))))
            .map_err(|e| format!("its pages do not decode: {e}"))?;
        // the values copied out of the decompressed pages, which are then let go
        let total = rows.iter().flatten().map(|v| v.len()).sum();
        Ok(DecodedRows::new(
            rows.iter().map(|v| v.as_ref().map(|v| v.data())),
            rows.len(),
            total,
        ))
    }
}

impl Drop for LargeDecoder {
    fn drop(&mut self) {
        // its file's pages are of no use to anyone else
        if let Some(c) = &self.pages {
            c.forget(self.id);
        }
    }
}

thread_local! {
    /// The pages a thread decoded last (the decoder's id, their offset and length), whether or
    /// not the dataset's cache keeps them.
    static LAST_PAGE: std::cell::RefCell<Option<(PageKey, Arc<DecodedRows>)>> = const { std::cell::RefCell::new(None) };
}

/// Decoders made (each its own id, so that a page cached for one is never served to another).
static DECODERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl RecordCodec for PqCodec {
    fn format(&self) -> &'static str {
        "Parquet"
    }

    fn cache_stats(&self) -> Option<stokehold_format::CodecCacheStats> {
        self.large.as_ref()?.pages.as_ref().map(|c| c.stats())
    }

    fn field<'a>(
        &self,
        record: u64,
        bytes: &'a [u8],
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'a>, RecordError> {
        self.value(record, schema, i, |decoder, offset, k, g| {
            decoder.value(bytes, offset, k, g)
        })
    }

    fn held(&self, record: u64) -> Option<Held> {
        let decoder = self.large.as_ref()?;
        let row = self.rows.row(record);
        let e = self.index.entries.get(row)?;
        let key = (decoder.id, e.offset, e.len as usize);
        let rows = decoder.pages.as_ref()?.peek(key)?;
        Some(Arc::new(HeldPage { key, rows }))
    }

    fn held_field(
        &self,
        record: u64,
        held: &Held,
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'static>, RecordError> {
        self.value(record, schema, i, |decoder, offset, k, _| {
            let page = held
                .downcast_ref::<HeldPage>()
                .filter(|h| h.key.0 == decoder.id && h.key.1 == offset)
                .ok_or("what was held for it is another row's")?;
            if let Some(c) = &decoder.pages {
                c.hit();
            }
            Ok(page.rows.value(k)?)
        })
    }
}

/// The decoded pages of a row that the cache held when its read was planned
/// ([`RecordCodec::held`]): the key they were held under, and the rows.
struct HeldPage {
    key: PageKey,
    rows: Arc<DecodedRows>,
}

impl PqCodec {
    /// Field `i` of `schema` of record `record`: the large column's value from `large` (given
    /// the decoder, the row's pages' offset, the row's place among their rows and its row
    /// group), the others from the index.
    fn value(
        &self,
        record: u64,
        schema: &Schema,
        i: usize,
        large: impl FnOnce(&LargeDecoder, u64, u32, u32) -> Result<Option<Vec<u8>>, crate::Unusable>,
    ) -> Result<FieldValue<'static>, RecordError> {
        let corrupt = |detail: String| RecordError::Corrupt {
            field: i,
            offset: 0,
            detail,
        };
        let row = self.rows.row(record);
        if self.index.damaged(row) {
            return Err(corrupt(
                "a column of this row could not be decoded when the file was indexed".into(),
            ));
        }
        let key = self.index.key_of(row);
        if key.len() < KEY_HEAD {
            return Err(corrupt("its index entry is short".into()));
        }
        let (source, optional) = self.fields[i];
        let ty = &schema.fields[i].ty;
        let empty = || match crate::sources::empty_value(ty).filter(|_| optional) {
            Some(v) => Ok(v),
            None => Err(corrupt(format!(
                "column {:?} is null",
                schema.fields[i].name
            ))),
        };
        let value: FieldValue<'static> = match source {
            Source::Large => {
                if key[8] & LARGE_NULL != 0 {
                    return empty();
                }
                let k = u32::from_le_bytes(key[0..4].try_into().expect("4 bytes"));
                let g = u32::from_le_bytes(key[4..8].try_into().expect("4 bytes"));
                let offset = self.index.entries[row].offset;
                let decoder = self
                    .large
                    .as_ref()
                    .ok_or_else(|| corrupt("no large column".into()))?;
                match large(decoder, offset, k, g).map_err(|e| corrupt(e.into()))? {
                    None => return empty(),
                    Some(v) => match ty {
                        FieldType::String => FieldValue::String(Cow::Owned(
                            String::from_utf8(v)
                                .map_err(|_| corrupt("a string that is not UTF-8".into()))?,
                        )),
                        FieldType::Bytes => FieldValue::Bytes(v.into()),
                        _ => FieldValue::Image(v.into()),
                    },
                }
            }
            Source::Kept(n) => {
                let nulls = self.kept.len().div_ceil(8);
                let (bitmap, rec) = key[KEY_HEAD..]
                    .split_at_checked(nulls)
                    .ok_or_else(|| corrupt("its index entry is short".into()))?;
                if bitmap[n / 8] & (1 << (n % 8)) != 0 {
                    return empty();
                }
                let view = RecordView::parse(rec, self.kept.len())?;
                match view.field(&self.kept, n, u64::MAX)?.into_owned() {
                    FieldValue::Bytes(b) if matches!(ty, FieldType::Image { .. }) => {
                        FieldValue::Image(b)
                    }
                    // a file whose list of binary was not taken for images, where the first
                    // file's was
                    FieldValue::List(items) if ty.is_image_list() => FieldValue::List(
                        items
                            .into_iter()
                            .map(|v| match v {
                                FieldValue::Bytes(b) => FieldValue::Image(b),
                                v => v,
                            })
                            .collect(),
                    ),
                    v => v,
                }
            }
        };
        Ok(value)
    }
}

/// The schema's fields of Parquet files, from their indexes, as pack chooses them: the first
/// file's columns decide the kinds and every other file must agree.
pub(super) fn choose(
    files: &[Scanned],
    fields: Option<&[crate::sources::FieldChoice]>,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<(Vec<super::Chosen>, Option<Vec<String>>), super::ChooseError> {
    let stats: Vec<PqStats> = files
        .iter()
        .map(|f| {
            serde_json::from_value(f.index.header.stats.clone()).map_err(|e| {
                super::ChooseError::Index(format!(
                    "{}: its index's statistics are not valid: {e}",
                    f.place
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let first = &stats[0];
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut rows = 0u64;
    for (f, s) in files.iter().zip(&stats) {
        for c in &first.columns {
            let Some(other) = s.columns.iter().find(|o| o.name == c.name) else {
                return Err(super::ChooseError::Input(format!(
                    "{}: no column {:?}, which {} has: every file must have the same columns",
                    f.place, c.name, files[0].place
                )));
            };
            let same = matches!(
                (c.kind, other.kind),
                (Kind::Image | Kind::Bytes, Kind::Image | Kind::Bytes)
                    | (
                        Kind::ImageList | Kind::BytesList,
                        Kind::ImageList | Kind::BytesList
                    )
            ) || c.kind == other.kind;
            if !same {
                return Err(super::ChooseError::Input(format!(
                    "{}: column {:?} is {:?} here but {:?} in {}: every file must have the same column types",
                    f.place, c.name, other.kind, c.kind, files[0].place
                )));
            }
            *counts.entry(c.name.clone()).or_default() += other.present;
        }
        rows += (0..f.index.entries.len())
            .filter(|&r| !f.index.damaged(r))
            .count() as u64;
    }
    if let Some(given) = fields {
        for g in given {
            if let Some(why) = first
                .unsupported
                .iter()
                .find(|u| u.starts_with(&format!("column {:?} ", g.name)))
            {
                return Err(super::ChooseError::Input(format!(
                    "fields: {why} cannot be read; columns of binary, string, integer, float, \
                     image and struct types and of lists of numbers, binary, strings or images can"
                )));
            }
        }
    }
    if !first.unsupported.is_empty() {
        notes.push(format!(
            "left out (no field type for them): {}",
            first.unsupported.join(", ")
        ));
    }
    let kind = |n: &str| first.columns.iter().find(|c| c.name == n).map(|c| c.kind);
    let chosen = crate::sources::choose_fields(
        &counts,
        rows,
        fields,
        |n| kind(n).is_some_and(Kind::can_be_empty),
        |n| format!("column {n:?}"),
        notes,
        source,
    )?;
    let labelled: Vec<(&String, &Vec<String>)> = chosen
        .iter()
        .filter(|c| kind(&c.name) == Some(Kind::Int))
        .filter_map(|c| first.classes.get_key_value(&c.name))
        .collect();
    let classes = match <[_; 1]>::try_from(labelled) {
        Ok([(name, names)]) => {
            source.insert("class_column".into(), name.clone().into());
            Some(names.clone())
        }
        Err(_) => None,
    };
    let chosen = super::Chosen::typed(chosen, |n| {
        kind(n).map_or(FieldType::Bytes, Kind::field_type)
    });
    Ok((chosen, classes))
}

/// Per chosen list of images kept in the index, each row's items and their sizes, read from the
/// images' headers (what a shard's meta block keeps, for `Dataset::image_sizes`): a row that is
/// damaged or null has none. A list whose items do not all give a size, or that has more than a
/// shard may, gets no table (its sizes are unknown: `None`).
fn list_tables(
    ix: &FileIndex,
    kept: &Schema,
    fields: &[(Source, bool)],
    chosen: &[super::Chosen],
) -> BTreeMap<String, ListTable> {
    let mut out = BTreeMap::new();
    let nulls = kept.fields.len().div_ceil(8);
    for (c, &(src, _)) in chosen.iter().zip(fields) {
        let Source::Kept(n) = src else { continue };
        if !kept.fields[n].ty.is_image_list() {
            continue;
        }
        let table = (|| {
            let (mut counts, mut sizes) = (Vec::with_capacity(ix.entries.len()), Vec::new());
            for r in 0..ix.entries.len() {
                let key = ix.key_of(r);
                let null = key
                    .get(KEY_HEAD + n / 8)
                    .is_none_or(|b| b & (1 << (n % 8)) != 0);
                if ix.damaged(r) || null {
                    counts.push(0);
                    continue;
                }
                let rec = key.get(KEY_HEAD + nulls..)?;
                let view = RecordView::parse(rec, kept.fields.len()).ok()?;
                let FieldValue::List(items) = view.field(kept, n, u64::MAX).ok()? else {
                    return None;
                };
                for item in &items {
                    let FieldValue::Image(b) = item else {
                        return None;
                    };
                    let (w, h) = stokehold_format::image_size::image_size(b).ok()?;
                    sizes.extend([w, h]);
                }
                counts.push(u32::try_from(items.len()).ok()?);
            }
            ListTable::new(counts, Some(sizes)).ok()
        })();
        if let Some(t) = table {
            out.insert(c.name.clone(), t);
        }
    }
    out
}

/// What [`codec`] makes of one file.
pub(super) struct FileCodec {
    /// Its rows (every one is a sample: one that lacks a required field, or is damaged, fails
    /// when read, named).
    pub rows: Vec<u32>,
    /// The codec for the chosen fields.
    pub codec: PqCodec,
    /// The rows that lack a required field (not damaged ones).
    pub lacking: Vec<u64>,
    /// The tables of its lists of images ([`list_tables`]).
    pub lists: BTreeMap<String, ListTable>,
}

/// The codec of one file for the chosen fields, and what goes with it ([`FileCodec`]).
pub(super) fn codec(s: &Scanned, chosen: &[super::Chosen]) -> Result<FileCodec, crate::Unusable> {
    let ix = &s.index;
    let stats: PqStats = serde_json::from_value(ix.header.stats.clone())
        .map_err(|e| format!("{}: its index's statistics are not valid: {e}", s.place))?;
    let large = stats.large.as_ref().map(|l| l.column);
    let kept: Vec<usize> = (0..stats.columns.len())
        .filter(|&j| Some(j) != large)
        .collect();
    let kept_schema = kept_schema(&stats, &kept)?;
    let mut fields = Vec::with_capacity(chosen.len());
    for c in chosen {
        let j = stats
            .columns
            .iter()
            .position(|col| col.name == c.name)
            .ok_or_else(|| format!("{}: no column {:?}", s.place, c.name))?;
        let src = match kept.iter().position(|&k| k == j) {
            Some(n) => Source::Kept(n),
            None => Source::Large,
        };
        fields.push((src, c.optional));
    }
    let present = |r: usize, src: Source| {
        let key = ix.key_of(r);
        match src {
            Source::Large => key.get(8).is_some_and(|f| f & LARGE_NULL == 0),
            Source::Kept(n) => key
                .get(KEY_HEAD + n / 8)
                .is_some_and(|b| b & (1 << (n % 8)) == 0),
        }
    };
    let lacking: Vec<u64> = (0..ix.entries.len())
        .filter(|&r| !ix.damaged(r) && !fields.iter().all(|&(src, opt)| opt || present(r, src)))
        .map(|r| r as u64)
        .collect();
    let rows: Vec<u32> = (0..ix.entries.len() as u32).collect();
    let decoder = stats.large.as_ref().map(LargeDecoder::new).transpose()?;
    let lists = list_tables(ix, &kept_schema, &fields, chosen);
    let n = rows.len();
    let codec = PqCodec {
        index: Arc::clone(ix),
        rows: Rows((n < ix.entries.len()).then(|| rows.clone())),
        fields,
        kept: kept_schema,
        large: decoder,
    };
    Ok(FileCodec {
        rows,
        codec,
        lacking,
        lists,
    })
}
