//! The namespace's resource rules, held after the patch as Pod Security is: its LimitRanges
//! (LimitRanger: defaults, `min`, `max`, `maxLimitRequestRatio`, per container and per pod) and
//! its ResourceQuotas (every container states cpu and memory once a quota tracks them; the pod
//! fits in what is left of each quota). kube-apiserver runs both after the webhook, on the pod
//! as patched: a pod that passes them by itself must pass them with what the Watchers add.
//!
//! [`ResourceRules::fit`] gives a container a Watcher adds what the namespace requires where it
//! leaves it unset and brings its values within the bounds; [`ResourceRules::check`] judges a
//! whole pod as kube-apiserver would, in its words, so that a Watcher is left out exactly where
//! it would make a pod fail that passes without it.

mod fit;
mod pod;
pub mod quantity;
mod quota;

use std::collections::BTreeMap;

pub use fit::ContainerFit;
use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, ResourceQuota};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
pub use pod::{ContainerKind, ContainerResources, PodResourceView};
pub use quantity::{Amount, QuantityError};
use quota::Quota;

/// What a container a Watcher adds requests where only a ResourceQuota asks it to state cpu or
/// memory (no LimitRange default): small, as a log or metrics sidecar needs.
pub const DEFAULT_REQUESTS: [(&str, &str); 2] = [("cpu", "10m"), ("memory", "32Mi")];
/// Its limits, likewise.
pub const DEFAULT_LIMITS: [(&str, &str); 2] = [("cpu", "100m"), ("memory", "64Mi")];

