//! What the namespace's guards do to each Watcher a pod is given, in admission's own passes: what
//! its sidecar sees of the app, the Pod Security level and the resource rules held.

use kube::ResourceExt;
use watcher_admission::{PodView, app_report};
use watcher_api::Watcher;

use super::{Scope, WatcherLine};

/// What each injected Watcher's sidecar sees of the app: for a manifest, what admission's own
/// pass reports (every Watcher in one patch, as at creation); for an existing pod, the same step
/// run on the pod as it is.
pub(super) fn see_the_app(pod: &PodView, existing: bool, scope: &Scope<'_>, lines: &mut [WatcherLine]) {
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
        scope.admit(pod).app
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
pub(super) fn hold_the_level(pod: &PodView, scope: &Scope<'_>, lines: &mut [WatcherLine]) {
    let levels = scope.levels();
    if levels.enforced().is_none() {
        return;
    }
    let injection = scope.admit(pod);
    for report in injection.pod_security {
        let Some(line) = lines.iter_mut().find(|l| l.name == report.watcher) else { continue };
        match &report.violations {
            Some(violations) => {
                let why = format!("it would make the pod violate PodSecurity \"{}\": {violations}", report.policy);
                left_out(line, scope, "PodSecurity", &why);
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

/// `line`'s Watcher left out by a guard of the namespace (`reason`), for `why`; a required one
/// refuses the pod.
fn left_out(line: &mut WatcherLine, scope: &Scope<'_>, reason: &'static str, why: &str) {
    let required = scope.watchers.iter().any(|w| w.name_any() == line.name && w.spec.is_required());
    line.injected = false;
    line.up_to_date = None;
    line.reason = reason;
    let refused = if required { "; the Watcher is required (failurePolicy: Fail): the pod is refused" } else { "" };
    line.message = format!("left out: {why}{refused}");
}

/// Where the namespace has LimitRanges or ResourceQuotas: what admission sets in each Watcher's
/// containers for them, and which Watchers it leaves out and why (the same pass as admission).
pub(super) fn hold_the_resources(pod: &PodView, scope: &Scope<'_>, lines: &mut [WatcherLine]) {
    if scope.resources.is_empty() {
        return;
    }
    for report in scope.admit(pod).resources {
        let Some(line) = lines.iter_mut().find(|l| l.name == report.watcher) else { continue };
        match &report.violations {
            Some(violations) => {
                let why = format!(
                    "the pod would fail its namespace's resource rules ({}) with it: {violations}",
                    report.rules
                );
                left_out(line, scope, "Resources", &why);
            }
            None => {
                line.resources = report
                    .adapted
                    .iter()
                    .map(|(container, set)| format!("container {container} gets {}", set.join(", ")))
                    .collect();
            }
        }
    }
}
