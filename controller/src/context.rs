//! What every reconciler shares: the client, the metrics and per-object retry backoff.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::watch;
use tracing::warn;

use crate::Metrics;
use crate::runtime::lock;

/// What every controller shares: the client, the metrics, the Recorder, per-object retry
/// backoff and the process's shutdown. A controller takes it as it is, with its own few fields
/// beside it (its reconciler's own struct), never wrapped.
pub struct Context {
    /// Kubernetes API client.
    pub client: Client,
    /// Reconcile metrics.
    pub metrics: Metrics,
    /// Events, as `watcher-operator` (and the replica's pod, where `POD_NAME` says it).
    pub recorder: Recorder,
    backoff: Backoff,
    /// Becomes true when the process stops: every controller then ends, its reconciles in
    /// flight finished first.
    shutdown: watch::Receiver<bool>,
}

impl Context {
    /// A context over `client` that counts into `metrics`, and stops with no signal (see
    /// [`Context::with_shutdown`]).
    pub fn new(client: Client, metrics: Metrics) -> Self {
        let reporter =
            Reporter { controller: watcher_api::FIELD_MANAGER.into(), instance: std::env::var("POD_NAME").ok() };
        let recorder = Recorder::new(client.clone(), reporter);
        let (_, shutdown) = watch::channel(false);
        Self { client, metrics, recorder, backoff: Backoff::default(), shutdown }
    }

    /// This context, its controllers ending once `shutdown` becomes true: the process's one
    /// shutdown signal (the controllers catch none of their own).
    pub fn with_shutdown(self, shutdown: watch::Receiver<bool>) -> Self {
        Self { shutdown, ..self }
    }

    /// Resolves once the process stops; never where no shutdown was given.
    pub(crate) fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut shutdown = self.shutdown.clone();
        async move {
            if shutdown.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await; // no sender: nothing will stop it
            }
        }
    }

    /// Publishes an Event of `type_` about `regarding`, for `action` (`Reconcile`, `End`,
    /// `Sync`, ...); a failure is logged, never returned (an Event is a courtesy).
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary: None };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            warn!(%error, reason, "cannot publish an event");
        }
    }

    /// The action after a failed reconcile of `key`: counted, logged by the caller, and retried
    /// after a delay that doubles with every consecutive failure (5 s up to 5 min).
    pub fn retry_after_error(&self, controller: &'static str, key: String, error: &crate::Error) -> Action {
        Action::requeue(self.backoff_after_error(controller, key, error))
    }

    /// [`Context::retry_after_error`] as a delay, for loops that schedule their own retries.
    pub fn backoff_after_error(&self, controller: &'static str, key: String, error: &crate::Error) -> Duration {
        self.metrics.error(controller, error);
        self.backoff.next(key)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn reconciled(&self, key: &str) {
        self.backoff.reset(key);
    }
}

/// Consecutive failures per object.
#[derive(Default)]
struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

const BACKOFF_BASE: Duration = Duration::from_secs(5);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

impl Backoff {
    fn next(&self, key: String) -> Duration {
        let mut failures = lock(&self.failures);
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        BACKOFF_BASE.saturating_mul(1 << (*count - 1).min(6)).min(BACKOFF_MAX)
    }

    fn reset(&self, key: &str) {
        let mut failures = lock(&self.failures);
        // Only the failing objects are kept, so a healthy cluster holds an empty map.
        failures.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes_and_resets() {
        let backoff = Backoff::default();
        let delays: Vec<_> = (0..9).map(|_| backoff.next("ns/a".into()).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff.next("ns/b".into()).as_secs(), 5, "objects back off independently");
        backoff.reset("ns/a");
        assert_eq!(backoff.next("ns/a".into()).as_secs(), 5);
    }
}
