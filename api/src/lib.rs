//! The `watcher.dev/v1alpha1` custom resources and the names that the webhook, the controllers
//! and the CRD generator share.

// `#[kube(printcolumn(type_ = ..), printcolumn(type_ = ..))]` repeats keys across columns by design.
#![allow(clippy::duplicated_attributes)]

pub mod annotation;
mod app;
mod at;
mod cluster_watcher;
mod condition;
mod config_judge;
mod ending;
pub mod image;
mod image_policy;
mod pod_resources;
mod podset;
pub mod revision;
mod selection;
pub mod validation;
mod watcher;

pub use app::{
    AppAccess, AppVolumeMount, ENV_NAME, NO_TOKEN_VOLUME, SERVICE_ACCOUNT_PATH, ShareVolumes, TransferEnv,
    is_descending_path, is_env_name,
};
pub use at::{At, AtPhase, AtSpec, AtStatus, DEFAULT_AT_IMAGE};
pub use cluster_watcher::{CLUSTER_WATCHER_KIND, ClusterWatcher, ClusterWatcherSpec, ClusterWatcherStatus};
pub use condition::{Condition, condition, reasons, set_condition, types};
pub use config_judge::ConfigJudge;
pub use ending::{EndsByRestart, Regular, SidecarEnding, meant_to_end};
pub use image_policy::{
    CompiledPolicy, ImagePolicy, ImagePolicySpec, ImagePolicyStatus, ImageRewrite, PolicyError, WorkloadCounts,
};
pub use pod_resources::{PodResources, QUANTITY_PATTERN, QuantityText};
pub use podset::{DEFAULT_PODSET_IMAGE, PodSet, PodSetSpec, PodSetStatus};
pub use watcher::{
    FailurePolicy, InjectionSpec, NativeSidecar, NewPods, PodCounts, UpdatePolicy, UpdatePolicyType, Watcher,
    WatcherSpec, WatcherStatus, Written, config_map_name,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every resource of this operator.
pub const GROUP: &str = "watcher.dev";
/// The CRD category: `kubectl get watcher-dev` lists every resource of this operator. Not
/// `watcher`, which kubectl would expand instead of the kind of that name.
pub const CATEGORY: &str = "watcher-dev";
/// The field manager of every server-side apply this operator makes.
pub const FIELD_MANAGER: &str = "watcher-operator";

/// Namespace label: `watcher.dev/injection=disabled` turns injection off for the namespace.
pub const INJECTION_LABEL: &str = "watcher.dev/injection";
/// The value of [`INJECTION_LABEL`] that turns injection off.
pub const INJECTION_DISABLED: &str = "disabled";
/// Label on every pod of a PodSet: the PodSet's name.
pub const PODSET_LABEL: &str = "watcher.dev/podset";
/// Label on every pod of a PodSet: the hash of the template it was made from.
pub const POD_TEMPLATE_HASH_LABEL: &str = "watcher.dev/pod-template-hash";
/// Label on the pod of an At: the At's name.
pub const AT_LABEL: &str = "watcher.dev/at";
/// Annotation on a Secret or ConfigMap in a sync source namespace: copy it into the namespaces
/// this label selector (kubectl `-l` syntax) selects; empty for every namespace.
pub const SYNC_ANNOTATION: &str = "watcher.dev/sync";
/// Label on every copy the sync controller makes: `watcher.dev/synced=true`.
pub const SYNCED_LABEL: &str = "watcher.dev/synced";
/// Annotation on every copy: `<namespace>/<name>` of its source.
pub const SYNCED_FROM_ANNOTATION: &str = "watcher.dev/synced-from";
/// Annotation of the probe pod that `watcher-operator check` creates with a server-side dry
/// run: the webhook answers such a dry run (only a dry run) with a patch that adds
/// [`PROBED_ANNOTATION`], proving that kube-apiserver reaches it and applies its patch.
pub const PROBE_ANNOTATION: &str = "watcher.dev/probe";
/// Annotation of the dry-run pods the operator creates after it writes new `matchConditions`:
/// not one of the conditions' terms, so kube-apiserver sends such a pod only by the terms that
/// select it by its labels; the webhook answers it as the `check` probe, with
/// [`PROBED_ANNOTATION`]. A Watcher is `Ready` only once kube-apiserver sends such pods.
pub const SCOPE_PROBE_ANNOTATION: &str = "watcher.dev/scope-probe";
/// Added by the webhook to a dry-run probe pod: the webhook's version.
pub const PROBED_ANNOTATION: &str = "watcher.dev/probed";
/// Label the webhook puts on a pod that is meant to end (`restartPolicy` `Never` or `OnFailure`)
/// and carries a Watcher's sidecar as a regular container: `watcher.dev/end-sidecars=true`. The
/// operator watches these pods, and ends their sidecars once the app containers have ended.
pub const END_SIDECARS_LABEL: &str = "watcher.dev/end-sidecars";
/// The downward API volume, in a pod that is meant to end, whose file `ended` holds
/// [`annotation::SidecarsEnded`] (empty until the operator writes it).
pub const ENDED_VOLUME: &str = "watcher-ended";
/// Where a sidecar that ends by itself mounts [`ENDED_VOLUME`].
pub const ENDED_DIR: &str = "/watcher-ended";
/// The file a sidecar that ends by itself looks at: not empty once the app has ended.
pub const ENDED_FILE: &str = "/watcher-ended/ended";
/// The variable that gives [`ENDED_FILE`] to a sidecar that reads it itself (watcher-agent):
/// set only in pods that are meant to end.
pub const ENDED_FILE_ENV: &str = "WATCHER_ENDED_FILE";

/// Annotation on a webhook configuration that a run by URL created (its value: that URL). A
/// graceful stop of any later run by URL deletes it.
pub const CREATED_BY_RUN_ANNOTATION: &str = "watcher.dev/created-by-run";
/// Annotation on a webhook configuration that a run by URL took over: the `clientConfig`
/// (JSON) it replaced, which a graceful stop of any later run by URL puts back.
pub const REPLACED_REGISTRATION_ANNOTATION: &str = "watcher.dev/replaced-registration";
/// Annotation on the webhook configuration when its conditions do not narrow what is sent: why.
pub const ADMISSION_SCOPE_ANNOTATION: &str = "watcher.dev/admission-scope";
/// Annotation on the certificate Secret: when its CA was last rotated (RFC 3339).
pub const CA_ROTATED_AT_ANNOTATION: &str = "watcher.dev/ca-rotated-at";
/// Annotation on a revision rebuilt from a pod: the pod (`<namespace>/<name>`).
pub const REBUILT_FROM_ANNOTATION: &str = "watcher.dev/rebuilt-from";
/// Annotation on a Watcher's ConfigMap: the Watcher's `metadata.generation` whose config data
/// it holds (written with the data; a ConfigMap written before it was recorded has none).
pub const CONFIG_GENERATION_ANNOTATION: &str = "watcher.dev/config-generation";
/// The prefix of every `matchConditions` entry the operator writes (others, a user's, are kept
/// as they are).
pub const CONDITION_PREFIX: &str = "watcher.dev/";
/// The name of the condition that keeps `inject.watcher.dev` to the pods in scope.
pub const SCOPE_CONDITION: &str = "watcher.dev/scope";
/// The name of the condition that keeps pods asking for a required Watcher away from
/// `inject.watcher.dev`.
pub const NOT_REQUIRED_CONDITION: &str = "watcher.dev/not-required";
/// The name of the condition of `required.watcher.dev`.
pub const REQUIRED_CONDITION: &str = "watcher.dev/required";
/// The supervisor's image (`watcher-supervise`): the init container that copies it into a pod
/// that is meant to end, and the image its sidecars are switched to when the app has ended
/// (`--supervisor-image`).
pub const DEFAULT_SUPERVISOR_IMAGE: &str = concat!("watcher-supervise:", env!("CARGO_PKG_VERSION"));
/// The name of the supervisor's init container and of the volume it copies itself into.
pub const SUPERVISOR_NAME: &str = "watcher-supervise";
/// Where a supervised sidecar finds the supervisor: the volume's mount path.
pub const SUPERVISOR_DIR: &str = "/watcher-supervise";
/// cluster-autoscaler's annotation naming the local volumes (emptyDir, hostPath) it may lose when
/// it drains the pod's node: the webhook adds the emptyDirs it injects, merged with the pod's.
pub const SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes";
/// kubectl's annotation naming the container `kubectl logs` and `exec` use by default.
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
/// Label on every object this operator creates: `app.kubernetes.io/managed-by=watcher-operator`.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "watcher-operator";
/// The user a Watcher's container runs as where the namespace's Pod Security level requires a
/// non-root user and neither the pod nor the container says which: the image's user is not
/// known at admission, and most images run as root unless told otherwise (the kubelet then
/// refuses to start them). 65532 is the `nonroot` user of distroless images and of the
/// watcher-agent image (Istio's proxy runs as 1337, Linkerd's as 2102).
pub const ADAPTED_RUN_AS_USER: i64 = 65532;

/// Every CRD of this operator, in the order `watcher-operator crds` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![Watcher::crd(), ClusterWatcher::crd(), At::crd(), PodSet::crd(), ImagePolicy::crd()]
}

