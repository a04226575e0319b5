//! The rules, matched on each line. Lines come in runs (every complete line a read brought):
//! one regular expression that is the alternation of every rule finds, in the run itself, the
//! next line that any rule may match (with its literal prefilter, at memory speed); only that
//! line is matched against each rule (a `RegexSet`, one pass), and the search goes on after it.
//! Most lines match nothing and are never looked at one by one. Lines are bytes: a line that is
//! not UTF-8 matches on its valid parts.
//!
//! A line is what the rules see: its first `max_line` bytes, without the newline and a `\r`
//! before it. `^` and `$` are its ends, as if each line were matched alone.

use memchr::{memchr, memrchr};
use regex::bytes::{Captures, Regex, RegexBuilder, RegexSet};

use crate::config::RuleConfig;

/// The compiled rules, in configuration order.
#[derive(Clone, Debug)]
pub struct Rules {
    set: RegexSet,
    /// Every rule at once, over runs of lines (`None` where a rule could not be matched so:
    /// `\A` or `\z`, which mean the line's ends only line by line).
    any: Option<Regex>,
    /// Rules with named groups: their own expression, for the groups' values.
    captures: Vec<Option<Regex>>,
    names: Vec<String>,
}

/// A line a rule matched.
pub struct Matched<'l> {
    /// The rule's index.
    pub rule: usize,
    /// The line (as the rules see it).
    pub line: &'l [u8],
    /// The values of the rule's named groups, in its `labels` order (empty for a group that did
    /// not take part).
    pub values: Vec<&'l [u8]>,
}

impl Rules {
    /// The rules of `config` (each already checked to compile alone).
    pub fn new(rules: &[RuleConfig]) -> Result<Self, regex::Error> {
        let set = RegexSet::new(rules.iter().map(|r| r.pattern.as_str()))?;
        let whole_text = rules.iter().any(|r| r.pattern.contains(r"\A") || r.pattern.contains(r"\z"));
        let any = if whole_text {
            None
        } else {
            let alternation: Vec<String> = rules.iter().map(|r| format!("(?:{})", r.pattern)).collect();
            Some(RegexBuilder::new(&alternation.join("|")).multi_line(true).crlf(true).build()?)
        };
        let captures = rules
            .iter()
            .map(|r| if r.labels.is_empty() { Ok(None) } else { Regex::new(&r.pattern).map(Some) })
            .collect::<Result<_, _>>()?;
        Ok(Self { set, any, captures, names: rules.iter().map(|r| r.name.clone()).collect() })
    }

    /// The rules' names, index by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Calls `matched` for each rule `line` matches (one line, as the rules see it).
    #[inline]
    pub fn each_match(&self, line: &[u8], mut matched: impl FnMut(Matched<'_>)) {
        if !self.set.is_match(line) {
            return;
        }
        if self.names.len() == 1 {
            matched(self.matched(0, line));
            return;
        }
        for rule in self.set.matches(line).iter() {
            matched(self.matched(rule, line));
        }
    }

    fn matched<'l>(&self, rule: usize, line: &'l [u8]) -> Matched<'l> {
        let values = match &self.captures[rule] {
            None => Vec::new(),
            Some(regex) => match regex.captures(line) {
                Some(found) => group_values(regex, &found),
                None => Vec::new(),
            },
        };
        Matched { rule, line, values }
    }

    /// Matches every line of `run` (complete lines, each ending in `\n`), each cut to
    /// `max_line` bytes: `matched` for each rule a line matches. Returns (lines, lines longer
    /// than `max_line`).
    pub fn scan(&self, run: &[u8], max_line: usize, mut matched: impl FnMut(Matched<'_>)) -> (u64, u64) {
        let lines = memchr::memchr_iter(b'\n', run).count() as u64;
        let long = long_lines(run, max_line);
        let Some(any) = &self.any else {
            for line in run.split_inclusive(|b| *b == b'\n') {
                self.each_match(as_seen(line, max_line), &mut matched);
            }
            return (lines, long);
        };
        let mut at = 0;
        while at < run.len() {
            let Some(found) = any.find_at(run, at) else { break };
            // The line the match starts in, matched alone (a match of the alternation may run
            // past its end, or past the bytes the rules see: the line decides).
            let start = memrchr(b'\n', &run[..found.start()]).map_or(0, |i| i + 1);
            let end = memchr(b'\n', &run[found.start()..]).map_or(run.len(), |i| found.start() + i + 1);
            self.each_match(as_seen(&run[start..end], max_line), &mut matched);
            at = end;
        }
        (lines, long)
    }
}

/// A line of a run as the rules see it: without its newline and `\r`, cut to `max_line` bytes.
fn as_seen(line: &[u8], max_line: usize) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    &line[..line.len().min(max_line)]
}

