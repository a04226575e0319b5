//! Every watch of the process, said once: a watch kept in a store ([`cached_watch`]), its
//! lists and errors counted per resource ([`observe_watch`], [`register`]), and what a failed
//! watch means: each error gets the hint its status earns. A watch that expired (410 Gone: "too
//! old resource version") is kube's normal relist, not a warning; 404 means the API server does
//! not serve the resource (for the operator's own kinds: the CRDs are not installed); 403 is
//! RBAC; anything else is retried with backoff.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::Level;

/// `{resource}` label: the plural of a watched resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

/// Watch errors and lists per resource: one set for the process, since every watch of every
/// cache counts into it (those of the webhook's caches too), whoever holds the registry.
struct Watches {
    errors: Family<ResourceLabels, Counter>,
    lists: Family<ResourceLabels, Counter>,
}

static WATCHES: LazyLock<Watches> = LazyLock::new(|| Watches { errors: Family::default(), lists: Family::default() });

/// Registers `watcher_watch_errors` and `watcher_watch_lists` in `registry`, each series of
/// `resources` known in advance at 0 (`rate()` and `increase()` see the first error of each).
pub fn register(registry: &mut Registry, resources: &[&str]) {
    for resource in resources {
        let labels = ResourceLabels { resource: (*resource).to_owned() };
        drop(WATCHES.errors.get_or_create(&labels));
        drop(WATCHES.lists.get_or_create(&labels));
    }
    registry.register(
        "watcher_watch_errors",
        "Watch errors by resource; each restarts the watch with a backoff",
        WATCHES.errors.clone(),
    );
    registry.register(
        "watcher_watch_lists",
        "Lists of a watched resource: the first, and each relist after a watch expired or failed",
        WATCHES.lists.clone(),
    );
}

/// Counts the events of a watch of `resource`: an error (the watch restarts with a backoff), or
/// the start of a list (the first, and each relist after a watch expired or failed). For
/// `inspect` on a watcher stream.
pub fn observe_watch<K>(resource: impl Into<String>) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    let labels = ResourceLabels { resource: resource.into() };
    move |event| {
        match event {
            Err(_) => WATCHES.errors.get_or_create(&labels).inc(),
            Ok(watcher::Event::Init) => WATCHES.lists.get_or_create(&labels).inc(),
            Ok(_) => 0,
        };
    }
}

/// Watch errors counted so far for `resource` (the process-wide counter).
pub fn watch_errors_of(resource: &str) -> u64 {
    WATCHES.errors.get_or_create(&ResourceLabels { resource: resource.to_owned() }).get()
}

/// Lists counted so far for `resource`.
pub fn watch_lists_of(resource: &str) -> u64 {
    WATCHES.lists.get_or_create(&ResourceLabels { resource: resource.to_owned() }).get()
}

/// A watch of `api` kept in a store (each object passed through `strip` first, managedFields
/// always dropped), the stream of changed objects for a controller's `owns_stream` or
/// `watches_stream`, and a flag that turns true once the initial list is in (before it, the
/// store would say "absent" of objects that exist).
pub fn cached_watch<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    mut strip: impl FnMut(&mut K) + Send + 'static,
) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send + 'static, Arc<AtomicBool>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let listed = Arc::new(AtomicBool::new(false));
    let flag = listed.clone();
    let stream = watcher(api, config.any_semantic())
        .inspect(observe_watch(K::plural(&()).into_owned()))
        .default_backoff()
        .modify(move |object| {
            object.meta_mut().managed_fields = None;
            strip(object);
        })
        .reflect(writer)
        .inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                flag.store(true, Ordering::Release);
            }
        })
        .touched_objects();
    (store, stream, listed)
}

/// How a watch failed, from the HTTP status of the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchTrouble {
    /// 410 Gone: the watch's resourceVersion expired; the watcher lists again.
    Expired,
    /// 404 Not Found: the API server does not serve the resource.
    NotServed,
    /// 403 Forbidden: the operator may not list or watch it.
    Forbidden,
    /// Anything else (a server error, the connection).
    Other,
}

impl WatchTrouble {
    /// How `error` failed.
    pub fn of(error: &watcher::Error) -> Self {
        let code = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
            watcher::Error::WatchError(status) => Some(status.code),
            _ => None,
        };
        match code {
            Some(410) => Self::Expired,
            Some(404) => Self::NotServed,
            Some(403) => Self::Forbidden,
            _ => Self::Other,
        }
    }
}

