//! Pods → injection drift on each Watcher: `status.pods` counts, an Event when pods are missing
//! or outdated, and with `updatePolicy.type` `Recreate` or `InPlace` a rollout ([`rollout`]:
//! which pods go next; [`revisions`]: the specs pods carry; [`in_place`]: the patch of a
//! sidecar's image).
//!
//! Pods are kept as [`CountedPod`]s (labels, the injection annotations, whether a controller
//! recreates them, and for injected pods where their sidecars are, with which image, and what
//! the kubelet reports of them): thousands of pods cost little memory. A pod event reaches only the Watchers of its namespace.

pub mod in_place;
mod meta;
pub mod rollout;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};
use watcher_api::{
    ClusterWatcher, INJECT_ANNOTATION, INJECTED_ANNOTATION, INJECTED_WITHOUT_IMAGE_ANNOTATION,
    ORIGINAL_IMAGES_ANNOTATION, PodCounts, SIDECAR_UPDATED_ANNOTATION, SIDECARS_CANNOT_END_ANNOTATION, SUPERVISOR_NAME,
    UpdatePolicyType, Watcher, condition, injected_watchers, requested_watchers, set_condition,
};

use self::in_place::{Blocked, InjectedSpec, Sidecar};
use crate::revisions;
use crate::{Context, Error, PolicyCache, Result, WatcherCache};

const CONTROLLER: &str = "pods";
/// Pod events are gathered for this long before a Watcher is counted again.
const DEBOUNCE: Duration = Duration::from_millis(500);
/// An eviction refused by a PodDisruptionBudget (429) is tried again after this.
const EVICTION_RETRY: Duration = Duration::from_secs(10);
/// Pods per list page where the initial list is not streamed, as client-go lists:
/// kube-apiserver serves fewer, larger pages faster. A page is read whole, then held decoded
/// while it is reduced to [`CountedPod`]s; [`PodMeta`] keeps little of each pod.
const POD_PAGE_SIZE: u32 = 500;
/// Owners that recreate a pod that is evicted.
const RECREATING_OWNERS: [&str; 3] = ["ReplicaSet", "StatefulSet", "DaemonSet"];

pub use self::meta::PodMeta;

/// The containers a Watcher (by namespace and name) adds to a pod, its sidecar first and then
/// its init containers, so what the kubelet reports of them in injected pods can be kept.
pub type SidecarLookup = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

/// The containers `watcher` adds: its sidecar, then its init containers.
fn containers_of(watcher: &Watcher) -> Vec<String> {
    std::iter::once(&watcher.spec.container).chain(&watcher.spec.app.init_containers).map(|c| c.name.clone()).collect()
}

/// The waiting reasons of a container that cannot start without a change (of its spec, its
/// image, the node): the kubelet keeps retrying, the container never runs.
const CANNOT_START: [&str; 8] = [
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "RunContainerError",
];

/// The annotations a [`CountedPod`] keeps.
const KEPT_ANNOTATIONS: [&str; 6] = [
    INJECT_ANNOTATION,
    INJECTED_ANNOTATION,
    INJECTED_WITHOUT_IMAGE_ANNOTATION,
    SIDECAR_UPDATED_ANNOTATION,
    ORIGINAL_IMAGES_ANNOTATION,
    SIDECARS_CANNOT_END_ANNOTATION,
];

/// A pod as the pod reconciler keeps it: only what counting and eviction read, 48 bytes of its
/// own and its name, where the pod's whole metadata is several kilobytes. It is held in its
/// namespace's set itself, not behind a pointer of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct CountedPod {
    /// The pod's name.
    pub name: Box<str>,
    /// What it has in common with the other pods of its controller.
    shared: Arc<Shared>,
    /// When the pod was created, in seconds since the Unix epoch (the oldest are evicted first).
    pub created: Option<i64>,
    /// For a pod that carries Watchers: their containers, volumes and what the kubelet reports.
    pub injected: Option<Arc<InjectedSpec>>,
}

/// What the pods of a ReplicaSet have in common: one copy for all of them.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Shared {
    namespace: Arc<str>,
    labels: BTreeMap<String, String>,
    /// `watcher.dev/inject`, `watcher.dev/injected` and the other [`KEPT_ANNOTATIONS`] only.
    annotations: BTreeMap<String, String>,
    /// Controlled by a ReplicaSet, StatefulSet or DaemonSet, which recreates it when evicted.
    recreated_when_evicted: bool,
    /// Being deleted.
    terminating: bool,
}

impl CountedPod {
    /// The pod's namespace.
    pub fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    /// Its labels, for Watcher selectors.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.shared.labels
    }

    /// Its annotations that the reconciler reads ([`KEPT_ANNOTATIONS`]).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.shared.annotations
    }

    /// Controlled by a ReplicaSet, StatefulSet or DaemonSet, which recreates it when evicted.
    pub fn recreated_when_evicted(&self) -> bool {
        self.shared.recreated_when_evicted
    }

    /// Being deleted.
    pub fn terminating(&self) -> bool {
        self.shared.terminating
    }
}

impl From<&PodMeta> for CountedPod {
    fn from(pod: &PodMeta) -> Self {
        Self::new(pod, &Interner::default(), None)
    }
}

/// One shared copy of each distinct [`Shared`] and of each namespace name: the pods of a
/// ReplicaSet have the same labels, annotations and owner, so thousands of pods hold a handful.
#[derive(Default)]
struct Interner {
    shared: Mutex<HashSet<Arc<Shared>>>,
    namespaces: Mutex<HashSet<Arc<str>>>,
}

impl Interner {
    fn namespace(&self, namespace: &str) -> Arc<str> {
        let mut namespaces = lock(&self.namespaces);
        if let Some(shared) = namespaces.get(namespace) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(namespace);
        namespaces.insert(shared.clone());
        shared
    }

    fn intern(&self, value: Shared) -> Arc<Shared> {
        let mut all = lock(&self.shared);
        if let Some(shared) = all.get(&value) {
            return shared.clone();
        }
        let shared = Arc::new(value);
        all.insert(shared.clone());
        shared
    }

    /// Lets go of a pod's shared part: forgotten when no other pod has it.
    fn release(&self, shared: Arc<Shared>) {
        let mut all = lock(&self.shared);
        if Arc::strong_count(&shared) == 2 {
            all.remove(&*shared); // only this pod and the interner held it
        }
    }

