//! Revisions: every Watcher spec that pods may carry, kept as a ControllerRevision
//! `<watcher>-<specHash>` owned by the Watcher, as a DaemonSet or StatefulSet keeps its
//! templates. Whether a pod can be updated in place is decided between the revision it carries
//! and the current spec, never by comparing the stored pod with what `inject` would write now:
//! kube-apiserver stores pods as the other admission plugins leave them (the ServiceAccount
//! token mount, LimitRange resources, other webhooks' changes).
//!
//! A spec's revision is written when it is first seen: the Watcher (or ClusterWatcher)
//! controller writes the revision of each generation it reconciles, before its status says
//! `Ready`, as the StatefulSet controller records each template; the pod reconciler writes it
//! too where it comes first, prunes the history, and rebuilds from an injected pod the revision
//! of a spec that was injected and replaced before any controller saw it ([`rebuild`]).
//!
//! The revisions are read from the replica's revision cache ([`watcher_cache::RevisionCache`], labelled
//! `app.kubernetes.io/managed-by=watcher-operator`): no read per pod or per reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use tracing::info;
use watcher_api::{FIELD_MANAGER, InjectionSpec, NewPods, UpdatePolicyType, Watcher, WatcherSpec};

use crate::Result;

pub mod rebuild;

pub use watcher_api::revision::{
    CLUSTER_WATCHER_LABEL, WATCHER_LABEL, desired_revision, injection_of, revision_name, revision_of,
};

/// Revisions kept per Watcher besides those pods still carry (which are never pruned).
pub const HISTORY: usize = 10;

/// Whether revisions of `spec` are kept: for a rollout (`Recreate`, `InPlace`), and for
/// admission to inject the stable one (`newPods: Stable`).
pub fn kept_for(spec: &WatcherSpec) -> bool {
    let policy = &spec.update_policy;
    policy.type_ != UpdatePolicyType::Report || policy.new_pods == NewPods::Stable
}

/// The revision of `watcher`'s current spec, in `namespace`, to write when the spec is first
/// seen: `None` when its revisions are not kept, when the spec is never injected (invalid), or
/// when `mine` (its revisions) holds it already.
pub fn first_sight(watcher: &Watcher, namespace: &str, mine: &[&ControllerRevision]) -> Option<ControllerRevision> {
    if !kept_for(&watcher.spec) || !watcher.spec.problems().is_empty() {
        return None;
    }
    plan_revisions(watcher, namespace, mine, &BTreeSet::new(), "").create
}

pub use watcher_api::REBUILT_FROM_ANNOTATION;

/// The number of a revision rebuilt for a spec older than every kept one: before the oldest
/// (kube-apiserver takes no negative number).
pub fn rebuilt_number(mine: &[&ControllerRevision]) -> i64 {
    mine.iter().map(|r| r.revision).min().map_or(1, |oldest| (oldest - 1).max(0))
}

/// The revisions of `watcher` among `all` (any Watcher's), by number: labelled with its name
/// and owned by it, in its namespace (a ClusterWatcher's, a Watcher of no namespace: wherever
/// they are).
pub fn revisions_of<'a>(watcher: &Watcher, all: &'a [Arc<ControllerRevision>]) -> Vec<&'a ControllerRevision> {
    let (name, namespace) = (watcher.name_any(), watcher.namespace());
    let mut mine: Vec<&ControllerRevision> = all
        .iter()
        .map(Arc::as_ref)
        .filter(|r| namespace.is_none() || r.namespace() == namespace)
        .filter(|r| r.labels().get(WATCHER_LABEL) == Some(&name))
        .filter(|r| r.owner_references().iter().any(|o| Some(&o.uid) == watcher.meta().uid.as_ref()))
        .collect();
    mine.sort_by_key(|r| r.revision);
    mine
}

/// The revision of `watcher` with `hash`, read.
pub fn carried(watcher: &Watcher, hash: &str, mine: &[&ControllerRevision]) -> Option<InjectionSpec> {
    let name = revision_name(&watcher.name_any(), hash);
    mine.iter().find(|r| r.metadata.name.as_deref() == Some(name.as_str())).and_then(|r| injection_of(r))
}

