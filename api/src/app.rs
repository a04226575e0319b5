//! What lets a Watcher's sidecar see the app it watches: the app's volumes, the Watcher's volume
//! in the app containers, the app's environment, its processes, pod annotations and init
//! containers. Part of a Watcher's spec ([`crate::WatcherSpec::app`]) and of what its
//! `specHash` hashes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::validation::{
    DNS1123_LABEL, LABEL_KEY, LABEL_KEY_MAX, MAX_APP_CONTAINERS, MAX_APP_VOLUME_MOUNTS, MAX_INIT_CONTAINERS,
    MAX_PATH_LENGTH, MAX_POD_ANNOTATION_VALUE, MAX_POD_ANNOTATIONS, MAX_TRANSFER_ENV, MAX_TRANSFER_ENV_NAMES,
    is_dns1123_label, is_label_key,
};

/// The ServiceAccount token's mountPath: the ServiceAccount admission plugin mounts it into
/// every container (the sidecar too, after the webhook's first call), so it is never shared.
pub const SERVICE_ACCOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Annotation keys of the operator's own: never set by a Watcher's `podAnnotations`.
const OWN_PREFIX: &str = "watcher.dev/";

/// How the sidecar sees the app: the fields of a Watcher's spec besides the sidecar itself.
/// All are optional; a Watcher that sets none injects as it always did (and hashes the same).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppAccess {
    /// `None` (default): the sidecar mounts only what its own `container.volumeMounts` say.
    /// `ReadOnly`: the sidecar also gets every volumeMount of the app containers (pod order, the
    /// first at a mountPath wins), read-only. `ReadWrite`: the same, each as the app has it.
    /// Never a mountPath the sidecar already has, nor the ServiceAccount token's.
    #[serde(default, skip_serializing_if = "ShareVolumes::is_none")]
    pub share_volumes: ShareVolumes,

    /// The Watcher's `volume` mounted into each app container at each mountPath (needs
    /// `volume`). A container that already mounts something at that path is left as it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "app_volume_mounts_schema")]
    pub app_volume_mounts: Vec<AppVolumeMount>,

    /// The app containers, by name: which of the pod's containers `shareVolumes`,
    /// `appVolumeMounts` and `transferEnv` read or change. Default: every container of the pod
    /// that no Watcher injected (init containers never are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "app_containers_schema")]
    pub app_containers: Vec<String>,

    /// Environment variables copied from an app container into the sidecar, as the app has
    /// them (`value` or `valueFrom`), unless the sidecar defines the name itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_TRANSFER_ENV))]
    pub transfer_env: Vec<TransferEnv>,

    /// `true`: the pod's containers share one process namespace (`spec.shareProcessNamespace`),
    /// so the sidecar sees the app's processes; set where the pod leaves it unset. A pod that
    /// says `false`, or that uses the host's (`hostPID`), keeps what it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,

    /// Annotations added to the pod where it has no such key (never overwritten). Keys are
    /// qualified names outside `watcher.dev/`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "pod_annotations_schema")]
    pub pod_annotations: BTreeMap<String, String>,

    /// Init containers (full core/v1 Containers) run before the pod's own, in this order. A
    /// name the pod already uses keeps the whole Watcher out, as a sidecar name does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "init_containers_schema")]
    pub init_containers: Vec<Container>,

    /// `false`: the sidecar and the Watcher's init containers get no Kubernetes API token. An
    /// empty read-only volume (`watcher-dev-no-token`) is mounted at the token's path, where the
    /// ServiceAccount admission plugin then mounts nothing; the app's containers keep theirs.
    /// Absent or `true`: as the pod says (`automountServiceAccountToken` of the pod or its
    /// ServiceAccount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
}

/// The volume mounted at [`SERVICE_ACCOUNT_PATH`] in the containers of a Watcher with
/// `automountServiceAccountToken: false`: an empty `emptyDir`, one per pod.
pub const NO_TOKEN_VOLUME: &str = "watcher-dev-no-token";

/// Whether, and how, the sidecar gets the app containers' volumeMounts.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("maxLength" = 16))]
pub enum ShareVolumes {
    /// Not shared.
    #[default]
    None,
    /// Shared, every mount read-only.
    ReadOnly,
    /// Shared, each mount as the app has it.
    ReadWrite,
}

impl ShareVolumes {
    fn is_none(&self) -> bool {
        *self == Self::None
    }
}

/// A mount of the Watcher's volume into the app containers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppVolumeMount {
    /// Where, in each app container: an absolute path.
    pub mount_path: String,
    /// A path within the volume (relative, no `..`) instead of its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
    /// Mounted read-only in the app containers (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
}

