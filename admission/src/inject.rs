//! The mutation itself: a pod and the Watchers of its namespace in, JSON-patch operations out.
//! Pure and synchronous; the admission handler and `watcher-operator inject` both call it.

use k8s_openapi::api::core::v1::{ConfigMapEnvSource, EnvFromSource, ResourceRequirements};
use kube::ResourceExt;
use serde_json::Value;
use std::borrow::Borrow;
use std::collections::BTreeMap;

use crate::PodView;
use crate::pod::{Annotations, ContainerView, PodSpecView};

mod app;
mod ending;
mod options;
mod resources;
mod security;
pub use app::AppReport;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation};
use options::native_sidecar;
pub use options::{InjectOptions, SYSTEM_NAMESPACES, server_minor, supports_native_sidecars};
pub use resources::{ResourceCompliance, ResourceReport, resource_compliance};
pub use security::{Compliance, PodSecurityReport, Refusal, RunsAsRoot, compliance};
use watcher_api::{
    DEFAULT_CONTAINER_ANNOTATION, END_SIDECARS_LABEL, SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, SUPERVISOR_NAME, Watcher,
    annotation, config_map_name,
};

use crate::decide::{Verdict, decide};
use crate::pod_security::{Adaptation, NamespaceLevels};
use crate::resources::ResourceRules;

/// The outcome of [`inject`].
#[derive(Debug, Default, PartialEq)]
pub struct Injection {
    /// JSON-patch operations, in order; empty when the pod is left as it is.
    pub patch: Vec<PatchOperation>,
    /// Names of the Watchers injected by this patch.
    pub injected: Vec<String>,
    /// Names of the containers whose image an ImagePolicy rewrote in this patch.
    pub rewritten: Vec<String>,
    /// Problems to show the user (the pod is still allowed).
    pub warnings: Vec<String>,
    /// Why nothing was injected, when `patch` is empty.
    pub skipped: Option<String>,
    /// Whether the patch answers a dry-run probe of `watcher-operator check`.
    pub probed: bool,
    /// Whether the pod asked for a Watcher or was selected by one (in a namespace that is
    /// injected at all).
    pub asked: bool,
    /// Why the pod is refused: it asks for a required Watcher (`spec.failurePolicy: Fail`)
    /// that it cannot get. The patch and warnings are then not sent.
    pub refused: Option<String>,
    /// What each injected Watcher that sets any of its `AppAccess` fields did to let its
    /// sidecar see the app, and what it skipped (for `check-inject`).
    pub app: Vec<AppReport>,
    /// What the namespace's enforced Pod Security level did to each Watcher: adapted, or left
    /// out (only where a level is enforced and the pod passes it by itself).
    pub pod_security: Vec<PodSecurityReport>,
    /// What the namespace's ResourceQuotas and LimitRanges did to each Watcher: its containers'
    /// resources set, or left out (only where the namespace has such rules).
    pub resources: Vec<ResourceReport>,
}

impl Injection {
    /// Records that Watcher `name` cannot be injected, and why: a warning, or the refusal of
    /// the pod when the Watcher is required.
    fn not_injected(&mut self, name: &str, watcher: Option<&Watcher>, why: &str) {
        if watcher.is_some_and(|w| w.spec.is_required()) {
            let reason = format!("Watcher {name} is required (failurePolicy: Fail) and cannot be injected: {why}");
            self.refused.get_or_insert(reason);
        } else {
            self.warnings.push(format!("Watcher {name} not injected: {why}"));
        }
    }
}

/// Injects into `pod` (created in `namespace`) every Watcher of that namespace that it asks for
/// by annotation or that selects it, unless already injected.
///
/// `watchers` (references, `Arc`s or the Watchers themselves) may hold Watchers of any
/// namespace: only those of `namespace` are used. The namespace enforces no Pod Security level
/// (see [`inject_at_level`]).
pub fn inject<W: Borrow<Watcher>>(
    pod: &PodView,
    namespace: &str,
    watchers: &[W],
    options: &InjectOptions,
) -> Injection {
    inject_at_level(pod, namespace, watchers, options, &NamespaceLevels::default())
}

