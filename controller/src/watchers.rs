//! The `watcher` controller: the Watcher reconciler ([`crate::watcher`]) and the ClusterWatcher
//! reconciler ([`crate::cluster_watcher`]) side by side, over one watch of the operator's
//! ConfigMaps.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use watcher_api::{MANAGED_BY, MANAGED_BY_LABEL, Watcher};
use watcher_cache::WatcherCache;

use crate::Context;
use crate::owned::{WATCHER_LABEL, owner_of};
use crate::scope::ScopeStatus;
use crate::standing::relabelled;
use crate::watcher::{WatcherState, reconcile};

const CONTROLLER: &str = "watcher";

/// Runs the Watcher controller until shutdown, on the Watchers of the shared cache (the
/// revision of each spec written as it is first seen, in `revisions`). A Watcher
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
    revisions: watcher_cache::RevisionCache,
    scope: ScopeStatus,
    namespace_changes: tokio::sync::watch::Receiver<()>,
) {
    let labels = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let api = Api::<ConfigMap>::all(ctx.client.clone());
    let (config_maps, changed, listed) = crate::cached_watch(api, watcher::Config::default().labels(&labels), |_| {});
    let namespaces = cache.namespaces.clone();
    let shared =
        Arc::new(WatcherState::with(config_maps.clone(), listed.clone(), scope.clone(), namespaces, revisions.clone()));
    let (to_watchers, for_watchers) = futures::channel::mpsc::unbounded();
    let (to_cluster, for_cluster) = futures::channel::mpsc::unbounded();
    let seen = shared.clone();
    let fan_out = changed.for_each(move |config_map| {
        match config_map {
            Ok(config_map) => {
                seen.saw(&config_map);
                if let Some(name) = config_map.labels().get(WATCHER_LABEL) {
                    let namespace = config_map.namespace().unwrap_or_default();
                    let _ = to_watchers.unbounded_send(ObjectRef::<Watcher>::new(name).within(&namespace));
                }
                if let Some(cluster) = owner_of(&config_map) {
                    let _ = to_cluster.unbounded_send(cluster);
                }
            }
            Err(error) => watcher_cache::watch::log_watch_error("ConfigMaps", false, &error),
        }
        futures::future::ready(())
    });
    let (triggers, resyncs) = watcher_cache::split(cache.subscribe(), cache.store.clone());
    // Nothing is reconciled before the scope is known (each Watcher would only wait), then
    // everything once, and again each Watcher whose coverage what is registered changes.
    let triggers = scope.gate(triggers);
    let resyncs = scope.gate(resyncs);
    let coverage = scope.coverage_changes(cache.store.clone());
    let cluster = Arc::new(crate::cluster_watcher::ClusterWatcherState::new(
        cache.clone(),
        config_maps.clone(),
        listed.clone(),
        scope.clone(),
        revisions.clone(),
    ));
    shared.follow_pod_security(cache.pod_security.clone());
    let relabelled = relabelled_watchers(cache.clone(), namespace_changes.clone());
    // A change of the cluster's Pod Security defaults (learned at start) judges every Watcher
    // again.
    let defaults_changes = cache.pod_security.subscribe();
    let watchers = crate::run_controller(
        CONTROLLER,
        Controller::for_shared_stream(triggers, cache.store.clone())
            .reconcile_all_on(futures::stream::select(resyncs, watcher_cache::changed(defaults_changes)))
            .reconcile_on(futures::stream::select_all([coverage.boxed(), for_watchers.boxed(), relabelled.boxed()])),
        crate::controller_config(),
        ctx.clone(),
        shared,
        reconcile,
    );
    let clusters = crate::cluster_watcher::run(ctx.clone(), cluster, for_cluster, namespace_changes);
    crate::runtime::with_feeds(futures::future::join(watchers, clusters).map(|_| ()), fan_out).await;
}

/// The Watchers of each namespace whose Pod Security levels change (labelled, relabelled,
/// unlabelled), so their `PodSecurity` condition follows at once; other namespace changes
/// reconcile nothing.
fn relabelled_watchers(
    cache: WatcherCache,
    namespace_changes: tokio::sync::watch::Receiver<()>,
) -> impl futures::Stream<Item = ObjectRef<Watcher>> + Send + 'static {
    let mut known = HashMap::new();
    watcher_cache::changed(namespace_changes).flat_map(move |()| {
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
