//! Sync: Secrets and ConfigMaps annotated `watcher.dev/sync` in a source namespace are copied
//! into every namespace the annotation's label selector selects.
//!
//! Level-based: each reconcile of a source computes, from the caches of namespaces and copies,
//! the whole set of copies it should have and makes it so ([`plan`]), so a restart, a missed
//! event or a hand edit loses nothing. A source that is deleted still has copies to delete,
//! which kube's `Controller` would not reconcile (it skips objects gone from its store), so the
//! loop here is keyed by the source's namespace and name, with kube's scheduler deduplicating.
//!
//! Memory: sources are watched only in the source namespaces, copies by label
//! (`watcher.dev/synced=true`), namespaces as metadata. No list of the cluster's Secrets is held.

mod selector;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::SelectorExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::scheduler::{ScheduleRequest, debounced_scheduler};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tokio::sync::{broadcast, mpsc};
use tracing::{info, warn};
use watcher_api::{FIELD_MANAGER, SYNC_ANNOTATION, SYNCED_FROM_ANNOTATION, SYNCED_LABEL};

pub use selector::{SelectorError, parse_selector};

use crate::{Context, Error, Result};

const CONTROLLER: &str = "sync";
/// Namespaces that never get a copy.
const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];
/// Changes to the same source within this time are reconciled once.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// A source with copies blocked by objects that are not its copies is looked at again this often.
const CONFLICT_RETRY: Duration = Duration::from_secs(300);
/// Writes in flight for one source.
const WRITES_IN_FLIGHT: usize = 16;

pub use watcher_cache::NamespaceMeta;

/// A kind that can be synced: the payload a copy must hold, besides its metadata.
pub trait Synced: crate::NamespacedObject {
    /// The kind's name, for messages and metrics.
    const KIND: &'static str;
    /// Whether the object's data can no longer change.
    fn immutable(&self) -> bool;
    /// The Secret type; `None` for kinds without one.
    fn type_(&self) -> Option<&str> {
        None
    }
    /// Whether `copy` holds the payload of `source` (type, data, binary data, immutable).
    fn same_payload(source: &Self, copy: &Self) -> bool;
    /// `source`'s payload under `metadata`.
    fn with_payload(source: &Self, metadata: ObjectMeta) -> Self;
}

fn non_empty<V>(map: &Option<BTreeMap<String, V>>) -> Option<&BTreeMap<String, V>> {
    map.as_ref().filter(|m| !m.is_empty())
}

impl Synced for Secret {
    const KIND: &'static str = "Secret";
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
    fn type_(&self) -> Option<&str> {
        // The API server defaults an empty type to Opaque.
        Some(self.type_.as_deref().filter(|t| !t.is_empty()).unwrap_or("Opaque"))
    }
    fn same_payload(source: &Self, copy: &Self) -> bool {
        source.type_() == copy.type_()
            && source.immutable() == copy.immutable()
            && non_empty(&source.data) == non_empty::<ByteString>(&copy.data)
    }
    fn with_payload(source: &Self, metadata: ObjectMeta) -> Self {
        Self {
            metadata,
            type_: source.type_.clone(),
            data: source.data.clone(),
            immutable: source.immutable,
            ..Self::default()
        }
    }
}

impl Synced for ConfigMap {
    const KIND: &'static str = "ConfigMap";
    fn immutable(&self) -> bool {
        self.immutable == Some(true)
    }
    fn same_payload(source: &Self, copy: &Self) -> bool {
        source.immutable() == copy.immutable()
            && non_empty(&source.data) == non_empty(&copy.data)
            && non_empty(&source.binary_data) == non_empty(&copy.binary_data)
    }
    fn with_payload(source: &Self, metadata: ObjectMeta) -> Self {
        Self {
            metadata,
            data: source.data.clone(),
            binary_data: source.binary_data.clone(),
            immutable: source.immutable,
        }
    }
}

/// A source by namespace and name (it may no longer exist).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceKey {
    /// The source namespace.
    pub namespace: String,
    /// The object's name, which every copy shares.
    pub name: String,
}

impl std::fmt::Display for SourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl SourceKey {
    fn of<K: Resource>(object: &K) -> Self {
        Self {
            namespace: object.meta().namespace.clone().unwrap_or_default(),
            name: object.meta().name.clone().unwrap_or_default(),
        }
    }

    /// The source a copy names in `watcher.dev/synced-from`.
    fn from_copy<K: Resource>(copy: &K) -> Option<Self> {
        let from = copy.meta().annotations.as_ref()?.get(SYNCED_FROM_ANNOTATION)?;
        let (namespace, name) = from.split_once('/')?;
        Some(Self { namespace: namespace.to_owned(), name: name.to_owned() })
    }
}

