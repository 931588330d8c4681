//! PostgreSQL's group commit: the writes of a create's path (the task with its hold, the task's
//! updates with their settlements, captures) from every caller of this instance go through one
//! task that commits them in batches, as SQLite's writer thread does (`crate::writer`).
//!
//! Why: every settlement and every hold locks its account's row until its transaction commits,
//! and a commit waits for the disk. One transaction per write lines every create of an account
//! up behind one fsync after another (measured: 64 clients of one account, 213 creates/s on
//! one core); and each statement awaited alone costs a round trip. A batch here is one
//! transaction whose statements are all sent before any answer is read (tokio-postgres
//! pipelines the requests of futures polled together): `BEGIN`, every job's one statement, then
//! `COMMIT`, one fsync for all of them. Each job is one statement because what SQLite's writer
//! decides in Rust between statements (how much a capture takes from the hold, whether the
//! update found its version) PostgreSQL decides in the functions of migration v4
//! (`settle.sql`).
//!
//! Jobs run in arrival order, each statement seeing what the ones before it wrote (a hold earlier
//! in the batch counts against the balance a later one checks). A job's expected refusals are
//! answers, not errors (a hold the balance cannot cover, an update that lost its version), so they
//! never spoil a batch; anything that is an error (an id taken, a deadlock with another instance's
//! batch) aborts the batch's transaction, and then its jobs are run again one by one, each in a
//! transaction of its own, so that only the guilty one reports it. Nobody hears back before the
//! batch's `COMMIT` has returned: an `Ok` means the write is durable.
//!
//! Two batches may be on their way at once ([`IN_FLIGHT`]): while one waits for its commit's
//! fsync, the next is sent and runs up to the first row the other holds locked (the account of a
//! hold), then goes on the moment the other commits. So that two batches never wait for each
//! other in a circle, each batch takes its accounts in one order ([`Order`]: its writes sorted by
//! account), and the lease renewal skips the task rows a batch has locked (`rows::renew`); only
//! two batches writing one task can still deadlock, which PostgreSQL breaks within
//! `deadlock_timeout` (the losing batch runs again). Measured before both rules: a benchmark run
//! of 8-second loads where deadlocks with the renewal stalled creates for a second at a time.

use deadpool_postgres::Pool;
use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::ledger::{settled, Captures, SETTLE};
use super::{rows, unreachable, OPERATION, RETRIES};
use crate::credits::{Account, Settled, Settlement};
use crate::error::{pg, StoreError};
use crate::rows::Row;

/// The most jobs in one transaction: enough to amortise a commit over a burst, few enough that a
/// batch's statements fit the connection's buffers and the first caller does not wait long.
const MAX_BATCH: usize = 128;

/// A write for the next batch.
pub(super) enum Write {
    /// A new task at version 1, leased to this instance, holding `hold`'s credits (the account
    /// and the amount) if any.
    Insert {
        row: Row,
        hold: Option<(Account, i64)>,
    },
    /// The task replaced if still at `version`, and `settlement` settled with it (only then).
    /// `account`: the account the task's hold was taken from (its plan and subject), if any.
    Update {
        row: Row,
        version: i64,
        settlement: Settlement,
        account: Option<Account>,
    },
    /// Captures or a release for a task, with no update of it.
    Settle {
        task: String,
        settlement: Settlement,
    },
}

/// Where a write comes in its batch: the writes that lock no account, then those that do, by
/// account, then those whose account is not known. Every batch takes its accounts' rows in the
/// same order, so two batches (two in flight, or two instances) never wait for each other in a
/// circle over accounts; only two batches writing one task can still deadlock (PostgreSQL breaks
/// it, and the losing batch runs again).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Order<'a> {
    NoAccount,
    Account(&'a str, &'a str),
    Unknown,
}

impl Write {
    fn order(&self) -> Order<'_> {
        match self {
            Write::Insert {
                hold: Some((a, _)), ..
            } => Order::Account(&a.plan, &a.subject),
            Write::Insert { hold: None, .. } => Order::NoAccount,
            Write::Update { settlement, .. } if settlement.is_empty() => Order::NoAccount,
            Write::Update {
                account: Some(a), ..
            } => Order::Account(&a.plan, &a.subject),
            Write::Update { account: None, .. } | Write::Settle { .. } => Order::Unknown,
        }
    }
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Written {
    /// Inserted (or updated), and settled this.
    Done(Settled),
    /// Nothing written: the account could not cover the hold; what it had.
    Refused { available: i64 },
    /// Nothing written: the task was not at the version the update expected (or is gone).
    Conflict,
}

