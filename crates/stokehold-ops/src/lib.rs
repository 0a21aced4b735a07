//! Pure compute kernels for stokehold: JPEG/PNG decoding (libjpeg-turbo with DCT scaling and
//! cropped decoding), resize, crop, flip, normalisation, colour operations and tokenization.
//!
//! This crate knows nothing of pipelines, threads or files: each kernel takes bytes or pixels and
//! writes into a caller-provided buffer.
//!
//! **Status:** empty. The kernels arrive with the image-pipeline issue (#4) and the text issue (#8);
//! nothing here pretends to work yet.
