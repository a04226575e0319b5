//! The variables the agent reads, in one table: name, default, bounds and what it means.
//! [`Config::from_vars`](super::Config::from_vars) reads every value through it (a default is
//! written once, parsed as a value is), `watcher-agent help` prints it, and docs/agent.md's table
//! is made from it ([`markdown`]; a test checks the two agree).

use std::time::Duration;

use watcher_base::{format_duration, parse_duration};

use super::unknown::{closest, is_service_link};
use super::{ConfigError, PREFIX, RULE_FAMILIES, error};

/// How a variable's value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Text, checked where it is used (globs, a path, a URL, a container's name).
    Text,
    /// One of these words.
    Word(&'static [&'static str]),
    /// `true` or `false`.
    Bool,
    /// A whole number from `min` to `max`.
    Count {
        /// The least.
        min: usize,
        /// The most.
        max: usize,
    },
    /// A duration from `min` to `max` (`250ms`, `30s`, `5m`, `1h`).
    Duration {
        /// The shortest.
        min: Duration,
        /// The longest.
        max: Duration,
    },
    /// A size in bytes from `min` to `max` (`65536`, `64KiB`, `1MiB`).
    Bytes {
        /// The least.
        min: usize,
        /// The most.
        max: usize,
    },
    /// A duration from `min` to `max`, or `off`.
    DurationOrOff {
        /// The shortest.
        min: Duration,
        /// The longest.
        max: Duration,
    },
    /// Not one variable: a family (`AGENT_RULE_<NAME>`), or set by the kubelet.
    Family,
}

/// One variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    /// Its name (`AGENT_POLL`), or its pattern (`AGENT_RULE_<NAME>`).
    pub name: &'static str,
    /// Its default as it would be written (`250ms`), or in parentheses what stands for one
    /// (`(none)`).
    pub default: &'static str,
    /// How its value is read.
    pub kind: Kind,
    /// What it does, one sentence (its bounds are added from `kind`).
    pub doc: &'static str,
}

impl Variable {
    /// `doc` with the bounds its kind sets: `how often files are looked at (10ms to 1m)`.
    pub fn meaning(&self) -> String {
        let range = |min: Duration, max: Duration| format!("{} to {}", format_duration(min), format_duration(max));
        match self.kind {
            Kind::Count { min, max } => format!("{} ({min} to {max})", self.doc),
            Kind::Bytes { min, max } => format!("{} ({} to {})", self.doc, format_bytes(min), format_bytes(max)),
            Kind::Duration { min, max } => format!("{} ({})", self.doc, range(min, max)),
            Kind::DurationOrOff { min, max } => format!("{} ({}, or `off`)", self.doc, range(min, max)),
            // The words are the doc's to say, in a sentence.
            Kind::Word(_) | Kind::Text | Kind::Bool | Kind::Family => self.doc.to_owned(),
        }
    }

    /// Whether the agent reads this name (a family's members are matched by prefix).
    pub fn is_fixed(&self) -> bool {
        self.name.starts_with(super::PREFIX) && self.kind != Kind::Family
    }
}

