//! Following files by glob. A file is known by its identity (device and inode), and by its
//! first bytes, never by its path alone:
//!
//! - rotation by rename: the old file, gone from the glob, is read to its end through the
//!   handle still open, then closed; the new file at the path is a new identity, read from 0;
//! - copytruncate: a file shorter than what was read is read again from 0, and so is one whose
//!   first bytes changed (truncated and written past the old offset between two looks);
//! - deleted and recreated: a new identity (or the same inode reused: the checks above);
//! - a last line without its newline waits for it (see [`LineBuffer`]).
//!
//! Files present at the first look start at the end or the beginning (`AGENT_START`); files
//! that appear later are read from their beginning. Problems (a missing directory, a permission
//! refused) are said once per change, and looked at again at every poll.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::config::Start;
use crate::lines::{Line, LineBuffer};

/// Bytes kept of a file's beginning to tell it from another file at the same inode.
const HEAD_BYTES: usize = 64;
/// Bytes read at once.
const CHUNK_BYTES: usize = 64 * 1024;
/// Bytes read from one file in one poll: a file written faster than that is read on (the
/// caller polls again at once) without starving the others.
const BUDGET_BYTES: u64 = 8 * 1024 * 1024;
/// Polls a file gone from every glob is kept open with nothing new, before it is closed.
const GONE_POLLS: u32 = 2;

/// Why a source could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceError {
    /// The directory (or the file named without a glob) does not exist.
    Missing,
    /// Permission denied, on the directory or on a file.
    Permission,
    /// Any other I/O error.
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

    fn of(error: &io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::NotFound => Self::Missing,
            io::ErrorKind::PermissionDenied => Self::Permission,
            _ => Self::Io,
        }
    }
}

/// Where lines and problems go.
pub trait Sink {
    /// A line of source `source` (the glob's index).
    fn line(&mut self, source: usize, line: Line<'_>);
    /// Source `source` could not be read, for `reason` (said once per change).
    fn error(&mut self, source: usize, reason: SourceError, detail: &str);
}

struct Tracked {
    file: File,
    path: PathBuf,
    source: usize,
    offset: u64,
    head: Vec<u8>,
    buffer: LineBuffer,
    /// At a path of a glob in the last look.
    seen: bool,
    /// Looks with nothing new while gone from every glob.
    idle: u32,
    /// Order of discovery: the older of two files is read first.
    order: u64,
    read_failed: bool,
}

/// The files of the configured globs, followed.
pub struct Follower {
    globs: Vec<String>,
    tracked: HashMap<(u64, u64), Tracked>,
    start: Start,
    started: bool,
    max_line: usize,
    states: Vec<Option<SourceError>>,
    chunk: Vec<u8>,
    discovered: u64,
}

impl Follower {
    /// Follows `globs`; lines are kept up to `max_line` bytes.
    pub fn new(globs: Vec<String>, start: Start, max_line: usize) -> Self {
        let states = vec![None; globs.len()];
        Self {
            globs,
            tracked: HashMap::new(),
            start,
            started: false,
            max_line,
            states,
            chunk: vec![0; CHUNK_BYTES],
            discovered: 0,
        }
    }

    /// The globs, index by index (the sources).
    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// The paths followed now.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.tracked.values().map(|t| t.path.clone()).collect();
        paths.sort();
        paths
    }

    /// One look: new files found, every followed file read to its end (or to this poll's
    /// budget), files gone for good closed. `true`: there is more to read now.
    pub fn poll(&mut self, sink: &mut impl Sink) -> bool {
        self.discover(sink);
        self.started = true;
        let mut order: Vec<((u64, u64), bool, u64)> =
            self.tracked.iter().map(|(key, t)| (*key, t.seen, t.order)).collect();
        // Files gone from the globs (rotated away) first: their end comes before the new file.
        order.sort_by_key(|(_, seen, order)| (*seen, *order));
        let mut more = false;
        let mut closed = Vec::new();
        for (key, _, _) in order {
            let Some(tracked) = self.tracked.get_mut(&key) else { continue };
            let (read, full) = read_new(tracked, &mut self.chunk, sink);
            more |= full;
            if tracked.seen || read > 0 {
                tracked.idle = 0;
            } else {
                tracked.idle += 1;
                if tracked.idle >= GONE_POLLS {
                    closed.push(key);
                }
            }
        }
        for key in closed {
            if let Some(mut tracked) = self.tracked.remove(&key) {
                let source = tracked.source;
                tracked.buffer.flush(|line| sink.line(source, line));
            }
        }
        more
    }

    /// Expands each glob: files not followed yet are opened; each glob's problem said once.
    fn discover(&mut self, sink: &mut impl Sink) {
        for tracked in self.tracked.values_mut() {
            tracked.seen = false;
        }
        for source in 0..self.globs.len() {
            let mut problem: Option<(SourceError, String)> = None;
            let mut found = false;
            let paths = match glob::glob(&self.globs[source]) {
                Ok(paths) => paths,
                Err(error) => {
                    // Checked at start: cannot happen with a valid configuration.
                    problem = Some((SourceError::Io, error.to_string()));
                    self.report(source, problem, sink);
                    continue;
                }
            };
            for entry in paths {
                let path = match entry {
                    Ok(path) => path,
                    Err(error) => {
                        problem = Some((SourceError::of(error.error()), error.to_string()));
                        continue;
                    }
                };
                match self.follow(source, &path) {
                    Ok(true) => found = true,
                    Ok(false) => {}
                    Err(error) => problem = Some((SourceError::of(&error), format!("{}: {error}", path.display()))),
                }
            }
            if !found && problem.is_none() {
                let prefix = literal_prefix(&self.globs[source]);
                match std::fs::metadata(&prefix) {
                    Ok(_) => {}
                    Err(error) => problem = Some((SourceError::of(&error), format!("{}: {error}", prefix.display()))),
                }
            }
            self.report(source, problem, sink);
        }
    }

