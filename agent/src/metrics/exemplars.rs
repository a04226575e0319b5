//! Exemplars (`AGENT_EXEMPLAR_<NAME>`): each series of a rule that has them keeps the latest
//! trace id a line gave it, with the value and the time it was read; a histogram keeps one a
//! bucket (the one its value fell in), as client_golang does. They travel in the formats that
//! carry exemplars: OpenMetrics text (a counter's `_total`, each `_bucket`), the protobuf
//! exposition (a counter's, each classic bucket's, a native histogram's) and remote write. The
//! series are bounded as the rules' are (`AGENT_MAX_SERIES`); a series that goes takes its
//! exemplars with it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use watcher_base::lock;

use super::model::LabelSet;
use super::proto;

/// The label an exemplar's trace id is.
pub const TRACE_ID: &str = "trace_id";
/// The most characters of a trace id kept: OpenMetrics allows 128 an exemplar's labels, names
/// and values together.
const TRACE_ID_CHARS: usize = 128 - TRACE_ID.len();

/// One exemplar.
#[derive(Clone, Debug, PartialEq)]
pub struct Exemplar {
    /// The trace id.
    pub trace_id: String,
    /// The value it came with (1 for a match counted).
    pub value: f64,
    /// When it was read.
    pub at: SystemTime,
}

impl Exemplar {
    /// The trace id `bytes` (text, at most [`TRACE_ID_CHARS`] characters) with `value`, now.
    pub fn new(bytes: &[u8], value: f64) -> Self {
        let text = String::from_utf8_lossy(bytes);
        let trace_id = text.chars().take(TRACE_ID_CHARS).collect();
        Self { trace_id, value, at: SystemTime::now() }
    }

    fn seconds(&self) -> f64 {
        self.at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
    }

    /// When it was read: seconds and nanoseconds since the epoch.
    pub(crate) fn since_epoch(&self) -> (i64, i32) {
        let since = self.at.duration_since(UNIX_EPOCH).unwrap_or_default();
        (i64::try_from(since.as_secs()).unwrap_or(i64::MAX), i32::try_from(since.subsec_nanos()).unwrap_or(0))
    }

    /// As the protobuf exposition's `io.prometheus.client.Exemplar`: its label, value, time.
    pub(crate) fn write_protobuf(&self, out: &mut Vec<u8>) {
        proto::message(out, 1, |out| {
            proto::string(out, 1, TRACE_ID);
            proto::string(out, 2, &self.trace_id);
        });
        proto::double(out, 2, self.value);
        let (seconds, nanos) = self.since_epoch();
        proto::message(out, 3, |out| {
            proto::int(out, 1, seconds);
            proto::int(out, 2, i64::from(nanos));
        });
    }

    /// ` # {trace_id="…"} value timestamp`, as OpenMetrics text follows a sample with it.
    pub(crate) fn write_text(&self, out: &mut String) {
        let _ = write!(out, " # {{{TRACE_ID}=\"");
        escape_into(&self.trace_id, out);
        let _ = write!(
            out,
            "\"}} {} {}",
            dtoa::Buffer::new().format(self.value),
            dtoa::Buffer::new().format(self.seconds())
        );
    }
}

/// What one series keeps.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// The latest.
    pub(crate) last: Option<Exemplar>,
    /// A histogram's, by bucket: upper bound, and the latest whose value fell in it.
    buckets: Vec<(f64, Option<Exemplar>)>,
}

impl Kept {
    /// The latest whose value fell in the bucket of upper bound `bound`.
    pub(crate) fn bucket(&self, bound: f64) -> Option<&Exemplar> {
        self.buckets.iter().find(|(b, _)| *b == bound)?.1.as_ref()
    }
}

/// The exemplars of every series that has some, by its labels as the text formats write them
/// (`rule="latency",source="stdout"`).
#[derive(Debug, Default)]
pub struct Exemplars {
    series: Mutex<HashMap<String, Kept>>,
}

