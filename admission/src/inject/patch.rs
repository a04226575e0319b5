//! The patch an admission writes: JSON-patch operations against one pod, each path valid for
//! the pod as the operations before it leave it (a list created before its first entry is
//! appended, a name taken once).

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use k8s_openapi::api::core::v1::ResourceRequirements;
use serde_json::Value;
use watcher_api::{SUPERVISOR_NAME, Written};

use super::ops::{Op, Patch, Sidecar};
use super::{app, ending, to_value};
use crate::PodView;
use crate::pod::{Annotations, ContainerView, PodSpecView};

/// Patch operations against one pod, tracking which lists exist and which names are taken so
/// every path is valid for the pod as the earlier operations leave it.
pub(super) struct PodPatch<'a> {
    pub(super) ops: Patch,
    pub(super) spec: Option<&'a PodSpecView>,
    pub(super) annotations: &'a Annotations,
    pub(super) containers: &'a [ContainerView],
    /// The pod's volumes, then those the Watchers add; the first `pod_volumes` are the pod's.
    pub(super) volume_names: Vec<&'a str>,
    pub(super) pod_volumes: usize,
    /// Volumes whose names the patch made.
    pub(super) owned_volumes: Vec<String>,
    /// The emptyDirs added, for cluster-autoscaler's annotation.
    pub(super) added_empty_dirs: Vec<&'a str>,
    pub(super) secret_names: Vec<&'a str>,
    pub(super) has_containers: bool,
    pub(super) has_init_containers: bool,
    pub(super) has_volumes: bool,
    pub(super) has_pull_secrets: bool,
    /// Init containers inserted before the pod's own so far.
    pub(super) inserted_init_containers: usize,
    /// Each container's mounts, read from the pod when first needed.
    pub(super) app_mounts: Option<Vec<Mounts>>,
    /// Annotations added for Watchers' `podAnnotations`, and the bytes of all the pod's.
    pub(super) added_annotations: Vec<(&'a str, &'a str)>,
    pub(super) annotation_bytes: usize,
    pub(super) process_shared: bool,
    pub(super) labels_exist: bool,
}

/// One container's mounts as a patch leaves them: whether its `volumeMounts` list exists, and
/// each mount's (normalised) path and volume.
type Mounts = (bool, Vec<(String, String)>);

impl<'a> PodPatch<'a> {
    pub(super) fn new(pod: &'a PodView) -> Self {
        let spec = pod.spec.as_ref();
        let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        let init = spec.and_then(|s| s.init_containers.as_deref());
        let volumes = spec.and_then(|s| s.volumes.as_deref());
        let secrets = spec.and_then(|s| s.image_pull_secrets.as_deref());
        let volume_names: Vec<&str> = volumes.unwrap_or_default().iter().map(|v| v.name.as_str()).collect();
        Self {
            // A Watcher's patch is a handful of operations: the first growths skipped.
            ops: Patch::with_capacity(8),
            spec,
            annotations: &pod.metadata.annotations,
            containers,
            pod_volumes: volume_names.len(),
            owned_volumes: Vec::new(),
            volume_names,
            added_empty_dirs: Vec::new(),
            secret_names: secrets.unwrap_or_default().iter().map(|s| s.name.as_str()).collect(),
            has_containers: !containers.is_empty(),
            has_init_containers: init.is_some(),
            has_volumes: volumes.is_some(),
            has_pull_secrets: secrets.is_some(),
            inserted_init_containers: 0,
            app_mounts: None,
            added_annotations: Vec::new(),
            annotation_bytes: pod.metadata.annotations.bytes,
            process_shared: false,
            labels_exist: pod.metadata.labels.is_some(),
        }
    }

    pub(super) fn add_container(&mut self, sidecar: Sidecar, native: bool) {
        let (path, listed) = if native {
            list_end(&mut self.has_init_containers, "initContainers")
        } else {
            list_end(&mut self.has_containers, "containers")
        };
        self.ops.push_op(Op::Sidecar { path, listed, sidecar });
    }

