//! Watcher → its owned ConfigMap `<name>-config`, and the Watcher's status.
//!
//! The owned ConfigMaps are read from a cache filled by the controller's own watch (labelled
//! `app.kubernetes.io/managed-by=watcher-operator`), never by a GET per reconcile. A ConfigMap
//! the cache does not hold is created with a POST, which fails rather than overwrites when one
//! of that name exists (someone else's, never touched); a cached one is updated with a merge
//! patch carrying the resourceVersion it was cached at.
//!
//! What the controller wrote itself (a ConfigMap created or patched, a status) it keeps until
//! its caches hold that version: a reconcile that runs before the watch has delivered its own
//! write (Watchers created in bulk, a change of the admission scope) neither creates the
//! ConfigMap again (a 409 and a read) nor writes the same status twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};
use watcher_api::{
    FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL, Watcher, WatcherStatus, condition, config_map_name, set_condition,
};

use crate::scope::ScopeStatus;
use crate::{Context, Error, Result, WatcherCache};
use watcher_webhook::pod_security::{NamespaceLevels, Policy};
use watcher_webhook::{Compliance, compliance};

const CONTROLLER: &str = "watcher";
/// Label on every owned ConfigMap: the Watcher it belongs to.
pub(crate) const WATCHER_LABEL: &str = "watcher.dev/watcher";
/// A steady Watcher is looked at again this often, in case an event was missed.
const RESYNC: Duration = Duration::from_secs(30 * 60);
/// A Watcher waiting for the admission scope to be known is looked at again this often.
const SCOPE_PENDING_RETRY: Duration = Duration::from_secs(10);
/// A ConfigMap held by someone else is looked at again this often.
const CONFLICT_RETRY: Duration = Duration::from_secs(60);

/// What the Watcher controller shares between reconciles: the owned ConfigMaps, cached.
pub struct WatcherContext {
    ctx: Arc<Context>,
    /// ConfigMaps labelled `app.kubernetes.io/managed-by=watcher-operator`, without managedFields.
    config_maps: Store<ConfigMap>,
    /// Whether the ConfigMaps' initial list is in.
    listed: Arc<AtomicBool>,
    /// Whether the webhook's registered matchConditions send the pods of each Watcher.
    scope: ScopeStatus,
    /// Events on Watchers (an invalid spec, said where a status cannot be written).
    recorder: Recorder,
    /// ConfigMaps this controller wrote that its cache may not hold yet.
    written: Recent<ObjectRef<ConfigMap>, ConfigMap>,
    /// Statuses this controller wrote (with the Watcher's resourceVersion after the write) that
    /// the Watcher cache may not hold yet.
    statuses: Recent<ObjectRef<Watcher>, (String, WatcherStatus)>,
    /// The namespaces' labels (their Pod Security levels).
    namespaces: Store<crate::sync::NamespaceMeta>,
}

/// What the controller wrote, until its cache holds it: a cache trails a write by milliseconds
/// to seconds, so an entry older than [`FORGET_AFTER`] (its object deleted meanwhile, say) is
/// dropped at the next write rather than kept for the life of the process.
pub(crate) struct Recent<K, V>(Mutex<HashMap<K, (Instant, V)>>);

/// How long a written object is kept at most, waiting for the cache to hold it.
const FORGET_AFTER: Duration = Duration::from_secs(5 * 60);

impl<K: std::hash::Hash + Eq, V: Clone> Recent<K, V> {
    pub(crate) fn insert(&self, key: K, value: V) {
        let mut map = lock(&self.0);
        let now = Instant::now();
        map.retain(|_, (at, _)| now.duration_since(*at) < FORGET_AFTER);
        map.insert(key, (now, value));
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        lock(&self.0).get(key).map(|(_, value)| value.clone())
    }

