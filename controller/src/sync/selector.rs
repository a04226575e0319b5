//! Label selectors in `kubectl -l` syntax: `team=a,env!=prod,tier in (web,api),!legacy,gpu`.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector};

/// Why a text is not a label selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// `(` inside `( … )`.
    #[error("nested parenthesis in {0:?}")]
    Nested(String),
    /// `)` without its `(`.
    #[error("unmatched ')' in {0:?}")]
    Unmatched(String),
    /// `(` without its `)`.
    #[error("unclosed '(' in {0:?}")]
    Unclosed(String),
    /// Two commas in a row, or one at an end.
    #[error("empty requirement in {0:?}")]
    EmptyRequirement(String),
    /// Text after the `)` of `in (…)`.
    #[error("{0:?}: text after ')'")]
    TextAfterValues(String),
    /// `( … )` after something other than `key in` or `key notin`.
    #[error("{0:?}: expected `key in (…)` or `key notin (…)`")]
    Operator(String),
    /// Not a label key.
    #[error("{requirement:?}: {key:?} is not a label key")]
    Key {
        /// The requirement it is in.
        requirement: String,
        /// The key.
        key: String,
    },
    /// Not a label value.
    #[error("{requirement:?}: {value:?} is not a label value")]
    Value {
        /// The requirement it is in.
        requirement: String,
        /// The value.
        value: String,
    },
}

/// Parses a selector as `kubectl get -l` takes it; the empty string selects everything.
pub fn parse_selector(text: &str) -> Result<Selector, SelectorError> {
    let mut expressions = Vec::new();
    for requirement in split_requirements(text)? {
        expressions.push(parse_requirement(requirement)?);
    }
    Ok(expressions.into_iter().collect())
}

/// Splits at the commas that are not inside `( … )`.
fn split_requirements(text: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (at, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err(SelectorError::Nested(text.to_owned())),
            ')' if depth == 1 => depth = 0,
            ')' => return Err(SelectorError::Unmatched(text.to_owned())),
            ',' if depth == 0 => {
                parts.push(text[start..at].trim());
                start = at + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Unclosed(text.to_owned()));
    }
    parts.push(text[start..].trim());
    match parts.as_slice() {
        [""] => Ok(Vec::new()),
        _ if parts.contains(&"") => Err(SelectorError::EmptyRequirement(text.to_owned())),
        _ => Ok(parts),
    }
}

fn parse_requirement(requirement: &str) -> Result<Expression, SelectorError> {
    if let Some(key) = requirement.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key_of(key.trim(), requirement)?));
    }
    for (operator, not) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((key, value)) = requirement.split_once(operator) {
            let (key, value) = (key_of(key.trim(), requirement)?, value_of(value.trim(), requirement)?);
            return Ok(if not { Expression::NotEqual(key, value) } else { Expression::Equal(key, value) });
        }
    }
    if let Some(open) = requirement.find('(') {
        let head: Vec<&str> = requirement[..open].split_whitespace().collect();
        let inner = requirement[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| SelectorError::TextAfterValues(requirement.to_owned()))?;
        let values = inner
            .split(',')
            .map(|v| value_of(v.trim(), requirement))
            .collect::<Result<BTreeSet<String>, SelectorError>>()?;
        return match head.as_slice() {
            [key, "in"] => Ok(Expression::In(key_of(key, requirement)?, values)),
            [key, "notin"] => Ok(Expression::NotIn(key_of(key, requirement)?, values)),
            _ => Err(SelectorError::Operator(requirement.to_owned())),
        };
    }
    Ok(Expression::Exists(key_of(requirement, requirement)?))
}

/// A label key: `[prefix/]name`, letters, digits, `-`, `_`, `.`.
fn key_of(key: &str, requirement: &str) -> Result<String, SelectorError> {
    let valid = !key.is_empty()
        && key.len() <= 317
        && key.split('/').count() <= 2
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    let error = || SelectorError::Key { requirement: requirement.to_owned(), key: key.to_owned() };
    if valid { Ok(key.to_owned()) } else { Err(error()) }
}

/// A label value: empty, or up to 63 letters, digits, `-`, `_`, `.`.
fn value_of(value: &str, requirement: &str) -> Result<String, SelectorError> {
    let valid = value.len() <= 63 && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let error = || SelectorError::Value { requirement: requirement.to_owned(), value: value.to_owned() };
    if valid { Ok(value.to_owned()) } else { Err(error()) }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::core::SelectorExt;

    use super::*;

    fn labels<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
        BTreeMap::from(pairs.map(|(k, v)| (k.to_owned(), v.to_owned())))
    }

    #[test]
    fn kubectl_syntax_selects_as_kubectl_does() {
        let a = labels([("team", "a"), ("env", "dev"), ("tier", "web")]);
        let b = labels([("team", "b"), ("legacy", "")]);
        for (selector, selects_a, selects_b) in [
            ("", true, true),
            ("  ", true, true),
            ("team=a", true, false),
            ("team==a", true, false),
            ("team!=a", false, true),
            ("team in (a, c)", true, false),
            ("team notin (a,c)", false, true),
            ("tier", true, false),
            ("!legacy", true, false),
            ("team=a,env=dev", true, false),
            ("team=a,env=prod", false, false),
            ("tier in (web,api),!legacy", true, false),
            ("example.com/owner", false, false),
        ] {
            let parsed = parse_selector(selector).unwrap_or_else(|e| panic!("{selector:?}: {e}"));
            assert_eq!((parsed.matches(&a), parsed.matches(&b)), (selects_a, selects_b), "{selector:?}");
        }
    }

    #[test]
    fn malformed_selectors_are_errors_with_the_reason() {
        for (selector, reason) in [
            ("team in (a,b", "unclosed"),
            ("team=a,,env=b", "empty requirement"),
            ("team=a,", "empty requirement"),
            ("team in a", "not a label key"),
            ("team within (a)", "expected `key in"),
            ("=a", "not a label key"),
            ("team=a b", "not a label value"),
            ("a/b/c", "not a label key"),
            ("team in (a)x", "text after"),
        ] {
            let error = parse_selector(selector).expect_err(selector);
            assert!(error.to_string().contains(reason), "{selector:?}: {error}");
        }
    }
}