/// A short, stable hash (8 hex digits) of a JSON-serialisable value.
///
/// FNV-1a over the value's JSON form: struct fields serialise in declaration order and maps
/// are `BTreeMap`s, so equal values hash equally in every process and every release.
pub fn stable_hash<T: serde::Serialize>(value: &T) -> String {
    /// FNV-1a, fed as the JSON is written: no buffer (the webhook hashes every Watcher it injects).
    struct Fnv(u64);
    impl std::io::Write for Fnv {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            for byte in bytes {
                self.0 ^= u64::from(*byte);
                self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    let mut fnv = Fnv(OFFSET_BASIS);
    if serde_json::to_writer(&mut fnv, value).is_err() {
        fnv.0 = OFFSET_BASIS; // a value that cannot be serialised hashes as no bytes
    }
    let hash = fnv.0;
    format!("{:08x}", (hash ^ (hash >> 32)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_is_fixed_across_releases() {
        // A changed value here would make every injected pod look outdated after an upgrade.
        assert_eq!(stable_hash(&"log-watcher"), stable_hash(&"log-watcher"));
        assert_eq!(stable_hash(&serde_json::json!({"a": 1})), "f3f46a6c");
        assert_ne!(stable_hash(&"a"), stable_hash(&"b"));
    }

    /// The rules kube-apiserver checks for a structural schema that a generator can get wrong.
    fn structural_problems(schema: &serde_json::Value, path: &str, problems: &mut Vec<String>) {
        let Some(node) = schema.as_object() else { return };
        for key in ["$ref", "$defs", "definitions", "$schema"] {
            if node.contains_key(key) {
                problems.push(format!("{path}: has {key}"));
            }
        }
        let untyped_ok = node.contains_key("x-kubernetes-int-or-string")
            || node.contains_key("x-kubernetes-preserve-unknown-fields");
        if !node.contains_key("type") && !untyped_ok {
            problems.push(format!("{path}: no type"));
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            for branch in node.get(key).and_then(|b| b.as_array()).into_iter().flatten() {
                if branch.get("type").is_some() || branch.get("description").is_some() {
                    problems.push(format!("{path}: {key} branch with type or description"));
                }
            }
        }
        for (name, child) in node.get("properties").and_then(|p| p.as_object()).into_iter().flatten() {
            structural_problems(child, &format!("{path}.{name}"), problems);
        }
        for key in ["items", "additionalProperties"] {
            if let Some(child) = node.get(key).filter(|c| c.is_object()) {
                structural_problems(child, &format!("{path}[{key}]"), problems);
            }
        }
    }

    #[test]
    fn crd_schemas_are_structural() {
        for crd in crds() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("serialises");
            let mut problems = Vec::new();
            structural_problems(&schema["openAPIV3Schema"], &crd.spec.names.plural, &mut problems);
            assert_eq!(problems, Vec::<String>::new());
        }
    }

    /// kubectl expands a category before it looks for a resource of that name, so a category
    /// equal to a kind's name would make `kubectl get watcher NAME` fail.
    #[test]
    fn no_category_shadows_a_resource_name() {
        let crds = crds();
        let mut names = Vec::new();
        for crd in &crds {
            let n = &crd.spec.names;
            names.extend([n.kind.to_lowercase(), n.plural.clone()]);
            names.extend(n.singular.clone());
            names.extend(n.short_names.clone().unwrap_or_default());
        }
        for crd in &crds {
            let categories = crd.spec.names.categories.clone().unwrap_or_default();
            assert_eq!(categories, [CATEGORY], "{}", crd.spec.names.plural);
            for category in categories {
                assert!(!names.contains(&category), "category {category} shadows a resource name");
            }
        }
    }

    /// `kubectl apply` (client-side, as README installs) keeps the whole object in an
    /// annotation, which kube-apiserver caps at 256 KiB: a larger CRD would not apply.
    #[test]
    fn every_crd_fits_a_client_side_apply() {
        for crd in crds() {
            let bytes = serde_json::to_vec(&crd).expect("serialises").len();
            assert!(bytes < 240 * 1024, "{}: {bytes} bytes", crd.spec.names.plural);
        }
    }

    #[test]
    fn crds_are_in_the_watcher_group_and_only_image_policies_and_cluster_watchers_are_cluster_scoped() {
        let crds = crds();
        let names: Vec<_> = crds.iter().map(|c| c.metadata.name.clone().unwrap_or_default()).collect();
        assert_eq!(
            names,
            [
                "watchers.watcher.dev",
                "clusterwatchers.watcher.dev",
                "ats.watcher.dev",
                "podsets.watcher.dev",
                "imagepolicies.watcher.dev"
            ]
        );
        for crd in &crds {
            assert_eq!(crd.spec.group, GROUP);
            let cluster = ["ImagePolicy", "ClusterWatcher"].contains(&crd.spec.names.kind.as_str());
            let scope = if cluster { "Cluster" } else { "Namespaced" };
            assert_eq!(crd.spec.scope, scope);
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, "v1alpha1");
            assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        }
    }
}
