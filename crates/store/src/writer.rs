//! The store's one writer: a thread that owns the write connection and commits writes in groups.
//!
//! With `synchronous = FULL` every commit waits for the disk (an fsync of the WAL), so a
//! transaction per write caps the store at the disk's fsync rate however fast the SQL is. The
//! writer takes the first job that arrives, then every job queued behind it (up to
//! [`MAX_BATCH`]), and runs them all in one `BEGIN IMMEDIATE … COMMIT`: one fsync for the batch.
//! While it waits for the disk the next batch queues up, so the busier the store the larger the
//! batches.
//!
//! Each job runs in a savepoint of its own, undone when the job fails: one job's
//! [`StoreError::Duplicate`], [`StoreError::Insufficient`] or [`StoreError::Conflict`] leaves
//! every other job in the batch as it was. Jobs run in arrival order, and each sees what the jobs
//! before it wrote (a hold earlier in the batch counts against the balance a later one checks).
//! Nobody hears back before the batch's `COMMIT` has returned: an `Ok` means the write is durable.
//! When the commit fails, every job in the batch gets that error.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::error::{backend, StoreError};

/// The most jobs in one transaction: enough to amortise the fsync over a burst, few enough that
/// the first caller in a batch does not wait long for the last one's work.
pub(super) const MAX_BATCH: usize = 512;

/// A write waiting for the writer thread.
trait Job: Send {
    /// Runs the job inside the batch's transaction; its error, if it failed (its savepoint is then
    /// rolled back).
    fn run(&mut self, c: &Connection) -> Result<(), StoreError>;
    /// Answers the caller: the job's own result when the batch committed, else the batch's error.
    fn answer(self: Box<Self>, batch: Result<(), StoreError>);
}

/// A job as its caller wrote it, and where its result goes.
struct Pending<F, T> {
    work: Option<F>,
    result: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<F, T> Job for Pending<F, T>
where
    F: FnOnce(&Connection) -> Result<T, StoreError> + Send,
    T: Send,
{
    fn run(&mut self, c: &Connection) -> Result<(), StoreError> {
        let Some(work) = self.work.take() else {
            return Err(StoreError::Backend("a store job ran twice".to_string()));
        };
        let result = work(c);
        let outcome = result.as_ref().map(|_| ()).map_err(Clone::clone);
        self.result = Some(result);
        outcome
    }

    fn answer(self: Box<Self>, batch: Result<(), StoreError>) {
        let result = match (batch, self.result) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(result)) => result,
            // Only a job that panicked has no result (its savepoint was rolled back).
            (Ok(()), None) => Err(StoreError::Backend(
                "a store write panicked; nothing of it was stored".to_string(),
            )),
        };
        // The caller may have gone (a cancelled request); the write stands either way.
        let _ = self.reply.send(result);
    }
}

