//! The PostgreSQL task store, for several instances sharing tasks and credits: the same
//! interface ([`TaskStore`]) and the same semantics as SQLite's, over a pool of connections
//! (deadpool) to one database.
//!
//! | module      | what it is |
//! |-------------|------------|
//! | `rows`      | the tasks table's SQL, leases and refresh claims |
//! | `ledger`    | the ledger's SQL: the hold in the transaction that checks the balance, with the account's row locked |
//! | `purchases` | the purchases table's SQL |
//! | `costs` | the costs table's SQL |
//! | `sales` | the sales table's SQL, with the ledger rows a sale moves |
//! | `escrow_sales` | the escrow_sales table's SQL, with the ledger rows a sale moves |
//! | `reports`   | what the operator's console reads: accounts, a task's ledger rows, spend per route and day |
//! | `writer`    | the group commit of a create's writes (holds, updates, settlements) |
//! | `settle.sql`| migration v4: a settlement, and an update with its settlement, as one statement each |
//!
//! The writes on a create's path go through the writer, which commits them in batches (one
//! transaction, every statement sent at once), as SQLite's writer thread does; the rest are one
//! transaction each. What one process's writer thread guarantees on SQLite is guaranteed here by
//! row locks (`SELECT … FOR UPDATE` on the account a hold checks and on the hold a settlement
//! changes) and by the same unique keys, whichever instance writes; a deadlock or serialization
//! failure is retried a few times. Leases and refresh claims use the database's clock, never an
//! instance's. Statements are prepared once per connection (deadpool's statement cache).
//! Nothing waits forever: connecting, waiting for a connection and each operation have a
//! deadline, after which the store answers `PostgreSQL unreachable: …`.

mod costs;
mod escrow_sales;
mod ledger;
mod purchases;
mod reports;
mod rows;
mod sales;
mod writer;

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

use crate::costs::{Cost, CostState};
use crate::credits::{
    Account, AccountQuery, AccountSummary, Audit, Balance, Capture, DaySpend, Hold, LedgerRow,
    Settled, Settlement,
};
use crate::error::{pg, StoreError};
use crate::escrow_sales::{EscrowMove, EscrowSale, EscrowState, Moves, Record};
use crate::migrations::{Migrated, Migrations};
use crate::purchases::Purchase;
use crate::rows::{Row, Unreadable};
use crate::sales::{Sale, SaleState};
use crate::store::{Leases, PoolStatus, TaskStore};
use crate::tasks::{Stored, TaskQuery, Unfinished};
use mapping::task::Task;
use writer::{Write, Writer, Written};

/// How long one operation (all its statements, and waiting for a connection) may take.
const OPERATION: Duration = Duration::from_secs(30);
/// How long opening a connection may take.
const CONNECT: Duration = Duration::from_secs(5);
/// How many times a transaction that lost a deadlock or a serialization check is run again.
const RETRIES: u32 = 5;

/// Where the database is and how many connections an instance opens.
#[derive(Clone)]
pub struct PgConfig {
    /// `postgres://user@host:port/database` (a password in it works too, but the environment
    /// is the place for one: see `password`).
    pub url: String,
    /// The password, if not in the URL. Never logged.
    pub password: Option<String>,
    /// The most connections this instance opens.
    pub pool_max: usize,
}

impl std::fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &redacted(&self.url))
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("pool_max", &self.pool_max)
            .finish()
    }
}

/// The URL without a password in it.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:…{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The PostgreSQL task store.
pub struct PgStore {
    pool: Pool,
    leases: Leases,
    writer: Writer,
}

/// Why one attempt at an operation failed: for the caller, or (a deadlock, a serialization
/// failure) worth another attempt.
pub(crate) enum Fail {
    Store(StoreError),
    Db(tokio_postgres::Error),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Fail {
        Fail::Store(e)
    }
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Fail {
        Fail::Db(e)
    }
}

impl From<Fail> for StoreError {
    fn from(f: Fail) -> StoreError {
        match f {
            Fail::Store(e) => e,
            Fail::Db(e) => pg(e),
        }
    }
}

impl Fail {
    fn retryable(&self) -> bool {
        matches!(self, Fail::Db(e) if e.code().is_some_and(|c| *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED))
    }
}

fn unreachable(why: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("PostgreSQL unreachable: {why}"))
}

