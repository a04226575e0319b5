//! Text and times as the agent writes them for people and other programs: Event notes and
//! label values cut at a character boundary, RFC 3339 times.

use std::time::SystemTime;

use k8s_openapi::jiff::Timestamp;

/// `text` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// `at` as a time stamp (the Unix epoch for a time out of its range, years -9999 to 9999).
pub(crate) fn timestamp(at: SystemTime) -> Timestamp {
    Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate(&"é".repeat(600), 1024);
        assert!(cut.len() <= 1024 && cut.ends_with('…'), "{}", cut.len());
        assert_eq!(truncate("abcdef", 5), "ab…");
    }

    #[test]
    fn times_are_rfc_3339() {
        assert_eq!(
            timestamp(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(60)).to_string(),
            "1970-01-01T00:01:00Z"
        );
    }
}
