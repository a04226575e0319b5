//! The rules, matched on each line. Lines come in runs (every complete line a read brought):
//! one regular expression that is the alternation of every rule finds, in the run itself, the
//! next line that any rule may match (with its literal prefilter, at memory speed); only that
//! line is matched against each rule (a `RegexSet`, one pass), and the search goes on after it.
//! Most lines match nothing and are never looked at one by one. Lines are bytes: a line that is
//! not UTF-8 matches on its valid parts.
//!
//! A line is what the rules see: its first `max_line` bytes, without the newline and a `\r`
//! before it. `^` and `$` are its ends, as if each line were matched alone.

use std::sync::Arc;

use memchr::{memchr, memrchr};
use regex_automata::meta::Regex;
use regex_automata::util::captures::Captures;
use regex_automata::{Input, PatternSet};

use crate::config::{RuleConfig, ValueFrom};
use crate::parse::fields::Record;
use crate::pattern::{self, Pattern};

/// The compiled rules, in configuration order.
#[derive(Clone, Debug)]
pub struct Rules {
    /// The line expressions of the rules that have one, in rule order, at once.
    set: Regex,
    /// Which of them a line matched (kept from line to line).
    which: PatternSet,
    /// `set`'s index of each of them: its rule.
    set_rules: Vec<usize>,
    /// Runs of lines (`None` where a rule could not be matched so: `\A` or `\z`, which mean
    /// the line's ends only line by line): the rules without groups to read, at once.
    runs: Option<Runs>,
    /// What each rule takes from what it matches, in rule order.
    specs: Vec<Spec>,
    /// The rules as configured, in rule order: what the stages after matching read of each.
    configs: Arc<[RuleConfig]>,
    paths: Vec<String>,
}

/// How runs of lines are matched: the rules without groups (that count lines) by one expression
/// that is their alternation, then the line it finds by `plain` (a set of them); each rule with
/// groups (labels, a value) by its own expression over the run, one call a matching line.
#[derive(Clone, Debug)]
struct Runs {
    /// The alternation of the plain rules' expressions (`None`: there are none).
    any: Option<Regex>,
    /// The plain rules' expressions on a line, at once, which of them a line matched, and the
    /// rule of each.
    plain: Regex,
    plain_which: PatternSet,
    plain_rules: Vec<usize>,
    /// Each rule with groups: its index, its expression over runs (`^`, `$` at lines), and a
    /// place for its groups' positions.
    grouped: Vec<(usize, Regex, Captures)>,
    /// Where a rule with groups starts with a literal and is one-pass: its matches found by
    /// that literal and read by the one-pass DFA anchored there (by the index in `grouped`).
    anchored: Vec<Option<AnchoredAt>>,
}

/// A rule's matches in a run, found by the literal its expression starts with (every match
/// starts with it: the first place where the rest matches too is the leftmost match), read by
/// the one-pass DFA anchored there: one pass over the match, none forward and back to find it.
#[derive(Clone, Debug)]
struct AnchoredAt {
    literal: memchr::memmem::Finder<'static>,
    dfa: regex_automata::dfa::onepass::DFA,
    cache: regex_automata::dfa::onepass::Cache,
    captures: regex_automata::util::captures::Captures,
}

impl AnchoredAt {
    /// For `pattern` over runs, where it starts with a literal of two bytes or more and is
    /// one-pass (`None` otherwise: the general search serves).
    fn new(pattern: &Pattern) -> Option<Self> {
        let literal = literal_prefix(pattern.over_runs())?;
        let dfa = regex_automata::dfa::onepass::DFA::builder().build_from_nfa(pattern::nfa_over_runs(pattern)?).ok()?;
        let (cache, captures) = (dfa.create_cache(), dfa.create_captures());
        Some(Self { literal: memchr::memmem::Finder::new(&literal).into_owned(), dfa, cache, captures })
    }

    /// The leftmost match in `run` from `at` on: its span, its groups in `self.captures`.
    fn find(&mut self, run: &[u8], mut at: usize) -> Option<(usize, usize)> {
        use regex_automata::{Anchored, Input};
        while let Some(found) = self.literal.find(&run[at..]) {
            let start = at + found;
            let input = Input::new(run).range(start..).anchored(Anchored::Yes);
            if self.dfa.try_search(&mut self.cache, &input, &mut self.captures).is_ok()
                && let Some(span) = self.captures.get_match()
            {
                return Some((span.start(), span.end()));
            }
            at = start + 1;
        }
        None
    }
}

