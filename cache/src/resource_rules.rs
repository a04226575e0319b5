//! The namespaces' ResourceQuotas and LimitRanges, read by admission as
//! [`ResourceRules`] with no API call: each namespace's rules are built on the first read after a
//! change of one of its objects, and kept until the next.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use watcher_admission::resources::ResourceRules;

use crate::watch::{log_watch_error, observe_watch};

/// Every ResourceQuota and LimitRange of the cluster, and each namespace's rules once read.
#[derive(Clone)]
pub struct ResourceRulesCache {
    /// Every LimitRange, without `managedFields`.
    pub limit_ranges: Store<LimitRange>,
    /// Every ResourceQuota, without `managedFields`.
    pub quotas: Store<ResourceQuota>,
    built: Arc<RwLock<HashMap<String, Arc<ResourceRules>>>>,
    /// Marked on every change (the Watchers' `Resources` condition follows it).
    changed: tokio::sync::watch::Sender<()>,
}

impl ResourceRulesCache {
    /// The cache, and the future that fills it (run it for as long as the cache is used). Until
    /// it has listed, or where the operator may not list them, namespaces have no rules: the
    /// webhook injects as it would without them.
    pub fn new(client: Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (limit_ranges, range_writer) = reflector::store::<LimitRange>();
        let (quotas, quota_writer) = reflector::store::<ResourceQuota>();
        let cache = Self { limit_ranges, quotas, built: Arc::default(), changed: tokio::sync::watch::Sender::new(()) };
        let ranges = fill(Api::<LimitRange>::all(client.clone()), range_writer, "limitranges", cache.clone());
        let quotas = fill(Api::<ResourceQuota>::all(client), quota_writer, "resourcequotas", cache.clone());
        let fill = async move {
            futures::join!(ranges, quotas);
        };
        (cache, fill)
    }

    /// A cache over stores filled by the caller (tests, benchmarks).
    pub fn from_stores(limit_ranges: Store<LimitRange>, quotas: Store<ResourceQuota>) -> Self {
        Self { limit_ranges, quotas, built: Arc::default(), changed: tokio::sync::watch::Sender::new(()) }
    }

    /// A receiver marked changed whenever a ResourceQuota or a LimitRange changes.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// The rules of `namespace`: its LimitRanges and ResourceQuotas in name order.
    pub fn rules(&self, namespace: &str) -> Arc<ResourceRules> {
        if self.limit_ranges.is_empty() && self.quotas.is_empty() {
            return Arc::default();
        }
        if let Some(rules) = self.built.read().unwrap_or_else(|p| p.into_inner()).get(namespace) {
            return rules.clone();
        }
        let of_namespace = |meta: &kube::api::ObjectMeta| meta.namespace.as_deref() == Some(namespace);
        let mut ranges: Vec<Arc<LimitRange>> =
            self.limit_ranges.state().into_iter().filter(|r| of_namespace(r.meta())).collect();
        let mut quotas: Vec<Arc<ResourceQuota>> =
            self.quotas.state().into_iter().filter(|q| of_namespace(q.meta())).collect();
        ranges.sort_by_key(|r| r.name_any());
        quotas.sort_by_key(|q| q.name_any());
        let rules = Arc::new(ResourceRules::new(ranges.iter().map(|r| &**r), quotas.iter().map(|q| &**q)));
        self.built.write().unwrap_or_else(|p| p.into_inner()).insert(namespace.to_owned(), rules.clone());
        rules
    }

    /// Forgets what was built for `namespace` (one of its objects changed), or for every
    /// namespace.
    fn forget(&self, namespace: Option<&str>) {
        let mut built = self.built.write().unwrap_or_else(|p| p.into_inner());
        match namespace {
            Some(namespace) => drop(built.remove(namespace)),
            None => built.clear(),
        }
        drop(built);
        self.changed.send_replace(());
    }
}

/// The watch of one kind into `writer`, forgetting the rules of the namespace of each change.
fn fill<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    resource: &'static str,
    cache: ResourceRulesCache,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + serde::de::DeserializeOwned + 'static,
{
    watcher(api, watcher::Config::default().any_semantic())
        .inspect(observe_watch(resource))
        .default_backoff()
        .modify(|object| object.managed_fields_mut().clear())
        .reflect(writer)
        .for_each(move |event| {
            match event {
                // After the store took it, so a rebuild sees the change.
                Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                    cache.forget(object.meta().namespace.as_deref());
                }
                Ok(watcher::Event::InitDone) => cache.forget(None),
                Ok(_) => {}
                Err(error) => log_watch_error(resource, false, &error),
            }
            futures::future::ready(())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn quota(namespace: &str, name: &str, cpu: &str) -> ResourceQuota {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {"limits.cpu": cpu}}, "status": {"hard": {"limits.cpu": cpu}, "used": {"limits.cpu": "0"}}}))
        .expect("quota")
    }

    #[test]
    fn each_namespace_reads_its_own_rules_and_a_change_is_read_again() {
        let (quotas, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Apply(quota("team-a", "team", "300m")));
        writer.apply_watcher_event(&Event::Apply(quota("team-b", "team", "1")));
        let cache = ResourceRulesCache::from_stores(reflector::store().0, quotas);
        assert_eq!(cache.rules("team-a").names(), ["ResourceQuota team"]);
        assert!(cache.rules("team-c").is_empty(), "a namespace without rules");
        let before = cache.rules("team-a");
        writer.apply_watcher_event(&Event::Apply(quota("team-a", "more", "2")));
        assert_eq!(cache.rules("team-a"), before, "kept until forgotten");
        cache.forget(Some("team-a"));
        assert_eq!(cache.rules("team-a").names(), ["ResourceQuota more", "ResourceQuota team"]);
    }
}
