//! A store made by the release before versioned migrations opens and is upgraded; a store made
//! by a newer interlingua is refused.

use rusqlite::Connection;
use store::migrations::SUPPORTED;
use store::{Account, Leases, Migrations, SqliteStore, StoreError, TaskQuery, TaskStore};

/// A copy of the fixture's data directory (written at the commit before migrations: three tasks,
/// `task-a` holding 4 credits of ann's 10 and having captured 3 of them).
fn release_0() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/release-0/interlingua.db");
    std::fs::copy(from, dir.path().join("interlingua.db")).unwrap();
    dir
}

fn user_version(dir: &std::path::Path) -> u32 {
    Connection::open(dir.join("interlingua.db"))
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_store_made_by_the_release_before_opens_and_upgrades() {
    let dir = release_0();
    assert_eq!(user_version(dir.path()), 0);
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), SUPPORTED);
    assert_eq!(SUPPORTED, 9);
    let a = store.get("task-a").await.unwrap().unwrap();
    assert_eq!(
        (a.version, a.task.conversation.as_deref()),
        (2, Some("conv-1"))
    );
    let balance = store.balance(&Account::new("gold", "ann")).await.unwrap();
    assert_eq!(
        (
            balance.granted,
            balance.captured,
            balance.held,
            balance.available()
        ),
        (10, 3, 1, 6)
    );
    assert_eq!(
        store.recompute(&Account::new("gold", "ann")).await.unwrap(),
        balance
    );
    // Through the column v2 filled from the documents.
    let (found, total) = store
        .search(&TaskQuery {
            conversation: Some("conv-1".into()),
            page: 1,
            page_size: 10,
            ..TaskQuery::default()
        })
        .await
        .unwrap();
    let ids: Vec<_> = found.iter().map(|t| t.id.as_str()).collect();
    assert_eq!((ids, total), (vec!["task-c", "task-a"], 2));
    let column: Option<String> = Connection::open(dir.path().join("interlingua.db"))
        .unwrap()
        .query_row(
            "SELECT conversation FROM tasks WHERE id = 'task-b'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(column.as_deref(), Some("conv-2"));
    // The tasks from before leases are nobody's: the first claim takes both unfinished ones.
    let claimed: Vec<_> = store
        .claim_leases(10)
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.id, u.started, u.taken_from))
        .collect();
    assert_eq!(
        claimed,
        [
            ("task-a".into(), true, None),
            ("task-c".into(), false, None)
        ]
    );
    // Through v6's keys and index: the task's rows, and its route's spend on the fixture's day.
    let rows: Vec<_> = store
        .ledger_of_task("task-a")
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.amount))
        .collect();
    assert_eq!(rows, [("hold".into(), 4), ("capture".into(), 3)]);
    let spend: Vec<_> = store
        .spend_by_day("2026-11-25")
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.route, d.day, d.credits))
        .collect();
    assert_eq!(spend, [("r".into(), "2026-11-25".into(), 3)]);
    // v9's table, empty.
    assert_eq!(store.escrow_sales(false, 10).await.unwrap(), []);
    drop(store);
    // Opening again changes nothing.
    SqliteStore::open(dir.path()).unwrap();
    assert_eq!(user_version(dir.path()), SUPPORTED);
}

#[tokio::test]
async fn a_store_behind_is_refused_when_migrations_are_required() {
    let dir = release_0();
    let refused = SqliteStore::open_in(dir.path(), Leases::default(), Migrations::Require);
    assert_eq!(
        refused.err(),
        Some(StoreError::Outdated {
            found: 0,
            supported: SUPPORTED
        })
    );
    assert_eq!(user_version(dir.path()), 0);
}

#[tokio::test]
async fn a_store_from_a_newer_interlingua_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    Connection::open(dir.path().join("interlingua.db"))
        .unwrap()
        .execute_batch(&format!("PRAGMA user_version = {}", SUPPORTED + 1))
        .unwrap();
    let refused = SqliteStore::open(dir.path()).err().unwrap();
    assert_eq!(
        refused,
        StoreError::Schema {
            found: SUPPORTED + 1,
            supported: SUPPORTED
        }
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "the store's schema is at version {}, newer than this build of interlingua knows ({SUPPORTED}): upgrade interlingua to use it",
            SUPPORTED + 1
        )
    );
}
