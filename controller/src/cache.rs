//! The one in-memory copy of every Watcher in the process, shared by the webhook (every
//! replica) and the controllers (the leader), so 1,000 Watchers are held once, not once per user.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt, future};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::broadcast;
use watcher_api::Watcher;

/// Changes buffered per subscriber; a subscriber that falls further behind catches up with a
/// full resync instead of blocking the cache.
const CHANGE_BUFFER: usize = 1024;

/// A change seen by a subscriber.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// This Watcher was created, updated or deleted.
    Watcher(ObjectRef<Watcher>),
    /// Changes were missed: look at every Watcher.
    Resync,
}

/// The shared Watcher cache and its change feed.
#[derive(Clone)]
pub struct WatcherCache {
    /// Every Watcher of the cluster, without `managedFields`.
    pub store: Store<Watcher>,
    changes: broadcast::Sender<ObjectRef<Watcher>>,
    by_namespace: Arc<NamespaceIndex>,
}

/// The Watchers of each namespace, rebuilt from the store on the first read after a change:
/// Watchers change rarely, pods are admitted often, and filtering the whole store on every
/// admission cost 12 µs with 1,000 Watchers. A read of the index clones one `Arc`, however many
/// Watchers the namespace has (0.03 µs).
#[derive(Default)]
struct NamespaceIndex {
    stale: AtomicBool,
    watchers: RwLock<HashMap<String, Arc<[Arc<Watcher>]>>>,
}

