//! HTTP/1.1 by hand over a TCP socket: requests written byte for byte (malformed ones too),
//! answers read back whole, and waits for the other side to close. Every wait has a deadline.

#![allow(dead_code)]

use std::fmt;
use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::DEADLINE;

/// One HTTP/1.1 answer as read off the wire.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// The status line and header lines, as sent.
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self}"))
    }

    /// A header's value (the first, by case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    /// Fails the test if the answer names an address on this machine (every proxy and upstream
    /// in the tests listens on 127.0.0.1).
    pub fn assert_no_address(&self) {
        assert!(
            !self.head.contains("127.0.0.1") && !self.body_text().contains("127.0.0.1"),
            "an address in the answer: {self}"
        );
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\n{}", self.head, self.body_text())
    }
}

/// Sends `request` on a new connection and reads one answer. The request is written while the
/// answer is read (the proxy may answer before taking all of it), and the connection is held
/// open until the answer is in: a request that stops short stays short, never ended by a close.
pub async fn exchange(addr: SocketAddr, request: &[u8]) -> Answer {
    let conn = TcpStream::connect(addr).await.expect("connect");
    let (read, mut write) = conn.into_split();
    let request = request.to_vec();
    let writer = tokio::spawn(async move {
        // The proxy may stop reading and close: the rest of the request is then not wanted.
        let _ = write.write_all(&request).await;
        write
    });
    let answer = read_answer(&mut BufReader::new(read)).await;
    drop(writer);
    answer
}

/// Reads one final answer (interim ones, such as `100 Continue`, are passed over): its head,
/// then a body by `Content-Length`, chunks, or up to the close.
pub async fn read_answer<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> Answer {
    tokio::time::timeout(DEADLINE, async {
        loop {
            let answer = read_answer_now(reader).await;
            if !(100..200).contains(&answer.status) || answer.status == 101 {
                return answer;
            }
        }
    })
    .await
    .expect("an answer within the deadline")
}

async fn read_answer_now<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> Answer {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await.expect("read the head");
        assert!(n > 0, "closed before a whole head; got:\n{head}");
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
    }
    let head = head.trim_end().to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in:\n{head}"));
    let mut answer = Answer {
        status,
        head,
        body: Vec::new(),
    };
    if (100..200).contains(&answer.status) {
        return answer;
    }
    if let Some(len) = answer.header("content-length") {
        let mut body = vec![0u8; len.parse().expect("a length")];
        reader.read_exact(&mut body).await.expect("read the body");
        answer.body = body;
    } else if answer
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await.expect("a chunk size");
            let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).await.expect("a chunk");
            if size == 0 {
                break;
            }
            answer.body.extend_from_slice(&chunk[..size]);
        }
    } else if answer.status >= 200 && answer.status != 204 && answer.status != 304 {
        let _ = reader.read_to_end(&mut answer.body).await;
    }
    answer
}

/// Waits until the other side closes `conn` (end of stream or reset), failing the test after
/// [`DEADLINE`]; returns what it sent before closing.
pub async fn wait_closed<R: AsyncRead + Unpin>(conn: &mut R) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the connection closed within the deadline");
    got
}
