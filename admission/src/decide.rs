//! Who injects what, decided once: which Watchers a pod asks for and what becomes of each.
//! [`crate::inject`] builds its patch from these decisions, and `watcher-operator
//! check-inject` prints them, so the explanation of a pod can never disagree with admission.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};
use watcher_api::{INJECTION_DISABLED, INJECTION_LABEL, Watcher, annotation};

use crate::{InjectOptions, PodView, SYSTEM_NAMESPACES};

/// How a pod asks for a Watcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Named in `watcher.dev/inject`.
    Annotation,
    /// Selected by the Watcher's `spec.selector`.
    Selector,
}

/// What becomes of one Watcher for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Injected by this admission.
    Inject,
    /// Already carried (`watcher.dev/injected`), with the specHash it was injected with.
    AlreadyInjected {
        /// The hash recorded on the pod.
        hash: String,
    },
    /// Not injected: the pod already has a container of that name.
    Collision {
        /// The container name.
        container: String,
    },
    /// Asked for by annotation, but no Watcher of that name exists in the namespace.
    Missing,
    /// Not injected: the pod would be invalid with it (a name that is not a DNS label, a
    /// volumeMount of a volume neither the pod nor the Watcher has, ...), so kube-apiserver
    /// would refuse the pod.
    Invalid {
        /// What is wrong, each problem naming its field.
        problems: Vec<String>,
    },
}

/// The decision for one Watcher the pod asks for.
#[derive(Clone, Debug)]
pub struct Decision<'a> {
    /// The Watcher's name.
    pub name: String,
    /// The Watcher (`None` when it is missing).
    pub watcher: Option<&'a Watcher>,
    /// How the pod asks for it.
    pub asked: Asked,
    /// What becomes of it.
    pub verdict: Verdict,
}

/// The decisions for every Watcher `pod` asks for, in the order injection handles them:
/// requested by annotation in the order written, then selected, by name. `watchers` may hold
/// Watchers of any namespace: only those of `namespace` count (and those of none, ClusterWatchers
/// the caller found applying there, see [`Watcher::is_in`]). A container a Watcher adds takes
/// its name for the Watchers after it.
pub fn decide<'a, W: Borrow<Watcher>>(pod: &PodView, namespace: &str, watchers: &'a [W]) -> Vec<Decision<'a>> {
    let annotations = pod.annotations();
    let requested = annotation::Inject::read(annotations);
    // One pass over the Watchers (a namespace may hold many): the first of each requested name,
    // and every one that selects the pod.
    let mut found: Vec<Option<&'a Watcher>> = vec![None; requested.len()];
    let mut selected: Vec<&'a Watcher> = Vec::new();
    for watcher in watchers.iter().map(Borrow::borrow) {
        let name = watcher.metadata.name.as_deref().unwrap_or_default();
        let position = requested.iter().position(|r| *r == name);
        let selects = watcher.selects(pod.labels());
        // The namespace last: most Watchers are neither asked for nor selecting.
        if (position.is_none() && !selects) || !watcher.is_in(namespace) {
            continue;
        }
        if let Some(slot) = position.and_then(|i| found.get_mut(i)) {
            slot.get_or_insert(watcher);
        }
        if selects {
            selected.push(watcher);
        }
    }
    let mut asked: Vec<(String, Option<&'a Watcher>, Asked)> =
        requested.iter().zip(found).map(|(name, watcher)| ((*name).to_owned(), watcher, Asked::Annotation)).collect();
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for watcher in selected {
        let name = watcher.name_any();
        if !asked.iter().any(|(n, _, _)| *n == name) {
            asked.push((name, Some(watcher), Asked::Selector));
        }
    }

    let already = annotation::Injected::read(annotations);
    let spec = pod.spec.as_ref();
    let mut container_names: Vec<&str> = spec
        .map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()).map(|c| c.name.as_str()).collect())
        .unwrap_or_default();
    let mut volume_names: Vec<&str> =
        spec.and_then(|s| s.volumes.as_deref()).unwrap_or_default().iter().map(|v| v.name.as_str()).collect();
    asked
        .into_iter()
        .map(|(name, watcher, how)| {
            let verdict = match (watcher, already.iter().find(|(injected, _)| *injected == name)) {
                (None, _) => Verdict::Missing,
                (Some(_), Some((_, hash))) => Verdict::AlreadyInjected { hash: (*hash).to_owned() },
                (Some(watcher), None) => {
                    let spec = &watcher.spec;
                    // The sidecar and the init containers the Watcher adds.
                    let added = || {
                        std::iter::once(spec.container.name.as_str())
                            .chain(spec.app.init_containers.iter().map(|c| c.name.as_str()))
                    };
                    let problems = problems_in(watcher, &volume_names);
                    if !problems.is_empty() {
                        Verdict::Invalid { problems }
                    } else if let Some(clash) = added().find(|name| container_names.contains(name)) {
                        Verdict::Collision { container: clash.to_owned() }
                    } else {
                        container_names.extend(added());
                        volume_names.extend(watcher.spec.volume.as_deref().map(|v| v.name.as_str()));
                        Verdict::Inject
                    }
                }
            };
            Decision { name, watcher, asked: how, verdict }
        })
        .collect()
}

