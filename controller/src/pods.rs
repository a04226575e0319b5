//! Pods → injection drift on each Watcher: `status.pods` counts, an Event when pods are missing
//! or outdated, and with `updatePolicy.type` `Recreate` or `InPlace` a rollout ([`rollout`]:
//! which pods go next; [`revisions`]: the specs pods carry; [`in_place`]: the patch of a
//! sidecar's image).
//!
//! Pods are kept as [`CountedPod`]s (labels, the injection annotations, whether a controller
//! recreates them, and for injected pods where their sidecars are, with which image, and what
//! the kubelet reports of them): thousands of pods cost little memory. A pod event reaches only the Watchers of its namespace.

#[cfg(test)]
mod fixtures;
pub mod in_place;
mod meta;
pub mod rollout;
mod status;
mod steps;
mod store;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tracing::{info, instrument};
use watcher_api::{ClusterWatcher, UpdatePolicyType, Watcher};
use watcher_cache::{PolicyCache, WatcherCache};

use crate::revisions;
use crate::{Context, Error, Result};
#[cfg(test)]
use fixtures::{reconciler_for_tests, reconciler_with_cache};
use status::{
    Current, ENDED_CONDITION, LEFT_OUT_CONDITION, RUNNING_CONDITION, count, ended_condition, left_out_condition,
    live_pods_of, patch_status, running_condition, set_kubelet_condition, shown, standing, terminating_pods_of,
};
use steps::{plan_step, rebuild_unkept, revisions_namespace, roll};
use store::{CountedPod, PodIndex, SidecarLookup, containers_of};

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

/// What the pod reconciler keeps between reconciles.
pub struct PodsState {
    /// The Watchers and ClusterWatchers: where a ClusterWatcher applies.
    cache: WatcherCache,
    pods: Arc<PodIndex>,
    /// ImagePolicies: an image updated in place is rewritten as admission would.
    policies: Option<PolicyCache>,
    /// The Watchers' ControllerRevisions: the replica's revision cache.
    revisions: watcher_cache::RevisionCache,
    /// Specs pods carry whose revision was rebuilt, or could not be (`<uid>/<hash>`): tried
    /// once per process.
    rebuilt: Mutex<HashSet<String>>,
}

/// Runs the pod reconciler until shutdown, on the Watchers and revisions of the shared
/// caches; `policies` rewrite the images it updates in place.
pub async fn run(
    ctx: Arc<Context>,
    cache: WatcherCache,
    revisions: watcher_cache::RevisionCache,
    policies: PolicyCache,
) {
    let client = ctx.client.clone();
    let pods = Arc::new(PodIndex::new(sidecar_lookup(cache.clone())));
    let (synced_tx, synced_rx) = futures::channel::mpsc::unbounded();
    let (cluster_synced_tx, synced_cluster) = futures::channel::mpsc::unbounded();
    let pod_events = indexed_pod_events(&client, pods.clone(), [synced_tx, cluster_synced_tx]);
    let revision_events = revisions.subscribe();
    // Revision changes missed (a lagging subscriber): every Watcher and ClusterWatcher again.
    let (missed_tx, missed_rx) = futures::channel::mpsc::unbounded();
    let (cluster_missed_tx, cluster_missed) = futures::channel::mpsc::unbounded();
    let namespace_changes = policies.changes();
    let shared = Arc::new(PodsState {
        cache: cache.clone(),
        pods,
        policies: Some(policies),
        revisions: revisions.clone(),
        rebuilt: Mutex::default(),
    });
    // Pod and revision events go to the Watchers or ClusterWatchers they concern: a pod's, by
    // its namespace; a revision's, by its owner.
    let (pods_tx, pods_rx) = futures::channel::mpsc::unbounded::<ObjectRef<Watcher>>();
    let (cluster_tx, cluster_rx) = futures::channel::mpsc::unbounded::<ObjectRef<ClusterWatcher>>();
    let triggers = Triggers { watchers: pods_tx, clusters: cluster_tx };
    let fan_out = futures::future::join(
        pods_to_owners(pod_events, cache.clone(), triggers.clone()),
        revisions_to_owners(revision_events, triggers, (missed_tx, cluster_missed_tx)),
    );
    let (triggers, resyncs) = watcher_cache::split(cache.subscribe(), cache.store.clone());
    let watchers = crate::run_controller(
        CONTROLLER,
        Controller::for_shared_stream(triggers, cache.store.clone())
            .reconcile_all_on(futures::stream::select_all([resyncs.boxed(), synced_rx.boxed(), missed_rx.boxed()]))
            .reconcile_on(pods_rx),
        crate::controller_config().debounce(DEBOUNCE),
        ctx.clone(),
        shared.clone(),
        reconcile,
    );
    let (changes, resyncs) = watcher_cache::split(cache.subscribe(), cache.cluster.clone());
    let namespaces = watcher_cache::changed(namespace_changes);
    let clusters = crate::run_controller(
        CONTROLLER,
        Controller::for_shared_stream(changes, cache.cluster.clone())
            .reconcile_all_on(futures::stream::select_all([
                resyncs.boxed(),
                namespaces.boxed(),
                synced_cluster.boxed(),
                cluster_missed.boxed(),
            ]))
            .reconcile_on(cluster_rx),
        crate::controller_config().debounce(DEBOUNCE),
        ctx,
        shared,
        reconcile_cluster,
    );
    crate::runtime::with_feeds(futures::future::join(watchers, clusters).map(|_| ()), fan_out).await;
}

