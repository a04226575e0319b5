//! The agent running: files followed on a thread of their own (blocking reads), the log stream
//! and the Events on the async runtime, the endpoints served until after SIGTERM.
//!
//! On SIGTERM (or SIGINT) reading stops, the alerts still to say are said, and `/metrics` waits
//! for one last scrape (at most `AGENT_SHUTDOWN_LINGER`) before the process exits 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::alertmanager::{Alertmanager, REPOST_EVERY, State};
use crate::config::{Config, PodIdentity, Start};
use crate::events::EventPublisher;
use crate::follow::{Follower, SourceError};
use crate::logs::{Ended, Resume, backoff, stream_once};
use crate::metrics::Metrics;
use crate::processor::{FileSink, Processor};
use crate::server::{Endpoints, router};

/// How often alerts are looked at (resolved, said).
const ALERT_TICK: Duration = Duration::from_secs(1);
/// A firing alert's Event grows at most this often (its first occurrence is said at once).
const SERIES_EVERY: Duration = Duration::from_secs(10);

/// The source name of the log stream in metrics.
pub const STDOUT_SOURCE: &str = "stdout";

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The listen address is taken or not allowed.
    #[error("cannot listen on AGENT_LISTEN {addr}: {error}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// A rule did not compile with the others (each compiles alone: the set's size limit).
    #[error("AGENT_RULE_<NAME>: the rules do not compile together: {0}")]
    Rules(regex::Error),
}

fn lock(processor: &Mutex<Processor>) -> MutexGuard<'_, Processor> {
    processor.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<(), RunError> {
    let mut sources = config.files.clone();
    if config.logs_container.is_some() {
        sources.push(STDOUT_SOURCE.to_owned());
    }
    let names: Vec<String> = config.rules.iter().map(|r| r.name.clone()).collect();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry, &sources, &names);
    let processor = Processor::new(&config.rules, sources.len(), metrics).map_err(RunError::Rules)?;
    let processor = Arc::new(Mutex::new(processor));
    let endpoints =
        Arc::new(Endpoints { registry, ready: AtomicBool::new(false), scraped: tokio::sync::Notify::new() });

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|error| RunError::Listen { addr: config.listen, error })?;
    info!(addr = %config.listen, "serving /metrics, /healthz and /readyz");
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, router(endpoints.clone()))
            .with_graceful_shutdown(async move {
                let _ = server_stopped.await;
            })
            .into_future(),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let files = (!config.files.is_empty()).then(|| {
        let follower = Follower::new(config.files.clone(), config.start, config.max_line_bytes);
        let (processor, stop, endpoints, poll) = (processor.clone(), stop.clone(), endpoints.clone(), config.poll);
        std::thread::Builder::new()
            .name("files".into())
            .spawn(move || follow_files(follower, &processor, &stop, &endpoints, poll))
            .ok()
    });
    if files.is_none() {
        endpoints.ready.store(true, Ordering::Release);
    }

    let needs_api =
        config.logs_container.is_some() || (config.events && config.rules.iter().any(|r| r.alert.is_some()));
    let client = if needs_api {
        match kube::Client::try_default().await {
            Ok(client) => Some(client),
            Err(error) => {
                warn!(%error, "no access to the Kubernetes API: no Events, no log stream; files are followed");
                if config.logs_container.is_some() {
                    lock(&processor).source_error(sources.len() - 1, SourceError::Permission);
                }
                None
            }
        }
    } else {
        None
    };
    let logs = match (&client, &config.logs_container, &config.pod.name, &config.pod.namespace) {
        (Some(client), Some(container), Some(pod), Some(namespace)) => Some(tokio::spawn(follow_stream(
            kube::Api::namespaced(client.clone(), namespace),
            pod.clone(),
            container.clone(),
            processor.clone(),
            sources.len() - 1,
            config.start,
            config.max_line_bytes,
        ))),
        _ => None,
    };
    let mut publisher = match (&client, config.events) {
        (Some(client), true) => {
            let publisher = EventPublisher::new(client.clone(), &config.pod);
            if publisher.is_none() {
                warn!(
                    "POD_NAME or POD_NAMESPACE unset: alerts are not said as Events (set them from the downward API)"
                );
            }
            publisher
        }
        _ => None,
    };

    let alertmanager = config.alertmanager.as_deref().and_then(Alertmanager::new);
    let mut posted: std::collections::HashMap<String, Instant> = std::collections::HashMap::new();
    let mut said: std::collections::HashMap<usize, Instant> = std::collections::HashMap::new();
    let mut ticks = tokio::time::interval(ALERT_TICK);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = ticks.tick() => {
                let resolved = say_alerts(&processor, publisher.as_mut(), &mut said, false).await;
                if let Some(alertmanager) = &alertmanager {
                    tell_alertmanager(alertmanager, &processor, &config.pod, &mut posted, resolved).await;
                }
            }
        }
    }
    info!("stopping: reading stops, the alerts left are said, /metrics waits for a last scrape");
    stop.store(true, Ordering::Release);
    if let Some(logs) = logs {
        logs.abort();
    }
    if let Some(Some(files)) = files {
        let _ = tokio::task::spawn_blocking(move || files.join()).await;
    }
    lock(&processor).flush();
    let resolved = say_alerts(&processor, publisher.as_mut(), &mut said, true).await;
    if let Some(alertmanager) = &alertmanager {
        tell_alertmanager(alertmanager, &processor, &config.pod, &mut posted, resolved).await;
    }
    if !config.shutdown_linger.is_zero() {
        let _ = tokio::time::timeout(config.shutdown_linger, endpoints.scraped.notified()).await;
    }
    let _ = stop_server.send(());
    let _ = server.await;
    info!("stopped");
    Ok(())
}