    pub(crate) fn remove(&self, key: &K) {
        lock(&self.0).remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl WatcherContext {
    fn with(
        ctx: Arc<Context>,
        config_maps: Store<ConfigMap>,
        listed: Arc<AtomicBool>,
        scope: ScopeStatus,
        namespaces: Store<crate::sync::NamespaceMeta>,
    ) -> Self {
        let reporter = Reporter { controller: FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        let recorder = Recorder::new(ctx.client.clone(), reporter);
        let (written, statuses) = (Recent::default(), Recent::default());
        Self { ctx, config_maps, listed, scope, recorder, written, statuses, namespaces }
    }

    /// A context over `config_maps`, already listed (for tests that fill the store themselves).
    #[cfg(test)]
    pub(crate) fn new(
        ctx: Arc<Context>,
        config_maps: Store<ConfigMap>,
        scope: ScopeStatus,
        namespaces: Store<crate::sync::NamespaceMeta>,
    ) -> Arc<Self> {
        Arc::new(Self::with(ctx, config_maps, Arc::new(AtomicBool::new(true)), scope, namespaces))
    }

    /// The Pod Security levels of `namespace`, from the namespace cache.
    fn levels(&self, namespace: &str) -> NamespaceLevels {
        levels_in(&self.namespaces, namespace)
    }

    /// The ConfigMap as this controller last knows it: the cached one, or the one it wrote when
    /// the cache does not hold that version yet.
    fn config_map(&self, key: &ObjectRef<ConfigMap>) -> Option<Arc<ConfigMap>> {
        let cached = self.config_maps.get(key);
        match self.written.get(key) {
            Some(ours) if !caught_up(cached.as_deref().map(|c| &c.metadata), &ours.metadata) => Some(Arc::new(ours)),
            Some(_) => {
                self.written.remove(key);
                cached
            }
            None => cached,
        }
    }

    /// The Watcher's status as this controller last knows it.
    fn status(&self, watcher: &Watcher) -> Option<WatcherStatus> {
        let key = ObjectRef::from(watcher);
        match self.statuses.get(&key) {
            Some((version, ours)) if !newer_or_same(watcher.resource_version().as_deref(), &version) => Some(ours),
            Some(_) => {
                self.statuses.remove(&key);
                watcher.status.clone()
            }
            None => watcher.status.clone(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether the cache holds `written` or a later version of that object. resourceVersions of
/// kube-apiserver are etcd revisions, increasing; one that is not a number is taken as caught
/// up (the cache is trusted, as without this bookkeeping).
fn caught_up(cached: Option<&ObjectMeta>, written: &ObjectMeta) -> bool {
    match (cached, written.resource_version.as_deref()) {
        (None, _) => false,
        (Some(cached), Some(version)) => newer_or_same(cached.resource_version.as_deref(), version),
        (Some(_), None) => true,
    }
}

pub(crate) fn newer_or_same(cached: Option<&str>, written: &str) -> bool {
    match (cached.map(str::parse::<u64>), written.parse::<u64>()) {
        (Some(Ok(cached)), Ok(written)) => cached >= written,
        _ => true,
    }
}

/// Runs the Watcher controller until shutdown, on the Watchers of the shared cache. A Watcher
/// is `Ready` only once `scope` says the webhook's registered conditions cover it; a Watcher
/// whose coverage a change of the registered conditions changes is looked at again.
///
/// The ClusterWatchers' reconciler ([`crate::cluster_watcher`]) runs beside it, on the same
/// cache of ConfigMaps; a ConfigMap's change reaches the Watcher and the ClusterWatcher of its
/// `watcher.dev/watcher` label, so a namespace one hands over to the other converges at once.
/// `namespace_changes` marks every change of a namespace.
pub async fn run(
    ctx: Arc<Context>,
    cache: WatcherCache,
    scope: ScopeStatus,
    namespace_changes: tokio::sync::watch::Receiver<()>,
) {
    let labels = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let api = Api::<ConfigMap>::all(ctx.client.clone());
    let (config_maps, changed, listed) = crate::cached_watch(api, watcher::Config::default().labels(&labels), |_| {});
    let (to_watchers, for_watchers) = futures::channel::mpsc::unbounded();
    let (to_cluster, for_cluster) = futures::channel::mpsc::unbounded();
    let fan_out = changed.for_each(move |config_map| {
        match config_map {
            Ok(config_map) => {
                if let Some(name) = config_map.labels().get(WATCHER_LABEL) {
                    let namespace = config_map.namespace().unwrap_or_default();
                    let _ = to_watchers.unbounded_send(ObjectRef::<Watcher>::new(name).within(&namespace));
                }
                if let Some(cluster) = crate::cluster_watcher::owner_of(&config_map) {
                    let _ = to_cluster.unbounded_send(cluster);
                }
            }
            Err(error) => crate::log_watch_error("ConfigMaps", false, &error),
        }
        futures::future::ready(())
    });
    let (triggers, resyncs) = crate::cache::split(cache.subscribe(), cache.store.clone());
    // Nothing is reconciled before the scope is known (each Watcher would only wait), then
    // everything once, and again each Watcher whose coverage what is registered changes.
    let triggers = scope.gate(triggers);
    let resyncs = scope.gate(resyncs);
    let coverage = scope.coverage_changes(cache.store.clone());
    let cluster = Arc::new(crate::cluster_watcher::ClusterContext::new(
        ctx.clone(),
        cache.clone(),
        config_maps.clone(),
        listed.clone(),
        scope.clone(),
    ));
    let shared = Arc::new(WatcherContext::with(ctx, config_maps, listed, scope, cache.namespaces.clone()));
    let relabelled = relabelled_watchers(cache.clone(), namespace_changes.clone());
    let watchers = Controller::for_shared_stream(triggers, cache.store.clone())
        .reconcile_all_on(resyncs)
        .reconcile_on(futures::stream::select_all([coverage.boxed(), for_watchers.boxed(), relabelled.boxed()]))
        .with_config(crate::controller_config())
        .shutdown_on_signal()
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move { crate::log_run_result(CONTROLLER, result) });
    let clusters = crate::cluster_watcher::run(cluster, for_cluster, namespace_changes);
    // The fan-out ends with its watch, which ends only on shutdown.
    futures::join!(watchers, clusters, fan_out);
}

/// The Watchers of each namespace whose Pod Security levels change (labelled, relabelled,
/// unlabelled), so their `PodSecurity` condition follows at once; other namespace changes
/// reconcile nothing.
fn relabelled_watchers(
    cache: WatcherCache,
    namespace_changes: tokio::sync::watch::Receiver<()>,
) -> impl futures::Stream<Item = ObjectRef<Watcher>> + Send + 'static {
    let mut known = HashMap::new();
    crate::cache::changed(namespace_changes).flat_map(move |()| {
        let changed = relabelled(&mut known, &cache.namespaces);
        let watchers: Vec<ObjectRef<Watcher>> = if changed.is_empty() {
            Vec::new()
        } else {
            let store = cache.store.state();
            let of = |w: &&Arc<Watcher>| w.namespace().is_some_and(|n| changed.contains(&n));
            store.iter().filter(of).map(|w| ObjectRef::from_obj(w.as_ref())).collect()
        };
        futures::stream::iter(watchers)
    })
}

/// The namespaces whose Pod Security levels differ from `known` (which is brought up to date):
/// only namespaces that set a level are kept.
pub(crate) fn relabelled(
    known: &mut HashMap<String, NamespaceLevels>,
    namespaces: &Store<crate::sync::NamespaceMeta>,
) -> Vec<String> {
    let mut now = HashMap::new();
    for namespace in namespaces.state() {
        let labels = namespace.labels();
        let levels = NamespaceLevels::from_lookup(|key| labels.get(key).map(String::as_str));
        if levels != NamespaceLevels::default() {
            now.insert(namespace.name_any(), levels);
        }
    }
    let mut changed: Vec<String> =
        now.iter().filter(|(n, l)| known.get(*n) != Some(*l)).map(|(n, _)| n.clone()).collect();
    changed.extend(known.keys().filter(|n| !now.contains_key(*n)).cloned());
    changed.sort_unstable();
    *known = now;
    changed
}

/// What became of a Watcher's config data.
#[derive(Debug, PartialEq)]
enum ConfigOutcome {
    /// No config data, no ConfigMap.
    None,
    /// The ConfigMap holds the config data.
    Applied(String),
    /// A ConfigMap of that name belongs to someone else and was left alone.
    Conflict(String),
}

/// Brings the Watcher's ConfigMap and status up to date from the cache: a steady state makes no
/// request, a first reconcile two (the ConfigMap, the status).
#[instrument(skip(watcher, ctx), fields(namespace = watcher.namespace(), watcher = watcher.name_any()))]
pub async fn reconcile(watcher: Arc<Watcher>, ctx: Arc<WatcherContext>) -> Result<Action> {
    if !ctx.listed.load(Ordering::Acquire) {
        return Ok(Action::requeue(crate::UNLISTED_RETRY)); // the cache would say "absent"
    }
    // Until the leader has read the webhook configuration: no Ready flapping at each start. A
    // change of what is registered reconciles every Watcher; the requeue is a safety net.
    let Some(covered) = ctx.scope.covers(&watcher) else { return Ok(Action::requeue(SCOPE_PENDING_RETRY)) };
    let _timer = ctx.ctx.metrics.reconcile(CONTROLLER);
    let namespace = watcher.namespace().ok_or_else(|| Error::MissingNamespace(watcher.name_any()))?;
    let name = config_map_name(&watcher.name_any());
    let api = Api::<ConfigMap>::namespaced(ctx.ctx.client.clone(), &namespace);
    let key = ObjectRef::new(&name).within(&namespace);
    let cached = ctx.config_map(&key);
    let remember = |written: ConfigMap| ctx.written.insert(key.clone(), written);
    let conflict = || {
        ConfigOutcome::Conflict(format!(
            "ConfigMap {name} exists and is not owned by this Watcher; delete or rename it"
        ))
    };

    let outcome = match (desired_config_map(&watcher), cached) {
        (Some(_), Some(existing)) if !crate::is_controlled_by(existing.as_ref(), watcher.as_ref()) => conflict(),
        (Some(desired), Some(existing)) => {
            if !config_map_matches(&existing, &desired) {
                let patch = Patch::Merge(update_patch(&existing, &desired));
                // A write that fails (the ConfigMap deleted meanwhile, or changed) forgets what
                // was written: the next reconcile reads the cache again.
                let patched = api.patch(&name, &PatchParams::default(), &patch).await.inspect_err(|_| {
                    ctx.written.remove(&key);
                })?;
                remember(patched);
                info!(config_map = name, "updated ConfigMap");
            }
            ConfigOutcome::Applied(name)
        }
        (Some(desired), None) => match api.create(&create_params(), &desired).await {
            Ok(created) => {
                remember(created);
                info!(config_map = name, "created ConfigMap");
                ConfigOutcome::Applied(name)
            }
            // Not in the cache, not written by this process, but there: someone else's (never
            // overwritten), or ours from before a restart that the cache has not listed.
            Err(kube::Error::Api(status)) if status.code == 409 => match api.get_opt(&name).await? {
                Some(existing) if crate::is_controlled_by(&existing, watcher.as_ref()) => ConfigOutcome::Applied(name),
                _ => conflict(),
            },
            Err(error) => return Err(error.into()),
        },
        (None, Some(existing)) if crate::is_controlled_by(existing.as_ref(), watcher.as_ref()) => {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: existing.uid(), resource_version: None }),
                ..DeleteParams::default()
            };
            ctx.written.remove(&key);
            match api.delete(&name, &params).await {
                Ok(_) => info!(config_map = name, "deleted ConfigMap: no config data left"),
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(error) => return Err(error.into()),
            }
            ConfigOutcome::None
        }
        (None, _) => ConfigOutcome::None,
    };

    let requeue = if matches!(outcome, ConfigOutcome::Conflict(_)) { CONFLICT_RETRY } else { RESYNC };
    let current = ctx.status(&watcher);
    let mut status = desired_status(&watcher, current.clone(), &outcome, covered);
    let pod_security =
        pod_security_condition(&watcher.spec, &namespace, &ctx.levels(&namespace), watcher.meta().generation);
    let newly_refused = pod_security.as_ref().filter(|c| c.reason == "CannotComply").filter(|c| {
        !current.iter().flat_map(|s| &s.conditions).any(|old| old.type_ == c.type_ && old.message == c.message)
    });
    if let Some(refused) = newly_refused {
        publish(&ctx, &watcher, EventType::Warning, "PodSecurity", refused.message.clone()).await;
    }
    match pod_security {
        Some(condition) => set_condition(&mut status.conditions, condition),
        None => status.conditions.retain(|c| c.type_ != POD_SECURITY_CONDITION),
    }
    if current.as_ref() != Some(&status) {
        let invalid = ready_condition(&status).filter(|c| c.reason == "InvalidSpec");
        if let Some(invalid) = invalid {
            // Said where it can always be said: a status write is refused where kube-apiserver
            // validates the whole object on it (no ratcheting before 1.30).
            publish(&ctx, &watcher, EventType::Warning, "InvalidSpec", invalid.message.clone()).await;
        }
        let api = Api::<Watcher>::namespaced(ctx.ctx.client.clone(), &namespace);
        let patch = json!({"status": {
            "configMapName": status.config_map_name,
            "observedGeneration": status.observed_generation,
            "specHash": status.spec_hash,
            "conditions": status.conditions,
        }});
        match api.patch_status(&watcher.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(written) => {
                let version = written.resource_version().unwrap_or_default();
                ctx.statuses.insert(ObjectRef::from(watcher.as_ref()), (version, status));
            }
            Err(kube::Error::Api(refused)) if refused.code == 422 && invalid.is_some() => {
                warn!(
                    message = refused.message,
                    "the status of an invalid Watcher is refused; the Warning Event says why"
                );
            }
            Err(error) => return Err(error.into()),
        }
    }
    ctx.ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(Action::requeue(requeue))
}

/// The condition that says how a Watcher stands towards its namespace's Pod Security levels.
pub(crate) const POD_SECURITY_CONDITION: &str = "PodSecurity";

/// How `spec` stands towards the Pod Security levels of `namespace` (`None` where it sets none):
/// `True` when it complies with the enforced level, as written (`Compliant`) or once the
/// webhook sets what it leaves unset (`Adapted`, naming the fields); `False` with
/// `CannotComply` and the failed checks where pods get it only without it. `warn` and `audit`
/// are said the same way and change nothing.
pub(crate) fn pod_security_condition(
    spec: &watcher_api::WatcherSpec,
    namespace: &str,
    levels: &NamespaceLevels,
    generation: Option<i64>,
) -> Option<watcher_api::Condition> {
    let standing = Standing::of(spec, levels)?;
    let message = format!("namespace {namespace} enforces {}", standing.what);
    Some(condition(POD_SECURITY_CONDITION, standing.complies, standing.reason, message, generation))
}

/// How a Watcher's spec stands towards one namespace's Pod Security levels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Whether pods get it where the level is enforced (as written, or adapted).
    pub(crate) complies: bool,
    /// `CannotComply`, `Adapted`, `Compliant`, or `NotEnforced` (only `warn` or `audit` set).
    pub(crate) reason: &'static str,
    /// What the namespace enforces, and the Watcher's standing: `PodSecurity "restricted:latest":
    /// the Watcher complies as written`, `no Pod Security level; it warns about ...`.
    pub(crate) what: String,
}

impl Standing {
    /// `None` where the namespace sets no level that checks anything (the common case: nothing
    /// cloned, nothing evaluated).
    pub(crate) fn of(spec: &watcher_api::WatcherSpec, levels: &NamespaceLevels) -> Option<Self> {
        let others = [("warns about", levels.warn), ("audits", levels.audit)];
        let others: Vec<(&str, Policy)> = others
            .into_iter()
            .filter_map(|(how, policy)| Some((how, policy.filter(Policy::checks_anything)?)))
            .filter(|(_, policy)| Some(*policy) != levels.enforced())
            .collect();
        if levels.enforced().is_none() && others.is_empty() {
            return None;
        }
        let probe = Watcher::new("probe", spec.clone());
        let judge = |policy: Policy| match compliance(&probe, policy, None) {
            Compliance::AsWritten => (true, "Compliant", "complies as written".to_owned()),
            Compliance::Adapted(fields) => (
                true,
                "Adapted",
                format!("complies once adapted (where the pod sets none of them: {})", fields.join("; ")),
            ),
            Compliance::CannotComply(checks) => (false, "CannotComply", format!("cannot comply: {checks}")),
        };
        let (complies, reason, mut what) = match levels.enforced() {
            Some(policy) => {
                let (ok, reason, judged) = judge(policy);
                let judged = if ok { judged } else { format!("{judged}; pods asking for it are admitted without it") };
                (ok, reason, format!("PodSecurity \"{policy}\": the Watcher {judged}"))
            }
            None => (true, "NotEnforced", "no Pod Security level".to_owned()),
        };
        for (how, policy) in others {
            what.push_str(&format!("; it {how} {policy}: the Watcher {}", judge(policy).2));
        }
        Some(Self { complies, reason, what })
    }

