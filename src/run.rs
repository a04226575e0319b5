//! `watcher-operator run`: wires the caches, servers and controllers of one replica.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use futures::{FutureExt, StreamExt, future};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use kube_lease_manager::LeaseManagerBuilder;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{info, warn};
use watcher_api::Watcher;
use watcher_controller::{Context, Metrics};

use crate::cli::{ControllerName, RunArgs};
use crate::telemetry::{Readiness, serve_admin};

/// The Lease whose holder runs the controllers.
const LEASE_NAME: &str = "watcher-operator";
/// How long a leader's lease lasts without renewal, and how early it renews.
const LEASE_SECONDS: u64 = 15;
const LEASE_GRACE_SECONDS: u64 = 5;
/// How long in-flight work may take to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(25);
/// Where a pod finds its own namespace.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot reach Kubernetes (tried in-cluster config, KUBECONFIG, ~/.kube/config)")?;
    let namespace = args.namespace.clone().unwrap_or_else(|| own_namespace(&client));
    info!(namespace, controllers = ?args.controllers, leader_election = args.leader_election, "starting");

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let shutdown = move || {
        let mut rx = shutdown_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let mut registry = Registry::default();
    let mut readiness = Readiness::default();
    let metrics = Metrics::register(&mut registry);

    // Every replica keeps the Watchers in memory: the webhook answers from this cache.
    let cache_synced = readiness.gate("watcher-cache");
    let (watchers, writer) = reflector::store::<Watcher>();
    let watcher_stream = watcher(Api::<Watcher>::all(client.clone()), watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(|watcher| watcher.managed_fields_mut().clear())
        .reflect(writer)
        .for_each(|_| future::ready(()));
    let cache_shutdown = shutdown();
    let cache = tokio::spawn(async move {
        tokio::select! {
            () = watcher_stream => {},
            () = cache_shutdown => {},
        }
    });
    let ready_watchers = watchers.clone();
    tokio::spawn(async move {
        if ready_watchers.wait_until_ready().await.is_ok() {
            info!(watchers = ready_watchers.len(), "watcher cache synced");
            cache_synced.store(true, Ordering::Release);
        }
    });

    let admin = serve_admin(args.metrics_addr, registry, readiness, shutdown()).await?;
    let admin = tokio::spawn(admin);

    let ctx = Arc::new(Context::new(client.clone(), metrics));
    let controllers = tokio::spawn(run_controllers_while_leader(
        client,
        namespace,
        args.controllers.clone(),
        args.leader_election,
        ctx,
        shutdown(),
    ));

    shutdown_signal().await;
    info!("shutting down");
    let _ = shutdown_tx.send(true);
    let stopped = future::join3(cache, admin, controllers);
    if tokio::time::timeout(SHUTDOWN_GRACE, stopped).await.is_err() {
        warn!("work still in flight after {SHUTDOWN_GRACE:?}; exiting anyway");
    }
    Ok(())
}

/// The namespace of the pod this runs in, else the kubeconfig context's.
fn own_namespace(client: &Client) -> String {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .map(|ns| ns.trim().to_owned())
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned())
}

/// Waits for SIGTERM (the kubelet) or Ctrl-C (a terminal).
async fn shutdown_signal() {
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM");
                future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        () = terminate => {},
    }
}

/// Runs the chosen controllers; with leader election only while this replica holds the Lease.
async fn run_controllers_while_leader(
    client: Client,
    namespace: String,
    names: Vec<ControllerName>,
    leader_election: bool,
    ctx: Arc<Context>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    if !leader_election {
        tokio::select! {
            () = run_controllers(&names, ctx) => {},
            () = &mut shutdown => {},
        }
        return;
    }

    let mut builder = LeaseManagerBuilder::new(client, LEASE_NAME)
        .with_namespace(&namespace)
        .with_duration(LEASE_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS);
    if let Ok(pod) = std::env::var("POD_NAME") {
        builder = builder.with_identity(pod);
    }
    let manager = match builder.build().await {
        Ok(manager) => manager,
        Err(error) => {
            warn!(%error, namespace, "cannot set up leader election; controllers stay off");
            return;
        }
    };
    let (mut leader, lease_task) = manager.watch().await;
    loop {
        tokio::select! {
            changed = leader.wait_for(|is_leader| *is_leader) => if changed.is_err() { break },
            () = &mut shutdown => break,
        }
        info!(lease = LEASE_NAME, namespace, "became leader: starting controllers");
        tokio::select! {
            () = run_controllers(&names, ctx.clone()) => break,
            lost = leader.wait_for(|is_leader| !*is_leader) => {
                warn!(lease = LEASE_NAME, "lost the lease: controllers stopped");
                if lost.is_err() { break }
            }
            () = &mut shutdown => break,
        }
    }
    // Closing the channel ends the lease task; releasing lets another replica lead at once.
    drop(leader);
    match lease_task.await {
        Ok(Ok(manager)) => {
            if let Err(error) = manager.release().await {
                warn!(%error, "cannot release the lease");
            }
        }
        Ok(Err(error)) => warn!(%error, "leader election failed"),
        Err(error) => warn!(%error, "leader election task failed"),
    }
}

/// Runs the named controllers until they all stop (on SIGTERM).
async fn run_controllers(names: &[ControllerName], ctx: Arc<Context>) {
    let runs = names.iter().map(|name| match name {
        ControllerName::Watcher => watcher_controller::watcher::run(ctx.clone()).boxed(),
    });
    future::join_all(runs).await;
}
