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

    /// The request as sent to `addr`: head and body, with `Connection: close` when `close`.
    fn bytes(&self, addr: SocketAddr, close: bool) -> String {
        let body = self.body.as_deref().unwrap_or("");
        let mut out = format!("{} {} HTTP/1.1\r\nHost: {addr}\r\n", self.method, self.path);
        if close {
            out.push_str("Connection: close\r\n");
        }
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
        for (k, v) in &self.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.push_str(body);
        out
    }

    /// Sends the request on a new connection (closed after), within `limit`.
    pub fn send(&self, addr: SocketAddr, limit: Duration) -> Result<Answer, String> {
        let what = format!("{} http://{addr}{}", self.method, self.path);
        let mut s = TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("{what}: {e}"))?;
        s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(limit))
            .map_err(|e| e.to_string())?;
        s.write_all(self.bytes(addr, true).as_bytes())
            .map_err(|e| format!("{what}: {e}"))?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)
            .map_err(|e| format!("{what}: {e}"))?;
        parse(&raw).ok_or_else(|| format!("{what}: not an HTTP answer"))
    }
}

/// One kept-alive connection for requests sent one after the other (the instruction count's
/// client: the same bytes every time, no connection set-up per request).
pub struct Conn {
    addr: SocketAddr,
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: SocketAddr, limit: Duration) -> Result<Conn, String> {
        let stream =
            TcpStream::connect_timeout(&addr, limit).map_err(|e| format!("{addr}: {e}"))?;
        stream
            .set_read_timeout(Some(limit))
            .and_then(|_| stream.set_write_timeout(Some(limit)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            addr,
            stream,
            buf: Vec::new(),
        })
    }

    /// Sends `req` and reads its answer (a `Content-Length` or chunked body).
    pub fn send(&mut self, req: &Request) -> Result<Answer, String> {
        let what = format!("{} http://{}{}", req.method, self.addr, req.path);
        self.stream
            .write_all(req.bytes(self.addr, false).as_bytes())
            .map_err(|e| format!("{what}: {e}"))?;
        loop {
            if let Some((answer, used)) = complete(&self.buf) {
                self.buf.drain(..used);
                return Ok(answer);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|e| format!("{what}: {e}"))?;
            if n == 0 {
                return Err(format!("{what}: the connection closed mid-answer"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A whole answer at the start of `raw`, and how many bytes it took; `None` while incomplete.
fn complete(raw: &[u8]) -> Option<(Answer, usize)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&raw[..end]).ok()?.to_ascii_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    let len = if header("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
        chunked_len(&raw[end..])?
    } else {
        // Kept alive, an answer without either has no body (204, 304).
        header("content-length:").map_or(Some(0), |v| v.parse().ok())?
    };
    if raw.len() < end + len {
        return None;
    }
    let answer = parse(&raw[..end + len])?;
    Some((answer, end + len))
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

/// The length of a whole chunked body at the start of `raw`, terminator included.
fn chunked_len(raw: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line = raw[at..].windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&raw[at..at + line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        at += line + 2;
        if size == 0 {
            // No trailers: the empty line ends the body.
            return (raw.len() >= at + 2).then_some(at + 2);
        }
        at += size + 2;
        if raw.len() < at {
            return None;
        }
    }
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

    #[test]
    fn kept_alive_answers_end_where_their_length_says() {
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
        let (a, used) = complete(two).unwrap();
        assert_eq!((a.status, a.body.as_str()), (200, "{}"));
        let (b, rest) = complete(&two[used..]).unwrap();
        assert_eq!((b.status, rest), (201, two.len() - used));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(complete(chunked).unwrap().1, chunked.len());
        assert!(complete(&chunked[..chunked.len() - 1]).is_none());
        assert!(complete(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").is_none());
    }
}
