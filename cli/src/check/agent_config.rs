//! The Watchers whose configuration watcher-agent would refuse: not shipped, their ConfigMap
//! keeps the last good one (or their pods are admitted without the sidecar), as their `Ready`
//! condition says.

use kube::ResourceExt;
use watcher_api::{Watcher, reasons, types};

use super::Report;

/// Warns of every Watcher of `watchers` whose configuration is refused, with what its pods get.
pub(super) fn refused_configurations(report: &mut Report, watchers: &[std::sync::Arc<Watcher>]) {
    const GROUP: &str = "admission";
    let refused: Vec<String> = watchers
        .iter()
        .filter_map(|watcher| {
            let conditions = watcher.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
            let ready = conditions.iter().find(|c| c.type_ == types::READY && c.reason == reasons::CONFIG_REFUSED)?;
            let namespace = watcher.namespace().unwrap_or_default();
            Some(format!("Watcher {} in {namespace}: {}", watcher.name_any(), ready.message))
        })
        .collect();
    if refused.is_empty() {
        report.pass(GROUP, "agent configuration", "every Watcher's configuration is shipped");
    } else {
        report.warn(
            GROUP,
            "agent configuration",
            format!("{} not shipped: {}", refused.len(), refused.join("; ")),
            "fix the variable named (`kubectl exec POD -c SIDECAR -- watcher-agent check` says the same); see \
             docs/agent.md, \"Changing the configuration\"",
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::check::report::Status;

    #[test]
    fn a_refused_configuration_is_warned_of_with_what_pods_get() {
        let api_version = <Watcher as kube::Resource>::api_version(&());
        let watcher = |name: &str, reason: &str| {
            let status = json!({"conditions": [{"type": "Ready", "status": "False", "reason": reason,
                "message": "generation 5's configuration is not shipped, watcher-agent would refuse it: AGENT_RULE_X: \
                            bad; ConfigMap w-config keeps generation 4's, which pods get",
                "lastTransitionTime": "2026-12-07T00:00:00Z"}]});
            std::sync::Arc::new(
                serde_json::from_value::<Watcher>(json!({"apiVersion": api_version, "kind": "Watcher",
                    "metadata": {"name": name, "namespace": "shop"},
                    "spec": {"container": {"name": name}}, "status": status}))
                .expect("Watcher"),
            )
        };
        let mut report = Report::default();
        refused_configurations(&mut report, &[watcher("w", "ConfigRefused"), watcher("other", "ConfigMapConflict")]);
        let check = &report.checks[0];
        assert_eq!(check.status, Status::Warning);
        assert!(check.message.starts_with("1 not shipped: Watcher w in shop: generation 5's"), "{}", check.message);
        assert!(check.message.ends_with("keeps generation 4's, which pods get"), "{}", check.message);
        let mut report = Report::default();
        refused_configurations(&mut report, &[watcher("other", "ConfigMapConflict")]);
        assert_eq!(report.checks[0].status, Status::Passed);
    }
}
