//! A minimal in-process kube-apiserver for benchmarks of the real binary: it lists a fixed set
//! of objects, keeps watches open without events, answers writes by echoing them, and counts
//! the writes it sees. Plain HTTP on 127.0.0.1, reached through a generated kubeconfig.
//!
//! [`FakeApiServer::live`] also keeps the Watchers and ConfigMaps that are created (by the
//! operator, or by [`FakeApiServer::create`] as `kubectl apply` would), as kube-apiserver does:
//! a create of an existing name is answered 409, a read returns the object, a status or merge
//! patch is applied with a new resourceVersion, and each change reaches the open watches of its
//! resource as an event, a moment later (a watch trails the writes it reports).

// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

/// Objects served by list path (e.g. `/apis/watcher.dev/v1alpha1/watchers`).
#[derive(Default)]
pub(crate) struct FakeApiServer {
    lists: HashMap<String, (String, Vec<Value>)>,
    /// Writes seen (PATCH, POST, PUT, DELETE), by the last path segment's resource kind.
    pub(crate) writes: AtomicU64,
    /// Status patches seen.
    pub(crate) status_writes: AtomicU64,
    /// Reads of single objects (GET that is neither a list nor a watch).
    pub(crate) reads: AtomicU64,
    /// Every read of a single object, by path, in order.
    pub(crate) read_log: std::sync::Mutex<Vec<String>>,
    /// Every write, as `METHOD path`, in order.
    pub(crate) write_log: std::sync::Mutex<Vec<String>>,
    /// Refuses streamed lists (`sendInitialEvents`) with 422, as kube-apiserver before 1.27
    /// and with the WatchList feature gate off (1.33's default) does; it streams them
    /// otherwise, as 1.34 and later do.
    refuses_streamed_lists: bool,
    /// Objects created while running, and the events of their watches (see [`Self::live`]).
    live: Option<Live>,
    /// Creates answered 409 (the name exists).
    pub(crate) conflicts: AtomicU64,
    /// How long after a write its watch event is delivered (a live server).
    lag: std::time::Duration,
}

/// What a live server keeps: objects by resource path (`/api/v1/configmaps`) and namespace/name.
struct Live {
    objects: std::sync::Mutex<HashMap<String, Kept>>,
    version: AtomicU64,
    /// Events to deliver after the lag: (resource path, event line).
    queue: tokio::sync::mpsc::UnboundedSender<(tokio::time::Instant, String, Bytes)>,
    events: tokio::sync::broadcast::Sender<(String, Bytes)>,
}

/// The objects of one resource, by namespace and name.
type Kept = HashMap<(String, String), Value>;

/// The resources a live server keeps (namespaces: only those [`FakeApiServer::create`] makes).
const LIVE: [&str; 4] = [
    "/api/v1/configmaps",
    "/apis/watcher.dev/v1alpha1/watchers",
    "/apis/watcher.dev/v1alpha1/clusterwatchers",
    "/api/v1/namespaces",
];

impl FakeApiServer {
    /// Serves `items` as the list of kind `list_kind` at `path`.
    pub(crate) fn with_list(mut self, path: &str, list_kind: &str, items: Vec<Value>) -> Self {
        self.lists.insert(path.to_owned(), (list_kind.to_owned(), items));
        self
    }

