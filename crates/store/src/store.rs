//! The task store and credit ledger: one interface ([`TaskStore`]) and its embedded implementation
//! on SQLite (WAL), in the data directory. The PostgreSQL implementation for several proxies
//! sharing state ([`crate::postgres`]) implements the same interface; nothing here relies on being
//! the only process but the leases' first claim (see [`SqliteStore`]): task
//! updates are conditional on the version read, and every credit movement happens in the same
//! transaction as the task change that causes it, guarded by unique keys (one hold and one release
//! per task, one capture per task and step), so nothing is charged twice and nothing is lost.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::Connection;

use super::costs::{Cost, CostState};
use super::error::{backend, StoreError};
use super::escrow_sales::{self, EscrowMove, EscrowSale, EscrowState, Moves};
use super::ledger;
use super::migrations::Migrations;
use super::purchases::Purchase;
use super::readers::Readers;
use super::rows::{self, Row, Unreadable};
use super::sales::{Sale, SaleState};
use super::tasks::{Stored, TaskQuery, Unfinished};
use super::writer::Writer;
pub use crate::credits::{
    Account, AccountQuery, AccountSummary, Audit, Balance, DaySpend, HeldTask, Hold, LedgerRow,
    OpenHold, Settled, Settlement, Unstarted,
};
use mapping::task::Task;

