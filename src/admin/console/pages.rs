//! The console's pages, one function each, over one layout. Every value is escaped by maud; the
//! only markup inserted whole is the plot, built and escaped by [`super::plot`].

use std::collections::HashMap;

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{account_path, plot};
use crate::reload::Reloader;
use crate::state::Live;
use mapping::task::{Status, Task};
use store::{
    AccountQuery, AccountSummary, Balance, Cost, DaySpend, EscrowSale, LedgerRow, Purchase, Sale,
    TaskQuery,
};

/// The stylesheet, shipped in the binary.
pub const STYLE: &str = include_str!("style.css");

/// How long the overview waits for an agent to take a connection.
const PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

fn layout(title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · interlingua" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    strong { "interlingua" }
                    @if let Some(csrf) = csrf {
                        nav {
                            a href="/console" { "Routes" }
                            a href="/console/tasks" { "Tasks" }
                            a href="/console/accounts" { "Accounts" }
                            a href="/console/spend" { "Spend" }
                            a href="/console/sales" { "Sales" }
                        }
                        form method="post" action="/console/logout" class="logout" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A page that only says something.
pub fn message(title: &str, text: &str) -> Markup {
    layout(title, None, html! { p class="message" { (text) } })
}

pub fn login(error: Option<&str>) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            @if let Some(e) = error { p class="error" id="login-error" { (e) } }
            form method="post" action="/console/login" {
                label { "Admin token " input type="password" name="token" autocomplete="current-password" required; }
                button type="submit" id="login" { "Log in" }
            }
            p class="note" {
                "The admin listener speaks plain HTTP: keep it on a private network, as its API."
            }
        },
    )
}

/// Each upstream's health: resolved and taking a connection now, or why not.
pub async fn health(live: &Live) -> HashMap<String, Result<(), String>> {
    let mut probes = tokio::task::JoinSet::new();
    for u in live.upstreams.iter() {
        let u = u.clone();
        probes.spawn(async move {
            let result = match tokio::time::timeout(PROBE_WITHIN, u.probe()).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no connection within {PROBE_WITHIN:?}")),
            };
            (u.config.name.clone(), result)
        });
    }
    let mut found = HashMap::new();
    while let Some(Ok((name, result))) = probes.join_next().await {
        found.insert(name, result);
    }
    found
}

pub fn overview(
    live: &Live,
    health: &HashMap<String, Result<(), String>>,
    reloader: &Reloader,
    csrf: &str,
) -> Markup {
    let last = reloader.last();
    layout(
        "Routes",
        Some(csrf),
        html! {
            table id="routes" {
                thead { tr { th { "route" } th { "match" } th { "front → back" } th { "agent" } th { "health" } th { "access" } th { "price" } } }
                tbody {
                    @for r in &live.config.routes {
                        @let upstream = live.config.upstreams.get(r.upstream);
                        @let name = upstream.map_or("", |u| u.name.as_str());
                        tr data-route=(r.name) {
                            td { a href={ "/console/tasks?route=" (r.name) } { (r.name) } }
                            td {
                                @if let Some(h) = &r.matcher.host { (h) }
                                (r.matcher.path_prefix)
                                @if let Some(m) = &r.matcher.methods {
                                    " (" (m.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")) ")"
                                }
                            }
                            td { (r.front.name()) " → " (r.back.name()) }
                            td { (name) " " span class="muted" { (upstream.map(|u| u.authority()).unwrap_or_default()) } }
                            td {
                                @match health.get(name) {
                                    Some(Ok(())) => span class="ok" { "up" },
                                    Some(Err(why)) => span class="bad" title=(why) { "down: " (why) },
                                    None => span class="muted" { "?" },
                                }
                            }
                            td {
                                @if r.access.auth { "token" } @else { "open" }
                                @if !r.access.plans.is_empty() { " · plans " (r.access.plans.join(", ")) }
                            }
                            td {
                                @if let Some(p) = &r.price {
                                    "hold " (p.hold) ", step " (p.step)
                                } @else { span class="muted" { "free" } }
                            }
                        }
                    }
                }
            }
            h2 { "Config" }
            dl {
                dt { "loaded from" } dd { (live.config.origin) }
                dt { "generation" } dd id="generation" { (live.generation) }
                dt { "since" } dd { (reloader.loaded_at()) }
            }
            h2 { "Last reload" }
            @match &last {
                None => p class="muted" { "No reload since start-up." },
                Some(report) => {
                    p id="last-reload" {
                        span class=(if report.problems.is_empty() { "ok" } else { "bad" }) { (report.result.as_str()) }
                        " at " (report.at) ", by " (format!("{:?}", report.trigger).to_lowercase())
                    }
                    @if let Some(c) = &report.changes {
                        p { "added " (list(&c.added)) "; changed " (list(&c.changed)) "; removed " (list(&c.removed)) }
                    }
                    @if !report.problems.is_empty() {
                        ul class="problems" { @for p in &report.problems { li { code { (p) } } } }
                    }
                }
            }
        },
    )
}