const fn seconds(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// `AGENT_FILES`.
pub(super) const FILES: Variable = Variable {
    name: "AGENT_FILES",
    default: "(none)",
    kind: Kind::Text,
    doc: "files to follow: absolute globs, comma-separated (`/var/log/app/*.log,/data/*.err`), at most 32",
};
/// `AGENT_LOGS_CONTAINER`.
pub(super) const LOGS_CONTAINER: Variable = Variable {
    name: "AGENT_LOGS_CONTAINER",
    default: "(none)",
    kind: Kind::Text,
    doc: "a container of this pod whose stdout and stderr to follow through the API (`pods/log`); needs \
          `POD_NAME`, `POD_NAMESPACE` and the RBAC below",
};
/// `AGENT_RULE_<NAME>`.
pub(super) const RULE: Variable = Variable {
    name: "AGENT_RULE_<NAME>",
    default: "(at least one)",
    kind: Kind::Family,
    doc: "a rule: a regular expression ([Rust `regex` syntax](https://docs.rs/regex/latest/regex/#syntax)) \
          matched on each line; `<NAME>` is letters, digits and `_`, lowercased in metrics (`AGENT_RULE_SLOW_QUERY` \
          is rule `slow_query`); at most 64. Its named groups are labels of its counter (below)",
};
/// `AGENT_ALERT_<NAME>`.
pub(super) const ALERT: Variable = Variable {
    name: "AGENT_ALERT_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "an alert for rule `<NAME>`: `<count>/<window>`, e.g. `5/1m` (count 1 to 100000, window 1s to 24h)",
};
/// `AGENT_MATCH_<NAME>`.
pub(super) const MATCH: Variable = Variable {
    name: "AGENT_MATCH_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "rule `<NAME>` on the fields of a structured line (`AGENT_FORMAT`): `field=regex[,field=regex...]`, every \
          one matching (`level=^error$,http.status=^5`); a field is a dotted path into nested objects; a missing \
          field does not match. In place of `AGENT_RULE_<NAME>` or beside it (then both must match)",
};
/// `AGENT_VALUE_<NAME>`.
pub(super) const VALUE: Variable = Variable {
    name: "AGENT_VALUE_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "what rule `<NAME>` measures: a named group of its regular expression (`ms` in `latency=(?P<ms>\\d+)`), \
          else a field (`http.ms`). `734ms`, `1.5s`, `10KiB` are read in seconds and bytes; a value that does not \
          parse is counted in `watcher_agent_value_errors_total`, never observed",
};
/// `AGENT_METRIC_<NAME>`.
pub(super) const METRIC: Variable = Variable {
    name: "AGENT_METRIC_<NAME>",
    default: "count",
    kind: Kind::Family,
    doc: "what rule `<NAME>` makes: `count` (its matches), `sum` (a counter adding its values), `gauge` (the last \
          value), `histogram`, or `cumulative` (a counter that is the running total the line carries, \
          `requests_total=1500`: a lower value is a reset of the app's count), named `watcher_agent_<name>` with \
          `_seconds` or `_bytes` after `AGENT_UNIT_<NAME>`",
};
/// `AGENT_BUCKETS_<NAME>`.
pub(super) const BUCKETS: Variable = Variable {
    name: "AGENT_BUCKETS_<NAME>",
    default: "0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10",
    kind: Kind::Family,
    doc: "a histogram's upper bounds in base units (seconds, bytes), strictly increasing, at most 64",
};
/// `AGENT_NATIVE_<NAME>`.
pub(super) const NATIVE: Variable = Variable {
    name: "AGENT_NATIVE_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "rule `<NAME>`'s histogram is also a Prometheus native histogram whose buckets grow by at most this \
          factor (above 1, at most 2: `1.1` is 8 buckets per power of two), served in the protobuf exposition to \
          a scraper that asks for it; its classic buckets are served to every scraper",
};
/// `AGENT_EXEMPLAR_<NAME>`.
pub(super) const EXEMPLAR: Variable = Variable {
    name: "AGENT_EXEMPLAR_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "a named group or a field whose value rule `<NAME>`'s samples carry as an exemplar's `trace_id` (its \
          counters', its histogram's buckets'), in OpenMetrics and protobuf; the group is no label",
};
/// `AGENT_UNIT_<NAME>`.
pub(super) const UNIT: Variable = Variable {
    name: "AGENT_UNIT_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "the unit of a bare number of rule `<NAME>`: `ns`, `us`, `ms`, `s` (the metric in `_seconds`) or `bytes` \
          (`_bytes`); unset, a bare number is taken as it is",
};
/// `AGENT_LABELS_<NAME>`.
pub(super) const LABELS: Variable = Variable {
    name: "AGENT_LABELS_<NAME>",
    default: "(none)",
    kind: Kind::Family,
    doc: "labels of rule `<NAME>` from fields: `field[,label:field...]` (`route,code:http.status`; a bare field is \
          its own label, dots as `_`); a missing field leaves the label empty",
};
/// `AGENT_FORMAT`.
pub(super) const FORMAT: Variable = Variable {
    name: "AGENT_FORMAT",
    default: "text",
    kind: Kind::Word(&["text", "json", "logfmt", "auto"]),
    doc: "how lines are read: `text`, `json` (an object a line), `logfmt` (`key=value` pairs) or `auto` (each line \
          a JSON object, else logfmt pairs, else text). A line not in the format is counted in \
          `watcher_agent_parse_errors_total` and matched as text",
};
/// `AGENT_STDOUT_FORMAT`.
pub(super) const STDOUT_FORMAT: Variable = Variable {
    name: "AGENT_STDOUT_FORMAT",
    default: "(AGENT_FORMAT)",
    kind: Kind::Word(&["text", "json", "logfmt", "auto"]),
    doc: "how the log stream's lines are read, where they differ from the files'",
};
/// `AGENT_MULTILINE_START`.
pub(super) const MULTILINE_START: Variable = Variable {
    name: "AGENT_MULTILINE_START",
    default: "(none)",
    kind: Kind::Text,
    doc: "lines joined into events: a regular expression a line that starts an event matches (the others join \
          the one before), or a preset, `java`, `python` or `go`, that knows its stack traces; any other bare \
          word is refused (as a pattern it would match almost nothing: write `^word`). Rules match an event \
          once; alerts quote its first line. Each file and the log stream have their own events",
};
/// `AGENT_MULTILINE_WAIT`.
pub(super) const MULTILINE_WAIT: Variable = Variable {
    name: "AGENT_MULTILINE_WAIT",
    default: "1s",
    kind: Kind::Duration { min: Duration::from_millis(10), max: seconds(60) },
    doc: "an event ends this long after its last line",
};
/// `AGENT_MULTILINE_MAX_LINES`.
pub(super) const MULTILINE_MAX_LINES: Variable = Variable {
    name: "AGENT_MULTILINE_MAX_LINES",
    default: "500",
    kind: Kind::Count { min: 2, max: 100_000 },
    doc: "an event ends at this many lines; the next line starts the next (counted in \
          `watcher_agent_events_cut_total{reason=\"max_lines\"}`)",
};
/// `AGENT_MULTILINE_MAX_BYTES`.
pub(super) const MULTILINE_MAX_BYTES: Variable = Variable {
    name: "AGENT_MULTILINE_MAX_BYTES",
    default: "64KiB",
    kind: Kind::Bytes { min: 256, max: 16 * 1024 * 1024 },
    doc: "an event's text is kept, and matched, up to this many bytes; its lines are all counted (a cut counted \
          in `watcher_agent_events_cut_total{reason=\"max_bytes\"}`)",
};
/// `AGENT_SERIES_IDLE`.
pub(super) const SERIES_IDLE: Variable = Variable {
    name: "AGENT_SERIES_IDLE",
    default: "off",
    kind: Kind::DurationOrOff { min: seconds(1), max: seconds(30 * 86_400) },
    doc: "a rule's label set not seen for this long is dropped from `/metrics` (and counts again from 0 when it \
          comes back)",
};
/// `AGENT_STATE_DIR`.
pub(super) const STATE_DIR: Variable = Variable {
    name: "AGENT_STATE_DIR",
    default: "(none)",
    kind: Kind::Text,
    doc: "a directory that outlives a restart of the agent (an `emptyDir` of the Watcher's `volume`): the \
          checkpoints. Made if missing; one that cannot be written is said at start and the agent runs without \
          checkpoints",
};
/// `AGENT_CONFIG_DIR`.
pub(super) const CONFIG_DIR: Variable = Variable {
    name: "AGENT_CONFIG_DIR",
    default: "/etc/watcher-agent/config",
    kind: Kind::Text,
    doc: "the Watcher's ConfigMap as files, one a variable (the webhook mounts it there): looked at every 2s, \
          a change is judged whole, as at start, and its rules, alerts and formats are taken without a restart; a \
          refused one leaves the last good one running. The container's own `env` wins over it. Where it does not \
          exist, the environment alone is the configuration",
};
/// `AGENT_START`.
pub(super) const START: Variable = Variable {
    name: "AGENT_START",
    default: "end",
    kind: Kind::Word(&["end", "beginning"]),
    doc: "where files present at start begin, without checkpoints: their `end` (only what is written from now \
          on) or their `beginning`; the log stream likewise. With `AGENT_STATE_DIR`: from the beginning at the \
          first start in the pod, from the checkpoints after. Files that appear later are always read from their \
          beginning",
};
/// `AGENT_ROTATE_WAIT`.
pub(super) const ROTATE_WAIT: Variable = Variable {
    name: "AGENT_ROTATE_WAIT",
    default: "5s",
    kind: Kind::Duration { min: Duration::ZERO, max: seconds(3600) },
    doc: "a file rotated away (renamed out of the globs, or deleted) is read until it has not grown for this \
          long, then closed",
};
/// `AGENT_IGNORE_OLDER`.
pub(super) const IGNORE_OLDER: Variable = Variable {
    name: "AGENT_IGNORE_OLDER",
    default: "off",
    kind: Kind::DurationOrOff { min: seconds(1), max: seconds(30 * 86_400) },
    doc: "files that have not changed for this long are closed, and opened again where they were left when they \
          change",
};
/// `AGENT_MAX_OPEN_FILES`.
pub(super) const MAX_OPEN_FILES: Variable = Variable {
    name: "AGENT_MAX_OPEN_FILES",
    default: "128",
    kind: Kind::Count { min: 1, max: 4096 },
    doc: "file descriptors the followed files hold at most; any number of files is followed, a closed one \
          opened again where it was left when it changes",
};
/// `AGENT_MAX_SERIES`.
pub(super) const MAX_SERIES: Variable = Variable {
    name: "AGENT_MAX_SERIES",
    default: "100",
    kind: Kind::Count { min: 1, max: 10_000 },
    doc: "label sets of a rule at most (its groups' and fields' values, whatever it makes); beyond, `other`, \
          counted in `watcher_agent_series_dropped_total` and said once in the log",
};
/// `AGENT_STREAM_IDLE`.
pub(super) const STREAM_IDLE: Variable = Variable {
    name: "AGENT_STREAM_IDLE",
    default: "2m",
    kind: Kind::Duration { min: seconds(1), max: seconds(3600) },
    doc: "a log stream that sends no byte for this long is asked again: a half-open connection never ends by \
          itself",
};
/// `AGENT_LISTEN`.
pub(super) const LISTEN: Variable = Variable {
    name: "AGENT_LISTEN",
    default: "0.0.0.0:9102",
    kind: Kind::Text,
    doc: "address of `/metrics`, `/healthz`, `/readyz`",
};
/// `AGENT_EVENTS`.
pub(super) const EVENTS: Variable = Variable {
    name: "AGENT_EVENTS",
    default: "true",
    kind: Kind::Bool,
    doc: "alerts become Warning Events on the pod",
};
/// `AGENT_ALERTMANAGER_URL`.
pub(super) const ALERTMANAGER_URL: Variable = Variable {
    name: "AGENT_ALERTMANAGER_URL",
    default: "(none)",
    kind: Kind::Text,
    doc: "also post alerts to this Alertmanager (API v2, `http://host:port[/prefix]`): firing, then resolved",
};
/// `AGENT_REMOTE_WRITE_URL`.
pub(super) const REMOTE_WRITE_URL: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_URL",
    default: "(none)",
    kind: Kind::Text,
    doc: "also push every series by Prometheus remote write 1.0 to this `http://` or `https://` URL (Prometheus' \
          `/api/v1/write`, Mimir's `/api/v1/push`), with the labels `namespace` and `pod`; the last counts are \
          pushed when the agent ends",
};
/// `AGENT_REMOTE_WRITE_INTERVAL`.
pub(super) const REMOTE_WRITE_INTERVAL: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_INTERVAL",
    default: "15s",
    kind: Kind::Duration { min: seconds(1), max: seconds(600) },
    doc: "how often every series is pushed",
};
/// `AGENT_REMOTE_WRITE_BEARER_TOKEN_FILE`.
pub(super) const REMOTE_WRITE_BEARER_TOKEN_FILE: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_BEARER_TOKEN_FILE",
    default: "(none)",
    kind: Kind::Text,
    doc: "a file holding the token each push sends as `Authorization: Bearer`, read at every push (a projected \
          token is renewed in place)",
};
/// `AGENT_REMOTE_WRITE_CA_FILE`.
pub(super) const REMOTE_WRITE_CA_FILE: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_CA_FILE",
    default: "(system roots)",
    kind: Kind::Text,
    doc: "PEM certificates an `https://` receiver's certificate must chain to",
};
/// `AGENT_REMOTE_WRITE_TENANT`.
pub(super) const REMOTE_WRITE_TENANT: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_TENANT",
    default: "(none)",
    kind: Kind::Text,
    doc: "the tenant each push names in `X-Scope-OrgID`, as Mimir, Cortex and Loki read it",
};
/// `AGENT_REMOTE_WRITE_MAX_SAMPLES`.
pub(super) const REMOTE_WRITE_MAX_SAMPLES: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_MAX_SAMPLES",
    default: "100000",
    kind: Kind::Count { min: 100, max: 10_000_000 },
    doc: "samples held while the receiver cannot take them; beyond, the oldest pushes are dropped and counted \
          (`watcher_agent_remote_write_samples_total{result=\"dropped\"}`)",
};
/// `AGENT_REMOTE_WRITE_MAX_BYTES`.
pub(super) const REMOTE_WRITE_MAX_BYTES: Variable = Variable {
    name: "AGENT_REMOTE_WRITE_MAX_BYTES",
    default: "4MiB",
    kind: Kind::Bytes { min: 65_536, max: 1 << 30 },
    doc: "bytes of compressed pushes held while the receiver cannot take them; beyond, the oldest are dropped \
          and counted",
};
/// `AGENT_POLL`.
pub(super) const POLL: Variable = Variable {
    name: "AGENT_POLL",
    default: "250ms",
    kind: Kind::Duration { min: Duration::from_millis(10), max: seconds(60) },
    doc: "how often files are looked at",
};
/// `AGENT_MAX_LINE_BYTES`.
pub(super) const MAX_LINE_BYTES: Variable = Variable {
    name: "AGENT_MAX_LINE_BYTES",
    default: "16384",
    kind: Kind::Count { min: 256, max: 1_048_576 },
    doc: "a longer line is counted once and matched on its first bytes",
};
/// `AGENT_SHUTDOWN_LINGER`.
pub(super) const SHUTDOWN_LINGER: Variable = Variable {
    name: "AGENT_SHUTDOWN_LINGER",
    default: "5s",
    kind: Kind::Duration { min: Duration::ZERO, max: seconds(20) },
    doc: "after SIGTERM, how long `/metrics` waits for a last scrape",
};
/// `AGENT_TERMINATION_LOG`.
pub(super) const TERMINATION_LOG: Variable = Variable {
    name: "AGENT_TERMINATION_LOG",
    default: "/dev/termination-log",
    kind: Kind::Text,
    doc: "in a pod that is meant to end, the agent's last counts are written here when it ends (the kubelet \
          keeps them in the container's status, `state.terminated.message`, at most 4 KiB); only where the file \
          exists",
};
/// `WATCHER_ENDED_FILE`.
pub(super) const ENDED_FILE: Variable = Variable {
    name: "WATCHER_ENDED_FILE",
    default: "(webhook)",
    kind: Kind::Family,
    doc: "set by the webhook in a pod that is meant to end (a Job's): a file that is not empty once the app \
          containers have ended. The agent then ends by itself, exit 0, as on SIGTERM but with no wait for a \
          last scrape, and writes its last counts to `AGENT_TERMINATION_LOG`",
};
/// `AGENT_LOG`.
pub(super) const LOG: Variable =
    Variable { name: "AGENT_LOG", default: "info", kind: Kind::Text, doc: "log filter (`debug`, `warn`, ...)" };
