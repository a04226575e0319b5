//! Which ClusterWatchers apply in a namespace, decided once: the webhook's cache, the admission
//! scope, the controllers and `check-inject` all read it here.
//!
//! A ClusterWatcher applies in a namespace its `namespaceSelector` matches, unless the namespace
//! is never injected (system, the operator's own, labelled `watcher.dev/injection=disabled`) or
//! a Watcher of the same name there takes it over. Where it applies it is, to admission and to
//! the pod reconciler, a Watcher of its name in that namespace
//! ([`ClusterWatcher::in_namespace`]).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

use kube::runtime::reflector::Store;
use watcher_api::{ClusterWatcher, INJECTION_DISABLED, INJECTION_LABEL, Watcher};

use crate::{Exclusion, InjectOptions, NamespaceWatchers, SYSTEM_NAMESPACES};

/// Where the webhook finds the Watchers of a namespace.
pub trait WatcherSource: Send + Sync {
    /// The Watchers of `namespace`.
    fn watchers_in(&self, namespace: &str) -> Arc<NamespaceWatchers>;
}

/// Filters the whole store on every call: fine for tests and small clusters. The operator reads
/// the shared cache's namespace index instead.
impl WatcherSource for Store<Watcher> {
    fn watchers_in(&self, namespace: &str) -> Arc<NamespaceWatchers> {
        Arc::new(self.state().into_iter().filter(|w| w.metadata.namespace.as_deref() == Some(namespace)).collect())
    }
}

/// A fixed set of Watchers (tests, fuzzing, the offline preview).
impl WatcherSource for Vec<Arc<Watcher>> {
    fn watchers_in(&self, namespace: &str) -> Arc<NamespaceWatchers> {
        Arc::new(self.iter().filter(|w| w.metadata.namespace.as_deref() == Some(namespace)).cloned().collect())
    }
}

/// How a ClusterWatcher stands towards one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterStanding {
    /// It applies: its pods there are its own.
    Applies,
    /// A Watcher of the same name in the namespace takes it over.
    TakenOver,
    /// Its `namespaceSelector` does not match the namespace's labels.
    NotSelected,
    /// The namespace is never injected, and why (`SystemNamespace`, `OperatorNamespace` or
    /// `DisabledLabel`).
    NeverInjected(Exclusion),
}

impl ClusterStanding {
    /// A sentence for `check-inject` and the logs.
    pub fn describe(&self, name: &str, namespace: &str) -> String {
        match self {
            Self::Applies => format!("ClusterWatcher {name} applies in namespace {namespace}"),
            Self::TakenOver => {
                format!("Watcher {namespace}/{name} takes namespace {namespace} over from ClusterWatcher {name}")
            }
            Self::NotSelected => {
                format!("the namespaceSelector of ClusterWatcher {name} does not match namespace {namespace}")
            }
            Self::NeverInjected(why) => why.message(namespace),
        }
    }
}

/// Why a namespace is never injected, whatever any selector says: the webhook's own refusals.
pub fn never_injected(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    options: &InjectOptions,
) -> Option<Exclusion> {
    if SYSTEM_NAMESPACES.contains(&namespace) {
        Some(Exclusion::SystemNamespace)
    } else if options.never_mutated(namespace) {
        Some(Exclusion::OperatorNamespace)
    } else if labels.get(INJECTION_LABEL).is_some_and(|v| v == INJECTION_DISABLED) {
        Some(Exclusion::DisabledLabel)
    } else {
        None
    }
}