    /// Inserts an init container before the pod's own (after those inserted before it).
    pub(super) fn insert_init_container(&mut self, value: Value) {
        if self.has_init_containers {
            let at = self.inserted_init_containers.to_string();
            self.ops.push(add(pointer(&["spec", "initContainers", &at]), value));
        } else {
            self.ops.push(add(pointer(&["spec", "initContainers"]), Value::Array(vec![value])));
            self.has_init_containers = true;
        }
        self.inserted_init_containers += 1;
    }

    /// Whether the pod itself (not a Watcher) has a volume `name`.
    pub(super) fn pod_has_volume(&self, name: &str) -> bool {
        self.volume_names.iter().take(self.pod_volumes).any(|v| *v == name)
    }

    /// Adds `volume` (copied only where it goes in), unless the pod or the patch has one of
    /// that name.
    pub(super) fn add_volume(&mut self, name: &'a str, volume: &Value) {
        if !self.has_volume(name) {
            self.volume_names.push(name);
            if volume.get("emptyDir").is_some() {
                self.added_empty_dirs.push(name);
            }
            append(&mut self.ops, &mut self.has_volumes, "volumes", volume.clone());
        }
    }

    /// Adds the volume of the Watcher spec `spec` (shared, not copied), unless the pod or the
    /// patch has one of that name.
    pub(super) fn add_spec_volume(&mut self, name: &'a str, spec: &Arc<Written>) {
        let Some(volume) = spec.volume() else { return };
        if !self.has_volume(name) {
            self.volume_names.push(name);
            if volume.get("emptyDir").is_some() {
                self.added_empty_dirs.push(name);
            }
            let (path, listed) = list_end(&mut self.has_volumes, "volumes");
            self.ops.push_op(Op::Volume { path, listed, spec: Arc::clone(spec) });
        }
    }

    /// Whether the pod, or the patch so far, has a volume `name`.
    pub(super) fn has_volume(&self, name: &str) -> bool {
        self.volume_names.contains(&name) || self.owned_volumes.iter().any(|v| v == name)
    }

    /// Adds a volume whose name the patch made (not the pod's or a Watcher's), unless a volume of
    /// that name is there already.
    pub(super) fn add_owned_volume(&mut self, name: String, volume: Value) {
        if !self.has_volume(&name) {
            self.owned_volumes.push(name);
            append(&mut self.ops, &mut self.has_volumes, "volumes", volume);
        }
    }

    pub(super) fn add_pull_secret(&mut self, name: &'a str, secret: Value) {
        if !self.secret_names.contains(&name) {
            self.secret_names.push(name);
            append(&mut self.ops, &mut self.has_pull_secrets, "imagePullSecrets", secret);
        }
    }

    pub(super) fn app_mounts(&mut self) -> &mut Vec<Mounts> {
        let containers = self.containers;
        self.app_mounts.get_or_insert_with(|| {
            containers
                .iter()
                .map(|c| {
                    let mounts = c.volume_mounts.iter().flatten();
                    let entries = mounts.map(|m| (app::normal(&m.mount_path).to_owned(), m.name.clone())).collect();
                    (c.volume_mounts.is_some(), entries)
                })
                .collect()
        })
    }

    /// The volume that the pod's container `index` mounts at `path` (normalised), if any.
    pub(super) fn mounted_at(&mut self, index: usize, path: &str) -> Option<String> {
        let (_, mounts) = self.app_mounts().get(index)?;
        mounts.iter().find(|(p, _)| p == path).map(|(_, volume)| volume.clone())
    }

    /// Adds `mount` (of `volume` at `path`) to the pod's container `index`.
    pub(super) fn add_app_mount(&mut self, index: usize, volume: &str, path: &str, mount: Value) {
        let Some((exists, mounts)) = self.app_mounts().get_mut(index) else { return };
        mounts.push((app::normal(path).to_owned(), volume.to_owned()));
        let at = index.to_string();
        if *exists {
            self.ops.push(add(pointer(&["spec", "containers", &at, "volumeMounts", "-"]), mount));
        } else {
            *exists = true;
            let path = pointer(&["spec", "containers", &at, "volumeMounts"]);
            self.ops.push(add(path, Value::Array(vec![mount])));
        }
    }

