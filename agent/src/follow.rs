//! Following files by glob, each known by what it holds, as Vector's file source knows them: a
//! fingerprint of its first line (or first 256 bytes), and, to tell a continuation from a new
//! file that starts alike, the bytes just before where it was read to; plus its device and
//! inode while it is open. So:
//!
//! - rotation by rename: the file keeps its inode; renamed out of the globs (or deleted), it is
//!   read through the handle still open until it has not grown for `AGENT_ROTATE_WAIT`, then
//!   closed; its last line without a newline is counted then, once;
//! - a rotated file the globs also match (`app.log*`: `app.log.1`, renamed `app.log.2`): the
//!   same inode, or the same fingerprint and bytes: it continues where it was read to, never
//!   from 0; compressed files (gzip, zstd, bzip2, xz) are never read as text;
//! - copytruncate: a file that shrinks is looked for in its directory (whatever its name, in a
//!   glob or not): the file with the same fingerprint and the same bytes before the offset read
//!   is the copy, read from that offset to its end; then the truncated file from 0. Lines
//!   written between the copy and the truncation are lost by logrotate itself (its
//!   documentation says so); nothing else is;
//! - files unchanged for `AGENT_IGNORE_OLDER` are closed, and at most `AGENT_MAX_OPEN_FILES` are
//!   open (the least recently grown closed first); a closed file that changes is opened again
//!   where it was left.
//!
//! Where a new file starts: files present at the first look start at their end (`AGENT_START:
//! end`) or beginning; with checkpoints, the first start in the pod reads them from the
//! beginning, a restart resumes each where it was read to, and reads from the beginning a file
//! that changed while the agent was down. Files that appear later are read from the beginning.
//! Lines come out in runs (every complete line of a read), with the file's modification time as
//! when they were written.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::checkpoint::{FileMark, hash, seconds};
use crate::config::Start;
use crate::lines::{Line, LineBuffer, Piece};

/// Bytes of a file's beginning its fingerprint is made of, at most (up to its first newline).
const HEAD_BYTES: usize = 256;
/// Bytes before an offset that must be the same for a file to continue another.
const TAIL_BYTES: usize = 256;
/// Bytes read at once.
const CHUNK_BYTES: usize = 64 * 1024;
/// Bytes read from one file in one poll: a file written faster than that is read on (the
/// caller polls again at once) without starving the others.
const BUDGET_BYTES: u64 = 8 * 1024 * 1024;
/// Files remembered after they were closed (to continue them, or a copy of them).
const KNOWN_FILES: usize = 1024;

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

