//! Answers as server-sent events (an operation with `stream`): each time the task changes, every
//! frame rule whose `when` holds writes one `data:` event; the stream ends when the task ends
//! (or, with `until = "settled"`, also when it waits for input; or when the form's `end` holds),
//! after an optional last line such as OpenAI's `[DONE]`. With `every`, the frames run again as
//! a heartbeat (`event.tick`) when the task has not changed for that long.
//!
//! The task is followed the way a polling client would follow it: read from the store (where the
//! watcher and background executions write), and refreshed from the back with the route's
//! backoff. A stream lasts at most the route's `sync_timeout`; then it closes, or with
//! `timeout = "frames"` writes a last event (`event.timeout`) first; the client may ask again.
//!
//! A search's stream ([`Target::Search`]: a `search_tasks` form with `stream`, MCP's GET stream) follows
//! the tasks the search finds instead: read from the store every [`FEED_EVERY`], each task that
//! changed since the last read (or appeared) is one event, its frames written with it as
//! `task.*`. What the tasks were when the stream opened is not sent. It lasts an hour at most;
//! `keepalive` applies, `end`, `every` and `timeout` do not.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{Cx, Engine, Spent, Translated};
use crate::auth::Identity;
use crate::telemetry::trace::{self, ClientTrace};
use mapping::dialect::doc::Event;
use mapping::dialect::mapping::{Stream, Until};
use mapping::dialect::{self, mapping::Op, Canonical};
use mapping::task::Task;
use store::{Stored, TaskQuery};

/// How many events may wait for a slow client before the stream pauses.
const BACKLOG: usize = 16;
/// The longest a stream that lasts as long as its task (`lasts = "task"`) is kept open.
const LONGEST: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a stream follows.
pub(super) enum Target {
    /// One task, by its id; `answered`, the step the request just gave input to (see
    /// [`super::documents::asks_anew`]).
    Task {
        id: String,
        answered: Option<String>,
    },
    /// The tasks a search finds.
    Search(TaskQuery),
}

/// Starts the stream of the front form `op` on `target`, in a task of its own; its events arrive
/// on the receiver. `answer` is the operation's canonical answer (its `request` echo is kept for
/// every event).
pub(super) fn start(
    engine: Arc<Engine>,
    t: Arc<Translated>,
    op: &Op,
    target: Target,
    answer: Canonical<'_>,
    cx: &Cx<'_>,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(BACKLOG);
    let key = op.key.clone();
    let request = answer.request().cloned().unwrap_or(Value::Null);
    let receipt = cx
        .receipt
        .as_ref()
        .and_then(|r| serde_json::to_value(r).ok());
    let request_id = cx.request_id.to_string();
    let identity = cx.identity.cloned();
    let client_trace = cx.trace.cloned();
    let traced = trace::background("stream");
    let run = async move {
        let Some(stream) = t
            .front
            .ops
            .iter()
            .find(|o| o.key == key)
            .and_then(|o| o.stream.as_ref())
        else {
            return;
        };
        let follow = Follow {
            engine: &engine,
            t: &t,
            stream,
            request,
            receipt,
            request_id: &request_id,
            identity: identity.as_ref(),
            trace: client_trace.as_ref(),
        };
        let (task, ended) = match target {
            Target::Task { id, answered } => {
                let ended = follow.run(&id, answered.as_deref(), &tx).await;
                (id, ended)
            }
            Target::Search(query) => (
                "(a search's)".to_string(),
                follow.run_feed(query, &tx).await,
            ),
        };
        if let Err(why) = ended {
            tracing::debug!(%task, route = %t.route, stream = %key, "stream ended: {why}");
        }
    };
    tokio::spawn(run.instrument(traced));
    rx
}

/// How often a search's stream reads its tasks (the watcher and background executions keep
/// them current in the store).
const FEED_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How many tasks a search's stream follows: the search's first page of this many.
const FEED_TASKS: u32 = 100;

