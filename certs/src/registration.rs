//! The webhook's registration: where kube-apiserver sends admission requests, and which CA it
//! trusts, in MutatingWebhookConfiguration `watcher-operator`.
//!
//! The operator owns `clientConfig` whole on every webhook of that configuration, by Service or
//! by URL, so switching between the two (an install from `deploy/` run outside the cluster with
//! `--webhook-url`, and back) leaves exactly one of `service` and `url`. A merge or an apply
//! could not: the field the other mode set stays, owned by whoever wrote it, and the API server
//! refuses a webhook with both. The write is a full update carrying the resourceVersion that was
//! read, so a concurrent edit makes it a conflict, never a lost write.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ServiceReference, WebhookClientConfig,
};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tracing::{info, warn};

use crate::Result;

/// The MutatingWebhookConfiguration the operator keeps.
pub const WEBHOOK_CONFIGURATION: &str = "watcher-operator";
/// The path the webhook serves (also in `deploy/webhook.yaml`).
pub const WEBHOOK_PATH: &str = "/mutate";
/// The port of the Service in front of the webhook (`deploy/service.yaml`).
pub const SERVICE_PORT: i32 = 443;

/// How kube-apiserver reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// Through the Service in front of the operator's pods (installed from `deploy/`, which
    /// creates the configuration).
    Service {
        /// The Service's name.
        name: String,
        /// The Service's namespace: the operator's own.
        namespace: String,
    },
    /// At this URL (the operator runs outside the cluster); the configuration is created when
    /// absent.
    Url(String),
}

/// What a registration pass did.
#[derive(Debug, PartialEq, Eq)]
pub enum Registered {
    /// The configuration already pointed at the webhook with this bundle.
    Unchanged,
    /// The configuration was created or updated.
    Written,
    /// Someone else wrote the configuration between the read and the write: try again.
    Conflict,
    /// There is no configuration to update (registration by Service without `deploy/`).
    Missing,
}

impl Registration {
    /// The `clientConfig` every webhook of the configuration gets.
    pub fn client_config(&self, ca_bundle: &ByteString) -> WebhookClientConfig {
        let (service, url) = match self {
            Self::Service { name, namespace } => {
                let service = ServiceReference {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    path: Some(WEBHOOK_PATH.to_owned()),
                    port: Some(SERVICE_PORT),
                };
                (Some(service), None)
            }
            Self::Url(url) => (None, Some(url.clone())),
        };
        WebhookClientConfig { ca_bundle: Some(ca_bundle.clone()), service, url }
    }

    /// Points the configuration at the webhook with `ca_bundle`: one GET, and a write only when
    /// something differs.
    pub async fn register(&self, client: &Client, namespace: &str, ca_bundle: &ByteString) -> Result<Registered> {
        let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
        let client_config = self.client_config(ca_bundle);
        let written = match api.get_opt(WEBHOOK_CONFIGURATION).await? {
            Some(mut existing) => {
                if !set_client_config(&mut existing, &client_config) {
                    return Ok(Registered::Unchanged);
                }
                api.replace(WEBHOOK_CONFIGURATION, &PostParams::default(), &existing).await
            }
            None => match self {
                Self::Url(_) => {
                    let desired = webhook_configuration(client_config, namespace);
                    api.create(&PostParams::default(), &desired).await
                }
                Self::Service { .. } => {
                    warn!(
                        "MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} not found: install deploy/, \
                         or run with --webhook-url"
                    );
                    return Ok(Registered::Missing);
                }
            },
        };
        match written {
            Ok(_) => {
                info!(registration = ?self, "registered the webhook in MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}");
                Ok(Registered::Written)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Registered::Conflict),
            Err(error) => Err(error.into()),
        }
    }
}

/// Sets `client_config` on every webhook of the configuration, replacing what was there (a
/// `service` where a `url` belongs, or the reverse); returns whether anything changed.
pub fn set_client_config(
    configuration: &mut MutatingWebhookConfiguration,
    client_config: &WebhookClientConfig,
) -> bool {
    let mut changed = false;
    for webhook in configuration.webhooks.iter_mut().flatten() {
        if &webhook.client_config != client_config {
            webhook.client_config = client_config.clone();
            changed = true;
        }
    }
    changed
}

/// The whole configuration, as `deploy/webhook.yaml` has it, for a registration by URL that
/// finds none.
pub fn webhook_configuration(client_config: WebhookClientConfig, namespace: &str) -> MutatingWebhookConfiguration {
    let excluded: Vec<&str> = ["kube-system", "kube-public", "kube-node-lease", namespace].into();
    let mut configuration: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION,
                     "labels": {watcher_api::MANAGED_BY_LABEL: watcher_api::MANAGED_BY}},
        "webhooks": [{
            "name": "inject.watcher.dev",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded},
                {"key": watcher_api::INJECTION_LABEL, "operator": "NotIn", "values": [watcher_api::INJECTION_DISABLED]},
            ]},
            "objectSelector": {},
        }],
    }))
    .unwrap_or_default();
    set_client_config(&mut configuration, &client_config);
    configuration
}

#[cfg(test)]
mod tests;
