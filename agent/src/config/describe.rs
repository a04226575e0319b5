//! What `watcher-agent check` prints of a configuration: a line a setting, in the words of the
//! docs, apart from how the variables are read.

use watcher_base::format_duration;

use super::{Config, MetricKind, RuleConfig, Start, ValueFrom};
use crate::parse::fields::Format;

impl Config {
    /// The configuration as `watcher-agent check` prints it.
    pub fn describe(&self) -> String {
        let mut lines = vec!["configuration: valid".to_owned()];
        self.reading(&mut |text| lines.push(text));
        lines.extend(self.rules.iter().map(|rule| describe_rule(rule, self.max_series)));
        self.serving(&mut |text| lines.push(text));
        lines.push(self.ending());
        lines.iter().map(|line| format!("{line}\n")).collect()
    }

    /// What it reads, from where, and how.
    fn reading(&self, line: &mut impl FnMut(String)) {
        for file in &self.files {
            line(format!("follows files: {file}"));
        }
        if let Some(container) = &self.logs_container {
            line(format!(
                "follows the log stream of container {container} (pods/log), asked again after {} without a byte",
                format_duration(self.stream_idle)
            ));
        }
        line(format!(
            "starts at: {}",
            match (&self.state_dir, self.start) {
                (Some(_), _) => "the beginning of every file at the first start in the pod, the checkpoints after",
                (None, Start::End) => "the end of files present at start (new files from their beginning)",
                (None, Start::Beginning) => "the beginning of every file",
            }
        ));
        if let Some(dir) = &self.state_dir {
            line(format!("keeps checkpoints in: {}", dir.display()));
        }
        line(format!(
            "rotated files: read for {} after their last growth; {}; at most {} open",
            format_duration(self.rotate_wait),
            self.ignore_older.map_or("unchanged files stay open".to_owned(), |d| format!(
                "files unchanged for {} closed",
                format_duration(d)
            )),
            self.max_open_files
        ));
        if self.format != Format::Text || self.stdout_format != self.format {
            line(
                format!("reads files as {:?}, the log stream as {:?}", self.format, self.stdout_format).to_lowercase(),
            );
        }
        if let Some(multiline) = &self.multiline {
            line(format!(
                "joins lines into events: started by {}; ended after {} without a line, at {} lines; kept to {} bytes",
                multiline.start,
                format_duration(multiline.wait),
                multiline.max_lines,
                multiline.max_bytes
            ));
        }
    }

    /// What it serves and says, and to whom.
    fn serving(&self, line: &mut impl FnMut(String)) {
        line(format!("serves /metrics, /healthz, /readyz on {}", self.listen));
        let pod = match (&self.pod.namespace, &self.pod.name) {
            (Some(namespace), Some(name)) => format!("{namespace}/{name}"),
            _ => "unknown (POD_NAME, POD_NAMESPACE unset)".to_owned(),
        };
        line(format!("pod: {pod}"));
        let alerting = self.rules.iter().any(|r| r.alert.is_some());
        line(format!(
            "events: {}",
            match (self.events, alerting) {
                (false, _) => "off",
                (true, false) => "on, but no rule has an alert (AGENT_ALERT_<NAME>)",
                (true, true) => "a Warning Event on the pod when an alert fires",
            }
        ));
        if let Some(url) = &self.alertmanager {
            line(format!("alertmanager: {url} (alerts posted firing and resolved)"));
        }
        if let Some(remote) = &self.remote_write {
            let mut said = format!(
                "remote write: every series to {} every {} (at most {} samples, {} bytes held while it is down)",
                remote.url,
                format_duration(remote.interval),
                remote.max_samples,
                remote.max_bytes
            );
            for (what, set) in [
                ("a bearer token", remote.bearer_token_file.is_some()),
                ("its CA file", remote.ca_file.is_some()),
                ("a tenant", remote.tenant.is_some()),
            ] {
                if set {
                    said.push_str(&format!("; {what}"));
                }
            }
            line(said);
        }
        line(format!(
            "polls files every {}; lines matched on their first {} bytes",
            format_duration(self.poll),
            self.max_line_bytes
        ));
    }

    /// When it ends.
    fn ending(&self) -> String {
        match &self.ended_file {
            Some(file) => format!(
                "ends: by itself once {} is not empty (a pod that is meant to end), its last counts in {}",
                file.display(),
                self.termination_log.display()
            ),
            None => {
                format!("ends: on SIGTERM, after a last scrape (at most {})", format_duration(self.shutdown_linger))
            }
        }
    }
}

/// `rule error: \bERROR\b; alerts at 5 in 1m`, with what else the rule does.
fn describe_rule(rule: &RuleConfig, max_series: usize) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(pattern) = &rule.pattern {
        parts.push(pattern.to_string());
    }
    if !rule.fields.is_empty() {
        let fields: Vec<String> = rule.fields.iter().map(|f| format!("{}={}", f.path, f.pattern)).collect();
        parts.push(format!("fields {}", fields.join(", ")));
    }
    let mut text = format!("rule {}: {}", rule.name, parts.join("; "));
    if let Some(alert) = rule.alert {
        text.push_str(&format!("; alerts at {alert}"));
    }
    if !rule.labels.is_empty() {
        text.push_str(&format!("; labels {} (at most {max_series} values)", rule.labels.join(", ")));
    }
    if let (Some(name), Some(value)) = (rule.metric_name(), &rule.value) {
        let from = match value {
            ValueFrom::Group(group) => format!("group {group}"),
            ValueFrom::Field(field) => format!("field {field}"),
        };
        text.push_str(&format!("; {} of {from} as {name}", rule.metric.as_str()));
        if rule.metric == MetricKind::Histogram {
            let buckets: Vec<String> = rule.buckets.iter().map(f64::to_string).collect();
            text.push_str(&format!(" (buckets {})", buckets.join(",")));
        }
        if let Some(schema) = rule.native_schema {
            text.push_str(&format!(", also a native histogram (schema {schema})"));
        }
    }
    if let Some(exemplar) = &rule.exemplar {
        let from = match exemplar {
            ValueFrom::Group(group) => format!("group {group}"),
            ValueFrom::Field(field) => format!("field {field}"),
        };
        text.push_str(&format!("; exemplars: trace_id from {from}"));
    }
    text
}
