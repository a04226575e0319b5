//! A revision rebuilt from an injected pod: for a spec that was injected and replaced before any
//! controller saw it (the operator down, or a change a moment after the pods were created), no
//! revision was written, yet its pods carry it. Everything a revision holds is on such a pod as
//! injected, and its `watcher.dev/injected` annotation names the spec's hash: the spec is
//! searched for among the ways the pod could have been made from it, and kept only when its
//! hash is that one, so a rebuilt revision is exactly the spec the pod was injected with.
//!
//! What the webhook added is taken off (the `envFrom` of the Watcher's ConfigMap, a native
//! sidecar's `restartPolicy`, the mount of the volume that keeps an API token out), and so is
//! what kube-apiserver adds (the ServiceAccount token mount, defaults, LimitRange resources);
//! where either could be the Watcher's own (a default the Watcher wrote, a field Pod Security
//! adaptation sets, mounts shared from the app), both are tried. The search covers a Watcher's
//! container, volume, image pull secret, `nativeSidecar`, config data, `shareVolumes` and
//! `automountServiceAccountToken`; a spec that also sets `appVolumeMounts`, `appContainers`,
//! `transferEnv`, `shareProcessNamespace`, `podAnnotations` or `initContainers` is not rebuilt
//! (its pods then go the way of pods whose revision is unknown).

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Pod, Volume};
use serde_json::{Map, Value};
use watcher_api::{
    AppAccess, InjectionSpec, NO_TOKEN_VOLUME, NativeSidecar, SERVICE_ACCOUNT_PATH, ShareVolumes, config_map_name,
};

/// The most candidate specs hashed for one pod (each costs a serialisation, a few µs).
pub const MAX_CANDIDATES: usize = 50_000;

/// Fields kube-apiserver defaults in a container, with their default value: a stored container
/// has them whether or not the Watcher wrote them.
const CONTAINER_DEFAULTS: [(&str, &str); 2] =
    [("terminationMessagePath", "/dev/termination-log"), ("terminationMessagePolicy", "File")];

/// What Pod Security adaptation sets in a Watcher's container (never in its hash), and its value.
fn adapted_fields() -> [(&'static str, Value); 5] {
    [
        ("allowPrivilegeEscalation", Value::Bool(false)),
        ("capabilities", serde_json::json!({"drop": ["ALL"]})),
        ("seccompProfile", serde_json::json!({"type": "RuntimeDefault"})),
        ("runAsNonRoot", Value::Bool(true)),
        ("runAsUser", Value::from(watcher_api::ADAPTED_RUN_AS_USER)),
    ]
}

/// The spec `pod` was injected with for Watcher `watcher` (whose container was named
/// `container_hint` when last seen), whose hash is `hash`; `None` when no spec the search
/// covers has that hash.
pub fn rebuild(pod: &Pod, watcher: &str, container_hint: &str, hash: &str) -> Option<InjectionSpec> {
    let spec = pod.spec.as_ref()?;
    let value = |c: &Container| serde_json::to_value(c).ok();
    // The container the hint names first, then every other one (a spec may have renamed it).
    let mut containers: Vec<(Value, bool)> = Vec::new();
    for (list, init) in [(&spec.containers, false), (spec.init_containers.as_ref().unwrap_or(&Vec::new()), true)] {
        for c in list {
            let entry = (value(c)?, init);
            if c.name == container_hint { containers.insert(0, entry) } else { containers.push(entry) }
        }
    }
    let app: Vec<Value> = spec.containers.iter().filter_map(value).collect();
    let limit_ranger = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/limit-ranger"))
        .cloned()
        .unwrap_or_default();
    let volumes: Vec<Value> = spec.volumes.iter().flatten().filter_map(|v| serde_json::to_value(v).ok()).collect();
    let secrets: Vec<LocalObjectReference> = spec.image_pull_secrets.clone().unwrap_or_default();
    let mut budget = MAX_CANDIDATES;
    containers.iter().find_map(|(container, init)| {
        let search =
            Search { watcher, hash, app: &app, limit_ranger: &limit_ranger, volumes: &volumes, secrets: &secrets };
        search.container(container, *init, &mut budget)
    })
}

struct Search<'a> {
    watcher: &'a str,
    hash: &'a str,
    /// The pod's regular containers (the app's, and regular sidecars).
    app: &'a [Value],
    limit_ranger: &'a str,
    volumes: &'a [Value],
    secrets: &'a [LocalObjectReference],
}

