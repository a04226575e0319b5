//! Pod Security Standards, evaluated as kube-apiserver's Pod Security admission evaluates them:
//! the namespace's levels read from its labels, every `baseline` and `restricted` check with the
//! versions it applies to, and the failures in kube-apiserver's own words (checked against the
//! verdicts of real 1.24 and 1.36 servers in the tests).
//!
//! The webhook uses it to keep a pod that passes its namespace's enforced level passing once
//! the Watchers' containers are added ([`Adaptation`]), or to leave out a Watcher that cannot.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, Container, PodSecurityContext, Probe, SeccompProfile, SecurityContext, Volume,
};

mod checks;

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
const DEFAULT_KEYS: [&str; 6] = ["enforce", "enforce-version", "audit", "audit-version", "warn", "warn-version"];

impl ClusterDefaults {
    /// No defaults, no exemptions: a cluster without Pod Security configuration.
    pub const NONE: Self = Self {
        defaults: BTreeMap::new(),
        exemptions: Exemptions { usernames: Vec::new(), runtime_classes: Vec::new(), namespaces: Vec::new() },
    };

    /// The default of a namespace label (`pod-security.kubernetes.io/enforce`, ...).
    fn default_of(&self, label: &str) -> Option<&str> {
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

/// A pod as Pod Security reads it: the pod-level fields, its volumes by type, the annotations
/// the standards read, and its containers (init containers first, as kube-apiserver visits them).
/// Read from the pod as admission webhooks see it; [`evaluate`] judges it as kube-apiserver
/// prepares it first ([`PodFacts::prepared`]).
#[derive(Clone, Debug, Default)]
pub struct PodFacts<'a> {
    /// `spec.securityContext`.
    pub security_context: Option<Cow<'a, PodSecurityContext>>,
    /// `hostNetwork`, `hostPID`, `hostIPC`.
    pub host_network: bool,
    /// `hostPID`.
    pub host_pid: bool,
    /// `hostIPC`.
    pub host_ipc: bool,
    /// `hostUsers` (`false`: a user namespace, which relaxes some checks from 1.35).
    pub host_users: Option<bool>,
    /// `os.name: windows`.
    pub windows: bool,
    /// The AppArmor and seccomp annotations.
    pub annotations: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// Each volume's name and type (the name of its source field: `emptyDir`, `hostPath`, ...).
    pub volumes: Vec<(&'a str, &'a str)>,
    /// The containers.
    pub containers: Vec<ContainerFacts<'a>>,
}

/// A container as Pod Security reads it.
#[derive(Clone, Debug, Default)]
pub struct ContainerFacts<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its `securityContext`.
    pub security: Option<Cow<'a, SecurityContext>>,
    /// The `hostPort`s of its ports (0 left out).
    pub host_ports: Vec<i32>,
    /// The `host` of its probes' and lifecycle handlers' `httpGet` and `tcpSocket`.
    pub probe_hosts: Vec<&'a str>,
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

impl<'a> ContainerFacts<'a> {
    /// A container of a Watcher (its sidecar or an init container).
    pub fn of(container: &'a Container) -> Self {
        let host_ports = container.ports.iter().flatten().filter_map(|p| p.host_port.filter(|p| *p != 0)).collect();
        let probes = [&container.liveness_probe, &container.readiness_probe, &container.startup_probe];
        let mut probe_hosts: Vec<&str> = probes.into_iter().flatten().flat_map(probe_hosts).collect();
        if let Some(lifecycle) = &container.lifecycle {
            for handler in [&lifecycle.post_start, &lifecycle.pre_stop].into_iter().flatten() {
                let http = handler.http_get.as_ref().and_then(|h| h.host.as_deref());
                let tcp = handler.tcp_socket.as_ref().and_then(|t| t.host.as_deref());
                probe_hosts.extend(http.into_iter().chain(tcp).filter(|h| !h.is_empty()));
            }
        }
        Self {
            name: &container.name,
            security: container.security_context.as_ref().map(Cow::Borrowed),
            host_ports,
            probe_hosts,
        }
    }
}

fn probe_hosts(probe: &Probe) -> impl Iterator<Item = &str> {
    let http = probe.http_get.as_ref().and_then(|h| h.host.as_deref());
    let tcp = probe.tcp_socket.as_ref().and_then(|t| t.host.as_deref());
    http.into_iter().chain(tcp).filter(|h| !h.is_empty())
}

/// The type of a volume: the name of its one source field, as the API writes it.
pub fn volume_type(volume: &Volume) -> &'static str {
    let sources: [(&'static str, bool); 30] = [
        ("awsElasticBlockStore", volume.aws_elastic_block_store.is_some()),
        ("azureDisk", volume.azure_disk.is_some()),
        ("azureFile", volume.azure_file.is_some()),
        ("cephfs", volume.cephfs.is_some()),
        ("cinder", volume.cinder.is_some()),
        ("configMap", volume.config_map.is_some()),
        ("csi", volume.csi.is_some()),
        ("downwardAPI", volume.downward_api.is_some()),
        ("emptyDir", volume.empty_dir.is_some()),
        ("ephemeral", volume.ephemeral.is_some()),
        ("fc", volume.fc.is_some()),
        ("flexVolume", volume.flex_volume.is_some()),
        ("flocker", volume.flocker.is_some()),
        ("gcePersistentDisk", volume.gce_persistent_disk.is_some()),
        ("gitRepo", volume.git_repo.is_some()),
        ("glusterfs", volume.glusterfs.is_some()),
        ("hostPath", volume.host_path.is_some()),
        ("image", volume.image.is_some()),
        ("iscsi", volume.iscsi.is_some()),
        ("nfs", volume.nfs.is_some()),
        ("persistentVolumeClaim", volume.persistent_volume_claim.is_some()),
        ("photonPersistentDisk", volume.photon_persistent_disk.is_some()),
        ("portworxVolume", volume.portworx_volume.is_some()),
        ("projected", volume.projected.is_some()),
        ("quobyte", volume.quobyte.is_some()),
        ("rbd", volume.rbd.is_some()),
        ("scaleIO", volume.scale_io.is_some()),
        ("secret", volume.secret.is_some()),
        ("storageos", volume.storageos.is_some()),
        ("vsphereVolume", volume.vsphere_volume.is_some()),
    ];
    sources.into_iter().find(|(_, set)| *set).map_or("", |(name, _)| name)
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

/// A seccomp annotation's value as the field kube-apiserver copies it into: `None` for a value
/// it does not copy.
fn seccomp_field(annotation: &str) -> Option<SeccompProfile> {
    let profile = |type_: &str, localhost: Option<&str>| SeccompProfile {
        type_: type_.to_owned(),
        localhost_profile: localhost.map(str::to_owned),
    };
    match annotation {
        "unconfined" => Some(profile("Unconfined", None)),
        "runtime/default" | "docker/default" => Some(profile("RuntimeDefault", None)),
        _ => annotation.strip_prefix("localhost/").filter(|p| !p.is_empty()).map(|p| profile("Localhost", Some(p))),
    }
}

/// A seccomp field as the annotation kube-apiserver copies it into (1.19 to 1.24).
fn seccomp_annotation(field: &SeccompProfile) -> Option<String> {
    match (field.type_.as_str(), field.localhost_profile.as_deref()) {
        ("Unconfined", _) => Some("unconfined".to_owned()),
        ("RuntimeDefault", _) => Some("runtime/default".to_owned()),
        ("Localhost", Some(profile)) => Some(format!("localhost/{profile}")),
        _ => None,
    }
}

/// An AppArmor annotation's value as the field kube-apiserver copies it into (from 1.30).
fn app_armor_field(annotation: &str) -> Option<AppArmorProfile> {
    let profile = |type_: &str, localhost: Option<&str>| AppArmorProfile {
        type_: type_.to_owned(),
        localhost_profile: localhost.map(str::to_owned),
    };
    match annotation {
        "unconfined" => Some(profile("Unconfined", None)),
        "runtime/default" => Some(profile("RuntimeDefault", None)),
        _ => annotation.strip_prefix("localhost/").filter(|p| !p.is_empty()).map(|p| profile("Localhost", Some(p))),
    }
}

impl<'a> PodFacts<'a> {
    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_ref())
    }