/// Where lines, problems and what became of files go.
pub trait Sink {
    /// Complete lines of source `source` (the glob's index), each ending in `\n`, written at
    /// `written`.
    fn run(&mut self, source: usize, run: &[u8], written: SystemTime);
    /// One line of source `source` (a line completed across reads, or a last line without its
    /// newline at the file's end).
    fn line(&mut self, source: usize, line: Line<'_>, written: SystemTime);
    /// Source `source` could not be read, for `reason` (said once per change).
    fn error(&mut self, source: usize, reason: SourceError, detail: &str);
    /// A file was closed, for `reason` (`rotated`, `idle`, `limit`).
    fn closed(&mut self, _reason: &'static str) {}
    /// A file is never read as text (`compressed`).
    fn skipped(&mut self, _reason: &'static str) {}
    /// A file of `source` was truncated: its copy found and read, or not.
    fn truncated(&mut self, _source: usize, _copy_found: bool) {}
    /// Files open now.
    fn open_files(&mut self, _count: usize) {}
}

/// How files are followed.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// The globs, index by index (the sources).
    pub globs: Vec<String>,
    /// Where files present at the first look start (without checkpoints).
    pub start: Start,
    /// Lines are kept up to this many bytes.
    pub max_line: usize,
    /// A file rotated away is read until it has not grown for this long.
    pub rotate_wait: Duration,
    /// Files unchanged for this long are closed.
    pub ignore_older: Option<Duration>,
    /// Files open at once at most.
    pub max_open: usize,
}

/// What the follower knows when it starts.
#[derive(Clone, Debug)]
pub enum Begin {
    /// No checkpoints: files present at the first look start as `AGENT_START` says.
    Fresh,
    /// Checkpoints kept, none yet: the first start in the pod, every file from its beginning.
    FirstInPod,
    /// A restart: the files read before, as of `since`.
    Restart {
        /// Where they were read to.
        files: Vec<FileMark>,
        /// When that was written.
        since: SystemTime,
    },
}

struct Open {
    file: File,
    key: (u64, u64),
    path: PathBuf,
    source: usize,
    offset: u64,
    /// The first bytes read from the beginning, up to [`HEAD_BYTES`].
    head: Vec<u8>,
    fingerprint: Option<u64>,
    /// The last bytes read before `offset`, up to [`TAIL_BYTES`].
    tail: Vec<u8>,
    buffer: LineBuffer,
    /// At a path of a glob in the last look.
    in_glob: bool,
    /// When it last grew (or was opened).
    grew: Instant,
    modified: SystemTime,
    /// Order of discovery: the older of two files is read first.
    order: u64,
    read_failed: bool,
}

/// A file just opened, where reading it starts.
struct Opened {
    file: File,
    key: (u64, u64),
    path: PathBuf,
    source: usize,
    offset: u64,
    head: Vec<u8>,
    modified: SystemTime,
}

/// A file read and closed (or read before a restart): where it was read to.
#[derive(Clone, Debug)]
struct Known {
    mark: FileMark,
    /// Its length when closed (a closed file that did not change stays closed).
    len: u64,
    /// When it was remembered (the oldest are forgotten first).
    order: u64,
}

/// The files of the configured globs, followed.
pub struct Follower {
    options: FollowOptions,
    open: HashMap<(u64, u64), Open>,
    known: Vec<Known>,
    /// Files never read as text (compressed), by device and inode.
    ignored: HashSet<(u64, u64)>,
    begin: Begin,
    started: bool,
    states: Vec<Option<SourceError>>,
    chunk: Vec<u8>,
    counter: u64,
}

impl Follower {
    /// Follows as `options` say, from `begin`.
    pub fn new(options: FollowOptions, begin: Begin) -> Self {
        let states = vec![None; options.globs.len()];
        let mut follower = Self {
            options,
            open: HashMap::new(),
            known: Vec::new(),
            ignored: HashSet::new(),
            begin: begin.clone(),
            started: false,
            states,
            chunk: vec![0; CHUNK_BYTES],
            counter: 0,
        };
        if let Begin::Restart { files, .. } = begin {
            for mark in files {
                let len = mark.offset;
                follower.remember(mark, len);
            }
        }
        follower
    }

    /// The globs, index by index (the sources).
    pub fn globs(&self) -> &[String] {
        &self.options.globs
    }

    /// The paths open now.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.open.values().map(|t| t.path.clone()).collect();
        paths.sort();
        paths
    }

    /// One look: new files found, every open file read to its end (or to this poll's budget),
    /// files rotated away for `AGENT_ROTATE_WAIT`, or idle, closed. `true`: there is more to
    /// read now.
    pub fn poll(&mut self, sink: &mut impl Sink) -> bool {
        let now = Instant::now();
        if !self.started && matches!(self.begin, Begin::Restart { .. }) {
            self.recover_moved(sink);
        }
        self.discover(sink);
        self.started = true;
        let more = self.read_all(sink, BUDGET_BYTES);
        self.close_idle(sink, now);
        sink.open_files(self.open.len());
        more
    }

    /// At shutdown: every open file read to its end; the last line of a file without its
    /// newline counted when `flush_partial` (without checkpoints: nothing will complete it),
    /// else left for the next start to read whole.
    pub fn finish(&mut self, sink: &mut impl Sink, flush_partial: bool) {
        self.discover(sink);
        while self.read_all(sink, u64::MAX) {}
        if flush_partial {
            for open in self.open.values_mut() {
                let (source, written) = (open.source, open.modified);
                open.buffer.flush(|line| sink.line(source, line, written));
            }
        }
    }

    /// Where each file was read to, for a checkpoint: open files up to their last whole line,
    /// then those remembered (a file without a fingerprint yet by its inode only).
    pub fn marks(&self) -> Vec<FileMark> {
        let mut marks: Vec<FileMark> =
            self.open.values().map(|o| mark_of(o).unwrap_or_else(|| position_of(o))).collect();
        let keys: HashSet<(u64, u64)> = marks.iter().map(|m| (m.dev, m.ino)).collect();
        marks.extend(self.known.iter().filter(|k| !keys.contains(&(k.mark.dev, k.mark.ino))).map(|k| k.mark.clone()));
        marks
    }

    fn read_all(&mut self, sink: &mut impl Sink, budget: u64) -> bool {
        let mut order: Vec<((u64, u64), bool, u64)> =
            self.open.iter().map(|(key, t)| (*key, t.in_glob, t.order)).collect();
        // Files rotated away first: their end comes before the new file's beginning.
        order.sort_by_key(|(_, in_glob, order)| (*in_glob, *order));
        let mut more = false;
        for (key, _, _) in order {
            let Some(mut open) = self.open.remove(&key) else { continue };
            let (read, full) = self.read_new(&mut open, sink, budget);
            more |= full;
            if read > 0 {
                open.grew = Instant::now();
            }
            if self.ignored.contains(&key) {
                continue; // found compressed: not read as text, never again
            }
            self.open.insert(key, open);
        }
        more
    }

    /// Closes the files rotated away that stopped growing, and those idle past
    /// `AGENT_IGNORE_OLDER`.
    fn close_idle(&mut self, sink: &mut impl Sink, now: Instant) {
        let wait = self.options.rotate_wait;
        let ignore = self.options.ignore_older;
        let wall = SystemTime::now();
        let closing: Vec<((u64, u64), &'static str)> = self
            .open
            .iter()
            .filter_map(|(key, open)| {
                let quiet = now.saturating_duration_since(open.grew);
                if !open.in_glob && quiet >= wait {
                    return Some((*key, "rotated"));
                }
                let idle = ignore.filter(|limit| {
                    quiet >= *limit && wall.duration_since(open.modified).unwrap_or_default() >= *limit
                });
                (open.in_glob && idle.is_some()).then_some((*key, "idle"))
            })
            .collect();
        for (key, reason) in closing {
            self.close(key, reason, reason == "rotated", sink);
        }
    }

    /// Closes open file `key`, remembering where it was read to; its last line without a
    /// newline is counted when `flush` (rotated away: no newline will come).
    fn close(&mut self, key: (u64, u64), reason: &'static str, flush: bool, sink: &mut impl Sink) {
        let Some(mut open) = self.open.remove(&key) else { return };
        if flush {
            let (source, written) = (open.source, open.modified);
            open.buffer.flush(|line| sink.line(source, line, written));
        }
        tracing::info!(path = %open.path.display(), offset = open.offset, reason, "closed");
        sink.closed(reason);
        // Remembered even before it has a fingerprint (empty, or no whole first line yet): by its
        // inode, so that it stays closed while it does not change.
        let mark = mark_of(&open).unwrap_or_else(|| position_of(&open));
        let len = open.file.metadata().map(|m| m.len()).unwrap_or(open.offset);
        self.remember(mark, len);
    }

    fn remember(&mut self, mark: FileMark, len: u64) {
        self.counter += 1;
        self.known.retain(|k| (k.mark.dev, k.mark.ino) != (mark.dev, mark.ino));
        if self.known.len() >= KNOWN_FILES {
            // The oldest remembered goes.
            if let Some(oldest) = self.known.iter().enumerate().min_by_key(|(_, k)| k.order).map(|(i, _)| i) {
                self.known.swap_remove(oldest);
            }
        }
        self.known.push(Known { mark, len, order: self.counter });
    }

    /// Expands each glob: files not open yet are opened (or left closed when unchanged since
    /// they were); each glob's problem said once.
    fn discover(&mut self, sink: &mut impl Sink) {
        for open in self.open.values_mut() {
            open.in_glob = false;
        }
        for source in 0..self.options.globs.len() {
            let mut problem: Option<(SourceError, String)> = None;
            let mut found = false;
            let paths = match glob::glob(&self.options.globs[source]) {
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
                match self.follow(source, &path, sink) {
                    Ok(true) => found = true,
                    Ok(false) => {}
                    Err(error) => problem = Some((SourceError::of(&error), format!("{}: {error}", path.display()))),
                }
            }
            if !found && problem.is_none() {
                let prefix = literal_prefix(&self.options.globs[source]);
                if let Err(error) = std::fs::metadata(&prefix) {
                    problem = Some((SourceError::of(&error), format!("{}: {error}", prefix.display())));
                }
            }
            self.report(source, problem, sink);
        }
    }

    /// Follows the file at `path` if it is a regular file not open yet; `Ok(true)`: a file.
    fn follow(&mut self, source: usize, path: &Path, sink: &mut impl Sink) -> io::Result<bool> {
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
        if let Some(open) = self.open.get_mut(&key) {
            open.in_glob = true;
            if open.path != path {
                open.path = path.to_owned();
            }
            return Ok(true);
        }
        if self.ignored.contains(&key) {
            return Ok(true);
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        // Closed and unchanged since: stays closed.
        let closed = self.known.iter().find(|k| (k.mark.dev, k.mark.ino) == key);
        if closed.is_some_and(|k| k.len == meta.len() && k.mark.modified >= seconds(modified)) {
            return Ok(true);
        }
        let file = File::open(path)?;
        let mut head = vec![0; HEAD_BYTES];
        let kept = read_fully_at(&file, &mut head, 0)?;
        head.truncate(kept);
        if is_compressed(&head) {
            tracing::info!(path = %path.display(), "compressed: not read as text");
            sink.skipped("compressed");
            self.ignored.insert(key);
            return Ok(true);
        }
        let fingerprint = fingerprint_of(&head);
        let len = meta.len();
        let (offset, how) = match self.continued(&file, key, fingerprint, len) {
            Some(offset) => (offset, "continued"),
            None => (self.first_offset(len, modified), "new"),
        };
        tracing::info!(path = %path.display(), offset, how, "following");
        self.start_reading(Opened { file, key, path: path.to_owned(), source, offset, head, modified }, true, sink);
        Ok(true)
    }

    /// Reads `opened` from its offset on: `in_glob`, a file of a glob; else one rotated away,
    /// read until it has been quiet for `AGENT_ROTATE_WAIT`.
    fn start_reading(&mut self, opened: Opened, in_glob: bool, sink: &mut impl Sink) {
        let Opened { file, key, path, source, offset, head, modified } = opened;
        // The bytes before the offset: what a copy of it would hold there.
        let tail = read_tail(&file, offset).unwrap_or_default();
        self.make_room(sink);
        self.counter += 1;
        let fingerprint = fingerprint_of(&head);
        let buffer = LineBuffer::new(self.options.max_line);
        let (grew, order) = (Instant::now(), self.counter);
        let open = Open {
            file,
            key,
            path,
            source,
            offset,
            head,
            fingerprint,
            tail,
            buffer,
            in_glob,
            grew,
            modified,
            order,
            read_failed: false,
        };
        self.open.insert(key, open);
        self.known.retain(|k| (k.mark.dev, k.mark.ino) != key);
    }

    /// At a restart with checkpoints: a file read before that rotation moved while the agent
    /// was down (renamed, or copied and truncated, in its own directory, in a glob or not) is
    /// found by its inode (renamed) or by its fingerprint and the bytes before its offset (the
    /// copy), and read from where it was left as a file rotated away, before the file now at its
    /// path (read first: it is older). A file still at its path is the globs' to find.
    fn recover_moved(&mut self, sink: &mut impl Sink) {
        let marks: Vec<FileMark> = self.known.iter().map(|k| k.mark.clone()).collect();
        for mark in marks {
            let path = Path::new(&mark.path);
            let Some(source) =
                self.options.globs.iter().position(|g| glob::Pattern::new(g).is_ok_and(|p| p.matches_path(path)))
            else {
                continue;
            };
            let in_place = std::fs::metadata(path).is_ok_and(|m| {
                (m.dev(), m.ino()) == (mark.dev, mark.ino)
                    && m.len() >= mark.offset
                    && File::open(path).is_ok_and(|f| read_tail(&f, mark.offset).is_some_and(|t| hash(&t) == mark.tail))
            });
            let Some(directory) = path.parent().filter(|_| !in_place) else { continue };
            let Ok(entries) = std::fs::read_dir(directory) else { continue };
            for entry in entries.flatten() {
                let candidate = entry.path();
                if let Some(opened) = self.moved_copy(&mark, &candidate, source) {
                    tracing::info!(path = %candidate.display(), was = %mark.path, offset = mark.offset, "following, moved while stopped");
                    self.start_reading(opened, false, sink);
                    break;
                }
            }
        }
    }

    /// `candidate` opened at `mark`'s offset if it is the file of `mark` moved there (the same
    /// inode, or the same fingerprint and bytes before the offset) and holds what was read.
    fn moved_copy(&self, mark: &FileMark, candidate: &Path, source: usize) -> Option<Opened> {
        if candidate == Path::new(&mark.path) {
            return None;
        }
        let meta = std::fs::metadata(candidate).ok().filter(|m| m.is_file() && m.len() >= mark.offset)?;
        let key = (meta.dev(), meta.ino());
        if self.open.contains_key(&key) || self.ignored.contains(&key) {
            return None;
        }
        let file = File::open(candidate).ok()?;
        let mut head = vec![0; HEAD_BYTES];
        let kept = read_fully_at(&file, &mut head, 0).ok()?;
        head.truncate(kept);
        let same = key == (mark.dev, mark.ino) || fingerprint_of(&head) == Some(mark.fingerprint);
        if !same || is_compressed(&head) || read_tail(&file, mark.offset).is_none_or(|t| hash(&t) != mark.tail) {
            return None;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        Some(Opened { file, key, path: candidate.to_owned(), source, offset: mark.offset, head, modified })
    }

    /// Where a file not open yet continues a file read before: one known (closed, or read
    /// before a restart) with the same fingerprint whose bytes before its offset this file holds
    /// too (a rename caught again by a glob, the same file after a restart) continues at that
    /// offset; a copy of a file open now starts at its own end (what it holds past the open
    /// file's offset is the open file's to read, or read from the copy if that one is
    /// truncated: [`Follower::read_copy`]).
    fn continued(&self, file: &File, key: (u64, u64), fingerprint: Option<u64>, len: u64) -> Option<u64> {
        let holds = |offset: u64, tail: u64| read_tail(file, offset).is_some_and(|t| hash(&t) == tail);
        // The same file, closed: where it was left, if it still holds what was read.
        let same = self.known.iter().find(|k| (k.mark.dev, k.mark.ino) == key);
        if let Some(known) = same.filter(|k| k.mark.offset <= len && holds(k.mark.offset, k.mark.tail)) {
            return Some(known.mark.offset);
        }
        let fingerprint = fingerprint?;
        let mut known: Vec<(u64, u64)> = self
            .known
            .iter()
            .filter(|k| k.mark.fingerprint == fingerprint && k.mark.offset <= len)
            .map(|k| (k.mark.offset, k.mark.tail))
            .collect();
        // The furthest that holds: a copy made later holds more.
        known.sort_unstable_by_key(|k| std::cmp::Reverse(k.0));
        if let Some((offset, _)) = known.into_iter().find(|(offset, tail)| holds(*offset, *tail)) {
            return Some(offset);
        }
        let copy_of_open = self.open.values().any(|o| {
            o.key != key && o.fingerprint == Some(fingerprint) && o.offset <= len && holds(o.offset, hash(&o.tail))
        });
        copy_of_open.then_some(len)
    }

    /// Where a file read for the first time starts.
    fn first_offset(&self, len: u64, modified: SystemTime) -> u64 {
        match &self.begin {
            Begin::FirstInPod => 0,
            Begin::Fresh if self.started => 0,
            Begin::Fresh => match self.options.start {
                Start::End => len,
                Start::Beginning => 0,
            },
            // Written while the agent was down: every line of it; else as AGENT_START says.
            Begin::Restart { since, .. } if self.started || seconds(modified) >= seconds(*since) => 0,
            Begin::Restart { .. } => match self.options.start {
                Start::End => len,
                Start::Beginning => 0,
            },
        }
    }

    /// Closes the least recently grown file of a glob while `AGENT_MAX_OPEN_FILES` are open.
    fn make_room(&mut self, sink: &mut impl Sink) {
        while self.open.len() >= self.options.max_open {
            let quietest = self.open.values().filter(|o| o.in_glob).min_by_key(|o| o.grew).map(|o| o.key);
            let Some(key) = quietest else { return }; // only files rotated away: they drain first
            self.close(key, "limit", false, sink);
        }
    }

    fn report(&mut self, source: usize, problem: Option<(SourceError, String)>, sink: &mut impl Sink) {
        let now = problem.as_ref().map(|(reason, _)| *reason);
        if self.states[source] != now {
            match &problem {
                Some((reason, detail)) => {
                    tracing::warn!(
                        glob = self.options.globs[source],
                        reason = reason.as_str(),
                        detail,
                        "cannot follow"
                    );
                    sink.error(source, *reason, detail);
                }
                None => tracing::info!(glob = self.options.globs[source], "readable again"),
            }
            self.states[source] = now;
        }
    }

    /// Reads what `open` has past its offset, up to `budget`: (bytes read, budget used up). A
    /// file that shrank, or holds other bytes at its beginning, was truncated (or replaced):
    /// its copy is read first, from where it was left.
    fn read_new(&mut self, open: &mut Open, sink: &mut impl Sink, budget: u64) -> (u64, bool) {
        let meta = match open.file.metadata() {
            Ok(meta) => meta,
            Err(error) => {
                read_failed(open, &error, sink);
                return (0, false);
            }
        };
        open.modified = meta.modified().unwrap_or(open.modified);
        if meta.len() < open.offset || head_changed(open) {
            let found = self.read_copy(open, sink);
            sink.truncated(open.source, found);
            tracing::info!(path = %open.path.display(), copy_found = found, "truncated: reading from the beginning");
            let (source, written) = (open.source, open.modified);
            open.buffer.flush(|line| sink.line(source, line, written));
            open.offset = 0;
            open.head.clear();
            open.fingerprint = None;
            open.tail.clear();
        }
        let mut read = 0;
        let chunk = &mut self.chunk;
        while read < budget {
            let n = match open.file.read_at(chunk, open.offset) {
                Ok(0) => return (read, false),
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    read_failed(open, &error, sink);
                    return (read, false);
                }
            };
            let bytes = &chunk[..n];
            if open.offset == 0 && open.head.is_empty() && is_compressed(bytes) {
                tracing::info!(path = %open.path.display(), "compressed: not read as text");
                sink.skipped("compressed");
                self.ignored.insert(open.key);
                return (read, false);
            }
            // The head grows only with bytes read from the beginning on.
            if open.head.len() as u64 == open.offset && open.head.len() < HEAD_BYTES {
                let room = HEAD_BYTES - open.head.len();
                open.head.extend_from_slice(&bytes[..room.min(n)]);
                open.fingerprint = fingerprint_of(&open.head);
            }
            keep_tail(&mut open.tail, bytes);
            let (source, written) = (open.source, open.modified);
            open.buffer.push_runs(bytes, |piece| give(sink, source, piece, written));
            open.offset += n as u64;
            read += n as u64;
            open.read_failed = false;
        }
        (read, true)
    }

    /// The copy of a truncated file (copytruncate): in its directory, the file with its
    /// fingerprint and its bytes before the offset read. What it holds past that offset is read
    /// (up to where a glob that follows it started it). Whether it was found.
    fn read_copy(&mut self, open: &mut Open, sink: &mut impl Sink) -> bool {
        let Some(fingerprint) = open.fingerprint else { return false };
        let tail = hash(&open.tail);
        let directory = open.path.parent().map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let Ok(entries) = std::fs::read_dir(&directory) else { return false };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            let key = (meta.dev(), meta.ino());
            if !meta.is_file() || key == open.key || meta.len() < open.offset || self.ignored.contains(&key) {
                continue;
            }
            let Ok(file) = File::open(entry.path()) else { continue };
            let mut head = vec![0; HEAD_BYTES];
            let Ok(kept) = read_fully_at(&file, &mut head, 0) else { continue };
            head.truncate(kept);
            if fingerprint_of(&head) != Some(fingerprint)
                || read_tail(&file, open.offset).map(|t| hash(&t)) != Some(tail)
            {
                continue;
            }
            // Followed already (a glob matches it): up to where it started; else to its end.
            let followed = self.open.get(&key).map(|copy| copy.offset);
            let end = followed.unwrap_or(meta.len());
            let written = meta.modified().unwrap_or(open.modified);
            let mut at = open.offset;
            while at < end {
                let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(self.chunk.len());
                let n = match file.read_at(&mut self.chunk[..want], at) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let source = open.source;
                open.buffer.push_runs(&self.chunk[..n], |piece| give(sink, source, piece, written));
                at += n as u64;
            }
            tracing::info!(copy = %entry.path().display(), from = open.offset, to = at, "read the copy of a truncated file");
            if followed.is_none() {
                let mark = FileMark {
                    path: entry.path().display().to_string(),
                    dev: key.0,
                    ino: key.1,
                    fingerprint,
                    offset: at,
                    tail: read_tail(&file, at).map(|t| hash(&t)).unwrap_or_default(),
                    modified: seconds(written),
                };
                self.remember(mark, at);
            }
            return true;
        }
        false
    }
}

/// Hands `piece` of source `source` to `sink`.
fn give(sink: &mut impl Sink, source: usize, piece: Piece<'_>, written: SystemTime) {
    match piece {
        Piece::Line(line) => sink.line(source, line, written),
        Piece::Run(run) => sink.run(source, run, written),
    }
}

/// Where `open` was read to, up to its last whole line (`None` before it has a fingerprint).
fn mark_of(open: &Open) -> Option<FileMark> {
    let offset = open.offset - open.buffer.pending().min(open.offset);
    Some(FileMark {
        path: open.path.display().to_string(),
        dev: open.key.0,
        ino: open.key.1,
        fingerprint: open.fingerprint?,
        offset,
        tail: read_tail(&open.file, offset).map(|t| hash(&t))?,
        modified: seconds(open.modified),
    })
}

/// Where `open` was read to, before it has a fingerprint (fingerprint 0: none).
fn position_of(open: &Open) -> FileMark {
    let offset = open.offset - open.buffer.pending().min(open.offset);
    FileMark {
        path: open.path.display().to_string(),
        dev: open.key.0,
        ino: open.key.1,
        fingerprint: 0,
        offset,
        tail: read_tail(&open.file, offset).map(|t| hash(&t)).unwrap_or_default(),
        modified: seconds(open.modified),
    }
}

/// The fingerprint of a file whose first bytes are `head`: its first line with its newline,
/// or its first [`HEAD_BYTES`]; `None` while it has neither.
fn fingerprint_of(head: &[u8]) -> Option<u64> {
    match memchr::memchr(b'\n', head) {
        Some(end) => Some(hash(&head[..=end])),
        None if head.len() >= HEAD_BYTES => Some(hash(&head[..HEAD_BYTES])),
        None => None,
    }
}

/// Whether a file starting with `head` is compressed: gzip, zstd, bzip2, xz.
fn is_compressed(head: &[u8]) -> bool {
    const MAGIC: [&[u8]; 4] = [b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"BZh", b"\xfd7zXZ\x00"];
    MAGIC.iter().any(|magic| head.starts_with(magic))
}

/// The bytes of `file` just before `offset`, up to [`TAIL_BYTES`] (`None` if they cannot be
/// read whole).
fn read_tail(file: &File, offset: u64) -> Option<Vec<u8>> {
    let len = offset.min(TAIL_BYTES as u64) as usize;
    let mut tail = vec![0; len];
    let read = read_fully_at(file, &mut tail, offset - len as u64).ok()?;
    (read == len).then_some(tail)
}

/// Keeps the last [`TAIL_BYTES`] of what was read.
fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() >= TAIL_BYTES {
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - TAIL_BYTES..]);
    } else {
        let over = (tail.len() + bytes.len()).saturating_sub(TAIL_BYTES);
        tail.drain(..over);
        tail.extend_from_slice(bytes);
    }
}

fn read_fully_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut read = 0;
    while read < buffer.len() {
        match file.read_at(&mut buffer[read..], offset + read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(read)
}

/// Whether the first bytes of the file are no longer those read from it (another file at the
/// same inode, or truncated and written past the old offset between two looks).
fn head_changed(open: &Open) -> bool {
    if open.head.is_empty() || open.offset == 0 {
        return false;
    }
    let mut now = [0_u8; HEAD_BYTES];
    match read_fully_at(&open.file, &mut now[..open.head.len()], 0) {
        Ok(n) => now[..n] != open.head[..],
        Err(_) => false,
    }
}

fn read_failed(open: &mut Open, error: &io::Error, sink: &mut impl Sink) {
    if !open.read_failed {
        open.read_failed = true;
        let detail = format!("{}: {error}", open.path.display());
        tracing::warn!(detail, "cannot read");
        sink.error(open.source, SourceError::of(error), &detail);
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
