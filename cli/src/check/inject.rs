//! `watcher-operator check-inject`: why a pod is, or would be, injected or not. The answer comes
//! from the webhook's own decision code ([`watcher_admission::decide`], [`watcher_admission::exclusion`],
//! [`watcher_admission::inject`], [`watcher_admission::rewrite_images`]) run on what the cluster
//! holds, so it cannot disagree with admission.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::PatchOperation;
use kube::ResourceExt;
use serde::Serialize;
use watcher_admission::pod_security::NamespaceLevels;
use watcher_admission::resources::ResourceRules;
use watcher_admission::scope::Conditions;
use watcher_admission::{
    Asked, Exclusion, Guards, InjectOptions, PodView, Sent, Verdict, WebhookSelectors, app_report, decide, exclusion,
    inject_guarded, rewrite_images,
};
use watcher_api::{ClusterWatcher, CompiledPolicy, Watcher, annotation, image};

/// Why the namespace or the pod is kept from the webhook.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Excluded {
    pub(crate) reason: Exclusion,
    pub(crate) message: String,
}

/// One Watcher of the namespace (or one the pod names that does not exist).
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WatcherLine {
    pub(crate) name: String,
    pub(crate) injected: bool,
    /// For an injected existing pod: whether it carries the Watcher's current specHash.
    pub(crate) up_to_date: Option<bool>,
    /// `Annotation`, `Selector`, `NotAsked`, `Collision`, `WatcherMissing` or `Excluded`.
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    /// For an injected Watcher with any app field: what its sidecar sees of the app (volumes
    /// shared and mounted, variables carried, annotations, init containers) and what it skipped,
    /// and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) sees: Vec<String>,
    /// The Watcher is a ClusterWatcher's, where it applies.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) cluster: bool,
    /// Where the namespace enforces a Pod Security level: what was set in the Watcher's
    /// containers for it.
    #[serde(rename = "podSecurity", skip_serializing_if = "Vec::is_empty")]
    pub(crate) pod_security: Vec<String>,
    /// Where the namespace has LimitRanges or ResourceQuotas: the requests and limits set in
    /// the Watcher's containers for them, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) resources: Vec<String>,
    /// For an injected Watcher whose sidecar runs watcher-agent: whether its configuration
    /// parses, and what it will follow (files it can see, the log stream).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) agent: Vec<String>,
    /// In a pod under `restartPolicy: OnFailure`: that the sidecar ends by a restart the Job
    /// counts toward its `backoffLimit`, and what to do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) ending: Vec<String>,
}

/// How one ClusterWatcher stands towards the pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ClusterLine {
    pub(crate) name: String,
    /// Whether it applies there (then its line is among the Watchers').
    pub(crate) applies: bool,
    /// `Applies`, `TakenOver`, `NotSelected` or `NeverInjected`.
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

/// How each of `cluster` stands towards `namespace` (labelled `labels`, with its own Watchers
/// `own`), by name.
pub(crate) fn cluster_lines(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    own: &[Arc<Watcher>],
    cluster: &[Arc<ClusterWatcher>],
    options: &InjectOptions,
) -> Vec<ClusterLine> {
    use watcher_admission::cluster::{ClusterStanding, standing};
    let mut lines: Vec<ClusterLine> = cluster
        .iter()
        .map(|c| {
            let name = c.name_any();
            let standing = standing(c, namespace, labels, own, options);
            let reason = match standing {
                ClusterStanding::Applies => "Applies",
                ClusterStanding::TakenOver => "TakenOver",
                ClusterStanding::NotSelected => "NotSelected",
                ClusterStanding::NeverInjected(_) => "NeverInjected",
            };
            let message = standing.describe(&name, namespace);
            ClusterLine { applies: standing == ClusterStanding::Applies, reason, message, name }
        })
        .collect();
    lines.sort_by(|a, b| a.name.cmp(&b.name));
    lines
}

/// One image an ImagePolicy rewrites (or rewrote).
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ImageLine {
    pub(crate) container: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) policy: String,
}

