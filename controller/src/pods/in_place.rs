//! `updatePolicy: InPlace`: a running pod whose revision differs from the current spec **only
//! by the sidecar's image** gets the new image by a patch of that one container's `image` (the
//! one field of a container kube-apiserver lets a running pod change), and the new hash. Same
//! pod, same uid, app containers untouched. Any other difference is never applied half in
//! place: such pods go the `Recreate` way.
//!
//! The decision is made from what the pod carries, written by the webhook at injection: the
//! hash of the spec it was injected with without the sidecar's image
//! (`watcher.dev/injected-without-image`, as OpenKruise does) beside the full hash. Equal to
//! the current spec's, the pod differs from it at most by image: no revision needs to have been
//! kept before the spec changed (the operator may have been down, or the spec changed before it
//! looked). The full hash then says which image was injected, so a sidecar whose image was
//! changed by hand is recognised and left alone. A pod injected before that annotation is
//! decided from its revision (a ControllerRevision), when one is kept. The stored container is
//! read only to find the sidecar and its image.

use std::collections::BTreeMap;
use std::time::Duration;

use json_patch::PatchOperation;
use kube::ResourceExt;
use serde_json::json;
use watcher_admission::annotation_pointer;
use watcher_api::image::{self, Rule};
use watcher_api::{InjectionSpec, Watcher, annotation};

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
    /// Why it cannot start, as the kubelet says it: `None` while it runs or may still start.
    pub blocked: Option<Box<Blocked>>,
}

/// Why the kubelet cannot start a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// Its waiting reason (`CreateContainerConfigError`, `ImagePullBackOff`, ...).
    pub reason: Box<str>,
    /// Its message.
    pub message: Box<str>,
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
    /// Only the image differs between what the pod was injected with and the current spec:
    /// patch it in place.
    InPlace(Patch),
    /// Anything else differs, or what the pod was injected with is not known: the `Recreate` way.
    Recreate(String),
    /// The sidecar's image was changed by hand: left alone, and reported.
    LeftAlone(String),
}

/// The in-place patch of one pod.
#[derive(Clone, Debug, PartialEq)]
pub struct Patch {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod.
    pub pod: String,
    /// JSON-patch operations: the resourceVersion precondition, the container's image and the
    /// annotations.
    pub ops: Vec<PatchOperation>,
    /// The new image.
    pub image: String,
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
    annotation::OriginalImages::read(pod.annotations()).into_iter().collect()
}

/// How `pod`, injected with an older spec of `watcher`, is brought to the current spec:
/// decided from the hashes the pod carries, or, for a pod injected before it carried the hash
/// without image, from `carried`, its revision (`None`: not kept). `rules` are the ImagePolicy
/// rules admission would apply in its namespace, `now` goes into the annotation.
pub fn update(
    watcher: &Watcher,
    carried: Option<&InjectionSpec>,
    pod: &CountedPod,
    rules: &[&Rule],
    now: &str,
) -> Update {
    let recreate = |why: &str| Update::Recreate(why.to_owned());
    let current = watcher.spec.injection();
    let watcher_name = watcher.name_any();
    let annotations = pod.annotations();
    let full = annotation::Injected::read(annotations).into_iter().find(|(n, _)| *n == watcher_name).map(|(_, h)| h);
    let imageless = annotation::InjectedWithoutImage::read(annotations)
        .into_iter()
        .find(|(n, _)| *n == watcher_name)
        .map(|(_, h)| h);
    // Whether `image` is the one the pod was injected with.
    let injected_with: Box<dyn Fn(&str) -> bool> = match (imageless, full, carried) {
        (Some(imageless), Some(full), _) => {
            if imageless != current.hash_without_image() {
                return recreate("the spec differs by more than the sidecar's image");
            }
            Box::new(move |image: &str| current.with_image(image).hash() == full)
        }
        (_, _, Some(carried)) => {
            if carried.hash_without_image() != current.hash_without_image() {
                return recreate("the spec differs by more than the sidecar's image");
            }
            let was = normalized(carried.container.image.as_deref().unwrap_or_default());
            Box::new(move |image: &str| normalized(image) == was)
        }
        _ => return recreate("the pod carries no hash of its spec without image, and its revision is not kept"),
    };
    let Some(spec) = pod.injected.as_deref() else { return recreate("the pod's spec is not known") };
    let name = watcher.spec.container.name.as_str();
    let Some(sidecar) = spec.sidecar(name) else { return recreate("the sidecar container is not there") };
    let originals = originals(pod);
    let admitted = originals.get(name).copied().unwrap_or(&sidecar.image);
    if !injected_with(admitted) {
        return Update::LeftAlone(format!(
            "pod {}: sidecar {name} runs {}, not the image it was injected with (changed by hand): left alone",
            super::shown(watcher, pod),
            sidecar.image
        ));
    }
    let wanted = watcher.spec.container.image.clone().unwrap_or_default();
    let target = image::rewrite(rules.iter().copied(), &wanted).unwrap_or_else(|| wanted.clone());
    Update::InPlace(Patch {
        namespace: pod.namespace().to_owned(),
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
    let entries: Vec<(&str, &str)> = annotation::Injected::read(pod.annotations())
        .into_iter()
        .map(|(n, h)| if n == name { (n, hash) } else { (n, h) })
        .collect();
    // The hash without image stays the same; a pod injected before it carried one gets it.
    let imageless = watcher.spec.spec_hash_without_image();
    let mut without_image: Vec<(&str, &str)> =
        annotation::InjectedWithoutImage::read(pod.annotations()).into_iter().filter(|(n, _)| *n != name).collect();
    without_image.push((name.as_str(), imageless));
    let mut ops = json!([
        // The resourceVersion the plan was made from: a pod changed since is a conflict.
        {"op": "replace", "path": "/metadata/resourceVersion", "value": &*spec.resource_version},
        {"op": "test", "path": format!("/spec/{list}/{index}/name"), "value": &*sidecar.name},
        {"op": "replace", "path": format!("/spec/{list}/{index}/image"), "value": target},
        {"op": "replace", "path": annotation_pointer(annotation::Injected::KEY), "value": annotation::Injected::encode(entries)},
        {"op": "add", "path": annotation_pointer(annotation::InjectedWithoutImage::KEY),
         "value": annotation::InjectedWithoutImage::encode(without_image)},
        {"op": "add", "path": annotation_pointer(annotation::SidecarUpdated::KEY), "value": now},
    ]);
    // An image an ImagePolicy rewrote keeps its original on record, as admission does.
    if pod.annotations().contains_key(annotation::OriginalImages::KEY) {
        let mut originals = originals(pod);
        let container = &*sidecar.name;
        if target != wanted {
            originals.insert(container, wanted);
        } else {
            originals.remove(container);
        }
        let value = annotation::OriginalImages::encode(originals.iter().map(|(c, i)| (*c, *i)));
        if let Some(list) = ops.as_array_mut() {
            list.push(
                json!({"op": "replace", "path": annotation_pointer(annotation::OriginalImages::KEY), "value": value}),
            );
        }
    }
    serde_json::from_value(ops).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests;
