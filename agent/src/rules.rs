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
use regex::bytes::{CaptureLocations, Regex, RegexBuilder, RegexSet};

use crate::config::{RuleConfig, ValueFrom};
use crate::fields::Record;

/// The compiled rules, in configuration order.
#[derive(Clone, Debug)]
pub struct Rules {
    /// The line expressions of the rules that have one, in rule order.
    set: RegexSet,
    /// `set`'s index of each of them: its rule.
    set_rules: Vec<usize>,
    /// Every line expression at once, over runs of lines (`None` where a rule could not be
    /// matched so: `\A` or `\z`, which mean the line's ends only line by line).
    any: Option<Regex>,
    specs: Vec<Spec>,
    names: Vec<String>,
    paths: Vec<String>,
}

/// What a rule takes from what it matches.
#[derive(Clone, Debug)]
struct Spec {
    has_pattern: bool,
    /// Its own expression, where it has groups to read, and a place for their positions.
    captures: Option<(Regex, CaptureLocations)>,
    /// The group of each group label.
    label_groups: Vec<usize>,
    value: Option<At>,
    /// Field conditions: the field (an index of `paths`) and what its value must match.
    fields: Vec<(usize, Regex)>,
    /// The field of each field label.
    field_labels: Vec<usize>,
}

/// Where a value is.
#[derive(Clone, Copy, Debug)]
enum At {
    Group(usize),
    Field(usize),
}

/// A line (or event) a rule matched.
#[derive(Debug)]
pub struct Matched<'l> {
    /// The rule's index.
    pub rule: usize,
    /// The line (as the rules see it), or the event's text.
    pub line: &'l [u8],
    /// The rule's label values, in its `labels` order (empty for a group that did not take
    /// part, or a field that is missing).
    pub values: Vec<&'l [u8]>,
    /// Its value's text, where the rule has a value and the line gives it.
    pub value: Option<&'l [u8]>,
}

impl Rules {
    /// The rules of `config` (each already checked to compile alone).
    pub fn new(rules: &[RuleConfig]) -> Result<Self, regex::Error> {
        let with_pattern: Vec<(usize, &str)> =
            rules.iter().enumerate().filter_map(|(i, r)| Some((i, r.pattern.as_deref()?))).collect();
        let set = RegexSet::new(with_pattern.iter().map(|(_, p)| *p))?;
        let whole_text = with_pattern.iter().any(|(_, p)| p.contains(r"\A") || p.contains(r"\z"));
        let any = if whole_text || with_pattern.is_empty() {
            None
        } else {
            let alternation: Vec<String> = with_pattern.iter().map(|(_, p)| format!("(?:{p})")).collect();
            Some(RegexBuilder::new(&alternation.join("|")).multi_line(true).crlf(true).build()?)
        };
        let mut paths: Vec<String> = Vec::new();
        let mut path = |p: &str| match paths.iter().position(|known| known == p) {
            Some(index) => index,
            None => {
                paths.push(p.to_owned());
                paths.len() - 1
            }
        };
        let mut specs = Vec::new();
        for rule in rules {
            let mut spec = Spec {
                has_pattern: rule.pattern.is_some(),
                captures: None,
                label_groups: Vec::new(),
                value: None,
                fields: Vec::new(),
                field_labels: rule.field_labels.iter().map(|p| path(p)).collect(),
            };
            for condition in &rule.fields {
                spec.fields.push((path(&condition.path), Regex::new(&condition.pattern)?));
            }
            if let Some(pattern) = &rule.pattern {
                let regex = Regex::new(pattern)?;
                let group = |name: &str| regex.capture_names().position(|n| n == Some(name));
                let group_labels = rule.labels.len() - rule.field_labels.len();
                spec.label_groups = rule.labels[..group_labels].iter().filter_map(|l| group(l)).collect();
                if let Some(ValueFrom::Group(name)) = &rule.value {
                    spec.value = group(name).map(At::Group);
                }
                if !spec.label_groups.is_empty() || spec.value.is_some() {
                    let locations = regex.capture_locations();
                    spec.captures = Some((regex, locations));
                }
            }
            if let Some(ValueFrom::Field(field)) = &rule.value {
                spec.value = Some(At::Field(path(field)));
            }
            specs.push(spec);
        }
        Ok(Self {
            set,
            set_rules: with_pattern.iter().map(|(i, _)| *i).collect(),
            any,
            specs,
            names: rules.iter().map(|r| r.name.clone()).collect(),
            paths,
        })
    }

