//! MIP-004 input and output hashes, as computed by masumi 1.2.0.
//!
//! The spec text (MIP-004,
//! <https://github.com/masumi-network/masumi-improvement-proposals/blob/60d8788/MIPs/MIP-004/MIP-004.md>)
//! names RFC 8785 (JCS), but the reference code that agents and payment nodes
//! actually run (masumi 1.2.0's `create_masumi_input_hash` and
//! `create_masumi_output_hash`, <https://github.com/masumi-network/pip-masumi>)
//! uses Python `canonicaljson` 2.0.0
//! (<https://github.com/matrix-org/python-canonicaljson>), so this module
//! reproduces that encoder byte for byte: a hash must match what the agent and
//! the payment node compute.
//!
//! # Limits of a `serde_json::Value` parsed with default features
//!
//! Matching the reference on every input needs a parser that keeps each
//! number's lexical class (integer or float) and rounds floats correctly.
//! serde_json 1.x with default features does neither, so a caller that parses
//! with `serde_json::from_str` inherits these differences from the reference
//! (the encoder itself is exact):
//!
//! - The integer token `-0` is parsed as the float `-0.0`, so it is printed as
//!   `-0.0` where the reference prints `0` (vector E11).
//! - Integer tokens outside the `i64`/`u64` range are parsed as `f64`, so they
//!   are printed as floats where Python keeps an exact integer.
//! - Float tokens with more than about 15 significant digits are parsed with a
//!   fast, not correctly rounded, algorithm and can land on a neighbouring
//!   `f64` (e.g. `3.6932272945145996`; about 9% of random 17-digit literals),
//!   while Python rounds correctly, so the printed digits differ.
//! - Literals that overflow `f64` (such as `1E400`) are rejected by the parser
//!   itself ("number out of range"); the reference rejects them too.
//!
//! Enabling serde_json's `arbitrary_precision` fixes the first two (this module
//! then prints integer tokens verbatim) and `float_roundtrip` fixes the third;
//! the code here works unchanged with either feature.

use std::fmt;
use std::fmt::Write as _;

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// Why a value has no MIP-004 canonical JSON form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CanonicalError {
    /// A NaN or infinite float. Python `canonicaljson` encodes with
    /// `allow_nan=False`, so masumi fails the request rather than hashing it.
    NonFiniteNumber,
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanonicalError::NonFiniteNumber => f.write_str(
                "MIP-004 canonical JSON: non-finite number (NaN or Infinity) cannot be encoded",
            ),
        }
    }
}

impl std::error::Error for CanonicalError {}

/// Which pre-image an output hash is computed over: masumi 1.2.0 and the
/// MIP-004 text disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputHashForm {
    /// What masumi 1.2.0 submits on chain as `submitResultHash`: the output
    /// string JSON-escaped, without its surrounding quotes
    /// (`json.dumps(output, ensure_ascii=False)[1:-1]`). The default, because it
    /// is what already sits on chain.
    #[default]
    Masumi,
    /// What the MIP-004 text says: the output string hashed raw.
    SpecRaw,
}

/// Canonical JSON text of `value`, byte-identical to Python `canonicaljson`
/// 2.0.0 `encode_canonical_json`.
///
/// Keys sorted by code point, no whitespace, `,` and `:` separators, strings
/// escaped like Python `json.dumps(..., ensure_ascii=False)`, integers in
/// decimal and floats laid out like Python `repr(float)`.
///
/// Errors with [`CanonicalError::NonFiniteNumber`] on a number that is not a
/// finite float or an integer. With default serde_json features a `Value`
/// cannot hold one, so this never fails; with `arbitrary_precision` a token
/// such as `1E400` reaches here and is refused, as the reference refuses it.
/// See the module docs for what parsing with serde_json loses before this
/// function runs (`-0`, integers beyond 64 bits, float rounding).
pub fn canonical_json(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_value(&mut out, value)?;
    Ok(out)
}

