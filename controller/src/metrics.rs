//! Reconcile metrics, and one for each promise an alert guards, registered in the process-wide
//! Prometheus registry: per-Watcher pod counts and rollout state (read from the Watcher cache at
//! each scrape: no series outlives its Watcher), the admission scope's state, the Lease held,
//! and watch errors and lists per resource.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use watcher_api::types;
use watcher_api::{ClusterWatcher, PodCounts, Watcher};

/// `{controller}` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ControllerLabels {
    /// `watcher`, `pods`, `at` or `podset`.
    pub(crate) controller: &'static str,
}

/// `{controller, error}` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    /// `watcher`, `pods`, `at` or `podset`.
    pub(crate) controller: &'static str,
    /// [`crate::Error::metric_label`].
    pub(crate) error: &'static str,
}

/// `{kind}` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabels {
    /// `Secret` or `ConfigMap`.
    pub(crate) kind: &'static str,
}

/// `{state, reason}` labels of the admission scope.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ScopeLabels {
    pub(crate) state: &'static str,
    pub(crate) reason: &'static str,
}

/// The admission scope's state: whether the webhook's `matchConditions` narrow what
/// kube-apiserver sends, and why not (a small fixed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeState {
    /// Not known yet: the leader has not read the webhook configuration.
    Pending,
    /// The conditions in place are this operator's: only pods it could change are sent.
    Applied,
    /// Every pod of a served namespace is sent, for `reason`: `refused` (kube-apiserver
    /// refused the conditions), `dropped` (it dropped them: feature gate off), `too_large`
    /// (over its limits), `no_configuration`, `no_webhook`, `other_operator` (another
    /// operator's registration without conditions stands).
    Fallback(&'static str),
    /// kube-apiserver before 1.28: no matchConditions at all.
    Unsupported,
}

impl ScopeState {
    fn labels(self) -> ScopeLabels {
        match self {
            Self::Pending => ScopeLabels { state: "pending", reason: "" },
            Self::Applied => ScopeLabels { state: "applied", reason: "" },
            Self::Fallback(reason) => ScopeLabels { state: "fallback", reason },
            Self::Unsupported => ScopeLabels { state: "unsupported", reason: "before_1_28" },
        }
    }
}

/// Every controller, as its series name it.
pub const CONTROLLERS: [&str; 7] = ["watcher", "pods", "ending", "at", "podset", "sync", "images"];

/// Every resource whose watches are counted ([`observe_watch`]): their series are exported from
/// the start, at 0.
pub const WATCHED_RESOURCES: [&str; 10] = [
    "watchers",
    "imagepolicies",
    "namespaces",
    "pods",
    "controllerrevisions",
    "configmaps",
    "secrets",
    "deployments",
    "statefulsets",
    "daemonsets",
];

/// The reconcile metrics of every controller.
#[derive(Clone)]
pub struct Metrics {
    in_place_updates: Counter,
    sync_conflicts: Family<KindLabels, Counter>,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    leader: Gauge,
    scope: Family<ScopeLabels, Gauge>,
    cluster_pods: ClusterPods,
}

/// Per ClusterWatcher, per namespace where it applies: its pods' counts, as the pod reconciler
/// last counted them (in the leader; `status.pods` holds their sum).
pub type ClusterPods = Arc<RwLock<BTreeMap<String, BTreeMap<String, PodCounts>>>>;

fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
}

