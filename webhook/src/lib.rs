//! The admission webhook of watcher-operator: the pure [`inject`] and [`rewrite_images`] steps,
//! the AdmissionReview handling around them ([`Reviewer`]), and the TLS server ([`serve_tls`]).

pub mod cluster;
mod decide;
mod inject;
mod json;
mod metrics;
mod pod;
mod review;
mod rewrite;
pub mod scope;
mod server;

pub use decide::{Asked, Decision, Exclusion, Verdict, WebhookSelectors, decide, exclusion};
pub use inject::{
    AppReport, InjectOptions, Injection, SYSTEM_NAMESPACES, app_report, inject, supports_native_sidecars,
};
pub use metrics::{AdmissionResult, Metrics};
pub use pod::{
    Annotations, ContainerView, DeviceView, EnvView, MAX_ANNOTATION_BYTES, MountView, Named, PodMeta, PodSpecView,
    PodView,
};
pub use review::{ReviewError, Reviewer, WatcherSource};
pub use rewrite::{PolicySource, original_images, rewrite_images};
pub use scope::{Scope, Sent};
pub use server::{MAX_BODY_BYTES, router, serve_tls};
