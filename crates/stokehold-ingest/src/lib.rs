//! Readers for the formats people already have (image folders, JSONL/CSV, WebDataset tar,
//! TFRecord, Parquet) and the packer that turns them into stokehold shards.
//!
//! The parsers in this crate treat every input as hostile: no allocation is sized by a field
//! read from the file before that field has been checked against a limit, every error carries
//! the byte offset it refers to, and no parser panics on any input (see [`fuzzing`]).

pub mod arrow;
pub mod example;
pub mod fuzzing;
pub mod inplace;
pub mod jpeg;
pub mod mp4;
pub mod pack;
mod parquet_pages;
pub mod sample_data;
pub mod tar;
pub mod tfrecord;

pub use pack::tokens::{TokenOptions, pack_tokens, token_meta, token_source};
pub use pack::{
    Applied, DEFAULT_MAX_SKIP_FRACTION, DEFAULT_RESTART_MARKERS, FieldChoice, ImagePolicy,
    NoProgress, PackError, PackOptions, PackReport, Progress, Skipped, SourceKind,
    apply_image_policy, detect, pack,
};