/// Runs an attempt (an expression giving a future of `Result<T, Fail>`, evaluated again for each
/// attempt) until it succeeds, fails for good, or has lost [`RETRIES`] deadlocks; within
/// [`OPERATION`] in all.
macro_rules! attempt {
    ($attempt:expr) => {{
        let run = async {
            let mut tries = 0;
            loop {
                match $attempt.await {
                    Err(f) if f.retryable() && tries < RETRIES => tries += 1,
                    done => break done.map_err(StoreError::from),
                }
            }
        };
        match tokio::time::timeout(OPERATION, run).await {
            Ok(done) => done,
            Err(_) => Err(unreachable(format!("no answer in {OPERATION:?}"))),
        }
    }};
}

/// A read-only transaction whose statements all see one state.
async fn snapshot(
    client: &mut deadpool_postgres::Client,
) -> Result<deadpool_postgres::Transaction<'_>, tokio_postgres::Error> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
}

/// An attempt on a connection from the pool: `with_client!(self, c => call(&c, …))`.
macro_rules! with_client {
    ($store:ident, $c:ident => $call:expr) => {
        async {
            let $c = $store.client().await?;
            $call.await
        }
    };
}

impl PgStore {
    /// Connects (checking the database answers), then applies the migrations it lacks or, with
    /// [`Migrations::Require`], refuses a database that lacks them.
    pub async fn connect(
        config: &PgConfig,
        leases: Leases,
        migrations: Migrations,
    ) -> Result<(PgStore, Migrated), StoreError> {
        let mut pg_config: tokio_postgres::Config = config
            .url
            .parse()
            .map_err(|e| StoreError::Backend(format!("the PostgreSQL URL is not valid: {e}")))?;
        if let Some(password) = &config.password {
            pg_config.password(password);
        }
        pg_config.connect_timeout(CONNECT);
        pg_config.keepalives(true);
        pg_config.keepalives_idle(Duration::from_secs(30));
        if pg_config.get_application_name().is_none() {
            pg_config.application_name("interlingua");
        }
        let manager = Manager::from_config(
            pg_config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_max.max(1))
            .wait_timeout(Some(OPERATION))
            .create_timeout(Some(CONNECT))
            .recycle_timeout(Some(CONNECT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Backend(format!("PostgreSQL pool: {e}")))?;
        let writer = Writer::start(writer::Settings {
            pool: pool.clone(),
            holder: leases.holder.clone(),
            ttl: leases.ttl.as_secs_f64(),
        });
        let store = PgStore {
            pool,
            leases,
            writer,
        };
        let migrated = {
            let mut client = store.client().await?;
            let client: &mut tokio_postgres::Client = &mut client;
            match tokio::time::timeout(OPERATION, crate::migrations::postgres(client, migrations))
                .await
            {
                Ok(done) => done?,
                Err(_) => return Err(unreachable(format!("no answer in {OPERATION:?}"))),
            }
        };
        Ok((store, migrated))
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => pg(e),
            e => unreachable(e),
        })
    }

    /// The lease length in seconds, as PostgreSQL's `make_interval` takes it.
    fn ttl(&self) -> f64 {
        self.leases.ttl.as_secs_f64()
    }

    async fn insert_many_once(&self, rows: &[Row]) -> Result<(), Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        for row in rows {
            rows::insert(&tx, row, &self.leases.holder, self.ttl()).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn grant_once(
        &self,
        account: &Account,
        amount: i64,
        note: Option<&str>,
    ) -> Result<Balance, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let balance = ledger::grant(&tx, account, amount, note).await?;
        tx.commit().await?;
        Ok(balance)
    }

    /// Opens a sale and grants what it authorises, in one transaction.
    async fn open_sale_once(&self, sale: &Sale) -> Result<(), Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        sales::open(&tx, sale).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Inserts an escrow sale and its task in one transaction, or answers the twin waiting for
    /// its lock; `None` when the twin it collided with moved on before it could be read (this
    /// start is a new sale after all: try again).
    async fn open_escrow_sale_once(
        &self,
        row: &Row,
        sale: &EscrowSale,
        record: &Record,
    ) -> Result<Option<Option<EscrowSale>>, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if !escrow_sales::insert(&tx, sale, record).await? {
            // Dropping the transaction rolls it back: it wrote nothing.
            return Ok(escrow_sales::twin(&tx, sale).await?.map(Some));
        }
        rows::insert(&tx, row, &self.leases.holder, self.ttl()).await?;
        tx.commit().await?;
        Ok(Some(None))
    }

    /// Writes an escrow sale over its record and moves the ledger, in one transaction.
    async fn save_escrow_sale_once(
        &self,
        sale: &EscrowSale,
        record: &Record,
        from: EscrowState,
        moves: &Moves,
    ) -> Result<bool, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let saved = escrow_sales::save(&tx, sale, record, from, moves).await?;
        tx.commit().await?;
        Ok(saved)
    }

    /// Names a task's subject, replaces it and holds for it, in one transaction.
    async fn update_with_hold_once(
        &self,
        row: &Row,
        version: i64,
        hold: &Hold,
    ) -> Result<i64, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        rows::update_claiming(&tx, row, version).await?;
        let account = Account::new(&hold.plan, &hold.subject);
        ledger::hold(&tx, &row.id, &account, hold.amount).await?;
        tx.commit().await?;
        Ok(version + 1)
    }

    /// Records a payment about to leave within its task's cap, in one transaction.
    async fn begin_cost_once(&self, cost: &Cost, cap: u64) -> Result<i64, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let seq = costs::begin(&tx, cost, cap).await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Records a sale's state and revokes what was not settled, in one transaction.
    async fn save_sale_once(
        &self,
        sale: &Sale,
        from: SaleState,
        revoke: u64,
    ) -> Result<bool, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let saved = sales::save(&tx, sale, from, revoke).await?;
        tx.commit().await?;
        Ok(saved)
    }

    /// Ends a task whose document cannot be read, and releases its hold, in one transaction
    /// (as [`SqliteStore`](crate::SqliteStore) does).
    async fn end_unreadable_once(&self, u: &Unreadable) -> Result<Option<Stored>, Fail> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let plan = ledger::plan_of_hold(&tx, &u.id).await?;
        let Some((stored, rewritten)) = rows::end_unreadable(&tx, &u.id, &u.why, plan).await?
        else {
            return Ok(None);
        };
        if rewritten {
            let released = ledger::release(&tx, &u.id).await?;
            tracing::warn!(task = %u.id, released, "a stored task could not be read ({}): it was ended, its hold released", u.why);
        }
        tx.commit().await?;
        Ok(Some(stored))
    }

    async fn end_unreadable(&self, u: Unreadable) -> Result<Option<Stored>, StoreError> {
        attempt!(self.end_unreadable_once(&u))
    }

    async fn search_once(&self, q: &TaskQuery) -> Result<(Vec<rows::ReadTask>, u64), Fail> {
        let mut client = self.client().await?;
        // The count and the page from one snapshot, so that they agree.
        let tx = snapshot(&mut client).await?;
        let found = rows::search(&tx, q).await?;
        tx.commit().await?;
        Ok(found)
    }

    async fn audit_once(&self) -> Result<Audit, Fail> {
        let mut client = self.client().await?;
        let tx = snapshot(&mut client).await?;
        let audit = crate::store::audit_of(
            ledger::drifts(&tx).await?,
            ledger::open_holds(&tx).await?,
            rows::unfinished(&tx).await?,
        );
        tx.commit().await?;
        Ok(audit)
    }

    async fn accounts_once(&self, q: &AccountQuery) -> Result<(Vec<AccountSummary>, u64), Fail> {
        let mut client = self.client().await?;
        // The count and the page from one snapshot, so that they agree.
        let tx = snapshot(&mut client).await?;
        let found = reports::accounts(&tx, q).await?;
        tx.commit().await?;
        Ok(found)
    }

    async fn recompute_once(&self, account: &Account) -> Result<Balance, Fail> {
        let mut client = self.client().await?;
        let tx = snapshot(&mut client).await?;
        let balance = ledger::recompute(&tx, account).await?;
        tx.commit().await?;
        Ok(balance)
    }
}

