//! What a rule with a value makes of its values: the values of a batch ([`Observed`]), and the
//! metric they are added to, a sum, a gauge or a histogram whose buckets are the rule's
//! (`watcher_agent_<rule>[_seconds|_bytes]`), every one atomic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use watcher_base::lock;

use super::model::{
    Collect, Family, FloatCounter, FloatGauge, HistogramValue, Kind, Make, Metric, NativeBuckets, Value, Visit,
};
use super::native::{Index, Native, ZERO_THRESHOLD};

use crate::config::{MetricKind, RuleConfig};

/// Values observed in a batch, for one series: a sum's, a gauge's or a histogram's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Values observed.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The last one.
    pub last: f64,
    /// Per bucket (the last, `+Inf`), for a histogram.
    pub buckets: Vec<u64>,
    /// By native bucket, for a native histogram.
    pub native: Native,
}

impl Observed {
    /// `value`, in a histogram with upper bounds `bounds` where there are some, and in the
    /// native buckets `native` finds where it is one: both from this one observation.
    #[inline]
    pub fn observe(&mut self, value: f64, bounds: &[f64], native: Option<&Index>) {
        self.count += 1;
        self.sum += value;
        self.last = value;
        if !bounds.is_empty() {
            if self.buckets.is_empty() {
                self.buckets = vec![0; bounds.len() + 1];
            }
            self.buckets[bounds.partition_point(|bound| *bound < value)] += 1;
        }
        if let Some(index) = native {
            self.native.observe(value, index);
        }
    }
}

/// A histogram whose observations come in batches ([`Observed`]): atomic, a scrape waits for
/// no reader.
#[derive(Clone, Debug)]
pub struct BatchHistogram {
    bounds: Arc<[f64]>,
    inner: Arc<HistogramCounts>,
    /// Its native buckets, where it is also a native histogram: the schema, and the counts (a
    /// lock taken once a batch and at a scrape).
    native: Option<(i32, Arc<Mutex<Native>>)>,
}

#[derive(Debug)]
struct HistogramCounts {
    /// Per bucket, not cumulative; the last is `+Inf`.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// The sum's bits.
    sum: AtomicU64,
}

impl BatchHistogram {
    fn new(bounds: Arc<[f64]>, native_schema: Option<i32>) -> Self {
        let buckets = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        let inner = Arc::new(HistogramCounts { buckets, count: AtomicU64::new(0), sum: AtomicU64::new(0) });
        Self { bounds, inner, native: native_schema.map(|schema| (schema, Arc::default())) }
    }

    fn add(&self, observed: &Observed) {
        for (bucket, count) in self.inner.buckets.iter().zip(&observed.buckets) {
            bucket.fetch_add(*count, Ordering::Relaxed);
        }
        let _ = self.inner.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + observed.sum).to_bits())
        });
        self.inner.count.fetch_add(observed.count, Ordering::Relaxed);
        if let Some((_, native)) = &self.native {
            lock(native).merge(&observed.native);
        }
    }
}

impl Metric for BatchHistogram {
    const KIND: Kind = Kind::Histogram;

    fn value(&self) -> Value {
        let mut cumulative = 0;
        let bounds = self.bounds.iter().copied().chain(std::iter::once(f64::INFINITY));
        let buckets = bounds
            .zip(&self.inner.buckets)
            .map(|(bound, count)| {
                cumulative += count.load(Ordering::Relaxed);
                (bound, cumulative)
            })
            .collect();
        let native = self.native.as_ref().map(|(schema, native)| {
            let native = lock(native);
            NativeBuckets {
                schema: *schema,
                zero_threshold: ZERO_THRESHOLD,
                zero_count: native.zero,
                positive: native.positive.spans_and_deltas(),
                negative: native.negative.spans_and_deltas(),
            }
        });
        Value::Histogram(HistogramValue {
            sum: f64::from_bits(self.inner.sum.load(Ordering::Relaxed)),
            count: self.inner.count.load(Ordering::Relaxed),
            buckets,
            native,
        })
    }
}

/// Makes a rule's histograms with its buckets (and its native schema, where it has one).
#[derive(Clone, Debug)]
pub struct Buckets(Arc<[f64]>, Option<i32>);

