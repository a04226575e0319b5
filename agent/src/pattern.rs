//! A regular expression as configured (a rule's, a field condition's, a multi-line start),
//! parsed once when the configuration is read: every automaton the rules match with is built
//! from that one parse, and the syntax is set here alone. Lines are bytes (a line that is not
//! UTF-8 matches on its valid parts); `^` and `$` are a line's ends, as if each line were matched
//! alone. Read over a run of lines, the same tree has `^` and `$` at each line's ends (`\n`, and
//! a `\r` before it); read on one line, or on a field's value, at its ends.
//!
//! This module imports no other of the crate.

use std::fmt;
use std::sync::Arc;

use regex_automata::MatchKind;
use regex_automata::meta::{self, Regex};
use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_automata::util::syntax;
use regex_syntax::hir::{Hir, HirKind, Look};

/// The most a compiled expression may take (the `regex` crate's default).
const SIZE_LIMIT: usize = 10 * (1 << 20);

/// A regular expression, parsed once and compiled for one line.
#[derive(Clone)]
pub struct Pattern {
    text: Arc<str>,
    /// The parse, read over runs of lines.
    over_runs: Hir,
    /// The parse, read on one line (or a field's value).
    on_a_line: Hir,
    /// Compiled on one line.
    line: Regex,
}

impl Pattern {
    /// `text`, parsed and compiled; what is wrong with it on one line, as regex-syntax says it
    /// (`regex parse error: …`).
    pub fn new(text: &str) -> Result<Self, String> {
        let parsed = syntax::parse_with(text, &syntax_config()).map_err(|problem| one_line(&problem.to_string()))?;
        let on_a_line = line_ends(parsed.clone());
        let line = build(MatchKind::LeftmostFirst, WhichCaptures::All, &[&on_a_line])?;
        Ok(Self { text: text.into(), over_runs: parsed, on_a_line, line })
    }

    /// Its text, as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Compiled on one line (or a field's value), with its groups.
    pub fn regex(&self) -> &Regex {
        &self.line
    }

    /// Whether it matches `line` (one line, or a field's value).
    #[inline]
    pub fn is_match(&self, line: &[u8]) -> bool {
        self.line.is_match(line)
    }

    /// The names of its named groups, in order.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.line.group_info().pattern_names(regex_automata::PatternID::ZERO).flatten()
    }

    /// The index of its group `name`.
    pub fn group(&self, name: &str) -> Option<usize> {
        self.line.group_info().to_index(regex_automata::PatternID::ZERO, name)
    }

    /// Whether it means the ends of the text (`\A`, `\z`) and not of a line: such a pattern
    /// matches a run of lines only line by line.
    pub fn ends_of_text(&self) -> bool {
        let looks = self.over_runs.properties().look_set();
        looks.contains(Look::Start) || looks.contains(Look::End)
    }

    /// The parse, read over runs of lines.
    pub fn over_runs(&self) -> &Hir {
        &self.over_runs
    }
}

/// Compiled over runs of lines, with its groups.
pub fn over_runs(pattern: &Pattern) -> Result<Regex, String> {
    build(MatchKind::LeftmostFirst, WhichCaptures::All, &[pattern.over_runs()])
}

/// Each of `patterns` on one line, at once: which of them a line matches (as the `regex`
/// crate's `RegexSet`).
pub fn set_on_a_line(patterns: &[&Pattern]) -> Result<Regex, String> {
    let hirs: Vec<&Hir> = patterns.iter().map(|p| &p.on_a_line).collect();
    build(MatchKind::All, WhichCaptures::None, &hirs)
}

/// Any of `patterns` over runs of lines: the leftmost match of any (their alternation), its span
/// only.
pub fn any_over_runs(patterns: &[&Pattern]) -> Result<Regex, String> {
    let hirs: Vec<&Hir> = patterns.iter().map(|p| p.over_runs()).collect();
    build(MatchKind::LeftmostFirst, WhichCaptures::Implicit, &hirs)
}

/// The NFA of `pattern` over runs of lines, with its groups: what a one-pass DFA is built from.
pub fn nfa_over_runs(pattern: &Pattern) -> Option<thompson::NFA> {
    thompson::Compiler::new()
        .configure(thompson::Config::new().utf8(false).nfa_size_limit(Some(SIZE_LIMIT)))
        .build_from_hir(pattern.over_runs())
        .ok()
}

