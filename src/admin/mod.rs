//! The admin listener. Open: `GET /healthz` (the process is up), `GET /readyz` (config loaded,
//! every upstream resolvable, the store answering, Redis answering when rate limits are shared
//! through it), `GET /metrics` (Prometheus). Behind the admin token (`Authorization: Bearer …`,
//! the value of `admin.token_env`): the credits API
//! (`POST /credits/grant`, `POST /credits/revoke`, `GET /credits/balance`, `GET /credits/history`,
//! `GET /credits/verify`: the ledger's invariants, see [`crate::credits::verify`]),
//! `GET /tasks/{id}` (with its purchases and costs), `GET /tasks/{id}/purchases`,
//! `GET /tasks/{id}/sales` (what its client paid on a rail: x402, a Masumi purchase),
//! `GET /sales` (the Masumi sales, `?open=true&limit=`), `GET /tasks/{id}/costs` (the cost
//! ledger: what agents were paid for it), and the config:
//! `POST /config/reload` (see [`crate::reload`]) and `GET /config`. And the operator's console,
//! `/console` ([`console`]), behind a login with the same token. Keep the listener off public
//! networks.

pub mod console;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use http::{Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::OnRedisError;
use crate::reload::{Outcome, Reloader, Trigger};
use crate::setup::Source;
use crate::state::State;
use console::session::constant_time_eq;
use mapping::dialect::template::parse_query;
use store::Account;
use store::StoreError;

/// How long `/readyz` waits for the store.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a part of the instance lets it take traffic.
enum Readiness {
    Ready,
    /// Ready, with less than it was configured for.
    Degraded,
    /// Not ready, and why.
    NotReady(String),
}

/// The largest admin request body.
const MAX_BODY: usize = 64 * 1024;

/// The admin application.
pub struct Admin {
    state: Arc<State>,
    reloader: Arc<Reloader>,
    console: console::Console,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Movement {
    plan: String,
    subject: String,
    amount: u64,
    note: Option<String>,
}

impl Admin {
    pub fn new(state: Arc<State>, reloader: Arc<Reloader>) -> Admin {
        Admin {
            console: console::Console::new(state.clone(), reloader.clone()),
            state,
            reloader,
        }
    }

    /// `POST /config/reload`: the reload's report; 200 when applied or unchanged, 422 when the
    /// files have problems, 409 when they change what takes a restart.
    async fn reload(&self) -> Response<Vec<u8>> {
        let report = self.reloader.reload(Trigger::Admin).await;
        let status = match report.result {
            Outcome::Ok | Outcome::Unchanged => StatusCode::OK,
            Outcome::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
            Outcome::Refused => StatusCode::CONFLICT,
        };
        json_response(status, &serde_json::to_value(&report).unwrap_or_default())
    }

    /// `GET /config`: which config serves, since when, and how the last reload went.
    fn config(&self) -> Response<Vec<u8>> {
        let live = self.state.live();
        let source = match self.reloader.source() {
            Source::File(path) => json!({"file": path.display().to_string()}),
            Source::Text { origin, .. } => json!({"text": origin}),
        };
        let routes: Vec<&str> = live.config.routes.iter().map(|r| r.name.as_str()).collect();
        json_response(
            StatusCode::OK,
            &json!({
                "generation": live.generation,
                "origin": live.config.origin,
                "source": source,
                "loaded_at": self.reloader.loaded_at(),
                "routes": routes,
                "last_reload": self.reloader.last(),
            }),
        )
    }

    /// Ready when every upstream resolves, the store answers and (with `on_redis_error = "deny"`)
    /// Redis does; the body names the store's backend, Redis's state, and what is wrong.
    async fn readyz(&self) -> Response<Vec<u8>> {
        let live = self.state.live();
        let mut problems = live.upstreams.readiness_problems();
        let store = self.store_readiness().await;
        if let Err(e) = &store {
            problems.push(format!("store: {e}"));
        }
        let store = json!({
            "backend": self.state.engine.store.backend(),
            "status": if store.is_ok() { "ok" } else { "unreachable" },
        });
        let redis = self.redis_readiness().await;
        let degraded = match &redis {
            Some((_, Readiness::Degraded)) => true,
            Some((_, Readiness::NotReady(problem))) => {
                problems.push(problem.clone());
                false
            }
            Some((_, Readiness::Ready)) | None => false,
        };
        let mut body = if problems.is_empty() {
            let status = if degraded { "degraded" } else { "ready" };
            json!({"status": status, "config": live.config.origin})
        } else {
            json!({"status": "not_ready", "problems": problems})
        };
        body["store"] = store;
        if let Some((report, _)) = redis {
            body["redis"] = report;
        }
        let status = if problems.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        json_response(status, &body)
    }

