//! What `inject` needs to know about the cluster besides the pod: the namespaces never injected,
//! whether the server runs native sidecars, its version, the supervisor's image.

use watcher_api::{DEFAULT_SUPERVISOR_IMAGE, NativeSidecar, Watcher};

/// Namespaces that are never injected, whatever the pods in them ask for.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// What `inject` needs to know about the cluster besides the pod.
#[derive(Clone, Debug)]
pub struct InjectOptions {
    /// Namespaces never injected besides [`SYSTEM_NAMESPACES`]: the operator's own.
    pub excluded_namespaces: Vec<String>,
    /// Whether the API server runs native sidecars (Kubernetes 1.29 or later).
    pub native_sidecars: bool,
    /// The API server's minor version (Pod Security's `latest` is its own); `None`: the newest
    /// the webhook knows.
    pub server_minor: Option<u32>,
    /// The image of `watcher-supervise`, which ends the regular sidecars of pods that are meant
    /// to end (`--supervisor-image`).
    pub supervisor_image: String,
}

impl Default for InjectOptions {
    fn default() -> Self {
        Self {
            excluded_namespaces: Vec::new(),
            native_sidecars: false,
            server_minor: None,
            supervisor_image: DEFAULT_SUPERVISOR_IMAGE.to_owned(),
        }
    }
}

impl InjectOptions {
    /// Whether pods of `namespace` are left as they are: the system namespaces and the
    /// operator's own are never injected nor rewritten.
    pub fn never_mutated(&self, namespace: &str) -> bool {
        SYSTEM_NAMESPACES.contains(&namespace) || self.excluded_namespaces.iter().any(|ns| ns == namespace)
    }
}

/// Whether a kube-apiserver of this version runs native sidecars (init containers with
/// `restartPolicy: Always`, on by default since Kubernetes 1.29). `minor` may carry a vendor
/// suffix such as `29+`.
pub fn supports_native_sidecars(major: &str, minor: &str) -> bool {
    crate::ServerVersion::parse(major, minor).is_some_and(crate::ServerVersion::native_sidecars)
}

/// The minor version of a Kubernetes 1.x server, as `/version` gives it (perhaps `29+`).
pub fn server_minor(major: &str, minor: &str) -> Option<u32> {
    crate::ServerVersion::parse(major, minor).and_then(crate::ServerVersion::minor_of_1)
}

/// Whether `watcher`'s sidecar is a native one on this server; said where it asks for one the
/// server does not run.
pub(super) fn native_sidecar(
    name: &str,
    watcher: &Watcher,
    options: &InjectOptions,
    warnings: &mut Vec<String>,
) -> bool {
    match watcher.spec.native_sidecar {
        NativeSidecar::Always => {
            if !options.native_sidecars {
                warnings.push(format!(
                    "Watcher {name} asks for a native sidecar, which this API server does not support \
                     (Kubernetes 1.29 or later)"
                ));
            }
            true
        }
        NativeSidecar::Auto => options.native_sidecars,
        NativeSidecar::Never => false,
    }
}
