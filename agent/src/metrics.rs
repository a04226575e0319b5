//! The agent's metrics, every series known in advance at 0 from the start: lines read per
//! source, matches per rule and source (and per the values of a rule's named groups, at most
//! `AGENT_MAX_SERIES` of them, the rest as `other`), the time of each rule's last match, long
//! lines, source errors by reason, alerts firing and sent, the files open and closed, the log
//! stream's reconnections; events, lines not in their format, values that do not parse; and the
//! metric each rule with a value makes (`watcher_agent_<rule>[_seconds|_bytes]`: a sum, a gauge
//! or a histogram). Every counter is atomic: a scrape never waits for a reader.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::RuleConfig;
use crate::record::SourceError;

pub mod exemplars;
mod exposition;
pub mod model;
pub mod native;
pub(crate) mod proto;
pub(crate) mod server;
mod termination;
mod values;

pub use exemplars::{Exemplar, Exemplars};
pub(crate) use exposition::{bound, suffix};
pub use exposition::{openmetrics, prometheus_text, protobuf};
pub use model::{Counter, FloatGauge, Gauge, Registry};
use model::{Family, label_set};
pub use termination::last_counts;
pub use values::{BatchHistogram, Buckets, Observed};
use values::{ValueMetric, ValueMetrics};
use watcher_base::lock;

label_set!(SourceLabels { source });

label_set!(RuleLabels { rule });

label_set!(ErrorLabels { source, reason });

label_set!(SentLabels { to, result });

label_set!(ReasonLabels { reason });

label_set!(TruncationLabels { source, copy });

/// The value of a named group that takes the place of values beyond `AGENT_MAX_SERIES`.
pub const OTHER: &str = "other";
/// Bytes of a named group's value kept as a label value.
const VALUE_BYTES: usize = 128;

/// Why a file was closed.
pub const CLOSED_REASONS: [&str; 3] = ["rotated", "idle", "limit"];
/// Why the log stream was asked again.
pub const RECONNECT_REASONS: [&str; 5] = ["ended", "idle", "error", "restarted", "shutdown"];

label_set!(CutLabels { source, reason });

/// A label set of a rule: when it was last counted, and in which sources (a bit each).
struct Seen {
    at: Instant,
    sources: u64,
}

/// A rule's series by the values of its labels.
struct Labelled {
    names: Vec<String>,
    seen: Mutex<HashMap<Vec<String>, Seen>>,
    dropped: Counter,
    said: AtomicBool,
    /// Its rule is gone or changed (a new configuration): a reader still counting with the one
    /// before adds no series back.
    retired: AtomicBool,
}

/// The metrics of one agent under one configuration: `sources` (file globs, then `stdout` for
/// the log stream) by index, rules by index. A new configuration's ([`Metrics::reconfigured`])
/// shares the families, and the series of each rule whose series it leaves as they were.
pub struct Metrics {
    /// `lines[source]`.
    pub lines: Vec<Counter>,
    /// Each rule's series, in rule order.
    pub rules: Vec<RuleMetrics>,
    max_series: usize,
    /// What every configuration shares: the families, registered once.
    families: Arc<Families>,
    /// `events[source]`: events (a line each without `AGENT_MULTILINE_START`).
    pub events: Vec<Counter>,
    /// `parse_errors[source]`: lines not in their format.
    pub parse_errors: Vec<Counter>,
    /// `events_cut[source]`: ended at `AGENT_MULTILINE_MAX_LINES`, cut at `_MAX_BYTES`.
    pub events_cut: Vec<[Counter; 2]>,
    /// `long_lines[source]`.
    pub long_lines: Vec<Counter>,
    /// Files open now.
    pub open_files: Gauge,
    closed: Family<ReasonLabels, Counter>,
    skipped: Family<ReasonLabels, Counter>,
    truncations: Family<TruncationLabels, Counter>,
    reconnects: Family<ReasonLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    sent: Family<SentLabels, Counter>,
    sources: Vec<String>,
}

