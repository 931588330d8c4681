//! The operator's console (`/console` on the admin listener), in a real headless Chromium: log in
//! with the admin token, find a task created through the proxy with its steps and ledger rows,
//! the spend plot, a grant through the form, a cancel; and the refusals (no session, no or a
//! wrong CSRF token, another site's form, too many logins), sent by a plain HTTP client.
//!
//! With `INTERLINGUA_SCREENSHOTS=1` it also writes the README's pictures to `docs/console/`.

#[path = "common/browser.rs"]
mod browser;
mod common;

use std::time::Duration;

use browser::Browser;
use common::money::{paid_config, paid_route, Admin};
use common::secrets::{token, ADMIN_TOKEN};
use common::{client, sample_agent_on, Proxy};
use samples::Clock;
use serde_json::{json, Value};

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000003";
const WORK: Duration = Duration::from_millis(300);

/// A Nevermined front on a MIP-003 sample agent, 5 held and 2 a step.
fn world(agent: std::net::SocketAddr) -> String {
    let route = paid_route("paid", "/", "mip", "nevermined", "mip003", "").replace(
        "price = { hold = 1, step = 1 }",
        "price = { hold = 5, step = 2 }",
    );
    paid_config(&format!(
        "[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\nread_timeout = \"5s\"\n{route}"
    ))
}

async fn create(proxy: &Proxy, subject: &str, query: &str) -> String {
    let resp = client()
        .post(proxy.url(&format!("/api/v1/agents/{DID}/tasks")))
        .bearer_auth(token(subject))
        .json(&json!({ "input_query": query }))
        .send()
        .await
        .unwrap();
    let (status, body) = common::status_and_json(resp).await;
    assert_eq!(status, 201, "{body}");
    // Nevermined names the task `task-<id>`; the store, and so the console, by its id.
    let id = body["task"]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id in {body}"));
    id.trim_start_matches("task-").to_string()
}

