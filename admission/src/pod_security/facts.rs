//! What Pod Security reads of a pod and its containers, from the pod as kube-apiserver
//! would store it.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, PodSecurityContext, Probe, SeccompProfile, SecurityContext, Volume,
};

use super::checks;

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

pub(super) fn probe_hosts(probe: &Probe) -> impl Iterator<Item = &str> {
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

/// A seccomp annotation's value as the field kube-apiserver copies it into: `None` for a value
/// it does not copy.
pub(super) fn seccomp_field(annotation: &str) -> Option<SeccompProfile> {
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
pub(super) fn seccomp_annotation(field: &SeccompProfile) -> Option<String> {
    match (field.type_.as_str(), field.localhost_profile.as_deref()) {
        ("Unconfined", _) => Some("unconfined".to_owned()),
        ("RuntimeDefault", _) => Some("runtime/default".to_owned()),
        ("Localhost", Some(profile)) => Some(format!("localhost/{profile}")),
        _ => None,
    }
}

/// An AppArmor annotation's value as the field kube-apiserver copies it into (from 1.30).
pub(super) fn app_armor_field(annotation: &str) -> Option<AppArmorProfile> {
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
    pub(super) fn annotation(&self, key: &str) -> Option<&str> {
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
    pub(super) fn sync_seccomp(&mut self, to_annotations: bool) {
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
