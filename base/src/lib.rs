//! What every crate of watcher-operator shares, and no dependency brings: a lock that outlives
//! a panicked holder, the DNS-1123 label check kube-apiserver makes of names, and the duration
//! syntax of the project's flags and variables (`250ms`, `30s`, `5m`, `1h`).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Locks `mutex`: a holder that panicked left nothing half-done that a reader cares about
/// (every guarded value of the project is written whole; the agent aborts on a panic anyway,
/// tests unwind).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `name` is a DNS-1123 label: 1 to 63 lower-case letters, digits and `-`, not
/// beginning or ending with `-` (a container's, a volume's, a namespace's name).
pub fn is_dns1123_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    (1..=63).contains(&bytes.len())
        && bytes.iter().all(inner)
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-')
}

/// Why a text is not a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationError {
    /// Not a whole number followed by `ms`, `s`, `m` or `h`.
    Syntax,
    /// Longer than a `u64` of milliseconds (about 584 million years).
    TooLong,
}

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Syntax => "not a duration (250ms, 30s, 5m, 1h)",
            Self::TooLong => "longer than any duration this takes",
        })
    }
}

impl std::error::Error for DurationError {}

/// `250ms`, `30s`, `5m` or `1h`: a whole number and its unit, every product checked.
pub fn parse_duration(value: &str) -> Result<Duration, DurationError> {
    let split = value.find(|c: char| !c.is_ascii_digit()).ok_or(DurationError::Syntax)?;
    let (number, unit) = value.split_at(split);
    if number.is_empty() {
        return Err(DurationError::Syntax);
    }
    // Digits only: a number that does not parse is too long for a u64.
    let number: u64 = number.parse().map_err(|_| DurationError::TooLong)?;
    let millis_per = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(DurationError::Syntax),
    };
    number.checked_mul(millis_per).map(Duration::from_millis).ok_or(DurationError::TooLong)
}

/// `1h`, `5m`, `30s`, `250ms`: the shortest exact form, which [`parse_duration`] reads back
/// (below a millisecond, what is left is not said).
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(3_600_000) && millis > 0 {
        format!("{}h", millis / 3_600_000)
    } else if millis.is_multiple_of(60_000) && millis > 0 {
        format!("{}m", millis / 60_000)
    } else if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{millis}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        for good in ["a", "app", "my-app-2", "0", &"a".repeat(63)] {
            assert!(is_dns1123_label(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn durations_are_read_and_written_back() {
        for (text, millis) in [("250ms", 250), ("0s", 0), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000)] {
            let duration = parse_duration(text).expect(text);
            assert_eq!(duration, Duration::from_millis(millis), "{text}");
            assert_eq!(parse_duration(&format_duration(duration)), Ok(duration), "{text} written back");
        }
        assert_eq!(format_duration(Duration::from_millis(90_000)), "90s");
    }

    #[test]
    fn what_is_not_a_duration_is_said_and_nothing_overflows() {
        for bad in ["", "5", "s", "-5s", "5 s", "5sec", "1.5s", "5S", "1d", "ms5"] {
            assert_eq!(parse_duration(bad), Err(DurationError::Syntax), "{bad:?}");
        }
        let max_hours = u64::MAX / 3_600_000;
        assert!(parse_duration(&format!("{max_hours}h")).is_ok());
        for long in [format!("{}h", max_hours + 1), format!("{}m", u64::MAX), "99999999999999999999999ms".into()] {
            assert_eq!(parse_duration(&long), Err(DurationError::TooLong), "{long}");
        }
    }
}
