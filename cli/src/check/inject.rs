//! `watcher-operator check-inject`: why a pod is, or would be, injected or not. The answer comes
//! from the webhook's own decision code ([`watcher_admission::decide`], [`watcher_admission::exclusion`],
//! [`watcher_admission::inject`], [`watcher_admission::rewrite_images`]) run on what the cluster
//! holds, so it cannot disagree with admission.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use serde::Serialize;
use watcher_admission::pod_security::NamespaceLevels;
use watcher_admission::resources::ResourceRules;
use watcher_admission::scope::Conditions;
use watcher_admission::{
    Asked, Exclusion, Guards, InjectOptions, PodView, Sent, Verdict, WebhookSelectors, decide, exclusion,
    inject_guarded,
};
use watcher_api::{ClusterWatcher, CompiledPolicy, ConfigJudge, Watcher, annotation};

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
    /// `watcher.dev/injected-config`: the configuration each was injected with.
    configs: Vec<(&'a str, &'a str)>,
    watchers: &'a [&'a Watcher],
}

impl Carried<'_> {
    /// The specHash the pod carries of Watcher `name`.
    fn hash_of(&self, name: &str) -> Option<&str> {
        self.carried.iter().find(|(n, _)| *n == name).map(|(_, h)| *h)
    }

    /// The specHash of Watcher `name` now.
    fn current(&self, name: &str) -> Option<String> {
        self.watchers.iter().find(|w| w.name_any() == name).map(|w| w.spec.spec_hash().to_owned())
    }

    /// Whether the pod carries Watcher `name` as it is now, its configuration included where its
    /// sidecar reads it once (`None`: it does not carry it), as the pod reconciler counts it.
    fn up_to_date(&self, name: &str) -> Option<bool> {
        let watcher = self.watchers.iter().find(|w| w.name_any() == name);
        let carried_config = self.configs.iter().find(|(n, _)| *n == name).map(|(_, h)| *h);
        let config_current = watcher.is_none_or(|w| ConfigJudge::of(w).current(carried_config));
        self.hash_of(name).map(|hash| self.current(name).as_deref() == Some(hash) && config_current)
    }
}

/// Explains `pod`: as it exists in the cluster (`existing`: what was done at its creation), or
/// as a manifest (what admission would do now).
pub(crate) fn explain(pod: &PodView, existing: bool, scope: &Scope<'_>) -> Explanation {
    let namespace = scope.namespace;
    let excluded = exclusion(namespace, scope.namespace_labels, pod.labels(), scope.selectors, scope.options)
        .map(|reason| Excluded { reason, message: reason.message(namespace) });
    let carried = Carried {
        carried: annotation::Injected::read(pod.annotations()),
        configs: annotation::InjectedConfig::read(pod.annotations()),
        watchers: scope.watchers,
    };
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
            glob.as_str().strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
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

/// What a Watcher that cannot be injected means for the pod when it is required.
fn refused(decision: &watcher_admission::Decision<'_>) -> &'static str {
    match decision.watcher {
        Some(watcher) if watcher.spec.is_required() => {
            "; the Watcher is required (failurePolicy: Fail): the pod is refused"
        }
        _ => "",
    }
}

mod guards;
mod images;
mod read;
#[cfg(test)]
mod tests;
mod text;

use guards::{hold_the_level, hold_the_resources, see_the_app};
pub(crate) use images::ImageLine;
use images::{planned_images, rewritten_images};
pub(crate) use read::{Target, check_inject};
