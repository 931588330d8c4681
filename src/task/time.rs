//! Timestamps: canonical RFC 3339 UTC, rendered per dialect (ISO with milliseconds, Unix ms or s).

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde_json::Value;

/// How a dialect writes a timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// RFC 3339 as the canonical model keeps it (`2025-02-12T09:30:46.453Z`).
    Rfc3339,
    /// ISO 8601 with exactly three fraction digits and `Z` (Nevermined).
    IsoMs,
    /// Unix milliseconds, an integer (MIP-003).
    UnixMs,
    /// Unix seconds, an integer (OpenAI, NEAR AI).
    UnixS,
}

impl TimeFormat {
    pub fn from_name(name: &str) -> Option<TimeFormat> {
        Some(match name {
            "rfc3339" => TimeFormat::Rfc3339,
            "iso_ms" => TimeFormat::IsoMs,
            "unix_ms" => TimeFormat::UnixMs,
            "unix_s" => TimeFormat::UnixS,
            _ => return None,
        })
    }

    /// Renders a canonical timestamp.
    pub fn render(self, t: DateTime<Utc>) -> Value {
        match self {
            TimeFormat::Rfc3339 | TimeFormat::IsoMs => Value::String(format_iso_ms(t)),
            TimeFormat::UnixMs => Value::from(t.timestamp_millis()),
            TimeFormat::UnixS => Value::from(t.timestamp()),
        }
    }
}

/// `2025-02-12T09:30:46.453Z`.
pub fn format_iso_ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Reads a timestamp in any form a dialect may send: RFC 3339 text, or a number (or numeric
/// string) of seconds or milliseconds. Per DIALECTS.md §2.1.1, a value above 10^11 is
/// milliseconds, anything else seconds.
pub fn parse_any(v: &Value) -> Option<DateTime<Utc>> {
    match v {
        Value::String(s) => {
            let s = s.trim();
            if let Ok(t) = DateTime::parse_from_rfc3339(s) {
                return Some(t.with_timezone(&Utc));
            }
            s.parse::<f64>().ok().and_then(from_number)
        }
        Value::Number(n) => n.as_f64().and_then(from_number),
        _ => None,
    }
}

fn from_number(n: f64) -> Option<DateTime<Utc>> {
    if !n.is_finite() {
        return None;
    }
    let ms = if n.abs() > 100_000_000_000.0 {
        n
    } else {
        n * 1000.0
    };
    Utc.timestamp_millis_opt(ms as i64).single()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_are_seconds_or_milliseconds_by_size() {
        let t = parse_any(&json!(1721480200)).unwrap();
        assert_eq!(format_iso_ms(t), "2024-07-20T12:56:40.000Z");
        assert_eq!(parse_any(&json!(1721480200000_i64)), Some(t));
        assert_eq!(parse_any(&json!("1721480200000")), Some(t));
        assert_eq!(parse_any(&json!("2024-07-20T12:56:40Z")), Some(t));
        assert_eq!(parse_any(&json!("soon")), None);
    }

    #[test]
    fn rendering() {
        let t = parse_any(&json!("2025-02-12T09:30:46.453Z")).unwrap();
        assert_eq!(
            TimeFormat::IsoMs.render(t),
            json!("2025-02-12T09:30:46.453Z")
        );
        assert_eq!(TimeFormat::UnixMs.render(t), json!(1739352646453_i64));
        assert_eq!(TimeFormat::UnixS.render(t), json!(1739352646));
    }
}