    /// Redis's part of `/readyz`, when rate limits are shared through it: asked with a `PING`
    /// now. Unreachable with `on_redis_error = "local"` leaves the instance ready but degraded
    /// (its limits are per instance); with `"deny"` it is not ready (it refuses rate-limited
    /// requests).
    async fn redis_readiness(&self) -> Option<(Value, Readiness)> {
        let shared = self.state.shared_limits.as_ref()?;
        let mode = shared.mode().as_str();
        Some(match shared.ping().await {
            Ok(()) => (
                json!({"status": "ok", "url": shared.display(), "on_redis_error": mode}),
                Readiness::Ready,
            ),
            Err(e) => {
                let report = json!({
                    "status": "unreachable",
                    "url": shared.display(),
                    "on_redis_error": mode,
                    "error": e,
                });
                match shared.mode() {
                    OnRedisError::Local => (report, Readiness::Degraded),
                    OnRedisError::Deny => (
                        report,
                        Readiness::NotReady(format!(
                            "Redis {} is unreachable and limits.on_redis_error is \"deny\": rate-limited requests are refused",
                            shared.display()
                        )),
                    ),
                }
            }
        })
    }

    /// Whether the store answers within a load balancer's patience.
    async fn store_readiness(&self) -> Result<(), String> {
        match tokio::time::timeout(READY_WITHIN, self.state.engine.store.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(READY_WITHIN)
            )),
        }
    }

