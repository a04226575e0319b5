//! `watcher-operator run`: wires the caches, servers and controllers of one replica.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use futures::{FutureExt, future};
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use watcher_admission::pod_security::SharedDefaults;
use watcher_admission::{InjectOptions, server_minor, supports_native_sidecars};
use watcher_cache::{PolicyCache, RevisionCache, WatcherCache};
use watcher_certs::registration::{Registrar, Registration};
use watcher_certs::secret::{Lifetimes, SelfManaged};
use watcher_certs::{CertFiles, CertStore, server_config, service_hosts};
use watcher_cli::{ControllerName, RunArgs};
use watcher_controller::scope::ScopeWriter;
use watcher_controller::{Context, pod_security_probe};
use watcher_webhook::{Reviewer, router, serve_tls};

use crate::telemetry::{MetricsServing, Readiness, serve_health, serve_metrics};

/// The Lease whose holder runs the controllers.
const LEASE_NAME: &str = "watcher-operator";
/// How long a leader's lease lasts without renewal, and how early it renews.
const LEASE_SECONDS: u64 = 15;
const LEASE_GRACE_SECONDS: u64 = 5;
/// How long in-flight work may take to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(25);
/// How long the controllers' reconciles in flight may take to finish at shutdown, before the
/// Lease is released (within [`SHUTDOWN_GRACE`]).
const CONTROLLERS_GRACE: Duration = Duration::from_secs(10);
/// After SIGTERM the webhook reports unready this long before it stops accepting connections,
/// so the Service's endpoints drop this pod first.
const ENDPOINT_DRAIN: Duration = Duration::from_secs(3);
/// How long the webhook waits for the revision cache's list before it serves anyway.
const REVISIONS_WAIT: Duration = Duration::from_secs(10);
/// How often `--tls-cert-file`/`--tls-key-file` are checked for a new certificate.
const CERT_FILE_CHECK: Duration = Duration::from_secs(10);
/// Where a pod finds its own namespace.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The replica's shutdown, as every task it starts waits for it.
#[derive(Clone)]
struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Resolves once shutdown began.
    fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stop = self.0.clone();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    }

    /// Runs `task` until it ends or shutdown begins; `ended`, if given, is logged when the
    /// task ends first (a stream that should run for ever).
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static, ended: Option<&'static str>) -> JoinHandle<()> {
        let shutdown = self.wait();
        tokio::spawn(async move {
            tokio::select! {
                () = task => if let Some(ended) = ended { warn!("{ended}") },
                () = shutdown => {},
            }
        })
    }
}

/// Resolves on SIGTERM (the kubelet) or Ctrl-C (a terminal). Listened for before anything
/// starts: a replica that cannot hear SIGTERM would hold its Lease and its webhook past its
/// pod's end, so it refuses to start.
fn termination() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
    })
}

/// What the controllers read of the caches.
struct CacheView {
    watchers: WatcherCache,
    policies: PolicyCache,
    revisions: RevisionCache,
    ready: watch::Receiver<bool>,
}

/// The caches every replica keeps, their tasks, and the signal that the controllers may start.
struct Caches {
    watchers: WatcherCache,
    policies: PolicyCache,
    revisions: RevisionCache,
    tasks: Vec<JoinHandle<()>>,
    /// True once the Watchers, ClusterWatchers, ImagePolicies and namespaces are listed.
    ready: watch::Receiver<bool>,
}

/// The webhook as served: its task, how it is told to stop, its readiness, and the upkeep of
/// its certificate.
struct Webhook {
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
    tls_ready: Arc<std::sync::atomic::AtomicBool>,
    cert_upkeep: Option<JoinHandle<()>>,
}

