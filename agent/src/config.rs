//! The agent's configuration, read from its environment only: a Watcher's `configData` reaches
//! the sidecar as variables (its ConfigMap through `envFrom`), the pod's identity through the
//! downward API. Every problem names its variable; nothing is guessed.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use watcher_base::format_duration;

mod describe;
pub mod dir;
mod remote_write;
mod rule;
mod unknown;
mod variables;

pub use remote_write::{ReceiverUrl, RemoteWrite};
pub use rule::{
    DEFAULT_BUCKETS, FieldMatch, MAX_BUCKETS, MAX_FIELDS, MetricKind, OWN_FAMILIES, Pattern, RuleConfig, ValueFrom,
    growth, native_schema_for,
};
use variables::{
    ALERTMANAGER_URL, CONFIG_DIR, ENDED_FILE, EVENTS, FILES, FORMAT, IGNORE_OLDER, LISTEN, LOGS_CONTAINER,
    MAX_LINE_BYTES, MAX_OPEN_FILES, MAX_SERIES, MULTILINE_MAX_BYTES, MULTILINE_MAX_LINES, MULTILINE_START,
    MULTILINE_WAIT, POLL, ROTATE_WAIT, SERIES_IDLE, SHUTDOWN_LINGER, START, STATE_DIR, STDOUT_FORMAT, STREAM_IDLE,
    TERMINATION_LOG, Values,
};
pub use variables::{Kind, VARIABLES, Variable, markdown};

use crate::parse::fields::Format;
pub use crate::tail::Start;
pub use crate::tail::glob::Glob;
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
/// `AGENT_NATIVE_<NAME>=<factor>`: rule `<NAME>`'s histogram is also a native one.
pub const NATIVE_PREFIX: &str = "AGENT_NATIVE_";
/// `AGENT_EXEMPLAR_<NAME>=group|field`: the trace id rule `<NAME>`'s samples carry.
pub const EXEMPLAR_PREFIX: &str = "AGENT_EXEMPLAR_";
/// Every family of variables, one per rule.
pub const RULE_FAMILIES: [&str; 10] = [
    RULE_PREFIX,
    MATCH_PREFIX,
    ALERT_PREFIX,
    VALUE_PREFIX,
    METRIC_PREFIX,
    BUCKETS_PREFIX,
    UNIT_PREFIX,
    LABELS_PREFIX,
    NATIVE_PREFIX,
    EXEMPLAR_PREFIX,
];

/// At most this many rules (one pass over each line matches them all).
pub const MAX_RULES: usize = 64;
/// At most this many file globs.
pub const MAX_FILES: usize = 32;

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
    /// File globs, in order, each compiled once.
    pub files: Vec<Glob>,
    /// The container whose log stream to follow.
    pub logs_container: Option<String>,
    /// The rules, by name.
    pub rules: Vec<RuleConfig>,
    /// Where to start in files present at start.
    pub start: Start,
    /// Where checkpoints are kept across restarts.
    pub state_dir: Option<std::path::PathBuf>,
    /// Where the configuration is read again from (the Watcher's ConfigMap, mounted).
    pub config_dir: std::path::PathBuf,
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
    /// Where every series is pushed, by remote write.
    pub remote_write: Option<RemoteWrite>,
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
    /// The address `url` gives (`http://host[:port][/prefix]`, read as `http::Uri` reads
    /// it); `None` for another form: another scheme, no host, a user, a query or a fragment.
    pub fn parse(url: &str) -> Option<Self> {
        let uri: http::Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        if uri.scheme_str() != Some("http") || authority.as_str().contains('@') || uri.query().is_some() {
            return None;
        }
        let host = authority.host();
        if host.is_empty() {
            return None;
        }
        // What follows the host: nothing, or `:` and a port (`http::Uri` lets any text be one).
        let port = match authority.as_str().get(host.len()..)? {
            "" => 80,
            rest => rest.strip_prefix(':')?.parse().ok()?,
        };
        let prefix = uri.path().trim_matches('/');
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

/// `AGENT_LISTEN`.
fn listen(values: &Values) -> Result<SocketAddr, ConfigError> {
    let listen = values.get(LISTEN.name).unwrap_or(LISTEN.default);
    listen.parse().map_err(|_| error(LISTEN.name, format!("{listen:?} is not an address such as 0.0.0.0:9102")))
}

/// `AGENT_ALERTMANAGER_URL`, if set.
fn alertmanager(values: &Values) -> Result<Option<AlertmanagerUrl>, ConfigError> {
    let Some(url) = values.get(ALERTMANAGER_URL.name) else { return Ok(None) };
    AlertmanagerUrl::parse(url).map(Some).ok_or_else(|| {
        error(ALERTMANAGER_URL.name, format!("{url:?}: an http:// URL such as http://alertmanager.monitoring:9093"))
    })
}

/// The pod, from the downward API's `POD_NAME`, `POD_NAMESPACE`, `POD_UID`: the log stream
/// (`logs`) needs its name and namespace.
fn pod_identity(values: &Values, logs: bool) -> Result<PodIdentity, ConfigError> {
    let get = |name: &str| values.get(name).map(str::to_owned);
    let pod = PodIdentity { name: get("POD_NAME"), namespace: get("POD_NAMESPACE"), uid: get("POD_UID") };
    if logs && (pod.name.is_none() || pod.namespace.is_none()) {
        return Err(error(
            "POD_NAME",
            "AGENT_LOGS_CONTAINER needs the pod's name and namespace: set POD_NAME and POD_NAMESPACE from the \
             downward API (fieldRef metadata.name, metadata.namespace)",
        ));
    }
    Ok(pod)
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
        Ok(Self {
            rules: rule::rules(&values, structured)?,
            multiline: multiline(&values)?,
            series_idle: values.duration(&SERIES_IDLE)?,
            start: match values.word(&START)? {
                "beginning" => Start::Beginning,
                _ => Start::End,
            },
            state_dir: absolute_path(&values, STATE_DIR.name)?,
            config_dir: absolute_path(&values, CONFIG_DIR.name)?
                .unwrap_or_else(|| std::path::PathBuf::from(CONFIG_DIR.default)),
            stream_idle: values.required_duration(&STREAM_IDLE)?,
            rotate_wait: values.required_duration(&ROTATE_WAIT)?,
            ignore_older: values.duration(&IGNORE_OLDER)?,
            max_open_files: values.count(&MAX_OPEN_FILES)?,
            max_series: values.count(&MAX_SERIES)?,
            listen: listen(&values)?,
            events: values.bool(&EVENTS)?,
            alertmanager: alertmanager(&values)?,
            remote_write: remote_write::remote_write(&values)?,
            poll: values.required_duration(&POLL)?,
            shutdown_linger: values.required_duration(&SHUTDOWN_LINGER)?,
            max_line_bytes: values.count(&MAX_LINE_BYTES)?,
            ended_file: absolute_path(&values, ENDED_FILE.name)?,
            termination_log: absolute_path(&values, TERMINATION_LOG.name)?
                .unwrap_or_else(|| std::path::PathBuf::from(TERMINATION_LOG.default)),
            pod: pod_identity(&values, logs_container.is_some())?,
            files,
            logs_container,
            format,
            stdout_format,
        })
    }
}

