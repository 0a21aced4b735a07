//! The kernels' integration tests (images, the fast restart-interval decoder), in one binary.

#[path = "../common/mod.rs"]
mod common;

mod fast_restarts;
mod image;