/// The whole answer: `{"namespace", "pod", "sent", "webhook", "excluded", "watchers",
/// "clusterWatchers" (when there are any), "images"}`.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Explanation {
    pub(crate) namespace: String,
    pub(crate) pod: String,
    /// Whether kube-apiserver sends the pod to the webhook at all.
    pub(crate) sent: bool,
    /// Which webhook of the configuration: `inject.watcher.dev` or `required.watcher.dev`.
    pub(crate) webhook: Option<&'static str>,
    pub(crate) excluded: Option<Excluded>,
    pub(crate) watchers: Vec<WatcherLine>,
    /// The ClusterWatchers, and whether each applies in the namespace and why.
    #[serde(rename = "clusterWatchers", skip_serializing_if = "Vec::is_empty")]
    pub(crate) cluster_watchers: Vec<ClusterLine>,
    pub(crate) images: Vec<ImageLine>,
    /// What could not be read, and what the explanation assumed instead.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
}

/// What the cluster holds that admission reads, for one namespace.
pub(crate) struct Scope<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) namespace_labels: &'a BTreeMap<String, String>,
    /// The cluster's Pod Security admission configuration, as the operator judges by it.
    pub(crate) pod_security: &'a watcher_admission::pod_security::ClusterDefaults,
    /// The Watchers that apply in the namespace: its own, then the ClusterWatchers' that
    /// apply there ([`watcher_admission::cluster::watchers_in_namespace`]).
    pub(crate) watchers: &'a [&'a Watcher],
    /// How each ClusterWatcher stands towards the namespace ([`cluster_lines`]).
    pub(crate) cluster: Vec<ClusterLine>,
    /// The webhook configuration's selectors.
    pub(crate) selectors: &'a WebhookSelectors,
    /// The valid ImagePolicies selecting the namespace, in name order.
    pub(crate) policies: &'a [Arc<CompiledPolicy>],
    /// The operator's namespace (never injected).
    pub(crate) options: &'a InjectOptions,
    /// The namespace's LimitRanges and ResourceQuotas, as admission reads them.
    pub(crate) resources: &'a ResourceRules,
    /// Where the registered matchConditions send the pod (see [`sent_by`]).
    pub(crate) sent: Sent,
}

impl Scope<'_> {
    /// The namespace's Pod Security levels, as admission reads them.
    fn levels(&self) -> NamespaceLevels {
        NamespaceLevels::of_namespace(
            self.namespace,
            |key| self.namespace_labels.get(key).map(String::as_str),
            self.pod_security,
        )
    }

    /// What admission does to `pod` in the namespace: the same pass as the webhook's.
    fn admit(&self, pod: &PodView) -> watcher_admission::Injection {
        let levels = self.levels();
        let guards = Guards { levels: &levels, resources: self.resources };
        inject_guarded(pod, self.namespace, self.watchers, self.options, &guards)
    }
}

/// Where kube-apiserver sends a pod with `labels` and `annotations`, created in `namespace`,
/// given the operator's conditions as registered (`None`: there is no configuration) and the
/// scope the operator computes: the same code that writes the conditions.
pub(crate) fn sent_by(
    registered: Option<&Conditions>,
    admission: &watcher_admission::Scope,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Sent {
    let Some(registered) = registered else { return Sent::No };
    match admission.sends(namespace, labels, annotations) {
        Sent::Required if registered.required.is_some() => Sent::Required,
        // No scope condition registered: every pod of a served namespace is sent.
        _ if registered.scope.is_none() => Sent::Inject,
        Sent::Required => Sent::Inject,
        sent => sent,
    }
}

impl WatcherLine {
    /// The line of Watcher `name`: `injected` or not, `up_to_date` where it is, and why.
    fn new(name: String, injected: bool, up_to_date: Option<bool>, reason: &'static str, message: String) -> Self {
        Self {
            name,
            injected,
            up_to_date: if injected { up_to_date } else { None },
            reason,
            message,
            sees: Vec::new(),
            cluster: false,
            pod_security: Vec::new(),
            resources: Vec::new(),
            agent: Vec::new(),
            ending: Vec::new(),
        }
    }
}

/// The Watchers a pod carries (`watcher.dev/injected`: name and specHash) against those of its
/// namespace now.
struct Carried<'a> {
    carried: Vec<(&'a str, &'a str)>,
    watchers: &'a [&'a Watcher],
}