/// The resources a quota makes every container state (kube-apiserver's pod evaluator).
const MUST_STATE: [&str; 6] = ["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

/// What a key of a quota's `hard` counts of the pods' containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counted<'a> {
    /// The requests of a resource (`requests.cpu`; a bare `cpu`, `memory` or
    /// `ephemeral-storage` counts requests too).
    Requests(&'a str),
    /// The limits of a resource (`limits.memory`).
    Limits(&'a str),
    /// Something no container states (`pods`, `count/...`, a scope's extended resource).
    Other,
}

impl<'a> Counted<'a> {
    /// What quota key `key` counts.
    fn of(key: &'a str) -> Self {
        match key.split_once('.') {
            Some(("limits", resource)) => Self::Limits(resource),
            Some(("requests", resource)) => Self::Requests(resource),
            None if matches!(key, "cpu" | "memory" | "ephemeral-storage") => Self::Requests(key),
            _ => Self::Other,
        }
    }
}

/// A resource's amount and how it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Value {
    amount: Amount,
    text: String,
}

impl Value {
    fn of(quantity: &Quantity) -> Option<Self> {
        Amount::parse(&quantity.0).ok().map(|amount| Self { amount, text: quantity.0.clone() })
    }

    fn computed(amount: Amount) -> Self {
        Self { amount, text: amount.to_string() }
    }
}

type Values = BTreeMap<String, Value>;

fn values(list: Option<&BTreeMap<String, Quantity>>) -> Values {
    let entries = list.into_iter().flatten();
    entries.filter_map(|(k, q)| Some((k.clone(), Value::of(q)?))).collect()
}

/// One item of a LimitRange, as kube-apiserver stores it (its defaults filled in).
#[derive(Clone, Debug, Default, PartialEq)]
struct Item {
    min: Values,
    max: Values,
    ratio: Values,
    default: Values,
    default_request: Values,
}

impl Item {
    /// `item` with the defaults kube-apiserver gives a Container item: a default limit from
    /// `max`, a default request from the default limit, else from `min`.
    fn of(item: &LimitRangeItem) -> Self {
        let mut read = Self {
            min: values(item.min.as_ref()),
            max: values(item.max.as_ref()),
            ratio: values(item.max_limit_request_ratio.as_ref()),
            default: values(item.default.as_ref()),
            default_request: values(item.default_request.as_ref()),
        };
        if item.type_ == "Container" {
            for (k, v) in &read.max {
                read.default.entry(k.clone()).or_insert_with(|| v.clone());
            }
            for (k, v) in read.default.iter().chain(&read.min) {
                read.default_request.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        read
    }
}

/// A namespace's LimitRange, its Container and Pod items.
#[derive(Clone, Debug, Default, PartialEq)]
struct Limits {
    name: String,
    container: Vec<Item>,
    pod: Vec<Item>,
}

/// The ResourceQuotas and LimitRanges of one namespace, read for admission.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceRules {
    limits: Vec<Limits>,
    quotas: Vec<Quota>,
}

/// The object whose rule a pod fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A LimitRange, by name.
    LimitRange(String),
    /// A ResourceQuota, by name.
    ResourceQuota(String),
}

impl Rule {
    /// The object's name.
    pub fn name(&self) -> &str {
        match self {
            Self::LimitRange(name) | Self::ResourceQuota(name) => name,
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LimitRange(name) => write!(f, "LimitRange {name}"),
            Self::ResourceQuota(name) => write!(f, "ResourceQuota {name}"),
        }
    }
}

/// A rule a pod fails, as kube-apiserver would say it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The object whose rule it is (shown as `LimitRange bounds`, `ResourceQuota team`).
    pub rule: Rule,
    /// What fails, the same before and after a Watcher is added where it is the same failure.
    key: String,
    /// kube-apiserver's words for it alone.
    message: String,
    /// How it joins others of the same quota: `Specify(resource, container)` or `Exceeded`.
    group: Group,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Group {
    Limit,
    Specify { resource: String, container: String },
    Exceeded { resource: String, requested: Amount, used: Amount, limited: Amount },
}

impl ResourceRules {
    /// No rule: a namespace with neither a LimitRange nor a ResourceQuota.
    pub const NONE: Self = Self { limits: Vec::new(), quotas: Vec::new() };

    /// The rules of `limit_ranges` and `quotas` (all of one namespace).
    pub fn new<'a>(
        limit_ranges: impl IntoIterator<Item = &'a LimitRange>,
        quotas: impl IntoIterator<Item = &'a ResourceQuota>,
    ) -> Self {
        let limits = limit_ranges.into_iter().map(|range| {
            let items = range.spec.iter().flat_map(|s| &s.limits);
            let of = |kind: &str| items.clone().filter(|i| i.type_ == kind).map(Item::of).collect();
            Limits { name: range.metadata.name.clone().unwrap_or_default(), container: of("Container"), pod: of("Pod") }
        });
        let quotas = quotas.into_iter().map(|quota| {
            let spec = quota.spec.as_ref();
            let selector = spec.and_then(|s| s.scope_selector.as_ref()).and_then(|s| s.match_expressions.as_ref());
            Quota {
                name: quota.metadata.name.clone().unwrap_or_default(),
                hard: values(
                    quota.status.as_ref().and_then(|s| s.hard.as_ref()).or(spec.and_then(|s| s.hard.as_ref())),
                ),
                used: values(quota.status.as_ref().and_then(|s| s.used.as_ref())),
                scopes: spec.and_then(|s| s.scopes.clone()).unwrap_or_default(),
                expressions: selector
                    .into_iter()
                    .flatten()
                    .map(|e| (e.scope_name.clone(), e.operator.clone(), e.values.clone().unwrap_or_default()))
                    .collect(),
            }
        });
        Self { limits: limits.collect(), quotas: quotas.collect() }
    }

    /// Whether the namespace has neither a LimitRange nor a ResourceQuota.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty() && self.quotas.is_empty()
    }

    /// The names of the rules, for messages: `LimitRange bounds, ResourceQuota team`.
    pub fn names(&self) -> Vec<String> {
        let limits = self.limits.iter().map(|l| format!("LimitRange {}", l.name));
        limits.chain(self.quotas.iter().map(|q| format!("ResourceQuota {}", q.name))).collect()
    }

    /// Every rule `pod` fails, in kube-apiserver's words: the LimitRanges' (per container, then
    /// per pod), then the quotas' (a container that does not state what a quota counts, the
    /// pod past what is left of a quota).
    pub fn check(&self, pod: &PodResourceView) -> Vec<Violation> {
        let mut found = Vec::new();
        for range in &self.limits {
            let rule = Rule::LimitRange(range.name.clone());
            for container in &pod.containers {
                for item in &range.container {
                    let failures = bounds(item, "Container", &container.requests, &container.limits);
                    found.extend(failures.into_iter().map(|(key, message)| Violation {
                        rule: rule.clone(),
                        key: format!("{}/{key}", container.name),
                        message,
                        group: Group::Limit,
                    }));
                }
            }
            if range.pod.is_empty() {
                continue;
            }
            let as_values = |totals: BTreeMap<String, Amount>| -> Values {
                totals.into_iter().map(|(k, amount)| (k, Value::computed(amount))).collect()
            };
            let (requests, limits) = (as_values(pod.total(false)), as_values(pod.total(true)));
            for item in &range.pod {
                let failures = bounds(item, "Pod", &requests, &limits);
                found.extend(failures.into_iter().map(|(key, message)| Violation {
                    rule: rule.clone(),
                    key: format!("pod/{key}"),
                    message,
                    group: Group::Limit,
                }));
            }
        }
        for quota in self.quotas.iter().filter(|q| q.counts(pod)) {
            let unstated = quota.unstated(pod);
            if unstated.is_empty() {
                found.extend(quota.exceeded(pod));
            } else {
                found.extend(unstated);
            }
        }
        found
    }

    /// The violations of `after` that `before` does not have: what adding containers made fail.
    pub fn added(&self, before: &PodResourceView, after: &PodResourceView) -> Vec<Violation> {
        new_in(&self.check(before), self.check(after))
    }
}

/// The violations of `is` that `was` does not have (the same rule failing the same way).
pub fn new_in(was: &[Violation], is: impl IntoIterator<Item = Violation>) -> Vec<Violation> {
    is.into_iter().filter(|v| !was.iter().any(|w| w.rule == v.rule && w.key == v.key)).collect()
}