/// Where tasks and credits live.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Stores a new task (version 1) and, in the same transaction, holds credits for it;
    /// [`StoreError::Insufficient`] when the account cannot cover the hold.
    async fn insert_with_hold(&self, task: &Task, hold: Option<&Hold>) -> Result<(), StoreError>;
    /// The task with this id, if any.
    async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError>;
    /// Replaces the task if it is still at `version` and, in the same transaction, captures the
    /// settlement's steps (each at most once, ever) and releases the rest of the hold when asked.
    /// Returns the new version and what moved.
    async fn update_and_settle(
        &self,
        task: &Task,
        version: i64,
        settlement: &Settlement,
    ) -> Result<(i64, Settled), StoreError>;
    /// Replaces a task stored without a subject or credits (one waiting to be paid for) if it
    /// is still at `version`, naming its subject and holding `hold` for it, in one transaction;
    /// the new version. [`StoreError::Insufficient`] when the account cannot cover the hold,
    /// [`StoreError::Conflict`] when the task moved or already has a subject; nothing written.
    async fn update_with_hold(
        &self,
        task: &Task,
        version: i64,
        hold: &Hold,
    ) -> Result<i64, StoreError>;
    /// Stores a new task, without credits.
    async fn insert(&self, task: &Task) -> Result<(), StoreError> {
        self.insert_with_hold(task, None).await
    }
    /// Stores new tasks, without credits, all or none: [`StoreError::Duplicate`] (and nothing
    /// stored) when one of the ids is taken. For loading many tasks at once: one transaction,
    /// where [`TaskStore::insert`] is one per task.
    async fn insert_many(&self, tasks: &[Task]) -> Result<(), StoreError>;
    /// Replaces the task if it is still at `version`; returns the new version.
    async fn update(&self, task: &Task, version: i64) -> Result<i64, StoreError> {
        self.update_and_settle(task, version, &Settlement::default())
            .await
            .map(|(v, _)| v)
    }
    /// Charges one extra capture on a task (an operation fee, a cost the agent reported for a
    /// response); at most once per (task, capture step id).
    async fn charge(
        &self,
        task_id: &str,
        capture: &crate::credits::Capture,
    ) -> Result<Settled, StoreError>;
    /// Adds `amount` credits to an account (a negative amount revokes, never below what is
    /// available); returns the balance after.
    async fn grant(
        &self,
        account: &Account,
        amount: i64,
        note: Option<&str>,
    ) -> Result<Balance, StoreError>;
    /// An account's balance.
    async fn balance(&self, account: &Account) -> Result<Balance, StoreError>;
    /// An account's ledger rows, newest first.
    async fn history(&self, account: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError>;
    /// The balance recomputed from the ledger rows alone (it must equal [`TaskStore::balance`]).
    async fn recompute(&self, account: &Account) -> Result<Balance, StoreError>;
    /// Tasks matching the query, newest first, and how many match in all.
    async fn search(&self, query: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError>;
    /// Every task that has not ended, oldest first (for watchers resuming after a restart).
    async fn unfinished(&self) -> Result<Vec<Unfinished>, StoreError>;
    /// What the credits check judges ([`crate::credits::verify`]), read in one snapshot:
    /// accounts whose balance differs from their rows, every open hold with its task, every
    /// unfinished task without an upstream id. Only reads.
    async fn audit(&self) -> Result<Audit, StoreError>;
    /// Records a purchase made for a task (replacing the task's earlier record of it).
    async fn save_purchase(&self, purchase: &Purchase) -> Result<(), StoreError>;
    /// The purchases made for a task.
    async fn purchases(&self, task_id: &str) -> Result<Vec<Purchase>, StoreError>;
    /// Appends a row to the cost ledger (a payment to an agent, made or not).
    async fn save_cost(&self, cost: &Cost) -> Result<(), StoreError>;
    /// Records a payment about to leave for an agent (`cost`, state `sending`) if the task's
    /// signed payments and its amount stay within `cap`, in one transaction; its row's number,
    /// for [`TaskStore::finish_cost`]. [`StoreError::Insufficient`], nothing written, when it
    /// would not.
    async fn begin_cost(&self, cost: &Cost, cap: u64) -> Result<i64, StoreError>;
    /// Records what came of the payment begun as row `seq`: `cost`'s state, amount,
    /// transaction, detail and the agent's receipt.
    async fn finish_cost(&self, seq: i64, cost: &Cost) -> Result<(), StoreError>;
    /// Records what came of task `task_id`'s oldest payment sent in band and awaiting its
    /// receipt (`sending`, detail [`crate::costs::AWAITS_RECEIPT`]): `cost`'s state,
    /// transaction, detail and receipt, and its amount when less than the amount signed.
    /// Whether there was one.
    async fn finish_task_cost(&self, task_id: &str, cost: &Cost) -> Result<bool, StoreError>;
    /// A task's costs, in the order written.
    async fn costs(&self, task_id: &str) -> Result<Vec<Cost>, StoreError>;
    /// The payments to agents still `sending` (on their way, or cut short by a stop), in the
    /// order written: what `credits verify` looks at.
    async fn costs_sending(&self) -> Result<Vec<Cost>, StoreError>;
    /// Records a new sale and grants what it authorises to the payer's account, in one
    /// transaction; [`StoreError::Duplicate`] (and nothing written) when its reference is known.
    async fn open_sale(&self, sale: &Sale) -> Result<(), StoreError>;
    /// Records a sale's new state if it is still in state `from` and, in the same transaction,
    /// revokes `revoke` granted but not settled. `false` (and nothing written) when the sale
    /// was moved on meanwhile, by another request or instance: only one of them settles it.
    async fn save_sale(
        &self,
        sale: &Sale,
        from: SaleState,
        revoke: u64,
    ) -> Result<bool, StoreError>;
    /// The sale with this reference.
    async fn sale(&self, reference: &str) -> Result<Option<Sale>, StoreError>;
    /// The sales of a task, oldest first.
    async fn sales(&self, task_id: &str) -> Result<Vec<Sale>, StoreError>;
    /// The sales not yet final, oldest first.
    async fn open_sales(&self) -> Result<Vec<Sale>, StoreError>;
    /// The sales not settled and not void (open, failed or unknown), oldest first: what the
    /// credits check looks at.
    async fn unsettled_sales(&self) -> Result<Vec<Sale>, StoreError>;
    /// Stores a new task (no credits) and its escrow sale in one transaction. When a sale for
    /// the same route, client reference and input hash is still requesting or requested,
    /// nothing is written and that sale is returned: a start sent again is the same job (two
    /// sent at once store one). [`StoreError::Duplicate`] when the task's id is taken; a
    /// [`StoreError::Backend`] when the sale is not the task's.
    async fn open_escrow_sale(
        &self,
        task: &Task,
        sale: &EscrowSale,
    ) -> Result<Option<EscrowSale>, StoreError>;
    /// Writes `sale` over its record if that is still in state `from`, moving the ledger as
    /// `money` says, in one transaction. `false` (nothing written) when the record had moved
    /// on. A [`StoreError::Backend`], nothing written, when `money` does not fit the move (see
    /// [`EscrowMove`]): so each sale's funds are granted once and closed once.
    async fn save_escrow_sale(
        &self,
        sale: &EscrowSale,
        from: EscrowState,
        money: &EscrowMove,
    ) -> Result<bool, StoreError>;
    /// The escrow sale of a task.
    async fn escrow_sale(&self, task_id: &str) -> Result<Option<EscrowSale>, StoreError>;
    /// The sales not final whose `due` is at or before `now`, soonest due first, at most
    /// `limit`.
    async fn escrow_sales_due(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<Vec<EscrowSale>, StoreError>;
    /// The latest sales (by `created_at`, newest first), only the open ones when `open`, at
    /// most `limit`: the console's list.
    async fn escrow_sales(&self, open: bool, limit: u32) -> Result<Vec<EscrowSale>, StoreError>;

    // The operator's console: reads only, each a bounded number of statements.

    /// The accounts that have ledger rows (and a balance: an account with rows and no balance is
    /// a drift, which [`TaskStore::audit`] reports), each with its balance as
    /// [`TaskStore::balance`] reads it and the time of its last row; the query's page of them,
    /// ordered by plan then subject (bytewise, on both backends), and how many match in all
    /// (the page and the total from one snapshot).
    async fn accounts(
        &self,
        query: &AccountQuery,
    ) -> Result<(Vec<AccountSummary>, u64), StoreError>;
    /// Every ledger row of a task (its hold, captures, including the operation fees and costs
    /// [`TaskStore::charge`] writes, and its release), in the order they were written; empty
    /// for a task that moved no credits, or no such task.
    async fn ledger_of_task(&self, task_id: &str) -> Result<Vec<LedgerRow>, StoreError>;
    /// Credits spent per route per UTC day, from `since_day` (`YYYY-MM-DD`; anything else is a
    /// [`StoreError::Backend`] naming it) on, by day then route (bytewise); only days and routes
    /// with spend appear.
    ///
    /// Spend is what the `capture` rows charged: each step's price, and every charge
    /// [`TaskStore::charge`] makes (an operation's fee, a cost the agent reported), which is a
    /// capture too; the amount is what was charged, without what the balance could not cover.
    /// Holds and releases are reservations and their return, not spend; grants and revokes
    /// have no task. A capture's route is its task's: a capture whose task is not stored is not
    /// counted.
    async fn spend_by_day(&self, since_day: &str) -> Result<Vec<DaySpend>, StoreError>;

    // Several instances on one store (issue 18). Each instance's store has a lease holder (its
    // instance id) and a lease length ([`Leases`]); a task inserted through it is leased to it.
    // Exactly one live instance follows each unfinished task: the one holding its lease.

    /// Takes over up to `limit` unfinished tasks whose lease has run out or was handed back
    /// (their holder stopped or died), oldest first, leasing them to this instance. Two instances
    /// never claim one task (`FOR UPDATE SKIP LOCKED` on PostgreSQL).
    async fn claim_leases(&self, limit: u32) -> Result<Vec<Unfinished>, StoreError> {
        let _ = limit;
        Ok(Vec::new())
    }
    /// Extends this instance's leases on unfinished tasks by the lease length; returns the ids
    /// of the tasks it still holds (a task missing from it was taken over while this instance
    /// stalled: stop following it).
    async fn renew_leases(&self) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    /// Hands this instance's leases back (it is stopping): other instances claim them at their
    /// next look, without waiting for them to run out.
    async fn hand_back_leases(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
    /// Begins a refresh of a task from its back unless one began within `fresh`, by any
    /// instance: `true` when the caller should ask the back (and the begin is recorded), `false`
    /// when another did so recently (read the store instead).
    async fn claim_refresh(&self, task_id: &str, fresh: Duration) -> Result<bool, StoreError> {
        let _ = (task_id, fresh);
        Ok(true)
    }
    /// Whether the store answers (for `/readyz`).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The connection pool's state, where the backend has one (for metrics).
    fn pool(&self) -> Option<PoolStatus> {
        None
    }
    /// Whether other processes may serve from this store at the same time (PostgreSQL): only
    /// then do leases need renewing and claiming while running. SQLite has one serving process,
    /// whose first [`TaskStore::claim_leases`] takes every unfinished task.
    fn shared(&self) -> bool {
        false
    }
    /// Which backend this is: `sqlite` or `postgres` (logs, metrics, `/readyz`).
    fn backend(&self) -> &'static str {
        "sqlite"
    }
}

/// An instance's leases: who it is and how long a lease lasts without renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    /// The instance's id, unique per process (a restarted process is a new holder).
    pub holder: String,
    /// How long a lease lasts; an instance renews its leases every third of it.
    pub ttl: Duration,
}

impl Default for Leases {
    fn default() -> Leases {
        Leases {
            holder: uuid::Uuid::new_v4().to_string(),
            ttl: Duration::from_secs(15),
        }
    }
}

/// A connection pool's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections open.
    pub size: usize,
    /// Of those, idle.
    pub idle: usize,
    /// The most it opens.
    pub max: usize,
}

