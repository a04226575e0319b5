//! watcher-agent: the sidecar a Watcher injects to watch the app. It follows the app's log
//! files (by glob, through rotation and truncation) and its stdout and stderr (the API's log
//! stream), matches every line against its rules in one pass, serves the counts on `/metrics`
//! and, when a rule crosses its threshold, emits a Warning Event on the pod. Configured from its
//! environment only ([`config`]), so a Watcher's `configData` is its configuration.

mod alertmanager;
// What the binary, the benches and the process tests use; the rest is the agent's own.
pub mod alerts;
pub mod checkpoint;
pub mod config;
pub mod counting;
mod events;
pub mod fields;
pub mod follow;
pub mod lines;
mod logs;
pub mod metrics;
pub mod multiline;
pub mod rules;
pub mod run;
mod server;
pub mod shared;
pub mod signal;
mod text;
pub mod value;

/// Why the agent would refuse to start, in the words it says it.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A variable is wrong.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// Each rule compiles alone, not all of them together (the set's size limit).
    #[error("AGENT_RULE_<NAME>: the rules do not compile together: {0}")]
    Rules(regex::Error),
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
    let config = config::Config::from_vars(vars)?;
    rules::Rules::new(&config.rules).map_err(Refusal::Rules)?;
    Ok(config)
}