/// The bytes every match of `pattern` starts with, where there are two or more
/// (`latency=` in `latency=(?P<ms>\d+)ms`): the longest common prefix of the literals regex-syntax
/// extracts from its parse. `None` where matches may start anywhere (a class that is not
/// expanded, an alternation with no common start, `(?i)`).
fn literal_prefix(hir: &regex_syntax::hir::Hir) -> Option<Vec<u8>> {
    use regex_syntax::hir::literal::{ExtractKind, Extractor};
    let prefixes = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let common = prefixes.longest_common_prefix()?;
    (common.len() >= 2).then(|| common.to_vec())
}

/// What a rule takes from what it matches.
#[derive(Clone, Debug)]
struct Spec {
    has_pattern: bool,
    /// Its own expression, where it has groups to read, and a place for their positions.
    captures: Option<(Regex, Captures)>,
    /// The group of each group label.
    label_groups: Vec<usize>,
    value: Option<At>,
    /// Where its exemplar's trace id is.
    exemplar: Option<At>,
    /// Field conditions: the field (an index of `paths`) and what its value must match.
    fields: Vec<(usize, Pattern)>,
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
    /// Its exemplar's trace id, where the rule has one and the line gives it.
    pub exemplar: Option<&'l [u8]>,
}

impl Rules {
    /// The rules of `config`, each compiled alone when it was read: here their set and their
    /// reading over runs are built from them (once: readers clone them).
    pub fn new(rules: &[RuleConfig]) -> Result<Self, String> {
        let with_pattern: Vec<(usize, &Pattern)> =
            rules.iter().enumerate().filter_map(|(i, r)| Some((i, r.pattern.as_ref()?))).collect();
        let patterns: Vec<&Pattern> = with_pattern.iter().map(|(_, p)| *p).collect();
        let set = pattern::set_on_a_line(&patterns)?;
        let whole_text = patterns.iter().any(|p| p.ends_of_text());
        let runs = if whole_text { None } else { Some(Runs::new(rules)?) };
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
                exemplar: None,
                fields: Vec::new(),
                field_labels: rule.field_labels.iter().map(|p| path(p)).collect(),
            };
            for condition in &rule.fields {
                spec.fields.push((path(&condition.path), condition.pattern.clone()));
            }
            if let Some(pattern) = &rule.pattern {
                let group_labels = rule.labels.len() - rule.field_labels.len();
                spec.label_groups = rule.labels[..group_labels].iter().filter_map(|l| pattern.group(l)).collect();
                if let Some(ValueFrom::Group(name)) = &rule.value {
                    spec.value = pattern.group(name).map(At::Group);
                }
                if let Some(ValueFrom::Group(name)) = &rule.exemplar {
                    spec.exemplar = pattern.group(name).map(At::Group);
                }
                if !spec.label_groups.is_empty() || spec.value.is_some() || spec.exemplar.is_some() {
                    let regex = pattern.regex().clone();
                    let captures = regex.create_captures();
                    spec.captures = Some((regex, captures));
                }
            }
            if let Some(ValueFrom::Field(field)) = &rule.value {
                spec.value = Some(At::Field(path(field)));
            }
            if let Some(ValueFrom::Field(field)) = &rule.exemplar {
                spec.exemplar = Some(At::Field(path(field)));
            }
            specs.push(spec);
        }
        Ok(Self {
            which: PatternSet::new(set.pattern_len()),
            set,
            set_rules: with_pattern.iter().map(|(i, _)| *i).collect(),
            runs,
            specs,
            configs: rules.into(),
            paths,
        })
    }

    /// The rules as configured, index by index (a match's `rule`).
    pub fn configs(&self) -> &[RuleConfig] {
        &self.configs
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
        let Self { set, which, set_rules, specs, .. } = self;
        if set_rules.len() == 1 {
            let rule = set_rules[0];
            if specs[rule].fields.is_empty()
                && let Some(m) = take(&mut specs[rule], rule, line, None)
            {
                matched(m);
            }
            return;
        }
        which.clear();
        set.which_overlapping_matches(&Input::new(line), which);
        for index in which.iter() {
            let rule = set_rules[index.as_usize()];
            if specs[rule].fields.is_empty()
                && let Some(m) = take(&mut specs[rule], rule, line, None)
            {
                matched(m);
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
        let Self { set, which, set_rules, specs, .. } = self;
        which.clear();
        if !set_rules.is_empty() {
            set.which_overlapping_matches(&Input::new(text), which);
        }
        let mut next_set = 0;
        for (rule, spec) in specs.iter_mut().enumerate() {
            if spec.has_pattern {
                let index = next_set;
                next_set += 1;
                if !which.contains(regex_automata::PatternID::must(index)) {
                    continue;
                }
            }
            let holds = spec.fields.iter().all(|(path, pattern)| {
                record.values[*path].as_ref().is_some_and(|field| pattern.is_match(field.bytes()))
            });
            if holds && let Some(m) = take(spec, rule, text, Some(record)) {
                matched(m);
            }
        }
    }

    /// What rule `rule` takes from its match in `run`, in `line`, each group's span in the run
    /// given by `span`.
    fn matched_at<'l>(
        &self,
        rule: usize,
        run: &'l [u8],
        line: &'l [u8],
        span: impl Fn(usize) -> Option<(usize, usize)>,
    ) -> Matched<'l> {
        let spec = &self.specs[rule];
        let group = |g: usize| span(g).map(|(s, e)| &run[s..e]);
        let mut values: Vec<&[u8]> = spec.label_groups.iter().map(|g| group(*g).unwrap_or_default()).collect();
        values.extend(spec.field_labels.iter().map(|_| &b""[..]));
        let at = |at: Option<At>| match at {
            Some(At::Group(g)) => group(g),
            _ => None,
        };
        Matched { rule, line, values, value: at(spec.value), exemplar: at(spec.exemplar) }
    }

    /// Matches every line of `run` (complete lines, each ending in `\n`), each cut to
    /// `max_line` bytes: `matched` for each rule a line matches (rules with field conditions
    /// never: a run is text). Returns (lines, lines longer than `max_line`).
    pub fn scan(&mut self, run: &[u8], max_line: usize, mut matched: impl FnMut(Matched<'_>)) -> (u64, u64) {
        let lines = memchr::memchr_iter(b'\n', run).count() as u64;
        let long = long_lines(run, max_line);
        // Taken out while the lines it finds are matched (they need the rules mutably), then put
        // back: never cloned, which would start its caches anew.
        let Some(runs) = self.runs.take() else {
            if !self.set_rules.is_empty() {
                for line in run.split_inclusive(|b| *b == b'\n') {
                    self.each_match(as_seen(line, max_line), &mut matched);
                }
            }
            return (lines, long);
        };
        let mut runs = runs;
        if let Some(any) = &runs.any {
            let mut at = 0;
            while let Some(found) = any.find(Input::new(run).range(at..)) {
                // The line the match starts in, matched alone (a match of the alternation may
                // run past its end, or past the bytes the rules see: the line decides).
                let (start, end) = line_around(run, found.start());
                let line = as_seen(&run[start..end], max_line);
                runs.plain_which.clear();
                runs.plain.which_overlapping_matches(&Input::new(line), &mut runs.plain_which);
                for index in runs.plain_which.iter() {
                    let rule = runs.plain_rules[index.as_usize()];
                    if let Some(m) = take(&mut self.specs[rule], rule, line, None) {
                        matched(m);
                    }
                }
                at = end;
            }
        }
        for ((rule, regex, captures), anchored) in runs.grouped.iter_mut().zip(&mut runs.anchored) {
            let mut at = 0;
            loop {
                let span = match anchored {
                    Some(anchored) => anchored.find(run, at),
                    None => {
                        regex.search_captures(&Input::new(run).range(at..), captures);
                        captures.get_match().map(|m| (m.start(), m.end()))
                    }
                };
                let Some((from, to)) = span else { break };
                let (start, end) = line_around(run, from);
                let line = as_seen(&run[start..end], max_line);
                // A match within the line is the line's own; one that runs past it (or past the
                // bytes the rules see), or in a line with a `\r` inside (where `^` and `$` over
                // runs also stand), is not: the line is matched alone, and decides.
                let found = if to > start + line.len() || memchr(b'\r', line).is_some() {
                    take(&mut self.specs[*rule], *rule, line, None)
                } else if let Some(anchored) = anchored {
                    let group = |g: usize| anchored.captures.get_group(g).map(|s| (s.start, s.end));
                    Some(self.matched_at(*rule, run, line, group))
                } else {
                    Some(self.matched_at(*rule, run, line, |g| captures.get_group(g).map(|s| (s.start, s.end))))
                };
                if let Some(m) = found {
                    matched(m);
                }
                at = end;
            }
        }
        self.runs = Some(runs);
        (lines, long)
    }
}

