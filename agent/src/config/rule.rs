//! The rules: `AGENT_RULE_<NAME>` (a line's regular expression) and `AGENT_MATCH_<NAME>` (fields
//! of a structured line), either or both, and what a rule makes of what it matches:
//! `AGENT_VALUE_`, `AGENT_METRIC_`, `AGENT_BUCKETS_`, `AGENT_UNIT_`, `AGENT_LABELS_`,
//! `AGENT_ALERT_<NAME>`. Every variable of a rule names its rule; every problem names its
//! variable.

use super::{
    ALERT_PREFIX, BUCKETS_PREFIX, ConfigError, EXEMPLAR_PREFIX, LABELS_PREFIX, MATCH_PREFIX, MAX_RULES, METRIC_PREFIX,
    NATIVE_PREFIX, RULE_PREFIX, UNIT_PREFIX, VALUE_PREFIX, Values, error, is_label_name, parse_threshold,
};

use crate::parse::value::{Reading, Unit};

use super::Threshold;

/// Prometheus' default buckets, in base units: what `AGENT_BUCKETS_<NAME>` is when unset.
pub const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Buckets of a histogram at most.
pub const MAX_BUCKETS: usize = 64;
/// Field conditions of a rule at most, and field labels.
pub const MAX_FIELDS: usize = 16;

/// What a rule makes of its matches (`AGENT_METRIC_<NAME>`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricKind {
    /// Counts them (`watcher_agent_matches_total`).
    #[default]
    Count,
    /// Adds their values (a counter).
    Sum,
    /// Keeps the last value (a gauge).
    Gauge,
    /// Observes their values in buckets.
    Histogram,
    /// Is the running total the line carries (a counter set to it: a lower value is a reset of
    /// the app's count).
    Cumulative,
}

impl MetricKind {
    /// The words `AGENT_METRIC_<NAME>` takes.
    pub const WORDS: [&'static str; 5] = ["count", "sum", "gauge", "histogram", "cumulative"];

    fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "count" => Self::Count,
            "sum" => Self::Sum,
            "gauge" => Self::Gauge,
            "histogram" => Self::Histogram,
            "cumulative" => Self::Cumulative,
            _ => return None,
        })
    }

    /// Its word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Sum => "sum",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
            Self::Cumulative => "cumulative",
        }
    }
}

/// Where a rule's value is (`AGENT_VALUE_<NAME>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueFrom {
    /// A named group of its regular expression.
    Group(String),
    /// A field of a structured line (a dotted path).
    Field(String),
}

pub use crate::pattern::Pattern;

/// A field condition (`AGENT_MATCH_<NAME>=field=regex`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldMatch {
    /// The field's dotted path.
    pub path: String,
    /// The regular expression its value must match.
    pub pattern: Pattern,
}

/// One rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuleConfig {
    /// `error` for `AGENT_RULE_ERROR`.
    pub name: String,
    /// The line's regular expression (`AGENT_RULE_<NAME>`), if any.
    pub pattern: Option<Pattern>,
    /// Field conditions (`AGENT_MATCH_<NAME>`), all of which must hold.
    pub fields: Vec<FieldMatch>,
    /// Its alert, from `AGENT_ALERT_<NAME>`.
    pub alert: Option<Threshold>,
    /// The names of its labels: its named groups (but its value's), then its field labels.
    pub labels: Vec<String>,
    /// The paths of its field labels (`AGENT_LABELS_<NAME>`), in `labels`' order after the
    /// groups.
    pub field_labels: Vec<String>,
    /// Its value (`AGENT_VALUE_<NAME>`).
    pub value: Option<ValueFrom>,
    /// What it makes (`AGENT_METRIC_<NAME>`).
    pub metric: MetricKind,
    /// A histogram's upper bounds, in base units (`AGENT_BUCKETS_<NAME>`).
    pub buckets: Vec<f64>,
    /// The schema of its native histogram (`AGENT_NATIVE_<NAME>`'s growth factor picks it), if
    /// its histogram is also a native one.
    pub native_schema: Option<i32>,
    /// How its values are read (`AGENT_UNIT_<NAME>`).
    pub reading: Reading,
    /// The group or field whose value its samples carry as an exemplar's `trace_id`
    /// (`AGENT_EXEMPLAR_<NAME>`).
    pub exemplar: Option<ValueFrom>,
}

impl RuleConfig {
    /// A rule that counts the lines `pattern` matches, labelled by its named groups; what is
    /// wrong with `pattern`, as [`Pattern::new`] says it.
    pub fn counting(name: &str, pattern: &str) -> Result<Self, String> {
        let pattern = Pattern::new(pattern)?;
        let labels = pattern.groups().map(str::to_owned).collect();
        Ok(Self { name: name.to_owned(), pattern: Some(pattern), labels, ..Self::default() })
    }