/// The level and message for a failed watch of `what` (`Watchers`, `namespaces`, ...);
/// `own_kind`: one of the operator's CRDs.
pub fn watch_error_line(what: &str, own_kind: bool, error: &watcher::Error) -> (Level, String) {
    match WatchTrouble::of(error) {
        WatchTrouble::Expired => (Level::DEBUG, format!("watch of {what} expired (410 Gone): listing again")),
        WatchTrouble::NotServed if own_kind => {
            (Level::WARN, format!("cannot watch {what}: the API server does not serve them (are the CRDs installed?)"))
        }
        WatchTrouble::NotServed => (Level::WARN, format!("cannot watch {what}: the API server does not serve them")),
        WatchTrouble::Forbidden => (
            Level::WARN,
            format!("cannot watch {what}: forbidden (does the operator's ClusterRole grant list and watch on them?)"),
        ),
        WatchTrouble::Other => (Level::WARN, format!("cannot watch {what}; retrying with backoff")),
    }
}

/// Logs a failed watch of `what` with the hint its status earns (see [`watch_error_line`]).
pub fn log_watch_error(what: &str, own_kind: bool, error: &watcher::Error) {
    match watch_error_line(what, own_kind, error) {
        (Level::DEBUG, message) => tracing::debug!(%error, "{message}"),
        (_, message) => tracing::warn!(%error, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Box<Status> {
        Box::new(Status::failure(message, reason).with_code(code))
    }

    /// Each status, in each form kube's watcher reports it (an event inside the watch, or the
    /// answer to the list or watch request).
    #[test]
    fn each_status_gets_its_hint() {
        let expired = || status(410, "Expired", "too old resource version: 4 (5)");
        let cases = [
            (
                watcher::Error::WatchError(expired()),
                Level::DEBUG,
                "watch of Watchers expired (410 Gone): listing again",
            ),
            (
                watcher::Error::WatchFailed(kube::Error::Api(expired())),
                Level::DEBUG,
                "watch of Watchers expired (410 Gone): listing again",
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ))),
                Level::WARN,
                "cannot watch Watchers: the API server does not serve them (are the CRDs installed?)",
            ),
            (
                watcher::Error::WatchStartFailed(kube::Error::Api(status(
                    403,
                    "Forbidden",
                    "watchers.watcher.dev is forbidden",
                ))),
                Level::WARN,
                "cannot watch Watchers: forbidden (does the operator's ClusterRole grant list and watch on them?)",
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(
                    500,
                    "InternalError",
                    "etcdserver: leader changed",
                ))),
                Level::WARN,
                "cannot watch Watchers; retrying with backoff",
            ),
            (watcher::Error::NoResourceVersion, Level::WARN, "cannot watch Watchers; retrying with backoff"),
        ];
        for (error, level, message) in cases {
            assert_eq!(watch_error_line("Watchers", true, &error), (level, message.to_owned()), "{error}");
        }
        let missing = watcher::Error::InitialListFailed(kube::Error::Api(status(404, "NotFound", "not found")));
        assert_eq!(
            watch_error_line("namespaces", false, &missing).1,
            "cannot watch namespaces: the API server does not serve them",
            "no CRD to blame for a built-in kind"
        );
    }

    /// A watch's errors and lists count per resource: each `Init` a list, each error a restart.
    #[test]
    fn watch_errors_and_lists_count_per_resource() {
        let mut observe = observe_watch::<()>("metrics-test-resource");
        let (errors, lists) = (watch_errors_of("metrics-test-resource"), watch_lists_of("metrics-test-resource"));
        observe(&Ok(watcher::Event::Init));
        observe(&Ok(watcher::Event::InitDone));
        observe(&Err(watcher::Error::NoResourceVersion));
        observe(&Ok(watcher::Event::Init));
        assert_eq!(watch_errors_of("metrics-test-resource") - errors, 1);
        assert_eq!(watch_lists_of("metrics-test-resource") - lists, 2);
        let mut registry = Registry::default();
        register(&mut registry, &["pods"]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.lines().any(|l| l.starts_with(r#"watcher_watch_lists_total{resource="metrics-test-resource"}"#)));
        assert!(text.lines().any(|l| l == r#"watcher_watch_errors_total{resource="pods"} 0"#), "{text}");
    }
}
