//! Whether a pod runs the configuration its Watcher gives now, from what the pod carries.

use crate::Watcher;

/// Whether a pod runs the configuration a Watcher gives it now, from the configuration's hash the
/// pod carries (`watcher.dev/injected-config`): what the pod reconciler counts and `check-inject`
/// says. Made once per Watcher, asked per pod.
#[derive(Clone, Debug)]
pub struct ConfigJudge {
    /// [`crate::WatcherSpec::pinned_config_hash`].
    pinned: Option<String>,
    /// Whether a pod that carries no hash (injected by 0.2.0) runs the current configuration:
    /// where there is none, and while the ConfigMap holds what 0.2.0 wrote (the status records
    /// no `configGeneration`). Once the configuration changes, such a pod runs an older one,
    /// watcher-agent's too: it has no volume to read a new one from.
    unmarked_current: bool,
}

impl ConfigJudge {
    /// The judge of `watcher`'s pods.
    pub fn of(watcher: &Watcher) -> Self {
        let recorded = watcher.status.as_ref().and_then(|s| s.config_generation).is_some();
        Self { pinned: watcher.spec.pinned_config_hash(), unmarked_current: !watcher.spec.has_config() || !recorded }
    }

    /// Whether a pod that carries `carried` (its hash of this Watcher's configuration, `None`
    /// where it carries none) runs the current configuration, as far as the operator can know.
    pub fn current(&self, carried: Option<&str>) -> bool {
        match carried {
            Some(hash) => self.pinned.as_deref().is_none_or(|pinned| pinned == hash),
            None => self.unmarked_current,
        }
    }
}