fn with_query(path: &str, pairs: &[(String, String)]) -> String {
    format!("{path}?{}", mapping::dialect::template::render_query(pairs))
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

pub fn tasks(live: &Live, filter: &TaskQuery, tasks: &[Task], total: u64, csrf: &str) -> Markup {
    let pages = total.div_ceil(u64::from(filter.page_size.max(1))).max(1);
    let link = |page: u32| {
        let mut q = vec![("page".to_string(), page.to_string())];
        for (k, v) in [("route", &filter.route), ("subject", &filter.subject)] {
            if let Some(v) = v {
                q.push((k.to_string(), v.clone()));
            }
        }
        if let Some(s) = filter.status {
            q.push(("status".to_string(), s.name().to_string()));
        }
        with_query("/console/tasks", &q)
    };
    layout(
        "Tasks",
        Some(csrf),
        html! {
            form method="get" action="/console/tasks" class="filter" {
                label { "route " select name="route" {
                    option value="" { "any" }
                    @for r in &live.config.routes {
                        option value=(r.name) selected[filter.route.as_deref() == Some(r.name.as_str())] { (r.name) }
                    }
                } }
                label { "status " select name="status" {
                    option value="" { "any" }
                    @for s in Status::ALL {
                        option value=(s.name()) selected[filter.status == Some(s)] { (s.name()) }
                    }
                } }
                label { "subject " input type="text" name="subject" value=(filter.subject.clone().unwrap_or_default()); }
                button type="submit" { "Filter" }
            }
            p class="muted" { (total) " task(s); page " (filter.page) " of " (pages) }
            table id="tasks" {
                thead { tr { th { "task" } th { "route" } th { "status" } th { "subject" } th { "plan" } th { "cost" } th { "created" } th { "updated" } } }
                tbody {
                    @for t in tasks {
                        tr data-task=(t.id) {
                            td { a href={ "/console/tasks/" (t.id) } { code { (t.id) } } }
                            td { (t.route) }
                            td { span class={ "status " (t.status.name()) } { (t.status.name()) } }
                            td { (t.subject.clone().unwrap_or_default()) }
                            td { (t.plan.clone().unwrap_or_default()) }
                            td { (t.cost) }
                            td { (t.created_at.format("%Y-%m-%d %H:%M:%S")) }
                            td { (t.updated_at.format("%Y-%m-%d %H:%M:%S")) }
                        }
                    }
                }
            }
            nav class="pages" {
                @if filter.page > 1 { a href=(link(filter.page - 1)) { "← newer" } }
                @if u64::from(filter.page) < pages { a href=(link(filter.page + 1)) { "older →" } }
            }
        },
    )
}

/// What a task's page shows besides the task: its ledger rows, what was bought for it from its
/// agent (Masumi purchases, x402 payments made), and what its client paid on a rail.
pub struct Money<'a> {
    pub ledger: &'a [LedgerRow],
    pub purchases: &'a [Purchase],
    pub costs: &'a [Cost],
    pub sales: &'a [Sale],
    /// The job's sale on a Masumi node, when a buyer bought it there.
    pub escrow: Option<&'a EscrowSale>,
}

