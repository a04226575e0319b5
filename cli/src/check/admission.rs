//! Which pods the registration sends to the webhook (its selectors and matchConditions).

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::Report;
use super::pod_security::{pod_security, pod_security_defaults};

/// The admission scope: which pods kube-apiserver sends the webhook (matchConditions, 1.28 or
/// later), compared with what the operator computes from the Watchers, ImagePolicies and
/// namespaces of the cluster; and whether required Watchers fail closed.
pub(super) async fn admission_scope(
    client: &Client,
    report: &mut Report,
    namespace: &str,
    info: &k8s_openapi::apimachinery::pkg::version::Info,
    configuration: &MutatingWebhookConfiguration,
) {
    const GROUP: &str = "admission";
    let all = ListParams::default();
    let read = async {
        Ok::<_, kube::Error>((
            Api::<watcher_api::Watcher>::all(client.clone()).list(&all).await?,
            Api::<watcher_api::ClusterWatcher>::all(client.clone()).list(&all).await?,
            Api::<watcher_api::ImagePolicy>::all(client.clone()).list(&all).await?,
            Api::<Namespace>::all(client.clone()).list_metadata(&all).await?,
        ))
    };
    let (watchers, cluster, policies, namespaces) = match read.await {
        Ok(read) => read,
        Err(error) => {
            let hint = "the CRDs must be installed (see above) and readable by you: \
                        `kubectl get watchers,clusterwatchers,imagepolicies -A`";
            return report.warn(GROUP, "scope", format!("cannot read what the scope is computed from: {error}"), hint);
        }
    };
    let policies: Vec<watcher_api::CompiledPolicy> = policies.items.iter().map(|p| p.compile()).collect();
    let own: Vec<Arc<watcher_api::Watcher>> = watchers.items.into_iter().map(Arc::new).collect();
    let cluster: Vec<Arc<watcher_api::ClusterWatcher>> = cluster.items.into_iter().map(Arc::new).collect();
    let options = watcher_admission::InjectOptions {
        excluded_namespaces: vec![namespace.to_owned()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let named = || namespaces.items.iter().map(|ns| (ns.metadata.name.as_deref().unwrap_or_default(), ns.labels()));
    let everywhere = watcher_admission::cluster::everywhere(&own, &cluster, named(), &options);
    let defaults = pod_security_defaults(client, report, namespace, named()).await;
    pod_security(report, &everywhere, named(), &defaults, watcher_admission::server_minor(&info.major, &info.minor));
    super::agent_config::refused_configurations(report, &own);
    super::resources::resource_rules(client, report, &everywhere).await;
    let scope = watcher_admission::Scope::compute(&everywhere, &policies, named(), namespace);
    let summary = scope.summary();
    if !watcher_admission::scope::supports_match_conditions(&info.major, &info.minor) {
        return without_match_conditions(report, info, summary.required);
    }
    in_place_conditions(report, configuration, &scope, &summary);
}

/// A server without webhook `matchConditions` (before 1.28): every pod of a served namespace is
/// sent, and required Watchers hold only while the webhook answers.
fn without_match_conditions(
    report: &mut Report,
    info: &k8s_openapi::apimachinery::pkg::version::Info,
    required: usize,
) {
    const GROUP: &str = "admission";
    report.warn(
        GROUP,
        "scope",
        format!(
            "Kubernetes {} has no webhook matchConditions (1.28 or later): every pod of a served namespace is sent \
             to the webhook, whatever it asks for",
            info.git_version
        ),
        "fine with failurePolicy: Ignore; on 1.28 or later the operator narrows it to the pods it could change",
    );
    if required > 0 {
        report.warn(
            GROUP,
            "required Watchers",
            format!(
                "{} required, enforced only while the webhook answers: while it is unreachable their pods are admitted \
                 without them (required.watcher.dev needs matchConditions, Kubernetes 1.28 or later)",
                required
            ),
            "upgrade to Kubernetes 1.28 or later, or set the webhook's failurePolicy: Fail (every pod of a served \
             namespace is then refused while it is unreachable)",
        );
    }
}

/// The `matchConditions` in place against those the scope needs, and the required Watchers'
/// webhook.
fn in_place_conditions(
    report: &mut Report,
    configuration: &MutatingWebhookConfiguration,
    scope: &watcher_admission::Scope,
    summary: &watcher_admission::scope::Summary,
) {
    use watcher_controller::scope::{SCOPE_ANNOTATION, in_place, within_limits};
    const GROUP: &str = "admission";
    let (wanted, _) = within_limits(scope.conditions());
    let registered = in_place(configuration);
    let reason = configuration.annotations().get(SCOPE_ANNOTATION);
    match reason {
        Some(why) => report.warn(
            GROUP,
            "scope",
            format!("{summary}; {why}"),
            "see the operator's log; fewer distinct selectors (or one shared across namespaces) make the conditions smaller",
        ),
        None if registered == wanted && wanted.scope.is_none() => {
            report.pass(GROUP, "scope", format!("{summary}: every pod of a served namespace is sent"))
        }
        None if registered == wanted => report.pass(
            GROUP,
            "scope",
            format!("{summary}: only the pods they apply to are sent (matchConditions up to date)"),
        ),
        None => report.warn(
            GROUP,
            "scope",
            format!("{summary}: the matchConditions in place are not yet what they need"),
            "the leader writes them within seconds of a change: is the operator running? (see the operator checks)",
        ),
    }
    if summary.required > 0 {
        if registered.required.is_some() {
            report.pass(
                GROUP,
                "required Watchers",
                format!(
                    "{}: their pods go to required.watcher.dev (failurePolicy: Fail), refused while the webhook is unreachable",
                    summary.required
                ),
            );
        } else {
            report.warn(
                GROUP,
                "required Watchers",
                format!(
                    "{}, but required.watcher.dev is not registered: an outage admits their pods",
                    summary.required
                ),
                "see the scope check above and the operator's log",
            );
        }
    }
}
