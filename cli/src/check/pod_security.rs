//! Pod Security: the cluster's defaults, and what they mean for the sidecars.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::Api;
use kube::{Client, ResourceExt};
use watcher_admission::pod_security::ClusterDefaults;
use watcher_controller::pod_security_probe;

use super::Report;

/// The ConfigMap that holds the operator's `--pod-security-config` (the chart's
/// `podSecurity.configuration`), key [`POD_SECURITY_CONFIG_KEY`].
pub(crate) const POD_SECURITY_CONFIG_MAP: &str = "watcher-operator-pod-security";

/// Its key.
pub(crate) const POD_SECURITY_CONFIG_KEY: &str = "pod-security.yaml";

/// What kube-apiserver's Pod Security admission enforces where a namespace sets no level,
/// learned as the operator learns it (dry-run pods in a namespace without labels), and whether
/// the operator's configuration (`podSecurity.configuration`) agrees. Returns what admission
/// judges by: the configuration when there is one, else what was learned.
pub(super) async fn pod_security_defaults<'a>(
    client: &Client,
    report: &mut Report,
    namespace: &str,
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> ClusterDefaults {
    let configured = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(POD_SECURITY_CONFIG_MAP)
        .await
        .ok()
        .flatten()
        .and_then(|map| map.data?.remove(POD_SECURITY_CONFIG_KEY))
        .map(|text| crate::pod_security_config::parse(&text));
    let learned = match pod_security_probe::unlabelled_namespace(namespaces, namespace) {
        Some(probed) => pod_security_probe::probe(client, &probed).await.map_err(|error| error.to_string()),
        None => Err("every namespace sets a Pod Security label".to_owned()),
    };
    judge_defaults(report, configured, learned)
}

/// The mode `key` (`enforce`, `warn`) of `defaults`: `level:version`.
fn mode(defaults: &ClusterDefaults, key: &str) -> String {
    let level = defaults.defaults.get(key).map_or("privileged", String::as_str);
    let version = defaults.defaults.get(&format!("{key}-version")).map_or("latest", String::as_str);
    format!("{level}:{version}")
}

/// `enforce L:V, warn L:V`.
fn seen(defaults: &ClusterDefaults) -> String {
    format!("enforce {}, warn {}", mode(defaults, "enforce"), mode(defaults, "warn"))
}

/// The check of the defaults the operator has (`configured`: the chart's ConfigMap, if any)
/// against what kube-apiserver enforces (`learned` by a dry-run probe); the defaults admission
/// and the Pod Security checks go by.
fn judge_defaults(
    report: &mut Report,
    configured: Option<Result<ClusterDefaults, crate::pod_security_config::ConfigError>>,
    learned: Result<pod_security_probe::Learned, String>,
) -> ClusterDefaults {
    const GROUP: &str = "admission";
    const NAME: &str = "pod security defaults";
    match (configured, learned) {
        (Some(Err(error)), _) => {
            report.fail(
                GROUP,
                NAME,
                format!("ConfigMap {POD_SECURITY_CONFIG_MAP}: {error}"),
                "fix the chart's podSecurity.configuration (or the ConfigMap's key pod-security.yaml): the shape of \
                 kube-apiserver's PodSecurityConfiguration",
            );
            Default::default()
        }
        (Some(Ok(configured)), Ok(learned)) => {
            let agree = ["enforce", "warn"].iter().all(|key| mode(&configured, key) == mode(&learned.defaults, key));
            if agree {
                report.pass(
                    GROUP,
                    NAME,
                    format!(
                        "namespaces without labels: {}, as configured ({})",
                        seen(&learned.defaults),
                        configured.describe()
                    ),
                );
            } else {
                report.warn(
                    GROUP,
                    NAME,
                    format!(
                        "configured {} ({}), but kube-apiserver enforces {} where a namespace sets no level (probed in {})",
                        seen(&configured),
                        configured.describe(),
                        seen(&learned.defaults),
                        learned.namespace
                    ),
                    "make podSecurity.configuration (--pod-security-config) what kube-apiserver's \
                     --admission-control-config-file says, or remove it to have the operator learn the defaults",
                );
            }
            configured
        }
        (Some(Ok(configured)), Err(error)) => {
            report.pass(
                GROUP,
                NAME,
                format!("as configured ({}); not checked against kube-apiserver: {error}", configured.describe()),
            );
            configured
        }
        (None, Ok(learned)) => {
            report.pass(
                GROUP,
                NAME,
                format!(
                    "namespaces without labels: {} (learned from kube-apiserver in namespace {}; exemptions \
                     cannot be seen so: set podSecurity.configuration if the cluster has any)",
                    seen(&learned.defaults),
                    learned.namespace
                ),
            );
            learned.defaults
        }
        (None, Err(error)) => {
            report.warn(
                GROUP,
                NAME,
                format!("cannot learn what kube-apiserver enforces where a namespace sets no level: {error}"),
                "give the operator kube-apiserver's PodSecurityConfiguration: the chart's podSecurity.configuration, \
                 or --pod-security-config",
            );
            Default::default()
        }
    }
}

/// The Watchers and ClusterWatchers that cannot comply with the Pod Security level a namespace
/// they apply in enforces (their pods get them only without them), and those given a user
/// there (`runAsUser: 65532`: neither they nor the pod say one, and the level requires non-root).
pub(crate) fn pod_security<'a>(
    report: &mut Report,
    everywhere: &[(String, Arc<watcher_api::Watcher>)],
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
    defaults: &watcher_admission::pod_security::ClusterDefaults,
    server: Option<u32>,
) {
    use watcher_admission::pod_security::NamespaceLevels;
    const GROUP: &str = "admission";
    let levels: BTreeMap<&str, NamespaceLevels> = namespaces
        .into_iter()
        .map(|(name, labels)| {
            (name, NamespaceLevels::of_namespace(name, |key| labels.get(key).map(String::as_str), defaults))
        })
        .collect();
    let (mut refused, mut non_root) = (Vec::new(), Vec::new());
    for (namespace, watcher) in everywhere {
        let Some(policy) = levels.get(namespace.as_str()).and_then(NamespaceLevels::enforced) else { continue };
        let kind = if watcher.cluster_watcher().is_some() { "ClusterWatcher" } else { "Watcher" };
        let name = format!("{kind} {} in {namespace} ({policy})", watcher.name_any());
        match watcher_admission::compliance(watcher, policy, server) {
            watcher_admission::Compliance::CannotComply(checks) => refused.push(format!("{name}: {checks}")),
            watcher_admission::Compliance::Adapted(fields) => {
                if fields.iter().any(|f| f.contains("runAsUser")) {
                    non_root.push(name);
                }
            }
            watcher_admission::Compliance::AsWritten => {}
        }
    }
    if refused.is_empty() {
        report.pass(
            GROUP,
            "pod security",
            "every Watcher complies with the Pod Security level enforced where it applies",
        );
    } else {
        report.warn(
            GROUP,
            "pod security",
            format!(
                "{} cannot comply, and their pods are admitted without them: {}",
                refused.len(),
                refused.join("; ")
            ),
            "drop what the level forbids from the Watcher (see docs/pod-security.md), or label the namespace \
             with a level it allows",
        );
    }
    if !non_root.is_empty() {
        report.pass(
            GROUP,
            "pod security: user",
            format!(
                "the level requires non-root and no user is set: given runAsUser 65532 where the pod sets none \
                 either (an image whose files need another user: set the Watcher's securityContext.runAsUser): {}",
                non_root.join("; ")
            ),
        );
    }
}
