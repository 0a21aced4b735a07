//! The ingest crate's integration tests (parsers, the packer, Parquet, text), in one binary.

#[path = "../common/mod.rs"]
mod common;

mod inplace;
mod jsonl;
mod lists;
mod mkv;
mod mp4;
mod pack;
mod parquet;
mod parsers;
mod tokens;
