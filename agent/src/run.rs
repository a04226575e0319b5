//! The agent running. Each reader has a pipeline of its own ([`Pipeline`]): the files on a
//! thread of their own (blocking reads), the log stream in a task. The alert loop looks at the alerts
//! every second and publishes where they stand to the sinks (Events, Alertmanager), each a task
//! of its own that never holds up reading; it also writes the checkpoint. A scrape reads atomic
//! counters and waits for nobody.
//!
//! On the process's shutdown (SIGTERM or SIGINT): every file is read to its end once more and the log stream until it
//! ends or [`crate::tail::stream::DRAIN`]; the alerts are looked at a last time and the sinks say what
//! is left ([`SINK_DEADLINE`]); remote write pushes the last counts
//! ([`crate::sinks::remote_write::LAST_PUSH`]); the checkpoint is written; `/metrics` waits for one last scrape
//! (at most `AGENT_SHUTDOWN_LINGER`); the process exits 0. All of it within a pod's default
//! 30 s grace period.
//!
//! In a pod that is meant to end (`WATCHER_ENDED_FILE` set by the webhook) the agent also ends
//! by itself once that file is not empty (the app containers have ended), with no change to the
//! pod's spec and no restart counted; there it waits for no last scrape, which a pod that ends
//! rarely gets, and writes its last counts to its termination message instead, which the
//! kubelet keeps in the pod's status after the pod has ended.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::jiff::Timestamp;
use tracing::{info, warn};

use crate::config::{Config, Start};
use crate::matching::Rules;
use crate::metrics::server::{Endpoints, router};
use crate::metrics::{Metrics, Registry};
use crate::pipeline::{Compiled, Live, Pipeline, Report, SharedAlerts, Sink, SourceError};
use crate::reload::{CONFIG_POLL, Outcome, Reloader};
use crate::sinks::alertmanager::{Alertmanager, Poster};
use crate::sinks::alerts::{AlertBook, AlertState, sink_task};
use crate::sinks::events::EventPublisher;
use crate::sinks::remote_write::{LAST_PUSH, Pusher};
use crate::tail::checkpoint::{self, Checkpoint, FileMark};
use crate::tail::files::{Begin, FollowOptions, Follower};
use crate::tail::multiline::Multiline;
use crate::tail::stream::{Reader, Resume};
use watcher_base::lock;

/// How often alerts are looked at (resolved, published to the sinks), and the checkpoint
/// written.
const ALERT_TICK: Duration = Duration::from_secs(1);
/// At shutdown, the sinks say what is left within this long.
pub const SINK_DEADLINE: Duration = Duration::from_secs(3);
/// At shutdown, the log stream task is waited for this long at most (its own drain is shorter).
const STREAM_DEADLINE: Duration = Duration::from_secs(5);

/// How often the ended file is looked at.
const ENDED_TICK: Duration = Duration::from_millis(100);
/// The most the kubelet keeps of a container's termination message.
const TERMINATION_MESSAGE_BYTES: usize = 4096;

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
    Rules(String),
}

