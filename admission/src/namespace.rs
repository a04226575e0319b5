//! The Watchers of one namespace as admission reads them, with what picks out, for one pod, the
//! few that can concern it.
//!
//! A pod concerns a Watcher it names (`watcher.dev/inject`), one it already carries
//! (`watcher.dev/injected`) and one whose `selector` may select it; every other Watcher of the
//! namespace changes nothing in its admission. A namespace may hold a hundred Watchers and a pod
//! name one: looking at each of them, in [`crate::decide`] and in the canary, was most of the
//! cost of choosing what to inject.

use std::ops::Deref;
use std::sync::Arc;

use watcher_api::{Watcher, annotation};

use crate::PodView;

/// A namespace's Watchers, in the order admission takes them, indexed by name and by whether
/// they have a selector. It reads as the slice of its Watchers.
#[derive(Debug, Default)]
pub struct NamespaceWatchers {
    watchers: Box<[Arc<Watcher>]>,
    /// Each Watcher's name hashed, with its index, sorted: a name found with one binary search
    /// over a few cache lines, and checked against the Watcher.
    names: Box<[(u64, u32)]>,
    /// The indices of the Watchers with a `selector`, in order.
    selecting: Box<[u32]>,
}

impl NamespaceWatchers {
    /// The Watchers that can concern `pod`: those it names in `watcher.dev/inject` or carries
    /// in `watcher.dev/injected`, and those with a selector, in the namespace's order (which
    /// [`crate::decide`] keeps). Admission of `pod` with these decides what it would with every
    /// Watcher of the namespace.
    pub fn concerning(&self, pod: &PodView) -> Vec<Arc<Watcher>> {
        let annotations = pod.annotations();
        let mut names =
            annotation::Inject::each(annotations).chain(annotation::Injected::names(annotations)).peekable();
        if names.peek().is_none() && self.selecting.is_empty() {
            return Vec::new();
        }
        let mut indices: Vec<u32> = self.selecting.to_vec();
        for name in names {
            indices.extend(self.named(name));
        }
        indices.sort_unstable();
        indices.dedup();
        // Every index was taken from this list.
        indices.into_iter().filter_map(|i| self.watchers.get(i as usize).cloned()).collect()
    }

    /// The indices of the Watchers named `name` (one, in a namespace's list as the cache makes
    /// it).
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = u32> + 'a {
        let hash = hash(name);
        let start = self.names.partition_point(|(h, _)| *h < hash);
        self.names[start..]
            .iter()
            .take_while(move |(h, _)| *h == hash)
            .map(|(_, i)| *i)
            .filter(move |i| self.watchers.get(*i as usize).is_some_and(|w| w.metadata.name.as_deref() == Some(name)))
    }
}

/// FNV-1a: a Watcher's name is short, and a collision only costs a comparison of names.
fn hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

impl FromIterator<Arc<Watcher>> for NamespaceWatchers {
    fn from_iter<I: IntoIterator<Item = Arc<Watcher>>>(iter: I) -> Self {
        let watchers: Box<[Arc<Watcher>]> = iter.into_iter().collect();
        // A namespace's list is far below u32::MAX Watchers; any beyond are never picked.
        let indexed = || watchers.iter().enumerate().filter_map(|(i, w)| Some((u32::try_from(i).ok()?, w)));
        let mut names: Vec<(u64, u32)> =
            indexed().map(|(i, w)| (hash(w.metadata.name.as_deref().unwrap_or_default()), i)).collect();
        names.sort_unstable();
        let selecting = indexed().filter(|(_, w)| w.spec.selector.is_some()).map(|(i, _)| i).collect();
        Self { names: names.into(), selecting, watchers }
    }
}

impl From<Vec<Arc<Watcher>>> for NamespaceWatchers {
    fn from(watchers: Vec<Arc<Watcher>>) -> Self {
        watchers.into_iter().collect()
    }
}

impl Deref for NamespaceWatchers {
    type Target = [Arc<Watcher>];

