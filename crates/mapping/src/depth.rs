//! How deep JSON nests, and how deep the store may let it.
//!
//! serde_json reads at most [`DECODABLE`] levels of arrays and objects (its recursion limit,
//! which keeps a hostile document from overflowing the stack) and writes any depth. A task
//! written deeper than that is stored but can never be read back: every read of it fails. So
//! the store measures every document as it encodes it ([`readable_json`]), the
//! fronts refuse a body deeper than the route's `max_json_depth`, and that setting is capped
//! at [`MAX_JSON_DEPTH`], which leaves room for the levels the task document puts around what
//! a client sent.

/// A document too deep to be read back once written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the document nests {depth} levels deep; at most {limit} can be read back")]
pub struct TooDeep {
    pub depth: usize,
    pub limit: usize,
}

/// The deepest document serde_json decodes: its limit is 128 levels, and the 128th fails.
pub const DECODABLE: usize = 127;

/// A route's `max_json_depth` when it sets none: deeper than any agent protocol's own documents
/// (an A2A message's data part sits 5 levels down), far below what the store can read.
pub const DEFAULT_JSON_DEPTH: usize = 64;

/// The largest `max_json_depth` a route may set. A client's input lands [`ENVELOPE`] levels
/// down in the task document, and a mapping may write a value a few levels deeper
/// than it read it; 100 leaves 27 levels for both under [`DECODABLE`]. Past that the store's
/// own check refuses the task (400, nothing held, nothing stored).
pub const MAX_JSON_DEPTH: usize = 100;

/// The levels the task document puts around a client's input (`steps[i].input.params`).
const ENVELOPE: usize = 4;
const _: () = assert!(DEFAULT_JSON_DEPTH <= MAX_JSON_DEPTH);
const _: () = assert!(MAX_JSON_DEPTH + ENVELOPE < DECODABLE);

/// Why a value could not be written as a document.
#[derive(Debug, thiserror::Error)]
pub enum Unwritable {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    TooDeep(#[from] TooDeep),
}

/// `value` as compact JSON text (exactly `serde_json::to_string`'s), or [`TooDeep`] when it
/// nests too deep to be decoded again. Every write to the store passes here: the depth is
/// measured while the text is written, not by a second pass over it.
pub fn readable_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, Unwritable> {
    let mut out = Vec::with_capacity(1024);
    let mut measured = Measured::default();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        &mut measured,
    ))?;
    if measured.deepest > DECODABLE {
        return Err(TooDeep {
            depth: measured.deepest,
            limit: DECODABLE,
        }
        .into());
    }
    // serde_json writes UTF-8 only; a failure here would be its bug, reported, not a panic.
    String::from_utf8(out).map_err(|e| serde_json::Error::io(std::io::Error::other(e)).into())
}

/// serde_json's compact formatter (every method left at its default), counting the arrays and
/// objects open.
#[derive(Default)]
struct Measured {
    depth: usize,
    deepest: usize,
}

impl Measured {
    fn open(&mut self) {
        self.depth += 1;
        self.deepest = self.deepest.max(self.depth);
    }

    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
}

impl serde_json::ser::Formatter for &mut Measured {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open();
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close();
        w.write_all(b"]")
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open();
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close();
        w.write_all(b"}")
    }
}

/// How deep `json` nests: the most arrays and objects open at once (`{}` is 1, `[{"a":[]}]` is
/// 3, a scalar 0). Brackets inside strings do not count. Meant for JSON text; on anything else
/// it still ends and counts the brackets it sees outside what look like strings.
pub fn nesting(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn nesting_counts_open_arrays_and_objects_not_brackets_in_strings() {
        assert_eq!(nesting(b"1"), 0);
        assert_eq!(nesting(b"{}"), 1);
        assert_eq!(nesting(br#"[{"a":[]}]"#), 3);
        assert_eq!(nesting(br#"{"a":"[[[{{","b":{"c":"\"[[["}}"#), 2);
        assert_eq!(nesting(br#"["\\",["x"]]"#), 2);
        assert_eq!(nesting(nested(125).as_bytes()), 125);
        // Not JSON: still an answer, never a panic.
        assert_eq!(nesting(b"]]]{"), 1);
    }

    fn value(levels: usize) -> serde_json::Value {
        serde_json::from_str(&nested(levels)).unwrap()
    }

    #[test]
    fn documents_are_written_as_serde_json_writes_them_and_many_brackets_are_not_depth() {
        let wide: serde_json::Value =
            serde_json::from_str(&format!("[{}]", vec!["{\"a\":[1]}"; 300].join(","))).unwrap();
        assert_eq!(
            readable_json(&wide).unwrap(),
            serde_json::to_string(&wide).unwrap()
        );
        let odd = serde_json::json!({"s": "[[{{\"\\", "n": [1.5, null, true, {"é": []}]});
        assert_eq!(
            readable_json(&odd).unwrap(),
            serde_json::to_string(&odd).unwrap()
        );
        assert_eq!(readable_json(&value(DECODABLE)).unwrap(), nested(DECODABLE));
    }

    #[test]
    fn a_document_too_deep_to_read_back_is_not_written() {
        // Deeper than serde_json reads, built without parsing.
        let mut deep = serde_json::json!([]);
        for _ in 0..DECODABLE {
            deep = serde_json::json!([deep]);
        }
        match readable_json(&deep) {
            Err(Unwritable::TooDeep(e)) => assert_eq!(
                e,
                TooDeep {
                    depth: DECODABLE + 1,
                    limit: DECODABLE
                }
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serde_json_reads_exactly_as_deep_as_decodable() {
        let ok = nested(DECODABLE);
        assert!(serde_json::from_str::<serde_json::Value>(&ok).is_ok());
        let too_deep = nested(DECODABLE + 1);
        let e = serde_json::from_str::<serde_json::Value>(&too_deep).unwrap_err();
        assert!(e.to_string().contains("recursion limit"), "{e}");
    }
}
