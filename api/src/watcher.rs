//! `Watcher`: a sidecar container (with optional volume, config data and pull secret) that
//! the webhook injects into the pods that ask for it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{AppAccess, Condition};

mod hashes;
use hashes::SpecHashes;
pub use hashes::Written;
use hashes::injection_hash;

/// A sidecar injected into pods of its namespace at creation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "watcher.dev",
    version = "v1alpha1",
    kind = "Watcher",
    namespaced,
    status = "WatcherStatus",
    shortname = "wt",
    category = "watcher-dev",
    derive = "PartialEq",
    doc = "A Watcher names a sidecar container that watcher-operator injects into pods of its namespace.",
    printcolumn(name = "Container", type_ = "string", json_path = ".spec.container.name"),
    printcolumn(name = "Matched", type_ = "integer", json_path = ".status.pods.matched"),
    printcolumn(name = "UpToDate", type_ = "integer", json_path = ".status.pods.upToDate"),
    printcolumn(name = "Missing", type_ = "integer", json_path = ".status.pods.missing"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::validation::watcher_spec_rules)]
pub struct WatcherSpec {
    /// The sidecar: a full core/v1 Container, added to every pod that asks for this Watcher.
    /// Its `name` is a DNS-1123 label and its `image` is required, as in a pod.
    #[schemars(schema_with = "container_schema")]
    pub container: Container,

    /// A volume added to the pod unless the pod already has a volume of that name (a
    /// DNS-1123 label).
    // Boxed: a `Volume` is 3 KiB inline, and most Watchers in the cache have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "volume_schema")]
    pub volume: Option<Box<Volume>>,

    /// String data of the ConfigMap `<name>-config` that the sidecar gets as environment
    /// (`envFrom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_data: Option<BTreeMap<String, String>>,

    /// Binary data (base64) of the ConfigMap `<name>-config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "binary_data_schema")]
    pub config_binary_data: Option<BTreeMap<String, ByteString>>,

    /// An image pull secret added to the pod unless the pod already lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<LocalObjectReference>,

    /// Pods of this namespace whose labels match are injected without asking by annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::label_selector_schema")]
    pub selector: Option<LabelSelector>,

    /// How the sidecar is added: `Always` as a native sidecar (an init container with
    /// `restartPolicy: Always`), `Never` as a regular container, `Auto` (default) as a native
    /// sidecar when the API server supports it (Kubernetes 1.29 or later).
    #[serde(default)]
    pub native_sidecar: NativeSidecar,

    /// What happens to pods injected with an older spec, or not injected at all.
    #[serde(default)]
    pub update_policy: UpdatePolicy,

    /// `Ignore` (default): a pod that cannot get this Watcher (the webhook is unreachable, a
    /// container name collides) is admitted without it, and counted as missing. `Fail`: the
    /// Watcher is required, and such a pod is refused (see docs/admission-scope.md, "Required Watchers").
    #[serde(default)]
    pub failure_policy: FailurePolicy,

    /// What lets the sidecar see the app: shared volumes, carried env, process namespace, pod
    /// annotations, init containers (see [`AppAccess`]).
    #[serde(flatten)]
    pub app: AppAccess,

    /// Its hashes, computed once (see [`SpecHashes`]).
    #[serde(skip)]
    #[schemars(skip)]
    hashes: SpecHashes,
}

/// What becomes of a pod that asks for a Watcher it cannot get.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("maxLength" = 16))]
pub enum FailurePolicy {
    /// Admitted without the Watcher (with a warning), and counted as missing.
    #[default]
    Ignore,
    /// Refused: the Watcher is required.
    Fail,
}

/// Whether the sidecar is added as a native sidecar (init container, `restartPolicy: Always`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("maxLength" = 16))]
pub enum NativeSidecar {
    /// A native sidecar when the API server supports it, a regular container otherwise.
    #[default]
    Auto,
    /// Always a native sidecar.
    Always,
    /// Always a regular container.
    Never,
}

