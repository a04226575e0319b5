//! The parts of a pod that injection reads: names, labels, annotations, and which lists exist.
//!
//! Decoding only these (the rest is checked and dropped without allocating, see
//! [`crate::json`]) makes an admission several times cheaper than decoding a whole `Pod`, whose
//! `managedFields` alone become hundreds of small allocations, and states plainly what `inject`
//! depends on.

use std::collections::BTreeMap;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use watcher_api::GROUP;

use k8s_openapi::api::core::v1::{PodSecurityContext, ResourceRequirements, SecurityContext};

use crate::json::{Length, Text, Valid, narrow};
use crate::pod_security::{ContainerFacts, PodFacts};

/// A pod as `inject` sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodView {
    /// Name, namespace, labels and annotations.
    pub metadata: PodMetaView,
    /// The names in the pod's lists; `None` for a pod without a spec.
    pub spec: Option<PodSpecView>,
}

/// The metadata `inject` reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMetaView {
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
    /// The AppArmor and seccomp annotations, which Pod Security reads, in full.
    pub pod_security: Vec<(String, String)>,
    /// cluster-autoscaler's `safe-to-evict-local-volumes`, in full: the webhook merges the
    /// emptyDirs it adds into it.
    pub safe_to_evict_local_volumes: Option<String>,
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
    /// Volumes, by name and type.
    pub volumes: Option<Vec<VolumeView>>,
    /// Image pull secrets.
    pub image_pull_secrets: Option<Vec<Named>>,
    /// `shareProcessNamespace`, as the pod says it.
    pub share_process_namespace: Option<bool>,
    /// `hostPID`: a pod in the host's process namespace cannot share its own.
    pub host_pid: Option<bool>,
    /// `hostNetwork` (Pod Security reads it).
    pub host_network: Option<bool>,
    /// `hostIPC` (Pod Security reads it).
    pub host_ipc: Option<bool>,
    /// `hostUsers` (Pod Security reads it).
    pub host_users: Option<bool>,
    /// `os` (Pod Security reads its name).
    pub os: Option<OsView>,
    /// The pod's `securityContext`.
    pub security_context: Option<Box<PodSecurityContext>>,
    /// `runtimeClassName` (Pod Security admission may exempt a RuntimeClass).
    pub runtime_class_name: Option<String>,
    /// `restartPolicy`: `Never` and `OnFailure` pods are meant to end.
    pub restart_policy: Option<String>,
    /// `activeDeadlineSeconds` (a ResourceQuota's `Terminating` scope).
    pub active_deadline_seconds: Option<i64>,
    /// `priorityClassName` (a ResourceQuota's `PriorityClass` scope).
    pub priority_class_name: Option<String>,
}

/// A volume: its name, and its type (the name of its source field).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeView {
    /// The volume's name.
    pub name: String,
    /// Its source field (`emptyDir`, `hostPath`, ...); empty when it has none.
    pub kind: String,
}

/// A pod's `os`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OsView {
    /// `linux` or `windows`.
    pub name: String,
}

/// A container port, as far as Pod Security reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortView {
    /// The port on the host, if any.
    pub host_port: Option<i32>,
}

/// A probe or lifecycle handler, as far as Pod Security reads it: the hosts it names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HandlerView {
    /// `httpGet`.
    pub http_get: Option<HostView>,
    /// `tcpSocket`.
    pub tcp_socket: Option<HostView>,
}

/// The `host` of an `httpGet` or `tcpSocket`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostView {
    /// The host.
    pub host: Option<String>,
}

