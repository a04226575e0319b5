//! The namespace's enforced Pod Security level, held after the patch: what a Watcher adds is
//! adapted where it leaves a field unset that the level needs, or the Watcher is left out when
//! it asks for what the level forbids. A pod that fails the level by itself is left to
//! kube-apiserver: nothing changes.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Container;
use watcher_api::Watcher;

use crate::PodView;
use crate::pod_security::{
    APPARMOR_PREFIX, Adaptation, ContainerFacts, Failures, NEWEST_MINOR, NamespaceLevels, PodFacts, Policy,
    SECCOMP_CONTAINER_PREFIX,
};

/// What Pod Security did to one Watcher of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSecurityReport {
    /// The Watcher.
    pub watcher: String,
    /// The enforced policy (`restricted:latest`).
    pub policy: String,
    /// Each container the Watcher adds that was adapted, with the fields set.
    pub adapted: Vec<(String, Vec<&'static str>)>,
    /// Why the Watcher was left out: the checks it fails, in kube-apiserver's words.
    pub violations: Option<String>,
}

/// The enforced level of a pod that passes it by itself.
pub(super) struct Guard<'p> {
    policy: Policy,
    server: u32,
    pod: PodFacts<'p>,
}

impl<'p> Guard<'p> {
    /// The guard for `pod`, when its namespace enforces a level that checks anything and the
    /// pod passes it without the operator.
    pub(super) fn of(pod: &'p PodView, levels: &NamespaceLevels, server: Option<u32>) -> Option<Self> {
        let policy = levels.enforced()?;
        let server = server.unwrap_or(NEWEST_MINOR);
        // As kube-apiserver prepares it (a seccomp annotation is a field to it, before 1.27).
        let facts = pod.security_facts().prepared(server);
        crate::pod_security::evaluate(&facts, policy, server).passed().then_some(Self { policy, server, pod: facts })
    }

    /// What `watcher` needs adapted to keep the pod at the level (one adaptation for its
    /// sidecar, one per init container), or the checks it fails even so.
    pub(super) fn admit(&self, watcher: &Watcher, pod: &PodView) -> Result<Adapted, Failures> {
        let spec = &watcher.spec;
        let adapt =
            |c: &Container| Adaptation::needed(self.policy, self.server, &self.pod, c.security_context.as_ref());
        let sidecar = adapt(&spec.container);
        let init: Vec<Adaptation> = spec.app.init_containers.iter().map(adapt).collect();
        let containers = spec.app.init_containers.iter().zip(&init).chain([(&spec.container, &sidecar)]);
        // Only what the Watcher adds, on the pod's own pod-level fields: the pod passes by itself,
        // and every check fails on a container, volume or annotation, so this is what fails.
        let volume = spec.volume.as_deref().filter(|v| !pod_has_volume(pod, &v.name));
        let containers: Vec<ContainerFacts<'_>> = containers.map(|(c, a)| adapted_facts(c, a)).collect();
        // The Watcher's own annotations, and the pod's that name its containers (which the
        // server copies into their fields).
        let added_names = |key: &str| {
            containers.iter().any(|c| {
                key.strip_prefix(APPARMOR_PREFIX).or_else(|| key.strip_prefix(SECCOMP_CONTAINER_PREFIX)) == Some(c.name)
            })
        };
        let own = pod.metadata.annotations.pod_security.iter().filter(|(key, _)| added_names(key)).map(|(k, v)| (k, v));
        let annotations = spec
            .app
            .pod_annotations
            .iter()
            .filter(|(key, _)| crate::pod_security::is_pod_security_annotation(key))
            .filter(|(key, _)| !pod.metadata.annotations.has(key))
            .chain(own)
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let added = PodFacts {
            annotations,
            volumes: volume.map(|v| (v.name.as_str(), crate::pod_security::volume_type(v))).into_iter().collect(),
            containers,
            security_context: self.pod.security_context.clone(),
            host_network: self.pod.host_network,
            host_pid: self.pod.host_pid,
            host_ipc: self.pod.host_ipc,
            host_users: self.pod.host_users,
            windows: self.pod.windows,
        };
        // What the kubelet then refuses (a user of 0 that must not be root) is [`startable`]'s.
        let failures = crate::pod_security::evaluate(&added, self.policy, self.server);
        if failures.passed() { Ok(Adapted { sidecar, init }) } else { Err(failures) }
    }

    /// The report for `watcher`: adapted as `adapted` says, or left out for `failures`.
    pub(super) fn report(&self, watcher: &Watcher, outcome: Result<&Adapted, &Failures>) -> PodSecurityReport {
        let spec = &watcher.spec;
        let (adapted, violations) = match outcome {
            Ok(adapted) => {
                let containers = [(&spec.container, &adapted.sidecar)]
                    .into_iter()
                    .chain(spec.app.init_containers.iter().zip(&adapted.init));
                let list =
                    containers.filter(|(_, a)| !a.is_empty()).map(|(c, a)| (c.name.clone(), a.fields())).collect();
                (list, None)
            }
            Err(failures) => (Vec::new(), Some(failures.to_string())),
        };
        PodSecurityReport {
            watcher: watcher.metadata.name.clone().unwrap_or_default(),
            policy: self.policy.to_string(),
            adapted,
            violations,
        }
    }

