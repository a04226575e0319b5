//! What the Watcher and ClusterWatcher controllers both write: the ConfigMap `<name>-config`
//! of a Watcher's config data, and what each remembers of its own writes until its caches hold
//! them. The revisions of their specs are [`crate::revisions`]. Both controllers sit above this
//! module; it knows neither.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use watcher_api::{
    CONFIG_GENERATION_ANNOTATION, ClusterWatcher, FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL, config_map_name,
};

use crate::runtime::lock;

pub use watcher_api::revision::{CLUSTER_WATCHER_LABEL, WATCHER_LABEL};

/// What the controller wrote, until its cache holds it: a cache trails a write by milliseconds
/// to seconds, so an entry older than [`FORGET_AFTER`] (its object deleted meanwhile, say) is
/// answered no more, and dropped at the next write rather than kept for the life of the process.
/// Each object is boxed, and the table shrinks as its entries are forgotten: a burst of writes
/// (every Watcher reconciled at start) leaves no table sized for it behind.
pub(crate) struct Recent<K, V>(Mutex<HashMap<K, (Instant, Box<V>)>>);

/// How long a written object is kept at most, waiting for the cache to hold it.
const FORGET_AFTER: Duration = Duration::from_secs(5 * 60);

impl<K: std::hash::Hash + Eq, V: Clone> Recent<K, V> {
    pub(crate) fn insert(&self, key: K, value: V) {
        let mut map = lock(&self.0);
        let now = Instant::now();
        map.retain(|_, (at, _)| now.duration_since(*at) < FORGET_AFTER);
        map.insert(key, (now, Box::new(value)));
        shrink(&mut map);
    }

    /// What was written, unless it was written longer than [`FORGET_AFTER`] ago: the cache
    /// holds it by then, or what happened to it since.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let map = lock(&self.0);
        map.get(key).filter(|(at, _)| at.elapsed() < FORGET_AFTER).map(|(_, value)| V::clone(value))
    }

    pub(crate) fn remove(&self, key: &K) {
        let mut map = lock(&self.0);
        map.remove(key);
        shrink(&mut map);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        lock(&self.0).capacity()
    }

    /// What it holds, taken out (a test moves it to a context over caught-up caches).
    #[cfg(test)]
    pub(crate) fn take(&self) -> HashMap<K, (Instant, Box<V>)> {
        std::mem::take(&mut *lock(&self.0))
    }

    /// Puts back what [`Recent::take`] took.
    #[cfg(test)]
    pub(crate) fn restore(&self, held: HashMap<K, (Instant, Box<V>)>) {
        *lock(&self.0) = held;
    }
}

/// Gives back what a table no longer needs once three quarters of it is empty: halving as it
/// drains keeps the cost of each removal constant on average.
fn shrink<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 16 && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

/// Whether the cache holds `written` or a later version of that object. resourceVersions of
/// kube-apiserver are etcd revisions, increasing; one that is not a number is taken as caught
/// up (the cache is trusted, as without this bookkeeping).
pub(crate) fn caught_up(cached: Option<&ObjectMeta>, written: &ObjectMeta) -> bool {
    match (cached, written.resource_version.as_deref()) {
        (None, _) => false,
        (Some(cached), Some(version)) => newer_or_same(cached.resource_version.as_deref(), version),
        (Some(_), None) => true,
    }
}

/// Whether the resourceVersion `cached` is `written` or later (see [`caught_up`]).
pub(crate) fn newer_or_same(cached: Option<&str>, written: &str) -> bool {
    match (cached.map(str::parse::<u64>), written.parse::<u64>()) {
        (Some(Ok(cached)), Ok(written)) => cached >= written,
        _ => true,
    }
}

/// A create as the operator's field manager.
pub(crate) fn create_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() }
}