    /// Forgets the sets and namespaces no pod uses any more.
    fn prune(&self) {
        lock(&self.shared).retain(|shared| Arc::strong_count(shared) > 1);
        lock(&self.namespaces).retain(|namespace| Arc::strong_count(namespace) > 1);
    }
}

impl CountedPod {
    /// `lookup` names the containers of the Watchers an injected pod carries; without it, no
    /// sidecar is kept.
    fn new(pod: &PodMeta, interner: &Interner, lookup: Option<&SidecarLookup>) -> Self {
        let annotations = pod
            .annotations()
            .iter()
            .filter(|(key, _)| KEPT_ANNOTATIONS.contains(&key.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let shared = Shared {
            namespace: interner.namespace(pod.metadata.namespace.as_deref().unwrap_or_default()),
            labels: pod.labels().clone(),
            annotations,
            recreated_when_evicted: pod
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && RECREATING_OWNERS.contains(&o.kind.as_str())),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        };
        Self {
            name: pod.metadata.name.as_deref().unwrap_or_default().into(),
            shared: interner.intern(shared),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            injected: lookup.and_then(|lookup| injected_spec(pod, lookup)).map(Arc::new),
        }
    }

    /// The pod as the reconciler keeps it, with the sidecars of `watchers` (for tests).
    #[cfg(test)]
    pub(crate) fn with_sidecars_of(pod: &PodMeta, watchers: &[Watcher]) -> Self {
        Self::new(pod, &Interner::default(), Some(&lookup_in(watchers.to_vec())))
    }
}

/// The sidecars of the Watchers `pod` carries, with what the kubelet reports of them.
fn injected_spec(pod: &PodMeta, lookup: &SidecarLookup) -> Option<InjectedSpec> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut wanted: Vec<String> =
        injected_watchers(pod.annotations()).into_iter().flat_map(|(name, _)| lookup(namespace, name)).collect();
    let spec = pod.spec.as_ref().filter(|_| !wanted.is_empty())?;
    // The supervisor's init container, which the webhook adds for the Watchers' sidecars of a
    // pod that is meant to end: one that cannot start keeps the pod from running.
    wanted.push(SUPERVISOR_NAME.to_owned());
    let status = pod.status.as_ref();
    let mut sidecars = Vec::new();
    let lists = [
        (false, spec.containers.as_slice(), status.map(|s| s.container_statuses.as_slice())),
        (true, spec.init_containers.as_slice(), status.map(|s| s.init_container_statuses.as_slice())),
    ];
    for (init, containers, statuses) in lists {
        for (index, container) in containers.iter().enumerate() {
            if !wanted.contains(&container.name) {
                continue;
            }
            let reported = statuses.unwrap_or_default().iter().find(|s| s.name == container.name);
            let running = reported.filter(|s| s.ready && s.running());
            let waiting = reported.and_then(|s| s.state.waiting.as_ref());
            let blocked = waiting.filter(|w| CANNOT_START.contains(&w.reason.as_str()));
            sidecars.push(Sidecar {
                name: container.name.as_str().into(),
                init,
                index,
                image: container.image.as_deref().unwrap_or_default().into(),
                running_image: running.map(|s| s.image.as_str().into()),
                blocked: blocked.map(|w| {
                    Box::new(Blocked { reason: w.reason.as_str().into(), message: w.message.as_str().into() })
                }),
            });
        }
    }
    Some(InjectedSpec {
        resource_version: pod.metadata.resource_version.as_deref().unwrap_or_default().into(),
        sidecars,
    })
}

/// A cached pod, found by its name (the set needs no second copy of the name as a key).
#[derive(Debug)]
struct ByName(CountedPod);

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl std::hash::Hash for ByName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state); // as `str` hashes, so lookups by `&str` find it
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

type ByNamespace = HashMap<Arc<str>, HashSet<ByName>>;

/// Pods by namespace: a reconcile reads its Watcher's namespace only.
#[derive(Default)]
pub struct PodIndex {
    by_namespace: RwLock<ByNamespace>,
    /// The initial list, swapped in whole when it is complete.
    listing: Mutex<ByNamespace>,
    synced: AtomicBool,
    interner: Interner,
    lookup: Option<SidecarLookup>,
}

impl PodIndex {
    /// An index that keeps the sidecars `lookup` names (for `updatePolicy: InPlace`).
    pub fn new(lookup: SidecarLookup) -> Self {
        Self { lookup: Some(lookup), ..Self::default() }
    }

