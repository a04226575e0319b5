//! Pods that are meant to end, and how a Watcher's sidecar ends with its app: the one answer to
//! each question, for the webhook (which prepares the pod), the controllers (which end the
//! sidecars and say how, before any pod) and the CLI (which shows it).

/// Whether a pod with this `restartPolicy` on this OS (`spec.os.name`) is meant to end: `Never`
/// or `OnFailure` (a Job's, a CronJob's, an At's, a bare pod's), on Linux. A Windows pod has no
/// supervisor to run its sidecars under, and is left as it is.
pub fn meant_to_end(restart_policy: Option<&str>, os: Option<&str>) -> bool {
    matches!(restart_policy, Some("Never" | "OnFailure")) && os != Some("windows")
}

/// How a sidecar ends once the app containers of its pod have ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SidecarEnding {
    /// Its `command` runs under `watcher-supervise`, which ends it and exits 0 once the ended
    /// file says so (or on SIGTERM): no restart.
    Supervised,
    /// watcher-agent, run by its image's entrypoint: it reads the ended file itself and exits 0,
    /// no restart.
    ReadsEndedFile,
    /// Another image's entrypoint, which cannot be told: a native sidecar is stopped by the
    /// kubelet's SIGTERM; a regular one is switched to the supervisor's image, a restart the
    /// kubelet counts.
    Entrypoint,
}

impl SidecarEnding {
    /// How a sidecar with (or without) a `command`, running `image`, ends.
    pub fn of(has_command: bool, image: &str) -> Self {
        if has_command {
            Self::Supervised
        } else if crate::image::is_agent_image(image) {
            Self::ReadsEndedFile
        } else {
            Self::Entrypoint
        }
    }

    /// Whether it ends by itself (reads the ended file, directly or through the supervisor).
    pub fn ends_by_itself(self) -> bool {
        matches!(self, Self::Supervised | Self::ReadsEndedFile)
    }
}

/// Why a Watcher's sidecar, in a pod that is meant to end, is ended by a restart the kubelet
/// counts: it runs `image`'s entrypoint as a regular container, for `regular`'s reason. Said in
/// the Watcher's `EndsWithoutRestart` condition and by `check-inject`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndsByRestart {
    /// The sidecar's image.
    pub image: String,
    /// Why the sidecar is a regular container.
    pub regular: Regular,
}

/// Why a sidecar is a regular container, not a native one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regular {
    /// The Watcher says `nativeSidecar: Never`.
    NativeSidecarNever,
    /// `nativeSidecar: Auto` on a server before Kubernetes 1.29.
    BeforeNativeSidecars,
}

impl std::fmt::Display for EndsByRestart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let regular = match self.regular {
            Regular::NativeSidecarNever => "nativeSidecar: Never",
            Regular::BeforeNativeSidecars => "before Kubernetes 1.29",
        };
        write!(
            f,
            "its sidecar runs the entrypoint of {}, which cannot be told that the app has ended: as a regular \
             container ({regular}) it is ended by a switch to the supervisor's image, a restart the kubelet counts; \
             a Job with restartPolicy OnFailure counts it toward its backoffLimit, so such a Job needs a \
             backoffLimit of 1 more than its app needs (at least 1). Give the sidecar a command (it then ends by \
             itself under watcher-supervise), or use restartPolicy Never",
            self.image
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_never_and_on_failure_on_linux_are_meant_to_end() {
        assert!(meant_to_end(Some("Never"), None));
        assert!(meant_to_end(Some("OnFailure"), Some("linux")));
        assert!(!meant_to_end(Some("Always"), None));
        assert!(!meant_to_end(None, None), "the default is Always");
        assert!(!meant_to_end(Some("Never"), Some("windows")));
    }

    #[test]
    fn a_command_or_the_agent_ends_by_itself_and_an_entrypoint_does_not() {
        assert_eq!(SidecarEnding::of(true, "busybox:1.36"), SidecarEnding::Supervised);
        assert_eq!(SidecarEnding::of(false, "registry.example/watcher-agent:0.1.0"), SidecarEnding::ReadsEndedFile);
        assert_eq!(SidecarEnding::of(false, "busybox:1.36"), SidecarEnding::Entrypoint);
        assert!(SidecarEnding::Supervised.ends_by_itself() && !SidecarEnding::Entrypoint.ends_by_itself());
    }
}
