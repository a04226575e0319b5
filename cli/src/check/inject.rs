//! `watcher-operator check-inject`: why a pod is, or would be, injected or not. The answer comes
//! from the webhook's own decision code ([`watcher_webhook::decide`], [`watcher_webhook::exclusion`],
//! [`watcher_webhook::inject`], [`watcher_webhook::rewrite_images`]) run on what the cluster
//! holds, so it cannot disagree with admission.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::PatchOperation;
use kube::ResourceExt;
use serde::Serialize;
use watcher_api::{ClusterWatcher, CompiledPolicy, ORIGINAL_IMAGES_ANNOTATION, Watcher, image, injected_watchers};
use watcher_webhook::pod_security::NamespaceLevels;
use watcher_webhook::scope::Conditions;
use watcher_webhook::{
    Asked, Exclusion, InjectOptions, PodView, Sent, Verdict, WebhookSelectors, app_report, decide, exclusion,
    inject_at_level, original_images, rewrite_images,
};

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
    /// For an injected Watcher whose sidecar runs watcher-agent: whether its configuration
    /// parses, and what it will follow (files it can see, the log stream).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) agent: Vec<String>,
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
    use watcher_webhook::cluster::{Standing, standing};
    let mut lines: Vec<ClusterLine> = cluster
        .iter()
        .map(|c| {
            let name = c.name_any();
            let standing = standing(c, namespace, labels, own, options);
            let reason = match standing {
                Standing::Applies => "Applies",
                Standing::TakenOver => "TakenOver",
                Standing::NotSelected => "NotSelected",
                Standing::NeverInjected(_) => "NeverInjected",
            };
            let message = standing.describe(&name, namespace);
            ClusterLine { applies: standing == Standing::Applies, reason, message, name }
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
}

/// What the cluster holds that admission reads, for one namespace.
pub(crate) struct Scope<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) namespace_labels: &'a BTreeMap<String, String>,
    /// The cluster's Pod Security admission configuration, as the operator judges by it.
    pub(crate) pod_security: &'a watcher_webhook::pod_security::ClusterDefaults,
    /// The Watchers that apply in the namespace: its own, then the ClusterWatchers' that
    /// apply there ([`watcher_webhook::cluster::watchers_in_namespace`]).
    pub(crate) watchers: &'a [&'a Watcher],
    /// How each ClusterWatcher stands towards the namespace ([`cluster_lines`]).
    pub(crate) cluster: Vec<ClusterLine>,
    /// The webhook configuration's selectors.
    pub(crate) selectors: &'a WebhookSelectors,
    /// The valid ImagePolicies selecting the namespace, in name order.
    pub(crate) policies: &'a [Arc<CompiledPolicy>],
    /// The operator's namespace (never injected).
    pub(crate) options: &'a InjectOptions,
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
}

/// The cluster's Pod Security admission configuration as the operator judges by it: its
/// configuration (ConfigMap `watcher-operator-pod-security`), else what kube-apiserver enforces
/// in `namespace` when it sets no Pod Security label (dry-run pods there, as the operator
/// learns it); none when neither can be read.
async fn cluster_pod_security(
    client: &kube::Client,
    operator_namespace: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> watcher_webhook::pod_security::ClusterDefaults {
    let configured = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), operator_namespace)
        .get_opt(super::POD_SECURITY_CONFIG_MAP)
        .await
        .ok()
        .flatten()
        .and_then(|map| map.data?.remove(super::POD_SECURITY_CONFIG_KEY))
        .and_then(|text: String| crate::pod_security_config::parse(&text).ok());
    if let Some(configured) = configured {
        return configured;
    }
    if labels.keys().any(|k| k.starts_with("pod-security.kubernetes.io/")) {
        return Default::default();
    }
    watcher_controller::pod_security_probe::probe(client, namespace).await.map(|l| l.defaults).unwrap_or_default()
}

