//! Alerts as Warning Events on the pod (`events.k8s.io/v1`), written as client-go's events/v1
//! recorder writes them, so that 200 replicas logging the same error do not become a stream of
//! etcd writes:
//!
//! - the first occurrence of a rule's alert creates an Event (its note: the rule and the last
//!   matching line);
//! - the second occurrence patches it at once with a `series` (count, last time; kube-apiserver
//!   keeps an Event's note as it was created: the line that made it fire);
//! - later occurrences are counted and written with the series every 30 minutes
//!   ([`HEARTBEAT`]);
//! - a series without an occurrence for 6 minutes ([`FINISH`]) is written a last time, if it
//!   grew since it was, and closed: the next occurrence creates a new Event.
//!
//! An Event that expired (its TTL, an hour by default) or was deleted (404) is created again with
//! its note and count. Names are the pod's and a time stamp, as client-go names them: a DNS
//! subdomain whatever the rule's name. Every call has a timeout; a failure is tried again with
//! backoff, and an Event kube-apiserver refuses for good (403, 422) is said once and not sent
//! again. The publisher runs in a task of its own ([`run`]): reading never waits for it.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tracing::{info, warn};

use crate::config::PodIdentity;
use crate::metrics::Metrics;
use crate::sinks::alerts::{AlertSink, AlertState};
use crate::text::truncate;

/// `reportingController` of the agent's Events.
pub(crate) const REPORTING_CONTROLLER: &str = "watcher.dev/watcher-agent";
/// A series that keeps growing is written this often (client-go's `refreshTime`).
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(30 * 60);
/// A series without an occurrence this long is closed (client-go's `finishTime`).
pub(crate) const FINISH: Duration = Duration::from_secs(6 * 60);
/// A call to kube-apiserver that takes longer fails.
const TIMEOUT: Duration = Duration::from_secs(10);
/// kube-apiserver refuses a note longer than this.
const MAX_NOTE: usize = 1024;
/// Backoff between failed calls: from 1 s, doubling, to this.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The Event of each rule, and where to send them.
pub(crate) struct EventPublisher {
    api: Api<Event>,
    regarding: ObjectReference,
    instance: String,
    /// By rule name.
    rules: HashMap<String, RuleEvents>,
    last_name: String,
}

/// What was written of one rule's alert.
#[derive(Default)]
struct RuleEvents {
    /// Occurrences taken from the alert loop (written, or to write).
    seen: u64,
    /// The series being written, if any.
    series: Option<Series>,
    /// Not before this (backoff after a failure).
    retry_at: Option<Instant>,
    backoff: Duration,
}

struct Series {
    name: String,
    /// Occurrences in this Event.
    count: u64,
    /// Occurrences written.
    written: u64,
    note: String,
    reason: String,
    last_observed: Timestamp,
    last_occurrence: Instant,
    last_write: Instant,
}

/// What a call came to.
enum Outcome {
    Done,
    /// The Event is gone (expired, deleted): create it again.
    Gone,
    /// Try again later.
    Retry(String),
    /// Refused for good: do not send it again.
    Refused(String),
}

impl EventPublisher {
    /// Events about `pod` (name and namespace known) through `client`.
    pub(crate) fn new(client: kube::Client, pod: &PodIdentity) -> Option<Self> {
        let (name, namespace) = (pod.name.clone()?, pod.namespace.clone()?);
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.uid.clone(),
            ..ObjectReference::default()
        };
        Some(Self {
            api: Api::namespaced(client, &namespace),
            regarding,
            instance: truncate(&name, 128),
            rules: HashMap::new(),
            last_name: String::new(),
        })
    }
}

/// Writes what the alerts say happened, as of `now` (`wall` for the Events' times): creates,
/// the second occurrence's patch, heartbeats and closings that are due; everything still
/// unwritten when `closing` (the agent stops).
impl AlertSink for EventPublisher {
    const WHAT: &'static str = "Events";