    /// The rules' names, index by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The fields the rules read, by index: what a structured line is read for.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// Calls `matched` for each rule `line` matches by its expression (one line or event, as
    /// the rules see it; no fields).
    #[inline]
    pub fn each_match(&mut self, line: &[u8], mut matched: impl FnMut(Matched<'_>)) {
        if self.set_rules.is_empty() || !self.set.is_match(line) {
            return;
        }
        if self.set_rules.len() == 1 {
            let rule = self.set_rules[0];
            if self.specs[rule].fields.is_empty() {
                matched(self.matched(rule, line, None));
            }
            return;
        }
        for index in self.set.matches(line).iter() {
            let rule = self.set_rules[index];
            if self.specs[rule].fields.is_empty() {
                matched(self.matched(rule, line, None));
            }
        }
    }

    /// Calls `matched` for each rule that `text` (a line or event) and its fields `record`
    /// (`None`: not structured) match: its expression, if any, on the text, and every field
    /// condition on its field.
    pub fn each_match_record(
        &mut self,
        text: &[u8],
        record: Option<&Record<'_>>,
        mut matched: impl FnMut(Matched<'_>),
    ) {
        let Some(record) = record else {
            self.each_match(text, matched);
            return;
        };
        let by_pattern = if self.set_rules.is_empty() { None } else { Some(self.set.matches(text)) };
        let mut next_set = 0;
        for rule in 0..self.specs.len() {
            let spec = &self.specs[rule];
            if spec.has_pattern {
                let index = next_set;
                next_set += 1;
                if !by_pattern.as_ref().is_some_and(|m| m.matched(index)) {
                    continue;
                }
            }
            let holds = spec
                .fields
                .iter()
                .all(|(path, regex)| record.values[*path].as_ref().is_some_and(|field| regex.is_match(field.bytes())));
            if holds {
                matched(self.matched(rule, text, Some(record)));
            }
        }
    }

    fn matched<'l>(&mut self, rule: usize, line: &'l [u8], record: Option<&'l Record<'_>>) -> Matched<'l> {
        let spec = &mut self.specs[rule];
        let mut values = Vec::new();
        let mut value = None;
        if let Some((regex, locations)) = &mut spec.captures {
            let found = regex.captures_read(locations, line).is_some();
            let group = |g: usize| if found { locations.get(g).map(|(s, e)| &line[s..e]) } else { None };
            values.extend(spec.label_groups.iter().map(|g| group(*g).unwrap_or_default()));
            if let Some(At::Group(g)) = spec.value {
                value = group(g);
            }
        }
        let field = |p: usize| record.and_then(|r| r.values[p].as_ref()).map(crate::fields::Field::bytes);
        values.extend(spec.field_labels.iter().map(|p| field(*p).unwrap_or_default()));
        if let Some(At::Field(p)) = spec.value {
            value = field(p);
        }
        Matched { rule, line, values, value }
    }