impl Carried<'_> {
    /// The specHash the pod carries of Watcher `name`.
    fn hash_of(&self, name: &str) -> Option<&str> {
        self.carried.iter().find(|(n, _)| *n == name).map(|(_, h)| *h)
    }

    /// The specHash of Watcher `name` now.
    fn current(&self, name: &str) -> Option<String> {
        self.watchers.iter().find(|w| w.name_any() == name).map(|w| w.spec.spec_hash())
    }

    /// Whether the pod carries Watcher `name` as it is now (`None`: it does not carry it).
    fn up_to_date(&self, name: &str) -> Option<bool> {
        self.hash_of(name).map(|hash| self.current(name).as_deref() == Some(hash))
    }
}

/// Explains `pod`: as it exists in the cluster (`existing`: what was done at its creation), or
/// as a manifest (what admission would do now).
pub(crate) fn explain(pod: &PodView, existing: bool, scope: &Scope<'_>) -> Explanation {
    let namespace = scope.namespace;
    let excluded = exclusion(namespace, scope.namespace_labels, pod.labels(), scope.selectors, scope.options)
        .map(|reason| Excluded { reason, message: reason.message(namespace) });
    let carried = Carried { carried: annotation::Injected::read(pod.annotations()), watchers: scope.watchers };
    let mut lines = match &excluded {
        Some(excluded) => excluded_lines(existing, excluded, &carried),
        None => {
            let mut lines = asked_lines(pod, existing, scope, &carried);
            hold_the_level(pod, scope, &mut lines);
            hold_the_resources(pod, scope, &mut lines);
            see_the_app(pod, existing, scope, &mut lines);
            for line in lines.iter_mut().filter(|l| l.injected) {
                if let Some(watcher) = scope.watchers.iter().find(|w| w.name_any() == line.name) {
                    line.agent = agent_lines(pod, existing, watcher);
                    line.ending = ending_lines(pod, watcher);
                }
            }
            lines
        }
    };
    lines.sort_by(|a, b| a.name.cmp(&b.name));
    for line in &mut lines {
        line.cluster = scope.watchers.iter().any(|w| w.name_any() == line.name && w.cluster_watcher().is_some());
    }
    let images = if existing { rewritten_images(pod, scope.policies) } else { planned_images(pod, scope, &excluded) };
    let sent = if excluded.is_some() { Sent::No } else { scope.sent };
    let webhook = match sent {
        Sent::No => None,
        Sent::Inject => Some(watcher_controller::scope::INJECT_WEBHOOK),
        Sent::Required => Some(watcher_controller::scope::REQUIRED_WEBHOOK),
    };
    Explanation {
        namespace: namespace.to_owned(),
        pod: pod.display_name().to_owned(),
        sent: sent != Sent::No,
        webhook,
        excluded,
        watchers: lines,
        cluster_watchers: scope
            .cluster
            .iter()
            .map(|l| ClusterLine { message: l.message.clone(), name: l.name.clone(), ..*l })
            .collect(),
        images,
        notes: Vec::new(),
    }
}

/// A pod the webhook is not sent: every Watcher of the namespace, excluded.
fn excluded_lines(existing: bool, excluded: &Excluded, carried: &Carried<'_>) -> Vec<WatcherLine> {
    carried
        .watchers
        .iter()
        .map(|watcher| {
            let name = watcher.name_any();
            let injected = existing && carried.hash_of(&name).is_some();
            let message = format!("not sent to the webhook: {}", excluded.message);
            WatcherLine::new(name.clone(), injected, carried.up_to_date(&name), "Excluded", message)
        })
        .collect()
}

