//! Bytes into lines: complete lines are handed out as they are found, a last line without its
//! newline is kept until the newline comes (never split, never counted twice), and a line longer
//! than the bound is kept only up to it (counted once, matched on its first bytes). With
//! `AGENT_MULTILINE_START`, lines are joined into events ([`crate::tail::multiline`]) before they are
//! handed out.

use std::sync::Arc;
use std::time::Instant;

use memchr::memchr;

use crate::record::Event;
pub use crate::record::{Line, Piece};
use crate::tail::multiline::{Joiner, Multiline};

/// The part of a line seen so far.
#[derive(Debug)]
pub struct LineBuffer {
    partial: Vec<u8>,
    overflow: bool,
    /// Bytes of the partial line seen, those beyond the bound included.
    seen: u64,
    max: usize,
    /// The event being joined, with `AGENT_MULTILINE_START`.
    events: Option<Joiner>,
}

impl LineBuffer {
    /// Lines kept up to `max` bytes.
    pub fn new(max: usize) -> Self {
        Self { partial: Vec::new(), overflow: false, seen: 0, max, events: None }
    }

    /// Lines kept up to `max` bytes, joined into events where `multiline` is set.
    pub fn joining(max: usize, multiline: Option<&Arc<Multiline>>) -> Self {
        Self { events: multiline.map(|m| Joiner::new(m.clone())), ..Self::new(max) }
    }

    /// Bytes of the line waiting for its newline (those beyond the bound included), and of the
    /// event waiting for its end: where a checkpoint must resume is that many bytes before what
    /// was read.
    pub fn pending(&self) -> u64 {
        self.seen + self.events.as_ref().map_or(0, Joiner::pending)
    }

    /// When the event waiting for its end ends for want of a new line.
    pub fn due(&self) -> Option<Instant> {
        self.events.as_ref().and_then(Joiner::due)
    }