    /// `None` when the request carries the admin token; otherwise the answer to give.
    fn refusal(&self, session: &ServerSession) -> Option<Response<Vec<u8>>> {
        let live = self.state.live();
        let Some(token) = &live.config.admin.token else {
            return Some(error(
                StatusCode::FORBIDDEN,
                "admin_api_disabled",
                "the credits and task API is off: set admin.token_env to the variable holding an admin token",
            ));
        };
        let given = session
            .req_header()
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .unwrap_or("");
        if constant_time_eq(given.as_bytes(), token.as_bytes()) {
            None
        } else {
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the admin token is missing or wrong",
            );
            if let Ok(v) = crate::auth::challenge("interlingua-admin", &[]).parse() {
                r.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
            }
            Some(r)
        }
    }

    async fn protected(
        &self,
        session: &mut ServerSession,
        method: &Method,
        path: &str,
    ) -> Response<Vec<u8>> {
        if let Some(r) = self.refusal(session) {
            return r;
        }
        let query = parse_query(session.req_header().uri.query().unwrap_or(""));
        let q = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let store = &self.state.engine.store;
        match (method, path) {
            (&Method::POST, "/config/reload") => self.reload().await,
            (&Method::GET, "/config") => self.config(),
            (_, "/config/reload") | (_, "/config") => error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "GET /config reads the live config; POST /config/reload reloads it",
            ),
            (&Method::POST, "/credits/grant") | (&Method::POST, "/credits/revoke") => {
                let m: Movement = match read_json(session).await {
                    Ok(m) => m,
                    Err(r) => return *r,
                };
                let sign = if path.ends_with("revoke") { -1 } else { 1 };
                let amount = i64::try_from(m.amount).unwrap_or(i64::MAX) * sign;
                let account = Account::new(&m.plan, &m.subject);
                match store.grant(&account, amount, m.note.as_deref()).await {
                    Ok(b) => balance_response(&b),
                    Err(StoreError::Insufficient { available, .. }) => error(
                        StatusCode::CONFLICT,
                        "insufficient_credits",
                        &format!("only {available} credits are available to revoke"),
                    ),
                    Err(e) => store_error(&e),
                }
            }
            (&Method::GET, "/credits/verify") => {
                let rules = crate::credits::verify::rules(&self.state.live().config);
                let now = chrono::Utc::now();
                match crate::credits::verify::verify(store.as_ref(), &rules, now).await {
                    Ok(report) => json_response(
                        StatusCode::OK,
                        &serde_json::to_value(&report).unwrap_or_default(),
                    ),
                    Err(e) => store_error(&e),
                }
            }
            (&Method::GET, "/credits/balance") | (&Method::GET, "/credits/history") => {
                let (Some(plan), Some(subject)) = (q("plan"), q("subject")) else {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        "give ?plan=…&subject=…",
                    );
                };
                let account = Account::new(&plan, &subject);
                if path.ends_with("balance") {
                    match store.balance(&account).await {
                        Ok(b) => balance_response(&b),
                        Err(e) => store_error(&e),
                    }
                } else {
                    let limit = q("limit").and_then(|l| l.parse().ok()).unwrap_or(100);
                    match store.history(&account, limit).await {
                        Ok(rows) => json_response(
                            StatusCode::OK,
                            &json!({"plan": plan, "subject": subject, "rows": rows}),
                        ),
                        Err(e) => store_error(&e),
                    }
                }
            }
            (&Method::GET, p) if p.starts_with("/tasks/") && p.ends_with("/purchases") => {
                let id = &p["/tasks/".len()..p.len() - "/purchases".len()];
                let (task, purchases) = tokio::join!(store.get(id), store.purchases(id));
                task_records(id, "purchases", task, purchases)
            }
            // What the task's client paid on a rail: x402 sales (state, amounts, transaction)
            // and a Masumi sale (its payment request, state, times, result hash), each with
            // its `rail`.
            (&Method::GET, p) if p.starts_with("/tasks/") && p.ends_with("/sales") => {
                let id = &p["/tasks/".len()..p.len() - "/sales".len()];
                let (task, sales, escrow) =
                    tokio::join!(store.get(id), store.sales(id), store.escrow_sale(id));
                let all = sales.and_then(|sales| {
                    let mut all: Vec<Value> = sales.iter().map(|s| json!(s)).collect();
                    all.extend(escrow?.as_ref().map(escrow_view));
                    Ok(all)
                });
                task_records(id, "sales", task, all)
            }
            // The Masumi sales, newest first: `open=true` for those the chain has not decided.
            (&Method::GET, "/sales") => {
                let open = q("open").is_some_and(|v| v == "true" || v == "1");
                let limit = q("limit")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(100)
                    .min(1000);
                match store.escrow_sales(open, limit).await {
                    Ok(sales) => json_response(
                        StatusCode::OK,
                        &json!({"sales": sales.iter().map(escrow_view).collect::<Vec<_>>()}),
                    ),
                    Err(e) => store_error(&e),
                }
            }
            (&Method::GET, p) if p.starts_with("/tasks/") && p.ends_with("/costs") => {
                let id = &p["/tasks/".len()..p.len() - "/costs".len()];
                let (task, costs) = tokio::join!(store.get(id), store.costs(id));
                task_records(id, "costs", task, costs)
            }
            (&Method::GET, p) if p.starts_with("/tasks/") => {
                let id = &p["/tasks/".len()..];
                let (task, purchases, costs) =
                    tokio::join!(store.get(id), store.purchases(id), store.costs(id));
                match (task, purchases, costs) {
                    // What was paid for the task beside it: purchases on the agent's own rail,
                    // and the cost ledger's rows (agents paid per call).
                    (Ok(Some(s)), Ok(purchases), Ok(costs)) => json_response(
                        StatusCode::OK,
                        &json!({"task": s.task, "version": s.version, "purchases": purchases,
                                "costs": costs}),
                    ),
                    (Err(e), _, _) | (Ok(Some(_)), Err(e), _) | (Ok(Some(_)), _, Err(e)) => {
                        store_error(&e)
                    }
                    (Ok(None), _, _) => task_not_found(id),
                }
            }
            _ => not_found(path),
        }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        let path = req.uri.path().to_string();
        let method = req.method.clone();
        match (&method, path.as_str()) {
            (&Method::GET, "/healthz") => json_response(StatusCode::OK, &json!({"status": "ok"})),
            (&Method::GET, "/readyz") => self.readyz().await,
            (&Method::GET, "/metrics") => {
                if let Some(pool) = self.state.engine.store.pool() {
                    self.state.metrics.store_pool(pool);
                }
                let body = self.state.metrics.render().into_bytes();
                response(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    body,
                )
            }
            (_, p) if p == "/console" || p.starts_with("/console/") => {
                self.console.serve(session, &method, &path).await
            }
            (_, p)
                if p.starts_with("/credits/")
                    || p.starts_with("/tasks/")
                    || p == "/sales"
                    || p == "/config"
                    || p == "/config/reload" =>
            {
                self.protected(session, &method, &path).await
            }
            (&Method::GET, _) => not_found(&path),
            _ => error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "the admin API answers GET, and POST for credits and config reloads",
            ),
        }
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(
    session: &mut ServerSession,
) -> Result<T, Box<Response<Vec<u8>>>> {
    let body = read_body(session).await?;
    serde_json::from_slice(&body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            &format!("expected {{\"plan\", \"subject\", \"amount\", \"note\"?}}: {e}"),
        ))
    })
}

