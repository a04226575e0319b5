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
//! - any number of files is followed, at most `AGENT_MAX_OPEN_FILES` of them open: a file
//!   that changes while that many are open takes the descriptor of the least recently grown one
//!   not opened in this look (a file waits for the next look where none is: the files waiting
//!   longest are served first); files unchanged for `AGENT_IGNORE_OLDER` are closed. A closed
//!   file is remembered by where it was read to (its mark) and opened again where it was left
//!   when it changes, whichever reason closed it: grown, truncated (its copy looked for as
//!   for an open file) or renamed (found in its directory by its inode). A file that is no
//!   longer where it was remembered and not found is forgotten: what is remembered is bounded
//!   by the files that exist.
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
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

pub use crate::record::{Record, Report, Sink, SourceError};
use crate::tail::Start;
use crate::tail::checkpoint::{FileMark, hash, seconds};
use crate::tail::glob::Glob;
use crate::tail::lines::LineBuffer;

mod disk;
mod moved;
mod read;

use moved::Left;

use disk::{Now, fingerprint_of, is_compressed, mark_of, now_at, position_of, read_fully_at, read_tail};

/// Bytes of a file's beginning its fingerprint is made of, at most (up to its first newline).
const HEAD_BYTES: usize = 256;
/// Bytes before an offset that must be the same for a file to continue another.
const TAIL_BYTES: usize = 256;
/// Bytes read at once.
const CHUNK_BYTES: usize = 64 * 1024;
/// Bytes read from one file in one poll: a file written faster than that is read on (the
/// caller polls again at once) without starving the others.
const BUDGET_BYTES: u64 = 8 * 1024 * 1024;

/// A file: its device and inode.
type Key = (u64, u64);

/// How files are followed.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// The globs, index by index (the sources), compiled.
    pub globs: Vec<Glob>,
    /// Where files present at the first look start (without checkpoints).
    pub start: Start,
    /// Lines are kept up to this many bytes.
    pub max_line: usize,
    /// A file rotated away is read until it has not grown for this long.
    pub rotate_wait: Duration,
    /// Files unchanged for this long are closed.
    pub ignore_older: Option<Duration>,
    /// Files open at once at most (any number is followed).
    pub max_open: usize,
    /// Lines joined into events (`AGENT_MULTILINE_START`), each file's its own.
    pub multiline: Option<std::sync::Arc<crate::tail::multiline::Multiline>>,
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

/// A file being read: the file, and how its reading goes on.
struct Open {
    /// The file, and where it is read to.
    at: Opened,
    fingerprint: Option<u64>,
    /// The last bytes read before `at.offset`, up to [`TAIL_BYTES`].
    tail: Vec<u8>,
    buffer: LineBuffer,
    /// At a path of a glob in the last look.
    in_glob: bool,
    /// When it last grew (or was opened).
    grew: Instant,
    /// Order of discovery: the older of two files is read first.
    order: u64,
    /// The look it was opened in: not closed to make room in that look.
    opened: u64,
    read_failed: bool,
}

/// A file opened: where it is read to (where reading it starts, when just opened).
struct Opened {
    file: File,
    key: (u64, u64),
    path: PathBuf,
    source: usize,
    offset: u64,
    /// The first bytes read from the beginning, up to [`HEAD_BYTES`].
    head: Vec<u8>,
    /// When it was last seen modified.
    modified: SystemTime,
}

/// A file read and closed (or read before a restart): where it was read to.
#[derive(Clone, Debug)]
struct Known {
    mark: FileMark,
    /// Bytes read when it was closed: it stays closed while its length is that and it was not
    /// modified since.
    read: u64,
    /// Its modification time when last read (`None`: read before a restart, the mark's
    /// seconds tell).
    modified: Option<SystemTime>,
    /// When it was remembered: of the files waiting for a descriptor, those closed first are
    /// opened first.
    order: u64,
    /// The glob that last matched it, while one does.
    source: Option<usize>,
    /// The look that last found it in a glob.
    seen: u64,
}