/// MIP-004 input hash: lowercase hex SHA-256 of the UTF-8 bytes of
/// `identifier_from_purchaser + ";" + canonical_json(input_data)`.
///
/// `{}` is hashed like any other value (vector R4); masumi's habit of sending
/// `""` for empty input is treated as a bug. For
/// `/provide_input`, pass only the new data with the job's original identifier
/// (vector R7).
pub fn input_hash(
    identifier_from_purchaser: &str,
    input_data: &Value,
) -> Result<String, CanonicalError> {
    let canonical = canonical_json(input_data)?;
    Ok(sha256_hex(identifier_from_purchaser, &canonical))
}

/// MIP-004 output hash: lowercase hex SHA-256 of the UTF-8 bytes of
/// `identifier + ";" + body`, where `body` is `output` JSON-escaped without
/// quotes ([`OutputHashForm::Masumi`]) or `output` as is
/// ([`OutputHashForm::SpecRaw`]).
///
/// The two forms agree whenever `output` has no `"`, no `\` and no
/// U+0000–U+001F (vectors O1–O3). Non-string results must already have been
/// turned into a string the way the agent did it (masumi uses
/// `json.dumps(result, ensure_ascii=False)` with default separators).
pub fn output_hash(identifier: &str, output: &str, form: OutputHashForm) -> String {
    match form {
        OutputHashForm::Masumi => {
            let mut body = String::with_capacity(output.len());
            write_escaped_body(&mut body, output);
            sha256_hex(identifier, &body)
        }
        OutputHashForm::SpecRaw => sha256_hex(identifier, output),
    }
}

fn sha256_hex(identifier: &str, body: &str) -> String {
    // One `;`, no spaces: the delimiter is part of MIP-004's pre-image.
    let mut hasher = Sha256::new();
    hasher.update(identifier.as_bytes());
    hasher.update(b";");
    hasher.update(body.as_bytes());
    hex::encode(hasher.finalize())
}

fn write_value(out: &mut String, value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Python sorts keys by code point; for UTF-8 strings that is byte
            // order. Sort here instead of trusting the map, so the result stays
            // right even if a `preserve_order` build swaps in an IndexMap (E16:
            // U+FFFF must come before U+1F600, unlike JCS's UTF-16 order).
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_number(out: &mut String, n: &Number) -> Result<(), CanonicalError> {
    // Lexical class decides the layout: Python keeps `10` an int and `1E2` a
    // float (`100.0`, E10).
    if n.is_f64() {
        let f = n.as_f64().expect("is_f64 implies as_f64");
        return write_float(out, f);
    }
    // An integer token: print its decimal text as is, so that a build with
    // `arbitrary_precision` keeps integers of any size exactly like Python.
    let text = n.to_string();
    if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        // Only with `arbitrary_precision`: a float token that is not a finite
        // f64 (`1E400`) is neither f64 nor integer. The reference rejects it.
        return Err(CanonicalError::NonFiniteNumber);
    }
    // `-0` becomes `0` (E11); reachable only with `arbitrary_precision`,
    // since plain serde_json already turned the token into the float -0.0.
    out.push_str(if text == "-0" { "0" } else { &text });
    Ok(())
}

/// Python `repr(float)` layout over Rust's shortest round-trip digits
/// (vectors E1–E10, R5).
fn write_float(out: &mut String, f: f64) -> Result<(), CanonicalError> {
    if !f.is_finite() {
        return Err(CanonicalError::NonFiniteNumber);
    }
    // Digits come from serde_json's float printer (ryu, now zmij): shortest
    // round-trip digits, closest to the exact value, exact ties to even, as
    // Python's repr (Gay's dtoa mode 0). Rust's own `{}`/`{:e}` is NOT usable:
    // on exact ties it rounds half up (1918000000000000.25 prints as `...0.3`,
    // Python and serde_json give `...0.2`). Only the layout is redone here.
    let text = Number::from_f64(f.abs())
        .expect("finite f64 is a valid serde_json Number")
        .to_string();
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (
            m,
            e.parse::<i32>()
                .expect("serde_json float exponent is a decimal integer"),
        ),
        None => (text.as_str(), 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = format!("{int_part}{frac_part}");
    let leading_zeros = all_digits.bytes().take_while(|b| *b == b'0').count();
    let digits = all_digits[leading_zeros..].trim_end_matches('0');
    let (digits, exp) = if digits.is_empty() {
        ("0", 0)
    } else {
        // Decimal exponent of the first significant digit: value = d.ddd × 10^exp.
        (
            digits,
            int_part.len() as i32 - 1 - leading_zeros as i32 + exp,
        )
    };

    // `-0.0` keeps its sign in Python (R5), so test the sign bit, not `< 0`.
    if f.is_sign_negative() {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.unsigned_abs());
    }
    Ok(())
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    write_escaped_body(out, s);
    out.push('"');
}

