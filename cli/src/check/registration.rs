//! The webhook's registration: the MutatingWebhookConfiguration, its failure policy and CA bundle.

use std::time::SystemTime;

use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use watcher_admission::WebhookSelectors;
use watcher_certs::registration::{CREATED_BY_RUN_ANNOTATION, WEBHOOK_CONFIGURATION};
use watcher_certs::secret::SECRET_NAME;

use super::{OPERATOR_NAME, Report};

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

/// How the webhook is registered, as far as the later checks need it.
#[derive(Clone, Debug)]
pub(crate) struct Registered {
    /// The Service (`namespace`, `name`), when registered by Service.
    pub(super) service: Option<(String, String)>,
    /// The selectors kube-apiserver applies.
    pub(super) selectors: WebhookSelectors,
    /// The configuration as read.
    pub(super) configuration: MutatingWebhookConfiguration,
}

/// The webhook configuration, its `clientConfig`, its `caBundle` against the serving
/// certificate the operator keeps, and its failure policy.
pub(super) async fn registration(client: &Client, report: &mut Report, namespace: &str) -> Option<Registered> {
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

pub(super) fn selectors(webhook: &MutatingWebhook) -> WebhookSelectors {
    WebhookSelectors { namespace: webhook.namespace_selector.clone(), object: webhook.object_selector.clone() }
}

pub(super) fn failure_policy(report: &mut Report, webhook: &MutatingWebhook) {
    const GROUP: &str = "registration";
    let scoped = webhook.match_conditions.iter().flatten().any(|c| c.name == watcher_admission::scope::SCOPE_CONDITION);
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
pub(super) async fn ca_bundle(
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

pub(super) fn timestamp(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time).map(|t| t.strftime("%Y-%m-%d").to_string()).unwrap_or_default()
}
