//! The agent's metrics as it holds them: counters, gauges and histograms, each atomic (a scrape
//! never waits for a reader); families of them by label set, in label order; and the registry
//! that names them, which every format (`/metrics`' three, remote write, the termination
//! message) reads series by series, without a model built in between.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::Exemplars;

/// What a family is, as Prometheus names its types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// A series of labels, always 1: `<name>_info`.
    Info,
}

/// A sample's number: counts stay integers in the text formats (`3`), values read stay floats
/// (`3.0`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
}

impl Number {
    /// As a float: the protobuf formats carry every number so.
    pub fn as_f64(self) -> f64 {
        match self {
            Self::Unsigned(n) => n as f64,
            Self::Signed(n) => n as f64,
            Self::Float(f) => f,
        }
    }
}

/// A native histogram's buckets, as the protobuf formats carry them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NativeBuckets {
    pub schema: i32,
    pub zero_threshold: f64,
    pub zero_count: u64,
    /// Spans (offset, length) and deltas of the positive buckets.
    pub positive: (Vec<(i32, u32)>, Vec<i64>),
    /// The same of the negative ones.
    pub negative: (Vec<(i32, u32)>, Vec<i64>),
}

/// A histogram at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramValue {
    pub sum: f64,
    pub count: u64,
    /// Upper bound and cumulative count of each classic bucket, `+Inf` last.
    pub buckets: Vec<(f64, u64)>,
    /// Its native buckets, where it is also a native histogram.
    pub native: Option<NativeBuckets>,
}

/// What a series holds at one moment.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(Number),
    Histogram(HistogramValue),
}

/// A metric: what a series holds.
pub trait Metric: Clone + Send + Sync + 'static {
    /// Its family's type.
    const KIND: Kind;
    /// Its value now.
    fn value(&self) -> Value;
}

/// A count that only goes up.
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// One more.
    pub fn inc(&self) {
        self.inc_by(1);
    }

    /// `n` more.
    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Metric for Counter {
    const KIND: Kind = Kind::Counter;
    fn value(&self) -> Value {
        Value::Number(Number::Unsigned(self.get()))
    }
}

/// A sum of values that only goes up (a rule's `sum`), or the running total an app logs (its
/// `cumulative`: set to the last one read).
#[derive(Clone, Debug, Default)]
pub struct FloatCounter(Arc<AtomicU64>);

impl FloatCounter {
    /// `value` more.
    pub fn inc_by(&self, value: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some((f64::from_bits(bits) + value).to_bits()));
    }

    /// Set to `total`.
    pub fn set(&self, total: f64) {
        self.0.store(total.to_bits(), Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

impl Metric for FloatCounter {
    const KIND: Kind = Kind::Counter;
    fn value(&self) -> Value {
        Value::Number(Number::Float(self.get()))
    }
}

/// A number that goes up and down.
#[derive(Clone, Debug, Default)]
pub struct Gauge(Arc<AtomicI64>);

impl Gauge {
    /// Set to `value`.
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Metric for Gauge {
    const KIND: Kind = Kind::Gauge;
    fn value(&self) -> Value {
        Value::Number(Number::Signed(self.get()))
    }
}

/// A value that goes up and down: a time, the last value a rule read.
#[derive(Clone, Debug, Default)]
pub struct FloatGauge(Arc<AtomicU64>);

impl FloatGauge {
    /// Set to `value`.
    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }

    /// The value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

impl Metric for FloatGauge {
    const KIND: Kind = Kind::Gauge;
    fn value(&self) -> Value {
        Value::Number(Number::Float(self.get()))
    }
}

/// A series' labels: name and value, in the order they are written.
pub trait LabelSet {
    /// How many.
    fn count(&self) -> usize;
    /// The `index`th.
    fn label(&self, index: usize) -> (&str, &str);
}

impl LabelSet for Vec<(String, String)> {
    fn count(&self) -> usize {
        self.len()
    }
    fn label(&self, index: usize) -> (&str, &str) {
        let (name, value) = &self[index];
        (name, value)
    }
}

impl LabelSet for () {
    fn count(&self) -> usize {
        0
    }
    fn label(&self, _: usize) -> (&str, &str) {
        ("", "")
    }
}

/// Labels of fixed names: `name = value`, in the order given.
pub struct Fixed<'a>(pub &'a [(&'a str, &'a str)]);

impl LabelSet for Fixed<'_> {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn label(&self, index: usize) -> (&str, &str) {
        self.0[index]
    }
}

/// A struct of `String` fields as a label set, each field a label of its name, in field order.
macro_rules! label_set {
    ($name:ident { $($field:ident),+ }) => {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
        pub(crate) struct $name {
            $(pub(crate) $field: String,)+
        }

        impl $crate::metrics::model::LabelSet for $name {
            fn count(&self) -> usize {
                [$(stringify!($field)),+].len()
            }
            fn label(&self, index: usize) -> (&str, &str) {
                let labels = [$((stringify!($field), self.$field.as_str())),+];
                labels[index]
            }
        }
    };
}
pub(crate) use label_set;

/// Makes a family's new series.
pub trait Make<M>: Clone + Send + Sync + 'static {
    fn make(&self) -> M;
}

/// Makes each new series at its default: 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct AtZero;

impl<M: Default> Make<M> for AtZero {
    fn make(&self) -> M {
        M::default()
    }
}

