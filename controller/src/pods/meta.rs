//! Pods as the pod reconciler decodes them from its list and watch: the metadata it reads (no
//! managed fields, only the operator's annotations), and the spec and status only of pods that
//! carry a Watcher. The rest of each pod is skipped while it is parsed, never allocated: at
//! 100,000 pods, pages of 500 cost little more memory than pages of 100 did decoded whole.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use watcher_api::annotation;

/// A pod, reduced as it is decoded (see the module's documentation).
#[derive(kube::Resource, Clone, Debug, Default, PartialEq, Serialize)]
#[resource(inherit = Pod)]
pub struct PodMeta {
    /// Name, namespace, uid, resourceVersion, timestamps, labels, owners, and the
    /// `watcher.dev/` annotations.
    pub metadata: ObjectMeta,
    /// The containers of a pod that carries a Watcher (`watcher.dev/injected`); `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<Spec>,
    /// What the kubelet reports of them; `None` for a pod that carries no Watcher.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

/// The containers of a pod: a k8s-openapi `PodSpec` decoded whole is kilobytes (a `Volume` alone
/// is 3 KiB inline), and a list page holds hundreds of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// The app containers and regular sidecars.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Init containers, native sidecars among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
}

/// A container's name and image.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Container {
    /// The container's name.
    pub name: String,
    /// Its image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// What the kubelet reports of a pod's containers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Of `spec.containers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
    /// Of `spec.initContainers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_container_statuses: Vec<ContainerStatus>,
}

/// One container as the kubelet reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerStatus {
    /// The container's name.
    pub name: String,
    /// The image it runs (as the runtime names it: `docker.io/library/busybox:1.37`).
    #[serde(default)]
    pub image: String,
    /// Whether it passes its readiness probe.
    #[serde(default)]
    pub ready: bool,
    /// Whether it is running now, or why it waits.
    #[serde(default)]
    pub state: State,
}

/// A container's `state`: running (`state.running` present), or waiting and why; terminated or
/// absent is neither.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// `running` is present.
    #[serde(default, deserialize_with = "present", serialize_with = "as_present", skip_serializing_if = "is_false")]
    pub running: bool,
    /// `waiting`, with the kubelet's reason and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// Why a container waits, as the kubelet says it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// `ContainerCreating`, `CreateContainerConfigError`, `CrashLoopBackOff`, ...
    #[serde(default)]
    pub reason: String,
    /// The kubelet's words (cut at [`MESSAGE_BYTES`]).
    #[serde(default, deserialize_with = "bounded")]
    pub message: String,
}

/// The most bytes of a kubelet's waiting message kept per container.
pub(super) const MESSAGE_BYTES: usize = 512;

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<IgnoredAny>::deserialize(deserializer)?.is_some())
}

fn as_present<S: serde::Serializer>(_: &bool, serializer: S) -> Result<S::Ok, S::Error> {
    serde_json::json!({}).serialize(serializer)
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn bounded<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let mut message = Option::<String>::deserialize(deserializer)?.unwrap_or_default();
    if message.len() > MESSAGE_BYTES {
        let mut end = MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    Ok(message)
}

impl ContainerStatus {
    /// Whether it is running now.
    pub fn running(&self) -> bool {
        self.state.running
    }
}

/// The metadata fields the pod reconciler reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "operator_annotations")]
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

impl From<Metadata> for ObjectMeta {
    fn from(m: Metadata) -> Self {
        Self {
            name: m.name,
            generate_name: m.generate_name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references,
            ..Self::default()
        }
    }
}

/// The `watcher.dev/` annotations; every other value (kubectl's last applied configuration,
/// often kilobytes) is skipped unread.
fn operator_annotations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Annotations;
    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            let prefix = format!("{}/", watcher_api::GROUP);
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key.starts_with(&prefix) {
                    kept.insert(key.into_owned(), map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Some(kept))
        }
    }
    deserializer.deserialize_option(Annotations)
}

