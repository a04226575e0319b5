//! Files rotation moved: renamed while closed or while the agent was down, the copy of a file
//! truncated (copytruncate). Each found in the file's own directory, by its inode or by its
//! fingerprint and the bytes before where it was read to.

use std::collections::hash_map::Entry;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::disk::{fingerprint_of, give, holds, is_compressed, read_fully_at, read_tail};
use super::{Follower, HEAD_BYTES, Key, Opened, Sink};
use crate::tail::checkpoint::{FileMark, hash, seconds};
use crate::tail::lines::LineBuffer;

impl Follower {
    /// The files remembered in a glob that the last look did not find: one renamed in its
    /// directory is read on from where it was left, as a file rotated away; any other is
    /// forgotten. `true`: one waits for a descriptor.
    pub(super) fn find_or_forget(&mut self, sink: &mut impl Sink) -> bool {
        let looks = self.looks;
        let missing: Vec<Key> = self
            .known
            .iter()
            .filter(|(key, k)| k.seen != looks && !holds(Path::new(&k.mark.path), **key))
            .map(|(key, _)| *key)
            .collect();
        let mut waiting = false;
        for key in missing {
            let Entry::Occupied(entry) = self.known.entry(key) else { continue };
            let Some(source) = entry.get().source else {
                entry.remove();
                continue;
            };
            let mark = entry.get().mark.clone();
            let directory = Path::new(&mark.path).parent().map(Path::to_path_buf);
            let renamed = directory.and_then(|d| std::fs::read_dir(d).ok()).and_then(|entries| {
                entries.flatten().find(|e| e.metadata().is_ok_and(|m| (m.dev(), m.ino()) == key)).map(|e| e.path())
            });
            // Renamed and unchanged since it was closed: nothing to read.
            let (read, then) = (entry.get().read, entry.get().modified);
            let renamed = renamed
                .filter(|path| std::fs::metadata(path).is_ok_and(|m| m.len() != read || m.modified().ok() != then));
            let Some(renamed) = renamed else {
                self.known.remove(&key);
                continue;
            };
            if !self.make_room(sink) {
                waiting = true;
                continue;
            }
            let Some(opened) = self.moved_copy(&mark, &renamed, source) else {
                self.known.remove(&key);
                continue;
            };
            tracing::info!(path = %opened.path.display(), was = %mark.path, offset = mark.offset, "following, renamed while closed");
            self.start_reading(opened, false);
        }
        waiting
    }

    /// At a restart with checkpoints: a file read before that rotation moved while the agent
    /// was down (renamed, or copied and truncated, in its own directory, in a glob or not) is
    /// found by its inode (renamed) or by its fingerprint and the bytes before its offset (the
    /// copy), and read from where it was left as a file rotated away, before the file now at its
    /// path (read first: it is older). A file still at its path is the globs' to find.
    pub(super) fn recover_moved(&mut self, sink: &mut impl Sink) {
        let marks: Vec<FileMark> = self.known.values().map(|k| k.mark.clone()).collect();
        for mark in marks {
            let path = Path::new(&mark.path);
            let Some(source) = self.options.globs.iter().position(|glob| glob.matches(path)) else {
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
                if !self.make_room(sink) {
                    return; // files rotated away fill every descriptor: what is left, the globs find
                }
                let candidate = entry.path();
                if let Some(opened) = self.moved_copy(&mark, &candidate, source) {
                    tracing::info!(path = %candidate.display(), was = %mark.path, offset = mark.offset, "following, moved while stopped");
                    self.start_reading(opened, false);
                    break;
                }
            }
        }
    }

    /// `candidate` opened at `mark`'s offset if it is the file of `mark` moved there (the same
    /// inode, or the same fingerprint and bytes before the offset) and holds what was read.
    pub(super) fn moved_copy(&self, mark: &FileMark, candidate: &Path, source: usize) -> Option<Opened> {
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

    /// The copy of a truncated file (copytruncate): in its directory, the file with its
    /// fingerprint and its bytes before where it was `left`. What it holds past that offset is
    /// pushed to `buffer` (up to where a glob that follows it started it). Whether it was found.
    pub(super) fn read_copy(
        &mut self,
        left: &Left,
        buffer: &mut LineBuffer,
        source: usize,
        sink: &mut impl Sink,
    ) -> bool {
        let Some(fingerprint) = left.fingerprint else { return false };
        let directory = left.path.parent().map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let Ok(entries) = std::fs::read_dir(&directory) else { return false };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            let key = (meta.dev(), meta.ino());
            if !meta.is_file() || key == left.key || meta.len() < left.offset || self.ignored.contains(&key) {
                continue;
            }
            let Ok(file) = File::open(entry.path()) else { continue };
            let mut head = vec![0; HEAD_BYTES];
            let Ok(kept) = read_fully_at(&file, &mut head, 0) else { continue };
            head.truncate(kept);
            if fingerprint_of(&head) != Some(fingerprint)
                || read_tail(&file, left.offset).map(|t| hash(&t)) != Some(left.tail)
            {
                continue;
            }
            // Followed already (a glob matches it): up to where it started; else to its end.
            let followed = self.open.get(&key).map(|copy| copy.at.offset);
            let end = followed.unwrap_or(meta.len());
            let written = meta.modified().unwrap_or(left.modified);
            let mut at = left.offset;
            while at < end {
                let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(self.chunk.len());
                let n = match file.read_at(&mut self.chunk[..want], at) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                buffer.push_runs(&self.chunk[..n], |piece| give(sink, source, piece, written));
                at += n as u64;
            }
            tracing::info!(copy = %entry.path().display(), from = left.offset, to = at, "read the copy of a truncated file");
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
                let source = self.known.get(&key).and_then(|k| k.source);
                self.remember(mark, at, Some(written), source);
            }
            return true;
        }
        false
    }
}

/// Where a file was left: what its copy holds there.
pub(super) struct Left {
    pub(super) path: PathBuf,
    pub(super) key: Key,
    /// `None`: not known yet (the copy cannot be told).
    pub(super) fingerprint: Option<u64>,
    /// Hash of the bytes before `offset`.
    pub(super) tail: u64,
    pub(super) offset: u64,
    pub(super) modified: SystemTime,
}

impl Left {
    /// Where the file of `mark` (closed) was left.
    pub(super) fn of(mark: &FileMark) -> Self {
        Self {
            path: PathBuf::from(&mark.path),
            key: (mark.dev, mark.ino),
            // Fingerprint 0: remembered before it had one.
            fingerprint: (mark.fingerprint != 0).then_some(mark.fingerprint),
            tail: mark.tail,
            offset: mark.offset,
            modified: SystemTime::UNIX_EPOCH + Duration::from_secs(mark.modified),
        }
    }
}