    async fn sync(&mut self, alerts: &[AlertState], now: Instant, wall: SystemTime, closing: bool, metrics: &Metrics) {
        let wall = Timestamp::try_from(wall).unwrap_or_else(|_| Timestamp::now());
        for alert in alerts {
            let mut state = self.rules.remove(&alert.name).unwrap_or_default();
            if state.retry_at.is_none_or(|at| at <= now || closing) {
                self.sync_rule(alert, &mut state, now, wall, closing, metrics).await;
            }
            self.rules.insert(alert.name.clone(), state);
        }
    }
}

impl EventPublisher {
    async fn sync_rule(
        &mut self,
        alert: &AlertState,
        state: &mut RuleEvents,
        now: Instant,
        wall: Timestamp,
        closing: bool,
        metrics: &Metrics,
    ) {
        let new = alert.occurrences.saturating_sub(state.seen);
        if new > 0 {
            match &mut state.series {
                Some(series) => {
                    series.count += new;
                    // An Event created again (expired) says the latest line.
                    series.note.clone_from(&alert.note);
                    series.last_observed = wall;
                    series.last_occurrence = now;
                }
                None => {
                    state.series = Some(Series {
                        name: String::new(),
                        count: new,
                        written: 0,
                        note: alert.note.clone(),
                        reason: alert.reason.clone(),
                        last_observed: wall,
                        last_occurrence: now,
                        last_write: now,
                    });
                }
            }
            state.seen = alert.occurrences;
        }
        let Some(series) = &mut state.series else { return };
        // To create; or the second occurrence, written at once; or more, at the heartbeat,
        // when the series closes, or when the agent stops.
        let to_create = series.name.is_empty();
        let second = series.written < 2 && series.count >= 2;
        let more = series.count > series.written
            && (closing
                || now.saturating_duration_since(series.last_write) >= HEARTBEAT
                || now.saturating_duration_since(series.last_occurrence) >= FINISH);
        let due = to_create || second || more;
        let mut outcome = if due { self.write(series, now).await } else { Outcome::Done };
        if let Outcome::Gone = outcome {
            info!(rule = alert.name, event = series.name, "the Event is gone (expired or deleted): creating it again");
            series.name.clear();
            series.written = 0;
            outcome = self.write(series, now).await;
        }
        match outcome {
            Outcome::Done => {
                if due {
                    metrics.sent("event", "sent");
                }
                state.retry_at = None;
                state.backoff = Duration::ZERO;
                let finished = now.saturating_duration_since(series.last_occurrence) >= FINISH;
                if finished && series.written == series.count {
                    state.series = None; // closed: the next occurrence is a new Event
                }
            }
            Outcome::Gone | Outcome::Retry(_) => {
                let error = match outcome {
                    Outcome::Retry(error) => error,
                    _ => "gone again".to_owned(),
                };
                metrics.sent("event", "failed");
                state.backoff = (state.backoff * 2).clamp(Duration::from_secs(1), MAX_BACKOFF);
                state.retry_at = Some(now + state.backoff);
                warn!(error, rule = alert.name, retry_in = ?state.backoff, "the Event could not be written; trying again");
            }
            Outcome::Refused(error) => {
                metrics.sent("event", "failed");
                warn!(error, rule = alert.name, "kube-apiserver refused the Event: not sent again");
                state.series = None;
            }
        }
    }

    /// Creates the series' Event, or patches it.
    async fn write(&mut self, series: &mut Series, now: Instant) -> Outcome {
        if series.name.is_empty() {
            let event = self.event(series);
            let name = event.metadata.name.clone().unwrap_or_default();
            let result = tokio::time::timeout(TIMEOUT, self.api.create(&PostParams::default(), &event)).await;
            let outcome = outcome(result);
            if let Outcome::Done = outcome {
                series.name = name;
                series.written = series.count;
                series.last_write = now;
            }
            return outcome;
        }
        // Only the series: kube-apiserver refuses a change of the note (immutable, 422).
        let patch = serde_json::json!({
            "series": {"count": clamp(series.count), "lastObservedTime": MicroTime(series.last_observed)},
        });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let outcome = outcome(tokio::time::timeout(TIMEOUT, self.api.patch(&series.name, &params, &patch)).await);
        if let Outcome::Done = outcome {
            series.written = series.count;
            series.last_write = now;
        }
        outcome
    }