impl Config {
    /// The variables whose change `other` makes that a running agent takes only when it next
    /// starts: its sources, endpoints and sinks (a reload takes the rules, their alerts and the
    /// formats).
    pub fn restart_only_changes(&self, other: &Self) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut differs = |name: &'static str, differ: bool| {
            if differ {
                changed.push(name);
            }
        };
        differs(FILES.name, self.files != other.files);
        differs(LOGS_CONTAINER.name, self.logs_container != other.logs_container);
        differs("AGENT_MULTILINE_*", self.multiline != other.multiline);
        differs(STATE_DIR.name, self.state_dir != other.state_dir);
        differs(CONFIG_DIR.name, self.config_dir != other.config_dir);
        differs(START.name, self.start != other.start);
        differs(ROTATE_WAIT.name, self.rotate_wait != other.rotate_wait);
        differs(IGNORE_OLDER.name, self.ignore_older != other.ignore_older);
        differs(MAX_OPEN_FILES.name, self.max_open_files != other.max_open_files);
        differs(MAX_SERIES.name, self.max_series != other.max_series);
        differs(SERIES_IDLE.name, self.series_idle != other.series_idle);
        differs(STREAM_IDLE.name, self.stream_idle != other.stream_idle);
        differs(LISTEN.name, self.listen != other.listen);
        differs(EVENTS.name, self.events != other.events);
        differs(ALERTMANAGER_URL.name, self.alertmanager != other.alertmanager);
        differs("AGENT_REMOTE_WRITE_*", self.remote_write != other.remote_write);
        differs(POLL.name, self.poll != other.poll);
        differs(MAX_LINE_BYTES.name, self.max_line_bytes != other.max_line_bytes);
        differs(SHUTDOWN_LINGER.name, self.shutdown_linger != other.shutdown_linger);
        differs(TERMINATION_LOG.name, self.termination_log != other.termination_log);
        differs(ENDED_FILE.name, self.ended_file != other.ended_file);
        differs("POD_*", self.pod != other.pod);
        changed
    }

    /// This configuration with what a reload takes from `new`: its rules (their alerts with
    /// them) and formats; the rest as it runs.
    pub fn reloaded(&self, new: Self) -> Self {
        Self { rules: new.rules, format: new.format, stdout_format: new.stdout_format, ..self.clone() }
    }
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
        error(MULTILINE_START.name, format!("neither a preset (java, python, go) nor a regular expression: {problem}"))
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
fn sources(values: &Values) -> Result<(Vec<Glob>, Option<String>), ConfigError> {
    let get = |name: &str| values.get(name);
    let files: Vec<&str> =
        get(FILES.name).map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()).unwrap_or_default();
    if files.len() > MAX_FILES {
        return Err(error(FILES.name, format!("{} globs: at most {MAX_FILES}", files.len())));
    }
    let files = files
        .into_iter()
        .map(Glob::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|problem| error(FILES.name, problem))?;
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

/// A Prometheus label name: letters, digits and `_`, not starting with a digit nor `__`.
fn is_label_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && !name.starts_with("__")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
