//! `watcher-operator check`: is the installation healthy? Each check reads the cluster once and
//! judges what it finds with the operator's own code (its CRDs, its certificate rules, its
//! webhook selectors); the admission probe sends a dry-run pod through kube-apiserver itself.
//! `--pre` asks instead whether the cluster can take an install.

pub(crate) mod inject;
mod report;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use watcher_api::{PROBE_ANNOTATION, PROBED_ANNOTATION};
use watcher_certs::registration::{CREATED_BY_RUN_ANNOTATION, WEBHOOK_CONFIGURATION};
use watcher_certs::secret::SECRET_NAME;
use watcher_webhook::{InjectOptions, WebhookSelectors, exclusion, supports_native_sidecars};

pub(crate) use report::{Report, Status};

/// The Deployment, Service and Lease of an installed operator (`deploy/`, the Helm chart).
const OPERATOR_NAME: &str = "watcher-operator";
/// How to install or upgrade the CRDs.
const APPLY_CRDS: &str = "watcher-operator crds | kubectl apply --server-side -f -";

/// What `check` looks at.
#[derive(Clone, Debug)]
pub(crate) struct CheckOptions {
    /// The operator's namespace.
    pub(crate) namespace: String,
    /// Where the admission probe's dry-run pod is created.
    pub(crate) probe_namespace: String,
    /// The checks before an install instead.
    pub(crate) pre: bool,
}

/// Runs every check against the cluster of `client`.
pub(crate) async fn check(client: &Client, options: &CheckOptions) -> Report {
    let mut report = Report::default();
    let Some(version) = cluster(client, &mut report, options.pre).await else {
        return report; // nothing else can be read
    };
    if options.pre {
        permissions(client, &mut report, &options.namespace).await;
        adoptable(client, &mut report).await;
        installed_crds(client, &mut report, &version).await;
        return report;
    }
    crds(client, &mut report, &version).await;
    let registration = registration(client, &mut report, &options.namespace).await;
    if let Some(registered) = &registration {
        admission_scope(client, &mut report, &options.namespace, &version, &registered.configuration).await;
    }
    operator(client, &mut report, &options.namespace, registration.as_ref()).await;
    probe(client, &mut report, options, registration.as_ref()).await;
    report
}

