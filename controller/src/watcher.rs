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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};
use watcher_admission::pod_security::NamespaceLevels;
use watcher_api::{Watcher, WatcherStatus, condition, config_map_name, set_condition};
use watcher_api::{reasons, types};

use crate::owned::{Recent, caught_up, config_map_matches, config_map_of, create_params, newer_or_same, update_patch};
use crate::scope::ScopeStatus;
use crate::standing::{POD_SECURITY_CONDITION, levels_in, pod_security_condition};
use crate::{Context, Error, Result};

const CONTROLLER: &str = "watcher";
/// A steady Watcher is looked at again this often, in case an event was missed.
const RESYNC: Duration = Duration::from_secs(30 * 60);
/// A Watcher waiting for the admission scope to be known is looked at again this often.
const SCOPE_PENDING_RETRY: Duration = Duration::from_secs(10);
/// A ConfigMap held by someone else is looked at again this often.
const CONFLICT_RETRY: Duration = Duration::from_secs(60);

/// What the Watcher controller shares between reconciles: the owned ConfigMaps, cached.
pub struct WatcherState {
    /// ConfigMaps labelled `app.kubernetes.io/managed-by=watcher-operator`, without managedFields.
    config_maps: Store<ConfigMap>,
    /// Whether the ConfigMaps' initial list is in.
    listed: Arc<AtomicBool>,
    /// Whether the webhook's registered matchConditions send the pods of each Watcher.
    scope: ScopeStatus,
    /// ConfigMaps this controller wrote that its cache may not hold yet.
    written: Recent<ObjectRef<ConfigMap>, ConfigMap>,
    /// Statuses this controller wrote (with the Watcher's resourceVersion after the write) that
    /// the Watcher cache may not hold yet.
    statuses: Recent<ObjectRef<Watcher>, (String, WatcherStatus)>,
    /// The namespaces' labels (their Pod Security levels).
    namespaces: Store<crate::sync::NamespaceMeta>,
    /// The cluster's Pod Security admission configuration.
    pod_security: std::sync::OnceLock<watcher_admission::pod_security::SharedDefaults>,
    /// The Watchers' revisions: each spec's is written when it is first seen.
    revisions: watcher_cache::RevisionCache,
}

impl WatcherState {
    pub(crate) fn with(
        config_maps: Store<ConfigMap>,
        listed: Arc<AtomicBool>,
        scope: ScopeStatus,
        namespaces: Store<crate::sync::NamespaceMeta>,
        revisions: watcher_cache::RevisionCache,
    ) -> Self {
        let (written, statuses) = (Recent::default(), Recent::default());
        let pod_security = Default::default();
        Self { config_maps, listed, scope, written, statuses, namespaces, pod_security, revisions }
    }

    /// A context over `config_maps`, already listed, and no revisions (for tests that fill the
    /// store themselves).
    #[cfg(test)]
    pub(crate) fn new(
        config_maps: Store<ConfigMap>,
        scope: ScopeStatus,
        namespaces: Store<crate::sync::NamespaceMeta>,
    ) -> Arc<Self> {
        let revisions = watcher_cache::RevisionCache::holding(Vec::new(), "watcher-system");
        Arc::new(Self::with(config_maps, Arc::new(AtomicBool::new(true)), scope, namespaces, revisions))
    }

    /// [`WatcherState::new`] over these revisions.
    #[cfg(test)]
    pub(crate) fn with_revisions(config_maps: Store<ConfigMap>, revisions: watcher_cache::RevisionCache) -> Arc<Self> {
        let (listed, scope, namespaces) =
            (Arc::new(AtomicBool::new(true)), ScopeStatus::every_pod(), kube::runtime::reflector::store().0);
        Arc::new(Self::with(config_maps, listed, scope, namespaces, revisions))
    }

    /// Judges Pod Security under the cluster's configuration as `shared` holds it (from the
    /// start: set once).
    pub(crate) fn follow_pod_security(&self, shared: watcher_admission::pod_security::SharedDefaults) {
        let _ = self.pod_security.set(shared);
    }

