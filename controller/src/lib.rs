//! The reconcilers of watcher-operator. Each module holds one controller: its `run`, its
//! `reconcile` and the pure functions that decide what it writes. What several controllers
//! write or judge alike sits below them: [`revisions`], `owned` (the Watchers' ConfigMaps) and
//! `standing` (their Pod Security condition).

pub mod agent;
pub mod at;
pub mod cluster_watcher;
mod context;
pub mod ending;
mod error;
pub mod images;
mod metrics;
mod owned;
mod owned_pods;
pub mod pod_security_probe;
pub mod pods;
pub mod podset;
pub mod revisions;
mod runtime;
pub mod scope;
mod standing;
pub mod sync;
pub mod watcher;
pub mod watchers;

#[cfg(test)]
mod fixtures;

pub use context::Context;
pub use error::{Error, Result};
pub use metrics::{CONTROLLERS, ClusterPods, Metrics, ROLLOUT_STATES, ScopeState, WATCHED_RESOURCES, WatcherCollector};
pub use owned::{CLUSTER_WATCHER_LABEL, WATCHER_LABEL};
pub use runtime::NamespacedObject;
use runtime::{
    REFUSED_RETRY, UNLISTED_RETRY, cached_watch, controller_config, is_controlled_by, is_refusal, object_key,
    restricted_context, run_controller,
};
