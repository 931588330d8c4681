//! Request paths made plain before routing: dot-segments removed (RFC 3986 §5.2.4), also when
//! their dots are percent-encoded (`%2e`, RFC 3986 §2.3: an encoded unreserved character is
//! the character), and empty segments (`//`) collapsed.
//!
//! Routes match paths segment by segment, but an agent behind one may resolve `..` itself:
//! `/pub/../admin/keys` would match a public route on `/pub` and be served as `/admin/keys`.
//! The normalised path is the one routed and the one sent upstream, so both agree on which
//! resource a request names.

/// The normalised form of `path` (no query), or `None` when it is already normal.
pub fn normalize(path: &str) -> Option<String> {
    if !needs_work(path) {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let last = segments.len().saturating_sub(1);
    // A path ending in a dot-segment or a slash names a directory: it keeps its trailing slash.
    let mut trailing = false;
    for (i, segment) in segments.into_iter().enumerate() {
        trailing = false;
        match dots(segment) {
            Some(1) => trailing = true,
            Some(2) => {
                out.pop();
                trailing = true;
            }
            _ if segment.is_empty() => trailing = i == last,
            _ => out.push(segment),
        }
    }
    let mut normal = String::with_capacity(path.len());
    for segment in &out {
        normal.push('/');
        normal.push_str(segment);
    }
    if trailing || normal.is_empty() {
        normal.push('/');
    }
    (normal != path).then_some(normal)
}

/// Whether `path` may hold a dot-segment or an empty segment (a cheap test, most paths pass).
fn needs_work(path: &str) -> bool {
    let b = path.as_bytes();
    // `*` (OPTIONS) and other targets that are not paths are left alone.
    b.first() == Some(&b'/')
        && (b.windows(2).any(|w| w == b"//" || w == b"/.")
            || b.windows(3).any(|w| w.eq_ignore_ascii_case(b"/%2")))
}

/// How many dots a segment is made of, when it is `.` or `..` (each dot plain or `%2e`).
fn dots(segment: &str) -> Option<usize> {
    let mut rest = segment.as_bytes();
    let mut n = 0;
    while !rest.is_empty() && n < 3 {
        if rest[0] == b'.' {
            rest = &rest[1..];
        } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"%2e") {
            rest = &rest[3..];
        } else {
            return None;
        }
        n += 1;
    }
    (rest.is_empty() && (1..=2).contains(&n)).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn dot_segments_are_removed_as_rfc_3986_says() {
        let cases = [
            ("/pub/../echo/secret", "/echo/secret"),
            ("/pub/%2e%2e/echo/secret", "/echo/secret"),
            ("/pub/%2E./echo/secret", "/echo/secret"),
            ("/pub/./echo", "/pub/echo"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("//echo//secret", "/echo/secret"),
            ("/a/", "/a/"),
            ("/a//", "/a/"),
        ];
        for (path, want) in cases {
            let got = normalize(path).unwrap_or_else(|| path.to_string());
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn normal_paths_and_dots_inside_names_are_kept() {
        for path in [
            "/",
            "/a/b",
            "/a/b/",
            "/v1.2/x",
            "/a/.well-known/x",
            "/a/...",
            "/%2e%2ex",
            "*",
        ] {
            assert_eq!(normalize(path), None, "{path}");
        }
    }
}