    /// The name of the metric its values make, without `_total` or `_bucket`:
    /// `watcher_agent_latency_seconds`; `None` for a rule that counts.
    pub fn metric_name(&self) -> Option<String> {
        (self.metric != MetricKind::Count)
            .then(|| format!("watcher_agent_{}{}", self.name, self.reading.dimension().suffix()))
    }

    /// The field paths it reads: its conditions', its value's, its labels'.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        let value = match &self.value {
            Some(ValueFrom::Field(path)) => Some(path.as_str()),
            _ => None,
        };
        self.fields.iter().map(|f| f.path.as_str()).chain(value).chain(self.field_labels.iter().map(String::as_str))
    }
}

/// The families the agent exports whatever its rules: a rule's metric may not take one's name.
pub const OWN_FAMILIES: [&str; 18] = [
    "lines",
    "matches",
    "last_match_timestamp_seconds",
    "long_lines",
    "series_folded",
    "series_dropped",
    "source_errors",
    "alert_firing",
    "alerts_sent",
    "open_files",
    "files_closed",
    "files_skipped",
    "truncations",
    "stream_reconnects",
    "value_errors",
    "parse_errors",
    "events",
    "events_cut",
];

/// The rules, from every variable of each. `structured`: a source is read as `json`, `logfmt`
/// or `auto` (else no rule can read a field).
pub(super) fn rules(values: &Values, structured: bool) -> Result<Vec<RuleConfig>, ConfigError> {
    let mut rules = matchers(values, structured)?;
    if rules.is_empty() {
        return Err(error("AGENT_RULE_<NAME>", "no rule: set at least one, e.g. AGENT_RULE_ERROR=\\bERROR\\b"));
    }
    if rules.len() > MAX_RULES {
        return Err(error("AGENT_RULE_<NAME>", format!("{} rules: at most {MAX_RULES}", rules.len())));
    }
    let prefixes = [
        ALERT_PREFIX,
        METRIC_PREFIX,
        UNIT_PREFIX,
        VALUE_PREFIX,
        LABELS_PREFIX,
        BUCKETS_PREFIX,
        NATIVE_PREFIX,
        EXEMPLAR_PREFIX,
    ];
    for prefix in prefixes {
        let mut seen: Vec<usize> = Vec::new();
        for (key, value) in values.own.iter().filter(|(k, _)| k.starts_with(prefix)) {
            let index = rule_of(key, prefix, &rules)?;
            if seen.contains(&index) {
                return Err(error(
                    key,
                    format!("a second one for rule {}: rule names are not case-sensitive", rules[index].name),
                ));
            }
            seen.push(index);
            setting(&mut rules[index], prefix, key, value, structured)?;
        }
    }
    for rule in &mut rules {
        finish(rule)?;
    }
    metric_names(&rules)?;
    Ok(rules)
}

/// The rules by what they match: `AGENT_RULE_<NAME>` (a line's regular expression, compiled
/// here) and `AGENT_MATCH_<NAME>` (field conditions), one rule a name.
fn matchers(values: &Values, structured: bool) -> Result<Vec<RuleConfig>, ConfigError> {
    let mut rules: Vec<RuleConfig> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for (key, value) in values.own.iter().filter(|(k, _)| k.starts_with(RULE_PREFIX) || k.starts_with(MATCH_PREFIX)) {
        let is_match = key.starts_with(MATCH_PREFIX);
        let name = rule_name(key, if is_match { MATCH_PREFIX } else { RULE_PREFIX })?;
        let index = match rules.iter().position(|r| r.name == name) {
            Some(index)
                if (is_match && rules[index].fields.is_empty()) || (!is_match && rules[index].pattern.is_none()) =>
            {
                index
            }
            Some(index) => {
                return Err(error(
                    key,
                    format!("{} names the same rule ({name}): rule names are not case-sensitive", keys[index]),
                ));
            }
            None => {
                rules.push(RuleConfig { name: name.clone(), ..RuleConfig::default() });
                keys.push(key);
                rules.len() - 1
            }
        };
        let rule = &mut rules[index];
        if value.is_empty() {
            let example =
                if is_match { "field=regex, e.g. level=^error$" } else { "a regular expression, e.g. \\bERROR\\b" };
            return Err(error(key, format!("empty: set {example}")));
        }
        if !is_match {
            rule.pattern = Some(compile(key, value)?);
        } else if structured {
            rule.fields = field_matches(key, value)?;
        } else {
            return Err(error(key, NEEDS_STRUCTURED));
        }
    }
    Ok(rules)
}

