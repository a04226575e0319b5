//! ClusterWatcher → ConfigMap `<name>-config` in every namespace it applies to, and its status.
//!
//! Run by the `watcher` controller ([`crate::watchers`]) beside the Watchers' reconciler, on the same cache of the
//! operator's ConfigMaps: where a ClusterWatcher applies ([`WatcherCache::namespaces_of`]), its
//! ConfigMap is created by POST as soon as the namespace matches (a 409 is someone else's
//! ConfigMap: `ConfigMapConflict` for that namespace only), updated by merge patch with the
//! cached resourceVersion, and deleted (uid precondition) from a namespace it no longer applies
//! to — one that stopped matching, or that a Watcher of the same name took over, whose own
//! controller then creates its ConfigMap there. A steady state reads and writes nothing.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};
use watcher_api::{ClusterWatcher, ClusterWatcherStatus, condition, config_map_name, set_condition};
use watcher_api::{reasons, types};
use watcher_cache::WatcherCache;

use crate::owned::{
    CLUSTER_WATCHER_LABEL, Recent, config_map_matches, config_map_of, create_params, newer_or_same, update_patch,
};
use crate::runtime::lock;
use crate::scope::ScopeStatus;
use crate::standing::{POD_SECURITY_CONDITION, grouped_pod_security_condition, levels_in};
use crate::{Context, Error, Result};

const CONTROLLER: &str = "watcher";
/// A steady ClusterWatcher is looked at again this often, in case an event was missed.
const RESYNC: Duration = Duration::from_secs(30 * 60);
/// A ClusterWatcher with a conflict, or waiting for the admission scope, is looked at again this often.
const RETRY: Duration = Duration::from_secs(60);
/// Writes in flight at once in one reconcile (a new ClusterWatcher over 1,000 namespaces).
const WRITES_IN_FLIGHT: usize = 8;

/// What the ClusterWatcher reconciler shares between reconciles.
pub struct ClusterWatcherState {
    /// The Watchers, ClusterWatchers and namespaces.
    pub(crate) cache: WatcherCache,
    /// The operator's ConfigMaps (`app.kubernetes.io/managed-by=watcher-operator`).
    pub(crate) config_maps: Store<ConfigMap>,
    /// Whether their initial list is in.
    pub(crate) listed: Arc<AtomicBool>,
    pub(crate) scope: ScopeStatus,
    /// The revisions: each spec's is written when it is first seen.
    pub(crate) revisions: watcher_cache::RevisionCache,
    /// ConfigMaps created since the cache last caught up: not created again meanwhile.
    created: Mutex<std::collections::HashMap<ObjectRef<ConfigMap>, String>>,
    /// Statuses written (with the ClusterWatcher's resourceVersion after the write) that the
    /// cache may not hold yet, by name.
    statuses: Recent<String, (String, ClusterWatcherStatus)>,
}

impl ClusterWatcherState {
    /// The state over the caches.
    pub fn new(
        cache: WatcherCache,
        config_maps: Store<ConfigMap>,
        listed: Arc<AtomicBool>,
        scope: ScopeStatus,
        revisions: watcher_cache::RevisionCache,
    ) -> Self {
        let (created, statuses) = (Mutex::default(), Recent::default());
        Self { cache, config_maps, listed, scope, revisions, created, statuses }
    }

    /// `cluster` with the status this controller last knows: the cached one, or the one it
    /// wrote when the cache does not hold that version yet.
    fn as_known(&self, cluster: &ClusterWatcher) -> ClusterWatcher {
        let name = cluster.name_any();
        let mut known = cluster.clone();
        match self.statuses.get(&name) {
            Some((version, ours)) if !newer_or_same(cluster.resource_version().as_deref(), &version) => {
                known.status = Some(ours);
            }
            Some(_) => self.statuses.remove(&name),
            None => {}
        }
        known
    }
}