struct Job {
    write: Write,
    reply: oneshot::Sender<Result<Written, StoreError>>,
}

/// The handle on the writer task; the task ends when the handle is dropped and the queue is
/// empty.
pub(super) struct Writer {
    jobs: mpsc::UnboundedSender<Job>,
}

/// Where the writer gets its connections, and what it leases new tasks with.
pub(super) struct Settings {
    pub(super) pool: Pool,
    pub(super) holder: String,
    /// The lease length in seconds.
    pub(super) ttl: f64,
}

impl Writer {
    /// Starts the writer task on the current runtime.
    pub(super) fn start(settings: Settings) -> Writer {
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(serve(settings, queue));
        Writer { jobs }
    }

    /// Runs `write` in the next batch and waits until it is durable (or failed).
    pub(super) async fn run(&self, write: Write) -> Result<Written, StoreError> {
        let (reply, answer) = oneshot::channel();
        // If the task is gone the job (and its reply sender) is dropped, and `answer` says so.
        let _ = self.jobs.send(Job { write, reply });
        answer.await.map_err(|_| {
            StoreError::Backend("the PostgreSQL writer stopped before answering".to_string())
        })?
    }
}

/// How many batches may be on their way at once: while one waits for its commit (the disk), the
/// next is sent, and runs up to the first row the other has locked.
const IN_FLIGHT: usize = 2;

/// The writer task: batches until every sender is gone.
async fn serve(settings: Settings, mut queue: mpsc::UnboundedReceiver<Job>) {
    let settings = std::sync::Arc::new(settings);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut concurrent = false;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            break;
        };
        let mut batch = Vec::with_capacity(MAX_BATCH);
        batch.push(first);
        fill(&mut batch, &mut queue);
        if concurrent {
            // The writes that will join this batch may still be on their way from tasks on this
            // runtime's thread: giving it up once lets them arrive (a lone caller, whose last
            // batch held one job, never waits for it).
            tokio::task::yield_now().await;
            fill(&mut batch, &mut queue);
        }
        concurrent = batch.len() > 1;
        batch.sort_by(|a, b| a.write.order().cmp(&b.write.order()));
        let settings = settings.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let count = batch.len();
            let writes: Vec<&Write> = batch.iter().map(|j| &j.write).collect();
            let results = run_batch(&settings, &writes).await;
            tracing::trace!(
                jobs = count,
                micros = started.elapsed().as_micros() as u64,
                "PostgreSQL batch"
            );
            for (job, result) in batch.into_iter().zip(results) {
                // The caller may have gone (a cancelled request); the write stands either way.
                let _ = job.reply.send(result);
            }
            drop(slot);
        });
    }
}

fn fill(batch: &mut Vec<Job>, queue: &mut mpsc::UnboundedReceiver<Job>) {
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// Each write's result: the batch in one transaction (again after a deadlock, up to
/// [`RETRIES`] times); when it fails otherwise, each write alone.
async fn run_batch(s: &Settings, writes: &[&Write]) -> Vec<Result<Written, StoreError>> {
    let mut tries = 0;
    loop {
        match deadline(commit(s, writes)).await {
            Ok(done) => return done.into_iter().map(Ok).collect(),
            Err(Fail::Retry(_)) if tries < RETRIES => tries += 1,
            Err(Fail::Unavailable(e)) => return writes.iter().map(|_| Err(e.clone())).collect(),
            Err(e) if writes.len() == 1 => return vec![Err(e.into_error(writes[0]))],
            Err(_) => break,
        }
    }
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        let mut tries = 0;
        let result = loop {
            match deadline(commit(s, std::slice::from_ref(write))).await {
                Ok(mut done) => break done.pop().ok_or_else(nothing),
                Err(Fail::Retry(_)) if tries < RETRIES => tries += 1,
                Err(e) => break Err(e.into_error(write)),
            }
        };
        results.push(result);
    }
    results
}

