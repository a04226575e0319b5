use super::*;
use kube::runtime::watcher::Event;

fn watcher(name: &str) -> Watcher {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": {"container": {"name": name}},
    }))
    .expect("valid Watcher")
}

/// The next item of `feed`, or a failure after 5 s: a regression fails the test instead of
/// hanging CI.
async fn next<S: futures::Stream + Unpin>(feed: &mut S) -> Option<S::Item> {
    tokio::time::timeout(std::time::Duration::from_secs(5), feed.next()).await.expect("an item within 5 s")
}

/// `stream` to its end, or a failure after 5 s.
async fn all<S: futures::Stream>(stream: S) -> Vec<S::Item> {
    tokio::time::timeout(std::time::Duration::from_secs(5), stream.collect()).await.expect("the end within 5 s")
}

#[tokio::test]
async fn subscribers_start_with_a_resync_and_catch_up_after_lagging() {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(watcher("a")));
    let (cache, changes) = WatcherCache::from_store(store);
    let mut feed = Box::pin(cache.subscribe());
    assert_eq!(next(&mut feed).await, Some(Change::Resync));

    let a = ObjectRef::from(&watcher("a"));
    changes.send(Change::Watcher(a.clone())).expect("subscribed");
    assert_eq!(next(&mut feed).await, Some(Change::Watcher(a.clone())));

    for _ in 0..=CHANGE_BUFFER {
        let _ = changes.send(Change::Watcher(a.clone()));
    }
    assert_eq!(next(&mut feed).await, Some(Change::Resync), "a lagging subscriber resyncs");
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
    let (cache, fill) = WatcherCache::new(Client::new(service, "default"), reflector::store().0, "watcher-system");
    let mut feed = Box::pin(cache.subscribe());
    tokio::spawn(fill);
    let server = tokio::spawn(async move {
        // The Watchers and the ClusterWatchers are listed, then watched, in any order;
        // the watches are kept open by never answering them.
        let mut open = Vec::new();
        loop {
            let (request, send) = handle.next_request().await.expect("request");
            let query = request.uri().query().unwrap_or_default().to_owned();
            if query.contains("watch=true") {
                open.push(send);
                continue;
            }
            let list = match request.uri().path() {
                "/apis/watcher.dev/v1alpha1/watchers" => serde_json::json!({
                    "apiVersion": "watcher.dev/v1alpha1", "kind": "WatcherList",
                    "metadata": {"resourceVersion": "10"}, "items": [watcher("a"), watcher("b")]}),
                "/apis/watcher.dev/v1alpha1/clusterwatchers" => serde_json::json!({
                    "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcherList",
                    "metadata": {"resourceVersion": "10"}, "items": []}),
                other => panic!("unexpected request {other}"),
            };
            send.send_response(Response::new(Body::from(serde_json::to_vec(&list).expect("json"))));
        }
    });
    tokio::time::timeout(std::time::Duration::from_secs(5), cache.store.wait_until_ready())
        .await
        .expect("ready in time")
        .expect("ready");
    assert_eq!(cache.store.len(), 2);
    let names: Vec<_> = cache.in_namespace("team-a").iter().map(|w| w.name_any()).collect();
    assert_eq!(names.len(), 2, "the namespace index sees the initial list: {names:?}");
    assert_eq!(next(&mut feed).await, Some(Change::Resync));
    let mut seen = vec![next(&mut feed).await, next(&mut feed).await];
    seen.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        seen,
        [Some(Change::Watcher(ObjectRef::from(&watcher("a")))), Some(Change::Watcher(ObjectRef::from(&watcher("b"))))]
    );
    server.abort();
}

fn cluster_watcher(image: &str, team: &str, status: Option<serde_json::Value>) -> ClusterWatcher {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
        "metadata": {"name": "log-agent", "uid": "cw-1", "generation": 1},
        "spec": {"container": {"name": "log-agent", "image": image},
                 "namespaceSelector": {"matchLabels": {"team": team}}},
        "status": status,
    }))
    .expect("valid ClusterWatcher")
}

fn namespace(name: &str, team: &str) -> NamespaceMeta {
    serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, "team": team}}}))
    .expect("namespace")
}

fn images(watchers: &[Arc<Watcher>]) -> Vec<(String, Option<String>)> {
    watchers.iter().map(|w| (w.name_any(), w.spec.container.image.clone())).collect()
}

