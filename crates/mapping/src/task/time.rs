//! Timestamps: canonical RFC 3339 UTC, rendered per dialect (ISO with milliseconds, Unix ms or s).

use chrono::{DateTime, Datelike, SecondsFormat, TimeZone, Timelike, Utc};
use serde::{Serialize, Serializer};
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
    let mut buf = [0u8; 36];
    match write_rfc3339(&t, &mut buf, Fraction::Millis, b"Z") {
        Some(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        None => t.to_rfc3339_opts(SecondsFormat::Millis, true),
    }
}

/// `2025-02-12T09:30:46.453+00:00`: what chrono's `to_rfc3339` writes, the store's time columns
/// (their text order is their time order).
pub fn format_rfc3339_offset(t: DateTime<Utc>) -> String {
    let mut buf = [0u8; 36];
    match write_rfc3339(&t, &mut buf, Fraction::Auto, b"+00:00") {
        Some(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        None => t.to_rfc3339(),
    }
}

/// How many fraction digits a timestamp is written with.
#[derive(Clone, Copy)]
enum Fraction {
    /// chrono's `AutoSi`: as many as the value needs, in groups of three.
    Auto,
    /// Always three.
    Millis,
}

/// Serializes a timestamp exactly as chrono's `Serialize` does (RFC 3339, `Z`, 0, 3, 6 or 9
/// fraction digits), for `#[serde(serialize_with)]`. A create writes a task's timestamps about
/// ten times (its documents, its rows, a dialect's fields); chrono formats through `core::fmt`,
/// which took ≈ 2 % of a create's CPU. Years outside 0–9999 and leap seconds are left to chrono
/// (by every writer in this file).
pub fn serialize_rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = [0u8; 36];
    match write_rfc3339(t, &mut buf, Fraction::Auto, b"Z") {
        Some(n) => s.serialize_str(std::str::from_utf8(&buf[..n]).unwrap_or_default()),
        None => t.serialize(s),
    }
}

/// Writes `t` into `buf`; the length, or `None` for what only chrono writes.
fn write_rfc3339(
    t: &DateTime<Utc>,
    buf: &mut [u8; 36],
    digits: Fraction,
    zone: &[u8],
) -> Option<usize> {
    let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
    let nanos = t.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    buf[..20].copy_from_slice(b"0000-00-00T00:00:00.");
    put_digits(&mut buf[0..4], year);
    put_digits(&mut buf[5..7], t.month());
    put_digits(&mut buf[8..10], t.day());
    put_digits(&mut buf[11..13], t.hour());
    put_digits(&mut buf[14..16], t.minute());
    put_digits(&mut buf[17..19], t.second());
    let (fraction, width) = match (digits, nanos) {
        (Fraction::Millis, n) => (n / 1_000_000, 3),
        (Fraction::Auto, 0) => (0, 0),
        (Fraction::Auto, n) => match n {
            n if n % 1_000_000 == 0 => (n / 1_000_000, 3),
            n if n % 1_000 == 0 => (n / 1_000, 6),
            n => (n, 9),
        },
    };
    let end = if width == 0 {
        19
    } else {
        put_digits(&mut buf[20..20 + width], fraction);
        20 + width
    };
    buf[end..end + zone.len()].copy_from_slice(zone);
    Some(end + zone.len())
}

/// Writes `value`'s last `into.len()` decimal digits, zero-padded.
fn put_digits(into: &mut [u8], mut value: u32) {
    for d in into.iter_mut().rev() {
        *d = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Reads a timestamp in any form a dialect may send: RFC 3339 text, or a number (or numeric
/// string) of seconds or milliseconds. A value above 10^11 is milliseconds, anything else
/// seconds: MIP-003's text and examples write seconds, the Masumi payment node (and so masumi's
/// `start_job` answers) milliseconds, and 10^11 s lies thousands of years ahead.
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
    use proptest::strategy::Strategy;
    use serde_json::json;

    /// What each writer here makes of `t`, beside what chrono makes of it.
    fn ours_and_chronos(t: DateTime<Utc>) -> [(String, String); 3] {
        let mut ours = Vec::new();
        serialize_rfc3339(&t, &mut serde_json::Serializer::new(&mut ours)).expect("serializes");
        [
            (
                String::from_utf8(ours).expect("utf-8"),
                serde_json::to_string(&t).expect("serializes"),
            ),
            (
                format_iso_ms(t),
                t.to_rfc3339_opts(SecondsFormat::Millis, true),
            ),
            (format_rfc3339_offset(t), t.to_rfc3339()),
        ]
    }

    #[test]
    fn timestamps_are_written_as_chrono_writes_them() {
        for t in [
            "2026-11-23T08:25:19Z",
            "2026-11-23T08:25:19.293Z",
            "2026-11-23T08:25:19.293068Z",
            "2026-11-23T08:25:19.293068001Z",
            "2026-11-23T08:25:19.000000001Z",
            "2026-11-23T08:25:19.100Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            "1970-01-01T00:00:00.000001Z",
        ] {
            let t = DateTime::parse_from_rfc3339(t)
                .expect("valid")
                .with_timezone(&Utc);
            for (ours, chrono) in ours_and_chronos(t) {
                assert_eq!(ours, chrono);
            }
        }
    }

    #[test]
    fn years_beyond_four_digits_and_leap_seconds_are_left_to_chrono() {
        let far = Utc
            .with_ymd_and_hms(12345, 1, 2, 3, 4, 5)
            .single()
            .expect("valid");
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .expect("a leap second")
            .and_utc();
        for t in [far, leap] {
            for (ours, chrono) in ours_and_chronos(t) {
                assert_eq!(ours, chrono);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_timestamp_is_written_as_chrono_writes_it(
            secs in -62_167_219_200i64..253_402_300_800i64,
            nanos in proptest::prop_oneof![
                proptest::strategy::Just(0u32),
                (0u32..1000).prop_map(|m| m * 1_000_000),
                (0u32..1_000_000).prop_map(|u| u * 1_000),
                0u32..1_000_000_000,
            ],
        ) {
            let t = Utc.timestamp_opt(secs, nanos).single().expect("in range");
            for (ours, chrono) in ours_and_chronos(t) {
                proptest::prop_assert_eq!(ours, chrono);
            }
        }
    }

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