/// What would make a pod with `volumes` invalid once `watcher` is injected: the Watcher's own
/// problems, and volumeMounts of volumes neither the pod nor the Watcher has.
fn problems_in(watcher: &Watcher, volumes: &[&str]) -> Vec<String> {
    let mut problems = watcher.spec.known_problems();
    let own = watcher.spec.volume.as_deref().map(|v| v.name.as_str());
    // The sidecar (`None`), then each init container by index: a field named only for a problem
    // (the webhook checks every Watcher it injects).
    let containers = std::iter::once((None, &watcher.spec.container))
        .chain(watcher.spec.app.init_containers.iter().enumerate().map(|(i, c)| (Some(i), c)));
    for (index, container) in containers {
        for (i, mount) in container.volume_mounts.iter().flatten().enumerate() {
            let name = mount.name.as_str();
            if own != Some(name) && !volumes.contains(&name) {
                let field = index.map_or("spec.container".to_owned(), |n| format!("spec.initContainers[{n}]"));
                problems.push(format!(
                    "{field}.volumeMounts[{i}].name: volume {name:?} is neither the pod's nor the Watcher's"
                ));
            }
        }
    }
    problems
}

/// Why no Watcher reaches a pod at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Exclusion {
    /// `kube-system`, `kube-public`, `kube-node-lease`: refused by the webhook itself.
    SystemNamespace,
    /// The operator's own namespace: refused by the webhook itself.
    OperatorNamespace,
    /// The namespace is labelled `watcher.dev/injection=disabled`: refused by the webhook
    /// itself, whatever the configuration's namespaceSelector says.
    DisabledLabel,
    /// The webhook configuration's namespaceSelector does not select the namespace.
    NamespaceSelector,
    /// The webhook configuration's objectSelector does not select the pod.
    ObjectSelector,
}

impl Exclusion {
    /// A sentence for people: why a pod of `namespace` gets no Watcher.
    pub fn message(self, namespace: &str) -> String {
        match self {
            Self::SystemNamespace => format!("{namespace} is a system namespace, never injected"),
            Self::OperatorNamespace => format!("{namespace} is the operator's own namespace, never injected"),
            Self::DisabledLabel => format!("namespace {namespace} is labelled {INJECTION_LABEL}={INJECTION_DISABLED}"),
            Self::NamespaceSelector => {
                format!("the webhook configuration's namespaceSelector does not select namespace {namespace}")
            }
            Self::ObjectSelector => "the webhook configuration's objectSelector does not select the pod".to_owned(),
        }
    }
}

/// The selectors kube-apiserver applies before it calls the webhook, as registered.
#[derive(Clone, Debug, Default)]
pub struct WebhookSelectors {
    /// `namespaceSelector` (absent: every namespace).
    pub namespace: Option<LabelSelector>,
    /// `objectSelector` (absent: every object).
    pub object: Option<LabelSelector>,
}

/// Whether a label selector as registered matches; one the API server would have refused
/// matches nothing.
fn matches(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    match selector {
        None => true,
        Some(selector) => Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels)),
    }
}