    /// Keeps what is created (Watchers, ConfigMaps) and reports each change to the open
    /// watches of its resource `lag` after it is written.
    pub(crate) fn live(mut self, lag: std::time::Duration) -> Self {
        let (queue, mut due) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, String, Bytes)>();
        let (events, _) = tokio::sync::broadcast::channel(1 << 16);
        let sender = events.clone();
        tokio::spawn(async move {
            while let Some((at, resource, line)) = due.recv().await {
                tokio::time::sleep_until(at).await;
                let _ = sender.send((resource, line));
            }
        });
        self.live = Some(Live { objects: Default::default(), version: AtomicU64::new(1000), queue, events });
        self.lag = lag;
        self
    }

    /// Creates `object` as `kubectl apply` would: kept, and reported to the watches.
    pub(crate) fn create(&self, resource: &str, object: Value) {
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let _ = self.store(resource, &namespace, object, true);
    }

    /// Keeps `object` under `resource` with a new resourceVersion and queues its event; `None`
    /// when `create` finds the name taken.
    fn store(&self, resource: &str, namespace: &str, mut object: Value, create: bool) -> Option<Value> {
        let live = self.live.as_ref()?;
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let mut objects = live.objects.lock().expect("lock");
        let kept = objects.entry(resource.to_owned()).or_default();
        let key = (namespace.to_owned(), name.clone());
        if create && kept.contains_key(&key) {
            return None;
        }
        let version = live.version.fetch_add(1, Ordering::Relaxed) + 1;
        if !namespace.is_empty() {
            object["metadata"]["namespace"] = json!(namespace);
        }
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        if create {
            object["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{version:012}"));
            object["metadata"]["creationTimestamp"] = json!("2026-11-24T10:00:00Z");
        }
        let kind = if create { "ADDED" } else { "MODIFIED" };
        kept.insert(key, object.clone());
        let line = Bytes::from(format!("{}\n", json!({"type": kind, "object": object})));
        let _ = live.queue.send((tokio::time::Instant::now() + self.lag, resource.to_owned(), line));
        Some(object)
    }

    /// A kept object by its path, with the resource path and namespace it is kept under.
    fn kept(&self, object_path: &str) -> Option<(String, String, Option<Value>)> {
        let live = self.live.as_ref()?;
        let (resource_path, namespace, name) = match object_path.split_once("/namespaces/") {
            Some((prefix, rest)) if rest.contains('/') => {
                let mut parts = rest.split('/');
                let (namespace, resource) = (parts.next()?, parts.next()?);
                (format!("{prefix}/{resource}"), namespace, parts.next())
            }
            // A cluster-scoped object (a namespace, a ClusterWatcher).
            _ => object_path.rsplit_once('/').map(|(parent, name)| (parent.to_owned(), "", Some(name)))?,
        };
        if !LIVE.contains(&resource_path.as_str()) {
            return None;
        }
        let object = match name {
            Some(name) => live
                .objects
                .lock()
                .expect("lock")
                .get(&resource_path)
                .and_then(|kept| kept.get(&(namespace.to_owned(), name.to_owned())).cloned()),
            None => None,
        };
        Some((resource_path, namespace.to_owned(), object))
    }

    /// Every object a live server keeps of `resource` (a cluster-wide list path), in no order.
    fn kept_items(&self, resource: &str) -> Vec<Value> {
        let Some(live) = self.live.as_ref() else { return Vec::new() };
        let objects = live.objects.lock().expect("lock");
        objects.get(resource).map(|kept| kept.values().cloned().collect()).unwrap_or_default()
    }

    /// The events of `resource` from now on (nothing for a server that is not live).
    fn live_events(&self, resource: &str) -> futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
        let Some(live) = self.live.as_ref().filter(|_| LIVE.contains(&resource)) else {
            return futures::stream::pending().boxed();
        };
        let resource = resource.to_owned();
        tokio_stream_of(live.events.subscribe())
            .filter_map(move |(r, line)| futures::future::ready((r == resource).then_some(Ok(line))))
            .boxed()
    }

    /// Refuses streamed lists, as kube-apiserver 1.33 does by default (and 1.24 always).
    pub(crate) fn without_streamed_lists(mut self) -> Self {
        self.refuses_streamed_lists = true;
        self
    }

    /// The listed object at `/…/namespaces/{ns}/{resource}/{name}`, or of a cluster-scoped
    /// resource at `/…/{resource}/{name}`.
    fn find(&self, object_path: &str) -> Option<&Value> {
        if let Some((list, name)) = object_path.rsplit_once('/')
            && let Some((_, items)) = self.lists.get(list)
        {
            return items.iter().find(|item| item["metadata"]["name"] == name);
        }
        let (prefix, rest) = object_path.split_once("/namespaces/")?;
        let mut parts = rest.split('/');
        let (namespace, resource, name) = (parts.next()?, parts.next()?, parts.next()?);
        let (_, items) = self.lists.get(&format!("{prefix}/{resource}"))?;
        items.iter().find(|item| item["metadata"]["name"] == name && item["metadata"]["namespace"] == namespace)
    }

    /// Starts serving on 127.0.0.1 and returns the address.
    pub(crate) async fn start(self) -> (Arc<Self>, SocketAddr) {
        let state = Arc::new(self);
        let router = Router::new().fallback(handle).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, router).await });
        (state, addr)
    }
}