/// The sidecars of Watcher `name` in `namespace`, as the cache holds it.
fn sidecar_lookup(cache: WatcherCache) -> SidecarLookup {
    Arc::new(move |namespace: &str, name: &str| {
        let watchers = cache.in_namespace(namespace);
        watchers.iter().find(|w| w.name_any() == name).map(|w| containers_of(w)).unwrap_or_default()
    })
}

/// Every pod's events, kept in `pods`, as the changed pods; once the first list is in, each of
/// `synced` is told (to count every Watcher and ClusterWatcher once).
fn indexed_pod_events(
    client: &kube::Client,
    pods: Arc<PodIndex>,
    synced: [futures::channel::mpsc::UnboundedSender<()>; 2],
) -> impl futures::Stream<Item = Result<PodMeta, watcher::Error>> + Send + 'static {
    pod_events(Api::<PodMeta>::all(client.clone()))
        .inspect(watcher_cache::watch::observe_watch("pods"))
        .default_backoff()
        .filter_map(move |event| {
            let changed = match event {
                Ok(event) => {
                    let done = matches!(event, watcher::Event::InitDone);
                    let changed = pods.apply(event).map(Ok);
                    if done {
                        for synced in &synced {
                            let _ = synced.unbounded_send(());
                        }
                    }
                    changed
                }
                Err(error) => Some(Err(error)),
            };
            futures::future::ready(changed)
        })
}

/// Where a reconcile of a Watcher or a ClusterWatcher is asked for.
#[derive(Clone)]
struct Triggers {
    watchers: futures::channel::mpsc::UnboundedSender<ObjectRef<Watcher>>,
    clusters: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterWatcher>>,
}

/// Each changed pod asks for a reconcile of the Watchers of its namespace (of a ClusterWatcher
/// where the Watcher is one's).
async fn pods_to_owners(
    pods: impl futures::Stream<Item = Result<PodMeta, watcher::Error>>,
    cache: WatcherCache,
    triggers: Triggers,
) {
    pods.for_each(move |pod| {
        if let Ok(pod) = pod {
            for watcher in cache.in_namespace(&pod.namespace().unwrap_or_default()).iter() {
                match watcher.cluster_watcher() {
                    Some(owner) => drop(triggers.clusters.unbounded_send(ObjectRef::new(&owner.name))),
                    None => drop(triggers.watchers.unbounded_send(ObjectRef::from(watcher.as_ref()))),
                }
            }
        }
        futures::future::ready(())
    })
    .await;
}

/// Each changed revision asks for a reconcile of its owner; changes missed (a lagging
/// subscriber) ask for every Watcher and ClusterWatcher (`missed`).
async fn revisions_to_owners(
    changes: impl futures::Stream<Item = watcher_cache::RevisionChange>,
    triggers: Triggers,
    missed: (futures::channel::mpsc::UnboundedSender<()>, futures::channel::mpsc::UnboundedSender<()>),
) {
    changes
        .for_each(move |change| {
            match change {
                watcher_cache::RevisionChange::Revision(revision) => {
                    for owner in revision.owner_references().iter().filter(|o| o.controller == Some(true)) {
                        if owner.kind == watcher_api::CLUSTER_WATCHER_KIND {
                            drop(triggers.clusters.unbounded_send(ObjectRef::new(&owner.name)));
                        } else {
                            let namespace = revision.namespace().unwrap_or_default();
                            drop(triggers.watchers.unbounded_send(ObjectRef::new(&owner.name).within(&namespace)));
                        }
                    }
                }
                watcher_cache::RevisionChange::Resync => {
                    drop(missed.0.unbounded_send(()));
                    drop(missed.1.unbounded_send(()));
                }
            }
            futures::future::ready(())
        })
        .await;
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

/// Whose pods a reconcile counts and rolls out, and where it writes what it finds.
enum Subject {
    /// A Watcher: the pods of its namespace.
    Watcher(String),
    /// A ClusterWatcher: the pods of the namespaces where it applies.
    Cluster(Arc<ClusterWatcher>),
}

/// Counts the Watcher's pods, takes a step of its rollout (`Recreate`, `InPlace`), and records
/// the counts.
#[instrument(skip(watcher, ctx, state), fields(namespace = watcher.namespace(), watcher = watcher.name_any()))]
pub async fn reconcile(watcher: Arc<Watcher>, ctx: Arc<Context>, state: Arc<PodsState>) -> Result<Action> {
    if let Some(wait) = unready(&state) {
        return Ok(wait);
    }
    let namespace = watcher.namespace().ok_or_else(|| Error::MissingNamespace(watcher.name_any()))?;
    let action = reconcile_subject(
        &watcher,
        std::slice::from_ref(&namespace),
        &Subject::Watcher(namespace.clone()),
        &ctx,
        &state,
    )
    .await?;
    ctx.reconciled(&crate::object_key(CONTROLLER, watcher.as_ref()));
    Ok(action)
}

/// [`reconcile`] for a ClusterWatcher: its pods in every namespace where it applies, one
/// rollout across all of them, oldest first; its revisions in the operator's namespace.
#[instrument(skip(cluster, ctx, state), fields(clusterwatcher = cluster.name_any()))]
pub async fn reconcile_cluster(
    cluster: Arc<ClusterWatcher>,
    ctx: Arc<Context>,
    state: Arc<PodsState>,
) -> Result<Action> {
    if let Some(wait) = unready(&state) {
        return Ok(wait);
    }
    let namespaces = state.cache.namespaces_of(&cluster);
    let watcher = cluster.across_namespaces();
    let action = reconcile_subject(&watcher, &namespaces, &Subject::Cluster(cluster.clone()), &ctx, &state).await?;
    ctx.reconciled(&crate::object_key(CONTROLLER, cluster.as_ref()));
    Ok(action)
}

/// Writes `counts` and the `revisions` (current, stable) in the status of `watcher`, in one
/// write when either changed, with a Warning Event once per change of counts that drift.
async fn write_counts(
    watcher: &Watcher,
    subject: &Subject,
    ctx: &Context,
    counts: watcher_api::PodCounts,
    revisions: Option<(String, String)>,
) -> Result<()> {
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
            ctx.publish(&subject.regarding(watcher), EventType::Warning, "InjectionDrift", "Count", note).await;
        }
    }
    Ok(())
}

