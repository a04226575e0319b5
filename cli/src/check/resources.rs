//! The namespaces' ResourceQuotas and LimitRanges: the Watchers and ClusterWatchers whose
//! containers cannot meet them where they apply (their pods get them only without them), said
//! before any pod.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use watcher_admission::resources::{ResourceRules, describe};
use watcher_admission::{ResourceCompliance, resource_compliance};

use super::Report;

const GROUP: &str = "admission";
const NAME: &str = "resource rules";

/// Reads every LimitRange and ResourceQuota, and judges each Watcher of `everywhere` (a
/// namespace and a Watcher applying there) against those of its namespace.
pub(super) async fn resource_rules(
    client: &Client,
    report: &mut Report,
    everywhere: &[(String, Arc<watcher_api::Watcher>)],
) {
    let all = ListParams::default();
    let read = async {
        Ok::<_, kube::Error>((
            Api::<LimitRange>::all(client.clone()).list(&all).await?.items,
            Api::<ResourceQuota>::all(client.clone()).list(&all).await?.items,
        ))
    };
    match read.await {
        Ok((ranges, quotas)) => judge(report, everywhere, &by_namespace(&ranges, &quotas)),
        Err(error) => report.warn(
            GROUP,
            NAME,
            format!("cannot list the LimitRanges and ResourceQuotas: {error}"),
            "the operator reads them to fit its sidecars (list and watch, see deploy/rbac.yaml); so must you to check",
        ),
    }
}

/// The rules of each namespace that has any.
fn by_namespace(ranges: &[LimitRange], quotas: &[ResourceQuota]) -> BTreeMap<String, ResourceRules> {
    let mut namespaces: Vec<String> =
        ranges.iter().map(|r| r.namespace()).chain(quotas.iter().map(|q| q.namespace())).flatten().collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
        .into_iter()
        .map(|ns| {
            let in_ns = |n: Option<String>| n.as_deref() == Some(ns.as_str());
            let mut ranges: Vec<&LimitRange> = ranges.iter().filter(|r| in_ns(r.namespace())).collect();
            let mut quotas: Vec<&ResourceQuota> = quotas.iter().filter(|q| in_ns(q.namespace())).collect();
            ranges.sort_by_key(|r| r.name_any());
            quotas.sort_by_key(|q| q.name_any());
            let rules = ResourceRules::new(ranges, quotas);
            (ns, rules)
        })
        .collect()
}

/// The check: passed where every Watcher can meet the rules where it applies; a warning naming
/// each that cannot, its namespace, the rules and kube-apiserver's words.
pub(super) fn judge(
    report: &mut Report,
    everywhere: &[(String, Arc<watcher_api::Watcher>)],
    rules: &BTreeMap<String, ResourceRules>,
) {
    let mut cannot = Vec::new();
    let mut fitted = 0;
    for (namespace, watcher) in everywhere {
        let Some(rules) = rules.get(namespace) else { continue };
        let kind = if watcher.cluster_watcher().is_some() { "ClusterWatcher" } else { "Watcher" };
        match resource_compliance(watcher, rules) {
            ResourceCompliance::CannotComply(violations) => cannot.push(format!(
                "{kind} {} in {namespace} ({}): {}",
                watcher.name_any(),
                rules.names().join(", "),
                describe(&violations)
            )),
            ResourceCompliance::Adapted(_) => fitted += 1,
            ResourceCompliance::AsWritten => {}
        }
    }
    if cannot.is_empty() {
        let fitted =
            if fitted == 0 { String::new() } else { format!(" ({fitted} given requests and limits for them)") };
        report.pass(
            GROUP,
            NAME,
            format!("every Watcher can meet the ResourceQuotas and LimitRanges where it applies{fitted}"),
        );
    } else {
        report.warn(
            GROUP,
            NAME,
            format!("{} cannot, and their pods are admitted without them: {}", cannot.len(), cannot.join("; ")),
            "give the Watcher requests and limits within the namespace's LimitRange, or room in its quota \
             (see docs/resources.md)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture<T: serde::de::DeserializeOwned + kube::Resource>(name: &str) -> T {
        let path = format!("{}/../admission/fixtures/resources/{name}", env!("CARGO_MANIFEST_DIR"));
        let mut object: T = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
        object.meta_mut().namespace = Some("team-a".into());
        object
    }

    fn watcher(name: &str, limits: serde_json::Value) -> (String, Arc<watcher_api::Watcher>) {
        let watcher: watcher_api::Watcher = serde_json::from_value(serde_json::json!({
            "apiVersion": "watcher.dev/v1alpha1", "kind": "Watcher", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"container": {"name": name, "image": "busybox:1.36", "resources": {"limits": limits}}}}))
        .expect("Watcher");
        ("team-a".to_owned(), Arc::new(watcher))
    }

    /// Under the LimitRange and the quota kube-apiserver stored (`limits.cpu: 300m`): a small
    /// Watcher is fitted, one limited to 400m cannot fit in the quota and is named with its words.
    #[test]
    fn a_watcher_that_cannot_meet_a_namespaces_rules_is_named() {
        let rules = by_namespace(&[fixture("limitrange-1.36.json")], &[fixture("resourcequota-1.36.json")]);
        let mut report = Report::default();
        judge(&mut report, &[watcher("small", serde_json::json!({"cpu": "100m"}))], &rules);
        assert!(report.ok(), "{}", report.text());
        assert!(report.text().contains("(1 given requests and limits for them)"), "{}", report.text());
        let mut report = Report::default();
        judge(&mut report, &[watcher("big", serde_json::json!({"cpu": "400m"}))], &rules);
        let text = report.text();
        assert!(
            text.contains(
                "Watcher big in team-a (LimitRange bounds, ResourceQuota team): exceeded quota: team, \
                           requested: limits.cpu=400m, used: limits.cpu=0, limited: limits.cpu=300m"
            ),
            "{text}"
        );
    }
}
