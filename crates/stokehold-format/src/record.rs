//! Record encoding: how one sample's field values become the bytes of one record, and how a
//! record's bytes are read back without copying.
//!
//! ```text
//! record  := ends payload
//! ends    := u32 LE × nfields      end of each field's bytes, relative to the start of payload
//! payload := field bytes, concatenated in schema order
//! ```
//! Field bytes by type (before optional zstd): `bytes`, `string`, `image`: the bytes themselves;
//! `int64`, `float64`: 8 bytes little-endian; `ndarray`: `u32 ndim, u32 0, u64 dims[ndim]`, then
//! the elements, little-endian, C order; `list`: `u32 count, u32 ends[count]`, then the items'
//! bytes concatenated (item *k* is `[ends[k-1], ends[k])` of them). A zstd-compressed field
//! holds one zstd frame of those bytes, with the decompressed size in the frame header.

use std::borrow::Cow;

use crate::schema::{
    Compression, DType, FieldType, ImageCodec, ListItem, MAX_LIST_ITEMS, MAX_NDIM, Schema,
};

/// The value of one field, borrowed from a record where possible.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue<'a> {
    /// Opaque bytes.
    Bytes(Cow<'a, [u8]>),
    /// A UTF-8 string.
    String(Cow<'a, str>),
    /// A signed 64-bit integer.
    Int64(i64),
    /// A 64-bit float.
    Float64(f64),
    /// An n-d array.
    Array(ArrayValue<'a>),
    /// An encoded image's bytes.
    Image(Cow<'a, [u8]>),
    /// The items of a `list` field: each a [`FieldValue::Bytes`], [`FieldValue::String`] or
    /// [`FieldValue::Image`], as the list's item type says.
    List(Vec<FieldValue<'a>>),
}

/// An n-d array: dtype, shape and little-endian elements in C order.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayValue<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape; the product times `dtype.size()` equals `data.len()`.
    pub shape: Vec<u64>,
    /// The elements, little-endian, C order.
    pub data: Cow<'a, [u8]>,
}

impl FieldValue<'_> {
    /// The value with everything it borrows copied.
    pub fn into_owned(self) -> FieldValue<'static> {
        match self {
            FieldValue::Bytes(b) => FieldValue::Bytes(Cow::Owned(b.into_owned())),
            FieldValue::String(s) => FieldValue::String(Cow::Owned(s.into_owned())),
            FieldValue::Int64(v) => FieldValue::Int64(v),
            FieldValue::Float64(v) => FieldValue::Float64(v),
            FieldValue::Array(a) => FieldValue::Array(ArrayValue {
                dtype: a.dtype,
                shape: a.shape,
                data: Cow::Owned(a.data.into_owned()),
            }),
            FieldValue::Image(b) => FieldValue::Image(Cow::Owned(b.into_owned())),
            FieldValue::List(items) => {
                FieldValue::List(items.into_iter().map(FieldValue::into_owned).collect())
            }
        }
    }

    /// A short name of the value's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            FieldValue::Bytes(_) => "bytes",
            FieldValue::String(_) => "string",
            FieldValue::Int64(_) => "int64",
            FieldValue::Float64(_) => "float64",
            FieldValue::Array(_) => "ndarray",
            FieldValue::Image(_) => "image",
            FieldValue::List(_) => "list",
        }
    }
}

pub use crate::error::RecordError;

/// Encodes records for one schema, reusing its buffers between records.
#[derive(Debug)]
pub struct RecordEncoder {
    zstd_level: i32,
    scratch: Vec<u8>,
}

impl RecordEncoder {
    /// An encoder that compresses zstd fields at `zstd_level` (1..=22; 3 is zstd's default).
    pub fn new(zstd_level: i32) -> RecordEncoder {
        RecordEncoder {
            zstd_level,
            scratch: Vec::new(),
        }
    }

    /// Encode `values` (one per schema field, in order) into `out` (cleared first).
    pub fn encode(
        &mut self,
        schema: &Schema,
        values: &[FieldValue<'_>],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        if values.len() != schema.fields.len() {
            return Err(RecordError::Mismatch {
                field: String::from("<record>"),
                detail: format!(
                    "{} values given for a schema of {} fields",
                    values.len(),
                    schema.fields.len()
                ),
            });
        }
        out.clear();
        let n = values.len();
        out.reserve(4 * n + values.iter().map(plain_size_hint).sum::<usize>());
        out.resize(4 * n, 0);
        for (i, (field, value)) in schema.fields.iter().zip(values).enumerate() {
            let start = out.len();
            match field.compression {
                Compression::None => encode_plain(&field.ty, &field.name, value, out)?,
                Compression::Zstd => {
                    self.scratch.clear();
                    encode_plain(&field.ty, &field.name, value, &mut self.scratch)?;
                    let frame =
                        zstd::bulk::compress(&self.scratch, self.zstd_level).map_err(|e| {
                            RecordError::Mismatch {
                                field: field.name.clone(),
                                detail: format!("zstd compression failed: {e}"),
                            }
                        })?;
                    out.extend_from_slice(&frame);
                }
            }
            let end = out.len() - 4 * n;
            let end = u32::try_from(end).map_err(|_| RecordError::Mismatch {
                field: field.name.clone(),
                detail: format!("record grows past 4 GiB (field starts at byte {start})"),
            })?;
            out[4 * i..4 * i + 4].copy_from_slice(&end.to_le_bytes());
        }
        Ok(())
    }
}