impl<'de> Deserialize<'de> for PodMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = PodMeta;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Pod")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PodMeta, A::Error> {
                let mut pod = PodMeta::default();
                // kube-apiserver writes metadata first; should a spec or status come before it,
                // it is kept (nothing is known yet to skip it by).
                let mut seen_metadata = false;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let wanted = !seen_metadata
                        || pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(annotation::Injected::KEY));
                    match key.as_ref() {
                        "metadata" => {
                            pod.metadata = map.next_value::<Metadata>()?.into();
                            seen_metadata = true;
                        }
                        "spec" if wanted => pod.spec = map.next_value()?,
                        "status" if wanted => pod.status = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(pod)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::PodMeta;

    fn stored(name: &str) -> Value {
        let path = format!("{}/fixtures/stored-pods/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
    }

    /// The real stored pods (1.24 and 1.36): what the reconciler reads is kept exactly, kubectl's
    /// last applied configuration and the managed fields are not.
    #[test]
    fn an_injected_pod_keeps_what_the_reconciler_reads() {
        for name in ["pod-1.24-plain.json", "pod-1.36-plain.json", "pod-1.24-limits.json", "pod-1.36-limits.json"] {
            let mut value = stored(name);
            value["metadata"]["managedFields"] = json!([{"manager": "kubectl", "fieldsType": "FieldsV1",
                                                          "fieldsV1": {"f:metadata": {}}}]);
            value["status"]["containerStatuses"] = json!([{"name": "app", "image": "docker.io/library/busybox:1.36",
                "imageID": "x", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-11-21T10:00:00Z"}}}]);
            let full: k8s_openapi::api::core::v1::Pod = serde_json::from_value(value.clone()).expect("Pod");
            let pod: PodMeta = serde_json::from_value(value).expect("PodMeta");
            let (spec, full_spec) = (pod.spec.expect("spec"), full.spec.expect("spec"));
            let names = |containers: &[super::Container]| -> Vec<(String, Option<String>)> {
                containers.iter().map(|c| (c.name.clone(), c.image.clone())).collect()
            };
            let full_names = |containers: &[k8s_openapi::api::core::v1::Container]| -> Vec<(String, Option<String>)> {
                containers.iter().map(|c| (c.name.clone(), c.image.clone())).collect()
            };
            assert_eq!(names(&spec.containers), full_names(&full_spec.containers), "{name}");
            assert_eq!(
                names(&spec.init_containers),
                full_names(full_spec.init_containers.as_deref().unwrap_or_default())
            );
            let reported = &pod.status.expect("status").container_statuses[0];
            assert_eq!((reported.name.as_str(), reported.ready, reported.running()), ("app", true, true));
            assert_eq!(pod.metadata.labels, full.metadata.labels);
            assert_eq!(pod.metadata.creation_timestamp, full.metadata.creation_timestamp);
            assert_eq!(pod.metadata.resource_version, full.metadata.resource_version);
            assert!(pod.metadata.managed_fields.is_none());
            let kept: Vec<&str> = pod.metadata.annotations.iter().flatten().map(|(k, _)| k.as_str()).collect();
            assert_eq!(kept, ["watcher.dev/inject", "watcher.dev/injected"], "{name}");
        }
    }

    /// A pod that carries no Watcher: its spec and status are skipped, its metadata kept.
    #[test]
    fn a_pod_without_watchers_is_metadata_only() {
        let mut value = stored("pod-1.36-plain.json");
        value["metadata"]["annotations"].as_object_mut().expect("annotations").remove("watcher.dev/injected");
        value["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]);
        let pod: PodMeta = serde_json::from_value(value).expect("PodMeta");
        assert!(pod.spec.is_none() && pod.status.is_none());
        assert_eq!(pod.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(pod.metadata.annotations.expect("annotations").len(), 1, "watcher.dev/inject");
        // Written with the spec first (kube-apiserver never does): kept, nothing known to skip it by.
        let spec_first =
            r#"{"spec": {"containers": [{"name": "app"}]}, "metadata": {"name": "p", "annotations": null}}"#;
        let pod: PodMeta = serde_json::from_str(spec_first).expect("PodMeta");
        assert_eq!(pod.spec.map(|s| s.containers.len()), Some(1));
        assert_eq!(pod.metadata.annotations, None);
    }
}
