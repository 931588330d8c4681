//! The schema's versions, one numbered migration after another, for each backend.
//!
//! A store records the last migration applied (SQLite: `PRAGMA user_version`; PostgreSQL: the
//! `schema_migrations` table) and opening it applies those after it, each in its own
//! transaction ([`Migrations::Apply`]), or refuses a store that is behind
//! ([`Migrations::Require`]). A store at a version this build does not know was written by a
//! newer interlingua and is refused ([`StoreError::Schema`]): this build cannot know what the
//! newer one expects of its rows.
//!
//! v1 is the schema as it was before versions (every statement `IF NOT EXISTS`, so a store made
//! then, at user_version 0, becomes v1 unchanged); v2 the conversation column (and its index)
//! that a conversation's lookup reads instead of the document; v3 leases and refresh claims
//! (several instances on one store); v4 PostgreSQL's settlement functions (nothing on SQLite,
//! whose writer runs the same plan in Rust); v5 the ledger's indexes by task and by kind and
//! time (the operator's console: a task's rows, the spend per route and day); v6 those two
//! replaced by one on the captures' time alone (every create writes three ledger rows, and
//! each index cost each row an insert: bench/README.md, "Where the CPU went"); v7 the sales
//! table (payments clients made on a rail of their own, x402); v8 the costs table (what
//! interlingua paid agents on their rails, x402); v9 the escrow sales table (jobs interlingua
//! sold as the seller on an escrow rail, Masumi).

use rusqlite::Connection;

use crate::error::{backend, StoreError};

/// What opening a store does with migrations it lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Migrations {
    /// Applies them (the default).
    #[default]
    Apply,
    /// Refuses the store ([`StoreError::Outdated`]): `interlingua migrate` applies them.
    Require,
}

/// What a migration run did: the version found and the version left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    pub from: u32,
    pub to: u32,
}

