//! Revisions: every Watcher spec that pods may carry, kept as a ControllerRevision
//! `<watcher>-<specHash>` owned by the Watcher, as a DaemonSet or StatefulSet keeps its
//! templates. Whether a pod can be updated in place is decided between the revision it carries
//! and the current spec, never by comparing the stored pod with what `inject` would write now:
//! kube-apiserver stores pods as the other admission plugins leave them (the ServiceAccount
//! token mount, LimitRange resources, other webhooks' changes).
//!
//! The revisions are read from the pod reconciler's own watch (labelled
//! `app.kubernetes.io/managed-by=watcher-operator`): no read per pod or per reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::{Resource, ResourceExt};
use watcher_api::{InjectionSpec, MANAGED_BY, MANAGED_BY_LABEL, Watcher};

/// Label on every revision: the Watcher it belongs to.
pub const WATCHER_LABEL: &str = "watcher.dev/watcher";
/// Revisions kept per Watcher besides those pods still carry (which are never pruned).
pub const HISTORY: usize = 10;

/// The name of the revision of `watcher` with `hash`.
pub fn revision_name(watcher: &str, hash: &str) -> String {
    format!("{watcher}-{hash}")
}

/// A revision of `watcher`'s current spec, numbered `number`, in `namespace`: a Watcher's own,
/// or for a ClusterWatcher (a Watcher of no namespace, see
/// [`watcher_api::ClusterWatcher::across_namespaces`]) the operator's, owned by the
/// ClusterWatcher and labelled with its name.
pub fn desired_revision(watcher: &Watcher, namespace: &str, number: i64) -> Option<ControllerRevision> {
    let owner = match watcher.cluster_watcher() {
        Some(cluster) => cluster.clone(),
        None => watcher.controller_owner_ref(&())?,
    };
    let injection = watcher.spec.injection();
    let name = watcher.name_any();
    let mut labels: std::collections::BTreeMap<String, String> =
        [(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()), (WATCHER_LABEL.to_owned(), name.clone())].into();
    if watcher.cluster_watcher().is_some() {
        labels.insert(crate::cluster_watcher::CLUSTER_WATCHER_LABEL.to_owned(), name.clone());
    }
    Some(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&name, &injection.hash())),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(serde_json::to_value(&injection).unwrap_or_default())),
        revision: number,
    })
}

/// The spec a revision keeps, or `None` when it cannot be read (then the pods that carry it
/// go the `Recreate` way).
pub fn injection_of(revision: &ControllerRevision) -> Option<InjectionSpec> {
    let data = revision.data.as_ref()?;
    serde_json::from_value(data.0.clone()).ok()
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
/// Complete (no pod left on another spec, held or not): the current revision. Otherwise the stable revision the status
/// names, while it is kept; else the revision the status named current before the spec
/// changed; else the kept revision most pods carry (a status written before these fields
/// existed); else the current one. Decided from what the Watcher and its pods carry, never
/// from having seen a rollout pass.
pub fn stable_revision(
    watcher: &Watcher,
    mine: &[&ControllerRevision],
    carried: &BTreeMap<String, usize>,
    complete: bool,
) -> String {
    let name = watcher.name_any();
    let current = revision_name(&name, &watcher.spec.spec_hash());
    if complete {
        return current;
    }
    let kept =
        |revision: &str| revision == current || mine.iter().any(|r| r.metadata.name.as_deref() == Some(revision));
    let status = watcher.status.as_ref();
    let named = status.and_then(|s| s.stable_revision.as_deref()).filter(|r| kept(r));
    let before = status.and_then(|s| s.current_revision.as_deref()).filter(|r| kept(r));
    if let Some(revision) = named.or(before) {
        return revision.to_owned();
    }
    let most = carried
        .iter()
        .map(|(hash, count)| (revision_name(&name, hash), *count))
        .filter(|(revision, _)| *revision != current && kept(revision))
        .max_by_key(|(_, count)| *count);
    most.map_or(current, |(revision, _)| revision)
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
    let current = revision_name(&watcher.name_any(), &hash);
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

#[cfg(test)]
mod tests;