fn nothing() -> StoreError {
    StoreError::Backend("PostgreSQL answered nothing for a write".to_string())
}

/// Why a batch failed.
enum Fail {
    /// A deadlock or a serialization failure: the batch can run again as it is.
    Retry(tokio_postgres::Error),
    /// No connection, or no answer in time: every write of the batch gets this.
    Unavailable(StoreError),
    /// Another error (one write's, or the transaction's).
    Other(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Fail {
        match e.code() {
            Some(c)
                if *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                Fail::Retry(e)
            }
            Some(_) => Fail::Other(e),
            None => match pg(e) {
                StoreError::Unavailable(why) => Fail::Unavailable(StoreError::Unavailable(why)),
                other => Fail::Unavailable(other),
            },
        }
    }
}

impl Fail {
    /// The error one write reports.
    fn into_error(self, write: &Write) -> StoreError {
        match (self, write) {
            (Fail::Other(e), Write::Insert { row, .. })
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION) =>
            {
                StoreError::Duplicate(row.id().to_string())
            }
            (Fail::Retry(e) | Fail::Other(e), _) => pg(e),
            (Fail::Unavailable(e), _) => e,
        }
    }
}

async fn deadline<T>(work: impl std::future::Future<Output = Result<T, Fail>>) -> Result<T, Fail> {
    match tokio::time::timeout(OPERATION, work).await {
        Ok(done) => done,
        Err(_) => Err(Fail::Unavailable(unreachable(format!(
            "no answer in {OPERATION:?}"
        )))),
    }
}

/// The SQL of the writes that settle, one statement each (the functions of `settle.sql`; a
/// settlement alone is [`SETTLE`]).
const UPDATE_AND_SETTLE: &str =
    "SELECT * FROM interlingua_update_and_settle($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

/// Runs `writes` in one transaction, every statement sent before the first answer is read; each
/// write's result once the transaction has committed.
async fn commit(s: &Settings, writes: &[&Write]) -> Result<Vec<Written>, Fail> {
    let mut client = s.pool.get().await.map_err(|e| {
        Fail::Unavailable(match e {
            deadpool_postgres::PoolError::Backend(e) => pg(e),
            e => unreachable(e),
        })
    })?;
    let tx = client.transaction().await?;
    // Prepared once per connection (the pool's statement cache); a batch prepares only the kinds
    // it has.
    let mut prepared = Prepared::default();
    for write in writes {
        prepared.get(&tx, write).await?;
    }
    let at = mapping::task::time::format_iso_ms(chrono::Utc::now());
    let captures: Vec<Option<Captures>> = writes
        .iter()
        .map(|w| match w {
            Write::Update { settlement, .. } | Write::Settle { settlement, .. }
                if !settlement.is_empty() =>
            {
                Some(Captures::of(settlement))
            }
            _ => None,
        })
        .collect();
    let sent = writes.iter().zip(&captures).map(|(write, captures)| {
        let tx = &tx;
        let (prepared, at, s) = (&prepared, &at, s);
        async move {
            let statement = prepared.of(write)?;
            written(tx, statement, write, captures.as_ref(), at, s).await
        }
    });
    // The accounts first (see `LOCK_ACCOUNTS`), then the writes: `join` polls (sends) in that order.
    let results = join_all(sent).await;
    let mut done = Vec::with_capacity(results.len());
    for result in results {
        done.push(result?);
    }
    tx.commit().await?;
    // A refused hold's message says what the account has: read after the commit, since the
    // statement's own snapshot may predate the holds it waited for.
    let refused = done
        .iter()
        .zip(writes)
        .filter_map(|(d, w)| match (d, w) {
            (
                Written::Refused { .. },
                Write::Insert {
                    hold: Some((account, _)),
                    ..
                },
            ) => Some(account),
            _ => None,
        })
        .collect::<Vec<_>>();
    if !refused.is_empty() {
        let stmt = client.prepare_cached(AVAILABLE).await?;
        let client = &client;
        let read = refused.iter().map(|a| {
            let stmt = &stmt;
            async move { client.query_opt(stmt, &[&a.plan, &a.subject]).await }
        });
        let mut available = join_all(read).await.into_iter();
        for d in done.iter_mut() {
            if let Written::Refused { available: a } = d {
                if let Some(row) = available.next().transpose()? {
                    *a = row.map_or(0, |r| r.get(0));
                }
            }
        }
    }
    Ok(done)
}

