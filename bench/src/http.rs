//! A minimal blocking HTTP/1.1 client for the harness's own few requests (creating the task to
//! poll, checking each contender answers before it is measured). Not used for load.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One request as the load generators send it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
}

/// An answer: status and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Request {
    pub fn get(path: impl Into<String>) -> Request {
        Request {
            method: "GET",
            path: path.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn post(path: impl Into<String>, body: impl Into<String>) -> Request {
        Request {
            method: "POST",
            path: path.into(),
            headers: vec![("Content-Type".to_string(), "application/json".to_string())],
            body: Some(body.into()),
        }
    }

    pub fn bearer(mut self, token: &str) -> Request {
        self.headers
            .push(("Authorization".to_string(), format!("Bearer {token}")));
        self
    }

    /// Sends the request on a new connection (closed after), within `limit`.
    pub fn send(&self, addr: SocketAddr, limit: Duration) -> Result<Answer, String> {
        let what = format!("{} http://{addr}{}", self.method, self.path);
        let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("{what}: {e}"))?;
        s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(limit))
            .map_err(|e| e.to_string())?;
        let body = self.body.as_deref().unwrap_or("");
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.method,
            self.path,
            body.len()
        );
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())
            .and_then(|_| s.write_all(body.as_bytes()))
            .map_err(|e| format!("{what}: {e}"))?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)
            .map_err(|e| format!("{what}: {e}"))?;
        parse(&raw).ok_or_else(|| format!("{what}: not an HTTP answer"))
    }
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some(Answer { status, body })
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Waits until `addr` accepts connections, for at most `within`.
pub fn wait_listening(addr: SocketAddr, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A free loopback port (bound, then released: a process told to use it binds it right after).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_answers() {
        let a = parse(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((a.status, a.body.as_str()), (201, "{}"));
        let c = parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!(c.body, "abcde");
    }
}
