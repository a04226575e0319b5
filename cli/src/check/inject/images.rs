//! The images an ImagePolicy rewrites: for a manifest, admission's two steps run and read back;
//! for an existing pod, what it records and the policy that rewrites each original now.

use std::sync::Arc;

use json_patch::PatchOperation;
use serde::Serialize;
use watcher_admission::{PodView, rewrite_images};
use watcher_api::{CompiledPolicy, annotation, image};

use super::{Excluded, Scope};

/// One image an ImagePolicy rewrites (or rewrote).
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ImageLine {
    pub(crate) container: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) policy: String,
}

/// The first policy (in name order) whose rules rewrite `image`, as admission applies them.
fn rewriting_policy<'a>(policies: &'a [Arc<CompiledPolicy>], image: &str) -> Option<(&'a str, String)> {
    policies.iter().find_map(|p| image::rewrite(p.valid_rules(), image).map(|to| (p.name.as_str(), to)))
}

/// A manifest: run admission's two steps and read back what the patch does to each image.
pub(super) fn planned_images(pod: &PodView, scope: &Scope<'_>, excluded: &Option<Excluded>) -> Vec<ImageLine> {
    if excluded.is_some() {
        return Vec::new();
    }
    let mut injection = scope.admit(pod);
    let before = injection.patch.len();
    // The sidecars as injected, then the pod's own containers: images before rewriting.
    let mut images: Vec<(String, String)> = Vec::new();
    for op in &injection.patch[..before] {
        let PatchOperation::Add(add) = op else { continue };
        let containers = match &add.value {
            serde_json::Value::Array(list) if add.path.to_string().ends_with("ontainers") => list.iter().collect(),
            value if add.path.to_string().ends_with("ontainers/-") => vec![value],
            _ => continue,
        };
        for container in containers {
            if let (Some(name), Some(image)) = (container["name"].as_str(), container["image"].as_str()) {
                images.push((name.to_owned(), image.to_owned()));
            }
        }
    }
    let spec = pod.spec.as_ref();
    let own = spec.map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())).into_iter().flatten();
    images.extend(own.filter_map(|c| Some((c.name.clone(), c.image.clone()?))));
    rewrite_images(pod, scope.namespace, scope.policies, scope.options, &mut injection);
    images
        .into_iter()
        .filter(|(name, _)| injection.rewritten.contains(name))
        .filter_map(|(container, from)| {
            let (policy, to) = rewriting_policy(scope.policies, &from)?;
            Some(ImageLine { container, from, to, policy: policy.to_owned() })
        })
        .collect()
}

/// An existing pod: what `watcher.dev/original-images` records, and the policy that rewrites
/// each original now (empty when none does any more).
pub(super) fn rewritten_images(pod: &PodView, policies: &[Arc<CompiledPolicy>]) -> Vec<ImageLine> {
    let spec = pod.spec.as_ref();
    let image_of = |name: &str| {
        spec.and_then(|s| s.containers.iter().chain(s.init_containers.iter().flatten()).find(|c| c.name == name))
            .and_then(|c| c.image.clone())
    };
    annotation::OriginalImages::read(pod.annotations())
        .into_iter()
        .map(|(container, from)| ImageLine {
            container: container.to_owned(),
            from: from.to_owned(),
            to: image_of(container).unwrap_or_default(),
            policy: rewriting_policy(policies, from).map(|(p, _)| p.to_owned()).unwrap_or_default(),
        })
        .collect()
}