    /// The event waiting for its end, if it has waited long enough by `now`.
    pub fn expire(&mut self, now: Instant, mut emit: impl FnMut(Piece<'_>)) {
        if let Some(events) = &mut self.events {
            events.expire(now, &mut |event| emit(Piece::Event(event)));
        }
    }

    /// Splits `chunk` (what follows what was pushed before): the line waiting for its newline,
    /// completed, as a [`Piece::Line`]; every complete line after it as one [`Piece::Run`]
    /// (each ending in `\n`); the rest is kept.
    pub fn push_runs(&mut self, mut chunk: &[u8], mut emit: impl FnMut(Piece<'_>)) {
        if self.events.is_some() {
            self.push_events(chunk, &mut emit);
            return;
        }
        if self.has_partial() {
            let Some(end) = memchr(b'\n', chunk) else {
                self.keep(chunk);
                return;
            };
            self.keep(&chunk[..end]);
            emit(Piece::Line(Line { bytes: trim_cr(&self.partial), truncated: self.overflow }));
            self.partial.clear();
            self.overflow = false;
            self.seen = 0;
            chunk = &chunk[end + 1..];
        }
        match memchr::memrchr(b'\n', chunk) {
            Some(last) => {
                emit(Piece::Run(&chunk[..=last]));
                self.keep(&chunk[last + 1..]);
            }
            None => self.keep(chunk),
        }
    }

    /// Splits `chunk` into lines and joins them into events.
    fn push_events(&mut self, chunk: &[u8], emit: &mut impl FnMut(Piece<'_>)) {
        let now = Instant::now();
        let max = self.max;
        let mut lines: Vec<(usize, usize, u64)> = Vec::new();
        let mut long_partial = false;
        // Lines are found first, then joined: the joiner and the partial line are both ours.
        let mut start = 0;
        let mut completed = None;
        for end in memchr::memchr_iter(b'\n', chunk) {
            if start == 0 && self.has_partial() {
                self.keep(&chunk[..end]);
                long_partial = self.overflow || trim_cr(&self.partial).len() > max;
                completed = Some(self.seen + 1);
            } else {
                lines.push((start, end, (end - start) as u64 + 1));
            }
            start = end + 1;
        }
        let Some(events) = &mut self.events else { return };
        let mut give = |event: Event<'_>| emit(Piece::Event(event));
        if let Some(raw) = completed {
            events.push_line(trim_cr(&self.partial), long_partial, raw, now, &mut give);
            self.partial.clear();
            self.overflow = false;
            self.seen = 0;
        }
        for (from, to, raw) in lines {
            let line = trim_cr(&chunk[from..to]);
            events.push_line(&line[..line.len().min(max)], line.len() > max, raw, now, &mut give);
        }
        self.keep(&chunk[start..]);
    }

    /// Whether part of a line is waiting for its newline.
    pub fn has_partial(&self) -> bool {
        !self.partial.is_empty() || self.overflow
    }

    /// Splits `chunk` (what follows what was pushed before) into lines, handing each complete
    /// one to `emit`.
    pub fn push(&mut self, mut chunk: &[u8], mut emit: impl FnMut(Line<'_>)) {
        while let Some(end) = memchr(b'\n', chunk) {
            let (head, rest) = (&chunk[..end], &chunk[end + 1..]);
            if self.has_partial() {
                self.keep(head);
                let truncated = self.overflow;
                emit(Line { bytes: trim_cr(&self.partial), truncated });
                self.partial.clear();
                self.overflow = false;
                self.seen = 0;
            } else if head.len() > self.max {
                emit(Line { bytes: &head[..self.max], truncated: true });
            } else {
                emit(Line { bytes: trim_cr(head), truncated: false });
            }
            chunk = rest;
        }
        self.keep(chunk);
    }

    /// Hands out the line waiting for its newline, if any (the file is gone or was truncated:
    /// no newline will come), and the event waiting for its end.
    pub fn flush(&mut self, mut emit: impl FnMut(Piece<'_>)) {
        let now = Instant::now();
        let partial = self.has_partial();
        match &mut self.events {
            None if partial => {
                emit(Piece::Line(Line { bytes: trim_cr(&self.partial), truncated: self.overflow }));
            }
            None => {}
            Some(events) => {
                let mut give = |event: Event<'_>| emit(Piece::Event(event));
                if !self.partial.is_empty() || self.overflow {
                    events.push_line(trim_cr(&self.partial), self.overflow, self.seen, now, &mut give);
                }
                events.flush(&mut give);
            }
        }
        self.discard();
    }

    /// Hands out the event waiting for its end (no more lines will come to it).
    pub fn flush_event(&mut self, mut emit: impl FnMut(Piece<'_>)) {
        if let Some(events) = &mut self.events {
            events.flush(&mut |event| emit(Piece::Event(event)));
        }
    }

    /// A complete line (from a source that splits lines itself, the log stream): joined into
    /// the event, or handed out as it is.
    pub fn line(&mut self, line: Line<'_>, mut emit: impl FnMut(Piece<'_>)) {
        match &mut self.events {
            None => emit(Piece::Line(line)),
            Some(events) => {
                let raw = line.bytes.len() as u64 + 1;
                events
                    .push_line(line.bytes, line.truncated, raw, Instant::now(), &mut |event| emit(Piece::Event(event)));
            }
        }
    }

    /// Forgets the line waiting for its newline (it will be read again from its start).
    pub fn discard(&mut self) {
        self.partial.clear();
        self.overflow = false;
        self.seen = 0;
    }

    fn keep(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        let room = self.max - self.partial.len();
        if bytes.len() > room {
            self.partial.extend_from_slice(&bytes[..room]);
            self.overflow = true;
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(buffer: &mut LineBuffer, chunks: &[&[u8]]) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for chunk in chunks {
            buffer.push(chunk, |l| out.push((String::from_utf8_lossy(l.bytes).into_owned(), l.truncated)));
        }
        out
    }

    #[test]
    fn a_line_split_across_reads_is_one_line() {
        let mut buffer = LineBuffer::new(64);
        let out = lines(&mut buffer, &[b"first\nsec", b"ond", b" half\r\nthird"]);
        assert_eq!(out, [("first".into(), false), ("second half".into(), false)]);
        assert!(buffer.has_partial(), "third waits for its newline");
        let more = lines(&mut buffer, &[b" line\n"]);
        assert_eq!(more, [("third line".into(), false)]);
        assert!(!buffer.has_partial());
    }

    #[test]
    fn a_long_line_is_kept_to_the_bound_and_handed_out_once() {
        let mut buffer = LineBuffer::new(8);
        let long = b"0123456789abcdef\nshort\n";
        assert_eq!(lines(&mut buffer, &[long]), [("01234567".into(), true), ("short".into(), false)]);
        // Long and split: bounded while it grows.
        let out = lines(&mut buffer, &[b"abcdef", b"ghijkl", b"mnop", b"\n"]);
        assert_eq!(out, [("abcdefgh".into(), true)]);
        assert!(buffer.partial.capacity() < 64, "memory stays bounded");
    }

    #[test]
    fn flush_hands_out_the_waiting_line() {
        let mut buffer = LineBuffer::new(64);
        assert!(lines(&mut buffer, &[b"no newline"]).is_empty());
        let mut out = Vec::new();
        let mut take = |p: Piece<'_>| {
            if let Piece::Line(l) = p {
                out.push(l.bytes.to_vec());
            }
        };
        buffer.flush(&mut take);
        buffer.flush(&mut take);
        assert_eq!(out, [b"no newline".to_vec()], "once");
    }

    fn collect(piece: Piece<'_>, lines: &mut Vec<Vec<u8>>, runs: &mut Vec<Vec<u8>>) {
        match piece {
            Piece::Line(line) => lines.push(line.bytes.to_vec()),
            Piece::Run(run) => runs.push(run.to_vec()),
            Piece::Event(event) => lines.push(event.text.to_vec()),
        }
    }

    #[test]
    fn runs_of_complete_lines_and_the_line_they_complete() {
        let mut buffer = LineBuffer::new(64);
        let mut lines = Vec::new();
        let mut runs = Vec::new();
        buffer.push_runs(b"a\nb\nhal", |p| collect(p, &mut lines, &mut runs));
        assert_eq!((lines.len(), runs), (0, vec![b"a\nb\n".to_vec()]));
        assert_eq!(buffer.pending(), 3);
        let mut runs = Vec::new();
        buffer.push_runs(b"f\nc\nd", |p| collect(p, &mut lines, &mut runs));
        assert_eq!(lines, [b"half".to_vec()]);
        assert_eq!(runs, [b"c\n".to_vec()]);
        assert_eq!(buffer.pending(), 1);
        buffer.push_runs(b"dd", |_| {});
        assert_eq!(buffer.pending(), 3);
    }

    /// Joined into events: a line split across reads joins whole; the bytes of the event
    /// waiting for its end are pending, as the partial line's are.
    #[test]
    fn lines_are_joined_into_events() {
        let multiline = Arc::new(Multiline {
            start: crate::tail::multiline::Start::Java,
            wait: std::time::Duration::from_secs(1),
            max_lines: 500,
            max_bytes: 1024,
        });
        let mut buffer = LineBuffer::joining(64, Some(&multiline));
        let mut events = Vec::new();
        let mut take = |p: Piece<'_>| match p {
            Piece::Event(e) => events.push((String::from_utf8_lossy(e.text).into_owned(), e.lines)),
            other => panic!("{other:?}"),
        };
        buffer.push_runs(b"INFO a\nException: x\n\tat o", &mut take);
        assert_eq!(buffer.pending(), 13 + 5, "the event and the partial line");
        buffer.push_runs(b"ne\r\n\tat two\nINFO b\n", &mut take);
        assert_eq!(buffer.pending(), 7);
        buffer.flush(&mut take);
        assert_eq!(buffer.pending(), 0);
        assert_eq!(
            events,
            [("INFO a".into(), 1), ("Exception: x\n\tat one\n\tat two".into(), 3), ("INFO b".into(), 1)]
        );
    }

    #[test]
    fn empty_lines_are_lines() {
        let mut buffer = LineBuffer::new(64);
        assert_eq!(lines(&mut buffer, &[b"\n\na\n"]).len(), 3);
    }
}