    /// Applies a watch event; returns the pod whose change should be counted (initial-list
    /// entries return nothing: the whole list is counted once, when it is complete).
    fn apply(&self, event: watcher::Event<PodMeta>) -> Option<PodMeta> {
        match event {
            watcher::Event::Init => lock(&self.listing).clear(),
            watcher::Event::InitApply(pod) => {
                let counted = CountedPod::new(&pod, &self.interner, self.lookup.as_ref());
                let mut listing = lock(&self.listing);
                if let Some(old) = listing.entry(counted.shared.namespace.clone()).or_default().replace(ByName(counted))
                {
                    self.interner.release(old.0.shared);
                }
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut *lock(&self.listing));
                *self.by_namespace.write().unwrap_or_else(|p| p.into_inner()) = listed;
                self.interner.prune();
                self.synced.store(true, Ordering::Release);
            }
            watcher::Event::Apply(pod) => {
                let counted = CountedPod::new(&pod, &self.interner, self.lookup.as_ref());
                let mut index = self.by_namespace.write().unwrap_or_else(|p| p.into_inner());
                if let Some(old) = index.entry(counted.shared.namespace.clone()).or_default().replace(ByName(counted)) {
                    self.interner.release(old.0.shared);
                }
                return Some(pod);
            }
            watcher::Event::Delete(pod) => {
                let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
                let mut index = self.by_namespace.write().unwrap_or_else(|p| p.into_inner());
                if let Some(pods) = index.get_mut(namespace.as_str()) {
                    if let Some(gone) = pods.take(name.as_str()) {
                        self.interner.release(gone.0.shared);
                    }
                    if pods.is_empty() {
                        index.remove(namespace.as_str());
                        self.interner.prune(); // the namespace's name
                    }
                }
                return Some(pod);
            }
        }
        None
    }

    /// `read` over the pods of `namespace`, under the index's read lock: what it returns must
    /// not borrow them.
    pub fn with_namespace<R>(&self, namespace: &str, read: impl FnOnce(&[&CountedPod]) -> R) -> R {
        self.with_namespaces(&[namespace], read)
    }

    /// `read` over the pods of `namespaces`, as [`PodIndex::with_namespace`].
    pub fn with_namespaces<R>(&self, namespaces: &[impl AsRef<str>], read: impl FnOnce(&[&CountedPod]) -> R) -> R {
        let index = self.by_namespace.read().unwrap_or_else(|p| p.into_inner());
        let pods: Vec<&CountedPod> =
            namespaces.iter().filter_map(|ns| index.get(ns.as_ref())).flatten().map(|p| &p.0).collect();
        read(&pods)
    }

    /// Whether the initial list is in.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// An index holding `pods`, synced (for tests), keeping the sidecars of `watchers`.
    #[cfg(test)]
    pub(crate) fn with_pods(pods: impl IntoIterator<Item = PodMeta>) -> Self {
        Self::with_pods_of(pods, &[])
    }

    /// [`PodIndex::with_pods`], keeping the sidecars of `watchers`.
    #[cfg(test)]
    pub(crate) fn with_pods_of(pods: impl IntoIterator<Item = PodMeta>, watchers: &[Watcher]) -> Self {
        let index = Self::new(lookup_in(watchers.to_vec()));
        index.apply(watcher::Event::Init);
        for pod in pods {
            index.apply(watcher::Event::InitApply(pod));
        }
        index.apply(watcher::Event::InitDone);
        index
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the pod reconciler shares between reconciles.
pub struct PodsContext {
    ctx: Arc<Context>,
    /// The Watchers and ClusterWatchers: where a ClusterWatcher applies.
    cache: WatcherCache,
    pods: Arc<PodIndex>,
    recorder: Recorder,
    /// ImagePolicies: an image updated in place is rewritten as admission would.
    policies: Option<PolicyCache>,
    /// The Watchers' ControllerRevisions: the replica's revision cache.
    revisions: crate::RevisionCache,
    /// Specs pods carry whose revision was rebuilt, or could not be (`<uid>/<hash>`): tried
    /// once per process.
    rebuilt: Mutex<HashSet<String>>,
}

/// A lookup of Watchers' container names in a fixed list.
pub fn lookup_in(watchers: Vec<Watcher>) -> SidecarLookup {
    Arc::new(move |namespace: &str, name: &str| {
        watchers
            .iter()
            .find(|w| w.metadata.namespace.as_deref() == Some(namespace) && w.name_any() == name)
            .map(containers_of)
            .unwrap_or_default()
    })
}

/// Runs the pod reconciler until shutdown, on the Watchers and revisions of the shared
/// caches; `policies` rewrite the images it updates in place.
pub async fn run(ctx: Arc<Context>, cache: WatcherCache, revisions: crate::RevisionCache, policies: PolicyCache) {
    let client = ctx.client.clone();
    let lookup: SidecarLookup = {
        let cache = cache.clone();
        Arc::new(move |namespace: &str, name: &str| {
            let watchers = cache.in_namespace(namespace);
            watchers.iter().find(|w| w.name_any() == name).map(|w| containers_of(w)).unwrap_or_default()
        })
    };
    let pods = Arc::new(PodIndex::new(lookup));
    let (synced_tx, synced_rx) = futures::channel::mpsc::unbounded();
    let (cluster_synced_tx, synced_cluster) = futures::channel::mpsc::unbounded();
    let pod_events = pod_events(Api::<PodMeta>::all(client.clone()))
        .inspect(crate::observe_watch("pods"))
        .default_backoff()
        .filter_map({
            let pods = pods.clone();
            move |event| {
                let changed = match event {
                    Ok(event) => {
                        let done = matches!(event, watcher::Event::InitDone);
                        let changed = pods.apply(event).map(Ok);
                        if done {
                            // Count every Watcher and ClusterWatcher once.
                            let _ = synced_tx.unbounded_send(());
                            let _ = cluster_synced_tx.unbounded_send(());
                        }
                        changed
                    }
                    Err(error) => Some(Err(error)),
                };
                futures::future::ready(changed)
            }
        });
    let reporter = Reporter { controller: watcher_api::FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    let revision_events = revisions.subscribe();
    // Revision changes missed (a lagging subscriber): every Watcher and ClusterWatcher again.
    let (missed_tx, missed_rx) = futures::channel::mpsc::unbounded();
    let (cluster_missed_tx, cluster_missed) = futures::channel::mpsc::unbounded();
    let namespace_changes = policies.changes();
    let shared = Arc::new(PodsContext {
        ctx,
        cache: cache.clone(),
        pods,
        recorder: Recorder::new(client, reporter),
        policies: Some(policies),
        revisions: revisions.clone(),
        rebuilt: Mutex::default(),
    });
    // Pod and revision events go to the Watchers or ClusterWatchers they concern: a pod's, by
    // its namespace; a revision's, by its owner.
    let (pods_tx, pods_rx) = futures::channel::mpsc::unbounded::<ObjectRef<Watcher>>();
    let (cluster_tx, cluster_rx) = futures::channel::mpsc::unbounded::<ObjectRef<ClusterWatcher>>();
    let watchers = cache.clone();
    let (revision_tx, revision_rx) = (pods_tx.clone(), cluster_tx.clone());
    let fan_out = futures::future::join(
        pod_events.for_each(move |pod| {
            if let Ok(pod) = pod {
                for watcher in watchers.in_namespace(&pod.namespace().unwrap_or_default()).iter() {
                    match watcher.cluster_watcher() {
                        Some(owner) => drop(cluster_tx.unbounded_send(ObjectRef::new(&owner.name))),
                        None => drop(pods_tx.unbounded_send(ObjectRef::from(watcher.as_ref()))),
                    }
                }
            }
            futures::future::ready(())
        }),
        revision_events.for_each(move |change| {
            match change {
                crate::RevisionChange::Revision(revision) => {
                    for owner in revision.owner_references().iter().filter(|o| o.controller == Some(true)) {
                        if owner.kind == watcher_api::CLUSTER_WATCHER_KIND {
                            drop(revision_rx.unbounded_send(ObjectRef::new(&owner.name)));
                        } else {
                            let namespace = revision.namespace().unwrap_or_default();
                            drop(revision_tx.unbounded_send(ObjectRef::new(&owner.name).within(&namespace)));
                        }
                    }
                }
                crate::RevisionChange::Resync => {
                    drop(missed_tx.unbounded_send(()));
                    drop(cluster_missed_tx.unbounded_send(()));
                }
            }
            futures::future::ready(())
        }),
    );
    let (triggers, resyncs) = crate::cache::split(cache.subscribe(), cache.store.clone());
    let watchers = Controller::for_shared_stream(triggers, cache.store.clone())
        .reconcile_all_on(futures::stream::select_all([resyncs.boxed(), synced_rx.boxed(), missed_rx.boxed()]))
        .reconcile_on(pods_rx)
        .with_config(crate::controller_config().debounce(DEBOUNCE))
        .shutdown_on_signal()
        .run(reconcile, error_policy, shared.clone())
        .for_each(|result| async move { crate::log_run_result(CONTROLLER, result) });
    let (changes, resyncs) = crate::cache::split_cluster(cache.subscribe(), cache.cluster.clone());
    let namespaces = crate::cache::changed(namespace_changes);
    let clusters = Controller::for_shared_stream(changes, cache.cluster.clone())
        .reconcile_all_on(futures::stream::select_all([
            resyncs.boxed(),
            namespaces.boxed(),
            synced_cluster.boxed(),
            cluster_missed.boxed(),
        ]))
        .reconcile_on(cluster_rx)
        .with_config(crate::controller_config().debounce(DEBOUNCE))
        .shutdown_on_signal()
        .run(reconcile_cluster, cluster_error_policy, shared)
        .for_each(|result| async move { crate::log_run_result(CONTROLLER, result) });
    futures::join!(fan_out, watchers, clusters);
}

/// The pods' watch events. The initial list is streamed where kube-apiserver serves it so
/// (`sendInitialEvents`, the WatchList feature: on by default in 1.32 and from 1.34), each pod
/// decoded as it arrives. Any failure of that streamed list before its end, whatever the code,
/// switches once to pods listed in consistent pages of [`POD_PAGE_SIZE`], as client-go's
/// reflector falls back: a refusal of the request (422 or 400: before 1.27, and with the
/// feature gate off, as 1.27 to 1.31 and 1.33 ship), and equally an `ERROR` event inside an
/// accepted stream (HTTP 200, then a Status 500: 1.36 on an etcd without progress
/// notifications). Once the initial list has ended, an error is a watch error as before, and
/// the watcher retries it. (Not `any_semantic`: with resourceVersion=0 kube-apiserver serves
/// the list from its watch cache and ignores the page size, one response holding every pod of
/// the cluster.)
fn pod_events(
    api: Api<PodMeta>,
) -> impl futures::Stream<Item = Result<watcher::Event<PodMeta>, watcher::Error>> + Send + 'static {
    let streamed = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    // `fallback` is the API to list in pages, until the streamed list has ended or failed.
    futures::stream::unfold((streamed, Some(api)), |(mut events, mut fallback)| async move {
        loop {
            let event = events.next().await?;
            if let Err(error) = &event
                && let Some(api) = fallback.take()
            {
                info!(%error, "the streamed list of pods failed; listing pods in pages of {POD_PAGE_SIZE}");
                events = watcher(api, watcher::Config::default().page_size(POD_PAGE_SIZE)).boxed();
                continue;
            }
            if matches!(event, Ok(watcher::Event::InitDone)) {
                fallback = None;
            }
            return Some((event, (events, fallback)));
        }
    })
}

/// How a pod stands towards one Watcher.
#[derive(Debug, Default, PartialEq)]
struct Standing {
    matched: bool,
    injected: bool,
    up_to_date: bool,
}

fn standing(watcher: &Watcher, hash: &str, pod: &CountedPod) -> Standing {
    let name = watcher.name_any();
    let annotations = pod.annotations();
    let matched = requested_watchers(annotations).contains(&name.as_str()) || watcher.selects(pod.labels());
    let entry = injected_watchers(annotations).into_iter().find(|(n, _)| *n == name);
    Standing { matched, injected: entry.is_some(), up_to_date: entry.is_some_and(|(_, h)| h == hash) }
}

/// `status.pods` of `watcher` over `pods` (any namespace: only the Watcher's own count; pods
/// being deleted do not count).
pub fn count(watcher: &Watcher, pods: &[&CountedPod]) -> PodCounts {
    let hash = watcher.spec.spec_hash();
    let containers = containers_of(watcher);
    let mut counts = PodCounts::default();
    for pod in live_pods_of(watcher, pods) {
        let s = standing(watcher, &hash, pod);
        counts.matched += i32::from(s.matched);
        counts.injected += i32::from(s.injected);
        counts.up_to_date += i32::from(s.up_to_date);
        counts.missing += i32::from(s.matched && !s.injected);
        counts.cannot_start += i32::from(s.injected && blocked_in(pod, &containers).is_some());
        counts.cannot_end += i32::from(s.injected && kept_running(pod, &containers).is_some());
    }
    counts
}

/// The first of `containers` that the ending controller ended in `pod` but still runs, as the
/// pod's `watcher.dev/sidecars-cannot-end` says (the pod cannot finish).
fn kept_running<'p>(pod: &'p CountedPod, containers: &[String]) -> Option<&'p str> {
    let named = pod.annotations().get(SIDECARS_CANNOT_END_ANNOTATION)?;
    named.split(',').map(str::trim).find(|n| containers.iter().any(|c| c == n))
}