/// Runs one replica: the caches, the webhook, the health and metrics servers, and (while it
/// leads) the controllers, until SIGTERM; then drains the webhook and stops the rest within
/// [`SHUTDOWN_GRACE`].
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot reach Kubernetes (tried in-cluster config, KUBECONFIG, ~/.kube/config)")?;
    let namespace = args.namespace.clone().unwrap_or_else(|| own_namespace(&client));
    info!(
        version = watcher_build_info::VERSION,
        revision = watcher_build_info::REVISION,
        profile = watcher_build_info::PROFILE,
        target = watcher_build_info::TARGET,
        namespace,
        controllers = ?args.controllers,
        leader_election = args.leader_election,
        "starting"
    );
    let terminated = termination()?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let shutdown = Shutdown(shutdown_rx);
    let mut readiness = Readiness::default();
    let caches = start_caches(&args, &client, &namespace, &mut readiness, &shutdown);
    let tls_ready = readiness.gate("webhook-tls");
    let (certs, cert_upkeep) = start_certificates(&args, &client, &namespace, shutdown.wait()).await?;
    let (registry, metrics, webhook_metrics) = crate::telemetry::registry(&caches.watchers, certs.clone());
    let tls_config = Arc::new(server_config(certs.clone())?);
    let reviewer = reviewer(&args, &client, &namespace, &caches).await;
    let listener = tokio::net::TcpListener::bind(args.webhook_addr)
        .await
        .with_context(|| format!("cannot listen on --webhook-addr {}", args.webhook_addr))?;
    let (stop, stopped) = watch::channel(false);
    let app = router(reviewer, webhook_metrics);
    let task = tokio::spawn(serve_webhook(listener, tls_config.clone(), app, certs, tls_ready.clone(), stopped));
    let webhook = Webhook { task, stop, tls_ready, cert_upkeep };
    let metrics_serving = if args.metrics_secure {
        MetricsServing::Secure { tls: tls_config, auth: crate::metrics_auth::MetricsAuth::new(client.clone()) }
    } else {
        MetricsServing::Plain
    };
    let health = tokio::spawn(serve_health(args.health_addr, readiness, shutdown.wait()).await?);
    let metrics_server =
        tokio::spawn(serve_metrics(args.metrics_addr, registry, metrics_serving, shutdown.wait()).await?);
    let ctx = Arc::new(Context::new(client.clone(), metrics).with_shutdown(shutdown.0.clone()));
    let controllers = start_controllers(&args, client, namespace, ctx, caches.view(), &shutdown);

    terminated.await;
    let servers = future::join(health, metrics_server);
    drain_and_stop(webhook, &shutdown_tx, future::join3(future::join_all(caches.tasks), servers, controllers)).await;
    Ok(())
}

/// The admission's reviewer: how this cluster is injected (its version, native sidecars), from
/// the caches.
async fn reviewer(args: &RunArgs, client: &Client, namespace: &str, caches: &Caches) -> Reviewer<WatcherCache> {
    let (native_sidecars, server_minor) = server_version(client).await;
    let options = InjectOptions {
        excluded_namespaces: vec![namespace.to_owned()],
        native_sidecars,
        server_minor,
        supervisor_image: args.supervisor_image.clone(),
    };
    Reviewer::new(caches.watchers.clone(), options)
        .with_policies(Arc::new(caches.policies.clone()))
        .with_revisions(Arc::new(caches.revisions.clone()))
}

/// The controllers, run while this replica leads (or always, without leader election).
fn start_controllers(
    args: &RunArgs,
    client: Client,
    namespace: String,
    ctx: Arc<Context>,
    caches: CacheView,
    shutdown: &Shutdown,
) -> JoinHandle<()> {
    let sync_namespaces =
        if args.sync_namespaces.is_empty() { vec![namespace.clone()] } else { args.sync_namespaces.clone() };
    let controllers = Controllers {
        ctx,
        registration: registration(args, &namespace),
        cache: caches.watchers,
        revisions: caches.revisions,
        policies: caches.policies,
        cache_ready: caches.ready,
        sync_namespaces,
        sync_secrets: args.sync_secrets,
        supervisor_image: args.supervisor_image.clone(),
    };
    let (names, leader_election) = (args.controllers.clone(), args.leader_election);
    tokio::spawn(run_controllers_while_leader(client, namespace, names, leader_election, controllers, shutdown.wait()))
}

