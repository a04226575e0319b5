//! Watcher → its owned ConfigMap `<name>-config`, and the Watcher's status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};
use watcher_api::{
    FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL, Watcher, WatcherStatus, condition, config_map_name, set_condition,
};

use crate::{Context, Error, Result, WatcherCache};

const CONTROLLER: &str = "watcher";
/// Label on every owned ConfigMap: the Watcher it belongs to.
const WATCHER_LABEL: &str = "watcher.dev/watcher";
/// A steady Watcher is looked at again this often, in case an event was missed.
const RESYNC: Duration = Duration::from_secs(30 * 60);
/// A ConfigMap held by someone else is looked at again this often.
const CONFLICT_RETRY: Duration = Duration::from_secs(60);

/// Runs the Watcher controller until shutdown, on the Watchers of the shared cache.
pub async fn run(ctx: Arc<Context>, cache: WatcherCache) {
    let config_maps = Api::<ConfigMap>::all(ctx.client.clone());
    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let (triggers, resyncs) = crate::cache::split(cache.subscribe(), cache.store.clone());
    Controller::for_shared_stream(triggers, cache.store.clone())
        .reconcile_all_on(resyncs)
        .owns(config_maps, owned)
        .with_config(crate::controller_config())
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
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

/// Brings the Watcher's ConfigMap and status up to date; writes nothing when both already are.
#[instrument(skip(watcher, ctx), fields(namespace = watcher.namespace(), watcher = watcher.name_any()))]
pub async fn reconcile(watcher: Arc<Watcher>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let namespace = watcher.namespace().ok_or_else(|| Error::MissingNamespace(watcher.name_any()))?;
    let name = config_map_name(&watcher.name_any());
    let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace);
    let existing = api.get_opt(&name).await?;

    let outcome = match (desired_config_map(&watcher), existing) {
        (Some(_), Some(existing)) if !crate::is_controlled_by(&existing, watcher.as_ref()) => ConfigOutcome::Conflict(
            format!("ConfigMap {name} exists and is not owned by this Watcher; delete or rename it"),
        ),
        (Some(desired), existing) => {
            if existing.as_ref().is_none_or(|existing| !config_map_matches(existing, &desired)) {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                api.patch(&name, &params, &Patch::Apply(&desired)).await?;
                info!(config_map = name, "applied ConfigMap");
            }
            ConfigOutcome::Applied(name)
        }
        (None, Some(existing)) if crate::is_controlled_by(&existing, watcher.as_ref()) => {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: existing.uid(), resource_version: None }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => info!(config_map = name, "deleted ConfigMap: no config data left"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
            ConfigOutcome::None
        }
        (None, _) => ConfigOutcome::None,
    };

    let requeue = if matches!(outcome, ConfigOutcome::Conflict(_)) { CONFLICT_RETRY } else { RESYNC };
    let status = desired_status(&watcher, &outcome);
    if watcher.status.as_ref() != Some(&status) {
        let api = Api::<Watcher>::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({"status": {
            "configMapName": status.config_map_name,
            "observedGeneration": status.observed_generation,
            "specHash": status.spec_hash,
            "conditions": status.conditions,
        }});
        api.patch_status(&watcher.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(Action::requeue(requeue))
}

/// Logs the failure and retries with backoff.
pub fn error_policy(watcher: Arc<Watcher>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(namespace = watcher.namespace(), watcher = watcher.name_any(), %error, "reconcile failed");
    ctx.retry_after_error(CONTROLLER, crate::object_key(CONTROLLER, watcher.as_ref()), error)
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

/// Whether `existing` already holds everything `desired` sets (so applying it would change nothing).
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

/// The status that describes `outcome`; equal to the current one when nothing changed.
fn desired_status(watcher: &Watcher, outcome: &ConfigOutcome) -> WatcherStatus {
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
    set_condition(&mut status.conditions, ready);
    status
}

#[cfg(test)]
mod tests;