/// Whether `object` is the copy of `key` (labelled and annotated by this controller).
fn is_copy_of<K: Resource>(object: &K, key: &SourceKey) -> bool {
    let labelled = object.meta().labels.as_ref().and_then(|l| l.get(SYNCED_LABEL)).is_some_and(|v| v == "true");
    labelled && SourceKey::from_copy(object).as_ref() == Some(key)
}

/// The metadata of the copy of `source` in `namespace`: the source's labels, plus the sync
/// label and the annotation naming the source.
fn copy_metadata<K: Resource>(source: &K, key: &SourceKey, namespace: &str) -> ObjectMeta {
    let mut labels = source.meta().labels.clone().unwrap_or_default();
    labels.insert(SYNCED_LABEL.to_owned(), "true".to_owned());
    ObjectMeta {
        name: Some(key.name.clone()),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(SYNCED_FROM_ANNOTATION.to_owned(), key.to_string())])),
        ..ObjectMeta::default()
    }
}

/// The copy of `source` in `namespace`.
pub fn desired_copy<K: Synced>(source: &K, key: &SourceKey, namespace: &str) -> K {
    K::with_payload(source, copy_metadata(source, key, namespace))
}

/// Whether `copy` already is what [`desired_copy`] would write.
fn in_sync<K: Synced>(source: &K, key: &SourceKey, copy: &K) -> bool {
    let desired = copy_metadata(source, key, "");
    K::same_payload(source, copy) && copy.meta().labels == desired.labels && is_copy_of(copy, key)
}

/// What a reconcile of one source changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Namespaces without a cached copy: a copy is written unless an object that is not a copy
    /// turns out to be there.
    pub create: Vec<String>,
    /// Namespaces whose copy differs from the source.
    pub update: Vec<String>,
    /// Copies whose type or immutable data must change: deleted (by uid) and written anew.
    pub recreate: Vec<(String, Option<String>)>,
    /// Copies to delete (by uid): the namespace is no longer selected, or the source is gone.
    pub delete: Vec<(String, Option<String>)>,
    /// Namespaces holding an object of that name that is not this source's copy: left alone.
    pub conflicts: Vec<String>,
    /// The annotation is not a label selector: nothing is changed until it is fixed.
    pub invalid_selector: Option<SelectorError>,
}

impl Plan {
    /// Whether the plan writes nothing.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.recreate.is_empty() && self.delete.is_empty()
    }
}

/// Whether a namespace can hold a copy of a source in `source_namespace`.
fn eligible(namespace: &NamespaceMeta, source_namespace: &str) -> bool {
    let name = namespace.name_any();
    name != source_namespace
        && !SYSTEM_NAMESPACES.contains(&name.as_str())
        && namespace.metadata.deletion_timestamp.is_none()
}

/// The changes that make the copies of `key` what `source` asks for. `source` is `None` when
/// the object is gone or no longer annotated; `named` holds every cached object of the source's
/// name carrying the sync label (copies of this source and of others).
pub fn plan<K: Synced>(
    key: &SourceKey,
    source: Option<&K>,
    namespaces: &[Arc<NamespaceMeta>],
    named: &[Arc<K>],
) -> Plan {
    let mut plan = Plan::default();
    let terminating: Vec<String> =
        namespaces.iter().filter(|n| n.metadata.deletion_timestamp.is_some()).map(|n| n.name_any()).collect();
    let mine = |ns: &str| named.iter().find(|c| c.namespace().as_deref() == Some(ns) && is_copy_of(c.as_ref(), key));
    let selected: Vec<String> = match source.map(|s| (s, s.annotations().get(SYNC_ANNOTATION))) {
        Some((_, Some(annotation))) => match parse_selector(annotation) {
            Ok(selector) => namespaces
                .iter()
                .filter(|n| eligible(n, &key.namespace) && selector.matches(n.labels()))
                .map(|n| n.name_any())
                .collect(),
            Err(error) => {
                plan.invalid_selector = Some(error);
                return plan;
            }
        },
        _ => Vec::new(), // deleted or no longer annotated: no copies
    };
    if let Some(source) = source.filter(|_| !selected.is_empty()) {
        for namespace in &selected {
            let foreign =
                named.iter().any(|c| c.namespace().as_deref() == Some(namespace) && !is_copy_of(c.as_ref(), key));
            match mine(namespace) {
                _ if foreign => plan.conflicts.push(namespace.clone()),
                None => plan.create.push(namespace.clone()),
                Some(copy) if in_sync(source, key, copy) => {}
                Some(copy)
                    if copy.type_() != source.type_() || (copy.immutable() && !K::same_payload(source, copy)) =>
                {
                    plan.recreate.push((namespace.clone(), copy.uid()));
                }
                Some(copy) if copy.immutable() && !source.immutable() => {
                    plan.recreate.push((namespace.clone(), copy.uid()))
                }
                Some(_) => plan.update.push(namespace.clone()),
            }
        }
    }
    for copy in named.iter().filter(|c| is_copy_of(c.as_ref(), key)) {
        let namespace = copy.namespace().unwrap_or_default();
        // A terminating namespace takes its copy with it.
        if !selected.contains(&namespace) && !terminating.contains(&namespace) {
            plan.delete.push((namespace, copy.uid()));
        }
    }
    plan.create.sort();
    plan.update.sort();
    plan.recreate.sort();
    plan.delete.sort();
    plan.conflicts.sort();
    plan
}