impl Runs {
    fn new(rules: &[RuleConfig]) -> Result<Self, String> {
        // Rules with field conditions never match text: not in runs at all.
        let text_rules = rules.iter().enumerate().filter(|(_, r)| r.fields.is_empty());
        let mut plain: Vec<(usize, &Pattern)> = Vec::new();
        let mut grouped = Vec::new();
        let mut anchored = Vec::new();
        for (index, rule) in text_rules {
            let Some(pattern) = rule.pattern.as_ref() else { continue };
            let has_groups = rule.labels.len() > rule.field_labels.len()
                || matches!(rule.value, Some(ValueFrom::Group(_)))
                || matches!(rule.exemplar, Some(ValueFrom::Group(_)));
            if has_groups {
                let regex = pattern::over_runs(pattern)?;
                let captures = regex.create_captures();
                grouped.push((index, regex, captures));
                anchored.push(AnchoredAt::new(pattern));
            } else {
                plain.push((index, pattern));
            }
        }
        let patterns: Vec<&Pattern> = plain.iter().map(|(_, p)| *p).collect();
        let any = if patterns.is_empty() { None } else { Some(pattern::any_over_runs(&patterns)?) };
        let set = pattern::set_on_a_line(&patterns)?;
        Ok(Self {
            any,
            plain_which: PatternSet::new(set.pattern_len()),
            plain: set,
            plain_rules: plain.iter().map(|(i, _)| *i).collect(),
            grouped,
            anchored,
        })
    }
}

