//! The admin listener: `GET /healthz` (the process is up), `GET /readyz` (config loaded and every
//! upstream resolvable) and `GET /metrics` (Prometheus text format). Keep it off public networks.

use std::sync::Arc;

use async_trait::async_trait;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::json;

use crate::state::State;

/// The admin application.
pub struct Admin {
    state: Arc<State>,
}

impl Admin {
    pub fn new(state: Arc<State>) -> Admin {
        Admin { state }
    }

    fn readyz(&self) -> Response<Vec<u8>> {
        let problems = self.state.upstreams.readiness_problems();
        if problems.is_empty() {
            json_response(
                StatusCode::OK,
                &json!({"status": "ready", "config": self.state.config.origin}),
            )
        } else {
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"status": "not_ready", "problems": problems}),
            )
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        let path = req.uri.path().to_string();
        let method = req.method.clone();
        if method != Method::GET {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "the admin API only answers GET",
            );
        }
        match path.as_str() {
            "/healthz" => json_response(StatusCode::OK, &json!({"status": "ok"})),
            "/readyz" => self.readyz(),
            "/metrics" => {
                let body = self.state.metrics.render().into_bytes();
                response(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    body,
                )
            }
            _ => error(
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("no admin endpoint {path}; try /healthz, /readyz or /metrics"),
            ),
        }
    }
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Vec<u8>> {
    json_response(
        status,
        &json!({"error": {"code": code, "message": message}}),
    )
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Vec<u8>> {
    response(
        status,
        "application/json",
        serde_json::to_vec(body).unwrap_or_default(),
    )
}

fn response(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    let mut resp = Response::new(Vec::new());
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    if let Ok(v) = content_type.parse() {
        headers.insert(http::header::CONTENT_TYPE, v);
    }
    headers.insert(http::header::CONTENT_LENGTH, body.len().into());
    *resp.body_mut() = body;
    resp
}
