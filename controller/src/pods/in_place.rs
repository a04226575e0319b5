//! `updatePolicy: InPlace`: a running pod whose revision differs from the current spec **only
//! by the sidecar's image** gets the new image by a patch of that one container's `image` (the
//! one field of a container kube-apiserver lets a running pod change), and the new hash. Same
//! pod, same uid, app containers untouched. Any other difference is never applied half in
//! place: such pods go the `Recreate` way.
//!
//! The decision is made between revisions (what the pod was injected with, kept as a
//! ControllerRevision, and the current spec): the stored container is read only to find the
//! sidecar and to see that nobody changed its image by hand.

use std::collections::BTreeMap;
use std::time::Duration;

use json_patch::PatchOperation;
use kube::ResourceExt;
use serde_json::json;
use watcher_api::image::{self, Rule};
use watcher_api::{
    INJECTED_ANNOTATION, InjectionSpec, ORIGINAL_IMAGES_ANNOTATION, SIDECAR_UPDATED_ANNOTATION, Watcher,
    injected_annotation_value, injected_watchers,
};

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
}

impl InjectedSpec {
    fn sidecar(&self, container: &str) -> Option<&Sidecar> {
        self.sidecars.iter().find(|s| &*s.name == container)
    }
}

/// How an outdated injected pod is brought up to date.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// Only the image differs between the pod's revision and the current spec: patch it in place.
    InPlace(Patch),
    /// Anything else differs, or the pod's revision is gone: the `Recreate` way.
    Recreate(String),
    /// The sidecar's image was changed by hand: left alone, and reported.
    LeftAlone(String),
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

/// `spec` with the sidecar's image left out: what must be equal for an update in place.
fn without_image(spec: &InjectionSpec) -> InjectionSpec {
    let mut spec = spec.clone();
    spec.container.image = None;
    spec
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

/// The image admission wrote for `wanted`, as the pod records it: the original is in
/// `watcher.dev/original-images` when an ImagePolicy rewrote it.
fn originals(pod: &CountedPod) -> BTreeMap<&str, &str> {
    pod.annotations()
        .get(ORIGINAL_IMAGES_ANNOTATION)
        .map(|recorded| recorded.split(',').filter_map(|entry| entry.trim().split_once('=')).collect())
        .unwrap_or_default()
}

/// How `pod`, injected with revision `carried` of `watcher` (`None`: that revision is gone), is
/// brought to the current spec; `rules` are the ImagePolicy rules admission would apply in its
/// namespace, `now` goes into the annotation.
pub fn update(
    watcher: &Watcher,
    carried: Option<&InjectionSpec>,
    pod: &CountedPod,
    rules: &[&Rule],
    now: &str,
) -> Update {
    let recreate = |why: &str| Update::Recreate(why.to_owned());
    let Some(carried) = carried else { return recreate("the revision the pod carries is gone") };
    let current = watcher.spec.injection();
    if without_image(carried) != without_image(&current) {
        return recreate("the spec differs by more than the sidecar's image");
    }
    let Some(spec) = pod.injected.as_deref() else { return recreate("the pod's spec is not known") };
    let name = current.container.name.as_str();
    let Some(sidecar) = spec.sidecar(name) else { return recreate("the sidecar container is not there") };
    let was = carried.container.image.as_deref().unwrap_or_default();
    let originals = originals(pod);
    let admitted = originals.get(name).copied().unwrap_or(&sidecar.image);
    if normalized(admitted) != normalized(was) {
        return Update::LeftAlone(format!(
            "pod {}: sidecar {name} runs {} where its revision says {was} (changed by hand): left alone",
            pod.name, sidecar.image
        ));
    }
    let wanted = current.container.image.clone().unwrap_or_default();
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
    let entries: Vec<(&str, &str)> = injected_watchers(pod.annotations())
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
    if pod.annotations().contains_key(ORIGINAL_IMAGES_ANNOTATION) {
        let mut originals = originals(pod);
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