/// Lines of `run` longer than `max_line` (without the newline): none when the run holds fewer
/// bytes than that, the common case.
fn long_lines(run: &[u8], max_line: usize) -> u64 {
    if run.len() <= max_line {
        return 0;
    }
    let mut long = 0;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', run) {
        let mut line = &run[start..end];
        line = line.strip_suffix(b"\r").unwrap_or(line);
        long += u64::from(line.len() > max_line);
        start = end + 1;
    }
    long
}

/// The values of `regex`'s named groups in `found`, in their order.
fn group_values<'l>(regex: &Regex, found: &Captures<'l>) -> Vec<&'l [u8]> {
    regex.capture_names().flatten().map(|name| found.name(name).map_or(&b""[..], |m| m.as_bytes())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[(&str, &str)]) -> Rules {
        let configs: Vec<RuleConfig> = patterns
            .iter()
            .map(|(name, pattern)| {
                let labels = Regex::new(pattern).expect("regex").capture_names().flatten().map(str::to_owned).collect();
                RuleConfig { name: (*name).into(), pattern: (*pattern).into(), alert: None, labels }
            })
            .collect();
        Rules::new(&configs).expect("compiles")
    }

    fn matched(rules: &Rules, line: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        rules.each_match(line, |m| found.push(m.rule));
        found
    }

    /// What a run gives, each (line, rule) matched.
    fn scanned(rules: &Rules, run: &[u8], max: usize) -> (u64, u64, Vec<(String, usize)>) {
        let mut found = Vec::new();
        let (lines, long) =
            rules.scan(run, max, |m| found.push((String::from_utf8_lossy(m.line).into_owned(), m.rule)));
        (lines, long, found)
    }

    #[test]
    fn every_rule_a_line_matches_in_one_call() {
        let rules = rules(&[("error", r"\bERROR\b"), ("timeout", "(?i)timed? ?out"), ("status5xx", r#"" 5\d\d "#)]);
        assert_eq!(matched(&rules, b"2026-11-25 ERROR upstream timed out"), [0, 1]);
        assert_eq!(matched(&rules, br#"GET /x HTTP/1.1" 503 "#), [2]);
        assert!(matched(&rules, b"INFO all good, no ERRORS").is_empty(), "word boundaries hold");
        assert_eq!(rules.names(), ["error", "timeout", "status5xx"]);
    }

    #[test]
    fn invalid_utf8_is_matched_on_what_is_text() {
        let rules = rules(&[("error", "ERROR")]);
        assert_eq!(matched(&rules, b"\xff\xfe ERROR \xc3"), [0]);
        assert!(matched(&rules, b"\xff\xfe").is_empty());
    }

    /// A run is matched as its lines one by one would be: anchors at each line's ends, a match
    /// never across lines, a rule on the first bytes of a long line only, `\r\n` endings.
    #[test]
    fn a_run_matches_as_its_lines_do() {
        let rules = rules(&[("start", "^ERROR"), ("end", r"done\s*$"), ("span", r"ERROR\s+x"), ("any", "TIMEOUT")]);
        let run = b"INFO ok\nERROR first\r\nwork done\nINFO ERROR\nx TIMEOUT\n0123456789 TIMEOUT far\n";
        let (lines, long, found) = scanned(&rules, run, 16);
        assert_eq!((lines, long), (6, 1));
        assert_eq!(
            found,
            [("ERROR first".to_owned(), 0), ("work done".to_owned(), 1), ("x TIMEOUT".to_owned(), 3),],
            "not across `INFO ERROR\\nx`; TIMEOUT past the first 16 bytes is not seen"
        );
        // Line by line the same.
        let mut one_by_one = Vec::new();
        for line in run.split_inclusive(|b| *b == b'\n') {
            let (_, _, found) = scanned(&rules, line, 16);
            one_by_one.extend(found);
        }
        assert_eq!(found, one_by_one);
    }

    /// `\A` and `\z` mean a line's ends line by line: such rules are matched line by line.
    #[test]
    fn text_anchors_keep_their_line_meaning() {
        let rules = rules(&[("first", r"\AERROR"), ("last", r"down\z")]);
        let (_, _, found) = scanned(&rules, b"INFO\nERROR one\nshut down\n", 1024);
        assert_eq!(found, [("ERROR one".to_owned(), 0), ("shut down".to_owned(), 1)]);
    }

    #[test]
    fn named_groups_give_their_values() {
        let rules = rules(&[("http", r"status=(?P<code>5\d\d)(?: path=(?P<path>\S+))?")]);
        let mut values = Vec::new();
        rules.scan(b"GET status=503 path=/a\nGET status=200\nPOST status=500\n", 1024, |m| {
            values.push(m.values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>());
        });
        assert_eq!(values, [vec!["503".to_owned(), "/a".to_owned()], vec!["500".to_owned(), String::new()]]);
    }
}
