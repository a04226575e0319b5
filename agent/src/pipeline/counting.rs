//! What becomes of each line: counted for its source, matched against every rule (a run of lines
//! at once, see [`crate::matching`]), each match counted, timed, and recorded in its rule's alert
//! window by the time the line was written. Each reader's pipeline (the files' thread, the log
//! stream) has its own [`Counting`]: counts are kept locally and added to the (atomic) metrics once per
//! batch, and the one shared lock, the alerts', is taken only for a match of a rule with an
//! alert. A reader never waits for another, nor a scrape for a reader.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::Record;
use crate::config::MetricKind;
use crate::matching::{Matched, Rules};
use crate::metrics::native::Index;
use crate::metrics::{Exemplar, Metrics, Observed, label_value};
use crate::parse::fields::{self, Format};
use crate::parse::value::Reading;
use crate::record::{Event, Line, Piece};
use crate::sinks::alerts::SharedAlerts;
use watcher_base::lock;

/// One reader's counting.
pub(super) struct Counting {
    rules: Rules,
    metrics: Arc<Metrics>,
    max_line: usize,
    /// `formats[source]`.
    formats: Vec<Format>,
    lines: Vec<u64>,
    long_lines: Vec<u64>,
    events: Vec<u64>,
    parse_errors: Vec<u64>,
    /// `cut[source]`: events ended at their most lines, cut at their most bytes.
    cut: Vec<[u64; 2]>,
    tally: Tally,
}

/// A rule's label sets in one source, by their key: matches, the values they gave, the latest
/// exemplar.
type LabelSets = HashMap<Vec<u8>, (u64, Observed, Latest)>;

/// The latest exemplars of a batch, one a bucket (a histogram's; 0 for a counter): the bucket,
/// the trace id (its buffer kept while the entry is), the value; and which entry is the newest.
#[derive(Clone, Debug, Default)]
struct Latest {
    by_bucket: Vec<(usize, Vec<u8>, f64)>,
    newest: usize,
}

impl Latest {
    /// `trace_id` with `value`, in `bucket`.
    fn keep(&mut self, bucket: usize, trace_id: &[u8], value: f64) {
        let at = match self.by_bucket.iter().position(|(b, ..)| *b == bucket) {
            Some(at) => at,
            None => {
                self.by_bucket.push((bucket, Vec::new(), 0.0));
                self.by_bucket.len() - 1
            }
        };
        let (_, kept, kept_value) = &mut self.by_bucket[at];
        kept.clear();
        kept.extend_from_slice(trace_id);
        *kept_value = value;
        self.newest = at;
    }

    /// The exemplars kept, the newest last; none are left.
    fn take(&mut self) -> Vec<Exemplar> {
        let newest = self.newest;
        let mut kept = std::mem::take(&mut self.by_bucket);
        if newest < kept.len() {
            let last = kept.remove(newest);
            kept.push(last);
        }
        kept.iter().map(|(_, trace_id, value)| Exemplar::new(trace_id, *value)).collect()
    }
}

/// What a rule with a value does with it.
struct Measure {
    reading: Reading,
    /// A histogram's bounds (none for a sum or a gauge).
    bounds: Vec<f64>,
    /// A native histogram's buckets.
    native: Option<Index>,
}

/// One rule, as counting reads it, and what a batch counted of it.
struct RuleTally {
    /// Its name (an alert reconfigured since is found by name).
    name: String,
    has_alert: bool,
    /// Counted by its label values.
    labelled: bool,
    /// For a rule with a value.
    measure: Option<Measure>,
    /// `matches[source]`, for a rule without labels.
    matches: Vec<u64>,
    /// `observed[source]`, for a rule with a value and without labels.
    observed: Vec<Observed>,
    /// `exemplars[source]`, for a rule with exemplars and without labels.
    exemplars: Vec<Latest>,
    value_errors: u64,
    matched: bool,
}

