//! What the sample agents' tests share: an agent on a free port, polling with a deadline, and an
//! event-stream reader. Nothing here sleeps to synchronise; every wait has a deadline.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::time::{timeout, Instant};

use super::Options;

/// A short job, so that a whole lifecycle runs in well under a second.
pub const WORK: Duration = Duration::from_millis(200);

/// How long any single wait in a test may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// The options the tests run agents with.
pub fn options() -> Options {
    Options { work: WORK }
}

/// Starts an agent on `127.0.0.1:0` and returns its base URL (`http://127.0.0.1:<port>`).
pub async fn start<S, F>(serve: S) -> String
where
    S: FnOnce(TcpListener) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener));
    format!("http://{addr}")
}

/// Calls `probe` until it returns `Some`, and returns that; panics naming `what` after the
/// deadline.
pub async fn eventually<T, P, F>(what: &str, mut probe: P) -> T
where
    P: FnMut() -> F,
    F: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a `text/event-stream` response one event at a time.
pub struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    /// Wraps a response, checking that it is an event stream.
    pub fn new(resp: reqwest::Response) -> Events {
        let ct = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
        Events {
            resp,
            buf: String::new(),
        }
    }

    /// The next event's data (its `data:` lines joined by newlines); `None` when the stream ends.
    pub async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                return Some(data.join("\n"));
            }
            let chunk = timeout(DEADLINE, self.resp.chunk())
                .await
                .expect("the next event in time")
                .unwrap();
            match chunk {
                Some(bytes) => self.buf.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => {
                    assert!(self.buf.trim().is_empty(), "trailing data {:?}", self.buf);
                    return None;
                }
            }
        }
    }

    /// The next event's data parsed as JSON; `None` when the stream ends.
    pub async fn next_json(&mut self) -> Option<Value> {
        let data = self.next().await?;
        Some(serde_json::from_str(&data).unwrap())
    }

    /// Every remaining event, as JSON, until the stream ends.
    pub async fn rest_json(mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Some(v) = self.next_json().await {
            all.push(v);
        }
        all
    }
}
