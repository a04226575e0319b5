//! What the follower reads of files on disk: fingerprints, the bytes before an offset, where
//! an open file is now.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{HEAD_BYTES, Open, Record, Report, Sink, SourceError, TAIL_BYTES};
use crate::tail::checkpoint::{FileMark, hash, seconds};
use crate::tail::lines::Piece;

/// Hands `piece` of source `source` to `sink`.
pub(super) fn give(sink: &mut impl Sink, source: usize, piece: Piece<'_>, written: SystemTime) {
    sink.take(Record { source, piece, written });
}

/// Where `open` was read to, up to its last whole line (`None` before it has a fingerprint).
pub(super) fn mark_of(open: &Open) -> Option<FileMark> {
    let offset = open.at.offset - open.buffer.pending().min(open.at.offset);
    Some(FileMark {
        path: open.at.path.display().to_string(),
        dev: open.at.key.0,
        ino: open.at.key.1,
        fingerprint: open.fingerprint?,
        offset,
        tail: tail_before(open, offset)?,
        modified: seconds(open.at.modified),
    })
}

/// Hash of the bytes of `open` before `offset` (where its last whole line ends): those read,
/// kept, when it is where it was read to (the file may have been truncated since); else read
/// again.
fn tail_before(open: &Open, offset: u64) -> Option<u64> {
    if offset == open.at.offset {
        return Some(hash(&open.tail));
    }
    read_tail(&open.at.file, offset).map(|t| hash(&t))
}

/// Where `open` was read to, before it has a fingerprint (fingerprint 0: none).
pub(super) fn position_of(open: &Open) -> FileMark {
    let offset = open.at.offset - open.buffer.pending().min(open.at.offset);
    FileMark {
        path: open.at.path.display().to_string(),
        dev: open.at.key.0,
        ino: open.at.key.1,
        fingerprint: 0,
        offset,
        tail: tail_before(open, offset).unwrap_or_default(),
        modified: seconds(open.at.modified),
    }
}

/// The fingerprint of a file whose first bytes are `head`: its first line with its newline,
/// or its first [`HEAD_BYTES`]; `None` while it has neither.
pub(super) fn fingerprint_of(head: &[u8]) -> Option<u64> {
    match memchr::memchr(b'\n', head) {
        Some(end) => Some(hash(&head[..=end])),
        None if head.len() >= HEAD_BYTES => Some(hash(&head[..HEAD_BYTES])),
        None => None,
    }
}

/// Whether a file starting with `head` is compressed: gzip, zstd, bzip2, xz.
pub(super) fn is_compressed(head: &[u8]) -> bool {
    const MAGIC: [&[u8]; 4] = [b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"BZh", b"\xfd7zXZ\x00"];
    MAGIC.iter().any(|magic| head.starts_with(magic))
}

/// The bytes of `file` just before `offset`, up to [`TAIL_BYTES`] (`None` if they cannot be
/// read whole).
pub(super) fn read_tail(file: &File, offset: u64) -> Option<Vec<u8>> {
    let len = offset.min(TAIL_BYTES as u64) as usize;
    let mut tail = vec![0; len];
    let read = read_fully_at(file, &mut tail, offset - len as u64).ok()?;
    (read == len).then_some(tail)
}

/// Keeps the last [`TAIL_BYTES`] of what was read.
pub(super) fn keep_tail(tail: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() >= TAIL_BYTES {
        tail.clear();
        tail.extend_from_slice(&bytes[bytes.len() - TAIL_BYTES..]);
    } else {
        let over = (tail.len() + bytes.len()).saturating_sub(TAIL_BYTES);
        tail.drain(..over);
        tail.extend_from_slice(bytes);
    }
}

pub(super) fn read_fully_at(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
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
pub(super) fn head_changed(open: &Open) -> bool {
    if open.at.head.is_empty() || open.at.offset == 0 {
        return false;
    }
    let mut now = [0_u8; HEAD_BYTES];
    match read_fully_at(&open.at.file, &mut now[..open.at.head.len()], 0) {
        Ok(n) => now[..n] != open.at.head[..],
        Err(_) => false,
    }
}

pub(super) fn read_failed(open: &mut Open, error: &io::Error, sink: &mut impl Sink) {
    if !open.read_failed {
        open.read_failed = true;
        let detail = format!("{}: {error}", open.at.path.display());
        tracing::warn!(detail, "cannot read");
        sink.report(Report::Error { source: open.at.source, reason: SourceError::of(error), detail: &detail });
    }
}

/// Where an open file is now.
pub(super) enum Now {
    /// At this path.
    At(PathBuf),
    /// Deleted: nothing more will be written to it but by who holds it open.
    Deleted,
}

/// Where `file` is now, from `/proc/self/fd` (`None` where that cannot be read).
pub(super) fn now_at(file: &File) -> Option<Now> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let text = link.to_string_lossy();
    Some(match text.strip_suffix(" (deleted)") {
        Some(_) => Now::Deleted,
        None => Now::At(link),
    })
}

/// Whether the file at `path` is the one with device and inode `key`.
pub(super) fn holds(path: &Path, key: (u64, u64)) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == key)
}
