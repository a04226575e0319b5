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
        (
            vec![files, rule, ("AGENT_ALERT_WARN", "5/1m")],
            "AGENT_ALERT_WARN: no rule warn: set AGENT_RULE_WARN or AGENT_MATCH_WARN too",
        ),
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

/// A misspelt variable is an error naming the closest known one, never silently ignored.
#[test]
fn unknown_variables_are_refused_with_the_closest_name() {
    let base = [("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_ERROR", "ERROR")];
    let with = |extra: (&'static str, &'static str)| {
        let mut vars = base.to_vec();
        vars.push(extra);
        problem(&vars)
    };
    assert_eq!(
        with(("AGENT_RULES_PANIC", "panic:")),
        "AGENT_RULES_PANIC: unknown variable (did you mean AGENT_RULE_PANIC?)"
    );
    assert_eq!(with(("AGENT_POLL_INTERVAL", "1s")), "AGENT_POLL_INTERVAL: unknown variable (did you mean AGENT_POLL?)");
    assert!(with(("AGENT_WHATEVER_ELSE_ENTIRELY", "1")).contains("(known: AGENT_FILES, "));
}

/// The kubelet's Service variables (a Service named `agent-rule-x` in the namespace) are not
/// rules; the same names with values that are not a Service's are.
#[test]
fn service_links_are_ignored() {
    let config = config(&[
        ("AGENT_FILES", "/x/*.log"),
        ("AGENT_RULE_ERROR", "ERROR"),
        ("AGENT_RULE_X_SERVICE_HOST", "10.0.0.7"),
        ("AGENT_RULE_X_SERVICE_PORT", "80"),
        ("AGENT_RULE_X_SERVICE_PORT_HTTP", "80"),
        ("AGENT_RULE_X_PORT", "tcp://10.0.0.7:80"),
        ("AGENT_RULE_X_PORT_80_TCP", "tcp://10.0.0.7:80"),
        ("AGENT_RULE_X_PORT_80_TCP_PROTO", "tcp"),
        ("AGENT_RULE_X_PORT_80_TCP_PORT", "80"),
        ("AGENT_RULE_X_PORT_80_TCP_ADDR", "10.0.0.7"),
    ])
    .expect("valid");
    assert_eq!(config.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["error"]);
    let rule = config_rule("AGENT_RULE_DB_PORT", r"port \d+ refused");
    assert_eq!(rule, ["db_port", "error"], "a rule whose value is not a Service's is a rule");
}

fn config_rule(key: &'static str, value: &'static str) -> Vec<String> {
    let config = config(&[("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_ERROR", "ERROR"), (key, value)]).expect("valid");
    config.rules.iter().map(|r| r.name.clone()).collect()
}

#[test]
fn rules_differing_only_by_case_are_refused() {
    let said = problem(&[("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_ERROR", "ERROR"), ("AGENT_RULE_Error", "Error")]);
    assert!(said.contains("names the same rule (error): rule names are not case-sensitive"), "{said}");
}

/// A YAML block scalar (`|`) leaves a newline at the end of every value: trimmed.
#[test]
fn values_are_trimmed() {
    let config = config(&[
        ("AGENT_FILES", "/x/*.log\n"),
        ("AGENT_RULE_ERROR", "\\bERROR\\b\n"),
        ("AGENT_ALERT_ERROR", " 3/1m\n"),
        ("AGENT_START", "beginning\n"),
    ])
    .expect("valid");
    assert_eq!(config.rules[0].pattern.as_ref().map(Pattern::as_str), Some("\\bERROR\\b"));
    assert_eq!(config.files, ["/x/*.log"]);
    assert_eq!(config.start, Start::Beginning);
}

#[test]
fn named_groups_are_labels() {
    let config = config(&[("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_HTTP", r"status=(?P<code>5\d\d)")]).expect("valid");
    assert_eq!(config.rules[0].labels, ["code"]);
    let said = problem(&[("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_HTTP", r"(?P<rule>x)")]);
    assert!(said.starts_with("AGENT_RULE_HTTP: the group name \"rule\" is not a label name"), "{said}");
}

