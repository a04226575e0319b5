//! The sidecar sees the app: one more pure step of [`super::inject`] for each Watcher it
//! injects, adding to the sidecar and to the pod what the Watcher's `AppAccess` asks for, and
//! never what kube-apiserver would refuse (a mountPath twice in one container, a mount of a
//! volume the pod lacks, a volume name twice; see `shared/fixtures/apiserver/README.pods.md`).
//! Each step says what it did and what it skipped, and why: `check-inject` prints those lines.

use k8s_openapi::api::core::v1::Container;
use serde_json::{Value, json};
use watcher_api::{AppAccess, NO_TOKEN_VOLUME, SERVICE_ACCOUNT_PATH, ShareVolumes, Watcher};

use super::ops::Sidecar;
use super::{Fields, PodPatch};
use crate::pod::{ContainerView, MAX_ANNOTATION_BYTES};
use crate::pod_security::Adaptation;

/// Room kept under kube-apiserver's 256 KiB for the annotations the webhook writes itself
/// (`watcher.dev/injected`, `watcher.dev/injected-without-image`, `watcher.dev/original-images`).
const OWN_ANNOTATIONS_ROOM: usize = 4096;

/// What one Watcher did to let its sidecar see the app, for `check-inject`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppReport {
    /// The Watcher.
    pub watcher: String,
    /// One line per mount shared or mounted, variable carried, annotation, init container, and
    /// per thing skipped, with why.
    pub lines: Vec<String>,
}

/// A mountPath as kube-apiserver compares them, but with a trailing `/` dropped: `/data` and
/// `/data/` are one directory to the container runtime, so one of them is never added beside
/// the other.
pub(super) fn normal(path: &str) -> &str {
    match path.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    }
}

/// When the step runs: at admission, or on a pod that exists (`check-inject`: what it carries
/// now is already there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moment {
    /// The pod is being admitted.
    Admission,
    /// The pod exists.
    Existing,
}

/// The Watcher whose sidecar is to see the app, and what the step must know of the pod.
pub(super) struct Seeing<'a, 'b> {
    pub(super) watcher: &'a Watcher,
    /// The names of the pod's containers that a Watcher injected: never app containers.
    pub(super) injected: &'b [&'b str],
    /// What the namespace's enforced Pod Security level sets in the init containers it adds.
    pub(super) init_adaptations: &'b [Adaptation],
    /// What the namespace's resource rules set in them (`None`: their own).
    pub(super) init_resources: &'b [Option<k8s_openapi::api::core::v1::ResourceRequirements>],
    pub(super) moment: Moment,
}