impl Metrics {
    /// Metrics registered in `registry` under the `watcher_` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            in_place_updates: Counter::default(),
            sync_conflicts: Family::default(),
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            leader: Gauge::default(),
            scope: Family::default(),
            cluster_pods: ClusterPods::default(),
        };
        // Every series known in advance, at 0: `rate()` and `increase()` see the first error of
        // each, and the dashboard shows 0 rather than no data.
        for controller in CONTROLLERS {
            drop(metrics.reconciles.get_or_create(&ControllerLabels { controller }));
            for error in crate::Error::METRIC_LABELS {
                drop(metrics.errors.get_or_create(&ErrorLabels { controller, error }));
            }
        }
        registry.register("watcher_reconcile", "Reconciles run", metrics.reconciles.clone());
        registry.register(
            "watcher_sidecar_in_place_updates",
            "Sidecar images updated in place in running pods (updatePolicy InPlace)",
            metrics.in_place_updates.clone(),
        );
        registry.register("watcher_reconcile_errors", "Reconciles that failed", metrics.errors.clone());
        registry.register("watcher_reconcile_duration_seconds", "Time a reconcile took", metrics.duration.clone());
        registry.register(
            "watcher_sync_conflicts",
            "Copies not written because an object that is not a copy holds the name",
            metrics.sync_conflicts.clone(),
        );
        registry.register(
            "watcher_leader",
            "1 while this replica holds the Lease and runs the controllers (always, without leader election)",
            metrics.leader.clone(),
        );
        registry.register(
            "watcher_admission_scope",
            "1 for the admission scope's state (pending, applied, fallback, unsupported) and why it fell back; \
             exported by the replica running the controllers",
            metrics.scope.clone(),
        );
        watcher_cache::watch::register(registry, &WATCHED_RESOURCES);
        metrics
    }

    /// Says whether this replica runs the controllers. The admission scope is the leader's to
    /// say: a replica that stops leading exports none.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            self.scope.clear();
        }
    }

    /// Whether this replica runs the controllers, as exported.
    pub fn is_leader(&self) -> bool {
        self.leader.get() == 1
    }

    /// Sets the admission scope's state: its series is 1, every other 0 (gone).
    pub fn set_scope(&self, state: ScopeState) {
        let labels = state.labels();
        if self.scope.get_or_create(&labels).get() == 1 {
            return;
        }
        self.scope.clear();
        self.scope.get_or_create(&labels).set(1);
    }

    /// The admission scope's state as exported: `(state, reason)`.
    pub fn scope(&self) -> Option<(&'static str, &'static str)> {
        ["pending", "applied", "fallback", "unsupported"].into_iter().find_map(|state| {
            ["", "refused", "dropped", "too_large", "no_configuration", "no_webhook", "other_operator", "before_1_28"]
                .into_iter()
                .find(|reason| self.scope.get(&ScopeLabels { state, reason }).is_some_and(|g| g.get() == 1))
                .map(|reason| (state, reason))
        })
    }

    /// The per-namespace pod counts of the ClusterWatchers, for [`WatcherCollector`].
    pub fn cluster_pods(&self) -> ClusterPods {
        self.cluster_pods.clone()
    }

    /// Records `cluster`'s pod counts in each namespace where it applies.
    pub fn set_cluster_pods(&self, cluster: &str, counts: BTreeMap<String, PodCounts>) {
        self.cluster_pods.write().unwrap_or_else(|p| p.into_inner()).insert(cluster.to_owned(), counts);
    }

    /// Counts one sidecar image updated in place.
    pub fn in_place_update(&self) {
        self.in_place_updates.inc();
    }

    /// Sidecar images updated in place so far.
    pub fn in_place_updates(&self) -> u64 {
        self.in_place_updates.get()
    }

    /// Counts `count` copies of `kind` blocked by objects that are not copies.
    pub fn sync_conflicts(&self, kind: &'static str, count: usize) {
        self.sync_conflicts.get_or_create(&KindLabels { kind }).inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    /// Sync conflicts counted so far for `kind`.
    #[cfg(test)]
    pub(crate) fn sync_conflicts_of(&self, kind: &'static str) -> u64 {
        self.sync_conflicts.get_or_create(&KindLabels { kind }).get()
    }

    /// Counts a reconcile now and its duration when the guard drops.
    pub fn reconcile(&self, controller: &'static str) -> ReconcileTimer<'_> {
        self.reconciles.get_or_create(&ControllerLabels { controller }).inc();
        ReconcileTimer { metrics: self, controller, start: Instant::now() }
    }

    /// Counts a failed reconcile.
    pub fn error(&self, controller: &'static str, error: &crate::Error) {
        let labels = ErrorLabels { controller, error: error.metric_label() };
        self.errors.get_or_create(&labels).inc();
    }

    /// Failed reconciles counted so far for `controller` with `error`.
    #[cfg(test)]
    pub(crate) fn errors_of(&self, controller: &'static str, error: &'static str) -> u64 {
        self.errors.get_or_create(&ErrorLabels { controller, error }).get()
    }

    /// Reconciles counted so far for `controller`.
    #[cfg(test)]
    pub(crate) fn reconciles_of(&self, controller: &'static str) -> u64 {
        self.reconciles.get_or_create(&ControllerLabels { controller }).get()
    }
}

/// Observes a reconcile's duration when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let labels = ControllerLabels { controller: self.controller };
        self.metrics.duration.get_or_create(&labels).observe(self.start.elapsed().as_secs_f64());
    }
}