/// What the pod reconciler does about pods that are missing this Watcher or carry an old spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePolicy {
    /// `Report` (default) only counts them in `status.pods`; `Recreate` evicts those that a
    /// ReplicaSet, StatefulSet or DaemonSet controls, so their owner recreates them injected;
    /// `InPlace` gives a running pod whose sidecar differs only by image the new image without
    /// a restart of the pod (any other difference goes the `Recreate` way).
    #[serde(default, rename = "type")]
    pub type_: UpdatePolicyType,

    /// With `Recreate` and `InPlace`: how many pods per Watcher may be in flight at once
    /// (evicted and terminating, or updated in place and not yet running and ready with the new
    /// image).
    #[serde(default = "default_max_unavailable")]
    #[schemars(range(min = 1))]
    pub max_unavailable: i32,

    /// With `Recreate` and `InPlace`: the N newest of the Watcher's pods keep the spec they
    /// have (a canary: a high partition, lowered step by step). Default 0: every pod.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub partition: i32,

    /// With `Recreate` and `InPlace`: start no new update (those in flight finish).
    #[serde(default)]
    pub paused: bool,

    /// The canary group: only the pods this label selector matches are updated by the rollout
    /// (`partition`, `maxUnavailable` and `paused` apply within the group), and only they get
    /// the current spec at admission while the rollout is held (see `newPods`). Absent: every
    /// pod of the Watcher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::label_selector_schema")]
    pub selector: Option<LabelSelector>,

    /// What a pod created during a held rollout (`paused`, `partition` above 0, or a
    /// `selector` set) gets at admission, outside the canary group: `Current` (default) the
    /// current spec; `Stable` the stable revision (`status.stableRevision`, the spec every pod
    /// carried when the rollout began), so that scaling, replacements and the app's own
    /// rollouts do not spread a held canary.
    #[serde(default)]
    pub new_pods: NewPods,
}

impl UpdatePolicy {
    /// Whether the rollout is held: `paused`, a `partition` above 0, or limited to a `selector`.
    pub fn is_held(&self) -> bool {
        self.paused || self.partition > 0 || self.selector.is_some()
    }

    /// Whether a pod with `labels` is one the rollout updates: in the canary group, or any pod
    /// when there is no `selector`.
    pub fn in_group(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.is_none() || self.in_group_explicitly(labels)
    }

    /// Whether a pod with `labels` is in a canary group named by a `selector` (none is, for a
    /// selector the API would refuse).
    pub fn in_group_explicitly(&self, labels: &BTreeMap<String, String>) -> bool {
        use kube::core::{Selector, SelectorExt};
        let Some(selector) = &self.selector else { return false };
        Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
    }

    /// Whether pods created outside the canary group during a hold get the stable revision.
    pub fn holds_new_pods(&self) -> bool {
        self.new_pods == NewPods::Stable && self.is_held()
    }
}

/// See [`UpdatePolicy::new_pods`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("maxLength" = 16))]
pub enum NewPods {
    /// Pods are injected with the current spec, held rollout or not.
    #[default]
    Current,
    /// During a held rollout, pods outside the canary group are injected with the stable
    /// revision.
    Stable,
}

impl Default for UpdatePolicy {
    fn default() -> Self {
        Self {
            type_: UpdatePolicyType::default(),
            max_unavailable: default_max_unavailable(),
            partition: 0,
            paused: false,
            selector: None,
            new_pods: NewPods::default(),
        }
    }
}

fn default_max_unavailable() -> i32 {
    1
}

/// See [`UpdatePolicy::type_`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("maxLength" = 16))]
pub enum UpdatePolicyType {
    /// Count missing and outdated pods in `status.pods`.
    #[default]
    Report,
    /// Count them, and evict the controller-owned ones.
    Recreate,
    /// Count them; update a sidecar whose only difference is its image in place (same pod, no
    /// restart of the app containers); evict the controller-owned ones with any other
    /// difference, as `Recreate` does.
    InPlace,
}

