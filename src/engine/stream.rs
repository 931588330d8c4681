//! Answers as server-sent events (an operation with `stream`): each time the task changes, every
//! frame rule whose `when` holds writes one `data:` event; the stream ends when the task ends
//! (or, with `until = "settled"`, also when it waits for input), after an optional last line
//! such as OpenAI's `[DONE]`.
//!
//! The task is followed the way a polling client would follow it: read from the store (where the
//! watcher and background executions write), and refreshed from the back with the route's
//! backoff. A stream lasts at most the route's `sync_timeout`; the client may then ask again.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{Cx, Engine, Spent, Translated};
use crate::auth::Identity;
use mapping::dialect::doc::Event;
use mapping::dialect::mapping::{Stream, Until};
use mapping::dialect::{self, mapping::Op, Canonical};
use mapping::task::Status;
use store::Stored;

/// How many events may wait for a slow client before the stream pauses.
const BACKLOG: usize = 16;

/// Starts following `task_id` for the front operation `op`; events arrive on the receiver.
/// `answer` is the operation's canonical answer (its `request` echo is kept for every event).
pub(super) fn start(
    engine: Arc<Engine>,
    t: Arc<Translated>,
    op: &Op,
    task_id: String,
    answer: Canonical<'_>,
    cx: &Cx<'_>,
) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(BACKLOG);
    let key = op.key.clone();
    let request = answer.request().cloned().unwrap_or(Value::Null);
    let request_id = cx.request_id.to_string();
    let identity = cx.identity.cloned();
    tokio::spawn(async move {
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
            request_id: &request_id,
            identity: identity.as_ref(),
        };
        if let Err(why) = follow.run(&task_id, &tx).await {
            tracing::debug!(task = %task_id, route = %t.route, "stream ended: {why}");
        }
    });
    rx
}

struct Follow<'a> {
    engine: &'a Engine,
    t: &'a Translated,
    stream: &'a Stream,
    request: Value,
    request_id: &'a str,
    identity: Option<&'a Identity>,
}

impl Follow<'_> {
    async fn run(&self, task_id: &str, tx: &mpsc::Sender<Bytes>) -> Result<(), String> {
        let start = Instant::now();
        let deadline = start + self.t.settings.sync_timeout;
        let mut interval = super::follow::FOLLOW_MIN;
        let mut seen: Option<Value> = None;
        let mut seq = 0u64;
        let mut spent = Spent::default();
        loop {
            let stored = self.load(task_id).await?;
            let mut cx = Cx {
                request_id: self.request_id,
                identity: self.identity,
                spent: &mut spent,
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
            let visible = visible(&stored);
            if seen.as_ref() != Some(&visible) {
                seen = Some(visible);
                let last = self.settled(&stored);
                self.emit(&stored, seq, last, tx).await?;
                seq += 1;
                if last {
                    if let Some(done) = &self.stream.done {
                        send(tx, format!("data: {done}\n\n")).await?;
                    }
                    return Ok(());
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err("sync_timeout reached".to_string());
            }
            interval =
                super::follow::follow_interval(now - start, self.t.settings.poll_max_interval);
            tokio::time::sleep(interval.min(deadline - now)).await;
        }
    }

    async fn load(&self, task_id: &str) -> Result<Stored, String> {
        self.engine
            .store
            .get(task_id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("task `{task_id}` is gone"))
    }

    fn settled(&self, stored: &Stored) -> bool {
        let s = stored.task.status;
        s.is_terminal() || (self.stream.until == Until::Settled && s == Status::AwaitingInput)
    }

    /// Writes the events of one state of the task.
    async fn emit(
        &self,
        stored: &Stored,
        seq: u64,
        last: bool,
        tx: &mpsc::Sender<Bytes>,
    ) -> Result<(), String> {
        let doc = Canonical::front_of(&stored.task)
            .with_request(self.request.clone())
            .with_event(Event {
                first: seq == 0,
                last,
                seq,
            });
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
            }
        }
        Ok(())
    }
}

/// The parts of a task a stream reports: its state, the agent's words, its result, its question.
fn visible(stored: &Stored) -> Value {
    let t = &stored.task;
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