#[test]
fn checkpoint_and_rotation_variables() {
    let config = config(&[
        ("AGENT_FILES", "/x/*.log"),
        ("AGENT_RULE_ERROR", "ERROR"),
        ("AGENT_STATE_DIR", "/var/lib/watcher-agent"),
        ("AGENT_ROTATE_WAIT", "10s"),
        ("AGENT_IGNORE_OLDER", "1h"),
        ("AGENT_MAX_OPEN_FILES", "16"),
        ("AGENT_MAX_SERIES", "20"),
    ])
    .expect("valid");
    assert_eq!(config.state_dir.as_deref(), Some(std::path::Path::new("/var/lib/watcher-agent")));
    assert_eq!(config.rotate_wait, Duration::from_secs(10));
    assert_eq!(config.ignore_older, Some(Duration::from_secs(3600)));
    assert_eq!((config.max_open_files, config.max_series), (16, 20));
    let said = problem(&[("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_ERROR", "ERROR"), ("AGENT_STATE_DIR", "state")]);
    assert_eq!(said, "AGENT_STATE_DIR: \"state\" is not an absolute path");
}

/// docs/agent.md's table of variables is the one the agent reads its variables through.
#[test]
fn the_docs_table_is_the_variables_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agent.md");
    let docs = std::fs::read_to_string(path).expect("docs/agent.md");
    let table = markdown();
    assert!(
        docs.contains(&table),
        "docs/agent.md: its table of variables is not agent/src/config/variables.rs's; it is:\n{table}"
    );
}

/// Every default is a valid value of its variable: the configuration with none set is valid and
/// has them.
#[test]
fn every_default_is_read_as_a_value_would_be() {
    let config = config(&[("AGENT_FILES", "/var/log/*.log"), ("AGENT_RULE_ERROR", "ERROR")]).expect("valid");
    assert_eq!(config.stream_idle, Duration::from_secs(120));
    assert_eq!(config.rotate_wait, Duration::from_secs(5));
    assert_eq!(config.ignore_older, None);
    assert_eq!(config.max_open_files, 128);
    assert_eq!(config.max_series, 100);
    assert_eq!(config.shutdown_linger, Duration::from_secs(5));
    let off = self::config(&[("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_ERROR", "E"), ("AGENT_IGNORE_OLDER", "30m")]);
    assert_eq!(off.expect("valid").ignore_older, Some(Duration::from_secs(1800)));
    for variable in VARIABLES {
        let meaning = variable.meaning();
        assert!(!meaning.contains('\n') && !meaning.contains(" |"), "{}: one table cell", variable.name);
    }
}

