//! Status conditions, kept the way `meta.SetStatusCondition` keeps them.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

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
