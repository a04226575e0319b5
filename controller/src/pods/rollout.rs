//! Which of a Watcher's pods a rollout updates next, and how far it is, for `updatePolicy`
//! `Recreate` and `InPlace` alike: oldest first (creationTimestamp, then name); the
//! `partition` newest pods keep the spec they have; `paused` starts nothing new; at most
//! `maxUnavailable` pods in flight (evicted and terminating, or updated in place and not yet
//! running and ready with the new image); none at all while one is stuck. With a canary
//! `selector`, all of this within the group: the pods outside it are kept as they are. With
//! `newPods: Stable` and no selector, a held rollout updates in place only: a pod recreated
//! while the hold lasts would come back on the stable revision.

use std::collections::HashMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use watcher_api::{UpdatePolicyType, Watcher, annotation};

use super::in_place::{self, IN_PLACE_DEADLINE, Update};
use super::{CountedPod, Current, live_pods_of, shown, standing, terminating_pods_of};
use crate::revisions;

/// One pass of a rollout: what to do now, and the counts the `SidecarsUpdated` condition says.
#[derive(Debug, Default, PartialEq)]
pub struct Rollout {
    /// In-place patches to write now.
    pub patches: Vec<in_place::Patch>,
    /// Pods to evict now (their controllers recreate them injected).
    pub evictions: Vec<PodName>,
    /// Pods updated in place whose sidecar is not yet running and ready with the new image.
    pub in_flight: Vec<String>,
    /// Why the rollout cannot go on by itself: pods updated in place and not back within
    /// [`IN_PLACE_DEADLINE`], sidecars changed by hand, outdated pods nothing recreates.
    pub stuck: Vec<String>,
    /// The Watcher's pods (asking for it or carrying it, not being deleted).
    pub total: usize,
    /// Of those, the ones on the current spec.
    pub updated: usize,
    /// Outdated or missing pods outside the partition: what the rollout is to update.
    pub outdated: usize,
    /// Outdated or missing pods the partition keeps as they are.
    pub held: usize,
    /// Outdated or missing pods outside the canary `selector`, kept as they are.
    pub outside: usize,
    /// Outdated pods that only a recreation would update, kept while `newPods: Stable` holds
    /// new pods on the stable revision.
    pub waiting: usize,
}

/// A pod, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl AsRef<str> for PodName {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

/// The ImagePolicy rules that admission applies, by namespace (a namespace not in it has none).
pub type Rules<'a> = HashMap<&'a str, Vec<&'a watcher_api::image::Rule>>;

/// The next step of `watcher`'s rollout over `pods` (for a Watcher, only its namespace's
/// count; for a ClusterWatcher's, every pod given). `revisions`: the Watcher's
/// ControllerRevisions; `rules`: the ImagePolicy rules of each namespace; `now`: for the stuck
/// deadline and the pods' annotation.
pub fn plan(
    watcher: &Watcher,
    pods: &[&CountedPod],
    revisions: &[&ControllerRevision],
    rules: &Rules<'_>,
    now: jiff::Timestamp,
) -> Rollout {
    let policy = &watcher.spec.update_policy;
    let mut rollout = Rollout::default();
    if policy.type_ == UpdatePolicyType::Report {
        return rollout;
    }
    let current = Current::of(watcher);
    let mut all: Vec<&CountedPod> = live_pods_of(watcher, pods)
        .filter(|pod| {
            let s = standing(watcher, &current, pod);
            s.matched || s.injected
        })
        .collect();
    all.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
    rollout.total = all.len();
    // The canary group: partition, budget and pause apply within it.
    let (mine, outside): (Vec<&CountedPod>, Vec<&CountedPod>) =
        all.iter().copied().partition(|pod| policy.in_group(pod.labels()));
    let partition = usize::try_from(policy.partition).unwrap_or(0).min(mine.len());
    let (updatable, kept) = mine.split_at(mine.len() - partition);
    // Recreated now, a pod would come back on the stable revision: only in place, or in the group.
    let recreate_waits = policy.holds_new_pods() && policy.selector.is_none();

    count_up_to_date(&mut rollout, watcher, &current, &all, now);
    let outdated = |pod: &&&CountedPod| !standing(watcher, &current, pod).up_to_date;
    rollout.held = kept.iter().filter(outdated).count();
    rollout.outside = outside.iter().filter(outdated).count();

    let terminating = terminating_pods_of(watcher, &current, pods);
    let limit = usize::try_from(policy.max_unavailable).unwrap_or(0);
    let mut budget = limit.saturating_sub(terminating + rollout.in_flight.len());
    if policy.paused || !rollout.stuck.is_empty() {
        budget = 0; // paused, or never a wave of broken pods
    }
    let now_text = annotation::SidecarUpdated::encode(now);
    let mut recreate = Vec::new();
    for pod in updatable.iter().filter(outdated) {
        rollout.outdated += 1;
        let s = standing(watcher, &current, pod);
        let update = match (policy.type_, s.injected) {
            // A container's environment cannot change on a running pod: an older configuration
            // is replaced, whatever the policy.
            (_, true) if s.spec_current => Update::Recreate("an older configuration".to_owned()),
            (UpdatePolicyType::InPlace, true) => {
                let carried =
                    pod_hash(watcher, pod).and_then(|carried| revisions::carried(watcher, &carried, revisions));
                let rules = rules.get(pod.namespace()).map_or(&[][..], Vec::as_slice);
                in_place::update(watcher, carried.as_ref(), pod, rules, &now_text)
            }
            _ => Update::Recreate(if s.injected { "an older spec" } else { "not injected" }.to_owned()),
        };
        match update {
            Update::InPlace(patch) if budget > 0 => {
                budget -= 1;
                rollout.patches.push(patch);
            }
            Update::InPlace(_) => {}
            Update::LeftAlone(why) => rollout.stuck.push(why),
            Update::Recreate(_) if recreate_waits => {
                rollout.outdated -= 1;
                rollout.waiting += 1;
            }
            Update::Recreate(_) if pod.recreated_when_evicted() => {
                recreate.push(PodName { namespace: pod.namespace().to_owned(), name: pod.name.to_string() })
            }
            Update::Recreate(why) => rollout.stuck.push(format!(
                "pod {} ({why}) is not controlled by a ReplicaSet, StatefulSet or DaemonSet: delete it and \
                 create it again",
                shown(watcher, pod)
            )),
        }
    }
    rollout.evictions = recreate.into_iter().take(budget).collect();
    rollout
}