/// The API server's version, the oldest one supported and native sidecars; `--pre` also asks
/// for admissionregistration/v1. The version, or `None` when the API server cannot be reached.
async fn cluster(
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
    let version = (number(&info.major), number(&info.minor));
    match version {
        (Some(1), Some(minor)) if minor < 24 => report.fail(
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

fn number(s: &str) -> Option<u32> {
    s.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()
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
async fn permissions(client: &Client, report: &mut Report, namespace: &str) {
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
async fn adoptable(client: &Client, report: &mut Report) {
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

/// `--pre`: CRDs installed already (by `watcher-operator crds | kubectl apply`): before 1.25,
/// which stores them without their CEL rules, Helm 4's server-side apply of the chart's `crds/`
/// conflicts with kubectl's, and `helm install` needs `--skip-crds`.
async fn installed_crds(client: &Client, report: &mut Report, version: &k8s_openapi::apimachinery::pkg::version::Info) {
    const GROUP: &str = "permissions";
    const NAME: &str = "CRDs";
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    match api.get_opt("watchers.watcher.dev").await {
        Ok(None) => {
            report.pass(GROUP, NAME, "not installed yet: `helm install` and `kubectl apply -k deploy/` create them")
        }
        Ok(Some(_)) if stores_validation_rules(version) => report.pass(
            GROUP,
            NAME,
            "installed already: with Helm, `helm install --skip-crds` keeps them as they are (Helm 4 would apply \
             the chart's crds/ over them, a conflict wherever they differ); upgrade them with `watcher-operator crds \
             | kubectl apply --server-side -f -`",
        ),
        Ok(Some(_)) => report.warn(
            GROUP,
            NAME,
            format!(
                "installed already, and Kubernetes {} stores them without their CEL rules: Helm 4's apply of the \
                 chart's crds/ would conflict with the installed ones",
                version.git_version
            ),
            "with Helm, install the chart with `helm install --skip-crds` (`kubectl apply -k deploy/` needs nothing)",
        ),
        Err(error) => report.warn(
            GROUP,
            NAME,
            format!("cannot read the CRDs: {}", crate::causes(&error)),
            "check that you may get customresourcedefinitions",
        ),
    }
}

/// Why `helm install` would refuse to adopt `existing` (Helm adopts only objects labelled
/// `app.kubernetes.io/managed-by: Helm` with its release annotations), or `None`.
pub(crate) fn helm_adoption(existing: &MutatingWebhookConfiguration) -> Option<String> {
    let by_helm = existing.labels().get(watcher_api::MANAGED_BY_LABEL).is_some_and(|v| v == "Helm")
        && existing.annotations().contains_key("meta.helm.sh/release-name");
    if by_helm {
        return None;
    }
    let origin = match existing.annotations().get(CREATED_BY_RUN_ANNOTATION) {
        Some(url) => {
            format!("created by a run outside the cluster (--webhook-url {url}) that was not stopped gracefully")
        }
        None => "not installed by Helm (kubectl apply -k deploy/, or by hand)".to_owned(),
    };
    Some(format!(
        "MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} exists, {origin}: `helm install` will refuse to adopt it"
    ))
}

/// Every CRD of this binary: installed, established, and equal to this binary's as the API
/// server of `version` stores it.
async fn crds(client: &Client, report: &mut Report, version: &k8s_openapi::apimachinery::pkg::version::Info) {
    let stores_rules = stores_validation_rules(version);
    const GROUP: &str = "crds";
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for wanted in watcher_api::crds() {
        let name = wanted.name_any();
        let installed = match api.get_opt(&name).await {
            Ok(Some(installed)) => installed,
            Ok(None) => {
                report.fail(GROUP, &name, "not installed", &format!("install the CRDs: {APPLY_CRDS}"));
                continue;
            }
            Err(error) => {
                report.fail(GROUP, &name, format!("cannot read it: {error}"), "check your access: `kubectl get crd`");
                continue;
            }
        };
        let established = installed
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if !established {
            report.fail(
                GROUP,
                &name,
                "installed but not established: the API server does not serve it yet",
                &format!("`kubectl describe crd {name}` shows why (a name conflict, a schema error)"),
            );
            continue;
        }
        let wanted = if stores_rules { wanted } else { without_validation_rules(wanted) };
        match crd_difference(&wanted, &installed) {
            None if stores_rules => report.pass(GROUP, &name, "established, as this binary defines it"),
            None => report.pass(
                GROUP,
                &name,
                format!(
                    "established, as this binary defines it (Kubernetes {} stores no CEL rules: the schema checks them \
                     from 1.25)",
                    version.git_version
                ),
            ),
            Some(difference) => report.fail(
                GROUP,
                &name,
                difference,
                &format!("upgrade the CRDs to this binary's (Helm does not): {APPLY_CRDS}"),
            ),
        }
    }
}

/// Whether kube-apiserver of `version` keeps a CRD's `x-kubernetes-validations`: from 1.25 (the
/// CEL feature on by default). 1.24 stores a CRD without them (`crd-watchers-stored-1.24.json`),
/// which is not a difference from this binary's.
pub(crate) fn stores_validation_rules(version: &k8s_openapi::apimachinery::pkg::version::Info) -> bool {
    !matches!((number(&version.major), number(&version.minor)), (Some(1), Some(minor)) if minor < 25)
}

/// Drops every `x-kubernetes-validations` of `value`, as a server without CEL stores a CRD.
pub(crate) fn strip_validation_rules(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.remove("x-kubernetes-validations");
            fields.values_mut().for_each(strip_validation_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_validation_rules),
        _ => {}
    }
}

/// `crd` as a server without CEL stores it: every `x-kubernetes-validations` dropped.
fn without_validation_rules(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut value = serde_json::to_value(&crd).unwrap_or_default();
    strip_validation_rules(&mut value);
    serde_json::from_value(value).unwrap_or(crd)
}

/// How an installed CRD differs from this binary's, per served version and schema property.
fn crd_difference(wanted: &CustomResourceDefinition, installed: &CustomResourceDefinition) -> Option<String> {
    let version_names =
        |crd: &CustomResourceDefinition| crd.spec.versions.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
    for version in &wanted.spec.versions {
        let Some(theirs) = installed.spec.versions.iter().find(|v| v.name == version.name) else {
            return Some(format!(
                "version {} missing (installed: {}): older than this binary",
                version.name,
                version_names(installed).join(", ")
            ));
        };
        let schema = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            normalized(serde_json::to_value(&v.schema).unwrap_or_default())
        };
        let (ours, theirs) = (schema(version), schema(theirs));
        if ours == theirs {
            continue;
        }
        let (mut missing, mut extra) = (Vec::new(), Vec::new());
        property_paths(&ours["openAPIV3Schema"], "", &mut missing);
        property_paths(&theirs["openAPIV3Schema"], "", &mut extra);
        let only_ours: Vec<&String> = missing.iter().filter(|p| !extra.contains(p)).collect();
        let only_theirs: Vec<&String> = extra.iter().filter(|p| !missing.contains(p)).collect();
        // A missing object's own properties are missing too: name the object only, and say how
        // many more there are past five.
        let list = |paths: &[&String]| {
            let top: Vec<&str> = paths
                .iter()
                .map(|p| p.as_str())
                .filter(|p| {
                    !paths.iter().any(|q| {
                        p.strip_prefix(q.as_str()).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
                    })
                })
                .collect();
            let more = top.len().saturating_sub(5);
            let shown = top.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            if more == 0 { shown } else { format!("{shown} and {more} more") }
        };
        return Some(match (only_ours.is_empty(), only_theirs.is_empty()) {
            (false, _) => format!("older than this binary: {} lacks {}", version.name, list(&only_ours)),
            (true, false) => format!("newer than this binary: {} has {}", version.name, list(&only_theirs)),
            (true, true) => {
                let mut changed = Vec::new();
                keyword_differences(&ours["openAPIV3Schema"], &theirs["openAPIV3Schema"], "", &mut changed);
                format!(
                    "the {} schema differs from this binary's at {}",
                    version.name,
                    changed.iter().take(5).map(String::as_str).collect::<Vec<_>>().join(", ")
                )
            }
        });
    }
    None
}

/// Numbers compared by value (`0` and `0.0` alike), as the API server may return either.
fn normalized(value: Value) -> Value {
    match value {
        Value::Number(n) => n.as_f64().map_or(Value::Number(n), |f| json!(f)),
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, normalized(v))).collect()),
        other => other,
    }
}

/// Where two schemas with the same properties differ: `path (keyword)` for each keyword whose
/// value differs, as `spec.selector.matchLabels (maxProperties)`.
pub(crate) fn keyword_differences(ours: &Value, theirs: &Value, path: &str, out: &mut Vec<String>) {
    let (Some(ours), Some(theirs)) = (ours.as_object(), theirs.as_object()) else {
        if ours != theirs {
            out.push(format!("{} (type)", if path.is_empty() { "the root" } else { path }));
        }
        return;
    };
    let mut keys: Vec<&String> = ours.keys().chain(theirs.keys()).collect();
    keys.sort();
    keys.dedup();
    let null = Value::Null;
    for key in keys {
        let (a, b) = (ours.get(key).unwrap_or(&null), theirs.get(key).unwrap_or(&null));
        if a == b {
            continue;
        }
        match key.as_str() {
            "properties" => {
                for (name, nested) in a.as_object().into_iter().flatten() {
                    let at = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                    keyword_differences(nested, &b[name], &at, out);
                }
            }
            "items" | "additionalProperties" if a.is_object() && b.is_object() => {
                let suffix = if key == "items" { "[]" } else { "{}" };
                keyword_differences(a, b, &format!("{path}{suffix}"), out);
            }
            _ => out.push(format!("{} ({key})", if path.is_empty() { "the root" } else { path })),
        }
    }
}

/// The dotted paths of every property of a schema.
fn property_paths(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    for (key, nested) in schema["properties"].as_object().into_iter().flatten() {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        property_paths(nested, &path, out);
        property_paths(&nested["items"], &format!("{path}[]"), out);
        out.push(path);
    }
}

/// How the webhook is registered, as far as the later checks need it.
#[derive(Clone, Debug)]
pub(crate) struct Registered {
    /// The Service (`namespace`, `name`), when registered by Service.
    service: Option<(String, String)>,
    /// The selectors kube-apiserver applies.
    selectors: WebhookSelectors,
    /// The configuration as read.
    configuration: MutatingWebhookConfiguration,
}

/// The webhook configuration, its `clientConfig`, its `caBundle` against the serving
/// certificate the operator keeps, and its failure policy.
async fn registration(client: &Client, report: &mut Report, namespace: &str) -> Option<Registered> {
    const GROUP: &str = "registration";
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let configuration = match api.get_opt(WEBHOOK_CONFIGURATION).await {
        Ok(Some(configuration)) => configuration,
        Ok(None) => {
            report.fail(
                GROUP,
                "webhook configuration",
                format!("MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} not found: no pod is injected"),
                "install the operator (`helm install watcher-operator charts/watcher-operator -n watcher-system \
                 --create-namespace`, or `kubectl apply -k deploy/`); outside the cluster, \
                 `watcher-operator run --webhook-url https://HOST:8443/mutate` creates it",
            );
            return None;
        }
        Err(error) => {
            report.fail(
                GROUP,
                "webhook configuration",
                format!("cannot read MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}: {error}"),
                "check your access: `kubectl get mutatingwebhookconfigurations`",
            );
            return None;
        }
    };
    let Some(webhook) = configuration.webhooks.iter().flatten().next() else {
        report.fail(
            GROUP,
            "webhook configuration",
            format!("MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} has no webhooks"),
            "install it again: `kubectl apply -k deploy/` (or `helm upgrade`)",
        );
        return None;
    };
    let client_config = &webhook.client_config;
    let (service, url) = (client_config.service.as_ref(), client_config.url.as_deref());
    let (host, registered) = match (service, url) {
        (Some(s), None) => {
            let registered = Registered {
                service: Some((s.namespace.clone(), s.name.clone())),
                selectors: selectors(webhook),
                configuration: configuration.clone(),
            };
            report.pass(
                GROUP,
                "webhook configuration",
                format!("MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}, by Service {}/{}", s.namespace, s.name),
            );
            (format!("{}.{}.svc", s.name, s.namespace), registered)
        }
        (None, Some(url)) => {
            report.pass(
                GROUP,
                "webhook configuration",
                format!("MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}, by URL {url} (the operator runs outside the cluster)"),
            );
            let host =
                url.parse::<http::Uri>().ok().and_then(|u| u.host().map(|h| h.trim_matches(['[', ']']).to_owned()));
            let registered =
                Registered { service: None, selectors: selectors(webhook), configuration: configuration.clone() };
            (host.unwrap_or_default(), registered)
        }
        (service, _) => {
            let seen = if service.is_some() { "both service and url" } else { "neither service nor url" };
            report.fail(
                GROUP,
                "webhook configuration",
                format!("webhooks[0].clientConfig has {seen}; kube-apiserver needs exactly one"),
                "apply the install again: `kubectl apply -k deploy/` (it sets the Service and clears url)",
            );
            return None;
        }
    };
    failure_policy(report, webhook);
    ca_bundle(client, report, namespace, client_config.ca_bundle.as_ref(), &host).await;
    Some(registered)
}

/// The admission scope: which pods kube-apiserver sends the webhook (matchConditions, 1.28 or
/// later), compared with what the operator computes from the Watchers, ImagePolicies and
/// namespaces of the cluster; and whether required Watchers fail closed.
async fn admission_scope(
    client: &Client,
    report: &mut Report,
    namespace: &str,
    info: &k8s_openapi::apimachinery::pkg::version::Info,
    configuration: &MutatingWebhookConfiguration,
) {
    use watcher_controller::scope::{SCOPE_ANNOTATION, in_place, within_limits};
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
    let options = watcher_webhook::InjectOptions {
        excluded_namespaces: vec![namespace.to_owned()],
        native_sidecars: true,
        server_minor: None,
        ..Default::default()
    };
    let named = || namespaces.items.iter().map(|ns| (ns.metadata.name.as_deref().unwrap_or_default(), ns.labels()));
    let everywhere = watcher_webhook::cluster::everywhere(&own, &cluster, named(), &options);
    let defaults = pod_security_defaults(client, report, namespace, named()).await;
    pod_security(report, &everywhere, named(), &defaults, watcher_webhook::server_minor(&info.major, &info.minor));
    let scope = watcher_webhook::Scope::compute(&everywhere, &policies, named(), namespace);
    let summary = scope.summary();
    if !watcher_webhook::scope::supports_match_conditions(&info.major, &info.minor) {
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
        if summary.required > 0 {
            report.warn(
                GROUP,
                "required Watchers",
                format!(
                    "{} required, enforced only while the webhook answers: while it is unreachable their pods are admitted \
                     without them (required.watcher.dev needs matchConditions, Kubernetes 1.28 or later)",
                    summary.required
                ),
                "upgrade to Kubernetes 1.28 or later, or set the webhook's failurePolicy: Fail (every pod of a served \
                 namespace is then refused while it is unreachable)",
            );
        }
        return;
    }
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

/// The ConfigMap that holds the operator's `--pod-security-config` (the chart's
/// `podSecurity.configuration`), key [`POD_SECURITY_CONFIG_KEY`].
pub(crate) const POD_SECURITY_CONFIG_MAP: &str = "watcher-operator-pod-security";
/// Its key.
pub(crate) const POD_SECURITY_CONFIG_KEY: &str = "pod-security.yaml";

/// What kube-apiserver's Pod Security admission enforces where a namespace sets no level,
/// learned as the operator learns it (dry-run pods in a namespace without labels), and whether
/// the operator's configuration (`podSecurity.configuration`) agrees. Returns what admission
/// judges by: the configuration when there is one, else what was learned.
async fn pod_security_defaults<'a>(
    client: &Client,
    report: &mut Report,
    namespace: &str,
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> watcher_webhook::pod_security::ClusterDefaults {
    use watcher_controller::pod_security_probe;
    const GROUP: &str = "admission";
    const NAME: &str = "pod security defaults";
    let configured = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(POD_SECURITY_CONFIG_MAP)
        .await
        .ok()
        .flatten()
        .and_then(|map| map.data?.remove(POD_SECURITY_CONFIG_KEY))
        .map(|text| crate::pod_security_config::parse(&text));
    let learned = match pod_security_probe::unlabelled_namespace(namespaces, namespace) {
        Some(probed) => pod_security_probe::probe(client, &probed).await,
        None => Err("every namespace sets a Pod Security label".to_owned()),
    };
    let mode = |d: &watcher_webhook::pod_security::ClusterDefaults, key: &str| {
        let level = d.defaults.get(key).map_or("privileged", String::as_str);
        let version = d.defaults.get(&format!("{key}-version")).map_or("latest", String::as_str);
        format!("{level}:{version}")
    };
    let seen = |d: &watcher_webhook::pod_security::ClusterDefaults| {
        format!("enforce {}, warn {}", mode(d, "enforce"), mode(d, "warn"))
    };
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
    defaults: &watcher_webhook::pod_security::ClusterDefaults,
    server: Option<u32>,
) {
    use watcher_webhook::pod_security::NamespaceLevels;
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
        match watcher_webhook::compliance(watcher, policy, server) {
            watcher_webhook::Compliance::CannotComply(checks) => refused.push(format!("{name}: {checks}")),
            watcher_webhook::Compliance::Adapted(fields) => {
                if fields.iter().any(|f| f.contains("runAsUser")) {
                    non_root.push(name);
                }
            }
            watcher_webhook::Compliance::AsWritten => {}
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

fn selectors(webhook: &MutatingWebhook) -> WebhookSelectors {
    WebhookSelectors { namespace: webhook.namespace_selector.clone(), object: webhook.object_selector.clone() }
}

fn failure_policy(report: &mut Report, webhook: &MutatingWebhook) {
    const GROUP: &str = "registration";
    let scoped = webhook.match_conditions.iter().flatten().any(|c| c.name == watcher_webhook::scope::SCOPE_CONDITION);
    match webhook.failure_policy.as_deref().unwrap_or("Fail") {
        "Ignore" => {
            report.pass(GROUP, "failure policy", "Ignore: pods are created, uninjected, while the webhook is down")
        }
        other if scoped => report.pass(
            GROUP,
            "failure policy",
            format!(
                "{other}: while the webhook is unreachable only the pods it could change are refused (matchConditions)"
            ),
        ),
        other => report.warn(
            GROUP,
            "failure policy",
            format!("{other}: no pod of a selected namespace can be created while the webhook is unreachable"),
            "set failurePolicy: Ignore (the default of deploy/ and the chart) unless every pod must be injected",
        ),
    }
}

/// The `caBundle`: present, readable, in date, and trusted by it the serving certificate the
/// operator keeps in Secret `watcher-operator-tls`, for the host kube-apiserver dials.
async fn ca_bundle(
    client: &Client,
    report: &mut Report,
    namespace: &str,
    bundle: Option<&k8s_openapi::ByteString>,
    host: &str,
) {
    const GROUP: &str = "registration";
    let logs = format!("see why in the operator's log: `kubectl -n {namespace} logs deploy/{OPERATOR_NAME}`");
    let Some(bundle) = bundle.filter(|b| !b.0.is_empty()) else {
        report.fail(
            GROUP,
            "caBundle",
            "empty: kube-apiserver cannot verify the webhook",
            &format!("the operator writes it when it runs (with cert-manager, its CA injector does); {logs}"),
        );
        return;
    };
    let bundle = String::from_utf8_lossy(&bundle.0);
    let now = SystemTime::now();
    match watcher_certs::CertInfo::all_from_pem(&bundle) {
        Ok(cas) if !cas.is_empty() => {
            if let Some(expired) = cas.iter().find(|ca| now >= ca.not_after || now < ca.not_before) {
                report.fail(
                    GROUP,
                    "caBundle",
                    format!("a CA is out of date (valid until {})", timestamp(expired.not_after)),
                    &format!("the operator renews it while it runs; {logs}"),
                );
                return;
            }
            let until = cas.iter().map(|ca| ca.not_after).max().unwrap_or(now);
            report.pass(GROUP, "caBundle", format!("{} CA(s), valid until {}", cas.len(), timestamp(until)));
        }
        _ => {
            report.fail(GROUP, "caBundle", "not a PEM certificate bundle", &format!("the operator writes it; {logs}"));
            return;
        }
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    let serving = match secrets.get_opt(SECRET_NAME).await {
        Ok(Some(secret)) => {
            secret.data.and_then(|d| d.get("tls.crt").map(|c| String::from_utf8_lossy(&c.0).into_owned()))
        }
        Ok(None) => None,
        Err(error) => {
            report.fail(
                GROUP,
                "serving certificate",
                format!("cannot read Secret {namespace}/{SECRET_NAME}: {error}"),
                "check your access, or pass the operator's namespace with -n",
            );
            return;
        }
    };
    let Some(serving) = serving else {
        report.fail(
            GROUP,
            "serving certificate",
            format!("Secret {namespace}/{SECRET_NAME} with tls.crt not found"),
            &format!("is the operator installed in namespace {namespace}? (pass -n) The operator creates it when it starts; {logs}"),
        );
        return;
    };
    match watcher_certs::verify_serving(&bundle, &serving, host, now) {
        Ok(()) => report.pass(
            GROUP,
            "serving certificate",
            format!("Secret {namespace}/{SECRET_NAME} is signed by the caBundle and valid for {host}"),
        ),
        Err(why) => report.fail(
            GROUP,
            "serving certificate",
            format!("Secret {namespace}/{SECRET_NAME} for {host}: {why}"),
            &format!("kube-apiserver refuses such a certificate; the operator re-issues it and the caBundle; {logs}"),
        ),
    }
}

fn timestamp(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).map(|t| t.strftime("%Y-%m-%d").to_string()).unwrap_or_default()
}

/// The Service's endpoints, the Deployment and the Lease; by URL, the first two are skipped.
async fn operator(client: &Client, report: &mut Report, namespace: &str, registered: Option<&Registered>) {
    const GROUP: &str = "operator";
    let by_url = registered.is_some_and(|r| r.service.is_none());
    if by_url {
        let skipped = "skipped: the webhook is registered by URL (the operator runs outside the cluster)";
        report.pass(GROUP, "Service endpoints", skipped);
        report.pass(GROUP, "Deployment", skipped);
    } else {
        let (service_namespace, service) = registered
            .and_then(|r| r.service.clone())
            .unwrap_or_else(|| (namespace.to_owned(), OPERATOR_NAME.to_owned()));
        endpoints(client, report, &service_namespace, &service).await;
        deployment(client, report, namespace).await;
    }
    lease(client, report, namespace, SystemTime::now()).await;
}

async fn endpoints(client: &Client, report: &mut Report, namespace: &str, name: &str) {
    const GROUP: &str = "operator";
    let pods = format!("kubectl -n {namespace} get pods -l app.kubernetes.io/name={OPERATOR_NAME}");
    match Api::<Service>::namespaced(client.clone(), namespace).get_opt(name).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            return report.fail(
                GROUP,
                "Service endpoints",
                format!("Service {namespace}/{name}, which the webhook configuration names, not found"),
                "apply the install again: `kubectl apply -k deploy/` (or `helm upgrade`)",
            );
        }
        Err(error) => {
            return report.fail(
                GROUP,
                "Service endpoints",
                format!("cannot read Service {namespace}/{name}: {error}"),
                "check your access",
            );
        }
    }
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await;
    let ready = match slices {
        Ok(list) => list
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            // The API: a missing `ready` means ready.
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
            .count(),
        Err(error) => {
            return report.fail(
                GROUP,
                "Service endpoints",
                format!("cannot list the EndpointSlices of Service {namespace}/{name}: {error}"),
                "check your access: `kubectl get endpointslices`",
            );
        }
    };
    if ready == 0 {
        report.fail(
            GROUP,
            "Service endpoints",
            format!("Service {namespace}/{name} has no ready endpoints: kube-apiserver cannot reach the webhook"),
            &format!(
                "are the operator's pods running and ready? `{pods}`, then `kubectl -n {namespace} describe pods`"
            ),
        );
    } else {
        report.pass(GROUP, "Service endpoints", format!("Service {namespace}/{name} has {ready} ready endpoint(s)"));
    }
}

async fn deployment(client: &Client, report: &mut Report, namespace: &str) {
    const GROUP: &str = "operator";
    let describe = format!("`kubectl -n {namespace} describe deployment {OPERATOR_NAME}`");
    match Api::<Deployment>::namespaced(client.clone(), namespace).get_opt(OPERATOR_NAME).await {
        Ok(Some(deployment)) => {
            match pods_that_end(&deployment) {
                Ok(message) => report.pass(GROUP, "pods that end", message),
                Err(message) => report.warn(
                    GROUP,
                    "pods that end",
                    message,
                    "add `pods` to WATCHER_CONTROLLERS (chart value `controllers`): Jobs, CronJobs and Ats whose \
                     Watcher sidecar is a regular container never end without it (docs/injection.md)",
                ),
            }
            let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let available = deployment.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0);
            if available > 0 {
                report.pass(
                    GROUP,
                    "Deployment",
                    format!("{namespace}/{OPERATOR_NAME}: {available} of {wanted} replicas available"),
                );
            } else {
                report.fail(
                    GROUP,
                    "Deployment",
                    format!("{namespace}/{OPERATOR_NAME}: 0 of {wanted} replicas available"),
                    &format!(
                        "{describe} and `kubectl -n {namespace} get pods` show why (image pull, probes, scheduling)"
                    ),
                );
            }
        }
        Ok(None) => report.fail(
            GROUP,
            "Deployment",
            format!("Deployment {namespace}/{OPERATOR_NAME} not found"),
            "install the operator, or pass its namespace with -n",
        ),
        Err(error) => report.fail(GROUP, "Deployment", format!("cannot read it: {error}"), "check your access"),
    }
}

/// Whether the installed operator ends the regular sidecars of pods that are meant to end: it
/// runs the `pods` controller (its `--controllers` or `WATCHER_CONTROLLERS`, default all), and
/// with which supervisor image.
pub(crate) fn pods_that_end(deployment: &Deployment) -> Result<String, String> {
    let template = deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let container = template.and_then(|s| s.containers.first());
    let env = |name: &str| {
        let vars = container.and_then(|c| c.env.as_ref());
        vars.into_iter().flatten().find(|e| e.name == name).and_then(|e| e.value.clone())
    };
    let flag = |name: &str| {
        let args = container.and_then(|c| c.args.as_ref());
        let prefix = format!("--{name}=");
        args.into_iter().flatten().find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
    };
    let controllers = flag("controllers").or_else(|| env("WATCHER_CONTROLLERS"));
    let image = flag("supervisor-image")
        .or_else(|| env("WATCHER_SUPERVISOR_IMAGE"))
        .unwrap_or_else(|| watcher_api::DEFAULT_SUPERVISOR_IMAGE.to_owned());
    match controllers {
        Some(list) if !list.split(',').any(|c| c.trim() == "pods") => Err(format!(
            "the operator runs the controllers {list}, not `pods`: the regular sidecars of pods that are meant to \
             end (Jobs, CronJobs, Ats) are never ended"
        )),
        _ => Ok(format!(
            "the `pods` controller ends the regular sidecars of pods that are meant to end (supervisor image {image})"
        )),
    }
}

/// The Lease of the replica that runs the controllers: held, and renewed within its duration.
async fn lease(client: &Client, report: &mut Report, namespace: &str, now: SystemTime) {
    const GROUP: &str = "operator";
    let logs = format!("`kubectl -n {namespace} get pods` and `kubectl -n {namespace} logs deploy/{OPERATOR_NAME}`");
    let lease = match Api::<Lease>::namespaced(client.clone(), namespace).get_opt(OPERATOR_NAME).await {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            return report.warn(
                GROUP,
                "leader Lease",
                format!("Lease {namespace}/{OPERATOR_NAME} not found: no replica has led (or leader election is off)"),
                &format!(
                    "the controllers run in the Lease holder; with --leader-election=false there is none. Else {logs}"
                ),
            );
        }
        Err(error) => {
            return report.fail(GROUP, "leader Lease", format!("cannot read it: {error}"), "check your access");
        }
    };
    let spec = lease.spec.unwrap_or_default();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    let renewed = spec.renew_time.map(|t| SystemTime::from(t.0));
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(0).unsigned_abs().into());
    match (holder, renewed) {
        (Some(holder), Some(renewed)) if now < renewed + duration => report.pass(
            GROUP,
            "leader Lease",
            format!("held by {holder}, renewed {} ago: the controllers run", ago(now, renewed)),
        ),
        (Some(holder), Some(renewed)) => report.fail(
            GROUP,
            "leader Lease",
            format!(
                "held by {holder}, last renewed {} ago (it lasts {}s): no replica runs the controllers",
                ago(now, renewed),
                duration.as_secs()
            ),
            &format!("the holder stopped or lost the API server; {logs}"),
        ),
        _ => report.fail(
            GROUP,
            "leader Lease",
            format!("Lease {namespace}/{OPERATOR_NAME} is not held: no replica runs the controllers"),
            &logs,
        ),
    }
}

