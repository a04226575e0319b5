use super::*;

fn rule(name: &str, labels: &[&str]) -> RuleConfig {
    RuleConfig { name: name.into(), labels: labels.iter().map(|l| (*l).to_owned()).collect(), ..RuleConfig::default() }
}

/// A histogram `latency` of a group `ms` in the default buckets, labelled by `labels`, read
/// from one source.
fn latency(labels: &[&str]) -> (Registry, Metrics) {
    let mut registry = Registry::default();
    let latency = RuleConfig {
        metric: crate::config::MetricKind::Histogram,
        value: Some(crate::config::ValueFrom::Group("ms".into())),
        buckets: crate::config::DEFAULT_BUCKETS.to_vec(),
        ..rule("latency", labels)
    };
    let metrics = Metrics::register(&mut registry, &["/var/log/app/*.log".into()], &[latency], 100);
    (registry, metrics)
}

/// `values` observed in the default buckets.
fn observed(values: &[f64]) -> Observed {
    let mut observed = Observed::default();
    for value in values {
        observed.observe(*value, &crate::config::DEFAULT_BUCKETS, None);
    }
    observed
}

#[test]
fn every_series_is_there_at_zero_and_both_formats_name_them_alike() {
    let mut registry = Registry::default();
    let rules = [rule("error", &[]), rule("panic", &[])];
    let metrics = Metrics::register(&mut registry, &["/var/log/*.log".into(), "stdout".into()], &rules, 100);
    let open = openmetrics(&registry);
    for series in [
        r#"watcher_agent_lines_total{source="/var/log/*.log"} 0"#,
        r#"watcher_agent_matches_total{rule="panic",source="/var/log/*.log"} 0"#,
        r#"watcher_agent_last_match_timestamp_seconds{rule="error"} 0.0"#,
        r#"watcher_agent_source_errors_total{source="/var/log/*.log",reason="permission"} 0"#,
        r#"watcher_agent_alert_firing{rule="panic"} 0"#,
        r#"watcher_agent_alerts_sent_total{to="event",result="failed"} 0"#,
        r#"watcher_agent_files_closed_total{reason="rotated"} 0"#,
        r#"watcher_agent_files_skipped_total{reason="compressed"} 0"#,
        r#"watcher_agent_truncations_total{source="/var/log/*.log",copy="missing"} 0"#,
        r#"watcher_agent_stream_reconnects_total{reason="idle"} 0"#,
        "watcher_agent_open_files 0",
        concat!("watcher_agent_build_info{version=\"", env!("CARGO_PKG_VERSION"), "\","),
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
    // The last counts: the series that counted something, totals first (here over the two
    // sources), whole lines within the bound.
    metrics.lines[1].inc_by(12);
    let last = last_counts(&registry, 4096);
    assert_eq!(
        last,
        "# totals, summed over all but the rule's label\nwatcher_agent_lines_total 13\n# by label\n\
         watcher_agent_lines_total{source=\"/var/log/*.log\"} 1\nwatcher_agent_lines_total{source=\"stdout\"} 12\n"
    );
    let short = last_counts(&registry, 150); // the total, not the series by label
    assert!(short.contains("watcher_agent_lines_total 13\n"), "{short}");
    assert!(short.ends_with("# left out: 2 series by label\n"), "{short}");
    assert!(short.len() <= 150);
}

/// A rule's named groups are labels of its counter, at most `max_series` value sets; the
/// rest counted as `other`, and how many were folded.
#[test]
fn named_groups_are_labels_up_to_the_bound() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry, &["stdout".into()], &[rule("http", &["code"])], 2);
    for code in ["500", "503", "500", "502", "504"] {
        metrics.labelled_matches(0, 0, &[code.to_owned()], 1, None, Vec::new());
    }
    let text = openmetrics(&registry);
    for series in [
        r#"watcher_agent_matches_total{rule="http",source="stdout",code="500"} 2"#,
        r#"watcher_agent_matches_total{rule="http",source="stdout",code="503"} 1"#,
        r#"watcher_agent_matches_total{rule="http",source="stdout",code="other"} 2"#,
        r#"watcher_agent_series_folded_total{rule="http"} 2"#,
    ] {
        assert!(text.contains(series), "{series} in {text}");
    }
    assert!(!text.contains(r#"{rule="http",source="stdout"} "#), "no series without the group: {text}");
}

/// A pod that ends, whose histogram has a route label of 60 values: its 4 KiB keep the
/// rule's totals (matches, `_count`, `_sum`), the rest as room allows, and say what is left
/// out.
#[test]
fn the_last_counts_keep_a_histograms_totals_over_many_label_sets() {
    let (registry, metrics) = latency(&["route"]);
    for route in 0..60 {
        let observed = observed(&[0.003, 0.2]);
        metrics.labelled_matches(0, 0, &[format!("/api/v1/orders/{route}")], 2, Some(&observed), Vec::new());
    }
    let message = last_counts(&registry, 4096);
    assert!(message.len() <= 4096, "{}", message.len());
    for total in [
        "watcher_agent_matches_total{rule=\"latency\"} 120\n",
        "watcher_agent_latency_count{rule=\"latency\"} 120\n",
        "watcher_agent_latency_sum{rule=\"latency\"} 12.18",
    ] {
        assert!(message.contains(total), "{total} in {message}");
    }
    let left_out = message.lines().last().expect("a last line");
    assert!(left_out.starts_with("# left out: ") && left_out.contains("histogram buckets"), "{message}");
}

/// A pod that ends: the histograms in its termination message whole where they fit, by their
/// `_count` and `_sum` where they do not.
#[test]
fn the_last_counts_shorten_a_histogram_that_does_not_fit() {
    let (registry, metrics) = latency(&[]);
    metrics.observed(0, 0, &observed(&[0.003, 0.2, 0.7, 3.0]));
    let whole = last_counts(&registry, 4096);
    assert!(whole.contains("watcher_agent_latency_bucket{le=\"0.25\",rule=\"latency\""), "{whole}");
    let short = last_counts(&registry, 400);
    assert!(!short.contains("_bucket"), "{short}");
    assert!(short.contains("watcher_agent_latency_count{rule=\"latency\",source=\"/var/log/app/*.log\"} 4"), "{short}");
    assert!(short.contains("watcher_agent_latency_sum{"), "{short}");
    assert!(short.len() <= 400);
}

/// A new configuration: the series of a rule made alike go on (its pattern changed), a
/// removed rule's go, a new rule's start at 0, and a rule whose buckets changed starts again;
/// the reloads and the configuration that runs are said.
#[test]
fn a_new_configuration_keeps_the_series_of_the_rules_made_alike() {
    let counting = |name: &str, pattern: &str| RuleConfig::counting(name, pattern).expect("a rule");
    let latency = |buckets: &[f64]| RuleConfig {
        metric: crate::config::MetricKind::Histogram,
        value: Some(crate::config::ValueFrom::Group("ms".into())),
        buckets: buckets.to_vec(),
        ..rule("latency", &[])
    };
    let mut registry = Registry::default();
    let first = [counting("error", "ERROR"), counting("http", r"(?<code>5\d\d)"), latency(&[0.25, 1.0])];
    let metrics = Metrics::register(&mut registry, &["stdout".into()], &first, 100);
    metrics.rules[0].matches[0].inc_by(5);
    metrics.labelled_matches(1, 0, &["500".into()], 2, None, Vec::new());
    let mut seen = Observed::default();
    seen.observe(0.2, &[0.25, 1.0], None);
    metrics.observed(2, 0, &seen);
    metrics.running("aaaa");

    let next = [counting("panic", "panic"), counting("error", "ERROR|FATAL"), latency(&[0.5, 2.0])];
    let metrics = metrics.reconfigured(&next);
    metrics.rules[1].matches[0].inc();
    metrics.reloaded(true);
    metrics.running("bbbb");
    let text = openmetrics(&registry);
    for series in [
        r#"watcher_agent_matches_total{rule="error",source="stdout"} 6"#,
        r#"watcher_agent_matches_total{rule="panic",source="stdout"} 0"#,
        r#"watcher_agent_latency_count{rule="latency",source="stdout"} 0"#,
        r#"watcher_agent_latency_bucket{le="2.0",rule="latency",source="stdout"} 0"#,
        r#"watcher_agent_config_reloads_total{result="applied"} 1"#,
        r#"watcher_agent_config_reloads_total{result="refused"} 0"#,
        r#"watcher_agent_config_info{hash="bbbb"} 1"#,
    ] {
        assert!(text.contains(series), "{series} in {text}");
    }
    for gone in [r#"rule="http""#, r#"le="0.25""#, r#"hash="aaaa""#] {
        assert!(!text.contains(gone), "{gone} gone from {text}");
    }
}
