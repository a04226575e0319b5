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

pub mod quantity;
mod quota;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, ResourceQuota, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
pub use quantity::{Amount, QuantityError};
use quota::Quota;

use crate::PodView;

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

/// A container's requests and limits as the pod will carry them, and where it stands.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerResources {
    /// The container's name.
    pub name: String,
    /// What kind of container: the quota counts init containers apart.
    pub kind: ContainerKind,
    requests: Values,
    limits: Values,
}

/// Where a container stands in the pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContainerKind {
    /// In `spec.containers`.
    #[default]
    Regular,
    /// An init container that runs to completion before the next.
    Init,
    /// An init container with `restartPolicy: Always` (a native sidecar): it runs beside the app.
    Sidecar,
}

/// The pod as the namespace's resource rules read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodResourceView {
    /// Every container, init containers included.
    pub containers: Vec<ContainerResources>,
    /// `activeDeadlineSeconds` is set: the quota scope `Terminating`.
    pub terminating: bool,
    /// `priorityClassName`, for a quota's `PriorityClass` scope.
    pub priority_class: Option<String>,
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

/// A container as [`ResourceRules::fit`] leaves it: what is set and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerFit {
    /// The requests and limits it gets; `None` where nothing changed.
    pub resources: Option<ResourceRequirements>,
    /// What was set, each with the rule that asked for it (`requests.cpu: 50m (LimitRange
    /// bounds: min)`).
    pub set: Vec<String>,
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

    /// `resources` (a container a Watcher adds to `pod`) as the namespace needs it: a value
    /// where it leaves a resource unset that a LimitRange defaults (as LimitRanger would give
    /// it) or that a quota counting `pod` makes every container state (the documented
    /// [`DEFAULT_REQUESTS`] and [`DEFAULT_LIMITS`]), and values brought within the
    /// LimitRanges' `min`, `max` and `maxLimitRequestRatio`. What still fails is
    /// [`Self::check`]'s to say.
    pub fn fit(&self, resources: Option<&ResourceRequirements>, pod: &PodResourceView) -> ContainerFit {
        if self.is_empty() {
            return ContainerFit::default();
        }
        let mut fitting = FitDraft {
            requests: values(resources.and_then(|r| r.requests.as_ref())),
            limits: values(resources.and_then(|r| r.limits.as_ref())),
            set: Vec::new(),
        };
        // kube-apiserver's defaulting: a limit without a request is the request too. Written
        // out, so that what is checked is what the pod carries.
        let own_limits: Vec<(String, Value)> = fitting.limits.clone().into_iter().collect();
        let mut defaulted = false;
        for (resource, limit) in own_limits {
            if let std::collections::btree_map::Entry::Vacant(entry) = fitting.requests.entry(resource) {
                entry.insert(limit);
                defaulted = true;
            }
        }
        for range in &self.limits {
            for item in &range.container {
                fitting.defaults(item, &range.name);
            }
        }
        self.state_what_quotas_count(&mut fitting, pod);
        for range in &self.limits {
            for item in &range.container {
                fitting.bound(item, &range.name);
            }
        }
        if fitting.set.is_empty() && !defaulted {
            return ContainerFit::default();
        }
        let list = |values: &Values| -> Option<BTreeMap<String, Quantity>> {
            (!values.is_empty()).then(|| values.iter().map(|(k, v)| (k.clone(), Quantity(v.text.clone()))).collect())
        };
        let claims = resources.and_then(|r| r.claims.clone());
        let requirements =
            ResourceRequirements { claims, limits: list(&fitting.limits), requests: list(&fitting.requests) };
        ContainerFit { resources: Some(requirements), set: fitting.set }
    }

    /// Gives `fitting` the cpu and memory a quota counting `pod` makes every container state.
    fn state_what_quotas_count(&self, fitting: &mut FitDraft, pod: &PodResourceView) {
        let asked = self.quotas.iter().filter(|q| q.counts(pod)).flat_map(|q| q.hard.keys().map(move |k| (k, q)));
        for (key, quota) in asked.filter(|(k, _)| MUST_STATE.contains(&k.as_str())) {
            let (limit, resource) = match Counted::of(key) {
                Counted::Limits(resource) => (true, resource),
                Counted::Requests(resource) => (false, resource),
                Counted::Other => continue,
            };
            let why = format!("ResourceQuota {}: counts {key}", quota.name);
            if limit && !fitting.limits.contains_key(resource) {
                let default = DEFAULT_LIMITS.iter().find(|(r, _)| *r == resource).map(|(_, v)| *v);
                let value = default.and_then(|d| Value::of(&Quantity(d.to_owned())));
                if let Some(mut value) = value {
                    if let Some(request) = fitting.requests.get(resource).filter(|r| r.amount > value.amount) {
                        value = request.clone();
                    }
                    fitting.set_limit(resource, value, &why);
                }
            } else if !limit && !fitting.requests.contains_key(resource) {
                let default = DEFAULT_REQUESTS.iter().find(|(r, _)| *r == resource).map(|(_, v)| *v);
                let value = default.and_then(|d| Value::of(&Quantity(d.to_owned())));
                if let Some(mut value) = value {
                    if let Some(limit) = fitting.limits.get(resource).filter(|l| l.amount < value.amount) {
                        value = limit.clone();
                    }
                    fitting.set_request(resource, value, &why);
                }
            }
        }
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

/// A container's requests and limits on their way to what the namespace needs.
struct FitDraft {
    requests: Values,
    limits: Values,
    set: Vec<String>,
}

impl FitDraft {
    fn set_request(&mut self, resource: &str, value: Value, why: &str) {
        self.set.push(format!("requests.{resource}: {} ({why})", value.text));
        self.requests.insert(resource.to_owned(), value);
    }

    fn set_limit(&mut self, resource: &str, value: Value, why: &str) {
        self.set.push(format!("limits.{resource}: {} ({why})", value.text));
        self.limits.insert(resource.to_owned(), value);
    }

    /// LimitRanger's defaults: a limit, then a request, where the container has none.
    fn defaults(&mut self, item: &Item, range: &str) {
        for (resource, value) in &item.default {
            if !self.limits.contains_key(resource) {
                let value = match self.requests.get(resource) {
                    // A default limit below the container's own request would make it invalid.
                    Some(request) if request.amount > value.amount => request.clone(),
                    _ => value.clone(),
                };
                self.set_limit(resource, value, &format!("LimitRange {range}: default"));
            }
        }
        for (resource, value) in &item.default_request {
            if !self.requests.contains_key(resource) {
                let value = match self.limits.get(resource) {
                    Some(limit) if limit.amount < value.amount => limit.clone(),
                    _ => value.clone(),
                };
                self.set_request(resource, value, &format!("LimitRange {range}: defaultRequest"));
            }
        }
    }

    /// Brings the values within `item`'s `min`, `max` and `maxLimitRequestRatio`.
    fn bound(&mut self, item: &Item, range: &str) {
        for (resource, min) in &item.min {
            let why = format!("LimitRange {range}: min {}", min.text);
            if self.requests.get(resource).is_none_or(|r| r.amount < min.amount) {
                self.set_request(resource, min.clone(), &why);
            }
            if self.limits.get(resource).is_some_and(|l| l.amount < min.amount) {
                self.set_limit(resource, min.clone(), &why);
            }
        }
        for (resource, max) in &item.max {
            let why = format!("LimitRange {range}: max {}", max.text);
            if self.limits.get(resource).is_none_or(|l| l.amount > max.amount) {
                self.set_limit(resource, max.clone(), &why);
            }
            if self.requests.get(resource).is_some_and(|r| r.amount > max.amount) {
                self.set_request(resource, max.clone(), &why);
            }
        }
        for (resource, ratio) in &item.ratio {
            let why = format!("LimitRange {range}: maxLimitRequestRatio {}", ratio.text);
            let unit = Amount::unit_of(resource);
            match (self.requests.get(resource).cloned(), self.limits.get(resource).cloned()) {
                (Some(request), Some(limit)) if request.amount.0 > 0 => {
                    if limit.amount.div_ceil(ratio.amount, Amount(1)) > request.amount {
                        let lowest = limit.amount.div_ceil(ratio.amount, unit);
                        self.set_request(resource, Value::computed(lowest.min(limit.amount)), &why);
                    }
                }
                (_, Some(limit)) => self.set_request(resource, limit, &why),
                (Some(request), None) => self.set_limit(resource, request, &why),
                (None, None) => {}
            }
        }
    }
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

impl PodResourceView {
    /// `pod` as the rules read it.
    pub fn of(pod: &PodView) -> Self {
        let Some(spec) = pod.spec.as_ref() else { return Self::default() };
        let init = spec.init_containers.iter().flatten().map(|c| {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                ContainerKind::Sidecar
            } else {
                ContainerKind::Init
            };
            ContainerResources::new(&c.name, kind, c.resources.as_ref())
        });
        let regular = spec
            .containers
            .iter()
            .map(|c| ContainerResources::new(&c.name, ContainerKind::Regular, c.resources.as_ref()));
        Self {
            containers: init.chain(regular).collect(),
            terminating: spec.active_deadline_seconds.is_some(),
            priority_class: spec.priority_class_name.clone(),
        }
    }

    /// The pod with `container` added.
    pub fn with(&self, container: ContainerResources) -> Self {
        let mut pod = self.clone();
        pod.containers.push(container);
        pod
    }

    /// Whether the pod is of QoS class BestEffort: no container requests or limits cpu or memory.
    fn best_effort(&self) -> bool {
        let counts = |values: &Values| values.keys().any(|k| k == "cpu" || k == "memory");
        !self.containers.iter().any(|c| counts(&c.requests) || counts(&c.limits))
    }

    /// What the pod requests (or, with `limits`, is limited to), as kube-apiserver adds it up:
    /// the regular containers and the native sidecars together, or the largest init container
    /// with the sidecars started before it, whichever is more.
    fn total(&self, limits: bool) -> BTreeMap<String, Amount> {
        let mut running: BTreeMap<&str, Amount> = BTreeMap::new();
        let mut sidecars: BTreeMap<&str, Amount> = BTreeMap::new();
        let mut init_peak: BTreeMap<&str, Amount> = BTreeMap::new();
        for container in &self.containers {
            let list = if limits { &container.limits } else { &container.requests };
            for (resource, value) in list {
                let resource = resource.as_str();
                match container.kind {
                    ContainerKind::Regular => {
                        *running.entry(resource).or_default() =
                            running.get(resource).copied().unwrap_or_default() + value.amount
                    }
                    ContainerKind::Sidecar => {
                        *sidecars.entry(resource).or_default() =
                            sidecars.get(resource).copied().unwrap_or_default() + value.amount
                    }
                    ContainerKind::Init => {
                        let with = value.amount + sidecars.get(resource).copied().unwrap_or_default();
                        let peak = init_peak.entry(resource).or_default();
                        *peak = (*peak).max(with);
                    }
                }
            }
        }
        let mut total: BTreeMap<&str, Amount> = BTreeMap::new();
        for (resource, amount) in running.iter().chain(&sidecars) {
            *total.entry(resource).or_default() = total.get(resource).copied().unwrap_or_default() + *amount;
        }
        for (resource, peak) in init_peak {
            let entry = total.entry(resource).or_default();
            *entry = (*entry).max(peak);
        }
        total.into_iter().map(|(k, amount)| (k.to_owned(), amount)).collect()
    }
}

impl ContainerResources {
    /// A container named `name` of `kind`, with `resources`.
    pub fn new(name: &str, kind: ContainerKind, resources: Option<&ResourceRequirements>) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            requests: values(resources.and_then(|r| r.requests.as_ref())),
            limits: values(resources.and_then(|r| r.limits.as_ref())),
        }
    }
}

#[cfg(test)]
mod tests;