    /// Why a Watcher is left out, in the words of the warning.
    pub(super) fn why(&self, failures: &Failures) -> String {
        format!("it would make the pod violate PodSecurity \"{}\": {failures}", self.policy)
    }
}

/// A container as Pod Security reads it once adapted.
fn adapted_facts<'c>(container: &'c Container, adaptation: &Adaptation) -> ContainerFacts<'c> {
    let mut facts = ContainerFacts::of(container);
    if !adaptation.is_empty() {
        facts.security = Some(Cow::Owned(adaptation.apply(container.security_context.as_ref())));
    }
    facts
}

fn pod_has_volume(pod: &PodView, name: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default().iter().any(|v| v.name == name)
}

/// What the webhook sets in the containers a Watcher adds.
#[derive(Clone, Debug, Default)]
pub(super) struct Adapted {
    pub(super) sidecar: Adaptation,
    pub(super) init: Vec<Adaptation>,
}

impl Adapted {
    pub(super) fn is_empty(&self) -> bool {
        self.sidecar.is_empty() && self.init.iter().all(Adaptation::is_empty)
    }
}

/// Whatever the namespace's level, what the Watcher adds must be able to start in `pod`: where
/// a container must run as non-root (its own `runAsNonRoot` or the pod's) and neither it nor
/// the pod says as which user, it is given one (the pod's `runAsNonRoot: true` with its app's
/// user set per container is common, and a sidecar image runs as root unless told); where it
/// would run as root nonetheless (`runAsUser: 0`), the Watcher cannot be injected: the
/// kubelet would refuse to start it, and a native sidecar or init container would keep the
/// whole pod from running.
pub(super) fn startable(watcher: &Watcher, pod: &PodView, adapted: &mut Adapted) -> Result<(), RunsAsRoot> {
    let spec = pod.spec.as_ref();
    let pod_context = spec.and_then(|s| s.security_context.as_ref());
    let windows = spec.and_then(|s| s.os.as_ref()).is_some_and(|os| os.name == "windows");
    let user_namespace = spec.and_then(|s| s.host_users) == Some(false);
    let mut root = Vec::new();
    let containers = [(&watcher.spec.container, &mut adapted.sidecar)].into_iter();
    let mut init = adapted.init.clone();
    init.resize(watcher.spec.app.init_containers.len(), Adaptation::default());
    for (container, adaptation) in containers.chain(watcher.spec.app.init_containers.iter().zip(init.iter_mut())) {
        let context = adaptation.apply(container.security_context.as_ref());
        let non_root = context.run_as_non_root.or(pod_context.and_then(|p| p.run_as_non_root)) == Some(true);
        let user = context.run_as_user.or(pod_context.and_then(|p| p.run_as_user));
        if !non_root || windows || user_namespace {
            continue;
        }
        match user {
            None => adaptation.run_as_user = true,
            Some(0) => root.push(format!("\"{}\"", container.name)),
            Some(_) => {}
        }
    }
    adapted.init = init;
    if root.is_empty() {
        return Ok(());
    }
    Err(RunsAsRoot(root))
}

/// What a Watcher adds would run as root where the pod asks for non-root: its containers' names,
/// quoted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunsAsRoot(Vec<String>);

impl std::fmt::Display for RunsAsRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (noun, pronoun) = if self.0.len() == 1 { ("container", "it") } else { ("containers", "them") };
        let names = self.0.join(", ");
        write!(
            f,
            "its {noun} {names} would run with runAsNonRoot=true and runAsUser=0: the kubelet would not start {pronoun}"
        )
    }
}

/// How a Watcher stands towards a Pod Security policy, before any pod exists: judged on a pod
/// that sets nothing at pod level (the fields a pod may set itself are then adapted too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compliance {
    /// Its containers pass as written.
    AsWritten,
    /// They pass once the webhook sets these fields (`container: field, field`).
    Adapted(Vec<String>),
    /// It asks for what the policy forbids, or could not start under it.
    CannotComply(Refusal),
}

/// Why a Watcher cannot comply with a Pod Security policy; shown in kube-apiserver's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// These checks fail.
    Checks(Failures),
    /// Its containers would run as root where the pod asks for non-root.
    RunsAsRoot(RunsAsRoot),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Checks(failures) => failures.fmt(f),
            Self::RunsAsRoot(root) => root.fmt(f),
        }
    }
}

/// How `watcher` stands towards `policy` on a server of minor version `server`.
pub fn compliance(watcher: &Watcher, policy: Policy, server: Option<u32>) -> Compliance {
    let pod = PodView::default();
    let guard = Guard { policy, server: server.unwrap_or(NEWEST_MINOR), pod: PodFacts::default() };
    let admitted = guard.admit(watcher, &pod).map_err(Refusal::Checks).and_then(|mut adapted| {
        startable(watcher, &pod, &mut adapted).map_err(Refusal::RunsAsRoot)?;
        Ok(adapted)
    });
    match admitted {
        Err(failures) => Compliance::CannotComply(failures),
        Ok(adapted) if adapted.is_empty() => Compliance::AsWritten,
        Ok(adapted) => {
            let report = guard.report(watcher, Ok(&adapted));
            let fields = report.adapted.into_iter().map(|(c, f)| format!("{c}: {}", f.join(", ")));
            Compliance::Adapted(fields.collect())
        }
    }
}