/// A pod the webhook is sent: each Watcher asked for (by annotation or selector) as admission
/// decides it, then those not asked.
fn asked_lines(pod: &PodView, existing: bool, scope: &Scope<'_>, carried: &Carried<'_>) -> Vec<WatcherLine> {
    let decisions = decide(pod, scope.namespace, scope.watchers);
    let mut lines: Vec<WatcherLine> =
        decisions.iter().map(|decision| decided_line(decision, existing, scope.namespace, carried)).collect();
    for watcher in scope.watchers {
        let name = watcher.name_any();
        if decisions.iter().any(|d| d.name == name) {
            continue;
        }
        let injected = existing && carried.hash_of(&name).is_some();
        let message = match (&watcher.spec.selector, injected) {
            (_, true) => "injected at creation, and no longer asked for".to_owned(),
            (None, _) => {
                format!("not asked: not named in {}, and Watcher {name} has no selector", annotation::Inject::KEY)
            }
            (Some(_), _) => {
                format!("not asked: not named in {}, and its selector does not match", annotation::Inject::KEY)
            }
        };
        lines.push(WatcherLine::new(name.clone(), injected, carried.up_to_date(&name), "NotAsked", message));
    }
    lines
}

/// The line of one Watcher the pod asks for, as admission decided (or would decide) it.
fn decided_line(
    decision: &watcher_admission::Decision<'_>,
    existing: bool,
    namespace: &str,
    carried: &Carried<'_>,
) -> WatcherLine {
    let how = match decision.asked {
        Asked::Annotation => ("Annotation", format!("asked by annotation {}", annotation::Inject::KEY)),
        Asked::Selector => ("Selector", "selected by the Watcher's spec.selector".to_owned()),
    };
    let line = |injected: bool, reason: &'static str, message: String| {
        WatcherLine::new(decision.name.clone(), injected, carried.up_to_date(&decision.name), reason, message)
    };
    match &decision.verdict {
        Verdict::Inject if existing => line(
            false,
            how.0,
            format!(
                "{}, but not injected: the webhook did not see the pod when it was created (down, \
                 or the Watcher came later); `updatePolicy: Recreate` repairs pods a controller owns",
                how.1
            ),
        ),
        Verdict::Inject => line(true, how.0, format!("{}: injected at creation", how.1)),
        Verdict::AlreadyInjected { hash } => {
            let state = match carried.current(&decision.name) {
                Some(now) if now == *hash => "up to date".to_owned(),
                Some(now) => format!("outdated: injected with specHash {hash}, the Watcher's is {now}"),
                None => "the Watcher is gone".to_owned(),
            };
            line(true, how.0, format!("{}: injected, {state}", how.1))
        }
        Verdict::Collision { container } => line(
            false,
            "Collision",
            format!("{}, but the pod already has a container named {container}{}", how.1, refused(decision)),
        ),
        Verdict::Invalid { problems } => line(
            false,
            "Invalid",
            format!("{}, but the pod would be invalid with it: {}{}", how.1, problems.join("; "), refused(decision)),
        ),
        Verdict::Missing => line(
            false,
            "WatcherMissing",
            format!("asked by annotation, but there is no Watcher {} in namespace {namespace}", decision.name),
        ),
    }
}

/// In a pod under `restartPolicy: OnFailure` (a Job's): how `watcher`'s sidecar ends, where that
/// is a restart the Job counts toward its `backoffLimit`.
fn ending_lines(pod: &PodView, watcher: &Watcher) -> Vec<String> {
    let on_failure = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
    match watcher.spec.ends_by_restart() {
        Some(why) if on_failure => vec![format!("ends by a restart (EndsWithoutRestart False): {why}")],
        _ => Vec::new(),
    }
}

