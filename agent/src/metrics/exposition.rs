//! The registry in each format `/metrics` serves, written series by series straight into the
//! body: Prometheus' protobuf (delimited `io.prometheus.client.MetricFamily`), OpenMetrics text,
//! Prometheus text 0.0.4.

use std::fmt::Write as _;

use super::exemplars::{Lookup, write_block};
use super::model::{HistogramValue, Kind, LabelSet, Number, Registry, Value, Visit};
use super::proto;

/// `registry` in Prometheus' protobuf exposition: length-delimited `io.prometheus.client.MetricFamily`
/// messages, native histograms with their classic buckets, with the exemplars.
pub fn protobuf(registry: &Registry) -> Vec<u8> {
    let mut writer = Protobuf {
        out: Vec::with_capacity(16 * 1024),
        family: None,
        kind: Kind::Counter,
        exemplars: registry.exemplars().lookup(),
    };
    registry.visit(&mut writer);
    writer.end_family();
    writer.out
}

/// `registry` as OpenMetrics text, with the exemplars.
pub fn openmetrics(registry: &Registry) -> String {
    text(registry, true)
}

/// `registry` in Prometheus' text format 0.0.4: a counter's `# TYPE` and `# HELP` name its
/// `_total` sample, an info metric is a gauge named `_info`, and there is no `# EOF` nor exemplar.
pub fn prometheus_text(registry: &Registry) -> String {
    text(registry, false)
}

fn text(registry: &Registry, open: bool) -> String {
    let mut writer = Text {
        out: String::with_capacity(16 * 1024),
        open,
        name: String::new(),
        kind: Kind::Counter,
        exemplars: open.then(|| registry.exemplars().lookup()),
    };
    registry.visit(&mut writer);
    if open {
        writer.out.push_str("# EOF\n");
    }
    writer.out
}

/// What a sample of a family of `kind` adds to its name: `_total`, `_info`.
pub(crate) fn suffix(kind: Kind) -> &'static str {
    match kind {
        Kind::Counter => "_total",
        Kind::Info => "_info",
        Kind::Gauge | Kind::Histogram => "",
    }
}

/// A bucket's upper bound as the text formats write it (`0.5`, `1.0`, `+Inf`).
pub(crate) fn bound(bound: f64, out: &mut String) {
    float(bound, out);
}

/// `value` as the text formats write a float.
fn float(value: f64, out: &mut String) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        out.push_str(dtoa::Buffer::new().format_finite(value));
    }
}

fn number(value: Number, out: &mut String) {
    match value {
        Number::Unsigned(n) => out.push_str(itoa::Buffer::new().format(n)),
        Number::Signed(n) => out.push_str(itoa::Buffer::new().format(n)),
        Number::Float(f) => float(f, out),
    }
}

struct Text<'a> {
    out: String,
    /// OpenMetrics, else text 0.0.4.
    open: bool,
    name: String,
    kind: Kind,
    exemplars: Option<Lookup<'a>>,
}

/// `name{le="…",labels} `: `le` first, where there is one.
fn series_name(out: &mut String, name: &str, tail: &str, le: Option<f64>, labels: &dyn LabelSet) {
    out.push_str(name);
    out.push_str(tail);
    if le.is_none() && labels.count() == 0 {
        out.push(' ');
        return;
    }
    out.push('{');
    if let Some(le) = le {
        out.push_str("le=\"");
        bound(le, out);
        out.push('"');
        if labels.count() > 0 {
            out.push(',');
        }
    }
    write_block(labels, out);
    out.push_str("} ");
}

impl Text<'_> {
    fn histogram(&mut self, labels: &dyn LabelSet, histogram: &HistogramValue) {
        let out = &mut self.out;
        series_name(out, &self.name, "_sum", None, labels);
        float(histogram.sum, out);
        out.push('\n');
        series_name(out, &self.name, "_count", None, labels);
        number(Number::Unsigned(histogram.count), out);
        out.push('\n');
        let kept = self.exemplars.as_mut().and_then(|e| e.find(labels));
        for (upper, count) in &histogram.buckets {
            series_name(out, &self.name, "_bucket", Some(*upper), labels);
            number(Number::Unsigned(*count), out);
            if let Some(exemplar) = kept.and_then(|k| k.bucket(*upper)) {
                exemplar.write_text(out);
            }
            out.push('\n');
        }
    }
}

