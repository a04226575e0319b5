//! The Watchers' ControllerRevisions (labelled `app.kubernetes.io/managed-by=watcher-operator`),
//! kept in every replica from one watch: the webhook injects the stable revision of a held
//! rollout from it (no API call at admission), and the leader's pod reconciler plans rollouts
//! with it and hears of its changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;
use watcher_admission::RevisionSource;
use watcher_api::{InjectionSpec, MANAGED_BY, MANAGED_BY_LABEL, Watcher};

use watcher_api::revision::{WATCHER_LABEL, injection_of};

/// Changes buffered per subscriber; one that falls further behind hears [`RevisionChange::Resync`].
const CHANGE_BUFFER: usize = 1024;
/// The most revision specs kept decoded for admission (revisions no longer stored are forgotten
/// when it is reached: a revision's data never changes, so an entry is never stale).
const DECODED_MAX: usize = 4096;

/// A change of the revisions, for the pod reconciler.
#[derive(Clone, Debug)]
pub enum RevisionChange {
    /// This revision was created, changed or deleted.
    Revision(Arc<ControllerRevision>),
    /// Changes were missed: look at every Watcher.
    Resync,
}

/// The shared revision cache.
#[derive(Clone)]
pub struct RevisionCache {
    /// Every Watcher's and ClusterWatcher's revisions.
    pub store: Store<ControllerRevision>,
    /// Whether the initial list is in (before it, the store says "no revision").
    pub listed: Arc<AtomicBool>,
    /// Where ClusterWatchers keep their revisions: the operator's namespace.
    operator_namespace: Arc<str>,
    changes: broadcast::Sender<RevisionChange>,
    /// Revision specs decoded once, by revision uid.
    decoded: Arc<RwLock<HashMap<String, Arc<InjectionSpec>>>>,
    /// The Watcher at its stable revision, as admission injects it, by Watcher uid: the last
    /// built, for that generation of the Watcher and that revision.
    built: Arc<RwLock<HashMap<String, Built>>>,
}

/// A Watcher built at a revision: the Watcher's generation, the revision's name, the result.
type Built = (i64, String, Arc<Watcher>);

