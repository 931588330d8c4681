//! One store suite, two backends: every test here runs against SQLite (a file in a temporary
//! directory) and against PostgreSQL (a fresh database on one cluster per test binary, started
//! at the first use: see `testkit::postgres` for how it ends with the process). Then the tests
//! of what only PostgreSQL does: several instances on one database.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::Utc;
use mapping::task::{Status, Task};
use store::{
    Account, AccountQuery, Capture, DaySpend, EscrowMove, EscrowSale, EscrowState, Hold, Leases,
    LedgerRow, Location, Migrations, Settlement, StoreError, TaskQuery, TaskStore,
};
use testkit::postgres::Postgres;

/// A database the stores of one test share.
enum Db {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl Db {
    fn sqlite() -> Db {
        Db::Sqlite(tempfile::tempdir().unwrap())
    }

    fn postgres() -> Db {
        static CLUSTER: OnceLock<Postgres> = OnceLock::new();
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let cluster = CLUSTER.get_or_init(Postgres::start);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Db::Postgres(cluster.database(&format!("suite_{n}")))
    }

    fn location(&self) -> Location {
        match self {
            Db::Sqlite(dir) => Location::Sqlite(dir.path().to_path_buf()),
            Db::Postgres(url) => Location::Postgres {
                url: url.clone(),
                password: None,
                pool_max: 32,
            },
        }
    }

    /// A store (an instance) on the database, leasing as `holder` for a minute.
    async fn store_as(&self, holder: &str) -> Arc<dyn TaskStore> {
        let leases = Leases {
            holder: holder.to_string(),
            ttl: Duration::from_secs(60),
        };
        store::open(&self.location(), leases, Migrations::Apply)
            .await
            .unwrap()
    }

    async fn store(&self) -> Arc<dyn TaskStore> {
        self.store_as("one").await
    }

    /// Runs SQL on the database behind the stores' backs (damaging documents, ending leases).
    async fn execute(&self, sql: &str) {
        match self {
            Db::Sqlite(dir) => {
                let c = rusqlite::Connection::open(dir.path().join("interlingua.db")).unwrap();
                c.busy_timeout(Duration::from_secs(5)).unwrap();
                c.execute_batch(sql).unwrap();
            }
            Db::Postgres(url) => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client.batch_execute(sql).await.unwrap();
            }
        }
    }

    /// The number the query `sql` answers (its first column of its one row).
    async fn number(&self, sql: &str) -> i64 {
        match self {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("interlingua.db"))
                .unwrap()
                .query_row(sql, [], |r| r.get(0))
                .unwrap(),
            Db::Postgres(url) => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client.query_one(sql, &[]).await.unwrap().get(0)
            }
        }
    }

    /// Ends the lease on the task with this id, as if its holder had not renewed it.
    async fn lapse(&self, id: &str) {
        let past = match self {
            Db::Sqlite(_) => "0",
            Db::Postgres(_) => "now() - interval '1 second'",
        };
        self.execute(&format!(
            "UPDATE tasks SET lease_until = {past} WHERE id = '{id}'"
        ))
        .await;
    }
}

/// Each test, once per backend: `mod <test> { fn sqlite(); fn postgres(); }`.
macro_rules! both {
    ($($test:ident),* $(,)?) => {
        $(
            mod $test {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn sqlite() {
                    super::$test(super::Db::sqlite()).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn postgres() {
                    super::$test(super::Db::postgres()).await
                }
            }
        )*
    };
}

both!(
    insert_get_update_with_versions,
    search_and_unfinished,
    every_filter_narrows_the_search_and_the_total_counts_all_pages,
    the_task_holding_a_step_is_found_by_the_steps_id_on_its_route_only,
    concurrent_holds_never_take_more_than_the_balance,
    nothing_too_deep_to_read_back_is_written,
    a_task_that_cannot_be_read_is_ended_where_it_is_read_or_found,
    insert_many_is_all_or_none,
    captures_beyond_the_hold_take_the_balance_and_note_what_it_did_not_cover,
    a_capture_is_charged_once_and_the_release_frees_the_rest_once,
    a_task_stored_as_ended_releases_its_hold_whatever_the_caller_asked,
    a_revoke_never_takes_more_than_is_available,
    purchases_are_saved_and_replaced,
    costs_are_appended_and_read_back_by_task_in_order,
    a_payment_begins_within_its_tasks_cap_and_takes_its_outcome_once,
    a_payment_in_band_takes_its_outcome_when_its_receipt_comes,
    a_task_stored_unpaid_is_claimed_and_held_for_once,
    the_audit_reads_open_holds_and_unstarted_tasks,
    leases_lapse_are_taken_over_renewed_and_handed_back,
    a_duplicate_among_concurrent_creates_fails_alone,
    a_stale_update_among_concurrent_ones_fails_alone,
    accounts_are_listed_with_their_balances_filtered_and_paged,
    the_ledger_of_a_task_is_its_own_rows_in_the_order_written,
    spend_by_day_sums_captures_per_route_and_day_from_the_day_given,
    a_store_at_v4_upgrades_to_v6_with_the_ledgers_index,
    a_sale_opens_once_and_moves_only_from_the_state_it_was_read_in,
    an_escrow_sale_sent_again_while_it_waits_for_its_lock_is_the_same_job,
    twin_escrow_sales_opened_at_once_store_one_task_and_one_sale,
    an_escrow_sale_moves_only_from_the_state_it_was_read_in_and_as_its_money_fits,
    an_escrow_sale_withdrawn_after_its_task_ended_is_captured_from_the_balance_once,
    an_escrow_sale_closed_while_its_task_runs_takes_from_the_hold_and_revokes_the_rest,
    escrow_sales_due_are_the_open_ones_soonest_first_and_the_list_is_newest_first,
);

async fn insert_get_update_with_versions(db: Db) {
    let store = db.store().await;
    let mut t = Task::new("r", Utc::now());
    store.insert(&t).await.unwrap();
    assert_eq!(
        store.insert(&t).await,
        Err(StoreError::Duplicate(t.id.clone()))
    );
    let stored = store.get(&t.id).await.unwrap().unwrap();
    assert_eq!(stored.version, 1);
    assert_eq!(stored.task, t);
    t.status = Status::Running;
    assert_eq!(store.update(&t, 1).await, Ok(2));
    // A writer still holding version 1 has lost the race.
    assert_eq!(store.update(&t, 1).await, Err(StoreError::Conflict));
    assert!(store.get("nope").await.unwrap().is_none());
}

async fn search_and_unfinished(db: Db) {
    let store = db.store().await;
    for i in 0..5 {
        let mut t = Task::new(if i < 3 { "a" } else { "b" }, Utc::now());
        if i == 0 {
            t.status = Status::Completed;
        }
        store.insert(&t).await.unwrap();
    }
    let (found, total) = store
        .search(&TaskQuery {
            route: Some("a".into()),
            page: 1,
            page_size: 2,
            ..TaskQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((found.len(), total), (2, 3));
    assert_eq!(store.unfinished().await.unwrap().len(), 4);
}

async fn every_filter_narrows_the_search_and_the_total_counts_all_pages(db: Db) {
    let store = db.store().await;
    for i in 0..12u32 {
        let mut t = Task::new(if i % 2 == 0 { "a" } else { "b" }, Utc::now());
        t.subject = Some(if i % 3 == 0 { "ann" } else { "bob" }.into());
        t.status = if i < 4 {
            Status::Completed
        } else {
            Status::Running
        };
        t.name = Some(format!("n{}", i % 4));
        t.conversation = Some(format!("c{}", i % 5));
        store.insert(&t).await.unwrap();
    }
    let count = |q: TaskQuery| {
        let store = &store;
        async move {
            let (page, total) = store.search(&q).await.unwrap();
            (page.len(), total)
        }
    };
    let q = |route: Option<&str>, subject: Option<&str>| TaskQuery {
        route: route.map(str::to_string),
        subject: subject.map(str::to_string),
        page: 1,
        page_size: 3,
        ..TaskQuery::default()
    };
    assert_eq!(count(q(None, None)).await, (3, 12));
    assert_eq!(count(q(Some("a"), None)).await, (3, 6));
    // Route a: i = 0, 2, 4, 6, 8, 10; of those ann's: 0, 6.
    assert_eq!(count(q(Some("a"), Some("ann"))).await, (2, 2));
    let running = TaskQuery {
        status: Some(Status::Running),
        ..q(Some("a"), None)
    };
    assert_eq!(count(running).await, (3, 4));
    let named = TaskQuery {
        name: Some("n2".into()),
        ..q(Some("a"), None)
    };
    // n2: i = 2, 6, 10.
    assert_eq!(count(named).await, (3, 3));
    let conversation = TaskQuery {
        conversation: Some("c1".into()),
        ..q(None, None)
    };
    // c1: i = 1, 6, 11.
    assert_eq!(count(conversation).await, (3, 3));
    let (all, _) = store.search(&q(Some("a"), None)).await.unwrap();
    let one = TaskQuery {
        id: Some(all[1].id.clone()),
        ..q(Some("a"), None)
    };
    assert_eq!(count(one).await, (1, 1));
    let elsewhere = TaskQuery {
        id: Some(all[1].id.clone()),
        ..q(Some("b"), None)
    };
    assert_eq!(count(elsewhere).await, (0, 0));
    let second_page = TaskQuery {
        page: 2,
        ..q(Some("a"), None)
    };
    assert_eq!(count(second_page).await, (3, 6));
    // A conversation changed by an update is found under its new id only.
    let mut moved = all[0].clone();
    moved.conversation = Some("c9".into());
    let version = store.get(&moved.id).await.unwrap().unwrap().version;
    store.update(&moved, version).await.unwrap();
    let c9 = TaskQuery {
        conversation: Some("c9".into()),
        ..q(None, None)
    };
    assert_eq!(count(c9).await, (1, 1));
}

async fn the_task_holding_a_step_is_found_by_the_steps_id_on_its_route_only(db: Db) {
    let store = db.store().await;
    let now = Utc::now();
    let mut holder = Task::new("a", now);
    holder.subject = Some("ann".into());
    holder.start_steps(now);
    let step_id = holder.steps[0].id.clone();
    store.insert(&holder).await.unwrap();
    let mut other = Task::new("a", now);
    other.subject = Some("ann".into());
    other.start_steps(now);
    store.insert(&other).await.unwrap();
    let query = |route: &str, subject: &str, step: &str| TaskQuery {
        route: Some(route.into()),
        subject: Some(subject.into()),
        holding_step: Some(step.into()),
        page: 1,
        page_size: 10,
        ..TaskQuery::default()
    };
    let (found, total) = store.search(&query("a", "ann", &step_id)).await.unwrap();
    assert_eq!(total, 1);
    assert_eq!(found[0].id, holder.id);
    // Another subject's, another route's: not there.
    for (route, subject, step) in [
        ("a", "bob", &*step_id),
        ("b", "ann", &step_id),
        ("a", "ann", "step-none"),
    ] {
        assert_eq!(
            store.search(&query(route, subject, step)).await.unwrap().1,
            0
        );
    }
}

async fn concurrent_holds_never_take_more_than_the_balance(db: Db) {
    holds_against_the_balance(vec![db.store().await]).await;
}

/// 300 creates, each holding 1 credit of 40, spread over `stores` (instances): exactly 40 hold.
async fn holds_against_the_balance(stores: Vec<Arc<dyn TaskStore>>) {
    const CREDITS: usize = 40;
    const CALLS: usize = 300;
    let account = Account::new("gold", "ann");
    stores[0]
        .grant(&account, CREDITS as i64, None)
        .await
        .unwrap();
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            tokio::spawn(async move {
                let hold = Hold {
                    plan: "gold".to_string(),
                    subject: "ann".to_string(),
                    amount: 1,
                };
                store
                    .insert_with_hold(&Task::new("r", Utc::now()), Some(&hold))
                    .await
            })
        })
        .collect();
    let mut held = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(()) => held += 1,
            Err(StoreError::Insufficient {
                available: 0,
                needed: 1,
            }) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(held, CREDITS);
    for store in &stores {
        let balance = store.balance(&account).await.unwrap();
        assert_eq!((balance.held, balance.available()), (CREDITS as i64, 0));
        assert_eq!(store.recompute(&account).await.unwrap(), balance);
    }
}

/// SQLite in memory reads through its writer: the same limit holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_in_memory_never_take_more_than_the_balance() {
    let store = store::SqliteStore::in_memory().unwrap();
    holds_against_the_balance(vec![Arc::new(store)]).await;
}

