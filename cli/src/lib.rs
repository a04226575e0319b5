//! The commands of watcher-operator as a library: the offline ones (`inject`, `crds`, `certs`),
//! the diagnostics (`check`, `check-inject`), `rollout`, and the command line that names them
//! (clap, with every flag's environment variable). The binary parses the command line here and
//! either runs the operator (its own wiring) or hands the command to [`execute`]; tests call
//! the commands' functions directly.

mod args;
mod check;
mod offline;
pub mod pod_security_config;
mod rollout;

pub use args::{
    CertsArgs, CheckArgs, CheckInjectArgs, Cli, ClusterArgs, Command, ControllerName, DEFAULT_FILTER, DeployedOptions,
    InjectArgs, Job, LogFormat, Output, RolloutArgs, RolloutCommand, RolloutStatusArgs, RolloutUndoArgs, RunArgs, Tool,
    causes, deployed_options, execute, run_args,
};
