//! Pods that are meant to end (`restartPolicy` `Never` or `OnFailure`: Jobs, CronJobs, Ats, bare
//! pods) end when their app containers do, even where a Watcher's sidecar is a regular
//! container (servers before 1.29, `nativeSidecar: Never`), which the kubelet would otherwise
//! run for ever.
//!
//! The webhook prepares such a pod: a sidecar with a `command` runs it under `watcher-supervise`,
//! which an init container of the supervisor's image copies into an emptyDir; every such
//! sidecar is named in `watcher.dev/end-sidecars` and the pod labelled so. The operator ends them
//! once the app containers have ended for good, by switching their image to the supervisor's
//! (controller `pods`, `ending`): the kubelet stops each one and starts it again in that image,
//! where it exits 0 at once. A sidecar without a command (the image's entrypoint) is stopped by
//! the kubelet's SIGTERM, as in a pod deletion, and then exits 0 the same way.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use watcher_api::{END_SIDECARS_ANNOTATION, NO_TOKEN_VOLUME, SERVICE_ACCOUNT_PATH, SUPERVISOR_DIR, SUPERVISOR_NAME};

use crate::PodView;

/// Whether `pod` is meant to end: its `restartPolicy` is `Never` or `OnFailure`.
pub(super) fn meant_to_end(pod: &PodView) -> bool {
    let spec = pod.spec.as_ref();
    matches!(spec.and_then(|s| s.restart_policy.as_deref()), Some("Never" | "OnFailure"))
        && spec.and_then(|s| s.os.as_ref()).is_none_or(|os| os.name != "windows")
}

/// The sidecars of `pod` that an earlier admission already named to be ended.
pub(super) fn already_named(pod: &PodView) -> Vec<String> {
    let own = pod.metadata.annotations.own.as_ref();
    let value = own.and_then(|a| a.get(END_SIDECARS_ANNOTATION)).map(String::as_str).unwrap_or_default();
    value.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect()
}

/// How a regular sidecar is made to end with its app.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Supervised {
    /// Its command now runs under the supervisor: the supervisor is needed in the pod.
    Wrapped,
    /// It sets no command: the kubelet's SIGTERM stops it, the supervisor's image ends it.
    Entrypoint,
}

/// Why a sidecar cannot run under the supervisor.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotSupervised {
    /// The container is not a JSON object.
    NotAnObject,
    /// The supervisor's path or volume name is taken.
    Taken,
}

impl std::fmt::Display for NotSupervised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAnObject => f.write_str("the container is not an object"),
            Self::Taken => {
                write!(f, "its container already mounts {SUPERVISOR_DIR} or a volume named {SUPERVISOR_NAME}")
            }
        }
    }
}

/// Whether `container` sets a command: under the supervisor, it needs the supervisor's init
/// container.
pub(super) fn has_command(container: &k8s_openapi::api::core::v1::Container) -> bool {
    container.command.as_ref().is_some_and(|c| !c.is_empty())
}

/// Runs `sidecar`'s command (JSON, as it goes into the pod) under the supervisor, the
/// supervisor's volume mounted read-only; a sidecar without a command is left as it is.
/// `Err` says why it cannot be supervised (the supervisor's path or volume name taken).
pub(super) fn supervise(sidecar: &mut Value) -> Result<Supervised, NotSupervised> {
    let Value::Object(fields) = sidecar else { return Err(NotSupervised::NotAnObject) };
    let command = match fields.get("command") {
        Some(Value::Array(command)) if !command.is_empty() => command.clone(),
        _ => return Ok(Supervised::Entrypoint),
    };
    let mounts = fields.get("volumeMounts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let taken = mounts.iter().any(|m| {
        m.get("name").and_then(Value::as_str) == Some(SUPERVISOR_NAME)
            || m.get("mountPath").and_then(Value::as_str).map(|p| p.trim_end_matches('/')) == Some(SUPERVISOR_DIR)
    });
    if taken {
        return Err(NotSupervised::Taken);
    }
    let program = format!("{SUPERVISOR_DIR}/{SUPERVISOR_NAME}");
    let wrapped: Vec<Value> = [json!(program), json!("run"), json!("--")].into_iter().chain(command).collect();
    fields.insert("command".to_owned(), Value::Array(wrapped));
    let mount = json!({"name": SUPERVISOR_NAME, "mountPath": SUPERVISOR_DIR, "readOnly": true});
    match fields.get_mut("volumeMounts") {
        Some(Value::Array(mounts)) => mounts.push(mount),
        _ => {
            fields.insert("volumeMounts".to_owned(), Value::Array(vec![mount]));
        }
    }
    Ok(Supervised::Wrapped)
}

/// The init container that copies the supervisor into its volume: as restricted as Pod
/// Security's `restricted` level asks, with a read-only root, whatever the namespace enforces;
/// no API token (an empty read-only volume at the token's path, which the ServiceAccount
/// plugin respects: nothing left for it to add, no reinvocation of the webhook for it);
/// requests equal to limits, so that it neither changes a `Guaranteed` pod's QoS class nor
/// lacks what a ResourceQuota on requests or limits asks of every container.
pub(super) fn init_container(image: &str, resources: &ResourceRequirements) -> Value {
    json!({
        "name": SUPERVISOR_NAME,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [format!("/usr/local/bin/{SUPERVISOR_NAME}"), "install", SUPERVISOR_DIR],
        "volumeMounts": [
            {"name": SUPERVISOR_NAME, "mountPath": SUPERVISOR_DIR},
            {"name": NO_TOKEN_VOLUME, "mountPath": SERVICE_ACCOUNT_PATH, "readOnly": true},
        ],
        "resources": resources,
        "securityContext": {
            "runAsUser": watcher_api::ADAPTED_RUN_AS_USER,
            "runAsNonRoot": true,
            "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    })
}

/// The supervisor's requests and limits where the namespace's resource rules change nothing.
pub(super) fn resources() -> ResourceRequirements {
    let list = || {
        Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("20m".into())),
            ("memory".to_owned(), Quantity("16Mi".into())),
        ]))
    };
    ResourceRequirements { claims: None, limits: list(), requests: list() }
}

/// Whether `pod` has the supervisor's init container already (an earlier admission's).
pub(super) fn has_supervisor(pod: &PodView) -> bool {
    let spec = pod.spec.as_ref();
    let mut containers = spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
    containers.any(|c| c.name == SUPERVISOR_NAME)
}

/// The emptyDir the supervisor is copied into (its binary is about 1.2 MB).
pub(super) fn volume() -> Value {
    json!({"name": SUPERVISOR_NAME, "emptyDir": {"sizeLimit": "16Mi"}})
}

/// The empty volume at the init container's token path (as for a Watcher without a token).
pub(super) fn no_token_volume() -> Value {
    json!({"name": NO_TOKEN_VOLUME, "emptyDir": {}})
}