/// The failures of `requests` and `limits` against `item`'s bounds, keyed, in kube-apiserver's
/// words (`limitranger.go`: `minConstraint`, `maxConstraint`, `limitRequestRatioConstraint`).
fn bounds(item: &Item, kind: &str, requests: &Values, limits: &Values) -> Vec<(String, String)> {
    let mut failures = Vec::new();
    for (resource, min) in &item.min {
        let (request, limit) = (requests.get(resource), limits.get(resource));
        let message = match (request, limit) {
            (None, _) => Some(format!("minimum {resource} usage per {kind} is {}.  No request is specified", min.text)),
            (Some(r), _) if r.amount < min.amount => {
                Some(format!("minimum {resource} usage per {kind} is {}, but request is {}", min.text, r.text))
            }
            (_, Some(l)) if l.amount < min.amount => {
                Some(format!("minimum {resource} usage per {kind} is {}, but limit is {}", min.text, l.text))
            }
            _ => None,
        };
        failures.extend(message.map(|m| (format!("min/{resource}"), m)));
    }
    for (resource, max) in &item.max {
        let (request, limit) = (requests.get(resource), limits.get(resource));
        let message = match (request, limit) {
            (_, None) => Some(format!("maximum {resource} usage per {kind} is {}.  No limit is specified", max.text)),
            (_, Some(l)) if l.amount > max.amount => {
                Some(format!("maximum {resource} usage per {kind} is {}, but limit is {}", max.text, l.text))
            }
            (Some(r), _) if r.amount > max.amount => {
                Some(format!("maximum {resource} usage per {kind} is {}, but request is {}", max.text, r.text))
            }
            _ => None,
        };
        failures.extend(message.map(|m| (format!("max/{resource}"), m)));
    }
    for (resource, ratio) in &item.ratio {
        let (request, limit) = (requests.get(resource), limits.get(resource));
        let prefix = format!("{resource} max limit to request ratio per {kind} is {}", ratio.text);
        let message = match (request, limit) {
            (None, _) => Some(format!("{prefix}, but no request is specified or request is 0")),
            (Some(r), _) if r.amount.0 == 0 => Some(format!("{prefix}, but no request is specified or request is 0")),
            (_, None) => Some(format!("{prefix}, but no limit is specified or limit is 0")),
            (Some(r), Some(l)) => {
                let observed = Amount::ratio(l.amount, r.amount);
                let allowed = ratio.amount.0 as f64 / 1e9;
                (observed > allowed + 1e-9).then(|| format!("{prefix}, but provided ratio is {observed:.6}"))
            }
        };
        failures.extend(message.map(|m| (format!("ratio/{resource}"), m)));
    }
    failures
}

/// `violations` as kube-apiserver words them for one pod: the LimitRanges' messages (in
/// brackets where there are several), then per quota the containers that do not state what it
/// counts (`failed quota: team: must specify limits.cpu for: tail; ...`) or what the pod would
/// take past it (`exceeded quota: team, requested: ..., used: ..., limited: ...`).
pub fn describe(violations: &[Violation]) -> String {
    let mut parts = Vec::new();
    let limits: Vec<&str> = violations.iter().filter(|v| v.group == Group::Limit).map(|v| v.message.as_str()).collect();
    match limits.as_slice() {
        [] => {}
        [one] => parts.push((*one).to_owned()),
        many => parts.push(format!("[{}]", many.join(", "))),
    }
    let mut quotas: Vec<&Rule> = violations.iter().filter(|v| v.group != Group::Limit).map(|v| &v.rule).collect();
    quotas.dedup();
    for rule in quotas {
        let name = rule.name();
        let of = violations.iter().filter(|v| &v.rule == rule);
        let mut specify: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut exceeded = Vec::new();
        for violation in of {
            match &violation.group {
                Group::Specify { resource, container } => specify.entry(resource).or_default().push(container),
                Group::Exceeded { resource, requested, used, limited } => {
                    exceeded.push((resource, *requested, *used, *limited));
                }
                Group::Limit => {}
            }
        }
        if !specify.is_empty() {
            let each = specify.iter().map(|(r, containers)| {
                let mut containers = containers.clone();
                containers.sort_unstable();
                format!("{r} for: {}", containers.join(","))
            });
            parts.push(format!("failed quota: {name}: must specify {}", each.collect::<Vec<_>>().join("; ")));
        } else if !exceeded.is_empty() {
            let (mut requested, mut used, mut limited) = (Vec::new(), Vec::new(), Vec::new());
            for (resource, asked, taken, hard) in &exceeded {
                requested.push(format!("{resource}={asked}"));
                used.push(format!("{resource}={taken}"));
                limited.push(format!("{resource}={hard}"));
            }
            parts.push(format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                requested.join(","),
                used.join(","),
                limited.join(","),
            ));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests;