/// Adds to `sidecar` (the Watcher's container as it goes into the pod) and to `patch` what the
/// Watcher's `AppAccess` asks for.
pub(super) fn see_the_app<'a>(
    patch: &mut PodPatch<'a>,
    seeing: Seeing<'a, '_>,
    sidecar: &mut Sidecar,
    warnings: &mut Vec<String>,
) -> AppReport {
    let Seeing { watcher, injected, init_adaptations, init_resources, moment } = seeing;
    let existing = moment == Moment::Existing;
    let name = watcher.metadata.name.clone().unwrap_or_default();
    let access = &watcher.spec.app;
    let mut step = Step { patch, watcher, access, warnings, lines: Vec::new(), name: &name, existing };
    let apps: Vec<(usize, &'a ContainerView)> = step
        .patch
        .containers
        .iter()
        .enumerate()
        .filter(|(_, c)| !injected.contains(&c.name.as_str()) && access.is_app_container(&c.name))
        .collect();
    let reads_apps = access.share_volumes != ShareVolumes::None
        || !access.app_volume_mounts.is_empty()
        || !access.transfer_env.is_empty();
    if apps.is_empty() && reads_apps {
        let why = if access.app_containers.is_empty() {
            "every container of the pod is a Watcher's".to_owned()
        } else {
            format!("appContainers names none of the pod's containers ({})", access.app_containers.join(", "))
        };
        step.warn(format!("no app container: {why}"));
        step.lines.push(format!("sees no app container: {why}"));
    }
    if access.share_volumes != ShareVolumes::None {
        step.share_volumes(&apps, sidecar);
    }
    if !access.app_volume_mounts.is_empty() {
        step.mount_into_apps(&apps);
    }
    if !access.transfer_env.is_empty() {
        step.transfer_env(&apps, sidecar);
    }
    if access.share_process_namespace == Some(true) {
        step.share_process_namespace();
    }
    step.annotate();
    let no_token = access.automount_service_account_token == Some(false);
    if no_token {
        step.no_token(sidecar);
    }
    for (i, init) in access.init_containers.iter().enumerate() {
        let mut value = init_adaptations.get(i).unwrap_or(&Adaptation::default()).written(init);
        super::resources::write(&mut value, init_resources.get(i).and_then(Option::as_ref));
        if no_token {
            mount_no_token(&mut value, init);
        }
        step.patch.insert_init_container(value);
        step.lines.push(format!("runs init container {} before the pod's own", init.name));
    }
    let lines = step.lines;
    AppReport { watcher: name, lines }
}

struct Step<'p, 'a> {
    patch: &'p mut PodPatch<'a>,
    watcher: &'a Watcher,
    access: &'a AppAccess,
    warnings: &'p mut Vec<String>,
    lines: Vec<String>,
    name: &'p str,
    existing: bool,
}

impl<'a> Step<'_, 'a> {
    fn warn(&mut self, what: String) {
        self.warnings.push(format!("Watcher {}: {what}", self.name));
    }

    /// `shareVolumes`: the app containers' mounts into the sidecar, pod order, first at a path
    /// wins; never at a path the sidecar has, nor the ServiceAccount token's.
    fn share_volumes(&mut self, apps: &[(usize, &ContainerView)], sidecar: &mut Sidecar) {
        let own = &self.watcher.spec.container;
        let mut taken: Vec<&str> = own.volume_mounts.iter().flatten().map(|m| normal(&m.mount_path)).collect();
        let own_paths = taken.len();
        let devices = own.volume_devices.as_deref().unwrap_or_default();
        let privileged = own.security_context.as_ref().and_then(|s| s.privileged) == Some(true);
        let mut shared = Vec::new();
        let mut token_skipped = false;
        // The mounts `appVolumeMounts` adds are the Watcher's own volume, not the app's: not
        // shared (at admission they are not there yet; on an existing pod they are).
        let volume = self.watcher.spec.volume.as_deref().map(|v| v.name.as_str());
        let ours = |name: &str, path: &str| {
            volume == Some(name) && self.access.app_volume_mounts.iter().any(|m| normal(&m.mount_path) == path)
        };
        for (_, app) in apps {
            for mount in app.volume_mounts.iter().flatten() {
                let path = normal(&mount.mount_path);
                if ours(&mount.name, path) {
                    continue;
                }
                if path == SERVICE_ACCOUNT_PATH {
                    if !token_skipped {
                        token_skipped = true;
                        self.lines.push(format!(
                            "does not share {path}: the ServiceAccount token, which kube-apiserver mounts itself"
                        ));
                    }
                    continue;
                }
                if let Some(at) = taken.iter().position(|p| *p == path) {
                    if at < own_paths {
                        self.lines
                            .push(format!("does not share {path} of {}: the sidecar mounts {path} itself", app.name));
                    }
                    continue;
                }
                let why = if !self.patch.volume_names.contains(&mount.name.as_str()) {
                    Some(format!("the pod has no volume {}", mount.name))
                } else if devices.iter().any(|d| d.name == mount.name || normal(&d.device_path) == path) {
                    Some("the sidecar uses that volume or path as a device".to_owned())
                } else {
                    None
                };
                if let Some(why) = why {
                    self.lines.push(format!("does not share {path} of {}: {why}", app.name));
                    continue;
                }
                taken.push(path);
                let mut copy = mount.to_json();
                let read_only = match self.access.share_volumes {
                    ShareVolumes::ReadOnly => {
                        copy["readOnly"] = Value::Bool(true);
                        true
                    }
                    _ => mount.read_only == Some(true),
                };
                // Bidirectional propagation is for privileged containers only: the sidecar
                // still sees what the app mounts there.
                if mount.mount_propagation.as_deref() == Some("Bidirectional") && !privileged {
                    copy["mountPropagation"] = json!("HostToContainer");
                }
                let mode = if read_only { "read-only" } else { "read-write" };
                self.lines.push(format!("shares {path} of {} ({mode})", app.name));
                shared.push(copy);
            }
        }
        append(sidecar, "volumeMounts", shared);
    }

    /// `appVolumeMounts`: the Watcher's volume into each app container, except where the
    /// container mounts something else at that path.
    fn mount_into_apps(&mut self, apps: &[(usize, &ContainerView)]) {
        let Some(volume) = self.watcher.spec.volume.as_deref() else { return };
        let volume = volume.name.as_str();
        if self.patch.pod_has_volume(volume) {
            self.warn(format!(
                "the pod has a volume {volume} of its own: the app containers mount the pod's, not the Watcher's"
            ));
        }
        for (index, app) in apps {
            for mount in &self.access.app_volume_mounts {
                let path = normal(&mount.mount_path);
                match self.patch.mounted_at(*index, path) {
                    Some(name) if name == volume => {
                        self.lines.push(format!("mounts volume {volume} at {path} in {}", app.name));
                        continue;
                    }
                    Some(_) => {
                        self.warn(format!("container {} already mounts something at {path}: left as it is", app.name));
                        self.lines.push(format!(
                            "does not mount {volume} at {path} in {}: it mounts something else there",
                            app.name
                        ));
                        continue;
                    }
                    None => {}
                }
                let devices = app.volume_devices.as_deref().unwrap_or_default();
                if devices.iter().any(|d| d.name == volume || normal(&d.device_path) == path) {
                    self.warn(format!("container {} uses {volume} or {path} as a device: left as it is", app.name));
                    self.lines.push(format!("does not mount {volume} at {path} in {}: a device uses it", app.name));
                    continue;
                }
                let mut value = json!({"name": volume, "mountPath": mount.mount_path});
                if let Some(sub) = &mount.sub_path {
                    value["subPath"] = json!(sub);
                }
                if let Some(read_only) = mount.read_only {
                    value["readOnly"] = json!(read_only);
                }
                self.patch.add_app_mount(*index, volume, &mount.mount_path, value);
                self.lines.push(format!("mounts volume {volume} at {path} in {}", app.name));
            }
        }
    }

    /// `transferEnv`: variables of an app container into the sidecar, as the app has them,
    /// unless the sidecar defines them.
    fn transfer_env(&mut self, apps: &[(usize, &ContainerView)], sidecar: &mut Sidecar) {
        let own: Vec<&str> = self.watcher.spec.container.env.iter().flatten().map(|e| e.name.as_str()).collect();
        let mut carried: Vec<&str> = Vec::new();
        let mut values = Vec::new();
        for transfer in &self.access.transfer_env {
            let source = match &transfer.container {
                Some(name) => apps.iter().find(|(_, c)| c.name == *name),
                None => apps.first(),
            };
            let Some((_, source)) = source else {
                let which = transfer
                    .container
                    .as_deref()
                    .map_or("no app container".to_owned(), |n| format!("no app container {n}"));
                self.warn(format!("{which} to carry {} from", transfer.names.join(", ")));
                self.lines.push(format!("does not carry {}: the pod has {which}", transfer.names.join(", ")));
                continue;
            };
            for name in &transfer.names {
                if own.contains(&name.as_str()) {
                    self.lines.push(format!("does not carry {name}: the sidecar defines it"));
                    continue;
                }
                if carried.contains(&name.as_str()) {
                    continue;
                }
                // The last definition is the one the container sees.
                let Some(env) = source.env.iter().flatten().rev().find(|e| e.name == *name) else {
                    self.lines.push(format!("does not carry {name}: {} has no such variable", source.name));
                    continue;
                };
                let mut value = json!({"name": name});
                if let Some(text) = &env.value {
                    value["value"] = json!(text);
                }
                if let Some(from) = &env.value_from {
                    let mut from = from.clone();
                    // Without a container name a resource field is read from the container the
                    // variable is in: the sidecar's own limits, not the app's.
                    if let Some(field) = from.get_mut("resourceFieldRef").and_then(Value::as_object_mut) {
                        field.entry("containerName").or_insert_with(|| json!(source.name));
                    }
                    value["valueFrom"] = from;
                }
                carried.push(name);
                values.push(value);
                self.lines.push(format!("carries {name} from {}", source.name));
            }
        }
        append(sidecar, "env", values);
    }

    /// `shareProcessNamespace: true`: set where the pod leaves it unset.
    fn share_process_namespace(&mut self) {
        let spec = self.patch.spec;
        if spec.is_some_and(|s| s.host_pid == Some(true)) {
            self.warn("the pod uses the host's process namespace (hostPID): not shared".to_owned());
            self.lines.push("does not share the process namespace: the pod uses the host's (hostPID)".to_owned());
        } else if spec.is_some_and(|s| s.share_process_namespace == Some(false)) && !self.patch.process_shared {
            self.warn("the pod says shareProcessNamespace: false: kept".to_owned());
            self.lines
                .push("does not share the process namespace: the pod says shareProcessNamespace: false".to_owned());
        } else {
            self.patch.share_process_namespace();
            self.lines.push("shares the pod's process namespace".to_owned());
        }
    }

    /// `automountServiceAccountToken: false`: an empty read-only volume at the token's path of
    /// the sidecar (and of each init container, as they are inserted), where the ServiceAccount
    /// admission plugin then mounts no token. Without a change left for that plugin to make,
    /// kube-apiserver has no reason to call the webhook again.
    fn no_token(&mut self, sidecar: &mut Sidecar) {
        self.patch.add_volume(NO_TOKEN_VOLUME, &json!({"name": NO_TOKEN_VOLUME, "emptyDir": {}}));
        if mount_no_token(sidecar, &self.watcher.spec.container) {
            self.lines.push(format!("gets no API token: an empty read-only volume at {SERVICE_ACCOUNT_PATH}"));
        } else {
            self.lines
                .push(format!("gets no API token: its container mounts its own volume at {SERVICE_ACCOUNT_PATH}"));
        }
    }

    /// `podAnnotations`: added where the pod has no such key; never over kube-apiserver's limit.
    fn annotate(&mut self) {
        for (key, value) in &self.access.pod_annotations {
            if self.patch.has_annotation(key) && self.existing {
                self.lines.push(format!("annotation {key} is on the pod (never overwritten)"));
            } else if self.patch.has_annotation(key) {
                self.lines.push(format!("does not annotate {key}: the pod has it (never overwritten)"));
            } else if self.patch.annotation_bytes + key.len() + value.len() + OWN_ANNOTATIONS_ROOM
                > MAX_ANNOTATION_BYTES
            {
                self.warn(format!("annotation {key} not added: the pod's annotations would pass 256 KiB"));
                self.lines.push(format!("does not annotate {key}: the pod's annotations would pass 256 KiB"));
            } else {
                self.patch.add_annotation(key, value);
                self.lines.push(format!("annotates {key}"));
            }
        }
    }
}