/// Series of one metric by label set, written in label order; `make` makes a new one.
#[derive(Debug)]
pub struct Family<L, M, F = AtZero> {
    series: Arc<RwLock<BTreeMap<L, M>>>,
    make: F,
}

impl<L, M, F: Default> Default for Family<L, M, F> {
    fn default() -> Self {
        Self { series: Arc::default(), make: F::default() }
    }
}

impl<L, M, F: Clone> Clone for Family<L, M, F> {
    fn clone(&self) -> Self {
        Self { series: self.series.clone(), make: self.make.clone() }
    }
}

impl<L: Ord + Clone, M: Metric, F: Make<M>> Family<L, M, F> {
    /// A family whose series `make` makes.
    pub fn new_with(make: F) -> Self {
        Self { series: Arc::default(), make }
    }

    /// The series of `labels`, made (at 0) if it is not there.
    pub fn get_or_create(&self, labels: &L) -> M {
        if let Some(metric) = read(&self.series).get(labels) {
            return metric.clone();
        }
        write(&self.series).entry(labels.clone()).or_insert_with(|| self.make.make()).clone()
    }

    /// Takes away the series of `labels`.
    pub fn remove(&self, labels: &L) {
        write(&self.series).remove(labels);
    }

    /// Takes away every series.
    pub fn clear(&self) {
        write(&self.series).clear();
    }
}

impl<L: LabelSet + Ord + Clone, M: Metric, F: Make<M>> Family<L, M, F> {
    /// Writes the family as `name`, described by `help`: each series, in label order; nothing
    /// while it has none.
    pub(crate) fn collect(&self, name: &str, help: &str, visit: &mut dyn Visit) {
        let series = read(&self.series);
        // A family of no series is not written at all.
        if series.is_empty() {
            return;
        }
        visit.family(name, help, M::KIND);
        for (labels, metric) in series.iter() {
            visit.series(labels, &metric.value());
        }
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What reads the registry: a family, then its series.
pub trait Visit {
    /// Family `name` of type `kind`, described by `help`; its series follow.
    fn family(&mut self, name: &str, help: &str, kind: Kind);
    /// One series of the family last named.
    fn series(&mut self, labels: &dyn LabelSet, value: &Value);
}

/// Families that write themselves: one, or several whose set changes (the rules' values).
pub trait Collect: Send + Sync {
    fn collect(&self, visit: &mut dyn Visit);
}

/// A family as registered: its name and help, and its series.
struct Described<T> {
    name: String,
    help: String,
    metric: T,
}

impl<L, M, F> Collect for Described<Family<L, M, F>>
where
    L: LabelSet + Ord + Clone + Send + Sync,
    M: Metric,
    F: Make<M>,
{
    fn collect(&self, visit: &mut dyn Visit) {
        self.metric.collect(&self.name, &self.help, visit);
    }
}

/// One series without labels.
struct Single<M>(M);

impl<M: Metric> Collect for Described<Single<M>> {
    fn collect(&self, visit: &mut dyn Visit) {
        visit.family(&self.name, &self.help, M::KIND);
        visit.series(&(), &self.metric.0.value());
    }
}

/// A series of constant labels, always 1.
struct Info(Vec<(String, String)>);

impl Collect for Described<Info> {
    fn collect(&self, visit: &mut dyn Visit) {
        visit.family(&self.name, &self.help, Kind::Info);
        visit.series(&self.metric.0, &Value::Number(Number::Unsigned(1)));
    }
}

/// Every family the agent exports, in the order they are written, and the exemplars the formats
/// that carry them add.
#[derive(Default)]
pub struct Registry {
    families: Vec<Box<dyn Collect>>,
    exemplars: Arc<Exemplars>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("families", &self.families.len()).finish_non_exhaustive()
    }
}

impl Registry {
    /// Family `name`, described by `help` (a sentence: its full stop is added).
    pub fn register<L, M, F>(&mut self, name: &str, help: &str, family: Family<L, M, F>)
    where
        L: LabelSet + Ord + Clone + Send + Sync + 'static,
        M: Metric,
        F: Make<M>,
    {
        self.families.push(Box::new(Described { name: name.to_owned(), help: sentence(help), metric: family }));
    }

    /// One series without labels.
    pub fn register_single<M: Metric>(&mut self, name: &str, help: &str, metric: M) {
        let described = Described { name: name.to_owned(), help: sentence(help), metric: Single(metric) };
        self.families.push(Box::new(described));
    }

    /// `<name>_info` of `labels`, always 1.
    pub fn register_info(&mut self, name: &str, help: &str, labels: &[(&str, &str)]) {
        let labels = labels.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
        self.families.push(Box::new(Described { name: name.to_owned(), help: sentence(help), metric: Info(labels) }));
    }

    /// Families that write themselves.
    pub fn register_collector(&mut self, collector: Box<dyn Collect>) {
        self.families.push(collector);
    }

    /// The exemplars the series carry (where a format carries them).
    pub(crate) fn set_exemplars(&mut self, exemplars: Arc<Exemplars>) {
        self.exemplars = exemplars;
    }

    /// The exemplars.
    pub fn exemplars(&self) -> &Exemplars {
        &self.exemplars
    }

    /// Every family and series, in order.
    pub fn visit(&self, visit: &mut dyn Visit) {
        for family in &self.families {
            family.collect(visit);
        }
    }
}

fn sentence(help: &str) -> String {
    format!("{help}.")
}