/// Runs the agent until `shutdown` resolves (the process's SIGTERM or SIGINT) or the pod's app
/// has ended.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), RunError> {
    let mut sources: Vec<String> = config.files.iter().map(|glob| glob.as_str().to_owned()).collect();
    if config.logs_container.is_some() {
        sources.push(STDOUT_SOURCE.to_owned());
    }
    let stdout_source = sources.len() - 1;
    let rules = Rules::new(&config.rules).map_err(RunError::Rules)?;
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry, &sources, &config.rules, config.max_series));
    let alerts: SharedAlerts = Arc::new(Mutex::new(AlertBook::new(&config.rules)));
    let compiled = Compiled { config: config.clone(), rules, metrics: metrics.clone() };
    let live = Live::new(compiled, alerts.clone());
    let pipeline = || Pipeline::live(&live);
    let multiline = config.multiline.as_ref().map(crate::config::MultilineConfig::build);
    let endpoints =
        Arc::new(Endpoints { registry, ready: AtomicBool::new(false), scraped: tokio::sync::Notify::new() });

    let (stop_server, server) = serve(config.listen, &endpoints).await?;

    let state_dir = config.state_dir.as_deref().and_then(usable_state_dir);
    let saved = state_dir.as_deref().map(|dir| read_checkpoint(dir, config.start));
    let (stop, stopped) = tokio::sync::watch::channel(false);

    // The files.
    let file_marks: Arc<Mutex<Vec<FileMark>>> = Arc::default();
    let files = if config.files.is_empty() {
        endpoints.ready.store(true, Ordering::Release);
        None
    } else {
        let marks = state_dir.is_some().then(|| file_marks.clone());
        start_files(&config, saved.as_ref(), pipeline(), multiline.clone(), &endpoints, marks)
    };

    // The API: the log stream, Events.
    let has_alert = config.rules.iter().any(|r| r.alert.is_some());
    let client = api_client(&config, has_alert, &mut pipeline(), stdout_source).await;
    let resume = Arc::new(Mutex::new(resume_from(saved.as_ref(), config.start)));
    let stream = start_stream(&config, client.as_ref(), pipeline(), multiline, &resume, stdout_source, stopped);

    // The sinks.
    let (publish, published) = tokio::sync::watch::channel(initial_states(&config));
    let sinks = start_sinks(&config, client.as_ref(), has_alert, published, &metrics);
    let remote_write = start_remote_write(&config, &endpoints, &metrics);

    // The configuration read again.
    let reloads = start_reloads(&live, client.as_ref(), stop.subscribe());

    // The alert loop, until SIGTERM.
    let mut states = initial_states(&config);
    let mut checkpoints = state_dir.map(|dir| Checkpoints { dir, files: file_marks, resume, last: None });
    let ended = config.ended_file.as_deref();
    let looking = Looking { live: &live, publish: &publish, series_idle: config.series_idle };
    match until_shutdown(&looking, &mut states, &mut checkpoints, ended, shutdown).await {
        Stop::Signal if ended.is_some() => info!("stopping (a pod that is meant to end): no last scrape waited for"),
        Stop::Signal => info!("stopping: the files read to their end, the log stream drained, a last scrape served"),
        Stop::Ended => info!("the pod's app containers have ended: stopping, the files read to their end"),
    }
    let _ = stop.send(true);
    if let Some(reloads) = reloads {
        let _ = reloads.await;
    }
    if let Some((handle, wake)) = files {
        let _ = wake.send(());
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
    if let Some(stream) = stream
        && tokio::time::timeout(STREAM_DEADLINE, stream).await.is_err()
    {
        warn!("the log stream did not stop in time");
    }
    look(&live, &mut states, &publish);
    drop(publish); // the sinks say what is left, and end
    for sink in sinks {
        let _ = tokio::time::timeout(SINK_DEADLINE + Duration::from_secs(1), sink).await;
    }
    if let Some((finish, pushing)) = remote_write {
        let _ = finish.send(());
        let _ = tokio::time::timeout(LAST_PUSH + Duration::from_secs(1), pushing).await;
    }
    if let Some(checkpoints) = &mut checkpoints {
        checkpoints.save().await;
    }
    if ended.is_some() {
        write_termination_message(&config.termination_log, &endpoints.registry);
    } else if !config.shutdown_linger.is_zero() {
        let _ = tokio::time::timeout(config.shutdown_linger, endpoints.scraped.notified()).await;
    }
    let _ = stop_server.send(());
    let _ = server.await;
    info!("stopped");
    Ok(())
}

/// Pushes every series by remote write, where `AGENT_REMOTE_WRITE_URL` says where: the pusher's
/// task, and what tells it to push its last counts and end.
fn start_remote_write(
    config: &Config,
    endpoints: &Arc<Endpoints>,
    metrics: &Arc<Metrics>,
) -> Option<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>)> {
    let remote = config.remote_write.as_ref()?;
    info!(url = %remote.url, every = %watcher_base::format_duration(remote.interval), "pushing every series by remote write");
    let pusher = Pusher::new(remote, &config.pod, endpoints.clone(), metrics.clone());
    let (finish, finishing) = tokio::sync::oneshot::channel();
    Some((finish, tokio::spawn(pusher.run(remote.interval, finishing))))
}