    /// Worst first: what the condition of many namespaces leads with.
    fn rank(&self) -> u8 {
        match self.reason {
            "CannotComply" => 0,
            "Adapted" => 1,
            "Compliant" => 2,
            _ => 3,
        }
    }
}

/// Namespaces listed by name in a grouped condition; the rest are counted.
const NAMESPACES_NAMED: usize = 5;

/// The `PodSecurity` condition of a Watcher applying in many namespaces (a ClusterWatcher): the
/// namespaces grouped by standing, worst first, each group naming its first five and counting
/// the rest; `False` (`CannotComply`) where it cannot comply in any. `None` where none of them
/// sets a level. Each distinct set of levels is judged once.
pub(crate) fn grouped_pod_security_condition<'a>(
    spec: &watcher_api::WatcherSpec,
    namespaces: impl IntoIterator<Item = (&'a str, NamespaceLevels)>,
    generation: Option<i64>,
) -> Option<watcher_api::Condition> {
    let mut judged: Vec<(NamespaceLevels, Option<Standing>)> = Vec::new();
    let mut groups: Vec<(Standing, Vec<&str>)> = Vec::new();
    for (namespace, levels) in namespaces {
        if levels == NamespaceLevels::default() {
            continue;
        }
        let standing = match judged.iter().find(|(l, _)| *l == levels) {
            Some((_, standing)) => standing.clone(),
            None => {
                let standing = Standing::of(spec, &levels);
                judged.push((levels, standing.clone()));
                standing
            }
        };
        let Some(standing) = standing else { continue };
        match groups.iter_mut().find(|(s, _)| *s == standing) {
            Some((_, names)) => names.push(namespace),
            None => groups.push((standing, vec![namespace])),
        }
    }
    groups.sort_by(|(a, an), (b, bn)| a.rank().cmp(&b.rank()).then_with(|| an.cmp(bn)));
    let (worst, _) = groups.first()?;
    let (complies, reason) = (worst.complies, worst.reason);
    let parts: Vec<String> = groups
        .iter_mut()
        .map(|(standing, names)| {
            names.sort_unstable();
            let count = names.len();
            let named = names.iter().take(NAMESPACES_NAMED).copied().collect::<Vec<_>>().join(", ");
            let more = count.saturating_sub(NAMESPACES_NAMED);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            let (noun, verb) = if count == 1 { ("namespace", "enforces") } else { ("namespaces", "enforce") };
            format!("{count} {noun} ({named}{more}) {verb} {}", standing.what)
        })
        .collect();
    Some(condition(POD_SECURITY_CONDITION, complies, reason, parts.join(". "), generation))
}

/// The Pod Security levels of `namespace` in `namespaces` (none for a namespace not cached yet).
pub(crate) fn levels_in(namespaces: &Store<crate::sync::NamespaceMeta>, namespace: &str) -> NamespaceLevels {
    match namespaces.get(&ObjectRef::new(namespace)) {
        Some(meta) => {
            let labels = meta.labels();
            NamespaceLevels::from_lookup(|key| labels.get(key).map(String::as_str))
        }
        None => NamespaceLevels::default(),
    }
}

fn ready_condition(status: &WatcherStatus) -> Option<&watcher_api::Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

async fn publish(ctx: &WatcherContext, watcher: &Watcher, type_: EventType, reason: &str, note: String) {
    let event = Event { type_, reason: reason.into(), note: Some(note), action: "Reconcile".into(), secondary: None };
    if let Err(error) = ctx.recorder.publish(&event, &watcher.object_ref(&())).await {
        warn!(%error, reason, "cannot publish an event");
    }
}

/// A create as the operator's field manager.
pub(crate) fn create_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() }
}

