//! The admission webhook of watcher-operator, as served: AdmissionReview in and out
//! ([`Reviewer`]), the TLS server ([`serve_tls`]) and the admission metrics. What an admission
//! decides and writes is `watcher_admission`'s.

mod metrics;
mod review;
mod server;

pub use metrics::{AdmissionResult, Metrics, PodSecurityOutcome, ResourceOutcome};
pub use review::{Read, ReviewError, Reviewer, read};
pub use server::{MAX_BODY_BYTES, router, serve_tls};