/// `SidecarsEnded`: `False` (`CannotEnd`) while pods that are meant to end cannot, a sidecar of
/// the Watcher still running after its app has ended, naming the first pod; `True` once none
/// (only where the condition was there).
fn ended_condition(watcher: &Watcher, pods: &[&CountedPod], counts: &PodCounts) -> Option<(bool, String, String)> {
    let containers = containers_of(watcher);
    let name = watcher.name_any();
    let mut kept: Vec<(&CountedPod, &str)> = live_pods_of(watcher, pods)
        .filter(|p| injected_watchers(p.annotations()).iter().any(|(n, _)| *n == name))
        .filter_map(|p| kept_running(p, &containers).map(|c| (p, c)))
        .collect();
    kept.sort_by(|a, b| a.0.created.cmp(&b.0.created).then_with(|| a.0.name.cmp(&b.0.name)));
    let had = watcher.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == ENDED_CONDITION));
    match kept.first() {
        Some((pod, container)) => {
            let kind = if watcher.metadata.namespace.is_some() { "Watcher" } else { watcher_api::CLUSTER_WATCHER_KIND };
            let text = format!(
                "{} injected pods cannot end: their app containers have ended, but a container of this {kind} \
                 still runs after it was ended: pod {}, container {container} (kubectl describe pod says why: \
                 the supervisor's image not pulled, or a sidecar that outlives the pod's grace period)",
                counts.cannot_end,
                shown(watcher, pod),
            );
            Some((false, "CannotEnd".to_owned(), text))
        }
        None if had => {
            Some((true, "Ended".to_owned(), "every injected pod that was meant to end has ended".to_owned()))
        }
        None => None,
    }
}