/// The encoded size of a value before compression (exact for every type).
fn plain_size_hint(v: &FieldValue<'_>) -> usize {
    match v {
        FieldValue::Bytes(b) | FieldValue::Image(b) => b.len(),
        FieldValue::String(s) => s.len(),
        FieldValue::Int64(_) | FieldValue::Float64(_) => 8,
        FieldValue::Array(a) => 8 + 8 * a.shape.len() + a.data.len(),
        FieldValue::List(items) => 4 + items.iter().map(|v| 4 + plain_size_hint(v)).sum::<usize>(),
    }
}

fn mismatch(name: &str, ty: &FieldType, value: &FieldValue<'_>) -> RecordError {
    RecordError::Mismatch {
        field: name.to_string(),
        detail: format!("expected a value of type {ty}, got {}", value.kind()),
    }
}

fn encode_plain(
    ty: &FieldType,
    name: &str,
    value: &FieldValue<'_>,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    match (ty, value) {
        (FieldType::Bytes, FieldValue::Bytes(b)) => out.extend_from_slice(b),
        (FieldType::String, FieldValue::String(s)) => out.extend_from_slice(s.as_bytes()),
        // checked and made canonical: the bytes stored are one JSON value's canonical text
        (FieldType::Json, FieldValue::String(s)) => {
            let text = crate::json::canonical(s.as_bytes()).map_err(|e| RecordError::Mismatch {
                field: name.to_string(),
                detail: format!("not one JSON value: {e}"),
            })?;
            out.extend_from_slice(text.as_bytes())
        }
        // a video's bytes must be a video value: its frame index checked against its container
        (FieldType::Video, FieldValue::Bytes(b)) => {
            crate::video::parse_video(b)
                .and_then(|v| crate::video::check_intervals(&v))
                .map_err(|e| RecordError::Mismatch {
                    field: name.to_string(),
                    detail: format!("not a video value: {e}"),
                })?;
            out.extend_from_slice(b)
        }
        (FieldType::Int64, FieldValue::Int64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (FieldType::Float64, FieldValue::Float64(v)) => out.extend_from_slice(&v.to_le_bytes()),
        (FieldType::Image { codec }, FieldValue::Image(b)) => {
            if *codec != ImageCodec::Auto && ImageCodec::sniff(b) != Some(*codec) {
                return Err(RecordError::Mismatch {
                    field: name.to_string(),
                    detail: format!(
                        "the bytes are not {} (they start with {:?})",
                        codec.name(),
                        b[..b.len().min(8)].escape_ascii().to_string()
                    ),
                });
            }
            out.extend_from_slice(b)
        }
        (FieldType::Ndarray { dtype }, FieldValue::Array(a)) => {
            if a.dtype != *dtype {
                return Err(RecordError::Mismatch {
                    field: name.to_string(),
                    detail: format!(
                        "array of {} given for a field of {}",
                        a.dtype.name(),
                        dtype.name()
                    ),
                });
            }
            let expected = array_bytes(&a.shape, *dtype);
            if a.shape.len() > MAX_NDIM || expected != Some(a.data.len() as u64) {
                return Err(RecordError::Mismatch {
                    field: name.to_string(),
                    detail: format!(
                        "shape {:?} of {} needs {:?} bytes, {} given (at most {MAX_NDIM} dimensions)",
                        a.shape,
                        dtype.name(),
                        expected,
                        a.data.len()
                    ),
                });
            }
            out.extend_from_slice(&(a.shape.len() as u32).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            for d in &a.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&a.data);
        }
        (FieldType::List { item }, FieldValue::List(items)) => {
            if items.len() > MAX_LIST_ITEMS {
                return Err(RecordError::Mismatch {
                    field: name.to_string(),
                    detail: format!("a list of {} items (at most {MAX_LIST_ITEMS})", items.len()),
                });
            }
            let item_ty = item.field_type();
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            let table = out.len();
            out.resize(table + 4 * items.len(), 0);
            let base = out.len();
            for (k, v) in items.iter().enumerate() {
                let item_name = format!("{name}[{k}]");
                if let (ListItem::Image { .. }, FieldValue::Image(b)) = (item, v) {
                    // its size is what a list of images keeps: an image without one is refused
                    crate::image_size::image_size(b).map_err(|e| RecordError::Mismatch {
                        field: item_name.clone(),
                        detail: e.to_string(),
                    })?;
                }
                encode_plain(&item_ty, &item_name, v, out)?;
                let end = u32::try_from(out.len() - base).map_err(|_| RecordError::Mismatch {
                    field: item_name,
                    detail: "a list grows past 4 GiB".into(),
                })?;
                out[table + 4 * k..table + 4 * k + 4].copy_from_slice(&end.to_le_bytes());
            }
        }
        _ => return Err(mismatch(name, ty, value)),
    }
    Ok(())
}

