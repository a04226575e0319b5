//! What becomes of each line: counted for its source, matched against every rule in one pass,
//! each match counted and timed, and fed to its rule's alert window. Counts are kept locally and
//! added to the metrics once per batch, so the hot path touches no shared memory.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::alerts::{Transition, Window};
use crate::config::RuleConfig;
use crate::events::truncate;
use crate::follow::{Sink, SourceError};
use crate::lines::Line;
use crate::metrics::Metrics;
use crate::rules::Rules;

/// Bytes of the last matching line an alert quotes.
const QUOTED_LINE: usize = 256;

/// An alert to say: `occurrences` more of rule `rule`'s, with its note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alert {
    /// The rule's index.
    pub rule: usize,
    /// The rule's name.
    pub name: String,
    /// The Event's reason: `LogRule` and the rule's name in camel case.
    pub reason: String,
    /// What fired, with the last matching line.
    pub note: String,
    /// Matches since it was last said (the crossing included).
    pub occurrences: i32,
}

/// The rules, their windows and the counts of the current batch.
pub struct Processor {
    rules: Rules,
    windows: Vec<Option<Window>>,
    metrics: Metrics,
    lines: Vec<u64>,
    long_lines: Vec<u64>,
    matches: Vec<Vec<u64>>,
    last_match: Vec<Option<f64>>,
    pending: Vec<Option<Alert>>,
    /// Each rule's note from when it last fired.
    notes: Vec<String>,
}

impl Processor {
    /// A processor of `rules` over `sources` sources, counting into `metrics`.
    pub fn new(rules: &[RuleConfig], sources: usize, metrics: Metrics) -> Result<Self, regex::Error> {
        let compiled = Rules::new(rules)?;
        Ok(Self {
            rules: compiled,
            windows: rules.iter().map(|r| r.alert.map(Window::new)).collect(),
            metrics,
            lines: vec![0; sources],
            long_lines: vec![0; sources],
            matches: vec![vec![0; sources]; rules.len()],
            last_match: vec![None; rules.len()],
            pending: vec![None; rules.len()],
            notes: vec![String::new(); rules.len()],
        })
    }

    /// One line of source `source`, read at `now`.
    #[inline]
    pub fn line(&mut self, source: usize, line: Line<'_>, now: Instant) {
        self.lines[source] += 1;
        if line.truncated {
            self.long_lines[source] += 1;
        }
        let Self { rules, matches, last_match, windows, pending, notes, .. } = self;
        rules.each_match(line.bytes, |rule| {
            matches[rule][source] += 1;
            last_match[rule] = Some(wall_clock());
            let Some(window) = windows[rule].as_mut() else { return };
            let fired = window.record(now) == Some(Transition::Fired);
            if !fired && !window.firing() {
                return;
            }
            let name = &rules.names()[rule];
            let entry = pending[rule].get_or_insert_with(|| Alert {
                rule,
                name: name.clone(),
                reason: reason(name),
                note: String::new(),
                occurrences: 0,
            });
            entry.occurrences = entry.occurrences.saturating_add(1);
            if fired {
                let threshold = window.threshold();
                let quoted = truncate(&String::from_utf8_lossy(line.bytes), QUOTED_LINE);
                entry.note =
                    format!("rule {name} matched {} times within {threshold}; last line: {quoted}", threshold.count);
                notes[rule].clone_from(&entry.note);
            }
        });
    }

    /// Adds the batch's counts to the metrics, and sets each alert's gauge.
    pub fn flush(&mut self) {
        for (counter, count) in self.metrics.lines.iter().zip(&mut self.lines) {
            counter.inc_by(std::mem::take(count));
        }
        for (counter, count) in self.metrics.long_lines.iter().zip(&mut self.long_lines) {
            counter.inc_by(std::mem::take(count));
        }
        for (counters, counts) in self.metrics.matches.iter().zip(&mut self.matches) {
            for (counter, count) in counters.iter().zip(counts.iter_mut()) {
                counter.inc_by(std::mem::take(count));
            }
        }
        for (gauge, at) in self.metrics.last_match.iter().zip(&mut self.last_match) {
            if let Some(at) = at.take() {
                gauge.set(at);
            }
        }
        for (gauge, window) in self.metrics.firing.iter().zip(&self.windows) {
            gauge.set(i64::from(window.as_ref().is_some_and(Window::firing)));
        }
    }

    /// Time passing: the alerts resolved by now, by rule name.
    pub fn tick(&mut self, now: Instant) -> Vec<String> {
        let mut resolved = Vec::new();
        for (rule, window) in self.windows.iter_mut().enumerate() {
            if let Some(window) = window
                && window.tick(now) == Some(Transition::Resolved)
            {
                resolved.push(self.rules.names()[rule].clone());
            }
        }
        resolved
    }

