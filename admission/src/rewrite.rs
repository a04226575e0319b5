//! Image rewriting, the second step of the admission pass: after [`crate::inject`], every
//! container and init container image of the pod, the injected sidecars included, is rewritten by
//! the ImagePolicies of the namespace, in the same patch. Pure, like `inject`.

use std::sync::Arc;

use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use serde_json::Value;
use watcher_api::{CompiledPolicy, annotation, image};

use crate::inject::{Fields, Op, pointer};
use crate::{InjectOptions, Injection, PodView};

/// Where the webhook finds the ImagePolicies that apply to a namespace.
pub trait PolicySource: Send + Sync {
    /// The valid policies selecting `namespace`, in name order.
    fn policies_for(&self, namespace: &str) -> Vec<Arc<CompiledPolicy>>;

    /// What `namespace`'s labels say to admission, read once per request. Namespace labels
    /// unknown (tests, the offline preview): not opted out, no Pod Security level.
    fn namespace(&self, _namespace: &str) -> NamespaceAdmission {
        NamespaceAdmission::default()
    }

    /// Whether the cluster's Pod Security admission exempts pods created by `username`, or of
    /// RuntimeClass `runtime_class` (its configuration's `exemptions`). Unknown: none.
    fn pod_security_exempt(&self, _username: Option<&str>, _runtime_class: Option<&str>) -> bool {
        false
    }

    /// The ResourceQuotas and LimitRanges of `namespace`. Unknown: none.
    fn resource_rules(&self, _namespace: &str) -> Arc<crate::resources::ResourceRules> {
        Arc::default()
    }
}

/// What a namespace's labels say to admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamespaceAdmission {
    /// Labelled `watcher.dev/injection=disabled`: never injected nor rewritten, whatever
    /// selectors the installed webhook configuration has.
    pub injection_disabled: bool,
    /// The Pod Security levels its labels set.
    pub pod_security: crate::pod_security::NamespaceLevels,
}

impl NamespaceAdmission {
    /// What the labels `get` returns say.
    pub fn from_lookup<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Self {
        Self {
            injection_disabled: get(watcher_api::INJECTION_LABEL) == Some(watcher_api::INJECTION_DISABLED),
            pod_security: crate::pod_security::NamespaceLevels::from_lookup(get),
        }
    }

    /// What the labels `get` of `namespace` say, under the cluster's Pod Security admission
    /// configuration `cluster` (its defaults where a label is missing, its namespace exemptions).
    pub fn of_namespace<'a>(
        namespace: &str,
        get: impl Fn(&str) -> Option<&'a str>,
        cluster: &'a crate::pod_security::ClusterDefaults,
    ) -> Self {
        Self {
            injection_disabled: get(watcher_api::INJECTION_LABEL) == Some(watcher_api::INJECTION_DISABLED),
            pod_security: crate::pod_security::NamespaceLevels::of_namespace(namespace, get, cluster),
        }
    }
}

/// No policies (tests, and the offline preview without `--image-policy`).
impl PolicySource for () {
    fn policies_for(&self, _: &str) -> Vec<Arc<CompiledPolicy>> {
        Vec::new()
    }
}

/// A fixed list of policies, each applying where its selector says (namespace labels unknown:
/// only policies without a selector apply). For the offline preview and tests.
impl PolicySource for Vec<Arc<CompiledPolicy>> {
    fn policies_for(&self, _: &str) -> Vec<Arc<CompiledPolicy>> {
        self.iter().filter(|p| p.selects(&Default::default())).cloned().collect()
    }
}

