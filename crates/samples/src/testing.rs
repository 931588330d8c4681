//! What the sample agents' tests share: an agent on a free port with a client to call it,
//! polling with a deadline, and an event-stream reader. Nothing here sleeps to synchronise; every
//! wait has a deadline.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::time::{timeout, Instant};

use super::Options;

/// A short job, so that a whole lifecycle runs in well under a second.
const WORK: Duration = Duration::from_millis(200);

/// How long any single wait in a test may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(10);

/// A sample agent serving on `127.0.0.1:0` for one test, and a client to call it.
pub struct Agent {
    /// `http://127.0.0.1:<port>`
    pub base: String,
    pub http: reqwest::Client,
}

impl Agent {
    /// Starts `serve` (an agent module's `serve`) with a job time of [`WORK`].
    pub async fn start<S, F>(serve: S) -> Agent
    where
        S: FnOnce(TcpListener, Options) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        Agent::start_with(serve, Options::work(WORK)).await
    }

    /// Starts `serve` as [`Agent::start`] does, asking for input in words ([`super::Ask::Words`]).
    pub async fn start_asking_in_words<S, F>(serve: S) -> Agent
    where
        S: FnOnce(TcpListener, Options) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        Agent::start_with(serve, Options::work(WORK).asking_in_words()).await
    }

    async fn start_with<S, F>(serve: S, options: Options) -> Agent
    where
        S: FnOnce(TcpListener, Options) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, options));
        Agent {
            base,
            http: reqwest::Client::new(),
        }
    }

    /// The agent's URL for `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs `body` as JSON to `path`.
    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// POSTs `body` as JSON to `path`; the status and the JSON answer.
    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        status_and_json(self.post(path, body).await).await
    }

    /// GETs `path`; the status and the JSON answer.
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        status_and_json(self.http.get(self.url(path)).send().await.unwrap()).await
    }
}

async fn status_and_json(resp: reqwest::Response) -> (u16, Value) {
    (resp.status().as_u16(), resp.json().await.unwrap())
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
