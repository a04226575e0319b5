//! `ImagePolicy` (cluster-scoped): container images rewritten to a mirror or pinned, at pod
//! admission and, when asked, in workload pod templates.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;
use crate::image::Rule;

/// Image rewrites: the first matching rule of the policies, taken in name order, rewrites an
/// image once.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "watcher.dev",
    version = "v1alpha1",
    kind = "ImagePolicy",
    status = "ImagePolicyStatus",
    category = "watcher-dev",
    derive = "PartialEq",
    doc = "An ImagePolicy rewrites container images (to a mirror, or pinned) when pods are created, and in workload templates when asked.",
    printcolumn(name = "Workloads", type_ = "boolean", json_path = ".spec.workloads"),
    printcolumn(name = "Matched", type_ = "integer", json_path = ".status.workloads.matched"),
    printcolumn(name = "Rewritten", type_ = "integer", json_path = ".status.workloads.rewritten"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicySpec {
    /// Ordered rules; the first that matches an image rewrites it, and the result is never
    /// rewritten again.
    #[schemars(length(min = 1, max = crate::validation::MAX_REWRITES))]
    pub rewrites: Vec<ImageRewrite>,

    /// Namespaces whose pods (and workloads) this policy rewrites; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::label_selector_schema")]
    pub namespace_selector: Option<LabelSelector>,

    /// Also rewrite the pod templates of Deployments, StatefulSets and DaemonSets (a rollout
    /// follows). Off by default: a GitOps tool that owns those fields would fight it.
    #[serde(default)]
    pub workloads: bool,
}

/// One rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.from.endsWith('/') == self.to.endsWith('/')",
    "message": "a prefix (from ending in /) is rewritten to a prefix (to ending in /), a whole reference to a whole reference",
}]))]
pub struct ImageRewrite {
    /// A whole image reference (`alpine:latest`), or a prefix ending in `/`
    /// (`docker.io/library/`) that keeps the rest of the reference, tag and digest included.
    /// Compared after normalization: `alpine` is `docker.io/library/alpine:latest`.
    #[schemars(length(min = 1, max = crate::validation::MAX_IMAGE_LENGTH))]
    pub from: String,
    /// The image (for a whole reference) or the prefix ending in `/` (for a prefix) written
    /// instead.
    #[schemars(length(min = 1, max = crate::validation::MAX_IMAGE_LENGTH))]
    pub to: String,
}

/// The observed state of an ImagePolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePolicyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// With `workloads: true`: the workloads this policy's rules match, and how many carry the
    /// rewritten images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workloads: Option<WorkloadCounts>,
    /// `Ready`: every rule is valid and the policy applies (reason `InvalidRule` otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Workloads of an ImagePolicy with `workloads: true`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct WorkloadCounts {
    /// Deployments, StatefulSets and DaemonSets with an image (before rewriting) that a rule matches.
    pub matched: i32,
    /// Matched workloads whose template carries the rewritten images.
    pub rewritten: i32,
}

/// Why an ImagePolicy is not applied: what its status says.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Its `namespaceSelector` is not a selector (kube's reason).
    #[error("spec.namespaceSelector: failed to parse value as expression: {0}")]
    Selector(String),
    /// A rule does not compile.
    #[error(transparent)]
    Rule(crate::image::RuleError),
}

/// A policy ready to apply: rules parsed once, not at every admission.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    /// The policy's name (policies apply in name order).
    pub name: String,
    /// Whether workload templates are rewritten too.
    pub workloads: bool,
    /// The compiled rules, or why the policy is not applied.
    pub rules: Result<Vec<Rule>, PolicyError>,
    selector: Option<Selector>,
}

impl ImagePolicy {
    /// Compiles the policy. An invalid rule or selector makes the whole policy inapplicable: a
    /// later rule must never win in place of an earlier one that could not be read.
    pub fn compile(&self) -> CompiledPolicy {
        let selector = self.spec.namespace_selector.clone().map(Selector::try_from);
        let rules = match &selector {
            Some(Err(error)) => Err(PolicyError::Selector(error.0.clone())),
            _ => self
                .spec
                .rewrites
                .iter()
                .map(|r| Rule::compile(&r.from, &r.to))
                .collect::<Result<_, _>>()
                .map_err(PolicyError::Rule),
        };
        CompiledPolicy {
            name: self.name_any(),
            workloads: self.spec.workloads,
            rules,
            selector: selector.and_then(Result::ok),
        }
    }
}

impl CompiledPolicy {
    /// Whether the policy applies to a namespace with these labels.
    pub fn selects(&self, namespace_labels: &BTreeMap<String, String>) -> bool {
        self.rules.is_ok() && self.selector.as_ref().is_none_or(|s| s.matches(namespace_labels))
    }

    /// Whether the policy applies to every namespace (it has rules and no `namespaceSelector`).
    pub fn applies_everywhere(&self) -> bool {
        !self.valid_rules().is_empty() && self.selector.is_none()
    }

    /// The rules, when the policy is valid.
    pub fn valid_rules(&self) -> &[Rule] {
        self.rules.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: serde_json::Value) -> ImagePolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "ImagePolicy", "metadata": {"name": "mirror"}, "spec": spec,
        }))
        .expect("valid ImagePolicy")
    }

    #[test]
    fn a_policy_compiles_with_its_selector() {
        let compiled = policy(serde_json::json!({
            "rewrites": [{"from": "docker.io/library/", "to": "mirror.internal/library/"}],
            "namespaceSelector": {"matchLabels": {"mirror": "on"}},
        }))
        .compile();
        assert!(!compiled.workloads, "workloads are off by default");
        assert_eq!(compiled.valid_rules().len(), 1);
        assert!(compiled.selects(&[("mirror".to_owned(), "on".to_owned())].into()));
        assert!(!compiled.selects(&BTreeMap::new()));
    }

    #[test]
    fn an_invalid_rule_or_selector_disables_the_whole_policy() {
        let bad_rule = policy(serde_json::json!({"rewrites": [
            {"from": "docker.io/library/", "to": "mirror.internal/library/"},
            {"from": "alpine:", "to": "nginx"},
        ]}))
        .compile();
        assert!(bad_rule.rules.as_ref().is_err_and(|e| e.to_string().contains("alpine:")), "{:?}", bad_rule.rules);
        assert!(bad_rule.valid_rules().is_empty() && !bad_rule.selects(&BTreeMap::new()));
        let bad_selector = policy(serde_json::json!({
            "rewrites": [{"from": "docker.io/", "to": "m.internal/"}],
            "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Sometimes", "values": ["b"]}]},
        }))
        .compile();
        assert!(bad_selector.rules.as_ref().is_err_and(|e| e.to_string().contains("namespaceSelector")));
    }
}