/// Follows the log stream of the watched container, when one is named and the API can be
/// reached, as source `source`, until `stop`.
fn start_stream(
    config: &Config,
    client: Option<&kube::Client>,
    mut pipeline: Pipeline,
    multiline: Option<Arc<Multiline>>,
    resume: &Arc<Mutex<Resume>>,
    source: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(client), Some(container), Some(pod), Some(namespace)) =
        (client, &config.logs_container, &config.pod.name, &config.pod.namespace)
    else {
        return None;
    };
    let pods = kube::Api::namespaced(client.clone(), namespace);
    let (pod, container, resume) = (pod.clone(), container.clone(), resume.clone());
    let (max_line, idle) = (config.max_line_bytes, config.stream_idle);
    Some(tokio::spawn(async move {
        let events = crate::tail::lines::LineBuffer::joining(max_line, multiline.as_ref());
        let reader = Reader { pipeline: &mut pipeline, source, resume: &resume, max_line, idle, events };
        crate::tail::stream::follow(pods, pod, container, reader, stop).await;
    }))
}

/// Looks at the configuration directory (`AGENT_CONFIG_DIR`) every [`CONFIG_POLL`] until
/// `stop`, where it exists: a change is swapped into `live` or refused, and said (the log, the
/// metrics, an Event on the pod through `client`).
fn start_reloads(
    live: &Arc<Live>,
    client: Option<&kube::Client>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut reloader = Reloader::new(live, std::env::vars_os().collect())?;
    let pod = live.current().config.pod.clone();
    let said = live.current().config.events.then(|| client.cloned()).flatten();
    let dir = live.current().config.config_dir.display().to_string();
    info!(dir, hash = reloader.running(), "following the configuration directory: a change is taken without a restart");
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(CONFIG_POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = ticks.tick() => {}
            }
            // Reading files and compiling rules: off the one thread that serves the endpoints.
            let looked = tokio::task::spawn_blocking(move || {
                let outcome = reloader.look();
                (reloader, outcome)
            });
            let Ok((back, outcome)) = looked.await else { break };
            reloader = back;
            match &outcome {
                Outcome::Unchanged => continue,
                Outcome::Applied { hash, restart_only } if restart_only.is_empty() => {
                    info!(hash, "configuration applied");
                }
                Outcome::Applied { hash, restart_only } => {
                    info!(
                        hash,
                        next_start = restart_only.join(","),
                        "configuration applied; some variables are taken at the next start"
                    );
                }
                Outcome::Refused(why) => warn!(%why, "configuration refused: the last good one runs on"),
            }
            if let (Some(client), Some((warning, reason, note))) = (&said, outcome.event()) {
                crate::sinks::events::notice(client, &pod, warning, reason, &note).await;
            }
        }
    }))
}

/// What the alert loop looks at every tick.
#[derive(Clone, Copy)]
struct Looking<'a> {
    /// The configuration that runs: its alerts, its metrics.
    live: &'a Arc<Live>,
    publish: &'a tokio::sync::watch::Sender<Vec<AlertState>>,
    /// `AGENT_SERIES_IDLE`.
    series_idle: Option<Duration>,
}

/// Why the agent stops.
enum Stop {
    /// SIGTERM or SIGINT.
    Signal,
    /// The ended file says the pod's app containers have ended.
    Ended,
}

/// Whether `file` says that the app has ended: there and not empty (the downward API writes an
/// annotation that is not there as an empty file).
fn has_ended(file: &Path) -> bool {
    std::fs::metadata(file).is_ok_and(|m| m.len() > 0)
}

/// Writes what a last scrape would have read to `path`, the container's termination message,
/// where the kubelet made it (never elsewhere); a failure is said.
fn write_termination_message(path: &Path, registry: &Registry) {
    if !path.exists() {
        return;
    }
    let counts = crate::metrics::last_counts(registry, TERMINATION_MESSAGE_BYTES);
    match std::fs::write(path, counts) {
        Ok(()) => info!(path = %path.display(), "the last counts are in the termination message"),
        Err(error) => warn!(path = %path.display(), %error, "cannot write the last counts to the termination message"),
    }
}