/// The SQLite task store: one writer thread that commits writes in groups (see
/// [`writer`](super::writer)), and a pool of read connections beside it.
///
/// Leases: one *serving* process owns the file, so the first [`TaskStore::claim_leases`] after
/// opening takes every unfinished task this holder does not hold, whatever its lease's expiry
/// (the process before is gone: it was this one's predecessor), and keeps doing so until a claim
/// comes back short of its limit; later claims respect expiry. Opening hands nothing back: the
/// `interlingua credits` command opens the same file while the server runs.
pub struct SqliteStore {
    /// `None` in memory: another connection would open another (empty) database, so reads go
    /// through the writer there. Declared (so dropped) before the writer: the writer's connection
    /// closes last, and closing the last connection checkpoints the WAL into the database file.
    readers: Option<Arc<Readers>>,
    writer: Writer,
    leases: Leases,
    /// Whether claims still take every other holder's tasks (see above).
    sweeping: AtomicBool,
}

impl SqliteStore {
    /// Opens (creating if needed) `<dir>/interlingua.db`, applying the migrations it lacks, with
    /// leases of its own ([`Leases::default`]).
    pub fn open(dir: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(dir, Leases::default())
    }

    /// [`SqliteStore::open`] with the instance's leases.
    pub fn open_with(dir: &Path, leases: Leases) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_in(dir, leases, Migrations::Apply)
    }

    /// [`SqliteStore::open_with`], applying migrations or refusing a store that lacks them.
    pub fn open_in(
        dir: &Path,
        leases: Leases,
        migrations: Migrations,
    ) -> Result<SqliteStore, StoreError> {
        let path = Self::file(dir);
        let conn = Connection::open(&path).map_err(backend)?;
        SqliteStore::init(conn, Some(Readers::new(path)), leases, migrations)
    }

    /// The database file in a data directory.
    pub(crate) fn file(dir: &Path) -> std::path::PathBuf {
        dir.join("interlingua.db")
    }

    /// A store in memory, for tests and `translate`.
    pub fn in_memory() -> Result<SqliteStore, StoreError> {
        SqliteStore::init(
            Connection::open_in_memory().map_err(backend)?,
            None,
            Leases::default(),
            Migrations::Apply,
        )
    }

    fn init(
        conn: Connection,
        readers: Option<Arc<Readers>>,
        leases: Leases,
        migrations: Migrations,
    ) -> Result<SqliteStore, StoreError> {
        // WAL: readers never wait for the writer; FULL: a committed task survives power loss.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(backend)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(backend)?;
        // Each write's savepoint journals the pages it changes: in memory, not in a temporary file
        // written and read back for every write (the durable copy is the WAL, as always).
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(backend)?;
        // Every write statement (tasks, ledger, the batch's own brackets) stays prepared.
        conn.set_prepared_statement_cache_capacity(64);
        crate::migrations::sqlite(&conn, migrations)?;
        Ok(SqliteStore {
            readers,
            writer: Writer::start(conn)?,
            leases,
            sweeping: AtomicBool::new(true),
        })
    }

    /// Runs `read` on a read connection (or, in memory, in the writer's next batch);
    /// `snapshot`: all its statements see one state.
    async fn read<T, F>(&self, snapshot: bool, read: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        match &self.readers {
            Some(readers) => readers.run(snapshot, read).await,
            // The writer's batch is one transaction: a snapshot already.
            None => self.writer.run(read).await,
        }
    }

    /// Ends a task whose document cannot be read (see [`rows::end_unreadable`]) and, in the
    /// same transaction, releases its hold: a task nobody can read is never followed again,
    /// and what it held goes back to its account, with a ledger row.
    async fn end_unreadable(&self, unreadable: Unreadable) -> Result<Option<Stored>, StoreError> {
        let Unreadable { id, why } = unreadable;
        let ended = self
            .writer
            .run(move |c| {
                let plan = ledger::plan_of_hold(c, &id)?;
                let Some((stored, rewritten)) = rows::end_unreadable(c, &id, &why, plan)? else {
                    return Ok(None);
                };
                if rewritten {
                    let release = Settlement {
                        captures: Vec::new(),
                        release: true,
                    };
                    let released = ledger::settle(c, &id, &release)?.released;
                    tracing::warn!(task = %id, released, "a stored task could not be read ({why}): it was ended, its hold released");
                }
                Ok(Some(stored))
            })
            .await?;
        Ok(ended)
    }

    /// A lease taken now: its holder and until when (milliseconds since the epoch).
    fn lease(&self) -> (String, i64) {
        (self.leases.holder.clone(), lease_until(&self.leases))
    }

    #[cfg(test)]
    pub(super) fn writer(&self) -> &Writer {
        &self.writer
    }
}

