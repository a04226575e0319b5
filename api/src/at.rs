//! `At`: run a command once, in a pod, at a given time ("cloud native at").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;

/// The image an At runs in when `spec.image` is not set.
pub const DEFAULT_AT_IMAGE: &str = "busybox:1.36";

/// A command run once, in a pod, at `schedule`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "watcher.dev",
    version = "v1alpha1",
    kind = "At",
    namespaced,
    status = "AtStatus",
    category = "watcher-dev",
    derive = "PartialEq",
    doc = "An At runs a command once, with /bin/sh -c, in a pod created at the scheduled time.",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AtSpec {
    /// When to run, in RFC 3339 with any offset, e.g. `2026-11-21T10:12:00Z`.
    #[schemars(extend("format" = "date-time"))]
    pub schedule: String,

    /// The command, run with `/bin/sh -c`.
    #[schemars(length(min = 1))]
    pub command: String,

    /// The image to run the command in (default `busybox:1.36`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// If the At is first seen later than `schedule` plus this many seconds, it fails with
    /// reason `Missed` and no pod is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,

    /// Passed to the pod: how long the command may run before it is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,

    /// Delete the pod (not the At) this long after it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i64>,

    /// Requests and limits of the pod's container (a namespace with a ResourceQuota on cpu or
    /// memory refuses a pod that states none), e.g. `{requests: {cpu: 10m, memory: 16Mi},
    /// limits: {cpu: 100m, memory: 32Mi}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<crate::PodResources>,
}

/// The phase of an At: `Pending → Running → Succeeded | Failed`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AtPhase {
    /// Waiting for the schedule, or for the pod to start.
    #[default]
    Pending,
    /// The pod runs the command.
    Running,
    /// The command exited 0.
    Succeeded,
    /// The command failed, the pod was lost, the schedule was missed or is invalid.
    Failed,
}

impl AtPhase {
    /// Succeeded and Failed are final.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// The observed state of an At.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AtStatus {
    /// Pending, Running, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AtPhase>,
    /// The pod that runs (or ran) the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// When the command started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the command finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The command's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// A CamelCase reason for the phase, e.g. `Missed`, `InvalidSchedule`, `PodDeleted`,
    /// `PodRefused` (kube-apiserver refused the pod: the message has its words; retried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable explanation of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` mirrors the phase for tools that read conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
