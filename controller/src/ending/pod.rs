//! Pods as the ending controller decodes them: the fields [`super::next`] reads, each in the
//! shape k8s-openapi gives it, and nothing else. The rest of each pod is skipped while it is
//! parsed, never allocated: a Job's pod held as k8s-openapi's `Pod`, even stripped, is kilobytes
//! (every field of its spec, containers and statuses is there, empty).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// A pod, reduced as it is decoded.
#[derive(kube::Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[resource(inherit = Pod)]
pub struct EndingPod {
    /// Its metadata ([`super::strip`] keeps what is read).
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Spec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

/// What the controller reads of a pod's spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// Each container's name, image and mount of the ended file, in order (a patch tests them
    /// by index).
    #[serde(default)]
    pub containers: Vec<Container>,
    /// The supervisor's init container (`watcher-supervise`), for its image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<Os>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// `spec.os`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Os {
    pub name: String,
}

/// A container's name, image and volume mounts (by name).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<Mount>>,
}

/// A volume mount, by the volume's name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mount {
    pub name: String,
}

/// What the kubelet reports: the phase, and whether each container ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
}

/// One container as the kubelet reports it: whether it ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<State>,
}

/// A container's state: only whether it ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminated: Option<Terminated>,
}

/// How and when it ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terminated {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}
