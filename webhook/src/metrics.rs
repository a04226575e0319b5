//! Admission metrics.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// How an admission request ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case
pub enum AdmissionResult {
    /// A patch was returned that injects Watchers (and may rewrite images).
    injected,
    /// A patch was returned that only rewrites images.
    rewritten,
    /// The pod was allowed unchanged.
    skipped,
    /// A dry-run probe of `watcher-operator check` was answered.
    probe,
    /// The pod was refused: it asks for a required Watcher it cannot get.
    refused,
    /// The request could not be read, or was denied.
    error,
}

impl AdmissionResult {
    /// Every result, each exported from the start (at 0), so `rate()` sees the first request of
    /// each and a dashboard shows 0 rather than no data.
    pub const ALL: [Self; 6] =
        [Self::injected, Self::rewritten, Self::skipped, Self::probe, Self::refused, Self::error];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: AdmissionResult,
}

/// What the namespace's enforced Pod Security level did to a Watcher at admission.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case
pub enum PodSecurityOutcome {
    /// Injected with fields set that it left unset and the level needs.
    adapted,
    /// Left out of a pod that was admitted without it.
    left_out,
    /// A required Watcher that cannot comply: the pod was refused.
    refused,
}

impl PodSecurityOutcome {
    /// Every outcome, each exported from the start.
    pub const ALL: [Self; 3] = [Self::adapted, Self::left_out, Self::refused];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: PodSecurityOutcome,
}

/// What the namespace's ResourceQuotas and LimitRanges did to a Watcher at admission: its
/// containers' resources set (`adapted`), left out (`left_out`), or the pod refused for a
/// required one (`refused`). The same values as [`PodSecurityOutcome`].
pub type ResourceOutcome = PodSecurityOutcome;

/// `watcher_admission_requests_total{result}`, `watcher_admission_duration_seconds`,
/// `watcher_admission_pod_security_total{outcome}` and `watcher_admission_resources_total{outcome}`
/// (per Watcher).
#[derive(Clone)]
pub struct Metrics {
    requests: Family<ResultLabels, Counter>,
    duration: Histogram,
    pod_security: Family<OutcomeLabels, Counter>,
    resources: Family<OutcomeLabels, Counter>,
}

impl Metrics {
    /// Metrics registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            // Up to the webhook's timeout (5 s as installed, at most 30): an alert watches the
            // tail close to it.
            duration: Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            pod_security: Family::default(),
            resources: Family::default(),
        };
        for result in AdmissionResult::ALL {
            drop(metrics.requests.get_or_create(&ResultLabels { result }));
        }
        for outcome in PodSecurityOutcome::ALL {
            drop(metrics.pod_security.get_or_create(&OutcomeLabels { outcome }));
            drop(metrics.resources.get_or_create(&OutcomeLabels { outcome }));
        }
        registry.register(
            "watcher_admission_resources",
            "Watchers whose containers' resources were set for, left out by, or refusing a pod for its namespace's ResourceQuotas and LimitRanges",
            metrics.resources.clone(),
        );
        registry.register(
            "watcher_admission_pod_security",
            "Watchers adapted to, left out by, or refusing a pod for its namespace's enforced Pod Security level",
            metrics.pod_security.clone(),
        );
        registry.register("watcher_admission_requests", "Admission requests answered", metrics.requests.clone());
        registry.register(
            "watcher_admission_duration_seconds",
            "Time to answer an admission request",
            metrics.duration.clone(),
        );
        metrics
    }

    /// Counts one answered request that took `seconds`.
    pub fn observe(&self, result: AdmissionResult, seconds: f64) {
        self.requests.get_or_create(&ResultLabels { result }).inc();
        self.duration.observe(seconds);
    }

    /// Counts what Pod Security did at one admission, one count per Watcher.
    pub fn count_pod_security(&self, outcomes: &[PodSecurityOutcome]) {
        for outcome in outcomes {
            self.pod_security.get_or_create(&OutcomeLabels { outcome: *outcome }).inc();
        }
    }

    /// Counts what the namespace's resource rules did at one admission, one count per Watcher.
    pub fn count_resources(&self, outcomes: &[ResourceOutcome]) {
        for outcome in outcomes {
            self.resources.get_or_create(&OutcomeLabels { outcome: *outcome }).inc();
        }
    }

    /// Watchers counted so far with `outcome` of the resource rules.
    pub fn resources_count(&self, outcome: ResourceOutcome) -> u64 {
        self.resources.get_or_create(&OutcomeLabels { outcome }).get()
    }

    /// Watchers counted so far with `outcome`.
    pub fn pod_security_count(&self, outcome: PodSecurityOutcome) -> u64 {
        self.pod_security.get_or_create(&OutcomeLabels { outcome }).get()
    }

    /// Requests counted so far with `result`.
    pub fn count(&self, result: AdmissionResult) -> u64 {
        self.requests.get_or_create(&ResultLabels { result }).get()
    }
}
