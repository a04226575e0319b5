//! The series of one push: Prometheus remote write 1.0's `WriteRequest` (prometheus/prompb's
//! `types.proto` and `remote.proto`, the messages this agent sends), made of the metric
//! families a scrape in protobuf reads, so a push and a scrape say the same.

use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model as model;

/// `prometheus.WriteRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: labels sorted by name, `__name__` among them.
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
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub(crate) struct Label {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}

/// `prometheus.Sample`: a float and its time, milliseconds since the epoch.
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

/// `prometheus.Histogram`, a native one with integer counts.
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
    /// `ResetHint`: 0, unknown (Prometheus finds resets itself).
    #[prost(int32, tag = "14")]
    pub(crate) reset_hint: i32,
    #[prost(int64, tag = "15")]
    pub(crate) timestamp: i64,
}

/// `Histogram.count`: `count_int`.
#[derive(Clone, Copy, PartialEq, prost::Oneof)]
pub(crate) enum Count {
    #[prost(uint64, tag = "1")]
    CountInt(u64),
}

/// `Histogram.zero_count`: `zero_count_int`.
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

/// One push's series, and how many samples (floats and histograms) they hold.
pub(crate) struct Push {
    pub(crate) request: WriteRequest,
    pub(crate) samples: usize,
}

/// The series of `families` at `at` (milliseconds since the epoch), each with the labels
/// `identity` (the pod's `namespace` and `pod`) where it has none of that name: a counter's,
/// a gauge's and an untyped metric's sample; a histogram's classic `_bucket` (with `le`,
/// `+Inf` last), `_sum` and `_count`, and its native histogram under its own name where it is
/// one; each with its exemplars.
pub(crate) fn push(families: &[model::MetricFamily], identity: &[(&str, &str)], at: i64) -> Push {
    let mut series = Series { out: Vec::new(), samples: 0, identity, at };
    for family in families {
        let kind = model::MetricType::try_from(family.r#type).unwrap_or(model::MetricType::Untyped);
        for metric in &family.metric {
            let labels = &metric.label;
            match kind {
                model::MetricType::Counter => {
                    let counter = metric.counter.clone().unwrap_or_default();
                    series.float(&family.name, labels, None, counter.value, counter.exemplar.as_ref());
                }
                model::MetricType::Gauge => {
                    let value = metric.gauge.as_ref().map_or(0.0, |g| g.value);
                    series.float(&family.name, labels, None, value, None);
                }
                model::MetricType::Histogram | model::MetricType::GaugeHistogram => {
                    if let Some(histogram) = &metric.histogram {
                        series.histogram(&family.name, labels, histogram);
                    }
                }
                model::MetricType::Summary | model::MetricType::Untyped => {
                    let value = metric.untyped.as_ref().map_or(0.0, |u| u.value);
                    series.float(&family.name, labels, None, value, None);
                }
            }
        }
    }
    Push { samples: series.samples, request: WriteRequest { timeseries: series.out } }
}

struct Series<'a> {
    out: Vec<TimeSeries>,
    samples: usize,
    identity: &'a [(&'a str, &'a str)],
    at: i64,
}

impl Series<'_> {
    /// The labels of a series: `__name__`, the metric's, `extra` (`le`), the pod's where the
    /// metric has none of that name; sorted by name.
    fn labels(&self, name: &str, labels: &[model::LabelPair], extra: Option<(&str, String)>) -> Vec<Label> {
        let label = |name: &str, value: String| Label { name: name.to_owned(), value };
        let mut out = Vec::with_capacity(labels.len() + 4);
        out.push(label("__name__", name.to_owned()));
        out.extend(labels.iter().map(|l| label(&l.name, l.value.clone())));
        if let Some((name, value)) = extra {
            out.push(label(name, value));
        }
        for (name, value) in self.identity {
            if !out.iter().any(|l| l.name == *name) {
                out.push(label(name, (*value).to_owned()));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    fn exemplar(&self, exemplar: &model::Exemplar) -> Exemplar {
        let at = exemplar.timestamp.as_ref().map_or(self.at, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
        let labels = exemplar.label.iter().map(|l| Label { name: l.name.clone(), value: l.value.clone() }).collect();
        Exemplar { labels, value: exemplar.value, timestamp: at }
    }

    fn float(
        &mut self,
        name: &str,
        labels: &[model::LabelPair],
        extra: Option<(&str, String)>,
        value: f64,
        exemplar: Option<&model::Exemplar>,
    ) {
        self.samples += 1;
        self.out.push(TimeSeries {
            labels: self.labels(name, labels, extra),
            samples: vec![Sample { value, timestamp: self.at }],
            exemplars: exemplar.map(|e| self.exemplar(e)).into_iter().collect(),
            histograms: Vec::new(),
        });
    }

    fn histogram(&mut self, name: &str, labels: &[model::LabelPair], histogram: &model::Histogram) {
        let bucket = format!("{name}_bucket");
        let mut infinite = false;
        for b in &histogram.bucket {
            infinite |= b.upper_bound.is_infinite();
            let le = if b.upper_bound.is_infinite() {
                "+Inf".to_owned()
            } else {
                dtoa::Buffer::new().format(b.upper_bound).to_owned()
            };
            self.float(&bucket, labels, Some(("le", le)), b.cumulative_count as f64, b.exemplar.as_ref());
        }
        if !infinite {
            self.float(&bucket, labels, Some(("le", "+Inf".to_owned())), histogram.sample_count as f64, None);
        }
        self.float(&format!("{name}_sum"), labels, None, histogram.sample_sum, None);
        self.float(&format!("{name}_count"), labels, None, histogram.sample_count as f64, None);
        let native = histogram.zero_threshold > 0.0
            || !histogram.positive_span.is_empty()
            || !histogram.negative_span.is_empty();
        if !native {
            return;
        }
        let spans = |spans: &[model::BucketSpan]| {
            spans.iter().map(|s| BucketSpan { offset: s.offset, length: s.length }).collect()
        };
        self.samples += 1;
        self.out.push(TimeSeries {
            labels: self.labels(name, labels, None),
            samples: Vec::new(),
            exemplars: histogram.exemplars.iter().map(|e| self.exemplar(e)).collect(),
            histograms: vec![Histogram {
                count: Some(Count::CountInt(histogram.sample_count)),
                sum: histogram.sample_sum,
                schema: histogram.schema,
                zero_threshold: histogram.zero_threshold,
                zero_count: Some(ZeroCount::ZeroCountInt(histogram.zero_count)),
                negative_spans: spans(&histogram.negative_span),
                negative_deltas: histogram.negative_delta.clone(),
                positive_spans: spans(&histogram.positive_span),
                positive_deltas: histogram.positive_delta.clone(),
                reset_hint: 0,
                timestamp: self.at,
            }],
        });
    }
}