/// What injection uses of a Watcher's spec, and all that its `specHash` hashes: what a
/// ControllerRevision of the Watcher keeps, so a pod's revision can be compared with the
/// current spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InjectionSpec {
    /// The sidecar container.
    pub container: Container,
    /// The volume added with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<Box<Volume>>,
    /// The image pull secret added with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<LocalObjectReference>,
    /// How the sidecar is added.
    pub native_sidecar: NativeSidecar,
    /// Whether the sidecar gets the Watcher's ConfigMap (`envFrom`).
    pub config: bool,
    /// What lets the sidecar see the app (absent from revisions kept before it existed).
    #[serde(flatten)]
    pub app: AppAccess,
}

impl InjectionSpec {
    /// The `specHash` of this spec: equal to [`WatcherSpec::spec_hash`] of the spec it came from.
    pub fn hash(&self) -> String {
        injection_hash(
            &self.container,
            &self.volume,
            &self.image_pull_secrets,
            self.native_sidecar,
            self.config,
            &self.app,
        )
    }

    /// The hash of this spec without the sidecar's image: equal for two specs that differ at
    /// most by image (see [`crate::annotation::InjectedWithoutImage::KEY`]).
    pub fn hash_without_image(&self) -> String {
        let container = Container { image: None, ..self.container.clone() };
        injection_hash(&container, &self.volume, &self.image_pull_secrets, self.native_sidecar, self.config, &self.app)
    }

    /// This spec with the sidecar's image `image`.
    pub fn with_image(&self, image: &str) -> Self {
        let mut spec = self.clone();
        spec.container.image = Some(image.to_owned());
        spec
    }
}

/// The observed state of a Watcher.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatcherStatus {
    /// Name of the owned ConfigMap; absent when the Watcher has no config data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,

    /// The Watcher generation whose configuration the ConfigMap holds, as the ConfigMap records
    /// it (`watcher.dev/config-generation`, written with each configuration; 0.2.0 wrote none).
    /// Absent where there is no ConfigMap, and while it holds what 0.2.0 wrote: the
    /// configuration pods injected before an upgrade run, which carry no hash of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_generation: Option<i64>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Hash of everything injection uses; injected pods carry it in `watcher.dev/injected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,

    /// Pods of the namespace that ask for this Watcher, and how far they are injected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<PodCounts>,

    /// The ControllerRevision of the current spec (`<name>-<specHash>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,

    /// The ControllerRevision of the spec every pod carried when the current rollout began:
    /// what `updatePolicy.newPods: Stable` injects outside the canary group while the rollout
    /// is held. Equal to `currentRevision` once the rollout is complete and not held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,

    /// `Ready`: the ConfigMap and status are reconciled to the current generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Injection counts over the pods that ask for a Watcher.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodCounts {
    /// Pods that ask for the Watcher by annotation or match its selector.
    pub matched: i32,
    /// Matched pods injected with the Watcher (any spec hash).
    pub injected: i32,
    /// Injected pods that carry the current spec hash.
    pub up_to_date: i32,
    /// Matched pods not injected with the Watcher.
    pub missing: i32,
    /// Injected pods where a container of the Watcher (its sidecar, or one of its
    /// `initContainers`) cannot start, as the kubelet reports it (`CreateContainerConfigError`,
    /// `CrashLoopBackOff`, `ImagePullBackOff`, ...); a native sidecar or init container that
    /// cannot start keeps the whole pod from running. The `SidecarsRunning` condition names
    /// the first. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cannot_start: i32,
    /// Injected pods that are meant to end (`restartPolicy` `Never` or `OnFailure`) whose app
    /// containers have ended, but where a sidecar of the Watcher still runs well after the
    /// operator ended it (the pod's grace period and 30 s): the pod cannot finish. The
    /// `SidecarsEnded` condition names the first. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cannot_end: i32,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// A core/v1 Container as a pod needs it: a DNS-1123 label for a name, an image.
pub(crate) fn container_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Container>();
    crate::validation::name_is_dns1123_label(&mut schema);
    if let Some(image) = schema.get_mut("properties").and_then(|p| p.get_mut("image")).and_then(|i| i.as_object_mut()) {
        image.insert("minLength".into(), serde_json::json!(1));
    }
    if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
        required.push(serde_json::json!("image"));
    }
    schema
}

