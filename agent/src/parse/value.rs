//! A logged value as a number in Prometheus' base units: `734ms` is 0.734 seconds, `10KiB`
//! 10240 bytes, a bare `734` is in the rule's `AGENT_UNIT_<RULE>` (or taken as it is). What
//! does not parse is an error the caller counts, never a 0.

use std::fmt;

/// What a rule's values measure: the suffix of its metric's name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dimension {
    /// A plain number (no suffix).
    #[default]
    Plain,
    /// Durations, in seconds (`_seconds`).
    Seconds,
    /// Sizes, in bytes (`_bytes`).
    Bytes,
}

impl Dimension {
    /// The metric name's suffix: `_seconds`, `_bytes` or nothing.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Plain => "",
            Self::Seconds => "_seconds",
            Self::Bytes => "_bytes",
        }
    }
}

/// The unit of a bare number (`AGENT_UNIT_<RULE>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds.
    Nanoseconds,
    /// Microseconds.
    Microseconds,
    /// Milliseconds.
    Milliseconds,
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
}

impl Unit {
    /// The words `AGENT_UNIT_<RULE>` takes.
    pub const WORDS: [&'static str; 5] = ["ns", "us", "ms", "s", "bytes"];

    /// The unit a word of [`Unit::WORDS`] names.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "ns" => Self::Nanoseconds,
            "us" => Self::Microseconds,
            "ms" => Self::Milliseconds,
            "s" => Self::Seconds,
            "bytes" => Self::Bytes,
            _ => return None,
        })
    }

    /// What it measures.
    pub fn dimension(self) -> Dimension {
        match self {
            Self::Bytes => Dimension::Bytes,
            _ => Dimension::Seconds,
        }
    }

    /// Base units in one of it.
    fn scale(self) -> f64 {
        match self {
            Self::Nanoseconds => 1e-9,
            Self::Microseconds => 1e-6,
            Self::Milliseconds => 1e-3,
            Self::Seconds | Self::Bytes => 1.0,
        }
    }
}

/// Why a value was not observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// Not a number (`abc`, `NaN`, `0x10`, an object, `true`).
    NotANumber,
    /// Out of range: `1e400`.
    Infinite,
    /// A unit the agent does not know (`734 parsecs`).
    UnknownUnit,
    /// A size in a rule of durations, or the other way round.
    OtherDimension,
    /// Below 0 in a counter (`sum`), which can only go up.
    Negative,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotANumber => "not a number",
            Self::Infinite => "out of range",
            Self::UnknownUnit => "an unknown unit",
            Self::OtherDimension => "a unit of another kind than AGENT_UNIT's",
            Self::Negative => "negative, in a counter",
        })
    }
}

/// The units a value may carry, and their size in base units.
const SUFFIXES: [(&str, Dimension, f64); 20] = [
    ("ns", Dimension::Seconds, 1e-9),
    ("us", Dimension::Seconds, 1e-6),
    ("µs", Dimension::Seconds, 1e-6),
    ("μs", Dimension::Seconds, 1e-6),
    ("ms", Dimension::Seconds, 1e-3),
    ("s", Dimension::Seconds, 1.0),
    ("m", Dimension::Seconds, 60.0),
    ("h", Dimension::Seconds, 3600.0),
    ("B", Dimension::Bytes, 1.0),
    ("kB", Dimension::Bytes, 1e3),
    ("KB", Dimension::Bytes, 1e3),
    ("KiB", Dimension::Bytes, 1024.0),
    ("MB", Dimension::Bytes, 1e6),
    ("MiB", Dimension::Bytes, 1_048_576.0),
    ("GB", Dimension::Bytes, 1e9),
    ("GiB", Dimension::Bytes, 1_073_741_824.0),
    ("TB", Dimension::Bytes, 1e12),
    ("TiB", Dimension::Bytes, 1_099_511_627_776.0),
    ("bytes", Dimension::Bytes, 1.0),
    ("sec", Dimension::Seconds, 1.0),
];

/// How a rule reads its values: the unit of a bare number, and the kind of unit its metric is
/// in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// `AGENT_UNIT_<RULE>`: the unit of a bare number.
    pub bare: Option<Unit>,
    /// Values below 0 are errors (a counter).
    pub non_negative: bool,
}

impl Reading {
    /// The metric's kind of unit: `AGENT_UNIT_<RULE>`'s, or plain.
    pub fn dimension(self) -> Dimension {
        self.bare.map_or(Dimension::Plain, Unit::dimension)
    }