/// The matches of a batch.
struct Tally {
    alerts: SharedAlerts,
    /// The alerts' configuration this counting's rules are.
    generation: u64,
    /// Each rule, in rule order (a match's `rule`).
    rules: Vec<RuleTally>,
    /// Matches of rules with labels, by (rule, source) and the labels' raw values (each its
    /// length, then its bytes: looked up without a copy), and their values.
    labelled: HashMap<(usize, usize), LabelSets>,
    /// The key of a match's labels, made again for each match.
    key: Vec<u8>,
}

impl Tally {
    /// `m`, in source `source`, written at `written`; `quote` is what an alert says of it.
    fn matched(&mut self, source: usize, m: &Matched<'_>, written: SystemTime, quote: &[u8]) {
        let index = m.rule;
        let rule = &mut self.rules[index];
        rule.matched = true;
        let value = match (&rule.measure, m.value) {
            (Some(measure), Some(text)) => match measure.reading.parse(text) {
                Ok(value) => Some((value, measure.bounds.as_slice(), measure.native.as_ref())),
                Err(_) => {
                    rule.value_errors += 1;
                    None
                }
            },
            _ => None,
        };
        // A value rule's exemplar comes with the value it read (in the bucket it fell in); a
        // count's with 1.
        let exemplar = m.exemplar.filter(|_| rule.measure.is_none() || value.is_some());
        let (exemplar_value, bucket) =
            value.map_or((1.0, 0), |(v, bounds, _)| (v, bounds.partition_point(|bound| *bound < v)));
        if rule.labelled {
            self.key.clear();
            for value in &m.values {
                self.key.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
                self.key.extend_from_slice(value);
            }
            let sets = self.labelled.entry((index, source)).or_default();
            let (count, observed, kept) = match sets.get_mut(self.key.as_slice()) {
                Some(entry) => entry,
                None => sets.entry(self.key.clone()).or_default(),
            };
            *count += 1;
            if let Some((value, bounds, native)) = value {
                observed.observe(value, bounds, native);
            }
            if let Some(trace_id) = exemplar {
                kept.keep(bucket, trace_id, exemplar_value);
            }
        } else {
            rule.matches[source] += 1;
            if let Some((value, bounds, native)) = value {
                rule.observed[source].observe(value, bounds, native);
            }
            if let Some(trace_id) = exemplar {
                rule.exemplars[source].keep(bucket, trace_id, exemplar_value);
            }
        }
        if rule.has_alert {
            lock(&self.alerts).record_of(self.generation, (index, &rule.name), quote, written, SystemTime::now());
        }
    }
}

impl Counting {
    /// Counting over `rules` (compiled) into `metrics`, for sources read as `formats` (one
    /// each); lines matched on their first `max_line` bytes.
    pub(super) fn new(
        rules: Rules,
        metrics: Arc<Metrics>,
        alerts: SharedAlerts,
        formats: Vec<Format>,
        max_line: usize,
    ) -> Self {
        let sources = formats.len();
        let book = lock(&alerts);
        let generation = book.generation();
        let tallies = rules
            .configs()
            .iter()
            .enumerate()
            .map(|(index, r)| RuleTally {
                name: r.name.clone(),
                has_alert: book.has_alert(index),
                labelled: !r.labels.is_empty(),
                measure: (r.metric != MetricKind::Count).then(|| Measure {
                    reading: r.reading,
                    bounds: if r.metric == MetricKind::Histogram { r.buckets.clone() } else { Vec::new() },
                    native: r.native_schema.map(Index::new),
                }),
                matches: vec![0; sources],
                observed: vec![Observed::default(); sources],
                exemplars: vec![Latest::default(); sources],
                value_errors: 0,
                matched: false,
            })
            .collect();
        drop(book);
        let tally = Tally { alerts, generation, rules: tallies, labelled: HashMap::new(), key: Vec::new() };
        Self {
            rules,
            metrics,
            max_line,
            formats,
            lines: vec![0; sources],
            long_lines: vec![0; sources],
            events: vec![0; sources],
            parse_errors: vec![0; sources],
            cut: vec![[0; 2]; sources],
            tally,
        }
    }

    /// A record of a source: counted as what it holds.
    pub(super) fn take(&mut self, record: Record<'_>) {
        let Record { source, piece, written } = record;
        match piece {
            Piece::Run(run) => self.run(source, run, written),
            Piece::Line(line) => self.line(source, line, written),
            Piece::Event(event) => self.event(source, event, written),
        }
    }