impl Visit for Text<'_> {
    fn family(&mut self, name: &str, help: &str, kind: Kind) {
        self.name.clear();
        self.name.push_str(name);
        if !self.open && matches!(kind, Kind::Counter | Kind::Info) {
            // Text 0.0.4 names a family by its samples' name, and knows no info type.
            self.name.push_str(suffix(kind));
        }
        let kind_name = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Info if self.open => "info",
            Kind::Info => "gauge",
        };
        let _ = write!(self.out, "# HELP {} ", self.name);
        for c in help.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c => self.out.push(c),
            }
        }
        let _ = writeln!(self.out, "\n# TYPE {} {kind_name}", self.name);
        if !self.open {
            self.name.truncate(name.len());
        }
        self.kind = kind;
    }

    fn series(&mut self, labels: &dyn LabelSet, value: &Value) {
        match value {
            Value::Number(n) => {
                series_name(&mut self.out, &self.name, suffix(self.kind), None, labels);
                number(*n, &mut self.out);
                if self.kind == Kind::Counter
                    && let Some(exemplar) = self.exemplars.as_mut().and_then(|e| e.find(labels)?.last.as_ref())
                {
                    exemplar.write_text(&mut self.out);
                }
                self.out.push('\n');
            }
            Value::Histogram(histogram) => self.histogram(labels, histogram),
        }
    }
}

/// `io.prometheus.client.MetricType`.
fn metric_type(kind: Kind) -> u64 {
    match kind {
        Kind::Counter => 0,
        // An info metric is the conventional `<name>_info` gauge of value 1.
        Kind::Gauge | Kind::Info => 1,
        Kind::Histogram => 4,
    }
}

struct Protobuf<'a> {
    out: Vec<u8>,
    /// Where the family being written starts (its length's byte).
    family: Option<usize>,
    kind: Kind,
    exemplars: Lookup<'a>,
}

impl Protobuf<'_> {
    /// Puts the length of the family written before it.
    fn end_family(&mut self) {
        let Some(at) = self.family.take() else { return };
        proto::put_length(&mut self.out, at);
    }
}

impl Visit for Protobuf<'_> {
    fn family(&mut self, name: &str, help: &str, kind: Kind) {
        self.end_family();
        self.family = Some(self.out.len());
        self.out.push(0);
        proto::strings(&mut self.out, 1, &[name, suffix(kind)]);
        proto::string(&mut self.out, 2, help);
        proto::uint(&mut self.out, 3, metric_type(kind));
        self.kind = kind;
    }

    fn series(&mut self, labels: &dyn LabelSet, value: &Value) {
        let kind = self.kind;
        let kept = if matches!(kind, Kind::Counter | Kind::Histogram) { self.exemplars.find(labels) } else { None };
        proto::message(&mut self.out, 4, |out| {
            for i in 0..labels.count() {
                let (name, value) = labels.label(i);
                proto::message(out, 1, |out| {
                    proto::string(out, 1, name);
                    proto::string(out, 2, value);
                });
            }
            match value {
                Value::Number(n) if kind == Kind::Counter => proto::message(out, 3, |out| {
                    proto::double(out, 1, n.as_f64());
                    if let Some(exemplar) = kept.and_then(|k| k.last.as_ref()) {
                        proto::message(out, 2, |out| exemplar.write_protobuf(out));
                    }
                }),
                Value::Number(n) => proto::message(out, 2, |out| proto::double(out, 1, n.as_f64())),
                Value::Histogram(h) => proto::message(out, 7, |out| {
                    proto::uint(out, 1, h.count);
                    proto::double(out, 2, h.sum);
                    for (upper, count) in &h.buckets {
                        proto::message(out, 3, |out| {
                            proto::uint(out, 1, *count);
                            proto::double(out, 2, *upper);
                            if let Some(exemplar) = kept.and_then(|k| k.bucket(*upper)) {
                                proto::message(out, 3, |out| exemplar.write_protobuf(out));
                            }
                        });
                    }
                    let Some(native) = &h.native else { return };
                    proto::sint(out, 5, i64::from(native.schema));
                    proto::double(out, 6, native.zero_threshold);
                    proto::uint(out, 7, native.zero_count);
                    spans(out, 9, 10, &native.negative);
                    spans(out, 12, 13, &native.positive);
                    if let Some(exemplar) = kept.and_then(|k| k.last.as_ref()) {
                        proto::message(out, 16, |out| exemplar.write_protobuf(out));
                    }
                }),
            }
        });
    }
}