/// Values, fields and events: what each rule makes of its matches, read from its variables.
#[test]
fn values_fields_and_events_are_read() {
    let config = config(&[
        ("AGENT_FILES", "/var/log/app/*.log"),
        ("AGENT_FORMAT", "auto"),
        ("AGENT_RULE_LATENCY", r"latency=(?P<ms>\d+)ms route=(?P<route>\S+)"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_UNIT_LATENCY", "ms"),
        ("AGENT_MATCH_ERRORS", r"level=^error$, http.status=^5\d{1,2}$"),
        ("AGENT_LABELS_ERRORS", "route,code:http.status"),
        ("AGENT_MATCH_BYTES", "level=."),
        ("AGENT_VALUE_BYTES", "http.size"),
        ("AGENT_METRIC_BYTES", "sum"),
        ("AGENT_UNIT_BYTES", "bytes"),
        ("AGENT_BUCKETS_LATENCY", "0.1, 0.5,1"),
        ("AGENT_MULTILINE_START", "java"),
        ("AGENT_MULTILINE_MAX_BYTES", "1MiB"),
        ("AGENT_SERIES_IDLE", "10m"),
    ])
    .expect("valid");
    let latency = config.rules.iter().find(|r| r.name == "latency").expect("latency");
    assert_eq!(latency.value, Some(ValueFrom::Group("ms".into())));
    assert_eq!(latency.labels, ["route"], "the value's group is no label");
    assert_eq!(latency.buckets, [0.1, 0.5, 1.0]);
    assert_eq!(latency.metric_name().as_deref(), Some("watcher_agent_latency_seconds"));
    let errors = config.rules.iter().find(|r| r.name == "errors").expect("errors");
    assert_eq!(errors.pattern, None);
    assert_eq!(
        errors.fields,
        [
            FieldMatch { path: "level".into(), pattern: Pattern::new("^error$").expect("a pattern") },
            FieldMatch { path: "http.status".into(), pattern: Pattern::new(r"^5\d{1,2}$").expect("a pattern") }
        ],
        "a comma in a regular expression stays in it"
    );
    assert_eq!(
        (errors.labels.clone(), errors.field_labels.clone()),
        (vec!["route".into(), "code".into()], vec!["route".into(), "http.status".into()])
    );
    let bytes = config.rules.iter().find(|r| r.name == "bytes").expect("bytes");
    assert_eq!((bytes.value.clone(), bytes.metric), (Some(ValueFrom::Field("http.size".into())), MetricKind::Sum));
    assert_eq!(bytes.metric_name().as_deref(), Some("watcher_agent_bytes_bytes"));
    assert_eq!((config.format, config.stdout_format), (Format::Auto, Format::Auto));
    let multiline = config.multiline.as_ref().expect("multiline");
    assert_eq!(
        (multiline.start.as_str(), multiline.wait, multiline.max_lines, multiline.max_bytes),
        ("java", Duration::from_secs(1), 500, 1 << 20)
    );
    assert_eq!(config.series_idle, Some(Duration::from_secs(600)));
    let described = config.describe();
    assert!(
        described.contains("histogram of group ms as watcher_agent_latency_seconds (buckets 0.1,0.5,1)"),
        "{described}"
    );
    assert!(described.contains("joins lines into events: started by java"), "{described}");
    // Defaults: a histogram's buckets are Prometheus'.
    let default = self::config(&[
        ("AGENT_FILES", "/x/*.log"),
        ("AGENT_RULE_LATENCY", r"latency=(?P<ms>\d+)"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
    ])
    .expect("valid");
    assert_eq!(default.rules[0].buckets, DEFAULT_BUCKETS);
    assert_eq!(default.rules[0].metric_name().as_deref(), Some("watcher_agent_latency"));
    assert_eq!(default.multiline, None);
}

/// Said before any pod: each mistake names its variable, in the words the agent refuses to start
/// with (and `check-inject` shows).
#[test]
fn values_fields_and_events_problems_name_their_variable() {
    let files = ("AGENT_FILES", "/x/*.log");
    let latency = ("AGENT_RULE_LATENCY", r"latency=(?P<ms>\d+)ms");
    let histogram = ("AGENT_METRIC_LATENCY", "histogram");
    let value = ("AGENT_VALUE_LATENCY", "ms");
    let json = ("AGENT_FORMAT", "json");
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            vec![files, latency, histogram, ("AGENT_VALUE_LATENCY", "millis")],
            "AGENT_VALUE_LATENCY: \"millis\" is not a named group of AGENT_RULE_LATENCY (its groups are ms)",
        ),
        (vec![files, latency, histogram], "AGENT_METRIC_LATENCY: histogram needs a value: set AGENT_VALUE_LATENCY"),
        (vec![files, latency, value], "AGENT_VALUE_LATENCY: rule latency counts its matches: set AGENT_METRIC_LATENCY"),
        (
            vec![files, latency, value, ("AGENT_METRIC_LATENCY", "summary")],
            "AGENT_METRIC_LATENCY: \"summary\": `count`, `sum`, `gauge`, `histogram` or `cumulative`",
        ),
        (
            vec![files, latency, ("AGENT_METRIC_LATENCY", "cumulative")],
            "AGENT_METRIC_LATENCY: cumulative needs a value: set AGENT_VALUE_LATENCY",
        ),
        (
            vec![files, latency, value, histogram, ("AGENT_BUCKETS_LATENCY", "1,0.5")],
            "AGENT_BUCKETS_LATENCY: \"1,0.5\": the buckets must be strictly increasing",
        ),
        (vec![files, latency, value, histogram, ("AGENT_BUCKETS_LATENCY", "0.1,0.1")], "strictly increasing"),
        (
            vec![files, latency, value, histogram, ("AGENT_BUCKETS_LATENCY", "0.1,inf")],
            "AGENT_BUCKETS_LATENCY: \"inf\" is not a number",
        ),
        (
            vec![files, latency, value, ("AGENT_METRIC_LATENCY", "sum"), ("AGENT_BUCKETS_LATENCY", "1")],
            "AGENT_BUCKETS_LATENCY: rule latency makes a sum, not a histogram",
        ),
        (
            vec![files, latency, value, histogram, ("AGENT_UNIT_LATENCY", "days")],
            "AGENT_UNIT_LATENCY: \"days\": `ns`, `us`, `ms`, `s` or `bytes`",
        ),
        (vec![files, latency, ("AGENT_UNIT_LATENCY", "ms")], "AGENT_UNIT_LATENCY: rule latency has no value"),
        (vec![files, ("AGENT_FORMAT", "yaml"), latency], "AGENT_FORMAT: \"yaml\": `text`, `json`, `logfmt` or `auto`"),
        (
            vec![files, latency, ("AGENT_MATCH_ERRORS", "level=error")],
            "AGENT_MATCH_ERRORS: fields need a structured format",
        ),
        (vec![files, json, ("AGENT_MATCH_ERRORS", "level")], "AGENT_MATCH_ERRORS: \"level\": field=regex"),
        (vec![files, json, ("AGENT_MATCH_ERRORS", "level=(")], "AGENT_MATCH_ERRORS: not a regular expression"),
        (vec![files, json, ("AGENT_MATCH_ERRORS", "le..vel=x")], "AGENT_MATCH_ERRORS: \"le..vel\" is not a field"),
        (
            vec![files, json, latency, ("AGENT_LABELS_LATENCY", "rule")],
            "AGENT_LABELS_LATENCY: \"rule\" is not a label name",
        ),
        (
            vec![files, json, latency, ("AGENT_LABELS_LATENCY", "x:a,x:b")],
            "AGENT_LABELS_LATENCY: the label \"x\" twice",
        ),
        (
            vec![files, json, latency, ("AGENT_LABELS_WARN", "route")],
            "AGENT_LABELS_WARN: no rule warn: set AGENT_RULE_WARN or AGENT_MATCH_WARN too",
        ),
        (
            vec![files, latency, ("AGENT_MULTILINE_START", "(")],
            "AGENT_MULTILINE_START: neither a preset (java, python, go) nor a regular expression",
        ),
        (
            vec![files, latency, ("AGENT_MULTILINE_START", "javascript")],
            "AGENT_MULTILINE_START: \"javascript\" is no preset (java, python, go); a regular expression that means the word says so: ^javascript",
        ),
        (vec![files, latency, ("AGENT_MULTILINE_START", "Java")], "AGENT_MULTILINE_START: \"Java\" is no preset"),
        (vec![files, latency, ("AGENT_MULTILINE_START", "java8")], "AGENT_MULTILINE_START: \"java8\" is no preset"),
        (vec![files, latency, ("AGENT_MULTILINE_WAIT", "2s")], "AGENT_MULTILINE_WAIT: set AGENT_MULTILINE_START too"),
        (
            vec![files, latency, ("AGENT_MULTILINE_START", "java"), ("AGENT_MULTILINE_MAX_BYTES", "10")],
            "AGENT_MULTILINE_MAX_BYTES: \"10\": a size from 256B to 16MiB",
        ),
        (
            vec![files, latency, ("AGENT_MULTILINE_START", "java"), ("AGENT_MULTILINE_MAX_LINES", "1")],
            "AGENT_MULTILINE_MAX_LINES: \"1\": a number from 2 to 100000",
        ),
        (
            vec![files, ("AGENT_RULE_LINES", r"(?P<n>\d+)"), ("AGENT_VALUE_LINES", "n"), ("AGENT_METRIC_LINES", "sum")],
            "AGENT_METRIC_LINES: its metric watcher_agent_lines is one the agent exports already",
        ),
        (
            vec![
                files,
                ("AGENT_RULE_A_SECONDS", r"(?P<n>\d+)"),
                ("AGENT_VALUE_A_SECONDS", "n"),
                ("AGENT_METRIC_A_SECONDS", "sum"),
                ("AGENT_RULE_A", r"(?P<n>\d+)"),
                ("AGENT_VALUE_A", "n"),
                ("AGENT_METRIC_A", "sum"),
                ("AGENT_UNIT_A", "s"),
            ],
            "its metric watcher_agent_a_seconds is rule",
        ),
        (vec![files, latency, ("AGENT_SERIES_IDLE", "forever")], "AGENT_SERIES_IDLE: \"forever\" is not a duration"),
        (
            vec![files, latency, ("AGENT_VALUES_LATENCY", "ms")],
            "AGENT_VALUES_LATENCY: unknown variable (did you mean AGENT_VALUE_LATENCY?)",
        ),
    ];
    for (vars, wanted) in cases {
        let said = problem(&vars);
        assert!(said.contains(wanted), "{vars:?}: {said}");
    }
}