/// What a rule's variable other than its matcher is refused for with `AGENT_FORMAT=text`.
const NEEDS_STRUCTURED: &str = "fields need a structured format: set AGENT_FORMAT to json, logfmt or auto";

/// The index of the rule variable `key` (of `prefix`) names.
fn rule_of(key: &str, prefix: &str, rules: &[RuleConfig]) -> Result<usize, ConfigError> {
    let name = rule_name(key, prefix)?;
    rules.iter().position(|r| r.name == name).ok_or_else(|| {
        error(key, format!("no rule {name}: set {RULE_PREFIX}{0} or {MATCH_PREFIX}{0} too", name.to_uppercase()))
    })
}

/// `key=value`, a variable of `prefix` (`AGENT_ALERT_`, `AGENT_METRIC_`…), into `rule`.
fn setting(rule: &mut RuleConfig, prefix: &str, key: &str, value: &str, structured: bool) -> Result<(), ConfigError> {
    match prefix {
        ALERT_PREFIX => rule.alert = Some(parse_threshold(value).map_err(|problem| error(key, problem))?),
        METRIC_PREFIX => {
            rule.metric = MetricKind::parse(value).ok_or_else(|| {
                error(key, format!("{value:?}: `count`, `sum`, `gauge`, `histogram` or `cumulative`"))
            })?;
        }
        UNIT_PREFIX => {
            let unit =
                Unit::parse(value).ok_or_else(|| error(key, format!("{value:?}: `ns`, `us`, `ms`, `s` or `bytes`")))?;
            rule.reading.bare = Some(unit);
        }
        VALUE_PREFIX => rule.value = Some(value_from(key, value, rule, structured)?),
        LABELS_PREFIX if !structured => return Err(error(key, NEEDS_STRUCTURED)),
        LABELS_PREFIX => rule.field_labels = field_labels(key, value, &mut rule.labels)?,
        NATIVE_PREFIX => rule.native_schema = Some(native_schema(key, value)?),
        EXEMPLAR_PREFIX => rule.exemplar = Some(value_from(key, value, rule, structured)?),
        _ => rule.buckets = buckets(key, value)?,
    }
    Ok(())
}

/// The groups of a rule's regular expression as labels (but its value's); what its value and
/// metric need of each other.
fn finish(rule: &mut RuleConfig) -> Result<(), ConfigError> {
    let upper = rule.name.to_uppercase();
    let key = |prefix: &str| format!("{prefix}{upper}");
    let mut labels: Vec<String> = match &rule.pattern {
        Some(pattern) => pattern.groups().map(str::to_owned).collect(),
        None => Vec::new(),
    };
    for taken in [&rule.value, &rule.exemplar] {
        if let Some(ValueFrom::Group(group)) = taken {
            labels.retain(|l| l != group);
        }
    }
    if rule.metric == MetricKind::Gauge && rule.exemplar.is_some() {
        return Err(error(
            &key(EXEMPLAR_PREFIX),
            format!("rule {} makes a gauge: exemplars are a counter's or a histogram's", rule.name),
        ));
    }
    for label in &labels {
        if !is_label_name(label) || ["rule", "source", "le"].contains(&label.as_str()) {
            return Err(error(
                &key(RULE_PREFIX),
                format!(
                    "the group name {label:?} is not a label name (letters, digits and _, not starting with a digit \
                     nor __; not rule, source nor le)"
                ),
            ));
        }
    }
    // The field labels come after the groups (they were parsed into `labels` alone).
    let field_names = std::mem::take(&mut rule.labels);
    if let Some(twice) = field_names.iter().find(|f| labels.contains(f)) {
        return Err(error(&key(LABELS_PREFIX), format!("the label {twice:?} is also a group of {}", key(RULE_PREFIX))));
    }
    labels.extend(field_names);
    rule.labels = labels;
    match (rule.metric, &rule.value) {
        (kind @ (MetricKind::Sum | MetricKind::Gauge | MetricKind::Histogram | MetricKind::Cumulative), None) => {
            return Err(error(
                &key(METRIC_PREFIX),
                format!("{} needs a value: set {} to a named group or a field", kind.as_str(), key(VALUE_PREFIX)),
            ));
        }
        (MetricKind::Count, Some(_)) => {
            return Err(error(
                &key(VALUE_PREFIX),
                format!(
                    "rule {} counts its matches: set {} to sum, gauge, histogram or cumulative",
                    rule.name,
                    key(METRIC_PREFIX)
                ),
            ));
        }
        _ => {}
    }
    if rule.reading.bare.is_some() && rule.value.is_none() {
        return Err(error(&key(UNIT_PREFIX), format!("rule {} has no value: set {}", rule.name, key(VALUE_PREFIX))));
    }
    match (rule.metric, rule.buckets.is_empty()) {
        (MetricKind::Histogram, true) => rule.buckets = DEFAULT_BUCKETS.to_vec(),
        (MetricKind::Histogram, false) => {}
        (kind, false) => {
            return Err(error(
                &key(BUCKETS_PREFIX),
                format!("rule {} makes a {}, not a histogram", rule.name, kind.as_str()),
            ));
        }
        (_, true) => {}
    }
    // A sum adds its values and a running total only grows between resets: neither is negative.
    if rule.native_schema.is_some() && rule.metric != MetricKind::Histogram {
        return Err(error(
            &key(NATIVE_PREFIX),
            format!("rule {} makes a {}: set {} to histogram", rule.name, rule.metric.as_str(), key(METRIC_PREFIX)),
        ));
    }
    rule.reading.non_negative = matches!(rule.metric, MetricKind::Sum | MetricKind::Cumulative);
    Ok(())
}

