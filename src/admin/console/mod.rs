//! The operator's console on the admin listener, `/console`: the routes with their dialects and
//! their agents' health, the config and its last reload, tasks (filtered by route, status and
//! subject) with their steps, ledger rows and payments, accounts with their balances and history,
//! the credits spent per route and per day as an SVG plot drawn here, and the jobs sold on a
//! Masumi node.
//!
//! Pages are HTML rendered on the server (maud: every value escaped) and need no JavaScript.
//! One logs in with the admin token, which sets a session cookie ([`session`]); every action
//! that changes something (grant, revoke, cancel a task, log out) is a POST carrying the
//! session's CSRF token, and is refused when the browser says it comes from another site. The
//! JSON API beside it keeps taking the bearer token only: the cookie never authorises it.

mod pages;
pub mod plot;
pub mod session;

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{Method, Response, StatusCode};
use pingora::protocols::http::ServerSession;

use crate::reload::Reloader;
use crate::state::State;
use mapping::dialect::template::parse_query;
use mapping::task::Status;
use session::{Keyring, Session, COOKIE};
use store::{Account, AccountQuery, StoreError, TaskQuery};

/// The most Masumi sales the console's list shows (the newest).
const SALES_LISTED: u32 = 200;

/// Tasks and accounts shown per page.
const PAGE: u32 = 50;
/// Ledger rows shown on an account's page.
const HISTORY: u32 = 200;
/// The most days the spend plot covers.
const MAX_DAYS: i64 = 366;

/// The console: its pages and actions.
pub struct Console {
    state: Arc<State>,
    reloader: Arc<Reloader>,
    /// Login attempts per client address: the form is no oracle for guessing the token.
    logins: DefaultKeyedRateLimiter<IpAddr>,
}

/// What a console request answers.
type Answer = Response<Vec<u8>>;

