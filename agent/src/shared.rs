//! State shared between the agent's threads and tasks.

use std::sync::{Mutex, MutexGuard};

/// Locks shared state: a holder that panicked left nothing half-done that matters (the agent
/// aborts on a panic anyway; tests unwind).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
