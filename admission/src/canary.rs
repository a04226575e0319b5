//! A canary that holds at admission: while a Watcher's rollout is held (`paused`, a
//! `partition` above 0, or a canary `selector`) with `updatePolicy.newPods: Stable`, a pod
//! created outside the canary group is injected with the stable revision (the spec every pod
//! carried when the rollout began), not with the current spec. The revision comes from the
//! operator's cache of ControllerRevisions: no API call on the admission path. A revision the
//! cache does not hold injects the current spec, with a warning: never a refused pod.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use watcher_api::{InjectionSpec, Watcher};

/// Where admission finds the specs a Watcher's revisions keep.
pub trait RevisionSource: Send + Sync {
    /// The spec kept by `watcher`'s revision named `name`, when the cache holds it (and it is
    /// `watcher`'s: labelled with its name and owned by it).
    fn revision(&self, watcher: &Watcher, name: &str) -> Option<Arc<InjectionSpec>>;

    /// `watcher` at its revision `name`, whose spec is `spec` (see [`at_revision`]). A source
    /// may keep what it builds for the next pod; by default it is built each time.
    fn at_revision(&self, watcher: &Watcher, name: &str, spec: &InjectionSpec) -> Arc<Watcher> {
        let _ = name;
        Arc::new(at_revision(watcher, spec))
    }
}

/// No revisions (the offline preview, tests): every pod gets the current spec.
impl RevisionSource for () {
    fn revision(&self, _: &Watcher, _: &str) -> Option<Arc<InjectionSpec>> {
        None
    }
}

/// A fixed set of revisions by name (tests, benchmarks).
impl RevisionSource for BTreeMap<String, Arc<InjectionSpec>> {
    fn revision(&self, _: &Watcher, name: &str) -> Option<Arc<InjectionSpec>> {
        self.get(name).cloned()
    }
}

/// Which spec of a Watcher a pod gets at admission.
#[derive(Clone, Debug, PartialEq)]
pub enum Chosen {
    /// The current spec: no hold, `newPods: Current`, in the canary group, or the rollout
    /// complete.
    Current,
    /// The stable revision, named: created outside the canary group of a held rollout (when
    /// the rollout is complete, or undone, that is the current spec again).
    Stable(String, Arc<InjectionSpec>),
    /// The stable revision was due but cannot be used (named, and why): the current spec, with
    /// a warning.
    Unavailable(String, &'static str),
}

/// The spec `watcher` gives a pod with `labels` at admission.
pub fn choose(watcher: &Watcher, labels: &BTreeMap<String, String>, revisions: &dyn RevisionSource) -> Chosen {
    let policy = &watcher.spec.update_policy;
    if !policy.holds_new_pods() || policy.in_group_explicitly(labels) {
        return Chosen::Current;
    }
    let Some(stable) = watcher.status.as_ref().and_then(|s| s.stable_revision.as_deref()) else {
        return Chosen::Current; // no rollout was seen complete yet: nothing is stable
    };
    match revisions.revision(watcher, stable) {
        // The ConfigMap a stable spec reads through `envFrom` is gone with the current spec's
        // config data: a pod injected so would not start.
        Some(spec) if spec.config && !watcher.spec.has_config() => {
            Chosen::Unavailable(stable.to_owned(), "its ConfigMap is gone (the Watcher has no config data now)")
        }
        Some(spec) => Chosen::Stable(stable.to_owned(), spec),
        // Not cached, and the current spec's (complete, or undone back to it): nothing is lost.
        // The hash is computed only here, off the common path.
        None if stable.strip_prefix(watcher.name_any().as_str()).and_then(|h| h.strip_prefix('-'))
            == Some(watcher.spec.spec_hash()) =>
        {
            Chosen::Current
        }
        None => Chosen::Unavailable(stable.to_owned(), "not in the operator's cache"),
    }
}

/// `watcher` with the spec of its stable revision `spec`: what injection reads of it is the
/// revision's, so the pod carries that revision's hash in `watcher.dev/injected`.
pub fn at_revision(watcher: &Watcher, spec: &InjectionSpec) -> Watcher {
    let mut stable = Watcher { metadata: watcher.metadata.clone(), spec: watcher.spec.clone(), status: None };
    stable.spec.container = spec.container.clone();
    stable.spec.volume = spec.volume.clone();
    stable.spec.image_pull_secrets = spec.image_pull_secrets.clone();
    stable.spec.native_sidecar = spec.native_sidecar;
    stable.spec.app = spec.app.clone();
    if !spec.config {
        stable.spec.config_data = None;
        stable.spec.config_binary_data = None;
    }
    stable
}

/// A Watcher's name, and the warning to give if it is injected: its stable revision was due
/// but not available.
pub type Unavailable = (String, String);

/// What the held rollouts of a namespace's Watchers give one pod.
#[derive(Default)]
pub struct Held {
    /// By index among the namespace's Watchers: that Watcher at its stable revision.
    pub stable: Vec<(usize, Arc<Watcher>)>,
    /// The Watchers whose stable revision was due but not available, with the warning to give
    /// if they are injected.
    pub unavailable: Vec<Unavailable>,
}

impl Held {
    /// The Watchers the pod is admitted with: `watchers`, each one held replaced by its stable
    /// revision.
    pub fn watchers<'a>(&'a self, watchers: &'a [Arc<Watcher>]) -> Vec<&'a Watcher> {
        let mut stable = self.stable.iter().peekable();
        let mut chosen = Vec::with_capacity(watchers.len());
        for (index, watcher) in watchers.iter().enumerate() {
            match stable.next_if(|(i, _)| *i == index) {
                Some((_, at_revision)) => chosen.push(at_revision.as_ref()),
                None => chosen.push(watcher.as_ref()),
            }
        }
        chosen
    }
}

/// What the held rollouts among `watchers` (a namespace's) give a pod with `labels`. The
/// common case, no Watcher holding new pods, costs one look at each Watcher and no allocation.
pub fn for_pod(watchers: &[Arc<Watcher>], labels: &BTreeMap<String, String>, revisions: &dyn RevisionSource) -> Held {
    let mut held = Held::default();
    for (index, watcher) in watchers.iter().enumerate().filter(|(_, w)| w.spec.update_policy.holds_new_pods()) {
        match choose(watcher, labels, revisions) {
            Chosen::Current => {}
            Chosen::Stable(name, spec) => held.stable.push((index, revisions.at_revision(watcher, &name, &spec))),
            Chosen::Unavailable(name, why) => {
                let watcher_name = watcher.name_any();
                let warning = format!(
                    "Watcher {watcher_name}: the stable revision {name} of its held rollout is {why}; the current \
                     spec is injected"
                );
                held.unavailable.push((watcher_name, warning));
            }
        }
    }
    held
}

#[cfg(test)]
mod tests;
