//! What becomes of each line: counted for its source, matched against every rule (a run of lines
//! at once, see [`crate::rules`]), each match counted, timed, and recorded in its rule's alert
//! window by the time the line was written. Each reader (the files' thread, the log stream) has
//! its own [`Counting`]: counts are kept locally and added to the (atomic) metrics once per
//! batch, and the one shared lock, the alerts', is taken only for a match of a rule with an
//! alert. A reader never waits for another, nor a scrape for a reader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::alerts::AlertBook;
use crate::lines::Line;
use crate::metrics::{Metrics, label_value};
use crate::rules::{Matched, Rules};
use crate::shared::lock;

/// The alerts, shared by the readers and the alert loop.
pub type SharedAlerts = Arc<Mutex<AlertBook>>;

/// One reader's counting.
pub struct Counting {
    rules: Rules,
    metrics: Arc<Metrics>,
    max_line: usize,
    lines: Vec<u64>,
    long_lines: Vec<u64>,
    tally: Tally,
}

/// The matches of a batch.
struct Tally {
    alerts: SharedAlerts,
    has_alert: Vec<bool>,
    /// Rules with named groups (counted by their values).
    labelled_rules: Vec<bool>,
    /// `matches[rule][source]`, for rules without named groups.
    matches: Vec<Vec<u64>>,
    /// Matches of rules with named groups: (rule, source, values).
    labelled: HashMap<(usize, usize, Vec<String>), u64>,
    matched: Vec<bool>,
}

impl Tally {
    fn matched(&mut self, source: usize, m: &Matched<'_>, written: SystemTime) {
        let rule = m.rule;
        self.matched[rule] = true;
        if self.labelled_rules[rule] {
            let values = m.values.iter().map(|v| label_value(v)).collect();
            *self.labelled.entry((rule, source, values)).or_default() += 1;
        } else {
            self.matches[rule][source] += 1;
        }
        if self.has_alert[rule] {
            lock(&self.alerts).record(rule, m.line, written, SystemTime::now());
        }
    }
}

impl Counting {
    /// Counting over `rules` (compiled) into `metrics`, for `sources` sources; lines matched on
    /// their first `max_line` bytes.
    pub fn new(rules: Rules, metrics: Arc<Metrics>, alerts: SharedAlerts, sources: usize, max_line: usize) -> Self {
        let count = rules.names().len();
        let has_alert = {
            let book = lock(&alerts);
            (0..count).map(|rule| book.has_alert(rule)).collect()
        };
        let labelled_rules = metrics.matches.iter().map(|per_source| per_source.iter().all(Option::is_none)).collect();
        let tally = Tally {
            alerts,
            has_alert,
            labelled_rules,
            matches: vec![vec![0; sources]; count],
            labelled: HashMap::new(),
            matched: vec![false; count],
        };
        Self { rules, metrics, max_line, lines: vec![0; sources], long_lines: vec![0; sources], tally }
    }

    /// A run of complete lines of source `source` (each ending in `\n`), written at `written`.
    pub fn run(&mut self, source: usize, run: &[u8], written: SystemTime) {
        let Self { rules, max_line, tally, .. } = self;
        let (lines, long) = rules.scan(run, *max_line, |m| tally.matched(source, &m, written));
        self.lines[source] += lines;
        self.long_lines[source] += long;
    }

    /// One line of source `source` (already without its newline, cut to the bound), written at
    /// `written`.
    pub fn line(&mut self, source: usize, line: Line<'_>, written: SystemTime) {
        self.lines[source] += 1;
        self.long_lines[source] += u64::from(line.truncated);
        let bytes = &line.bytes[..line.bytes.len().min(self.max_line)];
        let Self { rules, tally, .. } = self;
        rules.each_match(bytes, |m| tally.matched(source, &m, written));
    }

    /// Adds the batch's counts to the metrics.
    pub fn flush(&mut self) {
        for (counter, count) in self.metrics.lines.iter().zip(&mut self.lines) {
            counter.inc_by(std::mem::take(count));
        }
        for (counter, count) in self.metrics.long_lines.iter().zip(&mut self.long_lines) {
            counter.inc_by(std::mem::take(count));
        }
        for (counters, counts) in self.metrics.matches.iter().zip(&mut self.tally.matches) {
            for (counter, count) in counters.iter().zip(counts.iter_mut()) {
                if let Some(counter) = counter {
                    counter.inc_by(std::mem::take(count));
                }
            }
        }
        for ((rule, source, values), count) in self.tally.labelled.drain() {
            self.metrics.labelled_matches(rule, source, &values, count);
        }
        let now = wall_clock();
        for (gauge, matched) in self.metrics.last_match.iter().zip(&mut self.tally.matched) {
            if std::mem::take(matched) {
                gauge.set(now);
            }
        }
    }
}

fn wall_clock() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prometheus_client::registry::Registry;

    use super::*;
    use crate::config::{RuleConfig, Threshold};

    fn counting() -> (Counting, Registry, SharedAlerts) {
        let rules = [
            RuleConfig {
                name: "error".into(),
                pattern: r"\bERROR\b".into(),
                alert: Some(Threshold { count: 3, window: Duration::from_secs(60) }),
                labels: Vec::new(),
            },
            RuleConfig { name: "slow_query".into(), pattern: "slow".into(), alert: None, labels: Vec::new() },
        ];
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, &["/logs/*.log".into(), "stdout".into()], &rules, 100);
        let alerts = Arc::new(Mutex::new(AlertBook::new(&rules)));
        let compiled = Rules::new(&rules).expect("rules");
        (Counting::new(compiled, Arc::new(metrics), alerts.clone(), 2, 1024), registry, alerts)
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
}
