//! `ClusterWatcher`: a Watcher defined once for every namespace that should have it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::{CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Condition, PodCounts, Watcher, WatcherSpec};

/// A Watcher for many namespaces: its pods are those of the namespaces `namespaceSelector`
/// matches, and in each it is what a Watcher of its name would be there. A namespaced Watcher of
/// the same name takes its namespace over entirely.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "watcher.dev",
    version = "v1alpha1",
    kind = "ClusterWatcher",
    status = "ClusterWatcherStatus",
    shortname = "cwt",
    category = "watcher-dev",
    derive = "PartialEq",
    doc = "A ClusterWatcher is a Watcher for every namespace its namespaceSelector matches; a Watcher of the same name in a namespace takes that namespace over.",
    printcolumn(name = "Container", type_ = "string", json_path = ".spec.container.name"),
    printcolumn(name = "Namespaces", type_ = "integer", json_path = ".status.namespaces"),
    printcolumn(name = "Matched", type_ = "integer", json_path = ".status.pods.matched"),
    printcolumn(name = "UpToDate", type_ = "integer", json_path = ".status.pods.upToDate"),
    printcolumn(name = "Missing", type_ = "integer", json_path = ".status.pods.missing"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::validation::watcher_spec_rules)]
pub struct ClusterWatcherSpec {
    /// Every field of a Watcher's spec; `selector` selects pods in each namespace it applies to.
    #[serde(flatten)]
    pub watcher: WatcherSpec,

    /// The namespaces it applies to (absent: every namespace the webhook serves). Namespaces
    /// that are never injected (the system ones, the operator's own, those labelled
    /// `watcher.dev/injection=disabled`) never are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::label_selector_schema")]
    pub namespace_selector: Option<LabelSelector>,
}

/// The observed state of a ClusterWatcher.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterWatcherStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Hash of everything injection uses; injected pods carry it in `watcher.dev/injected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,

    /// How many namespaces it applies to now (those a same-named Watcher took over not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<i32>,

    /// While its configuration is refused (`Ready=False`, `ConfigRefused`): how many of those
    /// namespaces hold its ConfigMap with the last good configuration. 0: none was ever shipped,
    /// and the webhook admits its pods without the sidecar (which would wait for a ConfigMap
    /// that is not there), as for a Watcher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_maps_held: Option<i32>,

    /// Pods of those namespaces that ask for it, and how far they are injected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodCounts>,

    /// The ControllerRevision of the current spec, in the operator's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,

    /// The ControllerRevision of the spec every pod carried when the current rollout began
    /// (see the Watcher's `status.stableRevision`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,

    /// `Ready`: its ConfigMaps and status are reconciled to the current generation;
    /// `SidecarsUpdated`: how far a rollout is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The kind, as pods' owner references and the effective Watchers name it.
pub const CLUSTER_WATCHER_KIND: &str = "ClusterWatcher";

