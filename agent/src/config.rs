//! The agent's configuration, read from its environment only: a Watcher's `configData` reaches
//! the sidecar as variables (its ConfigMap through `envFrom`), the pod's identity through the
//! downward API. Every problem names its variable; nothing is guessed.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use watcher_base::format_duration;

mod rule;
mod variables;

pub use rule::{DEFAULT_BUCKETS, FieldMatch, MAX_BUCKETS, MAX_FIELDS, MetricKind, OWN_FAMILIES, RuleConfig, ValueFrom};
use variables::{
    ALERTMANAGER_URL, ENDED_FILE, EVENTS, FILES, FORMAT, IGNORE_OLDER, LISTEN, LOGS_CONTAINER, MAX_LINE_BYTES,
    MAX_OPEN_FILES, MAX_SERIES, MULTILINE_MAX_BYTES, MULTILINE_MAX_LINES, MULTILINE_START, MULTILINE_WAIT, POLL,
    ROTATE_WAIT, SERIES_IDLE, SHUTDOWN_LINGER, START, STATE_DIR, STDOUT_FORMAT, STREAM_IDLE, TERMINATION_LOG, Values,
};
pub use variables::{Kind, VARIABLES, Variable, markdown};

use crate::parse::fields::Format;
use crate::tail::multiline::{Multiline, Start as EventStart};

/// Prefix of every variable the agent reads (besides the downward API's `POD_*`).
pub const PREFIX: &str = "AGENT_";
/// `AGENT_RULE_<NAME>=<regular expression>`: one rule.
pub const RULE_PREFIX: &str = "AGENT_RULE_";
/// `AGENT_ALERT_<NAME>=<count>/<window>`: the threshold of rule `<NAME>`.
pub const ALERT_PREFIX: &str = "AGENT_ALERT_";
/// `AGENT_MATCH_<NAME>=field=regex,...`: rule `<NAME>`'s field conditions.
pub const MATCH_PREFIX: &str = "AGENT_MATCH_";
/// `AGENT_VALUE_<NAME>=group|field`: what rule `<NAME>` measures.
pub const VALUE_PREFIX: &str = "AGENT_VALUE_";
/// `AGENT_METRIC_<NAME>=count|sum|gauge|histogram`.
pub const METRIC_PREFIX: &str = "AGENT_METRIC_";
/// `AGENT_BUCKETS_<NAME>=0.1,0.5,1`.
pub const BUCKETS_PREFIX: &str = "AGENT_BUCKETS_";
/// `AGENT_UNIT_<NAME>=ns|us|ms|s|bytes`.
pub const UNIT_PREFIX: &str = "AGENT_UNIT_";
/// `AGENT_LABELS_<NAME>=field,label:field`.
pub const LABELS_PREFIX: &str = "AGENT_LABELS_";
/// Every family of variables, one per rule.
pub const RULE_FAMILIES: [&str; 8] =
    [RULE_PREFIX, MATCH_PREFIX, ALERT_PREFIX, VALUE_PREFIX, METRIC_PREFIX, BUCKETS_PREFIX, UNIT_PREFIX, LABELS_PREFIX];

/// At most this many rules (one pass over each line matches them all).
pub const MAX_RULES: usize = 64;
/// At most this many file globs.
pub const MAX_FILES: usize = 32;

/// Where to start reading the files present when the agent starts (files that appear later
/// are always read from their beginning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Only what is written from now on.
    End,
    /// Everything already in them.
    Beginning,
}

/// An alert threshold: `count` matches within `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Threshold {
    /// Matches needed, at least 1.
    pub count: u32,
    /// Within this long.
    pub window: Duration,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.count, format_duration(self.window))
    }
}

/// The pod the agent runs in, from the downward API.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodIdentity {
    /// `POD_NAME`.
    pub name: Option<String>,
    /// `POD_NAMESPACE`.
    pub namespace: Option<String>,
    /// `POD_UID`.
    pub uid: Option<String>,
}

/// How lines are joined into events (`AGENT_MULTILINE_*`), as configured: the start compiled
/// once, when read.
#[derive(Clone, Debug)]
pub struct MultilineConfig {
    /// A regular expression, or a preset (`java`, `python`, `go`), as written.
    pub start: String,
    /// An event ends this long after its last line.
    pub wait: Duration,
    /// An event ends at this many lines.
    pub max_lines: usize,
    /// An event's text is kept up to this many bytes.
    pub max_bytes: usize,
    /// `start`, compiled.
    compiled: EventStart,
}