/// For a Watcher whose sidecar runs watcher-agent: its configuration as the agent will read it
/// (the Watcher's configData through `envFrom`, then the container's own `env`, which wins; a
/// variable of the pod's identity from the downward API counts as set), judged by the agent's
/// own code (or said to be known only in the pod); and, when it
/// parses, each glob and whether a volume is mounted there in the sidecar (its own mounts, and
/// with `shareVolumes` the app's), and the log stream.
fn agent_lines(pod: &PodView, existing: bool, watcher: &Watcher) -> Vec<String> {
    let container = &watcher.spec.container;
    use watcher_controller::agent::Judgement;
    let config = match watcher_controller::agent::agent_configuration(&watcher.spec) {
        None => return Vec::new(),
        Some(Judgement::Takes(config)) => config,
        Some(Judgement::Refuses(error)) => return vec![format!("watcher-agent: configuration invalid: {error}")],
        Some(Judgement::CannotKnow(why)) => {
            return vec![format!("watcher-agent: configuration known only in the pod: {why}")];
        }
    };
    let mut lines = vec!["watcher-agent: configuration valid".to_owned()];
    // Where the sidecar has a volume: as the existing pod has it, or as admission mounts it.
    let spec = pod.spec.as_ref();
    let in_pod = || spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
    let mut mounted: Vec<String> = Vec::new();
    match in_pod().find(|c| existing && c.name == container.name) {
        Some(sidecar) => mounted.extend(sidecar.volume_mounts.iter().flatten().map(|m| m.mount_path.clone())),
        None => {
            mounted.extend(container.volume_mounts.iter().flatten().map(|m| m.mount_path.clone()));
            if watcher.spec.app.share_volumes != watcher_api::ShareVolumes::None {
                let apps = in_pod().filter(|c| c.name != container.name && watcher.spec.app.is_app_container(&c.name));
                mounted.extend(apps.flat_map(|c| c.volume_mounts.iter().flatten().map(|m| m.mount_path.clone())));
            }
        }
    }
    mounted.retain(|path| path != watcher_api::SERVICE_ACCOUNT_PATH);
    for glob in &config.files {
        let under = |path: &String| {
            let dir = path.trim_end_matches('/');
            glob.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
        };
        match mounted.iter().filter(|p| under(p)).max_by_key(|p| p.len()) {
            Some(path) => lines.push(format!("follows {glob}: a volume is mounted at {path} in the sidecar")),
            None => lines.push(format!(
                "follows {glob}: nothing is mounted there in the sidecar, so it sees no file of the app \
                 (shareVolumes, or a volumeMount of its own)"
            )),
        }
    }
    if let Some(name) = &config.logs_container {
        if in_pod().any(|c| &c.name == name) {
            lines.push(format!(
                "follows the log stream of container {name} (the pod's ServiceAccount needs get on pods/log)"
            ));
        } else {
            lines.push(format!("follows the log stream of container {name}: the pod has no such container"));
        }
    }
    lines
}

/// What each injected Watcher's sidecar sees of the app: for a manifest, what admission's own
/// pass reports (every Watcher in one patch, as at creation); for an existing pod, the same step
/// run on the pod as it is.
fn see_the_app(pod: &PodView, existing: bool, scope: &Scope<'_>, lines: &mut [WatcherLine]) {
    let injecting: Vec<&Watcher> = scope
        .watchers
        .iter()
        .copied()
        .filter(|w| !w.spec.app.is_empty() && lines.iter().any(|l| l.injected && l.name == w.name_any()))
        .collect();
    if injecting.is_empty() {
        return;
    }
    let reports = if existing {
        injecting.iter().map(|w| app_report(pod, scope.namespace, w, scope.watchers)).collect()
    } else {
        scope.admit(pod).app
    };
    for report in reports {
        if let Some(line) = lines.iter_mut().find(|l| l.name == report.watcher) {
            line.sees = report.lines;
        }
    }
}