/// Per-Watcher gauges, read from the Watcher cache at each scrape: the pod counts the pod
/// reconciler wrote into `status.pods`, and the rollout's state from the `SidecarsUpdated`
/// condition. A deleted Watcher's series go with it. The same per ClusterWatcher, with its
/// pods per namespace (`cluster_pods`) and how many namespaces it applies in.
pub struct WatcherCollector {
    store: Store<Watcher>,
    cluster: Store<ClusterWatcher>,
    cluster_pods: ClusterPods,
}

impl WatcherCollector {
    /// A collector over the Watchers of `store` and the ClusterWatchers of `cluster`, with the
    /// latter's pods per namespace from `cluster_pods` ([`Metrics::cluster_pods`]).
    pub fn new(store: Store<Watcher>, cluster: Store<ClusterWatcher>, cluster_pods: ClusterPods) -> Self {
        Self { store, cluster, cluster_pods }
    }
}

/// The six states of `watcher_pods`, with their counts.
fn pod_states(counts: PodCounts) -> [(&'static str, i32); 6] {
    [
        ("matched", counts.matched),
        ("injected", counts.injected),
        ("up_to_date", counts.up_to_date),
        ("missing", counts.missing),
        ("cannot_start", counts.cannot_start),
        ("cannot_end", counts.cannot_end),
    ]
}

impl std::fmt::Debug for WatcherCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatcherCollector").field("watchers", &self.store.len()).finish()
    }
}

/// The states of a rollout, as `watcher_rollout_state{state}` names them.
pub const ROLLOUT_STATES: [&str; 5] = ["complete", "progressing", "partitioned", "paused", "stuck"];

/// The state of `watcher`'s rollout, from its `SidecarsUpdated` condition.
fn rollout_state(watcher: &Watcher) -> Option<&'static str> {
    let condition = watcher.status.as_ref()?.conditions.iter().find(|c| c.type_ == types::SIDECARS_UPDATED)?;
    if condition.status == "True" {
        return Some("complete");
    }
    ROLLOUT_STATES.into_iter().find(|state| condition.reason.eq_ignore_ascii_case(state))
}

impl Collector for WatcherCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut watchers = self.store.state();
        watchers.sort_by_key(|w| (w.namespace(), w.name_any()));
        let identity = |w: &Watcher| vec![("namespace", w.namespace().unwrap_or_default()), ("watcher", w.name_any())];
        let mut pods = encoder.encode_descriptor(
            "watcher_pods",
            "Pods of a Watcher by state, as status.pods counts them: matched (asked or selected), injected, \
             up_to_date (injected with the current spec), missing (asked, not injected), cannot_start (injected, \
             a container of the Watcher cannot start, as the kubelet reports it), cannot_end (injected, meant to end, the app \
             ended, a sidecar of the Watcher still runs after it was ended)",
            None,
            MetricType::Gauge,
        )?;
        for watcher in &watchers {
            let Some(counts) = watcher.status.as_ref().and_then(|s| s.pods) else { continue };
            for (state, value) in pod_states(counts) {
                let mut labels = identity(watcher);
                labels.push(("state", state.to_owned()));
                ConstGauge::new(i64::from(value)).encode(pods.encode_family(&labels)?)?;
            }
        }
        let mut rollouts = encoder.encode_descriptor(
            "watcher_rollout_state",
            "1 for the state of a Watcher's sidecar rollout (complete, progressing, partitioned, paused, stuck), \
             0 for the others; Watchers with updatePolicy Recreate or InPlace",
            None,
            MetricType::Gauge,
        )?;
        for watcher in &watchers {
            let Some(current) = rollout_state(watcher) else { continue };
            for state in ROLLOUT_STATES {
                let mut labels = identity(watcher);
                labels.push(("state", state.to_owned()));
                ConstGauge::new(i64::from(state == current)).encode(rollouts.encode_family(&labels)?)?;
            }
        }
        self.encode_cluster(encoder)
    }
}

