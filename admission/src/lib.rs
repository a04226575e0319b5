//! What watcher-operator's admission decides and writes, apart from what serves it: which
//! Watchers a pod gets ([`decide`], [`cluster`]), the pure [`inject`] and [`rewrite_images`]
//! steps, Pod Security ([`pod_security`]), the namespace's ResourceQuotas and LimitRanges
//! ([`resources`]), the webhook's scope ([`scope`]), the canary between
//! revisions ([`canary`]), and the pod as admission reads it ([`PodView`]). Nothing here talks to
//! a server: the Watchers, ImagePolicies and revisions come through [`WatcherSource`],
//! [`PolicySource`] and [`RevisionSource`].

pub mod canary;
pub mod cluster;
mod decide;
mod inject;
pub mod json;
mod namespace;
mod pod;
pub mod pod_security;
pub mod resources;
mod rewrite;
pub mod scope;
mod version;

pub use canary::RevisionSource;
pub use cluster::WatcherSource;
pub use decide::{Asked, Decision, Exclusion, Verdict, WebhookSelectors, decide, exclusion};
pub use inject::{
    AppReport, Compliance, Guards, InjectOptions, Injection, Patch, PodSecurityReport, Refusal, ResourceCompliance,
    ResourceReport, RunsAsRoot, SYSTEM_NAMESPACES, annotation_pointer, app_report, compliance, inject, inject_at_level,
    inject_guarded, resource_compliance, server_minor, supports_native_sidecars,
};
pub use namespace::NamespaceWatchers;
pub use pod::{
    Annotations, ContainerView, DeviceView, EnvView, HandlerView, HostView, LifecycleView, MAX_ANNOTATION_BYTES,
    MountView, Named, OsView, PodMetaView, PodSpecView, PodView, PortView, VolumeView,
};
pub use rewrite::{NamespaceAdmission, PolicySource, rewrite_images};
pub use scope::{Scope, Sent};
pub use version::ServerVersion;