async fn nothing_too_deep_to_read_back_is_written(db: Db) {
    let store = db.store().await;
    let deep =
        |levels: usize| (0..levels).fold(serde_json::json!(1), |v, _| serde_json::json!([v]));
    let mut t = Task::new("r", Utc::now());
    // The task is 1 level, its input 1: params of 125 levels are as deep as decodes.
    t.input.params = Some(deep(125));
    store.insert(&t).await.unwrap();
    assert_eq!(store.get(&t.id).await.unwrap().unwrap().task, t);
    t.input.params = Some(deep(126));
    assert_eq!(
        store.update(&t, 1).await,
        Err(StoreError::TooDeep {
            depth: 128,
            limit: 127
        })
    );
    let mut other = Task::new("r", Utc::now());
    other.payment = Some(deep(127));
    assert!(matches!(
        store.insert(&other).await,
        Err(StoreError::TooDeep { depth: 128, .. })
    ));
    assert!(store.get(&other.id).await.unwrap().is_none());
}

async fn a_task_that_cannot_be_read_is_ended_where_it_is_read_or_found(db: Db) {
    let store = db.store().await;
    let ann = Account::new("gold", "ann");
    store.grant(&ann, 5, None).await.unwrap();
    let hold = Hold {
        plan: "gold".to_string(),
        subject: "ann".to_string(),
        amount: 2,
    };
    let (got, found) = (Task::new("r", Utc::now()), Task::new("r", Utc::now()));
    for t in [&got, &found] {
        let mut t = t.clone();
        t.subject = Some("ann".to_string());
        store.insert_with_hold(&t, Some(&hold)).await.unwrap();
    }
    db.execute("UPDATE tasks SET doc = 'not json'").await;
    let read = store.get(&got.id).await.unwrap().unwrap();
    assert_eq!(
        (read.task.status, read.task.reason.as_deref(), read.version),
        (Status::Failed, Some("unreadable"), 2)
    );
    assert_eq!(
        (read.task.subject.as_deref(), read.task.plan.as_deref()),
        (Some("ann"), Some("gold"))
    );
    let (page, total) = store
        .search(&TaskQuery {
            page: 1,
            page_size: 10,
            ..TaskQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(total, 2);
    assert!(page
        .iter()
        .all(|t| t.status == Status::Failed && t.reason.as_deref() == Some("unreadable")));
    let balance = store.balance(&ann).await.unwrap();
    assert_eq!((balance.held, balance.available()), (0, 5));
    assert_eq!(store.recompute(&ann).await.unwrap(), balance);
    let kinds: Vec<_> = store
        .history(&ann, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.amount))
        .collect();
    assert_eq!(kinds.len(), 5);
    assert_eq!(kinds[..2], [("release".into(), 2), ("release".into(), 2)]);
    // Read again: as ended, nothing moves twice.
    assert_eq!(store.get(&got.id).await.unwrap().unwrap().version, 2);
    assert_eq!(store.history(&ann, 10).await.unwrap().len(), 5);
}

async fn insert_many_is_all_or_none(db: Db) {
    let store = db.store().await;
    let taken = Task::new("r", Utc::now());
    store.insert(&taken).await.unwrap();
    let fresh = Task::new("r", Utc::now());
    assert_eq!(
        store.insert_many(&[fresh.clone(), taken.clone()]).await,
        Err(StoreError::Duplicate(taken.id.clone()))
    );
    assert!(store.get(&fresh.id).await.unwrap().is_none());
    let more: Vec<_> = (0..3).map(|_| Task::new("r", Utc::now())).collect();
    store.insert_many(&more).await.unwrap();
    assert_eq!(store.unfinished().await.unwrap().len(), 4);
}

fn capture(step: &str, amount: u64) -> Capture {
    Capture {
        step_id: step.to_string(),
        amount,
    }
}

/// A store with `granted` credits for ann, and a task holding `held` of them.
async fn held(db: &Db, granted: i64, held: u64) -> (Arc<dyn TaskStore>, Account, Task) {
    let store = db.store().await;
    let ann = Account::new("gold", "ann");
    store.grant(&ann, granted, None).await.unwrap();
    let task = Task::new("r", Utc::now());
    let hold = Hold {
        plan: "gold".to_string(),
        subject: "ann".to_string(),
        amount: held,
    };
    store.insert_with_hold(&task, Some(&hold)).await.unwrap();
    (store, ann, task)
}

/// Checks ann's ledger, oldest row first (kind, amount, from_hold, note), and her balance
/// (captured, held, available), which the rows must add up to.
async fn assert_ledger(
    store: &Arc<dyn TaskStore>,
    ann: &Account,
    rows: &[(&str, i64, i64, Option<&str>)],
    balance: (i64, i64, i64),
) {
    let history: Vec<LedgerRow> = store.history(ann, 100).await.unwrap();
    let found: Vec<_> = history
        .iter()
        .rev()
        .map(|r| (r.kind.as_str(), r.amount, r.from_hold, r.note.as_deref()))
        .collect();
    assert_eq!(found, rows);
    let b = store.balance(ann).await.unwrap();
    assert_eq!((b.captured, b.held, b.available()), balance);
    assert_eq!(store.recompute(ann).await.unwrap(), b);
    assert!(store.audit().await.unwrap().drifts.is_empty());
}

async fn a_task_stored_unpaid_is_claimed_and_held_for_once(db: Db) {
    let store = db.store().await;
    let ann = Account::new("gold", "ann");
    store.grant(&ann, 10, None).await.unwrap();
    let mut task = Task::new("r", Utc::now());
    store.insert(&task).await.unwrap();
    task.subject = Some("ann".into());
    task.status = Status::Running;
    let hold = |amount| Hold {
        plan: "gold".to_string(),
        subject: "ann".to_string(),
        amount,
    };
    // More than the account has: refused, nothing written (the task still has no subject).
    assert_eq!(
        store.update_with_hold(&task, 1, &hold(11)).await,
        Err(StoreError::Insufficient {
            available: 10,
            needed: 11
        })
    );
    let stored = store.get(&task.id).await.unwrap().unwrap();
    assert_eq!((stored.version, stored.task.subject), (1, None));
    // A stale version: refused.
    assert_eq!(
        store.update_with_hold(&task, 2, &hold(4)).await,
        Err(StoreError::Conflict)
    );
    assert_eq!(store.update_with_hold(&task, 1, &hold(4)).await, Ok(2));
    let stored = store.get(&task.id).await.unwrap().unwrap();
    assert_eq!(stored.task, task);
    let (found, total) = store
        .search(&TaskQuery {
            subject: Some("ann".into()),
            page: 1,
            page_size: 10,
            ..TaskQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((found.len(), total), (1, 1), "found by its subject");
    // Claimed once: a second payment for it is refused, nothing held twice.
    assert_eq!(
        store.update_with_hold(&task, 2, &hold(4)).await,
        Err(StoreError::Conflict)
    );
    assert_ledger(
        &store,
        &ann,
        &[("grant", 10, 0, None), ("hold", 4, 0, None)],
        (0, 4, 6),
    )
    .await;
}

async fn captures_beyond_the_hold_take_the_balance_and_note_what_it_did_not_cover(db: Db) {
    // 10 granted, 4 held; the steps cost 3, 5 and 4: the first from the hold, the second
    // 1 from the hold and 4 from the balance, the third only the 2 the balance has left.
    let (store, ann, task) = held(&db, 10, 4).await;
    let settlement = Settlement {
        captures: vec![capture("a", 3), capture("b", 5), capture("c", 4)],
        release: true,
    };
    let v = store.update(&task, 1).await.unwrap();
    let (_, settled) = store
        .update_and_settle(&task, v, &settlement)
        .await
        .unwrap();
    assert_eq!((settled.captured, settled.released), (10, 0));
    assert_ledger(
        &store,
        &ann,
        &[
            ("grant", 10, 0, None),
            ("hold", 4, 0, None),
            ("capture", 3, 3, None),
            ("capture", 5, 1, None),
            (
                "capture",
                2,
                0,
                Some("2 credits not covered by the balance"),
            ),
            ("release", 0, 0, None),
        ],
        (10, 0, 0),
    )
    .await;
}

async fn a_task_stored_as_ended_releases_its_hold_whatever_the_caller_asked(db: Db) {
    let (store, ann, mut task) = held(&db, 10, 4).await;
    task.subject = Some("ann".to_string());
    task.plan = Some("gold".to_string());
    // Running, with a capture: the hold pays for it and stays open.
    task.status = Status::Running;
    let step = Settlement {
        captures: vec![capture("a", 1)],
        release: false,
    };
    let (v, settled) = store.update_and_settle(&task, 1, &step).await.unwrap();
    assert_eq!((settled.captured, settled.released), (1, 0));
    // Ended by an update that asks for no release: released all the same, once.
    task.status = Status::Completed;
    let v = store.update(&task, v).await.unwrap();
    assert_eq!(store.update(&task, v).await, Ok(v + 1));
    assert_ledger(
        &store,
        &ann,
        &[
            ("grant", 10, 0, None),
            ("hold", 4, 0, None),
            ("capture", 1, 1, None),
            ("release", 3, 0, None),
        ],
        (1, 0, 9),
    )
    .await;
}

async fn a_capture_is_charged_once_and_the_release_frees_the_rest_once(db: Db) {
    let (store, ann, task) = held(&db, 10, 4).await;
    let once = capture("a", 1);
    let end = Settlement {
        captures: vec![capture("a", 1)],
        release: true,
    };
    let a = store.charge(&task.id, &once).await.unwrap();
    let b = store.charge(&task.id, &once).await.unwrap();
    assert_eq!((a.captured, b.captured), (1, 0));
    let v = store.update(&task, 1).await.unwrap();
    let (v, ended) = store.update_and_settle(&task, v, &end).await.unwrap();
    assert_eq!((ended.captured, ended.released), (0, 3));
    let (_, again) = store.update_and_settle(&task, v, &end).await.unwrap();
    assert_eq!((again.captured, again.released), (0, 0));
    assert_ledger(
        &store,
        &ann,
        &[
            ("grant", 10, 0, None),
            ("hold", 4, 0, None),
            ("capture", 1, 1, None),
            ("release", 3, 0, None),
        ],
        (1, 0, 9),
    )
    .await;
}

async fn a_revoke_never_takes_more_than_is_available(db: Db) {
    let (store, ann, _) = held(&db, 10, 4).await;
    assert_eq!(
        store.grant(&ann, -7, None).await,
        Err(StoreError::Insufficient {
            available: 6,
            needed: 7
        })
    );
    let after = store.grant(&ann, -6, Some("refund")).await.unwrap();
    assert_eq!((after.granted, after.held, after.available()), (4, 4, 0));
    assert_eq!(store.recompute(&ann).await.unwrap(), after);
}

async fn purchases_are_saved_and_replaced(db: Db) {
    let store = db.store().await;
    let at = Utc::now();
    let mut p = store::Purchase {
        task_id: "t1".into(),
        rail: "masumi".into(),
        reference: "ref-1".into(),
        state: store::PurchaseState::Pending,
        detail: None,
        request: Some(serde_json::json!({"amount": 3})),
        service: None,
        calls: Vec::new(),
        created_at: at,
        updated_at: at,
    };
    store.save_purchase(&p).await.unwrap();
    p.state = store::PurchaseState::Locked;
    p.calls
        .push(serde_json::json!({"call": "status", "http": 200}));
    store.save_purchase(&p).await.unwrap();
    let found = store.purchases("t1").await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].state, found[0].calls.len(), &found[0].request),
        (store::PurchaseState::Locked, 1, &p.request)
    );
    assert!(store.purchases("t2").await.unwrap().is_empty());
}