/// Whether a pod with `pod_labels`, created in `namespace` (with `namespace_labels`), is kept
/// from injection, and by what: the webhook's own refusals first (they hold whatever the
/// configuration says), then kube-apiserver's selectors.
pub fn exclusion(
    namespace: &str,
    namespace_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
    selectors: &WebhookSelectors,
    options: &InjectOptions,
) -> Option<Exclusion> {
    if SYSTEM_NAMESPACES.contains(&namespace) {
        return Some(Exclusion::SystemNamespace);
    }
    if options.never_mutated(namespace) {
        return Some(Exclusion::OperatorNamespace);
    }
    if namespace_labels.get(INJECTION_LABEL).is_some_and(|v| v == INJECTION_DISABLED) {
        return Some(Exclusion::DisabledLabel);
    }
    if !matches(selectors.namespace.as_ref(), namespace_labels) {
        return Some(Exclusion::NamespaceSelector);
    }
    if !matches(selectors.object.as_ref(), pod_labels) {
        return Some(Exclusion::ObjectSelector);
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn watcher(name: &str, container: &str, selector: Option<serde_json::Value>) -> Watcher {
        let mut spec = json!({"container": {"name": container, "image": "busybox"}});
        if let Some(selector) = selector {
            spec["selector"] = selector;
        }
        serde_json::from_value(json!({"apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))
        .expect("Watcher")
    }

    fn pod(annotations: serde_json::Value, labels: serde_json::Value) -> PodView {
        serde_json::from_value(json!({"metadata": {"annotations": annotations, "labels": labels},
            "spec": {"containers": [{"name": "app"}]}}))
        .expect("pod")
    }

    #[test]
    fn every_reason_a_watcher_is_or_is_not_injected() {
        let watchers = [
            watcher("log", "log", None),
            watcher("metrics", "metrics", Some(json!({"matchLabels": {"app": "web"}}))),
            watcher("clash", "app", None),
            watcher("twin", "log", None),
            watcher("done", "done", None),
            watcher("typo", "Bad_Name", None),
        ];
        let refs: Vec<&Watcher> = watchers.iter().collect();
        let pod = pod(
            json!({"watcher.dev/inject": "log,ghost,clash,twin,done,typo", "watcher.dev/injected": "done@abc"}),
            json!({"app": "web"}),
        );
        let decisions: Vec<(String, Asked, Verdict)> =
            decide(&pod, "team-a", &refs).into_iter().map(|d| (d.name, d.asked, d.verdict)).collect();
        assert_eq!(
            decisions,
            [
                ("log".into(), Asked::Annotation, Verdict::Inject),
                ("ghost".into(), Asked::Annotation, Verdict::Missing),
                ("clash".into(), Asked::Annotation, Verdict::Collision { container: "app".into() }),
                ("twin".into(), Asked::Annotation, Verdict::Collision { container: "log".into() }),
                ("done".into(), Asked::Annotation, Verdict::AlreadyInjected { hash: "abc".into() }),
                (
                    "typo".into(),
                    Asked::Annotation,
                    Verdict::Invalid {
                        problems: vec!["spec.container.name: \"Bad_Name\" is not a DNS-1123 label".into()]
                    }
                ),
                ("metrics".into(), Asked::Selector, Verdict::Inject),
            ]
        );
        assert!(decide(&pod, "team-b", &refs).iter().all(|d| d.verdict == Verdict::Missing), "other namespace");
    }

    #[test]
    fn every_reason_a_pod_is_excluded() {
        let options = InjectOptions {
            excluded_namespaces: vec!["watcher-system".into()],
            native_sidecars: true,
            server_minor: None,
            ..Default::default()
        };
        let registered: LabelSelector = serde_json::from_value(json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "watcher-system"]},
            {"key": "watcher.dev/injection", "operator": "NotIn", "values": ["disabled"]},
            {"key": "team", "operator": "NotIn", "values": ["legacy"]}]}))
        .expect("selector");
        let selectors = WebhookSelectors {
            namespace: Some(registered),
            object: Some(
                serde_json::from_value(json!({"matchExpressions": [
                {"key": "sidecars", "operator": "NotIn", "values": ["off"]}]}))
                .expect("selector"),
            ),
        };
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let ns = |name: &str, more: &[(&str, &str)]| {
            let mut l = labels(&[("kubernetes.io/metadata.name", name)]);
            l.extend(labels(more));
            l
        };
        let none = BTreeMap::new();
        let cases = [
            ("kube-system", ns("kube-system", &[]), none.clone(), Some(Exclusion::SystemNamespace)),
            ("watcher-system", ns("watcher-system", &[]), none.clone(), Some(Exclusion::OperatorNamespace)),
            (
                "team-a",
                ns("team-a", &[("watcher.dev/injection", "disabled")]),
                none.clone(),
                Some(Exclusion::DisabledLabel),
            ),
            ("team-b", ns("team-b", &[("team", "legacy")]), none.clone(), Some(Exclusion::NamespaceSelector)),
            (
                "team-c",
                ns("team-c", &[("team", "legacy"), ("watcher.dev/injection", "disabled")]),
                none.clone(),
                Some(Exclusion::DisabledLabel),
            ),
            ("team-d", ns("team-d", &[]), labels(&[("sidecars", "off")]), Some(Exclusion::ObjectSelector)),
            ("team-e", ns("team-e", &[]), labels(&[("sidecars", "on")]), None),
        ];
        for (namespace, namespace_labels, pod_labels, expected) in cases {
            assert_eq!(
                exclusion(namespace, &namespace_labels, &pod_labels, &selectors, &options),
                expected,
                "{namespace}"
            );
        }
        assert_eq!(exclusion("team-e", &none, &none, &WebhookSelectors::default(), &options), None, "no selectors");
        // A configuration installed without the opt-out in its namespaceSelector: the webhook
        // refuses all the same.
        let disabled = ns("team-f", &[("watcher.dev/injection", "disabled")]);
        assert_eq!(
            exclusion("team-f", &disabled, &none, &WebhookSelectors::default(), &options),
            Some(Exclusion::DisabledLabel)
        );
    }
}
