//! `updatePolicy: InPlace`: a running pod whose injected sidecar differs from what the current
//! Watcher spec would inject **only by image** gets the new image by a patch of that one
//! container's `image` (the one field of a container kube-apiserver lets a running pod change),
//! and the new hash. Same pod, same uid, app containers untouched. Any other difference is
//! never applied half in place: such pods go the `Recreate` way.
//!
//! What the current spec would inject is asked of the webhook's own pure `inject`, on a pod
//! without the sidecar; the pod's container is compared with it field by field, allowing only
//! the fields kube-apiserver fills in by default.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use json_patch::PatchOperation;
use kube::ResourceExt;
use serde_json::{Value, json};
use watcher_api::image::{self, Rule};
use watcher_api::{
    INJECTED_ANNOTATION, NativeSidecar, ORIGINAL_IMAGES_ANNOTATION, SIDECAR_UPDATED_ANNOTATION, Watcher,
    injected_annotation_value, injected_watchers,
};
use watcher_webhook::{InjectOptions, PodView};

use super::CountedPod;

/// A pod updated in place and not running and ready with the new image this long after its
/// patch stops the rollout of its Watcher.
pub const IN_PLACE_DEADLINE: Duration = Duration::from_secs(5 * 60);

/// One injected sidecar container as the pod carries it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sidecar {
    /// The container's name.
    pub name: Box<str>,
    /// A native sidecar (in `initContainers`).
    pub init: bool,
    /// Its index in its list.
    pub index: usize,
    /// The container as stored (JSON, shared between pods alike).
    pub spec: Arc<str>,
    /// Its image, as in the spec.
    pub image: Box<str>,
    /// The image the kubelet reports while the container runs and is ready.
    pub running_image: Option<Box<str>>,
}

/// What the in-place update reads of an injected pod's spec and status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InjectedSpec {
    /// The pod's resourceVersion: the precondition of a patch.
    pub resource_version: Box<str>,
    /// The containers of the Watchers the pod carries.
    pub sidecars: Vec<Sidecar>,
    /// The volumes of those Watchers, by name (JSON as stored).
    pub volumes: Vec<(Box<str>, Arc<str>)>,
    /// The names of the pod's image pull secrets.
    pub pull_secrets: Vec<Box<str>>,
}

impl InjectedSpec {
    fn sidecar(&self, container: &str) -> Option<&Sidecar> {
        self.sidecars.iter().find(|s| &*s.name == container)
    }
}

/// How an outdated injected pod is brought up to date.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// Only the image (or nothing) differs: patch it in place.
    InPlace(Patch),
    /// Anything else differs (or cannot be told): the `Recreate` way.
    Recreate(String),
}

/// The in-place patch of one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Patch {
    /// The pod.
    pub pod: String,
    /// JSON-patch operations: the resourceVersion precondition, the container's image and the
    /// annotations.
    pub ops: Vec<PatchOperation>,
    /// The new image.
    pub image: String,
}

/// What the current spec of `watcher` injects into a pod: its container (native or not), its
/// volume, its pull secret, by the webhook's `inject` on a pod that has none of them.
fn desired(watcher: &Watcher, native: bool) -> (Option<Value>, Option<Value>) {
    let pod: PodView = serde_json::from_value(json!({
        "metadata": {"annotations": {watcher_api::INJECT_ANNOTATION: watcher.name_any()}},
        "spec": {"containers": [{"name": "\u{0}app"}]},
    }))
    .unwrap_or_default();
    let options = InjectOptions { excluded_namespaces: Vec::new(), native_sidecars: native };
    let namespace = watcher.namespace().unwrap_or_default();
    let injection = watcher_webhook::inject(&pod, &namespace, &[watcher], &options);
    let (mut container, mut volume) = (None, None);
    for op in injection.patch {
        let PatchOperation::Add(add) = op else { continue };
        let value = match add.value {
            Value::Array(mut list) if list.len() == 1 => list.remove(0),
            value => value,
        };
        match add.path.to_string().as_str() {
            "/spec/containers/-" | "/spec/initContainers" => container = Some(value),
            "/spec/volumes" => volume = Some(value),
            _ => {}
        }
    }
    (container, volume)
}

/// Fields kube-apiserver fills in when a pod is created; a stored container or volume may have
/// them where the Watcher's spec does not.
const DEFAULTED: [&str; 11] = [
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "defaultMode",
    "protocol",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
    "apiVersion",
    "scheme",
];

/// Whether `stored` is `desired` as kube-apiserver stores it: every field of `desired` equal,
/// lists of the same length, and nothing more but defaulted or empty fields.
pub fn same_but_defaults(desired: &Value, stored: &Value) -> bool {
    match (desired, stored) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, value)| same_but_defaults(value, have.get(key).unwrap_or(&Value::Null)))
                && have
                    .iter()
                    .all(|(key, value)| want.contains_key(key) || DEFAULTED.contains(&key.as_str()) || is_empty(value))
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| same_but_defaults(w, h))
        }
        (Value::Null, other) => is_empty(other),
        (want, have) => want == have,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(list) => list.is_empty(),
        _ => false,
    }
}

fn without_image(mut container: Value) -> Value {
    if let Some(map) = container.as_object_mut() {
        map.remove("image");
    }
    container
}