/// What to write of a ClusterWatcher's ConfigMaps.
#[derive(Debug, Default, PartialEq)]
pub struct ConfigMapPlan {
    /// ConfigMaps to create, in namespace order.
    pub create: Vec<ConfigMap>,
    /// Merge patches of ConfigMaps that differ: (namespace, patch).
    pub update: Vec<(String, serde_json::Value)>,
    /// Its ConfigMaps to delete: (namespace, uid).
    pub delete: Vec<(String, String)>,
    /// Namespaces where a ConfigMap of that name is someone else's.
    pub conflicts: BTreeSet<String>,
}

/// The ConfigMap `cluster` should own in `namespace`, or `None` without config data.
pub fn desired_config_map(cluster: &ClusterWatcher, namespace: &str) -> Option<ConfigMap> {
    let owner = cluster.controller_owner_ref(&())?;
    let name = cluster.name_any();
    let owner = (owner, cluster.meta().generation);
    config_map_of(&cluster.spec.watcher, &name, namespace, owner, [(CLUSTER_WATCHER_LABEL, name.as_str())])
}

/// Plans `cluster`'s ConfigMaps: one in each of `applies`, and none elsewhere. `cached` finds
/// a ConfigMap of the operator's by namespace and name; `owned` are the cached ConfigMaps
/// `cluster` controls; `created` those it created that the cache may not hold yet.
pub fn plan_config_maps(
    cluster: &ClusterWatcher,
    applies: &[String],
    cached: impl Fn(&str, &str) -> Option<Arc<ConfigMap>>,
    owned: &[Arc<ConfigMap>],
    created: &BTreeSet<String>,
) -> ConfigMapPlan {
    let mut plan = ConfigMapPlan::default();
    let name = config_map_name(&cluster.name_any());
    for namespace in applies {
        let desired = desired_config_map(cluster, namespace);
        match (desired, cached(namespace, &name)) {
            (Some(_), Some(existing)) if !crate::is_controlled_by(existing.as_ref(), cluster) => {
                plan.conflicts.insert(namespace.clone());
            }
            (Some(desired), Some(existing)) => {
                if !config_map_matches(&existing, &desired) {
                    plan.update.push((namespace.clone(), update_patch(&existing, &desired)));
                }
            }
            (Some(_), None) if created.contains(namespace) => {}
            (Some(desired), None) => plan.create.push(desired),
            (None, _) => {}
        }
    }
    let applies: BTreeSet<&str> = applies.iter().map(String::as_str).collect();
    for existing in owned {
        let namespace = existing.namespace().unwrap_or_default();
        let wanted = applies.contains(namespace.as_str()) && cluster.spec.watcher.has_config();
        if !wanted && existing.metadata.name.as_deref() == Some(name.as_str()) {
            plan.delete.push((namespace, existing.uid().unwrap_or_default()));
        }
    }
    plan.delete.sort();
    plan
}

/// Holds `plan` back from writing a configuration watcher-agent would refuse: no ConfigMap is
/// updated (each keeps the last good configuration) or created. How many namespaces are left
/// without one.
fn hold(plan: &mut ConfigMapPlan) -> usize {
    plan.update.clear();
    std::mem::take(&mut plan.create).len()
}

/// What `Ready` says of a ClusterWatcher whose configuration watcher-agent would refuse (`why`),
/// in generation `generation`, with `held` namespaces that keep a ConfigMap of it and
/// `unshipped` that have none.
fn refused_message(why: &str, held: usize, unshipped: usize, generation: Option<i64>) -> String {
    let this = generation.map_or("the configuration".to_owned(), |g| format!("generation {g}'s configuration"));
    if held == 0 {
        return format!(
            "{this} is not shipped, watcher-agent would refuse it: {why}; no configuration of it was ever shipped: \
             its pods are admitted without its sidecar until the configuration is fixed"
        );
    }
    let mut message = format!(
        "{this} is not shipped, watcher-agent would refuse it: {why}; its ConfigMaps keep the last good \
         configuration, which pods get"
    );
    if unshipped > 0 {
        message.push_str(&format!(
            "; {unshipped} namespace(s) have none yet: their pods wait for it until the configuration is fixed"
        ));
    }
    message
}

