//! The last counts of a pod that ends, for its container's termination message (at most 4 KiB,
//! which the kubelet keeps in the pod's status): totals first, per metric and rule, summed over
//! the other labels (matches, a histogram's `_count` and `_sum`, a sum's or a gauge's value),
//! then the series by label as room allows, a histogram's buckets only where they all fit, and a
//! last line that says what was left out. A rule with a label of 60 values keeps its totals.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Registry, prometheus_text};

/// One sample of the text exposition: `name{labels} value`.
struct Sample<'t> {
    line: &'t str,
    name: &'t str,
    rule: Option<String>,
    value: f64,
}

impl<'t> Sample<'t> {
    fn parse(line: &'t str) -> Option<Self> {
        let (series, value) = line.rsplit_once(' ')?;
        let value: f64 = value.parse().ok()?;
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}')?),
            None => (series, ""),
        };
        Some(Self { line, name, rule: label(labels, "rule"), value })
    }
}

/// The value of label `key` in `labels` (`a="x",b="y\"z"`), unescaped.
fn label(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        if name.trim_start_matches(',') == key {
            return Some(value);
        }
        rest = after[end + 1..].trim_start_matches(',');
    }
    None
}

/// The samples of `registry` that are not 0 (a series at 0 counted nothing), in Prometheus' text
/// format, in whole lines of at most `limit` bytes in all: what a last scrape would have read,
/// totals first (module docs).
pub fn last_counts(registry: &Registry, limit: usize) -> String {
    let text = prometheus_text(registry);
    let histograms: Vec<String> = text
        .lines()
        .filter_map(|l| Some(format!("{}_bucket", l.strip_prefix("# TYPE ")?.strip_suffix(" histogram")?)))
        .collect();
    // What the binary is, always 1, says nothing of what it counted.
    let samples: Vec<Sample<'_>> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(Sample::parse)
        .filter(|s| s.value != 0.0 && s.name != "watcher_agent_build_info")
        .collect();
    let (buckets, series): (Vec<&Sample<'_>>, Vec<&Sample<'_>>) =
        samples.iter().partition(|s| histograms.iter().any(|h| h == s.name));
    let mut groups: BTreeMap<(&str, Option<&str>), Vec<&Sample<'_>>> = BTreeMap::new();
    for sample in &series {
        groups.entry((sample.name, sample.rule.as_deref())).or_default().push(sample);
    }
    // A group of one is its own total, with its labels; a larger one is summed.
    let mut totals = Vec::new();
    let mut detail = Vec::new();
    for ((name, rule), members) in &groups {
        match members.as_slice() {
            [one] => totals.push(one.line.to_owned()),
            many => {
                // 15 significant digits: whole counts as they are, sums of seconds without
                // the last digits' rounding noise (12.18, not 12.179999999999993).
                let sum: f64 = many.iter().map(|s| s.value).sum();
                let sum: f64 = format!("{sum:.14e}").parse().unwrap_or(sum);
                let labels = rule
                    .map(|r| format!("{{rule=\"{}\"}}", r.replace('\\', "\\\\").replace('"', "\\\"")))
                    .unwrap_or_default();
                totals.push(format!("{name}{labels} {sum}"));
                let mut lines: Vec<String> = many.iter().map(|s| s.line.to_owned()).collect();
                lines.sort_unstable();
                detail.extend(lines);
            }
        }
    }
    let bucket_lines: Vec<String> = buckets.iter().map(|s| s.line.to_owned()).collect();
    fill(&totals, &detail, &bucket_lines, limit)
}

/// The message: `totals`, then as many of `detail` as fit, then `buckets` where they all fit,
/// and what was left out; within `limit` bytes.
fn fill(totals: &[String], detail: &[String], buckets: &[String], limit: usize) -> String {
    // Room for the last line: "# left out: N series by label, N histogram buckets".
    const LEFT_OUT_ROOM: usize = 64;
    let summed = !detail.is_empty();
    let size = |lines: &[String]| lines.iter().map(|l| l.len() + 1).sum::<usize>();
    let header = "# totals, summed over all but the rule's label\n";
    let by_label = "# by label\n";
    let whole = size(totals) + size(detail) + size(buckets) + if summed { header.len() + by_label.len() } else { 0 };
    let room = if whole <= limit { limit } else { limit.saturating_sub(LEFT_OUT_ROOM) };
    let mut out = String::new();
    let mut left = (0, 0, 0);
    if summed {
        out.push_str(header);
    }
    for line in totals {
        if out.len() + line.len() < room {
            out.push_str(line);
            out.push('\n');
        } else {
            left.0 += 1;
        }
    }
    if summed && out.len() + by_label.len() < room {
        out.push_str(by_label);
    }
    for line in detail {
        if left.0 == 0 && out.len() + line.len() < room {
            out.push_str(line);
            out.push('\n');
        } else {
            left.1 += 1;
        }
    }
    if left == (0, 0, 0) && out.len() + size(buckets) <= room {
        buckets.iter().for_each(|l| {
            out.push_str(l);
            out.push('\n');
        });
    } else {
        left.2 = buckets.len();
    }
    if left != (0, 0, 0) {
        let mut said = Vec::new();
        for (count, what) in [(left.0, "totals"), (left.1, "series by label"), (left.2, "histogram buckets")] {
            if count > 0 {
                said.push(format!("{count} {what}"));
            }
        }
        let _ = writeln!(out, "# left out: {}", said.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_with_their_escapes() {
        assert_eq!(label(r#"le="0.25",rule="latency",source="/var/log/*.log""#, "rule").as_deref(), Some("latency"));
        assert_eq!(label(r#"route="/a\"b,c",rule="x""#, "rule").as_deref(), Some("x"));
        assert_eq!(label(r#"route="/a\"b,c""#, "route").as_deref(), Some("/a\"b,c"));
        assert_eq!(label("", "rule"), None);
        assert_eq!(label("broken", "rule"), None);
    }

    #[test]
    fn what_does_not_fit_is_said_and_the_totals_come_first() {
        let totals = vec!["a_total{rule=\"x\"} 60".to_owned()];
        let detail: Vec<String> = (0..60).map(|i| format!("a_total{{route=\"/r{i}\",rule=\"x\"}} 1")).collect();
        let buckets = vec!["h_bucket{le=\"1\"} 3".to_owned()];
        let whole = fill(&totals, &detail, &buckets, 1 << 20);
        assert!(!whole.contains("left out") && whole.contains("h_bucket"), "{whole}");
        let short = fill(&totals, &detail, &buckets, 400);
        assert!(short.len() <= 400, "{}", short.len());
        assert!(short.contains("a_total{rule=\"x\"} 60\n"), "{short}");
        let kept = short.lines().filter(|l| l.contains("route=")).count();
        assert!(
            short.ends_with(&format!("# left out: {} series by label, 1 histogram buckets\n", 60 - kept)),
            "{short}"
        );
    }
}