/// The condition that says whether the Watcher's sidecars end with their app in pods that are
/// meant to end.
pub const ENDED_CONDITION: &str = "SidecarsEnded";

/// The first of `containers` (or the supervisor's init container, which they need) that cannot
/// start in `pod`, as the kubelet reports it: (its name, the kubelet's reason and message).
fn blocked_in<'p>(pod: &'p CountedPod, containers: &[String]) -> Option<(&'p str, &'p Blocked)> {
    let spec = pod.injected.as_deref()?;
    spec.sidecars
        .iter()
        .filter(|s| containers.iter().any(|c| **c == *s.name) || &*s.name == SUPERVISOR_NAME)
        .find_map(|s| Some((&*s.name, s.blocked.as_deref()?)))
}

/// `SidecarsRunning`: `False` (the kubelet's reason) while injected pods cannot start a
/// container of the Watcher, naming the first pod and the kubelet's words; `True` once none
/// (only where the condition was there: a Watcher whose containers always started has none).
fn running_condition(watcher: &Watcher, pods: &[&CountedPod], counts: &PodCounts) -> Option<(bool, String, String)> {
    let containers = containers_of(watcher);
    let name = watcher.name_any();
    let mut blocked: Vec<(&CountedPod, &str, &Blocked)> = live_pods_of(watcher, pods)
        .filter(|p| injected_watchers(p.annotations()).iter().any(|(n, _)| *n == name))
        .filter_map(|p| blocked_in(p, &containers).map(|(c, why)| (p, c, why)))
        .collect();
    blocked.sort_by(|a, b| a.0.created.cmp(&b.0.created).then_with(|| a.0.name.cmp(&b.0.name)));
    let had = watcher.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == RUNNING_CONDITION));
    match blocked.first() {
        Some((pod, container, Blocked { reason, message })) => {
            let text = format!(
                "{} of {} injected pods cannot start a container of this {}: pod {}, container {container}: {reason}{}{message}",
                counts.cannot_start,
                counts.injected,
                if watcher.metadata.namespace.is_some() { "Watcher" } else { watcher_api::CLUSTER_WATCHER_KIND },
                shown(watcher, pod),
                if message.is_empty() { "" } else { ": " },
            );
            Some((false, reason.to_string(), text))
        }
        None if had => {
            Some((true, "Started".to_owned(), "the Watcher's containers start in every injected pod".to_owned()))
        }
        None => None,
    }
}

/// The condition that says whether the Watcher's containers start in its pods.
pub const RUNNING_CONDITION: &str = "SidecarsRunning";

/// Whether `pod` is in `watcher`'s namespace; a ClusterWatcher's (no namespace) takes every pod
/// it is given: those of the namespaces where it applies.
fn in_reach(watcher: &Watcher, pod: &CountedPod) -> bool {
    watcher.is_in(pod.namespace())
}

/// How messages name `pod`: by name in a Watcher's namespace, `namespace/name` across a
/// ClusterWatcher's.
fn shown(watcher: &Watcher, pod: &CountedPod) -> String {
    match watcher.metadata.namespace {
        Some(_) => pod.name.to_string(),
        None => format!("{}/{}", pod.namespace(), pod.name),
    }
}

fn live_pods_of<'a>(watcher: &'a Watcher, pods: &'a [&CountedPod]) -> impl Iterator<Item = &'a CountedPod> + 'a {
    pods.iter().copied().filter(move |p| in_reach(watcher, p) && !p.terminating())
}

/// The Watcher's pods being deleted (matched or injected): they count against `maxUnavailable`.
fn terminating_pods_of(watcher: &Watcher, hash: &str, pods: &[&CountedPod]) -> usize {
    pods.iter()
        .filter(|p| in_reach(watcher, p) && p.terminating())
        .filter(|p| {
            let s = standing(watcher, hash, p);
            s.matched || s.injected
        })
        .count()
}

/// Whose pods a reconcile counts and rolls out, and where it writes what it finds.
enum Subject {
    /// A Watcher: the pods of its namespace.
    Watcher(String),
    /// A ClusterWatcher: the pods of the namespaces where it applies.
    Cluster(Arc<ClusterWatcher>),
}

/// Counts the Watcher's pods, takes a step of its rollout (`Recreate`, `InPlace`), and records
/// the counts.
#[instrument(skip(watcher, ctx), fields(namespace = watcher.namespace(), watcher = watcher.name_any()))]
pub async fn reconcile(watcher: Arc<Watcher>, ctx: Arc<PodsContext>) -> Result<Action> {
    if let Some(wait) = unready(&ctx) {
        return Ok(wait);
    }
    let namespace = watcher.namespace().ok_or_else(|| Error::MissingNamespace(watcher.name_any()))?;
    let action =
        reconcile_subject(&watcher, std::slice::from_ref(&namespace), &Subject::Watcher(namespace.clone()), &ctx)
            .await?;
    ctx.ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(action)
}

/// [`reconcile`] for a ClusterWatcher: its pods in every namespace where it applies, one
/// rollout across all of them, oldest first; its revisions in the operator's namespace.
#[instrument(skip(cluster, ctx), fields(clusterwatcher = cluster.name_any()))]
pub async fn reconcile_cluster(cluster: Arc<ClusterWatcher>, ctx: Arc<PodsContext>) -> Result<Action> {
    if let Some(wait) = unready(&ctx) {
        return Ok(wait);
    }
    let namespaces = ctx.cache.namespaces_of(&cluster);
    let watcher = cluster.across_namespaces();
    let action = reconcile_subject(&watcher, &namespaces, &Subject::Cluster(cluster.clone()), &ctx).await?;
    ctx.ctx.reconciled(&crate::object_key(CONTROLLER, cluster.as_ref()));
    Ok(action)
}

/// What to do until the pods and the revisions are listed: counts would be short, and the
/// cache would say "no revision".
fn unready(ctx: &PodsContext) -> Option<Action> {
    if !ctx.pods.is_synced() {
        return Some(Action::await_change()); // every Watcher is counted when the list is in
    }
    if !ctx.revisions.is_listed() {
        return Some(Action::requeue(crate::UNLISTED_RETRY));
    }
    None
}