    /// Whether a server of minor version `server` changes what Pod Security reads of this pod
    /// before it judges it (most pods: no; then nothing is copied).
    pub fn changed_by(&self, server: u32) -> bool {
        let annotated = |prefix: &str| self.annotations.iter().any(|(k, _)| k.starts_with(prefix));
        let seccomp = (19..=26).contains(&server)
            && (annotated(checks::SECCOMP_POD_ANNOTATION) || annotated(checks::SECCOMP_CONTAINER_PREFIX));
        let seccomp_fields = (19..=24).contains(&server)
            && (self.security_context.as_ref().is_some_and(|p| p.seccomp_profile.is_some())
                || self.containers.iter().any(|c| c.security.as_ref().is_some_and(|s| s.seccomp_profile.is_some())));
        let app_armor = server >= 30 && annotated(checks::APPARMOR_PREFIX);
        let proc_mount =
            server < 33 && self.containers.iter().any(|c| c.security.as_ref().is_some_and(|s| s.proc_mount.is_some()));
        seccomp || seccomp_fields || app_armor || proc_mount
    }

    /// The pod as kube-apiserver of minor version `server` prepares it on create, before Pod
    /// Security sees it:
    /// - seccomp (1.19 to 1.26): an annotation is copied into its field where the field is
    ///   unset (the pod's, each container's); 1.19 to 1.24 also copy a field into its
    ///   annotation where the annotation is unset;
    /// - AppArmor (from 1.30): a container's annotation is copied into its field where the
    ///   field is unset and the pod's profile differs;
    /// - `procMount` (before 1.33): dropped, its feature off by default.
    pub fn prepared(mut self, server: u32) -> Self {
        if (19..=26).contains(&server) {
            self.sync_seccomp(server <= 24);
        }
        if server >= 30 {
            let pod_profile = self.security_context.as_ref().and_then(|p| p.app_armor_profile.clone());
            for i in 0..self.containers.len() {
                let key = format!("{}{}", checks::APPARMOR_PREFIX, self.containers[i].name);
                let Some(field) = self.annotation(&key).and_then(app_armor_field) else { continue };
                let container = &mut self.containers[i];
                if container.security.as_ref().is_some_and(|s| s.app_armor_profile.is_some())
                    || pod_profile.as_ref() == Some(&field)
                {
                    continue;
                }
                container.security.get_or_insert_with(Cow::default).to_mut().app_armor_profile = Some(field);
            }
        }
        if server < 33 {
            for container in &mut self.containers {
                if container.security.as_ref().is_some_and(|s| s.proc_mount.is_some()) {
                    container.security.get_or_insert_with(Cow::default).to_mut().proc_mount = None;
                }
            }
        }
        self
    }