/// The alert loop: every tick the alerts are looked at and the checkpoints saved, until SIGTERM
/// or SIGINT, or until `ended` says the app has ended.
async fn until_shutdown(
    looking: &Looking<'_>,
    states: &mut Vec<AlertState>,
    checkpoints: &mut Option<Checkpoints>,
    ended: Option<&Path>,
    shutdown: impl Future<Output = ()>,
) -> Stop {
    let Looking { live, publish, series_idle } = *looking;
    let mut ticks = tokio::time::interval(ALERT_TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ended_ticks = tokio::time::interval(ENDED_TICK);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return Stop::Signal,
            _ = ended_ticks.tick(), if ended.is_some() => {
                if ended.is_some_and(has_ended) {
                    return Stop::Ended;
                }
            }
            _ = ticks.tick() => {
                look(live, states, publish);
                if let Some(idle) = series_idle {
                    live.current().metrics.expire(idle, Instant::now());
                }
                if let Some(checkpoints) = checkpoints {
                    checkpoints.save().await;
                }
            }
        }
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until told to stop.
async fn serve(
    addr: std::net::SocketAddr,
    endpoints: &Arc<Endpoints>,
) -> Result<(tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>), RunError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|error| RunError::Listen { addr, error })?;
    info!(%addr, "serving /metrics, /healthz and /readyz");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, router(endpoints.clone()))
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .into_future(),
    );
    Ok((stop, server))
}

/// The files' thread, following `config.files` from where `saved` (the checkpoint, with
/// `AGENT_STATE_DIR`) says; `None` where it cannot start (said, and the agent serves without).
fn start_files(
    config: &Config,
    saved: Option<&Option<Checkpoint>>,
    pipeline: Pipeline,
    multiline: Option<Arc<Multiline>>,
    endpoints: &Arc<Endpoints>,
    marks: Option<Arc<Mutex<Vec<FileMark>>>>,
) -> Option<(std::thread::JoinHandle<()>, mpsc::Sender<()>)> {
    let begin = match saved {
        None => Begin::Fresh,
        Some(None) => Begin::FirstInPod,
        Some(Some(saved)) => Begin::Restart {
            files: saved.files.clone(),
            since: SystemTime::UNIX_EPOCH + Duration::from_secs(saved.written),
        },
    };
    let options = FollowOptions {
        globs: config.files.clone(),
        start: config.start,
        max_line: config.max_line_bytes,
        rotate_wait: config.rotate_wait,
        ignore_older: config.ignore_older,
        max_open: config.max_open_files,
        multiline,
    };
    let thread = FilesThread {
        follower: Follower::new(options, begin),
        pipeline,
        endpoints: endpoints.clone(),
        marks,
        poll: config.poll,
    };
    let (wake, woken) = mpsc::channel::<()>();
    match std::thread::Builder::new().name("files".into()).spawn(move || thread.run(&woken)) {
        Ok(handle) => Some((handle, wake)),
        Err(error) => {
            warn!(%error, "cannot start the files' thread: files are not followed");
            endpoints.ready.store(true, Ordering::Release);
            None
        }
    }
}

/// A client of the Kubernetes API, where the log stream or Events need one; without access,
/// said (and the log stream counted as a permission error): files are followed anyway.
async fn api_client(config: &Config, has_alert: bool, pipeline: &mut Pipeline, source: usize) -> Option<kube::Client> {
    // Events: of the alerts, and of the configuration read again (where its directory is).
    let says_events = config.events && (has_alert || config.config_dir.exists());
    let needs_api = config.logs_container.is_some() || says_events;
    if !needs_api {
        return None;
    }
    match kube::Client::try_default().await {
        Ok(client) => Some(client),
        Err(error) => {
            warn!(%error, "no access to the Kubernetes API: no Events, no log stream; files are followed");
            if config.logs_container.is_some() {
                let detail = error.to_string();
                pipeline.report(Report::Error { source, reason: SourceError::Permission, detail: &detail });
            }
            None
        }
    }
}

