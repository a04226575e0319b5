//! The reconcilers of watcher-operator. Each module holds one controller: its `run`, its
//! `reconcile` and the pure functions that decide what it writes.

pub mod at;
mod cache;
mod context;
mod error;
mod metrics;
pub mod pods;
pub mod podset;
pub mod watcher;

#[cfg(test)]
mod fixtures;

pub use cache::{Change, WatcherCache};
pub use context::Context;
pub use error::{Error, Result};
pub use metrics::Metrics;

/// Settings shared by every controller: a bounded number of reconciles in flight, so a burst
/// (a fresh start with thousands of objects) costs neither thousands of connections nor memory.
fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENCY)
}

/// Reconciles in flight per controller.
const CONCURRENCY: u16 = 16;