/// What rule `rule` (compiled as `spec`) takes from `line` and `record`; `None` where its own
/// expression, read for its groups, does not match `line` alone.
fn take<'l>(spec: &mut Spec, rule: usize, line: &'l [u8], record: Option<&'l Record<'_>>) -> Option<Matched<'l>> {
    let mut values = Vec::new();
    let (mut value, mut exemplar) = (None, None);
    if let Some((regex, captures)) = &mut spec.captures {
        regex.search_captures(&Input::new(line), captures);
        if !captures.is_match() {
            return None;
        }
        let group = |g: usize| captures.get_group(g).map(|s| &line[s.start..s.end]);
        values.extend(spec.label_groups.iter().map(|g| group(*g).unwrap_or_default()));
        if let Some(At::Group(g)) = spec.value {
            value = group(g);
        }
        if let Some(At::Group(g)) = spec.exemplar {
            exemplar = group(g);
        }
    }
    let field = |p: usize| record.and_then(|r| r.values[p].as_ref()).map(crate::parse::fields::Field::bytes);
    values.extend(spec.field_labels.iter().map(|p| field(*p).unwrap_or_default()));
    if let Some(At::Field(p)) = spec.value {
        value = field(p);
    }
    if let Some(At::Field(p)) = spec.exemplar {
        exemplar = field(p);
    }
    Some(Matched { rule, line, values, value, exemplar })
}