/// What is wrong with a `list` field's bytes ([`list_items`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ListError {
    /// Fewer than the 4 bytes of the count.
    #[error("a list's count needs 4 bytes, found {found}")]
    NoCount {
        /// The bytes there are.
        found: usize,
    },
    /// A count over [`MAX_LIST_ITEMS`].
    #[error("a list of {count} items, over the limit of {}", MAX_LIST_ITEMS)]
    TooMany {
        /// The count.
        count: usize,
    },
    /// Fewer bytes than the count and its table of ends take.
    #[error("a list of {count} items needs a table of {need} bytes, found {found}")]
    TableCut {
        /// The count.
        count: usize,
        /// The bytes of the count and the table.
        need: usize,
        /// The bytes there are.
        found: usize,
    },
    /// An item's end before the previous item's or past the items' bytes.
    #[error("item {k} of the list ends at {end}, outside {prev}..={body} (at byte {at})")]
    ItemEnd {
        /// The item.
        k: usize,
        /// Its end.
        end: usize,
        /// The previous item's end.
        prev: usize,
        /// The bytes of items.
        body: usize,
        /// The byte of the end in the list's bytes.
        at: usize,
    },
    /// The last item ends before the items' bytes do.
    #[error("the list's items end at {end} but it has {body} bytes of items")]
    ItemsEnd {
        /// The last item's end.
        end: usize,
        /// The bytes of items.
        body: usize,
    },
}

/// The items of a `list` field's bytes `data`: their table checked (the count against
/// [`MAX_LIST_ITEMS`] and the bytes there are before anything is allocated, the ends in order and
/// within the bytes), each item's byte range within `data`.
pub fn list_items(data: &[u8]) -> Result<Vec<std::ops::Range<usize>>, ListError> {
    if data.len() < 4 {
        return Err(ListError::NoCount { found: data.len() });
    }
    let count = read_u32(data, 0) as usize;
    if count > MAX_LIST_ITEMS {
        return Err(ListError::TooMany { count });
    }
    let base = 4 + 4 * count;
    if data.len() < base {
        return Err(ListError::TableCut {
            count,
            need: base,
            found: data.len(),
        });
    }
    let body = data.len() - base;
    let mut ranges = Vec::with_capacity(count);
    let mut prev = 0usize;
    for k in 0..count {
        let end = read_u32(data, 4 + 4 * k) as usize;
        if end < prev || end > body {
            return Err(ListError::ItemEnd {
                k,
                end,
                prev,
                body,
                at: 4 + 4 * k,
            });
        }
        ranges.push(base + prev..base + end);
        prev = end;
    }
    if prev != body {
        return Err(ListError::ItemsEnd { end: prev, body });
    }
    Ok(ranges)
}

/// Bytes of an array of `shape` and `dtype`, or None on overflow.
pub fn array_bytes(shape: &[u64], dtype: DType) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d))
}

/// The decoder of records that are not stokehold records: the records of files read in place
/// (a TFRecord file's `tf.train.Example`s, a WebDataset tar's samples), which the opener of such
/// files gives each of their shards ([`crate::ShardReader::in_place`]). Sans I/O: it decodes
/// the bytes of one record, as its index entry located them.
pub trait RecordCodec: Send + Sync + std::fmt::Debug {
    /// The name of the files' format, for messages ("TFRecord", "WebDataset tar").
    fn format(&self) -> &'static str;

    /// The checksum of record `record`'s bytes that its index entry stores: CRC-32C of the bytes
    /// unless the format checks something else (a tar sample: the CRC-32C of its members' data,
    /// not of the headers between them).
    fn checksum(&self, record: u64, bytes: &[u8]) -> u32 {
        let _ = record;
        crate::crc::crc32c(bytes)
    }

