//! Pods as the ending controller decodes them: the fields [`super::next`] reads, each in the
//! shape k8s-openapi gives it, and nothing else. The rest of each pod is skipped while it is
//! parsed, never allocated: a Job's pod held as k8s-openapi's `Pod`, even stripped, is kilobytes
//! (every field of its spec, containers and statuses is there, empty).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use watcher_api::annotation::{EndSidecars, SidecarsCannotEnd, SidecarsEnded};

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
    /// The annotations the controller reads, once [`super::strip`] has taken them out of the
    /// metadata (never sent by the API server).
    #[serde(default, skip_serializing_if = "Marks::is_empty")]
    pub marks: Marks,
}

/// The three annotations the ending controller reads, kept apart from the metadata by
/// [`super::strip`]: three strings, where the metadata's map allocates a node for eleven
/// (half a kilobyte) in every pod cached.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Marks {
    /// `watcher.dev/end-sidecars`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_sidecars: Option<String>,
    /// `watcher.dev/sidecars-ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecars_ended: Option<String>,
    /// `watcher.dev/sidecars-cannot-end`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cannot_end: Option<String>,
}

impl Marks {
    /// Takes the three out of `annotations`.
    pub fn take(annotations: &mut BTreeMap<String, String>) -> Self {
        Self {
            end_sidecars: annotations.remove(EndSidecars::KEY),
            sidecars_ended: annotations.remove(SidecarsEnded::KEY),
            cannot_end: annotations.remove(SidecarsCannotEnd::KEY),
        }
    }

    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl EndingPod {
    /// The annotation `key`, one of the three the controller reads: in [`EndingPod::marks`]
    /// once stripped, in the metadata as decoded.
    pub fn mark(&self, key: &str) -> Option<&str> {
        let kept = match key {
            EndSidecars::KEY => &self.marks.end_sidecars,
            SidecarsEnded::KEY => &self.marks.sidecars_ended,
            SidecarsCannotEnd::KEY => &self.marks.cannot_end,
            _ => &None,
        };
        kept.as_deref().or_else(|| self.metadata.annotations.as_ref()?.get(key).map(String::as_str))
    }
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