/// Variables carried from one app container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferEnv {
    /// The app container to copy from; default the first app container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), regex(pattern = DNS1123_LABEL))]
    pub container: Option<String>,
    /// The variables' names, as the app container's `env` has them. A name it does not have is
    /// skipped (`check-inject` says so).
    #[schemars(schema_with = "env_names_schema")]
    pub names: Vec<String>,
}

impl AppAccess {
    /// Whether nothing is set: the Watcher injects as before these fields existed.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether `name` is an app container: any container of the pod that no Watcher injected
    /// (the caller's part), restricted to `appContainers` when set.
    pub fn is_app_container(&self, name: &str) -> bool {
        self.app_containers.is_empty() || self.app_containers.iter().any(|c| c == name)
    }

    /// What would make a pod refuse these fields, each problem naming its field (the CRD refuses
    /// all of it at apply time, from Kubernetes 1.25 for its CEL rules). `sidecar` is the
    /// Watcher's `container.name`; `has_volume` whether the Watcher has a `volume`.
    pub fn problems(&self, sidecar: &str, has_volume: bool) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.app_volume_mounts.is_empty() && !has_volume {
            problems.push("spec.appVolumeMounts: needs spec.volume, the volume they mount".to_owned());
        }
        for (i, mount) in self.app_volume_mounts.iter().enumerate() {
            if !mount.mount_path.starts_with('/') {
                problems.push(format!("spec.appVolumeMounts[{i}].mountPath: {:?} is not absolute", mount.mount_path));
            }
            if let Some(sub) = mount.sub_path.as_deref().filter(|s| !is_descending_path(s)) {
                problems.push(format!("spec.appVolumeMounts[{i}].subPath: {sub:?} must be relative, without '..'"));
            }
        }
        for (i, name) in self.app_containers.iter().enumerate().filter(|(_, n)| !is_dns1123_label(n)) {
            problems.push(format!("spec.appContainers[{i}]: {name:?} is not a DNS-1123 label"));
        }
        for (i, transfer) in self.transfer_env.iter().enumerate() {
            if let Some(name) = transfer.container.as_deref().filter(|n| !is_dns1123_label(n)) {
                problems.push(format!("spec.transferEnv[{i}].container: {name:?} is not a DNS-1123 label"));
            }
            for name in transfer.names.iter().filter(|n| !is_env_name(n)) {
                problems.push(format!("spec.transferEnv[{i}].names: {name:?} is not an environment variable name"));
            }
        }
        for key in self.pod_annotations.keys() {
            if !is_label_key(key) {
                problems.push(format!("spec.podAnnotations: {key:?} is not a qualified name"));
            } else if key.starts_with(OWN_PREFIX) {
                problems.push(format!("spec.podAnnotations: {key:?} is the operator's own (watcher.dev/)"));
            }
        }
        let mut names: Vec<&str> = vec![sidecar];
        for (i, init) in self.init_containers.iter().enumerate() {
            let at = format!("spec.initContainers[{i}]");
            if !is_dns1123_label(&init.name) {
                problems.push(format!("{at}.name: {:?} is not a DNS-1123 label", init.name));
            } else if names.contains(&init.name.as_str()) {
                problems.push(format!("{at}.name: {:?} is used twice (containers and init containers)", init.name));
            }
            names.push(&init.name);
            if init.image.as_deref().is_none_or(str::is_empty) {
                problems.push(format!("{at}.image: required"));
            }
            if init.restart_policy.as_deref() != Some("Always") {
                let probes = [
                    ("lifecycle", init.lifecycle.is_some()),
                    ("livenessProbe", init.liveness_probe.is_some()),
                    ("readinessProbe", init.readiness_probe.is_some()),
                    ("startupProbe", init.startup_probe.is_some()),
                ];
                for (field, _) in probes.iter().filter(|(_, set)| *set) {
                    problems.push(format!("{at}.{field}: must not be set for init containers"));
                }
            }
            problems.extend(crate::validation::container_problems(init, &at));
        }
        problems
    }
}

/// Whether `path` is a path within a volume: relative, with no `..` element.
pub fn is_descending_path(path: &str) -> bool {
    !path.starts_with('/') && !path.split('/').any(|p| p == "..")
}

/// An environment variable name as kube-apiserver (1.34+) takes one: printable ASCII but `=`,
/// not empty.
pub fn is_env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'=')
}

/// `^[ -<>-~]+$`: printable ASCII but `=`, as [`is_env_name`].
pub const ENV_NAME: &str = "^[ -<>-~]+$";