/// `POD_NAME`, `POD_NAMESPACE`, `POD_UID`.
pub(super) const POD: Variable = Variable {
    name: "POD_NAME, POD_NAMESPACE, POD_UID",
    default: "(downward API)",
    kind: Kind::Family,
    doc: "the pod the Events are about",
};

/// Every variable, in the order docs/agent.md and `watcher-agent help` show them.
pub const VARIABLES: [Variable; 45] = [
    FILES,
    LOGS_CONTAINER,
    RULE,
    MATCH,
    ALERT,
    VALUE,
    METRIC,
    BUCKETS,
    NATIVE,
    EXEMPLAR,
    UNIT,
    LABELS,
    FORMAT,
    STDOUT_FORMAT,
    MULTILINE_START,
    MULTILINE_WAIT,
    MULTILINE_MAX_LINES,
    MULTILINE_MAX_BYTES,
    STATE_DIR,
    CONFIG_DIR,
    START,
    ROTATE_WAIT,
    IGNORE_OLDER,
    MAX_OPEN_FILES,
    MAX_SERIES,
    SERIES_IDLE,
    STREAM_IDLE,
    LISTEN,
    EVENTS,
    ALERTMANAGER_URL,
    REMOTE_WRITE_URL,
    REMOTE_WRITE_INTERVAL,
    REMOTE_WRITE_BEARER_TOKEN_FILE,
    REMOTE_WRITE_CA_FILE,
    REMOTE_WRITE_TENANT,
    REMOTE_WRITE_MAX_SAMPLES,
    REMOTE_WRITE_MAX_BYTES,
    POLL,
    MAX_LINE_BYTES,
    SHUTDOWN_LINGER,
    TERMINATION_LOG,
    LOG,
    POD,
    ENDED_FILE,
    Variable {
        name: "*_SERVICE_HOST, *_SERVICE_PORT*, *_PORT*",
        default: "(kubelet)",
        kind: Kind::Family,
        doc: "the kubelet's Service variables: ignored, also where their names start with `AGENT_`",
    },
];