async fn handle(State(server): State<Arc<FakeApiServer>>, method: Method, uri: Uri, body: Bytes) -> Response {
    if std::env::var_os("FAKE_LOG").is_some() {
        eprintln!("fake: {method} {uri}");
    }
    let path = uri.path();
    // Decoded as kube-apiserver decodes it (`labelSelector=watcher.dev%2Fend-sidecars%3Dtrue`).
    let query: Query = form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()).into_owned().collect();
    if method == Method::GET && path == "/version" {
        return json_response(StatusCode::OK, &json!({"major": "1", "minor": "36", "gitVersion": "v1.36.0"}));
    }
    if method == Method::GET {
        let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        if watch && query.get("sendInitialEvents").is_some_and(|s| s == "true") {
            return streamed_list(&server, path, Selector::of(&query));
        }
        if watch {
            // An open watch: no event, but the changes of a live server.
            return Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(server.live_events(path)))
                .expect("response");
        }
        if let Some((kind, listed)) = server.lists.get(path) {
            return listed_page(&server, path, kind, listed, &query);
        }
        if !is_list(path) {
            server.reads.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut log) = server.read_log.lock() {
                log.push(path.to_owned());
            }
            if let Some((_, _, Some(object))) = server.kept(path) {
                return json_response(StatusCode::OK, &object);
            }
        }
        if is_list(path) {
            return json_response(
                StatusCode::OK,
                &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
            );
        }
        return not_found(path);
    }
    server.writes.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut log) = server.write_log.lock() {
        log.push(format!("{method} {path}"));
    }
    if path.ends_with("/status") {
        server.status_writes.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(response) = live_write(&server, &method, path, &body) {
        return response;
    }
    // The reviews of `/metrics`: the token `good` is a reader's, any other unknown.
    if path.ends_with("/tokenreviews") {
        let mut review: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
        let good = review["spec"]["token"] == "good";
        review["status"] = if good {
            json!({"authenticated": true, "user": {"username": "system:serviceaccount:monitoring:prometheus",
                                                   "groups": ["system:serviceaccounts", "system:authenticated"]}})
        } else {
            json!({"user": {}, "error": "invalid bearer token"})
        };
        return json_response(StatusCode::CREATED, &review);
    }
    if path.ends_with("/subjectaccessreviews") {
        let mut review: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
        review["status"] = json!({"allowed": review["spec"]["user"] == "system:serviceaccount:monitoring:prometheus"});
        return json_response(StatusCode::CREATED, &review);
    }
    if let Some(object) = path.strip_suffix("/status").and_then(|object_path| server.find(object_path)) {
        return json_response(StatusCode::OK, object);
    }
    let object: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({}));
    // A JSON patch of a listed object: applied to it, as kube-apiserver answers.
    if let (Value::Array(_), Some(found)) = (&object, server.find(path)) {
        let mut patched = found.clone();
        return match serde_json::from_value::<json_patch::Patch>(object).map(|p| json_patch::patch(&mut patched, &p)) {
            Ok(Ok(())) => json_response(StatusCode::OK, &patched),
            _ => json_response(StatusCode::UNPROCESSABLE_ENTITY, &json!({"kind": "Status", "code": 422})),
        };
    }
    match object.get("kind") {
        Some(_) => json_response(StatusCode::OK, &object),
        None => json_response(StatusCode::OK, &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
    }
}

