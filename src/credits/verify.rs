//! The credits invariant check (`interlingua credits verify`, `GET /credits/verify`): every
//! credit held is eventually captured or released, and every number can be recomputed from the
//! ledger's rows. It lists what breaks that promise:
//!
//! - an account whose balance (granted, captured, held) differs from what its rows add up to;
//! - an open hold that should have been released: its task has ended, is gone, cannot be read,
//!   is on a route no longer configured, or has waited on its client (input, payment) longer
//!   than the route's `input_timeout` allows. A task the agent is still working on has no
//!   deadline in interlingua, so its hold is never listed for its age alone;
//! - a task with no upstream id whose create must have ended by now: older than the longest a
//!   create may take (twice the upstream's `total_timeout`: a create is made again once when
//!   the agent's discovery says it moved).
//!
//! - a payment taken on a rail (an x402 sale) that was not settled as it should have been: its
//!   authorisation expired with nothing settled, a settlement has been under way longer than
//!   it can take, a settlement was cut short and whether it reached the chain is unknown, or an
//!   `upto` task's settlement failed (its steps were captured, the money never came).
//!
//! Each time limit gets [`GRACE`] on top: the watcher ends a task at its deadline, not before.
//! The check only reads; it changes nothing.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use mapping::task::Status;
use store::{Balance, EscrowSale, EscrowState, HeldTask, OpenHold, Sale, SaleState, Unstarted};
use store::{StoreError, TaskStore};

/// What a deadline is given before the check holds it against a task: a minute.
pub const GRACE: Duration = Duration::from_secs(60);

/// What one route allows, for the check.
#[derive(Debug, Clone, Copy)]
pub struct RouteRule {
    /// How long a task may wait on its client.
    pub input_timeout: Duration,
    /// The longest a create may take.
    pub create_deadline: Duration,
}

/// The rules of every route in `config`, by route name.
pub fn rules(config: &Config) -> HashMap<String, RouteRule> {
    config
        .routes
        .iter()
        .map(|r| {
            let total = config
                .upstreams
                .get(r.upstream)
                .map_or(Duration::ZERO, |u| u.total_timeout);
            let rule = RouteRule {
                input_timeout: r.translation.input_timeout,
                create_deadline: total.saturating_mul(2),
            };
            (r.name.clone(), rule)
        })
        .collect()
}

/// What the check found; all empty (and `ok`) when every invariant holds.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ok: bool,
    pub accounts: Vec<Drift>,
    pub holds: Vec<StuckHold>,
    pub tasks_without_upstream_id: Vec<Unstarted>,
    pub sales: Vec<SaleProblem>,
    /// Jobs sold on a Masumi node that no instance follows any more, or whose funds the node
    /// has not withdrawn when it should have.
    pub masumi_sales: Vec<EscrowProblem>,
    /// Payments to agents whose outcome was never recorded: a stop between the payment leaving
    /// and the agent's answer. The agent may have been paid: its records (or the chain) say.
    pub costs: Vec<CostProblem>,
}

/// A payment to an agent still `sending` long after it left.
#[derive(Debug, Clone, Serialize)]
pub struct CostProblem {
    pub task_id: String,
    pub route: String,
    pub at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<u64>,
    /// `outcome_unknown`.
    pub problem: &'static str,
}

