//! The Watchers of each namespace, as admission reads them: the namespace's own and the
//! ClusterWatchers that apply there, computed on the first read after a change.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kube::ResourceExt;
use watcher_admission::NamespaceWatchers;
use watcher_api::{ClusterWatcher, Watcher};

use crate::freshness::Freshness;

/// The Watchers of each namespace, rebuilt from the store on the first read after a change:
/// Watchers change rarely, pods are admitted often, and filtering the whole store on every
/// admission cost 12 µs with 1,000 Watchers. A read of the index clones one `Arc`, however many
/// Watchers the namespace has (0.03 µs).
///
/// The ClusterWatchers that apply in a namespace are added to its own Watchers on its first
/// read after a change of any of them, or of the namespace's labels: a namespace no pod is
/// created in holds no entry. Each ClusterWatcher is one Watcher shared by every namespace
/// ([`ClusterWatcher::unplaced`]), so an entry costs a pointer per ClusterWatcher, not a copy.
#[derive(Default)]
pub(super) struct NamespaceIndex {
    /// Rebuilt on the first read after a change; readers during a rebuild wait for it.
    pub(super) fresh: Freshness,
    /// Counts rebuilds: an entry of `effective` computed from the index as it was before a
    /// rebuild is not kept after it (a reader that raced a change would otherwise leave its
    /// namespace on the old ClusterWatchers until the next change).
    pub(super) epoch: AtomicU64,
    watchers: RwLock<HashMap<String, Arc<NamespaceWatchers>>>,
    /// Every ClusterWatcher, with the Watcher that stands for it wherever it applies.
    clusters: RwLock<Arc<[Shared]>>,
    /// Per namespace: the labels its entry was computed with, and its own and cluster Watchers.
    effective: RwLock<HashMap<String, Effective>>,
}

/// A namespace's labels, and the Watchers that apply there given them.
type Effective = (BTreeMap<String, String>, Arc<NamespaceWatchers>);

/// A ClusterWatcher and the one Watcher that stands for it in every namespace where it applies.
pub(super) struct Shared {
    cluster: Arc<ClusterWatcher>,
    pub(super) watcher: Arc<Watcher>,
}

impl std::borrow::Borrow<ClusterWatcher> for Shared {
    fn borrow(&self) -> &ClusterWatcher {
        &self.cluster
    }
}

impl NamespaceIndex {
    /// Indexes `watchers` by namespace, shares each of `clusters` as a Watcher, and forgets
    /// every namespace's effective Watchers.
    pub(super) fn rebuild(&self, watchers: Vec<Arc<Watcher>>, clusters: Vec<Arc<ClusterWatcher>>) {
        let mut rebuilt: HashMap<String, Vec<Arc<Watcher>>> = HashMap::new();
        for watcher in watchers {
            rebuilt.entry(watcher.namespace().unwrap_or_default()).or_default().push(watcher);
        }
        let rebuilt = rebuilt.into_iter().map(|(namespace, watchers)| (namespace, Arc::new(watchers.into()))).collect();
        let shared = clusters.into_iter().map(|cluster| Shared { watcher: Arc::new(cluster.unplaced()), cluster });
        *self.watchers.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        *self.clusters.write().unwrap_or_else(|p| p.into_inner()) = shared.collect();
        let mut effective = self.effective.write().unwrap_or_else(|p| p.into_inner());
        effective.clear();
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The namespace's own Watchers.
    pub(super) fn own(&self, namespace: &str) -> Arc<NamespaceWatchers> {
        let watchers = self.watchers.read().unwrap_or_else(|p| p.into_inner());
        watchers.get(namespace).cloned().unwrap_or_default()
    }

    /// Every ClusterWatcher, shared.
    pub(super) fn clusters(&self) -> Arc<[Shared]> {
        self.clusters.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The effective Watchers of `namespace`, when computed with these labels.
    pub(super) fn remembered(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<Arc<NamespaceWatchers>> {
        let effective = self.effective.read().unwrap_or_else(|p| p.into_inner());
        effective.get(namespace).filter(|(seen, _)| seen == labels).map(|(_, watchers)| watchers.clone())
    }

    /// Keeps the effective Watchers of `namespace`, computed from the index as it was at
    /// `epoch`, unless a rebuild came since.
    pub(super) fn remember(
        &self,
        epoch: u64,
        namespace: &str,
        labels: BTreeMap<String, String>,
        watchers: Arc<NamespaceWatchers>,
    ) {
        let mut effective = self.effective.write().unwrap_or_else(|p| p.into_inner());
        if self.epoch.load(Ordering::Acquire) == epoch {
            effective.insert(namespace.to_owned(), (labels, watchers));
        }
    }
}
