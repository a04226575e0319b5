//! `PodSet`: N pods that print a message (a small ReplicaSet).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;

/// The image of a PodSet's pods when `spec.image` is not set.
pub const DEFAULT_PODSET_IMAGE: &str = "busybox:1.36";

/// `count` pods that print `message` and then wait.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "watcher.dev",
    version = "v1alpha1",
    kind = "PodSet",
    namespaced,
    status = "PodSetStatus",
    category = "watcher-dev",
    derive = "PartialEq",
    doc = "A PodSet keeps count pods that print message and then wait.",
    scale(spec_replicas_path = ".spec.count", status_replicas_path = ".status.count"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.count"),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.count"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyCount"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Message", type_ = "string", json_path = ".spec.message", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PodSetSpec {
    /// How many pods to keep.
    #[schemars(range(min = 0))]
    pub count: i32,
    /// What each pod prints (its `MESSAGE` environment variable).
    pub message: String,
    /// The image of the pods (default `busybox:1.36`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Requests and limits of each pod's container (a namespace with a ResourceQuota on cpu or
    /// memory refuses a pod that states none); a change replaces the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<crate::PodResources>,
}

/// The observed state of a PodSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetStatus {
    /// Pods in phase Running.
    #[serde(default)]
    pub count: i32,
    /// Pods that are Ready.
    #[serde(default)]
    pub ready_count: i32,
    /// The message the current pods print.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: `count` pods of the current template are ready; `False` with `PodRefused` and
    /// kube-apiserver's words while it refuses the pods (retried).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