/// No rule's metric takes the name of another's, or of one the agent exports anyway.
fn metric_names(rules: &[RuleConfig]) -> Result<(), ConfigError> {
    let mut names: Vec<(String, &RuleConfig)> = Vec::new();
    for rule in rules {
        let Some(name) = rule.metric_name() else { continue };
        let key = format!("{METRIC_PREFIX}{}", rule.name.to_uppercase());
        let own = name.strip_prefix("watcher_agent_").is_some_and(|n| OWN_FAMILIES.contains(&n));
        if own {
            return Err(error(&key, format!("its metric {name} is one the agent exports already: rename the rule")));
        }
        if let Some((_, other)) = names.iter().find(|(n, _)| *n == name) {
            return Err(error(&key, format!("its metric {name} is rule {}'s too: rename one of them", other.name)));
        }
        names.push((name, rule));
    }
    Ok(())
}

/// The highest schema (the finest buckets: growth 2^(1/256)).
const MAX_SCHEMA: i32 = 8;

/// The native histogram schema whose bucket growth is at most `factor` (1 < factor ≤ 2), as
/// client_golang picks it: the coarsest such one.
pub fn native_schema_for(factor: f64) -> i32 {
    let floor = factor.log2().log2().floor();
    if floor <= -f64::from(MAX_SCHEMA) {
        MAX_SCHEMA
    } else {
        // 1 < factor ≤ 2: log2(log2(factor)) ≤ 0, the schema 0 to 8.
        (-floor).clamp(0.0, f64::from(MAX_SCHEMA)) as i32
    }
}

/// The bucket growth of native histogram schema `schema`: `2^(2^-schema)`.
pub fn growth(schema: i32) -> f64 {
    2_f64.powf(2_f64.powi(-schema))
}

/// `AGENT_NATIVE_<NAME>=<factor>`: the schema of the native histogram whose buckets grow by at
/// most `factor` (1 < factor ≤ 2), as client_golang's `NativeHistogramBucketFactor` picks it.
fn native_schema(key: &str, value: &str) -> Result<i32, ConfigError> {
    match value.trim().parse::<f64>() {
        Ok(factor) if factor > 1.0 && factor <= 2.0 => Ok(native_schema_for(factor)),
        _ => Err(error(key, format!("{value:?}: a bucket growth factor above 1 and at most 2, e.g. 1.1"))),
    }
}

/// `AGENT_VALUE_<NAME>`: a named group of the rule's regular expression, else a field.
fn value_from(key: &str, value: &str, rule: &RuleConfig, structured: bool) -> Result<ValueFrom, ConfigError> {
    let groups: Vec<String> = match &rule.pattern {
        Some(pattern) => pattern.groups().map(str::to_owned).collect(),
        None => Vec::new(),
    };
    if groups.iter().any(|g| g == value) {
        return Ok(ValueFrom::Group(value.to_owned()));
    }
    if !structured {
        let known = if groups.is_empty() {
            format!("{RULE_PREFIX}{} has no named group", rule.name.to_uppercase())
        } else {
            format!("its groups are {}", groups.join(", "))
        };
        return Err(error(
            key,
            format!(
                "{value:?} is not a named group of {RULE_PREFIX}{} ({known}), and with AGENT_FORMAT=text there are no \
                 fields: name a group such as (?P<ms>\\d+), or set AGENT_FORMAT",
                rule.name.to_uppercase()
            ),
        ));
    }
    field_path(key, value)?;
    Ok(ValueFrom::Field(value.to_owned()))
}