impl Exemplars {
    /// `exemplar` of the series `labels`, a histogram's with upper bounds `bounds` (none for a
    /// counter).
    pub(super) fn keep(&self, labels: &[(String, String)], bounds: &[f64], exemplar: Exemplar) {
        let key = block(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let mut series = lock(&self.series);
        let kept = series.entry(key).or_default();
        if !bounds.is_empty() {
            if kept.buckets.len() != bounds.len() + 1 {
                kept.buckets = bounds.iter().chain(&[f64::INFINITY]).map(|b| (*b, None)).collect();
            }
            let at = bounds.partition_point(|bound| *bound < exemplar.value);
            kept.buckets[at].1 = Some(exemplar.clone());
        }
        kept.last = Some(exemplar);
    }

    /// Forgets the series `labels` (gone from the metrics).
    pub(super) fn forget(&self, labels: &[(String, String)]) {
        let key = block(labels.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        lock(&self.series).remove(&key);
    }

    /// Forgets every series of rule `rule`.
    pub(super) fn forget_rule(&self, rule: &str) {
        let prefix = block([("rule", rule)].into_iter());
        lock(&self.series).retain(|key, _| !(key.starts_with(&prefix) && key[prefix.len()..].starts_with(',')));
    }

    /// The exemplars of each series, for one scrape or push.
    pub(crate) fn lookup(&self) -> Lookup<'_> {
        Lookup { series: lock(&self.series), key: String::new() }
    }
}

/// The exemplars, held for one scrape or push.
pub(crate) struct Lookup<'a> {
    series: std::sync::MutexGuard<'a, HashMap<String, Kept>>,
    key: String,
}

impl Lookup<'_> {
    /// What the series `labels` keeps: only a rule's series have exemplars.
    pub(crate) fn find(&mut self, labels: &dyn LabelSet) -> Option<&Kept> {
        if self.series.is_empty() || !(0..labels.count()).any(|i| labels.label(i).0 == "rule") {
            return None;
        }
        self.key.clear();
        write_block(labels, &mut self.key);
        self.series.get(&self.key)
    }
}

/// `labels` as the text formats write them, into `out`.
pub(crate) fn write_block(labels: &dyn LabelSet, out: &mut String) {
    for i in 0..labels.count() {
        let (name, value) = labels.label(i);
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_into(value, out);
        out.push('"');
    }
}

/// Labels as the text formats write them: `name="value"`, comma-separated, the values escaped.
fn block<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (i, (name, value)) in labels.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_into(value, &mut out);
        out.push('"');
    }
    out
}