/// One rule's series: what counting adds to, and what a new configuration keeps of a rule made
/// alike.
pub struct RuleMetrics {
    /// How its series are made (its name among them).
    shape: Series,
    /// `matches[source]`, for a rule without labels (none for one with labels).
    pub matches: Vec<Counter>,
    /// Its label sets, for a rule with labels.
    labelled: Option<Arc<Labelled>>,
    /// Its value's metric, for a rule with a value.
    value: Option<ValueMetric>,
    /// Values that did not parse, for a rule with a value.
    pub value_errors: Option<Counter>,
    /// When it last matched: seconds since the epoch.
    pub last_match: FloatGauge,
    /// 1 while its alert fires.
    pub firing: Gauge,
    /// Whether its samples carry exemplars.
    exemplars: bool,
}

/// Every family the agent exports, before it is registered.
#[derive(Default)]
struct Families {
    lines: Family<SourceLabels, Counter>,
    matches: Family<Vec<(String, String)>, Counter>,
    last_match: Family<RuleLabels, FloatGauge>,
    long_lines: Family<SourceLabels, Counter>,
    firing: Family<RuleLabels, Gauge>,
    dropped: Family<RuleLabels, Counter>,
    value_errors: Family<RuleLabels, Counter>,
    events: Family<SourceLabels, Counter>,
    parse_errors: Family<SourceLabels, Counter>,
    events_cut: Family<CutLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    sent: Family<SentLabels, Counter>,
    closed: Family<ReasonLabels, Counter>,
    skipped: Family<ReasonLabels, Counter>,
    truncations: Family<TruncationLabels, Counter>,
    reconnects: Family<ReasonLabels, Counter>,
    open_files: Gauge,
    /// The metrics of the rules with a value, by their names.
    values: ValueMetrics,
    /// `watcher_agent_config_reloads_total`, by result.
    reloads: Family<ResultLabels, Counter>,
    /// `watcher_agent_config_info`, by hash: 1 for the configuration that runs.
    config_info: Family<HashLabels, Gauge>,
    /// `watcher_agent_remote_write_samples_total`, by result.
    remote_written: Family<ResultLabels, Counter>,
    /// `watcher_agent_remote_write_queue_samples`.
    remote_write_held: Gauge,
    /// The exemplars of the rules that have them.
    exemplars: Arc<Exemplars>,
}

label_set!(ResultLabels { result });

label_set!(HashLabels { hash });

/// What makes a rule's series: its name, its kind, its unit, its labels and buckets. A new
/// configuration keeps the series of a rule whose series are made alike (its pattern, fields or
/// alert may change); the others start again at 0.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    name: String,
    metric: crate::config::MetricKind,
    metric_name: Option<String>,
    labels: Vec<String>,
    buckets: Vec<f64>,
    native_schema: Option<i32>,
}

impl Series {
    fn of(rule: &RuleConfig) -> Self {
        Self {
            name: rule.name.clone(),
            metric: rule.metric,
            metric_name: rule.metric_name(),
            labels: rule.labels.clone(),
            buckets: rule.buckets.clone(),
            native_schema: rule.native_schema,
        }
    }
}

impl Families {
    /// Creates, at 0, the series of `sources` that are known in advance and not held by
    /// [`Metrics`]: `rate()` and `increase()` see their first count.
    fn known_at_zero(&self, sources: &[String]) {
        for s in sources {
            for reason in SourceError::ALL {
                let labels = ErrorLabels { source: s.clone(), reason: reason.as_str().to_owned() };
                drop(self.errors.get_or_create(&labels));
            }
        }
        for to in ["event", "alertmanager"] {
            for result in ["sent", "failed"] {
                drop(self.sent.get_or_create(&SentLabels { to: to.to_owned(), result: result.to_owned() }));
            }
        }
        let reason = |r: &str| ReasonLabels { reason: r.to_owned() };
        for r in CLOSED_REASONS {
            drop(self.closed.get_or_create(&reason(r)));
        }
        drop(self.skipped.get_or_create(&reason("compressed")));
        for s in sources.iter().filter(|s| s.starts_with('/')) {
            for copy in ["found", "missing"] {
                let labels = TruncationLabels { source: s.clone(), copy: copy.to_owned() };
                drop(self.truncations.get_or_create(&labels));
            }
        }
        if sources.iter().any(|s| !s.starts_with('/')) {
            for r in RECONNECT_REASONS {
                drop(self.reconnects.get_or_create(&reason(r)));
            }
        }
    }

