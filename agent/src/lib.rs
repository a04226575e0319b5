//! watcher-agent: the sidecar a Watcher injects to watch the app. It follows the app's log
//! files (by glob, through rotation and truncation) and its stdout and stderr (the API's log
//! stream), matches every line against its rules in one pass, serves the counts on `/metrics`
//! and, when a rule crosses its threshold, emits a Warning Event on the pod. Configured from its
//! environment only ([`config`]), so a Watcher's `configData` is its configuration.
//!
//! Its modules are the stages of one pipeline, in the order a line goes through them:
//! [`tail`] (the sources: files and the log stream) → [`pipeline`] (the one way in, for every
//! source) → [`parse`] (a line's fields and values) → [`matching`] (the rules) →
//! [`metrics`] (counts, `/metrics`, the last counts) and [`sinks`] (alerts: Events,
//! Alertmanager); [`record`] holds what the sources hand the pipeline (it imports none of them:
//! the modules form a tree); [`config`] configures them all, `reload` takes a new configuration
//! while the agent runs, and [`run`] starts them.

// What the binary, the benches, the process tests and the operator use; the rest is the
// agent's own.
pub mod config;
pub mod matching;
pub mod metrics;
pub mod parse;
pub mod pattern;
pub mod pipeline;
pub mod record;
mod reload;
pub mod run;
pub mod sinks;
pub mod tail;
mod text;

/// Why the agent would refuse to start, in the words it says it.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A variable is wrong.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// Each rule compiles alone, not all of them together (the set's size limit).
    #[error("AGENT_RULE_<NAME>: the rules do not compile together: {0}")]
    Rules(String),
}

/// The configuration the environment `vars` gives, judged as the agent's start judges it (every
/// variable parsed, the rules compiled together): what the operator says of a Watcher's agent
/// before any pod runs it.
pub fn judge<I, K, V>(vars: I) -> Result<config::Config, Refusal>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<std::ffi::OsString>,
    V: Into<std::ffi::OsString>,
{
    compile(vars).map(|(config, _)| config)
}

/// The configuration the environment `vars` gives and its rules compiled together: the one
/// judgement of the agent's start, its reloads, `watcher-agent check` and the operator.
pub fn compile<I, K, V>(vars: I) -> Result<(config::Config, matching::Rules), Refusal>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<std::ffi::OsString>,
    V: Into<std::ffi::OsString>,
{
    let config = config::Config::from_vars(vars)?;
    let rules = matching::Rules::new(&config.rules).map_err(Refusal::Rules)?;
    Ok((config, rules))
}