/// Two settings are the same where they are written the same (the compiled start follows).
impl PartialEq for MultilineConfig {
    fn eq(&self, other: &Self) -> bool {
        (&self.start, self.wait, self.max_lines, self.max_bytes)
            == (&other.start, other.wait, other.max_lines, other.max_bytes)
    }
}

impl Eq for MultilineConfig {}

impl MultilineConfig {
    /// The joiners' settings.
    pub fn build(&self) -> std::sync::Arc<Multiline> {
        std::sync::Arc::new(Multiline {
            start: self.compiled.clone(),
            wait: self.wait,
            max_lines: self.max_lines as u64,
            max_bytes: self.max_bytes,
        })
    }
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// File globs, in order.
    pub files: Vec<String>,
    /// The container whose log stream to follow.
    pub logs_container: Option<String>,
    /// The rules, by name.
    pub rules: Vec<RuleConfig>,
    /// Where to start in files present at start.
    pub start: Start,
    /// Where checkpoints are kept across restarts.
    pub state_dir: Option<std::path::PathBuf>,
    /// A log stream silent this long is asked again.
    pub stream_idle: Duration,
    /// How long a file rotated away is read after its last growth.
    pub rotate_wait: Duration,
    /// Files unchanged for this long are closed.
    pub ignore_older: Option<Duration>,
    /// Files open at once at most.
    pub max_open_files: usize,
    /// Distinct label values of a rule's named groups at most.
    pub max_series: usize,
    /// A rule's label set unseen this long is dropped.
    pub series_idle: Option<Duration>,
    /// How file lines are read.
    pub format: Format,
    /// How the log stream's lines are read.
    pub stdout_format: Format,
    /// How lines are joined into events.
    pub multiline: Option<MultilineConfig>,
    /// Address of the HTTP endpoints.
    pub listen: SocketAddr,
    /// Whether alerts become Events on the pod.
    pub events: bool,
    /// Alertmanager's base URL (`http://host:port`), to post alerts to.
    pub alertmanager: Option<AlertmanagerUrl>,
    /// How often files are polled.
    pub poll: Duration,
    /// Bytes of a line kept for matching.
    pub max_line_bytes: usize,
    /// How long to wait for a last scrape after SIGTERM.
    pub shutdown_linger: Duration,
    /// In a pod that is meant to end: the file that says the app has ended.
    pub ended_file: Option<std::path::PathBuf>,
    /// Where the last counts go when the agent ends in a pod that is meant to end.
    pub termination_log: std::path::PathBuf,
    /// The pod.
    pub pod: PodIdentity,
}

/// An Alertmanager's address, as `AGENT_ALERTMANAGER_URL` gives it (`http://host[:port][/prefix]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertmanagerUrl {
    /// Host name or address.
    pub host: String,
    /// Port (80 by default).
    pub port: u16,
    /// The path alerts are posted to (`/api/v2/alerts`, after the prefix).
    pub path: String,
}

impl AlertmanagerUrl {
    /// The address `url` gives; `None` for another form.
    pub fn parse(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("http://")?;
        let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, port.parse().ok()?),
            None => (authority, 80),
        };
        if host.is_empty() || host.contains(['@', ' ']) {
            return None;
        }
        let prefix = prefix.trim_end_matches('/');
        let path = if prefix.is_empty() { "/api/v2/alerts".to_owned() } else { format!("/{prefix}/api/v2/alerts") };
        Some(Self { host: host.to_owned(), port, path })
    }
}

impl fmt::Display for AlertmanagerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path.trim_end_matches("/api/v2/alerts"))
    }
}

/// The absolute path variable `name` gives, if set.
fn absolute_path(values: &Values, name: &str) -> Result<Option<std::path::PathBuf>, ConfigError> {
    match values.get(name).map(std::path::PathBuf::from) {
        Some(path) if !path.is_absolute() => {
            Err(error(name, format!("{:?} is not an absolute path", path.display().to_string())))
        }
        path => Ok(path),
    }
}

/// A configuration problem: the variable, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {problem}")]
pub struct ConfigError {
    /// The variable at fault.
    pub variable: String,
    /// What is wrong, and what would be right.
    pub problem: String,
}