impl WatcherCache {
    /// The cache, and the future that fills it from the API server (run it for as long as the
    /// cache is used; it retries with backoff on errors).
    pub fn new(client: Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store::<Watcher>();
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let sender = changes.clone();
        let by_namespace = Arc::new(NamespaceIndex { stale: AtomicBool::new(true), ..NamespaceIndex::default() });
        let index = by_namespace.clone();
        let fill = watcher(Api::<Watcher>::all(client), watcher::Config::default().any_semantic())
            .inspect(crate::observe_watch("watchers"))
            .default_backoff()
            .modify(|watcher| watcher.managed_fields_mut().clear())
            .reflect(writer)
            .inspect(move |event| {
                // After the store took the event (an initial list takes effect when complete).
                if matches!(event, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone))
                {
                    index.stale.store(true, Ordering::Release);
                }
            })
            .touched_objects()
            .for_each(move |touched| {
                match touched {
                    // No subscriber (not the leader) is fine: nothing waits.
                    Ok(watcher) => drop(sender.send(ObjectRef::from(&watcher))),
                    // Retried with backoff; until it works the webhook stays unready.
                    Err(error) => crate::log_watch_error("Watchers", true, &error),
                }
                future::ready(())
            });
        (Self { store, changes, by_namespace }, fill)
    }

    /// A cache over `store`, for tests and benchmarks that fill the store themselves.
    pub fn from_store(store: Store<Watcher>) -> (Self, broadcast::Sender<ObjectRef<Watcher>>) {
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let by_namespace = Arc::new(NamespaceIndex { stale: AtomicBool::new(true), ..NamespaceIndex::default() });
        (Self { store, changes: changes.clone(), by_namespace }, changes)
    }

    /// Changes from now on. A subscriber starts with a [`Change::Resync`], since everything
    /// cached before it subscribed is news to it.
    pub fn subscribe(&self) -> impl Stream<Item = Change> + Send + 'static {
        let receiver = self.changes.subscribe();
        futures::stream::once(future::ready(Change::Resync)).chain(futures::stream::unfold(receiver, |mut rx| async {
            match rx.recv().await {
                Ok(object) => Some((Change::Watcher(object), rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => Some((Change::Resync, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        }))
    }

    /// The cached Watchers of `namespace`.
    pub fn in_namespace(&self, namespace: &str) -> Arc<[Arc<Watcher>]> {
        let index = &self.by_namespace;
        // A change marks the index stale after the store has it, so a rebuild that clears the
        // mark always sees that change.
        if index.stale.swap(false, Ordering::AcqRel) {
            let mut rebuilt: HashMap<String, Vec<Arc<Watcher>>> = HashMap::new();
            for watcher in self.store.state() {
                rebuilt.entry(watcher.namespace().unwrap_or_default()).or_default().push(watcher);
            }
            let rebuilt = rebuilt.into_iter().map(|(namespace, watchers)| (namespace, watchers.into())).collect();
            *index.watchers.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        }
        let watchers = index.watchers.read().unwrap_or_else(|p| p.into_inner());
        watchers.get(namespace).cloned().unwrap_or_else(|| Arc::new([]))
    }
}

/// The webhook reads Watchers from the namespace index.
impl watcher_webhook::WatcherSource for WatcherCache {
    fn watchers_in(&self, namespace: &str) -> Arc<[Arc<Watcher>]> {
        self.in_namespace(namespace)
    }
}

/// Splits a change feed into what a controller takes: the changed Watchers (looked up in
/// `store`; deleted ones drop out) and the moments to reconcile everything.
pub(crate) fn split(
    changes: impl Stream<Item = Change> + Send + 'static,
    store: Store<Watcher>,
) -> (impl Stream<Item = Arc<Watcher>> + Send + 'static, impl Stream<Item = ()> + Send + 'static) {
    let (resync_tx, resync_rx) = futures::channel::mpsc::unbounded();
    let triggers = changes.filter_map(move |change| {
        let found = match change {
            Change::Watcher(object) => store.get(&object),
            Change::Resync => {
                let _ = resync_tx.unbounded_send(());
                None
            }
        };
        future::ready(found)
    });
    (triggers, resync_rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn watcher(name: &str) -> Watcher {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {"container": {"name": name}},
        }))
        .expect("valid Watcher")
    }

    #[tokio::test]
    async fn subscribers_start_with_a_resync_and_catch_up_after_lagging() {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(watcher("a")));
        let (cache, changes) = WatcherCache::from_store(store);
        let mut feed = Box::pin(cache.subscribe());
        assert_eq!(feed.next().await, Some(Change::Resync));

        let a = ObjectRef::from(&watcher("a"));
        changes.send(a.clone()).expect("subscribed");
        assert_eq!(feed.next().await, Some(Change::Watcher(a.clone())));

        for _ in 0..=CHANGE_BUFFER {
            let _ = changes.send(a.clone());
        }
        assert_eq!(feed.next().await, Some(Change::Resync), "a lagging subscriber resyncs");
        assert_eq!(cache.in_namespace("team-a").len(), 1);
        assert!(cache.in_namespace("team-b").is_empty());
    }

    /// Filled from the API: the store becomes ready after the initial list and every listed
    /// Watcher reaches the subscribers.
    #[tokio::test]
    async fn fills_from_the_api_and_becomes_ready() {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let (cache, fill) = WatcherCache::new(Client::new(service, "default"));
        let mut feed = Box::pin(cache.subscribe());
        tokio::spawn(fill);
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.expect("list");
            assert_eq!(request.uri().path(), "/apis/watcher.dev/v1alpha1/watchers");
            let list = serde_json::json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "WatcherList",
                "metadata": {"resourceVersion": "10"}, "items": [watcher("a"), watcher("b")]});
            send.send_response(Response::new(Body::from(serde_json::to_vec(&list).expect("json"))));
            // The watch that follows: keep it open by never answering.
            let (request, _send) = handle.next_request().await.expect("watch");
            assert!(request.uri().query().is_some_and(|q| q.contains("watch=true")));
            std::future::pending::<()>().await;
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), cache.store.wait_until_ready())
            .await
            .expect("ready in time")
            .expect("ready");
        assert_eq!(cache.store.len(), 2);
        let names: Vec<_> = cache.in_namespace("team-a").iter().map(|w| w.name_any()).collect();
        assert_eq!(names.len(), 2, "the namespace index sees the initial list: {names:?}");
        assert_eq!(feed.next().await, Some(Change::Resync));
        let mut seen = vec![feed.next().await, feed.next().await];
        seen.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(
            seen,
            [
                Some(Change::Watcher(ObjectRef::from(&watcher("a")))),
                Some(Change::Watcher(ObjectRef::from(&watcher("b"))))
            ]
        );
        server.abort();
    }

    #[test]
    fn sending_without_subscribers_never_blocks() {
        let (cache, changes) = WatcherCache::from_store(reflector::store().0);
        for _ in 0..10 * CHANGE_BUFFER {
            let _ = changes.send(ObjectRef::new("w").within("ns"));
        }
        drop(cache);
    }
}