/// Brings the ClusterWatcher's ConfigMaps and status up to date from the caches.
#[instrument(skip(cluster, ctx, state), fields(cluster_watcher = cluster.name_any()))]
pub async fn reconcile(
    cluster: Arc<ClusterWatcher>,
    ctx: Arc<Context>,
    state: Arc<ClusterWatcherState>,
) -> Result<Action> {
    let keeps_revisions = crate::revisions::kept_for(&cluster.spec.watcher);
    if !state.listed.load(Ordering::Acquire) || (keeps_revisions && !state.revisions.is_listed()) {
        return Ok(Action::requeue(crate::UNLISTED_RETRY));
    }
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let name = cluster.name_any();
    let applies = state.cache.namespaces_of(&cluster);
    let uid = cluster.uid().unwrap_or_default();
    let owned: Vec<Arc<ConfigMap>> = state
        .config_maps
        .state()
        .into_iter()
        .filter(|c| c.labels().get(CLUSTER_WATCHER_LABEL) == Some(&name))
        .filter(|c| c.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid))
        .collect();
    let created = created_not_cached(&state, &name);
    let cached = |namespace: &str, name: &str| state.config_maps.get(&ObjectRef::new(name).within(namespace));
    let mut plan = plan_config_maps(&cluster, &applies, cached, &owned, &created);
    // What the agent would refuse never reaches a pod: the ConfigMaps keep what they hold.
    let refused = crate::watcher::refused_configuration(&cluster.spec.watcher);
    let unshipped = refused.as_ref().map(|_| hold(&mut plan));
    let conflicts = write(&ctx, &state, &cluster, plan).await?;
    // The spec's revision before the status says Ready (see the Watcher controller).
    if keeps_revisions {
        crate::revisions::record(&ctx.client, &state.revisions, &cluster.across_namespaces()).await?;
    }

    let cluster = state.as_known(&cluster);
    let covered = state.scope.covers_in(applies.iter().map(String::as_str), &cluster.unplaced()).unwrap_or(false);
    let mut status = desired_status(&cluster, applies.len(), &conflicts, covered);
    let held = owned.iter().filter(|c| c.namespace().is_some_and(|n| applies.contains(&n))).count();
    status.config_maps_held = refused.as_ref().map(|_| i32::try_from(held).unwrap_or(i32::MAX));
    if let (Some(why), Some(unshipped), true) = (&refused, unshipped, cluster.problems().is_empty()) {
        let generation = cluster.meta().generation;
        let message = refused_message(why, held, unshipped, generation);
        let known = cluster.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY));
        if known.is_none_or(|c| c.message != message) {
            let note = message.clone();
            ctx.publish(&cluster.object_ref(&()), EventType::Warning, reasons::CONFIG_REFUSED, "Reconcile", note).await;
        }
        set_condition(
            &mut status.conditions,
            condition(types::READY, false, reasons::CONFIG_REFUSED, message, generation),
        );
    }
    let cluster_defaults = state.cache.pod_security.get();
    let levels = applies
        .iter()
        .map(|namespace| (namespace.as_str(), levels_in(&state.cache.namespaces, &cluster_defaults, namespace)));
    let pod_security = grouped_pod_security_condition(&cluster.spec.watcher, levels, cluster.meta().generation);
    let known = cluster.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let newly_refused = pod_security
        .as_ref()
        .filter(|c| c.reason == "CannotComply")
        .filter(|c| !known.iter().any(|old| old.type_ == c.type_ && old.message == c.message));
    if let Some(refused) = newly_refused {
        let note = refused.message.clone();
        ctx.publish(&cluster.object_ref(&()), EventType::Warning, "PodSecurity", "Reconcile", note).await;
    }
    match pod_security {
        Some(condition) => set_condition(&mut status.conditions, condition),
        None => status.conditions.retain(|c| c.type_ != POD_SECURITY_CONDITION),
    }
    crate::ending::set_restart_condition(&mut status.conditions, &cluster.spec.watcher, cluster.meta().generation);
    crate::agent::set_agent_condition(&mut status.conditions, &cluster.spec.watcher, cluster.meta().generation);
    if cluster.status.as_ref() != Some(&status) {
        write_status(&ctx, &state, &cluster, status).await?;
    }
    ctx.reconciled(&crate::object_key(CONTROLLER, &cluster));
    let pending = !conflicts.is_empty() || !covered;
    Ok(Action::requeue(if pending { RETRY } else { RESYNC }))
}