/// Runs the sync controllers (Secrets and ConfigMaps) until shutdown, with sources in
/// `source_namespaces`.
/// `secrets: false` syncs ConfigMaps only (the operator then needs no access to Secrets).
pub async fn run(ctx: Arc<Context>, source_namespaces: Vec<String>, secrets: bool) {
    let (namespace_store, writer) = reflector::store::<NamespaceMeta>();
    let (changed, _) = broadcast::channel::<()>(16);
    let notify = changed.clone();
    let namespaces = watcher(Api::<NamespaceMeta>::all(ctx.client.clone()), watcher::Config::default().any_semantic())
        .inspect(watcher_cache::watch::observe_watch("namespaces"))
        .default_backoff()
        .modify(|ns| ns.managed_fields_mut().clear())
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                    let _ = notify.send(());
                }
                Ok(_) => {}
                Err(error) => watcher_cache::watch::log_watch_error("namespaces", false, &error),
            }
            futures::future::ready(())
        });
    let controllers = async {
        // The only waiter on this store: the two kinds start once it is ready.
        if namespace_store.wait_until_ready().await.is_err() {
            return;
        }
        let config_maps = run_kind::<ConfigMap>(&ctx, &source_namespaces, namespace_store.clone(), changed.subscribe());
        if secrets {
            let secrets = run_kind::<Secret>(&ctx, &source_namespaces, namespace_store.clone(), changed.subscribe());
            futures::join!(secrets, config_maps);
        } else {
            config_maps.await;
        }
    };
    // Its own loops, not kube's controllers: they stop where they are when the process does.
    tokio::select! {
        () = namespaces => warn!(controller = CONTROLLER, "the namespace watch ended"),
        () = controllers => {},
        () = ctx.stopped() => {},
    }
}

/// The caches one kind reads.
struct Caches<K: Synced> {
    /// One store per source namespace (a store is filled by one watch).
    sources: HashMap<String, Store<K>>,
    copies: Store<K>,
    namespaces: Store<NamespaceMeta>,
}

impl<K: Synced> Caches<K> {
    fn source(&self, key: &SourceKey) -> Option<Arc<K>> {
        let store = self.sources.get(&key.namespace)?;
        store.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace))
    }

    /// Every source, and every source a copy names (it may be gone: its copies must go too).
    fn all_keys(&self) -> Vec<SourceKey> {
        let mut keys: Vec<SourceKey> =
            self.sources.values().flat_map(|s| s.state()).map(|s| SourceKey::of(s.as_ref())).collect();
        keys.extend(self.copies.state().iter().filter_map(|c| SourceKey::from_copy(c.as_ref())));
        keys.sort();
        keys.dedup();
        keys
    }
}

