//! The watcher: interlingua follows every task it started until the task ends, polling the back
//! with backoff, so credits settle even when the client never polls again. After a restart it
//! picks up every unfinished task from the store; a task whose call was lost with the process
//! (nothing left to follow) fails as interrupted, its hold released.
//!
//! Several instances on one store share the work through leases ([`store::TaskStore`]): a task is
//! leased to the instance that created it, each instance renews its leases every third of their
//! length, and claims (`FOR UPDATE SKIP LOCKED`) the tasks whose lease ran out — their instance
//! died — so that every unfinished task is followed by exactly one live instance. A stopping
//! instance hands its leases back; a stalled one that finds a task taken over stops following it.
//!
//! A config reload gives the watcher the new routes ([`Watcher::set_routes`]): each check looks its
//! task's route up afresh, so polls pick up a route's new credentials and timeouts, and a task
//! whose route was removed drains on the route it was watched under.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use super::{Cx, Engine, Translated};
use crate::telemetry::trace;
use mapping::task::{Operation, Status};
use store::Unfinished;

/// How many tasks are refreshed at the same time.
const CONCURRENCY: usize = 16;
/// The longest the open x402 sales go unlooked at while a route takes x402.
const SALES_SWEEP: Duration = Duration::from_secs(5);
/// The shortest pause between two sweeps of the escrow sales.
const ESCROW_TICK_MIN: Duration = Duration::from_millis(200);
/// How many tasks one claim takes at most (a dead instance's tasks come over in such batches).
const CLAIM_BATCH: u32 = 1000;

/// Follows unfinished tasks until they end.
pub struct Watcher {
    engine: Arc<Engine>,
    /// Translated routes by name, as the live config has them.
    routes: ArcSwap<HashMap<String, Arc<Translated>>>,
    /// When each watched task is next due, and its current interval.
    queue: parking_lot::Mutex<Schedule>,
    wake: Notify,
    /// How long this instance's leases last without renewal.
    lease_ttl: Duration,
}

/// Task ids are shared between the heap and the map: after a restart the watcher may follow 10⁵
/// tasks or more, and each id held once keeps its memory in bounds.
#[derive(Default)]
struct Schedule {
    due: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    watched: HashMap<Arc<str>, Watched>,
}

/// One watched task.
struct Watched {
    /// Its route's longest interval, and its current one.
    max: Duration,
    interval: Duration,
    /// The route it was watched under: followed on it once a reload has removed the route.
    route: Arc<Translated>,
}

impl Watcher {
    pub fn new(
        engine: Arc<Engine>,
        routes: impl IntoIterator<Item = Arc<Translated>>,
        lease_ttl: Duration,
    ) -> Arc<Watcher> {
        Arc::new(Watcher {
            engine,
            routes: ArcSwap::from_pointee(by_name(routes)),
            queue: parking_lot::Mutex::new(Schedule::default()),
            wake: Notify::new(),
            lease_ttl,
        })
    }

    /// The routes of a reloaded config, in place of the old ones.
    pub fn set_routes(&self, routes: impl IntoIterator<Item = Arc<Translated>>) {
        self.routes.store(Arc::new(by_name(routes)));
    }

    /// Starts following a task of route `t` (its first check after the route's poll interval).
    pub fn watch(&self, task_id: &str, t: &Arc<Translated>) {
        if t.back.op(Operation::GetTask).is_none() {
            // A back that cannot be asked finishes its tasks through the background executor.
            return;
        }
        let first = t.settings.poll_interval;
        let max = t.settings.poll_max_interval;
        let mut q = self.queue.lock();
        if !q.watched.contains_key(task_id) {
            let id: Arc<str> = Arc::from(task_id);
            let watched = Watched {
                max,
                interval: first,
                route: t.clone(),
            };
            q.watched.insert(id.clone(), watched);
            q.due.push(Reverse((Instant::now() + first, id)));
        }
        drop(q);
        self.wake.notify_one();
    }

    /// How many tasks are being followed.
    pub fn watching(&self) -> usize {
        self.queue.lock().watched.len()
    }