/// A page of the listed objects of `path` (and those the server keeps), as `limit` and
/// `continue` in `query` ask.
fn listed_page(server: &FakeApiServer, path: &str, kind: &str, listed: &[Value], query: &Query) -> Response {
    // A live server lists what it keeps too (a restarted operator sees what it wrote).
    let kept = server.kept_items(path);
    let selector = Selector::of(query);
    let items: std::borrow::Cow<'_, [Value]> = if kept.is_empty() && selector.is_none() {
        std::borrow::Cow::Borrowed(listed)
    } else {
        let selected = |object: &Value| selector.as_ref().is_none_or(|s| s.matches(object));
        std::borrow::Cow::Owned(listed.iter().cloned().chain(kept).filter(selected).collect())
    };
    let limit = query.get("limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(usize::MAX);
    let start = query.get("continue").and_then(|c| c.parse::<usize>().ok()).unwrap_or(0);
    let end = start.saturating_add(limit).min(items.len());
    let cont = if end < items.len() { end.to_string() } else { String::new() };
    let list = json!({"apiVersion": "v1", "kind": kind,
                      "metadata": {"resourceVersion": "1", "continue": cont},
                      "items": items[start.min(end)..end]});
    json_response(StatusCode::OK, &list)
}

/// A write of a live server's resource: a create (409 for a name taken), a status or merge
/// patch of a kept object; `None` for anything else.
fn live_write(server: &Arc<FakeApiServer>, method: &Method, path: &str, body: &Bytes) -> Option<Response> {
    let object_path = path.strip_suffix("/status").unwrap_or(path);
    let (resource, namespace, kept) = server.kept(object_path)?;
    let sent: Value = serde_json::from_slice(body).unwrap_or_else(|_| json!({}));
    match (method.as_str(), kept) {
        ("POST", _) => Some(match server.store(&resource, &namespace, sent.clone(), true) {
            Some(created) => json_response(StatusCode::CREATED, &created),
            None => {
                server.conflicts.fetch_add(1, Ordering::Relaxed);
                let name = sent["metadata"]["name"].as_str().unwrap_or_default();
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists",
                                    "code": 409, "message": format!("{name} already exists")});
                json_response(StatusCode::CONFLICT, &status)
            }
        }),
        ("PATCH", Some(mut object)) => {
            let patch = if path.ends_with("/status") { json!({"status": sent["status"]}) } else { sent };
            json_patch::merge(&mut object, &patch);
            let patched = server.store(&resource, &namespace, object, false)?;
            Some(json_response(StatusCode::OK, &patched))
        }
        _ => None,
    }
}

/// The items of a broadcast receiver, as a stream (a receiver that lags skips what it missed).
fn tokio_stream_of<T: Clone + Send + 'static>(
    receiver: tokio::sync::broadcast::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(item) => return Some((item, receiver)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// A streamed list: each listed object as an `ADDED` event, encoded as it is sent, then the
/// bookmark that ends the initial events; the watch then stays open.
fn streamed_list(server: &Arc<FakeApiServer>, path: &str, selector: Option<Selector>) -> Response {
    if server.refuses_streamed_lists {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
            "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is \
                        forbidden for watch unless the WatchList feature gate is enabled"});
        return json_response(StatusCode::UNPROCESSABLE_ENTITY, &status);
    }
    let Some((kind, items)) = server.lists.get(path) else { return not_found(path) };
    let end = json!({"type": "BOOKMARK", "object": {"kind": kind.trim_end_matches("List"), "apiVersion": "v1",
        "metadata": {"resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}}});
    let changes = server.live_events(path);
    let (server, path) = (server.clone(), path.to_owned());
    let added = futures::stream::iter(0..items.len()).filter_map(move |i| {
        let object = &server.lists[&path].1[i];
        let selected = selector.as_ref().is_none_or(|s| s.matches(object));
        let line = selected
            .then(|| Ok::<_, std::io::Error>(Bytes::from(format!("{}\n", json!({"type": "ADDED", "object": object})))));
        futures::future::ready(line)
    });
    let events = added.chain(futures::stream::once(async move { Ok(Bytes::from(format!("{end}\n"))) })).chain(changes);
    Response::builder().header("content-type", "application/json").body(Body::from_stream(events)).expect("response")
}

/// A request's query, its names and values decoded.
type Query = HashMap<String, String>;

/// A list's `labelSelector`, as kube-apiserver applies it: terms `key=value`, `key==value`,
/// `key!=value`, `key` and `!key`, all of which must hold (set terms, `in (…)`, match nothing).
struct Selector(Vec<(String, Term)>);

enum Term {
    Is(String),
    IsNot(String),
    Exists,
    Absent,
    Unknown,
}

impl Selector {
    /// The selector `query` asks for, if any.
    fn of(query: &Query) -> Option<Self> {
        let terms = query.get("labelSelector")?.split(',').filter(|t| !t.is_empty()).map(|term| {
            let term = term.trim();
            if let Some((key, value)) = term.split_once("!=") {
                (key.to_owned(), Term::IsNot(value.to_owned()))
            } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (key.to_owned(), Term::Is(value.to_owned()))
            } else if let Some(key) = term.strip_prefix('!') {
                (key.to_owned(), Term::Absent)
            } else if term.contains(' ') || term.contains('(') {
                (term.to_owned(), Term::Unknown)
            } else {
                (term.to_owned(), Term::Exists)
            }
        });
        Some(Self(terms.collect()))
    }

    fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|(key, term)| {
            let value = labels.get(key).and_then(Value::as_str);
            match term {
                Term::Is(wanted) => value == Some(wanted),
                Term::IsNot(unwanted) => value != Some(unwanted),
                Term::Exists => value.is_some(),
                Term::Absent => value.is_none(),
                Term::Unknown => false,
            }
        })
    }
}