/// `AGENT_ALERTMANAGER_URL` as `http::Uri` reads it: a host, a port (80 by default), a prefix;
/// another scheme, a user, a query, a bad port or no host refused.
#[test]
fn alertmanager_urls() {
    let read = |url: &str| AlertmanagerUrl::parse(url).map(|u| (u.host, u.port, u.path));
    let owned = |host: &str, port, path: &str| Some((host.to_owned(), port, path.to_owned()));
    assert_eq!(read("http://am.monitoring:9093"), owned("am.monitoring", 9093, "/api/v2/alerts"));
    assert_eq!(read("http://am"), owned("am", 80, "/api/v2/alerts"));
    assert_eq!(read("http://10.0.0.7:9093/"), owned("10.0.0.7", 9093, "/api/v2/alerts"));
    assert_eq!(read("http://am:9093/alertmanager/"), owned("am", 9093, "/alertmanager/api/v2/alerts"));
    assert_eq!(read("http://[fd00::7]:9093"), owned("[fd00::7]", 9093, "/api/v2/alerts"));
    for bad in [
        "am:9093",
        "https://am:9093",
        "http://",
        "http://user@am:9093",
        "http://am:port",
        "http://am:99999",
        "http://am:",
        "http://am:9093/?x=1",
        "http://a m:9093",
        "",
    ] {
        assert_eq!(read(bad), None, "{bad:?}");
    }
    let url = AlertmanagerUrl::parse("http://am:9093/alertmanager").expect("an address");
    assert_eq!(url.to_string(), "http://am:9093/alertmanager", "said as it was given");
}

