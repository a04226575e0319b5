//! The app container's stdout and stderr, from the API's log stream (`pods/log`, `follow`,
//! `timestamps`). A dropped stream is asked again from the second of the last line seen
//! (`sinceTime` has a resolution of one second), and the lines it sends again are skipped by
//! their timestamps: none lost, none doubled. Without the right to read `pods/log`, it says so
//! once and stops; the files are followed as before.

use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, LogParams};

use crate::lines::{Line, LineBuffer};

/// Which lines of a resumed stream are new.
#[derive(Debug, Default)]
pub struct Resume {
    last: Option<Timestamp>,
    /// Lines seen stamped `last`.
    at_last: usize,
    /// Lines stamped `last` still to skip in this stream.
    skip: usize,
}

impl Resume {
    /// Only lines stamped from `at` on (`AGENT_START=end`: from the agent's start).
    pub fn from(at: Timestamp) -> Self {
        Self { last: Some(at), at_last: 0, skip: 0 }
    }

    /// Whether a line stamped `at` is new (and remembers it).
    pub fn accept(&mut self, at: Timestamp) -> bool {
        match self.last {
            Some(last) if at < last => false,
            Some(last) if at == last && self.skip > 0 => {
                self.skip -= 1;
                false
            }
            Some(last) if at == last => {
                self.at_last += 1;
                true
            }
            _ => {
                self.last = Some(at);
                self.at_last = 1;
                self.skip = 0;
                true
            }
        }
    }

    /// A new stream starts: the `sinceTime` to ask from, and the lines stamped with the last
    /// time seen are expected again.
    pub fn restart(&mut self) -> Option<Timestamp> {
        self.skip = self.at_last;
        let last = self.last?;
        Timestamp::from_second(last.as_second()).ok()
    }
}

/// A line of a `timestamps=true` stream: its time and its text.
pub fn split_timestamp(line: &[u8]) -> (Option<Timestamp>, &[u8]) {
    let Some(space) = memchr::memchr(b' ', line) else { return (None, line) };
    let stamp = std::str::from_utf8(&line[..space]).ok().and_then(|s| s.parse::<Timestamp>().ok());
    match stamp {
        Some(stamp) => (Some(stamp), &line[space + 1..]),
        None => (None, line),
    }
}

/// How a stream ended.
#[derive(Debug)]
pub enum Ended {
    /// Not allowed to read `pods/log`: do not ask again.
    Forbidden(String),
    /// Dropped, or refused for now: ask again.
    Dropped(String),
}

/// One stream of `container`'s log, from where `resume` says, each new line to `line`.
pub async fn stream_once(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    resume: &mut Resume,
    max_line: usize,
    line: &mut (impl FnMut(Line<'_>) + Send),
) -> Ended {
    let params = LogParams {
        container: Some(container.to_owned()),
        follow: true,
        timestamps: true,
        since_time: resume.restart(),
        ..LogParams::default()
    };
    let stream = match pods.log_stream(pod, &params).await {
        Ok(stream) => stream,
        Err(kube::Error::Api(status)) if status.code == 403 => return Ended::Forbidden(status.message),
        Err(error) => return Ended::Dropped(error.to_string()),
    };
    let mut reader = Box::pin(stream);
    let mut buffer = LineBuffer::new(max_line.saturating_add(40)); // room for the timestamp
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) => return Ended::Dropped("the stream ended".to_owned()),
            Ok(chunk) => chunk,
            Err(error) => return Ended::Dropped(error.to_string()),
        };
        let n = chunk.len();
        buffer.push(chunk, |stamped| {
            let (at, text) = split_timestamp(stamped.bytes);
            if at.is_none_or(|at| resume.accept(at)) {
                let bytes = &text[..text.len().min(max_line)];
                line(Line { bytes, truncated: stamped.truncated || text.len() > max_line });
            }
        });
        reader.as_mut().consume(n);
    }
}

/// Backoff between streams: 1 s, doubling to 30 s; back to 1 s after a stream that lasted.
pub fn backoff(previous: Duration, lasted: Duration) -> Duration {
    if lasted > Duration::from_secs(60) {
        Duration::from_secs(1)
    } else {
        (previous * 2).clamp(Duration::from_secs(1), Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests;