/// [`inject`] in a namespace with the Pod Security levels `levels`: a pod that passes the
/// enforced level by itself passes it with what the Watchers add (adapted where they leave a
/// field unset that the level needs), or a Watcher that cannot comply is left out.
pub fn inject_at_level<W: Borrow<Watcher>>(
    pod: &PodView,
    namespace: &str,
    watchers: &[W],
    options: &InjectOptions,
    levels: &NamespaceLevels,
) -> Injection {
    inject_guarded(pod, namespace, watchers, options, &Guards { levels, resources: &ResourceRules::default() })
}

/// What a namespace holds every pod to besides its own admission: its Pod Security levels and
/// its resource rules (ResourceQuotas, LimitRanges).
#[derive(Clone, Copy, Debug)]
pub struct Guards<'g> {
    /// The Pod Security levels its labels (or the cluster's defaults) set.
    pub levels: &'g NamespaceLevels,
    /// Its ResourceQuotas and LimitRanges.
    pub resources: &'g ResourceRules,
}

/// [`inject`] in a namespace with `guards`: a pod that passes them by itself
/// passes them with what the Watchers add (adapted where they leave unset what a guard
/// needs), or a Watcher that cannot comply is left out.
pub fn inject_guarded<W: Borrow<Watcher>>(
    pod: &PodView,
    namespace: &str,
    watchers: &[W],
    options: &InjectOptions,
    guards: &Guards<'_>,
) -> Injection {
    let levels = guards.levels;
    let mut injection = Injection::default();
    if options.never_mutated(namespace) {
        injection.skipped = Some(format!("namespace {namespace} is never injected"));
        return injection;
    }
    if pod.spec.as_ref().is_none_or(|spec| spec.containers.is_empty()) {
        // Not a valid pod: the API server rejects it after admission, and a patch could not apply.
        injection.skipped = Some("the pod has no containers".into());
        return injection;
    }
    let decisions = decide(pod, namespace, watchers);
    injection.asked = !decisions.is_empty();
    // Evaluated only where a level is enforced and a Watcher is to be injected.
    let enforced = levels.enforced().is_some() && decisions.iter().any(|d| d.verdict == Verdict::Inject);
    let guard = if enforced { security::Guard::of(pod, levels, options.server_minor) } else { None };
    let ledger = if decisions.iter().any(|d| d.verdict == Verdict::Inject) {
        resources::Ledger::of(guards.resources, pod)
    } else {
        None
    };
    let mut admission = Admission::new(pod, namespace, watchers, options, (guard, ledger), injection);
    for decision in &decisions {
        admission.decide(decision);
    }
    let mut injection = admission.injection;
    if decisions.is_empty() {
        injection.skipped = Some("the pod asks for no Watcher".into());
        return injection;
    }
    if decisions.iter().all(|d| d.verdict == Verdict::Missing) {
        injection.skipped = Some("no requested Watcher exists".into());
        return injection;
    }
    let left_out = annotation::LeftOut::encode(admission.left_out.iter().map(|(name, why)| (name, why)));
    if injection.injected.is_empty() {
        injection.skipped = Some("every Watcher the pod asks for is injected or cannot be".into());
        if !left_out.is_empty() && injection.refused.is_none() {
            // Said on the pod, for the pod reconciler to report on the Watcher.
            let mut patch = admission.patch;
            patch.set_annotations(vec![(annotation::LeftOut::KEY, left_out)]);
            injection.patch = patch.ops;
        }
        return injection;
    }
    let mut patch = admission.patch;
    if admission.supervised {
        let resources = admission.supervisor_resources.unwrap_or_else(ending::resources);
        patch.add_supervisor(&options.supervisor_image, &resources);
    }
    if admission.ended_file {
        patch.add_volume(watcher_api::ENDED_VOLUME, ending::ended_volume());
    }
    let value = annotation::Injected::encode(admission.entries.iter().map(|(n, h)| (n, h)));
    let imageless = annotation::InjectedWithoutImage::encode(admission.without_image.iter().map(|(n, h)| (n, h)));
    let sidecars = (annotation::Sidecars::KEY, annotation::Sidecars::encode(&admission.sidecars));
    let mut annotations =
        vec![(annotation::Injected::KEY, value), (annotation::InjectedWithoutImage::KEY, imageless), sidecars];
    if !left_out.is_empty() {
        annotations.push((annotation::LeftOut::KEY, left_out));
    }
    if let Some(volumes) = patch.local_volumes() {
        annotations.push((SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, volumes));
    }
    if admission.regular_sidecar && !pod.metadata.annotations.has(DEFAULT_CONTAINER_ANNOTATION) {
        let injected = injected_containers(pod, namespace, watchers);
        let containers = pod.spec.iter().flat_map(|s| &s.containers);
        if let Some(app) = containers.map(|c| c.name.as_str()).find(|name| !injected.contains(name)) {
            annotations.push((DEFAULT_CONTAINER_ANNOTATION, app.to_owned()));
        }
    }
    if admission.to_end.len() > admission.ended_before {
        patch.add_label(END_SIDECARS_LABEL, "true");
        annotations.push((annotation::EndSidecars::KEY, annotation::EndSidecars::encode(&admission.to_end)));
    }
    patch.set_annotations(annotations);
    injection.patch = patch.ops;
    injection
}

