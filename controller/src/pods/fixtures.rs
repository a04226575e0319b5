//! Test-only constructors: pods counted with the sidecars of given Watchers, an index over
//! given pods, the reconciler's context over them.

use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::runtime::watcher;
use watcher_api::Watcher;
use watcher_cache::WatcherCache;

use super::store::{CountedPod, Interner, PodIndex, SidecarLookup, containers_of};
use super::{PodMeta, PodsContext};
use crate::Context;
use crate::runtime::lock;

/// A context over `pods`, for tests that fill the index themselves.
pub(super) fn context_for_tests(
    ctx: Arc<Context>,
    pods: PodIndex,
    revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
) -> Arc<PodsContext> {
    let cache = WatcherCache::from_store(kube::runtime::reflector::store().0).0;
    context_with_cache(ctx, pods, revisions, cache)
}

/// [`context_for_tests`] over the Watchers, ClusterWatchers and namespaces of `cache`.
pub(super) fn context_with_cache(
    ctx: Arc<Context>,
    pods: PodIndex,
    revisions: Vec<k8s_openapi::api::apps::v1::ControllerRevision>,
    cache: WatcherCache,
) -> Arc<PodsContext> {
    let revisions = watcher_cache::RevisionCache::holding(revisions, cache.operator_namespace());
    let rebuilt = Mutex::default();
    Arc::new(PodsContext { ctx, cache, pods: Arc::new(pods), policies: None, revisions, rebuilt })
}

/// The same caches and memory of rebuilt specs, over another client (a test's next scenario).
impl PodsContext {
    pub(super) fn over(&self, ctx: Arc<Context>) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            cache: self.cache.clone(),
            pods: self.pods.clone(),
            policies: self.policies.clone(),
            revisions: self.revisions.clone(),
            rebuilt: Mutex::new(lock(&self.rebuilt).clone()),
        })
    }
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
