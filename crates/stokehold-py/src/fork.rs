//! The fork generation: bumped in a forked child, so that loaders and buffers made before the
//! fork know they are unusable there (their worker threads and pools do not exist in the child).
//! A leaf that `engine.rs` and `buffer.rs` both read.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;

/// Bumped in a forked child (see the module doc of `engine.rs`).
pub(crate) static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Called by `os.register_at_fork(after_in_child=...)`: every loader started before the fork is
/// unusable from now on (its worker threads do not exist here).
#[pyfunction]
pub fn _after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}