/// One admission under way: the patch, and what the pod carries and will carry.
struct Admission<'a, W> {
    pod: &'a PodView,
    namespace: &'a str,
    watchers: &'a [W],
    options: &'a InjectOptions,
    guard: Option<security::Guard<'a>>,
    /// The namespace's resource rules, where it has any.
    ledger: Option<resources::Ledger<'a>>,
    /// The supervisor's resources under those rules, once counted.
    supervisor_resources: Option<ResourceRequirements>,
    supervisor_counted: bool,
    injection: Injection,
    patch: PodPatch<'a>,
    /// The pod's containers that Watchers injected (never app containers), found when needed.
    injected_names: Option<Vec<&'a str>>,
    /// `watcher.dev/injected`: the Watchers and their specHash.
    entries: Vec<(String, String)>,
    /// `watcher.dev/sidecars`: the sidecar containers Watchers put into the pod (on a
    /// reinvocation, those an earlier call named first).
    sidecars: Vec<String>,
    /// The same, by the specHash without the image.
    without_image: Vec<(String, String)>,
    /// A pod meant to end: the regular sidecars it gets are named, to be ended with its app.
    ends: bool,
    to_end: Vec<String>,
    ended_before: usize,
    /// A sidecar runs under the supervisor: its init container goes in.
    supervised: bool,
    /// Whether a sidecar reads the ended file: the pod needs its downward API volume.
    ended_file: bool,
    /// A sidecar goes in as a regular container (`kubectl logs` would ask which container).
    regular_sidecar: bool,
    /// The Watchers the namespace's guards left out, and why (`watcher.dev/left-out`).
    left_out: Vec<(String, String)>,
}

impl<'a, W: Borrow<Watcher>> Admission<'a, W> {
    fn new(
        pod: &'a PodView,
        namespace: &'a str,
        watchers: &'a [W],
        options: &'a InjectOptions,
        (guard, ledger): (Option<security::Guard<'a>>, Option<resources::Ledger<'a>>),
        injection: Injection,
    ) -> Self {
        let entries = annotation::Injected::read(pod.annotations())
            .iter()
            .map(|(n, h)| ((*n).to_owned(), (*h).to_owned()))
            .collect();
        let without_image = annotation::InjectedWithoutImage::read(pod.annotations())
            .into_iter()
            .map(|(n, h)| (n.to_owned(), h.to_owned()));
        let named = annotation::Sidecars::read(pod.annotations()).into_iter();
        let ends = ending::meant_to_end(pod);
        let to_end = if ends { ending::already_named(pod) } else { Vec::new() };
        Self {
            pod,
            namespace,
            watchers,
            options,
            guard,
            ledger,
            supervisor_resources: None,
            supervisor_counted: ends && ending::has_supervisor(pod),
            injection,
            patch: PodPatch::new(pod),
            injected_names: None,
            entries,
            sidecars: named.map(str::to_owned).collect(),
            without_image: without_image.collect(),
            ends,
            ended_before: to_end.len(),
            to_end,
            supervised: false,
            ended_file: false,
            regular_sidecar: false,
            left_out: Vec::new(),
        }
    }