/// The stable revision of `watcher`: the spec every pod carried when the current rollout
/// began, which `updatePolicy.newPods: Stable` injects outside the canary group while the
/// rollout is held. `carried`: how many of the Watcher's pods carry each hash; `complete`:
/// every injected pod carries the current spec.
///
/// Complete (no pod left on another spec, held or not): the current revision. Otherwise a kept
/// revision that pods carry, never one no pod carries while pods carry another: the stable
/// revision the status names; else the revision the status named current before the spec
/// changed; else the one most pods carry (a status written before these fields existed, or a
/// spec changed before the pod reconciler saw it); else (no revision of what pods carry is
/// kept, nor could be rebuilt) the current one. Decided from what the Watcher and its pods
/// carry, never from having seen a rollout pass.
pub fn stable_revision(
    watcher: &Watcher,
    mine: &[&ControllerRevision],
    carried: &BTreeMap<String, usize>,
    complete: bool,
) -> String {
    let name = watcher.name_any();
    let current = revision_name(&name, watcher.spec.spec_hash());
    if complete {
        return current;
    }
    let kept = |revision: &str| mine.iter().any(|r| r.metadata.name.as_deref() == Some(revision));
    let older: Vec<(String, usize)> = carried
        .iter()
        .map(|(hash, count)| (revision_name(&name, hash), *count))
        .filter(|(revision, _)| *revision != current)
        .collect();
    let eligible =
        |revision: &&str| kept(revision) && (older.is_empty() || older.iter().any(|(carried, _)| carried == revision));
    let status = watcher.status.as_ref();
    let named = status.and_then(|s| s.stable_revision.as_deref()).filter(eligible);
    let before = status.and_then(|s| s.current_revision.as_deref()).filter(eligible);
    if let Some(revision) = named.or(before) {
        return revision.to_owned();
    }
    let most = older.iter().filter(|(revision, _)| kept(revision)).max_by_key(|(_, count)| *count);
    most.map_or(current, |(revision, _)| revision.clone())
}

/// What to write of `watcher`'s revisions.
#[derive(Debug, Default, PartialEq)]
pub struct RevisionPlan {
    /// The current spec's revision, when there is none yet.
    pub create: Option<ControllerRevision>,
    /// Revisions beyond the history that no pod carries, oldest first.
    pub delete: Vec<String>,
}

/// Keeps a revision of the current spec; prunes the oldest beyond [`HISTORY`], never one that
/// a pod still carries (`carried`: hashes on the Watcher's pods), the current one nor
/// `stable` (the stable revision's name). A new revision goes to `namespace`.
pub fn plan_revisions(
    watcher: &Watcher,
    namespace: &str,
    mine: &[&ControllerRevision],
    carried: &BTreeSet<String>,
    stable: &str,
) -> RevisionPlan {
    let hash = watcher.spec.spec_hash();
    let current = revision_name(&watcher.name_any(), hash);
    let exists = mine.iter().any(|r| r.metadata.name.as_deref() == Some(current.as_str()));
    let next = mine.iter().map(|r| r.revision).max().unwrap_or(0) + 1;
    let create = if exists { None } else { desired_revision(watcher, namespace, next) };
    let total = mine.len() + usize::from(create.is_some());
    let prefix = format!("{}-", watcher.name_any());
    let prunable: Vec<String> = mine
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .filter(|name| *name != current && name != stable)
        .filter(|name| !name.strip_prefix(&prefix).is_some_and(|h| carried.contains(h)))
        .collect();
    let delete = prunable.into_iter().take(total.saturating_sub(HISTORY)).collect();
    RevisionPlan { create, delete }
}

/// Writes the revision of `watcher`'s current spec where it is first seen ([`first_sight`]):
/// in its namespace, a ClusterWatcher's (a Watcher of no namespace) in the operator's.
pub(crate) async fn record(
    client: &kube::Client,
    cache: &watcher_cache::RevisionCache,
    watcher: &Watcher,
) -> Result<()> {
    let namespace = watcher.namespace().unwrap_or_else(|| cache.operator_namespace().to_owned());
    let all = cache.store.state();
    let mine = revisions_of(watcher, &all);
    if let Some(revision) = first_sight(watcher, &namespace, &mine) {
        create(client, &revision).await?;
    }
    Ok(())
}

/// Creates `revision` in its namespace; one there already (this process's, a moment before
/// the cache saw it, or another replica's) is no error. Returns whether it was created.
pub(crate) async fn create(client: &kube::Client, revision: &ControllerRevision) -> Result<bool> {
    let api = Api::<ControllerRevision>::namespaced(client.clone(), &revision.namespace().unwrap_or_default());
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
    match api.create(&params, revision).await {
        Ok(created) => {
            info!(revision = created.name_any(), number = created.revision, "kept the spec as a revision");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// Writes `watcher`'s revisions as planned, in `namespace`.
pub(crate) async fn write(plan: RevisionPlan, client: &kube::Client, namespace: &str) -> Result<()> {
    debug_assert!(plan.create.as_ref().is_none_or(|r| r.metadata.namespace.as_deref() == Some(namespace)));
    if let Some(revision) = &plan.create {
        create(client, revision).await?;
    }
    let api = Api::<ControllerRevision>::namespaced(client.clone(), namespace);
    for old in plan.delete {
        match api.delete(&old, &DeleteParams::default()).await {
            Ok(_) => info!(revision = old, "pruned a revision no pod carries"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