/// Whether `path` names a collection (`…/pods`, `…/namespaces/ns/pods`) rather than an object.
fn is_list(path: &str) -> bool {
    let rest = match path.strip_prefix("/api/v1/") {
        Some(rest) => rest,
        None => path.strip_prefix("/apis/").map(|r| r.splitn(3, '/').nth(2).unwrap_or("")).unwrap_or(""),
    };
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    segments.len() == 1 || (segments.len() == 3 && segments[0] == "namespaces")
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (status, [("content-type", "application/json")], value.to_string()).into_response()
}

fn not_found(path: &str) -> Response {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                        "code": 404, "message": format!("{path} not found")});
    json_response(StatusCode::NOT_FOUND, &status)
}

/// Writes a kubeconfig for `addr` into `dir` and returns its path.
pub(crate) fn kubeconfig(dir: &Path, addr: SocketAddr) -> PathBuf {
    let path = dir.join("kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\nclusters:\n- name: fake\n  cluster:\n    server: http://{addr}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: bench\n\
         users:\n- name: fake\n  user:\n    token: fake\n"
    );
    std::fs::write(&path, config).expect("kubeconfig written");
    path
}

/// `count` Watchers with config data, spread over 10 namespaces.
pub(crate) fn watchers(count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| {
            json!({
                "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                "metadata": {"name": format!("watcher-{i}"), "namespace": format!("team-{}", i % 10),
                             "uid": format!("00000000-0000-4000-8000-{i:012}"), "generation": 1,
                             "resourceVersion": "1"},
                "spec": {"container": {"name": format!("watcher-{i}"), "image": "busybox:1.36",
                                       "command": ["sh", "-c", "tail -F /var/log/app.log"]},
                         "configData": {"LEVEL": "debug"}},
            })
        })
        .collect()
}

/// `count` ClusterWatchers with config data and no namespaceSelector.
pub(crate) fn cluster_watchers(count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| {
            json!({
                "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
                "metadata": {"name": format!("agent-{i}"), "uid": format!("30000000-0000-4000-8000-{i:012}"),
                             "generation": 1, "resourceVersion": "1"},
                "spec": {"container": {"name": format!("agent-{i}"), "image": "busybox:1.36",
                                       "command": ["sh", "-c", "tail -F /var/log/app.log"]},
                         "configData": {"LEVEL": "debug"}},
            })
        })
        .collect()
}

/// The namespace `name`, as kube-apiserver lists it (its name label).
pub(crate) fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "uid": format!("ns-{name}"), "resourceVersion": "1",
                        "labels": {"kubernetes.io/metadata.name": name}},
           "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
}