/// The files' thread: poll, count, sleep; until `stop`.
fn follow_files(
    mut follower: Follower,
    processor: &Mutex<Processor>,
    stop: &AtomicBool,
    endpoints: &Endpoints,
    poll: Duration,
) {
    while !stop.load(Ordering::Acquire) {
        let more = {
            let mut processor = lock(processor);
            let mut sink = FileSink { processor: &mut processor, now: Instant::now() };
            let more = follower.poll(&mut sink);
            processor.flush();
            more
        };
        endpoints.ready.store(true, Ordering::Release);
        if !more {
            std::thread::sleep(poll);
        }
    }
}

/// The log stream of `container`, resumed after each drop, until forbidden or aborted.
async fn follow_stream(
    pods: kube::Api<k8s_openapi::api::core::v1::Pod>,
    pod: String,
    container: String,
    processor: Arc<Mutex<Processor>>,
    source: usize,
    start: Start,
    max_line: usize,
) {
    let mut resume = match start {
        Start::End => Resume::from(k8s_openapi::jiff::Timestamp::now()),
        Start::Beginning => Resume::default(),
    };
    let mut delay = Duration::ZERO;
    let mut failing = false;
    loop {
        let began = Instant::now();
        let mut line = |line: crate::lines::Line<'_>| {
            let mut processor = lock(&processor);
            processor.line(source, line, Instant::now());
            processor.flush();
        };
        match stream_once(&pods, &pod, &container, &mut resume, max_line, &mut line).await {
            Ended::Forbidden(message) => {
                warn!(
                    message,
                    "cannot read the log stream (pods/log): the pod's ServiceAccount needs get on pods/log \
                     (docs/agent.md); following files only"
                );
                lock(&processor).source_error(source, SourceError::Permission);
                return;
            }
            Ended::Dropped(why) => {
                let lasted = began.elapsed();
                delay = backoff(delay, lasted);
                if lasted < Duration::from_secs(1) && !failing {
                    warn!(why, "the log stream failed; asking again with backoff");
                    lock(&processor).source_error(source, SourceError::Io);
                    failing = true;
                } else if lasted >= Duration::from_secs(1) {
                    failing = false;
                    info!(why, "the log stream ended; resuming from the last line seen");
                }
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Resolves what the window lets go, and says the alerts due: a first occurrence at once, more
/// of a firing one at most every [`SERIES_EVERY`] (everything when `all`). Returns the rules
/// resolved.
async fn say_alerts(
    processor: &Mutex<Processor>,
    mut publisher: Option<&mut EventPublisher>,
    said: &mut std::collections::HashMap<usize, Instant>,
    all: bool,
) -> Vec<String> {
    let (alerts, resolved) = {
        let mut processor = lock(processor);
        let resolved = processor.tick(Instant::now());
        for rule in &resolved {
            info!(rule, "alert resolved");
        }
        processor.flush();
        let alerts = processor.take_alerts();
        let (due, later): (Vec<_>, Vec<_>) =
            alerts.into_iter().partition(|a| all || said.get(&a.rule).is_none_or(|at| at.elapsed() >= SERIES_EVERY));
        for alert in later {
            processor.keep_alert(alert);
        }
        (due, resolved)
    };
    for alert in alerts {
        if !alert.note.is_empty() {
            warn!(rule = alert.name, note = alert.note, "alert firing");
        }
        let Some(publisher) = publisher.as_deref_mut() else { continue };
        let result = publisher.publish(&alert.name, &alert.reason, &alert.note, alert.occurrences).await;
        let mut processor = lock(processor);
        processor.metrics().sent("event", result.is_ok());
        match result {
            Ok(()) => {
                said.insert(alert.rule, Instant::now());
            }
            Err(error) => {
                warn!(%error, rule = alert.name, "the Event could not be sent; trying again");
                processor.keep_alert(alert);
            }
        }
    }
    resolved
}

/// Posts to Alertmanager each alert that fired (and again every [`REPOST_EVERY`] while it fires)
/// and each one `resolved`.
async fn tell_alertmanager(
    alertmanager: &Alertmanager,
    processor: &Mutex<Processor>,
    pod: &PodIdentity,
    posted: &mut std::collections::HashMap<String, Instant>,
    resolved: Vec<String>,
) {
    let firing = lock(processor).firing();
    let mut posts: Vec<(String, String, State)> = firing
        .into_iter()
        .filter(|(rule, _)| posted.get(rule).is_none_or(|at| at.elapsed() >= REPOST_EVERY))
        .map(|(rule, note)| (rule, note, State::Firing))
        .collect();
    for rule in resolved {
        if posted.remove(&rule).is_some() {
            let note = format!("rule {rule} is under its threshold again");
            posts.push((rule, note, State::Resolved));
        }
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    for (rule, note, state) in posts {
        let body = Alertmanager::body(&rule, &note, pod, state, now);
        let result = alertmanager.post(&body).await;
        let ok = matches!(result, Ok(200..=299));
        lock(processor).metrics().sent("alertmanager", ok);
        match result {
            Ok(200..=299) if state == State::Firing => {
                posted.insert(rule, Instant::now());
            }
            Ok(200..=299) => {}
            Ok(status) => warn!(status, rule, "Alertmanager refused the alert; posting it again"),
            Err(error) => warn!(error, rule, "cannot post to Alertmanager; posting it again"),
        }
    }
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            warn!(%error, "cannot handle SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