/// Writes `status` (changed) on `cluster`, and says as an Event a spec that became invalid; the
/// status of an invalid ClusterWatcher that kube-apiserver refuses (its rules) is said in the
/// log.
async fn write_status(
    ctx: &Context,
    state: &ClusterWatcherState,
    cluster: &ClusterWatcher,
    status: ClusterWatcherStatus,
) -> Result<()> {
    let name = cluster.name_any();
    let ready = status.conditions.iter().find(|c| c.type_ == types::READY);
    let became_invalid = ready.filter(|c| c.reason == reasons::INVALID_SPEC).is_some_and(|c| {
        cluster.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == types::READY)) != Some(c)
    });
    if let Some(invalid) = ready.filter(|_| became_invalid) {
        let note = invalid.message.clone();
        ctx.publish(&cluster.object_ref(&()), EventType::Warning, "InvalidSpec", "Reconcile", note).await;
    }
    let api = Api::<ClusterWatcher>::all(ctx.client.clone());
    let patch = json!({"status": {
        "observedGeneration": status.observed_generation,
        "specHash": status.spec_hash,
        "namespaces": status.namespaces,
        "configMapsHeld": status.config_maps_held,
        "conditions": status.conditions,
    }});
    match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(written) => {
            let version = written.resource_version().unwrap_or_default();
            state.statuses.insert(name.clone(), (version, status));
        }
        Err(kube::Error::Api(refused)) if refused.code == 422 && became_invalid => {
            warn!(message = refused.message, "the status of an invalid ClusterWatcher is refused");
        }
        Err(error) => return Err(error.into()),
    }
    Ok(())
}

/// The namespaces where this process created `name`'s ConfigMap and the cache does not hold it
/// yet (forgotten once it does).
fn created_not_cached(state: &ClusterWatcherState, name: &str) -> BTreeSet<String> {
    let mut created = lock(&state.created);
    created.retain(|key, _| state.config_maps.get(key).is_none());
    created.iter().filter(|(_, owner)| *owner == name).filter_map(|(key, _)| key.namespace.clone()).collect()
}

/// Writes the plan, a few requests at a time; returns the namespaces in conflict.
async fn write(
    ctx: &Context,
    state: &ClusterWatcherState,
    cluster: &ClusterWatcher,
    plan: ConfigMapPlan,
) -> Result<BTreeSet<String>> {
    let client = ctx.client.clone();
    let name = config_map_name(&cluster.name_any());
    let mut conflicts = plan.conflicts;
    let creates = futures::stream::iter(plan.create.into_iter().map(|desired| {
        let api = Api::<ConfigMap>::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
        async move {
            let namespace = desired.namespace().unwrap_or_default();
            match api.create(&create_params(), &desired).await {
                Ok(_) => Ok((namespace, true)),
                // Someone else's: never overwritten. (Not read: one of ours that the cache has
                // not listed would be in it after the initial list.)
                Err(kube::Error::Api(status)) if status.code == 409 => Ok((namespace, false)),
                // The namespace is being deleted: nothing to keep there.
                Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains("being terminated") => {
                    Ok((namespace, true))
                }
                Err(error) => Err(Error::from(error)),
            }
        }
    }))
    .buffer_unordered(WRITES_IN_FLIGHT)
    .try_collect::<Vec<_>>()
    .await?;
    for (namespace, created) in creates {
        if created {
            info!(namespace, config_map = name, "created ConfigMap");
            let key = ObjectRef::new(&name).within(&namespace);
            lock(&state.created).insert(key, cluster.name_any());
        } else {
            conflicts.insert(namespace);
        }
    }
    let updates = plan.update.into_iter().map(|(namespace, patch)| {
        let api = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
        let name = name.clone();
        async move {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            info!(namespace, config_map = name, "updated ConfigMap");
            Ok::<_, Error>(())
        }
    });
    futures::stream::iter(updates).buffer_unordered(WRITES_IN_FLIGHT).try_collect::<()>().await?;
    let deletes = plan.delete.into_iter().map(|(namespace, uid)| {
        let api = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
        let name = name.clone();
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        async move {
            match api.delete(&name, &params).await {
                Ok(_) => {
                    info!(namespace, config_map = name, "deleted ConfigMap: the ClusterWatcher no longer applies here");
                    Ok(())
                }
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
                Err(error) => Err(Error::from(error)),
            }
        }
    });
    futures::stream::iter(deletes).buffer_unordered(WRITES_IN_FLIGHT).try_collect::<()>().await?;
    Ok(conflicts)
}

