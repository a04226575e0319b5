//! The one error type of the certificate code.

use std::path::PathBuf;

/// Why a certificate could not be made, read, stored or served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen could not generate or sign a certificate.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM or DER certificate or key could not be read.
    #[error("invalid certificate or key: {0}")]
    Invalid(String),
    /// rustls refused the certificate and key (for instance, a key that does not match).
    #[error("unusable certificate or key: {0}")]
    Tls(#[from] rustls::Error),
    /// A certificate file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// A call to the Kubernetes API failed.
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