    /// Decode field `i` of `schema` from the bytes of record `record` of the shard (borrowing
    /// from them where the value is stored as is). Errors say what is wrong and where in the
    /// record's bytes ([`RecordError::Corrupt`]).
    fn field<'a>(
        &self,
        record: u64,
        bytes: &'a [u8],
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'a>, RecordError>;

    /// Whether one field of a record is decoded from the record's bytes without the work of
    /// the others, so that reading a small record whole for one field is worth it
    /// ([`crate::ShardReader::field_from_prefix`]): JSONL, whose `list:image` fields read the
    /// image files a line lists, which a conversation's field does not need.
    fn fields_apart(&self) -> bool {
        false
    }

    /// Field `i` (a `video`) of record `record` as the head of its value and the file that holds
    /// its container, when the codec reads the value from a file of its own (a JSONL table of
    /// videos read in place): a reader that needs only some of the container's packets (a clip)
    /// reads only those ([`VideoFile`]). `None`: the value is read whole by
    /// [`RecordCodec::field`].
    fn video_file(
        &self,
        record: u64,
        bytes: &[u8],
        schema: &Schema,
        i: usize,
    ) -> Option<Result<VideoFile, RecordError>> {
        let _ = (record, bytes, schema, i);
        None
    }

    /// What the codec keeps of decoded data between reads (Parquet: the decoded pages that the
    /// shards of a dataset share), for statistics; `None` when it keeps nothing.
    fn cache_stats(&self) -> Option<CodecCacheStats> {
        None
    }

    /// What the codec holds already decoded for record `record`, when it does (Parquet: the
    /// rows of the record's pages, decoded for another row and still in the dataset's cache of
    /// decoded pages). The record's fields then come from it ([`RecordCodec::held_field`])
    /// without its bytes: a reader may skip reading them. What is held was decoded from bytes
    /// that matched the record's checksum; holding it keeps it alive whatever the cache
    /// evicts meanwhile.
    fn held(&self, record: u64) -> Option<Held> {
        let _ = record;
        None
    }

    /// Field `i` of `schema` of record `record`, from what [`RecordCodec::held`] gave for it.
    fn held_field(
        &self,
        record: u64,
        held: &Held,
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'static>, RecordError> {
        let _ = (record, held, schema);
        Err(RecordError::Corrupt {
            field: i,
            offset: 0,
            detail: "this format holds nothing decoded".into(),
        })
    }
}

/// A `video` value whose container is a file of its own ([`RecordCodec::video_file`]): the
/// value is `head` followed by the file's `size` bytes, as [`RecordCodec::field`] reads it.
#[derive(Debug, Clone)]
pub struct VideoFile {
    /// The value's header and frame index (format.md §3), kept when the file was indexed.
    pub head: Vec<u8>,
    /// Where the file is read from (the table's folder, local or in object storage).
    pub files: std::sync::Arc<dyn crate::NamedFiles>,
    /// Its name there.
    pub name: String,
    /// Its size when it was indexed.
    pub size: u64,
    /// The record, field and file in words, for messages (`line 3: key "video": clips/a.mp4`).
    pub what: String,
}

impl VideoFile {
    /// Why a video file of `got` bytes (more than `size` when `got > size`) is not the one
    /// indexed with `size` bytes.
    pub fn changed(got: u64, size: u64) -> String {
        format!(
            "it is {} bytes, {size} when indexed: it changed since (index the files again: \
             `stokehold index --rebuild`)",
            if got > size {
                format!("more than {size}")
            } else {
                got.to_string()
            }
        )
    }
}

/// What a [`RecordCodec`] holds decoded for a record ([`RecordCodec::held`]): opaque to all but
/// the codec that gave it.
pub type Held = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// What a [`RecordCodec`]'s cache of decoded data has done and holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CodecCacheStats {
    /// Reads served from what it held.
    pub hits: u64,
    /// Reads that decoded (not held, or past the budget).
    pub misses: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// Most bytes held at once.
    pub peak: u64,
    /// The byte budget (0: off).
    pub budget: u64,
    /// Entries held now.
    pub entries: u64,
}

/// A record's fields, however the record is framed: a stokehold record ([`RecordView`]) or one
/// of files read in place, decoded by their [`RecordCodec`].
#[derive(Debug, Clone, Copy)]
pub enum RecordFields<'a> {
    /// A stokehold record.
    Native(RecordView<'a>),
    /// A record of files read in place.
    Foreign {
        /// The decoder of the files' records.
        codec: &'a dyn RecordCodec,
        /// The record's index in its shard.
        record: u64,
        /// Its bytes.
        bytes: &'a [u8],
    },
    /// A record of files read in place whose codec holds it decoded ([`RecordCodec::held`]):
    /// its bytes were not read.
    Held {
        /// The decoder of the files' records.
        codec: &'a dyn RecordCodec,
        /// The record's index in its shard.
        record: u64,
        /// What the codec gave for it.
        held: &'a Held,
    },
}

