//! The one in-memory copy of every Watcher and ClusterWatcher in the process, shared by the
//! webhook (every replica) and the controllers (the leader), so 1,000 Watchers are held once,
//! not once per user.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::{Stream, StreamExt, future};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;
use watcher_admission::{InjectOptions, NamespaceWatchers};
use watcher_api::{ClusterWatcher, Watcher};

use crate::NamespaceMeta;
use crate::watch::{log_watch_error, observe_watch};

/// Changes buffered per subscriber; a subscriber that falls further behind catches up with a
/// full resync instead of blocking the cache.
const CHANGE_BUFFER: usize = 1024;

/// A change seen by a subscriber.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// This Watcher was created, updated or deleted.
    Watcher(ObjectRef<Watcher>),
    /// This ClusterWatcher was created, updated or deleted.
    ClusterWatcher(ObjectRef<ClusterWatcher>),
    /// Changes were missed: look at every Watcher.
    Resync,
}

/// The shared Watcher cache and its change feed.
#[derive(Clone)]
pub struct WatcherCache {
    /// Every Watcher of the cluster, without `managedFields`.
    pub store: Store<Watcher>,
    /// Every ClusterWatcher, without `managedFields`.
    pub cluster: Store<ClusterWatcher>,
    /// Every namespace, as metadata (the labels a ClusterWatcher's `namespaceSelector` reads).
    pub namespaces: Store<NamespaceMeta>,
    /// The namespaces never injected besides the system ones: the operator's own.
    pub options: Arc<InjectOptions>,
    /// The cluster's Pod Security admission configuration (shared with the [`crate::PolicyCache`]).
    pub pod_security: watcher_admission::pod_security::SharedDefaults,
    changes: broadcast::Sender<Change>,
    by_namespace: Arc<NamespaceIndex>,
}