    /// Follows the file at `path` if it is a regular file not followed yet; `Ok(true)`: a file.
    fn follow(&mut self, source: usize, path: &Path) -> io::Result<bool> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            // Gone between the listing and now: the next look sees what replaced it.
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err(error),
        };
        if !meta.is_file() {
            return Ok(false);
        }
        let key = (meta.dev(), meta.ino());
        if let Some(tracked) = self.tracked.get_mut(&key) {
            tracked.seen = true;
            if tracked.path != path {
                tracked.path = path.to_owned();
            }
            return Ok(true);
        }
        let file = File::open(path)?;
        let at_end = !self.started && self.start == Start::End;
        let offset = if at_end { file.metadata()?.len() } else { 0 };
        // Its first bytes, whatever the offset: what tells it from another file later.
        let mut head = vec![0; HEAD_BYTES];
        let kept = if offset > 0 { file.read_at(&mut head, 0)? } else { 0 };
        head.truncate(kept);
        self.discovered += 1;
        tracing::info!(path = %path.display(), offset, "following");
        self.tracked.insert(
            key,
            Tracked {
                file,
                path: path.to_owned(),
                source,
                offset,
                head,
                buffer: LineBuffer::new(self.max_line),
                seen: true,
                idle: 0,
                order: self.discovered,
                read_failed: false,
            },
        );
        Ok(true)
    }

    fn report(&mut self, source: usize, problem: Option<(SourceError, String)>, sink: &mut impl Sink) {
        let now = problem.as_ref().map(|(reason, _)| *reason);
        if self.states[source] != now {
            match &problem {
                Some((reason, detail)) => {
                    tracing::warn!(glob = self.globs[source], reason = reason.as_str(), detail, "cannot follow");
                    sink.error(source, *reason, detail);
                }
                None => tracing::info!(glob = self.globs[source], "readable again"),
            }
            self.states[source] = now;
        }
    }
}

/// Reads what `tracked` has past its offset, up to the budget: (bytes read, budget used up).
fn read_new(tracked: &mut Tracked, chunk: &mut [u8], sink: &mut impl Sink) -> (u64, bool) {
    let source = tracked.source;
    let len = match tracked.file.metadata() {
        Ok(meta) => meta.len(),
        Err(error) => {
            read_failed(tracked, &error, sink);
            return (0, false);
        }
    };
    if len < tracked.offset || head_changed(tracked) {
        // Truncated (copytruncate), or another file at the same inode: from the beginning.
        tracing::info!(path = %tracked.path.display(), "truncated or replaced: reading from the beginning");
        tracked.buffer.flush(|line| sink.line(source, line));
        tracked.offset = 0;
        tracked.head.clear();
    }
    let mut read = 0;
    while read < BUDGET_BYTES {
        let n = match tracked.file.read_at(chunk, tracked.offset) {
            Ok(0) => return (read, false),
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                read_failed(tracked, &error, sink);
                return (read, false);
            }
        };
        let bytes = &chunk[..n];
        // The head grows only with bytes read from the beginning on.
        if tracked.head.len() as u64 == tracked.offset && tracked.head.len() < HEAD_BYTES {
            let room = HEAD_BYTES - tracked.head.len();
            tracked.head.extend_from_slice(&bytes[..room.min(n)]);
        }
        tracked.buffer.push(bytes, |line| sink.line(source, line));
        tracked.offset += n as u64;
        read += n as u64;
        tracked.read_failed = false;
    }
    (read, true)
}

/// Whether the first bytes of the file are no longer those read from it.
fn head_changed(tracked: &Tracked) -> bool {
    if tracked.head.is_empty() || tracked.offset == 0 {
        return false;
    }
    let mut now = [0_u8; HEAD_BYTES];
    match tracked.file.read_at(&mut now[..tracked.head.len()], 0) {
        Ok(n) => now[..n] != tracked.head[..],
        Err(_) => false,
    }
}

fn read_failed(tracked: &mut Tracked, error: &io::Error, sink: &mut impl Sink) {
    if !tracked.read_failed {
        tracked.read_failed = true;
        let detail = format!("{}: {error}", tracked.path.display());
        tracing::warn!(detail, "cannot read");
        sink.error(tracked.source, SourceError::of(error), &detail);
    }
}

/// The part of `glob` before its first component with a pattern character: the directory that
/// must exist for the glob to match anything (the whole path for a plain file name).
fn literal_prefix(glob: &str) -> PathBuf {
    let mut prefix = PathBuf::from("/");
    for component in Path::new(glob).components().skip(1) {
        let text = component.as_os_str().to_string_lossy();
        if text.contains(['*', '?', '[']) {
            break;
        }
        prefix.push(component);
    }
    prefix
}

#[cfg(test)]
mod tests;
