//! `watcher-operator`: the admission webhook and the controllers, in one process.

mod metrics_auth;
mod run;
mod telemetry;

use std::process::ExitCode;

// Two workers whatever the node's size: the work is waiting on the network, and every worker
// costs a stack and an allocator arena (the default is one per core: 64 on a 64-core node).
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            // One line with every cause once, for people and for `kubectl logs` alike (kube's
            // errors often repeat their source in their own message).
            eprintln!("error: {}", watcher_cli::causes(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<bool> {
    // One crypto backend for the webhook's TLS and kube's client, chosen before either starts.
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
    let cli = watcher_cli::Cli::parse_args();
    telemetry::init_tracing(cli.log_format(), cli.default_log_filter())?;
    match cli.job() {
        watcher_cli::Job::Operator(args) => run::run(*args).await.map(|()| true),
        watcher_cli::Job::Command(command) => watcher_cli::execute(*command).await,
    }
}
