//! stokehold: a data loading engine for model training.
//!
//! This is the Rust API. Today it re-exports the shard format ([`format`]): open a packed dataset
//! with [`format::Dataset::open`] and read samples by index.
//!
//! **What will live here** (the engine issue, #3, and those after it): storage backends and caches,
//! the sampler (global shuffle, rank splitting), the parallel pipeline that decodes and transforms on
//! native threads and collates into recycled batch buffers, the bounded prefetch queue, resume
//! state, per-stage statistics and autotuning. None of that exists yet, and nothing here pretends
//! it does.

pub use stokehold_format as format;
