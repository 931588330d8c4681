//! The config's human units: durations ("5s", "250ms", "1m 30s") and sizes ("10MiB", "512KB").

use std::time::Duration;

/// A value that is not in the unit a setting wants; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("`{text}` has no unit; write it as \"{number}s\" or \"{number}ms\"")]
    NoUnit { text: String, number: String },
    #[error("`{text}` is not a duration ({detail}); examples: \"5s\", \"250ms\", \"1m 30s\"")]
    Duration { text: String, detail: String },
    #[error("`{0}` is not a size; examples: \"10MiB\", \"512KB\", \"1048576\"")]
    Size(String),
}

/// Parses a duration such as `"5s"`, `"250ms"` or `"1m 30s"`. A bare number is refused: a
/// timeout of `5` could mean seconds or milliseconds, and guessing wrong is a silent outage.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit()) {
        return Err(UnitError::NoUnit {
            text: text.to_string(),
            number: trimmed.to_string(),
        });
    }
    humantime::parse_duration(trimmed).map_err(|e| UnitError::Duration {
        text: text.to_string(),
        detail: e.to_string(),
    })
}

/// Parses a size such as `"10MiB"`, `"512KB"` or `"1048576"` (bytes) into bytes.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|_| UnitError::Size(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("5")
            .unwrap_err()
            .to_string()
            .contains("no unit"));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn sizes_accept_binary_and_decimal_units() {
        assert_eq!(parse_size("10MiB"), Ok(10 * 1024 * 1024));
        assert_eq!(parse_size("512KB"), Ok(512_000));
        assert_eq!(parse_size("1048576"), Ok(1_048_576));
        assert!(parse_size("big").is_err());
    }
}