/// The shutdown after SIGTERM: the webhook reports unready for [`ENDPOINT_DRAIN`] (the
/// Service's endpoints drop this pod first), finishes the admissions in flight and stops; then
/// every other task is told, and waited for at most [`SHUTDOWN_GRACE`].
async fn drain_and_stop(webhook: Webhook, shutdown: &watch::Sender<bool>, rest: impl Future) {
    info!("shutting down: webhook unready, draining");
    webhook.tls_ready.store(false, Ordering::Release);
    tokio::time::sleep(ENDPOINT_DRAIN).await;
    let _ = webhook.stop.send(true);
    let _ = webhook.task.await; // in-flight admissions finish first
    let _ = shutdown.send(true);
    let cert_upkeep = async move {
        if let Some(task) = webhook.cert_upkeep {
            let _ = task.await;
        }
    };
    if tokio::time::timeout(SHUTDOWN_GRACE, future::join(rest, cert_upkeep)).await.is_err() {
        warn!("work still in flight after {SHUTDOWN_GRACE:?}; exiting anyway");
    }
}

/// Starts the caches every replica keeps: the Watchers in memory, once (the webhook answers
/// from them and the leader's controllers read them too); ImagePolicies and namespace labels
/// (the Watcher cache reads the namespaces' labels for ClusterWatchers); the cluster's Pod
/// Security admission configuration, one for admission and controllers (as configured, or
/// learned from kube-apiserver once the namespaces are listed); the Watchers' revisions.
fn start_caches(
    args: &RunArgs,
    client: &Client,
    namespace: &str,
    readiness: &mut Readiness,
    shutdown: &Shutdown,
) -> Caches {
    let cache_synced = readiness.gate("watcher-cache");
    let policies_synced = readiness.gate("image-policy-cache");
    let (mut policy_cache, fill_policies) = PolicyCache::new(client.clone());
    let (mut watcher_cache, fill) = WatcherCache::new(client.clone(), policy_cache.namespaces.clone(), namespace);
    let pod_security = SharedDefaults::default();
    policy_cache.pod_security = pod_security.clone();
    watcher_cache.pod_security = pod_security.clone();
    match args.pod_security_config.clone() {
        Some(configured) => {
            info!(
                configuration = configured.describe(),
                "Pod Security admission configuration from --pod-security-config"
            );
            pod_security.set(configured);
        }
        None => {
            let namespaces = policy_cache.namespaces.clone();
            let learn = learn_pod_security(client.clone(), namespaces, namespace.to_owned(), pod_security.clone());
            shutdown.spawn(learn, None);
        }
    }
    let mut tasks = vec![
        shutdown.spawn(fill, Some("the watcher cache stream ended")),
        shutdown.spawn(fill_policies, Some("the image policy cache stream ended")),
    ];
    // The Watchers' revisions, likewise: admission injects a held rollout's stable revision
    // from them, so the webhook waits for their list too, for at most REVISIONS_WAIT (a list
    // that fails, say for want of RBAC, must not keep the webhook down: until the cache has a
    // revision, admission injects the current spec with a warning).
    let revisions_synced = readiness.gate("revision-cache");
    let (revision_cache, fill_revisions) = RevisionCache::new(client.clone(), namespace);
    let ready_revisions = revision_cache.store.clone();
    tokio::spawn(async move {
        match tokio::time::timeout(REVISIONS_WAIT, ready_revisions.wait_until_ready()).await {
            Ok(Ok(())) => info!(revisions = ready_revisions.len(), "revision cache synced"),
            Ok(Err(error)) => warn!(%error, "the revision cache stopped before it synced"),
            Err(_) => warn!(
                "the revision cache is not listed after {REVISIONS_WAIT:?}: until it is, pods created during a \
                 held rollout get the current spec (with a warning); the webhook serves meanwhile"
            ),
        }
        revisions_synced.store(true, Ordering::Release);
    });
    tasks.push(shutdown.spawn(fill_revisions, Some("the revision cache stream ended")));
    let (ready_watchers, ready_cluster) = (watcher_cache.store.clone(), watcher_cache.cluster.clone());
    let (ready_policies, ready_namespaces) = (policy_cache.policies.clone(), policy_cache.namespaces.clone());
    // The only task that waits on these stores: kube's `Store::wait_until_ready` wakes just one
    // of several concurrent waiters, so the controllers (which read them) start after this.
    let (cache_ready_tx, ready) = watch::channel(false);
    tokio::spawn(async move {
        match futures::future::try_join(ready_watchers.wait_until_ready(), ready_cluster.wait_until_ready()).await {
            Ok(_) => {
                info!(watchers = ready_watchers.len(), cluster_watchers = ready_cluster.len(), "watcher cache synced");
                cache_synced.store(true, Ordering::Release);
            }
            Err(error) => return warn!(%error, "the watcher cache stopped before it synced"),
        }
        match futures::future::try_join(ready_policies.wait_until_ready(), ready_namespaces.wait_until_ready()).await {
            Ok(_) => {
                info!(policies = ready_policies.len(), "image policy cache synced");
                policies_synced.store(true, Ordering::Release);
                let _ = cache_ready_tx.send(true);
            }
            Err(error) => warn!(%error, "the image policy cache stopped before it synced"),
        }
    });
    Caches { watchers: watcher_cache, policies: policy_cache, revisions: revision_cache, tasks, ready }
}