async fn costs_are_appended_and_read_back_by_task_in_order(db: Db) {
    use chrono::TimeZone;
    let store = db.store().await;
    // Whole milliseconds: the table keeps times to the millisecond.
    let at = Utc.timestamp_millis_opt(1_780_000_000_123).unwrap();
    let paid = store::Cost {
        task_id: "t1".into(),
        route: "r".into(),
        at,
        rail: "x402".into(),
        state: store::CostState::Paid,
        scheme: Some("exact".into()),
        network: Some("eip155:31337".into()),
        asset: Some("0x5FbDB2315678afecb367f032d93F642f64180aa3".into()),
        pay_to: Some("0x28f5aA1a4DDCEa8Ad9cb4b4B2Ad0c87e05D1B335".into()),
        amount: Some(i64::MAX as u64),
        payer: Some("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC".into()),
        transaction: Some(format!("0x{}", "ab".repeat(32))),
        detail: None,
        required: Some("eyJ4NDAyVmVyc2lvbiI6Mn0=".into()),
        response: Some("eyJzdWNjZXNzIjp0cnVlfQ==".into()),
    };
    let refused = store::Cost {
        state: store::CostState::Refused,
        amount: None,
        payer: None,
        transaction: None,
        response: None,
        detail: Some("network eip155:8453 is not among the route's networks".into()),
        ..paid.clone()
    };
    store.save_cost(&refused).await.unwrap();
    store.save_cost(&paid).await.unwrap();
    store
        .save_cost(&store::Cost {
            task_id: "t2".into(),
            ..paid.clone()
        })
        .await
        .unwrap();
    assert_eq!(store.costs("t1").await.unwrap(), [refused, paid.clone()]);
    assert!(store.costs("t3").await.unwrap().is_empty());
    // Beyond the ledger's range: refused, nothing written.
    let too_big = store::Cost {
        task_id: "t3".into(),
        amount: Some(u64::MAX),
        ..paid
    };
    assert!(store.save_cost(&too_big).await.is_err());
    assert!(store.costs("t3").await.unwrap().is_empty());
}

/// A payment to an agent, `amount` for task `task`, on its way.
fn sending(task: &str, amount: u64) -> store::Cost {
    store::Cost {
        task_id: task.into(),
        route: "r".into(),
        at: chrono::TimeZone::timestamp_millis_opt(&Utc, 1_780_000_000_000).unwrap(),
        rail: "x402".into(),
        state: store::CostState::Sending,
        scheme: Some("exact".into()),
        network: Some("eip155:31337".into()),
        asset: None,
        pay_to: None,
        amount: Some(amount),
        payer: None,
        transaction: None,
        detail: None,
        required: None,
        response: None,
    }
}

async fn a_payment_begins_within_its_tasks_cap_and_takes_its_outcome_once(db: Db) {
    let store = db.store().await;
    let first = sending("t1", 60);
    let seq = store.begin_cost(&first, 100).await.unwrap();
    assert_eq!(
        store.costs("t1").await.unwrap(),
        std::slice::from_ref(&first)
    );
    // A row on its way counts against the cap: 60 + 50 > 100, nothing written.
    assert_eq!(
        store.begin_cost(&sending("t1", 50), 100).await,
        Err(StoreError::Insufficient {
            available: 40,
            needed: 50
        })
    );
    // Refused rows do not count; another task's cap is its own.
    store
        .save_cost(&store::Cost {
            state: store::CostState::Refused,
            ..sending("t1", 1_000)
        })
        .await
        .unwrap();
    store.begin_cost(&sending("t2", 100), 100).await.unwrap();
    let paid = store::Cost {
        state: store::CostState::Paid,
        amount: Some(55),
        transaction: Some("0xfeed".into()),
        response: Some("eyJzdWNjZXNzIjp0cnVlfQ==".into()),
        ..first.clone()
    };
    store.finish_cost(seq, &paid).await.unwrap();
    let costs = store.costs("t1").await.unwrap();
    assert_eq!(costs[0], paid);
    // Settled for less: 55 + 45 fits.
    store.begin_cost(&sending("t1", 45), 100).await.unwrap();
    // An outcome is recorded once.
    assert!(store.finish_cost(seq, &paid).await.is_err());
}