/// Where the log stream starts: the checkpoint's mark; with checkpoints and none yet (the first
/// start in the pod), the container's log from its start; without, as `AGENT_START` says.
fn resume_from(saved: Option<&Option<Checkpoint>>, start: Start) -> Resume {
    match saved.and_then(|s| s.as_ref()).and_then(|s| s.stream.as_ref()) {
        Some(mark) => Resume::from_mark(mark),
        None if saved.is_some() => Resume::default(),
        None => match start {
            Start::End => Resume::from(Timestamp::now()),
            Start::Beginning => Resume::default(),
        },
    }
}

/// The alert sinks' tasks: Events on the pod and Alertmanager, where configured and a rule has
/// an alert, each reading where the alerts stand from `published`.
fn start_sinks(
    config: &Config,
    client: Option<&kube::Client>,
    has_alert: bool,
    published: tokio::sync::watch::Receiver<Vec<AlertState>>,
    metrics: &Arc<Metrics>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut sinks = Vec::new();
    if let (Some(client), true, true) = (client, config.events, has_alert) {
        match EventPublisher::new(client.clone(), &config.pod) {
            Some(publisher) => {
                let task = sink_task(publisher, published.clone(), metrics.clone(), SINK_DEADLINE);
                sinks.push(tokio::spawn(task));
            }
            None => {
                warn!("POD_NAME or POD_NAMESPACE unset: alerts are not said as Events (set them from the downward API)")
            }
        }
    }
    if let (Some(url), true) = (&config.alertmanager, has_alert) {
        let poster = Poster::new(Alertmanager::new(url.clone()), config.pod.clone());
        sinks.push(tokio::spawn(sink_task(poster, published, metrics.clone(), SINK_DEADLINE)));
    }
    sinks
}

/// Every rule's alert, none fired.
fn initial_states(config: &Config) -> Vec<AlertState> {
    config.rules.iter().filter(|r| r.alert.is_some()).map(|r| AlertState::new(&r.name)).collect()
}

/// The alerts looked at now: what happened said in the agent's log and the firing gauges, and
/// where they stand published to the sinks. A configuration swapped in since: the alerts its
/// rules have, those it keeps as they stood.
fn look(live: &Live, states: &mut Vec<AlertState>, publish: &tokio::sync::watch::Sender<Vec<AlertState>>) {
    let now = SystemTime::now();
    let current = live.current();
    let metrics = &current.metrics;
    let (reports, reconfigured) = {
        let mut book = lock(live.alerts());
        let alerting: Vec<&str> =
            current.config.rules.iter().filter(|r| r.alert.is_some()).map(|r| r.name.as_str()).collect();
        let reconfigured = states.len() != alerting.len() || states.iter().zip(&alerting).any(|(s, n)| s.name != *n);
        if reconfigured {
            let mut before = std::mem::take(states);
            for name in alerting {
                let kept = before.iter().position(|s| s.name == name).map(|i| before.swap_remove(i));
                states.push(kept.unwrap_or_else(|| AlertState::new(name)));
            }
        }
        (book.look(now), reconfigured)
    };
    if reports.is_empty() {
        if reconfigured {
            publish.send_replace(states.clone());
        }
        return;
    }
    for report in &reports {
        if report.fired {
            warn!(rule = report.name, note = report.note, "alert firing");
        }
        if report.resolved {
            info!(rule = report.name, "alert resolved");
        }
        if let Some(gauge) = metrics.rules.get(report.rule).map(|r| &r.firing) {
            gauge.set(i64::from(report.firing));
        }
        if let Some(state) = states.iter_mut().find(|s| s.name == report.name) {
            state.update(report, now);
        }
    }
    publish.send_replace(states.to_vec());
}