/// A core/v1 Volume whose name is a DNS-1123 label.
fn volume_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Volume>();
    crate::validation::name_is_dns1123_label(&mut schema);
    schema.insert("nullable".into(), serde_json::json!(true));
    schema
}

/// `{key: base64}`, as ConfigMap `binaryData` is: the API server checks the encoding.
fn binary_data_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string", "format": "byte"}
    })
}

/// Name of the ConfigMap that holds a Watcher's config data.
pub fn config_map_name(watcher_name: &str) -> String {
    format!("{watcher_name}-config")
}

impl Watcher {
    /// Why no configuration of this Watcher has been shipped, where its status says so: its
    /// configuration is refused (`Ready=False`, `ConfigRefused`) and no ConfigMap holds an
    /// earlier one. The webhook then admits its pods without the sidecar, which would wait for
    /// a ConfigMap that is not there (or start with a configuration its agent refuses).
    pub fn unshipped_config(&self) -> Option<&str> {
        let status = self.status.as_ref()?;
        if !self.spec.has_config() || status.config_map_name.is_some() {
            return None;
        }
        let ready = status.conditions.iter().find(|c| c.type_ == crate::types::READY)?;
        (ready.status == "False" && ready.reason == crate::reasons::CONFIG_REFUSED).then_some(ready.message.as_str())
    }
}

impl WatcherSpec {
    /// Why, in a pod that is meant to end, this Watcher's sidecar is ended by a restart the
    /// kubelet counts; `None` where it ends by itself. A sidecar with a command runs under
    /// `watcher-supervise`, watcher-agent reads the ended file, and a native sidecar is stopped
    /// by the kubelet: each ends with no restart. Another image's entrypoint cannot be told
    /// that the app has ended: where it is a regular container, it is switched to the
    /// supervisor's image, and under `restartPolicy: OnFailure` a Job counts that restart
    /// toward its `backoffLimit`.
    pub fn ends_by_restart(&self) -> Option<crate::EndsByRestart> {
        let container = &self.container;
        let image = container.image.as_deref().unwrap_or_default();
        let has_command = container.command.as_ref().is_some_and(|c| !c.is_empty());
        if crate::SidecarEnding::of(has_command, image).ends_by_itself() || self.native_sidecar == NativeSidecar::Always
        {
            return None;
        }
        let regular = match self.native_sidecar {
            NativeSidecar::Never => crate::Regular::NativeSidecarNever,
            _ => crate::Regular::BeforeNativeSidecars,
        };
        Some(crate::EndsByRestart { image: image.to_owned(), regular })
    }

    /// Whether a pod that asks for this Watcher is never admitted without it.
    pub fn is_required(&self) -> bool {
        self.failure_policy == FailurePolicy::Fail
    }

    /// What in this spec would make kube-apiserver refuse a pod injected with it, each problem
    /// naming its field. The CRD schema refuses all of it at apply time (from Kubernetes 1.25
    /// for its CEL rules); a Watcher stored before that is never injected while this is not
    /// empty.
    pub fn problems(&self) -> Vec<String> {
        use crate::validation::{is_dns1123_label, selector_problems};
        let mut problems = Vec::new();
        let container = &self.container;
        if !is_dns1123_label(&container.name) {
            problems.push(format!("spec.container.name: {:?} is not a DNS-1123 label", container.name));
        }
        if container.image.as_deref().is_none_or(str::is_empty) {
            problems.push("spec.container.image: required".to_owned());
        }
        problems.extend(crate::validation::container_problems(container, "spec.container"));
        if let Some(volume) = self.volume.as_deref().filter(|v| !is_dns1123_label(&v.name)) {
            problems.push(format!("spec.volume.name: {:?} is not a DNS-1123 label", volume.name));
        }
        if let Some(selector) = &self.selector {
            problems.extend(selector_problems(selector, "spec.selector"));
        }
        if let Some(selector) = &self.update_policy.selector {
            problems.extend(selector_problems(selector, "spec.updatePolicy.selector"));
        }
        problems.extend(self.app.problems(&container.name, self.volume.is_some()));
        problems
    }

