//! Pods → injection drift on each Watcher: `status.pods` counts, an Event when pods are missing
//! or outdated, and with `updatePolicy.type: Recreate` evictions so their controllers recreate
//! them injected.
//!
//! Pods are watched as metadata only and kept as [`CountedPod`]s (labels, the two injection
//! annotations, whether a controller recreates them): thousands of pods cost little memory. A pod event reaches only the
//! Watchers of its namespace.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};
use watcher_api::{
    INJECT_ANNOTATION, INJECTED_ANNOTATION, PodCounts, UpdatePolicyType, Watcher, injected_watchers, requested_watchers,
};

use crate::{Context, Error, Result, WatcherCache};

const CONTROLLER: &str = "pods";
/// Pod events are gathered for this long before a Watcher is counted again.
const DEBOUNCE: Duration = Duration::from_millis(500);
/// An eviction refused by a PodDisruptionBudget (429) is tried again after this.
const EVICTION_RETRY: Duration = Duration::from_secs(10);
/// Pods per list page: the page is held decoded (metadata with managed fields) while it is
/// reduced to [`CountedPod`]s.
const POD_PAGE_SIZE: u32 = 100;
/// Owners that recreate a pod that is evicted.
const RECREATING_OWNERS: [&str; 3] = ["ReplicaSet", "StatefulSet", "DaemonSet"];

/// A pod as the pod reconciler holds it.
pub type PodMeta = PartialObjectMeta<Pod>;

/// A pod as the pod reconciler keeps it: only what counting and eviction read, about a hundred
/// bytes of its own where the pod's whole metadata is several kilobytes.
#[derive(Clone, Debug, PartialEq)]
pub struct CountedPod {
    /// The pod's name.
    pub name: Box<str>,
    /// The pod's namespace (one shared string per namespace).
    pub namespace: Arc<str>,
    /// Labels, for Watcher selectors (shared between pods with the same labels).
    pub labels: Arc<BTreeMap<String, String>>,
    /// `watcher.dev/inject` and `watcher.dev/injected` only (shared likewise).
    pub annotations: Arc<BTreeMap<String, String>>,
    /// Controlled by a ReplicaSet, StatefulSet or DaemonSet, which recreates it when evicted.
    pub recreated_when_evicted: bool,
    /// When the pod was created (the oldest are evicted first).
    pub created: Option<jiff::Timestamp>,
    /// Being deleted.
    pub terminating: bool,
}

impl From<&PodMeta> for CountedPod {
    fn from(pod: &PodMeta) -> Self {
        Self::new(pod, &Interner::default())
    }
}

/// One shared copy of each distinct label or annotation set, and of each namespace name: the
/// pods of a ReplicaSet carry the same ones, so thousands of pods hold a handful of maps.
#[derive(Default)]
struct Interner {
    maps: Mutex<std::collections::HashSet<Arc<BTreeMap<String, String>>>>,
    namespaces: Mutex<std::collections::HashSet<Arc<str>>>,
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

    fn intern(&self, map: BTreeMap<String, String>) -> Arc<BTreeMap<String, String>> {
        let mut maps = lock(&self.maps);
        if let Some(shared) = maps.get(&map) {
            return shared.clone();
        }
        let shared = Arc::new(map);
        maps.insert(shared.clone());
        shared
    }

    /// Forgets the sets and namespaces no pod uses any more.
    fn prune(&self) {
        lock(&self.maps).retain(|map| Arc::strong_count(map) > 1);
        lock(&self.namespaces).retain(|namespace| Arc::strong_count(namespace) > 1);
    }
}