fn error(variable: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError { variable: variable.to_owned(), problem: problem.into() }
}

impl Config {
    /// The configuration the variables `vars` give (the process's environment in production).
    /// A variable whose value is not UTF-8 is an error if it is one the agent reads; every value
    /// is trimmed (a YAML block scalar ends in a newline); an `AGENT_` variable the agent does
    /// not know is an error naming the closest one it knows, except the kubelet's Service
    /// variables (a Service named `agent-rule-x` gives every container `AGENT_RULE_X_PORT=...`).
    pub fn from_vars<I, K, V>(vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<std::ffi::OsString>,
        V: Into<std::ffi::OsString>,
    {
        let values = Values::from_vars(vars)?;
        let (files, logs_container) = sources(&values)?;
        let format = read_format(&values, &FORMAT, None)?;
        let stdout_format = read_format(&values, &STDOUT_FORMAT, Some(format))?;
        let structured = [(format, !files.is_empty()), (stdout_format, logs_container.is_some())]
            .iter()
            .any(|(f, used)| *used && *f != Format::Text);
        let rules = rule::rules(&values, structured)?;
        let multiline = multiline(&values)?;
        let series_idle = values.duration(&SERIES_IDLE)?;
        let get = |name: &str| values.get(name);
        let start = match values.word(&START)? {
            "beginning" => Start::Beginning,
            _ => Start::End,
        };
        let state_dir = get(STATE_DIR.name).map(std::path::PathBuf::from);
        if let Some(dir) = &state_dir
            && !dir.is_absolute()
        {
            return Err(error(STATE_DIR.name, format!("{:?} is not an absolute path", dir.display().to_string())));
        }
        let stream_idle = values.required_duration(&STREAM_IDLE)?;
        let rotate_wait = values.required_duration(&ROTATE_WAIT)?;
        let ignore_older = values.duration(&IGNORE_OLDER)?;
        let max_open_files = values.count(&MAX_OPEN_FILES)?;
        let max_series = values.count(&MAX_SERIES)?;
        let listen = get(LISTEN.name).unwrap_or(LISTEN.default);
        let listen = listen
            .parse()
            .map_err(|_| error(LISTEN.name, format!("{listen:?} is not an address such as 0.0.0.0:9102")))?;
        let events = values.bool(&EVENTS)?;
        let alertmanager = match get(ALERTMANAGER_URL.name) {
            None => None,
            Some(url) => Some(AlertmanagerUrl::parse(url).ok_or_else(|| {
                error(
                    ALERTMANAGER_URL.name,
                    format!("{url:?}: an http:// URL such as http://alertmanager.monitoring:9093"),
                )
            })?),
        };
        let poll = values.required_duration(&POLL)?;
        let shutdown_linger = values.required_duration(&SHUTDOWN_LINGER)?;
        let max_line_bytes = values.count(&MAX_LINE_BYTES)?;
        let ended_file = absolute_path(&values, ENDED_FILE.name)?;
        let termination_log = absolute_path(&values, TERMINATION_LOG.name)?
            .unwrap_or_else(|| std::path::PathBuf::from(TERMINATION_LOG.default));
        let pod = PodIdentity {
            name: get("POD_NAME").map(str::to_owned),
            namespace: get("POD_NAMESPACE").map(str::to_owned),
            uid: get("POD_UID").map(str::to_owned),
        };
        if logs_container.is_some() && (pod.name.is_none() || pod.namespace.is_none()) {
            return Err(error(
                "POD_NAME",
                "AGENT_LOGS_CONTAINER needs the pod's name and namespace: set POD_NAME and POD_NAMESPACE from the \
                 downward API (fieldRef metadata.name, metadata.namespace)",
            ));
        }
        Ok(Self {
            files,
            logs_container,
            rules,
            start,
            state_dir,
            stream_idle,
            rotate_wait,
            ignore_older,
            max_open_files,
            max_series,
            series_idle,
            format,
            stdout_format,
            multiline,
            listen,
            events,
            alertmanager,
            poll,
            max_line_bytes,
            shutdown_linger,
            ended_file,
            termination_log,
            pod,
        })
    }

    /// The configuration as `watcher-agent check` prints it.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(&text);
            out.push('\n');
        };
        line("configuration: valid".to_owned());
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
        for rule in &self.rules {
            line(describe_rule(rule, self.max_series));
        }
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
        line(format!(
            "polls files every {}; lines matched on their first {} bytes",
            format_duration(self.poll),
            self.max_line_bytes
        ));
        line(match &self.ended_file {
            Some(file) => format!(
                "ends: by itself once {} is not empty (a pod that is meant to end), its last counts in {}",
                file.display(),
                self.termination_log.display()
            ),
            None => {
                format!("ends: on SIGTERM, after a last scrape (at most {})", format_duration(self.shutdown_linger))
            }
        });
        out
    }
}