    /// Injects the Watcher of `decision` where it is to be and can be; says why not where it
    /// cannot.
    fn decide(&mut self, decision: &crate::decide::Decision<'a>) {
        let name = &decision.name;
        let watcher = match (&decision.verdict, decision.watcher) {
            (Verdict::Inject, Some(watcher)) => watcher,
            (Verdict::Missing, _) => {
                self.injection.warnings.push(format!("Watcher {name} not found in namespace {}", self.namespace));
                return;
            }
            (Verdict::Collision { container }, watcher) => {
                let why = format!("the pod already has a container named {container}");
                self.injection.not_injected(name, watcher, &why);
                return;
            }
            (Verdict::Invalid { problems }, watcher) => {
                let why = format!("the pod would be invalid with it: {}", problems.join("; "));
                self.injection.not_injected(name, watcher, &why);
                return;
            }
            // Reinvocation, or a pod copied from an injected one: nothing to do.
            (Verdict::AlreadyInjected { .. } | Verdict::Inject, _) => return,
        };
        let native = native_sidecar(name, watcher, self.options, &mut self.injection.warnings);
        let Some(adapted) = self.adapted(name, watcher) else { return };
        let Some(fits) = self.fit_resources(name, watcher, native) else { return };
        let mut container = sidecar(watcher, native, &adapted.sidecar);
        resources::write(&mut container, fits.sidecar.as_ref());
        if !watcher.spec.app.is_empty() {
            let (pod, namespace, watchers) = (self.pod, self.namespace, self.watchers);
            let injected = self.injected_names.get_or_insert_with(|| injected_containers(pod, namespace, watchers));
            let seeing = app::Seeing {
                watcher,
                injected,
                init_adaptations: &adapted.init,
                init_resources: &fits.init,
                moment: app::Moment::Admission,
            };
            let report = app::see_the_app(&mut self.patch, seeing, &mut container, &mut self.injection.warnings);
            self.injection.app.push(report);
        }
        if self.ends {
            self.supervise(name, watcher, &mut container, native);
        }
        self.patch.add_container(container, native);
        self.regular_sidecar |= !native;
        if let Some(volume) = &watcher.spec.volume {
            self.patch.add_volume(&volume.name, to_value(volume.as_ref()));
        }
        if let Some(secret) = &watcher.spec.image_pull_secrets {
            self.patch.add_pull_secret(&secret.name, to_value(secret));
        }
        self.entries.push((name.clone(), watcher.spec.spec_hash()));
        self.sidecars.push(watcher.spec.container.name.clone());
        self.without_image.push((name.clone(), watcher.spec.spec_hash_without_image()));
        self.injection.injected.push(name.clone());
    }

    /// What `watcher`'s containers get for the enforced Pod Security level and to start; `None`
    /// (said) where they cannot pass or start.
    fn adapted(&mut self, name: &str, watcher: &Watcher) -> Option<security::Adapted> {
        let mut adapted = match self.guard.as_ref().map(|guard| (guard, guard.admit(watcher, self.pod))) {
            None => security::Adapted::default(),
            Some((guard, Err(failures))) => {
                self.injection.pod_security.push(guard.report(watcher, Err(&failures)));
                let why = guard.why(&failures);
                self.injection.not_injected(name, Some(watcher), &why);
                self.left_out.push((name.to_owned(), why));
                return None;
            }
            Some((guard, Ok(adapted))) => {
                if !adapted.is_empty() {
                    self.injection.pod_security.push(guard.report(watcher, Ok(&adapted)));
                }
                adapted
            }
        };
        if let Err(root) = security::startable(watcher, self.pod, &mut adapted) {
            self.injection.not_injected(name, Some(watcher), &root.to_string());
            return None;
        }
        Some(adapted)
    }

    /// What `watcher`'s containers get under the namespace's resource rules; `None` (said)
    /// where the pod would fail them with it.
    fn fit_resources(&mut self, name: &str, watcher: &Watcher, native: bool) -> Option<resources::WatcherResources> {
        let Some(ledger) = self.ledger.as_mut() else { return Some(resources::WatcherResources::default()) };
        let supervisor = ending::resources();
        let supervised = self.ends && !self.supervisor_counted && ending::has_command(&watcher.spec.container);
        match ledger.admit(watcher, native, supervised.then_some((SUPERVISOR_NAME, &supervisor))) {
            Ok((fits, report)) => {
                if supervised {
                    self.supervisor_counted = true;
                    self.supervisor_resources = fits.supervisor.clone();
                }
                self.injection.resources.extend(report);
                Some(fits)
            }
            Err(left_out) => {
                self.injection.resources.push(left_out.report);
                self.injection.not_injected(name, Some(watcher), &left_out.why);
                self.left_out.push((name.to_owned(), left_out.why));
                None
            }
        }
    }

