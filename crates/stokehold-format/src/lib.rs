//! The stokehold shard format: a typed schema, records, shard files with a footer index and
//! CRC-32C checksums, and dataset directories described by a manifest.
//!
//! No threads (except in [`verify_dataset`]), no network: this crate can be fuzzed and embedded.
//! The `remote` feature adds object storage (`s3://`, `gs://`, `az://`, `https://`: the `remote`
//! module), with its own I/O runtime, and its test support (which starts a Python S3 server).
//! The normative specification is `docs/format.md`.
//!
//! The main types:
//! - [`Schema`] / [`Field`] / [`FieldType`]: what each record holds.
//! - [`DatasetWriter`]: writes a dataset directory atomically, rolling shards at a target size.
//! - [`Dataset`]: opens one; `get(i)` decodes sample `i`, `read_record(i)` reads its bytes with
//!   one positional read, `record_slice(i)` borrows them from a map.
//! - [`ShardWriter`] / [`ShardReader`]: one shard file.
//! - [`verify_dataset`]: every checksum, in one sequential pass.
//! - [`Header::parse`], [`Trailer::parse`], [`ShardMeta::parse`], [`parse_index`]: the checks of a
//!   shard's structure as pure functions of bytes (no I/O), fuzzed directly; [`ShardOpening`]:
//!   the opening of a shard as data (which ranges to read, then those checks).
//! - [`Location`] ([`locate`]): where a dataset's objects live (a local directory, memory, an
//!   object-store prefix), one trait for reads and writes.
//! - [`tokens`]: token datasets (`docs/format.md` §9): [`TokenDType`], [`TokenMeta`] (the
//!   manifest's `source.tokens`) and [`TokenIndex`] (document prefix sums and the byte ranges of a
//!   token range).
//!
//! ```
//! use stokehold_format::{Dataset, DatasetWriter, DatasetWriteOptions, FieldValue, Schema};
//! let dir = tempfile::tempdir().unwrap();
//! let schema = Schema::from_specs([("text", "string"), ("label", "int64")]).unwrap();
//! let mut w = DatasetWriter::create(dir.path().join("ds"), schema, DatasetWriteOptions::default()).unwrap();
//! w.write(&[FieldValue::String("hello".into()), FieldValue::Int64(3)]).unwrap();
//! w.finish().unwrap();
//! let ds = Dataset::open(dir.path().join("ds")).unwrap();
//! assert_eq!(ds.get(0).unwrap()[1], FieldValue::Int64(3));
//! ```

pub mod conformance;
pub mod crc;
mod dataset;
mod error;
pub mod fuzzing;
mod limits;
mod locate;
pub mod location;
mod manifest;
pub mod parts;
mod publish;
pub mod read_batch;
pub mod record;
#[cfg(feature = "remote")]
pub mod remote;
pub mod schema;
pub mod shard;
pub mod storage;
pub mod tokens;
mod verify;
mod writer;

pub use dataset::{Dataset, OpenOptions, memory_source};
pub use error::{FormatError, Result};
pub use limits::{Limits, check_threads, max_threads};
pub use locate::locate;
pub use location::{
    LocalDir, Location, MemoryDir, ObjectMeta, local_path, require_local, url_scheme,
};
pub use manifest::{DATASET_VERSION, FORMAT_NAME, MANIFEST_FILE, Manifest, ShardInfo};
pub use parts::{Commit, PartWriter, abort_parts, commit_parts, prepare_parts};
pub use record::{
    ArrayValue, CodecCacheStats, FieldValue, Held, RecordCodec, RecordEncoder, RecordError,
    RecordFields, RecordView,
};
pub use schema::{Compression, DType, Field, FieldType, ImageCodec, Schema};
pub use shard::{
    Header, IndexEntry, OpenStep, SHARD_VERSION, ShardMeta, ShardOpening, ShardReader, ShardSource,
    ShardStructure, ShardSummary, ShardWriter, Trailer, WriteError, WriteOptions, parse_index,
    read_structure,
};
pub use storage::{Access, Storage};
pub use tokens::{TokenDType, TokenIndex, TokenMeta};
pub use verify::{VerifyOptions, VerifyReport, verify_dataset};
pub use writer::{DatasetWriteOptions, DatasetWriter, EXTRA_FILES, sweep_stale_staging};
