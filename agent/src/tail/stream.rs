//! The app container's stdout and stderr, from the API's log stream (`pods/log`, `follow`,
//! `timestamps`). Each line counts at its own timestamp. A stream that ends is asked again at
//! once from the second of the last line read (`sinceTime` has a resolution of one second); the
//! lines of that second it sends again are known by their timestamp and text and skipped, and
//! only they: a line stamped earlier than one already read (stdout and stderr are stamped
//! apart, a clock may step) is counted like any other. When the container restarted while the
//! stream was down, the previous container's log is read first from where it was left (its
//! last lines say why it stopped). A stream that sends nothing for a while is asked again (a
//! half-open connection never ends by itself); failures are asked again with backoff. Without
//! the right to read `pods/log`, it says so once and stops; the files are followed as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use futures::AsyncReadExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, LogParams};
use tracing::{info, warn};

use crate::record::{Record, Report, Sink, SourceError};
use crate::tail::checkpoint::{StreamMark, hash};
use crate::tail::lines::{Line, LineBuffer, Piece};
use watcher_base::lock;

/// A stream kube-apiserver does not begin to answer within this long is asked again.
pub(crate) const ANSWER: Duration = Duration::from_secs(30);
/// At shutdown, the stream is read until it ends, at most this long.
pub(crate) const DRAIN: Duration = Duration::from_secs(3);
/// Lines of the last second remembered, to skip them when a stream sends them again.
const RECENT_LINES: usize = 20_000;

/// Which lines of a stream are new.
#[derive(Debug, Default)]
pub(crate) struct Resume {
    /// The latest timestamp read.
    last: Option<Timestamp>,
    /// Lines read stamped in the second of `last` or later: (timestamp in ns, hash of the
    /// text) and how many.
    recent: HashMap<(i128, u64), u32>,
    /// In a stream asked again: the lines of `recent` it will send again, still to skip.
    replay: HashMap<(i128, u64), u32>,
    /// Lines stamped before this are not read (`AGENT_START=end`: the agent's start).
    not_before: Option<Timestamp>,
    /// The first line of the event waiting for its end (`AGENT_MULTILINE_START`): a checkpoint
    /// resumes before it, so that a restart reads the event whole, once.
    hold: Option<Timestamp>,
    /// The container's restart count when last read.
    pub(crate) restart_count: Option<i32>,
}

impl Resume {
    /// Only lines stamped from `at` on.
    pub(crate) fn from(at: Timestamp) -> Self {
        Self { not_before: Some(at), ..Self::default() }
    }

    /// As a checkpoint left it.
    pub(crate) fn from_mark(mark: &StreamMark) -> Self {
        let last = mark.last.as_deref().and_then(|t| t.parse().ok());
        let recent = mark
            .recent
            .iter()
            .filter_map(|(at, text)| Some((at.parse::<Timestamp>().ok()?.as_nanosecond(), *text)))
            .fold(HashMap::new(), |mut recent, key| {
                *recent.entry(key).or_insert(0) += 1;
                recent
            });
        Self { last, recent, restart_count: mark.restart_count, ..Self::default() }
    }

    /// For a checkpoint: where the lines read end, or where the event waiting for its end
    /// begins.
    pub(crate) fn mark(&self) -> StreamMark {
        let held = self.hold.map(Timestamp::as_nanosecond);
        let recent = self
            .recent
            .iter()
            .filter(|((at, _), _)| held.is_none_or(|held| *at < held))
            .flat_map(|((at, text), count)| {
                let at = Timestamp::from_nanosecond(*at).map(|t| t.to_string()).unwrap_or_default();
                std::iter::repeat_n((at, *text), *count as usize)
            })
            .collect();
        let last = self.hold.or(self.last);
        StreamMark { restart_count: self.restart_count, last: last.map(|t| t.to_string()), recent }
    }

