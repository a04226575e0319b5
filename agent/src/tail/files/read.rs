//! Reading open files: each to its end (or its budget), the files rotated away first; a file
//! truncated, or holding other bytes at its beginning, read again from its start once its
//! copy is read.

use std::io;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use super::disk::{fingerprint_of, give, head_changed, is_compressed, keep_tail, read_failed};
use super::moved::Left;
use super::{Follower, HEAD_BYTES, Open, Report, Sink};
use crate::tail::checkpoint::hash;

impl Follower {
    pub(super) fn read_all(&mut self, sink: &mut impl Sink, budget: u64) -> bool {
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

    /// Reads what `open` has past its offset, up to `budget`: (bytes read, budget used up). A
    /// file that shrank, or holds other bytes at its beginning, was truncated (or replaced):
    /// its copy is read first, from where it was left.
    pub(super) fn read_new(&mut self, open: &mut Open, sink: &mut impl Sink, budget: u64) -> (u64, bool) {
        let meta = match open.at.file.metadata() {
            Ok(meta) => meta,
            Err(error) => {
                read_failed(open, &error, sink);
                return (0, false);
            }
        };
        open.at.modified = meta.modified().unwrap_or(open.at.modified);
        if meta.len() < open.at.offset || head_changed(open) {
            let left = Left {
                path: open.at.path.clone(),
                key: open.at.key,
                fingerprint: open.fingerprint,
                tail: hash(&open.tail),
                offset: open.at.offset,
                modified: open.at.modified,
            };
            let found = self.read_copy(&left, &mut open.buffer, open.at.source, sink);
            sink.report(Report::Truncated { source: open.at.source, copy_found: found });
            tracing::info!(path = %open.at.path.display(), copy_found = found, "truncated: reading from the beginning");
            let (source, written) = (open.at.source, open.at.modified);
            open.buffer.flush(|piece| give(sink, source, piece, written));
            open.at.offset = 0;
            open.at.head.clear();
            open.fingerprint = None;
            open.tail.clear();
        }
        let mut read = 0;
        let chunk = &mut self.chunk;
        while read < budget {
            let n = match open.at.file.read_at(chunk, open.at.offset) {
                Ok(0) => return (read, false),
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    read_failed(open, &error, sink);
                    return (read, false);
                }
            };
            let bytes = &chunk[..n];
            if open.at.offset == 0 && open.at.head.is_empty() && is_compressed(bytes) {
                tracing::info!(path = %open.at.path.display(), "compressed: not read as text");
                sink.report(Report::Skipped("compressed"));
                self.ignored.insert(open.at.key);
                return (read, false);
            }
            // The head grows only with bytes read from the beginning on.
            if open.at.head.len() as u64 == open.at.offset && open.at.head.len() < HEAD_BYTES {
                let room = HEAD_BYTES - open.at.head.len();
                open.at.head.extend_from_slice(&bytes[..room.min(n)]);
                open.fingerprint = fingerprint_of(&open.at.head);
            }
            keep_tail(&mut open.tail, bytes);
            let (source, written) = (open.at.source, open.at.modified);
            open.buffer.push_runs(bytes, |piece| give(sink, source, piece, written));
            open.at.offset += n as u64;
            read += n as u64;
            open.read_failed = false;
        }
        (read, true)
    }
}