/// The tasks a search found, those that cannot be read ended by `end` where they are found, and
/// listed as they now are.
pub(crate) async fn ending_unreadable<F, Fut>(
    found: Vec<rows::Read<Task>>,
    end: F,
) -> Result<Vec<Task>, StoreError>
where
    F: Fn(Unreadable) -> Fut,
    Fut: std::future::Future<Output = Result<Option<Stored>, StoreError>>,
{
    let mut tasks = Vec::with_capacity(found.len());
    for read in found {
        match read {
            Ok(task) => tasks.push(task),
            Err(unreadable) => tasks.extend(end(unreadable).await?.map(|ended| ended.task)),
        }
    }
    Ok(tasks)
}

/// The audit from what it reads (in one snapshot): the drifts, the open holds with their
/// tasks' documents, the unfinished tasks.
pub(crate) fn audit_of(
    drifts: Vec<(Balance, Balance)>,
    holds: Vec<(String, Account, i64, Option<String>)>,
    unfinished: Vec<Unfinished>,
) -> Audit {
    let open_holds = holds
        .into_iter()
        .map(|(task_id, account, remaining, doc)| OpenHold {
            task: match doc.map(|d| rows::decode(&task_id, &d)) {
                None => HeldTask::Missing,
                Some(Err(u)) => HeldTask::Unreadable(u.why),
                Some(Ok(task)) => HeldTask::Stored(Box::new(task)),
            },
            task_id,
            plan: account.plan,
            subject: account.subject,
            remaining,
        })
        .collect();
    Audit {
        drifts,
        open_holds,
        unstarted: unfinished
            .into_iter()
            .filter(|u| !u.started)
            .map(|u| Unstarted {
                task_id: u.id,
                route: u.route,
                status: u.status,
                created_at: u.created_at,
            })
            .collect(),
    }
}