fn app_volume_mounts_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<AppVolumeMount>>();
    schema.insert("maxItems".into(), json!(MAX_APP_VOLUME_MOUNTS));
    if let Some(item) = schema.get_mut("items").and_then(|i| i.as_object_mut())
        && let Some(props) = item.get_mut("properties").and_then(|p| p.as_object_mut())
    {
        props.insert(
            "mountPath".into(),
            json!({"description": "Where, in each app container: an absolute path.", "type": "string",
                   "maxLength": MAX_PATH_LENGTH, "pattern": "^/"}),
        );
        props.insert(
            "subPath".into(),
            json!({"description": "A path within the volume (relative, no '..') instead of its root.",
                   "type": "string", "maxLength": MAX_PATH_LENGTH, "nullable": true,
                   "x-kubernetes-validations": [{
                       "rule": "!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",
                       "message": "subPath must be a relative path without '..'"}]}),
        );
    }
    schema
}

fn app_containers_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "The app containers, by name (default: every container no Watcher injected).",
        "type": "array",
        "maxItems": MAX_APP_CONTAINERS,
        "x-kubernetes-list-type": "set",
        "items": {"type": "string", "maxLength": 63, "pattern": DNS1123_LABEL},
    })
}

fn env_names_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Names of environment variables of the app container.",
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_TRANSFER_ENV_NAMES,
        "x-kubernetes-list-type": "set",
        "items": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": ENV_NAME},
    })
}

fn pod_annotations_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Annotations added to the pod where it has no such key.",
        "type": "object",
        "maxProperties": MAX_POD_ANNOTATIONS,
        "additionalProperties": {"type": "string", "maxLength": MAX_POD_ANNOTATION_VALUE},
        "x-kubernetes-validations": [{
            "rule": format!(
                "self.all(k, size(k) <= {LABEL_KEY_MAX} && k.matches('{}') && !k.startsWith('{OWN_PREFIX}'))",
                LABEL_KEY.replace('\\', "\\\\")
            ),
            "message": "every key must be a qualified name (an optional DNS subdomain prefix and '/', then a name), outside watcher.dev/",
        }],
    })
}

fn init_containers_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = crate::watcher::container_schema(generator);
    schemars::json_schema!({
        "description": "Init containers run before the pod's own, in this order.",
        "type": "array",
        "maxItems": MAX_INIT_CONTAINERS,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": item,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        for good in ["logs", "a/b", "a..b", ".hidden", "a/./b"] {
            assert!(is_descending_path(good), "{good}");
        }
        for bad in ["/abs", "..", "a/../b", "a/.."] {
            assert!(!is_descending_path(bad), "{bad}");
        }
        for good in ["SERVICE_NAME", "a.b-c", "weird name", "x:y"] {
            assert!(is_env_name(good), "{good}");
        }
        for bad in ["", "A=B", "tab\t", "é"] {
            assert!(!is_env_name(bad), "{bad}");
        }
        let pattern = regex::Regex::new(ENV_NAME).expect("regex");
        for sample in ["SERVICE_NAME", "A=B", "", "weird name", "é", "~", " "] {
            assert_eq!(pattern.is_match(sample), is_env_name(sample), "{sample:?}");
        }
    }

    #[test]
    fn every_problem_names_its_field() {
        let access: AppAccess = serde_json::from_value(json!({
            "appVolumeMounts": [{"mountPath": "var/log"}, {"mountPath": "/a", "subPath": "../up"}],
            "appContainers": ["App"],
            "transferEnv": [{"container": "App", "names": ["A=B"]}],
            "podAnnotations": {"watcher.dev/inject": "x", "bad key": "y", "prometheus.io/scrape": "true"},
            "initContainers": [
                {"name": "log-watcher", "image": "busybox"},
                {"name": "prepare"},
                {"name": "prepare", "image": "busybox", "readinessProbe": {"exec": {"command": ["true"]}}},
            ],
        }))
        .expect("access");
        assert_eq!(
            access.problems("log-watcher", false),
            [
                "spec.appVolumeMounts: needs spec.volume, the volume they mount",
                "spec.appVolumeMounts[0].mountPath: \"var/log\" is not absolute",
                "spec.appVolumeMounts[1].subPath: \"../up\" must be relative, without '..'",
                "spec.appContainers[0]: \"App\" is not a DNS-1123 label",
                "spec.transferEnv[0].container: \"App\" is not a DNS-1123 label",
                "spec.transferEnv[0].names: \"A=B\" is not an environment variable name",
                "spec.podAnnotations: \"bad key\" is not a qualified name",
                "spec.podAnnotations: \"watcher.dev/inject\" is the operator's own (watcher.dev/)",
                "spec.initContainers[0].name: \"log-watcher\" is used twice (containers and init containers)",
                "spec.initContainers[1].image: required",
                "spec.initContainers[2].name: \"prepare\" is used twice (containers and init containers)",
                "spec.initContainers[2].readinessProbe: must not be set for init containers",
            ]
        );
        assert!(AppAccess::default().problems("log-watcher", false).is_empty());
        assert!(AppAccess::default().is_empty());
    }
}