impl Console {
    pub fn new(state: Arc<State>, reloader: Arc<Reloader>) -> Console {
        let five = NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN);
        Console {
            state,
            reloader,
            logins: RateLimiter::keyed(Quota::per_minute(five)),
        }
    }

    /// Answers a request under `/console`.
    pub async fn serve(&self, session: &mut ServerSession, method: &Method, path: &str) -> Answer {
        let live = self.state.live();
        if path == "/console/style.css" {
            return asset(pages::STYLE, "text/css; charset=utf-8");
        }
        let Some(token) = live.config.admin.token.clone() else {
            return page(
                StatusCode::FORBIDDEN,
                pages::message(
                    "Console off",
                    "Set admin.token_env to the variable holding an admin token: the console logs in with it.",
                ),
            );
        };
        let keys = Keyring::new(&token);
        match (method, path) {
            (&Method::GET, "/console/login") => return page(StatusCode::OK, pages::login(None)),
            (&Method::POST, "/console/login") => return self.login(session, &keys, &token).await,
            _ => {}
        }
        let now = chrono::Utc::now().timestamp_millis();
        let signed_in = session
            .req_header()
            .headers
            .get(http::header::COOKIE)
            .and_then(|v| v.to_str().ok())
            .and_then(session::from_header)
            .and_then(|c| keys.verify(c, now));
        let Some(signed_in) = signed_in else {
            return see_other("/console/login");
        };
        let csrf = keys.csrf(&signed_in);
        if method == Method::POST {
            return self.act(session, &keys, &signed_in, path).await;
        }
        if method != Method::GET {
            return page(
                StatusCode::METHOD_NOT_ALLOWED,
                pages::message(
                    "Not allowed",
                    "The console's pages are read with GET and changed with POST.",
                ),
            );
        }
        let query = parse_query(session.req_header().uri.query().unwrap_or(""));
        let q = |name: &str| {
            query
                .iter()
                .find(|(k, v)| k == name && !v.is_empty())
                .map(|(_, v)| v.clone())
        };
        let store = &self.state.engine.store;
        let result: Result<maud::Markup, Failure> = async {
            Ok(match path {
                "/console" | "/console/" => {
                    let health = pages::health(&live).await;
                    pages::overview(&live, &health, &self.reloader, &csrf)
                }
                "/console/tasks" => {
                    let filter = TaskQuery {
                        route: q("route"),
                        subject: q("subject"),
                        status: match q("status") {
                            Some(s) => Some(
                                Status::from_name(&s)
                                    .ok_or(Failure::Bad(format!("`{s}` is not a task status")))?,
                            ),
                            None => None,
                        },
                        page: q("page").and_then(|p| p.parse().ok()).unwrap_or(1).max(1),
                        page_size: PAGE,
                        ..TaskQuery::default()
                    };
                    let (tasks, total) = store.search(&filter).await?;
                    pages::tasks(&live, &filter, &tasks, total, &csrf)
                }
                p if p.starts_with("/console/tasks/") => {
                    let id = &p["/console/tasks/".len()..];
                    let Some(stored) = store.get(id).await? else {
                        return Err(Failure::NotFound(format!("no task `{id}`")));
                    };
                    let ledger = store.ledger_of_task(id).await?;
                    let purchases = store.purchases(id).await?;
                    let costs = store.costs(id).await?;
                    let sales = store.sales(id).await?;
                    let escrow = store.escrow_sale(id).await?;
                    let money = pages::Money {
                        ledger: &ledger,
                        purchases: &purchases,
                        costs: &costs,
                        sales: &sales,
                        escrow: escrow.as_ref(),
                    };
                    pages::task(&stored.task, &money, &csrf)
                }
                "/console/accounts" => {
                    let filter = AccountQuery {
                        plan: q("plan"),
                        subject_contains: q("q"),
                        limit: PAGE,
                        offset: u64::from(
                            q("page")
                                .and_then(|p| p.parse::<u32>().ok())
                                .unwrap_or(1)
                                .max(1)
                                - 1,
                        ) * u64::from(PAGE),
                    };
                    let (accounts, total) = store.accounts(&filter).await?;
                    pages::accounts(&filter, &accounts, total, &csrf)
                }
                p if p.starts_with("/console/accounts/") => {
                    let account = account_of(p, "")?;
                    let balance = store.balance(&account).await?;
                    let history = store.history(&account, HISTORY).await?;
                    let notice = q("done");
                    pages::account(&balance, &history, notice.as_deref(), &csrf)
                }
                "/console/spend" => {
                    let days = q("days")
                        .and_then(|d| d.parse::<i64>().ok())
                        .unwrap_or(30)
                        .clamp(1, MAX_DAYS);
                    let today = chrono::Utc::now().date_naive();
                    let all: Vec<String> = (0..days)
                        .rev()
                        .map(|n| (today - chrono::Days::new(n as u64)).to_string())
                        .collect();
                    let since = all.first().cloned().unwrap_or_default();
                    let rows = store.spend_by_day(&since).await?;
                    pages::spend(&rows, &all, days, &csrf)
                }
                "/console/sales" => {
                    let open = q("open").is_some_and(|v| v == "1" || v == "true");
                    let sales = store.escrow_sales(open, SALES_LISTED).await?;
                    pages::sales(&sales, open, &csrf)
                }
                _ => return Err(Failure::NotFound(format!("no console page {path}"))),
            })
        }
        .await;
        match result {
            Ok(markup) => page(StatusCode::OK, markup),
            Err(f) => f.page(),
        }
    }

    /// `POST /console/login`: the admin token from the form; a session on success.
    async fn login(&self, session: &mut ServerSession, keys: &Keyring, token: &str) -> Answer {
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        if let Some(ip) = client {
            if self.logins.check_key(&ip).is_err() {
                return page(
                    StatusCode::TOO_MANY_REQUESTS,
                    pages::login(Some("Too many attempts from this address: wait a minute.")),
                );
            }
        }
        let form = match read_form(session).await {
            Ok(f) => f,
            Err(r) => return r,
        };
        let given = field(&form, "token").unwrap_or_default();
        if !session::constant_time_eq(given.as_bytes(), token.as_bytes()) {
            return page(
                StatusCode::UNAUTHORIZED,
                pages::login(Some("That is not the admin token.")),
            );
        }
        let now = chrono::Utc::now().timestamp_millis();
        let Ok(cookie) = keys.issue(now) else {
            return page(
                StatusCode::INTERNAL_SERVER_ERROR,
                pages::message(
                    "No session",
                    "The system has no randomness to make a session with.",
                ),
            );
        };
        let mut r = see_other("/console");
        let value = format!(
            "{COOKIE}={cookie}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
            session::LIFETIME_MS / 1000
        );
        if let Ok(v) = value.parse() {
            r.headers_mut().insert(http::header::SET_COOKIE, v);
        }
        r
    }

    /// A POST from a signed-in session: checked against cross-site requests, then done.
    async fn act(
        &self,
        session: &mut ServerSession,
        keys: &Keyring,
        signed_in: &Session,
        path: &str,
    ) -> Answer {
        if let Some(refusal) = cross_site(session) {
            return refusal;
        }
        let form = match read_form(session).await {
            Ok(f) => f,
            Err(r) => return r,
        };
        if !keys.csrf_ok(signed_in, &field(&form, "csrf").unwrap_or_default()) {
            return page(
                StatusCode::FORBIDDEN,
                pages::message(
                    "Refused",
                    "The form carried no valid CSRF token: reload the page and send it again.",
                ),
            );
        }
        let store = &self.state.engine.store;
        let result: Result<Answer, Failure> = async {
            if path == "/console/logout" {
                let mut r = see_other("/console/login");
                let gone =
                    format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
                if let Ok(v) = gone.parse() {
                    r.headers_mut().insert(http::header::SET_COOKIE, v);
                }
                return Ok(r);
            }
            if let Some(id) = path
                .strip_prefix("/console/tasks/")
                .and_then(|p| p.strip_suffix("/cancel"))
            {
                let Some(stored) = store.get(id).await? else {
                    return Err(Failure::NotFound(format!("no task `{id}`")));
                };
                let live = self.state.live();
                let t = live
                    .translated
                    .iter()
                    .flatten()
                    .find(|t| t.route == stored.task.route)
                    .cloned()
                    .ok_or_else(|| {
                        Failure::Bad(format!(
                            "the task's route `{}` is no longer configured: the watcher ends it",
                            stored.task.route
                        ))
                    })?;
                self.state
                    .engine
                    .cancel_for_operator(&t, stored)
                    .await
                    .map_err(|e| Failure::Bad(e.to_string()))?;
                return Ok(see_other(&format!("/console/tasks/{id}")));
            }
            for (suffix, sign) in [("/grant", 1), ("/revoke", -1)] {
                if path.starts_with("/console/accounts/") && path.ends_with(suffix) {
                    let account = account_of(path, suffix)?;
                    let amount: i64 = field(&form, "amount")
                        .and_then(|a| a.trim().parse().ok())
                        .filter(|a: &i64| *a > 0)
                        .ok_or_else(|| {
                            Failure::Bad("the amount is a whole number above 0".into())
                        })?;
                    let note = field(&form, "note").filter(|n| !n.trim().is_empty());
                    match store.grant(&account, amount * sign, note.as_deref()).await {
                        Ok(_) => {}
                        Err(StoreError::Insufficient { available, .. }) => {
                            return Err(Failure::Bad(format!(
                                "only {available} credits are available to revoke"
                            )))
                        }
                        Err(e) => return Err(e.into()),
                    }
                    let done = if sign > 0 { "granted" } else { "revoked" };
                    return Ok(see_other(&format!(
                        "{}?done={done}+{amount}",
                        account_path(&account)
                    )));
                }
            }
            Err(Failure::NotFound(format!("no console action {path}")))
        }
        .await;
        result.unwrap_or_else(|f| f.page())
    }
}