    /// Registers every family in `registry`, with its help text.
    fn register(&self, registry: &mut Registry) {
        registry.register_info(
            "watcher_agent_build",
            "What this binary is: its version, commit (revision), cargo profile and target; always 1",
            &watcher_build_info::LABELS,
        );
        registry.register("watcher_agent_lines", "Lines read, per source", self.lines.clone());
        registry.register(
            "watcher_agent_matches",
            "Lines matching each rule, per source (and per the values of the rule's named groups)",
            self.matches.clone(),
        );
        registry.register(
            "watcher_agent_last_match_timestamp_seconds",
            "When each rule last matched (seconds since the epoch; 0: never)",
            self.last_match.clone(),
        );
        registry.register(
            "watcher_agent_long_lines",
            "Lines longer than AGENT_MAX_LINE_BYTES, matched on their first bytes",
            self.long_lines.clone(),
        );
        registry.register(
            "watcher_agent_series_dropped",
            "Matches counted as `other`: their label sets beyond AGENT_MAX_SERIES",
            self.dropped.clone(),
        );
        registry.register(
            "watcher_agent_series_folded",
            "The same as watcher_agent_series_dropped_total (its former name)",
            self.dropped.clone(),
        );
        registry.register(
            "watcher_agent_value_errors",
            "Values that did not parse as numbers (or were negative in a sum), per rule: never observed",
            self.value_errors.clone(),
        );
        registry.register(
            "watcher_agent_events",
            "Events, per source: lines joined by AGENT_MULTILINE_START, else one a line",
            self.events.clone(),
        );
        registry.register(
            "watcher_agent_parse_errors",
            "Lines not in their source's format (AGENT_FORMAT), matched as text",
            self.parse_errors.clone(),
        );
        registry.register(
            "watcher_agent_events_cut",
            "Events ended at AGENT_MULTILINE_MAX_LINES (reason max_lines) or cut at AGENT_MULTILINE_MAX_BYTES (max_bytes)",
            self.events_cut.clone(),
        );
        registry.register("watcher_agent_source_errors", "Problems reading a source, by reason", self.errors.clone());
        registry.register("watcher_agent_alert_firing", "1 while a rule's alert fires", self.firing.clone());
        registry.register(
            "watcher_agent_alerts_sent",
            "Alerts sent as Events on the pod and to Alertmanager, by result",
            self.sent.clone(),
        );
        registry.register_single("watcher_agent_open_files", "Files open now", self.open_files.clone());
        registry.register(
            "watcher_agent_files_closed",
            "Files closed: rotated away and read to the end, idle past AGENT_IGNORE_OLDER, or over AGENT_MAX_OPEN_FILES",
            self.closed.clone(),
        );
        registry.register("watcher_agent_files_skipped", "Files never read as text: compressed", self.skipped.clone());
        registry.register(
            "watcher_agent_truncations",
            "Files truncated (copytruncate): the copy found and read from where the file was left, or not found",
            self.truncations.clone(),
        );
        registry.register(
            "watcher_agent_stream_reconnects",
            "Log streams asked again: ended, idle (no byte for a while), error, restarted (the container restarted), \
             shutdown",
            self.reconnects.clone(),
        );
        registry.register(
            "watcher_agent_config_reloads",
            "Configurations read again (AGENT_CONFIG_DIR), by result: applied, or refused (the last good one runs on)",
            self.reloads.clone(),
        );
        registry.register(
            "watcher_agent_config_info",
            "The configuration that runs, by the hash of its variables; always 1",
            self.config_info.clone(),
        );
        registry.register(
            "watcher_agent_remote_write_samples",
            "Samples pushed by remote write (AGENT_REMOTE_WRITE_URL), by result: sent, refused (an answer other than \
             2xx, 429 or 5xx: not tried again) or dropped (the oldest pushes, beyond the queue's bounds)",
            self.remote_written.clone(),
        );
        registry.register_single(
            "watcher_agent_remote_write_queue_samples",
            "Samples of the pushes waiting for the receiver",
            self.remote_write_held.clone(),
        );
        registry.register_collector(Box::new(self.values.clone()));
        registry.set_exemplars(self.exemplars.clone());
    }
}

