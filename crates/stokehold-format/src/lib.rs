//! The stokehold shard format: a typed schema, records, shard files with a footer index and
//! CRC-32C checksums, and dataset directories described by a manifest.
//!
//! Sans-IO: no threads, no network, no file system call (its `Cargo.toml` has no tokio, no
//! io_uring, no object_store, no rustix). Everything here is a function of bytes: parsing and
//! checking a shard's structure, planning its opening ([`ShardOpening`]), encoding and decoding
//! records, the manifest's meaning. A shard's bytes come through the [`Storage`] trait
//! ([`source`]); the backends that read files, maps, direct I/O and object stores, the dataset
//! writer and reader, publication and verification live in the `stokehold-storage` crate. This
//! crate can be fuzzed and embedded. The normative specification is `docs/format.md`.
//!
//! The main types:
//! - [`Schema`] / [`Field`] / [`FieldType`]: what each record holds.
//! - [`ShardWriter`] (into any `io::Write`) / [`ShardReader`] (over any [`Storage`]): one shard.
//! - [`Manifest`]: a dataset's description, parsed and checked from bytes.
//! - [`Header::parse`], [`Trailer::parse`], [`ShardMeta::parse`], [`parse_index`]: the checks of a
//!   shard's structure as pure functions of bytes (no I/O), fuzzed directly; [`ShardOpening`]:
//!   the opening of a shard as data (which ranges to read, then those checks).
//! - [`tokens`]: token datasets (`docs/format.md` §9): [`TokenDType`], [`TokenMeta`] (the
//!   manifest's `source.tokens`) and [`TokenIndex`] (document prefix sums and the byte ranges of a
//!   token range).
//!
//! ```
//! use stokehold_format::{FieldValue, Limits, Schema, ShardReader, ShardWriter, WriteOptions};
//! let schema = Schema::from_specs([("text", "string"), ("label", "int64")]).unwrap();
//! let mut w = ShardWriter::new(Vec::new(), schema, WriteOptions::default()).unwrap();
//! w.write(&[FieldValue::String("hello".into()), FieldValue::Int64(3)]).unwrap();
//! let (bytes, _) = w.finish().unwrap();
//! let source = stokehold_format::memory_source(bytes);
//! let shard = ShardReader::from_source("in-memory.skh", source, Limits::default()).unwrap();
//! let mut buf = Vec::new();
//! shard.read_record(0, &mut buf, true).unwrap();
//! assert_eq!(shard.decode(0, &buf).unwrap()[1], FieldValue::Int64(3));
//! ```

pub mod container;
pub mod crc;
pub mod error;
pub mod fuzzing;
pub mod image_size;
pub mod json;
pub mod limits;
pub mod manifest;
pub mod record;
pub mod schema;
pub mod shard;
pub mod source;
pub mod tokens;
pub mod video;

pub use error::{FormatError, Result};
pub use limits::Limits;
pub use manifest::{DATASET_VERSION, FORMAT_NAME, MANIFEST_FILE, Manifest, ShardInfo};
pub use record::{
    ArrayValue, CodecCacheStats, FieldValue, Held, RecordCodec, RecordEncoder, RecordError,
    RecordFields, RecordView, VideoFile,
};
pub use schema::{
    Compression, DType, Field, FieldType, ImageCodec, InvalidFieldType, ListItem, Schema,
};
pub use shard::{
    Header, IndexEntry, ListTable, ListTableError, MAX_SHARD_LIST_ITEMS, OpenStep, SHARD_VERSION,
    ShardMeta, ShardOpening, ShardReader, ShardSource, ShardStructure, ShardSummary, ShardWriter,
    Trailer, WriteError, WriteOptions, parse_index, read_structure,
};
pub use source::{Memory, NamedFiles, ReadProfile, Storage, memory_source};
pub use tokens::{TokenDType, TokenIndex, TokenMeta};