/// `AGENT_REMOTE_WRITE_URL` as `http::Uri` reads it: `http` or `https`, a host, a port (80 or
/// 443 by default), the path and query as given; a user, a fragment or another scheme refused.
#[test]
fn remote_write_urls() {
    let read = |url: &str| ReceiverUrl::parse(url).map(|u| (u.tls, u.host, u.port, u.path));
    let owned = |tls, host: &str, port, path: &str| Some((tls, host.to_owned(), port, path.to_owned()));
    assert_eq!(read("http://prometheus:9090/api/v1/write"), owned(false, "prometheus", 9090, "/api/v1/write"));
    assert_eq!(read("https://mimir.example/api/v1/push"), owned(true, "mimir.example", 443, "/api/v1/push"));
    assert_eq!(read("http://10.0.0.7"), owned(false, "10.0.0.7", 80, "/"));
    assert_eq!(read("https://[fd00::7]:8443/push?tenant=a"), owned(true, "[fd00::7]", 8443, "/push?tenant=a"));
    for bad in ["prometheus:9090", "ftp://p/x", "http://", "http://u:p@p/x", "http://p:port/x", "http://p/x#f", ""] {
        assert_eq!(read(bad), None, "{bad:?}");
    }
    let url = ReceiverUrl::parse("https://[fd00::7]/push").expect("a URL");
    assert_eq!(url.server_name(), "fd00::7");
}