    fn event(&mut self, series: &Series) -> Event {
        let name = self.name(series.last_observed);
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: self.regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some("Alert".into()),
            event_time: Some(MicroTime(series.last_observed)),
            note: Some(truncate(&series.note, MAX_NOTE)),
            reason: Some(series.reason.clone()),
            regarding: Some(self.regarding.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            // kube-apiserver takes a series only from its second occurrence.
            series: (series.count > 1).then(|| EventSeries {
                count: clamp(series.count),
                last_observed_time: MicroTime(series.last_observed),
            }),
            type_: Some("Warning".into()),
            ..Event::default()
        }
    }

    /// `<pod>.<time in hex>`, as client-go names Events: a DNS subdomain (the pod's name is one),
    /// never the same twice.
    fn name(&mut self, at: Timestamp) -> String {
        let pod = self.regarding.name.as_deref().unwrap_or("pod");
        let mut nanos = at.as_nanosecond();
        let mut name = event_name(pod, nanos);
        while name == self.last_name {
            nanos += 1;
            name = event_name(pod, nanos);
        }
        self.last_name.clone_from(&name);
        name
    }
}

/// Says one thing on the pod as an Event of its own (a configuration applied or refused):
/// `Normal`, or `Warning` where `warning`. A failure is said in the agent's log; nothing waits
/// for it longer than [`TIMEOUT`].
pub(crate) async fn notice(client: &kube::Client, pod: &PodIdentity, warning: bool, reason: &str, note: &str) {
    let Some(mut publisher) = EventPublisher::new(client.clone(), pod) else { return };
    let now = Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(publisher.name(now)),
            namespace: publisher.regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        action: Some("Reload".into()),
        event_time: Some(MicroTime(now)),
        note: Some(truncate(note, MAX_NOTE)),
        reason: Some(reason.into()),
        regarding: Some(publisher.regarding.clone()),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(publisher.instance.clone()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        ..Event::default()
    };
    let created = tokio::time::timeout(TIMEOUT, publisher.api.create(&PostParams::default(), &event)).await;
    match created {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => warn!(%error, reason, "cannot put the Event on the pod"),
        Err(_) => warn!(reason, "cannot put the Event on the pod: no answer in time"),
    }
}

/// The name of an Event about pod `pod` at `nanos`: at most 253 characters.
pub(crate) fn event_name(pod: &str, nanos: i128) -> String {
    let suffix = format!(".{nanos:x}");
    let mut end = pod.len().min(253 - suffix.len());
    while !pod.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = pod[..end].trim_end_matches(['.', '-']);
    format!("{prefix}{suffix}")
}

fn clamp(count: u64) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

fn outcome<T>(result: Result<Result<T, kube::Error>, tokio::time::error::Elapsed>) -> Outcome {
    match result {
        Ok(Ok(_)) => Outcome::Done,
        Err(_) => Outcome::Retry(format!("no answer within {}s", TIMEOUT.as_secs())),
        Ok(Err(kube::Error::Api(status))) => match status.code {
            404 => Outcome::Gone,
            // AlreadyExists (a name taken), throttled, or the server's own trouble.
            409 | 429 | 500.. => Outcome::Retry(status.message),
            _ => Outcome::Refused(format!("{} {}", status.code, status.message)),
        },
        Ok(Err(error)) => Outcome::Retry(error.to_string()),
    }
}

#[cfg(test)]
mod tests;