/// Body of Python `json.dumps(s, ensure_ascii=False)` without the quotes
/// (vectors E13–E15, O4–O6). Python leaves `/`, U+007F,
/// U+2028/U+2029 and all non-ASCII raw, and writes other C0 controls as
/// `\u00xx` in lowercase hex.
fn write_escaped_body(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0C}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("vector JSON text parses")
    }

    /// Checks an input vector: canonical text and hash, as masumi 1.2.0 and
    /// `canonicaljson` 2.0.0 computed them.
    fn check(identifier: &str, json_text: &str, canonical: &str, hash: &str) {
        let value = parse(json_text);
        assert_eq!(canonical_json(&value).unwrap(), canonical, "{json_text}");
        assert_eq!(input_hash(identifier, &value).unwrap(), hash, "{json_text}");
    }

    fn check_edge(json_text: &str, canonical: &str, hash: &str) {
        check("edge", json_text, canonical, hash);
    }

    fn float_text(f: f64) -> String {
        let mut s = String::new();
        write_float(&mut s, f).unwrap();
        s
    }

    // ---- R1–R7: input hashes ----

    #[test]
    fn r1_resume_job() {
        check(
            "resume-job-123",
            r#"{"full_name":"Alice Johnson","email":"alice@example.com","job_history":"Software Engineer at XYZ Corp, 2018–2023; Intern at ABC Inc, 2017–2018","design_style":"Modern"}"#,
            r#"{"design_style":"Modern","email":"alice@example.com","full_name":"Alice Johnson","job_history":"Software Engineer at XYZ Corp, 2018–2023; Intern at ABC Inc, 2017–2018"}"#,
            "f747d0cc6b356a8d8d046604bdae6546d24da80b0835b54408faacc2b654a70a",
        );
    }

    #[test]
    fn r2_text_hello() {
        check(
            "abc",
            r#"{"text":"hello"}"#,
            r#"{"text":"hello"}"#,
            "803ce2dc472a904d2c2e720cd6f5fd67d817bbbc058dcd32e562807e5690aa44",
        );
    }

    #[test]
    fn r3_nested_sorted() {
        check(
            "purchaser-1",
            r#"{"b":2,"a":[1,true,null],"c":{"z":"é","y":"\n"}}"#,
            r#"{"a":[1,true,null],"b":2,"c":{"y":"\n","z":"é"}}"#,
            "d8d3a4b357c282913ea1ab06a4d7de56f6100dab8b451cccb029cf757421abca",
        );
    }

    #[test]
    fn r4_empty_object_is_hashed() {
        check(
            "x",
            "{}",
            "{}",
            "b5fc8e05cb8391bd78cc7d554aa76d1164c170f81abfcd39d70aaedf855b947b",
        );
    }

    #[test]
    fn r5_floats_and_negative_zero() {
        check(
            "id",
            r#"{"f":1.5,"g":10,"h":-0.0}"#,
            r#"{"f":1.5,"g":10,"h":-0.0}"#,
            "0068e83e9c6bb2d3f600dff841f3e3046202ceb6020c9b8f193c156dd8a4a821",
        );
    }

    #[test]
    fn r6_start_job_on_wire() {
        check(
            "aabbccddeeff0011",
            r#"{"text":"hello world"}"#,
            r#"{"text":"hello world"}"#,
            "0d857a49115ce232eb843a991bae4caf31f57d6c364c67d1f453dfea60e6a5ca",
        );
    }

    #[test]
    fn r7_provide_input_on_wire() {
        check(
            "aabbccddeeff0015",
            r#"{"more":"details"}"#,
            r#"{"more":"details"}"#,
            "998cf5875d85d134489e9e57a2e48bcd8bd99bfdaff19abbfc77a80f947de41b",
        );
    }

    // ---- E1–E17: edge cases, identifier `edge` ----

    #[test]
    fn e1_one_point_zero() {
        check_edge(
            r#"{"n":1.0}"#,
            r#"{"n":1.0}"#,
            "dc0d0fa418548eebbbcc8c96c1a11f1530d234477fe143898be1cbd70b56b843",
        );
    }

    #[test]
    fn e2_small_exponent() {
        check_edge(
            r#"{"n":1e-7}"#,
            r#"{"n":1e-07}"#,
            "02a3e1de53b8babfebbeff48c1654859cd04269e4a45c2f05cfb68b0827bb45c",
        );
    }

    #[test]
    fn e3_large_exponent() {
        check_edge(
            r#"{"n":1e21}"#,
            r#"{"n":1e+21}"#,
            "f448eb4370b07b252b7927add47fca25c752b99fb0faab97d3af5c74295e91b7",
        );
    }

    #[test]
    fn e4_1e15_positional() {
        check_edge(
            r#"{"n":1e15}"#,
            r#"{"n":1000000000000000.0}"#,
            "599fc6ad0ea162645bbe55de0ad3beda9108e663f0c25c4230d1f09f1e031f7f",
        );
    }

    #[test]
    fn e5_1e16_scientific() {
        check_edge(
            r#"{"n":1e16}"#,
            r#"{"n":1e+16}"#,
            "237033bc4d5407aa44e8856db6a6adb53aa458f655e407d212885c517cdbdfea",
        );
    }

    #[test]
    fn e6_0_0001_positional() {
        check_edge(
            r#"{"n":0.0001}"#,
            r#"{"n":0.0001}"#,
            "97a62530be90bf4d32603ce9fdccfc4b430df931c9115e422965a19313dbd465",
        );
    }

    #[test]
    fn e7_0_00001_scientific() {
        check_edge(
            r#"{"n":0.00001}"#,
            r#"{"n":1e-05}"#,
            "9330f1665f4ce1f4ad055ce9df49c6b5ecf57f140bf2ec30845218e421ceaf56",
        );
    }

    #[test]
    fn e8_seventeen_digits() {
        check_edge(
            r#"{"n":123456789012345678.0}"#,
            r#"{"n":1.2345678901234568e+17}"#,
            "318024666da531524894448deed3f15076bc8bf063eac368eb71cf124ed1d96b",
        );
    }

    #[test]
    fn e9_trailing_zero_dropped() {
        check_edge(
            r#"{"n":1.50}"#,
            r#"{"n":1.5}"#,
            "e523bc12728322f5a1bac4d1a302f470563c401246b7441c4603d8d33af0dc0e",
        );
    }

    #[test]
    fn e10_exponent_token_is_float() {
        check_edge(
            r#"{"n":1E2}"#,
            r#"{"n":100.0}"#,
            "6a23fe1058770238afeafeb64f3bf6ff6c845c200c045544083707e6687bc856",
        );
    }

    /// E11 cannot be matched through `serde_json::from_str` with default
    /// features: serde_json turns the integer token `-0` into the float `-0.0`
    /// (serde_json de.rs: "Convert into a float if we underflow, or on `-0`"),
    /// indistinguishable from R5's `-0.0`. So the vector is checked against
    /// the value a lexical-class-preserving parser yields (integer 0), and the
    /// parsed form either matches (`arbitrary_precision`) or is the known
    /// `-0.0` deviation.
    #[test]
    fn e11_negative_zero_integer_token() {
        let hash = "9d13a70a4d464b08083fe2f4d92b5dbc8838bc238d0687fc8ef6c4e7b43768fe";
        let class_preserved = serde_json::json!({ "n": 0 });
        assert_eq!(canonical_json(&class_preserved).unwrap(), r#"{"n":0}"#);
        assert_eq!(input_hash("edge", &class_preserved).unwrap(), hash);

        let parsed = parse(r#"{"n":-0}"#);
        if parsed["n"].is_f64() {
            assert_eq!(canonical_json(&parsed).unwrap(), r#"{"n":-0.0}"#);
        } else {
            assert_eq!(canonical_json(&parsed).unwrap(), r#"{"n":0}"#);
            assert_eq!(input_hash("edge", &parsed).unwrap(), hash);
        }
    }

    #[test]
    fn e12_2_pow_60_stays_integer() {
        check_edge(
            r#"{"n":1152921504606846976}"#,
            r#"{"n":1152921504606846976}"#,
            "6d35c49ccfae5092d4060f48316c21f7f4762dfa3e709f9a59a53ccbea47a820",
        );
    }

    #[test]
    fn e13_line_separator_raw() {
        check_edge(
            r#"{"k":"\u2028"}"#,
            "{\"k\":\"\u{2028}\"}",
            "849ad11b7f543ee7bf219a7e573e07f969d148cd1d22436f8e25714b6b0ffcf1",
        );
    }

    #[test]
    fn e14_control_lowercase_del_and_slash_raw() {
        check_edge(
            r#"{"k":"a\u001fb\u007f/"}"#,
            "{\"k\":\"a\\u001fb\u{7f}/\"}",
            "cd58099fa5acc417c173a5f56f402531e7f5b52732f601fc842be8c83f378439",
        );
    }

    #[test]
    fn e15_short_escapes() {
        check_edge(
            r#"{"k":"\t\r\b\f\"\\"}"#,
            r#"{"k":"\t\r\b\f\"\\"}"#,
            "3a0adcde7524a8dbfd7c4e19908db26bc8f8b0dffa38213d0dd987b2626b9765",
        );
    }

    #[test]
    fn e16_code_point_key_order() {
        check_edge(
            r#"{"\ud83d\ude00":1,"\uffff":2,"a":3}"#,
            "{\"a\":3,\"\u{ffff}\":2,\"\u{1f600}\":1}",
            "ea8a092f344a293c63ad57a46e1f16078d2c57c7dcde7ae05b1fceb3f65604d2",
        );
    }

    #[test]
    fn e17_duplicate_key_last_wins() {
        check_edge(
            r#"{"a":1,"a":2}"#,
            r#"{"a":2}"#,
            "ee9b307f0495806ebab3f9cc179feca4e332e4660ee15b19f7a9b0e8807c0d48",
        );
    }

    // ---- O1–O6: output hashes ----

    fn check_output(identifier: &str, literal: &str, masumi: &str, raw: &str) {
        let output: String = serde_json::from_str(literal).expect("vector literal parses");
        assert_eq!(
            output_hash(identifier, &output, OutputHashForm::Masumi),
            masumi,
            "masumi form of {literal}"
        );
        assert_eq!(
            output_hash(identifier, &output, OutputHashForm::SpecRaw),
            raw,
            "raw form of {literal}"
        );
    }

    #[test]
    fn o1_plain_forms_agree() {
        let h = "5bfe97ac5ac21ad8ac2fdc455cb0a908ec8c2cd1b3881943184f1745e8613cb3";
        check_output("resume-job-123", r#""Resume generated successfully""#, h, h);
    }

    #[test]
    fn o2_plain_forms_agree() {
        let h = "da55b24b9cc5447e486ff124f0aa55a401f5834bb9df163ca296f14585d26104";
        check_output("abc", r#""HELLO""#, h, h);
    }

    #[test]
    fn o3_seen_on_wire() {
        let h = "6bbba526e8079414861fd0876921b8f96172d79132a52bc71074eda78dcb4209";
        check_output("aabbccddeeff0011", r#""HELLO WORLD""#, h, h);
    }

    #[test]
    fn o4_newline_quotes_non_ascii() {
        check_output(
            "p",
            r#""line1\nline2 \"q\" é""#,
            "d2ef0f78a54a2f0546507c7e8be90d0640bbcec756bc86644f667e1c88f48ed6",
            "9e28fd893647e0a545fbd6574cf1a3cc09e2e4a006cb57a2671d2e8b25419596",
        );
    }

    #[test]
    fn o5_backslash() {
        check_output(
            "edge",
            r#""a\\b""#,
            "11d6f68951dbb03f210718ae43ed79e813563c57576c5dcb22670395610b8cdd",
            "c10d77a0ec104fa08740553551156b0a654fb7073dcdc297fe54e35dcb15afa2",
        );
    }

    #[test]
    fn o6_tab() {
        check_output(
            "edge",
            r#""tab\there""#,
            "68113e4c0dbf7e52cf337cee576b803c654f4deec71d5d773e95f25ae4d87f78",
            "e2ed85228f9eb117a92f29c0429f0d4fc474ab4bde146b27bb84e839f0d9f54f",
        );
    }

    #[test]
    fn output_form_defaults_to_masumi() {
        assert_eq!(OutputHashForm::default(), OutputHashForm::Masumi);
    }

    // ---- non-finite numbers ----

    /// With default features serde_json refuses `1E400` at parse time
    /// ("number out of range") rather than producing infinity, so a non-finite
    /// float never reaches `canonical_json`; with `arbitrary_precision` it
    /// parses, and `canonical_json` must then refuse it. Either way the hash is
    /// refused, as the reference does.
    #[test]
    fn overflowing_literal_is_rejected() {
        for text in [r#"{"n":1E400}"#, "-1e400"] {
            match serde_json::from_str::<Value>(text) {
                Err(err) => assert!(err.to_string().contains("number out of range"), "{err}"),
                Ok(v) => assert_eq!(canonical_json(&v), Err(CanonicalError::NonFiniteNumber)),
            }
        }
    }

    /// serde_json cannot even hold NaN/Infinity in a `Value` (`from_f64` gives
    /// `None`, `Value::from` gives `null`), so the float layout is where the
    /// error is raised.
    #[test]
    fn non_finite_float_is_an_error() {
        assert!(Number::from_f64(f64::NAN).is_none());
        assert_eq!(Value::from(f64::INFINITY), Value::Null);
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut s = String::new();
            assert_eq!(write_float(&mut s, f), Err(CanonicalError::NonFiniteNumber));
        }
        assert!(CanonicalError::NonFiniteNumber
            .to_string()
            .contains("non-finite"));
    }

    // ---- float layout (Python repr) ----

    #[test]
    fn float_layout_matches_python_repr() {
        let cases: &[(f64, &str)] = &[
            (5e-324, "5e-324"),
            (1e22, "1e+22"),
            (123.456, "123.456"),
            (-1.5e-10, "-1.5e-10"),
            (0.1, "0.1"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1e-5, "1e-05"),
            (1e15, "1000000000000000.0"),
            (1234567890123456.7, "1234567890123456.8"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e100, "1e+100"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (0.30000000000000004, "0.30000000000000004"),
            (-123.0, "-123.0"),
            (3.6932272945145996, "3.6932272945145996"),
            // Exact ties in the 17th digit go to even, as in Python; Rust's
            // `{}` would print 1918000000000000.3 here.
            (1_918_000_000_000_000.0 + 0.25, "1918000000000000.2"),
            (1_652_000_000_000_000.0 + 0.75, "1652000000000000.8"),
        ];
        for &(f, want) in cases {
            assert_eq!(float_text(f), want, "{f:e}");
        }
    }

    #[test]
    fn integers_beyond_i64_use_u64_and_negative_i64() {
        let v = parse(r#"[18446744073709551615,-9223372036854775808,-1,0]"#);
        assert_eq!(
            canonical_json(&v).unwrap(),
            "[18446744073709551615,-9223372036854775808,-1,0]"
        );
    }

    /// Rule 3 says serde_json's own string escaping equals Python's; keep the
    /// hand-written escaper honest against it for every ASCII code point.
    #[test]
    fn escaping_matches_serde_json_for_ascii_and_separators() {
        let mut chars: Vec<char> = (0u8..=0x7f).map(char::from).collect();
        chars.extend(['\u{80}', '\u{2028}', '\u{2029}', '\u{ffff}', '\u{1f600}']);
        for c in chars {
            let s = c.to_string();
            let mut ours = String::new();
            write_string(&mut ours, &s);
            assert_eq!(
                ours,
                serde_json::to_string(&s).unwrap(),
                "U+{:04X}",
                c as u32
            );
        }
    }
}
