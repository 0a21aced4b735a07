//! stokehold: a data loading engine for model training.
//!
//! This is the Rust API. A [`Loader`] reads a packed [`format::Dataset`] in the order the
//! [`sampler`] gives this rank, runs each sample's fields through [`transform`] stages on a pool of
//! native threads, collates them into recycled batch buffers ([`Batch`]) and delivers the batches
//! in order through a bounded prefetch window. Every random choice comes from a [`SampleRng`]
//! seeded by (seed, epoch, sample id), so output is the same whatever the thread count. A
//! [`ResumeState`] continues exactly, on any number of ranks. [`Stats`] say where the time went.
//!
//! For language models, [`SequenceLoader`] streams packed token windows (or padded documents)
//! from a token dataset ([`TokenDataset`], made by `stokehold pack --tokenizer`).
//!
//! ```
//! use std::sync::Arc;
//! use stokehold::{Column, Loader, LoaderConfig, format::{Dataset, DatasetWriter, DatasetWriteOptions, FieldValue, Schema}};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("ds");
//! let schema = Schema::from_specs([("x", "float64"), ("label", "int64")]).unwrap();
//! let mut w = DatasetWriter::create(&path, schema, DatasetWriteOptions::default()).unwrap();
//! for i in 0..100 {
//!     w.write(&[FieldValue::Float64(i as f64), FieldValue::Int64(i % 10)]).unwrap();
//! }
//! w.finish().unwrap();
//! let ds = Arc::new(Dataset::open(&path).unwrap());
//! let columns = Column::all(ds.schema()).unwrap();
//! let mut loader = Loader::new(ds, columns, LoaderConfig { batch_size: 10, ..LoaderConfig::default() }).unwrap();
//! let batches: Vec<_> = loader.iter().unwrap().collect::<Result<_, _>>().unwrap();
//! assert_eq!(batches.len(), 10);
//! ```

pub use stokehold_format as format;

mod batch;
pub mod cache;
pub mod decoded_disk;
pub mod disk_cache;
mod error;
mod fetch;
pub mod image;
mod loader;
mod rng;
pub mod sampler;
pub mod sequence;
pub mod spec;
mod state;
mod stats;
pub mod storage_bench;
pub mod text;
pub mod transform;

pub use batch::{Batch, Buffer, BufferPool, ColumnData};
pub use cache::{CacheStats, DecodedCache, RecordCache};
pub use error::{EngineError, Result};
pub use loader::{
    BatchIter, DecodedCacheConfig, ErrorPolicy, Loader, LoaderConfig, default_memory_budget,
};
pub use rng::{SampleRng, mix64};
pub use sampler::{Shuffle, Tail};
pub use sequence::{SequenceConfig, SequenceIter, SequenceLoader, SequenceMode, TokenDataset};
pub use state::{ResumeState, STATE_VERSION, fingerprint};
pub use stats::{StageStats, Stats};
pub use transform::{Column, CopyBytes, Output, SampleCtx, Transform, Value, from_fn};