impl CountedPod {
    fn new(pod: &PodMeta, interner: &Interner) -> Self {
        let annotations = pod
            .annotations()
            .iter()
            .filter(|(key, _)| *key == INJECT_ANNOTATION || *key == INJECTED_ANNOTATION)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            name: pod.metadata.name.as_deref().unwrap_or_default().into(),
            namespace: interner.namespace(pod.metadata.namespace.as_deref().unwrap_or_default()),
            labels: interner.intern(pod.labels().clone()),
            annotations: interner.intern(annotations),
            recreated_when_evicted: pod
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && RECREATING_OWNERS.contains(&o.kind.as_str())),
            created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// A cached pod, found by its name (the set needs no second copy of the name as a key).
#[derive(Clone, Debug)]
struct ByName(Arc<CountedPod>);

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

type ByNamespace = HashMap<Arc<str>, std::collections::HashSet<ByName>>;

/// Pods by namespace: a reconcile reads its Watcher's namespace only.
#[derive(Default)]
pub struct PodIndex {
    by_namespace: RwLock<ByNamespace>,
    /// The initial list, swapped in whole when it is complete.
    listing: Mutex<ByNamespace>,
    synced: AtomicBool,
    interner: Interner,
}

impl PodIndex {
    /// Applies a watch event; returns the pod whose change should be counted (initial-list
    /// entries return nothing: the whole list is counted once, when it is complete).
    fn apply(&self, event: watcher::Event<PodMeta>) -> Option<PodMeta> {
        match event {
            watcher::Event::Init => lock(&self.listing).clear(),
            watcher::Event::InitApply(pod) => {
                let counted = CountedPod::new(&pod, &self.interner);
                let mut listing = lock(&self.listing);
                listing.entry(counted.namespace.clone()).or_default().replace(ByName(Arc::new(counted)));
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut *lock(&self.listing));
                *self.by_namespace.write().unwrap_or_else(|p| p.into_inner()) = listed;
                self.interner.prune();
                self.synced.store(true, Ordering::Release);
            }
            watcher::Event::Apply(pod) => {
                let counted = CountedPod::new(&pod, &self.interner);
                let mut index = self.by_namespace.write().unwrap_or_else(|p| p.into_inner());
                index.entry(counted.namespace.clone()).or_default().replace(ByName(Arc::new(counted)));
                return Some(pod);
            }
            watcher::Event::Delete(pod) => {
                let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
                let mut index = self.by_namespace.write().unwrap_or_else(|p| p.into_inner());
                if let Some(pods) = index.get_mut(namespace.as_str()) {
                    if pods.take(name.as_str()).is_some_and(|gone| Arc::strong_count(&gone.0.labels) == 2) {
                        self.interner.prune(); // the last pod with these labels
                    }
                    if pods.is_empty() {
                        index.remove(namespace.as_str());
                    }
                }
                return Some(pod);
            }
        }
        None
    }

    /// The pods of `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<CountedPod>> {
        let index = self.by_namespace.read().unwrap_or_else(|p| p.into_inner());
        index.get(namespace).map(|pods| pods.iter().map(|p| p.0.clone()).collect()).unwrap_or_default()
    }

    /// Whether the initial list is in.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// An index holding `pods`, synced (for tests).
    #[cfg(test)]
    pub(crate) fn with_pods(pods: impl IntoIterator<Item = PodMeta>) -> Self {
        let index = Self::default();
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
    pods: Arc<PodIndex>,
    recorder: Recorder,
}

/// Runs the pod reconciler until shutdown, on the Watchers of the shared cache.
pub async fn run(ctx: Arc<Context>, cache: WatcherCache) {
    let client = ctx.client.clone();
    let pods = Arc::new(PodIndex::default());
    let (synced_tx, synced_rx) = futures::channel::mpsc::unbounded();
    // Consistent, paginated lists: with `any_semantic` (resourceVersion=0) kube-apiserver serves
    // the list from its watch cache and ignores the page size, one response holding every pod of
    // the cluster; small pages keep the transient decoding memory per page small.
    let config = watcher::Config::default().page_size(POD_PAGE_SIZE);
    let pod_events = watcher(Api::<PodMeta>::all(client.clone()), config).default_backoff().filter_map({
        let pods = pods.clone();
        move |event| {
            let changed = match event {
                Ok(event) => {
                    let done = matches!(event, watcher::Event::InitDone);
                    let changed = pods.apply(event).map(Ok);
                    if done {
                        let _ = synced_tx.unbounded_send(()); // count every Watcher once
                    }
                    changed
                }
                Err(error) => Some(Err(error)),
            };
            futures::future::ready(changed)
        }
    });
    let reporter = Reporter { controller: watcher_api::FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
    let shared = Arc::new(PodsContext { ctx, pods, recorder: Recorder::new(client, reporter) });
    let watchers = cache.clone();
    let (triggers, resyncs) = crate::cache::split(cache.subscribe(), cache.store.clone());
    Controller::for_shared_stream(triggers, cache.store.clone())
        .reconcile_all_on(futures::stream::select(resyncs, synced_rx))
        .watches_stream(pod_events, move |pod: PodMeta| {
            let namespace = pod.namespace().unwrap_or_default();
            watchers.in_namespace(&namespace).iter().map(|w| ObjectRef::from(w.as_ref())).collect::<Vec<_>>()
        })
        .with_config(crate::controller_config().debounce(DEBOUNCE))
        .shutdown_on_signal()
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move { crate::log_run_result(CONTROLLER, result) })
        .await;
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
    let annotations = &pod.annotations;
    let matched = requested_watchers(annotations).contains(&name.as_str()) || watcher.selects(&pod.labels);
    let entry = injected_watchers(annotations).into_iter().find(|(n, _)| *n == name);
    Standing { matched, injected: entry.is_some(), up_to_date: entry.is_some_and(|(_, h)| h == hash) }
}

/// `status.pods` of `watcher` over `pods` (any namespace: only the Watcher's own count; pods
/// being deleted do not count).
pub fn count(watcher: &Watcher, pods: &[Arc<CountedPod>]) -> PodCounts {
    let hash = watcher.spec.spec_hash();
    let mut counts = PodCounts::default();
    for pod in live_pods_of(watcher, pods) {
        let s = standing(watcher, &hash, pod);
        counts.matched += i32::from(s.matched);
        counts.injected += i32::from(s.injected);
        counts.up_to_date += i32::from(s.up_to_date);
        counts.missing += i32::from(s.matched && !s.injected);
    }
    counts
}