/// `64KiB`, `16MiB`, `256B`: the shortest exact form.
fn format_bytes(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

/// docs/agent.md's table of variables.
pub fn markdown() -> String {
    let mut table = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for variable in &VARIABLES {
        let default = if variable.default.starts_with('(') {
            variable.default.to_owned()
        } else {
            format!("`{}`", variable.default)
        };
        let names: Vec<String> = variable.name.split(", ").map(|name| format!("`{name}`")).collect();
        table.push_str(&format!("| {} | {default} | {} |\n", names.join(", "), variable.meaning()));
    }
    table
}

/// The agent's own variables as the environment sets them, trimmed, sorted by name.
pub(super) struct Values {
    pub(super) own: Vec<(String, String)>,
}

impl Values {
    /// The agent's own variables among `vars`: `AGENT_*` (but the kubelet's Service variables),
    /// `POD_*` and `WATCHER_ENDED_FILE`, values trimmed (a YAML block scalar ends in a newline). A value that is not
    /// UTF-8 is an error, and so is an `AGENT_` variable the agent does not know (naming the
    /// closest one it knows).
    pub(super) fn from_vars<I, K, V>(vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<std::ffi::OsString>,
        V: Into<std::ffi::OsString>,
    {
        let mut own: Vec<(String, String)> = Vec::new();
        for (key, value) in vars {
            let (key, value) = (key.into(), value.into());
            let Some(key) = key.to_str() else { continue };
            if !key.starts_with(PREFIX) && !key.starts_with("POD_") && key != ENDED_FILE.name {
                continue;
            }
            let value = value.into_string().map_err(|_| error(key, "not valid UTF-8"))?;
            if key.starts_with(PREFIX) && is_service_link(key, value.trim()) {
                continue;
            }
            own.push((key.to_owned(), value.trim().to_owned()));
        }
        own.sort();
        for (key, _) in own.iter().filter(|(k, _)| k.starts_with(PREFIX)) {
            let known = VARIABLES.iter().any(|v| v.is_fixed() && v.name == key)
                || RULE_FAMILIES.iter().any(|family| key.starts_with(family));
            if !known {
                return Err(error(key, format!("unknown variable{}", closest(key))));
            }
        }
        Ok(Self { own })
    }

    /// The value of `name`, when set and not empty.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.own.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }

    /// `variable`'s value, or its default.
    fn value(&self, variable: &Variable) -> &str {
        self.get(variable.name).unwrap_or(variable.default)
    }

    /// A [`Kind::Word`]: which of its words.
    pub(super) fn word(&self, variable: &Variable) -> Result<&'static str, ConfigError> {
        let Kind::Word(words) = variable.kind else { unreachable!("{} is not a word", variable.name) };
        let value = self.value(variable);
        let choices = words.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(" or ");
        words
            .iter()
            .find(|w| **w == value)
            .copied()
            .ok_or_else(|| error(variable.name, format!("{value:?}: {choices}")))
    }

    /// A [`Kind::Bool`].
    pub(super) fn bool(&self, variable: &Variable) -> Result<bool, ConfigError> {
        match self.value(variable) {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(error(variable.name, format!("{other:?}: `true` or `false`"))),
        }
    }

    /// A [`Kind::Count`].
    pub(super) fn count(&self, variable: &Variable) -> Result<usize, ConfigError> {
        let Kind::Count { min, max } = variable.kind else { unreachable!("{} is not a count", variable.name) };
        let value = self.value(variable);
        match value.parse::<usize>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(error(variable.name, format!("{value:?}: a number from {min} to {max}"))),
        }
    }

    /// A [`Kind::Bytes`].
    pub(super) fn bytes(&self, variable: &Variable) -> Result<usize, ConfigError> {
        let Kind::Bytes { min, max } = variable.kind else { unreachable!("{} is not a size", variable.name) };
        let value = self.value(variable);
        let reading = crate::parse::value::Reading { bare: Some(crate::parse::value::Unit::Bytes), non_negative: true };
        match reading.parse(value.as_bytes()) {
            Ok(n) if n.fract() == 0.0 && (min as f64..=max as f64).contains(&n) => Ok(n as usize),
            _ => Err(error(
                variable.name,
                format!("{value:?}: a size from {} to {} (65536, 64KiB, 1MiB)", format_bytes(min), format_bytes(max)),
            )),
        }
    }

    /// A [`Kind::Duration`], or a [`Kind::DurationOrOff`] (`None`: off).
    pub(super) fn duration(&self, variable: &Variable) -> Result<Option<Duration>, ConfigError> {
        let (min, max, off) = match variable.kind {
            Kind::Duration { min, max } => (min, max, false),
            Kind::DurationOrOff { min, max } => (min, max, true),
            _ => unreachable!("{} is not a duration", variable.name),
        };
        let value = self.value(variable);
        if off && value == "off" {
            return Ok(None);
        }
        match parse_duration(value) {
            Ok(d) if (min..=max).contains(&d) => Ok(Some(d)),
            Ok(_) => Err(error(
                variable.name,
                format!("{value:?}: from {} to {}", format_duration(min), format_duration(max)),
            )),
            Err(problem) => Err(error(variable.name, format!("{value:?} is {problem}"))),
        }
    }

    /// A [`Kind::Duration`].
    pub(super) fn required_duration(&self, variable: &Variable) -> Result<Duration, ConfigError> {
        self.duration(variable).map(|d| d.unwrap_or_default())
    }
}
