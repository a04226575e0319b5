//! What every controller repeats, once: its settings, the cached watches it reads, logging
//! what its run yields, the backoff key of an object, ownership, and locking shared state.

use watcher_cache::watch::log_watch_error;

pub(crate) use watcher_cache::lock;
pub(crate) use watcher_cache::watch::cached_watch;

/// Settings shared by every controller: a bounded number of reconciles in flight, so a burst
/// (a fresh start with thousands of objects) costs neither thousands of connections nor memory.
pub(crate) fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENCY)
}

/// Reconciles in flight per controller: 16 made the start-up burst (a status patch and a
/// ConfigMap create per Watcher, each answer decoded whole) 0.8 MB higher at its peak with
/// 1,000 Watchers, for 0.2 s less to reconcile them all (`cargo bench --bench startup`).
pub(crate) const CONCURRENCY: u16 = 8;

/// Logs what a controller's run stream yields: a failed watch with the hint its status earns
/// (an expired watch is a normal relist; a missing CRD or RBAC rule stops reconciles until it
/// is fixed), queue failures as warnings, the rest at debug (failed reconciles are logged by
/// each `error_policy`).
pub(crate) fn log_run_result<K, E: std::fmt::Display>(
    controller: &'static str,
    result: Result<K, kube::runtime::controller::Error<E, kube::runtime::watcher::Error>>,
) {
    use kube::runtime::controller::Error as RunError;
    match result {
        Ok(_) => {}
        Err(RunError::QueueError(error)) => {
            let _span = tracing::info_span!("controller", controller).entered();
            log_watch_error(&format!("the objects of controller {controller}"), false, &error);
        }
        Err(error @ RunError::RunnerError(_)) => {
            tracing::warn!(controller, %error, "controller queue failed; retrying with backoff")
        }
        Err(error) => tracing::debug!(controller, %error, "controller event"),
    }
}

/// A namespaced kind the controllers cache and write: the bounds kube's watcher, reflector and
/// `Api` ask for, named once.
pub trait NamespacedObject:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> NamespacedObject for K where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// How soon a reconcile that came before its cache's initial list tries again (the list of a
/// few thousand objects takes milliseconds to a second).
pub(crate) const UNLISTED_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// The backoff key of `object` in `controller` (a Watcher has one per controller).
pub(crate) fn object_key<K: kube::ResourceExt>(controller: &str, object: &K) -> String {
    format!("{controller}:{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

/// Whether `owner` is the controller of `object` (its controller owner reference has the uid).
pub(crate) fn is_controlled_by<O: kube::ResourceExt, K: kube::Resource>(object: &O, owner: &K) -> bool {
    let uid = owner.meta().uid.as_deref();
    object.owner_references().iter().any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}