impl Metrics {
    /// Registers every series known in advance, at 0.
    pub fn register(registry: &mut Registry, sources: &[String], rules: &[RuleConfig], max_series: usize) -> Self {
        let families = Arc::new(Families::default());
        families.known_at_zero(sources);
        for result in ["applied", "refused"] {
            drop(families.reloads.get_or_create(&ResultLabels { result: result.to_owned() }));
        }
        for result in ["sent", "refused", "dropped"] {
            drop(families.remote_written.get_or_create(&ResultLabels { result: result.to_owned() }));
        }
        families.register(registry);
        Self::over(families, sources, rules, max_series, &[])
    }

    /// The metrics of a new configuration's `rules`: the series of each rule whose series are
    /// made as before go on; the others' (and a removed rule's) are taken away, and a new or
    /// changed rule's start at 0. The sources are the same (they change only with a restart).
    pub fn reconfigured(&self, rules: &[RuleConfig]) -> Self {
        let kept: Vec<Option<usize>> =
            rules.iter().map(|r| self.rules.iter().position(|old| old.shape == Series::of(r))).collect();
        for (index, old) in self.rules.iter().enumerate() {
            if !kept.contains(&Some(index)) {
                self.remove_rule(old);
            }
        }
        let carried: Vec<Carried> = kept
            .iter()
            .map(|old| match old {
                Some(index) => {
                    let old = &self.rules[*index];
                    Carried { labelled: old.labelled.clone(), value: old.value.clone() }
                }
                None => Carried::default(),
            })
            .collect();
        for rule in rules.iter().filter(|r| r.exemplar.is_none()) {
            self.families.exemplars.forget_rule(&rule.name);
        }
        Self::over(self.families.clone(), &self.sources, rules, self.max_series, &carried)
    }

    /// Takes away every series of `old`, a rule of this configuration.
    fn remove_rule(&self, old: &RuleMetrics) {
        let families = &self.families;
        let shape = &old.shape;
        let rule = RuleLabels { rule: shape.name.clone() };
        for source in &self.sources {
            families.matches.remove(&match_labels(&shape.name, source, &[], &[]));
        }
        if let Some(labelled) = &old.labelled {
            labelled.retired.store(true, Ordering::Release);
            let other = vec![OTHER.to_owned(); labelled.names.len()];
            for values in lock(&labelled.seen).keys().chain(std::iter::once(&other)) {
                for source in &self.sources {
                    families.matches.remove(&match_labels(&shape.name, source, &labelled.names, values));
                }
            }
        }
        if let Some(name) = &shape.metric_name {
            families.values.remove(name);
        }
        for family in [&families.dropped, &families.value_errors] {
            family.remove(&rule);
        }
        families.last_match.remove(&rule);
        families.firing.remove(&rule);
        families.exemplars.forget_rule(&shape.name);
    }

    /// The metrics of `rules` over `families`, each rule with what `carried` holds of it (by
    /// index; nothing where it is shorter): every series known in advance at 0.
    fn over(
        families: Arc<Families>,
        sources: &[String],
        rules: &[RuleConfig],
        max_series: usize,
        carried: &[Carried],
    ) -> Self {
        let cut = |s: &String, reason: &str| {
            families.events_cut.get_or_create(&CutLabels { source: s.clone(), reason: reason.to_owned() })
        };
        let source = |s: &String| SourceLabels { source: s.clone() };
        let rule = |r: &str| RuleLabels { rule: r.to_owned() };
        let per_source =
            |family: &Family<SourceLabels, Counter>| sources.iter().map(|s| family.get_or_create(&source(s))).collect();
        let rule_metrics = |(i, r): (usize, &RuleConfig)| {
            let carried = carried.get(i);
            let value = carried.and_then(|c| c.value.clone()).or_else(|| families.values.register(r));
            let unlabelled = r.labels.is_empty();
            let matches = if unlabelled {
                let labels = |s: &String| match_labels(&r.name, s, &[], &[]);
                if let Some(metric) = &value {
                    sources.iter().for_each(|s| metric.at_zero(&labels(s)));
                }
                sources.iter().map(|s| families.matches.get_or_create(&labels(s))).collect()
            } else {
                Vec::new()
            };
            let labelled = carried.and_then(|c| c.labelled.clone()).or_else(|| {
                (!unlabelled).then(|| {
                    Arc::new(Labelled {
                        names: r.labels.clone(),
                        seen: Mutex::default(),
                        dropped: families.dropped.get_or_create(&rule(&r.name)),
                        said: AtomicBool::new(false),
                        retired: AtomicBool::new(false),
                    })
                })
            });
            RuleMetrics {
                shape: Series::of(r),
                matches,
                labelled,
                value_errors: value.as_ref().map(|_| families.value_errors.get_or_create(&rule(&r.name))),
                value,
                last_match: families.last_match.get_or_create(&rule(&r.name)),
                firing: families.firing.get_or_create(&rule(&r.name)),
                exemplars: r.exemplar.is_some(),
            }
        };
        Self {
            lines: per_source(&families.lines),
            rules: rules.iter().enumerate().map(rule_metrics).collect(),
            max_series,
            events: per_source(&families.events),
            parse_errors: per_source(&families.parse_errors),
            events_cut: sources.iter().map(|s| [cut(s, "max_lines"), cut(s, "max_bytes")]).collect(),
            long_lines: per_source(&families.long_lines),
            open_files: families.open_files.clone(),
            closed: families.closed.clone(),
            skipped: families.skipped.clone(),
            truncations: families.truncations.clone(),
            reconnects: families.reconnects.clone(),
            errors: families.errors.clone(),
            sent: families.sent.clone(),
            sources: sources.to_vec(),
            families,
        }
    }

