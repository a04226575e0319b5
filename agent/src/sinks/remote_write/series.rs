//! The series of one push: Prometheus remote write 1.0's `WriteRequest` (prometheus/prompb's
//! `types.proto` and `remote.proto`), written series by series from what a scrape reads, so a
//! push and a scrape say the same.

use crate::metrics::exemplars::{Exemplar, Kept, Lookup};
use crate::metrics::model::{HistogramValue, Kind, LabelSet, NativeBuckets, Registry, Value, Visit};
use crate::metrics::{bound, proto, suffix};

/// The series of `registry` at `at` (milliseconds since the epoch) as a `WriteRequest`, into
/// `out`; how many samples (floats and histograms) it holds. Each series has the labels
/// `identity` (the pod's `namespace` and `pod`) where it has none of that name: a counter's, a
/// gauge's and an info metric's sample; a histogram's classic `_bucket` (with `le`, `+Inf`
/// last), `_sum` and `_count`, and its native histogram under its own name where it is one; each
/// with its exemplars.
pub(crate) fn push(registry: &Registry, identity: &[(&str, &str)], at: i64, out: &mut Vec<u8>) -> usize {
    let mut writer = Writer {
        out,
        samples: 0,
        identity,
        at,
        name: String::new(),
        kind: Kind::Counter,
        exemplars: registry.exemplars().lookup(),
    };
    registry.visit(&mut writer);
    writer.samples
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
    samples: usize,
    identity: &'a [(&'a str, &'a str)],
    at: i64,
    /// The family's name.
    name: String,
    kind: Kind,
    exemplars: Lookup<'a>,
}

/// What a series is written with.
struct Series<'s> {
    /// `__name__`'s value: the family's name and the sample's suffix.
    name: [&'s str; 2],
    labels: &'s dyn LabelSet,
    /// `le`, a bucket's.
    le: Option<&'s str>,
    identity: &'s [(&'s str, &'s str)],
}

impl Series<'_> {
    /// `TimeSeries.labels`: sorted by name, the pod's where the metric has none of that name.
    fn write_labels(&self, out: &mut Vec<u8>) {
        let mut labels: Vec<(&str, [&str; 2])> = Vec::with_capacity(self.labels.count() + 4);
        labels.push(("__name__", self.name));
        labels.extend((0..self.labels.count()).map(|i| self.labels.label(i)).map(|(n, v)| (n, [v, ""])));
        if let Some(le) = self.le {
            labels.push(("le", [le, ""]));
        }
        for (name, value) in self.identity {
            if !labels.iter().any(|(n, _)| n == name) {
                labels.push((name, [value, ""]));
            }
        }
        labels.sort_by(|a, b| a.0.cmp(b.0));
        for (name, value) in labels {
            proto::message(out, 1, |out| {
                proto::string(out, 1, name);
                proto::strings(out, 2, &value);
            });
        }
    }
}

/// `prometheus.Exemplar`: its label, value and time (milliseconds).
fn exemplar(out: &mut Vec<u8>, exemplar: &Exemplar) {
    proto::message(out, 3, |out| {
        proto::message(out, 1, |out| {
            proto::string(out, 1, crate::metrics::exemplars::TRACE_ID);
            proto::string(out, 2, &exemplar.trace_id);
        });
        proto::double(out, 2, exemplar.value);
        let (seconds, nanos) = exemplar.since_epoch();
        proto::int(out, 3, seconds.saturating_mul(1000).saturating_add(i64::from(nanos / 1_000_000)));
    });
}

/// Where the series go: the message, and how many samples it holds.
struct Out<'o> {
    out: &'o mut Vec<u8>,
    samples: &'o mut usize,
    at: i64,
}

impl Out<'_> {
    /// A float series: one sample, and its exemplar.
    fn float(&mut self, series: &Series<'_>, value: f64, with: Option<&Exemplar>) {
        *self.samples += 1;
        let at = self.at;
        proto::message(self.out, 1, |out| {
            series.write_labels(out);
            proto::message(out, 2, |out| {
                proto::double(out, 1, value);
                proto::int(out, 2, at);
            });
            if let Some(with) = with {
                exemplar(out, with);
            }
        });
    }

    /// A histogram's classic series, and its native one where it is one.
    fn histogram<'s>(
        &mut self,
        series: impl Fn(&'static str) -> Series<'s>,
        histogram: &HistogramValue,
        kept: Option<&Kept>,
    ) {
        let mut le = String::new();
        for (upper, count) in &histogram.buckets {
            le.clear();
            bound(*upper, &mut le);
            let bucket = Series { le: Some(&le), ..series("_bucket") };
            self.float(&bucket, *count as f64, kept.and_then(|k| k.bucket(*upper)));
        }
        self.float(&series("_sum"), histogram.sum, None);
        self.float(&series("_count"), histogram.count as f64, None);
        let Some(native) = &histogram.native else { return };
        *self.samples += 1;
        let (at, count, sum) = (self.at, histogram.count, histogram.sum);
        let latest = kept.and_then(|k| k.last.as_ref());
        proto::message(self.out, 1, |out| {
            series("").write_labels(out);
            if let Some(latest) = latest {
                exemplar(out, latest);
            }
            proto::message(out, 4, |out| write_native(out, count, sum, native, at));
        });
    }
}

