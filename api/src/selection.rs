//! A Watcher's selector: the one definition of "this Watcher selects that pod", shared by the
//! webhook and the pod reconciler.

use std::collections::BTreeMap;

use kube::core::SelectorExt;

use crate::Watcher;

impl Watcher {
    /// Whether this Watcher's `spec.selector` selects a pod with these labels. No selector
    /// selects nothing; an empty selector (`{}`) selects every pod, as everywhere in Kubernetes.
    /// A selector the API would reject (an unknown operator) selects nothing.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        // Compiled once per spec: the webhook asks for every pod, the pod reconciler for every
        // pod it counts.
        // The field first: most Watchers have none, and it is read without the memo.
        self.spec.selector.is_some() && self.spec.compiled_selector().is_some_and(|selector| selector.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
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
        let web = labels(&[("app", "web"), ("tier", "front")]);
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
