//! The namespace's ResourceQuotas and LimitRanges, held after the patch: each container a
//! Watcher adds (its sidecar, its init containers, the supervisor) gets what the namespace
//! requires where it leaves it unset and is brought within the bounds, or the Watcher is left
//! out where it would make a pod fail that passes without it (a bound no value meets, the
//! quota's remaining room). As for Pod Security, nothing of this is in the spec hashes.

use k8s_openapi::api::core::v1::ResourceRequirements;
use watcher_api::Watcher;

use super::Fields;
use crate::resources::{ContainerKind, ContainerResources, PodResourceView, ResourceRules, Violation, describe};

/// What the namespace's resource rules did to one Watcher of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceReport {
    /// The Watcher.
    pub watcher: String,
    /// The namespace's rules: `LimitRange bounds, ResourceQuota team`.
    pub rules: String,
    /// Each container the Watcher adds whose resources were set, with what was set and why.
    pub adapted: Vec<(String, Vec<String>)>,
    /// Why the Watcher was left out: the rules the pod would fail with it, in kube-apiserver's
    /// words.
    pub violations: Option<String>,
}

/// The resources each container a Watcher adds gets; `None` where it keeps its own.
#[derive(Clone, Debug, Default)]
pub(super) struct WatcherResources {
    pub(super) sidecar: Option<ResourceRequirements>,
    pub(super) init: Vec<Option<ResourceRequirements>>,
    pub(super) supervisor: Option<ResourceRequirements>,
}

/// The pod under the namespace's rules, as the Watchers admitted so far leave it.
pub(super) struct Ledger<'a> {
    rules: &'a ResourceRules,
    pod: PodResourceView,
    /// What the pod fails as it stands (judged once, then as each Watcher is added).
    failing: Vec<Violation>,
}

/// A Watcher left out: the report, the words of the warning, and the rules the pod would fail.
pub(super) struct LeftOut {
    pub(super) report: ResourceReport,
    pub(super) why: String,
    pub(super) violations: Vec<Violation>,
}

impl<'a> Ledger<'a> {
    /// The ledger of `pod` under `rules`; `None` where the namespace has no rule.
    pub(super) fn of(rules: &'a ResourceRules, pod: &crate::PodView) -> Option<Self> {
        (!rules.is_empty()).then(|| {
            let pod = PodResourceView::of(pod);
            Self { rules, failing: rules.check(&pod), pod }
        })
    }

    /// WatcherResources `watcher`'s containers (the sidecar a native one where `native`; the supervisor's
    /// `supervisor` where it is yet to be added) and adds them to the pod; `Err` where the pod
    /// would then fail a rule it passes without them.
    pub(super) fn admit(
        &mut self,
        watcher: &Watcher,
        native: bool,
        supervisor: Option<(&str, &ResourceRequirements)>,
    ) -> Result<(WatcherResources, Option<ResourceReport>), Box<LeftOut>> {
        let spec = &watcher.spec;
        let sidecar_kind = if native { ContainerKind::Sidecar } else { ContainerKind::Regular };
        // The supervisor's init container first: it goes in before the pod's own.
        let containers = supervisor
            .map(|(name, resources)| (name, ContainerKind::Init, Some(resources)))
            .into_iter()
            .chain(
                spec.app.init_containers.iter().map(|c| (c.name.as_str(), ContainerKind::Init, c.resources.as_ref())),
            )
            .chain([(spec.container.name.as_str(), sidecar_kind, spec.container.resources.as_ref())]);
        let mut after = self.pod.clone();
        let mut fitted = Vec::new();
        let mut adapted = Vec::new();
        for (name, kind, own) in containers {
            let fit = self.rules.fit(own, &after);
            let resources = fit.resources.as_ref().or(own);
            after = after.with(ContainerResources::new(name, kind, resources));
            if !fit.set.is_empty() {
                adapted.push((name.to_owned(), fit.set));
            }
            fitted.push(fit.resources);
        }
        let report = |adapted, violations| ResourceReport {
            watcher: watcher.metadata.name.clone().unwrap_or_default(),
            rules: self.rules.names().join(", "),
            adapted,
            violations,
        };
        let failing = self.rules.check(&after);
        let added: Vec<Violation> = crate::resources::new_in(&self.failing, failing.iter().cloned());
        if !added.is_empty() {
            let words = describe(&added);
            let mut failed: Vec<String> = added.iter().map(|v| v.rule.to_string()).collect();
            failed.dedup();
            let why = format!("the pod would fail its namespace's {} with it: {words}", failed.join(", "));
            return Err(Box::new(LeftOut { report: report(Vec::new(), Some(words)), why, violations: added }));
        }
        self.pod = after;
        self.failing = failing;
        let mut fitted = fitted.into_iter();
        let supervisor = if supervisor.is_some() { fitted.next().flatten() } else { None };
        let sidecar = fitted.next_back().flatten();
        let fits = WatcherResources { sidecar, init: fitted.collect(), supervisor };
        let report = (!adapted.is_empty()).then(|| report(adapted, None));
        Ok((fits, report))
    }
}

/// Writes `resources` into `container` (JSON, as it goes into the pod).
pub(super) fn write(container: &mut impl Fields, resources: Option<&ResourceRequirements>) {
    if let Some(resources) = resources {
        // Serialising k8s-openapi types to a Value cannot fail: they are plain data with string keys.
        container.set("resources", serde_json::to_value(resources).unwrap_or_default());
    }
}

/// How a Watcher stands towards a namespace's resource rules before any pod exists: judged on a
/// pod of its containers alone (an app's own requests only take more of a quota).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceCompliance {
    /// Its containers pass as written.
    AsWritten,
    /// They pass once the webhook sets these values (`container: what, ...`).
    Adapted(Vec<String>),
    /// No value passes, or its containers alone do not fit in what is left of a quota: the
    /// rules it fails (in kube-apiserver's words: [`crate::resources::describe`]).
    CannotComply(Vec<Violation>),
}

/// How `watcher` stands towards `rules` (its sidecar as a regular container).
pub fn resource_compliance(watcher: &Watcher, rules: &ResourceRules) -> ResourceCompliance {
    let mut ledger = Ledger { rules, pod: PodResourceView::default(), failing: Vec::new() };
    match ledger.admit(watcher, false, None) {
        Err(left_out) => ResourceCompliance::CannotComply(left_out.violations),
        Ok((_, None)) => ResourceCompliance::AsWritten,
        Ok((_, Some(report))) => ResourceCompliance::Adapted(
            report.adapted.into_iter().map(|(container, set)| format!("{container}: {}", set.join(", "))).collect(),
        ),
    }
}
