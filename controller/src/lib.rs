//! The reconcilers of watcher-operator. Each module holds one controller: its `run`, its
//! `reconcile` and the pure functions that decide what it writes. What several controllers
//! write or judge alike sits below them: [`revisions`], `owned` (the Watchers' ConfigMaps) and
//! `standing` (their Pod Security condition).

pub mod at;
mod cache;
pub mod cluster_watcher;
mod context;
pub mod ending;
mod error;
mod freshness;
pub mod images;
mod metrics;
mod owned;
pub mod pod_security_probe;
pub mod pods;
pub mod podset;
mod policies;
pub mod revision_cache;
pub mod revisions;
mod runtime;
pub mod scope;
mod standing;
pub mod sync;
mod watch_errors;
pub mod watcher;
pub mod watchers;

#[cfg(test)]
mod fixtures;

pub use cache::{Change, WatcherCache};
pub use context::Context;
pub use error::{Error, Result};
pub use metrics::{
    CONTROLLERS, ClusterPods, Metrics, ROLLOUT_STATES, ScopeState, WATCHED_RESOURCES, WatcherCollector, observe_watch,
    watch_errors_of, watch_lists_of,
};
pub use owned::{CLUSTER_WATCHER_LABEL, WATCHER_LABEL};
pub use policies::PolicyCache;
pub use revision_cache::{RevisionCache, RevisionChange};
pub use runtime::NamespacedObject;
use runtime::{UNLISTED_RETRY, cached_watch, controller_config, is_controlled_by, log_run_result, object_key};
pub use watch_errors::{WatchTrouble, log_watch_error, watch_error_line};
