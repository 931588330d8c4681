//! Request ids: the client's `X-Request-Id` is kept when it is sane, otherwise one is made.

/// The header carrying the request id, upstream and back to the client.
pub const HEADER: &str = "x-request-id";

/// The longest client-chosen id kept; longer ones are replaced, not truncated, so that an id in
/// the logs is always one somebody actually sent.
const MAX_LEN: usize = 128;

/// The id for a request that arrived with `incoming` (the `X-Request-Id` value, if any).
pub fn choose(incoming: Option<&[u8]>) -> String {
    match incoming {
        Some(v) if is_acceptable(v) => String::from_utf8_lossy(v).into_owned(),
        _ => generate(),
    }
}

/// A new random id (a UUID v4).
pub fn generate() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Visible ASCII only: an id ends up in logs and headers, where control characters, spaces and
/// non-ASCII bytes would be a way to forge lines.
fn is_acceptable(v: &[u8]) -> bool {
    !v.is_empty() && v.len() <= MAX_LEN && v.iter().all(|b| (0x21..=0x7e).contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sane_incoming_id_is_kept() {
        assert_eq!(choose(Some(b"abc-123")), "abc-123");
    }

    #[test]
    fn missing_empty_long_or_unprintable_ids_are_replaced() {
        for bad in [
            None,
            Some(&b""[..]),
            Some(&[b'a'; 129][..]),
            Some(&b"a b"[..]),
            Some(&b"a\nb"[..]),
        ] {
            let id = choose(bad);
            assert_eq!(id.len(), 36, "{bad:?} gave {id}");
            assert!(uuid::Uuid::parse_str(&id).is_ok());
        }
    }
}
