//! What kube-apiserver's Pod Security admission enforces in namespaces that set no level: its
//! `PodSecurityConfiguration` defaults (RKE2 and hardened distributions enforce `restricted`
//! or `baseline` by default), learned from the server itself. Two dry-run pods (never stored)
//! in a namespace without Pod Security labels: one that fails `baseline` (privileged), one that
//! passes `baseline` and fails `restricted` (a container that sets nothing). A refusal names the
//! enforced level and its version (`violates PodSecurity "baseline:latest"`), a warning the
//! level warned about (`would violate PodSecurity "restricted:latest"`). The audit level and
//! the exemptions cannot be seen so; a configuration (`--pod-security-config`) says them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use watcher_admission::pod_security::ClusterDefaults;

/// The dry-run pods' name.
pub const PROBE_POD: &str = "watcher-operator-pod-security-probe";

/// What the probes found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The namespace probed.
    pub namespace: String,
    /// The defaults seen: `enforce` (and `enforce-version`), `warn` (and `warn-version`) where
    /// a probe showed them.
    pub defaults: ClusterDefaults,
}

/// A namespace of `namespaces` (name, labels) without Pod Security labels: `preferred` if it
/// is one, else `default`, else the first.
pub fn unlabelled_namespace<'a>(
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
    preferred: &str,
) -> Option<String> {
    let unlabelled: Vec<&str> = namespaces
        .into_iter()
        .filter(|(_, labels)| !labels.keys().any(|k| k.starts_with("pod-security.kubernetes.io/")))
        .map(|(name, _)| name)
        .collect();
    [preferred, "default"]
        .into_iter()
        .find(|n| unlabelled.contains(n))
        .or_else(|| unlabelled.first().copied())
        .map(str::to_owned)
}

/// Why the cluster's Pod Security defaults could not be learned.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Every namespace sets a Pod Security label: no namespace shows the defaults.
    #[error("every namespace sets a Pod Security label: nothing to probe")]
    NoUnlabelledNamespace,
    /// The dry run did not reach kube-apiserver, or its answer could not be read.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The request could not be made.
    #[error("{0}")]
    Request(String),
    /// Something other than Pod Security refused the dry-run pod (a webhook, a quota, RBAC).
    #[error("the dry-run pod in namespace {namespace} was refused ({status}): {message}")]
    Refused {
        /// Where it was created.
        namespace: String,
        /// The HTTP status.
        status: http::StatusCode,
        /// What kube-apiserver said.
        message: String,
    },
}

/// Probes `namespace` (which must set no Pod Security label).
pub async fn probe(client: &Client, namespace: &str) -> Result<Learned, ProbeError> {
    let privileged = dry_run(client, namespace, json!({"privileged": true})).await?;
    let plain = dry_run(client, namespace, json!({})).await?;
    let mut defaults = BTreeMap::new();
    match (&privileged.refused, &plain.refused) {
        (Some(policy), _) | (None, Some(policy)) => insert(&mut defaults, "enforce", policy),
        (None, None) => {
            defaults.insert("enforce".to_owned(), "privileged".to_owned());
        }
    }
    if let Some(warned) = privileged.warned.as_ref().or(plain.warned.as_ref()) {
        insert(&mut defaults, "warn", warned);
    }
    Ok(Learned {
        namespace: namespace.to_owned(),
        defaults: ClusterDefaults { defaults, ..ClusterDefaults::default() },
    })
}

/// `level:version` as the configuration's two keys.
fn insert(defaults: &mut BTreeMap<String, String>, mode: &str, policy: &str) {
    let (level, version) = policy.split_once(':').unwrap_or((policy, "latest"));
    defaults.insert(mode.to_owned(), level.to_owned());
    defaults.insert(format!("{mode}-version"), version.to_owned());
}

/// What Pod Security said of one dry-run pod: the policy it was refused for, and the one a
/// warning named.
#[derive(Debug, Default)]
struct Said {
    refused: Option<String>,
    warned: Option<String>,
}

/// Creates the probe pod, with `context` as its container's securityContext, as a server-side
/// dry run; a refusal by anything but Pod Security is an error (nothing learned).
async fn dry_run(client: &Client, namespace: &str, context: serde_json::Value) -> Result<Said, ProbeError> {
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": PROBE_POD, "labels": {"app.kubernetes.io/name": "watcher-operator"}},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.9", "securityContext": context}]}}))
    .map_err(|e| ProbeError::Request(e.to_string()))?;
    let params = PostParams { dry_run: true, field_manager: Some(watcher_api::FIELD_MANAGER.to_owned()) };
    let url = Api::<Pod>::namespaced(client.clone(), namespace).resource_url().to_owned();
    let request = kube::core::Request::new(url)
        .create(&params, serde_json::to_vec(&pod).map_err(|e| ProbeError::Request(e.to_string()))?)
        .map_err(|e| ProbeError::Request(e.to_string()))?;
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let warnings: Vec<String> =
        response.headers().get_all("warning").iter().filter_map(|v| v.to_str().ok().map(str::to_owned)).collect();
    let status = response.status();
    let body = response.into_body().collect_bytes().await.map_err(|e| ProbeError::Request(e.to_string()))?;
    let warned = warnings.iter().find_map(|w| quoted_policy(w, "would violate PodSecurity \\\""));
    if status.is_success() {
        return Ok(Said { refused: None, warned });
    }
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    match quoted_policy(&message, "violates PodSecurity \"") {
        Some(policy) => Ok(Said { refused: Some(policy), warned }),
        None => Err(ProbeError::Refused { namespace: namespace.to_owned(), status, message }),
    }
}

/// The `level:version` after `prefix`, up to the next quote (escaped in a warning header).
fn quoted_policy(text: &str, prefix: &str) -> Option<String> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let end = rest.find(['"', '\\'])?;
    let policy = &rest[..end];
    policy.contains(':').then(|| policy.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_the_servers_words() {
        let refused = "pods \"p\" is forbidden: violates PodSecurity \"baseline:v1.30\": privileged (...)";
        assert_eq!(quoted_policy(refused, "violates PodSecurity \""), Some("baseline:v1.30".into()));
        let warning = r#"299 - "would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false""#;
        assert_eq!(quoted_policy(warning, "would violate PodSecurity \\\""), Some("restricted:latest".into()));
        assert_eq!(quoted_policy("denied by a webhook", "violates PodSecurity \""), None);
        let mut defaults = BTreeMap::new();
        insert(&mut defaults, "enforce", "baseline:v1.30");
        assert_eq!(defaults["enforce"], "baseline");
        assert_eq!(defaults["enforce-version"], "v1.30");
    }

    #[test]
    fn the_probe_goes_where_no_level_is_set() {
        let labelled = BTreeMap::from([("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned())]);
        let none = BTreeMap::new();
        let namespaces = [("watcher-system", &labelled), ("default", &none), ("team-a", &none)];
        assert_eq!(unlabelled_namespace(namespaces, "watcher-system").as_deref(), Some("default"));
        assert_eq!(unlabelled_namespace(namespaces, "team-a").as_deref(), Some("team-a"));
        assert_eq!(unlabelled_namespace([("watcher-system", &labelled)], "watcher-system"), None);
    }
}