impl WatcherCollector {
    fn encode_cluster(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut clusters: Vec<Watcher> = self.cluster.state().iter().map(|c| c.across_namespaces()).collect();
        clusters.sort_by_key(|w| w.name_any());
        let mut namespaces = encoder.encode_descriptor(
            "watcher_clusterwatcher_namespaces",
            "Namespaces a ClusterWatcher applies in, as status.namespaces counts them",
            None,
            MetricType::Gauge,
        )?;
        for cluster in self.cluster.state() {
            let Some(count) = cluster.status.as_ref().and_then(|s| s.namespaces) else { continue };
            let labels = [("clusterwatcher", cluster.name_any())];
            ConstGauge::new(i64::from(count)).encode(namespaces.encode_family(&labels)?)?;
        }
        let mut pods = encoder.encode_descriptor(
            "watcher_clusterwatcher_pods",
            "Pods of a ClusterWatcher by namespace and state, as watcher_pods counts a Watcher's (exported by the \
             leader, which counts them)",
            None,
            MetricType::Gauge,
        )?;
        let mut counted = self.cluster_pods.write().unwrap_or_else(|p| p.into_inner());
        // The counts of a ClusterWatcher deleted since go with it.
        counted.retain(|name, _| clusters.iter().any(|c| c.metadata.name.as_deref() == Some(name.as_str())));
        for cluster in &clusters {
            let name = cluster.name_any();
            for (namespace, counts) in counted.get(&name).into_iter().flatten() {
                for (state, value) in pod_states(*counts) {
                    let labels = [
                        ("clusterwatcher", name.clone()),
                        ("namespace", namespace.clone()),
                        ("state", state.to_owned()),
                    ];
                    ConstGauge::new(i64::from(value)).encode(pods.encode_family(&labels)?)?;
                }
            }
        }
        let mut rollouts = encoder.encode_descriptor(
            "watcher_clusterwatcher_rollout_state",
            "1 for the state of a ClusterWatcher's sidecar rollout across its namespaces, 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        for cluster in &clusters {
            let Some(current) = rollout_state(cluster) else { continue };
            for state in ROLLOUT_STATES {
                let labels = [("clusterwatcher", cluster.name_any()), ("state", state.to_owned())];
                ConstGauge::new(i64::from(state == current)).encode(rollouts.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    /// The leader gauge and the scope's one series, as Prometheus reads them.
    #[test]
    fn the_leader_and_the_scope_state_are_one_series_each() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        assert!(text(&registry).lines().any(|l| l == "watcher_leader 0"));
        assert_eq!(metrics.scope(), None, "a replica that does not lead says nothing of the scope");
        metrics.set_leader(true);
        assert!(text(&registry).lines().any(|l| l == "watcher_leader 1"));
        metrics.set_scope(ScopeState::Fallback("refused"));
        let exported = text(&registry);
        let scope: Vec<&str> = exported.lines().filter(|l| l.starts_with("watcher_admission_scope{")).collect();
        assert_eq!(scope, [r#"watcher_admission_scope{state="fallback",reason="refused"} 1"#]);
        metrics.set_scope(ScopeState::Applied);
        assert_eq!(metrics.scope(), Some(("applied", "")));
        metrics.set_leader(false);
        assert_eq!(metrics.scope(), None, "the lease lost: the next leader says it");
        assert!(!text(&registry).lines().any(|l| l.starts_with("watcher_admission_scope{")));
    }
}