impl ClusterWatcher {
    /// Whether it applies to a namespace with these labels (the never-injected namespaces and
    /// a same-named Watcher are for the caller). A selector the API would refuse matches
    /// nothing.
    pub fn selects_namespace(&self, labels: &BTreeMap<String, String>) -> bool {
        use kube::core::{Selector, SelectorExt};
        match &self.spec.namespace_selector {
            None => true,
            Some(selector) => Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels)),
        }
    }

    /// What in its spec kube-apiserver before 1.25 let through and would make it useless: its
    /// Watcher spec's problems, and a `namespaceSelector` the API would refuse.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = self.spec.watcher.problems();
        if let Some(selector) = &self.spec.namespace_selector {
            problems.extend(crate::validation::selector_problems(selector, "spec.namespaceSelector"));
        }
        problems
    }

    /// What it is in `namespace`: a Watcher of its name there, with its spec, owned by it (the
    /// owner reference is how [`Watcher::cluster_watcher`] tells it from a namespaced one). Its
    /// status carries nothing: the ClusterWatcher's is across namespaces.
    pub fn in_namespace(&self, namespace: &str) -> Watcher {
        // Always owned, even read from a file without a uid (the offline `inject`).
        let owner = OwnerReference {
            api_version: Self::api_version(&()).into_owned(),
            kind: Self::kind(&()).into_owned(),
            name: self.name_any(),
            uid: self.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        Watcher {
            metadata: ObjectMeta {
                name: self.metadata.name.clone(),
                namespace: Some(namespace.to_owned()),
                uid: self.metadata.uid.clone(),
                generation: self.metadata.generation,
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: self.spec.watcher.clone(),
            status: None,
        }
    }

    /// Itself as a Watcher of no namespace: the one copy that admission and the admission
    /// scope share between all the namespaces it applies in (a Watcher is kilobytes; one per
    /// namespace would make memory grow with ClusterWatchers × namespaces). Whoever puts it in
    /// a namespace's list has decided that it applies there. Of its status it carries only the
    /// stable revision, which admission reads (`updatePolicy.newPods: Stable`).
    pub fn unplaced(&self) -> Watcher {
        let mut watcher = self.in_namespace("");
        watcher.metadata.namespace = None;
        let Some(status) = self.status.as_ref() else { return watcher };
        // A configuration refused before any was shipped: its `Ready` goes with the copy, which
        // then says so ([`Watcher::unshipped_config`]) in every namespace.
        let unshipped = status.config_maps_held == Some(0);
        let ready = status.conditions.iter().find(|c| c.type_ == crate::types::READY).filter(|_| unshipped);
        if status.stable_revision.is_some() || ready.is_some() {
            watcher.status = Some(crate::WatcherStatus {
                stable_revision: status.stable_revision.clone(),
                conditions: ready.cloned().into_iter().collect(),
                ..Default::default()
            });
        }
        watcher
    }

    /// Itself as a Watcher of no namespace, with its status: what the pod reconciler counts
    /// and rolls out across the pods of every namespace it applies to.
    pub fn across_namespaces(&self) -> Watcher {
        let mut watcher = self.unplaced();
        watcher.status = self.status.as_ref().map(|s| crate::WatcherStatus {
            observed_generation: s.observed_generation,
            spec_hash: s.spec_hash.clone(),
            pods: s.pods,
            conditions: s.conditions.clone(),
            config_map_name: None,
            // A ConfigMap per namespace, none recorded here: its pods injected by 0.2.0 (no
            // configuration's hash) are judged by their spec.
            config_generation: None,
            current_revision: s.current_revision.clone(),
            stable_revision: s.stable_revision.clone(),
        });
        watcher
    }
}

impl Watcher {
    /// Whether it is one of `namespace`'s Watchers: its own namespace, or none (a
    /// ClusterWatcher's [`ClusterWatcher::unplaced`] copy, put in that namespace's list by whoever
    /// decided that it applies there).
    pub fn is_in(&self, namespace: &str) -> bool {
        self.metadata.namespace.as_deref().is_none_or(|own| own == namespace)
    }

    /// The ClusterWatcher this Watcher stands for in its namespace, when it is one of
    /// [`ClusterWatcher::in_namespace`]'s (never one read from the API server: the operator
    /// never gives a Watcher such an owner).
    pub fn cluster_watcher(&self) -> Option<&OwnerReference> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == CLUSTER_WATCHER_KIND && o.api_version == "watcher.dev/v1alpha1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster_watcher(namespace_selector: serde_json::Value) -> ClusterWatcher {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "ClusterWatcher",
            "metadata": {"name": "log-agent", "uid": "u-1", "generation": 3},
            "spec": {"container": {"name": "agent", "image": "busybox:1.36"}, "selector": {"matchLabels": {"app": "web"}},
                     "namespaceSelector": namespace_selector},
        }))
        .expect("valid ClusterWatcher")
    }

    #[test]
    fn its_namespace_selector_picks_namespaces() {
        let team = BTreeMap::from([("team".to_owned(), "payments".to_owned())]);
        assert!(cluster_watcher(serde_json::Value::Null).selects_namespace(&BTreeMap::new()), "absent: all");
        let payments = cluster_watcher(serde_json::json!({"matchLabels": {"team": "payments"}}));
        assert!(payments.selects_namespace(&team));
        assert!(!payments.selects_namespace(&BTreeMap::new()));
        let broken =
            cluster_watcher(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "Sometimes"}]}));
        assert!(!broken.selects_namespace(&team), "a selector the API refuses matches nothing");
        assert_eq!(broken.problems().len(), 1, "{:?}", broken.problems());
        assert!(broken.problems()[0].starts_with("spec.namespaceSelector.matchExpressions[0].operator"));
        assert!(payments.problems().is_empty());
    }

    #[test]
    fn in_a_namespace_it_is_a_watcher_of_its_name_that_says_whose_it_is() {
        let cluster = cluster_watcher(serde_json::Value::Null);
        let watcher = cluster.in_namespace("team-a");
        assert_eq!(watcher.metadata.name.as_deref(), Some("log-agent"));
        assert_eq!(watcher.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(watcher.spec, cluster.spec.watcher);
        assert_eq!(watcher.cluster_watcher().map(|o| o.uid.as_str()), Some("u-1"));
        assert_eq!(watcher.spec.spec_hash(), cluster.spec.watcher.spec_hash(), "pods carry the same hash");
        let across = cluster.across_namespaces();
        assert_eq!(across.metadata.namespace, None);
        assert!(across.cluster_watcher().is_some());
        let own: Watcher = serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher",
            "metadata": {"name": "log-agent", "namespace": "team-a"}, "spec": {"container": {"name": "agent"}},
        }))
        .expect("valid Watcher");
        assert!(own.cluster_watcher().is_none());
    }

    /// A refused configuration that no namespace holds (its first): the copy the webhook
    /// injects from says so, and the pods are admitted without the sidecar; where a namespace
    /// keeps an earlier good one, the copy says nothing and pods get that one.
    #[test]
    fn a_configuration_never_shipped_goes_with_the_webhooks_copy() {
        let mut cluster = cluster_watcher(serde_json::json!({}));
        cluster.spec.watcher.config_data = Some([("AGENT_RULE_X".to_owned(), "(".to_owned())].into());
        let refused = |held: i32| -> ClusterWatcherStatus {
            serde_json::from_value(serde_json::json!({"configMapsHeld": held, "conditions": [{
                "type": "Ready", "status": "False", "reason": "ConfigRefused",
                "message": "generation 3's configuration is not shipped, watcher-agent would refuse it: AGENT_RULE_X",
                "lastTransitionTime": "2026-12-07T00:00:00Z"}]}))
            .expect("a status")
        };
        cluster.status = Some(refused(0));
        let said = cluster.unplaced().unshipped_config().map(str::to_owned);
        assert!(said.as_deref().is_some_and(|s| s.contains("AGENT_RULE_X")), "{said:?}");
        cluster.status = Some(refused(2));
        assert_eq!(cluster.unplaced().unshipped_config(), None);
        cluster.status = None;
        assert_eq!(cluster.unplaced().unshipped_config(), None);
    }
}
