//! Status conditions, kept the way `meta.SetStatusCondition` keeps them.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Condition types, as `kubectl wait --for=condition=...` and the printer columns name them.
pub mod types {
    /// Every kind's: the object is reconciled (a Watcher, ClusterWatcher, ImagePolicy, At,
    /// PodSet).
    pub const READY: &str = "Ready";
    /// A Watcher's: how its spec stands towards the Pod Security levels where it applies.
    pub const POD_SECURITY: &str = "PodSecurity";
    /// A Watcher's: its sidecar rollout (`updatePolicy` Recreate or InPlace).
    pub const SIDECARS_UPDATED: &str = "SidecarsUpdated";
    /// A Watcher's: whether its sidecars run in the pods it injected.
    pub const SIDECARS_RUNNING: &str = "SidecarsRunning";
    /// A Watcher's: whether its sidecars end with the pods that are meant to end.
    pub const SIDECARS_ENDED: &str = "SidecarsEnded";
    /// A Watcher's: `False` where its sidecar, in a pod that is meant to end, is ended by a
    /// restart the kubelet counts (a Job under `OnFailure` counts it toward `backoffLimit`).
    pub const ENDS_WITHOUT_RESTART: &str = "EndsWithoutRestart";
    /// A Watcher's whose sidecar is watcher-agent: whether the agent takes its configuration
    /// (`configData` and the container's `env`), judged by the agent's own code before any pod.
    pub const AGENT_CONFIGURED: &str = "AgentConfigured";
    /// A Watcher's: whether pods that ask for it were admitted without it, because they would
    /// fail their namespace's Pod Security level or resource rules (quota, LimitRange) with it.
    pub const INJECTED: &str = "Injected";
    /// A Watcher's: how its containers stand towards the ResourceQuotas and LimitRanges where it
    /// applies.
    pub const RESOURCES: &str = "Resources";
}

/// Reasons of the `Ready` condition.
pub mod reasons {
    /// Reconciled as the spec asks.
    pub const RECONCILED: &str = "Reconciled";
    /// The spec cannot be reconciled as written.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A ConfigMap of the name the operator writes exists and is not the operator's.
    pub const CONFIG_MAP_CONFLICT: &str = "ConfigMapConflict";
    /// The webhook's admission scope does not cover the Watcher yet.
    pub const ADMISSION_SCOPE_PENDING: &str = "AdmissionScopePending";
    /// An ImagePolicy's rule does not compile.
    pub const INVALID_RULE: &str = "InvalidRule";
    /// An ImagePolicy's rules compile.
    pub const VALID: &str = "Valid";
    /// kube-apiserver refused the pod an At or a PodSet creates (a quota, a LimitRange, Pod
    /// Security): the message has its words, and the pod is created again.
    pub const POD_REFUSED: &str = "PodRefused";
    /// watcher-agent would refuse the Watcher's configuration: it is not written into the
    /// ConfigMap, which keeps the last good one (or, with none yet, pods are admitted without
    /// the sidecar).
    pub const CONFIG_REFUSED: &str = "ConfigRefused";
}

/// Puts `condition` into `conditions`, replacing the one of the same type.
///
/// `lastTransitionTime` moves only when the status changes, so a reconcile that finds nothing
/// new produces an equal list and, in turn, no status write.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

/// A condition with `lastTransitionTime` now.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(Timestamp::now()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut old = condition("Ready", true, "Reconciled", "ok", Some(1));
        old.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        let mut conditions = vec![old];

        set_condition(&mut conditions, condition("Ready", true, "Reconciled", "still ok", Some(2)));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(Timestamp::UNIX_EPOCH));
        assert_eq!(conditions[0].message, "still ok");

        set_condition(&mut conditions, condition("Ready", false, "Failed", "broken", Some(3)));
        assert_ne!(conditions[0].last_transition_time, Time(Timestamp::UNIX_EPOCH));
        assert_eq!(conditions[0].status, "False");

        set_condition(&mut conditions, condition("Other", true, "X", "", None));
        assert_eq!(conditions.len(), 2);
    }
}