    fn deref(&self) -> &[Arc<Watcher>] {
        &self.watchers
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const INJECT: &str = annotation::Inject::KEY;
    const INJECTED: &str = annotation::Injected::KEY;

    fn watcher(name: &str, namespace: Option<&str>, selector: Option<serde_json::Value>) -> Arc<Watcher> {
        let mut spec = json!({"container": {"name": name, "image": "busybox"}});
        if let Some(selector) = selector {
            spec["selector"] = selector;
        }
        let mut metadata = json!({"name": name});
        if let Some(namespace) = namespace {
            metadata["namespace"] = json!(namespace);
        }
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": metadata, "spec": spec}),
            )
            .expect("Watcher"),
        )
    }

    fn pod(annotations: serde_json::Value, labels: serde_json::Value) -> PodView {
        serde_json::from_value(json!({"metadata": {"annotations": annotations, "labels": labels},
            "spec": {"containers": [{"name": "app"}]}}))
        .expect("pod")
    }

    fn names(watchers: &[Arc<Watcher>]) -> Vec<&str> {
        watchers.iter().map(|w| w.metadata.name.as_deref().unwrap_or_default()).collect()
    }

    #[test]
    fn a_pod_concerns_what_it_names_carries_or_may_be_selected_by_in_order() {
        let mut list: Vec<Arc<Watcher>> =
            (0..100).map(|i| watcher(&format!("w{i:03}"), Some("team-a"), None)).collect();
        list.insert(40, watcher("web", Some("team-a"), Some(json!({"matchLabels": {"app": "web"}}))));
        list.push(watcher("cluster-wide", None, None));
        let listed = NamespaceWatchers::from(list.clone());
        assert_eq!(listed.len(), 102, "reads as its Watchers");

        let named = pod(json!({INJECT: "cluster-wide, w007,ghost,w007"}), json!({}));
        // The selector is matched by decide: a Watcher with one is always looked at.
        assert_eq!(names(&listed.concerning(&named)), ["w007", "web", "cluster-wide"]);
        let carried = pod(json!({INJECTED: "w099@abc"}), json!({}));
        assert_eq!(names(&listed.concerning(&carried)), ["web", "w099"]);

        let plain = NamespaceWatchers::from(list[..3].to_vec());
        assert!(plain.concerning(&pod(json!({}), json!({"app": "web"}))).is_empty(), "asks for nothing");
        assert!(NamespaceWatchers::default().concerning(&named).is_empty());
    }

    #[test]
    fn admission_with_the_watchers_a_pod_concerns_decides_as_with_all() {
        let mut list: Vec<Arc<Watcher>> = (0..50).map(|i| watcher(&format!("w{i:02}"), Some("team-a"), None)).collect();
        list.push(watcher("web", Some("team-a"), Some(json!({"matchLabels": {"app": "web"}}))));
        list.push(watcher("db", Some("team-a"), Some(json!({"matchLabels": {"app": "db"}}))));
        // The same name twice (a hand-made list): both are looked at, as decide would.
        list.push(watcher("w03", Some("team-a"), None));
        list.push(watcher("w10", Some("team-b"), None));
        let listed = NamespaceWatchers::from(list.clone());
        let pods = [
            pod(json!({INJECT: "w03,w10,w49,ghost"}), json!({"app": "web"})),
            pod(json!({INJECTED: "w03@abc", INJECT: "w04"}), json!({"app": "db"})),
            pod(json!({}), json!({"app": "web"})),
            pod(json!({}), json!({})),
        ];
        for pod in &pods {
            let decided = |watchers: &[Arc<Watcher>]| {
                crate::decide(pod, "team-a", watchers)
                    .into_iter()
                    .map(|d| (d.name, d.watcher.map(|w| w as *const Watcher), d.asked, d.verdict))
                    .collect::<Vec<_>>()
            };
            assert_eq!(decided(&listed.concerning(pod)), decided(&list), "{:?}", pod.annotations());
            let options = crate::InjectOptions::default();
            assert_eq!(
                crate::inject(pod, "team-a", &listed.concerning(pod), &options),
                crate::inject(pod, "team-a", &list, &options)
            );
        }
    }
}