    /// Matches every line of `run` (complete lines, each ending in `\n`), each cut to
    /// `max_line` bytes: `matched` for each rule a line matches. Returns (lines, lines longer
    /// than `max_line`).
    pub fn scan(&mut self, run: &[u8], max_line: usize, mut matched: impl FnMut(Matched<'_>)) -> (u64, u64) {
        let lines = memchr::memchr_iter(b'\n', run).count() as u64;
        let long = long_lines(run, max_line);
        if self.set_rules.is_empty() {
            return (lines, long);
        }
        // Taken out while the lines it finds are matched (they need the rules mutably), then put
        // back: never cloned, which would start its caches anew.
        let Some(any) = self.any.take() else {
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
        self.any = Some(any);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[(&str, &str)]) -> Rules {
        let configs: Vec<RuleConfig> =
            patterns.iter().map(|(name, pattern)| RuleConfig::counting(name, pattern)).collect();
        Rules::new(&configs).expect("compiles")
    }

    fn matched(rules: &mut Rules, line: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        rules.each_match(line, |m| found.push(m.rule));
        found
    }

    /// What a run gives, each (line, rule) matched.
    fn scanned(rules: &mut Rules, run: &[u8], max: usize) -> (u64, u64, Vec<(String, usize)>) {
        let mut found = Vec::new();
        let (lines, long) =
            rules.scan(run, max, |m| found.push((String::from_utf8_lossy(m.line).into_owned(), m.rule)));
        (lines, long, found)
    }

    #[test]
    fn every_rule_a_line_matches_in_one_call() {
        let mut rules = rules(&[("error", r"\bERROR\b"), ("timeout", "(?i)timed? ?out"), ("status5xx", r#"" 5\d\d "#)]);
        assert_eq!(matched(&mut rules, b"2026-11-25 ERROR upstream timed out"), [0, 1]);
        assert_eq!(matched(&mut rules, br#"GET /x HTTP/1.1" 503 "#), [2]);
        assert!(matched(&mut rules, b"INFO all good, no ERRORS").is_empty(), "word boundaries hold");
        assert_eq!(rules.names(), ["error", "timeout", "status5xx"]);
    }

    #[test]
    fn invalid_utf8_is_matched_on_what_is_text() {
        let mut rules = rules(&[("error", "ERROR")]);
        assert_eq!(matched(&mut rules, b"\xff\xfe ERROR \xc3"), [0]);
        assert!(matched(&mut rules, b"\xff\xfe").is_empty());
    }

    /// A run is matched as its lines one by one would be: anchors at each line's ends, a match
    /// never across lines, a rule on the first bytes of a long line only, `\r\n` endings.
    #[test]
    fn a_run_matches_as_its_lines_do() {
        let mut rules = rules(&[("start", "^ERROR"), ("end", r"done\s*$"), ("span", r"ERROR\s+x"), ("any", "TIMEOUT")]);
        let run = b"INFO ok\nERROR first\r\nwork done\nINFO ERROR\nx TIMEOUT\n0123456789 TIMEOUT far\n";
        let (lines, long, found) = scanned(&mut rules, run, 16);
        assert_eq!((lines, long), (6, 1));
        assert_eq!(
            found,
            [("ERROR first".to_owned(), 0), ("work done".to_owned(), 1), ("x TIMEOUT".to_owned(), 3),],
            "not across `INFO ERROR\\nx`; TIMEOUT past the first 16 bytes is not seen"
        );
        // Line by line the same.
        let mut one_by_one = Vec::new();
        for line in run.split_inclusive(|b| *b == b'\n') {
            let (_, _, found) = scanned(&mut rules, line, 16);
            one_by_one.extend(found);
        }
        assert_eq!(found, one_by_one);
    }

    /// `\A` and `\z` mean a line's ends line by line: such rules are matched line by line.
    #[test]
    fn text_anchors_keep_their_line_meaning() {
        let mut rules = rules(&[("first", r"\AERROR"), ("last", r"down\z")]);
        let (_, _, found) = scanned(&mut rules, b"INFO\nERROR one\nshut down\n", 1024);
        assert_eq!(found, [("ERROR one".to_owned(), 0), ("shut down".to_owned(), 1)]);
    }

    #[test]
    fn named_groups_give_their_values() {
        let mut rules = rules(&[("http", r"status=(?P<code>5\d\d)(?: path=(?P<path>\S+))?")]);
        let mut values = Vec::new();
        rules.scan(b"GET status=503 path=/a\nGET status=200\nPOST status=500\n", 1024, |m| {
            values.push(m.values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>());
        });
        assert_eq!(values, [vec!["503".to_owned(), "/a".to_owned()], vec!["500".to_owned(), String::new()]]);
    }
}