/// The end of a lease taken now, in milliseconds since the epoch (this process's clock: one
/// process serves an SQLite store).
fn lease_until(leases: &Leases) -> i64 {
    let ttl = i64::try_from(leases.ttl.as_millis()).unwrap_or(i64::MAX);
    now_ms().saturating_add(ttl)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn insert_with_hold(&self, task: &Task, hold: Option<&Hold>) -> Result<(), StoreError> {
        let row = Row::new(task)?;
        let hold = hold.filter(|h| h.amount > 0).cloned();
        let (holder, until) = self.lease();
        self.writer
            .run(move |c| {
                rows::insert(c, &row, (&holder, until))?;
                if let Some(h) = hold {
                    let account = Account::new(&h.plan, &h.subject);
                    // Read in the batch's transaction, after the jobs before this one: a hold
                    // earlier in the batch counts.
                    let balance = ledger::balance(c, &account)?;
                    if balance.available() < h.amount as i64 {
                        return Err(StoreError::Insufficient {
                            available: balance.available(),
                            needed: h.amount,
                        });
                    }
                    ledger::hold(c, row.id(), &account, h.amount)?;
                }
                Ok(())
            })
            .await
    }

    async fn update_with_hold(
        &self,
        task: &Task,
        version: i64,
        hold: &Hold,
    ) -> Result<i64, StoreError> {
        let row = Row::new(task)?;
        let hold = hold.clone();
        self.writer
            .run(move |c| {
                rows::claim_subject(c, &row)?;
                rows::update(c, &row, version)?;
                let account = Account::new(&hold.plan, &hold.subject);
                let balance = ledger::balance(c, &account)?;
                if balance.available() < hold.amount as i64 {
                    return Err(StoreError::Insufficient {
                        available: balance.available(),
                        needed: hold.amount,
                    });
                }
                ledger::hold(c, row.id(), &account, hold.amount)?;
                Ok(version + 1)
            })
            .await
    }

    async fn insert_many(&self, tasks: &[Task]) -> Result<(), StoreError> {
        let rows = tasks.iter().map(Row::new).collect::<Result<Vec<_>, _>>()?;
        let (holder, until) = self.lease();
        self.writer
            .run(move |c| {
                rows.iter()
                    .try_for_each(|r| rows::insert(c, r, (&holder, until)))
            })
            .await
    }

    async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        let id = id.to_string();
        let found = match &self.readers {
            // The hottest read of all (every poll of a task): done here when it can be.
            Some(readers) => readers.run_point(move |c| rows::get(c, &id)).await,
            None => self.read(false, move |c| rows::get(c, &id)).await,
        }?;
        match found {
            None => Ok(None),
            Some(Ok(stored)) => Ok(Some(stored)),
            Some(Err(unreadable)) => self.end_unreadable(unreadable).await,
        }
    }

    async fn update_and_settle(
        &self,
        task: &Task,
        version: i64,
        settlement: &Settlement,
    ) -> Result<(i64, Settled), StoreError> {
        let row = Row::new(task)?;
        let settlement = settlement.ending(task.status.is_terminal());
        self.writer
            .run(move |c| {
                rows::update(c, &row, version)?;
                let settled = ledger::settle(c, row.id(), &settlement)?;
                Ok((version + 1, settled))
            })
            .await
    }

    async fn charge(
        &self,
        task_id: &str,
        capture: &crate::credits::Capture,
    ) -> Result<Settled, StoreError> {
        let task_id = task_id.to_string();
        let settlement = Settlement {
            captures: vec![capture.clone()],
            release: false,
        };
        self.writer
            .run(move |c| ledger::settle(c, &task_id, &settlement))
            .await
    }

    async fn grant(
        &self,
        account: &Account,
        amount: i64,
        note: Option<&str>,
    ) -> Result<Balance, StoreError> {
        let account = account.clone();
        let note = note.map(str::to_string);
        self.writer
            .run(move |c| ledger::grant(c, &account, amount, note.as_deref()))
            .await
    }

    async fn balance(&self, account: &Account) -> Result<Balance, StoreError> {
        let account = account.clone();
        self.read(false, move |c| ledger::balance(c, &account))
            .await
    }

    async fn history(&self, account: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError> {
        let account = account.clone();
        self.read(false, move |c| ledger::history(c, &account, limit))
            .await
    }

    async fn recompute(&self, account: &Account) -> Result<Balance, StoreError> {
        let account = account.clone();
        // Several sums over the ledger: a write landing between two of them would unbalance them.
        self.read(true, move |c| ledger::recompute(c, &account))
            .await
    }

    async fn search(&self, q: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError> {
        let q = q.clone();
        let (found, total) = self.read(true, move |c| rows::search(c, &q)).await?;
        let tasks = ending_unreadable(found, |u| self.end_unreadable(u)).await?;
        Ok((tasks, total))
    }

    async fn unfinished(&self) -> Result<Vec<Unfinished>, StoreError> {
        self.read(false, rows::unfinished).await
    }

    async fn audit(&self) -> Result<Audit, StoreError> {
        self.read(true, |c| {
            Ok(audit_of(
                ledger::drifts(c)?,
                ledger::open_holds(c)?,
                rows::unfinished(c)?,
            ))
        })
        .await
    }

    async fn save_purchase(&self, purchase: &Purchase) -> Result<(), StoreError> {
        let purchase = purchase.clone();
        self.writer
            .run(move |c| super::purchases::save(c, &purchase))
            .await
    }

    async fn purchases(&self, task_id: &str) -> Result<Vec<Purchase>, StoreError> {
        let id = task_id.to_string();
        self.read(false, move |c| super::purchases::of_task(c, &id))
            .await
    }

    async fn save_cost(&self, cost: &Cost) -> Result<(), StoreError> {
        let cost = cost.clone();
        self.writer.run(move |c| super::costs::save(c, &cost)).await
    }

    async fn begin_cost(&self, cost: &Cost, cap: u64) -> Result<i64, StoreError> {
        let cost = cost.clone();
        self.writer
            .run(move |c| super::costs::begin(c, &cost, cap))
            .await
    }

    async fn finish_cost(&self, seq: i64, cost: &Cost) -> Result<(), StoreError> {
        let cost = cost.clone();
        self.writer
            .run(move |c| super::costs::finish(c, seq, &cost))
            .await
    }

    async fn finish_task_cost(&self, task_id: &str, cost: &Cost) -> Result<bool, StoreError> {
        let (id, cost) = (task_id.to_string(), cost.clone());
        self.writer
            .run(move |c| super::costs::finish_of_task(c, &id, &cost))
            .await
    }

    async fn costs_sending(&self) -> Result<Vec<Cost>, StoreError> {
        self.read(false, |c| super::costs::in_state(c, CostState::Sending))
            .await
    }

    async fn costs(&self, task_id: &str) -> Result<Vec<Cost>, StoreError> {
        let id = task_id.to_string();
        self.read(false, move |c| super::costs::of_task(c, &id))
            .await
    }

    async fn open_sale(&self, sale: &Sale) -> Result<(), StoreError> {
        let sale = sale.clone();
        self.writer
            .run(move |c| super::sales::open(c, &sale).map(|_| ()))
            .await
    }

    async fn save_sale(
        &self,
        sale: &Sale,
        from: SaleState,
        revoke: u64,
    ) -> Result<bool, StoreError> {
        let sale = sale.clone();
        self.writer
            .run(move |c| super::sales::save(c, &sale, from, revoke))
            .await
    }

    async fn sale(&self, reference: &str) -> Result<Option<Sale>, StoreError> {
        let reference = reference.to_string();
        self.read(false, move |c| super::sales::get(c, &reference))
            .await
    }

    async fn sales(&self, task_id: &str) -> Result<Vec<Sale>, StoreError> {
        let id = task_id.to_string();
        self.read(false, move |c| super::sales::of_task(c, &id))
            .await
    }

    async fn open_sales(&self) -> Result<Vec<Sale>, StoreError> {
        self.read(false, |c| super::sales::in_states(c, super::sales::OPEN))
            .await
    }

    async fn unsettled_sales(&self) -> Result<Vec<Sale>, StoreError> {
        self.read(false, |c| {
            super::sales::in_states(c, super::sales::UNSETTLED)
        })
        .await
    }

    async fn open_escrow_sale(
        &self,
        task: &Task,
        sale: &EscrowSale,
    ) -> Result<Option<EscrowSale>, StoreError> {
        escrow_sales::belongs_to(task, sale)?;
        let row = Row::new(task)?;
        let record = escrow_sales::Record::new(sale)?;
        let sale = sale.clone();
        let (holder, until) = self.lease();
        self.writer
            .run(move |c| {
                if !escrow_sales::insert(c, &sale, &record)? {
                    // The writer runs one job at a time: the twin is there, in this transaction.
                    return escrow_sales::twin(c, &sale)?
                        .map(Some)
                        .ok_or(StoreError::Conflict);
                }
                rows::insert(c, &row, (&holder, until))?;
                Ok(None)
            })
            .await
    }

    async fn save_escrow_sale(
        &self,
        sale: &EscrowSale,
        from: EscrowState,
        money: &EscrowMove,
    ) -> Result<bool, StoreError> {
        let moves = Moves::of(sale, from, money)?;
        let record = escrow_sales::Record::new(sale)?;
        let sale = sale.clone();
        self.writer
            .run(move |c| escrow_sales::save(c, &sale, &record, from, &moves))
            .await
    }

    async fn escrow_sale(&self, task_id: &str) -> Result<Option<EscrowSale>, StoreError> {
        let id = task_id.to_string();
        self.read(false, move |c| escrow_sales::get(c, &id)).await
    }

    async fn escrow_sales_due(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<Vec<EscrowSale>, StoreError> {
        self.read(false, move |c| escrow_sales::due(c, now, limit))
            .await
    }

    async fn escrow_sales(&self, open: bool, limit: u32) -> Result<Vec<EscrowSale>, StoreError> {
        self.read(false, move |c| escrow_sales::latest(c, open, limit))
            .await
    }

    async fn accounts(
        &self,
        query: &AccountQuery,
    ) -> Result<(Vec<AccountSummary>, u64), StoreError> {
        let query = query.clone();
        // The count and the page from one snapshot, so that they agree.
        self.read(true, move |c| super::reports::accounts(c, &query))
            .await
    }

    async fn ledger_of_task(&self, task_id: &str) -> Result<Vec<LedgerRow>, StoreError> {
        let id = task_id.to_string();
        self.read(false, move |c| super::reports::of_task(c, &id))
            .await
    }

    async fn spend_by_day(&self, since_day: &str) -> Result<Vec<DaySpend>, StoreError> {
        let since = super::reports::day(since_day)?;
        self.read(false, move |c| super::reports::spend_by_day(c, &since))
            .await
    }

    async fn claim_leases(&self, limit: u32) -> Result<Vec<Unfinished>, StoreError> {
        let (holder, until) = self.lease();
        let every = self.sweeping.load(Ordering::Acquire);
        let claimed = self
            .writer
            .run(move |c| rows::claim(c, &holder, now_ms(), until, every, limit))
            .await?;
        if claimed.len() < limit as usize {
            self.sweeping.store(false, Ordering::Release);
        }
        Ok(claimed)
    }

    async fn renew_leases(&self) -> Result<Vec<String>, StoreError> {
        let (holder, until) = self.lease();
        self.writer
            .run(move |c| rows::renew(c, &holder, until))
            .await
    }

    async fn hand_back_leases(&self) -> Result<u64, StoreError> {
        let holder = self.leases.holder.clone();
        self.writer.run(move |c| rows::hand_back(c, &holder)).await
    }

    /// Always `true` on SQLite: one process serves the store, and the engine's in-process gate
    /// already lets one refresh of a task run at a time.
    async fn claim_refresh(&self, task_id: &str, fresh: Duration) -> Result<bool, StoreError> {
        let _ = (task_id, fresh);
        Ok(true)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read(false, |c| {
            c.query_row("SELECT 1", [], |_| Ok(())).map_err(backend)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use mapping::task::Status;

    #[tokio::test]
    async fn tasks_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let t = Task::new("r", Utc::now());
        SqliteStore::open(dir.path())
            .unwrap()
            .insert(&t)
            .await
            .unwrap();
        let again = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(again.get(&t.id).await.unwrap().unwrap().task, t);
    }

    #[tokio::test]
    async fn the_first_claim_after_opening_takes_the_tasks_of_the_process_before() {
        let dir = tempfile::tempdir().unwrap();
        let leases = |holder: &str| Leases {
            holder: holder.to_string(),
            ttl: Duration::from_secs(60),
        };
        let before = SqliteStore::open_with(dir.path(), leases("before")).unwrap();
        let (live, ended) = (Task::new("r", Utc::now()), Task::new("r", Utc::now()));
        before.insert(&live).await.unwrap();
        let mut done = ended.clone();
        done.status = Status::Completed;
        before.insert(&done).await.unwrap();
        drop(before);
        let now = SqliteStore::open_with(dir.path(), leases("now")).unwrap();
        // Its lease has a minute to run, and is taken all the same: one process serves the file.
        let taken: Vec<_> = now
            .claim_leases(1)
            .await
            .unwrap()
            .into_iter()
            .map(|u| (u.id, u.taken_from))
            .collect();
        assert_eq!(taken, [(live.id.clone(), Some("before".to_string()))]);
        // The sweep goes on until a claim comes back short; then live leases are respected.
        assert_eq!(now.claim_leases(1).await.unwrap(), []);
        let other = SqliteStore::open_with(dir.path(), leases("cli")).unwrap();
        other.insert(&Task::new("r", Utc::now())).await.unwrap();
        assert_eq!(now.claim_leases(10).await.unwrap(), []);
        assert_eq!(
            now.renew_leases().await.unwrap(),
            std::slice::from_ref(&live.id)
        );
        // One process, one gate: the refresh claim is always granted.
        let fresh = Duration::from_secs(60);
        assert!(now.claim_refresh(&live.id, fresh).await.unwrap());
        assert!(now.claim_refresh(&live.id, fresh).await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_acknowledged_write_is_there_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let calls: Vec<_> = (0..200)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let t = Task::new("r", Utc::now());
                    store.insert(&t).await.map(|()| t.id)
                })
            })
            .collect();
        let mut acknowledged = Vec::new();
        for call in calls {
            acknowledged.push(call.await.unwrap().unwrap());
        }
        drop(Arc::into_inner(store).expect("the only reference"));
        let again = SqliteStore::open(dir.path()).unwrap();
        for id in &acknowledged {
            assert!(again.get(id).await.unwrap().is_some(), "{id} is lost");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_do_not_wait_for_a_batch_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let (done, pending) = (Task::new("r", Utc::now()), Task::new("r", Utc::now()));
        store.insert(&done).await.unwrap();
        let go = crate::writer::pause::pause(store.writer());
        let write = crate::writer::pause::queue(store.insert(&pending));
        let deadline = std::time::Duration::from_secs(5);
        let read = tokio::time::timeout(deadline, store.get(&done.id)).await;
        assert!(matches!(read, Ok(Ok(Some(_)))), "{read:?}");
        // Not committed yet, so not seen yet.
        let read = tokio::time::timeout(deadline, store.get(&pending.id)).await;
        assert!(matches!(read, Ok(Ok(None))), "{read:?}");
        drop(go);
        assert_eq!(write.await, Ok(()));
        assert!(store.get(&pending.id).await.unwrap().is_some());
    }
}