/// Counts the pods of `all` on the current spec (`hash`) into `rollout`, with those whose
/// in-place update is in flight, and those stuck past the deadline.
fn count_up_to_date(
    rollout: &mut Rollout,
    watcher: &Watcher,
    current: &Current,
    all: &[&CountedPod],
    now: jiff::Timestamp,
) {
    let container = watcher.spec.container.name.as_str();
    let policy = &watcher.spec.update_policy;
    let deadline = jiff::SignedDuration::try_from(IN_PLACE_DEADLINE).unwrap_or_default();
    for pod in all {
        if !standing(watcher, current, pod).up_to_date {
            continue;
        }
        rollout.updated += 1;
        if policy.type_ == UpdatePolicyType::InPlace && in_place::in_flight(pod, container) {
            rollout.in_flight.push(shown(watcher, pod));
            let updated = annotation::SidecarUpdated::get(pod.annotations()).and_then(Result::ok);
            if updated.is_some_and(|at| now.duration_since(at) > deadline) {
                rollout.stuck.push(format!(
                    "pod {} has not run the new sidecar image within {} minutes of its update",
                    shown(watcher, pod),
                    IN_PLACE_DEADLINE.as_secs() / 60
                ));
            }
        }
    }
}

/// The spec hash `pod` carries for `watcher`.
fn pod_hash(watcher: &Watcher, pod: &CountedPod) -> Option<String> {
    let name = kube::ResourceExt::name_any(watcher);
    watcher_api::annotation::Injected::read(pod.annotations())
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| h.to_owned())
}

/// The `SidecarsUpdated` condition of a rollout: status, reason and message with the counts.
pub fn condition(watcher: &Watcher, rollout: &Rollout) -> (bool, &'static str, String) {
    let policy = &watcher.spec.update_policy;
    let mut message = format!("{} of {} pods on the current spec", rollout.updated, rollout.total);
    if !rollout.in_flight.is_empty() {
        message.push_str(&format!(", {} updating", rollout.in_flight.len()));
    }
    if rollout.outdated > 0 {
        message.push_str(&format!(", {} to update", rollout.outdated));
    }
    if rollout.held > 0 {
        message.push_str(&format!(", {} kept by partition {}", rollout.held, policy.partition));
    }
    if rollout.outside > 0 {
        message.push_str(&format!(", {} outside the canary selector", rollout.outside));
    }
    if rollout.waiting > 0 {
        message.push_str(&format!(
            ", {} to recreate once the hold ends (newPods: Stable would bring them back on the stable revision)",
            rollout.waiting
        ));
    }
    if let Some(first) = rollout.stuck.first() {
        let more = rollout.stuck.len() - 1;
        let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
        return (false, "Stuck", format!("{message}; {first}{more}"));
    }
    if rollout.outdated > 0 || !rollout.in_flight.is_empty() {
        if policy.paused {
            return (false, "Paused", format!("{message}; paused"));
        }
        return (false, "Progressing", message);
    }
    if rollout.held > 0 || rollout.outside > 0 || rollout.waiting > 0 {
        return (false, "Partitioned", message);
    }
    (true, "Complete", message)
}

#[cfg(test)]
mod tests;