    pub(super) fn share_process_namespace(&mut self) {
        let set = self.spec.is_some_and(|s| s.share_process_namespace == Some(true));
        if !set && !self.process_shared {
            self.ops.push(add(pointer(&["spec", "shareProcessNamespace"]), Value::Bool(true)));
        }
        self.process_shared = true;
    }

    pub(super) fn has_annotation(&self, key: &str) -> bool {
        self.annotations.has(key) || self.added_annotations.iter().any(|(k, _)| *k == key)
    }

    pub(super) fn add_annotation(&mut self, key: &'a str, value: &'a str) {
        self.annotation_bytes += key.len() + value.len();
        self.added_annotations.push((key, value));
    }

    /// Writes the Watchers' `podAnnotations` and `pairs` (the operator's own).
    pub(super) fn set_annotations(&mut self, pairs: Vec<(&str, String)>) {
        let added = self.added_annotations.iter().map(|(k, v)| (*k, (*v).to_owned()));
        let all: Vec<(&str, String)> = added.chain(pairs).collect();
        if self.annotations.own.is_some() {
            // `add` on an existing member replaces it.
            for (key, value) in all {
                self.ops.push(add(annotation_pointer(key), Value::String(value)));
            }
        } else {
            let annotations: BTreeMap<&str, String> = all.into_iter().collect();
            self.ops.push(add(pointer(&["metadata", "annotations"]), to_value(&annotations)));
        }
    }
}

impl PodPatch<'_> {
    /// The supervisor of sidecars that end with the app: its volume, and the init container
    /// that copies it there (before the pod's own init containers), unless the pod has them.
    pub(super) fn add_supervisor(&mut self, image: &str, resources: &ResourceRequirements) {
        let spec = self.spec;
        let containers = spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        if !containers.into_iter().any(|c| c.name == SUPERVISOR_NAME) {
            self.insert_init_container(ending::init_container(image, resources));
        }
        self.add_volume(SUPERVISOR_NAME, &ending::volume());
        self.add_volume(watcher_api::NO_TOKEN_VOLUME, &ending::no_token_volume());
    }

    /// cluster-autoscaler's `safe-to-evict-local-volumes` with the emptyDirs added merged into
    /// what the pod says; `None` where none was added.
    pub(super) fn local_volumes(&self) -> Option<String> {
        if self.added_empty_dirs.is_empty() {
            return None;
        }
        let own = self.annotations.safe_to_evict_local_volumes.as_deref().unwrap_or_default();
        let mut names: Vec<&str> = own.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        for added in &self.added_empty_dirs {
            if !names.contains(added) {
                names.push(added);
            }
        }
        Some(names.join(","))
    }

    /// Sets the label `key` to `value`.
    pub(super) fn add_label(&mut self, key: &str, value: &str) {
        let value = Value::String(value.to_owned());
        if self.labels_exist {
            self.ops.push(add(pointer(&["metadata", "labels", key]), value));
        } else {
            let labels = serde_json::Map::from_iter([(key.to_owned(), value)]);
            self.ops.push(add(pointer(&["metadata", "labels"]), Value::Object(labels)));
            self.labels_exist = true;
        }
    }
}

/// Appends `value` to `/spec/<list>`, creating the list when the pod has none.
pub(super) fn append(ops: &mut Patch, exists: &mut bool, list: &str, value: Value) {
    let (path, listed) = list_end(exists, list);
    ops.push(add(path, if listed { Value::Array(vec![value]) } else { value }));
}

/// Where an entry is appended to `/spec/<list>`: its end (`-`), or the list itself, created
/// with the entry as its one member (`true`) when the pod has none.
fn list_end(exists: &mut bool, list: &str) -> (PointerBuf, bool) {
    if *exists {
        (pointer(&["spec", list, "-"]), false)
    } else {
        *exists = true;
        (pointer(&["spec", list]), true)
    }
}