    /// A configuration read again: `applied` or refused.
    pub fn reloaded(&self, applied: bool) {
        let result = if applied { "applied" } else { "refused" };
        self.families.reloads.get_or_create(&ResultLabels { result: result.to_owned() }).inc();
    }

    /// `samples` pushed by remote write: `sent`, `refused` or `dropped`.
    pub fn remote_written(&self, result: &str, samples: usize) {
        let samples = u64::try_from(samples).unwrap_or(u64::MAX);
        self.families.remote_written.get_or_create(&ResultLabels { result: result.to_owned() }).inc_by(samples);
    }

    /// `samples` wait for the remote write receiver.
    pub fn remote_write_held(&self, samples: usize) {
        self.families.remote_write_held.set(i64::try_from(samples).unwrap_or(i64::MAX));
    }

    /// The configuration that runs has the hash `hash` (the one before it no longer runs).
    pub fn running(&self, hash: &str) {
        self.families.config_info.clear();
        self.families.config_info.get_or_create(&HashLabels { hash: hash.to_owned() }).set(1);
    }

    /// `count` matches of rule `rule` (one with labels) in source `source`, with its labels'
    /// `values`, and the values they gave: the series of those labels, or `other` beyond
    /// `AGENT_MAX_SERIES` (counted, and said once).
    pub fn labelled_matches(
        &self,
        rule: usize,
        source: usize,
        values: &[String],
        count: u64,
        observed: Option<&Observed>,
        exemplars: Vec<Exemplar>,
    ) {
        let (Some(rule), Some(source_name)) = (self.rules.get(rule), self.sources.get(source)) else { return };
        let (Some(labelled), name) = (&rule.labelled, &rule.shape.name) else { return };
        if labelled.retired.load(Ordering::Acquire) {
            return;
        }
        let bit = 1_u64 << source.min(63);
        let known = {
            let mut seen = lock(&labelled.seen);
            let now = Instant::now();
            if let Some(seen) = seen.get_mut(values) {
                seen.at = now;
                seen.sources |= bit;
                true
            } else if seen.len() < self.max_series {
                seen.insert(values.to_vec(), Seen { at: now, sources: bit });
                true
            } else {
                false
            }
        };
        let other: Vec<String>;
        let values = if known {
            values
        } else {
            labelled.dropped.inc_by(count.max(1));
            if !labelled.said.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    rule = name,
                    max = self.max_series,
                    "more label sets than AGENT_MAX_SERIES: the rest are counted as `other` \
                     (watcher_agent_series_dropped_total)"
                );
            }
            other = vec![OTHER.to_owned(); values.len()];
            &other
        };
        let labels = match_labels(name, source_name, &labelled.names, values);
        if count > 0 {
            self.families.matches.get_or_create(&labels).inc_by(count);
        }
        if let (Some(metric), Some(observed)) = (&rule.value, observed) {
            metric.add(&labels, observed);
        }
        if rule.exemplars {
            for exemplar in exemplars {
                self.families.exemplars.keep(&labels, &rule.shape.buckets, exemplar);
            }
        }
    }

    /// The latest `exemplars` of rule `rule` (one without labels) in source `source`, the newest
    /// last.
    pub fn exemplars(&self, rule: usize, source: usize, exemplars: Vec<Exemplar>) {
        let (Some(rule), Some(source)) = (self.rules.get(rule), self.sources.get(source)) else { return };
        if rule.exemplars {
            let labels = match_labels(&rule.shape.name, source, &[], &[]);
            for exemplar in exemplars {
                self.families.exemplars.keep(&labels, &rule.shape.buckets, exemplar);
            }
        }
    }

    /// Values rule `rule` (one without labels) read in source `source`.
    pub fn observed(&self, rule: usize, source: usize, observed: &Observed) {
        let rule = self.rules.get(rule);
        if let (Some((Some(metric), name)), Some(source)) =
            (rule.map(|r| (&r.value, &r.shape.name)), self.sources.get(source))
        {
            metric.add(&match_labels(name, source, &[], &[]), observed);
        }
    }

    /// Drops the label sets not counted for `idle` (`AGENT_SERIES_IDLE`): their series leave
    /// `/metrics`, and count from 0 if they come back.
    pub fn expire(&self, idle: Duration, now: Instant) {
        for rule in &self.rules {
            let Some(labelled) = &rule.labelled else { continue };
            let name = &rule.shape.name;
            lock(&labelled.seen).retain(|values, seen| {
                if now.saturating_duration_since(seen.at) < idle {
                    return true;
                }
                for (index, source) in self.sources.iter().enumerate() {
                    if seen.sources & (1_u64 << index.min(63)) != 0 {
                        let labels = match_labels(name, source, &labelled.names, values);
                        self.families.matches.remove(&labels);
                        if let Some(metric) = &rule.value {
                            metric.remove(&labels);
                        }
                        if rule.exemplars {
                            self.families.exemplars.forget(&labels);
                        }
                    }
                }
                false
            });
        }
    }

    /// A problem reading source `source`.
    pub fn source_error(&self, source: usize, reason: SourceError) {
        if let Some(name) = self.sources.get(source) {
            let labels = ErrorLabels { source: name.clone(), reason: reason.as_str().to_owned() };
            self.errors.get_or_create(&labels).inc();
        }
    }

    /// An alert sent `to` (`event`, `alertmanager`): `sent` or `failed`.
    pub fn sent(&self, to: &str, result: &str) {
        self.sent.get_or_create(&SentLabels { to: to.to_owned(), result: result.to_owned() }).inc();
    }

    /// A file closed, for `reason` ([`CLOSED_REASONS`]).
    pub fn closed(&self, reason: &str) {
        self.closed.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc();
    }

    /// A file never read as text (`compressed`).
    pub fn skipped(&self, reason: &str) {
        self.skipped.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc();
    }

    /// A file of source `source` truncated, its copy found or not.
    pub fn truncated(&self, source: usize, copy_found: bool) {
        if let Some(name) = self.sources.get(source) {
            let copy = if copy_found { "found" } else { "missing" };
            self.truncations.get_or_create(&TruncationLabels { source: name.clone(), copy: copy.to_owned() }).inc();
        }
    }

    /// The log stream asked again, for `reason` ([`RECONNECT_REASONS`]).
    pub fn reconnected(&self, reason: &str) {
        self.reconnects.get_or_create(&ReasonLabels { reason: reason.to_owned() }).inc();
    }
}

/// What a rule whose series go on keeps from the configuration before.
#[derive(Default)]
struct Carried {
    labelled: Option<Arc<Labelled>>,
    value: Option<ValueMetric>,
}

/// The labels of a match series: the rule, the source, the named groups' values.
fn match_labels(rule: &str, source: &str, names: &[String], values: &[String]) -> Vec<(String, String)> {
    let mut labels = vec![("rule".to_owned(), rule.to_owned()), ("source".to_owned(), source.to_owned())];
    labels.extend(names.iter().cloned().zip(values.iter().cloned()));
    labels
}

/// A named group's value as a label value: text, at most [`VALUE_BYTES`].
pub fn label_value(bytes: &[u8]) -> String {
    crate::text::truncate(&String::from_utf8_lossy(bytes), VALUE_BYTES)
}

#[cfg(test)]
mod tests;