/// `prometheus.Histogram`, a native one with integer counts.
fn write_native(out: &mut Vec<u8>, count: u64, sum: f64, native: &NativeBuckets, at: i64) {
    // `count_int` and `zero_count_int` are each one of a `oneof`: written even at 0.
    proto::always(out, 1, count);
    proto::double(out, 3, sum);
    proto::sint(out, 4, i64::from(native.schema));
    proto::double(out, 5, native.zero_threshold);
    proto::always(out, 6, native.zero_count);
    for (spans_field, deltas_field, (spans, deltas)) in [(8, 9, &native.negative), (11, 12, &native.positive)] {
        for (offset, length) in spans {
            proto::message(out, spans_field, |out| {
                proto::sint(out, 1, i64::from(*offset));
                proto::uint(out, 2, u64::from(*length));
            });
        }
        proto::packed_sints(out, deltas_field, deltas);
    }
    // `reset_hint` 0: unknown, Prometheus finds resets itself.
    proto::int(out, 15, at);
}

impl Visit for Writer<'_> {
    fn family(&mut self, name: &str, _help: &str, kind: Kind) {
        self.name.clear();
        self.name.push_str(name);
        self.kind = kind;
    }

    fn series(&mut self, labels: &dyn LabelSet, value: &Value) {
        let kept = match self.kind {
            Kind::Counter | Kind::Histogram => self.exemplars.find(labels),
            Kind::Gauge | Kind::Info => None,
        };
        let mut out = Out { out: self.out, samples: &mut self.samples, at: self.at };
        let series = |tail| Series { name: [&self.name, tail], labels, le: None, identity: self.identity };
        match value {
            Value::Number(n) => out.float(&series(suffix(self.kind)), n.as_f64(), kept.and_then(|k| k.last.as_ref())),
            Value::Histogram(histogram) => out.histogram(series, histogram, kept),
        }
    }
}

/// The messages, derived, to read a push back in the tests.
#[cfg(test)]
pub(crate) mod messages {
    /// `prometheus.WriteRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub(crate) timeseries: Vec<TimeSeries>,
    }

    /// `prometheus.TimeSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub(crate) labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub(crate) samples: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub(crate) exemplars: Vec<Exemplar>,
        #[prost(message, repeated, tag = "4")]
        pub(crate) histograms: Vec<Histogram>,
    }

    /// `prometheus.Label`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub(crate) struct Label {
        #[prost(string, tag = "1")]
        pub(crate) name: String,
        #[prost(string, tag = "2")]
        pub(crate) value: String,
    }

    /// `prometheus.Sample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Sample {
        #[prost(double, tag = "1")]
        pub(crate) value: f64,
        #[prost(int64, tag = "2")]
        pub(crate) timestamp: i64,
    }

    /// `prometheus.Exemplar`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Exemplar {
        #[prost(message, repeated, tag = "1")]
        pub(crate) labels: Vec<Label>,
        #[prost(double, tag = "2")]
        pub(crate) value: f64,
        #[prost(int64, tag = "3")]
        pub(crate) timestamp: i64,
    }

    /// `prometheus.Histogram`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Histogram {
        #[prost(oneof = "Count", tags = "1")]
        pub(crate) count: Option<Count>,
        #[prost(double, tag = "3")]
        pub(crate) sum: f64,
        #[prost(sint32, tag = "4")]
        pub(crate) schema: i32,
        #[prost(double, tag = "5")]
        pub(crate) zero_threshold: f64,
        #[prost(oneof = "ZeroCount", tags = "6")]
        pub(crate) zero_count: Option<ZeroCount>,
        #[prost(message, repeated, tag = "8")]
        pub(crate) negative_spans: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "9")]
        pub(crate) negative_deltas: Vec<i64>,
        #[prost(message, repeated, tag = "11")]
        pub(crate) positive_spans: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "12")]
        pub(crate) positive_deltas: Vec<i64>,
        #[prost(int32, tag = "14")]
        pub(crate) reset_hint: i32,
        #[prost(int64, tag = "15")]
        pub(crate) timestamp: i64,
    }

    /// `Histogram.count`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub(crate) enum Count {
        #[prost(uint64, tag = "1")]
        CountInt(u64),
    }

    /// `Histogram.zero_count`.
    #[derive(Clone, Copy, PartialEq, prost::Oneof)]
    pub(crate) enum ZeroCount {
        #[prost(uint64, tag = "6")]
        ZeroCountInt(u64),
    }

    /// `prometheus.BucketSpan`.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub(crate) struct BucketSpan {
        #[prost(sint32, tag = "1")]
        pub(crate) offset: i32,
        #[prost(uint32, tag = "2")]
        pub(crate) length: u32,
    }
}