/// The line of `run` that holds byte `at`: (its start, its end after its newline).
fn line_around(run: &[u8], at: usize) -> (usize, usize) {
    let start = memrchr(b'\n', &run[..at]).map_or(0, |i| i + 1);
    let end = memchr(b'\n', &run[at..]).map_or(run.len(), |i| at + i + 1);
    (start, end)
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
            patterns.iter().map(|(name, pattern)| RuleConfig::counting(name, pattern).expect("a rule")).collect();
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
        let names: Vec<&str> = rules.configs().iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["error", "timeout", "status5xx"]);
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

    /// A rule with groups is matched over the run on its own: what it takes is what each line
    /// alone gives, a match that would run into the next line or past the bytes seen included.
    #[test]
    fn a_rule_with_groups_takes_from_each_line_as_alone() {
        let mut rules = rules(&[("span", r"(?P<word>ERROR\s+\w+)"), ("code", r"code=(?P<code>\d+)")]);
        let run = b"x ERROR\nfirst code=7\nERROR two code=12345678\nERROR\r\n";
        let mut found = Vec::new();
        rules.scan(run, 20, |m| {
            let values: Vec<String> = m.values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect();
            found.push((m.rule, values));
        });
        found.sort();
        assert_eq!(
            found,
            [(0, vec!["ERROR two".to_owned()]), (1, vec!["12345".to_owned()]), (1, vec!["7".to_owned()])],
            "ERROR then a newline is no match; code=12345678 is seen to its first 20 bytes"
        );
        let mut one_by_one = Vec::new();
        for line in run.split_inclusive(|b| *b == b'\n') {
            rules.scan(line, 20, |m| one_by_one.push(m.rule));
        }
        one_by_one.sort();
        assert_eq!(one_by_one, [0, 1, 1]);
    }

    #[test]
    fn a_literal_prefix_is_what_every_match_starts_with() {
        let prefix = |text: &str| {
            let pattern = Pattern::new(text).expect("a pattern");
            literal_prefix(pattern.over_runs()).map(|p| String::from_utf8_lossy(&p).into_owned())
        };
        assert_eq!(prefix(r"latency=(?P<ms>\d+)ms").as_deref(), Some("latency="));
        assert_eq!(prefix(r#"user="(?P<u>[^"]*)""#).as_deref(), Some("user=\""));
        assert_eq!(prefix("abc+(?P<x>d)").as_deref(), Some("abc"), "c+ is at least one c");
        assert_eq!(prefix("code=[0-5](?P<x>d)").as_deref(), Some("code="), "a small class expanded, then joined");
        assert_eq!(prefix("(took|took_ms)=(?P<ms>1)").as_deref(), Some("took"), "what an alternation shares");
        assert_eq!(prefix(r"\bERROR (?P<x>\w+)").as_deref(), Some("ERROR "), "a look-around takes no byte");
        assert_eq!(prefix("a?(?P<x>b)"), None);
        assert_eq!(prefix("(?i)took=(?P<ms>\\d+)"), None, "any case");
        assert_eq!(prefix("took=(?P<a>1)|x"), None, "an alternation with no common start");
        assert_eq!(prefix(r"\w+=(?P<x>\d)"), None, "a class too large to expand");
    }

    /// The rules with groups found by their literal and read by the one-pass DFA take exactly
    /// what the regular expression takes from each line alone, over runs of random lines.
    #[test]
    fn the_anchored_reading_takes_what_each_line_alone_gives() {
        let patterns = [
            ("took", r"took=(?P<ms>\d+)ms"),
            ("code", r"code=(?P<code>\d{1,3})\b"),
            ("user", r#"user="(?P<u>[^"]*)""#),
            ("span", r"ab(?P<x>c*)d\s*(?P<y>\w*)$"),
        ];
        let mut rules = rules(&patterns);
        let anchored: Vec<bool> =
            rules.runs.as_ref().map(|r| r.anchored.iter().map(Option::is_some).collect()).unwrap_or_default();
        assert_eq!(anchored, [true, true, true, false], "the last is not one-pass (Unicode \\s* then \\w*): searched");
        let pieces = [
            "took=", "12", "ms", " ", "code=", "404", "9999", "user=\"", "bob", "\"", "ab", "c", "d", "\r", "x",
            "took=1",
        ];
        let alone_rules: Vec<regex::bytes::Regex> =
            patterns.iter().map(|(_, p)| regex::bytes::Regex::new(p).expect("regex")).collect();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let mut run = Vec::new();
            for _ in 0..(next() % 8 + 1) {
                for _ in 0..(next() % 12) {
                    run.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize].as_bytes());
                }
                run.push(b'\n');
            }
            // Lines whole: at a cut (AGENT_MAX_LINE_BYTES) a `\b` or `$` reads what follows in
            // the run, where the cut line alone has its end (the counting rules' alternation
            // reads runs so too).
            let max = 4096;
            let mut fast = Vec::new();
            rules.scan(&run, max, |m| fast.push((m.rule, m.values.iter().map(|v| v.to_vec()).collect::<Vec<_>>())));
            let mut alone = Vec::new();
            for line in run.split_inclusive(|b| *b == b'\n') {
                let line = as_seen(line, max);
                for (rule, regex) in alone_rules.iter().enumerate() {
                    if let Some(found) = regex.captures(line) {
                        let values = regex
                            .capture_names()
                            .flatten()
                            .map(|n| found.name(n).map_or(&b""[..], |m| m.as_bytes()).to_vec())
                            .collect();
                        alone.push((rule, values));
                    }
                }
            }
            fast.sort();
            alone.sort();
            assert_eq!(fast, alone, "{:?}", String::from_utf8_lossy(&run));
        }
    }
}