/// The merge patch that turns `existing` into `desired`: the data whole (keys the Watcher no
/// longer has set to null), labels and owner, with the cached resourceVersion as precondition
/// (a ConfigMap changed since it was cached is a conflict, retried after its own event).
pub(crate) fn update_patch(existing: &ConfigMap, desired: &ConfigMap) -> serde_json::Value {
    fn with_removals<V: serde::Serialize>(
        existing: &Option<BTreeMap<String, V>>,
        desired: &Option<BTreeMap<String, V>>,
    ) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        for key in existing.iter().flat_map(|m| m.keys()) {
            map.insert(key.clone(), serde_json::Value::Null);
        }
        for (key, value) in desired.iter().flatten() {
            map.insert(key.clone(), serde_json::to_value(value).unwrap_or_default());
        }
        serde_json::Value::Object(map)
    }
    json!({
        "metadata": {"resourceVersion": existing.resource_version(), "labels": desired.labels(),
                     "annotations": desired.annotations(), "ownerReferences": desired.owner_references()},
        "data": with_removals(&existing.data, &desired.data),
        "binaryData": with_removals(&existing.binary_data, &desired.binary_data),
    })
}

/// The ConfigMap `<name>-config` in `namespace` with the config data of `spec`, owned by
/// `owner`, labelled `watcher.dev/watcher=<name>` (and `extra`), annotated with the owner's
/// `generation` it holds; `None` without config data.
pub(crate) fn config_map_of<const N: usize>(
    spec: &watcher_api::WatcherSpec,
    name: &str,
    namespace: &str,
    (owner, generation): (k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference, Option<i64>),
    extra: [(&str, &str); N],
) -> Option<ConfigMap> {
    if !spec.has_config() {
        return None;
    }
    let mut labels = BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (WATCHER_LABEL.to_owned(), name.to_owned()),
    ]);
    labels.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())));
    Some(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            annotations: generation.map(|g| BTreeMap::from([(CONFIG_GENERATION_ANNOTATION.to_owned(), g.to_string())])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: spec.config_data.clone().filter(|data| !data.is_empty()),
        binary_data: spec.config_binary_data.clone().filter(|data| !data.is_empty()),
        ..ConfigMap::default()
    })
}

/// Whether `existing` already holds everything `desired` sets (so writing it would change nothing).
pub(crate) fn config_map_matches(existing: &ConfigMap, desired: &ConfigMap) -> bool {
    fn non_empty<V>(map: &Option<BTreeMap<String, V>>) -> Option<&BTreeMap<String, V>> {
        map.as_ref().filter(|map| !map.is_empty())
    }
    let labels = existing.labels();
    non_empty(&existing.data) == non_empty(&desired.data)
        && non_empty(&existing.binary_data) == non_empty(&desired.binary_data)
        && desired.labels().iter().all(|(key, value)| labels.get(key) == Some(value))
        && desired.owner_references().iter().all(|owner| existing.owner_references().contains(owner))
}

/// The ClusterWatchers whose ConfigMap `config_map` may be, by its `watcher.dev/watcher` label.
pub(crate) fn owner_of(config_map: &ConfigMap) -> Option<ObjectRef<ClusterWatcher>> {
    config_map.labels().get(WATCHER_LABEL).map(|name| ObjectRef::new(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of writes (every Watcher reconciled at start) leaves no table sized for it once
    /// the cache has caught up with them, and what is held is answered until then.
    #[test]
    fn a_drained_burst_leaves_a_small_table() {
        let recent: Recent<String, String> = Recent::default();
        for i in 0..1000 {
            recent.insert(format!("w-{i}"), format!("status {i}"));
        }
        assert!(recent.capacity() >= 1000);
        for i in 0..990 {
            assert_eq!(recent.get(&format!("w-{i}")), Some(format!("status {i}")));
            recent.remove(&format!("w-{i}"));
        }
        assert_eq!(recent.len(), 10);
        assert!(recent.capacity() < 64, "a table of {} for 10 entries", recent.capacity());
        assert_eq!(recent.get(&"w-995".to_owned()), Some("status 995".to_owned()), "the rest still held");
        assert_eq!(recent.get(&"w-5".to_owned()), None);
    }
}