/// The request's body, at most [`MAX_BODY`] bytes.
async fn read_body(session: &mut ServerSession) -> Result<BytesMut, Box<Response<Vec<u8>>>> {
    let fail = |status, code, message: &str| Box::new(error(status, code, message));
    let mut body = BytesMut::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(fail(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "body_too_large",
                        "the body is too large",
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(fail(StatusCode::BAD_REQUEST, "bad_request", &e.to_string())),
        }
    }
}

/// `{"<key>": records}`, the records kept beside task `id`; 404 when there is no such task.
fn task_records<T: serde::Serialize>(
    id: &str,
    key: &str,
    task: Result<Option<store::Stored>, StoreError>,
    records: Result<Vec<T>, StoreError>,
) -> Response<Vec<u8>> {
    match (task, records) {
        (Ok(Some(_)), Ok(records)) => json_response(StatusCode::OK, &json!({ key: records })),
        (Ok(None), _) => task_not_found(id),
        (Err(e), _) | (_, Err(e)) => store_error(&e),
    }
}

/// A Masumi sale as the admin API shows it: its record, and its payment request's four times
/// both as the node gave them (milliseconds) and as RFC 3339.
pub fn escrow_view(sale: &store::EscrowSale) -> Value {
    let mut v = json!(sale);
    if let Some(payment) = &sale.service {
        let mut times = serde_json::Map::new();
        for key in [
            "payByTime",
            "submitResultTime",
            "unlockTime",
            "externalDisputeUnlockTime",
        ] {
            if let Some(t) = crate::payment::masumi::sell::time_of(payment, key) {
                times.insert(
                    key.to_string(),
                    json!({"ms": t.timestamp_millis(), "at": mapping::task::time::format_rfc3339_offset(t)}),
                );
            }
        }
        v["times"] = Value::Object(times);
        v["on_chain_state"] = payment.get("onChainState").cloned().unwrap_or(Value::Null);
        v["next_action"] = payment
            .pointer("/NextAction/requestedAction")
            .cloned()
            .unwrap_or(Value::Null);
    }
    v
}

fn balance_response(b: &store::Balance) -> Response<Vec<u8>> {
    let mut v: Value = serde_json::to_value(b).unwrap_or_default();
    v["available"] = json!(b.available());
    json_response(StatusCode::OK, &v)
}

fn store_error(e: &StoreError) -> Response<Vec<u8>> {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "store_error",
        &e.to_string(),
    )
}

fn not_found(path: &str) -> Response<Vec<u8>> {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no admin endpoint {path}; try /healthz, /readyz, /metrics, /credits/balance"),
    )
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

fn task_not_found(id: &str) -> Response<Vec<u8>> {
    error(
        StatusCode::NOT_FOUND,
        "task_not_found",
        &format!("task `{id}` not found"),
    )
}