fn live_pods_of<'a>(watcher: &'a Watcher, pods: &'a [Arc<CountedPod>]) -> impl Iterator<Item = &'a CountedPod> + 'a {
    let namespace = watcher.namespace().unwrap_or_default();
    pods.iter().map(Arc::as_ref).filter(move |p| *p.namespace == *namespace && !p.terminating)
}

/// The pods to evict now under `updatePolicy: Recreate`: missing or outdated pods whose
/// controller (a ReplicaSet, StatefulSet or DaemonSet) will recreate them, oldest first, no more
/// than `maxUnavailable` minus the Watcher's pods already terminating.
pub fn eviction_choice(watcher: &Watcher, pods: &[Arc<CountedPod>]) -> Vec<String> {
    let policy = &watcher.spec.update_policy;
    if policy.type_ != UpdatePolicyType::Recreate {
        return Vec::new();
    }
    let hash = watcher.spec.spec_hash();
    let namespace = watcher.namespace().unwrap_or_default();
    let terminating = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| *p.namespace == *namespace && p.terminating)
        .filter(|p| {
            let s = standing(watcher, &hash, p);
            s.matched || s.injected
        })
        .count();
    let budget = usize::try_from(policy.max_unavailable).unwrap_or(0).saturating_sub(terminating);
    let mut candidates: Vec<&CountedPod> = live_pods_of(watcher, pods)
        .filter(|p| p.recreated_when_evicted)
        .filter(|p| {
            let s = standing(watcher, &hash, p);
            (s.matched && !s.injected) || (s.injected && !s.up_to_date)
        })
        .collect();
    candidates.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    candidates.into_iter().take(budget).map(|p| p.name.to_string()).collect()
}

/// Counts the Watcher's pods, evicts under Recreate, and records the counts.
#[instrument(skip(watcher, ctx), fields(namespace = watcher.namespace(), watcher = watcher.name_any()))]
pub async fn reconcile(watcher: Arc<Watcher>, ctx: Arc<PodsContext>) -> Result<Action> {
    if !ctx.pods.is_synced() {
        // Counts would be short; every Watcher is counted when the list is in.
        return Ok(Action::await_change());
    }
    let _timer = ctx.ctx.metrics.reconcile(CONTROLLER);
    let namespace = watcher.namespace().ok_or_else(|| Error::MissingNamespace(watcher.name_any()))?;
    let pods = ctx.pods.in_namespace(&namespace);
    let counts = count(&watcher, &pods);
    let action = evict(&watcher, &pods, &ctx, &namespace).await?;

    let current = watcher.status.as_ref().and_then(|s| s.pods);
    if current != Some(counts) {
        let api = Api::<Watcher>::namespaced(ctx.ctx.client.clone(), &namespace);
        let patch = json!({"status": {"pods": counts}});
        api.patch_status(&watcher.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        let outdated = counts.injected - counts.up_to_date;
        if counts.missing > 0 || outdated > 0 {
            // Once per change of the counts, not once per reconcile.
            let event = Event {
                type_: EventType::Warning,
                reason: "InjectionDrift".into(),
                note: Some(format!(
                    "{} of {} pods miss this Watcher and {outdated} carry an older spec",
                    counts.missing, counts.matched
                )),
                action: "Count".into(),
                secondary: None,
            };
            if let Err(error) = ctx.recorder.publish(&event, &watcher.object_ref(&())).await {
                warn!(%error, "cannot publish the drift event");
            }
        }
    }
    ctx.ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(action)
}

/// Evicts the chosen pods; a refusal by a PodDisruptionBudget waits for the next try.
async fn evict(watcher: &Watcher, pods: &[Arc<CountedPod>], ctx: &PodsContext, namespace: &str) -> Result<Action> {
    let chosen = eviction_choice(watcher, pods);
    if chosen.is_empty() {
        return Ok(Action::await_change());
    }
    let api = Api::<Pod>::namespaced(ctx.ctx.client.clone(), namespace);
    for name in &chosen {
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => info!(pod = name, "evicted: its controller recreates it injected"),
            Err(kube::Error::Api(status)) if status.code == 429 => {
                info!(pod = name, "eviction refused for now (PodDisruptionBudget)");
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

/// A context over `pods`, for tests that fill the index themselves.
#[cfg(test)]
fn context_for_tests(ctx: Arc<Context>, pods: PodIndex) -> Arc<PodsContext> {
    let reporter = Reporter { controller: watcher_api::FIELD_MANAGER.into(), instance: None };
    let recorder = Recorder::new(ctx.client.clone(), reporter);
    Arc::new(PodsContext { ctx, pods: Arc::new(pods), recorder })
}

#[cfg(test)]
mod tests;