/// The merge patch that turns `existing` into `desired`: the data whole (keys the Watcher no
/// longer has set to null), labels and owner, with the cached resourceVersion as precondition
/// (a ConfigMap changed since it was cached is a conflict, retried after its own event).
pub(crate) fn update_patch(existing: &ConfigMap, desired: &ConfigMap) -> serde_json::Value {
    fn with_removals<V: serde::Serialize>(
        existing: &Option<BTreeMap<String, V>>,
        desired: &Option<BTreeMap<String, V>>,
    ) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for key in existing.iter().flat_map(|m| m.keys()) {
            map.insert(key.clone(), serde_json::Value::Null);
        }
        for (key, value) in desired.iter().flatten() {
            map.insert(key.clone(), serde_json::to_value(value).unwrap_or_default());
        }
        serde_json::Value::Object(map)
    }
    json!({
        "metadata": {"resourceVersion": existing.resource_version(), "labels": desired.labels(),
                     "ownerReferences": desired.owner_references()},
        "data": with_removals(&existing.data, &desired.data),
        "binaryData": with_removals(&existing.binary_data, &desired.binary_data),
    })
}

/// Logs the failure and retries with backoff.
pub fn error_policy(watcher: Arc<Watcher>, error: &Error, ctx: Arc<WatcherContext>) -> Action {
    warn!(namespace = watcher.namespace(), watcher = watcher.name_any(), %error, "reconcile failed");
    ctx.ctx.retry_after_error(CONTROLLER, crate::object_key(CONTROLLER, watcher.as_ref()), error)
}

