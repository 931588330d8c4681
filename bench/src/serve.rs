//! The server behind the harness's stand-in services (the canned upstream, the stand-in x402
//! facilitator): hyper HTTP/1.1 on one thread or a few, each request answered by a function of
//! its method, path, query and body, and a `NAME ready: ADDR` line once it listens.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// An answer, its body whole.
pub type Answer = Response<Full<Bytes>>;

/// What a stand-in answers.
pub trait Service: Send + Sync + 'static {
    /// The answer to one request (its body read whole).
    fn answer(&self, method: &Method, path: &str, query: Option<&str>, body: Bytes) -> Answer;
}

/// A JSON answer.
pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

async fn handle<S: Service>(s: Arc<S>, req: Request<Incoming>) -> Result<Answer, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Ok(json(
                StatusCode::BAD_REQUEST,
                r#"{"detail":"unreadable body"}"#,
            ))
        }
    };
    Ok(s.answer(&parts.method, parts.uri.path(), parts.uri.query(), body))
}

/// Serves `service` on `listener` until the process ends.
pub async fn serve<S: Service>(listener: TcpListener, service: Arc<S>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let s = service.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(s.clone(), req));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Runs `service` on `threads` worker threads, printing `NAME ready: ADDR` once listening.
pub fn main<S: Service>(
    name: &str,
    listen: SocketAddr,
    threads: usize,
    service: S,
) -> std::io::Result<()> {
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async {
        let listener = TcpListener::bind(listen).await?;
        println!("{name} ready: {}", listener.local_addr()?);
        serve(listener, Arc::new(service)).await;
        Ok(())
    })
}

/// An answer's body as JSON (for the stand-ins' tests).
#[cfg(test)]
pub fn body_of(r: Answer) -> serde_json::Value {
    let bytes = tokio::runtime::Builder::new_current_thread()
        .build()
        .map(|rt| rt.block_on(r.into_body().collect()))
        .expect("a runtime")
        .expect("a body")
        .to_bytes();
    serde_json::from_slice(&bytes).expect("a JSON body")
}