/// Where the namespace enforces a Pod Security level: what admission sets in each Watcher's
/// containers for it, and which Watchers it leaves out (the same pass as admission, on the pod
/// as it is or as written).
fn hold_the_level(pod: &PodView, scope: &Scope<'_>, lines: &mut [WatcherLine]) {
    let levels = scope.levels();
    if levels.enforced().is_none() {
        return;
    }
    let injection = scope.admit(pod);
    for report in injection.pod_security {
        let Some(line) = lines.iter_mut().find(|l| l.name == report.watcher) else { continue };
        match &report.violations {
            Some(violations) => {
                let why = format!("it would make the pod violate PodSecurity \"{}\": {violations}", report.policy);
                left_out(line, scope, "PodSecurity", &why);
            }
            None => {
                line.pod_security = report
                    .adapted
                    .iter()
                    .map(|(container, fields)| {
                        format!(
                            "container {container} gets {} for PodSecurity \"{}\"",
                            fields.join(", "),
                            report.policy
                        )
                    })
                    .collect();
            }
        }
    }
}

/// `line`'s Watcher left out by a guard of the namespace (`reason`), for `why`; a required one
/// refuses the pod.
fn left_out(line: &mut WatcherLine, scope: &Scope<'_>, reason: &'static str, why: &str) {
    let required = scope.watchers.iter().any(|w| w.name_any() == line.name && w.spec.is_required());
    line.injected = false;
    line.up_to_date = None;
    line.reason = reason;
    let refused = if required { "; the Watcher is required (failurePolicy: Fail): the pod is refused" } else { "" };
    line.message = format!("left out: {why}{refused}");
}

/// Where the namespace has LimitRanges or ResourceQuotas: what admission sets in each Watcher's
/// containers for them, and which Watchers it leaves out and why (the same pass as admission).
fn hold_the_resources(pod: &PodView, scope: &Scope<'_>, lines: &mut [WatcherLine]) {
    if scope.resources.is_empty() {
        return;
    }
    for report in scope.admit(pod).resources {
        let Some(line) = lines.iter_mut().find(|l| l.name == report.watcher) else { continue };
        match &report.violations {
            Some(violations) => {
                let why = format!(
                    "the pod would fail its namespace's resource rules ({}) with it: {violations}",
                    report.rules
                );
                left_out(line, scope, "Resources", &why);
            }
            None => {
                line.resources = report
                    .adapted
                    .iter()
                    .map(|(container, set)| format!("container {container} gets {}", set.join(", ")))
                    .collect();
            }
        }
    }
}

/// What a Watcher that cannot be injected means for the pod when it is required.
fn refused(decision: &watcher_admission::Decision<'_>) -> &'static str {
    match decision.watcher {
        Some(watcher) if watcher.spec.is_required() => {
            "; the Watcher is required (failurePolicy: Fail): the pod is refused"
        }
        _ => "",
    }
}

/// The first policy (in name order) whose rules rewrite `image`, as admission applies them.
fn rewriting_policy<'a>(policies: &'a [Arc<CompiledPolicy>], image: &str) -> Option<(&'a str, String)> {
    policies.iter().find_map(|p| image::rewrite(p.valid_rules(), image).map(|to| (p.name.as_str(), to)))
}

/// A manifest: run admission's two steps and read back what the patch does to each image.
fn planned_images(pod: &PodView, scope: &Scope<'_>, excluded: &Option<Excluded>) -> Vec<ImageLine> {
    if excluded.is_some() {
        return Vec::new();
    }
    let mut injection = scope.admit(pod);
    let before = injection.patch.len();
    // The sidecars as injected, then the pod's own containers: images before rewriting.
    let mut images: Vec<(String, String)> = Vec::new();
    for op in &injection.patch[..before] {
        let PatchOperation::Add(add) = op else { continue };
        let containers = match &add.value {
            serde_json::Value::Array(list) if add.path.to_string().ends_with("ontainers") => list.iter().collect(),
            value if add.path.to_string().ends_with("ontainers/-") => vec![value],
            _ => continue,
        };
        for container in containers {
            if let (Some(name), Some(image)) = (container["name"].as_str(), container["image"].as_str()) {
                images.push((name.to_owned(), image.to_owned()));
            }
        }
    }
    let spec = pod.spec.as_ref();
    let own = spec.map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())).into_iter().flatten();
    images.extend(own.filter_map(|c| Some((c.name.clone(), c.image.clone()?))));
    rewrite_images(pod, scope.namespace, scope.policies, scope.options, &mut injection);
    images
        .into_iter()
        .filter(|(name, _)| injection.rewritten.contains(name))
        .filter_map(|(container, from)| {
            let (policy, to) = rewriting_policy(scope.policies, &from)?;
            Some(ImageLine { container, from, to, policy: policy.to_owned() })
        })
        .collect()
}

