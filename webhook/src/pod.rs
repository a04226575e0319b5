//! The parts of a pod that injection reads: names, labels, annotations, and which lists exist.
//!
//! Decoding only these (the rest is checked and dropped without allocating, see
//! [`crate::json`]) makes an admission several times cheaper than decoding a whole `Pod`, whose
//! `managedFields` alone become hundreds of small allocations, and states plainly what `inject`
//! depends on.

use std::collections::BTreeMap;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use watcher_api::GROUP;

use crate::json::{Length, Text, narrow};

/// A pod as `inject` sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodView {
    /// Name, namespace, labels and annotations.
    pub metadata: PodMeta,
    /// The names in the pod's lists; `None` for a pod without a spec.
    pub spec: Option<PodSpecView>,
}

/// The metadata `inject` reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMeta {
    /// Absent for pods made from `generateName`.
    pub name: Option<String>,
    /// The name prefix of pods made by controllers.
    pub generate_name: Option<String>,
    /// May be absent: the request's namespace is the one that counts.
    pub namespace: Option<String>,
    /// Labels, matched against Watcher selectors.
    pub labels: Option<BTreeMap<String, String>>,
    /// The pod's annotations as injection reads them.
    pub annotations: Annotations,
}

/// A pod's annotations: the `watcher.dev/` entries in full (`watcher.dev/inject`,
/// `watcher.dev/injected`, ...), and of the others (`kubectl`'s last applied configuration among
/// them) only their keys and sizes: their values are checked and dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Annotations {
    /// The `watcher.dev/` entries; `None` when the pod has no annotations object at all (the
    /// patch must then create it).
    pub own: Option<BTreeMap<String, String>>,
    /// The keys of the other annotations.
    pub other_keys: Vec<String>,
    /// The bytes of every key and value, as kube-apiserver counts them against its limit.
    pub bytes: usize,
}

/// kube-apiserver's limit on the bytes of a pod's annotations, keys and values together.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

impl Annotations {
    /// Whether the pod has an annotation `key`.
    pub fn has(&self, key: &str) -> bool {
        self.own.as_ref().is_some_and(|own| own.contains_key(key)) || self.other_keys.iter().any(|k| k == key)
    }
}

/// The lists of a pod spec, by the names of their entries. `None` means the list is absent
/// (the patch must create it), `Some(empty)` that it exists and is empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodSpecView {
    /// Regular containers.
    pub containers: Vec<ContainerView>,
    /// Init containers (native sidecars among them).
    pub init_containers: Option<Vec<ContainerView>>,
    /// Volumes.
    pub volumes: Option<Vec<Named>>,
    /// Image pull secrets.
    pub image_pull_secrets: Option<Vec<Named>>,
    /// `shareProcessNamespace`, as the pod says it.
    pub share_process_namespace: Option<bool>,
    /// `hostPID`: a pod in the host's process namespace cannot share its own.
    pub host_pid: Option<bool>,
}

/// A list entry, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Named {
    /// The entry's name.
    pub name: String,
}

/// A container: its name and image, and what a Watcher may share or carry of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerView {
    /// The container's name.
    pub name: String,
    /// Its image, as written.
    pub image: Option<String>,
    /// Its volumeMounts; `None` when it has no such list.
    pub volume_mounts: Option<Vec<MountView>>,
    /// Its volumeDevices (a mount may not use their names or paths).
    pub volume_devices: Option<Vec<DeviceView>>,
    /// Its `env`.
    pub env: Option<Vec<EnvView>>,
}

/// A volumeMount, every field of it (a shared mount is copied as the app has it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MountView {
    /// The volume's name.
    pub name: String,
    /// Where it is mounted.
    pub mount_path: String,
    /// Whether it is read-only.
    pub read_only: Option<bool>,
    /// `recursiveReadOnly`.
    pub recursive_read_only: Option<String>,
    /// A path within the volume.
    pub sub_path: Option<String>,
    /// A path within the volume, with `$(VAR)` expansions.
    pub sub_path_expr: Option<String>,
    /// `mountPropagation`.
    pub mount_propagation: Option<String>,
}

/// A volumeDevice, by name and path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceView {
    /// The volume's name.
    pub name: String,
    /// The device's path in the container.
    pub device_path: String,
}

/// An environment variable, as the container has it (`valueFrom` kept whole, whatever its
/// source).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvView {
    /// The name.
    pub name: String,
    /// A literal value.
    pub value: Option<String>,
    /// Where the value comes from.
    pub value_from: Option<serde_json::Value>,
}

narrow!(PodView { metadata: "metadata", spec: "spec" });
narrow!(PodMeta {
    name: "name",
    generate_name: "generateName",
    namespace: "namespace",
    labels: "labels",
    annotations: "annotations" => read_annotations,
});
narrow!(PodSpecView {
    containers: "containers",
    init_containers: "initContainers",
    volumes: "volumes",
    image_pull_secrets: "imagePullSecrets",
    share_process_namespace: "shareProcessNamespace",
    host_pid: "hostPID",
});
narrow!(Named { name: "name" });
narrow!(ContainerView {
    name: "name",
    image: "image",
    volume_mounts: "volumeMounts",
    volume_devices: "volumeDevices",
    env: "env",
});
narrow!(MountView {
    name: "name",
    mount_path: "mountPath",
    read_only: "readOnly",
    recursive_read_only: "recursiveReadOnly",
    sub_path: "subPath",
    sub_path_expr: "subPathExpr",
    mount_propagation: "mountPropagation",
});
narrow!(DeviceView { name: "name", device_path: "devicePath" });
narrow!(EnvView { name: "name", value: "value", value_from: "valueFrom" });