/// The caches of `K` in each of `source_namespaces` and of its copies everywhere (labelled
/// `watcher.dev/synced=true`), and the watches that fill them, each change enqueued as the key
/// of its source.
fn watch_sources_and_copies<K: Synced>(
    client: &kube::Client,
    source_namespaces: &[String],
    enqueue: &(impl Fn(SourceKey) + Clone + Send + Sync + 'static),
) -> Watched<K> {
    let mut sources = HashMap::new();
    let mut fills = Vec::new();
    let copies_config = watcher::Config::default().labels(&format!("{SYNCED_LABEL}=true"));
    let watches = source_namespaces
        .iter()
        .map(|ns| (Some(ns.clone()), Api::<K>::namespaced(client.clone(), ns), watcher::Config::default()))
        .chain([(None, Api::<K>::all(client.clone()), copies_config)]);
    let mut copies = None;
    for (namespace, api, config) in watches {
        let (store, changed, _) = crate::cached_watch(api, config, |_| {});
        let is_source = namespace.is_some();
        match namespace {
            Some(namespace) => drop(sources.insert(namespace, store)),
            None => copies = Some(store),
        }
        let enqueue = enqueue.clone();
        fills.push(futures::FutureExt::boxed(changed.for_each(move |touched| {
            match touched {
                // A source's own key; a copy names its source.
                Ok(object) if is_source => enqueue(SourceKey::of(&object)),
                Ok(copy) => SourceKey::from_copy(&copy).into_iter().for_each(&enqueue),
                Err(error) => watcher_cache::watch::log_watch_error("sync sources or copies", false, &error),
            }
            futures::future::ready(())
        })));
    }
    Watched { sources, copies, fills }
}

/// The caches of a kind's sources (by namespace) and copies, and the watches that fill them.
struct Watched<K: kube::Resource<DynamicType = ()> + 'static> {
    sources: HashMap<String, Store<K>>,
    copies: Option<Store<K>>,
    fills: Vec<futures::future::BoxFuture<'static, ()>>,
}

