//! Where stokehold's bytes live, and the I/O over the sans-IO `stokehold-format` crate:
//! - [`Location`] ([`locate`]): where a dataset's objects live (a local directory, memory, an
//!   object-store prefix with the `remote` feature), one trait for reads and writes;
//! - the local backends of the format's [`Storage`](stokehold_format::Storage) contract
//!   ([`file`](mod@file): `pread`, maps, `O_DIRECT`) and batched reads ([`read_batch`]: io_uring, with
//!   `pread` as the fallback);
//! - [`DatasetWriter`]: writes a dataset directory atomically, rolling shards at a target size;
//!   [`PartWriter`] and [`commit_parts`]: a dataset written by many tasks;
//! - [`Dataset`]: opens one; `get(i)` decodes sample `i`, `read_record(i)` reads its bytes with
//!   one positional read, `record_slice(i)` borrows them from a map;
//! - [`verify_dataset`]: every checksum, in one sequential pass (the one place with threads
//!   besides the remote runtime and the conformance suite's concurrent reads);
//! - [`conformance`]: the suites every [`Location`] and every `Storage` backend runs.
//!
//! The format's types ([`Manifest`](stokehold_format::Manifest),
//! [`ShardReader`](stokehold_format::ShardReader), [`TokenMeta`](stokehold_format::TokenMeta),
//! [`TokenIndex`](stokehold_format::TokenIndex)) get their I/O here through extension traits:
//! [`ManifestIo`] (`Manifest::read`, `load`, `load_with`), [`OpenShard`] (`ShardReader::open`),
//! [`TokenMetaOf`] and [`TokenIndexOf`] (`from_dataset`).
//!
//! ```
//! use stokehold_format::{FieldValue, Schema};
//! use stokehold_storage::{Dataset, DatasetWriteOptions, DatasetWriter};
//! let dir = tempfile::tempdir().unwrap();
//! let schema = Schema::from_specs([("text", "string"), ("label", "int64")]).unwrap();
//! let mut w = DatasetWriter::create(dir.path().join("ds"), schema, DatasetWriteOptions::default()).unwrap();
//! w.write(&[FieldValue::String("hello".into()), FieldValue::Int64(3)]).unwrap();
//! w.finish().unwrap();
//! let ds = Dataset::open(dir.path().join("ds")).unwrap();
//! assert_eq!(ds.get(0).unwrap()[1], FieldValue::Int64(3));
//! ```

pub mod conformance;
mod dataset;
pub mod file;
mod locate;
pub mod location;
pub mod node_budget;
pub mod node_dir;
pub mod parts;
mod publish;
pub mod read_batch;
#[cfg(feature = "remote")]
pub mod remote;
mod threads;
mod verify;
mod writer;

pub use dataset::{Dataset, OpenOptions, TokenIndexOf, TokenMetaOf};
pub use file::Access;
pub use locate::{ManifestIo, OpenShard, locate};
pub use location::{LocalDir, Location, MemoryDir, ObjectMeta, Place, local_path, require_local};
pub use node_dir::{Claim, ClaimError, FreeSpace, NodeDir, claim_file};
pub use parts::{Commit, PartWriter, abort_parts, commit_parts, prepare_parts};
pub use threads::{TooManyThreads, check_threads, max_threads};
pub use verify::{VerifyOptions, VerifyReport, verify_dataset};
pub use writer::{DatasetWriteOptions, DatasetWriter, EXTRA_FILES, sweep_stale_staging};
