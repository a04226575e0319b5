//! The one path every source's text takes. A source (the files, the log stream: [`crate::tail`])
//! hands the pipeline [`Record`]s — which source, its bytes (a run of lines, a line or an event
//! of joined lines), when they were written — and [`Report`]s of what became of it; the
//! pipeline reads each record as its source's format says ([`crate::parse`]), matches it
//! against every rule ([`crate::matching`]) and counts it into the metrics and the alerts'
//! windows. A feature of counting is added here, once, for every source.

mod counting;

use std::sync::Arc;
use std::time::SystemTime;

use crate::config::{Config, RuleConfig};
use crate::matching::Rules;
use crate::metrics::Metrics;
use crate::parse::fields::Format;
pub use crate::sinks::alerts::SharedAlerts;
use crate::tail::lines::Piece;

/// Text of one source, as the source read it.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// The source's index: a glob of `AGENT_FILES`, then the log stream.
    pub source: usize,
    /// Its bytes.
    pub piece: Piece<'a>,
    /// When it was written (a file's modification time, a stream line's timestamp).
    pub written: SystemTime,
}

/// Why a source could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceError {
    /// The directory (or the file named without a glob) does not exist.
    Missing,
    /// Permission denied: on the directory, on a file, or on `pods/log`.
    Permission,
    /// Any other I/O error (a stream that failed).
    Io,
}

impl SourceError {
    /// Every reason, for metrics at 0.
    pub const ALL: [Self; 3] = [Self::Missing, Self::Permission, Self::Io];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Permission => "permission",
            Self::Io => "io",
        }
    }

    /// The reason an I/O error gives.
    pub fn of(error: &std::io::Error) -> Self {
        match error.kind() {
            std::io::ErrorKind::NotFound => Self::Missing,
            std::io::ErrorKind::PermissionDenied => Self::Permission,
            _ => Self::Io,
        }
    }
}

/// What a source says beside its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report<'a> {
    /// Source `source` could not be read, for `reason` (said once per change), `detail` the
    /// error's words.
    Error {
        /// The source.
        source: usize,
        /// Why.
        reason: SourceError,
        /// The error's words.
        detail: &'a str,
    },
    /// A file was closed, for this reason (`rotated`, `idle`, `limit`).
    Closed(&'static str),
    /// A file is never read as text (`compressed`).
    Skipped(&'static str),
    /// A file of `source` was truncated: its copy found and read, or not.
    Truncated {
        /// The source.
        source: usize,
        /// Whether the truncated file's copy was found.
        copy_found: bool,
    },
    /// Files open now.
    OpenFiles(usize),
    /// The log stream was asked again, for this reason (`ended`, `idle`, `error`, `restarted`,
    /// `shutdown`).
    Reconnected(&'static str),
}

/// Where a source hands what it reads: the pipeline, or a test's record of it.
pub trait Sink {
    /// Text of a source: the way in to counting.
    fn take(&mut self, record: Record<'_>);
    /// What became of a source.
    fn report(&mut self, report: Report<'_>);
}

/// One reader's pipeline (the files' thread has one, the log stream's task another): counts
/// are kept locally and added to the (atomic) metrics at [`Pipeline::flush`], so no reader
/// waits for another, nor a scrape for a reader.
pub struct Pipeline {
    counting: counting::Counting,
    metrics: Arc<Metrics>,
}

impl Pipeline {
    /// A pipeline over `config`'s sources (its files' globs, then the log stream if one is
    /// read) and `rules` (`config`'s, compiled), into `metrics` and `alerts`.
    pub fn new(config: &Config, rules: &Rules, metrics: Arc<Metrics>, alerts: SharedAlerts) -> Self {
        let mut formats: Vec<Format> = vec![config.format; config.files.len()];
        if config.logs_container.is_some() {
            formats.push(config.stdout_format);
        }
        Self::reading(rules, &config.rules, formats, config.max_line_bytes, metrics, alerts)
    }

    /// A pipeline over `rules` (`configs`, compiled) for sources read as `formats` (one each),
    /// lines matched on their first `max_line` bytes, into `metrics` and `alerts`.
    pub fn reading(
        rules: &Rules,
        configs: &[RuleConfig],
        formats: Vec<Format>,
        max_line: usize,
        metrics: Arc<Metrics>,
        alerts: SharedAlerts,
    ) -> Self {
        let counting = counting::Counting::new(rules.clone(), configs, metrics.clone(), alerts, formats, max_line);
        Self { counting, metrics }
    }

    /// Adds what was counted since the last flush to the metrics.
    pub fn flush(&mut self) {
        self.counting.flush();
    }
}

impl Sink for Pipeline {
    fn take(&mut self, record: Record<'_>) {
        self.counting.take(record);
    }

    fn report(&mut self, report: Report<'_>) {
        let metrics = &self.metrics;
        match report {
            Report::Error { source, reason, .. } => metrics.source_error(source, reason),
            Report::Closed(reason) => metrics.closed(reason),
            Report::Skipped(reason) => metrics.skipped(reason),
            Report::Truncated { source, copy_found } => metrics.truncated(source, copy_found),
            Report::OpenFiles(count) => {
                metrics.open_files.set(i64::try_from(count).unwrap_or(i64::MAX));
            }
            Report::Reconnected(reason) => metrics.reconnected(reason),
        }
    }
}