/// `rule error: \bERROR\b; alerts at 5 in 1m`, with what else the rule does.
fn describe_rule(rule: &RuleConfig, max_series: usize) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(pattern) = &rule.pattern {
        parts.push(pattern.clone());
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
    }
    text
}

/// `AGENT_FORMAT`, or `AGENT_STDOUT_FORMAT` (`default`: `AGENT_FORMAT`'s where unset).
fn read_format(values: &Values, variable: &Variable, default: Option<Format>) -> Result<Format, ConfigError> {
    match (values.get(variable.name), default) {
        (None, Some(default)) => Ok(default),
        (value, _) => {
            let value = value.unwrap_or("text");
            Format::parse(value)
                .ok_or_else(|| error(variable.name, format!("{value:?}: `text`, `json`, `logfmt` or `auto`")))
        }
    }
}

/// `AGENT_MULTILINE_*`, where `AGENT_MULTILINE_START` is set.
fn multiline(values: &Values) -> Result<Option<MultilineConfig>, ConfigError> {
    let Some(start) = values.get(MULTILINE_START.name) else {
        for variable in [&MULTILINE_WAIT, &MULTILINE_MAX_LINES, &MULTILINE_MAX_BYTES] {
            if values.get(variable.name).is_some() {
                return Err(error(
                    variable.name,
                    "set AGENT_MULTILINE_START too (a regular expression, or java, python, go)",
                ));
            }
        }
        return Ok(None);
    };
    // A bare word is a preset or a mistake (`javascript`, `Java`, `java8`): as a regular
    // expression it would match almost nothing, silently.
    let bare_word = start.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if bare_word && !EventStart::PRESETS.contains(&start) {
        return Err(error(
            MULTILINE_START.name,
            format!(
                "{start:?} is no preset (java, python, go); a regular expression that means the word says so: ^{start}"
            ),
        ));
    }
    let compiled = EventStart::parse(start).map_err(|problem| {
        error(
            MULTILINE_START.name,
            format!("neither a preset (java, python, go) nor a regular expression: {}", one_line(&problem.to_string())),
        )
    })?;
    Ok(Some(MultilineConfig {
        compiled,
        start: start.to_owned(),
        wait: values.required_duration(&MULTILINE_WAIT)?,
        max_lines: values.count(&MULTILINE_MAX_LINES)?,
        max_bytes: values.bytes(&MULTILINE_MAX_BYTES)?,
    }))
}

/// What to follow: file globs (`AGENT_FILES`) and a container's log stream
/// (`AGENT_LOGS_CONTAINER`), at least one.
fn sources(values: &Values) -> Result<(Vec<String>, Option<String>), ConfigError> {
    let get = |name: &str| values.get(name);
    let files: Vec<String> = get(FILES.name)
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    if files.len() > MAX_FILES {
        return Err(error(FILES.name, format!("{} globs: at most {MAX_FILES}", files.len())));
    }
    for file in &files {
        if !file.starts_with('/') {
            return Err(error(FILES.name, format!("{file:?} is not an absolute path")));
        }
        if let Err(problem) = glob::Pattern::new(file) {
            return Err(error(FILES.name, format!("{file:?} is not a glob: {problem}")));
        }
    }
    let logs_container = get(LOGS_CONTAINER.name).map(str::to_owned);
    if let Some(name) = &logs_container
        && !watcher_base::is_dns1123_label(name)
    {
        return Err(error(LOGS_CONTAINER.name, format!("{name:?} is not a container name")));
    }
    if files.is_empty() && logs_container.is_none() {
        return Err(error(
            FILES.name,
            "nothing to follow: set AGENT_FILES (globs) or AGENT_LOGS_CONTAINER (the app container's name)",
        ));
    }

    Ok((files, logs_container))
}

