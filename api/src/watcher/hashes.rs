//! What a Watcher's spec is known by in its pods: its hashes (`watcher.dev/injected`,
//! `watcher.dev/injected-without-image`, `watcher.dev/injected-config`), whether its sidecar is
//! watcher-agent, its selector compiled, whether it has problems, and its container and volume
//! as JSON (made at the first pod injected with it). Each is computed once per spec object: the
//! webhook reads them for every pod it injects and the pod reconciler for every pod it counts,
//! from the same cached Watchers.

use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Volume};
use serde_json::{Map, Value};

use super::{NativeSidecar, WatcherSpec};
use crate::AppAccess;

/// The hashes of one spec, computed at their first use. Never serialised, and never carried by a
/// clone, which may then be changed: a spec is not changed once hashed (the caches hold theirs
/// behind `Arc`; debug builds check it on every read).
#[derive(Default)]
pub(crate) struct SpecHashes(OnceLock<Hashes>, OnceLock<Arc<Written>>);

/// A spec's container and volume as the webhook writes them into pods, as JSON values and as
/// JSON text: made at the first pod injected with the spec (most cached specs never reach a pod,
/// and hold a pointer for it), then shared by the patch of every pod it goes into, which writes
/// the text as it is and sets only the fields it changes ([`WatcherSpec::written`]).
#[derive(Debug, PartialEq)]
pub struct Written {
    container: Map<String, Value>,
    /// Each field of `container`, in its order, as JSON text.
    container_text: Vec<Box<str>>,
    volume: Option<(Value, Box<str>)>,
}

impl Written {
    fn of(spec: &WatcherSpec) -> Self {
        // Serialising k8s-openapi types cannot fail: plain data with string keys; a container is
        // an object.
        let container = match serde_json::to_value(&spec.container) {
            Ok(Value::Object(fields)) => fields,
            _ => Map::new(),
        };
        let text = |value: &Value| serde_json::to_string(value).unwrap_or_default().into_boxed_str();
        let container_text = container.values().map(text).collect();
        let volume = spec.volume.as_deref().map(|volume| {
            let value = serde_json::to_value(volume).unwrap_or_default();
            let written = text(&value);
            (value, written)
        });
        Self { container, container_text, volume }
    }

    /// `spec.container`'s fields.
    pub fn container(&self) -> &Map<String, Value> {
        &self.container
    }

    /// `spec.container`'s fields with each value's JSON text, in the map's order (by key).
    pub fn container_fields(&self) -> impl Iterator<Item = (&str, &Value, &str)> {
        self.container.iter().zip(&self.container_text).map(|((key, value), text)| (key.as_str(), value, &**text))
    }

    /// `spec.volume`, where it has one.
    pub fn volume(&self) -> Option<&Value> {
        self.volume.as_ref().map(|(value, _)| value)
    }

    /// `spec.volume` as JSON text.
    pub fn volume_text(&self) -> Option<&str> {
        self.volume.as_ref().map(|(_, text)| &**text)
    }
}

#[derive(Debug, PartialEq)]
struct Hashes {
    spec: String,
    without_image: String,
    config: Option<String>,
    agent: bool,
    /// `spec.selector` compiled; `None` without one, or for one the API would reject.
    selector: Option<kube::core::Selector>,
    /// Whether [`WatcherSpec::problems`] finds none.
    valid: bool,
}

impl Clone for SpecHashes {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// Two specs are equal by their fields: what is derived from them adds nothing.
impl PartialEq for SpecHashes {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for SpecHashes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpecHashes")
    }
}

impl Hashes {
    fn of(spec: &WatcherSpec) -> Self {
        let config = spec.has_config();
        let without_image = Container { image: None, ..spec.container.clone() };
        let (volume, secret, native, app) = (&spec.volume, &spec.image_pull_secrets, spec.native_sidecar, &spec.app);
        Self {
            spec: injection_hash(&spec.container, volume, secret, native, config, app),
            without_image: injection_hash(&without_image, volume, secret, native, config, app),
            config: config.then(|| {
                let data = spec.config_data.as_ref().filter(|d| !d.is_empty());
                let binary = spec.config_binary_data.as_ref().filter(|d| !d.is_empty());
                crate::stable_hash(&(data, binary))
            }),
            agent: spec.container.image.as_deref().is_some_and(crate::image::is_agent_image),
            selector: spec.selector.clone().and_then(|selector| kube::core::Selector::try_from(selector).ok()),
            valid: spec.problems().is_empty(),
        }
    }
}

impl WatcherSpec {
    fn hashes(&self) -> &Hashes {
        let hashes = self.hashes.0.get_or_init(|| Hashes::of(self));
        debug_assert_eq!(*hashes, Hashes::of(self), "a Watcher spec changed after it was hashed: hash a clone");
        hashes
    }

    /// Hash of everything injection uses: the container, volume, pull secret, sidecar mode,
    /// whether the container gets the ConfigMap, and what lets it see the app. Config values are
    /// not part of it: they reach the sidecar through the ConfigMap, and pods carry their hash
    /// apart ([`WatcherSpec::config_hash`]).
    pub fn spec_hash(&self) -> &str {
        &self.hashes().spec
    }