/// `value` escaped as a label value: `\`, `"` and newlines.
pub(crate) fn escape_into(value: &str, out: &mut String) {
    if !value.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
        out.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::metrics::exposition::messages as model;

    use crate::metrics::Registry;

    use super::*;
    use crate::config::{Config, ValueFrom};
    use crate::matching::Rules;
    use crate::metrics::Metrics;
    use crate::pipeline::{Pipeline, Record, Sink};
    use crate::record::Piece;
    use crate::sinks::alerts::AlertBook;

    /// Rules with exemplars from a group (a histogram that is also native; a count with a
    /// label) and from a JSON field, after `log` is read.
    fn read(log: &str) -> (Registry, Config) {
        let config = Config::from_vars([
            ("AGENT_FILES", "/x/*.log"),
            ("AGENT_FORMAT", "auto"),
            ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms trace=(?P<trace>\w+)"),
            ("AGENT_VALUE_LATENCY", "ms"),
            ("AGENT_METRIC_LATENCY", "histogram"),
            ("AGENT_UNIT_LATENCY", "ms"),
            ("AGENT_BUCKETS_LATENCY", "0.1,1"),
            ("AGENT_NATIVE_LATENCY", "1.1"),
            ("AGENT_EXEMPLAR_LATENCY", "trace"),
            ("AGENT_RULE_ERRORS", r"ERROR code=(?P<code>\d+) trace=(?P<trace>\w+)"),
            ("AGENT_EXEMPLAR_ERRORS", "trace"),
            ("AGENT_MATCH_SLOW", "level=^warn$"),
            ("AGENT_EXEMPLAR_SLOW", "trace.id"),
        ])
        .expect("a configuration");
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, &["/x/*.log".into()], &config.rules, 100);
        let rules = Rules::new(&config.rules).expect("rules");
        let alerts = Arc::new(Mutex::new(AlertBook::new(&config.rules)));
        let formats = vec![config.format];
        let mut pipeline = Pipeline::reading(&rules, formats, 16_384, Arc::new(metrics), alerts);
        let written = SystemTime::now();
        pipeline.take(Record { source: 0, piece: Piece::Run(log.as_bytes()), written });
        pipeline.flush();
        (registry, config)
    }

    const LOG: &str = "GET took=50ms trace=aaa\nGET took=734ms trace=bbb\nGET took=60ms trace=ccc\n\
                       ERROR code=500 trace=ddd\n{\"level\":\"warn\",\"trace\":{\"id\":\"eee\"}}\n";

    /// OpenMetrics text: each bucket with the latest trace id whose value fell in it, each
    /// counter with the latest; the group is no label; text 0.0.4 carries none.
    #[test]
    fn openmetrics_carries_the_latest_trace_id_of_each_series_and_bucket() {
        let (registry, config) = read(LOG);
        let rule = |name: &str| config.rules.iter().find(|r| r.name == name).expect("the rule");
        assert_eq!(rule("errors").labels, ["code"], "the exemplar's group is no label");
        assert_eq!(rule("slow").exemplar, Some(ValueFrom::Field("trace.id".into())));
        let text = crate::metrics::openmetrics(&registry);
        let carried = |series: &str| -> Option<(String, String)> {
            let line = text.lines().find(|l| l.starts_with(series))?;
            let (_, exemplar) = line.split_once(" # ")?;
            let mut parts = exemplar.split(' ');
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        };
        let source = r#"source="/x/*.log""#;
        let trace = |id: &str, value: &str| Some((format!("{{trace_id=\"{id}\"}}"), value.to_owned()));
        let bucket =
            |le: &str| format!(r#"watcher_agent_latency_seconds_bucket{{le="{le}",rule="latency",{source}}} "#);
        assert_eq!(carried(&bucket("0.1")), trace("ccc", "0.06"), "{text}");
        assert_eq!(carried(&bucket("1.0")), trace("bbb", "0.734"), "{text}");
        assert_eq!(carried(&bucket("+Inf")), None, "no value above 1 s");
        let matches =
            |rule: &str, more: &str| format!(r#"watcher_agent_matches_total{{rule="{rule}",{source}{more}}} "#);
        assert_eq!(carried(&matches("latency", "")), trace("ccc", "0.06"));
        assert_eq!(carried(&matches("errors", r#",code="500""#)), trace("ddd", "1.0"));
        assert_eq!(carried(&matches("slow", "")), trace("eee", "1.0"));
        assert!(!text.contains("trace=\""), "no trace label: {text}");
        assert!(!crate::metrics::prometheus_text(&registry).contains(" # {"), "text 0.0.4 has no exemplars");
    }

    /// The protobuf exposition (and remote write, which reads the same families): a counter's
    /// exemplar, each classic bucket's, the native histogram's latest.
    #[test]
    fn protobuf_carries_them_on_counters_buckets_and_the_native_histogram() {
        let (registry, _) = read(LOG);
        let families = crate::metrics::exposition::messages::families(&crate::metrics::protobuf(&registry));
        let trace = |e: &Option<model::Exemplar>| e.as_ref().map(|e| (e.label[0].value.clone(), e.value));
        let latency = families.iter().find(|f| f.name == "watcher_agent_latency_seconds").expect("the histogram");
        let histogram = latency.metric[0].histogram.as_ref().expect("a histogram");
        let buckets: Vec<_> = histogram.bucket.iter().map(|b| trace(&b.exemplar)).collect();
        assert_eq!(buckets[..2], [Some(("ccc".into(), 0.06)), Some(("bbb".into(), 0.734))]);
        assert_eq!(histogram.exemplars.len(), 1);
        assert_eq!(histogram.exemplars[0].label[0].name, TRACE_ID);
        assert!(histogram.exemplars[0].timestamp.is_some());
        let matches = families.iter().find(|f| f.name == "watcher_agent_matches_total").expect("matches");
        let errors = matches.metric.iter().find(|m| m.label.iter().any(|l| l.value == "errors")).expect("errors");
        assert_eq!(trace(&errors.counter.as_ref().expect("a counter").exemplar), Some(("ddd".into(), 1.0)));
        let lines = families.iter().find(|f| f.name == "watcher_agent_lines_total").expect("lines");
        assert!(lines.metric.iter().all(|m| m.counter.as_ref().is_some_and(|c| c.exemplar.is_none())));
    }

    /// A trace id is kept to what OpenMetrics allows, and escaped; a series that goes takes
    /// its exemplars with it.
    #[test]
    fn trace_ids_are_bounded_escaped_and_forgotten_with_their_series() {
        let long = "x".repeat(500);
        assert_eq!(Exemplar::new(long.as_bytes(), 1.0).trace_id.chars().count(), TRACE_ID_CHARS);
        let mut text = String::new();
        Exemplar { trace_id: "a\"b\\c".into(), value: 1.0, at: UNIX_EPOCH }.write_text(&mut text);
        assert_eq!(text, r#" # {trace_id="a\"b\\c"} 1.0 0.0"#);
        let exemplars = Exemplars::default();
        let labels = vec![("rule".to_owned(), "x".to_owned()), ("source".to_owned(), "s".to_owned())];
        exemplars.keep(&labels, &[], Exemplar::new(b"t", 1.0));
        let other = vec![("rule".to_owned(), "xy".to_owned()), ("source".to_owned(), "s".to_owned())];
        exemplars.keep(&other, &[], Exemplar::new(b"t", 1.0));
        exemplars.forget_rule("x");
        assert_eq!(lock(&exemplars.series).len(), 1, "rule xy's kept");
        exemplars.forget(&other);
        assert!(lock(&exemplars.series).is_empty());
    }
}
