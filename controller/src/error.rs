//! The one error type of the reconcilers.

/// Why a reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the Kubernetes API failed.
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[source] kube::Error),

    /// A cluster-scoped object reached a reconciler of namespaced kinds.
    #[error("object {0} has no namespace")]
    MissingNamespace(String),

    /// Another controller owns an object this reconciler must write.
    #[error("{0}")]
    Conflict(String),
}

impl From<kube::Error> for Error {
    fn from(error: kube::Error) -> Self {
        Self::Kube(error)
    }
}

impl Error {
    /// A short, bounded label for `watcher_reconcile_errors_total{error}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(kube::Error::Api(status)) if status.code == 429 => "too_many_requests",
            Self::Kube(kube::Error::Api(status)) if status.code >= 500 => "api_server_error",
            Self::Kube(kube::Error::Api(_)) => "api_rejected",
            Self::Kube(_) => "api_unreachable",
            Self::MissingNamespace(_) => "missing_namespace",
            Self::Conflict(_) => "owner_conflict",
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
