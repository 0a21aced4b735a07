//! Small synchronisation helpers shared by the engine's modules (a leaf).

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex, taking over the data of a thread that panicked while holding it (every value
/// behind the engine's mutexes stays consistent between statements). The one poisoning policy
/// of the engine.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