async fn a_payment_in_band_takes_its_outcome_when_its_receipt_comes(db: Db) {
    let store = db.store().await;
    let awaiting = |task: &str, amount| store::Cost {
        detail: Some(store::costs::AWAITS_RECEIPT.to_string()),
        ..sending(task, amount)
    };
    // A payment sent over HTTP, left `sending` by a stop: not one a receipt in band settles.
    let over_http = sending("t1", 10);
    let http_seq = store.begin_cost(&over_http, 100).await.unwrap();
    store.begin_cost(&awaiting("t1", 60), 100).await.unwrap();
    store.begin_cost(&awaiting("t2", 60), 100).await.unwrap();
    let settled = |amount| store::Cost {
        state: store::CostState::Paid,
        amount,
        transaction: Some("0xfeed".into()),
        detail: None,
        response: Some(r#"{"success":true}"#.into()),
        ..awaiting("t1", 0)
    };
    // The receipt names more than was signed: the signed amount stays.
    assert!(store
        .finish_task_cost("t1", &settled(Some(70)))
        .await
        .unwrap());
    let costs = store.costs("t1").await.unwrap();
    assert_eq!(costs[0], over_http);
    assert_eq!(
        costs[1],
        store::Cost {
            amount: Some(60),
            ..settled(None)
        }
    );
    // Nothing awaits its receipt on t1 any more; t2's is its own.
    assert!(!store
        .finish_task_cost("t1", &settled(Some(5)))
        .await
        .unwrap());
    // Less than signed (an `upto`): what was settled.
    assert!(store
        .finish_task_cost("t2", &settled(Some(25)))
        .await
        .unwrap());
    assert_eq!(store.costs("t2").await.unwrap()[0].amount, Some(25));
    // The HTTP payment still takes its own outcome.
    store
        .finish_cost(http_seq, &settled(Some(10)))
        .await
        .unwrap();
}

async fn the_audit_reads_open_holds_and_unstarted_tasks(db: Db) {
    let (store, ann, task) = held(&db, 10, 4).await;
    let mut started = Task::new("r", Utc::now());
    started.upstream_id = Some("up-1".into());
    store.insert(&started).await.unwrap();
    let audit = store.audit().await.unwrap();
    assert!(audit.drifts.is_empty());
    let holds: Vec<_> = audit
        .open_holds
        .iter()
        .map(|h| (h.task_id.as_str(), h.subject.as_str(), h.remaining))
        .collect();
    assert_eq!(holds, [(task.id.as_str(), "ann", 4)]);
    let unstarted: Vec<_> = audit.unstarted.iter().map(|u| u.task_id.as_str()).collect();
    assert_eq!(unstarted, [task.id.as_str()]);
    // A balance changed behind the ledger's back is a drift.
    db.execute("UPDATE accounts SET granted = 11").await;
    let drifts = store.audit().await.unwrap().drifts;
    assert_eq!(drifts.len(), 1);
    assert_eq!((drifts[0].0.granted, drifts[0].1.granted), (11, 10));
    let _ = ann;
}

async fn leases_lapse_are_taken_over_renewed_and_handed_back(db: Db) {
    let (a, b) = (db.store_as("a").await, db.store_as("b").await);
    // Nothing to claim yet (on SQLite, this first claim ends the opening sweep: see below).
    assert_eq!(b.claim_leases(10).await.unwrap(), []);
    let now = Utc::now();
    let (one, two) = (
        Task::new("r", now),
        Task::new("r", now + chrono::Duration::seconds(1)),
    );
    a.insert(&one).await.unwrap();
    a.insert(&two).await.unwrap();
    // a's leases are live: b takes nothing.
    assert_eq!(b.claim_leases(10).await.unwrap(), []);
    db.lapse(&one.id).await;
    let taken: Vec<_> = b
        .claim_leases(10)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.id, u.taken_from))
        .collect();
    assert_eq!(taken, [(one.id.clone(), Some("a".to_string()))]);
    // a learns it at its renewal: it holds `two` only.
    assert_eq!(
        a.renew_leases().await.unwrap(),
        std::slice::from_ref(&two.id)
    );
    assert_eq!(
        b.renew_leases().await.unwrap(),
        std::slice::from_ref(&one.id)
    );
    // Handed back: claimable at once, from nobody.
    assert_eq!(a.hand_back_leases().await.unwrap(), 1);
    assert_eq!(a.renew_leases().await.unwrap(), Vec::<String>::new());
    let taken: Vec<_> = b
        .claim_leases(10)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.id, u.taken_from))
        .collect();
    assert_eq!(taken, [(two.id.clone(), None)]);
    // An ended task is nobody's concern.
    let mut done = two.clone();
    done.status = Status::Completed;
    b.update(&done, 1).await.unwrap();
    assert_eq!(
        b.renew_leases().await.unwrap(),
        std::slice::from_ref(&one.id)
    );
}

