//! The change feed as a controller takes it: the changed objects, and the moments to reconcile
//! them all.

use std::sync::Arc;

use futures::{Stream, StreamExt, future};
use kube::runtime::reflector::{ObjectRef, Store};
use watcher_api::{ClusterWatcher, Watcher};

use super::Change;

/// A store of a kind the feed speaks of: which of its objects a change is about.
pub trait Lookup: Send + 'static {
    /// The kind of the objects it holds.
    type Object: Send + Sync + 'static;

    /// The object `change` is about, if it is in the store (a [`Change::Resync`] is about none).
    fn about(&self, change: Change) -> Option<Arc<Self::Object>>;
}

impl Lookup for Store<Watcher> {
    type Object = Watcher;

    fn about(&self, change: Change) -> Option<Arc<Watcher>> {
        match change {
            Change::Watcher(object) => self.get(&object),
            Change::ClusterWatcher(_) | Change::Resync => None,
        }
    }
}

/// A ClusterWatcher is about a change of itself, and of a Watcher of the same name too: it takes
/// a namespace over or hands it back.
impl Lookup for Store<ClusterWatcher> {
    type Object = ClusterWatcher;

    fn about(&self, change: Change) -> Option<Arc<ClusterWatcher>> {
        match change {
            Change::ClusterWatcher(object) => self.get(&object),
            Change::Watcher(object) => self.get(&ObjectRef::new(&object.name)),
            Change::Resync => None,
        }
    }
}

/// Splits a change feed into what a controller takes: the changed objects (looked up in
/// `store`; deleted ones drop out) and the moments to reconcile them all (each
/// [`Change::Resync`]).
pub fn split<S: Lookup>(
    changes: impl Stream<Item = Change> + Send + 'static,
    store: S,
) -> (impl Stream<Item = Arc<S::Object>> + Send + 'static, impl Stream<Item = ()> + Send + 'static) {
    let (resync_tx, resync_rx) = futures::channel::mpsc::unbounded();
    let triggers = changes.filter_map(move |change| {
        let found = match change {
            Change::Resync => {
                let _ = resync_tx.unbounded_send(());
                None
            }
            change => store.about(change),
        };
        future::ready(found)
    });
    (triggers, resync_rx)
}

/// A stream that yields each time `receiver` is marked changed.
pub fn changed<T: Send + Sync + 'static>(
    receiver: tokio::sync::watch::Receiver<T>,
) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(receiver, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}