    /// kube-apiserver's seccomp version skew: annotation to field where the field is unset,
    /// and (`to_annotations`) field to annotation where the annotation is unset.
    fn sync_seccomp(&mut self, to_annotations: bool) {
        let pod_field = self.security_context.as_ref().and_then(|p| p.seccomp_profile.clone());
        let pod_annotation = self.annotation(checks::SECCOMP_POD_ANNOTATION).map(str::to_owned);
        match (pod_field, pod_annotation) {
            (Some(field), None) if to_annotations => {
                if let Some(value) = seccomp_annotation(&field) {
                    self.annotations.push((Cow::Borrowed(checks::SECCOMP_POD_ANNOTATION), Cow::Owned(value)));
                }
            }
            (None, Some(annotation)) => {
                if let Some(field) = seccomp_field(&annotation) {
                    self.security_context.get_or_insert_with(Cow::default).to_mut().seccomp_profile = Some(field);
                }
            }
            _ => {}
        }
        for i in 0..self.containers.len() {
            let key = format!("{}{}", checks::SECCOMP_CONTAINER_PREFIX, self.containers[i].name);
            let annotation = self.annotation(&key).map(str::to_owned);
            let container = &mut self.containers[i];
            let field = container.security.as_ref().and_then(|s| s.seccomp_profile.clone());
            match (field, annotation) {
                (Some(field), None) if to_annotations => {
                    if let Some(value) = seccomp_annotation(&field) {
                        self.annotations.push((Cow::Owned(key), Cow::Owned(value)));
                    }
                }
                (None, Some(annotation)) => {
                    if let Some(field) = seccomp_field(&annotation) {
                        container.security.get_or_insert_with(Cow::default).to_mut().seccomp_profile = Some(field);
                    }
                }
                _ => {}
            }
        }
    }
}

/// What the webhook sets in a container a Watcher adds, so that it passes the enforced level
/// and can start: only fields the Watcher leaves unset and the level needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adaptation {
    /// `allowPrivilegeEscalation: false`.
    pub allow_privilege_escalation: bool,
    /// `capabilities.drop: [ALL]` (beside the capabilities the container adds).
    pub drop_all: bool,
    /// `seccompProfile.type: RuntimeDefault`.
    pub seccomp: bool,
    /// `runAsNonRoot: true`.
    pub run_as_non_root: bool,
    /// `runAsUser: 65532` ([`watcher_api::ADAPTED_RUN_AS_USER`]): the level requires a non-root
    /// user and neither the pod nor the container says which. The image's user is not known
    /// at admission, and the kubelet refuses to start a container that must run as non-root
    /// and whose image runs as root (most images, unless told).
    pub run_as_user: bool,
}