/// The handle on the writer thread; dropping it lets the thread finish the queued jobs, and waits
/// for it to close the connection.
pub(super) struct Writer {
    jobs: Option<mpsc::Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer thread on `conn` (already configured: WAL, `synchronous`, schema).
    pub(super) fn start(conn: Connection) -> Result<Writer, StoreError> {
        let (jobs, queue) = mpsc::channel::<Box<dyn Job>>();
        let thread = std::thread::Builder::new()
            .name("store-writer".to_string())
            .spawn(move || serve(&conn, &queue))
            .map_err(|e| StoreError::Backend(format!("starting the store writer: {e}")))?;
        Ok(Writer {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Queues `work` for the next batch; the receiver gets its result once the batch is durable.
    /// `work` runs on the writer thread: do everything that needs no connection (encoding,
    /// formatting timestamps) before, on the caller's side.
    pub(super) fn submit<T, F>(&self, work: F) -> oneshot::Receiver<Result<T, StoreError>>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, receiver) = oneshot::channel();
        let job = Box::new(Pending {
            work: Some(work),
            result: None,
            reply,
        });
        // If the thread is gone the job (and its reply sender) is dropped with the error, and the
        // receiver reports it.
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
        receiver
    }

    /// Runs `work` in the next batch and waits until it is durable.
    pub(super) async fn run<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(work).await.map_err(|_| {
            StoreError::Backend("the store writer stopped before answering".to_string())
        })?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop once every queued job has been answered.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread: a batch at a time until every sender is gone.
fn serve(conn: &Connection, queue: &mpsc::Receiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    let mut concurrent = false;
    // `recv` hands out what is still queued before it reports the channel closed.
    while let Ok(first) = queue.recv() {
        batch.push(first);
        batch.extend(queue.try_iter().take(MAX_BATCH - 1));
        if concurrent {
            // When the proxy and this thread share a core, the writes that will join this batch
            // are still being prepared by the proxy's thread, which cannot run while this one
            // does: giving up the core once lets them arrive, and one commit (one fsync) serves
            // them all. On one core, 64 clients: 1.3× the creates a second, 0.6× the writer's
            // CPU per create. A lone caller (the last batch held one job) never waits for it.
            std::thread::yield_now();
            let room = MAX_BATCH - batch.len();
            batch.extend(queue.try_iter().take(room));
        }
        concurrent = batch.len() > 1;
        let started = std::time::Instant::now();
        let outcome = commit(conn, &mut batch);
        tracing::trace!(
            jobs = batch.len(),
            micros = started.elapsed().as_micros() as u64,
            ok = outcome.is_ok(),
            "store batch"
        );
        if outcome.is_err() && !conn.is_autocommit() {
            // Leave no half-batch open for the next one to commit by accident.
            let _ = conn.execute_batch("ROLLBACK");
        }
        for job in batch.drain(..) {
            job.answer(outcome.clone());
        }
    }
}

/// Runs the batch in one transaction; `Ok` once it is committed.
fn commit(conn: &Connection, batch: &mut [Box<dyn Job>]) -> Result<(), StoreError> {
    step(conn, "BEGIN IMMEDIATE")?;
    for job in batch.iter_mut() {
        step(conn, "SAVEPOINT job")?;
        let ran = catch_unwind(AssertUnwindSafe(|| job.run(conn)))
            .unwrap_or_else(|_| Err(StoreError::Backend("a store write panicked".to_string())));
        if let Err(e) = ran {
            // Some errors (a full disk, an I/O error) make SQLite roll back the whole transaction
            // itself: the jobs before this one are gone too, and must not be told otherwise.
            if conn.is_autocommit() {
                return Err(StoreError::Backend(format!(
                    "a write failed and took its batch with it, nothing in it was stored: {e}"
                )));
            }
            step(conn, "ROLLBACK TO job")?;
        }
        step(conn, "RELEASE job")?;
    }
    step(conn, "COMMIT")
}

/// One statement of the batch's bracketing, prepared once per connection.
fn step(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
        .map_err(backend)
}

/// Test helpers: holding the writer still, so a test knows which jobs share a batch.
#[cfg(test)]
pub(super) mod pause {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::mpsc;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use super::Writer;

    /// Keeps the writer thread busy until the returned sender is dropped; every job queued
    /// meanwhile goes into the next batch together (up to [`super::MAX_BATCH`]).
    pub fn pause(writer: &Writer) -> mpsc::Sender<()> {
        let (started, has_started) = mpsc::channel();
        let (go, wait) = mpsc::channel::<()>();
        drop(writer.submit(move |_| {
            let _ = started.send(());
            let _ = wait.recv();
            Ok(())
        }));
        has_started
            .recv_timeout(Duration::from_secs(10))
            .expect("the writer thread took the pausing job");
        go
    }

    /// Polls `call` once, which queues its job, and hands it back to be awaited later.
    pub fn queue<F: Future + Unpin>(mut call: F) -> F {
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            Pin::new(&mut call).poll(&mut cx).is_pending(),
            "a queued write cannot be done while the writer is paused"
        );
        call
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::pause::{pause, queue};
    use crate::credits::{Account, Hold};
    use crate::{SqliteStore, StoreError, TaskStore};
    use mapping::task::Task;

    fn hold(subject: &str, amount: u64) -> Hold {
        Hold {
            plan: "gold".to_string(),
            subject: subject.to_string(),
            amount,
        }
    }

    #[tokio::test]
    async fn a_failed_write_leaves_the_rest_of_its_batch_committed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let account = Account::new("gold", "ann");
        store.grant(&account, 1, None).await.unwrap();
        let taken = Task::new("r", Utc::now());
        store.insert(&taken).await.unwrap();
        let (a, b, c) = (
            Task::new("r", Utc::now()),
            Task::new("r", Utc::now()),
            Task::new("r", Utc::now()),
        );
        let (one, two) = (hold("ann", 1), hold("ann", 1));

        let go = pause(store.writer());
        let first = queue(store.insert(&a));
        let duplicate = queue(store.insert(&taken));
        let held = queue(store.insert_with_hold(&b, Some(&one)));
        // Sees the hold just above, in the same transaction: nothing left.
        let short = queue(store.insert_with_hold(&c, Some(&two)));
        drop(go);

        assert_eq!(first.await, Ok(()));
        assert_eq!(
            duplicate.await,
            Err(StoreError::Duplicate(taken.id.clone()))
        );
        assert_eq!(held.await, Ok(()));
        assert_eq!(
            short.await,
            Err(StoreError::Insufficient {
                available: 0,
                needed: 1
            })
        );
        for (task, stored) in [(&a, true), (&b, true), (&c, false)] {
            assert_eq!(store.get(&task.id).await.unwrap().is_some(), stored);
        }
        let balance = store.balance(&account).await.unwrap();
        assert_eq!((balance.held, balance.available()), (1, 0));
        assert_eq!(store.recompute(&account).await.unwrap(), balance);
    }

    #[tokio::test]
    async fn a_write_that_panics_fails_alone() {
        let store = SqliteStore::in_memory().unwrap();
        let (a, b) = (Task::new("r", Utc::now()), Task::new("r", Utc::now()));
        let go = pause(store.writer());
        let before = queue(store.insert(&a));
        let panics = store.writer().submit(|c| -> Result<(), StoreError> {
            c.execute_batch("DELETE FROM tasks").unwrap();
            panic!("a bug in a store write")
        });
        let after = queue(store.insert(&b));
        drop(go);
        assert_eq!(before.await, Ok(()));
        assert!(matches!(panics.await, Ok(Err(StoreError::Backend(_)))));
        assert_eq!(after.await, Ok(()));
        assert!(store.get(&a.id).await.unwrap().is_some());
        assert!(store.get(&b.id).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_batch_that_cannot_commit_fails_every_write_in_it() {
        let store = SqliteStore::in_memory().unwrap();
        let (a, b) = (Task::new("r", Utc::now()), Task::new("r", Utc::now()));
        let go = pause(store.writer());
        let before = queue(store.insert(&a));
        // Ends the batch's transaction behind the writer's back: nothing before it is stored.
        let breaks = store
            .writer()
            .submit(|c| c.execute_batch("ROLLBACK").map_err(super::backend));
        let after = queue(store.insert(&b));
        drop(go);
        assert!(matches!(before.await, Err(StoreError::Backend(_))));
        assert!(matches!(breaks.await, Ok(Err(StoreError::Backend(_)))));
        assert!(matches!(after.await, Err(StoreError::Backend(_))));
        assert!(store.get(&a.id).await.unwrap().is_none());
        // The writer goes on with the next batch.
        assert_eq!(store.insert(&b).await, Ok(()));
    }

    #[tokio::test]
    async fn writes_queued_when_the_store_is_dropped_are_committed_and_answered() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let tasks: Vec<Task> = (0..20).map(|_| Task::new("r", Utc::now())).collect();
        let go = pause(store.writer());
        let answers: Vec<_> = tasks
            .iter()
            .map(|t| {
                let row = super::super::rows::Row::new(t).unwrap();
                store
                    .writer()
                    .submit(move |c| super::super::rows::insert(c, &row, ("h", 0)))
            })
            .collect();
        drop(go);
        drop(store);
        for answer in answers {
            assert_eq!(answer.await, Ok(Ok(())));
        }
        let again = SqliteStore::open(dir.path()).unwrap();
        for t in &tasks {
            assert!(again.get(&t.id).await.unwrap().is_some());
        }
    }
}
