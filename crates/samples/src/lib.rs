//! Sample agents: small real servers for `interlingua demo` and the tests. Each is an
//! asynchronous job state machine that takes a configurable time, can ask for input once, and can
//! be told to fail (input `mode`: `"ok"`, `"input"` or `"fail"`).
//!
//! A job's state is computed from the clock when it is read, so the agents need no background
//! work and behave the same however often they are polled. The clock is [`Options::clock`]:
//! the real one, or a [`Clock::manual`] that a test moves on when it wants a job to move on.
//!
//! | module | dialect (docs/dialects.md) | how a job runs |
//! |---|---|---|
//! | [`echo`] | passthrough | answers what it received |
//! | [`mip003`] | MIP-003 | async job, polled |
//! | [`nevermined`] | Nevermined tasks and steps | async task, polled |
//! | [`a2a`] | A2A 1.0 and 0.3, JSON-RPC | blocking or async task; SSE stream |
//! | [`lmos`] | LMOS ADF over the WoT HTTP binding | synchronous action |
//! | [`mae`] | MultiAgentEval `/execute_task` | one action object per turn |
//! | [`nearai`] | NEAR AI Hub threads and runs | async run, polled; SSE stream |
//! | [`openai`] | OpenAI chat completions | synchronous; SSE chunks |
//!
//! Agents whose input is only text learn their mode from the text itself: it contains
//! `mode:input` or `mode:fail` (see [`Mode::from_text`]).

pub mod a2a;
mod clock;
pub mod echo;
pub mod lmos;
pub mod mae;
pub mod mip003;
pub mod nearai;
pub mod nevermined;
pub mod openai;
#[cfg(test)]
mod testing;

pub use clock::Clock;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue, CACHE_CONTROL, CONTENT_TYPE, HOST};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How a sample agent behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long a job takes from start to result (input waits not counted).
    pub work: Duration,
    /// The time jobs go by.
    pub clock: Clock,
    /// How a job in mode `input` asks for its input (the agents whose dialect can name fields:
    /// [`mip003`], [`nevermined`]).
    pub ask: Ask,
}

/// How an agent asks for input.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ask {
    /// In a named field, `more`, with an input schema saying so.
    #[default]
    Fields,
    /// In words: a question and no input schema; the answer is the reply's text (MIP-003
    /// `input_data.text`, Nevermined `input_query`).
    Words,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            work: Duration::from_secs(3),
            clock: Clock::default(),
            ask: Ask::default(),
        }
    }
}

impl Options {
    /// Jobs taking `work` by the real clock.
    pub fn work(work: Duration) -> Options {
        Options {
            work,
            ..Options::default()
        }
    }

    /// These options, with input asked for in words ([`Ask::Words`]).
    pub fn asking_in_words(self) -> Options {
        Options {
            ask: Ask::Words,
            ..self
        }
    }

    /// How often a waiting agent looks at a job again: short, so that blocking answers and event
    /// streams see each state change promptly.
    fn poll_step(&self) -> Duration {
        (self.work / 20).clamp(Duration::from_millis(5), Duration::from_millis(50))
    }

    /// The longest a blocking answer or an event stream waits for a job to settle, by
    /// [`Options::clock`].
    fn patience(&self) -> Duration {
        self.work * 4
    }
}

/// The question of an agent that asks for input in words ([`Ask::Words`]).
pub const QUESTION: &str = "What should be added?";

/// What a job is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ok,
    Input,
    Fail,
}

impl Mode {
    pub fn from_value(v: Option<&Value>) -> Mode {
        match v.and_then(Value::as_str) {
            Some("input") => Mode::Input,
            Some("fail") => Mode::Fail,
            _ => Mode::Ok,
        }
    }

    /// The mode a structured `mode` field asks for, else the one its text asks for.
    pub fn from_value_or_text(v: Option<&Value>, text: &str) -> Mode {
        match v {
            Some(_) => Mode::from_value(v),
            None => Mode::from_text(text),
        }
    }

    /// The mode a free text asks for: `Fail` if it contains `mode:fail`, else `Input` if it
    /// contains `mode:input`, else `Ok`.
    pub fn from_text(text: &str) -> Mode {
        if text.contains("mode:fail") {
            Mode::Fail
        } else if text.contains("mode:input") {
            Mode::Input
        } else {
            Mode::Ok
        }
    }
}

/// The string at `key` of a JSON object; `None` when it is absent or not a string.
fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A request as the agents see it.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    /// `None`: no body; `Some(Err)`: a body that is not JSON.
    pub body: Option<Result<Value, String>>,
}

