//! Test-only constructors: pods counted with the sidecars of given Watchers, an index over
//! given pods, the reconciler's context over them.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::watcher;
use watcher_api::Watcher;
use watcher_cache::WatcherCache;

use super::store::{CountedPod, Interner, PodIndex, SidecarLookup, containers_of};
use super::{PodMeta, PodsState};
use crate::Context;

/// The shared context and the reconciler's state over `pods`, for tests that fill the index
/// themselves (dropped together, they let a mocked server see that no request follows).
pub(super) fn reconciler_for_tests(
    ctx: Arc<Context>,
    pods: PodIndex,
    revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
) -> (Arc<Context>, Arc<PodsState>) {
    let cache = WatcherCache::from_store(kube::runtime::reflector::store().0).0;
    reconciler_with_cache(ctx, pods, revisions, cache)
}

/// [`reconciler_for_tests`] over the Watchers, ClusterWatchers and namespaces of `cache`.
pub(super) fn reconciler_with_cache(
    ctx: Arc<Context>,
    pods: PodIndex,
    revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
    cache: WatcherCache,
) -> (Arc<Context>, Arc<PodsState>) {
    let revisions = watcher_cache::RevisionCache::holding(revisions, cache.operator_namespace());
    let rebuilt = Mutex::default();
    (ctx, Arc::new(PodsState { cache, pods: Arc::new(pods), policies: None, revisions, rebuilt }))
}

impl CountedPod {
    /// The pod as the reconciler keeps it, with the sidecars of `watchers` (for tests).
    pub(crate) fn with_sidecars_of(pod: &PodMeta, watchers: &[Watcher]) -> Self {
        Self::new(pod, &Interner::default(), Some(&lookup_in(watchers.to_vec())))
    }
}

impl PodIndex {
    /// An index holding `pods`, synced (for tests), keeping the sidecars of `watchers`.
    pub(crate) fn with_pods(pods: impl IntoIterator<Item = PodMeta>) -> Self {
        Self::with_pods_of(pods, &[])
    }

    /// [`PodIndex::with_pods`], keeping the sidecars of `watchers`.
    pub(crate) fn with_pods_of(pods: impl IntoIterator<Item = PodMeta>, watchers: &[Watcher]) -> Self {
        let index = Self::new(lookup_in(watchers.to_vec()));
        index.apply(watcher::Event::Init);
        for pod in pods {
            index.apply(watcher::Event::InitApply(pod));
        }
        index.apply(watcher::Event::InitDone);
        index
    }
}

/// A lookup of Watchers' container names in a fixed list.
fn lookup_in(watchers: Vec<Watcher>) -> SidecarLookup {
    Arc::new(move |namespace: &str, name: &str| {
        watchers
            .iter()
            .find(|w| w.metadata.namespace.as_deref() == Some(namespace) && w.name_any() == name)
            .map(containers_of)
            .unwrap_or_default()
    })
}
