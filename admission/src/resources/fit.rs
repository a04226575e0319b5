//! A container a Watcher adds, given what the namespace's rules require: LimitRange defaults
//! and bounds, and the cpu and memory a quota makes every container state.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

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
