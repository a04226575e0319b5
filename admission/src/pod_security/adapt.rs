//! Keeping a pod that passes its namespace's level passing once the Watchers' containers are
//! added: what is set in them, on the typed pod or on its JSON.

use k8s_openapi::api::core::v1::{Capabilities, Container, SeccompProfile, SecurityContext};

use super::facts::PodFacts;
use super::{Level, Policy};

/// What the webhook sets in a container a Watcher adds, so that it passes the enforced level
/// and can start: only fields the Watcher leaves unset and the level needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adaptation {
    /// `allowPrivilegeEscalation: false`.
    pub allow_privilege_escalation: bool,
    /// `capabilities.drop: [ALL]` (beside the capabilities the container adds).
    pub drop_all: bool,
    /// `seccompProfile.type: RuntimeDefault`.
    pub seccomp: bool,
    /// `runAsNonRoot: true`.
    pub run_as_non_root: bool,
    /// `runAsUser: 65532` ([`watcher_api::ADAPTED_RUN_AS_USER`]): the level requires a non-root
    /// user and neither the pod nor the container says which. The image's user is not known
    /// at admission, and the kubelet refuses to start a container that must run as non-root
    /// and whose image runs as root (most images, unless told).
    pub run_as_user: bool,
}

/// Whether `policy` requires the pod's containers to run as non-root: `restricted`, except
/// for a pod in a user namespace from 1.35 (`hostUsers: false`, where root is not the host's).
pub fn requires_non_root(policy: Policy, server: u32, pod: &PodFacts<'_>) -> bool {
    policy.level == Level::Restricted && !(policy.minor_on(server) >= 35 && pod.host_users == Some(false))
}

impl Adaptation {
    /// What `policy` needs set in `container` of `pod`, of what the container leaves unset.
    pub fn needed(policy: Policy, server: u32, pod: &PodFacts<'_>, container: Option<&SecurityContext>) -> Self {
        if policy.level != Level::Restricted {
            return Self::default();
        }
        let minor = policy.minor_on(server);
        let pod_context = pod.security_context.as_deref();
        // Windows pods may not set these fields, and from 1.25 the standards do not ask them to.
        let linux_only = !pod.windows || minor < 25;
        let non_root = requires_non_root(policy, server, pod);
        Self {
            allow_privilege_escalation: linux_only
                && minor >= 8
                && container.is_none_or(|c| c.allow_privilege_escalation.is_none()),
            drop_all: linux_only
                && minor >= 22
                && container.is_none_or(|c| c.capabilities.as_ref().is_none_or(|caps| caps.drop.is_none())),
            seccomp: linux_only
                && minor >= 19
                && pod_context.is_none_or(|p| p.seccomp_profile.is_none())
                && container.is_none_or(|c| c.seccomp_profile.is_none()),
            run_as_non_root: non_root
                && pod_context.is_none_or(|p| p.run_as_non_root.is_none())
                && container.is_none_or(|c| c.run_as_non_root.is_none()),
            run_as_user: non_root
                && !pod.windows
                && pod_context.is_none_or(|p| p.run_as_user.is_none())
                && container.is_none_or(|c| c.run_as_user.is_none()),
        }
    }

    /// Whether there is nothing to set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The fields it sets, as they are written in a securityContext.
    pub fn fields(&self) -> Vec<&'static str> {
        let set = [
            (self.allow_privilege_escalation, "allowPrivilegeEscalation: false"),
            (self.drop_all, "capabilities.drop: [ALL]"),
            (self.seccomp, "seccompProfile: RuntimeDefault"),
            (self.run_as_non_root, "runAsNonRoot: true"),
            (self.run_as_user, "runAsUser: 65532"),
        ];
        set.into_iter().filter(|(on, _)| *on).map(|(_, field)| field).collect()
    }

    /// `context` with the adaptation applied.
    pub fn apply(&self, context: Option<&SecurityContext>) -> SecurityContext {
        let mut context = context.cloned().unwrap_or_default();
        if self.allow_privilege_escalation {
            context.allow_privilege_escalation = Some(false);
        }
        if self.drop_all {
            let add = context.capabilities.take().and_then(|c| c.add);
            context.capabilities = Some(Capabilities { add, drop: Some(vec!["ALL".to_owned()]) });
        }
        if self.seccomp {
            context.seccomp_profile =
                Some(SeccompProfile { type_: "RuntimeDefault".to_owned(), localhost_profile: None });
        }
        if self.run_as_non_root {
            context.run_as_non_root = Some(true);
        }
        if self.run_as_user {
            context.run_as_user = Some(watcher_api::ADAPTED_RUN_AS_USER);
        }
        context
    }

    /// `container` as the webhook writes it, as JSON: its securityContext is [`Self::apply`]'s.
    pub fn written(&self, container: &Container) -> serde_json::Value {
        // Serialising k8s-openapi types to a Value cannot fail: they are plain data with string keys.
        let mut value = serde_json::to_value(container).unwrap_or_default();
        if let (Some(context), Some(fields)) = (self.security_context(container), value.as_object_mut()) {
            fields.insert("securityContext".to_owned(), context);
        }
        value
    }

    /// The securityContext the webhook writes into `container` (as JSON): [`Self::apply`]'s;
    /// `None` where the adaptation changes nothing.
    pub fn security_context(&self, container: &Container) -> Option<serde_json::Value> {
        let context = (!self.is_empty()).then(|| self.apply(container.security_context.as_ref()))?;
        Some(serde_json::to_value(context).unwrap_or_default())
    }
}