    /// The rules firing now: (name, the note from when it fired).
    pub fn firing(&self) -> Vec<(String, String)> {
        let firing = self.windows.iter().enumerate().filter(|(_, w)| w.as_ref().is_some_and(Window::firing));
        firing.map(|(rule, _)| (self.rules.names()[rule].clone(), self.notes[rule].clone())).collect()
    }

    /// The alerts to say now, taken.
    pub fn take_alerts(&mut self) -> Vec<Alert> {
        self.pending.iter_mut().filter_map(Option::take).collect()
    }

    /// An alert that could not be said: kept, to be said with the next.
    pub fn keep_alert(&mut self, alert: Alert) {
        let rule = alert.rule;
        match &mut self.pending[rule] {
            Some(newer) => newer.occurrences = newer.occurrences.saturating_add(alert.occurrences),
            slot @ None => *slot = Some(alert),
        }
    }

    /// A problem reading source `source`.
    pub fn source_error(&self, source: usize, reason: SourceError) {
        self.metrics.source_error(source, reason);
    }

    /// The metrics, for what is counted outside the lines.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// `LogRuleError` for rule `error`, `LogRuleSlowQuery` for `slow_query`.
pub fn reason(rule: &str) -> String {
    let mut reason = String::from("LogRule");
    for part in rule.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            reason.push(first.to_ascii_uppercase());
            reason.extend(chars);
        }
    }
    reason
}

fn wall_clock() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

/// The file follower's sink: lines into the processor at `now`.
pub struct FileSink<'a> {
    /// Where lines go.
    pub processor: &'a mut Processor,
    /// When they were read.
    pub now: Instant,
}

impl Sink for FileSink<'_> {
    fn line(&mut self, source: usize, line: Line<'_>) {
        self.processor.line(source, line, self.now);
    }

    fn error(&mut self, source: usize, reason: SourceError, _detail: &str) {
        self.processor.source_error(source, reason);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::registry::Registry;

    use super::*;
    use crate::config::Threshold;

    fn processor() -> (Processor, Registry) {
        let rules = [
            RuleConfig {
                name: "error".into(),
                pattern: r"\bERROR\b".into(),
                alert: Some(Threshold { count: 3, window: Duration::from_secs(60) }),
            },
            RuleConfig { name: "slow_query".into(), pattern: "slow".into(), alert: None },
        ];
        let mut registry = Registry::default();
        let names: Vec<String> = rules.iter().map(|r| r.name.clone()).collect();
        let metrics = Metrics::register(&mut registry, &["/logs/*.log".into(), "stdout".into()], &names);
        (Processor::new(&rules, 2, metrics).expect("rules"), registry)
    }

    fn line(bytes: &[u8]) -> Line<'_> {
        Line { bytes, truncated: false }
    }

    #[test]
    fn lines_and_matches_are_counted_per_source_once_flushed() {
        let (mut p, registry) = processor();
        let now = Instant::now();
        p.line(0, line(b"INFO ok"), now);
        p.line(0, line(b"ERROR slow disk"), now);
        p.line(1, Line { bytes: b"ERROR", truncated: true }, now);
        let before = crate::metrics::openmetrics(&registry);
        assert!(before.contains(r#"watcher_agent_lines_total{source="/logs/*.log"} 0"#), "not yet flushed");
        p.flush();
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

    #[test]
    fn an_alert_fires_once_then_counts_occurrences_and_resolves() {
        let (mut p, registry) = processor();
        let start = Instant::now();
        for i in 0..2 {
            p.line(0, line(b"ERROR one"), start + Duration::from_secs(i));
        }
        assert!(p.take_alerts().is_empty(), "below the threshold");
        p.line(0, line(b"ERROR the third"), start + Duration::from_secs(2));
        p.line(0, line(b"ERROR the fourth"), start + Duration::from_secs(3));
        let alerts = p.take_alerts();
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].reason, "LogRuleError");
        assert_eq!(alerts[0].occurrences, 2, "the crossing and the match after it");
        assert_eq!(alerts[0].note, "rule error matched 3 times within 3 in 1m; last line: ERROR the third");
        p.flush();
        assert!(crate::metrics::openmetrics(&registry).contains(r#"watcher_agent_alert_firing{rule="error"} 1"#));
        assert!(p.tick(start + Duration::from_secs(30)).is_empty());
        assert_eq!(p.tick(start + Duration::from_secs(62)), ["error"]);
        p.flush();
        assert!(crate::metrics::openmetrics(&registry).contains(r#"watcher_agent_alert_firing{rule="error"} 0"#));
        p.keep_alert(alerts[0].clone());
        assert_eq!(p.take_alerts()[0].occurrences, 2, "kept until said");
    }

    #[test]
    fn reasons_are_camel_case() {
        assert_eq!(reason("error"), "LogRuleError");
        assert_eq!(reason("slow_query"), "LogRuleSlowQuery");
    }
}