#[async_trait]
impl TaskStore for PgStore {
    async fn insert_with_hold(&self, task: &Task, hold: Option<&Hold>) -> Result<(), StoreError> {
        let row = Row::new(task)?;
        let hold = hold.filter(|h| h.amount > 0);
        let needed = hold.map_or(0, |h| h.amount);
        let hold = hold.map(|h| (Account::new(&h.plan, &h.subject), h.amount as i64));
        match self.writer.run(Write::Insert { row, hold }).await? {
            Written::Refused { available } => Err(StoreError::Insufficient { available, needed }),
            Written::Done(_) => Ok(()),
            Written::Conflict => Err(StoreError::Conflict),
        }
    }

    async fn update_with_hold(
        &self,
        task: &Task,
        version: i64,
        hold: &Hold,
    ) -> Result<i64, StoreError> {
        let row = Row::new(task)?;
        attempt!(self.update_with_hold_once(&row, version, hold))
    }

    async fn get(&self, id: &str) -> Result<Option<Stored>, StoreError> {
        let found = attempt!(with_client!(self, c => rows::get(&c, id)))?;
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
        // A task holds credits of the account of its plan and subject (the caller that created it).
        let account = task
            .subject
            .as_ref()
            .map(|subject| Account::new(task.plan.as_deref().unwrap_or_default(), subject));
        let update = Write::Update {
            row,
            version,
            settlement: settlement.ending(task.status.is_terminal()),
            account,
        };
        match self.writer.run(update).await? {
            Written::Done(settled) => Ok((version + 1, settled)),
            Written::Conflict | Written::Refused { .. } => Err(StoreError::Conflict),
        }
    }