/// A sale not settled as it should have been, and why.
#[derive(Debug, Clone, Serialize)]
pub struct SaleProblem {
    pub reference: String,
    pub task_id: String,
    pub payer: String,
    pub scheme: String,
    pub state: &'static str,
    pub authorised: u64,
    /// `expired_unsettled`, `settling_too_long`, `outcome_unknown` or `settlement_failed`.
    pub problem: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A job sold on an escrow rail that needs its operator.
#[derive(Debug, Clone, Serialize)]
pub struct EscrowProblem {
    pub task_id: String,
    pub route: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub state: &'static str,
    /// `not_followed` (due for over an hour: its route is gone or sells no more, or no
    /// instance runs) or `withdrawal_overdue` (its result submitted, `unlockTime` an hour past,
    /// not withdrawn: a node that does not withdraw by itself waits for its operator).
    pub problem: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// How long past its time a sale may go unlooked at, or unwithdrawn, before it is a problem.
const ESCROW_LATE: Duration = Duration::from_secs(3600);

/// The most open escrow sales one check reads.
const ESCROW_CHECKED: u32 = 100_000;

/// Why `sale` needs its operator at `now`, if it does.
fn escrow_problem(sale: EscrowSale, now: DateTime<Utc>) -> Option<EscrowProblem> {
    let unlock = sale
        .service
        .as_ref()
        .and_then(|p| crate::payment::masumi::sell::time_of(p, "unlockTime"));
    let problem = if past(sale.due, ESCROW_LATE, now) {
        "not_followed"
    } else if sale.state == EscrowState::Submitted
        && unlock.is_some_and(|u| past(u, ESCROW_LATE, now))
    {
        "withdrawal_overdue"
    } else {
        return None;
    };
    Some(EscrowProblem {
        task_id: sale.task_id,
        route: sale.route,
        reference: sale.reference,
        state: sale.state.name(),
        problem,
        detail: sale.detail,
    })
}

/// An account whose balance differs from its rows.
#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    pub plan: String,
    pub subject: String,
    /// The running totals (`granted`, `captured`, `held`).
    pub balance: Totals,
    /// The same, added up from the ledger's rows.
    pub from_rows: Totals,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub granted: i64,
    pub captured: i64,
    pub held: i64,
}

impl From<&Balance> for Totals {
    fn from(b: &Balance) -> Totals {
        Totals {
            granted: b.granted,
            captured: b.captured,
            held: b.held,
        }
    }
}

/// An open hold that should have been released, and why.
#[derive(Debug, Clone, Serialize)]
pub struct StuckHold {
    pub task_id: String,
    pub plan: String,
    pub subject: String,
    /// What is still held.
    pub remaining: i64,
    /// `task_ended`, `task_missing`, `task_unreadable`, `route_unknown` or `waited_too_long`.
    pub problem: &'static str,
    /// The task's route and status, when it can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

/// Runs the check on `store` at `now`, under the routes' `rules`.
pub async fn verify(
    store: &dyn TaskStore,
    rules: &HashMap<String, RouteRule>,
    now: DateTime<Utc>,
) -> Result<Report, StoreError> {
    let audit = store.audit().await?;
    let accounts: Vec<Drift> = audit
        .drifts
        .iter()
        .map(|(balance, rows)| Drift {
            plan: balance.plan.clone(),
            subject: balance.subject.clone(),
            balance: balance.into(),
            from_rows: rows.into(),
        })
        .collect();
    let holds: Vec<StuckHold> = audit
        .open_holds
        .into_iter()
        .filter_map(|h| stuck(h, rules, now))
        .collect();
    let mut tasks_without_upstream_id: Vec<Unstarted> = Vec::new();
    for u in audit.unstarted {
        let deadline = rules
            .get(&u.route)
            .map_or(Duration::ZERO, |r| r.create_deadline);
        if !past(u.created_at, deadline, now) {
            continue;
        }
        // A task waiting to be paid for was never meant to start: its wait is bounded by its
        // route's input_timeout, as a task waiting for input's is.
        // Nor was a sold job waiting for its buyer's lock: its payment request's deadline
        // ends it (engine/settle/escrow.rs).
        if let Some(stored) = store.get(&u.task_id).await? {
            if stored.task.awaits_first_payment() || stored.task.waits_for_buyer() {
                continue;
            }
        }
        tasks_without_upstream_id.push(u);
    }
    let sales: Vec<SaleProblem> = store
        .unsettled_sales()
        .await?
        .into_iter()
        .filter_map(|s| unsettled(s, now))
        .collect();
    let masumi_sales: Vec<EscrowProblem> = store
        .escrow_sales(true, ESCROW_CHECKED)
        .await?
        .into_iter()
        .filter_map(|s| escrow_problem(s, now))
        .collect();
    let mut overdue = Vec::new();
    for c in store.costs_sending().await? {
        if !past(c.at, SENDING_TIME, now) {
            continue;
        }
        // Sent in band, its receipt comes with the task's end: not overdue while it runs.
        if c.detail.as_deref() == Some(store::costs::AWAITS_RECEIPT) {
            let ended = store.get(&c.task_id).await?;
            if ended.is_some_and(|s| !s.task.status.is_terminal()) {
                continue;
            }
        }
        overdue.push(c);
    }
    let costs: Vec<CostProblem> = overdue
        .into_iter()
        .map(|c| CostProblem {
            task_id: c.task_id,
            route: c.route,
            at: c.at,
            network: c.network,
            pay_to: c.pay_to,
            amount: c.amount,
            problem: "outcome_unknown",
        })
        .collect();
    Ok(Report {
        ok: accounts.is_empty()
            && holds.is_empty()
            && tasks_without_upstream_id.is_empty()
            && sales.is_empty()
            && masumi_sales.is_empty()
            && costs.is_empty(),
        accounts,
        holds,
        tasks_without_upstream_id,
        sales,
        masumi_sales,
        costs,
    })
}

/// Why `sale` is a problem at `now`, if it is. A sale the watcher will still settle is not;
/// an `exact` sale whose settlement failed at its create is not either (its task failed and
/// gave back what the sale granted: nothing is owed).
fn unsettled(sale: Sale, now: DateTime<Utc>) -> Option<SaleProblem> {
    let problem = match sale.state {
        SaleState::Authorised if past(sale.deadline, Duration::ZERO, now) => "expired_unsettled",
        SaleState::Settling if past(sale.updated_at, SETTLE_TIME, now) => "settling_too_long",
        SaleState::Unknown => "outcome_unknown",
        SaleState::Failed if sale.scheme == "upto" => "settlement_failed",
        _ => return None,
    };
    Some(SaleProblem {
        reference: sale.reference,
        task_id: sale.task_id,
        payer: sale.payer,
        scheme: sale.scheme,
        state: sale.state.name(),
        authorised: sale.authorised,
        problem,
        detail: sale.detail,
    })
}

/// How long a payment to an agent may be on its way before its outcome is taken for lost: the
/// paid call is bounded by its upstream's `total_timeout`, minutes at most in practice.
const SENDING_TIME: Duration = Duration::from_secs(10 * 60);

/// The longest a settlement can be under way: the facilitator's answer is waited for 30 s
/// (`payment::x402::accept`).
const SETTLE_TIME: Duration = Duration::from_secs(30);

/// Why `hold` should have been released by `now`, if it should have.
fn stuck(
    hold: OpenHold,
    rules: &HashMap<String, RouteRule>,
    now: DateTime<Utc>,
) -> Option<StuckHold> {
    let mut found = StuckHold {
        task_id: hold.task_id,
        plan: hold.plan,
        subject: hold.subject,
        remaining: hold.remaining,
        problem: "task_missing",
        route: None,
        status: None,
    };
    let task = match hold.task {
        HeldTask::Missing => return Some(found),
        HeldTask::Unreadable(_) => {
            found.problem = "task_unreadable";
            return Some(found);
        }
        HeldTask::Stored(task) => task,
    };
    found.route = Some(task.route.clone());
    found.status = Some(task.status);
    found.problem = if task.status.is_terminal() {
        "task_ended"
    } else if let Some(rule) = rules.get(&task.route) {
        if task.waits_on_client() && past(task.in_status_since(), rule.input_timeout, now) {
            "waited_too_long"
        } else {
            return None;
        }
    } else {
        "route_unknown"
    };
    Some(found)
}

/// Whether `deadline` (and [`GRACE`]) has passed since `since`.
fn past(since: DateTime<Utc>, deadline: Duration, now: DateTime<Utc>) -> bool {
    let waited = (now - since).to_std().unwrap_or(Duration::ZERO);
    waited > deadline.saturating_add(GRACE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mapping::task::Task;
    use store::SqliteStore;
    use store::{Account, Hold};

    fn rules() -> HashMap<String, RouteRule> {
        let rule = RouteRule {
            input_timeout: Duration::from_secs(3600),
            create_deadline: Duration::from_secs(120),
        };
        HashMap::from([("r".to_string(), rule)])
    }

    #[tokio::test]
    async fn a_payment_to_an_agent_left_sending_is_listed_once_ten_minutes_have_passed() {
        let store = SqliteStore::in_memory().unwrap();
        let start = Utc::now();
        let cost = store::Cost {
            task_id: "t".to_string(),
            route: "r".to_string(),
            at: start,
            rail: "x402".to_string(),
            state: store::CostState::Sending,
            scheme: Some("exact".to_string()),
            network: Some("eip155:84532".to_string()),
            asset: None,
            pay_to: Some("0xagent".to_string()),
            amount: Some(7),
            payer: None,
            transaction: None,
            detail: None,
            required: None,
            response: None,
        };
        store.begin_cost(&cost, 10).await.unwrap();
        let at = |secs: i64| start + chrono::Duration::seconds(secs);
        // Ten minutes, and the grace every deadline of the check has.
        let limit = (SENDING_TIME + GRACE).as_secs() as i64;
        assert!(verify(&store, &rules(), at(limit - 1)).await.unwrap().ok);
        let later = verify(&store, &rules(), at(limit + 1)).await.unwrap();
        assert!(!later.ok);
        let listed: Vec<(&str, Option<u64>, &str)> = later
            .costs
            .iter()
            .map(|c| (c.task_id.as_str(), c.amount, c.problem))
            .collect();
        assert_eq!(listed, [("t", Some(7), "outcome_unknown")]);

        // One sent in band awaits its receipt while its task runs, however long; once the task
        // has ended without it, it is listed.
        let mut task = Task::new("r", start);
        task.upstream_id = Some("up".to_string());
        store.insert(&task).await.unwrap();
        let in_band = store::Cost {
            task_id: task.id.clone(),
            detail: Some(store::costs::AWAITS_RECEIPT.to_string()),
            ..cost
        };
        store.begin_cost(&in_band, 10).await.unwrap();
        let tasks =
            |r: &Report| -> Vec<String> { r.costs.iter().map(|c| c.task_id.clone()).collect() };
        let running = verify(&store, &rules(), at(10 * limit)).await.unwrap();
        assert_eq!(tasks(&running), ["t"]);
        task.status = mapping::task::Status::Failed;
        store.update(&task, 1).await.unwrap();
        let ended = verify(&store, &rules(), at(10 * limit)).await.unwrap();
        assert_eq!(tasks(&ended), ["t".to_string(), task.id.clone()]);
    }

    #[tokio::test]
    async fn a_task_is_listed_once_its_deadline_and_the_grace_have_passed() {
        let store = SqliteStore::in_memory().unwrap();
        store
            .grant(&Account::new("gold", "ann"), 5, None)
            .await
            .unwrap();
        let hold = Hold {
            plan: "gold".to_string(),
            subject: "ann".to_string(),
            amount: 1,
        };
        let start = Utc::now();
        // A create never answered, and a task waiting for input since it started.
        let unstarted = Task::new("r", start);
        let mut waiting = Task::new("r", start);
        waiting.upstream_id = Some("job-1".to_string());
        waiting.status = Status::AwaitingInput;
        waiting.status_since = Some(start);
        for t in [&unstarted, &waiting] {
            store.insert_with_hold(t, Some(&hold)).await.unwrap();
        }
        let at = |secs: i64| start + chrono::Duration::seconds(secs);

        let early = verify(&store, &rules(), at(120 + 59)).await.unwrap();
        assert!(early.ok, "{early:?}");

        let later = verify(&store, &rules(), at(120 + 61)).await.unwrap();
        let listed: Vec<&str> = later
            .tasks_without_upstream_id
            .iter()
            .map(|u| u.task_id.as_str())
            .collect();
        assert_eq!(listed, [unstarted.id.as_str()]);
        assert!(later.holds.is_empty() && later.accounts.is_empty());

        let much_later = verify(&store, &rules(), at(3600 + 61)).await.unwrap();
        let stuck: Vec<(&str, &str)> = much_later
            .holds
            .iter()
            .map(|h| (h.task_id.as_str(), h.problem))
            .collect();
        assert_eq!(stuck, [(waiting.id.as_str(), "waited_too_long")]);
        // The unstarted task waits on nobody: its hold is not listed for its age.
        assert!(!much_later.ok);

        let elsewhere = verify(&store, &HashMap::new(), at(0)).await.unwrap();
        let problems: Vec<&str> = elsewhere.holds.iter().map(|h| h.problem).collect();
        assert_eq!(problems, ["route_unknown", "route_unknown"]);
    }

    #[test]
    fn a_sale_no_one_follows_or_the_node_does_not_withdraw_needs_its_operator() {
        let now = Utc::now();
        let sale = |state, due: DateTime<Utc>, unlock: DateTime<Utc>| EscrowSale {
            task_id: "t".to_string(),
            route: "r".to_string(),
            rail: "masumi".to_string(),
            reference: Some("b1".to_string()),
            client_ref: "aabbccddeeff0011".to_string(),
            input_hash: "ab".to_string(),
            state,
            due,
            detail: None,
            request: None,
            service: Some(serde_json::json!({"unlockTime": unlock.timestamp_millis().to_string()})),
            plan: None,
            subject: None,
            amount: Some(5),
            result_hash: None,
            calls: Vec::new(),
            created_at: now,
            updated_at: now,
        };
        let hours = |h: i64| now - chrono::Duration::hours(h);
        let later = now + chrono::Duration::hours(30);
        assert!(escrow_problem(sale(EscrowState::Requested, now, later), now).is_none());
        let lost = escrow_problem(sale(EscrowState::Requested, hours(2), later), now).unwrap();
        assert_eq!((lost.problem, lost.state), ("not_followed", "requested"));
        let unpaid = escrow_problem(sale(EscrowState::Submitted, now, hours(2)), now).unwrap();
        assert_eq!(unpaid.problem, "withdrawal_overdue");
        assert!(escrow_problem(sale(EscrowState::Locked, now, hours(2)), now).is_none());
    }
}
