//! The pod as the resource rules read it: each container's requests and limits, where it stands,
//! and the pod's totals as LimitRanger and the quota count them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;

use super::{Amount, Values, values};
use crate::PodView;

/// A container's requests and limits as the pod will carry them, and where it stands.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerResources {
    /// The container's name.
    pub name: String,
    /// What kind of container: the quota counts init containers apart.
    pub kind: ContainerKind,
    pub(super) requests: Values,
    pub(super) limits: Values,
}

/// Where a container stands in the pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContainerKind {
    /// In `spec.containers`.
    #[default]
    Regular,
    /// An init container that runs to completion before the next.
    Init,
    /// An init container with `restartPolicy: Always` (a native sidecar): it runs beside the app.
    Sidecar,
}

/// The pod as the namespace's resource rules read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodResourceView {
    /// Every container, init containers included.
    pub containers: Vec<ContainerResources>,
    /// `activeDeadlineSeconds` is set: the quota scope `Terminating`.
    pub terminating: bool,
    /// `priorityClassName`, for a quota's `PriorityClass` scope.
    pub priority_class: Option<String>,
}

impl PodResourceView {
    /// `pod` as the rules read it.
    pub fn of(pod: &PodView) -> Self {
        let Some(spec) = pod.spec.as_ref() else { return Self::default() };
        let init = spec.init_containers.iter().flatten().map(|c| {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                ContainerKind::Sidecar
            } else {
                ContainerKind::Init
            };
            ContainerResources::new(&c.name, kind, c.resources.as_deref())
        });
        let regular = spec
            .containers
            .iter()
            .map(|c| ContainerResources::new(&c.name, ContainerKind::Regular, c.resources.as_deref()));
        Self {
            containers: init.chain(regular).collect(),
            terminating: spec.active_deadline_seconds.is_some(),
            priority_class: spec.priority_class_name.clone(),
        }
    }

    /// The pod with `container` added.
    pub fn with(&self, container: ContainerResources) -> Self {
        let mut pod = self.clone();
        pod.containers.push(container);
        pod
    }

    /// Whether the pod is of QoS class BestEffort: no container requests or limits cpu or memory.
    pub(super) fn best_effort(&self) -> bool {
        let counts = |values: &Values| values.keys().any(|k| k == "cpu" || k == "memory");
        !self.containers.iter().any(|c| counts(&c.requests) || counts(&c.limits))
    }

    /// What the pod requests (or, with `limits`, is limited to), as kube-apiserver adds it up:
    /// the regular containers and the native sidecars together, or the largest init container
    /// with the sidecars started before it, whichever is more.
    pub(super) fn total(&self, limits: bool) -> BTreeMap<String, Amount> {
        let mut running: BTreeMap<&str, Amount> = BTreeMap::new();
        let mut sidecars: BTreeMap<&str, Amount> = BTreeMap::new();
        let mut init_peak: BTreeMap<&str, Amount> = BTreeMap::new();
        for container in &self.containers {
            let list = if limits { &container.limits } else { &container.requests };
            for (resource, value) in list {
                let resource = resource.as_str();
                match container.kind {
                    ContainerKind::Regular => {
                        *running.entry(resource).or_default() =
                            running.get(resource).copied().unwrap_or_default() + value.amount
                    }
                    ContainerKind::Sidecar => {
                        *sidecars.entry(resource).or_default() =
                            sidecars.get(resource).copied().unwrap_or_default() + value.amount
                    }
                    ContainerKind::Init => {
                        let with = value.amount + sidecars.get(resource).copied().unwrap_or_default();
                        let peak = init_peak.entry(resource).or_default();
                        *peak = (*peak).max(with);
                    }
                }
            }
        }
        let mut total: BTreeMap<&str, Amount> = BTreeMap::new();
        for (resource, amount) in running.iter().chain(&sidecars) {
            *total.entry(resource).or_default() = total.get(resource).copied().unwrap_or_default() + *amount;
        }
        for (resource, peak) in init_peak {
            let entry = total.entry(resource).or_default();
            *entry = (*entry).max(peak);
        }
        total.into_iter().map(|(k, amount)| (k.to_owned(), amount)).collect()
    }
}

impl ContainerResources {
    /// A container named `name` of `kind`, with `resources`.
    pub fn new(name: &str, kind: ContainerKind, resources: Option<&ResourceRequirements>) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            requests: values(resources.and_then(|r| r.requests.as_ref())),
            limits: values(resources.and_then(|r| r.limits.as_ref())),
        }
    }
}
