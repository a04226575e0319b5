//! Pod Security Standards, evaluated as kube-apiserver's Pod Security admission evaluates them:
//! the namespace's levels read from its labels, every `baseline` and `restricted` check with the
//! versions it applies to, and the failures in kube-apiserver's own words (checked against the
//! verdicts of real 1.24 and 1.36 servers in the tests).
//!
//! The webhook uses it to keep a pod that passes its namespace's enforced level passing once
//! the Watchers' containers are added ([`Adaptation`]), or to leave out a Watcher that cannot.

use std::collections::BTreeMap;
use std::fmt;

mod adapt;
mod checks;
mod defaults;
mod facts;

pub use adapt::{Adaptation, requires_non_root};
pub use defaults::{ClusterDefaults, Exemptions, SharedDefaults};
pub use facts::{ContainerFacts, PodFacts, volume_type};

/// The label that names the level a namespace enforces.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// The label that names the level a namespace warns about.
pub const WARN_LABEL: &str = "pod-security.kubernetes.io/warn";
/// The label that names the level a namespace audits.
pub const AUDIT_LABEL: &str = "pod-security.kubernetes.io/audit";

/// The newest Kubernetes minor version whose checks this evaluator knows; a server that does not
/// say its version is taken to be this one.
pub const NEWEST_MINOR: u32 = 37;

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Anything goes.
    Privileged,
    /// Known privilege escalations prevented.
    Baseline,
    /// Hardened, current best practice.
    Restricted,
}

impl Level {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "privileged" => Some(Self::Privileged),
            "baseline" => Some(Self::Baseline),
            "restricted" => Some(Self::Restricted),
            _ => None,
        }
    }

    /// The level as its label writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

/// A level at a version of the standards: `restricted:latest`, `baseline:v1.23`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The level.
    pub level: Level,
    /// The minor version of the standards (`v1.N`); `None` for `latest`, the server's own.
    pub version: Option<u32>,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            Some(minor) => write!(f, "{}:v1.{minor}", self.level.as_str()),
            None => write!(f, "{}:latest", self.level.as_str()),
        }
    }
}

impl Policy {
    /// The version of the checks a server of minor version `server` runs for this policy: the
    /// policy's own, never newer than the server's.
    fn minor_on(&self, server: u32) -> u32 {
        self.version.map_or(server, |v| v.min(server))
    }

    /// Whether the policy checks anything at all.
    pub fn checks_anything(&self) -> bool {
        self.level != Level::Privileged
    }
}

/// A namespace's Pod Security levels, as its labels set them (kube-apiserver's rules: a level
/// that cannot be read is enforced as `restricted:latest` and ignored for `warn` and `audit`;
/// `warn` defaults to a stricter `enforce`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamespaceLevels {
    /// What kube-apiserver refuses pods for (`None`: nothing, the namespace is unlabelled).
    pub enforce: Option<Policy>,
    /// What it warns about.
    pub warn: Option<Policy>,
    /// What it records in the audit log.
    pub audit: Option<Policy>,
}