    /// In a pod meant to end: a native sidecar is stopped by the kubelet once the app has ended
    /// (SIGTERM, then SIGKILL after the pod's grace period): under the supervisor it stops
    /// within seconds. A regular one is also named, for the operator to end.
    fn supervise(&mut self, name: &str, watcher: &Watcher, container: &mut Value, native: bool) {
        match ending::supervise(container) {
            Ok(how) => {
                self.supervised |= how == ending::Supervised::Wrapped;
                self.ended_file |= how.reads_ended_file();
                if !native {
                    self.to_end.push(watcher.spec.container.name.clone());
                }
            }
            Err(why) => self.injection.warnings.push(format!(
                "Watcher {name}: its sidecar cannot be ended with the pod's app containers, so the pod may never end: {why}"
            )),
        }
    }
}

/// What `watcher` lets its sidecar see of the app in `pod`, a pod that already exists (injected
/// with it, or not): the same step as admission, on the pod as it is now, for `check-inject`.
pub fn app_report<W: Borrow<Watcher>>(pod: &PodView, namespace: &str, watcher: &Watcher, watchers: &[W]) -> AppReport {
    let mut patch = PodPatch::new(pod);
    let injected = injected_containers(pod, namespace, watchers);
    let mut container = sidecar(watcher, false, &Adaptation::default());
    let seeing = app::Seeing {
        watcher,
        injected: &injected,
        init_adaptations: &[],
        init_resources: &[],
        moment: app::Moment::Existing,
    };
    app::see_the_app(&mut patch, seeing, &mut container, &mut Vec::new())
}

/// The names of the containers of `pod` that Watchers injected, as its `watcher.dev/injected`
/// annotation and the Watchers of `namespace` say.
fn injected_containers<'a, W: Borrow<Watcher>>(pod: &PodView, namespace: &str, watchers: &'a [W]) -> Vec<&'a str> {
    let carried = annotation::Injected::read(pod.annotations());
    watchers
        .iter()
        .map(Borrow::borrow)
        .filter(|w| w.is_in(namespace) && carried.iter().any(|(name, _)| w.metadata.name.as_deref() == Some(*name)))
        .map(|w| w.spec.container.name.as_str())
        .collect()
}

/// The Watcher's container as it goes into the pod, as JSON: serialised from the Watcher
/// as it is, then given the ConfigMap and the restart policy of a native sidecar.
fn sidecar(watcher: &Watcher, native: bool, adaptation: &Adaptation) -> Value {
    let mut container = adaptation.written(&watcher.spec.container);
    if let Value::Object(fields) = &mut container {
        if watcher.spec.has_config() {
            let source = EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource { name: config_map_name(&watcher.name_any()), optional: None }),
                ..EnvFromSource::default()
            };
            match fields.get_mut("envFrom") {
                Some(Value::Array(sources)) => sources.push(to_value(&source)),
                _ => {
                    fields.insert("envFrom".to_owned(), Value::Array(vec![to_value(&source)]));
                }
            }
        }
        if native {
            fields.insert("restartPolicy".to_owned(), Value::String("Always".to_owned()));
        }
    }
    container
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Serialising k8s-openapi types to a Value cannot fail: they are plain data with string keys.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Patch operations against one pod, tracking which lists exist and which names are taken so
/// every path is valid for the pod as the earlier operations leave it.
struct PodPatch<'a> {
    ops: Vec<PatchOperation>,
    spec: Option<&'a PodSpecView>,
    annotations: &'a Annotations,
    containers: &'a [ContainerView],
    /// The pod's volumes, then those the Watchers add; the first `pod_volumes` are the pod's.
    volume_names: Vec<&'a str>,
    pod_volumes: usize,
    /// The emptyDirs added, for cluster-autoscaler's annotation.
    added_empty_dirs: Vec<&'a str>,
    secret_names: Vec<&'a str>,
    has_containers: bool,
    has_init_containers: bool,
    has_volumes: bool,
    has_pull_secrets: bool,
    /// Init containers inserted before the pod's own so far.
    inserted_init_containers: usize,
    /// Each container's mounts, read from the pod when first needed.
    app_mounts: Option<Vec<Mounts>>,
    /// Annotations added for Watchers' `podAnnotations`, and the bytes of all the pod's.
    added_annotations: Vec<(&'a str, &'a str)>,
    annotation_bytes: usize,
    process_shared: bool,
    labels_exist: bool,
}

