//! A namespace's ResourceQuota as admission reads it: which pods it counts, the containers that
//! do not state what it counts, and what a pod would take past what is left of it.

use super::{Counted, Group, MUST_STATE, PodResourceView, Rule, Values, Violation};

/// A namespace's ResourceQuota: what it allows, what is used, which pods it counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Quota {
    pub(super) name: String,
    pub(super) hard: Values,
    pub(super) used: Values,
    pub(super) scopes: Vec<String>,
    /// `scopeSelector` expressions: (scope, operator, values).
    pub(super) expressions: Vec<(String, String, Vec<String>)>,
}

impl Quota {
    /// Whether the quota counts `pod` (its scopes, its scope selector).
    pub(super) fn counts(&self, pod: &PodResourceView) -> bool {
        let best_effort = pod.best_effort();
        let scope = |name: &str| match name {
            "Terminating" => pod.terminating,
            "NotTerminating" => !pod.terminating,
            "BestEffort" => best_effort,
            "NotBestEffort" => !best_effort,
            // No cross-namespace affinity is read: such a quota is taken not to count the pod.
            "CrossNamespacePodAffinity" => false,
            // A scope this code does not know: counted, so what it asks is stated.
            _ => true,
        };
        let expression = |(name, operator, values): &(String, String, Vec<String>)| {
            if name != "PriorityClass" {
                return match operator.as_str() {
                    "Exists" | "In" => scope(name),
                    "DoesNotExist" | "NotIn" => !scope(name),
                    _ => true,
                };
            }
            let class = pod.priority_class.as_deref();
            match operator.as_str() {
                "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !values.iter().any(|v| v == c)),
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                _ => true,
            }
        };
        self.scopes.iter().all(|s| scope(s)) && self.expressions.iter().all(expression)
    }

    /// A container that does not state cpu or memory where the quota counts them.
    pub(super) fn unstated(&self, pod: &PodResourceView) -> Vec<Violation> {
        let required: Vec<&str> = self.hard.keys().map(String::as_str).filter(|k| MUST_STATE.contains(k)).collect();
        let mut found = Vec::new();
        for container in &pod.containers {
            for resource in &required {
                let stated = match Counted::of(resource) {
                    Counted::Limits(r) => container.limits.contains_key(r),
                    Counted::Requests(r) => container.requests.contains_key(r),
                    Counted::Other => true,
                };
                if !stated {
                    found.push(Violation {
                        rule: Rule::ResourceQuota(self.name.clone()),
                        key: format!("{}/state/{resource}", container.name),
                        message: format!("must specify {resource} for: {}", container.name),
                        group: Group::Specify { resource: (*resource).to_owned(), container: container.name.clone() },
                    });
                }
            }
        }
        found
    }

    /// Each resource of the quota the pod would take past what is left of it.
    pub(super) fn exceeded(&self, pod: &PodResourceView) -> Vec<Violation> {
        let mut found = Vec::new();
        let (requests, limits) = (pod.total(false), pod.total(true));
        for (key, hard) in &self.hard {
            let requested = match Counted::of(key) {
                Counted::Limits(r) => limits.get(r).copied(),
                Counted::Requests(r) => requests.get(r).copied(),
                Counted::Other => None,
            };
            let Some(requested) = requested else { continue };
            let used = self.used.get(key).map(|v| v.amount).unwrap_or_default();
            if used + requested > hard.amount {
                found.push(Violation {
                    rule: Rule::ResourceQuota(self.name.clone()),
                    key: format!("exceeded/{key}"),
                    message: format!(
                        "exceeded quota: {}, requested: {key}={requested}, used: {key}={used}, limited: {key}={}",
                        self.name, hard.text
                    ),
                    group: Group::Exceeded { resource: key.clone(), requested, used, limited: hard.amount },
                });
            }
        }
        found
    }
}
