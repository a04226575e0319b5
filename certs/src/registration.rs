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
//!
//! What a run by URL did is also written on the object, so that a run stopped without a chance
//! to undo it (SIGKILL, a crash, a closed terminal) leaves nothing a later run mistakes for an
//! installation: a configuration it created carries [`CREATED_BY_RUN_ANNOTATION`], one it took
//! over carries the `clientConfig` it replaced in [`REPLACED_ANNOTATION`]. A later run by URL
//! that finds either undoes the first run's work on its own graceful stop (deletes, or restores
//! what the first run replaced), instead of restoring the first run's URL.

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
pub use watcher_api::{CREATED_BY_RUN_ANNOTATION, REPLACED_REGISTRATION_ANNOTATION as REPLACED_ANNOTATION};

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
    /// The form of `client_config`.
    pub fn of(client_config: &WebhookClientConfig) -> Self {
        Self { service: client_config.service.clone(), url: client_config.url.clone() }
    }
}

/// `Service NAMESPACE/NAME:PORT/PATH` (as kube-apiserver calls it), for people.
fn fmt_service(service: &ServiceReference, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    write!(f, "Service {}/{}:{}", service.namespace, service.name, service.port.unwrap_or(SERVICE_PORT))?;
    match service.path.as_deref() {
        Some(path) if path.starts_with('/') => f.write_str(path),
        Some(path) => write!(f, "/{path}"),
        None => Ok(()),
    }
}

impl std::fmt::Display for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.service, &self.url) {
            (Some(s), None) => fmt_service(s, f),
            (None, Some(url)) => write!(f, "URL {url}"),
            (None, None) => f.write_str("neither Service nor URL"),
            (Some(s), Some(url)) => {
                fmt_service(s, f)?;
                write!(f, " and URL {url}")
            }
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

    /// Whether `client_config` reaches the webhook this way (whatever its `caBundle`).
    pub fn is_form_of(&self, client_config: &WebhookClientConfig) -> bool {
        Form::of(client_config) == self.form()
    }
}

impl std::fmt::Display for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.form().fmt(f)
    }
}

/// What the configuration was before this operator first wrote it (or before the run by URL
/// that left it), to restore on a stop.
#[derive(Clone, Debug, PartialEq)]
enum Replaced {
    /// There was none: this run, or an earlier run by URL, created it.
    Nothing,
    /// Its webhooks' `clientConfig`, `caBundle` included (all alike, as every writer keeps them).
    ClientConfig(WebhookClientConfig),
}

/// What a graceful stop does, for people: never the `caBundle`'s bytes.
impl std::fmt::Display for Replaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nothing => f.write_str("delete the configuration (created by a run by URL)"),
            Self::ClientConfig(previous) => write!(f, "restore the registration by {}", Form::of(previous)),
        }
    }
}

/// What a graceful stop of a run by URL will undo, read from a configuration it found: a
/// configuration in URL form that an earlier run by URL created or took over (and could not
/// undo: it was killed) is that run's leftover, undone as that run would have; otherwise the
/// form it replaces, when it replaces one.
fn to_undo(existing: &MutatingWebhookConfiguration, foreign: Option<&WebhookClientConfig>) -> Option<Replaced> {
    let annotations = existing.metadata.annotations.as_ref();
    let by_url = existing.webhooks.iter().flatten().all(|w| w.client_config.url.is_some());
    if by_url && annotations.is_some_and(|a| a.contains_key(CREATED_BY_RUN_ANNOTATION)) {
        return Some(Replaced::Nothing);
    }
    let recorded = annotations.and_then(|a| a.get(REPLACED_ANNOTATION));
    if let Some(previous) = recorded.filter(|_| by_url).and_then(|json| serde_json::from_str(json).ok()) {
        return Some(Replaced::ClientConfig(previous));
    }
    foreign.cloned().map(Replaced::ClientConfig)
}

