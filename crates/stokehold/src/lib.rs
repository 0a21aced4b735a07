//! stokehold: a data loading engine for model training.
//!
//! This is the Rust API. A [`Loader`] (the one engine, [`pipeline`]) takes [`Samples`] in the
//! order the [`sampler`] gives this rank, has them fetched and filled on a pool of native threads
//! (records of a packed [`format::Dataset`] through [`Transform`] stages: [`Records`]; token
//! windows or padded documents: [`Tokens`]), collates them into recycled batch buffers
//! ([`Batch`]) and delivers the batches in order through a bounded prefetch window. Every random choice comes from a [`SampleRng`]
//! seeded by (seed, epoch, sample id), so output is the same whatever the thread count. A
//! [`ResumeState`] continues exactly, on any number of ranks. [`Stats`] say where the time went.
//!
//! For language models, [`SequenceLoader`] is the same engine over [`Tokens`] of a token dataset
//! ([`TokenDataset`], made by `stokehold pack --tokenizer`).
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

/// The dataset format (`stokehold_format`, sans-IO) and its storage (`stokehold_storage`:
/// locations, the dataset reader and writer), under one path for users of the engine.
pub mod format {
    pub use stokehold_format::*;
    pub use stokehold_storage::*;
}
pub use stokehold_ops as ops;
pub use stokehold_storage as storage;

mod batch;
pub mod blend;
pub mod cache;
mod error;
pub mod fetch;
pub mod order;
pub mod pipeline;
mod rng;
pub mod sampler;
pub mod samples;
pub mod sequence;
pub mod stages;
mod state;
mod stats;
pub mod storage_bench;
mod sync;
mod units;

pub use batch::{Batch, Buffer, BufferPool, ColumnData, advise_huge_pages};
pub use cache::{CacheStats, DecodedCache, RecordCache};
pub use error::{EngineError, RecordPlace, Result};
pub use order::{Groups, Loadable, Order, OrderState, Shuffled};
pub use pipeline::{
    BatchIter, Budget, Built, ByteSize, DecodedCacheConfig, EngineSpec, ErrorPolicy, Loader,
    LoaderConfig, MixtureSourceSpec, MixtureSpec, Next, PreparedRun, SamplesSpec, ScheduleEntry,
    Weights, default_memory_budget, half_of_memory, parse_bytes,
};
pub use rng::{SampleRng, mix64};
pub use sampler::{Shuffle, Slot, Tail};
pub use samples::{
    Mixture, MixtureSource, Records, Samples, TokenDataset, TokenMode, TokenOptions, Tokens,
};
pub use sequence::{SequenceConfig, SequenceIter, SequenceLoader, SequenceMode};
pub use stages::{
    Column, CopyBytes, Output, SampleCtx, StageError, StageResult, Transform, Value, from_fn,
};
pub use state::{ResumeState, STATE_VERSION, fingerprint};
pub use stats::{GroupStats, StageStats, Stats, StepWait, WAIT_HISTORY};