async fn reconcile_subject(
    watcher: &Watcher,
    namespaces: &[String],
    subject: &Subject,
    ctx: &PodsContext,
) -> Result<Action> {
    let _timer = ctx.ctx.metrics.reconcile(CONTROLLER);
    let rolls = watcher.spec.update_policy.type_ != UpdatePolicyType::Report;
    let keeps_revisions = revisions::kept_for(&watcher.spec);
    let rebuilt = if keeps_revisions { rebuild_unkept(watcher, namespaces, ctx).await? } else { Vec::new() };
    let (mut counts, step, running) = ctx.pods.with_namespaces(namespaces, |pods| {
        let counts = count(watcher, pods);
        let running = running_condition(watcher, pods, &counts);
        let ended = ended_condition(watcher, pods, &counts);
        let step = keeps_revisions.then(|| plan_step(watcher, pods, ctx, namespaces, &counts, &rebuilt));
        (counts, step, (running, ended))
    });
    let mut conditions = watcher.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let mut revisions = None;
    let action = match step {
        None => Action::await_change(),
        Some(step) => {
            revisions::write(step.revisions, &ctx.ctx.client, &revisions_namespace(watcher, ctx)).await?;
            revisions = Some((step.current, step.stable));
            if rolls {
                let (action, patched, written) = roll(watcher, subject, step.rollout, ctx).await?;
                conditions = written.unwrap_or(conditions);
                // A pod counts as up to date once its patch is written.
                counts.up_to_date += i32::try_from(patched).unwrap_or(i32::MAX);
                action
            } else {
                Action::await_change()
            }
        }
    };
    if let Subject::Cluster(cluster) = subject {
        // Only namespaces with pods that ask for it: over 1,000 namespaces, 4 series each
        // would be mostly zeros that no alert or panel reads.
        let by_namespace = namespaces
            .iter()
            .map(|ns| (ns.clone(), ctx.pods.with_namespace(ns, |pods| count(watcher, pods))))
            .filter(|(_, counts)| counts.matched > 0)
            .collect();
        ctx.ctx.metrics.set_cluster_pods(&cluster.name_any(), by_namespace);
    }
    // The counts and the revisions, in one write when either changed.
    let status = watcher.status.as_ref();
    let mut changed = serde_json::Map::new();
    if let Some((current, stable)) = revisions {
        let written =
            (status.and_then(|s| s.current_revision.as_deref()), status.and_then(|s| s.stable_revision.as_deref()));
        if written != (Some(current.as_str()), Some(stable.as_str())) {
            changed.insert("currentRevision".into(), current.into());
            changed.insert("stableRevision".into(), stable.into());
        }
    }
    let counts_changed = status.and_then(|s| s.pods) != Some(counts);
    if counts_changed {
        changed.insert("pods".into(), json!(counts));
    }
    if !changed.is_empty() {
        patch_status(subject, &watcher.name_any(), ctx, json!({ "status": changed })).await?;
    }
    if counts_changed {
        let outdated = counts.injected - counts.up_to_date;
        if counts.missing > 0 || outdated > 0 {
            // Once per change of the counts, not once per reconcile.
            let note = format!(
                "{} of {} pods miss this {} and {outdated} carry an older spec",
                counts.missing,
                counts.matched,
                subject.kind()
            );
            publish(ctx, subject, watcher, EventType::Warning, "InjectionDrift", "Count", note).await;
        }
    }
    let (running, ended) = running;
    let conditions = set_kubelet_condition(watcher, subject, ctx, RUNNING_CONDITION, running, conditions).await?;
    set_kubelet_condition(watcher, subject, ctx, ENDED_CONDITION, ended, conditions).await?;
    Ok(action)
}

impl Subject {
    fn kind(&self) -> &'static str {
        match self {
            Self::Watcher(_) => "Watcher",
            Self::Cluster(_) => watcher_api::CLUSTER_WATCHER_KIND,
        }
    }
}

/// Merge-patches the status of the Watcher or ClusterWatcher.
async fn patch_status(subject: &Subject, name: &str, ctx: &PodsContext, patch: serde_json::Value) -> Result<()> {
    let params = PatchParams::default();
    match subject {
        Subject::Watcher(namespace) => {
            let api = Api::<Watcher>::namespaced(ctx.ctx.client.clone(), namespace);
            api.patch_status(name, &params, &Patch::Merge(&patch)).await?;
        }
        Subject::Cluster(_) => {
            let api = Api::<ClusterWatcher>::all(ctx.ctx.client.clone());
            api.patch_status(name, &params, &Patch::Merge(&patch)).await?;
        }
    }
    Ok(())
}

/// How often a rollout in flight is looked at again (pod status changes also wake it).
const IN_PLACE_RECHECK: Duration = Duration::from_secs(15);

/// What one step of a rollout writes, planned from the cached pods.
struct Step {
    revisions: revisions::RevisionPlan,
    rollout: rollout::Rollout,
    /// The current revision's name, for the status.
    current: String,
    /// The stable revision's name, for the status (see [`revisions::stable_revision`]).
    stable: String,
}

/// Plans a step of `watcher`'s rollout over `pods` (those of `namespaces`, counted as
/// `counts`): the revisions kept (the current spec's created, the oldest beyond the history
/// that no pod carries deleted, never the stable one), the stable revision, the in-place
/// patches and the evictions.
fn plan_step(
    watcher: &Watcher,
    pods: &[&CountedPod],
    ctx: &PodsContext,
    namespaces: &[String],
    counts: &PodCounts,
    rebuilt: &[Arc<ControllerRevision>],
) -> Step {
    let mut all = ctx.revisions.store.state();
    all.extend(
        rebuilt.iter().filter(|r| !all.iter().any(|a| a.metadata.name == r.metadata.name)).cloned().collect::<Vec<_>>(),
    );
    let mine = revisions::revisions_of(watcher, &all);
    let name = watcher.name_any();
    let mut carried_by: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods {
        for (_, hash) in injected_watchers(pod.annotations()).into_iter().filter(|(n, _)| *n == name) {
            *carried_by.entry(hash.to_owned()).or_default() += 1;
        }
    }
    let carried: BTreeSet<String> = carried_by.keys().cloned().collect();
    let complete = counts.injected == counts.up_to_date;
    let stable = revisions::stable_revision(watcher, &mine, &carried_by, complete);
    let current = revisions::revision_name(&name, &watcher.spec.spec_hash());
    let policies: Vec<(&str, Vec<Arc<watcher_api::CompiledPolicy>>)> = namespaces
        .iter()
        .map(|ns| (ns.as_str(), ctx.policies.as_ref().map(|p| p.policies_for(ns)).unwrap_or_default()))
        .filter(|(_, policies)| !policies.is_empty())
        .collect();
    let rules: rollout::Rules<'_> =
        policies.iter().map(|(ns, policies)| (*ns, policies.iter().flat_map(|p| p.valid_rules()).collect())).collect();
    Step {
        revisions: revisions::plan_revisions(watcher, &revisions_namespace(watcher, ctx), &mine, &carried, &stable),
        rollout: rollout::plan(watcher, pods, &mine, &rules, jiff::Timestamp::now()),
        current,
        stable,
    }
}

