//! Kubernetes quantities (`100m`, `64Mi`, `1.5`, `2e3`) as exact numbers: what the namespace's
//! resource rules compare and add up, in billionths of a unit (the finest a quantity keeps).

use std::fmt;

/// A quantity in billionths of its unit (nano-cores, nano-bytes): exact for every suffix, and
/// room for 10^29 units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Amount(pub i128);

const NANO: i128 = 1_000_000_000;

/// Why a quantity cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a quantity (a number with an optional suffix: 100m, 64Mi, 1G, 2e3)")]
pub struct QuantityError(pub String);

impl Amount {
    /// Zero.
    pub const ZERO: Self = Self(0);

    /// `text` as kube-apiserver reads it; a fraction finer than a billionth is rounded up, as
    /// kube-apiserver rounds.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let error = || QuantityError(text.to_owned());
        let trimmed = text.trim();
        let (negative, unsigned) = match trimmed.as_bytes().first() {
            Some(b'-') => (true, &trimmed[1..]),
            Some(b'+') => (false, &trimmed[1..]),
            _ => (false, trimmed),
        };
        let end = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') || whole.len() + fraction.len() > 30 {
            return Err(error());
        }
        // mantissa × 10^exponent10 × 1024^exponent2
        let digits = format!("{whole}{fraction}");
        let mantissa: i128 = digits.parse().map_err(|_| error())?;
        let (mut exponent10, exponent2): (i32, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 1),
            "Mi" => (0, 2),
            "Gi" => (0, 3),
            "Ti" => (0, 4),
            "Pi" => (0, 5),
            "Ei" => (0, 6),
            exponent if exponent.starts_with(['e', 'E']) => {
                let value: i32 = exponent[1..].parse().map_err(|_| error())?;
                if !(-40..=40).contains(&value) {
                    return Err(error());
                }
                (value, 0)
            }
            _ => return Err(error()),
        };
        // In billionths, less the fraction's digits.
        exponent10 += 9 - i32::try_from(fraction.len()).map_err(|_| error())?;
        let binary = 1024_i128.checked_pow(exponent2).ok_or_else(error)?;
        let scaled = mantissa.checked_mul(binary).ok_or_else(error)?;
        let nanos = if exponent10 >= 0 {
            10_i128.checked_pow(exponent10.unsigned_abs()).and_then(|p| scaled.checked_mul(p)).ok_or_else(error)?
        } else {
            let divisor = 10_i128.checked_pow(exponent10.unsigned_abs()).ok_or_else(error)?;
            // Rounded up, as kube-apiserver rounds a precision it does not keep.
            (scaled + divisor - 1) / divisor
        };
        Ok(Self(if negative { -nanos } else { nanos }))
    }

    /// `self` divided by `ratio` (a plain number), rounded up to `unit`.
    pub fn div_ceil(self, ratio: Self, unit: Self) -> Self {
        if ratio.0 <= 0 || unit.0 <= 0 {
            return self;
        }
        // self / (ratio / NANO), rounded up to a multiple of unit.
        let exact = (self.0 * NANO + ratio.0 - 1) / ratio.0;
        Self((exact + unit.0 - 1) / unit.0 * unit.0)
    }

    /// The finest unit worth writing for `resource`: a thousandth of a CPU, a byte otherwise.
    pub fn unit_of(resource: &str) -> Self {
        if resource == "cpu" { Self(NANO / 1000) } else { Self(NANO) }
    }

    /// `limit / request` as a plain ratio, for kube-apiserver's message (`10.000000`).
    pub fn ratio(limit: Self, request: Self) -> f64 {
        if request.0 == 0 { f64::INFINITY } else { limit.0 as f64 / request.0 as f64 }
    }
}

impl std::ops::Add for Amount {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }
}

impl std::ops::Sub for Amount {
    type Output = Self;
    fn sub(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0))
    }
}

/// The canonical form kube-apiserver writes: whole units plainly, a power of 1024 with its
/// binary suffix, thousandths as `m`, anything finer as `n`.
impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0;
        if nanos % NANO != 0 {
            return if nanos % 1_000_000 == 0 { write!(f, "{}m", nanos / 1_000_000) } else { write!(f, "{nanos}n") };
        }
        let units = nanos / NANO;
        for (suffix, power) in [("Ei", 6), ("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)] {
            let base = 1024_i128.pow(power);
            if units != 0 && units % base == 0 && units.abs() >= base {
                return write!(f, "{}{suffix}", units / base);
            }
        }
        write!(f, "{units}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_suffix_exactly() {
        let cases = [
            ("100m", 100_000_000),
            ("1", NANO),
            ("0.5", NANO / 2),
            ("64Mi", 64 * 1024 * 1024 * NANO),
            ("1Gi", 1024 * 1024 * 1024 * NANO),
            ("1G", NANO * NANO),
            ("2e3", 2000 * NANO),
            ("1.5k", 1500 * NANO),
            ("250u", 250_000),
            ("7n", 7),
            ("0", 0),
            ("-1", -NANO),
        ];
        for (text, nanos) in cases {
            assert_eq!(Amount::parse(text), Ok(Amount(nanos)), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        for text in ["", "m", "1.2.3", "abc", "1Xi", "1e999", "9999999999999999999999999999999Ei", "."] {
            assert!(Amount::parse(text).is_err(), "{text:?} read as a quantity");
        }
    }

    #[test]
    fn writes_the_canonical_form() {
        for text in ["400m", "0", "1", "64Mi", "1Gi", "1500", "7n"] {
            assert_eq!(Amount::parse(text).expect("quantity").to_string(), text);
        }
    }

    #[test]
    fn divides_rounding_up_to_the_unit() {
        let limit = Amount::parse("400m").expect("quantity");
        assert_eq!(limit.div_ceil(Amount::parse("3").expect("ratio"), Amount::unit_of("cpu")).to_string(), "134m");
        let memory = Amount::parse("100").expect("quantity");
        assert_eq!(memory.div_ceil(Amount::parse("3").expect("ratio"), Amount::unit_of("memory")).to_string(), "34");
    }
}
