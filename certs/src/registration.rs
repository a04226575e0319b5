//! The webhook's registration: where kube-apiserver sends admission requests, and which CA it
//! trusts, in MutatingWebhookConfiguration `watcher-operator`.
//!
//! The operator owns `clientConfig` whole on every webhook of that configuration, by Service or
//! by URL, so switching between the two (an install from `deploy/` run outside the cluster with
//! `--webhook-url`, and back) leaves exactly one of `service` and `url`. A merge or an apply
//! could not: the field the other mode set stays, owned by whoever wrote it, and the API server
//! refuses a webhook with both. The write is a full update carrying the resourceVersion that was
//! read, so a concurrent edit makes it a conflict, never a lost write.
//!
//! Two operators that register differently (one run outside the cluster by URL next to the
//! installed one, by Service) never rewrite the configuration back and forth. An operator
//! takes the registration over once, when it starts; when it later finds another form in place,
//! that form stands: it logs a warning naming both and does not write again until the form in
//! place changes (back to its own, it resumes keeping the `caBundle`). A run by URL puts back,
//! on a graceful stop, what it replaced, or deletes the configuration it created.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ServiceReference, WebhookClientConfig,
};
use std::sync::Mutex;

use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
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
    /// Another operator's form stands (written after this one took the registration over).
    Yielded,
}

/// How a webhook is reached, without the CA bundle: what two operators can disagree on.
#[derive(Clone, Debug, PartialEq)]
pub struct Form {
    service: Option<ServiceReference>,
    url: Option<String>,
}

impl Form {
    fn of(client_config: &WebhookClientConfig) -> Self {
        Self { service: client_config.service.clone(), url: client_config.url.clone() }
    }
}

impl std::fmt::Display for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.service, &self.url) {
            (Some(s), None) => write!(f, "Service {}/{}", s.namespace, s.name),
            (None, Some(url)) => write!(f, "URL {url}"),
            (None, None) => f.write_str("neither Service nor URL"),
            (Some(s), Some(url)) => write!(f, "Service {}/{} and URL {url}", s.namespace, s.name),
        }
    }
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

    fn form(&self) -> Form {
        Form::of(&self.client_config(&ByteString(Vec::new())))
    }
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.form().fmt(f)
    }
}

/// What the configuration was before this operator first wrote it, to restore on a stop.
#[derive(Clone, Debug, PartialEq)]
enum Replaced {
    /// There was none: this operator created it.
    Nothing,
    /// Its webhooks' `clientConfig`, `caBundle` included (all alike, as every writer keeps them).
    ClientConfig(WebhookClientConfig),
}

#[derive(Debug, Default)]
struct State {
    /// Whether this operator has taken the registration over (or found its own form in place).
    taken: bool,
    /// What the first write replaced.
    replaced: Option<Replaced>,
    /// The other form this operator stands back from, once warned about.
    yielded_to: Option<Form>,
}

/// Keeps the registration of one operator: [`Registration`] plus what it has seen and done.
#[derive(Debug)]
pub struct Registrar {
    registration: Registration,
    /// The operator's namespace (excluded by a created configuration's namespaceSelector).
    namespace: String,
    state: Mutex<State>,
}

impl Registrar {
    /// A registrar that has not looked at the cluster yet.
    pub fn new(registration: Registration, namespace: impl Into<String>) -> Self {
        Self { registration, namespace: namespace.into(), state: Mutex::default() }
    }