impl MountView {
    /// The mount as JSON, every field it has.
    pub fn to_json(&self) -> serde_json::Value {
        let mut fields = serde_json::Map::new();
        fields.insert("name".into(), self.name.clone().into());
        fields.insert("mountPath".into(), self.mount_path.clone().into());
        let optional = [
            ("readOnly", self.read_only.map(serde_json::Value::Bool)),
            ("recursiveReadOnly", self.recursive_read_only.clone().map(Into::into)),
            ("subPath", self.sub_path.clone().map(Into::into)),
            ("subPathExpr", self.sub_path_expr.clone().map(Into::into)),
            ("mountPropagation", self.mount_propagation.clone().map(Into::into)),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                fields.insert(key.into(), value);
            }
        }
        serde_json::Value::Object(fields)
    }
}

/// Reads an annotations object (or `null`): the `watcher.dev/` entries, the other keys, and the
/// bytes of all.
fn read_annotations<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Annotations, A::Error> {
    struct Read(Annotations);
    impl<'de> Deserialize<'de> for Read {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct ReadVisitor;
            impl<'de> Visitor<'de> for ReadVisitor {
                type Value = Read;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a map of annotations")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
                    let mut read = Annotations { own: Some(BTreeMap::new()), ..Annotations::default() };
                    while let Some(key) = map.next_key::<Text<'de>>()? {
                        if key.strip_prefix(GROUP).is_some_and(|name| name.starts_with('/')) {
                            let value = map.next_value::<Option<Text<'de>>>()?.unwrap_or_default();
                            read.bytes += key.len() + value.len();
                            read.own.get_or_insert_default().insert(key.0.into_owned(), value.0.into_owned());
                        } else {
                            // Only its size: a value such as kubectl's last applied configuration
                            // is never copied.
                            read.bytes += key.len() + map.next_value::<Length>()?.0;
                            read.other_keys.push(key.0.into_owned());
                        }
                    }
                    Ok(Read(read))
                }
            }
            deserializer.deserialize_map(ReadVisitor)
        }
    }
    Ok(map.next_value::<Option<Read>>()?.map(|read| read.0).unwrap_or_default())
}

static NO_STRINGS: BTreeMap<String, String> = BTreeMap::new();

impl PodView {
    /// The pod's annotations (empty when it has none).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        self.metadata.annotations.own.as_ref().unwrap_or(&NO_STRINGS)
    }

    /// The pod's labels (empty when it has none).
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.metadata.labels.as_ref().unwrap_or(&NO_STRINGS)
    }

    /// The pod's name, or its `generateName` prefix, for messages.
    pub fn display_name(&self) -> &str {
        self.metadata.name.as_deref().or(self.metadata.generate_name.as_deref()).unwrap_or("<unnamed>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_inject_needs_from_a_real_pod() {
        let review: serde_json::Value = serde_json::from_str(include_str!(
            "../fixtures/admission-review/pod-create-init-and-existing-watcher-container.json"
        ))
        .expect("fixture");
        let pod: PodView = serde_json::from_value(review["request"]["object"].clone()).expect("a pod");
        assert_eq!(pod.display_name(), "with-init");
        assert!(pod.labels().is_empty() && pod.metadata.labels.is_none());
        let spec = pod.spec.expect("spec");
        let names = |list: &[ContainerView]| list.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&spec.containers), ["app", "watcher"]);
        assert!(spec.containers.iter().all(|c| c.image.is_some()), "images are read");
        assert_eq!(spec.init_containers.as_deref().map(names), Some(vec!["setup".to_owned()]));
        let volumes: Vec<_> = spec.volumes.iter().flatten().map(|v| v.name.clone()).collect();
        assert_eq!(volumes, ["kube-api-access-zc9s7"]);
        assert_eq!(spec.image_pull_secrets, None);
    }

    /// The review path reads pods with `crate::json`; every other caller with serde's own
    /// deserializers. Both read the captured pods alike.
    #[test]
    fn both_readers_agree_on_the_captured_pods() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/admission-review");
        let mut read = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let review: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("readable")).expect("JSON");
            let object = &review["request"]["object"];
            let by_serde: PodView = serde_json::from_value(object.clone()).expect("a pod");
            let by_json: PodView = crate::json::from_str(&object.to_string()).expect("a pod");
            assert_eq!(by_json, by_serde, "{}", path.display());
            read += 1;
        }
        assert_eq!(read, 4, "every capture read");
    }

    /// `kubectl apply` leaves its last applied configuration among the annotations: dropped.
    #[test]
    fn only_the_operators_own_annotations_are_kept() {
        let review: serde_json::Value =
            serde_json::from_str(include_str!("../fixtures/admission-review/pod-create-named-annotated.json"))
                .expect("fixture");
        let object = &review["request"]["object"];
        assert!(object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string());
        let pod: PodView = crate::json::from_str(&object.to_string()).expect("a pod");
        let keys: Vec<_> = pod.annotations().keys().collect();
        assert_eq!(keys, ["watcher.dev/inject"]);
        let bare: PodView =
            serde_json::from_value(serde_json::json!({"metadata": {"annotations": {"a": "b"}}})).expect("a pod");
        assert_eq!(bare.metadata.annotations.own, Some(BTreeMap::new()), "the object is there, empty");
        assert_eq!(bare.metadata.annotations.other_keys, ["a"]);
        assert_eq!(bare.metadata.annotations.bytes, 2);
    }

    #[test]
    fn wrong_shapes_are_errors() {
        let bad = serde_json::json!({"spec": {"containers": "nginx"}});
        assert!(serde_json::from_value::<PodView>(bad).is_err());
        let pod: PodView =
            serde_json::from_value(serde_json::json!({"metadata": {"generateName": "web-"}})).expect("minimal");
        assert_eq!(pod.display_name(), "web-");
        assert_eq!(pod.spec, None);
    }
}
