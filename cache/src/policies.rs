//! The in-memory ImagePolicies of the process, compiled once per change, and the namespace
//! labels their selectors read: the webhook rewrites images from here with no API call.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use watcher_api::{CompiledPolicy, ImagePolicy};

use crate::NamespaceMeta;
use crate::freshness::Freshness;
use crate::watch::{log_watch_error, observe_watch};

/// The label kube-apiserver puts on every namespace: its name.
pub(crate) const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// ImagePolicies and namespace labels.
#[derive(Clone)]
pub struct PolicyCache {
    /// Every ImagePolicy, without `managedFields`.
    pub policies: Store<ImagePolicy>,
    /// Every namespace, as metadata.
    pub namespaces: Store<NamespaceMeta>,
    compiled: Arc<Compiled>,
    /// Marked on every change of a policy or a namespace (the admission scope follows both).
    changed: tokio::sync::watch::Sender<()>,
    /// The cluster's Pod Security admission configuration (levels of unlabelled namespaces,
    /// exemptions), as configured or learned.
    pub pod_security: watcher_admission::pod_security::SharedDefaults,
    /// The namespaces' ResourceQuotas and LimitRanges.
    pub resources: crate::ResourceRulesCache,
}

/// The compiled policies, in name order, rebuilt on the first read after a change.
#[derive(Default)]
struct Compiled {
    /// Rebuilt on the first read after a change; readers during a rebuild wait for it.
    fresh: Freshness,
    policies: RwLock<Vec<Arc<CompiledPolicy>>>,
}

impl PolicyCache {
    /// The cache, and the future that fills it (run it for as long as the cache is used).
    pub fn new(client: Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (policies, policy_writer) = reflector::store::<ImagePolicy>();
        let (namespaces, namespace_writer) = reflector::store::<NamespaceMeta>();
        let compiled = Arc::new(Compiled::default());
        let stale = compiled.clone();
        let changed = tokio::sync::watch::Sender::new(());
        let (policy_changed, namespace_changed) = (changed.clone(), changed.clone());
        let policy_fill = watcher(Api::<ImagePolicy>::all(client.clone()), watcher::Config::default().any_semantic())
            .inspect(observe_watch("imagepolicies"))
            .default_backoff()
            .modify(|policy| policy.managed_fields_mut().clear())
            .reflect(policy_writer)
            .for_each(move |event| {
                match event {
                    // After the store took it, so a rebuild that clears the mark sees the change.
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                        stale.fresh.mark();
                        policy_changed.send_replace(());
                    }
                    Ok(_) => {}
                    Err(error) => log_watch_error("ImagePolicies", true, &error),
                }
                futures::future::ready(())
            });
        let (resources, resources_fill) = crate::ResourceRulesCache::new(client.clone());
        let namespace_fill = watcher(Api::<NamespaceMeta>::all(client), watcher::Config::default().any_semantic())
            .inspect(observe_watch("namespaces"))
            .default_backoff()
            .modify(|namespace| namespace.managed_fields_mut().clear())
            .reflect(namespace_writer)
            .for_each(move |event| {
                match event {
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                        namespace_changed.send_replace(());
                    }
                    Ok(_) => {}
                    Err(error) => log_watch_error("namespaces", false, &error),
                }
                futures::future::ready(())
            });
        let fill = async move {
            futures::join!(policy_fill, namespace_fill, resources_fill);
        };
        (Self { policies, namespaces, compiled, changed, pod_security: Default::default(), resources }, fill)
    }

    /// A cache over stores filled by the caller (tests, benchmarks).
    pub fn from_stores(policies: Store<ImagePolicy>, namespaces: Store<NamespaceMeta>) -> Self {
        let compiled = Arc::new(Compiled::default());
        Self {
            policies,
            namespaces,
            compiled,
            changed: tokio::sync::watch::Sender::new(()),
            pod_security: Default::default(),
            resources: crate::ResourceRulesCache::from_stores(reflector::store().0, reflector::store().0),
        }
    }

    /// A receiver marked changed whenever a policy or a namespace changes.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// Every policy, compiled, in name order.
    pub fn compiled(&self) -> Vec<Arc<CompiledPolicy>> {
        self.compiled.fresh.refresh(|| {
            let mut rebuilt: Vec<Arc<CompiledPolicy>> =
                self.policies.state().iter().map(|p| Arc::new(p.compile())).collect();
            rebuilt.sort_by(|a, b| a.name.cmp(&b.name));
            *self.compiled.policies.write().unwrap_or_else(|p| p.into_inner()) = rebuilt;
        });
        self.compiled.policies.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The labels of `namespace`; a namespace the cache has not seen yet (created a moment
    /// ago) has the one label the API server gives every namespace.
    pub fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        match self.namespaces.get(&ObjectRef::new(namespace)) {
            Some(meta) => meta.labels().clone(),
            None => BTreeMap::from([(NAME_LABEL.to_owned(), namespace.to_owned())]),
        }
    }

    /// The valid policies selecting `namespace`, in name order. With no policy at all this
    /// costs one length check.
    pub fn policies_for(&self, namespace: &str) -> Vec<Arc<CompiledPolicy>> {
        if self.policies.is_empty() {
            return Vec::new();
        }
        let labels = self.namespace_labels(namespace);
        self.compiled().into_iter().filter(|p| p.selects(&labels)).collect()
    }
}