/// `5/1m`: 5 matches within a minute.
pub fn parse_threshold(value: &str) -> Result<Threshold, String> {
    let (count, window) = value.split_once('/').ok_or_else(|| format!("{value:?}: `<count>/<window>`, e.g. 5/1m"))?;
    let count: u32 = count
        .trim()
        .parse()
        .ok()
        .filter(|c| (1..=100_000).contains(c))
        .ok_or_else(|| format!("{value:?}: the count is a number from 1 to 100000"))?;
    let window = watcher_base::parse_duration(window.trim())
        .map_err(|_| format!("{value:?}: the window is a duration (30s, 5m, 1h)"))?;
    if window < Duration::from_secs(1) || window > Duration::from_secs(24 * 3600) {
        return Err(format!("{value:?}: the window is from 1s to 24h"));
    }
    Ok(Threshold { count, window })
}

/// ` (did you mean AGENT_X?)` for the known variable closest to `key`, or nothing.
fn closest(key: &str) -> String {
    let fixed: Vec<&str> = VARIABLES.iter().filter(|v| v.is_fixed()).map(|v| v.name).collect();
    let mut candidates: Vec<String> = fixed.iter().map(|n| (*n).to_owned()).collect();
    // `AGENT_RULES_ERROR`: the prefix misspelt, the rule's name kept.
    if let Some(rest) = key.strip_prefix(PREFIX)
        && let Some((head, name)) = rest.split_once('_')
    {
        for prefix in RULE_FAMILIES {
            if distance(&format!("{PREFIX}{head}_"), prefix) <= 2 {
                candidates.push(format!("{prefix}{name}"));
            }
        }
    }
    // `AGENT_POLL_INTERVAL`: a known name with more after it.
    let extended = candidates.iter().filter(|c| key.starts_with(&format!("{c}_"))).max_by_key(|c| c.len());
    if let Some(name) = extended {
        return format!(" (did you mean {name}?)");
    }
    let best = candidates.iter().map(|c| (distance(key, c), c)).min();
    match best {
        Some((d, name)) if d <= 4 => format!(" (did you mean {name}?)"),
        _ => format!(" (known: {}, {})", fixed.join(", "), RULE_FAMILIES.map(|p| format!("{p}<NAME>")).join(", ")),
    }
}

/// Levenshtein distance, for names of a few dozen characters.
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            current[j + 1] = (previous[j] + usize::from(x != y)).min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

/// Whether `key=value` is one of the kubelet's Service variables (`<SVC>_SERVICE_HOST`,
/// `<SVC>_SERVICE_PORT[_<NAME>]`, `<SVC>_PORT`, `<SVC>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]`),
/// which a Service named `agent-...` puts in every container of its namespace. The value must
/// look like one too (an address, a port, `tcp://...`), so a rule named `..._PORT` stays a rule.
fn is_service_link(key: &str, value: &str) -> bool {
    let address = |v: &str| v.parse::<std::net::IpAddr>().is_ok();
    let port = |v: &str| v.parse::<u16>().is_ok();
    let url = |v: &str| {
        ["tcp://", "udp://", "sctp://"]
            .iter()
            .any(|p| v.strip_prefix(p).is_some_and(|rest| rest.parse::<SocketAddr>().is_ok()))
    };
    if key.ends_with("_SERVICE_HOST") {
        return address(value);
    }
    if key.contains("_SERVICE_PORT") {
        return port(value);
    }
    if key.ends_with("_PORT") && !key.contains("_PORT_") {
        return url(value);
    }
    // <SVC>_PORT_<n>_<PROTO>[_SUFFIX]
    let Some(at) = key.rfind("_PORT_") else { return false };
    let parts: Vec<&str> = key[at + "_PORT_".len()..].split('_').collect();
    let numbered =
        parts.first().is_some_and(|n| port(n)) && parts.get(1).is_some_and(|p| ["TCP", "UDP", "SCTP"].contains(p));
    numbered
        && match parts.get(2) {
            None => url(value),
            Some(&"PROTO") => ["tcp", "udp", "sctp"].contains(&value),
            Some(&"PORT") => port(value),
            Some(&"ADDR") => address(value),
            Some(_) => false,
        }
}

/// A Prometheus label name: letters, digits and `_`, not starting with a digit nor `__`.
fn is_label_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && !name.starts_with("__")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The regex crate's multi-line error, on one line.
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
