//! Pure compute kernels for stokehold: JPEG decoding with libjpeg-turbo (DCT scaling and cropped
//! decoding), PNG and WebP decoding, SIMD resizing, crops, flips, colour jitter, layout and
//! normalisation, and the fused image pipeline that chains them ([`pipeline::run`]).
//!
//! This crate knows nothing of datasets, shards or threads, and depends on no other stokehold
//! crate: each kernel takes bytes or pixels and writes into a caller-provided buffer.
//! Tokenization lives in [`text`] (which reads one file: a `tokenizer.json`), chat templates
//! (render, tokenize, loss mask) in [`chat`].

mod byte_bpe;
pub mod chat;
pub mod color;
pub mod decode;
mod error;
pub mod fuzzing;
pub mod geometry;
pub mod jpeg;
pub mod layout;
pub mod parallel;
pub mod pipeline;
pub mod resize;
pub mod restart;
pub mod rst_insert;
pub mod text;
pub mod vision;

pub use error::{OpsError, Result};
pub use jpeg::{Pixels, PixelsRef};
pub use layout::{OutDType, OutSpec};
pub use pipeline::{
    DEFAULT_MAX_PIXELS, Geometry, ImageOps, Jitter, Random, Workspace, decode_prefix, run,
    run_pixels,
};
