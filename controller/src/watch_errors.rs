//! What a failed watch means, said once for every watch: each error gets the hint its status
//! earns. A watch that expired (410 Gone: "too old resource version") is kube's normal relist,
//! not a warning; 404 means the API server does not serve the resource (for the operator's own
//! kinds: the CRDs are not installed); 403 is RBAC; anything else is retried with backoff.

use kube::runtime::watcher;
use tracing::Level;

/// How a watch failed, from the HTTP status of the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchTrouble {
    /// 410 Gone: the watch's resourceVersion expired; the watcher lists again.
    Expired,
    /// 404 Not Found: the API server does not serve the resource.
    NotServed,
    /// 403 Forbidden: the operator may not list or watch it.
    Forbidden,
    /// Anything else (a server error, the connection).
    Other,
}

impl WatchTrouble {
    /// How `error` failed.
    pub fn of(error: &watcher::Error) -> Self {
        let code = match error {
            watcher::Error::InitialListFailed(kube::Error::Api(status))
            | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
            watcher::Error::WatchError(status) => Some(status.code),
            _ => None,
        };
        match code {
            Some(410) => Self::Expired,
            Some(404) => Self::NotServed,
            Some(403) => Self::Forbidden,
            _ => Self::Other,
        }
    }
}

/// The level and message for a failed watch of `what` (`Watchers`, `namespaces`, ...);
/// `own_kind`: one of the operator's CRDs.
pub fn watch_error_line(what: &str, own_kind: bool, error: &watcher::Error) -> (Level, String) {
    match WatchTrouble::of(error) {
        WatchTrouble::Expired => (Level::DEBUG, format!("watch of {what} expired (410 Gone): listing again")),
        WatchTrouble::NotServed if own_kind => {
            (Level::WARN, format!("cannot watch {what}: the API server does not serve them (are the CRDs installed?)"))
        }
        WatchTrouble::NotServed => (Level::WARN, format!("cannot watch {what}: the API server does not serve them")),
        WatchTrouble::Forbidden => (
            Level::WARN,
            format!("cannot watch {what}: forbidden (does the operator's ClusterRole grant list and watch on them?)"),
        ),
        WatchTrouble::Other => (Level::WARN, format!("cannot watch {what}; retrying with backoff")),
    }
}

/// Logs a failed watch of `what` with the hint its status earns (see [`watch_error_line`]).
pub fn log_watch_error(what: &str, own_kind: bool, error: &watcher::Error) {
    match watch_error_line(what, own_kind, error) {
        (Level::DEBUG, message) => tracing::debug!(%error, "{message}"),
        (_, message) => tracing::warn!(%error, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Box<Status> {
        Box::new(Status::failure(message, reason).with_code(code))
    }

    /// Each status, in each form kube's watcher reports it (an event inside the watch, or the
    /// answer to the list or watch request).
    #[test]
    fn each_status_gets_its_hint() {
        let expired = || status(410, "Expired", "too old resource version: 4 (5)");
        let cases = [
            (
                watcher::Error::WatchError(expired()),
                Level::DEBUG,
                "watch of Watchers expired (410 Gone): listing again",
            ),
            (
                watcher::Error::WatchFailed(kube::Error::Api(expired())),
                Level::DEBUG,
                "watch of Watchers expired (410 Gone): listing again",
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ))),
                Level::WARN,
                "cannot watch Watchers: the API server does not serve them (are the CRDs installed?)",
            ),
            (
                watcher::Error::WatchStartFailed(kube::Error::Api(status(
                    403,
                    "Forbidden",
                    "watchers.watcher.dev is forbidden",
                ))),
                Level::WARN,
                "cannot watch Watchers: forbidden (does the operator's ClusterRole grant list and watch on them?)",
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(
                    500,
                    "InternalError",
                    "etcdserver: leader changed",
                ))),
                Level::WARN,
                "cannot watch Watchers; retrying with backoff",
            ),
            (watcher::Error::NoResourceVersion, Level::WARN, "cannot watch Watchers; retrying with backoff"),
        ];
        for (error, level, message) in cases {
            assert_eq!(watch_error_line("Watchers", true, &error), (level, message.to_owned()), "{error}");
        }
        let missing = watcher::Error::InitialListFailed(kube::Error::Api(status(404, "NotFound", "not found")));
        assert_eq!(
            watch_error_line("namespaces", false, &missing).1,
            "cannot watch namespaces: the API server does not serve them",
            "no CRD to blame for a built-in kind"
        );
    }
}
