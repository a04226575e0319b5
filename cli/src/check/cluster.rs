//! The cluster: kube-apiserver's version and what it serves, and (before an install) the
//! permissions and what an install would adopt.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::Client;
use kube::api::{Api, PostParams};
use watcher_admission::{ServerVersion, supports_native_sidecars};
use watcher_certs::registration::WEBHOOK_CONFIGURATION;

use super::Report;
use super::registration::helm_adoption;

/// The API server's version, the oldest one supported and native sidecars; `--pre` also asks
/// for admissionregistration/v1. The version, or `None` when the API server cannot be reached.
pub(super) async fn cluster(
    client: &Client,
    report: &mut Report,
    pre: bool,
) -> Option<k8s_openapi::apimachinery::pkg::version::Info> {
    const GROUP: &str = "cluster";
    let info = match client.apiserver_version().await {
        Ok(info) => info,
        Err(error) => {
            report.fail(
                GROUP,
                "API server",
                format!("cannot reach it: {}", crate::causes(&error)),
                "check the kubeconfig and context: `kubectl cluster-info` (or pass --kubeconfig, --context)",
            );
            return None;
        }
    };
    match ServerVersion::of(&info) {
        Some(version) if version.major == 1 && !version.at_least(24) => report.fail(
            GROUP,
            "API server",
            format!("Kubernetes {} is older than 1.24, the oldest watcher-operator supports", info.git_version),
            "upgrade the cluster to Kubernetes 1.24 or later",
        ),
        _ => report.pass(GROUP, "API server", format!("Kubernetes {}", info.git_version)),
    }
    if supports_native_sidecars(&info.major, &info.minor) {
        report.pass(GROUP, "native sidecars", "supported (Kubernetes 1.29 or later): `nativeSidecar: Auto` uses them");
    } else {
        report.warn(
            GROUP,
            "native sidecars",
            format!("not supported by Kubernetes {}: sidecars are injected as regular containers", info.git_version),
            "fine for most Watchers; `nativeSidecar: Always` needs Kubernetes 1.29 or later",
        );
    }
    if pre {
        match client.list_api_group_resources("admissionregistration.k8s.io/v1").await {
            Ok(_) => report.pass(GROUP, "admissionregistration.k8s.io/v1", "served"),
            Err(error) => report.fail(
                GROUP,
                "admissionregistration.k8s.io/v1",
                format!("not served: {error}"),
                "the API server must serve admissionregistration.k8s.io/v1 (Kubernetes 1.16 or later) \
                 with the MutatingAdmissionWebhook plugin on",
            ),
        }
    }
    Some(info)
}

/// What an install creates (`deploy/`, the Helm chart): group, resource, namespaced.
pub(crate) const INSTALLED: [(&str, &str, &str, bool); 12] = [
    ("", "namespaces", "Namespace", false),
    ("apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition", false),
    ("", "serviceaccounts", "ServiceAccount", true),
    ("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", false),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", false),
    ("rbac.authorization.k8s.io", "roles", "Role", true),
    ("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", true),
    ("apps", "deployments", "Deployment", true),
    ("policy", "poddisruptionbudgets", "PodDisruptionBudget", true),
    ("", "services", "Service", true),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false),
    ("coordination.k8s.io", "leases", "Lease", true),
];

/// `--pre`: may the current user create what an install creates? One SelfSubjectAccessReview
/// per kind.
pub(super) async fn permissions(client: &Client, report: &mut Report, namespace: &str) {
    const GROUP: &str = "permissions";
    let api = Api::<SelfSubjectAccessReview>::all(client.clone());
    for (group, resource, kind, namespaced) in INSTALLED {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_owned()),
                    resource: Some(resource.to_owned()),
                    verb: Some("create".to_owned()),
                    namespace: namespaced.then(|| namespace.to_owned()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let where_ = if namespaced { format!(" in namespace {namespace}") } else { String::new() };
        match api.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => {
                report.pass(GROUP, format!("create {kind}"), format!("allowed{where_}"));
            }
            Ok(answer) => {
                let why = answer.status.and_then(|s| s.reason).filter(|r| !r.is_empty());
                report.fail(
                    GROUP,
                    format!("create {kind}"),
                    format!("not allowed{where_}{}", why.map(|r| format!(": {r}")).unwrap_or_default()),
                    "install as a cluster administrator: the install creates cluster-wide objects \
                     (CRDs, a ClusterRole, the webhook configuration)",
                );
            }
            Err(error) => report.fail(
                GROUP,
                format!("create {kind}"),
                format!("cannot ask the API server: {error}"),
                "check that you may create selfsubjectaccessreviews (every authenticated user may by default)",
            ),
        }
    }
}

/// `--pre`: a webhook configuration already there that `helm install` would refuse to adopt
/// (most often what a run outside the cluster left when it was killed).
pub(super) async fn adoptable(client: &Client, report: &mut Report) {
    const GROUP: &str = "permissions";
    const NAME: &str = "no MutatingWebhookConfiguration in the way";
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    match api.get_opt(WEBHOOK_CONFIGURATION).await {
        Ok(None) => {
            report.pass(GROUP, NAME, format!("MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} does not exist yet"))
        }
        Ok(Some(existing)) => match helm_adoption(&existing) {
            None => report.pass(
                GROUP,
                NAME,
                format!("MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} belongs to a Helm release"),
            ),
            Some(message) => report.warn(
                GROUP,
                NAME,
                message,
                "`kubectl delete mutatingwebhookconfiguration watcher-operator` before `helm install` (the installed \
                 operator keeps the new one), or `helm install --take-ownership` (Helm 3.17 or later) to adopt it; \
                 `kubectl apply -k deploy/` takes it over as it is",
            ),
        },
        Err(error) => report.warn(
            GROUP,
            NAME,
            format!("cannot read MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}: {}", crate::causes(&error)),
            "check that you may get mutatingwebhookconfigurations",
        ),
    }
}