/// The ConfigMap a Watcher should own, or `None` when it has no config data.
pub fn desired_config_map(watcher: &Watcher) -> Option<ConfigMap> {
    let owner = watcher.controller_owner_ref(&())?;
    config_map_of(&watcher.spec, &watcher.name_any(), &watcher.namespace()?, owner, [])
}

/// The ConfigMap `<name>-config` in `namespace` with the config data of `spec`, owned by
/// `owner`, labelled `watcher.dev/watcher=<name>` (and `extra`); `None` without config data.
pub(crate) fn config_map_of<const N: usize>(
    spec: &watcher_api::WatcherSpec,
    name: &str,
    namespace: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
    extra: [(&str, &str); N],
) -> Option<ConfigMap> {
    if !spec.has_config() {
        return None;
    }
    let mut labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (WATCHER_LABEL.to_owned(), name.to_owned()),
    ]);
    labels.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: spec.config_data.clone().filter(|data| !data.is_empty()),
        binary_data: spec.config_binary_data.clone().filter(|data| !data.is_empty()),
        ..ConfigMap::default()
    })
}

/// Whether `existing` already holds everything `desired` sets (so writing it would change nothing).
pub(crate) fn config_map_matches(existing: &ConfigMap, desired: &ConfigMap) -> bool {
    fn non_empty<V>(map: &Option<BTreeMap<String, V>>) -> Option<&BTreeMap<String, V>> {
        map.as_ref().filter(|map| !map.is_empty())
    }
    let labels = existing.labels();
    non_empty(&existing.data) == non_empty(&desired.data)
        && non_empty(&existing.binary_data) == non_empty(&desired.binary_data)
        && desired.labels().iter().all(|(key, value)| labels.get(key) == Some(value))
        && desired.owner_references().iter().all(|owner| existing.owner_references().contains(owner))
}

