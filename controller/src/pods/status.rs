//! How pods stand towards a Watcher: the counts of `status.pods`, its conditions, the Events
//! and status patches that say so.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;
use watcher_api::types;
use watcher_api::{
    ClusterWatcher, ConfigJudge, PodCounts, SUPERVISOR_NAME, Watcher, annotation, condition, set_condition,
};

use super::Subject;
use super::in_place::Blocked;
use super::rollout;
use super::store::{CountedPod, containers_of};
use crate::Context;
use crate::Result;

/// How a pod stands towards one Watcher.
#[derive(Debug, Default, PartialEq)]
pub(super) struct PodStanding {
    pub(super) matched: bool,
    pub(super) injected: bool,
    /// Injected with the current spec and, for a sidecar that reads its configuration once, the
    /// current configuration. A pod injected by 0.2.0, which carries no configuration's hash,
    /// is judged by its spec until the configuration next changes; then it runs an older one,
    /// watcher-agent's too (such a pod lacks the volume it reads a new one from).
    pub(super) up_to_date: bool,
    /// Injected with the current spec (its configuration may be older).
    pub(super) spec_current: bool,
}

/// What a pod is compared with: the current spec's hash, and the configuration it must run
/// ([`ConfigJudge`]).
pub(super) struct Current {
    pub(super) spec: String,
    config: ConfigJudge,
}

impl Current {
    pub(super) fn of(watcher: &Watcher) -> Self {
        Self { spec: watcher.spec.spec_hash().to_owned(), config: ConfigJudge::of(watcher) }
    }
}

pub(super) fn standing(watcher: &Watcher, current: &Current, pod: &CountedPod) -> PodStanding {
    let name = watcher.name_any();
    let annotations = pod.annotations();
    let matched = annotation::Inject::read(annotations).contains(&name.as_str()) || watcher.selects(pod.labels());
    let entry = annotation::Injected::read(annotations).into_iter().find(|(n, _)| *n == name);
    let spec_current = entry.is_some_and(|(_, h)| h == current.spec);
    let carried = annotation::InjectedConfig::read(annotations).into_iter().find(|(n, _)| *n == name);
    let config_current = current.config.current(carried.map(|(_, hash)| hash));
    PodStanding { matched, injected: entry.is_some(), up_to_date: spec_current && config_current, spec_current }
}

/// `status.pods` of `watcher` over `pods` (any namespace: only the Watcher's own count; pods
/// being deleted do not count).
pub(super) fn count(watcher: &Watcher, pods: &[&CountedPod]) -> PodCounts {
    let current = Current::of(watcher);
    let containers = containers_of(watcher);
    let mut counts = PodCounts::default();
    for pod in live_pods_of(watcher, pods) {
        let s = standing(watcher, &current, pod);
        counts.matched += i32::from(s.matched);
        counts.injected += i32::from(s.injected);
        counts.up_to_date += i32::from(s.up_to_date);
        counts.missing += i32::from(s.matched && !s.injected);
        counts.cannot_start += i32::from(s.injected && blocked_in(pod, &containers).is_some());
        counts.cannot_end += i32::from(s.injected && kept_running(pod, &containers).is_some());
    }
    counts
}

/// The first of `containers` that the ending controller ended in `pod` but still runs, as the
/// pod's `watcher.dev/sidecars-cannot-end` says (the pod cannot finish).
pub(super) fn kept_running<'p>(pod: &'p CountedPod, containers: &[String]) -> Option<&'p str> {
    annotation::SidecarsCannotEnd::read(pod.annotations()).into_iter().find(|n| containers.iter().any(|c| c == n))
}

/// `SidecarsEnded`: `False` (`CannotEnd`) while pods that are meant to end cannot, a sidecar of
/// the Watcher still running after its app has ended, naming the first pod; `True` once none
/// (only where the condition was there).
pub(super) fn ended_condition(
    watcher: &Watcher,
    pods: &[&CountedPod],
    counts: &PodCounts,
) -> Option<(bool, String, String)> {
    let containers = containers_of(watcher);
    let name = watcher.name_any();
    let mut kept: Vec<(&CountedPod, &str)> = live_pods_of(watcher, pods)
        .filter(|p| annotation::Injected::read(p.annotations()).iter().any(|(n, _)| *n == name))
        .filter_map(|p| kept_running(p, &containers).map(|c| (p, c)))
        .collect();
    kept.sort_by(|a, b| a.0.created.cmp(&b.0.created).then_with(|| a.0.name.cmp(&b.0.name)));
    let had = watcher.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == ENDED_CONDITION));
    match kept.first() {
        Some((pod, container)) => {
            let kind = if watcher.metadata.namespace.is_some() { "Watcher" } else { watcher_api::CLUSTER_WATCHER_KIND };
            let text = format!(
                "{} injected pods cannot end: their app containers have ended, but a container of this {kind} \
                 still runs after it was ended: pod {}, container {container} (kubectl describe pod says why: \
                 the supervisor's image not pulled, or a sidecar that outlives the pod's grace period)",
                counts.cannot_end,
                shown(watcher, pod),
            );
            Some((false, "CannotEnd".to_owned(), text))
        }
        None if had => {
            Some((true, "Ended".to_owned(), "every injected pod that was meant to end has ended".to_owned()))
        }
        None => None,
    }
}