    async fn insert_many(&self, tasks: &[Task]) -> Result<(), StoreError> {
        let rows = tasks.iter().map(Row::new).collect::<Result<Vec<_>, _>>()?;
        attempt!(self.insert_many_once(&rows))
    }

    async fn charge(&self, task_id: &str, capture: &Capture) -> Result<Settled, StoreError> {
        let settle = Write::Settle {
            task: task_id.to_string(),
            settlement: Settlement {
                captures: vec![capture.clone()],
                release: false,
            },
        };
        match self.writer.run(settle).await? {
            Written::Done(settled) => Ok(settled),
            Written::Conflict | Written::Refused { .. } => Ok(Settled::default()),
        }
    }

    async fn grant(
        &self,
        account: &Account,
        amount: i64,
        note: Option<&str>,
    ) -> Result<Balance, StoreError> {
        attempt!(self.grant_once(account, amount, note))
    }

    async fn balance(&self, account: &Account) -> Result<Balance, StoreError> {
        attempt!(with_client!(self, c => ledger::balance(&c, account, false)))
    }

    async fn history(&self, account: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError> {
        attempt!(with_client!(self, c => ledger::history(&c, account, limit)))
    }

    async fn recompute(&self, account: &Account) -> Result<Balance, StoreError> {
        attempt!(self.recompute_once(account))
    }

    async fn search(&self, q: &TaskQuery) -> Result<(Vec<Task>, u64), StoreError> {
        let (found, total) = attempt!(self.search_once(q))?;
        let tasks = crate::store::ending_unreadable(found, |u| self.end_unreadable(u)).await?;
        Ok((tasks, total))
    }

    async fn unfinished(&self) -> Result<Vec<Unfinished>, StoreError> {
        attempt!(with_client!(self, c => rows::unfinished(&c)))
    }

    async fn audit(&self) -> Result<Audit, StoreError> {
        attempt!(self.audit_once())
    }

    async fn save_purchase(&self, purchase: &Purchase) -> Result<(), StoreError> {
        attempt!(with_client!(self, c => purchases::save(&c, purchase)))
    }

    async fn purchases(&self, task_id: &str) -> Result<Vec<Purchase>, StoreError> {
        attempt!(with_client!(self, c => purchases::of_task(&c, task_id)))
    }

    async fn save_cost(&self, cost: &Cost) -> Result<(), StoreError> {
        attempt!(with_client!(self, c => costs::save(&c, cost)))
    }

    async fn begin_cost(&self, cost: &Cost, cap: u64) -> Result<i64, StoreError> {
        attempt!(self.begin_cost_once(cost, cap))
    }

    async fn finish_cost(&self, seq: i64, cost: &Cost) -> Result<(), StoreError> {
        attempt!(with_client!(self, c => costs::finish(&c, seq, cost)))
    }

    async fn finish_task_cost(&self, task_id: &str, cost: &Cost) -> Result<bool, StoreError> {
        attempt!(with_client!(self, c => costs::finish_of_task(&c, task_id, cost)))
    }

    async fn costs_sending(&self) -> Result<Vec<Cost>, StoreError> {
        attempt!(with_client!(self, c => costs::in_state(&c, CostState::Sending)))
    }

    async fn costs(&self, task_id: &str) -> Result<Vec<Cost>, StoreError> {
        attempt!(with_client!(self, c => costs::of_task(&c, task_id)))
    }

    async fn open_sale(&self, sale: &Sale) -> Result<(), StoreError> {
        attempt!(self.open_sale_once(sale))
    }

    async fn save_sale(
        &self,
        sale: &Sale,
        from: SaleState,
        revoke: u64,
    ) -> Result<bool, StoreError> {
        attempt!(self.save_sale_once(sale, from, revoke))
    }

    async fn sale(&self, reference: &str) -> Result<Option<Sale>, StoreError> {
        attempt!(with_client!(self, c => sales::get(&c, reference)))
    }

    async fn sales(&self, task_id: &str) -> Result<Vec<Sale>, StoreError> {
        attempt!(with_client!(self, c => sales::of_task(&c, task_id)))
    }

    async fn open_sales(&self) -> Result<Vec<Sale>, StoreError> {
        attempt!(with_client!(self, c => sales::in_states(&c, crate::sales::OPEN)))
    }

    async fn unsettled_sales(&self) -> Result<Vec<Sale>, StoreError> {
        attempt!(with_client!(self, c => sales::in_states(&c, crate::sales::UNSETTLED)))
    }

    async fn open_escrow_sale(
        &self,
        task: &Task,
        sale: &EscrowSale,
    ) -> Result<Option<EscrowSale>, StoreError> {
        crate::escrow_sales::belongs_to(task, sale)?;
        let row = Row::new(task)?;
        let record = Record::new(sale)?;
        // A twin that moves on between this insert and its read leaves nothing to answer with:
        // the next attempt inserts.
        for _ in 0..RETRIES {
            if let Some(opened) = attempt!(self.open_escrow_sale_once(&row, sale, &record))? {
                return Ok(opened);
            }
        }
        Err(StoreError::Conflict)
    }

    async fn save_escrow_sale(
        &self,
        sale: &EscrowSale,
        from: EscrowState,
        money: &EscrowMove,
    ) -> Result<bool, StoreError> {
        let moves = Moves::of(sale, from, money)?;
        let record = Record::new(sale)?;
        attempt!(self.save_escrow_sale_once(sale, &record, from, &moves))
    }

    async fn escrow_sale(&self, task_id: &str) -> Result<Option<EscrowSale>, StoreError> {
        attempt!(with_client!(self, c => escrow_sales::get(&c, task_id)))
    }

    async fn escrow_sales_due(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> Result<Vec<EscrowSale>, StoreError> {
        attempt!(with_client!(self, c => escrow_sales::due(&c, now, limit)))
    }

    async fn escrow_sales(&self, open: bool, limit: u32) -> Result<Vec<EscrowSale>, StoreError> {
        attempt!(with_client!(self, c => escrow_sales::latest(&c, open, limit)))
    }

    async fn accounts(
        &self,
        query: &AccountQuery,
    ) -> Result<(Vec<AccountSummary>, u64), StoreError> {
        attempt!(self.accounts_once(query))
    }

    async fn ledger_of_task(&self, task_id: &str) -> Result<Vec<LedgerRow>, StoreError> {
        attempt!(with_client!(self, c => reports::of_task(&c, task_id)))
    }

    async fn spend_by_day(&self, since_day: &str) -> Result<Vec<DaySpend>, StoreError> {
        let since = crate::reports::day(since_day)?;
        attempt!(with_client!(self, c => reports::spend_by_day(&c, &since)))
    }

    async fn claim_leases(&self, limit: u32) -> Result<Vec<Unfinished>, StoreError> {
        let (holder, ttl) = (&self.leases.holder, self.ttl());
        attempt!(with_client!(self, c => rows::claim(&c, holder, ttl, limit)))
    }

    async fn renew_leases(&self) -> Result<Vec<String>, StoreError> {
        let (holder, ttl) = (&self.leases.holder, self.ttl());
        attempt!(with_client!(self, c => rows::renew(&c, holder, ttl)))
    }

    async fn hand_back_leases(&self) -> Result<u64, StoreError> {
        let holder = &self.leases.holder;
        attempt!(with_client!(self, c => rows::hand_back(&c, holder)))
    }

    async fn claim_refresh(&self, task_id: &str, fresh: Duration) -> Result<bool, StoreError> {
        let fresh = fresh.as_secs_f64();
        attempt!(with_client!(self, c => rows::claim_refresh(&c, task_id, fresh)))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let ping = async {
            let client = self.client().await?;
            client.simple_query("SELECT 1").await.map_err(pg)?;
            Ok(())
        };
        match tokio::time::timeout(Duration::from_secs(2), ping).await {
            Ok(done) => done,
            Err(_) => Err(unreachable("no answer to a ping in 2 s")),
        }
    }

    fn pool(&self) -> Option<PoolStatus> {
        let s = self.pool.status();
        Some(PoolStatus {
            size: s.size,
            idle: s.available,
            max: s.max_size,
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }
}
