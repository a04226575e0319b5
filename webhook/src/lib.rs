//! The admission webhook of watcher-operator: the pure [`inject`] and [`rewrite_images`] steps,
//! the AdmissionReview handling around them ([`Reviewer`]), and the TLS server ([`serve_tls`]).

pub mod canary;
pub mod cluster;
mod decide;
mod inject;
mod json;
mod metrics;
mod pod;
pub mod pod_security;
mod review;
mod rewrite;
pub mod scope;
mod server;
mod version;

pub use canary::RevisionSource;
pub use decide::{Asked, Decision, Exclusion, Verdict, WebhookSelectors, decide, exclusion};
pub use inject::{
    AppReport, Compliance, InjectOptions, Injection, PodSecurityReport, SYSTEM_NAMESPACES, app_report, compliance,
    inject, inject_at_level, server_minor, supports_native_sidecars,
};
pub use metrics::{AdmissionResult, Metrics, PodSecurityOutcome};
pub use pod::{
    Annotations, ContainerView, DeviceView, EnvView, HandlerView, HostView, LifecycleView, MAX_ANNOTATION_BYTES,
    MountView, Named, OsView, PodMetaView, PodSpecView, PodView, PortView, VolumeView,
};
pub use review::{ReviewError, Reviewer, WatcherSource};
pub use rewrite::{NamespaceAdmission, PolicySource, original_images, rewrite_images};
pub use scope::{Scope, Sent};
pub use server::{MAX_BODY_BYTES, router, serve_tls};
pub use version::ServerVersion;