    /// The Pod Security levels of `namespace`, from the namespace cache.
    fn levels(&self, namespace: &str) -> NamespaceLevels {
        let cluster = self.pod_security.get().map(|shared| shared.get()).unwrap_or_default();
        levels_in(&self.namespaces, &cluster, namespace)
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

    /// The cache has seen `config_map` applied or deleted: a write of this controller is
    /// forgotten once the cache has held its version (or a later one), so that a ConfigMap
    /// deleted afterwards, before any reconcile looked, is found absent and created again.
    pub(crate) fn saw(&self, config_map: &ConfigMap) {
        let (Some(name), Some(namespace)) = (&config_map.metadata.name, &config_map.metadata.namespace) else {
            return;
        };
        let key = ObjectRef::new(name).within(namespace);
        if self.written.get(&key).is_some_and(|ours| caught_up(Some(&config_map.metadata), &ours.metadata)) {
            self.written.remove(&key);
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

/// What became of a Watcher's config data.
#[derive(Debug, PartialEq)]
enum ConfigOutcome {
    /// No config data, no ConfigMap.
    None,
    /// The ConfigMap (its name) holds the config data, of the generation it records (`None`:
    /// written by 0.2.0, which recorded none).
    Applied(String, Option<i64>),
    /// A ConfigMap of that name belongs to someone else and was left alone.
    Conflict(String),
    /// watcher-agent would refuse the configuration (in these words): it is not written. The
    /// ConfigMap that keeps the last good one, and the generation it holds where recorded; none
    /// where no configuration was ever shipped.
    Refused { kept: Option<(String, Option<i64>)>, why: String },
}

/// Brings the Watcher's ConfigMap and status up to date from the cache: a steady state makes no
/// request, a first reconcile two (the ConfigMap, the status).
#[instrument(skip(watcher, ctx, state), fields(namespace = watcher.namespace(), watcher = watcher.name_any()))]
pub async fn reconcile(watcher: Arc<Watcher>, ctx: Arc<Context>, state: Arc<WatcherState>) -> Result<Action> {
    let keeps_revisions = crate::revisions::kept_for(&watcher.spec);
    if !state.listed.load(Ordering::Acquire) || (keeps_revisions && !state.revisions.is_listed()) {
        return Ok(Action::requeue(crate::UNLISTED_RETRY)); // the cache would say "absent"
    }
    // Until the leader has read the webhook configuration: no Ready flapping at each start. A
    // change of what is registered reconciles every Watcher; the requeue is a safety net.
    let Some(covered) = state.scope.covers(&watcher) else { return Ok(Action::requeue(SCOPE_PENDING_RETRY)) };
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let namespace = watcher.namespace().ok_or_else(|| Error::MissingNamespace(watcher.name_any()))?;
    let outcome = apply_config_map(&watcher, &ctx, &state, &namespace).await?;

    // The spec's revision before the status says Ready: a rollout that starts right after the
    // pods were created still finds the spec they carry.
    if keeps_revisions {
        crate::revisions::record(&ctx.client, &state.revisions, &watcher).await?;
    }
    let requeue = if matches!(outcome, ConfigOutcome::Conflict(_)) { CONFLICT_RETRY } else { RESYNC };
    let current = state.status(&watcher);
    let mut status = desired_status(&watcher, current.clone(), &outcome, covered);
    let pod_security =
        pod_security_condition(&watcher.spec, &namespace, &state.levels(&namespace), watcher.meta().generation);
    let newly_refused = pod_security.as_ref().filter(|c| c.reason == "CannotComply").filter(|c| {
        !current.iter().flat_map(|s| &s.conditions).any(|old| old.type_ == c.type_ && old.message == c.message)
    });
    if let Some(refused) = newly_refused {
        let note = refused.message.clone();
        ctx.publish(&watcher.object_ref(&()), EventType::Warning, "PodSecurity", "Reconcile", note).await;
    }
    let config_refused = ready_condition(&status)
        .filter(|c| c.reason == reasons::CONFIG_REFUSED)
        .filter(|c| current.as_ref().and_then(ready_condition).is_none_or(|old| old.message != c.message));
    if let Some(refused) = config_refused {
        let note = refused.message.clone();
        ctx.publish(&watcher.object_ref(&()), EventType::Warning, reasons::CONFIG_REFUSED, "Reconcile", note).await;
    }
    match pod_security {
        Some(condition) => set_condition(&mut status.conditions, condition),
        None => status.conditions.retain(|c| c.type_ != POD_SECURITY_CONDITION),
    }
    crate::ending::set_restart_condition(&mut status.conditions, &watcher.spec, watcher.meta().generation);
    crate::agent::set_agent_condition(&mut status.conditions, &watcher.spec, watcher.meta().generation);
    if current.as_ref() != Some(&status) {
        let invalid = ready_condition(&status).filter(|c| c.reason == reasons::INVALID_SPEC);
        if let Some(invalid) = invalid {
            // Said where it can always be said: a status write is refused where kube-apiserver
            // validates the whole object on it (no ratcheting before 1.30).
            let note = invalid.message.clone();
            ctx.publish(&watcher.object_ref(&()), EventType::Warning, "InvalidSpec", "Reconcile", note).await;
        }
        let api = Api::<Watcher>::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({"status": {
            "configMapName": status.config_map_name,
            "configGeneration": status.config_generation,
            "observedGeneration": status.observed_generation,
            "specHash": status.spec_hash,
            "conditions": status.conditions,
        }});
        match api.patch_status(&watcher.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(written) => {
                let version = written.resource_version().unwrap_or_default();
                state.statuses.insert(ObjectRef::from(watcher.as_ref()), (version, status));
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
    ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(Action::requeue(requeue))
}

/// The Watcher's ConfigMap as its `configData` says: created, updated or deleted; a ConfigMap of
/// that name the Watcher does not own is a conflict, never overwritten.
async fn apply_config_map(
    watcher: &Watcher,
    ctx: &Context,
    state: &WatcherState,
    namespace: &str,
) -> Result<ConfigOutcome> {
    let name = config_map_name(&watcher.name_any());
    let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace);
    let key = ObjectRef::new(&name).within(namespace);
    let cached = state.config_map(&key);
    let remember = |written: ConfigMap| state.written.insert(key.clone(), written);
    let conflict = || {
        ConfigOutcome::Conflict(format!(
            "ConfigMap {name} exists and is not owned by this Watcher; delete or rename it"
        ))
    };

    let refused = refused_configuration(&watcher.spec);
    let outcome = match (desired_config_map(watcher), cached) {
        (Some(_), Some(existing)) if !crate::is_controlled_by(existing.as_ref(), watcher) => conflict(),
        // What the agent would refuse never reaches a pod: the ConfigMap keeps what it holds.
        (Some(_), existing) if let Some(why) = refused => {
            let kept = existing.map(|e| (name.clone(), held_generation(&e)));
            warn!(config_map = name, %why, "configuration refused by watcher-agent: not written");
            ConfigOutcome::Refused { kept, why }
        }
        (Some(desired), Some(existing)) => {
            let held = if config_map_matches(&existing, &desired) {
                held_generation(&existing)
            } else {
                let patch = Patch::Merge(update_patch(&existing, &desired));
                // A write that fails (the ConfigMap deleted meanwhile, or changed) forgets what
                // was written: the next reconcile reads the cache again.
                let patched = api.patch(&name, &PatchParams::default(), &patch).await.inspect_err(|_| {
                    state.written.remove(&key);
                })?;
                remember(patched);
                info!(config_map = name, "updated ConfigMap");
                held_generation(&desired)
            };
            ConfigOutcome::Applied(name, held)
        }
        (Some(desired), None) => match api.create(&create_params(), &desired).await {
            Ok(created) => {
                let held = held_generation(&created);
                remember(created);
                info!(config_map = name, "created ConfigMap");
                ConfigOutcome::Applied(name, held)
            }
            // Not in the cache, not written by this process, but there: someone else's (never
            // overwritten), or ours from before a restart that the cache has not listed.
            Err(kube::Error::Api(status)) if status.code == 409 => match api.get_opt(&name).await? {
                Some(existing) if crate::is_controlled_by(&existing, watcher) => {
                    ConfigOutcome::Applied(name, held_generation(&existing))
                }
                _ => conflict(),
            },
            Err(error) => return Err(error.into()),
        },
        (None, Some(existing)) if crate::is_controlled_by(existing.as_ref(), watcher) => {
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: existing.uid(), resource_version: None }),
                ..DeleteParams::default()
            };
            state.written.remove(&key);
            match api.delete(&name, &params).await {
                Ok(_) => info!(config_map = name, "deleted ConfigMap: no config data left"),
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
                Err(error) => return Err(error.into()),
            }
            ConfigOutcome::None
        }
        (None, _) => ConfigOutcome::None,
    };
    Ok(outcome)
}

/// Why watcher-agent would refuse the configuration `spec` gives its sidecar; `None` where it
/// takes it, where that is known only in the pod, and where the sidecar is not watcher-agent.
pub(crate) fn refused_configuration(spec: &watcher_api::WatcherSpec) -> Option<String> {
    match crate::agent::agent_configuration(spec)? {
        crate::agent::Judgement::Refuses(refusal) => Some(refusal.to_string()),
        crate::agent::Judgement::Takes(_) | crate::agent::Judgement::CannotKnow(_) => None,
    }
}

/// The Watcher generation whose configuration `config_map` holds, as it records it.
fn held_generation(config_map: &ConfigMap) -> Option<i64> {
    config_map.annotations().get(watcher_api::CONFIG_GENERATION_ANNOTATION)?.parse().ok()
}

fn ready_condition(status: &WatcherStatus) -> Option<&watcher_api::Condition> {
    status.conditions.iter().find(|c| c.type_ == types::READY)
}

/// The ConfigMap a Watcher should own, or `None` when it has no config data.
pub fn desired_config_map(watcher: &Watcher) -> Option<ConfigMap> {
    let owner = watcher.controller_owner_ref(&())?;
    config_map_of(&watcher.spec, &watcher.name_any(), &watcher.namespace()?, (owner, watcher.meta().generation), [])
}

/// What `Ready` says of a configuration watcher-agent refuses (`why`), in generation
/// `generation`, and of what pods get meanwhile: what `kept` holds, or no sidecar.
fn refused_message(kept: Option<&(String, Option<i64>)>, why: &str, generation: Option<i64>) -> String {
    let this = generation.map_or("the configuration".to_owned(), |g| format!("generation {g}'s configuration"));
    match kept {
        Some((name, held)) => {
            let held = held.map_or("the last good configuration".to_owned(), |g| format!("generation {g}'s"));
            format!(
                "{this} is not shipped, watcher-agent would refuse it: {why}; ConfigMap {name} keeps {held}, which pods get"
            )
        }
        None => format!(
            "{this} is not shipped, watcher-agent would refuse it: {why}; no configuration was ever shipped: pods \
             that ask for this Watcher are admitted without its sidecar until it is fixed"
        ),
    }
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
    status.spec_hash = Some(watcher.spec.spec_hash().to_owned());
    let ready = match outcome {
        ConfigOutcome::None => {
            status.config_map_name = None;
            status.config_generation = None;
            condition(types::READY, true, reasons::RECONCILED, "Watcher has no config data", generation)
        }
        ConfigOutcome::Applied(name, held) => {
            status.config_map_name = Some(name.clone());
            status.config_generation = *held;
            condition(types::READY, true, reasons::RECONCILED, format!("ConfigMap {name} is up to date"), generation)
        }
        ConfigOutcome::Conflict(message) => {
            status.config_map_name = None;
            status.config_generation = None;
            condition(types::READY, false, reasons::CONFIG_MAP_CONFLICT, message.clone(), generation)
        }
        ConfigOutcome::Refused { kept, why } => {
            status.config_map_name = kept.as_ref().map(|(name, _)| name.clone());
            status.config_generation = kept.as_ref().and_then(|(_, held)| *held);
            condition(
                types::READY,
                false,
                reasons::CONFIG_REFUSED,
                refused_message(kept.as_ref(), why, generation),
                generation,
            )
        }
    };
    let problems = watcher.spec.problems();
    let ready = if ready.status != "True" {
        ready
    } else if !problems.is_empty() {
        // Stored before the CRD had the rule, or on Kubernetes 1.24 (no CEL): the webhook never
        // injects it, and says so here.
        let message = format!("not injected: a pod would be invalid with it: {}", problems.join("; "));
        condition(types::READY, false, reasons::INVALID_SPEC, message, generation)
    } else if !covered {
        let message = "waiting for the webhook's matchConditions to send the pods that ask for this Watcher";
        condition(types::READY, false, reasons::ADMISSION_SCOPE_PENDING, message, generation)
    } else {
        ready
    };
    set_condition(&mut status.conditions, ready);
    status
}

#[cfg(test)]
mod tests;