struct Follow<'a> {
    engine: &'a Engine,
    t: &'a Translated,
    stream: &'a Stream,
    request: Value,
    /// The settlement the request that started the stream made (x402), for its events.
    receipt: Option<Value>,
    request_id: &'a str,
    identity: Option<&'a Identity>,
    trace: Option<&'a ClientTrace>,
}

impl Follow<'_> {
    async fn run(
        &self,
        task_id: &str,
        answered: Option<&str>,
        tx: &mpsc::Sender<Bytes>,
    ) -> Result<(), String> {
        let start = Instant::now();
        let deadline = start
            + if self.stream.lasts_task {
                LONGEST
            } else {
                self.t.settings.sync_timeout
            };
        // When anything was last written: a keepalive comment is due that long after it.
        let mut last_write = start;
        let mut interval = super::follow::FOLLOW_MIN;
        let mut seen: Option<Value> = None;
        let mut seq = 0u64;
        // When the last event was written: a heartbeat (`every`) is due that long after it.
        let mut last_event = start;
        loop {
            let stored = self.load(task_id).await?;
            let mut cx = Cx {
                request_id: self.request_id,
                identity: self.identity,
                trace: self.trace,
                spent: Spent::default(),
                paid: None,
                receipt: None,
            };
            // A client watching the stream waits for the next event: followed as closely as a
            // client waiting for the result.
            let stored = self
                .engine
                .refresh_within(self.t, stored, interval, &mut cx)
                .await
                .map_err(|e| e.to_string())?;
            // What a client can see of the task; a change the client cannot see (a status id the
            // back renews on every poll) is no event.
            let visible = visible(&stored.task);
            let now = Instant::now();
            let changed = seen.as_ref() != Some(&visible);
            let tick = !changed && self.stream.every.is_some_and(|e| now >= last_event + e);
            if changed || tick {
                seen = Some(visible);
                let mut event = Event {
                    first: seq == 0,
                    last: false,
                    seq,
                    tick,
                    timeout: false,
                };
                event.last = self.ends(&stored, answered, event);
                if self.emit(&stored.task, event, tx).await? {
                    last_write = now;
                }
                seq += 1;
                last_event = now;
                if event.last {
                    return self.close(tx).await;
                }
            }
            if now >= deadline {
                if !self.stream.timeout_frames {
                    return Err("sync_timeout reached".to_string());
                }
                let event = Event {
                    first: seq == 0,
                    last: true,
                    seq,
                    tick: false,
                    timeout: true,
                };
                self.emit(&stored.task, event, tx).await?;
                return self.close(tx).await;
            }
            if let Some(keepalive) = self.stream.keepalive {
                if now >= last_write + keepalive {
                    send(tx, ": keepalive\n\n".to_string()).await?;
                    last_write = now;
                }
            }
            interval =
                super::follow::follow_interval(now - start, self.t.settings.poll_max_interval);
            let mut wake = deadline;
            if let Some(every) = self.stream.every {
                wake = wake.min(last_event + every);
            }
            if let Some(keepalive) = self.stream.keepalive {
                wake = wake.min(last_write + keepalive);
            }
            tokio::time::sleep(interval.min(wake.saturating_duration_since(now))).await;
        }
    }

    /// A search's stream: each task of the search that changes, as one event.
    async fn run_feed(&self, mut query: TaskQuery, tx: &mpsc::Sender<Bytes>) -> Result<(), String> {
        query.page = 1;
        query.page_size = FEED_TASKS;
        let start = Instant::now();
        let deadline = start + LONGEST;
        let mut last_write = start;
        // What each task looked like at the last read; none before the first.
        let mut seen: Option<std::collections::HashMap<String, Value>> = None;
        let mut seq = 0u64;
        loop {
            if tx.is_closed() {
                return Err("the client left".to_string());
            }
            let (tasks, _) = self
                .engine
                .store
                .search(&query)
                .instrument(self.engine.store_span("search"))
                .await
                .map_err(|e| e.to_string())?;
            let now = Instant::now();
            let mut current = std::collections::HashMap::with_capacity(tasks.len());
            for task in &tasks {
                let visible = visible(task);
                let changed = seen
                    .as_ref()
                    .is_some_and(|s| s.get(&task.id) != Some(&visible));
                current.insert(task.id.clone(), visible);
                if changed {
                    let event = Event {
                        first: seq == 0,
                        last: false,
                        seq,
                        tick: false,
                        timeout: false,
                    };
                    if self.emit(task, event, tx).await? {
                        last_write = now;
                    }
                    seq += 1;
                }
            }
            seen = Some(current);
            if now >= deadline {
                return self.close(tx).await;
            }
            let mut wake = deadline.min(now + FEED_EVERY);
            if let Some(keepalive) = self.stream.keepalive {
                if now >= last_write + keepalive {
                    send(tx, ": keepalive\n\n".to_string()).await?;
                    last_write = now;
                }
                wake = wake.min(last_write + keepalive);
            }
            tokio::time::sleep(wake.saturating_duration_since(now)).await;
        }
    }

    /// The stream's last line, if the form has one.
    async fn close(&self, tx: &mpsc::Sender<Bytes>) -> Result<(), String> {
        if let Some(done) = &self.stream.done {
            send(tx, format!("data: {done}\n\n")).await?;
        }
        Ok(())
    }

    async fn load(&self, task_id: &str) -> Result<Stored, String> {
        self.engine
            .store
            .get(task_id)
            .instrument(self.engine.store_span("get"))
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("task `{task_id}` is gone"))
    }

    /// Whether the stream ends with this event: the form's `end` holds, or the task has
    /// ended (or, with `until = "settled"`, waits for input on a step other than `answered`).
    fn ends(&self, stored: &Stored, answered: Option<&str>, event: Event) -> bool {
        if let Some(end) = &self.stream.end {
            let doc = self.doc(&stored.task, event);
            return dialect::holds(end, &doc, &self.t.front_ctx());
        }
        stored.task.status.is_terminal()
            || (self.stream.until == Until::Settled
                && super::documents::asks_anew(&stored.task, answered))
    }

    fn doc<'s>(&self, task: &'s Task, event: Event) -> Canonical<'s> {
        let doc = Canonical::front_of(task)
            .with_request(self.request.clone())
            .with_event(event);
        match &self.receipt {
            Some(r) => doc.with_payment_receipt(r.clone()),
            None => doc,
        }
    }

    /// Writes the events of one state of the task; whether any frame wrote one.
    async fn emit(
        &self,
        task: &Task,
        event: Event,
        tx: &mpsc::Sender<Bytes>,
    ) -> Result<bool, String> {
        let mut wrote = false;
        let doc = self.doc(task, event);
        let ctx = self.t.front_ctx();
        for frame in &self.stream.frames {
            if frame
                .when
                .as_ref()
                .is_some_and(|w| !dialect::holds(w, &doc, &ctx))
            {
                continue;
            }
            let event = dialect::encode(&frame.rules, &doc, &ctx)
                .map_err(|e| format!("writing an event: {e}"))?;
            if let Some(body) = event.body {
                send(tx, format!("data: {body}\n\n")).await?;
                wrote = true;
            }
        }
        Ok(wrote)
    }
}

/// The parts of a task a stream reports: its state, the agent's words, its result, its question.
fn visible(t: &Task) -> Value {
    json!([
        t.status.name(),
        t.message,
        t.output,
        t.input_request,
        t.steps.len()
    ])
}

async fn send(tx: &mpsc::Sender<Bytes>, event: String) -> Result<(), String> {
    tx.send(Bytes::from(event))
        .await
        .map_err(|_| "the client left".to_string())
}
