//! What every controller repeats, once: its settings, the cached watches it reads, logging
//! what its run yields, the backoff key of an object, ownership, and locking shared state.

use std::sync::Arc;

use watcher_cache::watch::log_watch_error;

use crate::Context;

pub(crate) use watcher_cache::lock;
pub(crate) use watcher_cache::watch::cached_watch;

/// Settings shared by every controller: a bounded number of reconciles in flight, so a burst
/// (a fresh start with thousands of objects) costs neither thousands of connections nor memory.
pub(crate) fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENCY)
}

/// Runs `controller` until the process stops (the [`Context`]'s one shutdown signal: its
/// reconciles in flight finish first) with `config` (the shared [`controller_config`], or one
/// debounced from it). Each reconcile gets the object, the shared [`Context`] and the
/// controller's own `state`; a failure goes to the one [`error_policy`]; each result of the run
/// is logged as [`log_run_result`] says.
pub(crate) async fn run_controller<K, S, Fut>(
    name: &'static str,
    controller: kube::runtime::Controller<K>,
    config: kube::runtime::controller::Config,
    ctx: Arc<Context>,
    state: Arc<S>,
    reconcile: impl Fn(Arc<K>, Arc<Context>, Arc<S>) -> Fut,
) where
    K: Clone + kube::Resource + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + std::fmt::Debug + Eq + std::hash::Hash + Clone + Unpin,
    S: Send + Sync + 'static,
    Fut: std::future::Future<Output = crate::Result<kube::runtime::controller::Action>> + Send + 'static,
{
    use futures::StreamExt;
    let stopped = ctx.stopped();
    controller
        .with_config(config)
        .graceful_shutdown_on(stopped)
        .run(
            move |object, ctx| reconcile(object, ctx, state.clone()),
            move |object, error, ctx| error_policy(name, object.as_ref(), error, &ctx),
            ctx,
        )
        .for_each(|result| async move { log_run_result(name, result) })
        .await;
}

/// How every controller takes a failed reconcile: logged, counted, and retried with the
/// object's backoff.
pub(crate) fn error_policy<K: kube::Resource>(
    controller: &'static str,
    object: &K,
    error: &crate::Error,
    ctx: &Context,
) -> kube::runtime::controller::Action
where
    K::DynamicType: Default,
{
    use kube::ResourceExt;
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    tracing::warn!(controller, kind, namespace = object.namespace(), name = object.name_any(), %error, "reconcile failed");
    ctx.retry_after_error(controller, object_key(controller, object), error)
}

/// Runs `reconcilers` to their end (at shutdown, their reconciles in flight finished) and
/// `feeds` (the watches that wake them) as long as they run: a feed that ends first leaves them
/// running.
pub(crate) async fn with_feeds(reconcilers: impl std::future::Future<Output = ()>, feeds: impl std::future::Future) {
    use futures::FutureExt;
    let feeds = feeds.then(|_| futures::future::pending::<()>());
    tokio::select! {
        () = reconcilers => {},
        () = feeds => {},
    }
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

/// How soon a pod kube-apiserver refused (a quota, a LimitRange, Pod Security) is created again:
/// the owner's status says why meanwhile, and a quota raised lets the next one in.
pub(crate) const REFUSED_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether kube-apiserver refused a create for what the object is, not for a passing fault:
/// an admission plugin's `Forbidden` (quota, LimitRange, Pod Security, a webhook) or `Invalid`.
pub(crate) fn is_refusal(status: &kube::core::Status) -> bool {
    matches!(status.code, 403 | 422)
}

/// The securityContext of the containers At and PodSet create: Pod Security's `restricted` as
/// written, whatever the namespace enforces (a shell that echoes needs no root, no capability
/// and no privilege escalation); the user is [`watcher_api::ADAPTED_RUN_AS_USER`], as images
/// run as root unless told.
pub(crate) fn restricted_context() -> k8s_openapi::api::core::v1::SecurityContext {
    use k8s_openapi::api::core::v1::{Capabilities, SeccompProfile, SecurityContext};
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { add: None, drop: Some(vec!["ALL".into()]) }),
        run_as_non_root: Some(true),
        run_as_user: Some(watcher_api::ADAPTED_RUN_AS_USER),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..SecurityContext::default()
    }
}

/// The backoff key of `object` in `controller` (a Watcher has one per controller).
pub(crate) fn object_key<K: kube::Resource>(controller: &str, object: &K) -> String {
    use kube::ResourceExt;
    format!("{controller}:{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

/// Whether `owner` is the controller of `object` (its controller owner reference has the uid).
pub(crate) fn is_controlled_by<O: kube::ResourceExt, K: kube::Resource>(object: &O, owner: &K) -> bool {
    let uid = owner.meta().uid.as_deref();
    object.owner_references().iter().any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}