    /// An event begins with the line stamped `at` (`None`: no event waits).
    pub(crate) fn hold(&mut self, at: Option<Timestamp>) {
        self.hold = at;
    }

    /// A new stream starts: the `sinceTime` to ask from (the second of the last line read),
    /// and the lines read in that second are expected again.
    pub(crate) fn restart(&mut self) -> Option<Timestamp> {
        self.replay.clone_from(&self.recent);
        let last = self.last.or(self.not_before)?;
        Timestamp::from_second(last.as_second()).ok()
    }

    /// Whether the line stamped `at` with `text` is new (and remembers it).
    pub(crate) fn accept(&mut self, at: Timestamp, text: &[u8]) -> bool {
        if self.not_before.is_some_and(|from| at < from) {
            return false;
        }
        let key = (at.as_nanosecond(), hash(text));
        if let Some(left) = self.replay.get_mut(&key) {
            *left -= 1;
            if *left == 0 {
                self.replay.remove(&key);
            }
            return false; // sent again
        }
        if self.last.is_none_or(|last| at > last) {
            self.last = Some(at);
            // While an event waits, the lines of its first second are kept: a checkpoint
            // resumes from that second.
            let second = floor_second(self.hold.map_or(at, |held| held.min(at)));
            self.recent.retain(|(t, _), _| *t >= second);
        }
        let kept_from = self.hold.map_or(self.last, |held| Some(self.last.map_or(held, |last| last.min(held))));
        if kept_from.is_some_and(|from| at.as_nanosecond() >= floor_second(from)) && self.recent.len() < RECENT_LINES {
            *self.recent.entry(key).or_insert(0) += 1;
        }
        true
    }
}

fn floor_second(at: Timestamp) -> i128 {
    i128::from(at.as_second()) * 1_000_000_000
}

/// A line of a `timestamps=true` stream: its time and its text.
pub(crate) fn split_timestamp(line: &[u8]) -> (Option<Timestamp>, &[u8]) {
    let Some(space) = memchr::memchr(b' ', line) else { return (None, line) };
    let stamp = std::str::from_utf8(&line[..space]).ok().and_then(|s| s.parse::<Timestamp>().ok());
    match stamp {
        Some(stamp) => (Some(stamp), &line[space + 1..]),
        None => (None, line),
    }
}

/// How a stream ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Not allowed to read `pods/log`: do not ask again.
    Forbidden(String),
    /// Ended by the server (the container stopped, the connection closed), after `lines` lines.
    ByServer {
        /// Lines it sent.
        lines: u64,
    },
    /// No byte for `AGENT_STREAM_IDLE`.
    Idle,
    /// Failed, or refused for now: ask again with backoff.
    Failed(String),
    /// Stopped (shutdown).
    Stopped,
}

/// What a stream reads into.
pub(crate) struct Reader<'a> {
    /// Where the lines go (the stream's own pipeline).
    pub(crate) pipeline: &'a mut (dyn Sink + Send),
    /// The source index of the stream.
    pub(crate) source: usize,
    /// Which lines are new.
    pub(crate) resume: &'a Mutex<Resume>,
    /// Lines are cut to this many bytes.
    pub(crate) max_line: usize,
    /// A stream that sends no byte for this long is asked again (`AGENT_STREAM_IDLE`).
    pub(crate) idle: Duration,
    /// Lines joined into events (`AGENT_MULTILINE_START`), across streams.
    pub(crate) events: LineBuffer,
}