/// A namespace's effective Watchers follow its labels at once (no invalidation needed) and
/// the ClusterWatchers once the index is marked stale.
#[test]
fn a_namespace_sees_the_cluster_watchers_that_apply_there() {
    let (store, mut own) = reflector::store();
    own.apply_watcher_event(&Event::Apply(watcher("own")));
    let (cluster_store, mut clusters) = reflector::store();
    clusters.apply_watcher_event(&Event::Apply(cluster_watcher("busybox:1.36", "payments", None)));
    let (namespace_store, mut namespaces) = reflector::store();
    namespaces.apply_watcher_event(&Event::Apply(namespace("team-a", "search")));
    let (cache, _) = WatcherCache::from_stores(store, cluster_store, namespace_store, "watcher-system");
    assert_eq!(images(&cache.in_namespace("team-a")), [("own".to_owned(), None)], "not selected");

    namespaces.apply_watcher_event(&Event::Apply(namespace("team-a", "payments")));
    let seen = cache.in_namespace("team-a");
    assert_eq!(
        images(&seen),
        [("own".to_owned(), None), ("log-agent".to_owned(), Some("busybox:1.36".to_owned()))],
        "relabelled"
    );
    assert!(Arc::ptr_eq(&seen, &cache.in_namespace("team-a")), "kept until something changes");

    clusters.apply_watcher_event(&Event::Apply(cluster_watcher("busybox:1.37", "payments", None)));
    cache.invalidate();
    assert_eq!(images(&cache.in_namespace("team-a"))[1].1.as_deref(), Some("busybox:1.37"));

    // Every namespace where it applies holds the same copy of it, not one of its own.
    namespaces.apply_watcher_event(&Event::Apply(namespace("team-b", "payments")));
    let (a, b) = (cache.in_namespace("team-a"), cache.in_namespace("team-b"));
    assert!(Arc::ptr_eq(&a[1], &b[0]), "one ClusterWatcher, one copy");
    let mut everywhere: Vec<(String, String)> =
        cache.everywhere().iter().map(|(namespace, w)| (namespace.clone(), w.name_any())).collect();
    everywhere.sort(); // the stores list in no order
    assert_eq!(
        everywhere,
        [
            ("team-a".to_owned(), "log-agent".to_owned()),
            ("team-a".to_owned(), "own".to_owned()),
            ("team-b".to_owned(), "log-agent".to_owned())
        ]
    );
}

/// A reader that computed a namespace's Watchers from the stores before a rebuild does not
/// leave them behind after it: the next reader computes them again.
#[test]
fn what_was_computed_before_a_rebuild_is_not_kept() {
    let index = NamespaceIndex::default();
    let labels = BTreeMap::from([("team".to_owned(), "payments".to_owned())]);
    let old = Arc::new(watcher_admission::NamespaceWatchers::from(vec![Arc::new(watcher("old"))]));
    let before = index.epoch.load(Ordering::Acquire);
    index.rebuild(vec![Arc::new(watcher("new"))], Vec::new());
    index.remember(before, "team-a", labels.clone(), old.clone());
    assert!(index.remembered("team-a", &labels).is_none(), "computed before the rebuild");
    let now = index.epoch.load(Ordering::Acquire);
    index.remember(now, "team-a", labels.clone(), old);
    assert!(index.remembered("team-a", &labels).is_some());
    assert!(index.remembered("team-a", &BTreeMap::new()).is_none(), "other labels: computed again");
}

/// Only what admission reads of a ClusterWatcher marks the index stale: not a status write.
#[test]
fn a_status_write_leaves_the_namespaces_as_they_are() {
    let index = Arc::new(NamespaceIndex::default());
    let mut inspect = stale_on_spec_changes(index.clone());
    let stale = || index.fresh.take_marked();
    let listed = cluster_watcher("busybox:1.36", "payments", None);
    assert!(stale(), "a new index is built at its first read");
    inspect(&Ok(watcher::Event::Init));
    inspect(&Ok(watcher::Event::InitApply(listed.clone())));
    assert!(!stale(), "not before the list is in");
    inspect(&Ok(watcher::Event::InitDone));
    assert!(stale(), "the list is in");
    let counted =
        serde_json::json!({"namespaces": 3, "pods": {"matched": 4, "injected": 4, "upToDate": 4, "missing": 0}});
    inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.36", "payments", Some(counted)))));
    assert!(!stale(), "a status write");
    let held = serde_json::json!({"stableRevision": "log-agent-abc"});
    inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.36", "payments", Some(held)))));
    assert!(stale(), "a new stable revision: admission reads it");
    inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.37", "payments", None))));
    assert!(stale(), "a new image");
    inspect(&Ok(watcher::Event::Apply(cluster_watcher("busybox:1.37", "search", None))));
    assert!(stale(), "a new namespaceSelector");
    inspect(&Ok(watcher::Event::Delete(listed)));
    assert!(stale(), "deleted");
}

/// A ClusterWatcher is looked at when it changes and when a Watcher of its name does (in
/// any namespace: it may take that namespace over or hand it back); a resync goes to the
/// other stream; a change of no ClusterWatcher's name is dropped.
#[tokio::test]
async fn a_cluster_watcher_hears_of_watchers_of_its_name() {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Apply(cluster_watcher("busybox:1.36", "payments", None)));
    let changes = futures::stream::iter([
        Change::Watcher(ObjectRef::new("log-agent").within("team-a")),
        Change::Watcher(ObjectRef::new("other").within("team-a")),
        Change::Resync,
        Change::ClusterWatcher(ObjectRef::new("log-agent")),
        Change::ClusterWatcher(ObjectRef::new("gone")),
    ]);
    let (triggers, resyncs) = split(changes, store);
    let names: Vec<String> = all(triggers.map(|c| c.name_any())).await;
    assert_eq!(names, ["log-agent", "log-agent"]);
    assert_eq!(all(resyncs).await.len(), 1);
}

#[test]
fn sending_without_subscribers_never_blocks() {
    let (cache, changes) = WatcherCache::from_store(reflector::store().0);
    for _ in 0..10 * CHANGE_BUFFER {
        let _ = changes.send(Change::Watcher(ObjectRef::new("w").within("ns")));
    }
    drop(cache);
}