    /// [`crate::InjectionSpec::hash_without_image`] of this spec.
    pub fn spec_hash_without_image(&self) -> &str {
        &self.hashes().without_image
    }

    /// The hash of the config data (`configData`, `configBinaryData`: what its ConfigMap holds),
    /// 8 hex digits; `None` without config data. Injected pods carry it
    /// ([`crate::annotation::InjectedConfig`]).
    pub fn config_hash(&self) -> Option<&str> {
        self.hashes().config.as_deref()
    }

    /// `spec.selector`, compiled; `None` without one, or for one the API would reject.
    pub(crate) fn compiled_selector(&self) -> Option<&kube::core::Selector> {
        self.hashes().selector.as_ref()
    }

    /// `spec.container` and `spec.volume` as JSON, made at the first call (by the webhook, for
    /// the first pod it injects with this spec): only the specs that reach pods hold them.
    pub fn written(&self) -> &Arc<Written> {
        let written = self.hashes.1.get_or_init(|| Arc::new(Written::of(self)));
        debug_assert_eq!(**written, Written::of(self), "a Watcher spec changed after it was hashed: hash a clone");
        written
    }

    /// What [`WatcherSpec::problems`] says, found once per spec where there is none (the webhook
    /// asks for every pod it injects).
    pub fn known_problems(&self) -> Vec<String> {
        if self.hashes().valid { Vec::new() } else { self.problems() }
    }

    /// Whether the sidecar's image is watcher-agent's ([`crate::image::is_agent_image`]).
    pub fn runs_agent(&self) -> bool {
        self.hashes().agent
    }
}

/// The hash of what injection uses. A Watcher that sets none of [`AppAccess`] hashes as it did
/// before those fields existed: the pods injected then stay up to date across an upgrade.
pub(super) fn injection_hash(
    container: &Container,
    volume: &Option<Box<Volume>>,
    pull_secret: &Option<LocalObjectReference>,
    native: NativeSidecar,
    config: bool,
    app: &AppAccess,
) -> String {
    if app.is_empty() {
        crate::stable_hash(&(container, volume, pull_secret, native, config))
    } else {
        crate::stable_hash(&(container, volume, pull_secret, native, config, app))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WatcherSpec {
        serde_json::from_value(serde_json::json!({
            "container": {"name": "log-watcher", "image": "ghcr.io/watcher-dev/watcher-agent:0.2.0"},
            "configData": {"rules.yaml": "rules: []"}}))
        .expect("spec")
    }

    /// A spec's hashes are those of its fields, once computed as at every call; a clone is
    /// hashed anew, so it may be changed.
    #[test]
    fn a_clone_is_hashed_anew() {
        let spec = spec();
        let (hash, config) = (spec.spec_hash(), spec.config_hash());
        assert_eq!(hash, injection_hash(&spec.container, &None, &None, NativeSidecar::Auto, true, &spec.app));
        assert!(spec.runs_agent() && spec.reloads_config());
        let mut changed = spec.clone();
        changed.container.image = Some("busybox:1.36".into());
        changed.config_data = Some([("LEVEL".to_owned(), "debug".to_owned())].into());
        assert_ne!(changed.spec_hash(), hash);
        assert_eq!(changed.spec_hash_without_image(), spec.spec_hash_without_image(), "the image aside");
        assert_ne!(changed.config_hash(), config);
        assert!(!changed.runs_agent());
        assert_eq!(spec.written().container()["image"], "ghcr.io/watcher-dev/watcher-agent:0.2.0");
        assert_eq!(changed.written().container()["image"], "busybox:1.36", "its own JSON");
        assert_eq!(spec, spec.clone(), "equal by their fields");
    }

    /// The problems found once are those found at every call: none for a valid spec, all of
    /// them (not a memo of "some") for one that is not.
    #[test]
    fn problems_are_known_as_found() {
        let spec = spec();
        assert_eq!(spec.known_problems(), Vec::<String>::new());
        let mut invalid = spec.clone();
        invalid.container.name = "Not_A_Label".into();
        invalid.container.image = None;
        assert_eq!(invalid.known_problems(), invalid.problems());
        assert_eq!(invalid.known_problems().len(), 2, "{:?}", invalid.known_problems());
    }

    /// A spec changed after it was hashed is caught in debug builds, where tests run.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "changed after it was hashed")]
    fn a_spec_changed_after_its_hash_is_caught() {
        let mut spec = spec();
        let _ = spec.spec_hash();
        spec.container.image = Some("busybox:1.36".into());
        let _ = spec.spec_hash();
    }

    /// The same for the container's JSON, kept apart from the hashes.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "changed after it was hashed")]
    fn a_container_changed_after_its_json_is_caught() {
        let mut spec = spec();
        let _ = spec.written();
        spec.container.image = Some("busybox:1.36".into());
        let _ = spec.written();
    }
}