/// `Injected`: `False` (`LeftOut`) while pods that ask for the Watcher were admitted without it
/// because they would fail their namespace's Pod Security level or resource rules with it (the
/// webhook's `watcher.dev/left-out`), naming the first pod and why in kube-apiserver's words;
/// `True` once none (only where the condition was there).
pub(super) fn left_out_condition(watcher: &Watcher, pods: &[&CountedPod]) -> Option<(bool, String, String)> {
    let name = watcher.name_any();
    let mut left: Vec<(&CountedPod, String)> = live_pods_of(watcher, pods)
        .filter(|p| !annotation::Injected::read(p.annotations()).iter().any(|(n, _)| *n == name))
        .filter_map(|p| {
            let left_out = annotation::LeftOut::read(p.annotations());
            let why = left_out.into_iter().find(|(n, _)| *n == name)?.1.to_owned();
            Some((p, why))
        })
        .collect();
    left.sort_by(|a, b| a.0.created.cmp(&b.0.created).then_with(|| a.0.name.cmp(&b.0.name)));
    let had = watcher.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == LEFT_OUT_CONDITION));
    match left.first() {
        Some((pod, why)) => {
            let text = format!(
                "{} pods that ask for it were admitted without it: pod {}: Watcher {name} not injected: {why}",
                left.len(),
                shown(watcher, pod),
            );
            Some((false, "LeftOut".to_owned(), text))
        }
        None if had => {
            Some((true, "NoneLeftOut".to_owned(), "no pod that asks for it was admitted without it".to_owned()))
        }
        None => None,
    }
}

/// The condition that says whether pods that ask for the Watcher were admitted without it.
pub(super) const LEFT_OUT_CONDITION: &str = types::INJECTED;

/// The condition that says whether the Watcher's sidecars end with their app in pods that are
/// meant to end.
pub(super) const ENDED_CONDITION: &str = types::SIDECARS_ENDED;

/// The first of `containers` (or the supervisor's init container, which they need) that cannot
/// start in `pod`, as the kubelet reports it: (its name, the kubelet's reason and message).
pub(super) fn blocked_in<'p>(pod: &'p CountedPod, containers: &[String]) -> Option<(&'p str, &'p Blocked)> {
    let spec = pod.injected.as_deref()?;
    spec.sidecars
        .iter()
        .filter(|s| containers.iter().any(|c| **c == *s.name) || &*s.name == SUPERVISOR_NAME)
        .find_map(|s| Some((&*s.name, s.blocked.as_deref()?)))
}

/// `SidecarsRunning`: `False` (the kubelet's reason) while injected pods cannot start a
/// container of the Watcher, naming the first pod and the kubelet's words; `True` once none
/// (only where the condition was there: a Watcher whose containers always started has none).
pub(super) fn running_condition(
    watcher: &Watcher,
    pods: &[&CountedPod],
    counts: &PodCounts,
) -> Option<(bool, String, String)> {
    let containers = containers_of(watcher);
    let name = watcher.name_any();
    let mut blocked: Vec<(&CountedPod, &str, &Blocked)> = live_pods_of(watcher, pods)
        .filter(|p| annotation::Injected::read(p.annotations()).iter().any(|(n, _)| *n == name))
        .filter_map(|p| blocked_in(p, &containers).map(|(c, why)| (p, c, why)))
        .collect();
    blocked.sort_by(|a, b| a.0.created.cmp(&b.0.created).then_with(|| a.0.name.cmp(&b.0.name)));
    let had = watcher.status.as_ref().is_some_and(|s| s.conditions.iter().any(|c| c.type_ == RUNNING_CONDITION));
    match blocked.first() {
        Some((pod, container, Blocked { reason, message })) => {
            let text = format!(
                "{} of {} injected pods cannot start a container of this {}: pod {}, container {container}: {reason}{}{message}",
                counts.cannot_start,
                counts.injected,
                if watcher.metadata.namespace.is_some() { "Watcher" } else { watcher_api::CLUSTER_WATCHER_KIND },
                shown(watcher, pod),
                if message.is_empty() { "" } else { ": " },
            );
            Some((false, reason.to_string(), text))
        }
        None if had => {
            Some((true, "Started".to_owned(), "the Watcher's containers start in every injected pod".to_owned()))
        }
        None => None,
    }
}

/// The condition that says whether the Watcher's containers start in its pods.
pub(super) const RUNNING_CONDITION: &str = types::SIDECARS_RUNNING;