/// The status of `cluster` applying in `namespaces` namespaces, with ConfigMap conflicts in
/// `conflicts`, and whether the webhook's conditions cover it everywhere.
pub fn desired_status(
    cluster: &ClusterWatcher,
    namespaces: usize,
    conflicts: &BTreeSet<String>,
    covered: bool,
) -> ClusterWatcherStatus {
    let mut status = cluster.status.clone().unwrap_or_default();
    let generation = cluster.meta().generation;
    status.observed_generation = generation;
    status.spec_hash = Some(cluster.spec.watcher.spec_hash().to_owned());
    status.namespaces = Some(i32::try_from(namespaces).unwrap_or(i32::MAX));
    let problems = cluster.problems();
    let ready = if !problems.is_empty() {
        let message = format!("not injected: a pod would be invalid with it: {}", problems.join("; "));
        condition(types::READY, false, reasons::INVALID_SPEC, message, generation)
    } else if !conflicts.is_empty() {
        let first: Vec<&str> = conflicts.iter().take(5).map(String::as_str).collect();
        let more = conflicts.len().saturating_sub(first.len());
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let message = format!(
            "ConfigMap {} exists and is not owned by this ClusterWatcher in namespace(s) {}{more}; delete or rename it",
            config_map_name(&cluster.name_any()),
            first.join(", ")
        );
        condition(types::READY, false, reasons::CONFIG_MAP_CONFLICT, message, generation)
    } else if !covered {
        let message = "waiting for the webhook's matchConditions to send the pods that ask for this ClusterWatcher";
        condition(types::READY, false, reasons::ADMISSION_SCOPE_PENDING, message, generation)
    } else {
        let message = format!("applies in {namespaces} namespace(s); its ConfigMaps are up to date");
        condition(types::READY, true, reasons::RECONCILED, message, generation)
    };
    set_condition(&mut status.conditions, ready);
    status
}

/// Runs the ClusterWatcher reconciler until shutdown. Beside its own changes, a ClusterWatcher
/// is looked at again when a Watcher of its name changes (a namespace taken over or handed
/// back), when a ConfigMap of its name changes (`config_maps`), when any namespace changes
/// (`namespace_changes`: one may now match), and when what is registered changes.
pub(crate) async fn run(
    ctx: Arc<Context>,
    shared: Arc<ClusterWatcherState>,
    config_maps: impl futures::Stream<Item = ObjectRef<ClusterWatcher>> + Send + 'static,
    namespace_changes: tokio::sync::watch::Receiver<()>,
) {
    use kube::runtime::controller::Controller;
    let cache = shared.cache.clone();
    let store = cache.cluster.clone();
    let (changes, resyncs) = watcher_cache::split(cache.subscribe(), store.clone());
    let namespaces = watcher_cache::changed(namespace_changes);
    let scope = shared.scope.clone();
    let changes = scope.gate(changes);
    let defaults = watcher_cache::changed(cache.pod_security.subscribe());
    let all = futures::stream::select_all([
        scope.gate(resyncs).boxed(),
        scope.gate(namespaces).boxed(),
        scope.gate(scope.changes()).boxed(),
        scope.gate(defaults).boxed(),
    ]);
    crate::run_controller(
        "clusterwatcher",
        Controller::for_shared_stream(changes, store).reconcile_all_on(all).reconcile_on(config_maps),
        crate::controller_config(),
        ctx,
        shared,
        reconcile,
    )
    .await;
}

#[cfg(test)]
mod tests;
