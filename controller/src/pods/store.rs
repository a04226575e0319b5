//! The pods as the reconciler keeps them: [`CountedPod`]s in a [`PodIndex`] by namespace, what
//! each carries of its Watchers' sidecars.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher;
use watcher_api::{SUPERVISOR_NAME, Watcher, annotation};

use super::PodMeta;
use super::RECREATING_OWNERS;
use super::in_place::{Blocked, InjectedSpec, Sidecar};
use crate::runtime::lock;

/// The containers a Watcher (by namespace and name) adds to a pod, its sidecar first and then
/// its init containers, so what the kubelet reports of them in injected pods can be kept.
pub(super) type SidecarLookup = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

/// The containers `watcher` adds: its sidecar, then its init containers.
pub(super) fn containers_of(watcher: &Watcher) -> Vec<String> {
    std::iter::once(&watcher.spec.container).chain(&watcher.spec.app.init_containers).map(|c| c.name.clone()).collect()
}

/// The waiting reasons of a container that cannot start without a change (of its spec, its
/// image, the node): the kubelet keeps retrying, the container never runs.
pub(super) const CANNOT_START: [&str; 8] = [
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
pub(super) const KEPT_ANNOTATIONS: [&str; 8] = [
    annotation::Inject::KEY,
    annotation::Injected::KEY,
    annotation::InjectedConfig::KEY,
    annotation::InjectedWithoutImage::KEY,
    annotation::SidecarUpdated::KEY,
    annotation::OriginalImages::KEY,
    annotation::SidecarsCannotEnd::KEY,
    annotation::LeftOut::KEY,
];

/// A pod as the pod reconciler keeps it: only what counting and eviction read, 48 bytes of its
/// own and its name, where the pod's whole metadata is several kilobytes. It is held in its
/// namespace's set itself, not behind a pointer of its own.
#[derive(Clone, Debug, PartialEq)]
pub struct CountedPod {
    /// The pod's name.
    pub name: Box<str>,
    /// What it has in common with the other pods of its controller.
    pub(super) shared: Arc<Shared>,
    /// When the pod was created, in seconds since the Unix epoch (the oldest are evicted first).
    pub created: Option<i64>,
    /// For a pod that carries Watchers: their containers, volumes and what the kubelet reports.
    pub injected: Option<Arc<InjectedSpec>>,
}

/// What the pods of a ReplicaSet have in common: one copy for all of them.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Shared {
    pub(super) namespace: Arc<str>,
    pub(super) labels: BTreeMap<String, String>,
    /// `watcher.dev/inject`, `watcher.dev/injected` and the other [`KEPT_ANNOTATIONS`] only.
    pub(super) annotations: BTreeMap<String, String>,
    /// Controlled by a ReplicaSet, StatefulSet or DaemonSet, which recreates it when evicted.
    pub(super) recreated_when_evicted: bool,
    /// Being deleted.
    pub(super) terminating: bool,
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
pub(super) struct Interner {
    pub(super) shared: Mutex<HashSet<Arc<Shared>>>,
    pub(super) namespaces: Mutex<HashSet<Arc<str>>>,
}

impl Interner {
    pub(super) fn namespace(&self, namespace: &str) -> Arc<str> {
        let mut namespaces = lock(&self.namespaces);
        if let Some(shared) = namespaces.get(namespace) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(namespace);
        namespaces.insert(shared.clone());
        shared
    }

    pub(super) fn intern(&self, value: Shared) -> Arc<Shared> {
        let mut all = lock(&self.shared);
        if let Some(shared) = all.get(&value) {
            return shared.clone();
        }
        let shared = Arc::new(value);
        all.insert(shared.clone());
        shared
    }

    /// Lets go of a pod's shared part: forgotten when no other pod has it.
    pub(super) fn release(&self, shared: Arc<Shared>) {
        let mut all = lock(&self.shared);
        if Arc::strong_count(&shared) == 2 {
            all.remove(&*shared); // only this pod and the interner held it
        }
    }

    /// Forgets the sets and namespaces no pod uses any more.
    pub(super) fn prune(&self) {
        lock(&self.shared).retain(|shared| Arc::strong_count(shared) > 1);
        lock(&self.namespaces).retain(|namespace| Arc::strong_count(namespace) > 1);
    }
}

impl CountedPod {
    /// `lookup` names the containers of the Watchers an injected pod carries; without it, no
    /// sidecar is kept.
    pub(super) fn new(pod: &PodMeta, interner: &Interner, lookup: Option<&SidecarLookup>) -> Self {
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
}

/// The sidecars of the Watchers `pod` carries, with what the kubelet reports of them.
pub(super) fn injected_spec(pod: &PodMeta, lookup: &SidecarLookup) -> Option<InjectedSpec> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut wanted: Vec<String> = annotation::Injected::read(pod.annotations())
        .into_iter()
        .flat_map(|(name, _)| lookup(namespace, name))
        .collect();
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
pub(super) struct ByName(CountedPod);

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

pub(super) type ByNamespace = HashMap<Arc<str>, HashSet<ByName>>;

/// Pods by namespace: a reconcile reads its Watcher's namespace only.
#[derive(Default)]
pub(super) struct PodIndex {
    pub(super) by_namespace: RwLock<ByNamespace>,
    /// The initial list, swapped in whole when it is complete.
    pub(super) listing: Mutex<ByNamespace>,
    pub(super) synced: AtomicBool,
    pub(super) interner: Interner,
    pub(super) lookup: Option<SidecarLookup>,
}

impl PodIndex {
    /// An index that keeps the sidecars `lookup` names (for `updatePolicy: InPlace`).
    pub(super) fn new(lookup: SidecarLookup) -> Self {
        Self { lookup: Some(lookup), ..Self::default() }
    }

    /// Applies a watch event; returns the pod whose change should be counted (initial-list
    /// entries return nothing: the whole list is counted once, when it is complete).
    pub(super) fn apply(&self, event: watcher::Event<PodMeta>) -> Option<PodMeta> {
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
    pub(super) fn with_namespace<R>(&self, namespace: &str, read: impl FnOnce(&[&CountedPod]) -> R) -> R {
        self.with_namespaces(&[namespace], read)
    }

    /// `read` over the pods of `namespaces`, as [`PodIndex::with_namespace`].
    pub(super) fn with_namespaces<R>(
        &self,
        namespaces: &[impl AsRef<str>],
        read: impl FnOnce(&[&CountedPod]) -> R,
    ) -> R {
        let index = self.by_namespace.read().unwrap_or_else(|p| p.into_inner());
        let pods: Vec<&CountedPod> =
            namespaces.iter().filter_map(|ns| index.get(ns.as_ref())).flatten().map(|p| &p.0).collect();
        read(&pods)
    }

    /// Whether the initial list is in.
    pub(super) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}