fn ago(now: SystemTime, then: SystemTime) -> String {
    let seconds = now.duration_since(then).unwrap_or_default().as_secs();
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        _ => format!("{}h", seconds / 3600),
    }
}

/// The dry-run pod `check` sends through kube-apiserver: asks for the probe, passes the
/// `restricted` Pod Security level, is never stored.
pub(crate) fn probe_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "watcher-operator-probe-",
                     "labels": {"app.kubernetes.io/name": "watcher-operator-probe"},
                     "annotations": {PROBE_ANNOTATION: "check"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10",
                            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
        },
    }))
    .unwrap_or_default()
}

/// The admission probe: a server-side dry run of [`probe_pod`] must come back with the
/// webhook's patch.
async fn probe(client: &Client, report: &mut Report, options: &CheckOptions, registered: Option<&Registered>) {
    const GROUP: &str = "admission";
    const NAME: &str = "admission probe";
    let target = &options.probe_namespace;
    let pod = probe_pod();
    let namespace = match Api::<Namespace>::all(client.clone()).get_opt(target).await {
        Ok(Some(namespace)) => namespace,
        Ok(None) => {
            return report.fail(
                GROUP,
                NAME,
                format!("namespace {target} not found"),
                "pass --probe-namespace NS, a namespace the webhook serves",
            );
        }
        Err(error) => {
            return report.fail(GROUP, NAME, format!("cannot read namespace {target}: {error}"), "check your access");
        }
    };
    if let Some(registered) = registered {
        let namespace_labels = namespace.metadata.labels.unwrap_or_default();
        let injection = InjectOptions {
            excluded_namespaces: vec![options.namespace.clone()],
            native_sidecars: true,
            server_minor: None,
            ..Default::default()
        };
        if let Some(reason) = exclusion(target, &namespace_labels, pod.labels(), &registered.selectors, &injection) {
            return report.fail(
                GROUP,
                NAME,
                format!("namespace {target} is never sent to the webhook ({reason:?})"),
                "pass --probe-namespace NS, a namespace the webhook serves",
            );
        }
    }
    let params = PostParams { dry_run: true, ..PostParams::default() };
    match Api::<Pod>::namespaced(client.clone(), target).create(&params, &pod).await {
        Ok(answered) => match answered.annotations().get(PROBED_ANNOTATION) {
            Some(version) => report.pass(
                GROUP,
                NAME,
                format!("a dry-run pod in {target} came back patched by the webhook (watcher-operator {version})"),
            ),
            None => {
                let cause = likely_cause(report);
                report.fail(
                    GROUP,
                    NAME,
                    format!(
                        "a dry-run pod in {target} came back without the webhook's patch: kube-apiserver did not \
                         reach the webhook (failurePolicy Ignore let the pod through without an error){cause}"
                    ),
                    "fix the failed checks above; kube-apiserver's log names the error (`failed calling webhook`)",
                );
            }
        },
        Err(kube::Error::Api(status)) if status.code == 403 => report.fail(
            GROUP,
            NAME,
            format!("you may not create pods in {target}, even as a dry run: {}", status.message),
            "run `check` as a user who may create pods, or pass --probe-namespace NS",
        ),
        Err(error) => report.fail(
            GROUP,
            NAME,
            format!("the dry-run pod in {target} was refused: {error}"),
            "with failurePolicy Fail an unreachable webhook refuses every pod: fix the failed checks above",
        ),
    }
}

/// The first failed check of registration and operator, as " (likely cause: ...)".
fn likely_cause(report: &Report) -> String {
    report
        .checks
        .iter()
        .find(|c| c.status == Status::Failed && matches!(c.group, "registration" | "operator"))
        .map(|c| format!("; likely cause: {}: {}", c.name, c.message))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