    /// A run of complete lines of source `source` (each ending in `\n`), written at `written`.
    fn run(&mut self, source: usize, run: &[u8], written: SystemTime) {
        if self.formats[source] == Format::Text {
            let Self { rules, max_line, tally, .. } = self;
            let (lines, long) = rules.scan(run, *max_line, |m| tally.matched(source, &m, written, m.line));
            self.lines[source] += lines;
            self.events[source] += lines;
            self.long_lines[source] += long;
            return;
        }
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', run) {
            let mut line = &run[start..end];
            line = line.strip_suffix(b"\r").unwrap_or(line);
            start = end + 1;
            let truncated = line.len() > self.max_line;
            self.line(source, Line { bytes: &line[..line.len().min(self.max_line)], truncated }, written);
        }
    }

    /// One line of source `source` (already without its newline, cut to the bound), written at
    /// `written`.
    fn line(&mut self, source: usize, line: Line<'_>, written: SystemTime) {
        self.lines[source] += 1;
        self.long_lines[source] += u64::from(line.truncated);
        let bytes = &line.bytes[..line.bytes.len().min(self.max_line)];
        self.one(source, bytes, bytes, written);
    }

    /// An event of joined lines of source `source`, its last line written at `written`.
    fn event(&mut self, source: usize, event: Event<'_>, written: SystemTime) {
        self.lines[source] += event.lines;
        self.long_lines[source] += event.long_lines;
        self.cut[source][0] += u64::from(event.cut_lines);
        self.cut[source][1] += u64::from(event.cut_bytes);
        self.one(source, event.text, event.first_line(), written);
    }

    /// One line or event: read as its source's format says, matched, counted.
    fn one(&mut self, source: usize, text: &[u8], quote: &[u8], written: SystemTime) {
        self.events[source] += 1;
        let Self { rules, tally, formats, parse_errors, .. } = self;
        let record = match fields::read(formats[source], text, rules.paths()) {
            Ok(record) => record,
            Err(_) => {
                parse_errors[source] += 1;
                None
            }
        };
        rules.each_match_record(text, record.as_ref(), |m| tally.matched(source, &m, written, quote));
    }

    /// Adds the batch's counts to the metrics.
    pub(super) fn flush(&mut self) {
        let add = |counters: &[crate::metrics::Counter], counts: &mut [u64]| {
            for (counter, count) in counters.iter().zip(counts.iter_mut()) {
                if *count > 0 {
                    counter.inc_by(std::mem::take(count));
                }
            }
        };
        add(&self.metrics.lines, &mut self.lines);
        add(&self.metrics.long_lines, &mut self.long_lines);
        add(&self.metrics.events, &mut self.events);
        add(&self.metrics.parse_errors, &mut self.parse_errors);
        for (counters, counts) in self.metrics.events_cut.iter().zip(&mut self.cut) {
            add(counters, counts);
        }
        let now = wall_clock();
        for (index, (rule, metrics)) in self.tally.rules.iter_mut().zip(&self.metrics.rules).enumerate() {
            add(&metrics.matches, &mut rule.matches);
            for (source, observed) in rule.observed.iter_mut().enumerate() {
                if observed.count > 0 {
                    self.metrics.observed(index, source, &std::mem::take(observed));
                }
            }
            for (source, kept) in rule.exemplars.iter_mut().enumerate() {
                if !kept.by_bucket.is_empty() {
                    self.metrics.exemplars(index, source, kept.take());
                }
            }
            if let (Some(counter), true) = (&metrics.value_errors, rule.value_errors > 0) {
                counter.inc_by(std::mem::take(&mut rule.value_errors));
            }
            if std::mem::take(&mut rule.matched) {
                metrics.last_match.set(now);
            }
        }
        for ((rule, source), sets) in &mut self.tally.labelled {
            for (key, (count, observed, mut kept)) in sets.drain() {
                let observed = (observed.count > 0).then_some(&observed);
                let exemplars = kept.take();
                self.metrics.labelled_matches(*rule, *source, &label_values(&key), count, observed, exemplars);
            }
        }
    }
}

