//! The mutation itself: a pod and the Watchers of its namespace in, JSON-patch operations out.
//! Pure and synchronous; the admission handler and `watcher-operator inject` both call it.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::ResourceExt;
use serde_json::Value;
use std::borrow::Borrow;

use crate::PodView;

mod app;
mod config;
mod ending;
mod ops;
mod options;
mod patch;
mod resources;
mod security;
pub use app::AppReport;
pub use ops::Patch;
pub(crate) use ops::{Fields, Op, Sidecar};

use options::native_sidecar;
pub use options::{InjectOptions, SYSTEM_NAMESPACES, server_minor, supports_native_sidecars};
use patch::PodPatch;
pub use patch::annotation_pointer;
pub(crate) use patch::pointer;
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
    pub patch: Patch,
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
    let mut injection = Injection::default();
    if let Some(why) = never_injected(pod, namespace, options) {
        injection.skipped = Some(why);
        return injection;
    }
    let decisions = decide(pod, namespace, watchers);
    injection.asked = !decisions.is_empty();
    let mut admission = admit(pod, namespace, watchers, options, guards, &decisions, injection);
    let mut injection = std::mem::take(&mut admission.injection);
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
            admission.patch.set_annotations(vec![(annotation::LeftOut::KEY, left_out)]);
            injection.patch = admission.patch.ops;
        }
        return injection;
    }
    if admission.supervised {
        let resources = admission.supervisor_resources.take().unwrap_or_else(ending::resources);
        admission.patch.add_supervisor(&options.supervisor_image, &resources);
    }
    if admission.ended_file {
        admission.patch.add_volume(watcher_api::ENDED_VOLUME, &ending::ended_volume());
    }
    let mut annotations = injected_annotations(&admission, left_out);
    if admission.regular_sidecar && !pod.metadata.annotations.has(DEFAULT_CONTAINER_ANNOTATION) {
        let injected = injected_containers(pod, namespace, watchers);
        let containers = pod.spec.iter().flat_map(|s| &s.containers);
        if let Some(app) = containers.map(|c| c.name.as_str()).find(|name| !injected.contains(name)) {
            annotations.push((DEFAULT_CONTAINER_ANNOTATION, app.to_owned()));
        }
    }
    let mut patch = admission.patch;
    if admission.to_end.len() > admission.ended_before {
        patch.add_label(END_SIDECARS_LABEL, "true");
    }
    patch.set_annotations(annotations);
    injection.patch = patch.ops;
    injection
}

/// Why nothing is injected into `pod` in `namespace` whatever it asks: a namespace never
/// injected, or a pod with no containers.
fn never_injected(pod: &PodView, namespace: &str, options: &InjectOptions) -> Option<String> {
    if options.never_mutated(namespace) {
        return Some(format!("namespace {namespace} is never injected"));
    }
    // Not a valid pod: the API server rejects it after admission, and a patch could not apply.
    pod.spec.as_ref().is_none_or(|spec| spec.containers.is_empty()).then(|| "the pod has no containers".into())
}

/// Every decision taken in one admission, the guards (Pod Security where a level is enforced,
/// the resource rules) evaluated only where a Watcher is to be injected.
fn admit<'a, W: Borrow<Watcher>>(
    pod: &'a PodView,
    namespace: &'a str,
    watchers: &'a [W],
    options: &'a InjectOptions,
    guards: &Guards<'a>,
    decisions: &'a [crate::decide::Decision<'a>],
    injection: Injection,
) -> Admission<'a, W> {
    let injects = decisions.iter().any(|d| d.verdict == Verdict::Inject);
    let enforced = guards.levels.enforced().is_some() && injects;
    let guard = if enforced { security::Guard::of(pod, guards.levels, options.server_minor) } else { None };
    let ledger = if injects { resources::Ledger::of(guards.resources, pod) } else { None };
    let mut admission = Admission::new(pod, namespace, watchers, options, (guard, ledger), injection);
    for decision in decisions {
        admission.decide(decision);
    }
    admission
}