/// Rewrites the images of `pod` (created in `namespace`) and of the containers `injection`
/// adds, with the rules of `policies` (first match wins, never chained), into `injection`'s
/// patch, and records the originals in `watcher.dev/original-images`. Containers already listed
/// there were rewritten by an earlier invocation and are left alone, so reinvocation is a no-op.
pub fn rewrite_images(
    pod: &PodView,
    namespace: &str,
    policies: &[Arc<CompiledPolicy>],
    options: &InjectOptions,
    injection: &mut Injection,
) {
    let rules: Vec<&image::Rule> = policies.iter().flat_map(|p| p.valid_rules()).collect();
    if rules.is_empty() || options.never_mutated(namespace) {
        return;
    }
    let Some(spec) = pod.spec.as_ref().filter(|spec| !spec.containers.is_empty()) else { return };
    let done: Vec<&str> =
        annotation::OriginalImages::read(pod.annotations()).into_iter().map(|(name, _)| name).collect();
    let mut originals: Vec<(String, String)> = Vec::new();
    let mut rewrite = |name: &str, image: &str| -> Option<String> {
        if done.contains(&name) {
            return None;
        }
        let rewritten = image::rewrite(rules.iter().copied(), image)?;
        originals.push((name.to_owned(), image.to_owned()));
        Some(rewritten)
    };

    // The init containers that injection inserts before the pod's own move those along.
    let inserted = injection
        .patch
        .ops()
        .iter()
        .filter(|op| op.added_at().is_some_and(|p| inserted_init_container(p.as_str())))
        .count();
    let lists = [
        ("containers", spec.containers.as_slice(), 0),
        ("initContainers", spec.init_containers.as_deref().unwrap_or_default(), inserted),
    ];
    let mut ops = Vec::new();
    for (list, containers, shift) in lists {
        for (index, container) in containers.iter().enumerate() {
            let Some(image) = container.image.as_deref() else { continue };
            if let Some(rewritten) = rewrite(&container.name, image) {
                let path = pointer(&["spec", list, &(index + shift).to_string(), "image"]);
                ops.push(PatchOperation::Replace(ReplaceOperation { path, value: Value::String(rewritten) }));
            }
        }
    }
    // The containers this pass adds: their values are rewritten in place.
    for op in injection.patch.ops_mut() {
        let containers: Vec<&mut dyn Fields> = match op {
            Op::Json(PatchOperation::Add(add)) => {
                let added = added_containers(add.path.as_str(), &mut add.value).into_iter();
                added.map(|container| container as &mut dyn Fields).collect()
            }
            Op::Sidecar { sidecar, .. } => vec![sidecar],
            Op::Json(_) | Op::Volume { .. } => Vec::new(),
        };
        for container in containers {
            let name = container.field("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            let Some(image) = container.field("image").and_then(Value::as_str).map(str::to_owned) else { continue };
            if let Some(rewritten) = rewrite(&name, &image) {
                container.set("image", Value::String(rewritten));
            }
        }
    }
    if originals.is_empty() {
        return;
    }
    injection.rewritten = originals.iter().map(|(name, _)| name.clone()).collect();
    let recorded = annotation::OriginalImages::read(pod.annotations());
    let added = originals.iter().map(|(name, image)| (name.as_str(), image.as_str()));
    let entries = annotation::OriginalImages::encode(recorded.into_iter().chain(added));
    let annotations_exist = pod.metadata.annotations.own.is_some()
        || injection.patch.ops().iter().any(|op| op.added_at().is_some_and(|p| p == "/metadata/annotations"));
    let (path, value) = if annotations_exist {
        (pointer(&["metadata", "annotations", annotation::OriginalImages::KEY]), Value::String(entries))
    } else {
        (pointer(&["metadata", "annotations"]), serde_json::json!({annotation::OriginalImages::KEY: entries}))
    };
    injection.patch.extend(ops);
    injection.patch.push(PatchOperation::Add(AddOperation { path, value }));
}

/// Whether an `add` at `path` inserts an init container before the pod's own
/// (`/spec/initContainers/N`).
fn inserted_init_container(path: &str) -> bool {
    path.strip_prefix("/spec/initContainers/").is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// The containers that an `add` of `value` at `path` puts into the pod: one appended or
/// inserted, or a whole list created.
pub(crate) fn added_containers<'v>(path: &str, value: &'v mut Value) -> Vec<&'v mut Value> {
    let list = path.strip_prefix("/spec/containers").or_else(|| path.strip_prefix("/spec/initContainers"));
    match (list, value) {
        (Some(""), Value::Array(values)) => values.iter_mut().collect(),
        (Some(rest), value) if rest == "/-" || inserted_init_container(path) => vec![value],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
