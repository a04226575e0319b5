//! Reading the injection annotations and selectors: the one definition of "this pod asks for
//! that Watcher" and "this pod carries that Watcher", shared by the webhook and the pod reconciler.

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};

use crate::{INJECT_ANNOTATION, INJECTED_ANNOTATION, Watcher};

/// The Watcher names a pod asks for in `watcher.dev/inject`: trimmed, empty entries and
/// repeats dropped, in the order written.
pub fn requested_watchers(annotations: &BTreeMap<String, String>) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for name in annotations.get(INJECT_ANNOTATION).map(String::as_str).unwrap_or("").split(',') {
        let name = name.trim();
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The `(watcher, specHash)` pairs of `watcher.dev/injected`. An entry without `@` has an
/// empty hash (never up to date).
pub fn injected_watchers(annotations: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    annotations
        .get(INJECTED_ANNOTATION)
        .map(String::as_str)
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| entry.split_once('@').unwrap_or((entry, "")))
        .collect()
}

/// The `(watcher, hash without image)` pairs of `watcher.dev/injected-without-image`.
pub fn injected_watchers_without_image(annotations: &BTreeMap<String, String>) -> impl Iterator<Item = (&str, &str)> {
    annotations
        .get(crate::INJECTED_WITHOUT_IMAGE_ANNOTATION)
        .map(String::as_str)
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| entry.split_once('@'))
}

/// The `watcher.dev/injected` value for these entries.
pub fn injected_annotation_value<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    entries.into_iter().map(|(name, hash)| format!("{name}@{hash}")).collect::<Vec<_>>().join(",")
}

impl Watcher {
    /// Whether this Watcher's `spec.selector` selects a pod with these labels. No selector
    /// selects nothing; an empty selector (`{}`) selects every pod, as everywhere in Kubernetes.
    /// A selector the API would reject (an unknown operator) selects nothing.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        let Some(selector) = &self.spec.selector else { return false };
        Selector::try_from(selector.clone()).is_ok_and(|selector| selector.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn requested_names_are_trimmed_and_unique() {
        let a = annotations(&[(INJECT_ANNOTATION, " log-watcher, ,metrics-watcher,log-watcher,")]);
        assert_eq!(requested_watchers(&a), ["log-watcher", "metrics-watcher"]);
        assert!(requested_watchers(&annotations(&[])).is_empty());
        assert!(requested_watchers(&annotations(&[(INJECT_ANNOTATION, "")])).is_empty());
    }

    #[test]
    fn injected_entries_round_trip() {
        let a = annotations(&[(INJECTED_ANNOTATION, "log-watcher@5f2c9a1e, odd ,m@1")]);
        assert_eq!(injected_watchers(&a), [("log-watcher", "5f2c9a1e"), ("odd", ""), ("m", "1")]);
        assert_eq!(injected_annotation_value([("a", "1"), ("b", "2")]), "a@1,b@2");
    }

    fn watcher(selector: serde_json::Value) -> Watcher {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": "w", "namespace": "team-a"},
            "spec": {"container": {"name": "w"}, "selector": selector},
        }))
        .expect("valid Watcher")
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let web = annotations(&[("app", "web"), ("tier", "front")]);
        assert!(watcher(serde_json::json!({"matchLabels": {"app": "web"}})).selects(&web));
        assert!(!watcher(serde_json::json!({"matchLabels": {"app": "db"}})).selects(&web));
        assert!(watcher(serde_json::json!({})).selects(&web), "empty selector selects all");
        assert!(!watcher(serde_json::Value::Null).selects(&web), "no selector selects none");
        let expr = |op: &str, values: &[&str]| {
            watcher(serde_json::json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]}))
        };
        assert!(expr("In", &["front", "back"]).selects(&web));
        assert!(!expr("NotIn", &["front"]).selects(&web));
        assert!(expr("Exists", &[]).selects(&web));
        assert!(!expr("DoesNotExist", &[]).selects(&web));
        assert!(!expr("Sometimes", &["front"]).selects(&web), "unknown operator selects nothing");
    }
}
