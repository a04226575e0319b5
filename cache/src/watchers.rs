//! The one in-memory copy of every Watcher and ClusterWatcher in the process, shared by the
//! webhook (every replica) and the controllers (the leader), so 1,000 Watchers are held once,
//! not once per user.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt, future};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;
use watcher_admission::InjectOptions;
use watcher_api::{ClusterWatcher, Watcher};

use crate::NamespaceMeta;
use crate::freshness::Freshness;
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
struct NamespaceIndex {
    /// Rebuilt on the first read after a change; readers during a rebuild wait for it.
    fresh: Freshness,
    /// Counts rebuilds: an entry of `effective` computed from the index as it was before a
    /// rebuild is not kept after it (a reader that raced a change would otherwise leave its
    /// namespace on the old ClusterWatchers until the next change).
    epoch: AtomicU64,
    watchers: RwLock<HashMap<String, Arc<[Arc<Watcher>]>>>,
    /// Every ClusterWatcher, with the Watcher that stands for it wherever it applies.
    clusters: RwLock<Arc<[Shared]>>,
    /// Per namespace: the labels its entry was computed with, and its own and cluster Watchers.
    effective: RwLock<HashMap<String, Effective>>,
}

/// A namespace's labels, and the Watchers that apply there given them.
type Effective = (BTreeMap<String, String>, Arc<[Arc<Watcher>]>);

/// A ClusterWatcher and the one Watcher that stands for it in every namespace where it applies.
struct Shared {
    cluster: Arc<ClusterWatcher>,
    watcher: Arc<Watcher>,
}

impl std::borrow::Borrow<ClusterWatcher> for Shared {
    fn borrow(&self) -> &ClusterWatcher {
        &self.cluster
    }
}

impl NamespaceIndex {
    /// Indexes `watchers` by namespace, shares each of `clusters` as a Watcher, and forgets
    /// every namespace's effective Watchers.
    fn rebuild(&self, watchers: Vec<Arc<Watcher>>, clusters: Vec<Arc<ClusterWatcher>>) {
        let mut rebuilt: HashMap<String, Vec<Arc<Watcher>>> = HashMap::new();
        for watcher in watchers {
            rebuilt.entry(watcher.namespace().unwrap_or_default()).or_default().push(watcher);
        }
        let rebuilt = rebuilt.into_iter().map(|(namespace, watchers)| (namespace, watchers.into())).collect();
        let shared = clusters.into_iter().map(|cluster| Shared { watcher: Arc::new(cluster.unplaced()), cluster });
        *self.watchers.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        *self.clusters.write().unwrap_or_else(|p| p.into_inner()) = shared.collect();
        let mut effective = self.effective.write().unwrap_or_else(|p| p.into_inner());
        effective.clear();
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The namespace's own Watchers.
    fn own(&self, namespace: &str) -> Arc<[Arc<Watcher>]> {
        let watchers = self.watchers.read().unwrap_or_else(|p| p.into_inner());
        watchers.get(namespace).cloned().unwrap_or_else(|| Arc::new([]))
    }

    /// Every ClusterWatcher, shared.
    fn clusters(&self) -> Arc<[Shared]> {
        self.clusters.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The effective Watchers of `namespace`, when computed with these labels.
    fn remembered(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Option<Arc<[Arc<Watcher>]>> {
        let effective = self.effective.read().unwrap_or_else(|p| p.into_inner());
        effective.get(namespace).filter(|(seen, _)| seen == labels).map(|(_, watchers)| watchers.clone())
    }

    /// Keeps the effective Watchers of `namespace`, computed from the index as it was at
    /// `epoch`, unless a rebuild came since.
    fn remember(&self, epoch: u64, namespace: &str, labels: BTreeMap<String, String>, watchers: Arc<[Arc<Watcher>]>) {
        let mut effective = self.effective.write().unwrap_or_else(|p| p.into_inner());
        if self.epoch.load(Ordering::Acquire) == epoch {
            effective.insert(namespace.to_owned(), (labels, watchers));
        }
    }
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
    pub fn in_namespace(&self, namespace: &str) -> Arc<[Arc<Watcher>]> {
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
        let watchers: Arc<[Arc<Watcher>]> =
            own.iter().cloned().chain(applying.into_iter().map(|shared| shared.watcher.clone())).collect();
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
    pub fn own_watchers(&self, namespace: &str) -> Arc<[Arc<Watcher>]> {
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
    fn watchers_in(&self, namespace: &str) -> Arc<[Arc<Watcher>]> {
        self.in_namespace(namespace)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn watcher(name: &str) -> Watcher {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {"container": {"name": name}},
        }))
        .expect("valid Watcher")
    }

    /// The next item of `feed`, or a failure after 5 s: a regression fails the test instead of
    /// hanging CI.
    async fn next<S: futures::Stream + Unpin>(feed: &mut S) -> Option<S::Item> {
        tokio::time::timeout(std::time::Duration::from_secs(5), feed.next()).await.expect("an item within 5 s")
    }

    /// `stream` to its end, or a failure after 5 s.
    async fn all<S: futures::Stream>(stream: S) -> Vec<S::Item> {
        tokio::time::timeout(std::time::Duration::from_secs(5), stream.collect()).await.expect("the end within 5 s")
    }

    #[tokio::test]
    async fn subscribers_start_with_a_resync_and_catch_up_after_lagging() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(watcher("a")));
        let (cache, changes) = WatcherCache::from_store(store);
        let mut feed = Box::pin(cache.subscribe());
        assert_eq!(next(&mut feed).await, Some(Change::Resync));

        let a = ObjectRef::from(&watcher("a"));
        changes.send(Change::Watcher(a.clone())).expect("subscribed");
        assert_eq!(next(&mut feed).await, Some(Change::Watcher(a.clone())));

        for _ in 0..=CHANGE_BUFFER {
            let _ = changes.send(Change::Watcher(a.clone()));
        }
        assert_eq!(next(&mut feed).await, Some(Change::Resync), "a lagging subscriber resyncs");
        assert_eq!(cache.in_namespace("team-a").len(), 1);
        assert!(cache.in_namespace("team-b").is_empty());
    }

    /// Filled from the API: the store becomes ready after the initial list and every listed
    /// Watcher reaches the subscribers.
    #[tokio::test]
    async fn fills_from_the_api_and_becomes_ready() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let (cache, fill) = WatcherCache::new(Client::new(service, "default"), reflector::store().0, "watcher-system");
        let mut feed = Box::pin(cache.subscribe());
        tokio::spawn(fill);
        let server = tokio::spawn(async move {
            // The Watchers and the ClusterWatchers are listed, then watched, in any order;
            // the watches are kept open by never answering them.
            let mut open = Vec::new();
            loop {
                let (request, send) = handle.next_request().await.expect("request");
                let query = request.uri().query().unwrap_or_default().to_owned();
                if query.contains("watch=true") {
                    open.push(send);
                    continue;
                }
                let list = match request.uri().path() {
                    "/apis/watcher.dev/v1alpha1/watchers" => serde_json::json!({
                        "apiVersion": "watcher.dev/v1alpha1", "kind": "WatcherList",
                        "metadata": {"resourceVersion": "10"}, "items": [watcher("a"), watcher("b")]}),
                    "/apis/watcher.dev/v1alpha1/clusterwatchers" => serde_json::json!({
                        "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcherList",
                        "metadata": {"resourceVersion": "10"}, "items": []}),
                    other => panic!("unexpected request {other}"),
                };
                send.send_response(Response::new(Body::from(serde_json::to_vec(&list).expect("json"))));
            }
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), cache.store.wait_until_ready())
            .await
            .expect("ready in time")
            .expect("ready");
        assert_eq!(cache.store.len(), 2);
        let names: Vec<_> = cache.in_namespace("team-a").iter().map(|w| w.name_any()).collect();
        assert_eq!(names.len(), 2, "the namespace index sees the initial list: {names:?}");
        assert_eq!(next(&mut feed).await, Some(Change::Resync));
        let mut seen = vec![next(&mut feed).await, next(&mut feed).await];
        seen.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(
            seen,
            [
                Some(Change::Watcher(ObjectRef::from(&watcher("a")))),
                Some(Change::Watcher(ObjectRef::from(&watcher("b"))))
            ]
        );
        server.abort();
    }