impl Search<'_> {
    fn container(&self, stored: &Value, init: bool, budget: &mut usize) -> Option<InjectionSpec> {
        let mut base = stored.as_object()?.clone();
        let name = base.get("name")?.as_str()?.to_owned();
        // A native sidecar is an init container that restarts; a plain init container is not one.
        if init && base.remove("restartPolicy").and_then(|p| p.as_str().map(str::to_owned)).as_deref() != Some("Always")
        {
            return None;
        }
        let natives: &[NativeSidecar] = if init {
            &[NativeSidecar::Auto, NativeSidecar::Always]
        } else {
            &[NativeSidecar::Auto, NativeSidecar::Never]
        };
        let config = take_config_map(&mut base, &config_map_name(self.watcher));
        let mut mounts = take_list(&mut base, "volumeMounts");
        // kube-apiserver's token mount, and the webhook's empty volume that keeps it out.
        mounts.retain(|m| !(m["mountPath"] == SERVICE_ACCOUNT_PATH && is_api_access(&m["name"])));
        let no_token = mounts.iter().any(|m| m["name"] == NO_TOKEN_VOLUME);
        mounts.retain(|m| m["name"] != NO_TOKEN_VOLUME);
        let mounted: Vec<&str> = mounts.iter().filter_map(|m| m["name"].as_str()).collect();
        // The Watcher's volume, if any, is one its sidecar mounts (or none).
        let volumes: Vec<Option<Value>> = std::iter::once(None)
            .chain(
                self.volumes
                    .iter()
                    .filter(|v| v["name"].as_str().is_some_and(|n| mounted.contains(&n) && n != NO_TOKEN_VOLUME))
                    .flat_map(|v| volume_forms(v).into_iter().map(Some)),
            )
            .collect();
        let secrets: Vec<Option<&LocalObjectReference>> =
            std::iter::once(None).chain(self.secrets.iter().map(Some)).collect();
        let app: Vec<&Value> = self.app.iter().filter(|c| c["name"].as_str() != Some(&name)).collect();
        for (share, own_mounts) in share_options(&mounts, &app) {
            for fields in self.field_forms(&base, &name) {
                let mut container = fields.clone();
                if !own_mounts.is_empty() {
                    container.insert("volumeMounts".into(), Value::Array(own_mounts.clone()));
                }
                let Ok(container) = serde_json::from_value::<Container>(Value::Object(container)) else { continue };
                let access = AppAccess {
                    share_volumes: share,
                    automount_service_account_token: no_token.then_some(false),
                    ..AppAccess::default()
                };
                for native in natives {
                    for volume in &volumes {
                        let volume: Option<Box<Volume>> = match volume {
                            Some(v) => Some(Box::new(serde_json::from_value(v.clone()).ok()?)),
                            None => None,
                        };
                        for secret in &secrets {
                            *budget = budget.checked_sub(1)?;
                            let candidate = InjectionSpec {
                                container: container.clone(),
                                volume: volume.clone(),
                                image_pull_secrets: secret.cloned(),
                                native_sidecar: *native,
                                config,
                                app: access.clone(),
                            };
                            if candidate.hash() == self.hash {
                                return Some(candidate);
                            }
                        }
                    }
                }
            }
        }
        None
    }

    /// The container's fields (mounts aside) as the Watcher may have written them: with and
    /// without each value kube-apiserver or Pod Security could have set.
    fn field_forms(&self, base: &Map<String, Value>, name: &str) -> Vec<Map<String, Value>> {
        let mut forms = vec![base.clone()];
        let toggle = |forms: &mut Vec<Map<String, Value>>, strip: &dyn Fn(&mut Map<String, Value>) -> bool| {
            let mut stripped = Vec::new();
            for form in forms.iter() {
                let mut copy = form.clone();
                if strip(&mut copy) {
                    stripped.push(copy);
                }
            }
            // The stripped forms first: a Watcher seldom writes what is defaulted.
            stripped.append(forms);
            *forms = stripped;
        };
        for (field, default) in CONTAINER_DEFAULTS {
            toggle(&mut forms, &|c| c.get(field).and_then(Value::as_str) == Some(default) && c.remove(field).is_some());
        }
        toggle(&mut forms, &|c| c.remove("imagePullPolicy").is_some());
        let limited = self.limit_ranger.contains(&format!("container {name}"));
        toggle(&mut forms, &|c| match c.get("resources") {
            Some(Value::Object(r)) if r.is_empty() || limited => c.remove("resources").is_some(),
            _ => false,
        });
        toggle(&mut forms, &strip_nested_defaults);
        for (field, value) in adapted_fields() {
            toggle(&mut forms, &|c| {
                let Some(Value::Object(context)) = c.get_mut("securityContext") else { return false };
                if context.get(field) != Some(&value) {
                    return false;
                }
                context.remove(field);
                if context.is_empty() {
                    c.remove("securityContext");
                }
                true
            });
        }
        forms
    }
}