impl<'a> RecordFields<'a> {
    /// Decode field `i` of `schema` (see [`RecordView::field`]).
    pub fn field(
        &self,
        schema: &Schema,
        i: usize,
        max_decompressed: u64,
    ) -> Result<FieldValue<'a>, RecordError> {
        match self {
            RecordFields::Native(v) => v.field(schema, i, max_decompressed),
            RecordFields::Foreign {
                codec,
                record,
                bytes,
            } => codec.field(*record, bytes, schema, i),
            RecordFields::Held {
                codec,
                record,
                held,
            } => codec.held_field(*record, held, schema, i),
        }
    }

    /// Decode every field.
    pub fn fields(
        &self,
        schema: &Schema,
        max_decompressed: u64,
    ) -> Result<Vec<FieldValue<'a>>, RecordError> {
        (0..schema.len())
            .map(|i| self.field(schema, i, max_decompressed))
            .collect()
    }
}

/// A record's bytes, checked and split into fields, without copying.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
    nfields: usize,
}

impl<'a> RecordView<'a> {
    /// Check the field table of `bytes` against a schema of `nfields` fields.
    pub fn parse(bytes: &'a [u8], nfields: usize) -> Result<RecordView<'a>, RecordError> {
        let table = 4 * nfields as u64;
        if (bytes.len() as u64) < table {
            return Err(RecordError::Corrupt {
                field: nfields,
                offset: 0,
                detail: format!(
                    "the field table needs {table} bytes, the record has {}",
                    bytes.len()
                ),
            });
        }
        let payload = bytes.len() as u64 - table;
        let prev = check_ends(bytes, nfields, payload)?;
        if prev != payload {
            return Err(RecordError::Corrupt {
                field: nfields,
                offset: table,
                detail: format!(
                    "the fields end at {prev} but the record has {payload} payload bytes"
                ),
            });
        }
        Ok(RecordView { bytes, nfields })
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.nfields
    }

    /// True when the schema has no fields (never, for a valid schema).
    pub fn is_empty(&self) -> bool {
        self.nfields == 0
    }

    /// The stored bytes of field `i` (still compressed, if the field is), and their offset within
    /// the record. Panics if `i >= len()`.
    pub fn raw(&self, i: usize) -> (&'a [u8], usize) {
        assert!(i < self.nfields, "field {i} of {}", self.nfields);
        let base = 4 * self.nfields;
        let start = if i == 0 {
            0
        } else {
            read_u32(self.bytes, 4 * (i - 1)) as usize
        };
        let end = read_u32(self.bytes, 4 * i) as usize;
        (&self.bytes[base + start..base + end], base + start)
    }

    /// Decode field `i` of `schema`: decompress if needed (at most `max_decompressed` bytes),
    /// check UTF-8, sizes and shapes. Borrows from the record when the field is not compressed.
    pub fn field(
        &self,
        schema: &Schema,
        i: usize,
        max_decompressed: u64,
    ) -> Result<FieldValue<'a>, RecordError> {
        let field = &schema.fields[i];
        let (raw, offset) = self.raw(i);
        let corrupt = |e: DecodeError| RecordError::Corrupt {
            field: i,
            offset: offset as u64,
            detail: e.to_string(),
        };
        let data: Cow<'a, [u8]> = match field.compression {
            Compression::None => Cow::Borrowed(raw),
            Compression::Zstd => Cow::Owned(decompress(raw, max_decompressed).map_err(corrupt)?),
        };
        decode_plain(&field.ty, data).map_err(corrupt)
    }

    /// Decode every field.
    pub fn fields(
        &self,
        schema: &Schema,
        max_decompressed: u64,
    ) -> Result<Vec<FieldValue<'a>>, RecordError> {
        (0..self.nfields)
            .map(|i| self.field(schema, i, max_decompressed))
            .collect()
    }
}