    fn cluster_watcher(image: &str, team: &str, status: Option<serde_json::Value>) -> ClusterWatcher {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
            "metadata": {"name": "log-agent", "uid": "cw-1", "generation": 1},
            "spec": {"container": {"name": "log-agent", "image": image},
                     "namespaceSelector": {"matchLabels": {"team": team}}},
            "status": status,
        }))
        .expect("valid ClusterWatcher")
    }

    fn namespace(name: &str, team: &str) -> NamespaceMeta {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, "team": team}}}))
        .expect("namespace")
    }

    fn images(watchers: &[Arc<Watcher>]) -> Vec<(String, Option<String>)> {
        watchers.iter().map(|w| (w.name_any(), w.spec.container.image.clone())).collect()
    }

    /// A namespace's effective Watchers follow its labels at once (no invalidation needed) and
    /// the ClusterWatchers once the index is marked stale.
    #[test]
    fn a_namespace_sees_the_cluster_watchers_that_apply_there() {
        let (store, mut own) = reflector::store();
        own.apply_watcher_event(&Event::Apply(watcher("own")));
        let (cluster_store, mut clusters) = reflector::store();
        clusters.apply_watcher_event(&Event::Apply(cluster_watcher("busybox:1.36", "payments", None)));
        let (namespace_store, mut namespaces) = reflector::store();
        namespaces.apply_watcher_event(&Event::Apply(namespace("team-a", "search")));
        let (cache, _) = WatcherCache::from_stores(store, cluster_store, namespace_store, "watcher-system");
        assert_eq!(images(&cache.in_namespace("team-a")), [("own".to_owned(), None)], "not selected");

        namespaces.apply_watcher_event(&Event::Apply(namespace("team-a", "payments")));
        let seen = cache.in_namespace("team-a");
        assert_eq!(
            images(&seen),
            [("own".to_owned(), None), ("log-agent".to_owned(), Some("busybox:1.36".to_owned()))],
            "relabelled"
        );
        assert!(Arc::ptr_eq(&seen, &cache.in_namespace("team-a")), "kept until something changes");

        clusters.apply_watcher_event(&Event::Apply(cluster_watcher("busybox:1.37", "payments", None)));
        cache.invalidate();
        assert_eq!(images(&cache.in_namespace("team-a"))[1].1.as_deref(), Some("busybox:1.37"));

        // Every namespace where it applies holds the same copy of it, not one of its own.
        namespaces.apply_watcher_event(&Event::Apply(namespace("team-b", "payments")));
        let (a, b) = (cache.in_namespace("team-a"), cache.in_namespace("team-b"));
        assert!(Arc::ptr_eq(&a[1], &b[0]), "one ClusterWatcher, one copy");
        let mut everywhere: Vec<(String, String)> =
            cache.everywhere().iter().map(|(namespace, w)| (namespace.clone(), w.name_any())).collect();
        everywhere.sort(); // the stores list in no order
        assert_eq!(
            everywhere,
            [
                ("team-a".to_owned(), "log-agent".to_owned()),
                ("team-a".to_owned(), "own".to_owned()),
                ("team-b".to_owned(), "log-agent".to_owned())
            ]
        );
    }

    /// A reader that computed a namespace's Watchers from the stores before a rebuild does not
    /// leave them behind after it: the next reader computes them again.
    #[test]
    fn what_was_computed_before_a_rebuild_is_not_kept() {
        let index = NamespaceIndex::default();
        let labels = BTreeMap::from([("team".to_owned(), "payments".to_owned())]);
        let old: Arc<[Arc<Watcher>]> = Arc::new([Arc::new(watcher("old"))]);
        let before = index.epoch.load(Ordering::Acquire);
        index.rebuild(vec![Arc::new(watcher("new"))], Vec::new());
        index.remember(before, "team-a", labels.clone(), old.clone());
        assert!(index.remembered("team-a", &labels).is_none(), "computed before the rebuild");
        let now = index.epoch.load(Ordering::Acquire);
        index.remember(now, "team-a", labels.clone(), old);
        assert!(index.remembered("team-a", &labels).is_some());
        assert!(index.remembered("team-a", &BTreeMap::new()).is_none(), "other labels: computed again");
    }

    /// Only what admission reads of a ClusterWatcher marks the index stale: not a status write.
    #[test]
    fn a_status_write_leaves_the_namespaces_as_they_are() {
        let index = Arc::new(NamespaceIndex::default());
        let mut inspect = stale_on_spec_changes(index.clone());
        let stale = || index.fresh.take_marked();
        let listed = cluster_watcher("busybox:1.36", "payments", None);
        assert!(stale(), "a new index is built at its first read");
        inspect(&Ok(watcher::Event::Init));
        inspect(&Ok(watcher::Event::InitApply(listed.clone())));
        assert!(!stale(), "not before the list is in");
        inspect(&Ok(watcher::Event::InitDone));
        assert!(stale(), "the list is in");
        let counted =
            serde_json::json!({"namespaces": 3, "pods": {"matched": 4, "injected": 4, "upToDate": 4, "missing": 0}});
        inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.36", "payments", Some(counted)))));
        assert!(!stale(), "a status write");
        let held = serde_json::json!({"stableRevision": "log-agent-abc"});
        inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.36", "payments", Some(held)))));
        assert!(stale(), "a new stable revision: admission reads it");
        inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.37", "payments", None))));
        assert!(stale(), "a new image");
        inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.37", "search", None))));
        assert!(stale(), "a new namespaceSelector");
        inspect(&Ok(watcher::Event::Delete(listed)));
        assert!(stale(), "deleted");
    }

    /// A ClusterWatcher is looked at when it changes and when a Watcher of its name does (in
    /// any namespace: it may take that namespace over or hand it back); a resync goes to the
    /// other stream; a change of no ClusterWatcher's name is dropped.
    #[tokio::test]
    async fn a_cluster_watcher_hears_of_watchers_of_its_name() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(cluster_watcher("busybox:1.36", "payments", None)));
        let changes = futures::stream::iter([
            Change::Watcher(ObjectRef::new("log-agent").within("team-a")),
            Change::Watcher(ObjectRef::new("other").within("team-a")),
            Change::Resync,
            Change::ClusterWatcher(ObjectRef::new("log-agent")),
            Change::ClusterWatcher(ObjectRef::new("gone")),
        ]);
        let (triggers, resyncs) = split_cluster(changes, store);
        let names: Vec<String> = all(triggers.map(|c| c.name_any())).await;
        assert_eq!(names, ["log-agent", "log-agent"]);
        assert_eq!(all(resyncs).await.len(), 1);
    }

    #[test]
    fn sending_without_subscribers_never_blocks() {
        let (cache, changes) = WatcherCache::from_store(reflector::store().0);
        for _ in 0..10 * CHANGE_BUFFER {
            let _ = changes.send(Change::Watcher(ObjectRef::new("w").within("ns")));
        }
        drop(cache);
    }
}