impl Reader<'_> {
    /// One stamped line, new or not: counted, or joined into the event waiting. 1 if new.
    fn line(&mut self, stamped: Line<'_>) -> u64 {
        let (at, text) = split_timestamp(stamped.bytes);
        let new = at.is_none_or(|at| lock(self.resume).accept(at, text));
        if !new {
            return 0;
        }
        let written = at.map_or_else(SystemTime::now, SystemTime::from);
        let bytes = &text[..text.len().min(self.max_line)];
        let line = Line { bytes, truncated: stamped.truncated || text.len() > self.max_line };
        let (source, pipeline) = (self.source, &mut *self.pipeline);
        let waited = self.events.due().is_some();
        let mut ended = false;
        self.events.line(line, |piece| {
            ended = true;
            pipeline.take(Record { source, piece, written });
        });
        if self.events.due().is_some() && (ended || !waited) {
            lock(self.resume).hold(at);
        }
        1
    }

    /// The event waiting for its end, if it has waited `AGENT_MULTILINE_WAIT` by `now`; or now
    /// (`force`: the stream stops).
    pub(crate) fn end_event(&mut self, now: Instant, force: bool) {
        let (source, pipeline) = (self.source, &mut *self.pipeline);
        let written = SystemTime::now();
        let take = |piece: Piece<'_>| pipeline.take(Record { source, piece, written });
        if force {
            self.events.flush_event(take);
        } else {
            self.events.expire(now, take);
        }
        if self.events.due().is_none() {
            lock(self.resume).hold(None);
        }
        self.pipeline.flush();
    }

    /// What became of the stream, to the metrics.
    fn report(&mut self, report: Report<'_>) {
        self.pipeline.report(report);
    }
}

/// One stream of `container`'s log (the previous container's, when `previous`), from where
/// the resume state says, until it ends, goes idle, or `stop` (then read for at most
/// [`DRAIN`]).
pub(crate) async fn stream_once(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    previous: bool,
    reader: &mut Reader<'_>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Ended {
    let params = LogParams {
        container: Some(container.to_owned()),
        follow: !previous,
        previous,
        timestamps: true,
        since_time: lock(reader.resume).restart(),
        ..LogParams::default()
    };
    // Stopping already (the stop came between two streams): read what is left, briefly.
    let mut deadline = stop.borrow_and_update().then(|| tokio::time::Instant::now() + DRAIN);
    let request = pods.log_stream(pod, &params);
    tokio::pin!(request);
    let asked = loop {
        let limit = deadline.map_or(ANSWER, |at| at.saturating_duration_since(tokio::time::Instant::now()));
        tokio::select! {
            asked = tokio::time::timeout(limit, &mut request) => break asked,
            _ = stop.changed(), if deadline.is_none() => deadline = Some(tokio::time::Instant::now() + DRAIN),
        }
    };
    let stream = match asked {
        Ok(Ok(stream)) => stream,
        Ok(Err(kube::Error::Api(status))) if status.code == 403 => return Ended::Forbidden(status.message),
        Ok(Err(error)) => return Ended::Failed(error.to_string()),
        Err(_) if deadline.is_some() => return Ended::Stopped,
        Err(_) => return Ended::Failed(format!("no answer within {}s", ANSWER.as_secs())),
    };
    let mut stream = Box::pin(stream);
    let mut buffer = LineBuffer::new(reader.max_line.saturating_add(40)); // room for the timestamp
    let mut bytes = vec![0_u8; 64 * 1024];
    let mut lines = 0;
    loop {
        let wait = match deadline {
            Some(at) => at.saturating_duration_since(tokio::time::Instant::now()),
            None => reader.idle,
        };
        // An event waiting for its end ends on time, however long the stream stays silent.
        let limit = reader.events.due().map_or(wait, |due| due.saturating_duration_since(Instant::now()).min(wait));
        let read = tokio::select! {
            read = tokio::time::timeout(limit, stream.read(&mut bytes)) => read,
            _ = stop.changed(), if deadline.is_none() => {
                deadline = Some(tokio::time::Instant::now() + DRAIN);
                continue;
            }
        };
        if read.is_err() && reader.events.due().is_some_and(|due| due <= Instant::now()) {
            reader.end_event(Instant::now(), false);
            continue;
        }
        match read {
            Err(_) if deadline.is_some() => return Ended::Stopped,
            Err(_) => return Ended::Idle,
            Ok(Ok(0)) => {
                // Every line of a container's log ends in a newline: a line cut off is the
                // connection's, sent again whole by the next stream.
                buffer.discard();
                reader.pipeline.flush();
                return Ended::ByServer { lines };
            }
            Ok(Ok(n)) => {
                buffer.push(&bytes[..n], |stamped| lines += reader.line(stamped));
                reader.pipeline.flush();
            }
            Ok(Err(error)) => return Ended::Failed(error.to_string()),
        }
    }
}