/// Where kube-apiserver sends a pod with `labels` and `annotations`, created in `namespace`,
/// given the operator's conditions as registered (`None`: there is no configuration) and the
/// scope the operator computes: the same code that writes the conditions.
pub(crate) fn sent_by(
    registered: Option<&Conditions>,
    admission: &watcher_webhook::Scope,
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

/// Explains `pod`: as it exists in the cluster (`existing`: what was done at its creation), or
/// as a manifest (what admission would do now).
pub(crate) fn explain(pod: &PodView, existing: bool, scope: &Scope<'_>) -> Explanation {
    let namespace = scope.namespace;
    let excluded = exclusion(namespace, scope.namespace_labels, pod.labels(), scope.selectors, scope.options)
        .map(|reason| Excluded { reason, message: reason.message(namespace) });
    let carried = injected_watchers(pod.annotations());
    let hash_of = |name: &str| carried.iter().find(|(n, _)| *n == name).map(|(_, h)| *h);
    let current = |name: &str| scope.watchers.iter().find(|w| w.name_any() == name).map(|w| w.spec.spec_hash());
    let up_to_date = |name: &str| hash_of(name).map(|hash| current(name).as_deref() == Some(hash));

    let mut lines = Vec::new();
    if let Some(excluded) = &excluded {
        for watcher in scope.watchers {
            let name = watcher.name_any();
            let injected = existing && hash_of(&name).is_some();
            lines.push(WatcherLine {
                up_to_date: if injected { up_to_date(&name) } else { None },
                injected,
                reason: "Excluded",
                message: format!("not sent to the webhook: {}", excluded.message),
                name,
                sees: Vec::new(),
                cluster: false,
                pod_security: Vec::new(),
                agent: Vec::new(),
            });
        }
    } else {
        let decisions = decide(pod, namespace, scope.watchers);
        for decision in &decisions {
            let how = match decision.asked {
                Asked::Annotation => ("Annotation", "asked by annotation watcher.dev/inject"),
                Asked::Selector => ("Selector", "selected by the Watcher's spec.selector"),
            };
            let line = |injected: bool, reason: &'static str, message: String| WatcherLine {
                name: decision.name.clone(),
                injected,
                up_to_date: if injected { up_to_date(&decision.name) } else { None },
                reason,
                message,
                sees: Vec::new(),
                cluster: false,
                pod_security: Vec::new(),
                agent: Vec::new(),
            };
            lines.push(match &decision.verdict {
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
                    let state = match current(&decision.name) {
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
                    format!(
                        "{}, but the pod would be invalid with it: {}{}",
                        how.1,
                        problems.join("; "),
                        refused(decision)
                    ),
                ),
                Verdict::Missing => line(
                    false,
                    "WatcherMissing",
                    format!("asked by annotation, but there is no Watcher {} in namespace {namespace}", decision.name),
                ),
            });
        }
        for watcher in scope.watchers {
            let name = watcher.name_any();
            if decisions.iter().any(|d| d.name == name) {
                continue;
            }
            let injected = existing && hash_of(&name).is_some();
            let message = match (&watcher.spec.selector, injected) {
                (_, true) => "injected at creation, and no longer asked for".to_owned(),
                (None, _) => format!("not asked: not named in watcher.dev/inject, and Watcher {name} has no selector"),
                (Some(_), _) => {
                    "not asked: not named in watcher.dev/inject, and its selector does not match".to_owned()
                }
            };
            lines.push(WatcherLine {
                up_to_date: if injected { up_to_date(&name) } else { None },
                injected,
                reason: "NotAsked",
                message,
                name,
                sees: Vec::new(),
                cluster: false,
                pod_security: Vec::new(),
                agent: Vec::new(),
            });
        }
        hold_the_level(pod, scope, &mut lines);
        see_the_app(pod, existing, scope, &mut lines);
        for line in lines.iter_mut().filter(|l| l.injected) {
            if let Some(watcher) = scope.watchers.iter().find(|w| w.name_any() == line.name) {
                line.agent = agent_lines(pod, existing, watcher);
            }
        }
    }
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
    }
}

/// Whether `image` is watcher-agent's: its repository's last component is `watcher-agent`.
fn is_agent_image(image: &str) -> bool {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split(':').next() == Some("watcher-agent")
}

