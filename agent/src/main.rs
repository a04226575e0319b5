//! `watcher-agent`: runs the agent (no argument, or `run`), or `check`s its configuration.

use std::process::ExitCode;

use watcher_agent::config::VARIABLES;

const USAGE: &str = "usage: watcher-agent [run | check | help | version]

  run      follow the configured files and log stream, serve /metrics (the default)
  check    print the configuration the environment gives, or what is wrong with it (exit 1)

Configured from the environment (a Watcher's configData, through its ConfigMap):";

fn main() -> ExitCode {
    let command = std::env::args().nth(1);
    match command.as_deref() {
        None | Some("run") => run(),
        // The judgement of the start and of every reload: the variables, and the rules compiled together.
        Some("check") => match watcher_agent::judge(std::env::vars_os()) {
            Ok(config) => {
                print!("{}", config.describe());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("configuration: invalid: {error}");
                ExitCode::FAILURE
            }
        },
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            for variable in &VARIABLES {
                println!("  {:<34} {:<14} {}", variable.name, variable.default, variable.meaning());
            }
            ExitCode::SUCCESS
        }
        Some("version" | "--version") => {
            println!("watcher-agent {}", watcher_build_info::LONG_VERSION);
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn,hyper=warn,rustls=warn"));
    // Colours on a terminal only: the kubelet keeps the container log as plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_ansi(ansi).init();
    let config = match watcher_agent::judge(std::env::vars_os()) {
        Ok(config) => config,
        Err(error) => {
            // The pod's restarts and `kubectl logs` show it.
            eprintln!("watcher-agent: invalid configuration: {error}");
            return ExitCode::FAILURE;
        }
    };
    // One crypto backend for the API client's TLS, as the operator installs it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // One thread for the endpoints, the log stream and the alert sinks (the files have a thread of
    // their own): a sidecar in every watched pod keeps to what it needs.
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("watcher-agent: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(watcher_agent::run::run(config, shutdown())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("watcher-agent: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Waits for SIGTERM (the kubelet) or Ctrl-C (a terminal). Where SIGTERM cannot be listened
/// for, says so and waits for Ctrl-C alone: a sidecar never keeps its pod from running.
async fn shutdown() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; stopping on Ctrl-C (SIGINT) only");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}
