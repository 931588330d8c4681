//! The absolute URLs a config names for services besides the routes' upstreams (a JWKS, a
//! payment service): parsed once, into the parts a fetch needs.

/// Why a URL in the config cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("`{0}` is not an http:// or https:// URL")]
    Scheme(String),
    #[error("`{0}`: bad IPv6 host")]
    Ipv6(String),
    #[error("`{0}`: bad port")]
    Port(String),
    #[error("`{0}` has no host")]
    NoHost(String),
}

/// The parts of an `http://` or `https://` URL a fetch needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, at least `/`.
    pub target: String,
}

impl Url {
    /// Parses an absolute `http://` or `https://` URL; anything else is a [`UrlError`].
    pub fn parse(text: &str) -> Result<Url, UrlError> {
        let (tls, rest) = if let Some(r) = text.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = text.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(UrlError::Scheme(text.to_string()));
        };
        let (authority, target) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| UrlError::Ipv6(text.to_string()))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| UrlError::Port(text.to_string()))?,
                None => default_port,
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| UrlError::Port(text.to_string()))?,
                ),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(UrlError::NoHost(text.to_string()));
        }
        Ok(Url {
            tls,
            host,
            port,
            target,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Url;

    #[test]
    fn urls() {
        assert_eq!(
            Url::parse("https://keys.example.com/.well-known/jwks.json"),
            Ok(Url {
                tls: true,
                host: "keys.example.com".into(),
                port: 443,
                target: "/.well-known/jwks.json".into()
            })
        );
        assert_eq!(
            Url::parse("http://127.0.0.1:8080").map(|u| (u.port, u.target)),
            Ok((8080, "/".into()))
        );
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://:80/").is_err());
    }
}
