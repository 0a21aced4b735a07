//! Readers for the formats people already have (image folders, JSONL/CSV, WebDataset tar,
//! TFRecord, Parquet) and the packer that turns them into stokehold shards.
//!
//! The parsers in this crate treat every input as hostile: no allocation is sized by a field
//! read from the file before that field has been checked against a limit, every error carries
//! the byte offset it refers to, and no parser panics on any input (see [`fuzzing`]).

pub mod arrow;
pub mod example;
pub mod frames;
pub mod fuzzing;
pub mod inplace;
pub mod jpeg;
pub mod lerobot;
pub mod mkv;
pub mod mp4;
pub mod pack;
mod parquet_pages;
pub mod sample_data;
pub mod sources;
pub mod tar;
pub mod tfrecord;

/// Why bytes of an input cannot be used, in words that say what and where (a page header cut
/// short, a value that does not fit its field, an image that does not decode): the `detail` of
/// a corrupt-data error, or the reason an input is skipped. Parsers return it instead of a bare
/// `String`, so that what an error means is in its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unusable(pub String);

impl From<String> for Unusable {
    fn from(s: String) -> Self {
        Unusable(s)
    }
}

impl From<&str> for Unusable {
    fn from(s: &str) -> Self {
        Unusable(s.to_string())
    }
}

impl From<stokehold_format::container::ContainerError> for Unusable {
    fn from(e: stokehold_format::container::ContainerError) -> Self {
        Unusable(e.to_string())
    }
}

impl From<sources::jsonl::FieldError> for Unusable {
    fn from(e: sources::jsonl::FieldError) -> Self {
        Unusable(e.to_string())
    }
}

impl std::ops::Deref for Unusable {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<Unusable> for String {
    fn from(u: Unusable) -> Self {
        u.0
    }
}

pub use pack::tokens::{TokenOptions, pack_tokens, token_meta, token_source};
pub use pack::{
    Applied, DEFAULT_MAX_SKIP_FRACTION, DEFAULT_RESTART_MARKERS, FieldChoice, ImagePolicy,
    NoProgress, PackError, PackOptions, PackReport, Progress, Skipped, SourceKind, VideoPolicy,
    apply_image_policy, detect, pack,
};
