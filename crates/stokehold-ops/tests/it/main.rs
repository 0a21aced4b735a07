//! The kernels' integration tests (images, the fast restart-interval decoder, the restart-marker
//! rewrite against its reference), in one binary.

#[path = "../common/mod.rs"]
mod common;

mod fast_restarts;
mod image;
mod rst_equivalence;
mod rst_reference;