/// The webhook reads ImagePolicies from this cache.
impl watcher_admission::PolicySource for PolicyCache {
    fn policies_for(&self, namespace: &str) -> Vec<Arc<CompiledPolicy>> {
        PolicyCache::policies_for(self, namespace)
    }

    /// One lookup in the namespace cache for both: the opt-out label and the Pod Security levels.
    fn namespace(&self, namespace: &str) -> watcher_admission::NamespaceAdmission {
        let cluster = self.pod_security.get();
        let meta = self.namespaces.get(&ObjectRef::new(namespace));
        let labels = meta.as_ref().map(|m| m.labels());
        let get = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        watcher_admission::NamespaceAdmission::of_namespace(namespace, get, &cluster)
    }

    fn pod_security_exempt(&self, username: Option<&str>, runtime_class: Option<&str>) -> bool {
        self.pod_security.get().exempts(username, runtime_class)
    }

    fn resource_rules(&self, namespace: &str) -> Arc<watcher_admission::resources::ResourceRules> {
        self.resources.rules(namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn policy(name: &str, selector: Option<serde_json::Value>) -> ImagePolicy {
        let mut spec = serde_json::json!({"rewrites": [{"from": "docker.io/", "to": format!("{name}.internal/")}]});
        if let Some(selector) = selector {
            spec["namespaceSelector"] = selector;
        }
        serde_json::from_value(serde_json::json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy",
            "metadata": {"name": name}, "spec": spec}))
        .expect("valid ImagePolicy")
    }

    #[test]
    fn policies_come_in_name_order_filtered_by_namespace_labels() {
        let (policies, mut writer) = reflector::store();
        for p in [policy("b", None), policy("a", Some(serde_json::json!({"matchLabels": {"mirror": "on"}})))] {
            writer.apply_watcher_event(&Event::Apply(p));
        }
        let (namespaces, mut ns_writer) = reflector::store::<NamespaceMeta>();
        let labelled: NamespaceMeta =
            serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "labels": {"mirror": "on"}}}))
            .expect("namespace");
        ns_writer.apply_watcher_event(&Event::Apply(labelled));
        let cache = PolicyCache::from_stores(policies, namespaces);
        let names = |ns: &str| cache.policies_for(ns).iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names("team-a"), ["a", "b"]);
        assert_eq!(names("team-b"), ["b"], "an unseen namespace has no labels but its name");
        assert_eq!(cache.compiled().len(), 2);
    }

    #[test]
    fn the_opt_out_label_is_read_from_the_namespace_cache() {
        use watcher_admission::PolicySource;
        let (namespaces, mut ns_writer) = reflector::store::<NamespaceMeta>();
        for (name, labels) in [
            ("off", serde_json::json!({"watcher.dev/injection": "disabled"})),
            (
                "on",
                serde_json::json!({"watcher.dev/injection": "enabled",
                                      "pod-security.kubernetes.io/enforce": "restricted"}),
            ),
        ] {
            let namespace: NamespaceMeta = serde_json::from_value(serde_json::json!({"apiVersion": "v1",
                "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
            .expect("namespace");
            ns_writer.apply_watcher_event(&Event::Apply(namespace));
        }
        let cache = PolicyCache::from_stores(reflector::store().0, namespaces);
        assert!(cache.namespace("off").injection_disabled);
        assert!(!cache.namespace("on").injection_disabled);
        assert!(!cache.namespace("unseen").injection_disabled, "a namespace not yet cached is not opted out");
        // The same lookup gives the Pod Security levels.
        let enforced = cache.namespace("on").pod_security.enforced().map(|p| p.to_string());
        assert_eq!(enforced.as_deref(), Some("restricted:latest"));
        assert_eq!(cache.namespace("off").pod_security, Default::default());
    }
}
