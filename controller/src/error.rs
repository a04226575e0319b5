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
    /// Every value [`Error::metric_label`] gives: each controller's error series are exported
    /// from the start, at 0.
    pub const METRIC_LABELS: [&'static str; 7] = [
        "conflict",
        "too_many_requests",
        "api_server_error",
        "api_rejected",
        "api_unreachable",
        "missing_namespace",
        "owner_conflict",
    ];

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

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    /// Every label an error can take is among those exported from the start.
    #[test]
    fn every_metric_label_is_listed() {
        let api = |code: u16| Error::Kube(kube::Error::Api(Box::new(Status::failure("m", "r").with_code(code))));
        let errors = [
            api(409),
            api(429),
            api(503),
            api(422),
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::MissingNamespace("w".into()),
            Error::Conflict("c".into()),
        ];
        let labels: Vec<&str> = errors.iter().map(Error::metric_label).collect();
        assert_eq!(labels, Error::METRIC_LABELS);
    }
}