/// How `cluster` stands towards `namespace` (labelled `labels`), whose own Watchers are `own`
/// (Watchers of other namespaces are ignored).
pub fn standing<W: Borrow<Watcher>>(
    cluster: &ClusterWatcher,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    own: &[W],
    options: &InjectOptions,
) -> ClusterStanding {
    if let Some(why) = never_injected(namespace, labels, options) {
        return ClusterStanding::NeverInjected(why);
    }
    if !cluster.selects_namespace(labels) {
        return ClusterStanding::NotSelected;
    }
    let name = cluster.metadata.name.as_deref();
    let taken = own.iter().map(Borrow::borrow).any(|w| {
        w.metadata.name.as_deref() == name
            && w.metadata.namespace.as_deref() == Some(namespace)
            && w.cluster_watcher().is_none()
    });
    if taken { ClusterStanding::TakenOver } else { ClusterStanding::Applies }
}

/// The ClusterWatchers of `cluster` that apply in `namespace`, by name.
pub fn applying<'c, C: Borrow<ClusterWatcher>, W: Borrow<Watcher>>(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    own: &[W],
    cluster: &'c [C],
    options: &InjectOptions,
) -> Vec<&'c C> {
    let mut applying: Vec<&C> = cluster
        .iter()
        .filter(|c| standing(C::borrow(c), namespace, labels, own, options) == ClusterStanding::Applies)
        .collect();
    applying.sort_by(|a, b| C::borrow(a).metadata.name.cmp(&C::borrow(b).metadata.name));
    applying
}

/// The Watchers that apply in `namespace`: its own (`own`, the same `Arc`s), then each
/// ClusterWatcher that applies there, as a Watcher of its name in it, by name.
pub fn watchers_in_namespace(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    own: &[Arc<Watcher>],
    cluster: &[Arc<ClusterWatcher>],
    options: &InjectOptions,
) -> Vec<Arc<Watcher>> {
    let applying = applying(namespace, labels, own, cluster, options);
    own.iter().cloned().chain(applying.into_iter().map(|c| Arc::new(c.in_namespace(namespace)))).collect()
}

