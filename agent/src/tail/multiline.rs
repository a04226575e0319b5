//! Multi-line events (`AGENT_MULTILINE_START`): a stack trace is one event, not thirty lines. A
//! line that starts an event ends the one before it; a line that does not joins it. An event
//! also ends after `AGENT_MULTILINE_WAIT` without a new line, and at `AGENT_MULTILINE_MAX_LINES`
//! lines (the next line starts the next event: nothing is lost, the cut is counted); its text is
//! kept up to `AGENT_MULTILINE_MAX_BYTES` (what is cut is counted). Each file, and the log
//! stream, has its own events. The presets know their language's traces: Java (`at ...`,
//! `Caused by:`), Python (`Traceback ...` to the exception's line, chained ones too) and Go
//! (`panic:` and its goroutines).

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::pattern::Pattern;
pub use crate::record::Event;

/// What starts an event.
#[derive(Clone, Debug)]
pub enum Start {
    /// A line this expression matches.
    Pattern(Pattern),
    /// Any line but a Java stack trace's frames and causes.
    Java,
    /// Any line but a Python traceback's.
    Python,
    /// Any line but a Go panic's trace.
    Go,
}

impl Start {
    /// The presets' names.
    pub const PRESETS: [&'static str; 3] = ["java", "python", "go"];

    /// A preset by name, else the regular expression `value` is (what is wrong with it, as
    /// [`Pattern::new`] says it).
    pub fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "java" => Self::Java,
            "python" => Self::Python,
            "go" => Self::Go,
            pattern => Self::Pattern(Pattern::new(pattern)?),
        })
    }
}

/// How events are made of lines.
#[derive(Clone, Debug)]
pub struct Multiline {
    /// What starts an event.
    pub start: Start,
    /// An event ends this long after its last line.
    pub wait: Duration,
    /// An event ends at this many lines.
    pub max_lines: u64,
    /// An event's text is kept up to this many bytes.
    pub max_bytes: usize,
}

/// Where a trace stands, for the presets.
#[derive(Clone, Copy, Debug, Default)]
struct Trace {
    /// In a Python traceback, or a Go panic.
    within: bool,
    /// The last line was a Python frame (indented): the next unindented one is the exception.
    frame: bool,
}

/// The event being made, of one file or stream.
#[derive(Debug)]
pub struct Joiner {
    multiline: Arc<Multiline>,
    text: Vec<u8>,
    lines: u64,
    /// Bytes of the event in its source, newlines included: where a checkpoint resumes is that
    /// many bytes before what was read.
    raw: u64,
    cut_bytes: bool,
    long_lines: u64,
    trace: Trace,
    /// When its last line came (`None`: no event waits).
    last: Option<Instant>,
}

impl Joiner {
    /// Events as `multiline` says.
    pub fn new(multiline: Arc<Multiline>) -> Self {
        Self {
            multiline,
            text: Vec::new(),
            lines: 0,
            raw: 0,
            cut_bytes: false,
            long_lines: 0,
            trace: Trace::default(),
            last: None,
        }
    }

    /// Bytes of the source the waiting event is made of (0 when none waits).
    pub fn pending(&self) -> u64 {
        self.raw
    }

    /// When the waiting event ends for want of a new line.
    pub fn due(&self) -> Option<Instant> {
        self.last.map(|last| last + self.multiline.wait)
    }