/// For a Watcher whose sidecar runs watcher-agent: its configuration as the agent will read it
/// (the Watcher's configData through `envFrom`, then the container's own `env`, which wins; a
/// variable from the downward API counts as set), parsed by the agent's own code; and, when it
/// parses, each glob and whether a volume is mounted there in the sidecar (its own mounts, and
/// with `shareVolumes` the app's), and the log stream.
fn agent_lines(pod: &PodView, existing: bool, watcher: &Watcher) -> Vec<String> {
    let container = &watcher.spec.container;
    if !container.image.as_deref().is_some_and(is_agent_image) {
        return Vec::new();
    }
    let mut vars: Vec<(String, String)> = watcher.spec.config_data.clone().unwrap_or_default().into_iter().collect();
    for env in container.env.iter().flatten() {
        let value = match (&env.value, &env.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(_)) => format!("<{} from valueFrom>", env.name),
            (None, None) => String::new(),
        };
        vars.retain(|(k, _)| *k != env.name);
        vars.push((env.name.clone(), value));
    }
    let config = match watcher_agent::config::Config::from_vars(vars) {
        Ok(config) => config,
        Err(error) => return vec![format!("watcher-agent: configuration invalid: {error}")],
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
        inject_at_level(pod, scope.namespace, scope.watchers, scope.options, &scope.levels()).app
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
    let injection = inject_at_level(pod, scope.namespace, scope.watchers, scope.options, &levels);
    for report in injection.pod_security {
        let Some(line) = lines.iter_mut().find(|l| l.name == report.watcher) else { continue };
        match &report.violations {
            Some(violations) => {
                let required = scope.watchers.iter().any(|w| w.name_any() == report.watcher && w.spec.is_required());
                line.injected = false;
                line.up_to_date = None;
                line.reason = "PodSecurity";
                line.message = format!(
                    "left out: it would make the pod violate PodSecurity \"{}\": {violations}{}",
                    report.policy,
                    if required { "; the Watcher is required (failurePolicy: Fail): the pod is refused" } else { "" }
                );
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

/// What a Watcher that cannot be injected means for the pod when it is required.
fn refused(decision: &watcher_webhook::Decision<'_>) -> &'static str {
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
    let mut injection = inject_at_level(pod, scope.namespace, scope.watchers, scope.options, &scope.levels());
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
    original_images(pod.annotations().get(ORIGINAL_IMAGES_ANNOTATION).map(String::as_str).unwrap_or(""))
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
            for seen in line.sees.iter().chain(&line.pod_security).chain(&line.agent) {
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

#[cfg(test)]
mod tests;

/// What `check-inject` explains: a pod of the cluster, or a manifest.
#[derive(Debug)]
pub(crate) enum Target {
    Pod(String),
    Manifest(std::path::PathBuf),
}

/// Reads what admission reads (the namespace, its Watchers, the webhook configuration's
/// selectors, the ImagePolicies) and explains `target`. An error: the pod or the manifest
/// could not be read.
pub(crate) async fn check_inject(
    client: &kube::Client,
    target: &Target,
    namespace: Option<&str>,
    operator_namespace: Option<&str>,
) -> anyhow::Result<Explanation> {
    use anyhow::Context as _;
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::api::{Api, ListParams};
    use watcher_api::ImagePolicy;

    let (pod, existing, namespace) = match target {
        Target::Pod(name) => {
            let namespace = namespace.unwrap_or(client.default_namespace()).to_owned();
            let pod = Api::<Pod>::namespaced(client.clone(), &namespace)
                .get_opt(name)
                .await
                .with_context(|| format!("cannot read pod {namespace}/{name}"))?
                .with_context(|| format!("pod {name} not found in namespace {namespace}"))?;
            let view: PodView = serde_json::from_value(serde_json::to_value(&pod)?).context("cannot read the pod")?;
            (view, true, namespace)
        }
        Target::Manifest(path) => {
            let (view, in_manifest) = read_manifest(path)?;
            let namespace =
                namespace.map(str::to_owned).or(in_manifest).unwrap_or_else(|| client.default_namespace().to_owned());
            (view, false, namespace)
        }
    };
    let labels = Api::<Namespace>::all(client.clone())
        .get_opt(&namespace)
        .await
        .with_context(|| format!("cannot read namespace {namespace}"))?
        .with_context(|| format!("namespace {namespace} not found"))?
        .metadata
        .labels
        .unwrap_or_default();
    let watchers = Api::<Watcher>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("cannot list the Watchers of namespace {namespace} (are the CRDs installed?)"))?
        .items;
    let configuration = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(watcher_certs::registration::WEBHOOK_CONFIGURATION)
        .await
        .context("cannot read the webhook configuration")?;
    let webhook = configuration.as_ref().and_then(|c| c.webhooks.as_ref()?.first().cloned());
    if webhook.is_none() {
        eprintln!(
            "warning: MutatingWebhookConfiguration {} not found: no pod is injected until the operator is installed \
             (`watcher-operator check` says more)",
            watcher_certs::registration::WEBHOOK_CONFIGURATION
        );
    }
    let selectors = webhook
        .as_ref()
        .map(|w| WebhookSelectors { namespace: w.namespace_selector.clone(), object: w.object_selector.clone() })
        .unwrap_or_default();
    let operator_namespace = operator_namespace
        .map(str::to_owned)
        .or_else(|| webhook.as_ref().and_then(|w| Some(w.client_config.service.as_ref()?.namespace.clone())))
        .unwrap_or_else(|| "watcher-system".to_owned());
    let compiled: Vec<Arc<CompiledPolicy>> = Api::<ImagePolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list the ImagePolicies")?
        .items
        .iter()
        .map(|p| Arc::new(p.compile()))
        .collect();
    let cluster_watchers: Vec<Arc<ClusterWatcher>> = Api::<ClusterWatcher>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list the ClusterWatchers (is their CRD installed?)")?
        .items
        .into_iter()
        .map(Arc::new)
        .collect();
    let admission_options = InjectOptions {
        excluded_namespaces: vec![operator_namespace.clone()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let everywhere = watcher_webhook::cluster::everywhere(
        &watchers.iter().cloned().map(Arc::new).collect::<Vec<_>>(),
        &cluster_watchers,
        [(namespace.as_str(), &labels)],
        &admission_options,
    );
    let admission =
        watcher_webhook::Scope::compute(&everywhere, &compiled, [(namespace.as_str(), &labels)], &operator_namespace);
    let registered = configuration.as_ref().map(watcher_controller::scope::in_place);
    let sent = sent_by(registered.as_ref(), &admission, &namespace, pod.labels(), pod.annotations());
    let mut policies: Vec<Arc<CompiledPolicy>> =
        compiled.into_iter().filter(|p| p.rules.is_ok() && p.selects(&labels)).collect();
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    let native_sidecars = client
        .apiserver_version()
        .await
        .is_ok_and(|info| watcher_webhook::supports_native_sidecars(&info.major, &info.minor));
    let options = InjectOptions {
        excluded_namespaces: vec![operator_namespace],
        native_sidecars,
        server_minor: None,
        ..Default::default()
    };
    let own: Vec<Arc<Watcher>> = watchers.into_iter().map(Arc::new).collect();
    let effective =
        watcher_webhook::cluster::watchers_in_namespace(&namespace, &labels, &own, &cluster_watchers, &options);
    let refs: Vec<&Watcher> = effective.iter().map(AsRef::as_ref).collect();
    let pod_security = cluster_pod_security(client, &options.excluded_namespaces[0], &namespace, &labels).await;
    let scope = Scope {
        namespace: &namespace,
        namespace_labels: &labels,
        pod_security: &pod_security,
        watchers: &refs,
        cluster: cluster_lines(&namespace, &labels, &own, &cluster_watchers, &options),
        selectors: &selectors,
        policies: &policies,
        options: &options,
        sent,
    };
    Ok(explain(&pod, existing, &scope))
}

/// The one Pod of a manifest file (`-` is stdin), and the namespace it names.
fn read_manifest(path: &std::path::Path) -> anyhow::Result<(PodView, Option<String>)> {
    use anyhow::Context as _;
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text).with_context(|| format!("{} is not valid YAML", path.display()))?;
    let mut pods = documents.into_iter().filter(|d| !d.is_null());
    let (Some(document), None) = (pods.next(), pods.next()) else {
        anyhow::bail!("{} must hold exactly one Pod", path.display());
    };
    let kind = document["kind"].as_str().unwrap_or_default();
    anyhow::ensure!(
        kind == "Pod",
        "{} holds a {}, not a Pod: check-inject explains pods",
        path.display(),
        if kind.is_empty() { "document without a kind" } else { kind }
    );
    let namespace = document["metadata"]["namespace"].as_str().map(str::to_owned);
    let pod: PodView =
        serde_json::from_value(document).with_context(|| format!("{} is not a valid Pod", path.display()))?;
    Ok((pod, namespace))
}
