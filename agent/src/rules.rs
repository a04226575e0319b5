//! The rules, matched in one pass over each line: a `RegexSet` over bytes (a line that is not
//! UTF-8 is matched as it is: its valid parts match as text, the rest matches nothing).

use regex::bytes::RegexSet;

use crate::config::RuleConfig;

/// The compiled rules, in configuration order.
#[derive(Clone, Debug)]
pub struct Rules {
    set: RegexSet,
    names: Vec<String>,
}

impl Rules {
    /// The rules of `config` (each already checked to compile alone).
    pub fn new(rules: &[RuleConfig]) -> Result<Self, regex::Error> {
        let set = RegexSet::new(rules.iter().map(|r| r.pattern.as_str()))?;
        Ok(Self { set, names: rules.iter().map(|r| r.name.clone()).collect() })
    }

    /// The rules' names, index by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Calls `matched` with the index of each rule `line` matches. Most lines match none: one
    /// scan says so; only a line that matches is scanned again for which.
    #[inline]
    pub fn each_match(&self, line: &[u8], mut matched: impl FnMut(usize)) {
        if !self.set.is_match(line) {
            return;
        }
        if self.names.len() == 1 {
            matched(0);
            return;
        }
        for index in self.set.matches(line).iter() {
            matched(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(patterns: &[(&str, &str)]) -> Rules {
        let configs: Vec<RuleConfig> = patterns
            .iter()
            .map(|(name, pattern)| RuleConfig { name: (*name).into(), pattern: (*pattern).into(), alert: None })
            .collect();
        Rules::new(&configs).expect("compiles")
    }

    fn matched(rules: &Rules, line: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        rules.each_match(line, |i| found.push(i));
        found
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
}