    /// Follows tasks until the runtime stops: first every unfinished task in the store that no
    /// live instance follows, then each new one as it is created, and, every third of a lease,
    /// the tasks of instances that died. `listed` flips once the first claim is done: the
    /// listeners wait for it, so that a task created by this process is never taken for one an
    /// earlier process left behind (a synchronous back's would be failed as interrupted).
    pub async fn run(self: Arc<Self>, listed: tokio::sync::watch::Sender<bool>) {
        let claimed = self.claim().await;
        let _ = listed.send(true);
        if !claimed.is_empty() {
            tracing::info!(tasks = claimed.len(), "resuming unfinished tasks");
        }
        for task in claimed {
            self.resume(task).await;
        }
        if self.engine.store.shared() {
            tokio::spawn(self.clone().keep_leases());
        }
        tokio::spawn(self.clone().keep_sales());
        tokio::spawn(self.clone().keep_escrow());
        let permits = Arc::new(Semaphore::new(CONCURRENCY));
        loop {
            let next = self.queue.lock().due.peek().map(|Reverse((at, _))| *at);
            match next {
                None => self.wake.notified().await,
                Some(at) if at > Instant::now() => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = self.wake.notified() => {}
                    }
                }
                Some(_) => {
                    let Some(Reverse((_, id))) = self.queue.lock().due.pop() else {
                        continue;
                    };
                    // Taken over by another instance while this one stalled.
                    if !self.queue.lock().watched.contains_key(&id) {
                        continue;
                    }
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        return;
                    };
                    let me = self.clone();
                    let span = trace::watch(&id);
                    tokio::spawn(async move {
                        // Boxed: the task spawned holds a pointer, not the check's large
                        // future, copied into the task at each spawn.
                        let next = Box::pin(me.check(&id)).instrument(span).await;
                        me.reschedule(id, next);
                        drop(permit);
                    });
                }
            }
        }
    }

    /// Claims every task whose lease ran out or was handed back, in batches.
    async fn claim(&self) -> Vec<store::Unfinished> {
        let mut claimed = Vec::new();
        loop {
            match self.engine.store.claim_leases(CLAIM_BATCH).await {
                Ok(batch) => {
                    let more = batch.len() == CLAIM_BATCH as usize;
                    claimed.extend(batch);
                    if !more {
                        break;
                    }
                }
                Err(e) => {
                    tracing::error!("cannot claim unfinished tasks: {e}");
                    break;
                }
            }
        }
        let taken = claimed.iter().filter(|t| t.taken_from.is_some()).count();
        if taken > 0 {
            self.engine.metrics.lease_takeovers(taken as u64);
            let mut from: Vec<&str> = claimed
                .iter()
                .filter_map(|t| t.taken_from.as_deref())
                .collect();
            from.sort_unstable();
            from.dedup();
            tracing::warn!(
                tasks = taken,
                instances = ?from,
                "took over the tasks of instances whose leases ran out (stopped or unreachable)"
            );
        }
        claimed
    }

    /// Sweeps the open sales of x402 payments (`engine/settle/x402.rs`): at start-up (what a crash
    /// left), then whenever one falls due, and at least every [`SALES_SWEEP`] while a route
    /// takes x402 (a sale opened meanwhile may fall due sooner). Quiet while no route does.
    async fn keep_sales(self: Arc<Self>) {
        loop {
            let next = if self.routes.load().values().any(|t| t.x402.is_some()) {
                let routes = self.routes.load_full();
                let route_of = move |name: &str| routes.get(name).cloned();
                self.engine.sweep_sales(&route_of).await
            } else {
                None
            };
            tokio::time::sleep(next.unwrap_or(SALES_SWEEP).min(SALES_SWEEP)).await;
        }
    }

    /// Sweeps the sales made on a Masumi node (`engine/settle/escrow.rs`): at start-up, when a sold
    /// job's result is ready, and every route's polling interval (at most [`SALES_SWEEP`])
    /// while a route sells. Quiet while no route does.
    async fn keep_escrow(self: Arc<Self>) {
        loop {
            let tick = self
                .routes
                .load()
                .values()
                .filter(|t| t.sell.is_some())
                .map(|t| t.settings.poll_interval)
                .min();
            if tick.is_some() {
                let routes = self.routes.load_full();
                let route_of = move |name: &str| routes.get(name).cloned();
                self.engine.sweep_escrow(&route_of).await;
            }
            let wait = tick
                .unwrap_or(SALES_SWEEP)
                .clamp(ESCROW_TICK_MIN, SALES_SWEEP);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.engine.escrow_woken() => {}
            }
        }
    }

    /// Every third of a lease: renews this instance's leases (dropping the tasks another
    /// instance took over while this one stalled), then claims the tasks of instances that died.
    async fn keep_leases(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.lease_ttl / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            // Only tasks watched before the renewal began can be judged by its answer: one
            // created meanwhile may be missing from it and still be this instance's.
            let before: Vec<Arc<str>> = self.queue.lock().watched.keys().cloned().collect();
            match self.engine.store.renew_leases().await {
                Ok(held) => {
                    let held: std::collections::HashSet<String> = held.into_iter().collect();
                    let lost: Vec<Arc<str>> = before
                        .into_iter()
                        .filter(|id| !held.contains(&**id))
                        .collect();
                    self.engine.metrics.leases_held(held.len());
                    if !lost.is_empty() {
                        let mut q = self.queue.lock();
                        for id in &lost {
                            q.watched.remove(id);
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot renew this instance's task leases: {e}"),
            }
            for task in self.claim().await {
                self.resume(task).await;
            }
        }
    }

    /// Picks up a task claimed unfinished: at start-up, or from an instance that died. A call in
    /// flight was lost with the process that made it:
    /// a synchronous back's (the task was working on it), or a create on any back whose answer
    /// never came (the task has no upstream id, so there is nothing to follow, and nothing it
    /// could be asked about). Such a task fails, its hold released; anything else (a task
    /// waiting to be paid for, which has no upstream id either) is followed again.
    async fn resume(&self, task: Unfinished) {
        let Some(t) = self.routes.load().get(&task.route).cloned() else {
            tracing::warn!(task = %task.id, route = %task.route, "the task's route is no longer configured");
            return;
        };
        let stored = match self
            .engine
            .store
            .get(&task.id)
            .instrument(self.engine.store_span("get"))
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(task = %task.id, "cannot read the task: {e}");
                return;
            }
        };
        let working = matches!(task.status, Status::Pending | Status::Running);
        if stored.task.waits_for_buyer() || stored.task.submits_result() {
            // A sold job waiting for its buyer's lock, or done and submitting its result: the
            // escrow sweep follows it (engine/settle/escrow.rs).
            return;
        }
        let message = if stored.task.awaits_first_payment() {
            // Nothing was asked of the agent: it waits for its payment as before.
            self.watch(&task.id, &t);
            return;
        } else if t.sync_task(&stored.task) && working {
            "interlingua stopped while the agent was working on the task"
        } else if !task.started {
            "interlingua stopped before the agent answered the task's create: it was never followed (the agent may have started it)"
        } else {
            self.watch(&task.id, &t);
            return;
        };
        if let Err(e) = self.engine.interrupted(&t, stored, message).await {
            tracing::error!(task = %task.id, "cannot settle an interrupted task: {e}");
        }
    }

    /// Refreshes one task. `None` once it has ended; otherwise the latest the next check may
    /// come (a task waiting for input or payment is checked when its `input_timeout` is up).
    async fn check(&self, id: &str) -> Option<Duration> {
        let stored = match self
            .engine
            .store
            .get(id)
            .instrument(self.engine.store_span("get"))
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(task = id, "watcher: {e}");
                return Some(Duration::MAX);
            }
        };
        if stored.task.status.is_terminal() {
            return None;
        }
        let Some(t) = self.route_of(id, &stored.task.route) else {
            tracing::warn!(task = id, route = %stored.task.route, "watcher: the task's route is no longer configured");
            return None;
        };
        let t = &t;
        if let Some(left) = expires_in(t, &stored.task) {
            if left.is_zero() {
                return match self.engine.expire(t, stored).await {
                    Ok(s) => (!s.task.status.is_terminal()).then_some(Duration::MAX),
                    Err(e) => {
                        tracing::warn!(task = id, "watcher: ending an expired task: {e}");
                        Some(Duration::MAX)
                    }
                };
            }
        }
        let request_id = format!("watch-{id}");
        let mut cx = Cx::background(&request_id);
        match self.engine.refresh(t, stored, &mut cx).await {
            Ok(s) if s.task.status.is_terminal() => None,
            Ok(s) => Some(expires_in(t, &s.task).unwrap_or(Duration::MAX)),
            Err(e) => {
                tracing::debug!(task = id, "watcher: {e}");
                Some(Duration::MAX)
            }
        }
    }

    /// The task's route in the live config, else the one it was watched under (removed by a
    /// reload since: the task drains on it).
    fn route_of(&self, id: &str, route: &str) -> Option<Arc<Translated>> {
        if let Some(t) = self.routes.load().get(route) {
            return Some(t.clone());
        }
        self.queue.lock().watched.get(id).map(|w| w.route.clone())
    }

    fn reschedule(&self, id: Arc<str>, next: Option<Duration>) {
        let mut q = self.queue.lock();
        let Some(latest) = next else {
            q.watched.remove(&id);
            return;
        };
        let Some(w) = q.watched.get_mut(&id) else {
            return;
        };
        // An unanswered back, or a task that waits long, is polled ever more rarely, up to the
        // route's longest interval.
        w.interval = (w.interval * 2).min(w.max);
        let next = Instant::now() + w.interval.min(latest);
        q.due.push(Reverse((next, id)));
        drop(q);
        self.wake.notify_one();
    }
}

fn by_name(routes: impl IntoIterator<Item = Arc<Translated>>) -> HashMap<String, Arc<Translated>> {
    routes.into_iter().map(|t| (t.route.clone(), t)).collect()
}

/// How long a task that waits on its client (input, or a payment) may still wait; `None` for a
/// task that does not.
fn expires_in(t: &Translated, task: &mapping::task::Task) -> Option<Duration> {
    if !task.waits_on_client() {
        return None;
    }
    let waited = (chrono::Utc::now() - task.in_status_since())
        .to_std()
        .unwrap_or(Duration::ZERO);
    Some(t.settings.input_timeout.saturating_sub(waited))
}