/// Whether `pod` is in `watcher`'s namespace; a ClusterWatcher's (no namespace) takes every pod
/// it is given: those of the namespaces where it applies.
pub(super) fn in_reach(watcher: &Watcher, pod: &CountedPod) -> bool {
    watcher.is_in(pod.namespace())
}

/// How messages name `pod`: by name in a Watcher's namespace, `namespace/name` across a
/// ClusterWatcher's.
pub(super) fn shown(watcher: &Watcher, pod: &CountedPod) -> String {
    match watcher.metadata.namespace {
        Some(_) => pod.name.to_string(),
        None => format!("{}/{}", pod.namespace(), pod.name),
    }
}

pub(super) fn live_pods_of<'a>(
    watcher: &'a Watcher,
    pods: &'a [&CountedPod],
) -> impl Iterator<Item = &'a CountedPod> + 'a {
    pods.iter().copied().filter(move |p| in_reach(watcher, p) && !p.terminating())
}

/// The Watcher's pods being deleted (matched or injected): they count against `maxUnavailable`.
pub(super) fn terminating_pods_of(watcher: &Watcher, current: &Current, pods: &[&CountedPod]) -> usize {
    pods.iter()
        .filter(|p| in_reach(watcher, p) && p.terminating())
        .filter(|p| {
            let s = standing(watcher, current, p);
            s.matched || s.injected
        })
        .count()
}

/// Merge-patches the status of the Watcher or ClusterWatcher.
pub(super) async fn patch_status(subject: &Subject, name: &str, ctx: &Context, patch: serde_json::Value) -> Result<()> {
    let params = PatchParams::default();
    match subject {
        Subject::Watcher(namespace) => {
            let api = Api::<Watcher>::namespaced(ctx.client.clone(), namespace);
            api.patch_status(name, &params, &Patch::Merge(&patch)).await?;
        }
        Subject::Cluster(_) => {
            let api = Api::<ClusterWatcher>::all(ctx.client.clone());
            api.patch_status(name, &params, &Patch::Merge(&patch)).await?;
        }
    }
    Ok(())
}

/// `SidecarsUpdated`, as [`rollout::condition`] says it; written only when it changes, with an
/// Event when the rollout gets stuck. Returns the conditions written, if any.
pub(super) async fn set_rollout_condition(
    watcher: &Watcher,
    subject: &Subject,
    ctx: &Context,
    rollout: &rollout::Rollout,
) -> Result<Option<Vec<watcher_api::Condition>>> {
    let (status, reason, message) = rollout::condition(watcher, rollout);
    let mut conditions = watcher.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let existing = conditions.iter().find(|c| c.type_ == types::SIDECARS_UPDATED);
    let generation = watcher.metadata.generation;
    if existing.is_some_and(|c| c.reason == reason && c.message == message && c.observed_generation == generation) {
        return Ok(None);
    }
    if reason == "Stuck" && existing.is_none_or(|c| c.reason != "Stuck") {
        let stuck = "SidecarUpdateStuck";
        ctx.publish(&subject.regarding(watcher), EventType::Warning, stuck, "Update", message.clone()).await;
    }
    set_condition(&mut conditions, condition(types::SIDECARS_UPDATED, status, reason, message, generation));
    patch_status(subject, &watcher.name_any(), ctx, json!({"status": {"conditions": conditions}})).await?;
    Ok(Some(conditions))
}

/// `SidecarsRunning` ([`running_condition`]) or `SidecarsEnded` ([`ended_condition`]) over
/// `conditions` (the Watcher's, or those this reconcile wrote), written when it changes, with a
/// Warning Event when it turns false or names another first pod; the conditions as they are
/// then.
pub(super) async fn set_kubelet_condition(
    watcher: &Watcher,
    subject: &Subject,
    ctx: &Context,
    type_: &str,
    condition_now: Option<(bool, String, String)>,
    mut conditions: Vec<watcher_api::Condition>,
) -> Result<Vec<watcher_api::Condition>> {
    let Some((status, reason, message)) = condition_now else { return Ok(conditions) };
    let existing = conditions.iter().find(|c| c.type_ == type_);
    if existing.is_some_and(|c| c.reason == reason && c.message == message) {
        return Ok(conditions);
    }
    if !status {
        let event = match type_ {
            RUNNING_CONDITION => "SidecarCannotStart",
            LEFT_OUT_CONDITION => "WatcherLeftOut",
            _ => "SidecarCannotEnd",
        };
        ctx.publish(&subject.regarding(watcher), EventType::Warning, event, "Count", message.clone()).await;
    }
    let generation = watcher.metadata.generation;
    set_condition(&mut conditions, condition(type_, status, &reason, message, generation));
    patch_status(subject, &watcher.name_any(), ctx, json!({"status": {"conditions": &conditions}})).await?;
    Ok(conditions)
}
