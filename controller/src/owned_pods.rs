//! What the At and PodSet controllers share: the pods they own, cached by their label, and how
//! a pod that kube-apiserver refused is said.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tracing::warn;
use watcher_api::reasons;

use crate::Context;

/// The pods of one kind of owner (labelled with the owner's label), cached.
pub struct OwnedPods {
    /// The pods that carry the owner's label.
    pub(crate) pods: Store<Pod>,
    listed: Arc<AtomicBool>,
}

impl OwnedPods {
    /// The controller of the owners `K`, woken by their pods (labelled `label`), and the pods'
    /// cache.
    pub(crate) fn controller<K>(ctx: &Context, label: &str) -> (Controller<K>, Self)
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let owners = Api::<K>::all(ctx.client.clone());
        let api = Api::<Pod>::all(ctx.client.clone());
        let (pods, owned, listed) = crate::cached_watch(api, watcher::Config::default().labels(label), |_| {});
        let controller = Controller::new(owners, watcher::Config::default().any_semantic()).owns_stream(owned);
        (controller, Self { pods, listed })
    }

    /// `pods`, already listed (for tests that fill the store themselves).
    #[cfg(test)]
    pub(crate) fn listed(pods: Store<Pod>) -> Self {
        Self { pods, listed: Arc::new(AtomicBool::new(true)) }
    }

    /// Whether the pods' initial list is in (before it, the cache would say "no pods").
    pub(crate) fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }
}

/// What the owner's status says when kube-apiserver refused its pod (`message`, its words).
pub(crate) fn refusal(message: &str) -> String {
    format!("kube-apiserver refused the pod: {message}")
}

/// Says that kube-apiserver refused a pod of `owner` (`message`, its words): logged, and an
/// Event `PodRefused` with `note` unless the owner's status already said it (`said`).
pub(crate) async fn say_refused<K>(ctx: &Context, owner: &K, message: &str, said: bool, note: String)
where
    K: Resource<DynamicType = ()>,
{
    warn!(namespace = owner.namespace(), owner = owner.name_any(), message, "kube-apiserver refused the pod");
    if !said {
        ctx.publish(&owner.object_ref(&()), EventType::Warning, reasons::POD_REFUSED, "Reconcile", note).await;
    }
}
