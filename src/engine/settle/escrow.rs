//! Following the jobs sold on a Masumi node, from their payment request ([`super::masumi_sell`]) to
//! the chain's verdict: the buyer's lock, the job's start, its result's hash, the money.
//!
//! ```text
//! requesting ── overdue (a stop cut S1 short) ─► unanswered, the task fails: never sent again
//! requested ── S2: FundsLocked ─► locked: granted to the buyer's account and held, the job starts
//!    │         RefundRequested, Disputed ─► locked, the task fails: nothing is run
//!    └──────── FundsOrDatumInvalid, or no lock by payByTime + grace ─► expired, the task fails
//! locked ── the agent done (running, submitting_result) ─► submitting, the result's hash stored
//!    └───── submitResultTime − 5 min passed first ─► the task fails (the buyer is refunded)
//! submitting ── S2 shows the hash, or S4 answers 200 ─► submitted ─► the task completes
//!    │          S4 5xx, no answer, 404: again later; 400, 403, or the deadline ─► locked,
//!    │          the task fails
//! locked, submitted, the task ended ── S2 every `verdict_every` ─► withdrawn: the seller's part
//!           captured; refunded: released and revoked; split: the seller's part captured
//! ```
//!
//! Every instance on the store sweeps: each move is written only from the state it was read
//! in (the store's guarded save), so a move is made once; S4's hash is stored before S4 is
//! sent, and S2 is read before it is sent again, so a stop or a rival instance never submits
//! twice what the node has queued.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::masumi_sell::{failed_for_payment, REQUEST_OVERDUE};
use crate::config::MasumiSeller;
use crate::config::SUBMIT_MARGIN;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::payment::masumi::sell::{self, Answer, Seen};
use mapping::dialect::{self, Canonical, Decoded};
use mapping::task::{Operation, Status, TaskPatch};
use store::{EscrowMove, EscrowSale, EscrowState, Stored};

/// How many sales one sweep looks at, soonest due first.
const BATCH: u32 = 100;

/// How long a sale whose route is gone (or sells no more) waits before it is looked at again:
/// its operator decides, and it must not keep the sales behind it waiting.
const ORPHAN_WAIT: Duration = Duration::from_secs(600);