    /// How this operator registers.
    pub fn registration(&self) -> &Registration {
        &self.registration
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Points the configuration at the webhook with `ca_bundle`: one GET, and a write only when
    /// something differs and this operator's form is the one that stands.
    pub async fn register(&self, client: &Client, ca_bundle: &ByteString) -> Result<Registered> {
        let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
        let client_config = self.registration.client_config(ca_bundle);
        let mine = Form::of(&client_config);
        let (written, replaced) = match api.get_opt(WEBHOOK_CONFIGURATION).await? {
            Some(mut existing) => {
                let foreign = foreign_client_config(&existing, &mine).cloned();
                {
                    let mut state = self.state();
                    match &foreign {
                        None => {
                            state.taken = true;
                            if state.yielded_to.take().is_some() {
                                info!(registration = %self.registration, "the webhook is registered by this operator's form again");
                            }
                        }
                        Some(other) if state.taken => {
                            let other = Form::of(other);
                            if state.yielded_to.as_ref() != Some(&other) {
                                warn!(
                                    "MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} is registered by {other}, written by another operator or a user after this one \
                                     registered by {}; leaving it as it is until it changes",
                                    self.registration
                                );
                                state.yielded_to = Some(other);
                            }
                            return Ok(Registered::Yielded);
                        }
                        Some(_) => {}
                    }
                }
                if !set_client_config(&mut existing, &client_config) {
                    return Ok(Registered::Unchanged);
                }
                let written = api.replace(WEBHOOK_CONFIGURATION, &PostParams::default(), &existing).await;
                (written, foreign.map(Replaced::ClientConfig))
            }
            None => match &self.registration {
                Registration::Url(_) => {
                    let desired = webhook_configuration(client_config, &self.namespace);
                    (api.create(&PostParams::default(), &desired).await, Some(Replaced::Nothing))
                }
                Registration::Service { .. } => {
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
                let mut state = self.state();
                if !state.taken {
                    info!(registration = %self.registration, replaced = ?replaced, "registered the webhook in MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}");
                    state.replaced = replaced;
                } else {
                    info!(registration = %self.registration, "updated the CA bundle of MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}");
                }
                state.taken = true;
                Ok(Registered::Written)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Registered::Conflict),
            Err(error) => Err(error.into()),
        }
    }

    /// On a graceful stop of a run by URL: puts back what the first write replaced (the
    /// Service form of an installed operator), or deletes the configuration it created. A
    /// configuration another operator has taken over since is left as it is; so is everything
    /// when registered by Service (replicas of the installed operator come and go).
    pub async fn restore(&self, client: &Client) -> Result<()> {
        if !matches!(self.registration, Registration::Url(_)) {
            return Ok(());
        }
        let Some(replaced) = self.state().replaced.clone() else { return Ok(()) };
        let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
        let mine = self.registration.form();
        for _ in 0..3 {
            let Some(mut existing) = api.get_opt(WEBHOOK_CONFIGURATION).await? else { return Ok(()) };
            if let Some(other) = foreign_client_config(&existing, &mine) {
                info!(registration = %Form::of(other), "the webhook registration was taken over since; leaving it");
                return Ok(());
            }
            let done = match &replaced {
                Replaced::Nothing => {
                    let preconditions =
                        Preconditions { resource_version: existing.metadata.resource_version.clone(), uid: None };
                    let params = DeleteParams { preconditions: Some(preconditions), ..DeleteParams::default() };
                    api.delete(WEBHOOK_CONFIGURATION, &params)
                        .await
                        .map(|_| "deleted the webhook configuration it created")
                }
                Replaced::ClientConfig(previous) => {
                    set_client_config(&mut existing, previous);
                    api.replace(WEBHOOK_CONFIGURATION, &PostParams::default(), &existing)
                        .await
                        .map(|_| "restored the webhook registration it replaced")
                }
            };
            match done {
                Ok(what) => {
                    info!(registration = ?replaced, "{what}");
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                Err(error) => return Err(error.into()),
            }
        }
        warn!("the webhook configuration kept changing; left as it is");
        Ok(())
    }
}

/// The first `clientConfig` of the configuration's webhooks that is not of `mine` form.
fn foreign_client_config<'a>(
    configuration: &'a MutatingWebhookConfiguration,
    mine: &Form,
) -> Option<&'a WebhookClientConfig> {
    configuration.webhooks.iter().flatten().map(|w| &w.client_config).find(|c| &Form::of(c) != mine)
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
