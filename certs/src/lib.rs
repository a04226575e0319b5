//! Certificates of the admission webhook: a CA and serving certificates made with rcgen, the
//! rustls certificate store that swaps them while serving, file reload (cert-manager), and the
//! self-managed mode that keeps them in a Secret and the webhook configuration's `caBundle`.

mod authority;
mod error;
pub mod registration;
mod resolver;
pub mod secret;
mod verify;

pub use authority::{Authority, CertInfo, CertifiedPem};
pub use error::{Error, Result};
pub use resolver::{CertFiles, CertStore, Expiry, server_config};
pub use verify::verify_serving;

/// The DNS names a Service is reached by from inside the cluster.
pub fn service_hosts(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_owned(),
    ]
}
