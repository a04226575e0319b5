//! What the sources hand the pipeline, and what they say beside it: a [`Record`] of text (a run
//! of lines, a line, an event of joined lines), a [`Report`], through a [`Sink`]. It depends on
//! no other module of the agent, so that the sources ([`crate::tail`]) and the stages after them
//! ([`crate::pipeline`], [`crate::metrics`]) meet here and never import one another.

use std::time::SystemTime;

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
    /// The end of a batch: what was taken is counted (a pipeline adds it to the metrics).
    fn flush(&mut self) {}
}

/// A line as it is handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// Its bytes, without the newline (and a `\r` before it), at most the bound.
    pub bytes: &'a [u8],
    /// Whether it was longer than the bound.
    pub truncated: bool,
}

/// What [`LineBuffer::push_runs`] hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// One line, completed across pushes.
    Line(Line<'a>),
    /// Complete lines, each ending in `\n`.
    Run(&'a [u8]),
    /// An event of joined lines (with `AGENT_MULTILINE_START`: then lines come only so).
    Event(Event<'a>),
}

/// An event as the rules see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// Its lines, joined by `\n`, up to `AGENT_MULTILINE_MAX_BYTES`.
    pub text: &'a [u8],
    /// How many lines it is made of.
    pub lines: u64,
    /// Ended at `AGENT_MULTILINE_MAX_LINES`, with more to come.
    pub cut_lines: bool,
    /// Its text was cut at `AGENT_MULTILINE_MAX_BYTES`.
    pub cut_bytes: bool,
    /// Its lines longer than `AGENT_MAX_LINE_BYTES` (each kept to that bound).
    pub long_lines: u64,
}

impl<'a> Event<'a> {
    /// Its first line: what an Event or an alert quotes.
    pub fn first_line(&self) -> &'a [u8] {
        memchr::memchr(b'\n', self.text).map_or(self.text, |end| &self.text[..end])
    }
}