/// Every Watcher that applies anywhere, with the namespace it applies in: `own`, then each
/// ClusterWatcher in each of `namespaces` (name and labels) where it applies (one shared copy of
/// it, [`ClusterWatcher::unplaced`]), as the admission scope is computed from them.
pub fn everywhere<'a>(
    own: &[Arc<Watcher>],
    cluster: &[Arc<ClusterWatcher>],
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
    options: &InjectOptions,
) -> Vec<(String, Arc<Watcher>)> {
    let mut all: Vec<(String, Arc<Watcher>)> =
        own.iter().filter_map(|w| Some((w.metadata.namespace.clone()?, w.clone()))).collect();
    let shared: Vec<Arc<Watcher>> = cluster.iter().map(|c| Arc::new(c.unplaced())).collect();
    for (namespace, labels) in namespaces {
        let theirs: Vec<&Watcher> =
            own.iter().map(AsRef::as_ref).filter(|w| w.metadata.namespace.as_deref() == Some(namespace)).collect();
        for (cluster, shared) in cluster.iter().zip(&shared) {
            if standing(cluster, namespace, labels, &theirs, options) == ClusterStanding::Applies {
                all.push((namespace.to_owned(), shared.clone()));
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;
    use serde_json::json;

    use super::*;

    fn cluster(name: &str, namespace_selector: serde_json::Value) -> Arc<ClusterWatcher> {
        Arc::new(
            serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
                "metadata": {"name": name, "uid": format!("uid-{name}")},
                "spec": {"container": {"name": name, "image": "busybox:1.36"}, "namespaceSelector": namespace_selector}}))
            .expect("ClusterWatcher"),
        )
    }

    fn watcher(name: &str, namespace: &str) -> Arc<Watcher> {
        Arc::new(
            serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"container": {"name": format!("own-{name}"), "image": "busybox:1.36"}}}))
            .expect("Watcher"),
        )
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn options() -> InjectOptions {
        InjectOptions {
            excluded_namespaces: vec!["watcher-system".into()],
            native_sidecars: true,
            server_minor: None,
            ..Default::default()
        }
    }

    #[test]
    fn a_cluster_watcher_stands_towards_each_namespace_for_one_reason() {
        let payments = cluster("log-agent", json!({"matchLabels": {"team": "payments"}}));
        let team = labels(&[("team", "payments")]);
        let own = [watcher("log-agent", "team-b"), watcher("other", "team-a")];
        let cases = [
            ("team-a", team.clone(), ClusterStanding::Applies),
            ("team-b", team.clone(), ClusterStanding::TakenOver),
            ("team-c", labels(&[("team", "search")]), ClusterStanding::NotSelected),
            ("kube-system", team.clone(), ClusterStanding::NeverInjected(Exclusion::SystemNamespace)),
            ("watcher-system", team.clone(), ClusterStanding::NeverInjected(Exclusion::OperatorNamespace)),
            (
                "team-d",
                labels(&[("team", "payments"), ("watcher.dev/injection", "disabled")]),
                ClusterStanding::NeverInjected(Exclusion::DisabledLabel),
            ),
        ];
        for (namespace, labels, expected) in cases {
            assert_eq!(standing(&payments, namespace, &labels, &own, &options()), expected, "{namespace}");
        }
        // A Watcher of the same name elsewhere takes nothing over here.
        assert_eq!(
            standing(&payments, "team-a", &team, &[watcher("log-agent", "team-z")], &options()),
            ClusterStanding::Applies
        );
        assert_eq!(
            ClusterStanding::TakenOver.describe("log-agent", "team-b"),
            "Watcher team-b/log-agent takes namespace team-b over from ClusterWatcher log-agent"
        );
        assert_eq!(
            ClusterStanding::NeverInjected(Exclusion::DisabledLabel).describe("log-agent", "team-d"),
            "namespace team-d is labelled watcher.dev/injection=disabled",
            "as check-inject says it of the namespace"
        );
    }

    /// Name resolution: the namespace's own Watcher of a name wins; the others are added as
    /// Watchers of that namespace, by name, and a decision over them injects the pod.
    #[test]
    fn a_namespaced_watcher_of_the_same_name_wins() {
        let all = [cluster("log-agent", serde_json::Value::Null), cluster("metrics-agent", serde_json::Value::Null)];
        let own = [watcher("log-agent", "team-a")];
        let team = labels(&[]);
        let watchers = watchers_in_namespace("team-a", &team, &own, &all, &options());
        let names: Vec<(String, String, bool)> = watchers
            .iter()
            .map(|w| (w.name_any(), w.spec.container.name.clone(), w.cluster_watcher().is_some()))
            .collect();
        assert_eq!(
            names,
            [
                ("log-agent".into(), "own-log-agent".into(), false),
                ("metrics-agent".into(), "metrics-agent".into(), true)
            ]
        );
        assert!(Arc::ptr_eq(&watchers[0], &own[0]), "the namespace's own Watchers are not copied");
        assert!(watchers_in_namespace("kube-system", &team, &[], &all, &options()).is_empty());

        let pod: crate::PodView = serde_json::from_value(json!({
            "metadata": {"annotations": {"watcher.dev/inject": "log-agent,metrics-agent"}},
            "spec": {"containers": [{"name": "app"}]}}))
        .expect("pod");
        let decisions = crate::decide(&pod, "team-a", &watchers);
        let injected: Vec<(&str, &str)> = decisions
            .iter()
            .filter(|d| d.verdict == crate::Verdict::Inject)
            .filter_map(|d| d.watcher.map(|w| (d.name.as_str(), w.spec.container.name.as_str())))
            .collect();
        assert_eq!(injected, [("log-agent", "own-log-agent"), ("metrics-agent", "metrics-agent")]);
    }

    /// A ClusterWatcher's `selector` selects pods in each namespace it applies to, and only there.
    #[test]
    fn its_selector_selects_pods_in_the_namespaces_it_applies_to() {
        let mut selecting = (*cluster("log-agent", json!({"matchLabels": {"team": "payments"}}))).clone();
        selecting.spec.watcher.selector =
            Some(serde_json::from_value(json!({"matchLabels": {"app": "web"}})).expect("selector"));
        let all = [Arc::new(selecting)];
        let pod: crate::PodView = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app"}]}}))
        .expect("pod");
        let payments = watchers_in_namespace("team-a", &labels(&[("team", "payments")]), &[], &all, &options());
        let decisions = crate::decide(&pod, "team-a", &payments);
        assert_eq!(decisions.len(), 1);
        assert_eq!((decisions[0].asked, &decisions[0].verdict), (crate::Asked::Selector, &crate::Verdict::Inject));
        let search = watchers_in_namespace("team-c", &labels(&[("team", "search")]), &[], &all, &options());
        assert!(crate::decide(&pod, "team-c", &search).is_empty(), "not selected there");
    }

    /// One shared copy of a ClusterWatcher ([`ClusterWatcher::unplaced`]) admits every captured
    /// pod exactly as a copy placed in the pod's namespace does: the same patch, the same
    /// warnings. Every field that reaches the pod is set.
    #[test]
    fn the_shared_copy_injects_as_a_copy_in_the_namespace_does() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/admission-review");
        let cluster: ClusterWatcher = serde_json::from_value(json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
            "metadata": {"name": "log-agent", "uid": "uid-log-agent", "generation": 4},
            "spec": {"container": {"name": "log-agent", "image": "busybox:1.36", "command": ["sh", "-c", "tail -F /x"]},
                     "selector": {"matchExpressions": [{"key": "watcher.dev/skip", "operator": "DoesNotExist"}]},
                     "volume": {"name": "agent-logs", "emptyDir": {}}, "configData": {"LEVEL": "info"},
                     "imagePullSecrets": {"name": "regcred"}, "shareVolumes": "ReadOnly",
                     "appVolumeMounts": [{"mountPath": "/var/log/agent"}], "shareProcessNamespace": true,
                     "podAnnotations": {"prometheus.io/scrape": "true"},
                     "initContainers": [{"name": "prepare-agent", "image": "busybox:1.36"}]}}))
        .expect("valid ClusterWatcher");
        let mut compared = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let review: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
            let namespace = review["request"]["namespace"].as_str().expect("namespace");
            let pod: crate::PodView = serde_json::from_value(review["request"]["object"].clone()).expect("pod");
            for native in [false, true] {
                let options = InjectOptions { native_sidecars: native, ..options() };
                let placed = crate::inject(&pod, namespace, &[Arc::new(cluster.in_namespace(namespace))], &options);
                let shared = crate::inject(&pod, namespace, &[Arc::new(cluster.unplaced())], &options);
                assert!(!placed.patch.is_empty(), "{}: injected", path.display());
                assert_eq!(shared.patch, placed.patch, "{}", path.display());
                assert_eq!(shared.warnings, placed.warnings, "{}", path.display());
                // Reinvoked on the pod it patched, neither patches again.
                let mut patched = review["request"]["object"].clone();
                json_patch::patch(&mut patched, &shared.patch).expect("the patch applies");
                let patched: crate::PodView = serde_json::from_value(patched).expect("patched pod");
                for watcher in [cluster.in_namespace(namespace), cluster.unplaced()] {
                    let again = crate::inject(&patched, namespace, &[Arc::new(watcher)], &options);
                    assert!(again.patch.is_empty(), "{}: {:?}", path.display(), again.patch);
                }
                compared += 1;
            }
        }
        assert_eq!(compared, 8, "four captured reviews, native sidecars or not");
        // A Watcher of another namespace still never applies.
        let pod: crate::PodView =
            serde_json::from_value(json!({"metadata": {"labels": {}}, "spec": {"containers": [{"name": "app"}]}}))
                .expect("pod");
        let elsewhere = crate::inject(&pod, "team-a", &[Arc::new(cluster.in_namespace("team-b"))], &options());
        assert!(elsewhere.patch.is_empty());
    }
}
