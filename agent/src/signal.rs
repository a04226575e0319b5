//! The signal that stops a process of this project: SIGTERM (the kubelet) or Ctrl-C (a
//! terminal). One for the agent and the operator alike.

use tracing::warn;

/// Waits for SIGTERM or Ctrl-C. Where SIGTERM cannot be listened for, says so and waits for
/// Ctrl-C alone.
pub async fn shutdown() {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM; stopping on Ctrl-C (SIGINT) only");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}
