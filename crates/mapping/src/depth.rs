//! How deep JSON nests, and how deep the store may let it.
//!
//! serde_json reads at most [`DECODABLE`] levels of arrays and objects (its recursion limit,
//! which keeps a hostile document from overflowing the stack) and writes any depth. A task
//! written deeper than that is stored but can never be read back: every read of it fails. So
//! the store measures every document before writing it ([`nesting`], on the encoded text), the
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

/// `Ok` when `doc` (JSON text about to be stored) can be decoded again;
/// [`TooDeep`] when it nests too deep for that.
pub fn readable(doc: &str) -> Result<(), TooDeep> {
    // Every write passes here. Counting brackets is one vectorised pass (1 µs for a 2 KB task,
    // against 4–6 µs for `nesting`), and a document with no more of them than the limit cannot
    // nest deeper than it.
    let brackets = doc.bytes().filter(|&b| b == b'[' || b == b'{').count();
    if brackets <= DECODABLE {
        return Ok(());
    }
    let depth = nesting(doc.as_bytes());
    if depth > DECODABLE {
        return Err(TooDeep {
            depth,
            limit: DECODABLE,
        });
    }
    Ok(())
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

    #[test]
    fn many_brackets_are_not_depth() {
        let wide = format!("[{}]", vec!["{}"; 300].join(","));
        assert_eq!(readable(&wide), Ok(()));
        assert_eq!(
            readable(&nested(DECODABLE + 1)),
            Err(TooDeep {
                depth: DECODABLE + 1,
                limit: DECODABLE
            })
        );
        assert_eq!(readable(&nested(DECODABLE)), Ok(()));
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
