//! The echo agent: answers every request with a JSON description of what it received, so that a
//! passthrough route can be seen to pass method, path, query, headers and body unchanged.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

/// The largest body the echo agent reads.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Serves the echo agent on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let service = service_fn(|req| async move { Ok::<_, Infallible>(echo(req).await) });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn echo(req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"error": {"code": "body_too_large", "message": e.to_string()}}),
            )
        }
    };
    let headers: Map<String, Value> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        })
        .collect();
    respond(
        StatusCode::OK,
        json!({
            "agent": "echo",
            "method": parts.method.as_str(),
            "path": parts.uri.path(),
            "query": parts.uri.query(),
            "headers": headers,
            "body": String::from_utf8_lossy(&body),
        }),
    )
}

fn respond(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}