/// Field `i` of a record of `record_len` bytes from a `prefix` of it (its first bytes), when the
/// prefix holds the field table and the field whole: `Ok(None)` when it does not (read more).
/// The table's ends up to field `i` are checked as [`RecordView::parse`] checks them; the rest of
/// the record is not (nor its checksum, which covers bytes not read): for a planner that needs
/// one small field of large records (the text of a conversation beside its images).
pub fn field_from_prefix<'a>(
    prefix: &'a [u8],
    record_len: u64,
    schema: &Schema,
    i: usize,
    max_decompressed: u64,
) -> Result<Option<FieldValue<'a>>, RecordError> {
    let nfields = schema.len();
    let table = 4 * nfields;
    if i >= nfields || prefix.len() < table {
        return Ok(None);
    }
    let payload = record_len.saturating_sub(table as u64);
    let prev = check_ends(prefix, i + 1, payload)?;
    let start = if i == 0 {
        0
    } else {
        read_u32(prefix, 4 * (i - 1)) as usize
    };
    let end = table + prev as usize;
    if end > prefix.len() {
        return Ok(None);
    }
    let raw = &prefix[table + start..end];
    let corrupt = |e: DecodeError| RecordError::Corrupt {
        field: i,
        offset: (table + start) as u64,
        detail: e.to_string(),
    };
    let field = &schema.fields[i];
    let data: Cow<'a, [u8]> = match field.compression {
        Compression::None => Cow::Borrowed(raw),
        Compression::Zstd => Cow::Owned(decompress(raw, max_decompressed).map_err(corrupt)?),
    };
    decode_plain(&field.ty, data).map(Some).map_err(corrupt)
}