/// What to do until the pods and the revisions are listed: counts would be short, and the
/// cache would say "no revision".
fn unready(state: &PodsState) -> Option<Action> {
    if !state.pods.is_synced() {
        return Some(Action::await_change()); // every Watcher is counted when the list is in
    }
    if !state.revisions.is_listed() {
        return Some(Action::requeue(crate::UNLISTED_RETRY));
    }
    None
}

async fn reconcile_subject(
    watcher: &Watcher,
    namespaces: &[String],
    subject: &Subject,
    ctx: &Context,
    state: &PodsState,
) -> Result<Action> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let rolls = watcher.spec.update_policy.type_ != UpdatePolicyType::Report;
    let keeps_revisions = revisions::kept_for(&watcher.spec);
    let rebuilt = if keeps_revisions { rebuild_unkept(watcher, namespaces, ctx, state).await? } else { Vec::new() };
    let (mut counts, step, running) = state.pods.with_namespaces(namespaces, |pods| {
        let counts = count(watcher, pods);
        let running = running_condition(watcher, pods, &counts);
        let ended = ended_condition(watcher, pods, &counts);
        let left_out = left_out_condition(watcher, pods);
        let step = keeps_revisions.then(|| plan_step(watcher, pods, state, namespaces, &counts, &rebuilt));
        (counts, step, (running, ended, left_out))
    });
    let mut conditions = watcher.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let mut revisions = None;
    let action = match step {
        None => Action::await_change(),
        Some(step) => {
            revisions::write(step.revisions, &ctx.client, &revisions_namespace(watcher, state)).await?;
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
            .map(|ns| (ns.clone(), state.pods.with_namespace(ns, |pods| count(watcher, pods))))
            .filter(|(_, counts)| counts.matched > 0)
            .collect();
        ctx.metrics.set_cluster_pods(&cluster.name_any(), by_namespace);
    }
    write_counts(watcher, subject, ctx, counts, revisions).await?;
    let (running, ended, left_out) = running;
    let conditions = set_kubelet_condition(watcher, subject, ctx, RUNNING_CONDITION, running, conditions).await?;
    let conditions = set_kubelet_condition(watcher, subject, ctx, ENDED_CONDITION, ended, conditions).await?;
    set_kubelet_condition(watcher, subject, ctx, LEFT_OUT_CONDITION, left_out, conditions).await?;
    Ok(action)
}

impl Subject {
    fn kind(&self) -> &'static str {
        match self {
            Self::Watcher(_) => "Watcher",
            Self::Cluster(_) => watcher_api::CLUSTER_WATCHER_KIND,
        }
    }

    /// What an Event about it regards: the Watcher, or the ClusterWatcher whose Watcher across
    /// its namespaces `watcher` is.
    fn regarding(&self, watcher: &Watcher) -> k8s_openapi::api::core::v1::ObjectReference {
        match self {
            Self::Watcher(_) => kube::Resource::object_ref(watcher, &()),
            Self::Cluster(cluster) => kube::Resource::object_ref(cluster.as_ref(), &()),
        }
    }
}

#[cfg(test)]
mod tests;
