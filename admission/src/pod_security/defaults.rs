//! The cluster's Pod Security defaults (`AdmissionConfiguration`'s `defaults` and
//! `exemptions`), as configured or learned, and the channel that shares them.

use std::collections::BTreeMap;

use super::Level;

/// kube-apiserver's Pod Security admission configuration (`PodSecurityConfiguration`, from its
/// `--admission-control-config-file`): the levels of namespaces that set no label, and what is
/// exempt. The default (an unconfigured cluster) enforces nothing and exempts nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterDefaults {
    /// `enforce`, `enforce-version`, `audit`, `audit-version`, `warn`, `warn-version`: as the
    /// namespace labels of those names (without their `pod-security.kubernetes.io/` prefix).
    #[serde(default)]
    pub defaults: BTreeMap<String, String>,
    /// What Pod Security never judges.
    #[serde(default)]
    pub exemptions: Exemptions,
}

/// What a cluster's Pod Security admission exempts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exemptions {
    /// Requests of these users (their pods are not judged).
    #[serde(default)]
    pub usernames: Vec<String>,
    /// Pods of these RuntimeClasses.
    #[serde(default)]
    pub runtime_classes: Vec<String>,
    /// Pods of these namespaces.
    #[serde(default)]
    pub namespaces: Vec<String>,
}

/// The cluster's Pod Security admission configuration as this process knows it (configured, or
/// learned from kube-apiserver), shared by admission and the controllers; a change is heard by
/// [`SharedDefaults::subscribe`].
#[derive(Clone, Debug)]
pub struct SharedDefaults(std::sync::Arc<tokio::sync::watch::Sender<std::sync::Arc<ClusterDefaults>>>);

impl Default for SharedDefaults {
    fn default() -> Self {
        Self(std::sync::Arc::new(tokio::sync::watch::Sender::new(std::sync::Arc::default())))
    }
}

impl SharedDefaults {
    /// The configuration now.
    pub fn get(&self) -> std::sync::Arc<ClusterDefaults> {
        self.0.borrow().clone()
    }

    /// Replaces it (subscribers hear of it when it differs).
    pub fn set(&self, defaults: ClusterDefaults) {
        self.0.send_if_modified(|current| {
            let changed = **current != defaults;
            if changed {
                *current = std::sync::Arc::new(defaults);
            }
            changed
        });
    }

    /// Marked on every change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<std::sync::Arc<ClusterDefaults>> {
        self.0.subscribe()
    }
}

/// The keys of `defaults`.
pub(super) const DEFAULT_KEYS: [&str; 6] =
    ["enforce", "enforce-version", "audit", "audit-version", "warn", "warn-version"];

impl ClusterDefaults {
    /// No defaults, no exemptions: a cluster without Pod Security configuration.
    pub const NONE: Self = Self {
        defaults: BTreeMap::new(),
        exemptions: Exemptions { usernames: Vec::new(), runtime_classes: Vec::new(), namespaces: Vec::new() },
    };

    /// The default of a namespace label (`pod-security.kubernetes.io/enforce`, ...).
    pub(super) fn default_of(&self, label: &str) -> Option<&str> {
        self.defaults.get(label.strip_prefix("pod-security.kubernetes.io/")?).map(String::as_str)
    }

    /// What is wrong with it, each problem naming its field (as kube-apiserver refuses such a
    /// configuration at its start).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (key, value) in &self.defaults {
            if !DEFAULT_KEYS.contains(&key.as_str()) {
                problems.push(format!("defaults.{key}: unknown, expected one of {}", DEFAULT_KEYS.join(", ")));
            } else if key.ends_with("-version") {
                let valid = value == "latest"
                    || value
                        .strip_prefix("v1.")
                        .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
                if !valid {
                    problems.push(format!("defaults.{key}: {value:?} is not \"latest\" nor \"v1.<minor>\""));
                }
            } else if Level::parse(value).is_none() {
                problems.push(format!("defaults.{key}: {value:?} is not privileged, baseline nor restricted"));
            }
        }
        problems
    }

    /// Whether a pod created by `username`, of RuntimeClass `runtime_class`, is exempt.
    pub fn exempts(&self, username: Option<&str>, runtime_class: Option<&str>) -> bool {
        let listed = |list: &[String], value: Option<&str>| value.is_some_and(|v| list.iter().any(|l| l == v));
        listed(&self.exemptions.usernames, username) || listed(&self.exemptions.runtime_classes, runtime_class)
    }

    /// How it reads in a sentence: `enforce=baseline, warn=restricted; exempt: namespaces a, b`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.defaults.is_empty() {
            parts.push("no defaults".to_owned());
        } else {
            parts.push(self.defaults.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "));
        }
        let exempt = [
            ("users", &self.exemptions.usernames),
            ("runtimeClasses", &self.exemptions.runtime_classes),
            ("namespaces", &self.exemptions.namespaces),
        ];
        let exempt: Vec<String> =
            exempt.iter().filter(|(_, l)| !l.is_empty()).map(|(what, l)| format!("{what} {}", l.join(", "))).collect();
        if !exempt.is_empty() {
            parts.push(format!("exempt: {}", exempt.join("; ")));
        }
        parts.join("; ")
    }
}