    /// `text` (a capture group, a field) as a number in base units: a decimal number
    /// (`734`, `-1.5`, `2e3`), then, after an optional space, a unit. A value with a unit of
    /// another kind than `AGENT_UNIT_<RULE>`'s is an error; without `AGENT_UNIT_<RULE>` a
    /// unit converts as it says.
    pub fn parse(self, text: &[u8]) -> Result<f64, ValueError> {
        let text = text.trim_ascii();
        // The common case, a whole number of a few digits: read at once.
        if !text.is_empty() && text.len() <= 15 && text.iter().all(u8::is_ascii_digit) {
            let whole = text.iter().fold(0_u64, |n, d| n * 10 + u64::from(d - b'0'));
            return Ok(whole as f64 * self.bare.map_or(1.0, Unit::scale));
        }
        let end = number_end(text).ok_or(ValueError::NotANumber)?;
        // Only ASCII so far: the number is text.
        let number: f64 =
            std::str::from_utf8(&text[..end]).ok().and_then(|n| n.parse().ok()).ok_or(ValueError::NotANumber)?;
        if !number.is_finite() {
            return Err(ValueError::Infinite);
        }
        let suffix = text[end..].strip_prefix(b" ").unwrap_or(&text[end..]);
        let value = if suffix.is_empty() {
            number * self.bare.map_or(1.0, Unit::scale)
        } else {
            let (_, dimension, scale) = SUFFIXES.iter().find(|(name, _, _)| name.as_bytes() == suffix).ok_or(
                if suffix[0].is_ascii_alphabetic() || !suffix.is_ascii() {
                    ValueError::UnknownUnit
                } else {
                    ValueError::NotANumber
                },
            )?;
            if self.bare.is_some_and(|unit| unit.dimension() != *dimension) {
                return Err(ValueError::OtherDimension);
            }
            number * scale
        };
        if !value.is_finite() {
            return Err(ValueError::Infinite);
        }
        if self.non_negative && value < 0.0 {
            return Err(ValueError::Negative);
        }
        // -0 is 0.
        Ok(value + 0.0)
    }
}

/// Where the decimal number at the start of `text` ends: `[+-]digits[.digits][e[+-]digits]`
/// (a fraction may stand alone: `.5`); `None` without a digit.
fn number_end(text: &[u8]) -> Option<usize> {
    let digits = |from: usize| text[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut at = usize::from(matches!(text.first(), Some(b'+' | b'-')));
    let whole = digits(at);
    at += whole;
    let mut fraction = 0;
    if text.get(at) == Some(&b'.') {
        fraction = digits(at + 1);
        if fraction > 0 || whole > 0 {
            at += 1 + fraction;
        }
    }
    if whole == 0 && fraction == 0 {
        return None;
    }
    if matches!(text.get(at), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(text.get(at + 1), Some(b'+' | b'-')));
        let exponent = digits(at + 1 + sign);
        if exponent > 0 {
            at += 1 + sign + exponent;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, bare: Option<Unit>) -> Result<f64, ValueError> {
        Reading { bare, non_negative: false }.parse(text.as_bytes())
    }

    #[test]
    fn units_convert_to_base_units() {
        for (text, expected) in [
            ("734ms", 0.734),
            ("1.5s", 1.5),
            ("250us", 0.000_25),
            ("250µs", 0.000_25),
            ("12ns", 1.2e-8),
            ("2m", 120.0),
            ("1h", 3600.0),
            ("10KiB", 10_240.0),
            ("10kB", 10_000.0),
            ("3 MiB", 3_145_728.0),
            ("1GB", 1e9),
            ("512B", 512.0),
            (" 42 ", 42.0),
            ("-1.5", -1.5),
            ("2e3", 2000.0),
            (".5", 0.5),
        ] {
            let got = parse(text, None).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!((got - expected).abs() < 1e-12, "{text}: {got} != {expected}");
        }
    }

    #[test]
    fn a_bare_number_is_in_the_rules_unit() {
        assert_eq!(parse("734", Some(Unit::Milliseconds)), Ok(0.734));
        assert_eq!(parse("2", Some(Unit::Seconds)), Ok(2.0));
        assert_eq!(parse("2", Some(Unit::Bytes)), Ok(2.0));
        assert_eq!(parse("1500000", Some(Unit::Microseconds)), Ok(1.5));
        // A unit written beside the value wins, of the same kind.
        assert_eq!(parse("1.5s", Some(Unit::Milliseconds)), Ok(1.5));
        assert_eq!(parse("1KiB", Some(Unit::Milliseconds)), Err(ValueError::OtherDimension));
    }

    #[test]
    fn what_does_not_parse_is_an_error_never_zero() {
        for (text, error) in [
            ("abc", ValueError::NotANumber),
            ("", ValueError::NotANumber),
            ("NaN", ValueError::NotANumber),
            ("inf", ValueError::NotANumber),
            ("-", ValueError::NotANumber),
            ("1e400", ValueError::Infinite),
            ("0x10", ValueError::UnknownUnit),
            ("12 parsecs", ValueError::UnknownUnit),
            ("1.2.3", ValueError::NotANumber),
            ("{\"ms\":1}", ValueError::NotANumber),
            ("true", ValueError::NotANumber),
        ] {
            assert_eq!(parse(text, None), Err(error), "{text}");
        }
        assert_eq!(parse("1e308KiB", None), Err(ValueError::Infinite), "finite, then not in bytes");
        let counter = Reading { bare: None, non_negative: true };
        assert_eq!(counter.parse(b"-3"), Err(ValueError::Negative));
        let zero = parse("-0", None).expect("-0");
        assert!(zero == 0.0 && zero.is_sign_positive(), "-0 is 0");
    }
}