/// Specs rebuilt per reconcile at most (each a read of one pod and a search of its spec).
const REBUILDS_PER_RECONCILE: usize = 3;
/// Specs remembered as tried (a bound on memory; forgotten all at once when reached).
const REBUILDS_REMEMBERED: usize = 10_000;

/// The revisions of specs that pods carry and no revision holds (injected and replaced before
/// any controller saw them), rebuilt from one pod each ([`revisions::rebuild`]) and written, so
/// the stable revision is one that pods carry. Each spec is tried once per process.
async fn rebuild_unkept(
    watcher: &Watcher,
    namespaces: &[String],
    ctx: &PodsContext,
) -> Result<Vec<Arc<ControllerRevision>>> {
    let name = watcher.name_any();
    let current = watcher.spec.spec_hash();
    let all = ctx.revisions.store.state();
    let mine = revisions::revisions_of(watcher, &all);
    let kept = |hash: &str| {
        let revision = revisions::revision_name(&name, hash);
        mine.iter().any(|r| r.metadata.name.as_deref() == Some(revision.as_str()))
    };
    let uid = watcher.uid().unwrap_or_default();
    let unkept: BTreeMap<String, (String, String)> = ctx.pods.with_namespaces(namespaces, |pods| {
        let mut unkept = BTreeMap::new();
        // From the oldest pod that carries it (any pod holds the spec; one pod, predictably).
        let mut live: Vec<&&CountedPod> = pods.iter().filter(|p| !p.terminating()).collect();
        live.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
        for pod in live {
            for (_, hash) in injected_watchers(pod.annotations()).into_iter().filter(|(n, _)| *n == name) {
                if hash != current && !kept(hash) {
                    unkept.entry(hash.to_owned()).or_insert_with(|| (pod.namespace().to_owned(), pod.name.to_string()));
                }
            }
        }
        unkept
    });
    let mut rebuilt = Vec::new();
    for (hash, (namespace, pod)) in unkept.into_iter().take(REBUILDS_PER_RECONCILE) {
        {
            let mut tried = lock(&ctx.rebuilt);
            if tried.len() >= REBUILDS_REMEMBERED {
                tried.clear();
            }
            if !tried.insert(format!("{uid}/{hash}")) {
                continue;
            }
        }
        let Some(stored) = Api::<Pod>::namespaced(ctx.ctx.client.clone(), &namespace).get_opt(&pod).await? else {
            continue;
        };
        let Some(spec) = revisions::rebuild::rebuild(&stored, &name, &watcher.spec.container.name, &hash) else {
            warn!(pod, namespace, hash, "the spec this pod carries has no revision and cannot be rebuilt from it");
            continue;
        };
        let number = revisions::rebuilt_number(&mine);
        let Some(mut revision) = revisions::revision_of(watcher, &spec, &revisions_namespace(watcher, ctx), number)
        else {
            continue;
        };
        let from = format!("{namespace}/{pod}");
        revision.metadata.annotations = Some([(revisions::REBUILT_FROM_ANNOTATION.to_owned(), from.clone())].into());
        revisions::create(&ctx.ctx.client, &revision).await?;
        info!(revision = revision.name_any(), from, "rebuilt the revision of a spec pods carry from a pod");
        rebuilt.push(Arc::new(revision));
    }
    Ok(rebuilt)
}

/// Where `watcher`'s revisions are kept: its namespace; a ClusterWatcher's, the operator's.
fn revisions_namespace(watcher: &Watcher, ctx: &PodsContext) -> String {
    watcher.namespace().unwrap_or_else(|| ctx.cache.operator_namespace().to_owned())
}