/// Check the first `n` entries of a record's field table (`bytes` holds them): each end at or
/// after the one before and within the `payload` bytes. Returns the last end.
fn check_ends(bytes: &[u8], n: usize, payload: u64) -> Result<u64, RecordError> {
    let mut prev = 0u64;
    for i in 0..n {
        let end = u64::from(read_u32(bytes, 4 * i));
        if end < prev || end > payload {
            return Err(RecordError::Corrupt {
                field: i,
                offset: 4 * i as u64,
                detail: format!(
                    "field end {end} is outside {prev}..={payload} (the bytes left for it)"
                ),
            });
        }
        prev = end;
    }
    Ok(prev)
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// What is wrong with one field's stored bytes (the reader adds the field and its offset: see
/// [`RecordError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
enum DecodeError {
    /// The zstd frame's header does not give the decompressed size.
    #[error("zstd frame does not state its decompressed size")]
    ZstdNoSize,
    /// Not a zstd frame.
    #[error("not a valid zstd frame header")]
    ZstdHeader,
    /// A decompressed size over the limit (nothing was allocated).
    #[error("zstd frame claims {size} decompressed bytes, over the limit of {max}")]
    ZstdOverLimit { size: u64, max: u64 },
    /// The frame does not decompress.
    #[error("zstd decompression failed: {0}")]
    Zstd(#[source] std::io::Error),
    /// The frame decompresses to another size than its header says.
    #[error("zstd frame claims {size} bytes but holds {found}")]
    ZstdSize { size: u64, found: usize },
    /// A list's table.
    #[error(transparent)]
    List(#[from] ListError),
    /// One item of a list.
    #[error("item {k}: {source}")]
    Item { k: usize, source: Box<DecodeError> },
    /// A string that is not UTF-8.
    #[error(transparent)]
    Utf8(#[from] std::str::Utf8Error),
    /// An `int64` or `float64` of other than 8 bytes.
    #[error("a {ty} takes 8 bytes, found {found}")]
    Scalar { ty: FieldType, found: usize },
    /// An array shorter than its header.
    #[error("array header needs 8 bytes, found {found}")]
    ArrayHeader { found: usize },
    /// An array of more than [`MAX_NDIM`] dimensions.
    #[error("array has {ndim} dimensions, at most {} allowed", MAX_NDIM)]
    ArrayDims { ndim: usize },
    /// An array shorter than its header's dimensions.
    #[error("array header of {ndim} dimensions needs {need} bytes, found {found}")]
    ArrayShape {
        ndim: usize,
        need: usize,
        found: usize,
    },
    /// An array whose elements' bytes are not its shape's.
    #[error("shape {shape:?} of {} does not match the {body} bytes of data", .dtype.name())]
    ArrayBytes {
        shape: Vec<u64>,
        dtype: DType,
        body: u64,
    },
}

/// Decompress one zstd frame whose header states its size, refusing sizes over `max` before
/// allocating anything.
fn decompress(frame: &[u8], max: u64) -> Result<Vec<u8>, DecodeError> {
    let size = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) => n,
        Ok(None) => return Err(DecodeError::ZstdNoSize),
        Err(_) => return Err(DecodeError::ZstdHeader),
    };
    if size > max {
        return Err(DecodeError::ZstdOverLimit { size, max });
    }
    let out = zstd::bulk::decompress(frame, size as usize).map_err(DecodeError::Zstd)?;
    if out.len() as u64 != size {
        return Err(DecodeError::ZstdSize {
            size,
            found: out.len(),
        });
    }
    Ok(out)
}

fn decode_plain<'a>(ty: &FieldType, data: Cow<'a, [u8]>) -> Result<FieldValue<'a>, DecodeError> {
    Ok(match ty {
        FieldType::List { item } => {
            let ranges = list_items(&data)?;
            let item_ty = item.field_type();
            let mut items = Vec::with_capacity(ranges.len());
            for (k, r) in ranges.into_iter().enumerate() {
                let part = match &data {
                    Cow::Borrowed(b) => {
                        let b: &'a [u8] = b;
                        Cow::Borrowed(&b[r])
                    }
                    Cow::Owned(v) => Cow::Owned(v[r].to_vec()),
                };
                items.push(decode_plain(&item_ty, part).map_err(|e| DecodeError::Item {
                    k,
                    source: Box::new(e),
                })?);
            }
            FieldValue::List(items)
        }
        FieldType::Bytes | FieldType::Video => FieldValue::Bytes(data),
        FieldType::Image { .. } => FieldValue::Image(data),
        FieldType::String | FieldType::Json => FieldValue::String(match data {
            Cow::Borrowed(b) => Cow::Borrowed(std::str::from_utf8(b)?),
            Cow::Owned(v) => Cow::Owned(String::from_utf8(v).map_err(|e| e.utf8_error())?),
        }),
        FieldType::Int64 | FieldType::Float64 => {
            let arr: [u8; 8] = data.as_ref().try_into().map_err(|_| DecodeError::Scalar {
                ty: ty.clone(),
                found: data.len(),
            })?;
            match ty {
                FieldType::Int64 => FieldValue::Int64(i64::from_le_bytes(arr)),
                _ => FieldValue::Float64(f64::from_le_bytes(arr)),
            }
        }
        FieldType::Ndarray { dtype } => {
            if data.len() < 8 {
                return Err(DecodeError::ArrayHeader { found: data.len() });
            }
            let ndim = read_u32(&data, 0) as usize;
            if ndim > MAX_NDIM {
                return Err(DecodeError::ArrayDims { ndim });
            }
            let head = 8 + 8 * ndim;
            if data.len() < head {
                return Err(DecodeError::ArrayShape {
                    ndim,
                    need: head,
                    found: data.len(),
                });
            }
            let shape: Vec<u64> = (0..ndim).map(|k| read_u64(&data, 8 + 8 * k)).collect();
            let body = (data.len() - head) as u64;
            if array_bytes(&shape, *dtype) != Some(body) {
                return Err(DecodeError::ArrayBytes {
                    shape,
                    dtype: *dtype,
                    body,
                });
            }
            let elems = match data {
                Cow::Borrowed(b) => Cow::Borrowed(&b[head..]),
                Cow::Owned(mut v) => {
                    v.drain(..head);
                    Cow::Owned(v)
                }
            };
            FieldValue::Array(ArrayValue {
                dtype: *dtype,
                shape,
                data: elems,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::from_specs([
            ("raw", "bytes"),
            ("text", "string+zstd"),
            ("n", "int64"),
            ("x", "float64"),
            ("arr", "ndarray:f32"),
            ("carr", "ndarray:i64+zstd"),
            ("img", "image:jpeg"),
        ])
        .unwrap()
    }

    fn values() -> Vec<FieldValue<'static>> {
        let f: Vec<u8> = [1.5f32, -2.0, 3.25, 0.0, 7.0, 8.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i: Vec<u8> = (0i64..100).flat_map(|v| v.to_le_bytes()).collect();
        vec![
            FieldValue::Bytes(Cow::Owned(vec![0, 1, 2, 255])),
            FieldValue::String(Cow::Owned("héllo wörld ".repeat(20))),
            FieldValue::Int64(-42),
            FieldValue::Float64(0.125),
            FieldValue::Array(ArrayValue {
                dtype: DType::F32,
                shape: vec![2, 3],
                data: Cow::Owned(f),
            }),
            FieldValue::Array(ArrayValue {
                dtype: DType::I64,
                shape: vec![100],
                data: Cow::Owned(i),
            }),
            FieldValue::Image(Cow::Owned(vec![0xFF, 0xD8, 0xFF, 0xE0, 9, 9])),
        ]
    }

    #[test]
    fn a_field_is_read_from_a_prefix_that_holds_it_and_only_then() {
        let s = schema();
        let mut out = Vec::new();
        RecordEncoder::new(3)
            .encode(&s, &values(), &mut out)
            .unwrap();
        let len = out.len() as u64;
        let view = RecordView::parse(&out, s.len()).unwrap();
        for i in 0..s.len() {
            let (raw, at) = view.raw(i);
            let need = at + raw.len();
            // the whole prefix up to the field's end gives it (compressed fields decompressed)
            let got = field_from_prefix(&out[..need], len, &s, i, 1 << 20).unwrap();
            assert_eq!(got, Some(values()[i].clone()), "field {i}");
            // a byte less, or less than the field table: read more
            assert_eq!(
                field_from_prefix(&out[..need - 1], len, &s, i, 1 << 20).unwrap(),
                None
            );
            assert_eq!(
                field_from_prefix(&out[..3], len, &s, i, 1 << 20).unwrap(),
                None
            );
        }
        // a field end past the record, or before the one before it: corrupt, naming the field
        let mut bad = out.clone();
        bad[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            field_from_prefix(&bad, len, &s, 1, 1 << 20),
            Err(RecordError::Corrupt { field: 1, .. })
        ));
        let mut bad = out.clone();
        bad[4..8].copy_from_slice(&0u32.to_le_bytes());
        bad[0..4].copy_from_slice(&3u32.to_le_bytes());
        assert!(field_from_prefix(&bad, len, &s, 2, 1 << 20).is_err());
    }

    #[test]
    fn round_trip_every_type() {
        let s = schema();
        let mut out = Vec::new();
        RecordEncoder::new(3)
            .encode(&s, &values(), &mut out)
            .unwrap();
        let view = RecordView::parse(&out, s.len()).unwrap();
        assert_eq!(view.fields(&s, 1 << 20).unwrap(), values());
        // uncompressed fields borrow from the record
        assert!(matches!(
            view.field(&s, 0, 0).unwrap(),
            FieldValue::Bytes(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn writer_rejects_mismatched_values() {
        let s = schema();
        let mut v = values();
        v[2] = FieldValue::String("nope".into());
        let err = RecordEncoder::new(3)
            .encode(&s, &v, &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("field \"n\""), "{err}");
        let mut v = values();
        v[6] = FieldValue::Image(Cow::Owned(b"\x89PNG\r\n\x1a\n".to_vec()));
        assert!(
            RecordEncoder::new(3)
                .encode(&s, &v, &mut Vec::new())
                .is_err()
        );
        let mut v = values();
        if let FieldValue::Array(a) = &mut v[4] {
            a.shape = vec![4, 3];
        }
        assert!(
            RecordEncoder::new(3)
                .encode(&s, &v, &mut Vec::new())
                .is_err()
        );
        assert!(
            RecordEncoder::new(3)
                .encode(&s, &values()[..3], &mut Vec::new())
                .is_err()
        );
    }

    #[test]
    fn decompression_limit_is_checked_before_allocating() {
        let s = schema();
        let mut out = Vec::new();
        RecordEncoder::new(3)
            .encode(&s, &values(), &mut out)
            .unwrap();
        let view = RecordView::parse(&out, s.len()).unwrap();
        let err = view.field(&s, 1, 16).unwrap_err();
        assert!(err.to_string().contains("over the limit of 16"), "{err}");
    }

    #[test]
    fn corrupt_field_tables_are_rejected() {
        let s = schema();
        let mut out = Vec::new();
        RecordEncoder::new(3)
            .encode(&s, &values(), &mut out)
            .unwrap();
        // a field end past the payload
        let mut bad = out.clone();
        bad[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            RecordView::parse(&bad, s.len()),
            Err(RecordError::Corrupt { field: 0, .. })
        ));
        // decreasing ends
        let mut bad = out.clone();
        bad[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert!(RecordView::parse(&bad, s.len()).is_err());
        // truncated record
        assert!(RecordView::parse(&out[..out.len() - 1], s.len()).is_err());
        assert!(RecordView::parse(&out[..3], s.len()).is_err());
    }

    #[test]
    fn invalid_utf8_and_bad_array_headers_are_errors() {
        let s = Schema::from_specs([("t", "string"), ("a", "ndarray:u8")]).unwrap();
        let mut rec = Vec::new();
        rec.extend_from_slice(&2u32.to_le_bytes());
        rec.extend_from_slice(&(2u32 + 24).to_le_bytes());
        rec.extend_from_slice(&[0xC3, 0x28]); // invalid UTF-8
        rec.extend_from_slice(&1u32.to_le_bytes());
        rec.extend_from_slice(&0u32.to_le_bytes());
        rec.extend_from_slice(&u64::MAX.to_le_bytes()); // absurd dimension
        rec.extend_from_slice(&[0u8; 8]);
        let view = RecordView::parse(&rec, 2).unwrap();
        assert!(view.field(&s, 0, 0).is_err());
        let err = view.field(&s, 1, 0).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
    }
}