/// One container's mounts as a patch leaves them: whether its `volumeMounts` list exists, and
/// each mount's (normalised) path and volume.
type Mounts = (bool, Vec<(String, String)>);

impl<'a> PodPatch<'a> {
    fn new(pod: &'a PodView) -> Self {
        let spec = pod.spec.as_ref();
        let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        let init = spec.and_then(|s| s.init_containers.as_deref());
        let volumes = spec.and_then(|s| s.volumes.as_deref());
        let secrets = spec.and_then(|s| s.image_pull_secrets.as_deref());
        let volume_names: Vec<&str> = volumes.unwrap_or_default().iter().map(|v| v.name.as_str()).collect();
        Self {
            ops: Vec::new(),
            spec,
            annotations: &pod.metadata.annotations,
            containers,
            pod_volumes: volume_names.len(),
            volume_names,
            added_empty_dirs: Vec::new(),
            secret_names: secrets.unwrap_or_default().iter().map(|s| s.name.as_str()).collect(),
            has_containers: !containers.is_empty(),
            has_init_containers: init.is_some(),
            has_volumes: volumes.is_some(),
            has_pull_secrets: secrets.is_some(),
            inserted_init_containers: 0,
            app_mounts: None,
            added_annotations: Vec::new(),
            annotation_bytes: pod.metadata.annotations.bytes,
            process_shared: false,
            labels_exist: pod.metadata.labels.is_some(),
        }
    }

    fn add_container(&mut self, value: Value, native: bool) {
        if native {
            append(&mut self.ops, &mut self.has_init_containers, "initContainers", value);
        } else {
            append(&mut self.ops, &mut self.has_containers, "containers", value);
        }
    }

    /// Inserts an init container before the pod's own (after those inserted before it).
    fn insert_init_container(&mut self, value: Value) {
        if self.has_init_containers {
            let at = self.inserted_init_containers.to_string();
            self.ops.push(add(PointerBuf::from_tokens(["spec", "initContainers", &at]), value));
        } else {
            self.ops.push(add(PointerBuf::from_tokens(["spec", "initContainers"]), Value::Array(vec![value])));
            self.has_init_containers = true;
        }
        self.inserted_init_containers += 1;
    }

    /// Whether the pod itself (not a Watcher) has a volume `name`.
    fn pod_has_volume(&self, name: &str) -> bool {
        self.volume_names.iter().take(self.pod_volumes).any(|v| *v == name)
    }

    fn add_volume(&mut self, name: &'a str, volume: Value) {
        if !self.volume_names.contains(&name) {
            self.volume_names.push(name);
            if volume.get("emptyDir").is_some() {
                self.added_empty_dirs.push(name);
            }
            append(&mut self.ops, &mut self.has_volumes, "volumes", volume);
        }
    }

    fn add_pull_secret(&mut self, name: &'a str, secret: Value) {
        if !self.secret_names.contains(&name) {
            self.secret_names.push(name);
            append(&mut self.ops, &mut self.has_pull_secrets, "imagePullSecrets", secret);
        }
    }

    fn app_mounts(&mut self) -> &mut Vec<Mounts> {
        let containers = self.containers;
        self.app_mounts.get_or_insert_with(|| {
            containers
                .iter()
                .map(|c| {
                    let mounts = c.volume_mounts.iter().flatten();
                    let entries = mounts.map(|m| (app::normal(&m.mount_path).to_owned(), m.name.clone())).collect();
                    (c.volume_mounts.is_some(), entries)
                })
                .collect()
        })
    }

    /// The volume that the pod's container `index` mounts at `path` (normalised), if any.
    fn mounted_at(&mut self, index: usize, path: &str) -> Option<String> {
        let (_, mounts) = self.app_mounts().get(index)?;
        mounts.iter().find(|(p, _)| p == path).map(|(_, volume)| volume.clone())
    }