impl Make<BatchHistogram> for Buckets {
    fn make(&self) -> BatchHistogram {
        BatchHistogram::new(self.0.clone(), self.1)
    }
}

/// A series' labels.
pub(super) type Labels = Vec<(String, String)>;

/// The metrics of the rules with a value, by name: a configuration read again adds and takes
/// away rules, so they are encoded at each scrape from what is there (one lock, taken by a
/// scrape and a reload, never by a reader: each reader holds its rules' metrics).
#[derive(Clone, Debug, Default)]
pub(super) struct ValueMetrics(Arc<Mutex<BTreeMap<String, (String, ValueMetric)>>>);

impl ValueMetrics {
    /// Rule `rule`'s metric, new (at 0), if it makes one.
    pub(super) fn register(&self, rule: &RuleConfig) -> Option<ValueMetric> {
        let name = rule.metric_name()?;
        let help = format!("The values rule {} reads ({}).", rule.name, rule.metric.as_str());
        let metric = ValueMetric::new(rule)?;
        lock(&self.0).insert(name, (help, metric.clone()));
        Some(metric)
    }

    /// Takes away the metric named `name`.
    pub(super) fn remove(&self, name: &str) {
        lock(&self.0).remove(name);
    }
}

impl Collect for ValueMetrics {
    fn collect(&self, visit: &mut dyn Visit) {
        for (name, (help, metric)) in lock(&self.0).iter() {
            match metric {
                ValueMetric::Sum(family) | ValueMetric::Cumulative(family) => family.collect(name, help, visit),
                ValueMetric::Gauge(family) => family.collect(name, help, visit),
                ValueMetric::Histogram(family) => family.collect(name, help, visit),
            }
        }
    }
}

/// The metric a rule with a value makes.
#[derive(Clone, Debug)]
pub(super) enum ValueMetric {
    Sum(Family<Labels, FloatCounter>),
    /// A running total the app logs: set to each value read, the last of a batch. A value lower
    /// than the one before is the app's count starting again, which Prometheus reads as a
    /// counter's reset (`resets()`, `rate()`).
    Cumulative(Family<Labels, FloatCounter>),
    Gauge(Family<Labels, FloatGauge>),
    Histogram(Family<Labels, BatchHistogram, Buckets>),
}

impl ValueMetric {
    /// Rule `rule`'s metric, at 0, if it makes one.
    fn new(rule: &RuleConfig) -> Option<Self> {
        Some(match rule.metric {
            MetricKind::Count => return None,
            MetricKind::Sum => Self::Sum(Family::default()),
            MetricKind::Cumulative => Self::Cumulative(Family::default()),
            MetricKind::Gauge => Self::Gauge(Family::default()),
            MetricKind::Histogram => {
                Self::Histogram(Family::new_with(Buckets(rule.buckets.clone().into(), rule.native_schema)))
            }
        })
    }

    pub(super) fn add(&self, labels: &Labels, observed: &Observed) {
        match self {
            Self::Sum(family) => family.get_or_create(labels).inc_by(observed.sum),
            Self::Cumulative(family) if observed.count > 0 => family.get_or_create(labels).set(observed.last),
            Self::Cumulative(_) => {}
            Self::Gauge(family) if observed.count > 0 => family.get_or_create(labels).set(observed.last),
            Self::Gauge(_) => {}
            Self::Histogram(family) => family.get_or_create(labels).add(observed),
        }
    }

    /// The series at 0 (a gauge has none until a value comes).
    pub(super) fn at_zero(&self, labels: &Labels) {
        match self {
            Self::Sum(family) => drop(family.get_or_create(labels)),
            Self::Gauge(_) | Self::Cumulative(_) => {}
            Self::Histogram(family) => drop(family.get_or_create(labels)),
        }
    }

    pub(super) fn remove(&self, labels: &Labels) {
        match self {
            Self::Sum(family) | Self::Cumulative(family) => family.remove(labels),
            Self::Gauge(family) => family.remove(labels),
            Self::Histogram(family) => family.remove(labels),
        }
    }
}