/// A file a look found to read, that needs a descriptor.
struct Wanted {
    source: usize,
    path: PathBuf,
    key: Key,
    /// Files closed earliest first (new files first of all).
    waiting: u64,
    len: u64,
    modified: SystemTime,
}

/// The files of the configured globs, followed.
pub struct Follower {
    options: FollowOptions,
    open: HashMap<Key, Open>,
    known: HashMap<Key, Known>,
    /// Files never read as text (compressed), by device and inode.
    ignored: HashSet<Key>,
    begin: Begin,
    started: bool,
    states: Vec<Option<SourceError>>,
    chunk: Vec<u8>,
    counter: u64,
    /// Looks made.
    looks: u64,
    /// Where files present at the first look that waited for a descriptor start.
    first_look: HashMap<Key, u64>,
}

impl Follower {
    /// Follows as `options` say, from `begin`.
    pub fn new(options: FollowOptions, begin: Begin) -> Self {
        let states = vec![None; options.globs.len()];
        let mut follower = Self {
            options,
            open: HashMap::new(),
            known: HashMap::new(),
            ignored: HashSet::new(),
            begin: begin.clone(),
            started: false,
            states,
            chunk: vec![0; CHUNK_BYTES],
            counter: 0,
            looks: 0,
            first_look: HashMap::new(),
        };
        if let Begin::Restart { files, .. } = begin {
            for mark in files {
                let read = mark.offset;
                follower.remember(mark, read, None, None);
            }
        }
        follower
    }

    /// The globs, index by index (the sources).
    pub fn globs(&self) -> &[Glob] {
        &self.options.globs
    }

    /// The paths open now.
    pub fn paths(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = self.open.values().map(|t| t.at.path.clone()).collect();
        paths.sort();
        paths
    }

    /// One look: new and changed files found, every open file read to its end (or to this
    /// poll's budget), files rotated away for `AGENT_ROTATE_WAIT`, or idle, closed. `true`:
    /// there is more to read now (past the budget, or files waiting for a descriptor).
    pub fn poll(&mut self, sink: &mut impl Sink) -> bool {
        let now = Instant::now();
        if !self.started && matches!(self.begin, Begin::Restart { .. }) {
            self.recover_moved(sink);
        }
        let waiting = self.discover(sink);
        self.started = true;
        let more = self.read_all(sink, BUDGET_BYTES);
        self.end_waiting_events(sink, now);
        self.close_idle(sink, now);
        sink.report(Report::OpenFiles(self.open.len()));
        // Files waiting get a descriptor in the next look, but from files rotated away, which
        // close on their own time.
        more || (waiting && self.open.values().any(|o| o.in_glob))
    }

    /// Files followed: open, or closed and still matched by a glob.
    pub fn followed(&self) -> usize {
        self.open.len() + self.known.values().filter(|k| k.source.is_some()).count()
    }

    /// At shutdown: every open file read to its end; the last line of a file without its
    /// newline counted when `flush_partial` (without checkpoints: nothing will complete it),
    /// else left for the next start to read whole.
    pub fn finish(&mut self, sink: &mut impl Sink, flush_partial: bool) {
        // Every file that waits for a descriptor gets one in a look of its own.
        let looks = self.followed() / self.options.max_open.max(1) + 2;
        for _ in 0..looks {
            let waiting = self.discover(sink);
            while self.read_all(sink, u64::MAX) {}
            if !waiting || !self.open.values().any(|o| o.in_glob) {
                break;
            }
        }
        for open in self.open.values_mut() {
            let (source, written) = (open.at.source, open.at.modified);
            if flush_partial {
                open.buffer.flush(|piece| disk::give(sink, source, piece, written));
            } else {
                // An event of whole lines is counted now, and the checkpoint marks its end.
                open.buffer.flush_event(|piece| disk::give(sink, source, piece, written));
            }
        }
    }