/// Whether `policy` requires the pod's containers to run as non-root: `restricted`, except
/// for a pod in a user namespace from 1.35 (`hostUsers: false`, where root is not the host's).
pub fn requires_non_root(policy: Policy, server: u32, pod: &PodFacts<'_>) -> bool {
    policy.level == Level::Restricted && !(policy.minor_on(server) >= 35 && pod.host_users == Some(false))
}

impl Adaptation {
    /// What `policy` needs set in `container` of `pod`, of what the container leaves unset.
    pub fn needed(policy: Policy, server: u32, pod: &PodFacts<'_>, container: Option<&SecurityContext>) -> Self {
        if policy.level != Level::Restricted {
            return Self::default();
        }
        let minor = policy.minor_on(server);
        let pod_context = pod.security_context.as_deref();
        // Windows pods may not set these fields, and from 1.25 the standards do not ask them to.
        let linux_only = !pod.windows || minor < 25;
        let non_root = requires_non_root(policy, server, pod);
        Self {
            allow_privilege_escalation: linux_only
                && minor >= 8
                && container.is_none_or(|c| c.allow_privilege_escalation.is_none()),
            drop_all: linux_only
                && minor >= 22
                && container.is_none_or(|c| c.capabilities.as_ref().is_none_or(|caps| caps.drop.is_none())),
            seccomp: linux_only
                && minor >= 19
                && pod_context.is_none_or(|p| p.seccomp_profile.is_none())
                && container.is_none_or(|c| c.seccomp_profile.is_none()),
            run_as_non_root: non_root
                && pod_context.is_none_or(|p| p.run_as_non_root.is_none())
                && container.is_none_or(|c| c.run_as_non_root.is_none()),
            run_as_user: non_root
                && !pod.windows
                && pod_context.is_none_or(|p| p.run_as_user.is_none())
                && container.is_none_or(|c| c.run_as_user.is_none()),
        }
    }

    /// Whether there is nothing to set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The fields it sets, as they are written in a securityContext.
    pub fn fields(&self) -> Vec<&'static str> {
        let set = [
            (self.allow_privilege_escalation, "allowPrivilegeEscalation: false"),
            (self.drop_all, "capabilities.drop: [ALL]"),
            (self.seccomp, "seccompProfile: RuntimeDefault"),
            (self.run_as_non_root, "runAsNonRoot: true"),
            (self.run_as_user, "runAsUser: 65532"),
        ];
        set.into_iter().filter(|(on, _)| *on).map(|(_, field)| field).collect()
    }

    /// `context` with the adaptation applied.
    pub fn apply(&self, context: Option<&SecurityContext>) -> SecurityContext {
        let mut context = context.cloned().unwrap_or_default();
        if self.allow_privilege_escalation {
            context.allow_privilege_escalation = Some(false);
        }
        if self.drop_all {
            let add = context.capabilities.take().and_then(|c| c.add);
            context.capabilities = Some(Capabilities { add, drop: Some(vec!["ALL".to_owned()]) });
        }
        if self.seccomp {
            context.seccomp_profile =
                Some(SeccompProfile { type_: "RuntimeDefault".to_owned(), localhost_profile: None });
        }
        if self.run_as_non_root {
            context.run_as_non_root = Some(true);
        }
        if self.run_as_user {
            context.run_as_user = Some(watcher_api::ADAPTED_RUN_AS_USER);
        }
        context
    }

    /// Sets the adaptation's fields in a container written as JSON.
    pub fn apply_to_json(&self, container: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        let Some(fields) = container.as_object_mut() else { return };
        let context = fields.entry("securityContext").or_insert_with(|| serde_json::json!({}));
        if !context.is_object() {
            *context = serde_json::json!({});
        }
        let Some(context) = context.as_object_mut() else { return };
        if self.allow_privilege_escalation {
            context.insert("allowPrivilegeEscalation".into(), false.into());
        }
        if self.drop_all {
            let capabilities = context.entry("capabilities").or_insert_with(|| serde_json::json!({}));
            if !capabilities.is_object() {
                *capabilities = serde_json::json!({});
            }
            if let Some(capabilities) = capabilities.as_object_mut() {
                capabilities.insert("drop".into(), serde_json::json!(["ALL"]));
            }
        }
        if self.seccomp {
            context.insert("seccompProfile".into(), serde_json::json!({"type": "RuntimeDefault"}));
        }
        if self.run_as_non_root {
            context.insert("runAsNonRoot".into(), true.into());
        }
        if self.run_as_user {
            context.insert("runAsUser".into(), watcher_api::ADAPTED_RUN_AS_USER.into());
        }
    }
}

#[cfg(test)]
mod tests;
