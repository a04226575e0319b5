//! Reconcile metrics, registered in the process-wide Prometheus registry.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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

/// The reconcile metrics of every controller.
#[derive(Clone)]
pub struct Metrics {
    in_place_updates: Counter,
    sync_conflicts: Family<KindLabels, Counter>,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
}

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
        };
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
        metrics
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