/// Backoff between failed streams: 1 s, doubling to 30 s.
pub(crate) fn backoff(previous: Duration) -> Duration {
    (previous * 2).clamp(Duration::from_secs(1), Duration::from_secs(30))
}

/// The restart count of `container` in `pod` (`None` where it cannot be read).
async fn restart_count(pods: &Api<Pod>, pod: &str, container: &str) -> Option<i32> {
    let pod = tokio::time::timeout(Duration::from_secs(5), pods.get(pod)).await.ok()?.ok()?;
    let statuses = pod.status?.container_statuses?;
    statuses.into_iter().find(|s| s.name == container).map(|s| s.restart_count)
}

/// When the container restarted since it was read: its previous log first, from where it was
/// left; then the restart count is remembered.
async fn previous_first(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    reader: &mut Reader<'_>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let now = restart_count(pods, pod, container).await;
    let before = lock(reader.resume).restart_count;
    if let (Some(now), Some(before)) = (now, before)
        && now > before
    {
        reader.report(Report::Reconnected("restarted"));
        info!(container, restarts = now, "the container restarted: reading its previous log first");
        let ended = stream_once(pods, pod, container, true, reader, stop).await;
        if let Ended::Failed(why) = ended {
            warn!(why, "cannot read the previous container's log");
        }
    }
    if now.is_some() {
        lock(reader.resume).restart_count = now;
    }
}

/// The log stream of `container`, asked again after each end, until forbidden or `stop`.
pub(crate) async fn follow(
    pods: Api<Pod>,
    pod: String,
    container: String,
    mut reader: Reader<'_>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut delay = Duration::ZERO;
    let mut said_failing = false;
    loop {
        if *stop.borrow() {
            reader.end_event(Instant::now(), true);
            return;
        }
        previous_first(&pods, &pod, &container, &mut reader, &mut stop).await;
        let ended = stream_once(&pods, &pod, &container, false, &mut reader, &mut stop).await;
        match ended {
            Ended::Forbidden(message) => {
                warn!(
                    message,
                    "cannot read the log stream (pods/log): the pod's ServiceAccount needs get on pods/log \
                     (docs/agent.md); following files only"
                );
                reader.pipeline.flush();
                let source = reader.source;
                reader.report(Report::Error { source, reason: SourceError::Permission, detail: &message });
                return;
            }
            Ended::Stopped => {
                reader.report(Report::Reconnected("shutdown"));
                reader.end_event(Instant::now(), true);
                return;
            }
            Ended::ByServer { lines } if lines > 0 => {
                reader.report(Report::Reconnected("ended"));
                delay = Duration::ZERO;
                said_failing = false;
                info!(lines, "the log stream ended; asking again from the last line read");
                continue;
            }
            Ended::ByServer { .. } => {
                reader.report(Report::Reconnected("ended"));
                delay = backoff(delay);
            }
            Ended::Idle => {
                reader.report(Report::Reconnected("idle"));
                delay = Duration::ZERO;
                continue;
            }
            Ended::Failed(why) => {
                reader.report(Report::Reconnected("error"));
                if !said_failing {
                    warn!(why, "the log stream failed; asking again with backoff");
                    let source = reader.source;
                    reader.report(Report::Error { source, reason: SourceError::Io, detail: &why });
                    said_failing = true;
                }
                delay = backoff(delay);
            }
        }
        if *stop.borrow() {
            reader.end_event(Instant::now(), true);
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.changed() => {
                reader.end_event(Instant::now(), true);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
