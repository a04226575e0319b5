//! The caches the webhook answers from and the controllers read: the Watchers and
//! ClusterWatchers by namespace ([`WatcherCache`]), the Watchers' revisions
//! ([`RevisionCache`]), the compiled ImagePolicies and the namespaces' labels
//! ([`PolicyCache`]). Each is filled by a watch of its own ([`watch`]) and read without a call
//! to the API server; both the webhook and the controllers depend on this crate, neither on the
//! other's.

mod freshness;
mod policies;
mod resource_rules;
mod revisions;
pub mod watch;
mod watchers;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;

pub use policies::PolicyCache;
pub use resource_rules::ResourceRulesCache;
pub use revisions::{RevisionCache, RevisionChange};
pub use watchers::{Change, Lookup, WatcherCache, changed, split};

/// A namespace as the caches keep it: its metadata (name and labels), not its spec or status.
pub type NamespaceMeta = PartialObjectMeta<Namespace>;

pub use watcher_base::lock;