impl WatcherCache {
    /// The cache, and the future that fills it from the API server (run it for as long as the
    /// cache is used; it retries with backoff on errors).
    /// `namespaces` is filled by its owner (the [`crate::PolicyCache`]); `operator_namespace` is
    /// never injected.
    pub fn new(
        client: Client,
        namespaces: Store<NamespaceMeta>,
        operator_namespace: &str,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store::<Watcher>();
        let (cluster, cluster_writer) = reflector::store::<ClusterWatcher>();
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let sender = changes.clone();
        let cluster_sender = changes.clone();
        let by_namespace = Arc::new(NamespaceIndex::default());
        let index = by_namespace.clone();
        let cluster_index = by_namespace.clone();
        let cluster_fill =
            watcher(Api::<ClusterWatcher>::all(client.clone()), watcher::Config::default().any_semantic())
                .inspect(observe_watch("clusterwatchers"))
                .default_backoff()
                .modify(|cluster| cluster.managed_fields_mut().clear())
                .reflect(cluster_writer)
                .inspect(stale_on_spec_changes(cluster_index))
                .touched_objects()
                .for_each(move |touched| {
                    match touched {
                        Ok(cluster) => drop(cluster_sender.send(Change::ClusterWatcher(ObjectRef::from(&cluster)))),
                        Err(error) => log_watch_error("ClusterWatchers", true, &error),
                    }
                    future::ready(())
                });
        let fill = watcher(Api::<Watcher>::all(client), watcher::Config::default().any_semantic())
            .inspect(observe_watch("watchers"))
            .default_backoff()
            .modify(|watcher| watcher.managed_fields_mut().clear())
            .reflect(writer)
            .inspect(move |event| {
                // After the store took the event (an initial list takes effect when complete).
                if matches!(event, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone))
                {
                    index.fresh.mark();
                }
            })
            .touched_objects()
            .for_each(move |touched| {
                match touched {
                    // No subscriber (not the leader) is fine: nothing waits.
                    Ok(watcher) => drop(sender.send(Change::Watcher(ObjectRef::from(&watcher)))),
                    // Retried with backoff; until it works the webhook stays unready.
                    Err(error) => log_watch_error("Watchers", true, &error),
                }
                future::ready(())
            });
        let fill = async move {
            futures::join!(fill, cluster_fill);
        };
        let options = Arc::new(options_for(operator_namespace));
        let pod_security = Default::default();
        (Self { store, cluster, namespaces, options, pod_security, changes, by_namespace }, fill)
    }

    /// A cache over `store`, with no ClusterWatcher, for tests and benchmarks that fill the
    /// store themselves.
    pub fn from_store(store: Store<Watcher>) -> (Self, broadcast::Sender<Change>) {
        Self::from_stores(store, reflector::store().0, reflector::store().0, "")
    }

    /// A cache over stores the caller fills (tests, benchmarks).
    pub fn from_stores(
        store: Store<Watcher>,
        cluster: Store<ClusterWatcher>,
        namespaces: Store<NamespaceMeta>,
        operator_namespace: &str,
    ) -> (Self, broadcast::Sender<Change>) {
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let by_namespace = Arc::new(NamespaceIndex::default());
        let options = Arc::new(options_for(operator_namespace));
        let pod_security = Default::default();
        (Self { store, cluster, namespaces, options, pod_security, changes: changes.clone(), by_namespace }, changes)
    }

    /// Marks the namespace index stale, for callers that fill the stores themselves (tests,
    /// benchmarks) after a first read.
    pub fn invalidate(&self) {
        self.by_namespace.fresh.mark();
    }

    /// Changes from now on. A subscriber starts with a [`Change::Resync`], since everything
    /// cached before it subscribed is news to it.
    pub fn subscribe(&self) -> impl Stream<Item = Change> + Send + 'static {
        let receiver = self.changes.subscribe();
        futures::stream::once(future::ready(Change::Resync)).chain(futures::stream::unfold(receiver, |mut rx| async {
            match rx.recv().await {
                Ok(change) => Some((change, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((Change::Resync, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        }))
    }

    /// The Watchers that apply in `namespace`: its own, then the ClusterWatchers that apply
    /// there (see [`watcher_admission::cluster`]), each as its one shared Watcher of no namespace
    /// ([`ClusterWatcher::unplaced`]), by name.
    pub fn in_namespace(&self, namespace: &str) -> Arc<NamespaceWatchers> {
        let index = self.index();
        // Read before the index: what is computed from it is kept only if no rebuild came since.
        let epoch = index.epoch.load(Ordering::Acquire);
        let own = index.own(namespace);
        let clusters = index.clusters();
        if clusters.is_empty() {
            return own; // one length check when there is no ClusterWatcher
        }
        // The labels compared where the cache holds them: copied only when the entry is made.
        let meta = self.namespaces.get(&ObjectRef::new(namespace));
        let unseen;
        let labels = match &meta {
            Some(meta) => meta.labels(),
            None => {
                unseen = unseen_namespace_labels(namespace);
                &unseen
            }
        };
        if let Some(watchers) = index.remembered(namespace, labels) {
            return watchers;
        }
        let applying = watcher_admission::cluster::applying(namespace, labels, &own, &clusters, &self.options);
        let watchers: Arc<NamespaceWatchers> =
            Arc::new(own.iter().cloned().chain(applying.into_iter().map(|shared| shared.watcher.clone())).collect());
        index.remember(epoch, namespace, labels.clone(), watchers.clone());
        watchers
    }

    /// The namespace index, rebuilt first if a change marked it stale.
    fn index(&self) -> &NamespaceIndex {
        let index = &self.by_namespace;
        // A change marks the index after the store has it, so a rebuild always sees it.
        index.fresh.refresh(|| index.rebuild(self.store.state(), self.cluster.state()));
        index
    }

    /// The labels of `namespace`; one the cache has not seen yet (created a moment ago) has
    /// the one label kube-apiserver gives every namespace.
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        match self.namespaces.get(&ObjectRef::new(namespace)) {
            Some(meta) => meta.labels().clone(),
            None => unseen_namespace_labels(namespace),
        }
    }

    /// Every Watcher that applies anywhere, with the namespace it applies in: each namespace's
    /// own, and each ClusterWatcher (its shared copy) in every namespace it applies to (the
    /// admission scope is computed from these).
    pub fn everywhere(&self) -> Vec<(String, Arc<Watcher>)> {
        let mut all: Vec<(String, Arc<Watcher>)> =
            self.store.state().into_iter().filter_map(|w| Some((w.metadata.namespace.clone()?, w))).collect();
        if self.cluster.is_empty() {
            return all;
        }
        for namespace in self.namespaces.state() {
            let name = namespace.name_any();
            let theirs = self.in_namespace(&name);
            all.extend(theirs.iter().filter(|w| w.cluster_watcher().is_some()).map(|w| (name.clone(), w.clone())));
        }
        all
    }

    /// The namespaces where `cluster` applies now, by name.
    pub fn namespaces_of(&self, cluster: &ClusterWatcher) -> Vec<String> {
        use watcher_admission::cluster::{ClusterStanding, standing};
        let mut names: Vec<String> = self
            .namespaces
            .state()
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_none())
            .map(|ns| ns.name_any())
            .filter(|ns| {
                let own = self.own_watchers(ns);
                standing(cluster, ns, &self.namespace_labels(ns), &own, &self.options) == ClusterStanding::Applies
            })
            .collect();
        names.sort();
        names
    }

    /// The operator's namespace (where ClusterWatchers keep their revisions); empty for a cache
    /// built without one.
    pub fn operator_namespace(&self) -> &str {
        self.options.excluded_namespaces.first().map_or("", String::as_str)
    }

    /// The namespace's own Watchers (no ClusterWatcher).
    pub fn own_watchers(&self, namespace: &str) -> Arc<NamespaceWatchers> {
        self.index().own(namespace)
    }
}

/// The labels of a namespace the cache has not seen yet (created a moment ago): the one label
/// kube-apiserver gives every namespace.
fn unseen_namespace_labels(namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(crate::policies::NAME_LABEL.to_owned(), namespace.to_owned())])
}