pub(super) fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// `/metadata/annotations/<key>`, the JSON pointer to a pod's annotation: the operator's own
/// keys (four to seven in every injection) escaped once per process, any other key as it comes.
/// Admission's patch and the in-place rollout's name annotations by it.
pub fn annotation_pointer(key: &str) -> PointerBuf {
    use watcher_api::annotation::{EndSidecars, Injected, InjectedConfig, InjectedWithoutImage, LeftOut, Sidecars};
    static OWN: std::sync::OnceLock<Vec<(&'static str, PointerBuf)>> = std::sync::OnceLock::new();
    let own = OWN.get_or_init(|| {
        let keys = [
            Injected::KEY,
            InjectedWithoutImage::KEY,
            Sidecars::KEY,
            InjectedConfig::KEY,
            LeftOut::KEY,
            EndSidecars::KEY,
            watcher_api::SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION,
            watcher_api::DEFAULT_CONTAINER_ANNOTATION,
            watcher_api::annotation::SidecarUpdated::KEY,
            watcher_api::annotation::OriginalImages::KEY,
        ];
        keys.into_iter().map(|key| (key, pointer(&["metadata", "annotations", key]))).collect()
    });
    match own.iter().find(|(own, _)| *own == key) {
        Some((_, path)) => path.clone(),
        None => pointer(&["metadata", "annotations", key]),
    }
}

/// The JSON pointer to `tokens`, each escaped (RFC 6901: `~` as `~0`, `/` as `~1`), written
/// into one string of the right size: the patch of every admission names a dozen paths.
pub(crate) fn pointer(tokens: &[&str]) -> PointerBuf {
    let escapes = |t: &str| t.bytes().filter(|b| matches!(b, b'~' | b'/')).count();
    let mut path = String::with_capacity(tokens.iter().map(|t| 1 + t.len() + escapes(t)).sum());
    for token in tokens {
        path.push('/');
        let mut rest = *token;
        while let Some(at) = rest.bytes().position(|b| b == b'~' || b == b'/') {
            path.push_str(&rest[..at]);
            path.push_str(if rest.as_bytes()[at] == b'~' { "~0" } else { "~1" });
            rest = &rest[at + 1..];
        }
        path.push_str(rest);
    }
    // Escaped as above, every path is a valid pointer; the parse only checks it.
    PointerBuf::parse(path).unwrap_or_else(|_| PointerBuf::from_tokens(tokens.iter().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same pointer as jsonptr's own escaping makes, for every kind of token a patch names.
    #[test]
    fn a_pointer_is_escaped_as_jsonptr_escapes_it() {
        let cases: [&[&str]; 5] = [
            &["metadata", "annotations", watcher_api::annotation::Injected::KEY],
            &["spec", "containers", "12", "volumeMounts", "-"],
            &["metadata", "labels", "a~b/c~/d"],
            &["metadata", "annotations", "~/~~//"],
            &[""],
        ];
        for tokens in cases {
            let ours = pointer(tokens);
            assert_eq!(ours, PointerBuf::from_tokens(tokens.iter().copied()), "{tokens:?}");
            let back: Vec<String> = ours.tokens().map(|t| t.decoded().into_owned()).collect();
            assert_eq!(back, tokens, "decoded back");
        }
        assert_eq!(
            pointer(&["metadata", "annotations", watcher_api::annotation::Injected::KEY]).as_str(),
            "/metadata/annotations/watcher.dev~1injected"
        );
    }

    /// The operator's own annotation paths, escaped once per process, are those escaped as they
    /// come; any other key is escaped as it comes.
    #[test]
    fn an_annotation_path_is_the_same_escaped_once() {
        use watcher_api::annotation::{Injected, LeftOut};
        let keys =
            [Injected::KEY, LeftOut::KEY, watcher_api::SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, "example.com/a~b"];
        for key in keys {
            assert_eq!(annotation_pointer(key), pointer(&["metadata", "annotations", key]), "{key}");
        }
    }
}