/// An existing pod: what `watcher.dev/original-images` records, and the policy that rewrites
/// each original now (empty when none does any more).
fn rewritten_images(pod: &PodView, policies: &[Arc<CompiledPolicy>]) -> Vec<ImageLine> {
    let spec = pod.spec.as_ref();
    let image_of = |name: &str| {
        spec.and_then(|s| s.containers.iter().chain(s.init_containers.iter().flatten()).find(|c| c.name == name))
            .and_then(|c| c.image.clone())
    };
    annotation::OriginalImages::read(pod.annotations())
        .into_iter()
        .map(|(container, from)| ImageLine {
            container: container.to_owned(),
            from: from.to_owned(),
            to: image_of(container).unwrap_or_default(),
            policy: rewriting_policy(policies, from).map(|(p, _)| p.to_owned()).unwrap_or_default(),
        })
        .collect()
}

impl Explanation {
    /// For people: the pod, its exclusion, one line per Watcher, the images.
    pub(crate) fn text(&self) -> String {
        let mut out = format!("Pod {}/{}\n", self.namespace, self.pod);
        if let Some(excluded) = &self.excluded {
            out.push_str(&format!("× excluded ({:?}): {}\n", excluded.reason, excluded.message));
        } else {
            match self.webhook {
                Some(webhook) => out.push_str(&format!("→ sent to webhook {webhook}\n")),
                None => out.push_str(
                    "× not sent to the webhook: it asks for no Watcher, none selects it and no ImagePolicy \
                     applies to its namespace (the webhook's matchConditions)\n",
                ),
            }
        }
        for note in &self.notes {
            out.push_str(&format!("! {note}\n"));
        }
        if self.watchers.is_empty() {
            out.push_str(&format!("  no Watcher in namespace {}\n", self.namespace));
        }
        for line in &self.watchers {
            let mark = match (line.injected, line.up_to_date) {
                (true, Some(false)) => "‼",
                (true, _) => "√",
                (false, _) if matches!(line.reason, "NotAsked") => "-",
                (false, _) => "×",
            };
            let state = if line.injected { "injected" } else { "not injected" };
            let kind = if line.cluster { " (ClusterWatcher)" } else { "" };
            out.push_str(&format!("{mark} {}{kind}: {state} ({}): {}\n", line.name, line.reason, line.message));
            let below = [&line.sees, &line.pod_security, &line.resources, &line.agent, &line.ending];
            for seen in below.into_iter().flatten() {
                out.push_str(&format!("    {seen}\n"));
            }
        }
        for line in self.cluster_watchers.iter().filter(|l| !l.applies) {
            out.push_str(&format!(
                "- {} (ClusterWatcher): does not apply ({}): {}\n",
                line.name, line.reason, line.message
            ));
        }
        for image in &self.images {
            let policy = if image.policy.is_empty() {
                "no policy matches it now".to_owned()
            } else {
                format!("ImagePolicy {}", image.policy)
            };
            out.push_str(&format!("  image of {}: {} → {} ({policy})\n", image.container, image.from, image.to));
        }
        out
    }
}

mod read;
#[cfg(test)]
mod tests;

pub(crate) use read::{Target, check_inject};
