//! A Watcher's revision as it is stored: a ControllerRevision `<watcher>-<specHash>` keeping one
//! spec of the Watcher ([`InjectionSpec`]), written by the controllers and read by admission
//! (`newPods: Stable`) and the pod reconciler. Both sides read the format here.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::{Resource, ResourceExt};

use crate::{InjectionSpec, MANAGED_BY, MANAGED_BY_LABEL, Watcher};

/// Label on every owned ConfigMap and revision: the Watcher (or ClusterWatcher) it belongs to.
pub const WATCHER_LABEL: &str = "watcher.dev/watcher";

/// Label on every ConfigMap and revision a ClusterWatcher owns: its name.
pub const CLUSTER_WATCHER_LABEL: &str = "watcher.dev/cluster-watcher";

/// The name of the revision of `watcher` with `hash`.
pub fn revision_name(watcher: &str, hash: &str) -> String {
    format!("{watcher}-{hash}")
}

/// A revision of `watcher`'s current spec, numbered `number`, in `namespace`: a Watcher's own,
/// or for a ClusterWatcher (a Watcher of no namespace, see
/// [`crate::ClusterWatcher::across_namespaces`]) the operator's, owned by the
/// ClusterWatcher and labelled with its name.
pub fn desired_revision(watcher: &Watcher, namespace: &str, number: i64) -> Option<ControllerRevision> {
    revision_of(watcher, &watcher.spec.injection(), namespace, number)
}

/// A revision of `watcher` keeping `injection` (a spec of `watcher`, perhaps an older one),
/// numbered `number`, in `namespace` (see [`desired_revision`]).
pub fn revision_of(
    watcher: &Watcher,
    injection: &InjectionSpec,
    namespace: &str,
    number: i64,
) -> Option<ControllerRevision> {
    let owner = match watcher.cluster_watcher() {
        Some(cluster) => cluster.clone(),
        None => watcher.controller_owner_ref(&())?,
    };
    let name = watcher.name_any();
    let mut labels: std::collections::BTreeMap<String, String> =
        [(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()), (WATCHER_LABEL.to_owned(), name.clone())].into();
    if watcher.cluster_watcher().is_some() {
        labels.insert(CLUSTER_WATCHER_LABEL.to_owned(), name.clone());
    }
    Some(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(&name, &injection.hash())),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(serde_json::to_value(injection).unwrap_or_default())),
        revision: number,
    })
}

/// The spec a revision keeps, or `None` when it cannot be read (then the pods that carry it
/// go the `Recreate` way).
pub fn injection_of(revision: &ControllerRevision) -> Option<InjectionSpec> {
    let data = revision.data.as_ref()?;
    serde_json::from_value(data.0.clone()).ok()
}