impl Call {
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A request header as text; `None` when absent or not visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The server's own address as the client named it (`http://` + the `Host` header), for
    /// self-references in descriptions; `http://localhost` without a `Host`.
    pub fn base_url(&self) -> String {
        format!(
            "http://{}",
            self.header(HOST.as_str()).unwrap_or("localhost")
        )
    }
}

/// What a handler answers. A plain `(StatusCode, Value)` converts into [`Reply::Json`].
pub enum Reply {
    /// The value as `application/json`.
    Json(StatusCode, Value),
    /// The text as `text/plain; charset=utf-8` (an empty text is an empty body).
    Text(StatusCode, String),
    /// `200 text/event-stream`: each string received becomes one event (`data: ` before each of
    /// its lines, then a blank line), sent as it arrives. The stream ends when every sender is
    /// dropped; a sender sees the client leave as a failed `send`.
    Sse(mpsc::Receiver<String>),
}

impl Reply {
    /// An event stream fed over time: send events on the returned sender, drop it to end.
    pub fn sse_channel() -> (mpsc::Sender<String>, Reply) {
        let (tx, rx) = mpsc::channel(16);
        (tx, Reply::Sse(rx))
    }

    /// An event stream that follows a job by polling it every [`Options::poll_step`] of real
    /// time (so that it sees a change the clock did not make, a cancel, at once): each time,
    /// `poll` answers the events to send now (each value one event, as JSON) and whether they are
    /// the last, or `None` to end at once. The stream also ends when the client leaves, and
    /// after [`Options::patience`] whatever the job does.
    fn polled<P>(o: Options, mut poll: P) -> Reply
    where
        P: FnMut() -> Option<(Vec<Value>, bool)> + Send + 'static,
    {
        let (tx, reply) = Reply::sse_channel();
        tokio::spawn(async move {
            let deadline = o.clock.now() + o.patience();
            while let Some((events, last)) = poll() {
                for e in events {
                    if tx.send(e.to_string()).await.is_err() {
                        return;
                    }
                }
                if last || o.clock.now() >= deadline {
                    return;
                }
                tokio::time::sleep(o.poll_step()).await;
            }
        });
        reply
    }
}

impl From<(StatusCode, Value)> for Reply {
    fn from((status, body): (StatusCode, Value)) -> Reply {
        Reply::Json(status, body)
    }
}

/// Serves `handler` like [`serve`], handing each call a state shared by all calls (first
/// `S::default()`) and the options.
async fn serve_with_state<S, H, F, R>(listener: TcpListener, options: Options, handler: H)
where
    S: Default + Send + Sync + 'static,
    H: Fn(Arc<S>, Options, Call) -> F + Send + Sync + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Into<Reply>,
{
    let state = Arc::new(S::default());
    serve(listener, move |call| {
        handler(state.clone(), options.clone(), call)
    })
    .await;
}

/// Serves `handler` on `listener` until the task is dropped.
pub async fn serve<H, F, R>(listener: TcpListener, handler: H)
where
    H: Fn(Call) -> F + Send + Sync + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Into<Reply>,
{
    let handler = Arc::new(handler);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let handler = handler.clone();
                async move {
                    let call = read_call(req).await;
                    Ok::<_, Infallible>(response(handler(call).await.into()))
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn read_call(req: Request<Incoming>) -> Call {
    let (parts, body) = req.into_parts();
    let bytes = Limited::new(body, 1024 * 1024)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let body = if bytes.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()))
    };
    Call {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: mapping::dialect::template::parse_query(parts.uri.query().unwrap_or("")),
        headers: parts.headers,
        body,
    }
}

fn response(reply: Reply) -> Response<BoxBody<Bytes, Infallible>> {
    let (status, content_type, body) = match reply {
        Reply::Json(status, v) => (
            status,
            "application/json",
            Full::new(Bytes::from(serde_json::to_vec(&v).unwrap_or_default())).boxed(),
        ),
        Reply::Text(status, t) => (
            status,
            "text/plain; charset=utf-8",
            Full::new(Bytes::from(t)).boxed(),
        ),
        Reply::Sse(rx) => (StatusCode::OK, "text/event-stream", Events(rx).boxed()),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if content_type == "text/event-stream" {
        resp.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    resp
}

/// A response body that frames each string from the channel as one server-sent event.
struct Events(mpsc::Receiver<String>);

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|event| {
            event.map(|data| {
                let mut framed = String::with_capacity(data.len() + 8);
                for line in data.split('\n') {
                    framed.push_str("data: ");
                    framed.push_str(line);
                    framed.push('\n');
                }
                framed.push('\n');
                Ok(Frame::data(Bytes::from(framed)))
            })
        })
    }
}