/// One step of a rollout (its revisions kept before): the in-place patches, then the evictions, an
/// Event for what was updated, and the `SidecarsUpdated` condition when it changes. Returns the
/// pods patched.
async fn roll(
    watcher: &Watcher,
    subject: &Subject,
    mut rollout: rollout::Rollout,
    ctx: &PodsContext,
) -> Result<(Action, usize, Option<Vec<watcher_api::Condition>>)> {
    let mut patched = Vec::new();
    let mut conflict = false;
    for patch in &rollout.patches {
        let api = Api::<Pod>::namespaced(ctx.ctx.client.clone(), &patch.namespace);
        let ops = Patch::Json::<()>(json_patch::Patch(patch.ops.clone()));
        match api.patch(&patch.pod, &PatchParams::default(), &ops).await {
            Ok(_) => {
                info!(pod = patch.pod, image = patch.image, "sidecar image updated in place");
                ctx.ctx.metrics.in_place_update();
                patched.push(patch.pod.as_str());
            }
            // Changed since it was cached (409), or its container moved (422, the test op):
            // planned again from the next event.
            Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => conflict = true,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    if !patched.is_empty() {
        let image = rollout.patches.first().map(|p| p.image.as_str()).unwrap_or_default();
        let note =
            format!("sidecar image updated in place to {image} in {} pod(s): {}", patched.len(), patched.join(", "));
        publish(ctx, subject, watcher, EventType::Normal, "SidecarUpdated", "Update", note).await;
    }
    // The condition counts a pod patched now as on the current spec and updating, as the
    // counts do.
    let patched: Vec<String> = patched.into_iter().map(str::to_owned).collect();
    rollout.updated += patched.len();
    rollout.outdated -= patched.len();
    rollout.in_flight.extend(patched.iter().cloned());
    let written = set_rollout_condition(watcher, subject, ctx, &rollout).await?;
    let mut action = evict_names(&ctx.ctx.client, &rollout.evictions).await?;
    if conflict || !patched.is_empty() || !rollout.in_flight.is_empty() {
        action = Action::requeue(IN_PLACE_RECHECK.min(EVICTION_RETRY));
    }
    Ok((action, patched.len(), written))
}

/// `SidecarsUpdated`, as [`rollout::condition`] says it; written only when it changes, with an
/// Event when the rollout gets stuck. Returns the conditions written, if any.
async fn set_rollout_condition(
    watcher: &Watcher,
    subject: &Subject,
    ctx: &PodsContext,
    rollout: &rollout::Rollout,
) -> Result<Option<Vec<watcher_api::Condition>>> {
    let (status, reason, message) = rollout::condition(watcher, rollout);
    let mut conditions = watcher.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let existing = conditions.iter().find(|c| c.type_ == "SidecarsUpdated");
    let generation = watcher.metadata.generation;
    if existing.is_some_and(|c| c.reason == reason && c.message == message && c.observed_generation == generation) {
        return Ok(None);
    }
    if reason == "Stuck" && existing.is_none_or(|c| c.reason != "Stuck") {
        let stuck = "SidecarUpdateStuck";
        publish(ctx, subject, watcher, EventType::Warning, stuck, "Update", message.clone()).await;
    }
    set_condition(&mut conditions, condition("SidecarsUpdated", status, reason, message, generation));
    patch_status(subject, &watcher.name_any(), ctx, json!({"status": {"conditions": conditions}})).await?;
    Ok(Some(conditions))
}

/// `SidecarsRunning` ([`running_condition`]) or `SidecarsEnded` ([`ended_condition`]) over
/// `conditions` (the Watcher's, or those this reconcile wrote), written when it changes, with a
/// Warning Event when it turns false or names another first pod; the conditions as they are
/// then.
async fn set_kubelet_condition(
    watcher: &Watcher,
    subject: &Subject,
    ctx: &PodsContext,
    type_: &str,
    condition_now: Option<(bool, String, String)>,
    mut conditions: Vec<watcher_api::Condition>,
) -> Result<Vec<watcher_api::Condition>> {
    let Some((status, reason, message)) = condition_now else { return Ok(conditions) };
    let existing = conditions.iter().find(|c| c.type_ == type_);
    if existing.is_some_and(|c| c.reason == reason && c.message == message) {
        return Ok(conditions);
    }
    if !status {
        let event = if type_ == RUNNING_CONDITION { "SidecarCannotStart" } else { "SidecarCannotEnd" };
        publish(ctx, subject, watcher, EventType::Warning, event, "Count", message.clone()).await;
    }
    let generation = watcher.metadata.generation;
    set_condition(&mut conditions, condition(type_, status, &reason, message, generation));
    patch_status(subject, &watcher.name_any(), ctx, json!({"status": {"conditions": &conditions}})).await?;
    Ok(conditions)
}

/// Publishes an Event about the Watcher or ClusterWatcher.
async fn publish(
    ctx: &PodsContext,
    subject: &Subject,
    watcher: &Watcher,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
    let regarding = match subject {
        Subject::Watcher(_) => watcher.object_ref(&()),
        Subject::Cluster(cluster) => cluster.object_ref(&()),
    };
    if let Err(error) = ctx.recorder.publish(&event, &regarding).await {
        warn!(%error, reason, "cannot publish an event");
    }
}

/// Evicts the chosen pods; a refusal by a PodDisruptionBudget waits for the next try.
async fn evict_names(client: &kube::Client, chosen: &[rollout::PodName]) -> Result<Action> {
    if chosen.is_empty() {
        return Ok(Action::await_change());
    }
    for rollout::PodName { namespace, name } in chosen {
        let api = Api::<Pod>::namespaced(client.clone(), namespace);
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => info!(namespace, pod = name, "evicted: its controller recreates it injected"),
            Err(kube::Error::Api(status)) if status.code == 429 => {
                info!(namespace, pod = name, "eviction refused for now (PodDisruptionBudget)");
                return Ok(Action::requeue(EVICTION_RETRY));
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    // The next pods go when these are gone and their replacements counted.
    Ok(Action::requeue(EVICTION_RETRY))
}

/// Logs the failure and retries with backoff.
pub fn error_policy(watcher: Arc<Watcher>, error: &Error, ctx: Arc<PodsContext>) -> Action {
    warn!(namespace = watcher.namespace(), watcher = watcher.name_any(), %error, "pod reconcile failed");
    ctx.ctx.retry_after_error(CONTROLLER, crate::object_key(CONTROLLER, watcher.as_ref()), error)
}

/// [`error_policy`] for a ClusterWatcher.
pub fn cluster_error_policy(cluster: Arc<ClusterWatcher>, error: &Error, ctx: Arc<PodsContext>) -> Action {
    warn!(clusterwatcher = cluster.name_any(), %error, "pod reconcile failed");
    ctx.ctx.retry_after_error(CONTROLLER, crate::object_key(CONTROLLER, cluster.as_ref()), error)
}

/// A context over `pods`, for tests that fill the index themselves.
#[cfg(test)]
fn context_for_tests(
    ctx: Arc<Context>,
    pods: PodIndex,
    revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
) -> Arc<PodsContext> {
    let cache = WatcherCache::from_store(kube::runtime::reflector::store().0).0;
    context_with_cache(ctx, pods, revisions, cache)
}

/// [`context_for_tests`] over the Watchers, ClusterWatchers and namespaces of `cache`.
#[cfg(test)]
fn context_with_cache(
    ctx: Arc<Context>,
    pods: PodIndex,
    revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
    cache: WatcherCache,
) -> Arc<PodsContext> {
    let reporter = Reporter { controller: watcher_api::FIELD_MANAGER.into(), instance: None };
    let recorder = Recorder::new(ctx.client.clone(), reporter);
    let revisions = crate::RevisionCache::holding(revisions, cache.operator_namespace());
    let rebuilt = Mutex::default();
    Arc::new(PodsContext { ctx, cache, pods: Arc::new(pods), recorder, policies: None, revisions, rebuilt })
}

/// The same caches and memory of rebuilt specs, over another client (a test's next scenario).
#[cfg(test)]
impl PodsContext {
    fn over(&self, ctx: Arc<Context>) -> Arc<Self> {
        let reporter = Reporter { controller: watcher_api::FIELD_MANAGER.into(), instance: None };
        Arc::new(Self {
            recorder: Recorder::new(ctx.client.clone(), reporter),
            ctx,
            cache: self.cache.clone(),
            pods: self.pods.clone(),
            policies: self.policies.clone(),
            revisions: self.revisions.clone(),
            rebuilt: Mutex::new(lock(&self.rebuilt).clone()),
        })
    }
}

#[cfg(test)]
mod tests;