impl Caches {
    /// The caches, for the controllers (the tasks stay with the replica).
    fn view(&self) -> CacheView {
        CacheView {
            watchers: self.watchers.clone(),
            policies: self.policies.clone(),
            revisions: self.revisions.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// Serves the webhook once the certificate is loaded, until `stop`.
async fn serve_webhook(
    listener: tokio::net::TcpListener,
    tls_config: Arc<rustls::ServerConfig>,
    app: axum::Router,
    certs: Arc<CertStore>,
    tls_ready: Arc<std::sync::atomic::AtomicBool>,
    mut stop: watch::Receiver<bool>,
) {
    while !certs.is_loaded() {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(50)) => {},
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
    serve_tls(listener, tls_config, app, tls_ready, async move {
        let _ = stop.wait_for(|stop| *stop).await;
    })
    .await;
}

/// Loads the serving certificate from files, or starts the self-managed certificates; the
/// returned store is (or soon becomes) loaded. The self-managed upkeep ends at `shutdown`, after
/// restoring the registration a run by URL replaced: the caller awaits its task.
async fn start_certificates(
    args: &RunArgs,
    client: &Client,
    namespace: &str,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<(Arc<CertStore>, Option<tokio::task::JoinHandle<()>>)> {
    let store = Arc::new(CertStore::default());
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_key_file) {
        let files = CertFiles { cert: cert.clone(), key: key.clone() };
        files.load_into(&store).context("cannot serve --tls-cert-file/--tls-key-file")?;
        info!(cert = %cert.display(), "serving the certificate from files, reloaded when they change");
        tokio::spawn(files.watch(store.clone(), CERT_FILE_CHECK));
        return Ok((store, None));
    }
    let mut hosts = service_hosts(&args.service_name, namespace);
    hosts.extend(args.webhook_url.as_deref().and_then(url_host));
    let registration = registration(args, namespace);
    let manager = SelfManaged {
        client: client.clone(),
        namespace: namespace.to_owned(),
        hosts,
        registrar: Registrar::new(registration, namespace),
        lifetimes: Lifetimes::default(),
    };
    let upkeep = tokio::spawn(manager.run(store.clone(), shutdown));
    Ok((store, Some(upkeep)))
}

/// How kube-apiserver reaches this operator's webhook: by `--webhook-url`, else by the Service.
fn registration(args: &RunArgs, namespace: &str) -> Registration {
    match &args.webhook_url {
        Some(url) => Registration::Url(url.clone()),
        None => Registration::Service { name: args.service_name.clone(), namespace: namespace.to_owned() },
    }
}

/// The host of a webhook URL, without the brackets of an IPv6 address.
fn url_host(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    Some(uri.host()?.trim_start_matches('[').trim_end_matches(']').to_owned())
}

/// Asks the API server its version once: native sidecars need Kubernetes 1.29 or later, and
/// Pod Security's `latest` is the server's own version.
async fn server_version(client: &Client) -> (bool, Option<u32>) {
    match client.apiserver_version().await {
        Ok(info) => {
            let supported = supports_native_sidecars(&info.major, &info.minor);
            info!(version = info.git_version, native_sidecars = supported, "API server version");
            (supported, server_minor(&info.major, &info.minor))
        }
        Err(error) => {
            warn!(%error, "cannot read the API server version; injecting sidecars as regular containers");
            (false, None)
        }
    }
}

/// How often the Pod Security defaults are learned again (kube-apiserver's configuration
/// changes only with a restart of it).
const POD_SECURITY_RELEARN: Duration = Duration::from_secs(60 * 60);

/// Learns the cluster's Pod Security defaults from kube-apiserver (`pod_security_probe`) in a
/// namespace without Pod Security labels, once the namespaces are listed, then every
/// [`POD_SECURITY_RELEARN`]; what cannot be learned is said once and left as it is.
async fn learn_pod_security(
    client: Client,
    namespaces: kube::runtime::reflector::Store<watcher_cache::NamespaceMeta>,
    own: String,
    shared: SharedDefaults,
) {
    if namespaces.wait_until_ready().await.is_err() {
        return;
    }
    let mut said = false;
    loop {
        let listed = namespaces.state();
        let named = listed
            .iter()
            .map(|n| (n.metadata.name.as_deref().unwrap_or_default(), kube::ResourceExt::labels(n.as_ref())));
        let outcome = match pod_security_probe::unlabelled_namespace(named, &own) {
            Some(namespace) => pod_security_probe::probe(&client, &namespace).await,
            None => Err(pod_security_probe::ProbeError::NoUnlabelledNamespace),
        };
        match outcome {
            Ok(learned) => {
                if *shared.get() != learned.defaults || !said {
                    info!(
                        namespace = learned.namespace,
                        defaults = learned.defaults.describe(),
                        "Pod Security defaults learned from kube-apiserver (namespaces without labels)"
                    );
                }
                shared.set(learned.defaults);
                said = true;
            }
            Err(error) if !said => {
                warn!(
                    %error,
                    "cannot learn the Pod Security defaults from kube-apiserver: namespaces without labels are taken \
                     to enforce nothing (see --pod-security-config)"
                );
                said = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(POD_SECURITY_RELEARN).await;
    }
}

/// The namespace of the pod this runs in, else the kubeconfig context's.
fn own_namespace(client: &Client) -> String {
    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
        .map(|ns| ns.trim().to_owned())
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned())
}

/// Runs the chosen controllers; with leader election only while this replica holds the Lease.
async fn run_controllers_while_leader(
    client: Client,
    namespace: String,
    names: Vec<ControllerName>,
    leader_election: bool,
    controllers: Controllers,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let metrics = controllers.ctx.metrics.clone();
    if !leader_election {
        metrics.set_leader(true);
        let run = controllers.run(&names, &namespace);
        let mut run = std::pin::pin!(run);
        let shutting_down = tokio::select! {
            () = &mut run => false,
            () = &mut shutdown => true,
        };
        if shutting_down {
            // The controllers end by themselves, their reconciles in flight finished.
            let _ = tokio::time::timeout(CONTROLLERS_GRACE, &mut run).await;
        }
        metrics.set_leader(false);
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
        metrics.set_leader(true);
        let run = controllers.run(&names, &namespace);
        let mut run = std::pin::pin!(run);
        let (stop, shutting_down) = tokio::select! {
            () = &mut run => (true, false),
            lost = leader.wait_for(|is_leader| !*is_leader) => {
                warn!(lease = LEASE_NAME, "lost the lease: controllers stopped");
                (lost.is_err(), false)
            }
            () = &mut shutdown => (true, true),
        };
        if shutting_down {
            // The controllers end by themselves, their reconciles in flight finished, before
            // the Lease is released.
            let _ = tokio::time::timeout(CONTROLLERS_GRACE, &mut run).await;
        }
        metrics.set_leader(false);
        if stop {
            break;
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

/// What the controllers share: the context and the caches.
struct Controllers {
    ctx: Arc<Context>,
    /// How this operator's webhook is registered (the admission scope is written by the
    /// operator whose registration stands).
    registration: Registration,
    cache: WatcherCache,
    /// The Watchers' revisions (the webhook reads them too).
    revisions: RevisionCache,
    policies: PolicyCache,
    cache_ready: watch::Receiver<bool>,
    /// Where sync sources live.
    sync_namespaces: Vec<String>,
    /// Whether Secrets are synced (else ConfigMaps only).
    sync_secrets: bool,
    /// The supervisor's image: the sidecars of pods that end are switched to it.
    supervisor_image: String,
}

impl Controllers {
    /// Runs the named controllers and the admission scope's writer, once the caches have
    /// synced, until they all stop (at shutdown: the process's one signal, through the Context).
    async fn run(&self, names: &[ControllerName], namespace: &str) {
        if self.cache_ready.clone().wait_for(|ready| *ready).await.is_err() {
            return;
        }
        let (scope_writer, scope) = ScopeWriter::new(
            self.ctx.client.clone(),
            self.registration.clone(),
            namespace.to_owned(),
            self.cache.clone(),
            self.policies.clone(),
        );
        let scope_writer = scope_writer.with_metrics(self.ctx.metrics.clone());
        // The writer runs as long as the controllers do (they end at shutdown), and stops with
        // them when the lease is lost: only the leader writes.
        let runs = names.iter().map(|name| match name {
            ControllerName::Watcher => watcher_controller::watchers::run(
                self.ctx.clone(),
                self.cache.clone(),
                self.revisions.clone(),
                scope.clone(),
                self.policies.changes(),
            )
            .boxed(),
            ControllerName::Pods => {
                let (ctx, cache, revisions) = (self.ctx.clone(), self.cache.clone(), self.revisions.clone());
                let ending = watcher_controller::ending::run(ctx.clone(), self.supervisor_image.clone());
                let drift = watcher_controller::pods::run(ctx, cache, revisions, self.policies.clone());
                future::join(drift, ending).map(|_| ()).boxed()
            }
            ControllerName::At => watcher_controller::at::run(self.ctx.clone()).boxed(),
            ControllerName::Podset => watcher_controller::podset::run(self.ctx.clone()).boxed(),
            ControllerName::Images => watcher_controller::images::run(self.ctx.clone(), self.policies.clone()).boxed(),
            ControllerName::Sync => {
                watcher_controller::sync::run(self.ctx.clone(), self.sync_namespaces.clone(), self.sync_secrets).boxed()
            }
        });
        let writer = scope_writer.run().then(|()| future::pending::<()>());
        tokio::select! {
            _ = future::join_all(runs) => {},
            () = writer => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `--tls-cert-file` (cert-manager), the operator serves the files and never touches
    /// the webhook configuration or its caBundle: not one request to the API server.
    #[tokio::test]
    async fn served_files_mean_no_registration_and_no_ca_bundle() {
        let dir = std::env::temp_dir().join(format!("watcher-run-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (ca, _) = watcher_certs::Authority::generate(Duration::from_secs(3600)).expect("CA");
        let serving =
            ca.issue(&["watcher-operator.watcher-system.svc".to_owned()], Duration::from_secs(600)).expect("cert");
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert, &serving.cert_pem).expect("cert written");
        std::fs::write(&key, &serving.key_pem).expect("key written");
        let args = watcher_cli::run_args(&[
            "--tls-cert-file",
            cert.to_str().expect("UTF-8"),
            "--tls-key-file",
            key.to_str().expect("UTF-8"),
        ])
        .expect("run parses");
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let client = Client::new(service, "watcher-system");
        let (store, upkeep) =
            start_certificates(&args, &client, "watcher-system", future::pending()).await.expect("files served");
        assert!(store.is_loaded() && upkeep.is_none());
        let request = tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await;
        assert!(request.is_err(), "no request to the API server");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn url_hosts_are_dns_names_or_bare_ips() {
        assert_eq!(url_host("https://127.0.0.1:8443/mutate").as_deref(), Some("127.0.0.1"));
        assert_eq!(url_host("https://[::1]:8443/mutate").as_deref(), Some("::1"));
        assert_eq!(url_host("https://webhook.example.com/mutate").as_deref(), Some("webhook.example.com"));
    }
}