    /// Adds `mount` (of `volume` at `path`) to the pod's container `index`.
    fn add_app_mount(&mut self, index: usize, volume: &str, path: &str, mount: Value) {
        let Some((exists, mounts)) = self.app_mounts().get_mut(index) else { return };
        mounts.push((app::normal(path).to_owned(), volume.to_owned()));
        let at = index.to_string();
        if *exists {
            self.ops.push(add(PointerBuf::from_tokens(["spec", "containers", &at, "volumeMounts", "-"]), mount));
        } else {
            *exists = true;
            let path = PointerBuf::from_tokens(["spec", "containers", &at, "volumeMounts"]);
            self.ops.push(add(path, Value::Array(vec![mount])));
        }
    }

    fn share_process_namespace(&mut self) {
        let set = self.spec.is_some_and(|s| s.share_process_namespace == Some(true));
        if !set && !self.process_shared {
            self.ops.push(add(PointerBuf::from_tokens(["spec", "shareProcessNamespace"]), Value::Bool(true)));
        }
        self.process_shared = true;
    }

    fn has_annotation(&self, key: &str) -> bool {
        self.annotations.has(key) || self.added_annotations.iter().any(|(k, _)| *k == key)
    }

    fn add_annotation(&mut self, key: &'a str, value: &'a str) {
        self.annotation_bytes += key.len() + value.len();
        self.added_annotations.push((key, value));
    }

    /// Writes the Watchers' `podAnnotations` and `pairs` (the operator's own).
    fn set_annotations(&mut self, pairs: Vec<(&str, String)>) {
        let added = self.added_annotations.iter().map(|(k, v)| (*k, (*v).to_owned()));
        let all: Vec<(&str, String)> = added.chain(pairs).collect();
        if self.annotations.own.is_some() {
            // `add` on an existing member replaces it.
            for (key, value) in all {
                self.ops.push(add(PointerBuf::from_tokens(["metadata", "annotations", key]), Value::String(value)));
            }
        } else {
            let annotations: BTreeMap<&str, String> = all.into_iter().collect();
            self.ops.push(add(PointerBuf::from_tokens(["metadata", "annotations"]), to_value(&annotations)));
        }
    }
}

impl PodPatch<'_> {
    /// The supervisor of sidecars that end with the app: its volume, and the init container
    /// that copies it there (before the pod's own init containers), unless the pod has them.
    fn add_supervisor(&mut self, image: &str, resources: &ResourceRequirements) {
        let spec = self.spec;
        let containers = spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        if !containers.into_iter().any(|c| c.name == SUPERVISOR_NAME) {
            self.insert_init_container(ending::init_container(image, resources));
        }
        self.add_volume(SUPERVISOR_NAME, ending::volume());
        self.add_volume(watcher_api::NO_TOKEN_VOLUME, ending::no_token_volume());
    }

    /// cluster-autoscaler's `safe-to-evict-local-volumes` with the emptyDirs added merged into
    /// what the pod says; `None` where none was added.
    fn local_volumes(&self) -> Option<String> {
        if self.added_empty_dirs.is_empty() {
            return None;
        }
        let own = self.annotations.safe_to_evict_local_volumes.as_deref().unwrap_or_default();
        let mut names: Vec<&str> = own.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
        for added in &self.added_empty_dirs {
            if !names.contains(added) {
                names.push(added);
            }
        }
        Some(names.join(","))
    }

    /// Sets the label `key` to `value`.
    fn add_label(&mut self, key: &str, value: &str) {
        let value = Value::String(value.to_owned());
        if self.labels_exist {
            self.ops.push(add(PointerBuf::from_tokens(["metadata", "labels", key]), value));
        } else {
            let labels = serde_json::Map::from_iter([(key.to_owned(), value)]);
            self.ops.push(add(PointerBuf::from_tokens(["metadata", "labels"]), Value::Object(labels)));
            self.labels_exist = true;
        }
    }
}

/// Appends `value` to `/spec/<list>`, creating the list when the pod has none.
fn append(ops: &mut Vec<PatchOperation>, exists: &mut bool, list: &str, value: Value) {
    if *exists {
        ops.push(add(PointerBuf::from_tokens(["spec", list, "-"]), value));
    } else {
        ops.push(add(PointerBuf::from_tokens(["spec", list]), Value::Array(vec![value])));
        *exists = true;
    }
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

#[cfg(test)]
mod tests;