/// Why a page could not be shown.
enum Failure {
    Bad(String),
    NotFound(String),
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
    }
}

impl Failure {
    fn page(self) -> Answer {
        match self {
            Failure::Bad(m) => page(
                StatusCode::BAD_REQUEST,
                pages::message("Cannot do that", &m),
            ),
            Failure::NotFound(m) => page(StatusCode::NOT_FOUND, pages::message("Not found", &m)),
            Failure::Store(e) => page(
                StatusCode::INTERNAL_SERVER_ERROR,
                pages::message("The store failed", &e.to_string()),
            ),
        }
    }
}

/// The account a path `/console/accounts/{plan}/{subject}{suffix}` names (each part
/// percent-encoded).
fn account_of(path: &str, suffix: &str) -> Result<Account, Failure> {
    let rest = path
        .strip_prefix("/console/accounts/")
        .and_then(|p| p.strip_suffix(suffix))
        .unwrap_or("");
    let (plan, subject) = rest
        .split_once('/')
        .ok_or_else(|| Failure::NotFound(format!("no console page {path}")))?;
    let decode = |s: &str| {
        mapping::dialect::template::percent_decode(s)
            .ok_or_else(|| Failure::Bad(format!("`{s}` is not percent-encoded text")))
    };
    Ok(Account::new(&decode(plan)?, &decode(subject)?))
}

