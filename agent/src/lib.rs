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