async fn run_kind<K: Synced>(
    ctx: &Arc<Context>,
    source_namespaces: &[String],
    namespaces: Store<NamespaceMeta>,
    mut namespace_changes: broadcast::Receiver<()>,
) {
    let client = ctx.client.clone();
    let (requests, queue) = mpsc::unbounded_channel::<ScheduleRequest<SourceKey>>();
    let enqueue = {
        let requests = requests.clone();
        move |key: SourceKey| {
            let _ = requests.send(ScheduleRequest { message: key, run_at: tokio::time::Instant::now() });
        }
    };

    let Watched { sources, copies, fills } = watch_sources_and_copies::<K>(&client, source_namespaces, &enqueue);
    let Some(copies) = copies else { return };
    let caches = Arc::new(Caches { sources, copies, namespaces });

    let work = async {
        for store in caches.sources.values().chain([&caches.copies]) {
            if store.wait_until_ready().await.is_err() {
                return;
            }
        }
        info!(controller = CONTROLLER, kind = K::KIND, "sync caches ready");
        // Everything cached is news: sources, and the sources that copies name.
        caches.all_keys().into_iter().for_each(&enqueue);
        let everything = {
            let (caches, enqueue) = (caches.clone(), enqueue.clone());
            async move {
                loop {
                    match namespace_changes.recv().await {
                        Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            caches.all_keys().into_iter().for_each(&enqueue)
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        };
        let queue = debounced_scheduler(tokio_stream_of(queue), DEBOUNCE);
        let reconciles = queue.for_each(|key| {
            let (caches, ctx, requests) = (caches.clone(), ctx.clone(), requests.clone());
            async move {
                let requeue = reconcile_key(&key, &caches, &ctx).await;
                if let Some(after) = requeue {
                    let _ =
                        requests.send(ScheduleRequest { message: key, run_at: tokio::time::Instant::now() + after });
                }
            }
        });
        tokio::select! {
            () = everything => {},
            () = reconciles => {},
        }
    };
    tokio::select! {
        _ = futures::future::join_all(fills) => warn!(controller = CONTROLLER, "sync watches ended"),
        () = work => {},
    }
}

fn tokio_stream_of<T>(mut receiver: mpsc::UnboundedReceiver<T>) -> impl futures::Stream<Item = T> {
    stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

/// One reconcile from the caches; returns when to look again, if at all.
async fn reconcile_key<K: Synced>(key: &SourceKey, caches: &Caches<K>, ctx: &Context) -> Option<Duration> {
    let source = caches.source(key);
    let named: Vec<Arc<K>> = caches.copies.state().into_iter().filter(|c| c.name_any() == key.name).collect();
    let namespaces = caches.namespaces.state();
    let backoff_key = format!("{CONTROLLER}:{}:{key}", K::KIND);
    match reconcile(key, source.as_deref(), &namespaces, &named, ctx).await {
        Ok(requeue) => {
            ctx.reconciled(&backoff_key);
            requeue
        }
        Err(error) => {
            warn!(controller = CONTROLLER, kind = K::KIND, source = %key, %error, "sync failed");
            Some(ctx.backoff_after_error(CONTROLLER, backoff_key, &error))
        }
    }
}

/// Makes the copies of `key` what `source` asks for; writes nothing when they already are.
/// Returns when to look again (conflicts are retried; a foreign object is not watched).
pub async fn reconcile<K: Synced>(
    key: &SourceKey,
    source: Option<&K>,
    namespaces: &[Arc<NamespaceMeta>],
    named: &[Arc<K>],
    ctx: &Context,
) -> Result<Option<Duration>> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let plan = plan(key, source, namespaces, named);
    if let (Some(error), Some(source)) = (&plan.invalid_selector, source) {
        let note = format!("annotation {SYNC_ANNOTATION} is not a label selector: {error}; copies left as they are");
        ctx.publish(&source.object_ref(&()), EventType::Warning, "InvalidSyncSelector", "Sync", note).await;
        return Ok(None);
    }
    let client = &ctx.client;
    let mut conflicts = plan.conflicts.clone();
    let mut failure = None;

    let deletes = stream::iter(plan.delete.clone()).map(|(namespace, uid)| {
        let api = Api::<K>::namespaced(client.clone(), &namespace);
        async move {
            delete_copy(&api, &key.name, uid).await?;
            info!(kind = K::KIND, source = %key, namespace, "deleted copy");
            Ok::<(), Error>(())
        }
    });
    for result in deletes.buffer_unordered(WRITES_IN_FLIGHT).collect::<Vec<_>>().await {
        if let Err(error) = result {
            failure.get_or_insert(error);
        }
    }

    if let Some(source) = source {
        let writes: Vec<(String, Write)> = (plan.create.iter().map(|ns| (ns.clone(), Write::Create)))
            .chain(plan.update.iter().map(|ns| (ns.clone(), Write::Update)))
            .chain(plan.recreate.iter().map(|(ns, uid)| (ns.clone(), Write::Recreate(uid.clone()))))
            .collect();
        let writes = stream::iter(writes).map(|(namespace, write)| {
            let api = Api::<K>::namespaced(client.clone(), &namespace);
            let desired = desired_copy(source, key, &namespace);
            async move { (namespace, write_copy(&api, key, source, desired, write).await) }
        });
        for (namespace, result) in writes.buffer_unordered(WRITES_IN_FLIGHT).collect::<Vec<_>>().await {
            match result {
                Ok(true) => info!(kind = K::KIND, source = %key, namespace, "wrote copy"),
                Ok(false) => conflicts.push(namespace),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        if !conflicts.is_empty() {
            conflicts.sort();
            ctx.metrics.sync_conflicts(K::KIND, conflicts.len());
            let note = format!(
                "{} {} exists in namespace(s) {} and is not a copy of {key}: left alone",
                K::KIND,
                key.name,
                conflicts.join(", ")
            );
            ctx.publish(&source.object_ref(&()), EventType::Warning, "SyncConflict", "Sync", note).await;
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok((!conflicts.is_empty()).then_some(CONFLICT_RETRY)),
    }
}

/// How a copy is written.
enum Write {
    /// No copy is cached: look first, an object that is not a copy is left alone.
    Create,
    /// The cached copy differs.
    Update,
    /// The copy's type or immutable data changes: delete it (this uid) and write anew.
    Recreate(Option<String>),
}

/// Writes one copy; `Ok(false)` when an object that is not a copy holds the name.
async fn write_copy<K: Synced>(api: &Api<K>, key: &SourceKey, source: &K, desired: K, write: Write) -> Result<bool> {
    match write {
        Write::Create => match api.get_opt(&key.name).await? {
            None => {}
            Some(existing) if !is_copy_of(&existing, key) => return Ok(false),
            // Ours, written before the cache saw it.
            Some(existing) if in_sync(source, key, &existing) => return Ok(true),
            Some(existing) if existing.type_() != source.type_() || existing.immutable() => {
                delete_copy(api, &key.name, existing.uid()).await?;
            }
            Some(_) => {}
        },
        Write::Update => {}
        Write::Recreate(uid) => delete_copy(api, &key.name, uid).await?,
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api.patch(&key.name, &params, &Patch::Apply(&desired)).await?;
    if !in_sync(source, key, &applied) {
        // Fields another manager set by hand (an extra data key, a label) survive an apply:
        // replace the whole object, with the resourceVersion just read.
        let mut replacement = desired;
        replacement.meta_mut().resource_version = applied.resource_version();
        api.replace(
            &key.name,
            &PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() },
            &replacement,
        )
        .await?;
    }
    Ok(true)
}

/// Deletes a copy by uid: a copy recreated meanwhile (another uid) or already gone is fine.
async fn delete_copy<K: Synced>(api: &Api<K>, name: &str, uid: Option<String>) -> Result<()> {
    let params =
        DeleteParams { preconditions: Some(Preconditions { uid, resource_version: None }), ..DeleteParams::default() };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(error) => Err(Error::from(error)),
    }
}

#[cfg(test)]
mod tests;