/// A native histogram's spans (`BucketSpan`s in field `spans_field`) and deltas (`sint64`s in
/// `deltas_field`, packed: every parser takes both forms).
fn spans(out: &mut Vec<u8>, spans_field: u32, deltas_field: u32, (spans, deltas): &(Vec<(i32, u32)>, Vec<i64>)) {
    for (offset, length) in spans {
        proto::message(out, spans_field, |out| {
            proto::sint(out, 1, i64::from(*offset));
            proto::uint(out, 2, u64::from(*length));
        });
    }
    proto::packed_sints(out, deltas_field, deltas);
}

#[cfg(test)]
mod tests {
    use super::super::model::{Counter, Family, FloatGauge, Gauge, label_set};
    use super::*;

    label_set!(Pair { path, code });

    /// A registry of each kind: a counter family (a label value to escape), a float gauge, a
    /// gauge of no labels, an info metric, and a family with no series (not written).
    fn registry() -> Registry {
        let mut registry = Registry::default();
        let requests: Family<Pair, Counter> = Family::default();
        requests.get_or_create(&Pair { path: "/a\"b".into(), code: "200".into() }).inc_by(3);
        requests.get_or_create(&Pair { path: "/".into(), code: "500".into() }).inc();
        registry.register("app_requests", "Requests", requests);
        let temperature: Family<Vec<(String, String)>, FloatGauge> = Family::default();
        temperature.get_or_create(&vec![("room".into(), "a".into())]).set(f64::NEG_INFINITY);
        temperature.get_or_create(&vec![("room".into(), "b".into())]).set(21.5);
        registry.register("app_temperature", "Temperature", temperature);
        let open = Gauge::default();
        open.set(-2);
        registry.register_single("app_open", "Open now", open);
        registry.register_info("app_build", "The build", &[("version", "1.0")]);
        registry.register("app_never", "Never counted", Family::<Pair, Counter>::default());
        registry
    }

    #[test]
    fn the_text_formats_write_each_series_in_label_order() {
        let open = openmetrics(&registry());
        assert_eq!(
            open,
            "# HELP app_requests Requests.\n# TYPE app_requests counter\n\
             app_requests_total{path=\"/\",code=\"500\"} 1\n\
             app_requests_total{path=\"/a\\\"b\",code=\"200\"} 3\n\
             # HELP app_temperature Temperature.\n# TYPE app_temperature gauge\n\
             app_temperature{room=\"a\"} -Inf\napp_temperature{room=\"b\"} 21.5\n\
             # HELP app_open Open now.\n# TYPE app_open gauge\napp_open -2\n\
             # HELP app_build The build.\n# TYPE app_build info\napp_build_info{version=\"1.0\"} 1\n# EOF\n"
        );
        let text = prometheus_text(&registry());
        assert!(text.starts_with("# HELP app_requests_total Requests.\n# TYPE app_requests_total counter\n"), "{text}");
        assert!(text.ends_with("# TYPE app_build_info gauge\napp_build_info{version=\"1.0\"} 1\n"), "{text}");
        assert!(!text.contains("# EOF") && !text.contains("app_never"), "{text}");
    }