/// The normalized form of an image reference, to compare what the spec says with what the
/// kubelet reports (`busybox:1.37` runs as `docker.io/library/busybox:1.37`).
fn normalized(reference: &str) -> String {
    image::Reference::parse(reference).map_or_else(|_| reference.to_owned(), |r| r.to_string())
}

/// Whether the pod's sidecar of `container` is updated (its spec image) but not yet running
/// and ready with that image.
pub fn in_flight(pod: &CountedPod, container: &str) -> bool {
    let Some(sidecar) = pod.injected.as_ref().and_then(|s| s.sidecar(container)) else { return false };
    sidecar.running_image.as_deref().map(normalized) != Some(normalized(&sidecar.image))
}

/// How `pod` (injected with an older spec of `watcher`) is brought up to date; `rules` are the
/// ImagePolicy rules admission would apply in its namespace, `now` goes into the annotation.
pub fn update(watcher: &Watcher, pod: &CountedPod, rules: &[&Rule], now: &str) -> Update {
    let recreate = |why: &str| Update::Recreate(why.to_owned());
    let Some(spec) = pod.injected.as_deref() else { return recreate("the pod's spec is not known") };
    let container_name = watcher.spec.container.name.as_str();
    let Some(sidecar) = spec.sidecar(container_name) else { return recreate("the sidecar container is not there") };
    let native = match watcher.spec.native_sidecar {
        NativeSidecar::Auto => sidecar.init,
        NativeSidecar::Always => true,
        NativeSidecar::Never => false,
    };
    if native != sidecar.init {
        return recreate("the sidecar moves between containers and initContainers");
    }
    let (Some(container), volume) = desired(watcher, native) else { return recreate("nothing to inject") };
    let Ok(stored) = serde_json::from_str::<Value>(&sidecar.spec) else { return recreate("unreadable container") };
    if !same_but_defaults(&without_image(container.clone()), &without_image(stored)) {
        return recreate("the container differs by more than its image");
    }
    if let Some(volume) = volume {
        let name = volume["name"].as_str().unwrap_or_default();
        let stored = spec.volumes.iter().find(|(n, _)| &**n == name).and_then(|(_, v)| serde_json::from_str(v).ok());
        if !stored.is_some_and(|stored: Value| same_but_defaults(&volume, &stored)) {
            return recreate("the volume differs");
        }
    }
    if let Some(secret) = &watcher.spec.image_pull_secrets
        && !spec.pull_secrets.iter().any(|s| **s == *secret.name)
    {
        return recreate("a new image pull secret");
    }
    let wanted = container["image"].as_str().unwrap_or_default().to_owned();
    let target = image::rewrite(rules.iter().copied(), &wanted).unwrap_or_else(|| wanted.clone());
    Update::InPlace(Patch {
        pod: pod.name.to_string(),
        ops: patch_ops(watcher, pod, spec, sidecar, &wanted, &target, now),
        image: target,
    })
}

fn patch_ops(
    watcher: &Watcher,
    pod: &CountedPod,
    spec: &InjectedSpec,
    sidecar: &Sidecar,
    wanted: &str,
    target: &str,
    now: &str,
) -> Vec<PatchOperation> {
    let list = if sidecar.init { "initContainers" } else { "containers" };
    let index = sidecar.index.to_string();
    let name = watcher.name_any();
    let hash = watcher.spec.spec_hash();
    let entries: Vec<(&str, &str)> = injected_watchers(&pod.annotations)
        .into_iter()
        .map(|(n, h)| if n == name { (n, hash.as_str()) } else { (n, h) })
        .collect();
    let annotation = |key: &str| format!("/metadata/annotations/{}", key.replace('~', "~0").replace('/', "~1"));
    let mut ops = json!([
        // The resourceVersion the plan was made from: a pod changed since is a conflict.
        {"op": "replace", "path": "/metadata/resourceVersion", "value": &*spec.resource_version},
        {"op": "test", "path": format!("/spec/{list}/{index}/name"), "value": &*sidecar.name},
        {"op": "replace", "path": format!("/spec/{list}/{index}/image"), "value": target},
        {"op": "replace", "path": annotation(INJECTED_ANNOTATION), "value": injected_annotation_value(entries)},
        {"op": "add", "path": annotation(SIDECAR_UPDATED_ANNOTATION), "value": now},
    ]);
    // An image an ImagePolicy rewrote keeps its original on record, as admission does.
    if let Some(recorded) = pod.annotations.get(ORIGINAL_IMAGES_ANNOTATION) {
        let mut originals: BTreeMap<&str, &str> =
            recorded.split(',').filter_map(|entry| entry.trim().split_once('=')).collect();
        let container = &*sidecar.name;
        if target != wanted {
            originals.insert(container, wanted);
        } else {
            originals.remove(container);
        }
        let value = originals.iter().map(|(c, i)| format!("{c}={i}")).collect::<Vec<_>>().join(",");
        if let Some(list) = ops.as_array_mut() {
            list.push(json!({"op": "replace", "path": annotation(ORIGINAL_IMAGES_ANNOTATION), "value": value}));
        }
    }
    serde_json::from_value(ops).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests;
