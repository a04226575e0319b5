//! watcher-agent's configuration as files: a Watcher whose sidecar is watcher-agent and that
//! has config data gets its ConfigMap mounted too (beside `envFrom`), where the agent reads it
//! again while it runs (`AGENT_CONFIG_DIR`). The kubelet swaps a ConfigMap volume's files
//! whole when the ConfigMap changes, so a change of `configData` reaches the agents that run,
//! with no restart. The volume is `optional`: a pod is never held for it.

use serde_json::{Value, json};
use watcher_api::{Watcher, config_map_name};

use super::Fields;
use super::ops::Sidecar;
use super::patch::PodPatch;

/// Where the agent reads its configuration as files, unless its container says otherwise
/// (`AGENT_CONFIG_DIR`).
pub(super) const AGENT_CONFIG_DIR: &str = "/etc/watcher-agent/config";
/// The variable that names it.
const CONFIG_DIR_VARIABLE: &str = "AGENT_CONFIG_DIR";

/// Mounts `watcher`'s ConfigMap into its `container` (as JSON) read-only, where the sidecar is
/// watcher-agent with config data: the volume to add to the pod after the Watcher's own
/// ([`add_config_volume`]). Left out where the pod already has a volume of that name or the
/// container a mount at that path: the agent then takes a change when it next starts, as before.
pub(super) fn mount_agent_config(
    patch: &PodPatch<'_>,
    watcher: &Watcher,
    container: &mut Sidecar,
) -> Option<(String, Value)> {
    let spec = &watcher.spec;
    if !spec.has_config() || !spec.runs_agent() {
        return None;
    }
    let config_map = config_map_name(&watcher.metadata.name.clone().unwrap_or_default());
    let name = volume_name(&config_map);
    let path = config_dir(watcher);
    let mounts = container.field("volumeMounts").and_then(Value::as_array);
    let taken =
        mounts.is_some_and(|m| m.iter().any(|m| m["mountPath"].as_str().map(normalised) == Some(normalised(&path))));
    if taken || patch.has_volume(&name) {
        return None;
    }
    let mount = json!({"name": name, "mountPath": path, "readOnly": true});
    match container.field_mut("volumeMounts").and_then(Value::as_array_mut) {
        Some(mounts) => mounts.push(mount),
        None => container.set("volumeMounts", Value::Array(vec![mount])),
    }
    let volume = json!({"name": name, "configMap": {"name": config_map, "optional": true}});
    Some((name, volume))
}

/// Adds the volume [`mount_agent_config`] mounted.
pub(super) fn add_config_volume(patch: &mut PodPatch<'_>, (name, volume): (String, Value)) {
    patch.add_owned_volume(name, volume);
}

/// The volume's name: the ConfigMap's where that is a DNS-1123 label, else one made from it.
fn volume_name(config_map: &str) -> String {
    if watcher_api::validation::is_dns1123_label(config_map) {
        config_map.to_owned()
    } else {
        format!("watcher-config-{}", watcher_api::stable_hash(&config_map))
    }
}

/// Where the agent of `watcher` reads its configuration as files: the container's or the config
/// data's `AGENT_CONFIG_DIR` (the container's wins, as the kubelet's), else [`AGENT_CONFIG_DIR`].
fn config_dir(watcher: &Watcher) -> String {
    let own = watcher.spec.container.env.iter().flatten().find(|e| e.name == CONFIG_DIR_VARIABLE);
    let own = own.and_then(|e| e.value.clone());
    let data =
        || watcher.spec.config_data.as_ref().and_then(|d| d.get(CONFIG_DIR_VARIABLE)).map(|v| v.trim().to_owned());
    own.or_else(data).filter(|p| p.starts_with('/')).unwrap_or_else(|| AGENT_CONFIG_DIR.to_owned())
}

fn normalised(path: &str) -> &str {
    path.trim_end_matches('/')
}
