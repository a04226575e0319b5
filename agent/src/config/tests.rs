use std::time::Duration;

use super::*;

fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

fn problem(vars: &[(&str, &str)]) -> String {
    config(vars).expect_err("refused").to_string()
}

#[test]
fn a_minimal_configuration_and_its_defaults() {
    let config = config(&[
        ("AGENT_FILES", "/var/log/app/*.log, /data/err.log"),
        ("AGENT_RULE_ERROR", r"\bERROR\b"),
        ("AGENT_ALERT_ERROR", "5/1m"),
        ("AGENT_RULE_Panic_2", "panic:"),
        ("PATH", "/usr/bin"),
        ("POD_NAME", "shop-1"),
        ("POD_NAMESPACE", "team-a"),
    ])
    .expect("valid");
    assert_eq!(config.files, ["/var/log/app/*.log", "/data/err.log"]);
    let rules: Vec<(&str, Option<Threshold>)> = config.rules.iter().map(|r| (r.name.as_str(), r.alert)).collect();
    assert_eq!(rules, [("error", Some(Threshold { count: 5, window: Duration::from_secs(60) })), ("panic_2", None)]);
    assert_eq!(config.start, Start::End);
    assert_eq!(config.listen.to_string(), "0.0.0.0:9102");
    assert!(config.events);
    assert_eq!(config.poll, Duration::from_millis(250));
    assert_eq!(config.max_line_bytes, 16_384);
    assert_eq!(config.pod.name.as_deref(), Some("shop-1"));
    let described = config.describe();
    assert!(described.contains("rule error: \\bERROR\\b; alerts at 5 in 1m\n"), "{described}");
    assert!(described.contains("pod: team-a/shop-1\n"), "{described}");
}

/// Each bad value names its variable and says what would be right.
#[test]
fn every_problem_names_its_variable() {
    let rule = ("AGENT_RULE_ERROR", "ERROR");
    let files = ("AGENT_FILES", "/var/log/*.log");
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![files], "AGENT_RULE_<NAME>: no rule: set at least one"),
        (vec![rule], "AGENT_FILES: nothing to follow"),
        (
            vec![files, ("AGENT_RULE_ERROR", "(unclosed")],
            "AGENT_RULE_ERROR: not a regular expression: regex parse error:",
        ),
        (vec![files, ("AGENT_RULE_9X", "x")], "AGENT_RULE_9X: the rule's name must be"),
        (vec![files, rule, ("AGENT_ALERT_WARN", "5/1m")], "AGENT_ALERT_WARN: no rule warn: set AGENT_RULE_WARN too"),
        (vec![files, rule, ("AGENT_ALERT_ERROR", "5")], "AGENT_ALERT_ERROR: \"5\": `<count>/<window>`"),
        (vec![files, rule, ("AGENT_ALERT_ERROR", "0/1m")], "AGENT_ALERT_ERROR: \"0/1m\": the count is a number"),
        (vec![files, rule, ("AGENT_ALERT_ERROR", "5/1y")], "AGENT_ALERT_ERROR: \"5/1y\": the window is a duration"),
        (vec![files, rule, ("AGENT_ALERT_ERROR", "5/2d")], "AGENT_ALERT_ERROR: \"5/2d\": the window is a duration"),
        (
            vec![files, rule, ("AGENT_ALERT_ERROR", "5/500ms")],
            "AGENT_ALERT_ERROR: \"5/500ms\": the window is from 1s to 24h",
        ),
        (vec![("AGENT_FILES", "logs/*.log"), rule], "AGENT_FILES: \"logs/*.log\" is not an absolute path"),
        (vec![("AGENT_FILES", "/var/[log"), rule], "AGENT_FILES: \"/var/[log\" is not a glob"),
        (vec![files, rule, ("AGENT_START", "middle")], "AGENT_START: \"middle\": `end` or `beginning`"),
        (vec![files, rule, ("AGENT_LISTEN", ":9102")], "AGENT_LISTEN: \":9102\" is not an address"),
        (vec![files, rule, ("AGENT_EVENTS", "yes")], "AGENT_EVENTS: \"yes\": `true` or `false`"),
        (vec![files, rule, ("AGENT_POLL", "1ms")], "AGENT_POLL: \"1ms\": from 10ms to 1m"),
        (vec![files, rule, ("AGENT_POLL", "fast")], "AGENT_POLL: \"fast\" is not a duration"),
        (vec![files, rule, ("AGENT_MAX_LINE_BYTES", "10")], "AGENT_MAX_LINE_BYTES: \"10\": a number from 256"),
        (
            vec![files, rule, ("AGENT_ALERTMANAGER_URL", "am:9093")],
            "AGENT_ALERTMANAGER_URL: \"am:9093\": an http:// URL",
        ),
        (vec![rule, ("AGENT_LOGS_CONTAINER", "App")], "AGENT_LOGS_CONTAINER: \"App\" is not a container name"),
        (vec![rule, ("AGENT_LOGS_CONTAINER", "app")], "POD_NAME: AGENT_LOGS_CONTAINER needs the pod's name"),
    ];
    for (vars, expected) in cases {
        let said = problem(&vars);
        assert!(said.starts_with(expected), "{vars:?}: {said}");
        assert!(!said.contains('\n'), "one line: {said}");
    }
}

#[test]
fn a_value_that_is_not_utf8_is_refused_only_where_it_is_read() {
    use std::os::unix::ffi::OsStringExt;
    let bad = std::ffi::OsString::from_vec(vec![0xff, 0xfe]);
    let vars = vec![
        (std::ffi::OsString::from("AGENT_FILES"), std::ffi::OsString::from("/x/*.log")),
        (std::ffi::OsString::from("AGENT_RULE_ERROR"), std::ffi::OsString::from("ERROR")),
        (std::ffi::OsString::from("OTHER"), bad.clone()),
    ];
    assert!(Config::from_vars(vars.clone()).is_ok());
    let mut refused = vars;
    refused.push((std::ffi::OsString::from("AGENT_START"), bad));
    assert_eq!(Config::from_vars(refused).expect_err("refused").to_string(), "AGENT_START: not valid UTF-8");
}

#[test]
fn durations_read_and_print_alike() {
    for (text, millis) in [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000)] {
        let duration = parse_duration(text).expect(text);
        assert_eq!(duration, Duration::from_millis(millis));
        assert_eq!(format_duration(duration), text);
    }
    for bad in ["", "5", "m", "-1s", "1.5s", "99999999999999999999h"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}