/// The syntax every pattern is read with: bytes, `^` and `$` at lines' ends (a `\r` before a
/// `\n` too).
fn syntax_config() -> syntax::Config {
    syntax::Config::new().utf8(false).multi_line(true).crlf(true)
}

/// `hir` read on one line: its lines' ends are the text's.
fn line_ends(hir: Hir) -> Hir {
    match hir.into_kind() {
        HirKind::Look(look) => Hir::look(match look {
            Look::StartLF | Look::StartCRLF => Look::Start,
            Look::EndLF | Look::EndCRLF => Look::End,
            other => other,
        }),
        HirKind::Repetition(mut repetition) => {
            repetition.sub = Box::new(line_ends(*repetition.sub));
            Hir::repetition(repetition)
        }
        HirKind::Capture(mut capture) => {
            capture.sub = Box::new(line_ends(*capture.sub));
            Hir::capture(capture)
        }
        HirKind::Concat(subs) => Hir::concat(subs.into_iter().map(line_ends).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.into_iter().map(line_ends).collect()),
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(literal) => Hir::literal(literal.0),
        HirKind::Class(class) => Hir::class(class),
    }
}

/// `hirs` compiled as the `regex` crate compiles an expression (every group) or a set (none:
/// which patterns match, not where).
fn build(kind: MatchKind, which: WhichCaptures, hirs: &[&Hir]) -> Result<Regex, String> {
    let config = meta::Config::new()
        .match_kind(kind)
        .utf8_empty(false)
        .which_captures(which)
        .nfa_size_limit(Some(SIZE_LIMIT))
        .hybrid_cache_capacity(2 * (1 << 20));
    meta::Builder::new().configure(config).build_many_from_hir(hirs).map_err(|problem| match problem.size_limit() {
        Some(limit) => format!("the compiled expression is larger than {limit} bytes"),
        None => one_line(&problem.to_string()),
    })
}

/// `text` on one line: its lines trimmed, joined by a space.
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Two patterns are the same where they are written the same.
impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Pattern {}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Pattern").field(&self.text).finish()
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, line: &[u8]) -> bool {
        Pattern::new(pattern).expect("a pattern").is_match(line)
    }

    /// On one line, `^` and `$` (and `(?m)`'s) are its ends, as the `regex` crate's expression
    /// reads them on a text without a newline; a `\r` inside the line is a byte like another.
    #[test]
    fn a_line_is_read_as_the_regex_crate_reads_it() {
        for (pattern, line) in [
            ("^ERROR$", &b"ERROR"[..]),
            ("^ERROR$", b"ERROR\rmore"),
            ("(?m)^ERROR$", b"ERROR\rmore"),
            ("(?m)^b", b"a\rb"),
            (r"\AERROR", b"ERROR here"),
            (r"down\z", b"it is down"),
            ("x$", b"x\r"),
            (r"\bERROR\b", b"an ERROR here"),
            ("caf\u{e9}", "caf\u{e9}".as_bytes()),
            ("e", b"\xff\xfee"),
            ("(?i)error", b"ERROR"),
            (r"(?P<ms>\d+)ms$", b"took 12ms"),
        ] {
            let theirs = regex::bytes::Regex::new(pattern).expect("regex").is_match(line);
            assert_eq!(matches(pattern, line), theirs, "{pattern:?} on {line:?}");
        }
    }

    #[test]
    fn its_groups_and_its_ends() {
        let pattern = Pattern::new(r"(?P<level>\w+) took (?P<ms>\d+)ms").expect("a pattern");
        assert_eq!(pattern.groups().collect::<Vec<_>>(), ["level", "ms"]);
        assert_eq!(pattern.group("ms"), Some(2));
        assert!(!pattern.ends_of_text());
        assert!(Pattern::new(r"\AERROR").expect("a pattern").ends_of_text());
        assert!(Pattern::new(r"(?-m)^ERROR").expect("a pattern").ends_of_text());
        assert!(!Pattern::new("^ERROR$").expect("a pattern").ends_of_text());
    }

    #[test]
    fn what_is_wrong_is_said_on_one_line() {
        let said = Pattern::new("(").expect_err("refused");
        assert!(said.starts_with("regex parse error: ("), "{said}");
        assert!(!said.contains('\n'));
        let said = Pattern::new(r"\w{1000}\w{1000}\w{1000}").expect_err("too large");
        assert!(said.contains("larger than"), "{said}");
    }
}