/// Mounts [`NO_TOKEN_VOLUME`] read-only at the ServiceAccount token's path of `value` (the JSON
/// of `container`), unless the container mounts something there itself; whether it did.
fn mount_no_token(value: &mut impl Fields, container: &Container) -> bool {
    let own = container.volume_mounts.iter().flatten().any(|m| normal(&m.mount_path) == SERVICE_ACCOUNT_PATH);
    if !own {
        let mount = json!({"name": NO_TOKEN_VOLUME, "mountPath": SERVICE_ACCOUNT_PATH, "readOnly": true});
        append(value, "volumeMounts", vec![mount]);
    }
    !own
}

/// Appends `values` to the list `key` of the JSON object `container`, creating it.
fn append(container: &mut impl Fields, key: &str, values: Vec<Value>) {
    if values.is_empty() {
        return;
    }
    match container.field_mut(key) {
        Some(Value::Array(list)) => list.extend(values),
        _ => container.set(key, Value::Array(values)),
    }
}

#[cfg(test)]
mod tests {
    use super::normal;

    #[test]
    fn paths_compare_without_a_trailing_slash() {
        assert_eq!(normal("/data/"), "/data");
        assert_eq!(normal("/data"), "/data");
        assert_eq!(normal("/"), "/");
        assert_eq!(normal("//"), "/");
    }
}