/// Whether a volume name is the ServiceAccount admission plugin's (`kube-api-access-xxxxx`).
fn is_api_access(name: &Value) -> bool {
    name.as_str().is_some_and(|n| n.starts_with("kube-api-access-"))
}

/// Takes the `envFrom` entry of the Watcher's ConfigMap off `container`: whether it was there.
fn take_config_map(container: &mut Map<String, Value>, config_map: &str) -> bool {
    let Some(Value::Array(sources)) = container.get_mut("envFrom") else { return false };
    let at = sources.iter().rposition(|s| s["configMapRef"]["name"] == config_map && s.get("prefix").is_none());
    let Some(at) = at else { return false };
    sources.remove(at);
    if sources.is_empty() {
        container.remove("envFrom");
    }
    true
}

fn take_list(container: &mut Map<String, Value>, key: &str) -> Vec<Value> {
    match container.remove(key) {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    }
}

/// `shareVolumes` and the sidecar's own mounts under it: `None` with every mount its own, or
/// `ReadOnly`/`ReadWrite` with a tail of mounts that the app containers have (the webhook
/// appends the shared ones after the sidecar's own).
fn share_options(mounts: &[Value], app: &[&Value]) -> Vec<(ShareVolumes, Vec<Value>)> {
    let mut options = vec![(ShareVolumes::None, mounts.to_vec())];
    let app_has = |mount: &Value, read_only: bool| {
        app.iter().flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten()).any(|m| {
            m["name"] == mount["name"] && m["mountPath"] == mount["mountPath"] && {
                let mut expected = m.clone();
                if read_only && let Some(fields) = expected.as_object_mut() {
                    fields.insert("readOnly".into(), Value::Bool(true));
                }
                expected == *mount
            }
        })
    };
    for (mode, read_only) in [(ShareVolumes::ReadOnly, true), (ShareVolumes::ReadWrite, false)] {
        // Sharing adds nothing where the app mounts nothing the sidecar lacks: still a mode.
        for own in (0..=mounts.len()).rev() {
            if mounts[own..].iter().all(|m| app_has(m, read_only)) {
                options.push((mode, mounts[..own].to_vec()));
            }
        }
    }
    options
}

/// Takes off the defaults kube-apiserver writes inside a container (port protocols, probe
/// timings and schemes, field references' `apiVersion`): whether any was there.
fn strip_nested_defaults(container: &mut Map<String, Value>) -> bool {
    let mut changed = false;
    let mut remove_if = |object: &mut Value, field: &str, default: &Value| {
        if let Some(fields) = object.as_object_mut()
            && fields.get(field) == Some(default)
        {
            fields.remove(field);
            changed = true;
        }
    };
    if let Some(Value::Array(ports)) = container.get_mut("ports") {
        for port in ports {
            remove_if(port, "protocol", &Value::from("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe) {
            for (field, default) in
                [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)]
            {
                remove_if(probe, field, &Value::from(default));
            }
            if let Some(get) = probe.get_mut("httpGet") {
                remove_if(get, "scheme", &Value::from("HTTP"));
            }
        }
    }
    if let Some(Value::Array(env)) = container.get_mut("env") {
        for variable in env {
            if let Some(field) = variable.pointer_mut("/valueFrom/fieldRef") {
                remove_if(field, "apiVersion", &Value::from("v1"));
            }
        }
    }
    changed
}

/// A volume as stored and as the Watcher may have written it (without the `defaultMode: 420`
/// kube-apiserver writes into ConfigMap, Secret, projected and downward API volumes).
fn volume_forms(stored: &Value) -> Vec<Value> {
    let mut plain = stored.clone();
    let mut changed = false;
    if let Some(fields) = plain.as_object_mut() {
        for source in ["configMap", "secret", "projected", "downwardAPI"] {
            if let Some(Value::Object(source)) = fields.get_mut(source)
                && source.get("defaultMode") == Some(&Value::from(420))
            {
                source.remove("defaultMode");
                changed = true;
            }
        }
    }
    if changed { vec![plain, stored.clone()] } else { vec![plain] }
}

#[cfg(test)]
mod tests;