/// The annotations an injection writes on the pod: what was injected (with and without its
/// image), the sidecars, what was left out, the emptyDirs cluster-autoscaler may evict, and
/// the sidecars to end with the app.
fn injected_annotations<W>(record: &Admission<'_, W>, left_out: String) -> Vec<(&'static str, String)> {
    let value = annotation::Injected::encode(record.entries.iter().map(|(n, h)| (n, h)));
    let imageless = annotation::InjectedWithoutImage::encode(record.without_image.iter().map(|(n, h)| (n, h)));
    let sidecars = (annotation::Sidecars::KEY, annotation::Sidecars::encode(&record.sidecars));
    let mut annotations =
        vec![(annotation::Injected::KEY, value), (annotation::InjectedWithoutImage::KEY, imageless), sidecars];
    if !record.configs.is_empty() {
        let configs = annotation::InjectedConfig::encode(record.configs.iter().map(|(n, h)| (n, h)));
        annotations.push((annotation::InjectedConfig::KEY, configs));
    }
    if !left_out.is_empty() {
        annotations.push((annotation::LeftOut::KEY, left_out));
    }
    if let Some(volumes) = record.patch.local_volumes() {
        annotations.push((SAFE_TO_EVICT_LOCAL_VOLUMES_ANNOTATION, volumes));
    }
    if record.to_end.len() > record.ended_before {
        annotations.push((annotation::EndSidecars::KEY, annotation::EndSidecars::encode(&record.to_end)));
    }
    annotations
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
    /// `watcher.dev/injected`: the Watchers and their specHash (borrowed from the pod, or from
    /// the Watchers and their hashes: nothing is copied per pod).
    entries: Vec<(&'a str, &'a str)>,
    /// `watcher.dev/sidecars`: the sidecar containers Watchers put into the pod (on a
    /// reinvocation, those an earlier call named first).
    sidecars: Vec<&'a str>,
    /// The same, by the specHash without the image.
    without_image: Vec<(&'a str, &'a str)>,
    /// `watcher.dev/injected-config`: the Watchers with config data and its hash.
    configs: Vec<(&'a str, &'a str)>,
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
        let entries = annotation::Injected::read(pod.annotations());
        let without_image = annotation::InjectedWithoutImage::read(pod.annotations());
        let configs = annotation::InjectedConfig::read(pod.annotations());
        let sidecars = annotation::Sidecars::read(pod.annotations());
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
            configs,
            sidecars,
            without_image,
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
    fn decide(&mut self, decision: &'a crate::decide::Decision<'a>) {
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
        if let Some(refused) = watcher.unshipped_config() {
            // Its sidecar would wait for a ConfigMap that is not there: the pod starts without
            // it, and the pod reconciler reports it on the Watcher.
            let why = format!("no configuration of it was ever shipped: {}", refused.replace('\n', " "));
            self.injection.not_injected(name, Some(watcher), &why);
            self.left_out.push((name.to_owned(), why));
            return;
        }
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
        let config_volume = config::mount_agent_config(&self.patch, watcher, &mut container);
        if self.ends {
            self.supervise(name, watcher, &mut container, native);
        }
        self.patch.add_container(container, native);
        self.regular_sidecar |= !native;
        if let Some(volume) = &watcher.spec.volume {
            self.patch.add_spec_volume(&volume.name, watcher.spec.written());
        }
        if let Some(config_volume) = config_volume {
            config::add_config_volume(&mut self.patch, config_volume);
        }
        if let Some(secret) = &watcher.spec.image_pull_secrets {
            // A `LocalObjectReference` as it serialises.
            self.patch.add_pull_secret(&secret.name, serde_json::json!({"name": secret.name}));
        }
        self.entries.push((name, watcher.spec.spec_hash()));
        if let Some(config) = watcher.spec.config_hash() {
            self.configs.push((name, config));
        }
        self.sidecars.push(&watcher.spec.container.name);
        self.without_image.push((name, watcher.spec.spec_hash_without_image()));
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
    fn supervise(&mut self, name: &str, watcher: &Watcher, container: &mut Sidecar, native: bool) {
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

/// The Watcher's container as it goes into the pod: the spec's container (its JSON made once per
/// spec, shared), with this pod's securityContext, the ConfigMap and the restart policy of a
/// native sidecar set over it.
fn sidecar(watcher: &Watcher, native: bool, adaptation: &Adaptation) -> Sidecar {
    let spec = &watcher.spec;
    let mut container = Sidecar::of(spec.written().clone());
    if let Some(context) = adaptation.security_context(&spec.container) {
        container.set("securityContext", context);
    }
    if spec.has_config() {
        // An `EnvFromSource` with only its `configMapRef`, as it serialises.
        let source = serde_json::json!({"configMapRef": {"name": config_map_name(&watcher.name_any())}});
        match container.field_mut("envFrom") {
            Some(Value::Array(sources)) => sources.push(source),
            _ => container.set("envFrom", Value::Array(vec![source])),
        }
    }
    if native {
        container.set("restartPolicy", Value::String("Always".to_owned()));
    }
    container
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    // Serialising k8s-openapi types to a Value cannot fail: they are plain data with string keys.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;