/// The other `AGENT_REMOTE_WRITE_*` variables need the URL; a CA file needs `https://`; a tenant
/// must be a header's value; defaults where unset.
#[test]
fn remote_write_variables() {
    let base = [("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_ERROR", "ERROR")];
    let with = |more: &[(&'static str, &'static str)]| [&base[..], more].concat();
    assert_eq!(
        problem(&with(&[("AGENT_REMOTE_WRITE_INTERVAL", "5s")])),
        "AGENT_REMOTE_WRITE_INTERVAL: has no effect without AGENT_REMOTE_WRITE_URL"
    );
    let said = problem(&with(&[("AGENT_REMOTE_WRITE_URL", "prometheus:9090")]));
    assert!(said.starts_with("AGENT_REMOTE_WRITE_URL: \"prometheus:9090\": an http:// or https:// URL"), "{said}");
    let said = problem(&with(&[("AGENT_REMOTE_WRITE_URL", "http://p/w"), ("AGENT_REMOTE_WRITE_CA_FILE", "/ca.pem")]));
    assert_eq!(said, "AGENT_REMOTE_WRITE_CA_FILE: http://p:80/w is not https://: no certificate to check");
    let said = problem(&with(&[("AGENT_REMOTE_WRITE_URL", "http://p/w"), ("AGENT_REMOTE_WRITE_TENANT", "a\u{7}b")]));
    assert!(said.starts_with("AGENT_REMOTE_WRITE_TENANT:"), "{said}");
    let said = problem(&with(&[("AGENT_REMOTE_WRITE_URL", "http://p/w"), ("AGENT_REMOTE_WRITE_INTERVAL", "0s")]));
    assert!(said.starts_with("AGENT_REMOTE_WRITE_INTERVAL:"), "{said}");
    let config = Config::from_vars(with(&[("AGENT_REMOTE_WRITE_URL", "https://mimir/api/v1/push")])).expect("valid");
    let remote = config.remote_write.expect("remote write");
    assert_eq!(remote.interval, Duration::from_secs(15));
    assert_eq!((remote.max_samples, remote.max_bytes), (100_000, 4 << 20));
    assert_eq!((remote.bearer_token_file, remote.ca_file, remote.tenant), (None, None, None));
    assert!(Config::from_vars(base).expect("valid").remote_write.is_none());
}

/// `AGENT_EXEMPLAR_<NAME>` names a group (then no label) or a field; a gauge has none.
#[test]
fn exemplar_variables() {
    let base = [("AGENT_FILES", "/x/*.log"), ("AGENT_RULE_HTTP", r"status=(?P<code>\d+) trace=(?P<trace>\w+)")];
    let with = |more: &[(&'static str, &'static str)]| [&base[..], more].concat();
    let config = Config::from_vars(with(&[("AGENT_EXEMPLAR_HTTP", "trace")])).expect("valid");
    assert_eq!(config.rules[0].exemplar, Some(ValueFrom::Group("trace".into())));
    assert_eq!(config.rules[0].labels, ["code"]);
    let said = problem(&with(&[("AGENT_EXEMPLAR_HTTP", "span")]));
    assert!(said.starts_with("AGENT_EXEMPLAR_HTTP: \"span\" is not a named group of AGENT_RULE_HTTP"), "{said}");
    let said = problem(&with(&[
        ("AGENT_EXEMPLAR_HTTP", "trace"),
        ("AGENT_VALUE_HTTP", "code"),
        ("AGENT_METRIC_HTTP", "gauge"),
    ]));
    assert_eq!(said, "AGENT_EXEMPLAR_HTTP: rule http makes a gauge: exemplars are a counter's or a histogram's");
    let said = problem(&with(&[("AGENT_EXEMPLAR_NONE", "trace")]));
    assert!(said.starts_with("AGENT_EXEMPLAR_NONE: no rule none"), "{said}");
}

/// `watcher-agent check` says where every series is pushed, and each rule's native histogram and
/// exemplars.
#[test]
fn check_describes_remote_write_native_histograms_and_exemplars() {
    let config = Config::from_vars([
        ("AGENT_FILES", "/x/*.log"),
        ("AGENT_RULE_LATENCY", r"took=(?P<ms>\d+)ms trace=(?P<trace>\w+)"),
        ("AGENT_VALUE_LATENCY", "ms"),
        ("AGENT_METRIC_LATENCY", "histogram"),
        ("AGENT_NATIVE_LATENCY", "1.1"),
        ("AGENT_EXEMPLAR_LATENCY", "trace"),
        ("AGENT_REMOTE_WRITE_URL", "https://mimir/api/v1/push"),
        ("AGENT_REMOTE_WRITE_TENANT", "team-a"),
    ])
    .expect("valid");
    let described = config.describe();
    for said in [
        "remote write: every series to https://mimir:443/api/v1/push every 15s",
        "; a tenant",
        "also a native histogram (schema 3)",
        "; exemplars: trace_id from group trace",
    ] {
        assert!(described.contains(said), "{said} in {described}");
    }
    assert!(!described.contains("bearer token"), "{described}");
}