/// Writes are committed in groups (both backends): a create whose id is taken fails alone, every
/// other create of its group is stored with its hold.
async fn a_duplicate_among_concurrent_creates_fails_alone(db: Db) {
    let store = db.store().await;
    let ann = Account::new("gold", "ann");
    store.grant(&ann, 100, None).await.unwrap();
    let taken = Task::new("r", Utc::now());
    store.insert(&taken).await.unwrap();
    let hold = Hold {
        plan: "gold".to_string(),
        subject: "ann".to_string(),
        amount: 1,
    };
    let creates: Vec<_> = (0..40)
        .map(|i| {
            let (store, hold) = (store.clone(), hold.clone());
            let task = if i == 20 {
                taken.clone()
            } else {
                Task::new("r", Utc::now())
            };
            tokio::spawn(async move { store.insert_with_hold(&task, Some(&hold)).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for c in creates {
        outcomes.push(c.await.unwrap());
    }
    let failed: Vec<_> = outcomes.iter().filter(|o| o.is_err()).collect();
    assert_eq!(failed, [&Err(StoreError::Duplicate(taken.id.clone()))]);
    let b = store.balance(&ann).await.unwrap();
    assert_eq!((b.held, b.available()), (39, 61));
    assert_eq!(store.recompute(&ann).await.unwrap(), b);
}

/// Of concurrent updates from one version, one wins; the others get `Conflict` and settle nothing,
/// whatever group they were committed in.
async fn a_stale_update_among_concurrent_ones_fails_alone(db: Db) {
    let (store, ann, task) = held(&db, 10, 4).await;
    let updates: Vec<_> = (0..8)
        .map(|i| {
            let (store, task) = (store.clone(), task.clone());
            tokio::spawn(async move {
                let settle = Settlement {
                    captures: vec![capture(&format!("s{i}"), 1)],
                    release: false,
                };
                store.update_and_settle(&task, 1, &settle).await
            })
        })
        .collect();
    let mut won = 0;
    for u in updates {
        match u.await.unwrap() {
            Ok((2, settled)) => {
                won += 1;
                assert_eq!(settled.captured, 1);
            }
            other => assert_eq!(other, Err(StoreError::Conflict)),
        }
    }
    assert_eq!(won, 1);
    let b = store.balance(&ann).await.unwrap();
    assert_eq!((b.captured, b.held, b.available()), (1, 3, 6));
}

/// A task on `route` holding `amount` of ann's credits (plan gold).
async fn holding(store: &Arc<dyn TaskStore>, route: &str, amount: u64) -> Task {
    let task = Task::new(route, Utc::now());
    let hold = Hold {
        plan: "gold".to_string(),
        subject: "ann".to_string(),
        amount,
    };
    store.insert_with_hold(&task, Some(&hold)).await.unwrap();
    task
}

async fn accounts_are_listed_with_their_balances_filtered_and_paged(db: Db) {
    let (store, _, task) = held(&db, 10, 4).await;
    store.charge(&task.id, &capture("a", 3)).await.unwrap();
    for (plan, subject, granted) in [
        ("gold", "bob", 5),
        ("gold", "anna", 3),
        // Bytewise, upper case sorts first.
        ("gold", "Zed", 2),
        ("silver", "ann", 7),
        ("silver", "carl", 4),
    ] {
        store
            .grant(&Account::new(plan, subject), granted, None)
            .await
            .unwrap();
    }
    store
        .grant(&Account::new("silver", "carl"), -4, None)
        .await
        .unwrap();
    // A balance without ledger rows (written behind the ledger's back) is no account to list.
    db.execute(
        "INSERT INTO accounts (plan, subject, granted, captured, held) VALUES ('gold', 'ghost', 0, 0, 0)",
    )
    .await;
    let list = |plan: Option<&str>, contains: Option<&str>, limit: u32, offset: u64| {
        let store = store.clone();
        let q = AccountQuery {
            plan: plan.map(str::to_string),
            subject_contains: contains.map(str::to_string),
            limit,
            offset,
        };
        async move { store.accounts(&q).await.unwrap() }
    };
    let (all, total) = list(None, None, 100, 0).await;
    let figures: Vec<_> = all
        .iter()
        .map(|a| {
            let b = &a.balance;
            (
                b.plan.as_str(),
                b.subject.as_str(),
                b.granted,
                b.captured,
                b.held,
                b.available(),
            )
        })
        .collect();
    assert_eq!(
        figures,
        [
            ("gold", "Zed", 2, 0, 0, 2),
            ("gold", "ann", 10, 3, 1, 6),
            ("gold", "anna", 3, 0, 0, 3),
            ("gold", "bob", 5, 0, 0, 5),
            ("silver", "ann", 7, 0, 0, 7),
            ("silver", "carl", 0, 0, 0, 0),
        ]
    );
    assert_eq!(total, 6);
    // Each as `balance` reads it, with the time of its last row.
    for a in &all {
        let account = Account::new(&a.balance.plan, &a.balance.subject);
        assert_eq!(store.balance(&account).await.unwrap(), a.balance);
        let last = store.history(&account, 1).await.unwrap();
        assert_eq!(a.last_at, last[0].at);
    }
    let names = |page: &[store::AccountSummary]| -> Vec<(String, String)> {
        page.iter()
            .map(|a| (a.balance.plan.clone(), a.balance.subject.clone()))
            .collect()
    };
    let pair = |p: &str, s: &str| (p.to_string(), s.to_string());
    let (silver, total) = list(Some("silver"), None, 100, 0).await;
    assert_eq!(
        (names(&silver), total),
        (vec![pair("silver", "ann"), pair("silver", "carl")], 2)
    );
    let (with_an, total) = list(None, Some("an"), 100, 0).await;
    assert_eq!(
        (names(&with_an), total),
        (
            vec![
                pair("gold", "ann"),
                pair("gold", "anna"),
                pair("silver", "ann")
            ],
            3
        )
    );
    let (gold_nn, total) = list(Some("gold"), Some("nn"), 100, 0).await;
    assert_eq!(
        (names(&gold_nn), total),
        (vec![pair("gold", "ann"), pair("gold", "anna")], 2)
    );
    // The subject's text as it is: case matters.
    assert_eq!(list(None, Some("ZE"), 100, 0).await.1, 0);
    // Pages of 4: the total counts them all on every page.
    let (first, total) = list(None, None, 4, 0).await;
    assert_eq!((names(&first), total), (names(&all[..4]), 6));
    let (second, total) = list(None, None, 4, 4).await;
    assert_eq!((names(&second), total), (names(&all[4..]), 6));
    let (past, total) = list(None, None, 4, 6).await;
    assert_eq!((past.len(), total), (0, 6));
    let (none, total) = list(Some("gold"), None, 0, 0).await;
    assert_eq!((none.len(), total), (0, 4));
    // More than the cap reads as the cap.
    assert_eq!(list(None, None, u32::MAX, 0).await.0.len(), 6);
}

async fn the_ledger_of_a_task_is_its_own_rows_in_the_order_written(db: Db) {
    let (store, _, task) = held(&db, 20, 4).await;
    let other = holding(&store, "r", 2).await;
    store.charge(&task.id, &capture("a", 1)).await.unwrap();
    store.charge(&other.id, &capture("a", 1)).await.unwrap();
    let end = Settlement {
        captures: vec![capture("b", 2)],
        release: true,
    };
    store.update_and_settle(&task, 1, &end).await.unwrap();
    let rows = store.ledger_of_task(&task.id).await.unwrap();
    let found: Vec<_> = rows
        .iter()
        .map(|r| (r.kind.as_str(), r.amount, r.from_hold, r.step_id.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            ("hold", 4, 0, None),
            ("capture", 1, 1, Some("a")),
            ("capture", 2, 2, Some("b")),
            ("release", 1, 0, None),
        ]
    );
    assert!(rows
        .iter()
        .all(|r| r.task_id.as_deref() == Some(task.id.as_str())
            && (r.plan.as_str(), r.subject.as_str()) == ("gold", "ann")));
    assert!(rows.windows(2).all(|w| w[0].seq < w[1].seq));
    let theirs: Vec<_> = store
        .ledger_of_task(&other.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.amount))
        .collect();
    assert_eq!(theirs, [("hold".into(), 2), ("capture".into(), 1)]);
    assert_eq!(store.ledger_of_task("no-such-task").await.unwrap(), []);
}

async fn spend_by_day_sums_captures_per_route_and_day_from_the_day_given(db: Db) {
    let store = db.store().await;
    store
        .grant(&Account::new("gold", "ann"), 100, None)
        .await
        .unwrap();
    let (a1, a2, b1) = (
        holding(&store, "alpha", 10).await,
        holding(&store, "alpha", 10).await,
        holding(&store, "beta", 10).await,
    );
    let steps = |steps: &[(&str, u64)]| Settlement {
        captures: steps.iter().map(|(s, a)| capture(s, *a)).collect(),
        release: true,
    };
    store
        .update_and_settle(&a1, 1, &steps(&[("s1", 3), ("s2", 4)]))
        .await
        .unwrap();
    store
        .update_and_settle(&a2, 1, &steps(&[("s1", 5)]))
        .await
        .unwrap();
    // An operation's fee is a capture too, charged on a task that has released its hold.
    store
        .update_and_settle(&b1, 1, &steps(&[("s1", 2)]))
        .await
        .unwrap();
    store
        .charge(&b1.id, &capture("cancel:req-1", 1))
        .await
        .unwrap();
    // The ledger's times are the clock's: move each row to its day. Every hold, release and
    // grant on a day in range, where only captures count.
    let mut moves = vec![
        "UPDATE ledger SET at = '2025-03-01T10:00:00.000Z' WHERE kind <> 'capture'".to_string(),
    ];
    for (task, step, at) in [
        (&a1, "s1", "2025-03-01T00:00:00.000Z"),
        (&a1, "s2", "2025-03-02T23:59:59.999Z"),
        (&a2, "s1", "2025-03-01T12:00:00.000Z"),
        (&b1, "s1", "2025-02-28T23:59:59.999Z"),
        (&b1, "cancel:req-1", "2025-03-02T08:00:00.000Z"),
    ] {
        moves.push(format!(
            "UPDATE ledger SET at = '{at}' WHERE task_id = '{}' AND step_id = '{step}'",
            task.id
        ));
    }
    db.execute(&moves.join(";\n")).await;
    let spend = |route: &str, day: &str, credits: i64| DaySpend {
        route: route.to_string(),
        day: day.to_string(),
        credits,
    };
    assert_eq!(
        store.spend_by_day("2025-03-01").await.unwrap(),
        [
            spend("alpha", "2025-03-01", 8),
            spend("alpha", "2025-03-02", 4),
            spend("beta", "2025-03-02", 1),
        ]
    );
    assert_eq!(
        store.spend_by_day("2025-02-28").await.unwrap()[..2],
        [
            spend("beta", "2025-02-28", 2),
            spend("alpha", "2025-03-01", 8)
        ]
    );
    assert_eq!(store.spend_by_day("2025-03-03").await.unwrap(), []);
    for not_a_day in ["2025-3-1", "2025-02-30", "2025-03-01T00:00", "yesterday"] {
        assert!(
            matches!(store.spend_by_day(not_a_day).await, Err(StoreError::Backend(ref why)) if why.contains(not_a_day)),
            "{not_a_day}"
        );
    }
}

/// A store migrated by a build before (v4) gets v5's indexes, then v6's one in their place (and
/// the tables of the versions after), its rows as they were.
async fn a_store_at_v4_upgrades_to_v6_with_the_ledgers_index(db: Db) {
    let (store, ann, task) = held(&db, 10, 4).await;
    drop(store);
    let (to_v4, count) = match db {
        Db::Sqlite(_) => (
            "PRAGMA user_version = 4",
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN",
        ),
        Db::Postgres(_) => (
            "DELETE FROM schema_migrations WHERE version >= 5",
            "SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'ledger' AND indexname IN",
        ),
    };
    let (v5, v6) = (
        format!("{count} ('ledger_by_task', 'ledger_by_kind')"),
        format!("{count} ('ledger_captures_by_time')"),
    );
    // A store at v4 had neither v6's index nor the tables of v7 (sales), v8 (costs) and v9
    // (escrow_sales).
    db.execute(&format!(
        "DROP INDEX ledger_captures_by_time; DROP TABLE sales; DROP TABLE costs;
         DROP TABLE escrow_sales; {to_v4}"
    ))
    .await;
    assert_eq!((db.number(&v5).await, db.number(&v6).await), (0, 0));
    let migrated = store::migrate(&db.location()).await.unwrap();
    assert_eq!(
        (migrated.from, migrated.to),
        (4, store::migrations::SUPPORTED)
    );
    assert_eq!((db.number(&v5).await, db.number(&v6).await), (0, 1));
    let store = db.store().await;
    let kinds: Vec<_> = store
        .ledger_of_task(&task.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.amount))
        .collect();
    assert_eq!(kinds, [("hold".into(), 4)]);
    assert_eq!(store.balance(&ann).await.unwrap().available(), 6);
}

// What only PostgreSQL does: several instances on one database.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_never_hold_more_than_the_balance() {
    let db = Db::postgres();
    holds_against_the_balance(vec![db.store_as("a").await, db.store_as("b").await]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_paying_for_one_task_at_once_stay_within_its_cap() {
    let db = Db::postgres();
    let instances = [db.store_as("a").await, db.store_as("b").await];
    // Twenty payments of 10 against a cap of 55, from both instances at once: five pass.
    let payers: Vec<_> = (0..20)
        .map(|i| {
            let store = instances[i % 2].clone();
            tokio::spawn(async move { store.begin_cost(&sending("t", 10), 55).await })
        })
        .collect();
    let mut passed = 0;
    for p in payers {
        match p.await.unwrap() {
            Ok(_) => passed += 1,
            Err(StoreError::Insufficient { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(passed, 5);
    assert_eq!(instances[0].costs("t").await.unwrap().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instances_claiming_at_once_take_each_task_once() {
    const TASKS: usize = 120;
    let db = Db::postgres();
    let gone = db.store_as("gone").await;
    let tasks: Vec<_> = (0..TASKS).map(|_| Task::new("r", Utc::now())).collect();
    gone.insert_many(&tasks).await.unwrap();
    assert_eq!(gone.hand_back_leases().await.unwrap(), TASKS as u64);
    let instances = [db.store_as("a").await, db.store_as("b").await];
    // Four claimers per instance, each claiming 7 at a time until nothing is left.
    let claimers: Vec<_> = (0..8)
        .map(|i| {
            let store = instances[i % 2].clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let claimed = store.claim_leases(7).await.unwrap();
                    if claimed.is_empty() {
                        break mine;
                    }
                    mine.extend(claimed.into_iter().map(|u| (i % 2, u.id)));
                }
            })
        })
        .collect();
    let mut claimed = Vec::new();
    for c in claimers {
        claimed.extend(c.await.unwrap());
    }
    let mut ids: Vec<_> = claimed.iter().map(|(_, id)| id.clone()).collect();
    ids.sort();
    let mut all: Vec<_> = tasks.iter().map(|t| t.id.clone()).collect();
    all.sort();
    assert_eq!(ids, all);
    // Each instance's renewal names exactly what it claimed.
    for (n, store) in instances.iter().enumerate() {
        let mut held = store.renew_leases().await.unwrap();
        held.sort();
        let mut mine: Vec<_> = claimed
            .iter()
            .filter(|(i, _)| *i == n)
            .map(|(_, id)| id.clone())
            .collect();
        mine.sort();
        assert_eq!(held, mine);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refresh_is_claimed_once_within_fresh_across_instances() {
    let db = Db::postgres();
    let (a, b) = (db.store_as("a").await, db.store_as("b").await);
    let t = Task::new("r", Utc::now());
    a.insert(&t).await.unwrap();
    let fresh = Duration::from_secs(60);
    let both = tokio::join!(a.claim_refresh(&t.id, fresh), b.claim_refresh(&t.id, fresh));
    let mut got = [both.0.unwrap(), both.1.unwrap()];
    got.sort();
    assert_eq!(got, [false, true]);
    assert!(!a.claim_refresh(&t.id, fresh).await.unwrap());
    // Once `fresh` has passed (here: nothing is fresh), the next refresh is claimed.
    assert!(b.claim_refresh(&t.id, Duration::ZERO).await.unwrap());
    assert!(!a.claim_refresh("no-such-task", fresh).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrations_are_versioned_and_a_newer_schema_is_refused() {
    let db = Db::postgres();
    let location = db.location();
    let required = store::open(&location, Leases::default(), Migrations::Require).await;
    assert_eq!(
        required.err().map(|e| e.to_string()),
        Some(format!(
            "the store's schema is at version 0, this build needs {}: run `interlingua migrate`",
            store::migrations::SUPPORTED
        ))
    );
    let first = store::migrate(&location).await.unwrap();
    assert_eq!((first.from, first.to), (0, store::migrations::SUPPORTED));
    let again = store::migrate(&location).await.unwrap();
    assert_eq!((again.from, again.to), (first.to, first.to));
    let s = store::open(&location, Leases::default(), Migrations::Require)
        .await
        .unwrap();
    assert_eq!(s.backend(), "postgres");
    s.ping().await.unwrap();
    let pool = s.pool().unwrap();
    assert_eq!((pool.max, pool.size >= 1), (32, true));
    db.execute("INSERT INTO schema_migrations (version) VALUES (99)")
        .await;
    let refused = store::open(&location, Leases::default(), Migrations::Apply).await;
    assert_eq!(
        refused.err(),
        Some(StoreError::Schema {
            found: 99,
            supported: store::migrations::SUPPORTED
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_instances_migrating_at_once_migrate_once() {
    let db = Db::postgres();
    let location = db.location();
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let location = location.clone();
            tokio::spawn(async move { store::migrate(&location).await.unwrap() })
        })
        .collect();
    let mut from = Vec::new();
    for run in runs {
        let m = run.await.unwrap();
        assert_eq!(m.to, store::migrations::SUPPORTED);
        from.push(m.from);
    }
    // Under the lock, one instance found the database empty; the others found it further along
    // (each migration is its own transaction: they may take turns). A migration applied twice
    // would have failed (its columns exist).
    assert_eq!(from.iter().filter(|v| **v == 0).count(), 1, "{from:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_whose_server_is_gone_says_so() {
    // Its own cluster: this one is stopped.
    let cluster = Postgres::start();
    let location = Location::Postgres {
        url: cluster.database("gone"),
        password: None,
        pool_max: 4,
    };
    let s = store::open(&location, Leases::default(), Migrations::Apply)
        .await
        .unwrap();
    cluster.stop();
    let deadline = Duration::from_secs(20);
    let read = tokio::time::timeout(deadline, s.get("t")).await.unwrap();
    match read {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.starts_with("PostgreSQL unreachable"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let ping = tokio::time::timeout(deadline, s.ping()).await.unwrap();
    assert!(
        matches!(ping, Err(StoreError::Unavailable(ref why)) if why.starts_with("PostgreSQL unreachable")),
        "{ping:?}"
    );
    let opened = tokio::time::timeout(
        deadline,
        store::open(&location, Leases::default(), Migrations::Apply),
    )
    .await
    .unwrap();
    assert!(
        matches!(opened, Err(StoreError::Unavailable(ref why)) if why.starts_with("PostgreSQL unreachable")),
        "{:?}",
        opened.err()
    );
}

// Both backends keep the same ledger: SQLite settles in Rust (`ledger::Plan`), PostgreSQL in the
// settlement functions of migration v4; for any sequence of charges and settlements, the rows,
// the balances and what each call reports are the same.

/// One call of a settlement script: a capture through `charge`, or an update that settles
/// captures (steps named by a small number, so that repeats happen) and maybe releases.
#[derive(Debug, Clone)]
enum Move {
    Charge(u8, u8),
    Settle(Vec<(u8, u8)>, bool),
}

fn a_move() -> impl proptest::strategy::Strategy<Value = Move> {
    use proptest::prelude::*;
    prop_oneof![
        (0u8..4, 0u8..6).prop_map(|(s, a)| Move::Charge(s, a)),
        (
            proptest::collection::vec((0u8..4, 0u8..6), 0..4),
            any::<bool>()
        )
            .prop_map(|(c, r)| Move::Settle(c, r)),
    ]
}

type Played = (
    Vec<(String, i64, i64, Option<String>, Option<String>)>,
    (i64, i64, i64),
    Vec<(u64, u64)>,
);

/// Plays the script for a subject of its own: the ledger rows (kind, amount, from_hold, step,
/// note), the balance (granted, captured, held) and each call's (captured, released).
async fn play(
    store: &Arc<dyn TaskStore>,
    subject: &str,
    task: &Task,
    (granted, held): (i64, u64),
    moves: &[Move],
) -> Played {
    let account = Account::new("gold", subject);
    store.grant(&account, granted, None).await.unwrap();
    let hold = Hold {
        plan: "gold".to_string(),
        subject: subject.to_string(),
        amount: held,
    };
    store.insert_with_hold(task, Some(&hold)).await.unwrap();
    let mut version = 1;
    let mut reports = Vec::new();
    for m in moves {
        let settled = match m {
            Move::Charge(step, amount) => store
                .charge(&task.id, &capture(&format!("s{step}"), u64::from(*amount)))
                .await
                .unwrap(),
            Move::Settle(captures, release) => {
                let settlement = Settlement {
                    captures: captures
                        .iter()
                        .map(|(s, a)| capture(&format!("s{s}"), u64::from(*a)))
                        .collect(),
                    release: *release,
                };
                let (v, settled) = store
                    .update_and_settle(task, version, &settlement)
                    .await
                    .unwrap();
                version = v;
                settled
            }
        };
        reports.push((settled.captured, settled.released));
    }
    let rows = store
        .history(&account, 1000)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|r| (r.kind, r.amount, r.from_hold, r.step_id, r.note))
        .collect();
    let b = store.balance(&account).await.unwrap();
    assert_eq!(store.recompute(&account).await.unwrap(), b);
    (rows, (b.granted, b.captured, b.held), reports)
}

#[test]
fn both_backends_settle_any_script_alike() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (sqlite_db, postgres_db) = (Db::sqlite(), Db::postgres());
    let stores = rt.block_on(async { (sqlite_db.store().await, postgres_db.store().await) });
    let case = AtomicUsize::new(0);
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(granted in 0i64..12, held in 0u64..8, moves in proptest::collection::vec(a_move(), 0..8))| {
        let subject = format!("case{}", case.fetch_add(1, Ordering::Relaxed));
        let held = held.min(granted.max(0) as u64);
        let task = Task::new("r", Utc::now());
        let (on_sqlite, on_postgres) = rt.block_on(async {
            (
                play(&stores.0, &subject, &task, (granted, held), &moves).await,
                play(&stores.1, &subject, &task, (granted, held), &moves).await,
            )
        });
        prop_assert_eq!(on_sqlite, on_postgres);
    });
}

/// A sale: opened once (its grant with it), moved on only from the state it was read in (one
/// settler wins), what was not settled revoked with the move, listed while open.
async fn a_sale_opens_once_and_moves_only_from_the_state_it_was_read_in(db: Db) {
    use store::{Sale, SaleState};
    let store = db.store().await;
    let now = Utc::now();
    let task = Task::new("r", now);
    let mut sale = Sale {
        reference: "eip155:1:0xpayer:0x01".to_string(),
        rail: "x402".to_string(),
        task_id: task.id.clone(),
        plan: "x402:0xtoken".to_string(),
        subject: "eip155:1:0xpayer".to_string(),
        state: SaleState::Authorised,
        scheme: "upto".to_string(),
        network: "eip155:1".to_string(),
        asset: "0xtoken".to_string(),
        payer: "0xpayer".to_string(),
        authorised: 100,
        settled: None,
        transaction: None,
        deadline: now,
        detail: None,
        payload: serde_json::json!({"x402Version": 2}),
        requirements: serde_json::json!({"amount": "100"}),
        calls: Vec::new(),
        created_at: now,
        updated_at: now,
    };
    let account = sale.account();
    store.open_sale(&sale).await.unwrap();
    assert!(matches!(
        store.open_sale(&sale).await,
        Err(StoreError::Duplicate(_))
    ));
    assert_eq!(store.balance(&account).await.unwrap().granted, 100);
    assert_eq!(store.open_sales().await.unwrap().len(), 1);

    sale.state = SaleState::Settling;
    sale.settled = Some(30);
    assert!(store
        .save_sale(&sale, SaleState::Authorised, 0)
        .await
        .unwrap());
    // A second settler read it authorised too: it does not get to move it.
    assert!(!store
        .save_sale(&sale, SaleState::Authorised, 0)
        .await
        .unwrap());
    sale.state = SaleState::Settled;
    sale.transaction = Some("0xfeed".to_string());
    assert!(store
        .save_sale(&sale, SaleState::Settling, 70)
        .await
        .unwrap());
    let b = store.balance(&account).await.unwrap();
    assert_eq!(
        (b.granted, b.captured, b.held),
        (30, 0, 0),
        "70 of 100 revoked"
    );
    let found = store.sale(&sale.reference).await.unwrap().unwrap();
    assert_eq!(found, sale);
    assert_eq!(store.sales(&task.id).await.unwrap(), vec![sale]);
    assert!(store.open_sales().await.unwrap().is_empty());
    assert!(store.unsettled_sales().await.unwrap().is_empty());
}

/// A sale of `task` as a start records it, before the node is asked: the buyer's identifier
/// `client_ref`, due at once.
fn escrow_sale(task: &Task, client_ref: &str) -> EscrowSale {
    EscrowSale {
        task_id: task.id.clone(),
        route: task.route.clone(),
        rail: "masumi".to_string(),
        reference: None,
        client_ref: client_ref.to_string(),
        input_hash: "ab".repeat(32),
        state: EscrowState::Requesting,
        due: task.created_at,
        detail: None,
        request: Some(serde_json::json!({"identifierFromPurchaser": client_ref})),
        service: None,
        plan: None,
        subject: None,
        amount: None,
        result_hash: None,
        calls: Vec::new(),
        created_at: task.created_at,
        updated_at: task.created_at,
    }
}

/// Moves a stored `sale` (requesting) through the node's answer to its buyer's lock of `amount`
/// from `buyer`'s wallet; the sale as stored then.
async fn lock_escrow(
    store: &Arc<dyn TaskStore>,
    sale: &EscrowSale,
    buyer: &str,
    amount: u64,
) -> EscrowSale {
    let requested = EscrowSale {
        state: EscrowState::Requested,
        reference: Some(format!("bc-{}", sale.client_ref)),
        service: Some(serde_json::json!({"onChainState": null})),
        ..sale.clone()
    };
    let moved = store
        .save_escrow_sale(&requested, EscrowState::Requesting, &EscrowMove::None)
        .await;
    assert_eq!(moved, Ok(true));
    let locked = EscrowSale {
        state: EscrowState::Locked,
        plan: Some("masumi:lovelace".to_string()),
        subject: Some(format!("preprod:{buyer}")),
        amount: Some(amount),
        service: Some(serde_json::json!({"onChainState": "FundsLocked"})),
        ..requested
    };
    let lock = EscrowMove::Lock {
        account: locked.account().unwrap(),
        amount,
    };
    let moved = store
        .save_escrow_sale(&locked, EscrowState::Requested, &lock)
        .await;
    assert_eq!(moved, Ok(true));
    locked
}

/// The kinds and amounts of a task's ledger rows, in the order written.
async fn task_rows(store: &Arc<dyn TaskStore>, task_id: &str) -> Vec<(String, i64)> {
    store
        .ledger_of_task(task_id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.amount))
        .collect()
}

async fn an_escrow_sale_sent_again_while_it_waits_for_its_lock_is_the_same_job(db: Db) {
    let store = db.store().await;
    let first = Task::new("sell", Utc::now());
    let sale = escrow_sale(&first, "aabbccddeeff0011");
    assert_eq!(store.open_escrow_sale(&first, &sale).await, Ok(None));
    assert_eq!(store.escrow_sale(&first.id).await, Ok(Some(sale.clone())));
    assert_eq!(store.get(&first.id).await.unwrap().unwrap().task, first);

    // The same route, identifier and input hash while the first waits: the first, nothing stored.
    let again = Task::new("sell", Utc::now());
    let twin = escrow_sale(&again, "aabbccddeeff0011");
    assert_eq!(
        store.open_escrow_sale(&again, &twin).await,
        Ok(Some(sale.clone()))
    );
    assert_eq!(store.get(&again.id).await, Ok(None));
    assert_eq!(store.escrow_sale(&again.id).await, Ok(None));
    // Another input, or another route, is another job.
    let other_input = Task::new("sell", Utc::now());
    let other = EscrowSale {
        input_hash: "cd".repeat(32),
        ..escrow_sale(&other_input, "aabbccddeeff0011")
    };
    assert_eq!(store.open_escrow_sale(&other_input, &other).await, Ok(None));
    let other_route = Task::new("sell-too", Utc::now());
    let other = escrow_sale(&other_route, "aabbccddeeff0011");
    assert_eq!(store.open_escrow_sale(&other_route, &other).await, Ok(None));

    // Still the same job once the node made the payment request...
    let requested = EscrowSale {
        state: EscrowState::Requested,
        ..sale.clone()
    };
    let moved = store
        .save_escrow_sale(&requested, EscrowState::Requesting, &EscrowMove::None)
        .await;
    assert_eq!(moved, Ok(true));
    assert_eq!(
        store.open_escrow_sale(&again, &twin).await,
        Ok(Some(requested.clone()))
    );
    // ...and a new one once its buyer locked funds.
    let locked = EscrowSale {
        state: EscrowState::Locked,
        plan: Some("masumi:lovelace".to_string()),
        subject: Some("preprod:buyer".to_string()),
        amount: Some(5),
        ..requested
    };
    let lock = EscrowMove::Lock {
        account: locked.account().unwrap(),
        amount: 5,
    };
    let moved = store
        .save_escrow_sale(&locked, EscrowState::Requested, &lock)
        .await;
    assert_eq!(moved, Ok(true));
    assert_eq!(store.open_escrow_sale(&again, &twin).await, Ok(None));
    assert_eq!(store.get(&again.id).await.unwrap().unwrap().task, again);
    assert_eq!(store.escrow_sale(&again.id).await, Ok(Some(twin)));

    // A task's id is taken once: nothing written.
    let taken = escrow_sale(&first, "0011223344556677");
    assert_eq!(
        store.open_escrow_sale(&first, &taken).await,
        Err(StoreError::Duplicate(first.id.clone()))
    );
    assert_eq!(store.escrow_sale(&first.id).await, Ok(Some(locked)));
    // A sale that is not the task's is refused.
    let elsewhere = Task::new("sell", Utc::now());
    assert!(matches!(
        store.open_escrow_sale(&elsewhere, &taken).await,
        Err(StoreError::Backend(_))
    ));
    assert_eq!(store.get(&elsewhere.id).await, Ok(None));
}

async fn twin_escrow_sales_opened_at_once_store_one_task_and_one_sale(db: Db) {
    let store = db.store().await;
    let tasks: Vec<Task> = (0..8).map(|_| Task::new("sell", Utc::now())).collect();
    let opens: Vec<_> = tasks
        .iter()
        .map(|task| {
            let (store, task) = (store.clone(), task.clone());
            tokio::spawn(async move {
                let sale = escrow_sale(&task, "aabbccddeeff0011");
                store.open_escrow_sale(&task, &sale).await.unwrap()
            })
        })
        .collect();
    let mut opened = Vec::new();
    for open in opens {
        opened.push(open.await.unwrap());
    }
    let stored: Vec<&Task> = {
        let mut stored = Vec::new();
        for task in &tasks {
            if store.get(&task.id).await.unwrap().is_some() {
                stored.push(task);
            }
        }
        stored
    };
    assert_eq!(stored.len(), 1, "one task stored");
    let sale = store.escrow_sale(&stored[0].id).await.unwrap().unwrap();
    // The one that stored it heard `None`; every other start, that sale.
    assert_eq!(opened.iter().filter(|o| o.is_none()).count(), 1);
    assert!(opened.iter().flatten().all(|twin| *twin == sale));
    assert_eq!(store.escrow_sales(false, 100).await.unwrap(), [sale]);
}

async fn an_escrow_sale_moves_only_from_the_state_it_was_read_in_and_as_its_money_fits(db: Db) {
    let store = db.store().await;
    let task = Task::new("sell", Utc::now());
    let sale = escrow_sale(&task, "aabbccddeeff0011");
    store.open_escrow_sale(&task, &sale).await.unwrap();
    let locked = EscrowSale {
        state: EscrowState::Locked,
        plan: Some("masumi:lovelace".to_string()),
        subject: Some("preprod:buyer".to_string()),
        amount: Some(10),
        ..sale.clone()
    };
    let account = locked.account().unwrap();
    let lock = EscrowMove::Lock {
        account: account.clone(),
        amount: 10,
    };
    // Read as requested, but it is requesting: nothing written, nothing granted.
    let moved = store
        .save_escrow_sale(&locked, EscrowState::Requested, &lock)
        .await;
    assert_eq!(moved, Ok(false));
    assert_eq!(store.escrow_sale(&task.id).await, Ok(Some(sale.clone())));
    assert_eq!(store.balance(&account).await.unwrap().granted, 0);
    // Money that does not fit the move: refused, nothing written.
    let misfits = [
        (
            EscrowMove::Lock {
                account: Account::new("masumi:lovelace", "preprod:someone-else"),
                amount: 10,
            },
            locked.clone(),
        ),
        (
            EscrowMove::Lock {
                account: account.clone(),
                amount: 11,
            },
            locked.clone(),
        ),
        (
            lock.clone(),
            EscrowSale {
                state: EscrowState::Submitted,
                ..locked.clone()
            },
        ),
        (
            EscrowMove::Close { captured: 10 },
            EscrowSale {
                state: EscrowState::Withdrawn,
                ..locked.clone()
            },
        ),
        // Locked without its grant.
        (EscrowMove::None, locked.clone()),
    ];
    for (money, to) in misfits {
        let refused = store
            .save_escrow_sale(&to, EscrowState::Requesting, &money)
            .await;
        assert!(matches!(refused, Err(StoreError::Backend(_))), "{money:?}");
    }
    assert_eq!(store.escrow_sale(&task.id).await, Ok(Some(sale)));
    let moved = store
        .save_escrow_sale(&locked, EscrowState::Requesting, &lock)
        .await;
    assert_eq!(moved, Ok(true));
    // Locked once: a second lock read in the state before is not written, nor granted again.
    let moved = store
        .save_escrow_sale(&locked, EscrowState::Requesting, &lock)
        .await;
    assert_eq!(moved, Ok(false));
    let b = store.balance(&account).await.unwrap();
    assert_eq!((b.granted, b.held), (10, 10));
    // A close withdrawing more than was locked, or to a state that is not final, a final state
    // without a close, a way back: refused.
    let withdrawn = EscrowSale {
        state: EscrowState::Withdrawn,
        ..locked.clone()
    };
    let requested = EscrowSale {
        state: EscrowState::Requested,
        ..locked.clone()
    };
    for (money, to) in [
        (EscrowMove::Close { captured: 11 }, withdrawn.clone()),
        (EscrowMove::Close { captured: 10 }, locked.clone()),
        (EscrowMove::None, withdrawn),
        (EscrowMove::None, requested),
    ] {
        let refused = store
            .save_escrow_sale(&to, EscrowState::Locked, &money)
            .await;
        assert!(matches!(refused, Err(StoreError::Backend(_))), "{money:?}");
    }
    assert_eq!(store.escrow_sale(&task.id).await, Ok(Some(locked)));
    assert_eq!(task_rows(&store, &task.id).await, [("hold".into(), 10)]);
}

async fn an_escrow_sale_withdrawn_after_its_task_ended_is_captured_from_the_balance_once(db: Db) {
    let store = db.store().await;
    let mut task = Task::new("sell", Utc::now());
    let sale = escrow_sale(&task, "aabbccddeeff0011");
    store.open_escrow_sale(&task, &sale).await.unwrap();
    let locked = lock_escrow(&store, &sale, "buyer", 100).await;
    let account = locked.account().unwrap();
    // The job runs and ends: the store releases its hold, as for every task.
    task.status = Status::Completed;
    let (_, settled) = store
        .update_and_settle(&task, 1, &Settlement::default())
        .await
        .unwrap();
    assert_eq!(settled.released, 100);
    let submitted = EscrowSale {
        state: EscrowState::Submitted,
        result_hash: Some("cd".repeat(32)),
        ..locked
    };
    let moved = store
        .save_escrow_sale(&submitted, EscrowState::Locked, &EscrowMove::None)
        .await;
    assert_eq!(moved, Ok(true));
    // Hours later, the chain's verdict: the seller withdrew it all.
    let withdrawn = EscrowSale {
        state: EscrowState::Withdrawn,
        ..submitted
    };
    let close = EscrowMove::Close { captured: 100 };
    let moved = store
        .save_escrow_sale(&withdrawn, EscrowState::Submitted, &close)
        .await;
    assert_eq!(moved, Ok(true));
    // Seen twice (two sweeps, two instances): closed once.
    let moved = store
        .save_escrow_sale(&withdrawn, EscrowState::Submitted, &close)
        .await;
    assert_eq!(moved, Ok(false));
    assert_eq!(
        task_rows(&store, &task.id).await,
        [
            ("hold".into(), 100),
            ("release".into(), 100),
            ("capture".into(), 100)
        ]
    );
    let capture = store.ledger_of_task(&task.id).await.unwrap().pop().unwrap();
    assert_eq!(
        (capture.step_id.as_deref(), capture.from_hold),
        (Some("masumi:withdrawn"), 0)
    );
    assert_ledger(
        &store,
        &account,
        &[
            ("grant", 100, 0, Some("masumi locked bc-aabbccddeeff0011")),
            ("hold", 100, 0, None),
            ("release", 100, 0, None),
            ("capture", 100, 0, None),
        ],
        (100, 0, 0),
    )
    .await;
    assert_eq!(store.balance(&account).await.unwrap().granted, 100);
    assert_eq!(store.escrow_sale(&task.id).await, Ok(Some(withdrawn)));
}

async fn an_escrow_sale_closed_while_its_task_runs_takes_from_the_hold_and_revokes_the_rest(
    db: Db,
) {
    let store = db.store().await;
    // Refunded: nothing captured, the hold released, the grant revoked.
    let refunded_task = Task::new("sell", Utc::now());
    let sale = escrow_sale(&refunded_task, "aabbccddeeff0011");
    store.open_escrow_sale(&refunded_task, &sale).await.unwrap();
    let locked = lock_escrow(&store, &sale, "ann", 100).await;
    let refunded = EscrowSale {
        state: EscrowState::Refunded,
        ..locked.clone()
    };
    let moved = store
        .save_escrow_sale(
            &refunded,
            EscrowState::Locked,
            &EscrowMove::Close { captured: 0 },
        )
        .await;
    assert_eq!(moved, Ok(true));
    assert_ledger(
        &store,
        &locked.account().unwrap(),
        &[
            ("grant", 100, 0, Some("masumi locked bc-aabbccddeeff0011")),
            ("hold", 100, 0, None),
            ("release", 100, 0, None),
            (
                "revoke",
                100,
                0,
                Some("masumi refunded bc-aabbccddeeff0011"),
            ),
        ],
        (0, 0, 0),
    )
    .await;
    assert_eq!(
        store
            .balance(&locked.account().unwrap())
            .await
            .unwrap()
            .granted,
        0
    );
    // Split: what the seller withdrew comes out of the hold, the rest goes back.
    let split_task = Task::new("sell", Utc::now());
    let sale = escrow_sale(&split_task, "0011223344556677");
    store.open_escrow_sale(&split_task, &sale).await.unwrap();
    let locked = lock_escrow(&store, &sale, "bob", 100).await;
    let split = EscrowSale {
        state: EscrowState::Split,
        ..locked.clone()
    };
    let moved = store
        .save_escrow_sale(
            &split,
            EscrowState::Locked,
            &EscrowMove::Close { captured: 60 },
        )
        .await;
    assert_eq!(moved, Ok(true));
    assert_ledger(
        &store,
        &locked.account().unwrap(),
        &[
            ("grant", 100, 0, Some("masumi locked bc-0011223344556677")),
            ("hold", 100, 0, None),
            ("capture", 60, 60, None),
            ("release", 40, 0, None),
            ("revoke", 40, 0, Some("masumi refunded bc-0011223344556677")),
        ],
        (60, 0, 0),
    )
    .await;
}

async fn escrow_sales_due_are_the_open_ones_soonest_first_and_the_list_is_newest_first(db: Db) {
    use chrono::TimeDelta;
    let store = db.store().await;
    let now = Utc::now();
    // Created a second apart, oldest first; due in the order c, a, then b (not yet), d final.
    let mut sales = Vec::new();
    for (i, due) in [-2, 5, -3, -10].into_iter().enumerate() {
        let task = Task::new("sell", now + TimeDelta::seconds(i as i64 - 10));
        let sale = EscrowSale {
            due: now + TimeDelta::seconds(due),
            ..escrow_sale(&task, &format!("aabbccddeeff00{i:02}"))
        };
        assert_eq!(store.open_escrow_sale(&task, &sale).await, Ok(None));
        sales.push(sale);
    }
    let refused = EscrowSale {
        state: EscrowState::Refused,
        detail: Some("the node refused the payment request".to_string()),
        ..sales[3].clone()
    };
    let moved = store
        .save_escrow_sale(&refused, EscrowState::Requesting, &EscrowMove::None)
        .await;
    assert_eq!(moved, Ok(true));
    let (a, b, c) = (sales[0].clone(), sales[1].clone(), sales[2].clone());
    assert_eq!(
        store.escrow_sales_due(now, 10).await.unwrap(),
        [c.clone(), a.clone()]
    );
    assert_eq!(
        store.escrow_sales_due(now, 1).await.unwrap(),
        std::slice::from_ref(&c)
    );
    assert_eq!(
        store
            .escrow_sales_due(now + TimeDelta::seconds(5), 10)
            .await
            .unwrap(),
        [c.clone(), a.clone(), b.clone()]
    );
    // Due at the same instant, to the nanosecond: due.
    assert_eq!(
        store.escrow_sales_due(a.due, 10).await.unwrap(),
        [c.clone(), a.clone()]
    );
    assert_eq!(
        store.escrow_sales(false, 10).await.unwrap(),
        [refused, c.clone(), b.clone(), a.clone()]
    );
    assert_eq!(
        store.escrow_sales(true, 10).await.unwrap(),
        [c.clone(), b, a]
    );
    assert_eq!(store.escrow_sales(true, 1).await.unwrap(), [c]);
}