/// The console path of an account's page.
pub fn account_path(a: &Account) -> String {
    use mapping::dialect::template::percent_encode;
    format!(
        "/console/accounts/{}/{}",
        percent_encode(&a.plan),
        percent_encode(&a.subject)
    )
}

/// A refusal when the browser says the request comes from another site (`Sec-Fetch-Site`), or
/// names an origin other than the one it was sent to (`Origin`).
fn cross_site(session: &ServerSession) -> Option<Answer> {
    let headers = &session.req_header().headers;
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
    };
    let site = header(http::HeaderName::from_static("sec-fetch-site"));
    let foreign_site = site.is_some_and(|s| s != "same-origin" && s != "none");
    let host = header(http::header::HOST);
    let foreign_origin = match (header(http::header::ORIGIN), host) {
        (Some("null"), _) => true,
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_none_or(|(_, authority)| authority != host),
        _ => false,
    };
    (foreign_site || foreign_origin).then(|| {
        page(
            StatusCode::FORBIDDEN,
            pages::message(
                "Refused",
                "The console takes forms only from its own pages.",
            ),
        )
    })
}

async fn read_form(session: &mut ServerSession) -> Result<Vec<(String, String)>, Answer> {
    let body = super::read_body(session).await.map_err(|r| *r)?;
    let text = std::str::from_utf8(&body).map_err(|_| {
        page(
            StatusCode::BAD_REQUEST,
            pages::message("Bad form", "The form is not UTF-8 text."),
        )
    })?;
    Ok(parse_query(text))
}

fn field(form: &[(String, String)], name: &str) -> Option<String> {
    form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn page(status: StatusCode, markup: maud::Markup) -> Answer {
    let mut r = super::response(
        status,
        "text/html; charset=utf-8",
        markup.into_string().into_bytes(),
    );
    let headers = r.headers_mut();
    // Pages show balances and tasks: not to be kept, framed or guessed at.
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    headers.insert(
        http::header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    r
}

fn asset(body: &'static str, content_type: &str) -> Answer {
    let mut r = super::response(StatusCode::OK, content_type, body.as_bytes().to_vec());
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("public, max-age=3600"),
    );
    r
}

/// Post/redirect/get: a form's answer sends the browser to a page.
fn see_other(to: &str) -> Answer {
    let mut r = super::response(
        StatusCode::SEE_OTHER,
        "text/plain; charset=utf-8",
        Vec::new(),
    );
    if let Ok(v) = to.parse() {
        r.headers_mut().insert(http::header::LOCATION, v);
    }
    r
}
