//! Alerts as Warning Events on the pod, aggregated as Kubernetes Event series are: the first
//! occurrence of a rule's alert creates one `events.k8s.io/v1` Event; later occurrences grow its
//! `series` (count and last time) with a merge patch, never a new Event per line. An Event that
//! expired (404 on the patch) is created again.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::config::PodIdentity;

/// `reportingController` of the agent's Events.
pub const REPORTING_CONTROLLER: &str = "watcher.dev/watcher-agent";
/// kube-apiserver refuses a note longer than this.
const MAX_NOTE: usize = 1024;

/// The Event of each rule, and where to send them.
pub struct EventPublisher {
    api: Api<Event>,
    regarding: ObjectReference,
    instance: String,
    series: HashMap<String, Series>,
}

struct Series {
    name: String,
    count: i32,
}

impl EventPublisher {
    /// Events about `pod` (name and namespace known) through `client`.
    pub fn new(client: kube::Client, pod: &PodIdentity) -> Option<Self> {
        let (name, namespace) = (pod.name.clone()?, pod.namespace.clone()?);
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.uid.clone(),
            ..ObjectReference::default()
        };
        Some(Self { api: Api::namespaced(client, &namespace), regarding, instance: name, series: HashMap::new() })
    }

    /// `occurrences` more of rule `rule`'s alert (`reason`, `note` said on the first).
    pub async fn publish(&mut self, rule: &str, reason: &str, note: &str, occurrences: i32) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        if let Some(series) = self.series.get_mut(rule) {
            let count = series.count.saturating_add(occurrences);
            let patch = serde_json::json!({"series": {"count": count, "lastObservedTime": micro(now)}});
            match self.api.patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    series.count = count;
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.series.remove(rule); // expired: a new Event below
                }
                Err(error) => return Err(error),
            }
        }
        let event = self.event(rule, reason, note, occurrences, now);
        let created = self.api.create(&PostParams::default(), &event).await?;
        let name = created.metadata.name.or(event.metadata.name).unwrap_or_default();
        self.series.insert(rule.to_owned(), Series { name, count: occurrences.max(1) });
        Ok(())
    }

    fn event(&self, rule: &str, reason: &str, note: &str, occurrences: i32, now: Timestamp) -> Event {
        let pod = self.regarding.name.as_deref().unwrap_or("pod");
        let suffix = format!("{:x}", now.as_nanosecond());
        let rule_part: String = rule.chars().map(|c| if c == '_' { '-' } else { c }).collect();
        let mut name = format!("{pod}.{rule_part}.{suffix}");
        name.truncate(253);
        Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: self.regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some("Alert".into()),
            event_time: Some(micro(now)),
            note: Some(truncate(note, MAX_NOTE)),
            reason: Some(reason.to_owned()),
            regarding: Some(self.regarding.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(truncate(&self.instance, 128)),
            // kube-apiserver takes a series only from its second occurrence.
            series: (occurrences > 1).then(|| EventSeries { count: occurrences, last_observed_time: micro(now) }),
            type_: Some("Warning".into()),
            ..Event::default()
        }
    }
}

fn micro(at: Timestamp) -> MicroTime {
    MicroTime(at)
}

/// `text` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests;