pub fn task(task: &Task, money: &Money<'_>, csrf: &str) -> Markup {
    let Money {
        ledger,
        purchases,
        costs,
        sales,
        escrow,
    } = money;
    layout(
        "Task",
        Some(csrf),
        html! {
            dl id="task" {
                dt { "id" } dd { code { (task.id) } }
                dt { "route" } dd { (task.route) }
                dt { "status" } dd id="status" { (task.status.name()) @if let Some(r) = &task.reason { " (" (r) ")" } }
                @if let Some(m) = &task.message { dt { "message" } dd { (m) } }
                dt { "subject" } dd { (task.subject.clone().unwrap_or_default()) " · " (task.plan.clone().unwrap_or_default()) }
                dt { "agent's id" } dd { code { (task.upstream_id.clone().unwrap_or_default()) } }
                dt { "created" } dd { (task.created_at.to_rfc3339()) }
                dt { "updated" } dd { (task.updated_at.to_rfc3339()) }
                dt { "cost" } dd { (task.cost) }
            }
            @if !task.status.is_terminal() {
                form method="post" action={ "/console/tasks/" (task.id) "/cancel" } {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" id="cancel" class="danger" { "Cancel the task" }
                }
            }
            h2 { "Steps" }
            table id="steps" {
                thead { tr { th { "#" } th { "step" } th { "name" } th { "status" } th { "cost" } th { "updated" } } }
                tbody {
                    @for s in &task.steps {
                        tr { td { (s.order) } td { code { (s.id) } } td { (s.name.clone().unwrap_or_default()) } td { (s.status.name()) } td { (s.cost) } td { (s.updated_at.format("%H:%M:%S%.3f")) } }
                    }
                }
            }
            h2 { "Ledger" }
            (ledger_table("ledger", ledger))
            @if !purchases.is_empty() {
                h2 { "Purchases" }
                table id="purchases" {
                    thead { tr { th { "rail" } th { "reference" } th { "state" } th { "detail" } } }
                    tbody { @for p in purchases.iter() { tr { td { (p.rail) } td { code { (p.reference) } } td { (p.state.name()) } td { (p.detail.clone().unwrap_or_default()) } } } }
                }
            }
            @if !costs.is_empty() {
                h2 { "Payments made to the agent" }
                table id="costs" {
                    thead { tr { th { "at" } th { "rail" } th { "scheme" } th { "network" } th { "amount" } th { "pay to" } th { "state" } th { "transaction" } th { "detail" } } }
                    tbody {
                        @for c in costs.iter() {
                            tr data-state=(c.state.name()) {
                                td { (c.at.format("%H:%M:%S%.3f")) }
                                td { (c.rail) }
                                td { (c.scheme.clone().unwrap_or_default()) }
                                td { (c.network.clone().unwrap_or_default()) }
                                td class="num" { (c.amount.map(|a| a.to_string()).unwrap_or_default()) }
                                td { code { (c.pay_to.clone().unwrap_or_default()) } }
                                td { (c.state.name()) }
                                td { code { (c.transaction.clone().unwrap_or_default()) } }
                                td { (c.detail.clone().unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
            @if !sales.is_empty() {
                h2 { "Payments received" }
                table id="sales" {
                    thead { tr { th { "rail" } th { "scheme" } th { "payer" } th { "authorised" } th { "settled" } th { "state" } th { "transaction" } th { "detail" } } }
                    tbody {
                        @for s in sales.iter() {
                            tr data-state=(s.state.name()) {
                                td { (s.rail) }
                                td { (s.scheme) }
                                td { code { (s.network) ":" (s.payer) } }
                                td class="num" { (s.authorised) }
                                td class="num" { (s.settled.map(|a| a.to_string()).unwrap_or_default()) }
                                td { (s.state.name()) }
                                td { code { (s.transaction.clone().unwrap_or_default()) } }
                                td { (s.detail.clone().unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
            @if let Some(e) = escrow {
                h2 { "Sold on Masumi" }
                dl id="escrow" data-state=(e.state.name()) {
                    dt { "state" } dd { (e.state.name()) @if let Some(d) = &e.detail { " · " (d) } }
                    dt { "payment request" } dd { code { (e.reference.clone().unwrap_or_default()) } }
                    dt { "buyer" } dd { code { (e.plan.clone().unwrap_or_default()) " · " (e.subject.clone().unwrap_or_default()) } }
                    dt { "amount" } dd { (e.amount.map(|a| a.to_string()).unwrap_or_default()) }
                    dt { "purchaser id" } dd { code { (e.client_ref) } }
                    dt { "input hash" } dd { code { (e.input_hash) } }
                    dt { "result hash" } dd { code { (e.result_hash.clone().unwrap_or_default()) } }
                    @for key in ["payByTime", "submitResultTime", "unlockTime", "externalDisputeUnlockTime"] {
                        @if let Some(t) = e.service.as_ref().and_then(|p| crate::payment::masumi::sell::time_of(p, key)) {
                            dt { (key) } dd { (t.to_rfc3339()) }
                        }
                    }
                    dt { "on chain" } dd { (e.service.as_ref().and_then(|p| p.get("onChainState")).and_then(|v| v.as_str()).unwrap_or("none")) }
                }
            }
        },
    )
}

fn ledger_table(id: &str, rows: &[LedgerRow]) -> Markup {
    html! {
        table id=(id) {
            thead { tr { th { "#" } th { "at" } th { "kind" } th { "amount" } th { "account" } th { "task" } th { "step" } th { "note" } } }
            tbody {
                @for r in rows {
                    tr data-kind=(r.kind) {
                        td { (r.seq) }
                        td { (r.at) }
                        td { (r.kind) }
                        td class="num" { (r.amount) }
                        td { (r.plan) " · " (r.subject) }
                        td { @if let Some(t) = &r.task_id { a href={ "/console/tasks/" (t) } { code { (t) } } } }
                        td { code { (r.step_id.clone().unwrap_or_default()) } }
                        td { (r.note.clone().unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

pub fn accounts(
    filter: &AccountQuery,
    accounts: &[AccountSummary],
    total: u64,
    csrf: &str,
) -> Markup {
    let page = filter.offset / u64::from(filter.limit.max(1)) + 1;
    let pages = total.div_ceil(u64::from(filter.limit.max(1))).max(1);
    let link = |page: u64| {
        let mut q = vec![("page".to_string(), page.to_string())];
        if let Some(p) = &filter.plan {
            q.push(("plan".to_string(), p.clone()));
        }
        if let Some(s) = &filter.subject_contains {
            q.push(("q".to_string(), s.clone()));
        }
        with_query("/console/accounts", &q)
    };
    layout(
        "Accounts",
        Some(csrf),
        html! {
            form method="get" action="/console/accounts" class="filter" {
                label { "plan " input type="text" name="plan" value=(filter.plan.clone().unwrap_or_default()); }
                label { "subject contains " input type="text" name="q" value=(filter.subject_contains.clone().unwrap_or_default()); }
                button type="submit" { "Filter" }
            }
            p class="muted" { (total) " account(s); page " (page) " of " (pages) }
            table id="accounts" {
                thead { tr { th { "plan" } th { "subject" } th { "granted" } th { "captured" } th { "held" } th { "available" } th { "last movement" } } }
                tbody {
                    @for a in accounts {
                        @let b = &a.balance;
                        tr {
                            td { (b.plan) }
                            td { a href=(account_path(&store::Account::new(&b.plan, &b.subject))) { (b.subject) } }
                            td class="num" { (b.granted) } td class="num" { (b.captured) } td class="num" { (b.held) } td class="num" { (b.available()) }
                            td { (a.last_at) }
                        }
                    }
                }
            }
            nav class="pages" {
                @if page > 1 { a href=(link(page - 1)) { "← previous" } }
                @if page < pages { a href=(link(page + 1)) { "next →" } }
            }
        },
    )
}

pub fn account(
    balance: &Balance,
    history: &[LedgerRow],
    notice: Option<&str>,
    csrf: &str,
) -> Markup {
    let path = account_path(&store::Account::new(&balance.plan, &balance.subject));
    layout(
        "Account",
        Some(csrf),
        html! {
            @if let Some(n) = notice { p class="ok" id="notice" { (n) } }
            dl id="balance" {
                dt { "account" } dd { (balance.plan) " · " (balance.subject) }
                dt { "granted" } dd id="granted" { (balance.granted) }
                dt { "captured" } dd id="captured" { (balance.captured) }
                dt { "held" } dd id="held" { (balance.held) }
                dt { "available" } dd id="available" { (balance.available()) }
            }
            div class="forms" {
                form method="post" action={ (path) "/grant" } id="grant" {
                    input type="hidden" name="csrf" value=(csrf);
                    label { "credits " input type="number" name="amount" min="1" required; }
                    label { "note " input type="text" name="note"; }
                    button type="submit" { "Grant" }
                }
                form method="post" action={ (path) "/revoke" } id="revoke" {
                    input type="hidden" name="csrf" value=(csrf);
                    label { "credits " input type="number" name="amount" min="1" required; }
                    label { "note " input type="text" name="note"; }
                    button type="submit" class="danger" { "Revoke" }
                }
            }
            h2 { "History" }
            (ledger_table("history", history))
        },
    )
}

pub fn spend(rows: &[DaySpend], days: &[String], n: i64, csrf: &str) -> Markup {
    let mut totals: Vec<(String, i64)> = Vec::new();
    for r in rows {
        match totals.iter_mut().find(|(route, _)| *route == r.route) {
            Some((_, c)) => *c += r.credits,
            None => totals.push((r.route.clone(), r.credits)),
        }
    }
    totals.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    layout(
        "Spend",
        Some(csrf),
        html! {
            form method="get" action="/console/spend" class="filter" {
                label { "days " input type="number" name="days" min="1" max="366" value=(n); }
                button type="submit" { "Show" }
            }
            figure {
                (PreEscaped(plot::spend_svg(rows, days)))
                figcaption { "Credits captured per route per day (UTC), the last " (n) " day(s)." }
            }
            table id="spend" {
                thead { tr { th { "route" } th { "credits" } } }
                tbody { @for (route, c) in &totals { tr { td { (route) } td class="num" { (c) } } } }
            }
        },
    )
}

/// The jobs sold on a Masumi node, newest first (`open`: only those the chain has not decided).
pub fn sales(sales: &[EscrowSale], open: bool, csrf: &str) -> Markup {
    layout(
        "Sales",
        Some(csrf),
        html! {
            form method="get" action="/console/sales" class="filter" {
                label { input type="checkbox" name="open" value="1" checked[open]; " only open" }
                button type="submit" { "Show" }
            }
            table id="sales" {
                thead { tr { th { "task" } th { "route" } th { "state" } th { "payment request" } th { "amount" } th { "buyer" } th { "result hash" } th { "updated" } } }
                tbody {
                    @for s in sales {
                        tr data-state=(s.state.name()) {
                            td { a href={ "/console/tasks/" (s.task_id) } { code { (s.task_id) } } }
                            td { (s.route) }
                            td { (s.state.name()) }
                            td { code { (s.reference.clone().unwrap_or_default()) } }
                            td class="num" { (s.amount.map(|a| a.to_string()).unwrap_or_default()) }
                            td { code { (s.subject.clone().unwrap_or_default()) } }
                            td { code { (s.result_hash.clone().unwrap_or_default()) } }
                            td { (s.updated_at.format("%Y-%m-%d %H:%M:%S")) }
                        }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;
    use store::SaleState;

    #[test]
    fn a_tasks_page_shows_what_its_client_paid_and_what_the_agent_was_paid() {
        let now = Utc::now();
        let mut paid = Task::new("paid", now);
        paid.subject = Some("eip155:8453:0xabc".to_string());
        let sale = Sale {
            reference: "eip155:8453:0xabc:0x01".to_string(),
            rail: "x402".to_string(),
            task_id: paid.id.clone(),
            plan: "x402:0xtoken".to_string(),
            subject: "eip155:8453:0xabc".to_string(),
            state: SaleState::Settled,
            scheme: "upto".to_string(),
            network: "eip155:8453".to_string(),
            asset: "0xtoken".to_string(),
            payer: "0xabc".to_string(),
            authorised: 10_000,
            settled: Some(3_000),
            transaction: Some("0xfeed".to_string()),
            deadline: now,
            detail: None,
            payload: json!({}),
            requirements: json!({}),
            calls: Vec::new(),
            created_at: now,
            updated_at: now,
        };
        let cost = store::Cost {
            task_id: paid.id.clone(),
            route: "r".to_string(),
            at: now,
            rail: "x402".to_string(),
            state: store::CostState::Paid,
            scheme: Some("exact".to_string()),
            network: Some("eip155:84532".to_string()),
            asset: Some("0xtoken".to_string()),
            pay_to: Some("0xagent".to_string()),
            amount: Some(2_500),
            payer: Some("0xwallet".to_string()),
            transaction: Some("0xbeef".to_string()),
            detail: None,
            required: None,
            response: None,
        };
        let money = Money {
            ledger: &[],
            purchases: &[],
            costs: std::slice::from_ref(&cost),
            sales: std::slice::from_ref(&sale),
            escrow: None,
        };
        let page = task(&paid, &money, "csrf").into_string();
        for shown in [
            "id=\"sales\"",
            "Payments received",
            "data-state=\"settled\"",
            "eip155:8453:0xabc",
            "10000",
            "3000",
            "0xfeed",
            "id=\"costs\"",
            "Payments made to the agent",
            "data-state=\"paid\"",
            "eip155:84532",
            "2500",
            "0xagent",
            "0xbeef",
        ] {
            assert!(page.contains(shown), "{shown} in {page}");
        }
        let unpaid = Money {
            ledger: &[],
            purchases: &[],
            costs: &[],
            sales: &[],
            escrow: None,
        };
        let page = task(&paid, &unpaid, "csrf").into_string();
        assert!(!page.contains("id=\"sales\"") && !page.contains("id=\"costs\""));
    }
}
