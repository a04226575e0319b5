//! The agent's metrics, every series at 0 from the start: lines read per source, matches per
//! rule and source, the time of each rule's last match, long lines, source errors by reason,
//! alerts firing, and the alerts sent (Events, Alertmanager). The hot path counts through handles taken once.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::follow::SourceError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MatchLabels {
    rule: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    source: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SentLabels {
    to: String,
    result: String,
}

/// The metrics of one agent: `sources` (file globs, then `stdout` for the log stream) by index,
/// `rules` by index.
pub struct Metrics {
    /// `lines[source]`.
    pub lines: Vec<Counter>,
    /// `matches[rule][source]`.
    pub matches: Vec<Vec<Counter>>,
    /// `last_match[rule]`: seconds since the epoch.
    pub last_match: Vec<Gauge<f64, AtomicU64>>,
    /// `long_lines[source]`.
    pub long_lines: Vec<Counter>,
    /// `firing[rule]`: 1 while its alert fires.
    pub firing: Vec<Gauge>,
    errors: Family<ErrorLabels, Counter>,
    sent: Family<SentLabels, Counter>,
    sources: Vec<String>,
}

impl Metrics {
    /// Registers every series, at 0.
    pub fn register(registry: &mut Registry, sources: &[String], rules: &[String]) -> Self {
        let lines_family = Family::<SourceLabels, Counter>::default();
        let matches_family = Family::<MatchLabels, Counter>::default();
        let last_family = Family::<RuleLabels, Gauge<f64, AtomicU64>>::default();
        let long_family = Family::<SourceLabels, Counter>::default();
        let firing_family = Family::<RuleLabels, Gauge>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let sent = Family::<SentLabels, Counter>::default();
        let source = |s: &String| SourceLabels { source: s.clone() };
        let lines = sources.iter().map(|s| lines_family.get_or_create(&source(s)).clone()).collect();
        let long_lines = sources.iter().map(|s| long_family.get_or_create(&source(s)).clone()).collect();
        let matches = rules
            .iter()
            .map(|rule| {
                let labels = |s: &String| MatchLabels { rule: rule.clone(), source: s.clone() };
                sources.iter().map(|s| matches_family.get_or_create(&labels(s)).clone()).collect()
            })
            .collect();
        let rule = |r: &String| RuleLabels { rule: r.clone() };
        let last_match = rules.iter().map(|r| last_family.get_or_create(&rule(r)).clone()).collect();
        let firing = rules.iter().map(|r| firing_family.get_or_create(&rule(r)).clone()).collect();
        for s in sources {
            for reason in SourceError::ALL {
                drop(errors.get_or_create(&ErrorLabels { source: s.clone(), reason: reason.as_str().to_owned() }));
            }
        }
        for to in ["event", "alertmanager"] {
            for result in ["sent", "failed"] {
                drop(sent.get_or_create(&SentLabels { to: to.to_owned(), result: result.to_owned() }));
            }
        }
        registry.register("watcher_agent_lines", "Lines read, per source", lines_family);
        registry.register("watcher_agent_matches", "Lines matching each rule, per source", matches_family);
        registry.register(
            "watcher_agent_last_match_timestamp_seconds",
            "When each rule last matched (seconds since the epoch; 0: never)",
            last_family,
        );
        registry.register(
            "watcher_agent_long_lines",
            "Lines longer than AGENT_MAX_LINE_BYTES, matched on their first bytes",
            long_family,
        );
        registry.register("watcher_agent_source_errors", "Problems reading a source, by reason", errors.clone());
        registry.register("watcher_agent_alert_firing", "1 while a rule's alert fires", firing_family);
        registry.register(
            "watcher_agent_alerts_sent",
            "Alerts sent as Events on the pod and to Alertmanager, by result",
            sent.clone(),
        );
        Self { lines, matches, last_match, long_lines, firing, errors, sent, sources: sources.to_vec() }
    }

    /// A problem reading source `source`.
    pub fn source_error(&self, source: usize, reason: SourceError) {
        if let Some(name) = self.sources.get(source) {
            let labels = ErrorLabels { source: name.clone(), reason: reason.as_str().to_owned() };
            self.errors.get_or_create(&labels).inc();
        }
    }

    /// An alert sent `to` (`event`, `alertmanager`), or not.
    pub fn sent(&self, to: &str, ok: bool) {
        let result = if ok { "sent" } else { "failed" };
        self.sent.get_or_create(&SentLabels { to: to.to_owned(), result: result.to_owned() }).inc();
    }
}

/// `registry` as OpenMetrics text.
pub fn openmetrics(registry: &Registry) -> String {
    let mut body = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut body, registry);
    body
}

/// `registry` in Prometheus' text format 0.0.4: a counter's `# TYPE` and `# HELP` name its
/// `_total` sample, and there is no `# EOF` or `# UNIT`.
pub fn prometheus_text(registry: &Registry) -> String {
    let open = openmetrics(registry);
    let counters: Vec<String> =
        open.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter").map(str::to_owned)).collect();
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.iter().any(|c| c == name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_there_at_zero_and_both_formats_name_them_alike() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry, &["/var/log/*.log".into()], &["error".into(), "panic".into()]);
        let open = openmetrics(&registry);
        for series in [
            r#"watcher_agent_lines_total{source="/var/log/*.log"} 0"#,
            r#"watcher_agent_matches_total{rule="panic",source="/var/log/*.log"} 0"#,
            r#"watcher_agent_last_match_timestamp_seconds{rule="error"} 0.0"#,
            r#"watcher_agent_source_errors_total{source="/var/log/*.log",reason="permission"} 0"#,
            r#"watcher_agent_alert_firing{rule="panic"} 0"#,
            r#"watcher_agent_alerts_sent_total{to="event",result="failed"} 0"#,
        ] {
            assert!(open.contains(series), "{series} in {open}");
        }
        metrics.lines[0].inc();
        let text = prometheus_text(&registry);
        assert!(text.contains("# TYPE watcher_agent_lines_total counter\n"), "{text}");
        assert!(text.contains("# TYPE watcher_agent_alert_firing gauge\n"), "{text}");
        assert!(text.contains(r#"watcher_agent_lines_total{source="/var/log/*.log"} 1"#), "{text}");
        assert!(!text.contains("# EOF"));
        assert!(open.ends_with("# EOF\n"));
    }
}
