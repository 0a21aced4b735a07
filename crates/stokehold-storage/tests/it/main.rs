//! The format crate's integration tests, in one binary. Tests that need the S3 test server are
//! in `s3` (the `remote` feature), so `make check` can leave them out with `--skip s3`. The
//! allocation-bound test has a counting global allocator and so a binary of its own
//! (`tests/alloc_bounds.rs`).

#[path = "../common/mod.rs"]
mod common;

mod destination;
mod format;
mod fuzz_corpus;
mod golden;
mod lists;
mod node_budget;
mod parse;
mod parts;
#[cfg(feature = "remote")]
mod s3;
mod storage;
mod tokens;
