//! Pods that are meant to end (`restartPolicy` `Never` or `OnFailure`: Jobs, CronJobs, Ats, bare
//! pods) end when their app containers do, even where a Watcher's sidecar is a regular
//! container (servers before 1.29, `nativeSidecar: Never`), which the kubelet would otherwise
//! run for ever.
//!
//! The webhook prepares such a pod: a sidecar with a `command` runs it under `watcher-supervise`,
//! which an init container of the supervisor's image copies into an emptyDir, and watcher-agent
//! is told where to look (`WATCHER_ENDED_FILE`). Both read the downward API file
//! `/watcher-ended/ended`, which holds `watcher.dev/sidecars-ended` once the operator has
//! written it, and end by themselves, exit 0, with no change to the pod's spec: the kubelet
//! counts no restart (a Job under `OnFailure` counts each toward its `backoffLimit`). A native
//! sidecar is stopped by the kubelet's SIGTERM, which the supervisor turns into an end.
//!
//! Every regular sidecar is named in `watcher.dev/end-sidecars` and the pod labelled so. The
//! operator (controller `ending`) writes the annotation once the app containers have ended for
//! good; a sidecar that runs its image's entrypoint, of another image than the agent's, cannot
//! read it, and is switched to the supervisor's image instead: the kubelet stops it (SIGTERM)
//! and starts it again in that image, where it exits 0 at once, a restart the kubelet counts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Value, json};
use watcher_api::{
    ENDED_DIR, ENDED_FILE, ENDED_FILE_ENV, ENDED_VOLUME, NO_TOKEN_VOLUME, SERVICE_ACCOUNT_PATH, SUPERVISOR_DIR,
    SUPERVISOR_NAME, SidecarEnding, annotation,
};

use super::Fields;
use super::ops::Sidecar;
use crate::PodView;

/// Whether `pod` is meant to end: its `restartPolicy` is `Never` or `OnFailure`.
pub(super) fn meant_to_end(pod: &PodView) -> bool {
    let spec = pod.spec.as_ref();
    let os = spec.and_then(|s| s.os.as_ref()).map(|os| os.name.as_str());
    watcher_api::meant_to_end(spec.and_then(|s| s.restart_policy.as_deref()), os)
}

/// The sidecars of `pod` that an earlier admission already named to be ended.
pub(super) fn already_named(pod: &PodView) -> Vec<String> {
    let own = pod.metadata.annotations.own.as_ref();
    own.map(annotation::EndSidecars::read).unwrap_or_default().into_iter().map(str::to_owned).collect()
}

/// How a sidecar is made to end with its app.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Supervised {
    /// Its command now runs under the supervisor, which ends it on SIGTERM or once the ended
    /// file says so: the supervisor and the ended volume are needed in the pod.
    Wrapped,
    /// watcher-agent, run by its image's entrypoint: it reads the ended file itself (the ended
    /// volume is needed).
    EndsItself,
    /// Another image's entrypoint: the kubelet's SIGTERM stops a native one; a regular one is
    /// switched to the supervisor's image (a restart).
    Entrypoint,
}

impl Supervised {
    /// Whether the sidecar reads the ended file.
    pub(super) fn reads_ended_file(&self) -> bool {
        matches!(self, Self::Wrapped | Self::EndsItself)
    }
}

/// Why a sidecar cannot run under the supervisor.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotSupervised {
    /// The supervisor's path or volume name is taken.
    Taken,
}

impl std::fmt::Display for NotSupervised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Taken => write!(
                f,
                "its container already mounts {SUPERVISOR_DIR} or {ENDED_DIR}, or a volume named {SUPERVISOR_NAME} or \
                 {ENDED_VOLUME}"
            ),
        }
    }
}

/// Whether `container` sets a command: under the supervisor, it needs the supervisor's init
/// container.
pub(super) fn has_command(container: &k8s_openapi::api::core::v1::Container) -> bool {
    container.command.as_ref().is_some_and(|c| !c.is_empty())
}

/// Prepares `sidecar` (JSON, as it goes into the pod) to end by itself with its app: its command
/// runs under the supervisor, told of the ended file; watcher-agent, run by its entrypoint, gets
/// the file in `WATCHER_ENDED_FILE`; another entrypoint is left as it is. `Err` says why it
/// cannot be prepared (a path or volume name of ours taken).
pub(super) fn supervise(fields: &mut Sidecar) -> Result<Supervised, NotSupervised> {
    let command = match fields.field("command") {
        Some(Value::Array(command)) if !command.is_empty() => Some(command.clone()),
        _ => None,
    };
    let image = fields.field("image").and_then(Value::as_str).unwrap_or_default();
    if !SidecarEnding::of(command.is_some(), image).ends_by_itself() {
        return Ok(Supervised::Entrypoint);
    }
    let mounts = fields.field("volumeMounts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let taken = mounts.iter().any(|m| {
        let name = m.get("name").and_then(Value::as_str);
        let path = m.get("mountPath").and_then(Value::as_str).map(|p| p.trim_end_matches('/'));
        matches!(name, Some(SUPERVISOR_NAME | ENDED_VOLUME)) || matches!(path, Some(SUPERVISOR_DIR | ENDED_DIR))
    });
    if taken {
        return Err(NotSupervised::Taken);
    }
    let ended = json!({"name": ENDED_VOLUME, "mountPath": ENDED_DIR, "readOnly": true});
    let how = match command {
        Some(command) => {
            let program = format!("{SUPERVISOR_DIR}/{SUPERVISOR_NAME}");
            let head = [json!(program), json!("run"), json!("--ended-file"), json!(ENDED_FILE), json!("--")];
            fields.set("command", Value::Array(head.into_iter().chain(command).collect()));
            push(
                fields,
                "volumeMounts",
                json!({"name": SUPERVISOR_NAME, "mountPath": SUPERVISOR_DIR, "readOnly": true}),
            );
            Supervised::Wrapped
        }
        None => {
            let env = fields.field("env").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            if !env.iter().any(|e| e.get("name").and_then(Value::as_str) == Some(ENDED_FILE_ENV)) {
                push(fields, "env", json!({"name": ENDED_FILE_ENV, "value": ENDED_FILE}));
            }
            Supervised::EndsItself
        }
    };
    push(fields, "volumeMounts", ended);
    Ok(how)
}

/// Appends `value` to the list `key` of `fields`, which it creates where missing.
fn push(fields: &mut Sidecar, key: &str, value: Value) {
    match fields.field_mut(key) {
        Some(Value::Array(list)) => list.push(value),
        _ => fields.set(key, Value::Array(vec![value])),
    }
}

/// The downward API volume whose file `ended` holds `watcher.dev/sidecars-ended`: empty until
/// the operator writes the annotation, which the kubelet then puts in the file.
pub(super) fn ended_volume() -> Value {
    let field = format!("metadata.annotations['{}']", annotation::SidecarsEnded::KEY);
    json!({"name": ENDED_VOLUME, "downwardAPI": {"items": [{"path": "ended", "fieldRef": {"fieldPath": field}}]}})
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