    /// Where each file was read to, for a checkpoint: open files up to their last whole line,
    /// then those remembered (a file without a fingerprint yet by its inode only).
    pub fn marks(&self) -> Vec<FileMark> {
        let mut marks: Vec<FileMark> =
            self.open.values().map(|o| mark_of(o).unwrap_or_else(|| position_of(o))).collect();
        marks.extend(self.known.iter().filter(|(key, _)| !self.open.contains_key(key)).map(|(_, k)| k.mark.clone()));
        // In a stable order: an unchanged checkpoint is not written again.
        marks.sort_unstable_by_key(|m| (m.dev, m.ino));
        marks
    }

    /// Ends the events that waited `AGENT_MULTILINE_WAIT` for a next line.
    fn end_waiting_events(&mut self, sink: &mut impl Sink, now: Instant) {
        for open in self.open.values_mut() {
            let (source, written) = (open.at.source, open.at.modified);
            open.buffer.expire(now, |piece| disk::give(sink, source, piece, written));
        }
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
                    quiet >= *limit && wall.duration_since(open.at.modified).unwrap_or_default() >= *limit
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
            let (source, written) = (open.at.source, open.at.modified);
            open.buffer.flush(|piece| disk::give(sink, source, piece, written));
        }
        if reason == "limit" {
            tracing::debug!(path = %open.at.path.display(), offset = open.at.offset, reason, "closed");
        } else {
            tracing::info!(path = %open.at.path.display(), offset = open.at.offset, reason, "closed");
        }
        sink.report(Report::Closed(reason));
        // Remembered even before it has a fingerprint (empty, or no whole first line yet): by its
        // inode, so that it stays closed while it does not change. Where it is now: a file
        // rotated away may have been renamed again; a deleted one is forgotten.
        let mut mark = mark_of(&open).unwrap_or_else(|| position_of(&open));
        match now_at(&open.at.file) {
            Some(Now::Deleted) => return,
            Some(Now::At(path)) => mark.path = path.display().to_string(),
            None => {}
        }
        self.remember(mark, open.at.offset, Some(open.at.modified), open.in_glob.then_some(open.at.source));
    }

    fn remember(&mut self, mark: FileMark, read: u64, modified: Option<SystemTime>, source: Option<usize>) {
        self.counter += 1;
        let key = (mark.dev, mark.ino);
        self.known.insert(key, Known { mark, read, modified, order: self.counter, source, seen: self.looks });
    }

    /// Expands each glob: files changed since they were closed, and new ones, are opened, those
    /// waiting longest first, while a descriptor can be had; files no longer where they were
    /// are looked for or forgotten; each glob's problem said once. `true`: files wait for a
    /// descriptor.
    fn discover(&mut self, sink: &mut impl Sink) -> bool {
        self.looks += 1;
        for open in self.open.values_mut() {
            open.in_glob = false;
        }
        let sources = self.options.globs.len();
        let mut problems: Vec<Option<(SourceError, String)>> = vec![None; sources];
        let mut found = vec![false; sources];
        let mut wanted = Vec::new();
        // Out while they are walked (each look reads the follower's state); put back after.
        let globs = std::mem::take(&mut self.options.globs);
        for (source, glob) in globs.iter().enumerate() {
            glob.walk(&mut |entry| {
                let looked = entry.and_then(|path| self.look_at(source, path, &mut wanted));
                match looked {
                    Ok(is_file) => found[source] |= is_file,
                    Err((path, error)) => {
                        problems[source] = Some((SourceError::of(&error), format!("{}: {error}", path.display())));
                    }
                }
            });
        }
        self.options.globs = globs;
        wanted.sort_by_key(|w: &Wanted| w.waiting);
        let mut waiting = false;
        for want in wanted {
            if !self.make_room(sink) {
                waiting = true;
                if !self.started && !self.known.contains_key(&want.key) {
                    // Present at the first look: starts where such a file starts, once it is opened.
                    let offset = self.first_offset(want.len, want.modified);
                    self.first_look.insert(want.key, offset);
                }
                continue;
            }
            let source = want.source;
            if let Err((path, error)) = self.follow(want, sink) {
                problems[source] = Some((SourceError::of(&error), format!("{}: {error}", path.display())));
            }
        }
        waiting |= self.find_or_forget(sink);
        for (source, problem) in problems.into_iter().enumerate() {
            let mut problem = problem;
            if !found[source] && problem.is_none() {
                let prefix = self.options.globs[source].base();
                if let Err(error) = std::fs::metadata(prefix) {
                    problem = Some((SourceError::of(&error), format!("{}: {error}", prefix.display())));
                }
            }
            self.report(source, problem, sink);
        }
        waiting
    }

    /// Looks at `path`, matched by glob `source`: a regular file open already is marked in the
    /// glob; one closed and unchanged since stays closed; any other is `wanted`. `Ok(true)`: a
    /// file.
    fn look_at(
        &mut self,
        source: usize,
        path: PathBuf,
        wanted: &mut Vec<Wanted>,
    ) -> Result<bool, (PathBuf, io::Error)> {
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            // Gone between the listing and now: the next look sees what replaced it.
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Err((path, error)),
        };
        if !meta.is_file() {
            return Ok(false);
        }
        let key = (meta.dev(), meta.ino());
        if let Some(open) = self.open.get_mut(&key) {
            open.in_glob = true;
            if open.at.path != path {
                open.at.path = path;
            }
            return Ok(true);
        }
        if self.ignored.contains(&key) {
            return Ok(true);
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let waiting = match self.known.get_mut(&key) {
            Some(known) => {
                known.seen = self.looks;
                known.source = Some(source);
                if known.mark.path != path.as_os_str().to_string_lossy() {
                    known.mark.path = path.display().to_string();
                }
                // Closed and unchanged since: stays closed.
                let unchanged = match known.modified {
                    Some(then) => then == modified,
                    None => known.mark.modified >= seconds(modified),
                };
                if known.read == meta.len() && unchanged {
                    return Ok(true);
                }
                known.order
            }
            None => 0,
        };
        wanted.push(Wanted { source, path, key, waiting, len: meta.len(), modified });
        Ok(true)
    }

    /// Opens the file `want` names, a descriptor free for it: where it was left if it was read
    /// before (its copy read first if it was truncated since), else where a new file starts.
    fn follow(&mut self, want: Wanted, sink: &mut impl Sink) -> Result<(), (PathBuf, io::Error)> {
        let Wanted { source, path, key, .. } = want;
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err((path, error)),
        };
        let meta = file.metadata().map_err(|error| (path.clone(), error))?;
        if (meta.dev(), meta.ino()) != key {
            return Ok(()); // replaced since the look: the next one sees the new file
        }
        let mut head = vec![0; HEAD_BYTES];
        let kept = read_fully_at(&file, &mut head, 0).map_err(|error| (path.clone(), error))?;
        head.truncate(kept);
        if is_compressed(&head) {
            tracing::info!(path = %path.display(), "compressed: not read as text");
            sink.report(Report::Skipped("compressed"));
            self.ignored.insert(key);
            self.known.remove(&key);
            return Ok(());
        }
        let fingerprint = fingerprint_of(&head);
        let (len, modified) = (meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH));
        let (offset, how) = match self.continued(&file, key, fingerprint, len) {
            Some(offset) => (offset, "continued"),
            None => match self.known.remove(&key) {
                // Truncated while closed: what its copy holds past where it was left, then all of it.
                Some(known) => {
                    let mut buffer = LineBuffer::joining(self.options.max_line, self.options.multiline.as_ref());
                    let found = self.read_copy(&Left::of(&known.mark), &mut buffer, source, sink);
                    buffer.flush(|piece| disk::give(sink, source, piece, modified));
                    sink.report(Report::Truncated { source, copy_found: found });
                    (0, "truncated while closed")
                }
                None => match self.first_look.remove(&key) {
                    Some(offset) if offset <= len => (offset, "new, present at the first look"),
                    _ => (self.first_offset(len, modified), "new"),
                },
            },
        };
        if how == "continued" {
            tracing::debug!(path = %path.display(), offset, how, "following");
        } else {
            tracing::info!(path = %path.display(), offset, how, "following");
        }
        self.start_reading(Opened { file, key, path, source, offset, head, modified }, true);
        Ok(())
    }

    /// Reads `at` from its offset on (a descriptor was made room for): `in_glob`, a file of
    /// a glob; else one rotated away, read until it has been quiet for `AGENT_ROTATE_WAIT`.
    fn start_reading(&mut self, at: Opened, in_glob: bool) {
        // The bytes before the offset: what a copy of it would hold there.
        let tail = read_tail(&at.file, at.offset).unwrap_or_default();
        self.counter += 1;
        let key = at.key;
        let open = Open {
            fingerprint: fingerprint_of(&at.head),
            tail,
            buffer: LineBuffer::joining(self.options.max_line, self.options.multiline.as_ref()),
            in_glob,
            grew: Instant::now(),
            order: self.counter,
            opened: self.looks,
            read_failed: false,
            at,
        };
        self.open.insert(key, open);
        self.known.remove(&key);
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
        let same = self.known.get(&key);
        if let Some(known) = same.filter(|k| k.mark.offset <= len && holds(k.mark.offset, k.mark.tail)) {
            return Some(known.mark.offset);
        }
        let fingerprint = fingerprint?;
        let mut known: Vec<(u64, u64)> = self
            .known
            .values()
            .filter(|k| k.mark.fingerprint == fingerprint && k.mark.offset <= len)
            .map(|k| (k.mark.offset, k.mark.tail))
            .collect();
        // The furthest that holds: a copy made later holds more.
        known.sort_unstable_by_key(|k| std::cmp::Reverse(k.0));
        if let Some((offset, _)) = known.into_iter().find(|(offset, tail)| holds(*offset, *tail)) {
            return Some(offset);
        }
        let copy_of_open = self.open.values().any(|o| {
            o.at.key != key
                && o.fingerprint == Some(fingerprint)
                && o.at.offset <= len
                && holds(o.at.offset, hash(&o.tail))
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

    /// Makes room for one more open file while `AGENT_MAX_OPEN_FILES` are open: the least
    /// recently grown file of a glob not opened in this look is closed (remembered where it was
    /// read to). `false`: none can be (files opened in this look are read first; files rotated
    /// away drain first).
    fn make_room(&mut self, sink: &mut impl Sink) -> bool {
        while self.open.len() >= self.options.max_open {
            let looks = self.looks;
            let quietest =
                self.open.values().filter(|o| o.in_glob && o.opened < looks).min_by_key(|o| o.grew).map(|o| o.at.key);
            let Some(key) = quietest else { return false };
            self.close(key, "limit", false, sink);
        }
        true
    }

    fn report(&mut self, source: usize, problem: Option<(SourceError, String)>, sink: &mut impl Sink) {
        let now = problem.as_ref().map(|(reason, _)| *reason);
        if self.states[source] != now {
            match &problem {
                Some((reason, detail)) => {
                    tracing::warn!(
                        glob = self.options.globs[source].as_str(),
                        reason = reason.as_str(),
                        detail,
                        "cannot follow"
                    );
                    sink.report(Report::Error { source, reason: *reason, detail });
                }
                None => tracing::info!(glob = self.options.globs[source].as_str(), "readable again"),
            }
            self.states[source] = now;
        }
    }
}

#[cfg(test)]
mod tests;