/// `count` pods of Deployments, spread over the namespaces of [`watchers`], as kube-apiserver
/// lists them: the spec and status of a pod kube-apiserver 1.36 stored
/// (`controller/fixtures/stored-pods/pod-1.36-plain.json`: defaults, the ServiceAccount volume
/// and mounts), managed fields and kubectl's last-applied annotation; every tenth asks for
/// `watcher-0` of its namespace by annotation and carries its sidecar.
pub(crate) fn pods(count: usize) -> Vec<Value> {
    let stored: Value = serde_json::from_str(include_str!("../../controller/fixtures/stored-pods/pod-1.36-plain.json"))
        .expect("stored pod");
    let mut plain_spec = stored["spec"].clone();
    if let Some(spec) = plain_spec.as_object_mut() {
        spec.remove("initContainers");
    }
    (0..count)
        .map(|i| {
            let mut annotations = json!({"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(400)});
            let injected = i % 10 == 0;
            if injected {
                annotations["watcher.dev/inject"] = json!(format!("watcher-{}", i % 10));
                annotations["watcher.dev/injected"] = json!(format!("watcher-{}@0badc0de", i % 10));
            }
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("web-7d876db474-{i:05}"), "namespace": format!("team-{}", i % 10),
                             "uid": format!("10000000-0000-4000-8000-{i:012}"), "resourceVersion": "1",
                             "creationTimestamp": "2026-11-21T10:00:00Z",
                             "labels": {"app": "web", "pod-template-hash": "7d876db474"},
                             "annotations": annotations,
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d876db474",
                                                  "uid": "20000000-0000-4000-8000-000000000000", "controller": true}],
                             "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                                                "time": "2026-11-21T10:00:00Z", "fieldsType": "FieldsV1",
                                                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]},
                "spec": if injected { stored["spec"].clone() } else { plain_spec.clone() },
                "status": stored["status"].clone(),
            })
        })
        .collect()
}

/// `count` pods of Jobs that the ending controller watches, spread over the namespaces of
/// [`watchers`], as kube-apiserver lists them: a real node's Job pod with README's agent
/// injected (`controller/fixtures/ending/job-1.36-agent.json`, where the app and the agent run),
/// with managed fields.
pub(crate) fn job_pods(count: usize) -> Vec<Value> {
    let versions: Value =
        serde_json::from_str(include_str!("../../controller/fixtures/ending/job-1.36-agent.json")).expect("Job pods");
    let running = versions
        .as_array()
        .and_then(|v| {
            v.iter().find(|pod| {
                pod["status"]["containerStatuses"]
                    .as_array()
                    .is_some_and(|s| s.iter().all(|c| c["state"].get("running").is_some()))
            })
        })
        .expect("a version where the app and the agent run")
        .clone();
    (0..count)
        .map(|i| {
            let mut pod = running.clone();
            let meta = &mut pod["metadata"];
            meta["name"] = json!(format!("job-agent-{i:05}"));
            meta["namespace"] = json!(format!("team-{}", i % 10));
            meta["uid"] = json!(format!("40000000-0000-4000-8000-{i:012}"));
            meta["resourceVersion"] = json!("1");
            meta["managedFields"] = json!([{"manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "time": "2026-11-21T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:job-name": {}}}}}]);
            pod
        })
        .collect()
}

/// Where a process's resident memory is, in KiB, from `/proc/<pid>/smaps`: the binary's own
/// pages, shared libraries, anonymous memory (heap, thread stacks, caches), and thread count.
pub(crate) fn rss_breakdown(pid: u32) -> Option<(u64, u64, u64, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_string_lossy().into_owned();
    let (mut binary, mut libraries, mut anonymous) = (0, 0, 0);
    let mut mapping = String::new();
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first().is_some_and(|f| f.contains('-') && !f.ends_with(':')) {
            mapping = fields.get(5).map(|s| (*s).to_owned()).unwrap_or_default();
        } else if fields.first() == Some(&"Rss:") {
            let kib: u64 = fields.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            if mapping == exe {
                binary += kib;
            } else if mapping.starts_with('/') {
                libraries += kib;
            } else {
                anonymous += kib;
            }
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let threads = status.lines().find(|l| l.starts_with("Threads:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some((binary, libraries, anonymous, threads))
}

/// Resident set size now and at its peak, in KiB, from `/proc/<pid>/status`.
pub(crate) fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field =
        |name: &str| status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse::<u64>().ok();
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// User plus system CPU time of a process, in clock ticks (1/100 s on Linux).
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}