/// Migration `n` (1-based) for a backend. The statements are written once, with the types that
/// differ between the backends as placeholders (`{bigint}`, `{bool}`, …), so both backends get
/// the same tables and keys.
fn migration(backend: Backend, n: u32) -> String {
    let template = match (n, backend) {
        (1, _) => V1,
        (2, Backend::Sqlite) => V2_SQLITE,
        (2, Backend::Postgres) => V2_POSTGRES,
        (3, _) => V3,
        (4, Backend::Sqlite) => "",
        (4, Backend::Postgres) => V4_POSTGRES,
        (5, _) => V5,
        (6, _) => V6,
        (7, _) => V7,
        (8, _) => V8,
        (_, _) => V9,
    };
    let types: [(&str, &str); 5] = match backend {
        Backend::Sqlite => [
            ("{bigint}", "INTEGER"),
            ("{bool}", "INTEGER"),
            ("{seq}", "INTEGER PRIMARY KEY AUTOINCREMENT"),
            ("{not_terminal}", "terminal = 0"),
            // Milliseconds since the epoch, by the one process's clock.
            ("{time}", "INTEGER"),
        ],
        Backend::Postgres => [
            ("{bigint}", "BIGINT"),
            ("{bool}", "BOOLEAN"),
            ("{seq}", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
            ("{not_terminal}", "NOT terminal"),
            // The database's clock, so instances whose clocks disagree still agree on leases.
            ("{time}", "TIMESTAMPTZ"),
        ],
    };
    types.iter().fold(template.to_string(), |sql, (from, to)| {
        sql.replace(from, to)
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// v1: the schema before versions.
const V1: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    id          TEXT PRIMARY KEY,
    route       TEXT NOT NULL,
    subject     TEXT,
    status      TEXT NOT NULL,
    name        TEXT,
    upstream_id TEXT,
    terminal    {bool} NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    version     {bigint} NOT NULL,
    doc         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_unfinished ON tasks (created_at) WHERE {not_terminal};
CREATE INDEX IF NOT EXISTS tasks_by_route ON tasks (route, subject, created_at);

CREATE TABLE IF NOT EXISTS accounts (
    plan     TEXT NOT NULL,
    subject  TEXT NOT NULL,
    granted  {bigint} NOT NULL DEFAULT 0,
    captured {bigint} NOT NULL DEFAULT 0,
    held     {bigint} NOT NULL DEFAULT 0,
    PRIMARY KEY (plan, subject)
);
CREATE TABLE IF NOT EXISTS holds (
    task_id   TEXT PRIMARY KEY,
    plan      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    amount    {bigint} NOT NULL,
    remaining {bigint} NOT NULL,
    open      {bool} NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    seq       {seq},
    at        TEXT NOT NULL,
    plan      TEXT NOT NULL,
    subject   TEXT NOT NULL,
    kind      TEXT NOT NULL,
    amount    {bigint} NOT NULL,
    from_hold {bigint} NOT NULL DEFAULT 0,
    task_id   TEXT,
    step_id   TEXT,
    note      TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS ledger_hold_once ON ledger (task_id) WHERE kind = 'hold';
CREATE UNIQUE INDEX IF NOT EXISTS ledger_capture_once ON ledger (task_id, step_id) WHERE kind = 'capture';
CREATE UNIQUE INDEX IF NOT EXISTS ledger_release_once ON ledger (task_id) WHERE kind = 'release';
CREATE INDEX IF NOT EXISTS ledger_by_account ON ledger (plan, subject, seq);

-- The documents of tasks that could not be read, as they were when the task was ended.
CREATE TABLE IF NOT EXISTS unreadable_tasks (
    task_id TEXT PRIMARY KEY,
    at      TEXT NOT NULL,
    error   TEXT NOT NULL,
    doc     TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS purchases (
    task_id    TEXT PRIMARY KEY,
    rail       TEXT NOT NULL,
    reference  TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    doc        TEXT NOT NULL
);
";

/// v2: the conversation as a column. A document that is not JSON keeps NULL (it is ended when
/// read, and an ended task is no conversation's current one).
const V2_SQLITE: &str = "
ALTER TABLE tasks ADD COLUMN conversation TEXT;
UPDATE tasks SET conversation = json_extract(doc, '$.conversation') WHERE json_valid(doc);
CREATE INDEX tasks_by_conversation ON tasks (conversation, created_at)
    WHERE conversation IS NOT NULL;
";

/// v2 on PostgreSQL, whose stores begin with this release: v1 and v2 are applied together, the
/// table is empty here, and the backfill is for the record.
const V2_POSTGRES: &str = "
ALTER TABLE tasks ADD COLUMN conversation TEXT;
UPDATE tasks SET conversation = doc::jsonb ->> 'conversation';
CREATE INDEX tasks_by_conversation ON tasks (conversation, created_at)
    WHERE conversation IS NOT NULL;
";

/// v3: leases (the holder, and until when) and the last refresh's begin. The index serves the
/// claim of unfinished tasks whose lease ran out.
const V3: &str = "
ALTER TABLE tasks ADD COLUMN lease_holder TEXT;
ALTER TABLE tasks ADD COLUMN lease_until {time};
ALTER TABLE tasks ADD COLUMN refreshed_at {time};
CREATE INDEX tasks_lease ON tasks (lease_until, created_at) WHERE {not_terminal};
";

/// v4 on PostgreSQL: a settlement, and a task's update with its settlement, as one statement each
/// (the writer sends a batch of them at once).
const V4_POSTGRES: &str = include_str!("postgres/settle.sql");

/// v5: the ledger by task (a task's rows, in the order written; the unique keys on `task_id` are
/// partial, one per kind, so none serves every row of a task) and by kind and time (the
/// captures of a range of days). Grants and revokes have no task: the first index leaves them
/// out. On PostgreSQL the indexes are built in the migration's transaction, which holds writes
/// to the ledger until it commits: on a large ledger, run `interlingua migrate` before the
/// instances are upgraded.
const V5: &str = "
CREATE INDEX ledger_by_task ON ledger (task_id, seq) WHERE task_id IS NOT NULL;
CREATE INDEX ledger_by_kind ON ledger (kind, at);
";

/// v6: the ledger keeps one index for the console instead of two. A task's rows are read
/// through the unique keys each kind a task's rows have already carries (`ledger_hold_once`,
/// `ledger_capture_once`, `ledger_release_once`: [`crate::ledger::TASK_KINDS`]), so the index
/// by task goes; the spend per day reads captures only, so the index by kind and time becomes
/// one on the captures' time. A hold and a release no longer touch any index of v5, a capture
/// one instead of two.
const V6: &str = "
DROP INDEX IF EXISTS ledger_by_task;
DROP INDEX IF EXISTS ledger_by_kind;
CREATE INDEX ledger_captures_by_time ON ledger (at) WHERE kind = 'capture';
";

/// v7: sales, what clients paid on a rail of their own (x402), keyed by the payment itself so
/// that one payment is one sale however often it is presented; found by task, and the open
/// ones (to settle at their deadline, or after a crash) by state.
const V7: &str = "
CREATE TABLE sales (
    reference  TEXT PRIMARY KEY,
    task_id    TEXT NOT NULL,
    rail       TEXT NOT NULL,
    state      TEXT NOT NULL,
    deadline   TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    doc        TEXT NOT NULL
);
CREATE INDEX sales_by_task ON sales (task_id);
CREATE INDEX sales_open ON sales (deadline) WHERE state IN ('authorised', 'settling');
";

/// v8: costs, what interlingua paid agents (or refused to pay them) on the agents' own rails:
/// rows appended, never changed, read by task (a task's margin, its cap on what it may spend).
/// Columns, not a document: an operator sums them in SQL.
const V8: &str = "
CREATE TABLE costs (
    seq              {seq},
    task_id          TEXT NOT NULL,
    route            TEXT NOT NULL,
    at               TEXT NOT NULL,
    rail             TEXT NOT NULL,
    state            TEXT NOT NULL,
    scheme           TEXT,
    network          TEXT,
    asset            TEXT,
    pay_to           TEXT,
    amount           {bigint},
    payer            TEXT,
    transaction_hash TEXT,
    detail           TEXT,
    required         TEXT,
    response         TEXT
);
CREATE INDEX costs_by_task ON costs (task_id, seq);
";

/// v9: escrow sales, the jobs interlingua sold as the seller on an escrow rail (Masumi), one per
/// task, living on after it (the chain decides hours later). A start sent again while its sale
/// waits for the buyer's lock is the same job: at most one such sale per route, buyer's
/// identifier and input hash (`escrow_sales_retry`, which also makes a concurrent twin insert
/// nothing). The sweep reads the open sales by when they are due; the states are
/// [`crate::EscrowState`]'s names, and the queries repeat these conditions to use the indexes.
pub(crate) const V9: &str = "
CREATE TABLE escrow_sales (
    task_id    TEXT PRIMARY KEY,
    route      TEXT NOT NULL,
    rail       TEXT NOT NULL,
    reference  TEXT,
    client_ref TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    state      TEXT NOT NULL,
    due        TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    doc        TEXT NOT NULL
);
CREATE UNIQUE INDEX escrow_sales_retry ON escrow_sales (route, client_ref, input_hash)
    WHERE state IN ('requesting', 'requested');
CREATE INDEX escrow_sales_due ON escrow_sales (due)
    WHERE state IN ('requesting', 'requested', 'locked', 'submitting', 'submitted');
";

/// The newest version this build knows (the same for both backends).
pub const SUPPORTED: u32 = 9;

/// What to do at `found`: `Ok(None)` nothing, `Ok(Some(from))` apply after `from`.
pub(crate) fn judge(found: u32, mode: Migrations) -> Result<Option<u32>, StoreError> {
    if found > SUPPORTED {
        return Err(StoreError::Schema {
            found,
            supported: SUPPORTED,
        });
    }
    if found == SUPPORTED {
        return Ok(None);
    }
    match mode {
        Migrations::Apply => Ok(Some(found)),
        Migrations::Require => Err(StoreError::Outdated {
            found,
            supported: SUPPORTED,
        }),
    }
}

/// Brings an SQLite database to [`SUPPORTED`]. Each migration is one `BEGIN IMMEDIATE`
/// transaction that reads the version again first: two processes opening one file at once (the
/// server and `interlingua credits`) do not both apply it.
pub(crate) fn sqlite(c: &Connection, mode: Migrations) -> Result<Migrated, StoreError> {
    let version = |c: &Connection| -> Result<u32, StoreError> {
        c.query_row("PRAGMA user_version", [], |r| r.get::<_, u32>(0))
            .map_err(backend)
    };
    let from = version(c)?;
    if judge(from, mode)?.is_none() {
        return Ok(Migrated { from, to: from });
    }
    loop {
        c.execute_batch("BEGIN IMMEDIATE").map_err(backend)?;
        let applied = (|| {
            let at = version(c)?;
            if judge(at, mode)?.is_none() {
                return Ok(None);
            }
            c.execute_batch(&migration(Backend::Sqlite, at + 1))
                .map_err(backend)?;
            c.execute_batch(&format!("PRAGMA user_version = {}", at + 1))
                .map_err(backend)?;
            Ok(Some(at + 1))
        })();
        match applied {
            Ok(Some(_)) => c.execute_batch("COMMIT").map_err(backend)?,
            Ok(None) => {
                c.execute_batch("COMMIT").map_err(backend)?;
                return Ok(Migrated {
                    from,
                    to: version(c)?,
                });
            }
            Err(e) => {
                let _ = c.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
}

/// A key for `pg_advisory_xact_lock` held while migrating, so that instances starting together
/// migrate one after another (the second finds the work done). Any constant works; this is
/// "interlin" in ASCII.
const MIGRATION_LOCK: i64 = 0x696e_7465_726c_696e;

/// Brings a PostgreSQL database to [`SUPPORTED`]: each migration in one transaction holding the
/// migration lock, recorded in `schema_migrations` in the same transaction.
pub(crate) async fn postgres(
    client: &mut tokio_postgres::Client,
    mode: Migrations,
) -> Result<Migrated, StoreError> {
    let mut from = None;
    loop {
        let tx = client.transaction().await.map_err(crate::error::pg)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(crate::error::pg)?;
        let exists: bool = tx
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await
            .map_err(crate::error::pg)?
            .get(0);
        let at: i32 = if exists {
            tx.query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(crate::error::pg)?
            .get(0)
        } else {
            0
        };
        let at = u32::try_from(at).unwrap_or(0);
        let from = *from.get_or_insert(at);
        if judge(at, mode)?.is_none() {
            tx.commit().await.map_err(crate::error::pg)?;
            return Ok(Migrated { from, to: at });
        }
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    INTEGER PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(crate::error::pg)?;
        tx.batch_execute(&migration(Backend::Postgres, at + 1))
            .await
            .map_err(crate::error::pg)?;
        let next = i32::try_from(at + 1).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&next],
        )
        .await
        .map_err(crate::error::pg)?;
        tx.commit().await.map_err(crate::error::pg)?;
    }
}
