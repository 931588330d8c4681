//! What the first bytes of a request say, before any parser sees them: an HTTP/1 request line
//! on its way, a TLS handshake sent to a plain-HTTP listener, or bytes that are no HTTP at all.
//!
//! A request line opens with its method, a token (RFC 9110 §5.6.2), then a space. Anything else
//! in those first bytes can never become a request, however long the client goes on: it is
//! answered 400 at once instead of after `client_header_timeout`.

/// The HTTP/2 connection preface (RFC 9113 §3.4), which tells an h2c client from an HTTP/1 one.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How the bytes read so far open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Too few bytes to tell (none yet, empty lines, or a method not yet followed by its space).
    Pending,
    /// A method and its space: a request line, as far as these bytes go.
    Request,
    /// A TLS record carrying a handshake (RFC 8446 §5.1: content type 22, version 3.x): a client
    /// speaking HTTPS to a plain-HTTP listener.
    Tls,
    /// Bytes no request line starts with.
    NotHttp,
}

/// Reads the opening of `bytes`, the start of what a connection sent for one request.
pub fn opening(bytes: &[u8]) -> Opening {
    // RFC 9112 §2.2: empty lines before a request line are ignored (httparse skips them too).
    let Some(start) = bytes.iter().position(|b| !matches!(b, b'\r' | b'\n')) else {
        return Opening::Pending;
    };
    let rest = &bytes[start..];
    if rest[0] == 0x16 && rest.get(1).is_none_or(|b| *b == 0x03) {
        return Opening::Tls;
    }
    for (i, b) in rest.iter().enumerate() {
        match b {
            b' ' if i > 0 => return Opening::Request,
            b if is_tchar(*b) => {}
            _ => return Opening::NotHttp,
        }
    }
    Opening::Pending
}

/// RFC 9110 §5.6.2: `tchar`, what a method is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_opens_with_a_method_and_a_space() {
        assert_eq!(opening(b""), Opening::Pending);
        assert_eq!(opening(b"\r\n"), Opening::Pending);
        assert_eq!(opening(b"GE"), Opening::Pending);
        assert_eq!(opening(b"GET "), Opening::Request);
        assert_eq!(opening(b"\r\nPOST /x HTTP/1.1\r\n"), Opening::Request);
        assert_eq!(opening(b"M-SEARCH * HTTP/1.1"), Opening::Request);
        assert_eq!(opening(H2_PREFACE), Opening::Request);
    }

    #[test]
    fn a_tls_hello_and_binary_bytes_are_not_http() {
        assert_eq!(opening(&[0x16]), Opening::Tls);
        assert_eq!(opening(&[0x16, 0x03, 0x01, 0x02, 0x00]), Opening::Tls);
        assert_eq!(opening(&[0x16, 0x01]), Opening::NotHttp);
        assert_eq!(opening(&[0x00, 0x01, 0xff]), Opening::NotHttp);
        assert_eq!(opening(b"GET\x00/"), Opening::NotHttp);
        assert_eq!(opening(b" GET /"), Opening::NotHttp);
        assert_eq!(opening(b"G\xc3\xa9T /"), Opening::NotHttp);
    }
}