fn after(now: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// How long until a sale waiting on the node is asked again: a tenth of how long it has
/// waited, within the route's polling interval and its longest.
fn backoff(t: &Translated, since: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    let waited = (now - since).to_std().unwrap_or_default();
    (waited / 10)
        .max(t.settings.poll_interval)
        .min(t.settings.poll_max_interval)
}

impl Engine {
    /// Looks once at every sale that has fallen due (see the module's opening comment);
    /// `route_of` finds a route by name.
    pub async fn sweep_escrow(
        self: &Arc<Self>,
        route_of: &(dyn Fn(&str) -> Option<Arc<Translated>> + Send + Sync),
    ) {
        let due = match self.store.escrow_sales_due(Utc::now(), BATCH).await {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!("cannot read the sales due: {e}");
                return;
            }
        };
        for mut sale in due {
            let Some(_claim) = self.settling.claim(&format!("escrow:{}", sale.task_id)) else {
                continue;
            };
            let Some((t, seller)) =
                route_of(&sale.route).and_then(|t| t.sell.clone().map(|s| (t, s)))
            else {
                tracing::warn!(task = %sale.task_id, route = %sale.route, "a sale's route is gone or sells no more: its operator decides");
                let from = sale.state;
                sale.due = after(Utc::now(), ORPHAN_WAIT);
                let _ = self
                    .store
                    .save_escrow_sale(&sale, from, &EscrowMove::None)
                    .await;
                continue;
            };
            let task = sale.task_id.clone();
            if let Err(e) = self.advance(&t, &seller, sale).await {
                tracing::warn!(task = %task, "following a sale: {e}");
            }
        }
    }

    /// Wakes the sweep: a sale has something to do now.
    pub fn wake_escrow(&self) {
        self.escrow_wake.notify_one();
    }

    /// Waits until the sweep is woken.
    pub async fn escrow_woken(&self) {
        self.escrow_wake.notified().await;
    }

    async fn advance(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        seller: &MasumiSeller,
        sale: EscrowSale,
    ) -> Result<(), ProxyError> {
        let Some(stored) = self.store.get(&sale.task_id).await? else {
            let from = sale.state;
            let mut sale = sale;
            sale.state = EscrowState::Expired;
            sale.detail = Some("its task is not stored".to_string());
            self.store
                .save_escrow_sale(&sale, from, &EscrowMove::None)
                .await?;
            return Ok(());
        };
        let ended = stored.task.status.is_terminal();
        match sale.state {
            EscrowState::Requesting => self.request_overdue(t, sale, stored).await,
            EscrowState::Requested => self.await_lock(t, seller, sale, stored).await,
            EscrowState::Locked | EscrowState::Submitted if ended => {
                self.await_verdict(seller, sale).await
            }
            EscrowState::Locked => self.while_running(t, seller, sale, stored).await,
            EscrowState::Submitting => self.submit(t, seller, sale, stored).await,
            EscrowState::Submitted => {
                self.complete(t, stored).await;
                self.later(sale, EscrowState::Submitted, seller.verdict_every)
                    .await
            }
            _ => Ok(()),
        }
    }

    /// Writes `sale` (its due `wait` from now) if it is still in state `from`.
    async fn later(
        &self,
        mut sale: EscrowSale,
        from: EscrowState,
        wait: Duration,
    ) -> Result<(), ProxyError> {
        let now = Utc::now();
        sale.due = after(now, wait);
        sale.updated_at = now;
        self.store
            .save_escrow_sale(&sale, from, &EscrowMove::None)
            .await?;
        Ok(())
    }

    /// Moves `sale` from `from` to `to` (why: `detail`) and fails its task for it, once.
    async fn give_up(
        &self,
        t: &Translated,
        mut sale: EscrowSale,
        (from, to): (EscrowState, EscrowState),
        stored: Stored,
        why: String,
        next: Duration,
    ) -> Result<(), ProxyError> {
        let now = Utc::now();
        sale.state = to;
        sale.detail = Some(why.clone());
        sale.due = after(now, next);
        sale.updated_at = now;
        if !self
            .store
            .save_escrow_sale(&sale, from, &EscrowMove::None)
            .await?
        {
            return Ok(());
        }
        tracing::warn!(task = %stored.task.id, route = %t.route, "a sold job fails: {why}");
        if !stored.task.status.is_terminal() {
            self.apply_quietly(t, stored, failed_for_payment(why)).await;
        }
        Ok(())
    }

    /// A payment request recorded as being made: left alone while S1 may still be under way;
    /// after that, a stop cut it short, and it is never sent again (the node signs a fresh
    /// request each time, and the buyer was never told of this one).
    async fn request_overdue(
        &self,
        t: &Translated,
        sale: EscrowSale,
        stored: Stored,
    ) -> Result<(), ProxyError> {
        let overdue = after(sale.created_at, REQUEST_OVERDUE);
        if Utc::now() < overdue {
            let wait = (overdue - Utc::now()).to_std().unwrap_or_default();
            return self.later(sale, EscrowState::Requesting, wait).await;
        }
        self.give_up(
            t,
            sale,
            (EscrowState::Requesting, EscrowState::Unanswered),
            stored,
            "interlingua stopped while the payment node was making the payment request; it is not asked again".to_string(),
            Duration::ZERO,
        )
        .await
    }

    /// S2 on a payment request not locked yet.
    async fn await_lock(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        seller: &MasumiSeller,
        mut sale: EscrowSale,
        stored: Stored,
    ) -> Result<(), ProxyError> {
        let now = Utc::now();
        let reference = sale.reference.clone().unwrap_or_default();
        let answer = sell::status(&self.client, seller, &reference, &mut sale.calls).await;
        let pay_by = sale
            .service
            .as_ref()
            .and_then(|p| sell::time_of(p, "payByTime"));
        let too_late = pay_by.is_some_and(|p| now > after(p, seller.node.lock_grace));
        let to = (EscrowState::Requested, EscrowState::Expired);
        match answer {
            Answer::Data(payment) => {
                let seen = sell::seen(&payment, sale.amount.unwrap_or(0));
                sale.service = Some(payment);
                match seen {
                    Seen::Locked | Seen::Result(_) => {
                        self.lock(t, seller, sale, stored, false).await
                    }
                    Seen::RefundAsked => self.lock(t, seller, sale, stored, true).await,
                    Seen::Invalid(note) => {
                        let why = format!("the buyer's payment was not locked: {note}");
                        self.give_up(t, sale, to, stored, why, Duration::ZERO).await
                    }
                    Seen::Withdrawn(_) | Seen::Refunded | Seen::Split(_) => {
                        let why = "the payment request ended before its lock was seen".to_string();
                        self.give_up(t, sale, to, stored, why, Duration::ZERO).await
                    }
                    Seen::Waiting if too_late => {
                        let why = format!(
                            "the buyer did not lock the funds by payByTime and {} of grace",
                            humantime::format_duration(seller.node.lock_grace)
                        );
                        self.give_up(t, sale, to, stored, why, Duration::ZERO).await
                    }
                    Seen::Waiting => {
                        let wait = backoff(t, sale.created_at, now);
                        self.later(sale, EscrowState::Requested, wait).await
                    }
                }
            }
            Answer::Refused(404, _) if too_late => {
                let why = "the payment node no longer knows the payment request".to_string();
                self.give_up(t, sale, to, stored, why, Duration::ZERO).await
            }
            // Unanswered, or not known yet: asked again. Without the node's word, a lock that
            // came in time is never taken for a missed one.
            Answer::Refused(..) | Answer::Failed(..) => {
                let wait = backoff(t, sale.created_at, now);
                self.later(sale, EscrowState::Requested, wait).await
            }
        }
    }

    /// The buyer's funds are locked: granted to their account and held for the task, in the
    /// sale's move; then the job starts, unless the buyer asked for them back first.
    async fn lock(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        seller: &MasumiSeller,
        mut sale: EscrowSale,
        stored: Stored,
        refund_asked: bool,
    ) -> Result<(), ProxyError> {
        let now = Utc::now();
        let amount = sale.amount.unwrap_or(0);
        let vkey = sale
            .service
            .as_ref()
            .and_then(sell::buyer_vkey)
            .unwrap_or_else(|| "unknown".to_string());
        let plan = sale.plan.clone().unwrap_or_else(|| sell::plan_of(""));
        let account = sell::buyer_account(&plan, seller.node.network.name(), &vkey);
        sale.subject = Some(account.subject.clone());
        sale.plan = Some(plan);
        sale.state = EscrowState::Locked;
        sale.detail = None;
        sale.updated_at = now;
        sale.due = after(
            now,
            if refund_asked {
                seller.verdict_every
            } else {
                t.settings.poll_max_interval
            },
        );
        let money = EscrowMove::Lock { account, amount };
        if !self
            .store
            .save_escrow_sale(&sale, EscrowState::Requested, &money)
            .await?
        {
            return Ok(());
        }
        self.metrics.credits("held", amount);
        if refund_asked {
            let why = "the buyer asked for a refund before the job ran".to_string();
            tracing::info!(task = %stored.task.id, "{why}");
            self.apply_quietly(t, stored, failed_for_payment(why)).await;
            return Ok(());
        }
        tracing::info!(task = %stored.task.id, sale = sale.reference.as_deref().unwrap_or(""), amount, "the buyer locked the funds: the job starts");
        self.start_sold(t, stored).await
    }

    /// The job starts upstream, as any create does, from the input stored at `start_job`:
    /// the task leaves its wait at the version read (one instance wins), then the back's
    /// create, then any payment to the agent. A task that no longer waits is left alone.
    async fn start_sold(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        stored: Stored,
    ) -> Result<(), ProxyError> {
        if !stored.task.waits_for_buyer() {
            return Ok(());
        }
        let Some(fop) = t
            .front
            .forms(Operation::CreateTask)
            .find(|o| o.sale.is_some())
        else {
            return Err(ProxyError::Internal(
                "a selling route's front declares no `sale`".to_string(),
            ));
        };
        let mut task = stored.task.clone();
        task.reason = None;
        task.message = None;
        task.updated_at = Utc::now();
        let request_id = format!("sale-{}", task.id);
        let mut cx = Cx::background(&request_id);
        let back_op = self.back.choose_create(t, &task, &mut cx).await?;
        if t.back.forms(Operation::CreateTask).nth(1).is_some() {
            task.back_form = Some(back_op.key.clone());
        }
        let held = crate::engine::Held::stored(stored.version);
        match Box::pin(self.create_held(
            t,
            fop,
            Decoded::default(),
            task,
            held,
            back_op,
            None,
            &mut cx,
        ))
        .await
        {
            Ok(_) | Err(ProxyError::Conflict(_)) => Ok(()),
            // The task says why it failed; the sale waits for the chain's verdict.
            Err(e) => {
                tracing::warn!(task = %stored.task.id, "a sold job's create failed: {e}");
                Ok(())
            }
        }
    }

    /// A locked sale whose task has not ended: started if a stop came between the lock and
    /// the start, its result's hash stored once the agent is done, or failed when the time to
    /// submit a result runs out first.
    async fn while_running(
        self: &Arc<Self>,
        t: &Arc<Translated>,
        seller: &MasumiSeller,
        mut sale: EscrowSale,
        stored: Stored,
    ) -> Result<(), ProxyError> {
        if stored.task.waits_for_buyer() {
            let from = sale.state;
            let wait = t.settings.poll_max_interval;
            self.later(sale.clone(), from, wait).await?;
            return self.start_sold(t, stored).await;
        }
        if stored.task.submits_result() {
            let hash = t.front.sale().and_then(|h| {
                dialect::evaluate(
                    &h.result_hash,
                    &Canonical::front_of(&stored.task),
                    &t.front_ctx(),
                )
            });
            let Some(hash) = hash.and_then(|h| h.as_str().map(str::to_string)) else {
                let why = "the front's `sale.result_hash` gave no hash of the result".to_string();
                let to = (EscrowState::Locked, EscrowState::Locked);
                return self
                    .give_up(t, sale, to, stored, why, seller.verdict_every)
                    .await;
            };
            let now = Utc::now();
            sale.result_hash = Some(hash);
            sale.state = EscrowState::Submitting;
            sale.due = now;
            sale.updated_at = now;
            if !self
                .store
                .save_escrow_sale(&sale, EscrowState::Locked, &EscrowMove::None)
                .await?
            {
                return Ok(());
            }
            return self.submit(t, seller, sale, stored).await;
        }
        if self.past_submit_deadline(&sale) {
            let why = "the agent was not done in time to submit its result before submitResultTime; the buyer is refunded".to_string();
            let to = (EscrowState::Locked, EscrowState::Locked);
            return self
                .give_up(t, sale, to, stored, why, seller.verdict_every)
                .await;
        }
        let wait = t.settings.poll_max_interval;
        self.later(sale, EscrowState::Locked, wait).await
    }

    /// Whether a result can no longer reach the chain: the node sends it only while
    /// `submitResultTime` is more than [`SUBMIT_MARGIN`] away.
    fn past_submit_deadline(&self, sale: &EscrowSale) -> bool {
        sale.service
            .as_ref()
            .and_then(|p| sell::time_of(p, "submitResultTime"))
            .is_some_and(|due| {
                Utc::now() + chrono::Duration::from_std(SUBMIT_MARGIN).unwrap_or_default() >= due
            })
    }

    /// Submits the result's hash (stored with the sale before anything is sent): S2 first,
    /// which shows a hash already queued (sent before a stop, or by another instance); else
    /// S4. Taken: the task completes.
    async fn submit(
        &self,
        t: &Translated,
        seller: &MasumiSeller,
        mut sale: EscrowSale,
        stored: Stored,
    ) -> Result<(), ProxyError> {
        let now = Utc::now();
        let hash = sale.result_hash.clone().unwrap_or_default();
        let reference = sale.reference.clone().unwrap_or_default();
        let to = (EscrowState::Submitting, EscrowState::Locked);
        let deadline = self.past_submit_deadline(&sale);
        let retry = |why: String| {
            if deadline {
                Err(format!(
                    "the result could not be submitted before submitResultTime: {why}; the buyer is refunded"
                ))
            } else {
                Ok(why)
            }
        };
        let wait = backoff(t, stored.task.in_status_since(), now);
        let seen = match sell::status(&self.client, seller, &reference, &mut sale.calls).await {
            Answer::Data(payment) => {
                let seen = sell::seen(&payment, sale.amount.unwrap_or(0));
                sale.service = Some(payment);
                Some(seen)
            }
            Answer::Refused(_, m) | Answer::Failed(_, m) => match retry(m) {
                Ok(_) => None,
                Err(why) => {
                    return self
                        .give_up(t, sale, to, stored, why, seller.verdict_every)
                        .await
                }
            },
        };
        match seen {
            None => return self.later(sale, EscrowState::Submitting, wait).await,
            Some(Seen::Result(h)) if h.is_empty() || h == hash => {
                return self.submitted(t, seller, sale, stored).await
            }
            Some(Seen::Locked | Seen::RefundAsked) => {}
            Some(other) => {
                let why = format!(
                    "the payment can no longer take a result ({other:?} on the node); the result was not submitted"
                );
                return self
                    .give_up(t, sale, to, stored, why, seller.verdict_every)
                    .await;
            }
        }
        if deadline {
            let why = "the time to submit the result (submitResultTime, less the node's 5 minutes) ran out; the buyer is refunded".to_string();
            return self
                .give_up(t, sale, to, stored, why, seller.verdict_every)
                .await;
        }
        match sell::submit(&self.client, seller, &reference, &hash, &mut sale.calls).await {
            Answer::Data(payment) => {
                sale.service = Some(payment);
                self.submitted(t, seller, sale, stored).await
            }
            // Not in a state to take it (yet): S2 says more next time.
            Answer::Refused(404, m) | Answer::Failed(_, m) => {
                tracing::debug!(task = %stored.task.id, "the result's hash is submitted again later: {m}");
                self.later(sale, EscrowState::Submitting, wait).await
            }
            Answer::Refused(status, m) => {
                let why = format!("the payment node refused the result's hash ({status}): {m}");
                self.give_up(t, sale, to, stored, why, seller.verdict_every)
                    .await
            }
        }
    }

    /// The node has the result's hash: the sale is submitted, then its task completes.
    async fn submitted(
        &self,
        t: &Translated,
        seller: &MasumiSeller,
        mut sale: EscrowSale,
        stored: Stored,
    ) -> Result<(), ProxyError> {
        let now = Utc::now();
        sale.state = EscrowState::Submitted;
        sale.detail = None;
        sale.due = after(now, seller.verdict_every);
        sale.updated_at = now;
        if !self
            .store
            .save_escrow_sale(&sale, EscrowState::Submitting, &EscrowMove::None)
            .await?
        {
            return Ok(());
        }
        tracing::info!(task = %stored.task.id, hash = sale.result_hash.as_deref().unwrap_or(""), "the result's hash is on its way to the chain: the job is completed");
        self.complete(t, stored).await;
        Ok(())
    }

    /// Completes a sold task whose result the node has taken (its sale says so: `apply` holds
    /// back any other completion).
    async fn complete(&self, t: &Translated, stored: Stored) {
        if stored.task.submits_result() {
            self.apply_quietly(t, stored, TaskPatch::status(Status::Completed))
                .await;
        }
    }

    /// A sale whose task has ended, locked or submitted: S2 until the chain's verdict, which
    /// moves the money for good.
    async fn await_verdict(
        &self,
        seller: &MasumiSeller,
        mut sale: EscrowSale,
    ) -> Result<(), ProxyError> {
        let from = sale.state;
        let reference = sale.reference.clone().unwrap_or_default();
        let amount = sale.amount.unwrap_or(0);
        let (to, captured) =
            match sell::status(&self.client, seller, &reference, &mut sale.calls).await {
                Answer::Data(payment) => {
                    let seen = sell::seen(&payment, amount);
                    sale.service = Some(payment);
                    match seen {
                        Seen::Withdrawn(n) => (EscrowState::Withdrawn, n),
                        Seen::Refunded => (EscrowState::Refunded, 0),
                        Seen::Split(n) => (EscrowState::Split, n),
                        _ => return self.later(sale, from, seller.verdict_every).await,
                    }
                }
                _ => return self.later(sale, from, seller.verdict_every).await,
            };
        let now = Utc::now();
        sale.state = to;
        sale.updated_at = now;
        sale.due = now;
        let captured = captured.min(amount);
        if self
            .store
            .save_escrow_sale(&sale, from, &EscrowMove::Close { captured })
            .await?
        {
            self.metrics.credits("captured", captured);
            tracing::info!(task = %sale.task_id, sale = %reference, state = to.name(), captured, "a sale is closed by the chain's verdict");
        }
        Ok(())
    }

    /// Whether a sold task's result has been taken by the node (its sale submitted, or closed
    /// with it): only then may the task complete.
    pub(in crate::engine) async fn result_submitted(
        &self,
        task_id: &str,
    ) -> Result<bool, ProxyError> {
        Ok(self.store.escrow_sale(task_id).await?.is_some_and(|s| {
            matches!(
                s.state,
                EscrowState::Submitted | EscrowState::Withdrawn | EscrowState::Split
            )
        }))
    }
}
