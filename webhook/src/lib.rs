//! The admission webhook of watcher-operator: the pure [`inject`] function, the AdmissionReview
//! handling around it ([`Reviewer`]), and the TLS server ([`serve_tls`]).

mod inject;
mod metrics;
mod pod;
mod review;
mod server;

pub use inject::{InjectOptions, Injection, SYSTEM_NAMESPACES, inject, supports_native_sidecars};
pub use metrics::{AdmissionResult, Metrics};
pub use pod::{Named, PodMeta, PodSpecView, PodView};
pub use review::{ReviewError, Reviewer, WatcherSource};
pub use server::{MAX_BODY_BYTES, router, serve_tls};
