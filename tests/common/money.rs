//! Paid routes: a config whose routes need a [`token`] and charge credits, and a client of the
//! admin API that grants credits and reads balances, all on the plan [`PLAN`].
//!
//! [`token`]: super::secrets::token

#![allow(dead_code)]

use serde_json::{json, Value};

use super::secrets::{auth_table, set_env, ADMIN_ENV, ADMIN_TOKEN, PLAN};
use super::wait::eventually;
use super::{client, config, Proxy};

/// A test config (see [`config`]) with the `[auth]` table that verifies a
/// [`token`](super::secrets::token) and an admin API that needs [`ADMIN_TOKEN`], then `rest`.
pub fn paid_config(rest: &str) -> String {
    set_env();
    let admin = format!("[admin]\naddress = \"127.0.0.1:0\"\ntoken_env = \"{ADMIN_ENV}\"\n");
    // `config` writes its own [admin]; ours replaces it.
    config("", &format!("{}{rest}", auth_table()))
        .replace("[admin]\naddress = \"127.0.0.1:0\"\n", &admin)
}

/// A route `name` taking `prefix` to `upstream`, `front` over `back`, that needs a token of plan
/// [`PLAN`]; each task holds 1 credit and costs 1, and the back is polled every 50 to 200 ms
/// (clients' polls coalesce within 50 ms, so that a client polling often sees short states).
/// `extra` settings are added to it.
pub fn paid_route(
    name: &str,
    prefix: &str,
    upstream: &str,
    front: &str,
    back: &str,
    extra: &str,
) -> String {
    format!(
        r#"
[[routes]]
name = "{name}"
match = {{ path_prefix = "{prefix}" }}
upstream = "{upstream}"
front = "{front}"
back = "{back}"
auth = true
plans = ["{PLAN}"]
price = {{ hold = 1, step = 1 }}
poll_interval = "50ms"
poll_max_interval = "200ms"
min_refresh = "50ms"
{extra}
"#
    )
}

/// The admin API of a proxy started on a [`paid_config`], for plan [`PLAN`].
pub struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    pub fn new(proxy: &Proxy) -> Admin {
        Admin {
            base: proxy.admin_url(""),
            http: client(),
        }
    }

    /// Grants `amount` credits to `subject`; the balance after. Asserts the grant is accepted.
    /// A console page (`path` below `/console/`), read as an operator logged in with the admin
    /// token: its status and HTML.
    pub async fn console_page(&self, path: &str) -> (u16, String) {
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client");
        let login = http
            .post(format!("{}/console/login", self.base))
            .form(&[("token", ADMIN_TOKEN)])
            .send()
            .await
            .expect("the console's login answers");
        assert_eq!(login.status(), 303, "the console's login");
        let cookie = login.headers()["set-cookie"]
            .to_str()
            .expect("a cookie")
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        let page = http
            .get(format!("{}/console/{path}", self.base))
            .header("cookie", cookie)
            .send()
            .await
            .expect("the console answers");
        let status = page.status().as_u16();
        (status, page.text().await.expect("a page"))
    }

    pub async fn grant(&self, subject: &str, amount: u64) -> Value {
        let resp = self
            .http
            .post(format!("{}/credits/grant", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"plan": PLAN, "subject": subject, "amount": amount, "note": "test"}))
            .send()
            .await
            .expect("grant");
        assert_eq!(resp.status(), 200);
        resp.json().await.expect("the balance after a grant")
    }

    /// The subject's balance: `granted`, `held`, `captured`, `available`.
    pub async fn balance(&self, subject: &str) -> Value {
        self.get(&format!("credits/balance?plan={PLAN}&subject={subject}"))
            .await
    }

    /// The subject's ledger rows, newest first.
    pub async fn history(&self, subject: &str) -> Vec<Value> {
        let v = self
            .get(&format!(
                "credits/history?plan={PLAN}&subject={subject}&limit=1000"
            ))
            .await;
        v["rows"].as_array().expect("history rows").clone()
    }

    /// The subject's balance once nothing is held any more (every task has ended and settled).
    pub async fn settled(&self, subject: &str) -> Value {
        eventually(&format!("{subject} to settle"), || async {
            let b = self.balance(subject).await;
            if b["held"] == 0 {
                Ok(b)
            } else {
                Err(b)
            }
        })
        .await
    }

    /// Asserts the subject, granted `granted` in all, was charged `captured` in all, once nothing
    /// is held any more.
    pub async fn charged(&self, subject: &str, granted: i64, captured: i64) {
        let b = self.settled(subject).await;
        assert_eq!(
            (b["granted"].as_i64(), b["captured"].as_i64()),
            (Some(granted), Some(captured)),
            "{subject}: {b}"
        );
    }

    async fn get(&self, path: &str) -> Value {
        self.http
            .get(format!("{}/{path}", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("admin request")
            .json()
            .await
            .expect("an admin answer in JSON")
    }
}

/// The subject's ledger rows, oldest first, as (kind, amount).
pub async fn ledger(admin: &Admin, subject: &str) -> Vec<(String, i64)> {
    let mut rows: Vec<(String, i64)> = admin
        .history(subject)
        .await
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().expect("a row's kind").to_string(),
                r["amount"].as_i64().expect("a row's amount"),
            )
        })
        .collect();
    rows.reverse();
    rows
}

/// `expected` in the shape [`ledger`] answers, to compare with it.
pub fn rows(expected: &[(&str, i64)]) -> Vec<(String, i64)> {
    expected.iter().map(|(k, a)| (k.to_string(), *a)).collect()
}