/// `field=regex[,field=regex…]`: a new condition starts at a comma followed by `field=`, so a
/// comma inside a regular expression (`\d{1,3}`) stays in it.
fn field_matches(key: &str, value: &str) -> Result<Vec<FieldMatch>, ConfigError> {
    let mut starts = vec![0];
    for (at, _) in value.match_indices(',') {
        let rest = value[at + 1..].trim_start();
        let name_end = rest.find('=').unwrap_or(0);
        if name_end > 0 && is_path(&rest[..name_end]) {
            starts.push(at + 1);
        }
    }
    starts.push(value.len() + 1);
    let mut matches = Vec::new();
    for pair in starts.windows(2) {
        let text = value[pair[0]..pair[1] - 1].trim();
        let (path, pattern) =
            text.split_once('=').ok_or_else(|| error(key, format!("{text:?}: field=regex, e.g. level=^error$")))?;
        let (path, pattern) = (path.trim(), pattern.trim());
        field_path(key, path)?;
        matches.push(FieldMatch { path: path.to_owned(), pattern: compile(key, pattern)? });
    }
    if matches.len() > MAX_FIELDS {
        return Err(error(key, format!("{} conditions: at most {MAX_FIELDS}", matches.len())));
    }
    Ok(matches)
}

/// `field[,label:field…]`: each field's label (a bare field is its own label, dots as `_`),
/// into `labels`; the fields' paths.
fn field_labels(key: &str, value: &str, labels: &mut Vec<String>) -> Result<Vec<String>, ConfigError> {
    let mut paths = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (label, path) = match item.split_once(':') {
            Some((label, path)) => (label.trim().to_owned(), path.trim()),
            None => (item.replace(['.', '-'], "_"), item),
        };
        field_path(key, path)?;
        if !is_label_name(&label) || ["rule", "source", "le"].contains(&label.as_str()) {
            return Err(error(
                key,
                format!(
                    "{label:?} is not a label name (letters, digits and _; not rule, source nor le): write label:{path}"
                ),
            ));
        }
        if labels.contains(&label) {
            return Err(error(key, format!("the label {label:?} twice")));
        }
        labels.push(label);
        paths.push(path.to_owned());
    }
    if paths.is_empty() {
        return Err(error(key, "empty: set field[,label:field...], e.g. route,code:http.status"));
    }
    if paths.len() > MAX_FIELDS {
        return Err(error(key, format!("{} labels: at most {MAX_FIELDS}", paths.len())));
    }
    Ok(paths)
}

/// `AGENT_BUCKETS_<NAME>`: upper bounds, in base units, strictly increasing.
fn buckets(key: &str, value: &str) -> Result<Vec<f64>, ConfigError> {
    let mut bounds: Vec<f64> = Vec::new();
    for item in value.split(',').map(str::trim) {
        let bound: f64 = item.parse().ok().filter(|b: &f64| b.is_finite()).ok_or_else(|| {
            error(key, format!("{item:?} is not a number: buckets are numbers in base units, e.g. 0.1,0.5,1"))
        })?;
        if bounds.last().is_some_and(|last| *last >= bound) {
            return Err(error(key, format!("{value:?}: the buckets must be strictly increasing")));
        }
        bounds.push(bound);
    }
    if bounds.len() > MAX_BUCKETS {
        return Err(error(key, format!("{} buckets: at most {MAX_BUCKETS}", bounds.len())));
    }
    Ok(bounds)
}

/// A dotted path: names of letters, digits, `_`, `-`, `@`, `$` and `/`, joined by dots.
fn is_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 256
        && path
            .split('.')
            .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || "_-@$/".contains(c)))
}

fn field_path(key: &str, path: &str) -> Result<(), ConfigError> {
    if is_path(path) {
        Ok(())
    } else {
        Err(error(key, format!("{path:?} is not a field: names of letters, digits, _ and -, joined by dots (http.ms)")))
    }
}

fn compile(key: &str, pattern: &str) -> Result<Pattern, ConfigError> {
    Pattern::new(pattern).map_err(|problem| error(key, format!("not a regular expression: {problem}")))
}

/// `error` of `AGENT_RULE_ERROR`: names are letters, digits and `_`, starting with a letter.
pub(super) fn rule_name(key: &str, prefix: &str) -> Result<String, ConfigError> {
    let name = &key[prefix.len()..];
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.len() <= 48
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(error(key, "the rule's name must be letters, digits and _ (at most 48), starting with a letter"));
    }
    Ok(name.to_ascii_lowercase())
}
