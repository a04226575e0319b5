//! Watcher → its owned ConfigMap `<name>-config`, and the Watcher's status.
//!
//! The owned ConfigMaps are read from a cache filled by the controller's own watch (labelled
//! `app.kubernetes.io/managed-by=watcher-operator`), never by a GET per reconcile. A ConfigMap
//! the cache does not hold is created with a POST, which fails rather than overwrites when one
//! of that name exists (someone else's, never touched); a cached one is updated with a merge
//! patch carrying the resourceVersion it was cached at.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
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

const CONTROLLER: &str = "watcher";
/// Label on every owned ConfigMap: the Watcher it belongs to.
const WATCHER_LABEL: &str = "watcher.dev/watcher";
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
}

impl WatcherContext {
    /// A context over `config_maps`, already listed (for tests that fill the store themselves).
    #[cfg(test)]
    pub(crate) fn new(ctx: Arc<Context>, config_maps: Store<ConfigMap>, scope: ScopeStatus) -> Arc<Self> {
        Arc::new(Self { ctx, config_maps, listed: Arc::new(AtomicBool::new(true)), scope })
    }
}

/// Runs the Watcher controller until shutdown, on the Watchers of the shared cache. A Watcher
/// is `Ready` only once `scope` says the webhook's registered conditions cover it; every
/// Watcher is looked at again when they change.
pub async fn run(ctx: Arc<Context>, cache: WatcherCache, scope: ScopeStatus) {
    let labels = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let api = Api::<ConfigMap>::all(ctx.client.clone());
    let (config_maps, owned, listed) = crate::cached_watch(api, watcher::Config::default().labels(&labels), |_| {});
    let (triggers, resyncs) = crate::cache::split(cache.subscribe(), cache.store.clone());
    // Nothing is reconciled before the scope is known (each Watcher would only wait), then
    // everything once, and again when what is registered changes.
    let triggers = scope.gate(triggers);
    let resyncs = scope.gate(futures::stream::select(resyncs, scope.changes()));
    let shared = Arc::new(WatcherContext { ctx, config_maps, listed, scope });
    Controller::for_shared_stream(triggers, cache.store.clone())
        .reconcile_all_on(resyncs)
        .owns_stream(owned)
        .with_config(crate::controller_config())
        .shutdown_on_signal()
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move { crate::log_run_result(CONTROLLER, result) })
        .await;
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
    let cached = ctx.config_maps.get(&ObjectRef::new(&name).within(&namespace));
    let conflict = || {
        ConfigOutcome::Conflict(format!(
            "ConfigMap {name} exists and is not owned by this Watcher; delete or rename it"
        ))
    };

    let outcome = match (desired_config_map(&watcher), cached) {
        (Some(_), Some(existing)) if !crate::is_controlled_by(existing.as_ref(), watcher.as_ref()) => conflict(),
        (Some(desired), Some(existing)) => {
            if !config_map_matches(&existing, &desired) {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(update_patch(&existing, &desired))).await?;
                info!(config_map = name, "updated ConfigMap");
            }
            ConfigOutcome::Applied(name)
        }
        (Some(desired), None) => match api.create(&create_params(), &desired).await {
            Ok(_) => {
                info!(config_map = name, "created ConfigMap");
                ConfigOutcome::Applied(name)
            }
            // Not in the cache but there: someone else's (never overwritten), or ours a moment
            // before the cache saw it (its own event reconciles again).
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
    let status = desired_status(&watcher, &outcome, covered);
    if watcher.status.as_ref() != Some(&status) {
        let api = Api::<Watcher>::namespaced(ctx.ctx.client.clone(), &namespace);
        let patch = json!({"status": {
            "configMapName": status.config_map_name,
            "observedGeneration": status.observed_generation,
            "specHash": status.spec_hash,
            "conditions": status.conditions,
        }});
        api.patch_status(&watcher.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    ctx.ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(Action::requeue(requeue))
}

/// A create as the operator's field manager.
fn create_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() }
}

/// The merge patch that turns `existing` into `desired`: the data whole (keys the Watcher no
/// longer has set to null), labels and owner, with the cached resourceVersion as precondition
/// (a ConfigMap changed since it was cached is a conflict, retried after its own event).
fn update_patch(existing: &ConfigMap, desired: &ConfigMap) -> serde_json::Value {
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
    if !watcher.spec.has_config() {
        return None;
    }
    let owner = watcher.controller_owner_ref(&())?;
    let labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (WATCHER_LABEL.to_owned(), watcher.name_any()),
    ]);
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&watcher.name_any())),
            namespace: watcher.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: watcher.spec.config_data.clone().filter(|data| !data.is_empty()),
        binary_data: watcher.spec.config_binary_data.clone().filter(|data| !data.is_empty()),
        ..ConfigMap::default()
    })
}

/// Whether `existing` already holds everything `desired` sets (so writing it would change nothing).
fn config_map_matches(existing: &ConfigMap, desired: &ConfigMap) -> bool {
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
/// Watcher; equal to the current one when nothing changed.
fn desired_status(watcher: &Watcher, outcome: &ConfigOutcome, covered: bool) -> WatcherStatus {
    let mut status = watcher.status.clone().unwrap_or_default();
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