async fn task_status(proxy: &Proxy, id: &str) -> Value {
    let resp = client()
        .get(proxy.admin_url(&format!("/tasks/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (_, body) = common::status_and_json(resp).await;
    body["task"]["status"].clone()
}

/// Logs in with a plain HTTP client; the session cookie and a CSRF token of its forms.
async fn http_session(proxy: &Proxy) -> (String, String) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let resp = http
        .post(proxy.admin_url("/console/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = http
        .get(proxy.admin_url("/console/accounts"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a CSRF token in the page")
        .to_string();
    (cookie, csrf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reads_tasks_and_money_and_grants_and_cancels_in_a_real_browser() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let text = world(agent).replace("threads = 2\n", "threads = 2\nwatch_config = false\n");
    let proxy = Proxy::start_file(&text);
    let admin = Admin::new(&proxy);
    admin.grant("erin", 20).await;
    // A reload that failed, for the overview to show.
    let data = proxy.data_dir().display().to_string();
    let broken = text
        .replace("{data_dir}", &data)
        .replace("read_timeout", "read_timout");
    std::fs::write(proxy.file(), broken).unwrap();
    assert_eq!(proxy.reload().await.0, 422);
    let done = create(&proxy, "erin", "a finished job").await;
    clock.advance(WORK);
    let settled = admin.settled("erin").await;
    assert_eq!(settled["captured"], 2, "{settled}");

    let browser = Browser::start().await;
    let console = |path: &str| proxy.admin_url(path);

    // No session: the login page. A wrong token is told so; the right one opens the console.
    browser.goto(&console("/console")).await;
    browser.screenshot("login").await;
    browser
        .submit("form[action='/console/login']", &[("token", "not-it")])
        .await;
    assert_eq!(
        browser.text("#login-error").await,
        "That is not the admin token."
    );
    browser
        .submit("form[action='/console/login']", &[("token", ADMIN_TOKEN)])
        .await;
    let row = browser.text("#routes tr[data-route='paid']").await;
    assert!(row.contains("nevermined → mip003"), "{row}");
    assert!(row.contains("up"), "the agent's health: {row}");
    assert!(row.contains("hold 5, step 2"), "{row}");
    assert_eq!(browser.text("#generation").await, "1");
    assert!(browser
        .text("#last-reload")
        .await
        .starts_with("invalid at "));
    let problems = browser.text("ul.problems").await;
    assert!(
        problems.contains("upstreams[0]") && problems.contains("read_timout"),
        "{problems}"
    );
    browser.screenshot("overview").await;

    // The task, found by route and subject, with its steps and its ledger rows.
    browser
        .goto(&console("/console/tasks?route=paid&subject=erin"))
        .await;
    let listed = browser
        .text(&format!("#tasks tr[data-task='{done}']"))
        .await;
    assert!(listed.contains("completed"), "{listed}");
    browser.screenshot("tasks").await;
    browser
        .goto(&console(&format!("/console/tasks/{done}")))
        .await;
    assert_eq!(browser.text("#status").await, "completed");
    let mut kinds = Vec::new();
    for kind in ["hold", "capture", "release"] {
        let row = browser
            .text(&format!("#ledger tr[data-kind='{kind}']"))
            .await;
        kinds.push(row);
    }
    assert!(
        kinds[0].contains("5") && kinds[1].contains("2") && kinds[2].contains("3"),
        "{kinds:?}"
    );
    assert!(
        !browser.has("#cancel").await,
        "an ended task has no cancel button"
    );
    browser.screenshot("task").await;

    // The spend plot has today's bar for the route.
    browser.goto(&console("/console/spend?days=7")).await;
    let today = chrono::Utc::now().date_naive().to_string();
    let bar = browser
        .client
        .wait()
        .for_element(fantoccini::Locator::Css(&format!(
            "svg rect[data-route='paid'][data-day='{today}']"
        )))
        .await
        .expect("today's bar");
    assert_eq!(
        bar.attr("data-credits").await.unwrap().as_deref(),
        Some("2")
    );
    browser.screenshot("spend").await;

    // A grant through the account's form.
    browser.goto(&console("/console/accounts?plan=gold")).await;
    assert!(browser.text("#accounts").await.contains("erin"));
    browser.screenshot("accounts").await;
    browser.goto(&console("/console/accounts/gold/erin")).await;
    assert_eq!(browser.text("#available").await, "18");
    browser
        .submit("#grant", &[("amount", "7"), ("note", "from the console")])
        .await;
    assert_eq!(browser.text("#notice").await, "granted 7");
    assert_eq!(browser.text("#available").await, "25");
    assert_eq!(admin.balance("erin").await["available"], 25);
    assert!(browser.text("#history").await.contains("from the console"));
    browser.screenshot("account").await;

    // A running task cancelled from its page: it ends, its hold released.
    let running = create(&proxy, "erin", "a job to cancel").await;
    browser
        .goto(&console(&format!("/console/tasks/{running}")))
        .await;
    browser.submit("form[action$='/cancel']", &[]).await;
    assert_eq!(browser.text("#status").await, "cancelled");
    assert_eq!(task_status(&proxy, &running).await, "cancelled");
    let settled = admin.settled("erin").await;
    assert_eq!(
        (settled["held"].as_i64(), settled["available"].as_i64()),
        (Some(0), Some(25))
    );

    // Logging out ends the session in the browser.
    browser.submit("form.logout", &[]).await;
    browser.goto(&console("/console/tasks")).await;
    assert!(browser.has("form[action='/console/login']").await);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changing_requests_without_the_sessions_csrf_token_are_refused() {
    let clock = Clock::manual();
    let agent = sample_agent_on(samples::mip003::serve, WORK, &clock).await;
    let proxy = Proxy::start(&world(agent));
    let admin = Admin::new(&proxy);
    admin.grant("erin", 20).await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let grant = proxy.admin_url("/console/accounts/gold/erin/grant");
    let post = |cookie: Option<&str>, form: Vec<(&'static str, String)>| {
        let mut r = http.post(&grant).form(&form);
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r
    };

    // No session: sent to log in.
    let resp = post(None, vec![("amount", "5".into())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/console/login");

    let (cookie, csrf) = http_session(&proxy).await;
    let (_, other_csrf) = http_session(&proxy).await;
    assert_ne!(csrf, other_csrf);
    // The cookie alone, another session's token, or the right token from another site's form.
    let refused = [
        post(Some(&cookie), vec![("amount", "5".into())]),
        post(
            Some(&cookie),
            vec![("amount", "5".into()), ("csrf", other_csrf.clone())],
        ),
        post(
            Some(&cookie),
            vec![("amount", "5".into()), ("csrf", csrf.clone())],
        )
        .header("sec-fetch-site", "cross-site"),
        post(
            Some(&cookie),
            vec![("amount", "5".into()), ("csrf", csrf.clone())],
        )
        .header("origin", "http://evil.example"),
    ];
    for request in refused {
        let resp = request.send().await.unwrap();
        assert_eq!(resp.status(), 403);
    }
    assert_eq!(
        admin.balance("erin").await["available"],
        20,
        "nothing was granted"
    );
    // The same form with its token goes through.
    let resp = post(Some(&cookie), vec![("amount", "5".into()), ("csrf", csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(admin.balance("erin").await["available"], 25);
    // The JSON API never takes the cookie.
    let resp = http
        .get(proxy.admin_url("/credits/balance?plan=gold&subject=erin"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);

    // Five logins a minute per address; the sixth waits (two were made above).
    let login = |t: &'static str| {
        http.post(proxy.admin_url("/console/login"))
            .form(&[("token", t)])
            .send()
    };
    for _ in 0..3 {
        assert_eq!(login("wrong").await.unwrap().status(), 401);
    }
    let resp = login(ADMIN_TOKEN).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert!(resp.text().await.unwrap().contains("Too many attempts"));
}