    #[test]
    fn protobuf_carries_the_same_series() {
        let families = messages::families(&protobuf(&registry()));
        let names: Vec<(&str, i32)> = families.iter().map(|f| (f.name.as_str(), f.r#type)).collect();
        assert_eq!(names, [("app_requests_total", 0), ("app_temperature", 1), ("app_open", 1), ("app_build_info", 1)]);
        let requests = &families[0].metric;
        assert_eq!(requests[1].label[0].value, "/a\"b");
        assert_eq!(requests[1].counter.as_ref().map(|c| c.value), Some(3.0));
        assert_eq!(families[1].metric[0].gauge.as_ref().map(|g| g.value), Some(f64::NEG_INFINITY));
        assert_eq!(families[2].metric[0].gauge.as_ref().map(|g| g.value), Some(-2.0));
        assert_eq!(families[3].metric[0].label[0].name, "version");
    }
}

/// `io.prometheus.client`'s messages (`metrics.proto`), derived, to read the exposition back in
/// the tests.
#[cfg(test)]
pub(crate) mod messages {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct MetricFamily {
        #[prost(string, tag = "1")]
        pub(crate) name: String,
        #[prost(string, tag = "2")]
        pub(crate) help: String,
        #[prost(int32, tag = "3")]
        pub(crate) r#type: i32,
        #[prost(message, repeated, tag = "4")]
        pub(crate) metric: Vec<Metric>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Metric {
        #[prost(message, repeated, tag = "1")]
        pub(crate) label: Vec<LabelPair>,
        #[prost(message, optional, tag = "2")]
        pub(crate) gauge: Option<Gauge>,
        #[prost(message, optional, tag = "3")]
        pub(crate) counter: Option<Counter>,
        #[prost(message, optional, tag = "7")]
        pub(crate) histogram: Option<Histogram>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct LabelPair {
        #[prost(string, tag = "1")]
        pub(crate) name: String,
        #[prost(string, tag = "2")]
        pub(crate) value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Gauge {
        #[prost(double, tag = "1")]
        pub(crate) value: f64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Counter {
        #[prost(double, tag = "1")]
        pub(crate) value: f64,
        #[prost(message, optional, tag = "2")]
        pub(crate) exemplar: Option<Exemplar>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Histogram {
        #[prost(uint64, tag = "1")]
        pub(crate) sample_count: u64,
        #[prost(double, tag = "2")]
        pub(crate) sample_sum: f64,
        #[prost(message, repeated, tag = "3")]
        pub(crate) bucket: Vec<Bucket>,
        #[prost(sint32, tag = "5")]
        pub(crate) schema: i32,
        #[prost(double, tag = "6")]
        pub(crate) zero_threshold: f64,
        #[prost(uint64, tag = "7")]
        pub(crate) zero_count: u64,
        #[prost(message, repeated, tag = "9")]
        pub(crate) negative_span: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "10")]
        pub(crate) negative_delta: Vec<i64>,
        #[prost(message, repeated, tag = "12")]
        pub(crate) positive_span: Vec<BucketSpan>,
        #[prost(sint64, repeated, tag = "13")]
        pub(crate) positive_delta: Vec<i64>,
        #[prost(message, repeated, tag = "16")]
        pub(crate) exemplars: Vec<Exemplar>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Bucket {
        #[prost(uint64, tag = "1")]
        pub(crate) cumulative_count: u64,
        #[prost(double, tag = "2")]
        pub(crate) upper_bound: f64,
        #[prost(message, optional, tag = "3")]
        pub(crate) exemplar: Option<Exemplar>,
    }

    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub(crate) struct BucketSpan {
        #[prost(sint32, tag = "1")]
        pub(crate) offset: i32,
        #[prost(uint32, tag = "2")]
        pub(crate) length: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(crate) struct Exemplar {
        #[prost(message, repeated, tag = "1")]
        pub(crate) label: Vec<LabelPair>,
        #[prost(double, tag = "2")]
        pub(crate) value: f64,
        #[prost(message, optional, tag = "3")]
        pub(crate) timestamp: Option<Timestamp>,
    }

    /// `google.protobuf.Timestamp`.
    #[derive(Clone, Copy, PartialEq, prost::Message)]
    pub(crate) struct Timestamp {
        #[prost(int64, tag = "1")]
        pub(crate) seconds: i64,
        #[prost(int32, tag = "2")]
        pub(crate) nanos: i32,
    }

    /// The families of a delimited body.
    pub(crate) fn families(mut body: &[u8]) -> Vec<MetricFamily> {
        let mut families = Vec::new();
        while !body.is_empty() {
            families.push(prost::Message::decode_length_delimited(&mut body).expect("a delimited MetricFamily"));
        }
        families
    }
}