/// `AGENT_STATE_DIR`, made if missing; `None` (checkpoints off, said) where it cannot be written:
/// the agent still counts, a sidecar never keeps its pod from running for want of a directory.
fn usable_state_dir(dir: &Path) -> Option<PathBuf> {
    let probe = dir.join(".watcher-agent.probe");
    let usable = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&probe, b""))
        .and_then(|()| std::fs::remove_file(&probe));
    match usable {
        Ok(()) => Some(dir.to_owned()),
        Err(error) => {
            warn!(
                dir = %dir.display(),
                %error,
                "AGENT_STATE_DIR cannot be written: no checkpoints (a restart starts as AGENT_START says); \
                 mount a writable volume there (an emptyDir)"
            );
            None
        }
    }
}

/// The checkpoint in `dir`: `None` where there is none (the first start in this pod). A damaged
/// one is said and taken as written now with nothing in it: files present, and the log stream,
/// start as `start` (`AGENT_START`) says.
fn read_checkpoint(dir: &Path, start: Start) -> Option<Checkpoint> {
    match checkpoint::read(dir) {
        Ok(Some(saved)) => {
            info!(files = saved.files.len(), stream = saved.stream.is_some(), "resuming from the checkpoint");
            Some(saved)
        }
        Ok(None) => {
            info!("no checkpoint: the first start in this pod, files are read from their beginning");
            None
        }
        Err(error) => {
            warn!(%error, "the checkpoint cannot be read: files present start as AGENT_START says");
            let now = SystemTime::now();
            let stream = (start == Start::End).then(|| checkpoint::StreamMark {
                last: Some(crate::text::timestamp(now).to_string()),
                ..Default::default()
            });
            Some(Checkpoint { written: checkpoint::seconds(now), stream, ..Checkpoint::default() })
        }
    }
}

/// Where the readers are, written to `AGENT_STATE_DIR`.
struct Checkpoints {
    dir: PathBuf,
    /// Where the files were read to (the files' thread puts them there).
    files: Arc<Mutex<Vec<FileMark>>>,
    /// Where the log stream was read to.
    resume: Arc<Mutex<Resume>>,
    /// The last checkpoint written.
    last: Option<Checkpoint>,
}

impl Checkpoints {
    /// Writes the checkpoint if it changed.
    async fn save(&mut self) {
        let files = lock(&self.files).clone();
        let stream = Some(lock(&self.resume).mark());
        let unchanged = self.last.as_ref().is_some_and(|l| l.files == files && l.stream == stream);
        if unchanged {
            return;
        }
        let checkpoint =
            Checkpoint { written: checkpoint::seconds(SystemTime::now()), files, stream, ..Checkpoint::default() };
        let (dir, saved) = (self.dir.clone(), checkpoint.clone());
        match tokio::task::spawn_blocking(move || checkpoint::write(&dir, &saved)).await {
            Ok(Ok(())) => self.last = Some(checkpoint),
            Ok(Err(error)) => warn!(%error, "cannot write the checkpoint"),
            Err(error) => warn!(%error, "cannot write the checkpoint"),
        }
    }
}

/// The files' thread: poll, count, sleep; until woken to stop.
struct FilesThread {
    follower: Follower,
    pipeline: Pipeline,
    endpoints: Arc<Endpoints>,
    /// Where the files were read to, for the checkpoint (with `AGENT_STATE_DIR`).
    marks: Option<Arc<Mutex<Vec<FileMark>>>>,
    poll: Duration,
}

impl FilesThread {
    fn run(mut self, stop: &mpsc::Receiver<()>) {
        let mut marked = Instant::now() - checkpoint::EVERY;
        loop {
            let more = self.follower.poll(&mut self.pipeline);
            self.pipeline.flush();
            self.endpoints.ready.store(true, Ordering::Release);
            if marked.elapsed() >= checkpoint::EVERY {
                self.mark();
                marked = Instant::now();
            }
            let wait = if more { Duration::ZERO } else { self.poll };
            match stop.recv_timeout(wait) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        // Without checkpoints nothing will complete a last line: counted now. With them, it is
        // read whole at the next start.
        let flush_partial = self.marks.is_none();
        self.follower.finish(&mut self.pipeline, flush_partial);
        self.pipeline.flush();
        self.mark();
    }

    fn mark(&self) {
        if let Some(marks) = &self.marks {
            let now = self.follower.marks();
            *lock(marks) = now;
        }
    }
}
