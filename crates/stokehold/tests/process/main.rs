//! Tests that measure the whole process (its threads, file descriptors, resident memory), in a
//! binary of their own, one test at a time: each takes [`alone`] first, so no other test's
//! threads or buffers are counted.

use std::sync::{Mutex, MutexGuard};

#[path = "../common/mod.rs"]
mod common;

mod many_loaders;
mod memory;
mod shutdown;

/// Held for the whole of a test: the tests of this binary run one after another.
fn alone() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // a failed test poisons the lock; the next test still runs alone
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