const AVAILABLE: &str =
    "SELECT granted - captured - held FROM accounts WHERE plan = $1 AND subject = $2";

/// The statements a batch uses, prepared on its connection.
#[derive(Default)]
struct Prepared([Option<tokio_postgres::Statement>; KINDS]);

/// How many kinds of statement a write can be ([`Write::kind`]).
const KINDS: usize = 5;

impl Write {
    /// Which statement this write is (an index into [`Prepared`]).
    fn kind(&self) -> usize {
        match self {
            Write::Insert { hold: None, .. } => 0,
            Write::Insert { hold: Some(_), .. } => 1,
            Write::Update { settlement, .. } if settlement.is_empty() => 2,
            Write::Update { .. } => 3,
            Write::Settle { .. } => 4,
        }
    }

    /// The SQL of a [`Write::kind`].
    fn sql(kind: usize) -> String {
        match kind {
            0 => rows::INSERT.to_string(),
            1 => rows::with_hold(),
            2 => rows::UPDATE.to_string(),
            3 => UPDATE_AND_SETTLE.to_string(),
            _ => SETTLE.to_string(),
        }
    }
}

impl Prepared {
    async fn get(
        &mut self,
        tx: &deadpool_postgres::Transaction<'_>,
        write: &Write,
    ) -> Result<(), Fail> {
        let kind = write.kind();
        if self.0[kind].is_none() {
            self.0[kind] = Some(tx.prepare_cached(&Write::sql(kind)).await?);
        }
        Ok(())
    }

    fn of(&self, write: &Write) -> Result<&tokio_postgres::Statement, Fail> {
        self.0[write.kind()].as_ref().ok_or_else(|| {
            Fail::Unavailable(StoreError::Backend("a statement was not prepared".into()))
        })
    }
}

/// Sends one write's statement and reads what it did.
async fn written(
    tx: &deadpool_postgres::Transaction<'_>,
    statement: &tokio_postgres::Statement,
    write: &Write,
    captures: Option<&Captures>,
    at: &String,
    s: &Settings,
) -> Result<Written, Fail> {
    let empty = Captures {
        steps: Vec::new(),
        amounts: Vec::new(),
    };
    match write {
        Write::Insert { row, hold } => {
            let mut params = rows::insert_params(row, &s.holder, &s.ttl);
            match hold {
                None => {
                    tx.execute(statement, &params).await?;
                    Ok(Written::Done(Settled::default()))
                }
                Some((account, amount)) => {
                    params.extend([
                        &account.plan as &(dyn ToSql + Sync),
                        &account.subject,
                        amount,
                        at,
                    ]);
                    let r = tx.query_one(statement, &params).await?;
                    if r.get::<_, bool>(0) {
                        Ok(Written::Done(Settled::default()))
                    } else {
                        Ok(Written::Refused { available: 0 })
                    }
                }
            }
        }
        Write::Update {
            row,
            version,
            settlement,
            ..
        } => {
            if settlement.is_empty() {
                let n = tx
                    .execute(statement, &rows::update_params(row, version))
                    .await?;
                return Ok(if n == 1 {
                    Written::Done(Settled::default())
                } else {
                    Written::Conflict
                });
            }
            let c = captures.unwrap_or(&empty);
            let r = tx
                .query_one(
                    statement,
                    &[
                        &row.id,
                        version,
                        &row.status,
                        &row.name,
                        &row.upstream_id,
                        &row.terminal,
                        &row.updated_at,
                        &row.doc,
                        &row.conversation,
                        &c.steps,
                        &c.amounts,
                        &settlement.release,
                        at,
                    ],
                )
                .await?;
            if !r.get::<_, bool>(0) {
                return Ok(Written::Conflict);
            }
            Ok(Written::Done(settled(r.get(1), r.get(2))))
        }
        Write::Settle { task, settlement } => {
            let c = captures.unwrap_or(&empty);
            let r = tx
                .query_one(
                    statement,
                    &[task, &c.steps, &c.amounts, &settlement.release, at],
                )
                .await?;
            Ok(Written::Done(settled(r.get(0), r.get(1))))
        }
    }
}