    /// Whether the Watcher has a ConfigMap (any `configData` or `configBinaryData` key).
    pub fn has_config(&self) -> bool {
        self.config_data.as_ref().is_some_and(|d| !d.is_empty())
            || self.config_binary_data.as_ref().is_some_and(|d| !d.is_empty())
    }

    /// What injection uses of this spec (see [`InjectionSpec`]).
    pub fn injection(&self) -> InjectionSpec {
        InjectionSpec {
            container: self.container.clone(),
            volume: self.volume.clone(),
            image_pull_secrets: self.image_pull_secrets.clone(),
            native_sidecar: self.native_sidecar,
            config: self.has_config(),
            app: self.app.clone(),
        }
    }

    /// Whether its sidecar takes a change of its config data while it runs: watcher-agent, which
    /// reads its ConfigMap mounted as files again (the webhook mounts it). Any other sidecar reads
    /// it once, when it starts.
    pub fn reloads_config(&self) -> bool {
        self.has_config() && self.runs_agent()
    }

    /// The hash of the configuration a pod must have been injected with to be up to date: the
    /// config data's ([`WatcherSpec::config_hash`]) where its sidecar reads it once, when it
    /// starts; `None` where any will do (no config data, or watcher-agent, which takes a new one
    /// while it runs). A pod that carries no hash (injected by 0.2.0) is judged by its spec.
    pub fn pinned_config_hash(&self) -> Option<String> {
        (!self.reloads_config()).then(|| self.config_hash()).flatten().map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WatcherSpec {
        serde_json::from_value(serde_json::json!({
            "container": {"name": "log-watcher", "image": "busybox:1.36"}
        }))
        .expect("minimal spec")
    }

    #[test]
    fn defaults_of_a_minimal_spec() {
        let spec = spec();
        assert_eq!(spec.native_sidecar, NativeSidecar::Auto);
        assert_eq!(spec.update_policy, UpdatePolicy { type_: UpdatePolicyType::Report, ..UpdatePolicy::default() });
        assert!(!spec.has_config());
    }

    #[test]
    fn spec_hash_follows_what_injection_uses() {
        let base = spec();
        let mut image = base.clone();
        image.container.image = Some("busybox:1.37".into());
        assert_ne!(base.spec_hash(), image.spec_hash());

        let mut config = base.clone();
        config.config_data = Some([("LEVEL".to_owned(), "debug".to_owned())].into());
        assert_ne!(base.spec_hash(), config.spec_hash(), "envFrom appears with config data");

        let mut other_value = config.clone();
        other_value.config_data = Some([("LEVEL".to_owned(), "info".to_owned())].into());
        assert_eq!(config.spec_hash(), other_value.spec_hash(), "values reach pods via the ConfigMap");

        let mut selector = base.clone();
        selector.selector = Some(LabelSelector::default());
        assert_eq!(base.spec_hash(), selector.spec_hash(), "who is injected is not what is injected");
    }

    /// The hash without the image is blind to the image and to nothing else injection uses.
    #[test]
    fn the_hash_without_image_follows_all_but_the_image() {
        let base = spec();
        let mut image = base.clone();
        image.container.image = Some("busybox:1.37".into());
        assert_eq!(base.spec_hash_without_image(), image.spec_hash_without_image());
        assert_ne!(base.spec_hash(), image.spec_hash());
        let mut env = image.clone();
        env.container.env =
            Some(vec![serde_json::from_value(serde_json::json!({"name": "A", "value": "1"})).expect("env")]);
        assert_ne!(base.spec_hash_without_image(), env.spec_hash_without_image());
        assert_eq!(base.injection().with_image("busybox:1.37").hash(), image.spec_hash());
        assert_eq!(env.injection().hash_without_image(), env.spec_hash_without_image(), "the same hash both ways");
    }

    /// A revision's hash is the hash of the spec it keeps, through JSON and back (as a
    /// ControllerRevision stores it).
    #[test]
    fn a_revision_hashes_as_its_spec() {
        let mut spec = spec();
        spec.config_data = Some([("LEVEL".to_owned(), "debug".to_owned())].into());
        spec.volume = Some(Box::new(
            serde_json::from_value(serde_json::json!({"name": "logs", "emptyDir": {}})).expect("volume"),
        ));
        let stored: InjectionSpec =
            serde_json::from_value(serde_json::to_value(spec.injection()).expect("JSON")).expect("read back");
        assert_eq!(stored.hash(), spec.spec_hash());
        assert_eq!(stored, spec.injection());
    }

    /// A Watcher that sets none of the app fields hashes as before they existed (pods injected
    /// then stay up to date across an upgrade); any of them, the sidecar's image excepted, is
    /// part of both hashes, so only an image change can go in place.
    #[test]
    fn the_app_fields_are_hashed_only_when_set() {
        let base = spec();
        let before =
            crate::stable_hash(&(&base.container, &base.volume, &base.image_pull_secrets, base.native_sidecar, false));
        assert_eq!(base.spec_hash(), before);
        let changes = [
            serde_json::json!({"shareVolumes": "ReadOnly"}),
            serde_json::json!({"appContainers": ["app"]}),
            serde_json::json!({"transferEnv": [{"names": ["SERVICE_NAME"]}]}),
            serde_json::json!({"shareProcessNamespace": true}),
            serde_json::json!({"podAnnotations": {"prometheus.io/scrape": "true"}}),
            serde_json::json!({"initContainers": [{"name": "prepare", "image": "busybox:1.36"}]}),
            serde_json::json!({"automountServiceAccountToken": false}),
            serde_json::json!({"automountServiceAccountToken": true}),
        ];
        for change in changes {
            let mut value = serde_json::to_value(&base).expect("JSON");
            value.as_object_mut().expect("object").extend(change.as_object().expect("object").clone());
            let changed: WatcherSpec = serde_json::from_value(value).expect("spec");
            assert_ne!(changed.spec_hash(), base.spec_hash(), "{change}");
            assert_ne!(changed.spec_hash_without_image(), base.spec_hash_without_image(), "{change}");
            let mut image = changed.clone();
            image.container.image = Some("busybox:1.37".into());
            assert_eq!(image.spec_hash_without_image(), changed.spec_hash_without_image(), "{change}");
            assert_eq!(changed.injection().hash(), changed.spec_hash(), "{change}: a revision hashes alike");
        }
        let old: WatcherSpec = serde_json::from_value(serde_json::json!({
            "container": {"name": "log-watcher", "image": "busybox:1.36"},
            "initContainers": [{"name": "prepare", "image": "busybox:1.36"}]}))
        .expect("spec");
        let mut init_image = old.clone(); // a clone is hashed anew
        let old = old.spec_hash_without_image();
        init_image.app.init_containers[0].image = Some("busybox:1.37".into());
        assert_ne!(init_image.spec_hash_without_image(), old, "an init container's image is not the sidecar's");
    }

    /// A revision kept before the app fields existed reads back as a spec without them.
    #[test]
    fn an_older_revision_reads_without_the_app_fields() {
        let stored = serde_json::json!({"container": {"name": "log-watcher", "image": "busybox:1.36"},
                                        "nativeSidecar": "Auto", "config": false});
        let revision: InjectionSpec = serde_json::from_value(stored).expect("revision");
        assert!(revision.app.is_empty());
        assert_eq!(revision.hash(), spec().spec_hash());
    }

    #[test]
    fn empty_config_maps_count_as_no_config() {
        let mut spec = spec();
        spec.config_data = Some(BTreeMap::new());
        assert!(!spec.has_config());
        spec.config_binary_data = Some([("blob".to_owned(), ByteString(b"hi".to_vec()))].into());
        assert!(spec.has_config());
    }
}