    /// A line (without its newline, `long`: cut to `AGENT_MAX_LINE_BYTES`), `raw` bytes of the
    /// source, come at `now`: the event it ends, if any, to `emit`.
    pub fn push_line(&mut self, line: &[u8], long: bool, raw: u64, now: Instant, emit: &mut impl FnMut(Event<'_>)) {
        self.push(line, raw, now, emit);
        self.long_lines += u64::from(long);
    }

    /// A line (without its newline), `raw` bytes of the source, come at `now`: the event it
    /// ends, if any, to `emit`.
    pub fn push(&mut self, line: &[u8], raw: u64, now: Instant, emit: &mut impl FnMut(Event<'_>)) {
        let joins = self.joins(line);
        if self.lines == 0 {
            self.begin(line);
        } else if !joins {
            self.end(false, emit);
            self.begin(line);
        } else if self.lines >= self.multiline.max_lines {
            self.end(true, emit);
            self.begin(line);
        } else {
            self.append(line);
        }
        self.raw += raw;
        self.last = Some(now);
    }

    /// The waiting event, if it has waited `AGENT_MULTILINE_WAIT` by `now`.
    pub fn expire(&mut self, now: Instant, emit: &mut impl FnMut(Event<'_>)) {
        if self.due().is_some_and(|due| due <= now) {
            self.end(false, emit);
        }
    }

    /// The waiting event, now (no more lines will come to it).
    pub fn flush(&mut self, emit: &mut impl FnMut(Event<'_>)) {
        if self.lines > 0 {
            self.end(false, emit);
        }
    }

    fn begin(&mut self, line: &[u8]) {
        let keep = line.len().min(self.multiline.max_bytes);
        self.text.extend_from_slice(&line[..keep]);
        self.cut_bytes = keep < line.len();
        self.lines = 1;
    }

    fn append(&mut self, line: &[u8]) {
        self.lines += 1;
        let room = self.multiline.max_bytes.saturating_sub(self.text.len());
        if room == 0 {
            self.cut_bytes = true;
            return;
        }
        self.text.push(b'\n');
        let keep = line.len().min(room - 1);
        self.text.extend_from_slice(&line[..keep]);
        self.cut_bytes |= keep < line.len();
    }

    fn end(&mut self, cut_lines: bool, emit: &mut impl FnMut(Event<'_>)) {
        let long_lines = std::mem::take(&mut self.long_lines);
        emit(Event { text: &self.text, lines: self.lines, cut_lines, cut_bytes: self.cut_bytes, long_lines });
        self.text.clear();
        // A buffer grown for a long trace is not kept.
        if self.text.capacity() > 4 * 1024 {
            self.text.shrink_to(1024);
        }
        self.lines = 0;
        self.raw = 0;
        self.cut_bytes = false;
        self.last = None;
    }

    /// Whether `line` joins the event before it (the presets follow where a trace stands).
    fn joins(&mut self, line: &[u8]) -> bool {
        let indented = matches!(line.first(), Some(b' ' | b'\t'));
        let blank = line.iter().all(u8::is_ascii_whitespace);
        match &self.multiline.start {
            Start::Pattern(start) => !start.is_match(line),
            Start::Java => {
                (indented && !blank) || line.starts_with(b"Caused by: ") || line.starts_with(b"Suppressed: ")
            }
            Start::Python => {
                let trace = &mut self.trace;
                if line.starts_with(b"Traceback (most recent call last):") {
                    *trace = Trace { within: true, frame: false };
                    return true;
                }
                if trace.within {
                    let chained = line.starts_with(b"During handling of the above exception")
                        || line.starts_with(b"The above exception was the direct cause");
                    if indented && !blank {
                        trace.frame = true;
                        return true;
                    }
                    if blank || chained {
                        trace.frame = false;
                        return true;
                    }
                    if std::mem::take(&mut trace.frame) {
                        return true; // the exception's line, after the frames
                    }
                }
                *trace = Trace::default();
                false
            }
            Start::Go => {
                let trace = &mut self.trace;
                if line.starts_with(b"panic: ") || line.starts_with(b"fatal error: ") {
                    trace.within = true;
                    return false;
                }
                let part = blank
                    || indented
                    || line.starts_with(b"goroutine ")
                    || line.starts_with(b"created by ")
                    || line.starts_with(b"[signal ")
                    || line.starts_with(b"exit status ")
                    || is_go_frame(line);
                if trace.within && part {
                    return true;
                }
                trace.within = false;
                false
            }
        }
    }
}

/// `main.main()`, `main.(*T).run(0xc000012018)`: a function in a Go trace.
fn is_go_frame(line: &[u8]) -> bool {
    line.ends_with(b")") && memchr::memchr(b'(', line).is_some_and(|open| !line[..open].contains(&b' ') && open > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joiner(start: &str) -> Joiner {
        let multiline = Multiline {
            start: Start::parse(start).expect("start"),
            wait: Duration::from_secs(1),
            max_lines: 500,
            max_bytes: 64 * 1024,
        };
        Joiner::new(Arc::new(multiline))
    }

    /// Every event `lines` make, with a flush at the end: (text, lines).
    fn events(joiner: &mut Joiner, text: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let now = Instant::now();
        let mut emit = |e: Event<'_>| out.push((String::from_utf8_lossy(e.text).into_owned(), e.lines));
        for line in text.lines() {
            joiner.push(line.as_bytes(), line.len() as u64 + 1, now, &mut emit);
        }
        joiner.flush(&mut emit);
        out
    }

    #[test]
    fn java_traces_are_one_event_each() {
        let log = "\
2026-11-28 10:00:00 INFO started
2026-11-28 10:00:01 ERROR request failed
java.lang.IllegalStateException: boom
\tat com.example.App.run(App.java:10)
\tat com.example.App.main(App.java:5)
Caused by: java.io.IOException: disk
\tat com.example.Disk.read(Disk.java:3)
\t... 2 more
2026-11-28 10:00:02 INFO next";
        let got = events(&mut joiner("java"), log);
        let lines: Vec<u64> = got.iter().map(|e| e.1).collect();
        assert_eq!(lines, [1, 1, 6, 1], "{got:?}");
        assert!(got[2].0.starts_with("java.lang.IllegalStateException: boom\n\tat com.example.App.run"));
        assert!(got[2].0.ends_with("\t... 2 more"));
    }

    #[test]
    fn python_tracebacks_end_at_the_exception_and_chain() {
        let log = "\
ERROR:root:failed
Traceback (most recent call last):
  File \"app.py\", line 3, in <module>
    main()
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File \"app.py\", line 5, in <module>
ValueError: boom
INFO:root:next
INFO:root:after";
        let got = events(&mut joiner("python"), log);
        let lines: Vec<u64> = got.iter().map(|e| e.1).collect();
        assert_eq!(lines, [11, 1, 1], "{got:?}");
        assert!(got[0].0.starts_with("ERROR:root:failed\nTraceback"));
        assert!(got[0].0.ends_with("ValueError: boom"));
    }

    #[test]
    fn go_panics_are_one_event() {
        let log = "\
level=info msg=start
panic: runtime error: index out of range [5] with length 3

goroutine 1 [running]:
main.main()
\t/app/main.go:8 +0x1d
exit status 2
level=info msg=restarted";
        let got = events(&mut joiner("go"), log);
        let lines: Vec<u64> = got.iter().map(|e| e.1).collect();
        assert_eq!(lines, [1, 6, 1], "{got:?}");
    }

    #[test]
    fn a_start_pattern_and_the_bounds() {
        let mut j = joiner(r"^\d{4}-");
        let got = events(&mut j, "orphan\n2026-1 a\n  more\n  more\n2026-2 b");
        assert_eq!(got, [("orphan".into(), 1), ("2026-1 a\n  more\n  more".into(), 3), ("2026-2 b".into(), 1)]);

        let multiline = Multiline {
            start: Start::parse("^S").expect("re"),
            wait: Duration::from_secs(1),
            max_lines: 3,
            max_bytes: 10,
        };
        let mut j = Joiner::new(Arc::new(multiline));
        let mut out = Vec::new();
        let now = Instant::now();
        for line in ["S1", "x", "y", "z", "S2 long line beyond"] {
            j.push(line.as_bytes(), 3, now, &mut |e: Event<'_>| {
                out.push((String::from_utf8_lossy(e.text).into_owned(), e.lines, e.cut_lines, e.cut_bytes))
            });
        }
        assert_eq!(j.pending(), 3);
        j.flush(&mut |e: Event<'_>| {
            out.push((String::from_utf8_lossy(e.text).into_owned(), e.lines, e.cut_lines, e.cut_bytes))
        });
        assert_eq!(
            out,
            [("S1\nx\ny".into(), 3, true, false), ("z".into(), 1, false, false), ("S2 long li".into(), 1, false, true),]
        );
        assert_eq!(j.pending(), 0);
    }

    #[test]
    fn an_event_ends_after_the_wait() {
        let mut j = joiner("java");
        let mut out = Vec::new();
        let start = Instant::now();
        let mut emit = |e: Event<'_>| out.push(e.lines);
        j.push(b"Exception: x", 13, start, &mut emit);
        j.push(b"\tat a", 6, start, &mut emit);
        j.expire(start + Duration::from_millis(999), &mut emit);
        assert_eq!(j.due(), Some(start + Duration::from_secs(1)));
        j.expire(start + Duration::from_secs(1), &mut emit);
        assert_eq!(out, [2]);
        assert_eq!(j.due(), None);
    }

    #[test]
    fn the_first_line_is_what_is_quoted() {
        let event =
            Event { text: b"Exception: x\n\tat a", lines: 2, cut_lines: false, cut_bytes: false, long_lines: 0 };
        assert_eq!(event.first_line(), b"Exception: x");
    }
}