/// The label values a tally's key holds (each its length, then its bytes), as label values.
fn label_values(mut key: &[u8]) -> Vec<String> {
    let mut values = Vec::new();
    while let Some((length, rest)) = key.split_first_chunk::<4>() {
        let length = (u32::from_le_bytes(*length) as usize).min(rest.len());
        values.push(label_value(&rest[..length]));
        key = &rest[length..];
    }
    values
}

fn wall_clock() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::metrics::Registry;

    use std::sync::Mutex;

    use super::*;
    use crate::config::{Pattern, RuleConfig, Threshold, ValueFrom};
    use crate::parse::value::Unit;
    use crate::sinks::alerts::AlertBook;

    fn counting() -> (Counting, Registry, SharedAlerts) {
        let rules = [
            RuleConfig {
                alert: Some(Threshold { count: 3, window: Duration::from_secs(60) }),
                ..RuleConfig::counting("error", r"\bERROR\b").expect("a rule")
            },
            RuleConfig::counting("slow_query", "slow").expect("a rule"),
        ];
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, &["/logs/*.log".into(), "stdout".into()], &rules, 100);
        let alerts = Arc::new(Mutex::new(AlertBook::new(&rules)));
        let compiled = Rules::new(&rules).expect("rules");
        let formats = vec![Format::Text; 2];
        (Counting::new(compiled, Arc::new(metrics), alerts.clone(), formats, 1024), registry, alerts)
    }

    #[test]
    fn lines_and_matches_are_counted_per_source_once_flushed() {
        let (mut c, registry, _) = counting();
        let now = SystemTime::now();
        c.run(0, b"INFO ok\nERROR slow disk\n", now);
        c.line(1, Line { bytes: b"ERROR", truncated: true }, now);
        let before = crate::metrics::openmetrics(&registry);
        assert!(before.contains(r#"watcher_agent_lines_total{source="/logs/*.log"} 0"#), "not yet flushed");
        c.flush();
        let text = crate::metrics::openmetrics(&registry);
        for series in [
            r#"watcher_agent_lines_total{source="/logs/*.log"} 2"#,
            r#"watcher_agent_lines_total{source="stdout"} 1"#,
            r#"watcher_agent_matches_total{rule="error",source="/logs/*.log"} 1"#,
            r#"watcher_agent_matches_total{rule="error",source="stdout"} 1"#,
            r#"watcher_agent_matches_total{rule="slow_query",source="/logs/*.log"} 1"#,
            r#"watcher_agent_long_lines_total{source="stdout"} 1"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        assert!(!text.contains(r#"watcher_agent_last_match_timestamp_seconds{rule="error"} 0.0"#), "timed");
    }

    /// Matches go to their rule's alert by the time their line was written: an hour-old backlog
    /// is counted and fires nothing; fresh lines fire.
    #[test]
    fn alerts_see_when_lines_were_written() {
        let (mut c, _, alerts) = counting();
        let old = SystemTime::now() - Duration::from_secs(3600);
        c.run(0, b"ERROR 1\nERROR 2\nERROR 3\nERROR 4\n", old);
        c.flush();
        assert!(lock(&alerts).look(SystemTime::now()).is_empty(), "an hour old: nothing fires");
        c.run(0, b"ERROR 5\nERROR 6\nERROR 7\n", SystemTime::now());
        let reports = lock(&alerts).look(SystemTime::now());
        assert!(reports[0].fired, "{reports:?}");
        assert_eq!(reports[0].note, "rule error matched 3 times within 3 in 1m; last line: ERROR 7");
    }

    fn rule(name: &str, pattern: Option<&str>, f: impl FnOnce(&mut RuleConfig)) -> RuleConfig {
        let mut rule = match pattern {
            Some(pattern) => RuleConfig::counting(name, pattern).expect("a rule"),
            None => RuleConfig { name: name.into(), ..RuleConfig::default() },
        };
        f(&mut rule);
        rule
    }

    /// The metrics' text after `log` is counted.
    fn read(c: &mut Counting, registry: &Registry, log: &[u8]) -> String {
        c.run(0, log, SystemTime::now());
        c.flush();
        crate::metrics::prometheus_text(registry)
    }

    /// A rule's one field match: `path` matching `pattern`.
    fn field(path: &str, pattern: &str) -> Vec<crate::config::FieldMatch> {
        vec![crate::config::FieldMatch { path: path.into(), pattern: Pattern::new(pattern).expect("a pattern") }]
    }

    fn measuring(rules: &[RuleConfig], formats: Vec<Format>, max_series: usize) -> (Counting, Registry) {
        let mut registry = Registry::default();
        let sources: Vec<String> = (0..formats.len()).map(|i| format!("s{i}")).collect();
        let metrics = Metrics::register(&mut registry, &sources, rules, max_series);
        let alerts = Arc::new(Mutex::new(AlertBook::new(rules)));
        let compiled = Rules::new(rules).expect("rules");
        (Counting::new(compiled, Arc::new(metrics), alerts, formats, 1024), registry)
    }

    fn has(text: &str, series: &[&str]) {
        for s in series {
            assert!(text.lines().any(|l| l == *s), "{s} in\n{text}");
        }
    }

    /// A histogram of a named group, in the rule's unit: each value in its bucket, once; what
    /// does not parse counted, never observed; the group is no label.
    #[test]
    fn text_values_into_a_histogram() {
        let latency = rule("latency", Some(r"latency=(?P<ms>\S+)"), |r| {
            r.labels.clear();
            r.value = Some(ValueFrom::Group("ms".into()));
            r.metric = MetricKind::Histogram;
            r.buckets = vec![0.1, 0.5, 1.0];
            r.reading.bare = Some(Unit::Milliseconds);
        });
        let (mut c, registry) = measuring(&[latency], vec![Format::Text], 100);
        let log = "GET /a latency=50\nGET /b latency=734\nGET /c latency=1.5s\nGET /d latency=abc\nGET /e latency=1e400\nINFO no value\n";
        has(
            &read(&mut c, &registry, log.as_bytes()),
            &[
                r#"watcher_agent_latency_seconds_bucket{le="0.1",rule="latency",source="s0"} 1"#,
                r#"watcher_agent_latency_seconds_bucket{le="0.5",rule="latency",source="s0"} 1"#,
                r#"watcher_agent_latency_seconds_bucket{le="1.0",rule="latency",source="s0"} 2"#,
                r#"watcher_agent_latency_seconds_bucket{le="+Inf",rule="latency",source="s0"} 3"#,
                r#"watcher_agent_latency_seconds_count{rule="latency",source="s0"} 3"#,
                r#"watcher_agent_latency_seconds_sum{rule="latency",source="s0"} 2.284"#,
                r#"watcher_agent_value_errors_total{rule="latency"} 2"#,
                r#"watcher_agent_matches_total{rule="latency",source="s0"} 5"#,
                r#"watcher_agent_lines_total{source="s0"} 6"#,
                r#"watcher_agent_events_total{source="s0"} 6"#,
            ],
        );
    }

    /// JSON fields: a rule on a field, a histogram of a nested field, a label from a third; a
    /// line that is not JSON counted and still matched as text.
    #[test]
    fn json_fields_match_measure_and_label() {
        let errors = rule("errors", None, |r| {
            r.fields = field("level", "^error$");
            r.labels = vec!["route".into()];
            r.field_labels = vec!["route".into()];
        });
        let latency = rule("latency", None, |r| {
            r.fields = field("level", ".");
            r.value = Some(ValueFrom::Field("http.ms".into()));
            r.metric = MetricKind::Histogram;
            r.buckets = vec![0.5, 1.0];
            r.reading.bare = Some(Unit::Milliseconds);
        });
        let panic = rule("panic", Some("panic"), |_| {});
        let rules = [errors, latency, panic];
        let (mut c, registry) = measuring(&rules, vec![Format::Json], 100);
        let log = concat!(
            r#"{"level":"error","route":"/cart","http":{"ms":734}}"#,
            "\n",
            r#"{"level":"info","route":"/cart","http":{"ms":"12ms"}}"#,
            "\n",
            r#"{"level":"error","http":{"ms":{"p99":1}}}"#,
            "\n",
            "panic: not json\n",
            r#"{"level":"error","route":"/pay","http":{"ms":2000}, "level":"info"}"#,
            "\n",
        );
        let text = read(&mut c, &registry, log.as_bytes());
        has(
            &text,
            &[
                r#"watcher_agent_matches_total{rule="errors",source="s0",route="/cart"} 1"#,
                r#"watcher_agent_matches_total{rule="errors",source="s0",route=""} 1"#,
                r#"watcher_agent_latency_seconds_bucket{le="0.5",rule="latency",source="s0"} 1"#,
                r#"watcher_agent_latency_seconds_bucket{le="1.0",rule="latency",source="s0"} 2"#,
                r#"watcher_agent_latency_seconds_count{rule="latency",source="s0"} 3"#,
                r#"watcher_agent_value_errors_total{rule="latency"} 1"#,
                r#"watcher_agent_parse_errors_total{source="s0"} 1"#,
                r#"watcher_agent_matches_total{rule="panic",source="s0"} 1"#,
            ],
        );
        assert!(!text.contains(r#"route="/pay""#), "the last level wins: info\n{text}");
    }

    /// A sum adds, a gauge keeps the last value; logfmt.
    #[test]
    fn sums_and_gauges() {
        let bytes = rule("sent", None, |r| {
            r.fields = field("msg", "sent");
            r.value = Some(ValueFrom::Field("size".into()));
            r.metric = MetricKind::Sum;
            r.reading = Reading { bare: Some(Unit::Bytes), non_negative: true };
        });
        let queue = rule("queue", None, |r| {
            r.fields = field("queue", ".");
            r.value = Some(ValueFrom::Field("queue".into()));
            r.metric = MetricKind::Gauge;
        });
        let (mut c, registry) = measuring(&[bytes, queue], vec![Format::Logfmt], 100);
        has(
            &read(
                &mut c,
                &registry,
                b"msg=sent size=1KiB queue=7\nmsg=\"sent again\" size=24 queue=3\nmsg=sent size=-5\n",
            ),
            &[
                r#"watcher_agent_sent_bytes_total{rule="sent",source="s0"} 1048.0"#,
                r#"watcher_agent_queue{rule="queue",source="s0"} 3.0"#,
                r#"watcher_agent_value_errors_total{rule="sent"} 1"#,
            ],
        );
    }

    /// A running total the app logs is the counter's value: the last of a batch, and after a
    /// lower one (the app's count started again) the new value, as logged; a negative total is
    /// an error, never the value.
    #[test]
    fn a_running_total_is_the_counter_and_a_lower_one_a_reset() {
        let requests = rule("requests", Some(r"requests_total=(?P<n>-?\d+)"), |r| {
            r.value = Some(ValueFrom::Group("n".into()));
            r.metric = MetricKind::Cumulative;
            r.reading = Reading { bare: None, non_negative: true };
            r.labels.clear();
        });
        let (mut c, registry) = measuring(&[requests], vec![Format::Text], 100);
        let series = r#"watcher_agent_requests_total{rule="requests",source="s0"}"#;
        has(&read(&mut c, &registry, b"requests_total=1500\nrequests_total=1600\n"), &[&format!("{series} 1600.0")]);
        has(&read(&mut c, &registry, b"nothing\n"), &[&format!("{series} 1600.0")]);
        has(
            &read(&mut c, &registry, b"requests_total=20\nrequests_total=-3\nrequests_total=30\n"),
            &[&format!("{series} 30.0"), r#"watcher_agent_value_errors_total{rule="requests"} 1"#],
        );
        let text = read(&mut c, &registry, b"");
        assert!(text.contains("# TYPE watcher_agent_requests_total counter"), "{text}");
    }

    /// An event is matched once, its lines counted, its first line quoted by the alert.
    #[test]
    fn events_are_matched_once_and_quoted_by_their_first_line() {
        let (mut c, registry, alerts) = counting();
        let event = Event {
            text: b"ERROR request failed\nException: slow disk\n\tat a\n\tat b ERROR",
            lines: 4,
            cut_lines: false,
            cut_bytes: true,
            long_lines: 1,
        };
        for _ in 0..3 {
            c.event(0, event, SystemTime::now());
        }
        c.flush();
        let text = crate::metrics::prometheus_text(&registry);
        has(
            &text,
            &[
                r#"watcher_agent_matches_total{rule="error",source="/logs/*.log"} 3"#,
                r#"watcher_agent_matches_total{rule="slow_query",source="/logs/*.log"} 3"#,
                r#"watcher_agent_lines_total{source="/logs/*.log"} 12"#,
                r#"watcher_agent_events_total{source="/logs/*.log"} 3"#,
                r#"watcher_agent_events_cut_total{source="/logs/*.log",reason="max_bytes"} 3"#,
                r#"watcher_agent_long_lines_total{source="/logs/*.log"} 3"#,
            ],
        );
        let reports = lock(&alerts).look(SystemTime::now());
        assert_eq!(reports[0].note, "rule error matched 3 times within 3 in 1m; last line: ERROR request failed");
    }

    /// `AGENT_MAX_SERIES` holds across kinds: a histogram's label set counts once, the rest is
    /// `other`, counted as dropped; `AGENT_SERIES_IDLE` drops label sets not seen.
    #[test]
    fn series_are_bounded_and_expire() {
        let latency = rule("latency", Some(r"(?P<route>/\w+) (?P<ms>\d+)"), |r| {
            r.labels = vec!["route".into()];
            r.value = Some(ValueFrom::Group("ms".into()));
            r.metric = MetricKind::Histogram;
            r.buckets = vec![1.0];
        });
        let (mut c, registry) = measuring(&[latency], vec![Format::Text], 2);
        // A batch's label sets come in no order: one line a batch, so that /a and /b come first.
        for line in ["/a 1\n", "/b 2\n", "/c 3\n", "/d 4\n", "/a 5\n"] {
            c.run(0, line.as_bytes(), SystemTime::now());
            c.flush();
        }
        let text = crate::metrics::prometheus_text(&registry);
        has(
            &text,
            &[
                r#"watcher_agent_latency_count{rule="latency",source="s0",route="/a"} 2"#,
                r#"watcher_agent_latency_count{rule="latency",source="s0",route="/b"} 1"#,
                r#"watcher_agent_latency_count{rule="latency",source="s0",route="other"} 2"#,
                r#"watcher_agent_series_dropped_total{rule="latency"} 2"#,
            ],
        );
        c.metrics.expire(std::time::Duration::from_secs(600), std::time::Instant::now());
        assert!(crate::metrics::prometheus_text(&registry).contains(r#"route="/a""#), "seen just now");
        c.metrics.expire(std::time::Duration::ZERO, std::time::Instant::now() + std::time::Duration::from_secs(1));
        let text = crate::metrics::prometheus_text(&registry);
        assert!(!text.contains(r#"route="/a""#) && !text.contains(r#"route="/b""#), "{text}");
        has(
            &read(&mut c, &registry, b"/c 1\n"),
            &[r#"watcher_agent_latency_count{rule="latency",source="s0",route="/c"} 1"#],
        );
    }

    /// A 64 MB JSON line: matched on its first bytes (memory bounded by the line's bound), then
    /// not JSON: a parse error, a long line, counted once.
    #[test]
    fn a_64_mb_json_line_is_bounded() {
        let errors = rule("errors", None, |r| {
            r.fields = field("level", "error");
        });
        let (mut c, registry) = measuring(&[errors, rule("any", Some("level"), |_| {})], vec![Format::Json], 100);
        let mut line = String::from(r#"{"level":"error","msg":""#);
        line.push_str(&"x".repeat(64 << 20));
        line.push_str("\"}\n");
        has(
            &read(&mut c, &registry, line.as_bytes()),
            &[
                r#"watcher_agent_parse_errors_total{source="s0"} 1"#,
                r#"watcher_agent_long_lines_total{source="s0"} 1"#,
                r#"watcher_agent_lines_total{source="s0"} 1"#,
                r#"watcher_agent_matches_total{rule="any",source="s0"} 1"#,
                r#"watcher_agent_matches_total{rule="errors",source="s0"} 0"#,
            ],
        );
    }
}