/// Records on the configuration what a run by URL must undo (so a run killed before its stop
/// leaves that knowledge behind), or clears the record when the operator registers by Service.
/// Returns whether anything changed.
fn record(
    configuration: &mut MutatingWebhookConfiguration,
    registration: &Registration,
    undo: Option<&Replaced>,
) -> bool {
    let annotations = configuration.metadata.annotations.get_or_insert_default();
    let before = annotations.clone();
    match (registration, undo) {
        (Registration::Url(url), Some(Replaced::Nothing)) => {
            annotations.remove(REPLACED_ANNOTATION);
            annotations.entry(CREATED_BY_RUN_ANNOTATION.to_owned()).or_insert_with(|| url.clone());
        }
        (Registration::Url(_), Some(Replaced::ClientConfig(previous))) => {
            annotations.remove(CREATED_BY_RUN_ANNOTATION);
            let json = serde_json::to_string(previous).unwrap_or_default();
            annotations.insert(REPLACED_ANNOTATION.to_owned(), json);
        }
        (Registration::Url(_), None) => {}
        (Registration::Service { .. }, _) => return clear_record(configuration),
    }
    let changed = *annotations != before;
    if annotations.is_empty() {
        configuration.metadata.annotations = None;
    }
    changed
}

/// Removes what a run by URL recorded on the configuration; returns whether there was any.
fn clear_record(configuration: &mut MutatingWebhookConfiguration) -> bool {
    let Some(annotations) = configuration.metadata.annotations.as_mut() else { return false };
    let cleared = [CREATED_BY_RUN_ANNOTATION, REPLACED_ANNOTATION].map(|key| annotations.remove(key).is_some());
    if annotations.is_empty() {
        configuration.metadata.annotations = None;
    }
    cleared.contains(&true)
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
        let first = !self.state().taken;
        let (written, undo) = match api.get_opt(WEBHOOK_CONFIGURATION).await? {
            Some(mut existing) => {
                let foreign = foreign_client_config(&existing, &mine).cloned();
                if let Some(other) = foreign.as_ref().filter(|_| !first) {
                    let other = Form::of(other);
                    let mut state = self.state();
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
                if foreign.is_none() && self.state().yielded_to.take().is_some() {
                    info!(registration = %self.registration, "the webhook is registered by this operator's form again");
                }
                let undo = if first { to_undo(&existing, foreign.as_ref()) } else { None };
                let recorded = first && record(&mut existing, &self.registration, undo.as_ref());
                if !set_client_config(&mut existing, &client_config) && !recorded {
                    self.took(first, undo);
                    return Ok(Registered::Unchanged);
                }
                (api.replace(WEBHOOK_CONFIGURATION, &PostParams::default(), &existing).await, undo)
            }
            None => match &self.registration {
                Registration::Url(_) => {
                    let mut desired = webhook_configuration(client_config, &self.namespace);
                    record(&mut desired, &self.registration, Some(&Replaced::Nothing));
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
                if first {
                    info!(
                        "registered the webhook in MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} by {}{}",
                        self.registration,
                        on_stop(&self.registration, undo.as_ref()),
                    );
                } else {
                    info!(registration = %self.registration, "updated the CA bundle of MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}");
                }
                self.took(first, undo);
                Ok(Registered::Written)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Registered::Conflict),
            Err(error) => Err(error.into()),
        }
    }

    /// Marks the registration as this operator's, and on the first pass what its stop undoes.
    fn took(&self, first: bool, undo: Option<Replaced>) {
        let mut state = self.state();
        if first {
            state.replaced = undo;
        }
        state.taken = true;
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
                    api.delete(WEBHOOK_CONFIGURATION, &params).await.map(|_| {
                        format!("deleted MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}, created by a run by URL")
                    })
                }
                Replaced::ClientConfig(previous) => {
                    set_client_config(&mut existing, previous);
                    clear_record(&mut existing);
                    api.replace(WEBHOOK_CONFIGURATION, &PostParams::default(), &existing).await.map(|_| {
                        format!(
                            "restored MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION} to the registration by {}",
                            Form::of(previous)
                        )
                    })
                }
            };
            match done {
                Ok(what) => {
                    info!("{what}");
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

/// The end of the start line: what a graceful stop will do.
fn on_stop(registration: &Registration, undo: Option<&Replaced>) -> String {
    match (registration, undo) {
        (Registration::Url(_), Some(undo)) => format!("; a graceful stop will {undo}"),
        (Registration::Url(_), None) => "; a graceful stop leaves it as it is".to_owned(),
        (Registration::Service { .. }, Some(Replaced::ClientConfig(previous))) => {
            format!(" (it was registered by {})", Form::of(previous))
        }
        (Registration::Service { .. }, _) => String::new(),
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