/// The status that describes `outcome`, and whether the webhook's conditions cover the
/// Watcher; equal to `current` when nothing changed.
fn desired_status(
    watcher: &Watcher,
    current: Option<WatcherStatus>,
    outcome: &ConfigOutcome,
    covered: bool,
) -> WatcherStatus {
    let mut status = current.unwrap_or_default();
    let generation = watcher.meta().generation;
    status.observed_generation = generation;
    status.spec_hash = Some(watcher.spec.spec_hash());
    let ready = match outcome {
        ConfigOutcome::None => {
            status.config_map_name = None;
            condition("Ready", true, "Reconciled", "Watcher has no config data", generation)
        }
        ConfigOutcome::Applied(name) => {
            status.config_map_name = Some(name.clone());
            condition("Ready", true, "Reconciled", format!("ConfigMap {name} is up to date"), generation)
        }
        ConfigOutcome::Conflict(message) => {
            status.config_map_name = None;
            condition("Ready", false, "ConfigMapConflict", message.clone(), generation)
        }
    };
    let problems = watcher.spec.problems();
    let ready = if ready.status != "True" {
        ready
    } else if !problems.is_empty() {
        // Stored before the CRD had the rule, or on Kubernetes 1.24 (no CEL): the webhook never
        // injects it, and says so here.
        let message = format!("not injected: a pod would be invalid with it: {}", problems.join("; "));
        condition("Ready", false, "InvalidSpec", message, generation)
    } else if !covered {
        let message = "waiting for the webhook's matchConditions to send the pods that ask for this Watcher";
        condition("Ready", false, "AdmissionScopePending", message, generation)
    } else {
        ready
    };
    set_condition(&mut status.conditions, ready);
    status
}

#[cfg(test)]
mod tests;