/// A container's `lifecycle`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LifecycleView {
    /// `postStart`.
    pub post_start: Option<HandlerView>,
    /// `preStop`.
    pub pre_stop: Option<HandlerView>,
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
    /// Its `securityContext`.
    pub security_context: Option<Box<SecurityContext>>,
    /// Its ports (their `hostPort`).
    pub ports: Option<Vec<PortView>>,
    // The probes, the lifecycle and the resources are boxed: a container is 216 bytes, not
    // 504, so a pod's list of them stays under glibc's large requests (1 KiB).
    /// `livenessProbe`.
    pub liveness_probe: Option<Box<HandlerView>>,
    /// `readinessProbe`.
    pub readiness_probe: Option<Box<HandlerView>>,
    /// `startupProbe`.
    pub startup_probe: Option<Box<HandlerView>>,
    /// `lifecycle`.
    pub lifecycle: Option<Box<LifecycleView>>,
    /// `resources` (the namespace's LimitRanges and ResourceQuotas read them).
    pub resources: Option<Box<ResourceRequirements>>,
    /// `restartPolicy` (an init container with `Always` is a native sidecar).
    pub restart_policy: Option<String>,
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
narrow!(PodMetaView {
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
    host_network: "hostNetwork",
    host_ipc: "hostIPC",
    host_users: "hostUsers",
    os: "os",
    security_context: "securityContext",
    runtime_class_name: "runtimeClassName",
    restart_policy: "restartPolicy",
    active_deadline_seconds: "activeDeadlineSeconds",
    priority_class_name: "priorityClassName",
});
narrow!(OsView { name: "name" });
narrow!(PortView { host_port: "hostPort" });
narrow!(HandlerView { http_get: "httpGet", tcp_socket: "tcpSocket" });
narrow!(HostView { host: "host" });
narrow!(LifecycleView { post_start: "postStart", pre_stop: "preStop" });
narrow!(Named { name: "name" });
narrow!(ContainerView {
    name: "name",
    image: "image",
    volume_mounts: "volumeMounts",
    volume_devices: "volumeDevices",
    env: "env",
    security_context: "securityContext",
    ports: "ports",
    liveness_probe: "livenessProbe",
    readiness_probe: "readinessProbe",
    startup_probe: "startupProbe",
    lifecycle: "lifecycle",
    resources: "resources",
    restart_policy: "restartPolicy",
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

impl ContainerView {
    /// The container as Pod Security reads it.
    pub fn security_facts(&self) -> ContainerFacts<'_> {
        let probes = [self.liveness_probe.as_deref(), self.readiness_probe.as_deref(), self.startup_probe.as_deref()];
        let lifecycle = self.lifecycle.iter().flat_map(|l| [l.post_start.as_ref(), l.pre_stop.as_ref()]);
        ContainerFacts {
            name: &self.name,
            security: self.security_context.as_deref().map(std::borrow::Cow::Borrowed),
            host_ports: self.ports.iter().flatten().filter_map(|p| p.host_port.filter(|p| *p != 0)).collect(),
            probe_hosts: probes.into_iter().chain(lifecycle).flatten().flat_map(HandlerView::hosts).collect(),
        }
    }
}

impl HandlerView {
    /// The hosts its `httpGet` and `tcpSocket` name.
    fn hosts(&self) -> impl Iterator<Item = &str> {
        let http = self.http_get.as_ref().and_then(|h| h.host.as_deref());
        let tcp = self.tcp_socket.as_ref().and_then(|t| t.host.as_deref());
        http.into_iter().chain(tcp).filter(|h| !h.is_empty())
    }
}

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
                        } else if *key == *watcher_api::SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION {
                            let value = map.next_value::<Option<Text<'de>>>()?.unwrap_or_default();
                            read.bytes += key.len() + value.len();
                            read.other_keys.push(key.0.into_owned());
                            read.safe_to_evict_local_volumes = Some(value.0.into_owned());
                        } else if crate::pod_security::is_pod_security_annotation(&key) {
                            let value = map.next_value::<Option<Text<'de>>>()?.unwrap_or_default();
                            read.bytes += key.len() + value.len();
                            read.other_keys.push(key.0.clone().into_owned());
                            read.pod_security.push((key.0.into_owned(), value.0.into_owned()));
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

impl<'de> Deserialize<'de> for VolumeView {
    /// The name, and the first other field that is not null: the volume's source.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct VolumeVisitor;
        impl<'de> Visitor<'de> for VolumeVisitor {
            type Value = VolumeView;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object (Volume)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VolumeView, A::Error> {
                let mut volume = VolumeView::default();
                let mut named = false;
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    if &*key == "name" {
                        if named {
                            return Err(serde::de::Error::duplicate_field("name"));
                        }
                        named = true;
                        volume.name = map.next_value::<Option<String>>()?.unwrap_or_default();
                    } else if map.next_value::<Option<Valid>>()?.is_some() && volume.kind.is_empty() {
                        volume.kind = key.0.into_owned();
                    }
                }
                Ok(volume)
            }
        }
        deserializer.deserialize_map(VolumeVisitor)
    }
}

static NO_STRINGS: BTreeMap<String, String> = BTreeMap::new();

impl PodView {
    /// The pod as Pod Security reads it: init containers first, then containers.
    pub fn security_facts(&self) -> PodFacts<'_> {
        let Some(spec) = &self.spec else { return PodFacts::default() };
        let containers =
            spec.init_containers.iter().flatten().chain(&spec.containers).map(ContainerView::security_facts);
        PodFacts {
            security_context: spec.security_context.as_deref().map(std::borrow::Cow::Borrowed),
            host_network: spec.host_network == Some(true),
            host_pid: spec.host_pid == Some(true),
            host_ipc: spec.host_ipc == Some(true),
            host_users: spec.host_users,
            windows: spec.os.as_ref().is_some_and(|os| os.name == "windows"),
            annotations: self.metadata.annotations.pod_security.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            volumes: spec.volumes.iter().flatten().map(|v| (v.name.as_str(), v.kind.as_str())).collect(),
            containers: containers.collect(),
        }
    }

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