impl RevisionCache {
    /// The cache, and the future that fills it from the API server (run it for as long as the
    /// cache is used; it retries with backoff on errors).
    pub fn new(client: Client, operator_namespace: &str) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let labels = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
        let (store, events, listed) = crate::watch::cached_watch(
            Api::<ControllerRevision>::all(client),
            watcher::Config::default().labels(&labels),
            |_| {},
        );
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let sender = changes.clone();
        let fill = events.for_each(move |revision| {
            match revision {
                // No subscriber (not the leader) is fine: nothing waits.
                Ok(revision) => drop(sender.send(RevisionChange::Revision(Arc::new(revision)))),
                Err(error) => crate::watch::log_watch_error("ControllerRevisions", true, &error),
            }
            future::ready(())
        });
        let cache = Self::over(store, listed, operator_namespace, changes);
        (cache, fill)
    }

    /// A cache holding `revisions`, listed (tests, benchmarks).
    pub fn holding(revisions: Vec<ControllerRevision>, operator_namespace: &str) -> Self {
        let (store, mut writer) = reflector::store();
        for revision in revisions {
            writer.apply_watcher_event(&watcher::Event::Apply(revision));
        }
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        Self::over(store, Arc::new(AtomicBool::new(true)), operator_namespace, changes)
    }

    fn over(
        store: Store<ControllerRevision>,
        listed: Arc<AtomicBool>,
        operator_namespace: &str,
        changes: broadcast::Sender<RevisionChange>,
    ) -> Self {
        let (decoded, built) = (Arc::default(), Arc::default());
        Self { store, listed, operator_namespace: operator_namespace.into(), changes, decoded, built }
    }

    /// Where ClusterWatchers keep their revisions: the operator's namespace.
    pub fn operator_namespace(&self) -> &str {
        &self.operator_namespace
    }

    /// Whether the initial list is in.
    pub fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// Changes from now on; a subscriber that lags behind hears [`RevisionChange::Resync`].
    pub fn subscribe(&self) -> impl Stream<Item = RevisionChange> + Send + 'static {
        futures::stream::unfold(self.changes.subscribe(), |mut rx| async {
            match rx.recv().await {
                Ok(change) => Some((change, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((RevisionChange::Resync, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
    }
}

impl RevisionSource for RevisionCache {
    /// From the store, by name, in the Watcher's namespace (a ClusterWatcher's: the
    /// operator's); only a revision labelled with the Watcher's name and owned by it.
    fn revision(&self, watcher: &Watcher, name: &str) -> Option<Arc<InjectionSpec>> {
        let namespace = watcher.metadata.namespace.as_deref().unwrap_or(&self.operator_namespace);
        let revision = self.store.get(&ObjectRef::new(name).within(namespace))?;
        let uid = watcher.metadata.uid.as_deref()?;
        let theirs = revision.labels().get(WATCHER_LABEL).map(String::as_str) == watcher.metadata.name.as_deref()
            && revision.owner_references().iter().any(|o| o.uid == uid);
        if !theirs {
            return None;
        }
        let key = revision.metadata.uid.as_deref()?;
        if let Some(spec) = self.decoded.read().unwrap_or_else(|p| p.into_inner()).get(key) {
            return Some(spec.clone());
        }
        let spec = Arc::new(injection_of(&revision)?);
        let mut decoded = self.decoded.write().unwrap_or_else(|p| p.into_inner());
        if decoded.len() >= DECODED_MAX {
            decoded.clear();
        }
        decoded.insert(key.to_owned(), spec.clone());
        Some(spec)
    }

    /// Kept per Watcher (its uid) for its generation and the revision: everything the result
    /// depends on (a Watcher's spec changes its generation; a revision's data never changes).
    /// A Watcher without uid or generation (never one from the API server) is built each time.
    fn at_revision(&self, watcher: &Watcher, name: &str, spec: &InjectionSpec) -> Arc<Watcher> {
        let build = || Arc::new(watcher_admission::canary::at_revision(watcher, spec));
        let (Some(uid), Some(generation)) = (watcher.metadata.uid.as_deref(), watcher.metadata.generation) else {
            return build();
        };
        let same = |(g, n, _): &Built| *g == generation && n == name;
        if let Some((_, _, kept)) = self.built.read().unwrap_or_else(|p| p.into_inner()).get(uid).filter(|b| same(b)) {
            return kept.clone();
        }
        let kept = build();
        let mut built = self.built.write().unwrap_or_else(|p| p.into_inner());
        if built.len() >= DECODED_MAX {
            built.clear();
        }
        built.insert(uid.to_owned(), (generation, name.to_owned(), kept.clone()));
        kept
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use watcher_api::revision::desired_revision;

    use super::*;

    /// The Watcher of the controller's stored-pod fixtures, in `namespace`, with `image`.
    fn fixture_watcher(namespace: &str, image: &str) -> Watcher {
        serde_json::from_value(json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": "log-watcher", "namespace": namespace, "uid": "w-uid"},
            "spec": {"container": {"name": "log-watcher", "image": image,
                                   "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}]},
                     "volume": {"name": "logs", "emptyDir": {}}, "configData": {"LEVEL": "debug"},
                     "updatePolicy": {"type": "InPlace", "maxUnavailable": 1}},
        }))
        .expect("Watcher")
    }

    fn revision_of(watcher: &Watcher) -> ControllerRevision {
        let mut revision = desired_revision(watcher, "team-a", 1).expect("revision");
        revision.metadata.uid = Some(format!("rev-{}", watcher.spec.spec_hash()));
        revision
    }

    /// A Watcher finds its own revision, decoded once; not another Watcher's of the same name.
    #[test]
    fn a_watcher_finds_only_its_own_revisions() {
        let watcher = fixture_watcher("team-a", "busybox:1.36");
        let revision = revision_of(&watcher);
        let name = revision.metadata.name.clone().expect("name");
        let cache = RevisionCache::holding(vec![revision], "watcher-system");
        let spec = cache.revision(&watcher, &name).expect("cached");
        assert_eq!(*spec, watcher.spec.injection());
        assert!(Arc::ptr_eq(&spec, &cache.revision(&watcher, &name).expect("cached")), "decoded once");
        assert!(cache.revision(&watcher, "log-watcher-other").is_none());
        let mut impostor = watcher.clone();
        impostor.metadata.uid = Some("another-uid".into());
        assert!(cache.revision(&impostor, &name).is_none(), "a Watcher recreated under the same name");
        let mut elsewhere = watcher.clone();
        elsewhere.metadata.namespace = Some("team-b".into());
        assert!(cache.revision(&elsewhere, &name).is_none());
    }

    /// The Watcher at its stable revision is built once per generation of the Watcher: a new
    /// spec (a new generation) is built again, with what it now says.
    #[test]
    fn a_watcher_at_its_revision_is_built_once_per_generation() {
        let stable = fixture_watcher("team-a", "busybox:1.36");
        let revision = revision_of(&stable);
        let name = revision.metadata.name.clone().expect("name");
        let cache = RevisionCache::holding(vec![revision], "watcher-system");
        let spec = cache.revision(&stable, &name).expect("cached");
        let mut current = fixture_watcher("team-a", "busybox:1.37");
        current.metadata.generation = Some(2);
        let first = cache.at_revision(&current, &name, &spec);
        assert_eq!(first.spec.container.image.as_deref(), Some("busybox:1.36"));
        assert!(Arc::ptr_eq(&first, &cache.at_revision(&current, &name, &spec)), "kept");
        current.metadata.generation = Some(3);
        current.spec.failure_policy = watcher_api::FailurePolicy::Fail;
        let again = cache.at_revision(&current, &name, &spec);
        assert!(!Arc::ptr_eq(&first, &again) && again.spec.is_required(), "a new generation is built again");
        current.metadata.generation = None;
        let unkept = cache.at_revision(&current, &name, &spec);
        assert!(!Arc::ptr_eq(&unkept, &cache.at_revision(&current, &name, &spec)), "no generation: built each time");
    }
}