/// Marks `index` stale when what admission reads of a ClusterWatcher changes (its uid, spec or
/// stable revision), after the store has it: its other status writes leave the namespaces' Watchers as they are (with
/// 100 ClusterWatchers over 100 namespaces, rebuilding them on each status write kept the
/// operator's memory growing while it converged).
fn stale_on_spec_changes(
    index: Arc<NamespaceIndex>,
) -> impl FnMut(&Result<watcher::Event<ClusterWatcher>, watcher::Error>) {
    let mut specs: HashMap<String, u64> = HashMap::new();
    let digest = |cluster: &ClusterWatcher| {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        cluster.metadata.uid.hash(&mut hasher);
        serde_json::to_string(&cluster.spec).unwrap_or_default().hash(&mut hasher);
        // Admission reads the stable revision too (`updatePolicy.newPods: Stable`).
        cluster.status.as_ref().and_then(|s| s.stable_revision.as_deref()).hash(&mut hasher);
        hasher.finish()
    };
    move |event| {
        let changed = match event {
            Ok(watcher::Event::Apply(cluster)) => {
                let digest = digest(cluster);
                specs.insert(cluster.name_any(), digest) != Some(digest)
            }
            Ok(watcher::Event::Delete(cluster)) => {
                specs.remove(&cluster.name_any());
                true
            }
            Ok(watcher::Event::Init) => {
                specs.clear();
                false
            }
            Ok(watcher::Event::InitApply(cluster)) => {
                specs.insert(cluster.name_any(), digest(cluster));
                false
            }
            Ok(watcher::Event::InitDone) => true,
            Err(_) => false,
        };
        if changed {
            index.fresh.mark();
        }
    }
}

/// What the cache knows of the namespaces never injected: the operator's own.
fn options_for(operator_namespace: &str) -> InjectOptions {
    let excluded = if operator_namespace.is_empty() { Vec::new() } else { vec![operator_namespace.to_owned()] };
    InjectOptions { excluded_namespaces: excluded, native_sidecars: true, server_minor: None, ..Default::default() }
}

/// The webhook reads Watchers from the namespace index.
impl watcher_admission::WatcherSource for WatcherCache {
    fn watchers_in(&self, namespace: &str) -> Arc<NamespaceWatchers> {
        self.in_namespace(namespace)
    }
}

mod feed;
mod index;
#[cfg(test)]
mod tests;

pub use feed::{Lookup, changed, split};
use index::NamespaceIndex;
