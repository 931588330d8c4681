//! Sample agents: small real servers for `interlingua demo` and the tests. Each is an
//! asynchronous job state machine that takes a configurable time, can ask for input once, and can
//! be told to fail (input `mode`: `"ok"`, `"input"` or `"fail"`).
//!
//! A job's state is computed from the clock when it is read, so the agents need no background
//! work and behave the same however often they are polled.

pub mod echo;
pub mod mip003;
pub mod nevermined;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

/// How a sample agent behaves.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// How long a job takes from start to result (input waits not counted).
    pub work: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            work: Duration::from_secs(3),
        }
    }
}

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
}

/// A request as the agents see it.
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
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
}

/// Serves `handler` on `listener` until the task is dropped.
pub async fn serve<H, F>(listener: TcpListener, handler: H)
where
    H: Fn(Call) -> F + Send + Sync + 'static,
    F: Future<Output = (StatusCode, Value)> + Send + 'static,
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
                    let (status, body) = handler(call).await;
                    Ok::<_, Infallible>(json_response(status, &body))
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
        query: crate::dialect::template::parse_query(parts.uri.query().unwrap_or("")),
        body,
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}
