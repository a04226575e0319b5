//! The change feed as a controller takes it: the changed objects, and the moments to reconcile
//! them all.

use std::sync::Arc;

use futures::{Stream, StreamExt, future};
use kube::runtime::reflector::{ObjectRef, Store};
use watcher_api::{ClusterWatcher, Watcher};

use super::Change;

/// Splits a change feed into what a controller takes: the changed Watchers (looked up in
/// `store`; deleted ones drop out) and the moments to reconcile everything.
pub fn split(
    changes: impl Stream<Item = Change> + Send + 'static,
    store: Store<Watcher>,
) -> (impl Stream<Item = Arc<Watcher>> + Send + 'static, impl Stream<Item = ()> + Send + 'static) {
    split_by(changes, move |change| match change {
        Change::Watcher(object) => store.get(&object),
        Change::ClusterWatcher(_) | Change::Resync => None,
    })
}

/// [`split`] for the ClusterWatchers: the changed ones (a change of a Watcher of the same name
/// too: it takes a namespace over or hands it back) and the moments to reconcile them all.
pub fn split_cluster(
    changes: impl Stream<Item = Change> + Send + 'static,
    store: Store<ClusterWatcher>,
) -> (impl Stream<Item = Arc<ClusterWatcher>> + Send + 'static, impl Stream<Item = ()> + Send + 'static) {
    split_by(changes, move |change| match change {
        Change::ClusterWatcher(object) => store.get(&object),
        Change::Watcher(object) => store.get(&ObjectRef::new(&object.name)),
        Change::Resync => None,
    })
}

/// A change feed as the objects `lookup` finds for each change (a [`Change::Resync`] is sent to
/// the second stream instead).
fn split_by<K: Send + Sync + 'static>(
    changes: impl Stream<Item = Change> + Send + 'static,
    lookup: impl Fn(Change) -> Option<Arc<K>> + Send + 'static,
) -> (impl Stream<Item = Arc<K>> + Send + 'static, impl Stream<Item = ()> + Send + 'static) {
    let (resync_tx, resync_rx) = futures::channel::mpsc::unbounded();
    let triggers = changes.filter_map(move |change| {
        let found = match change {
            Change::Resync => {
                let _ = resync_tx.unbounded_send(());
                None
            }
            change => lookup(change),
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