impl NamespaceLevels {
    /// The levels the labels of a namespace set. An unlabelled namespace (the common case)
    /// costs three map look-ups.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        Self::from_lookup(|key| labels.get(key).map(String::as_str))
    }

    /// The levels, reading each label with `label` (no cluster-wide defaults).
    pub fn from_lookup<'a>(label: impl Fn(&str) -> Option<&'a str>) -> Self {
        static NONE: ClusterDefaults = ClusterDefaults::NONE;
        Self::from_lookup_with(label, &NONE)
    }

    /// The levels of a namespace whose labels `label` reads, where kube-apiserver's Pod
    /// Security admission configuration is `cluster`: a mode without its label has the
    /// configured default (each level and version on its own, as kube-apiserver reads them).
    pub fn from_lookup_with<'a>(label: impl Fn(&str) -> Option<&'a str>, cluster: &'a ClusterDefaults) -> Self {
        let get = |key: &str| label(key).or_else(|| cluster.default_of(key));
        let version = |key: &str| {
            get(key).and_then(|v| match v {
                "latest" => None,
                v => v.strip_prefix("v1.").and_then(|minor| minor.parse::<u32>().ok()),
            })
        };
        let enforce = get(ENFORCE_LABEL).map(|value| Policy {
            // An unreadable level is enforced as the strictest, as kube-apiserver does.
            level: Level::parse(value).unwrap_or(Level::Restricted),
            version: version("pod-security.kubernetes.io/enforce-version"),
        });
        let read = |key: &str, version_key: &str| {
            get(key).and_then(Level::parse).map(|level| Policy { level, version: version(version_key) })
        };
        let mut warn = read(WARN_LABEL, "pod-security.kubernetes.io/warn-version");
        let audit = read(AUDIT_LABEL, "pod-security.kubernetes.io/audit-version");
        // Without its own label, `warn` follows an `enforce` label that is stricter.
        let readable_enforce = label(ENFORCE_LABEL).and_then(Level::parse);
        if label(WARN_LABEL).is_none()
            && let (Some(level), Some(enforce)) = (readable_enforce, enforce)
            && level > warn.map_or(Level::Privileged, |w| w.level)
        {
            let version = match label("pod-security.kubernetes.io/warn-version") {
                Some(_) => version("pod-security.kubernetes.io/warn-version"),
                None => enforce.version,
            };
            warn = Some(Policy { level, version });
        }
        Self { enforce, warn, audit }
    }

    /// The levels of `namespace`, whose labels `label` reads, under `cluster`: none in a
    /// namespace it exempts.
    pub fn of_namespace<'a>(
        namespace: &str,
        label: impl Fn(&str) -> Option<&'a str>,
        cluster: &'a ClusterDefaults,
    ) -> Self {
        if cluster.exemptions.namespaces.iter().any(|n| n == namespace) {
            return Self::default();
        }
        Self::from_lookup_with(label, cluster)
    }

    /// The enforced policy, when it checks anything.
    pub fn enforced(&self) -> Option<Policy> {
        self.enforce.filter(Policy::checks_anything)
    }
}

/// One failed check: kube-apiserver's reason (`allowPrivilegeEscalation != false`) and detail
/// (`container "x" must set securityContext.allowPrivilegeEscalation=false`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The check's name as the server says it.
    pub reason: String,
    /// What fails it, naming containers, volumes or fields.
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() { f.write_str(&self.reason) } else { write!(f, "{} ({})", self.reason, self.detail) }
    }
}

/// The failures of one evaluation, in kube-apiserver's order; empty when the pod passes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failures(pub Vec<Failure>);

impl Failures {
    /// Whether the pod passes.
    pub fn passed(&self) -> bool {
        self.0.is_empty()
    }

    /// The reasons alone (`privileged, allowPrivilegeEscalation != false`).
    pub fn reasons(&self) -> String {
        self.0.iter().map(|f| f.reason.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, failure) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{failure}")?;
        }
        Ok(())
    }
}

/// The prefix of a container's AppArmor annotation.
pub const APPARMOR_PREFIX: &str = checks::APPARMOR_PREFIX;
/// The prefix of a container's seccomp annotation.
pub const SECCOMP_CONTAINER_PREFIX: &str = checks::SECCOMP_CONTAINER_PREFIX;

/// Whether an annotation key is one the standards read.
pub fn is_pod_security_annotation(key: &str) -> bool {
    key.starts_with(checks::APPARMOR_PREFIX)
        || key.starts_with(checks::SECCOMP_CONTAINER_PREFIX)
        || key == checks::SECCOMP_POD_ANNOTATION
}

/// Evaluates `pod` against `policy` as a kube-apiserver of minor version `server` does: on the
/// pod as that server prepares it before Pod Security sees it ([`PodFacts::prepared`]).
pub fn evaluate(pod: &PodFacts<'_>, policy: Policy, server: u32) -> Failures {
    if !policy.checks_anything() {
        return Failures::default();
    }
    let prepared;
    let pod = if pod.changed_by(server) {
        prepared = pod.clone().prepared(server);
        &prepared
    } else {
        pod
    };
    let context = checks::Context { pod, minor: policy.minor_on(server), server };
    Failures(checks::run(&context, policy.level))
}

#[cfg(test)]
mod tests;
