//! The engine's integration tests, in one binary (one link of the world instead of one per file).
//! Tests that need the S3 test server have `s3` in their name, so `make check` can leave them
//! out with `--skip s3`. Tests that measure the whole process (threads, descriptors, memory)
//! live in `tests/process/`, a binary of their own.

#[path = "../common/mod.rs"]
mod common;

mod disk_cache;
mod golden_batches;
mod image;
mod loader;
mod mixture;
mod ownership;
mod parquet_pages;
mod resume_anywhere;
mod s3_readahead;
mod sampler;
mod samples_conformance;
mod sequence;
