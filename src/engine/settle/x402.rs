//! x402 in the engine: who may use a route that takes payments, and when each scheme's money
//! moves through the ledger.
//!
//! ```text
//! request without a token ─ gate ─ no payment ───────────────► 402 PAYMENT-REQUIRED
//!                                    (a create whose op keeps it `unpaid`: a task stored
//!                                    waiting to be paid for, answered with the requirements)
//!                                  a payment ─ offer? verify ─► create: sale opened (grant),
//!                                                               task held as a plan's would be
//!                                    (a request on a task waiting to be paid for: the same,
//!                                    for that task, which then starts: `start_paid`)
//!                                  a known sale's payment ────► the payer, for their tasks
//! exact: settled when the create answers 2xx; the ledger captures it when the task completes,
//!        a task that fails gives it back to the payer's balance here (released, not on chain)
//! upto:  steps captured as they complete, up to the signed maximum; one settlement of their
//!        sum when the task ends (none for 0); what was authorised and not settled is revoked
//! ```
//!
//! The sale is recorded before a settlement is sent and after its answer (`store::sales`). The
//! watcher sweeps the open sales ([`Engine::sweep_sales`]): a sale whose task ended unsettled
//! (a crash between the two) is closed; one whose authorisation is about to expire is settled
//! for what its task owes by then; one caught settling by a crash is resolved by asking the
//! facilitator to verify the payment again (a payment already settled no longer verifies: its
//! nonce is spent on chain), so that nothing is sent twice.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::engine::admission::refused;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use crate::payment::x402::accept::{self};
use crate::payment::x402::offer::Scheme;
use crate::payment::x402::wire::{self};
use mapping::task::{Task, TaskPatch};
use store::{Sale, SaleState, StoreError, Stored};

impl Engine {
    /// Opens the sale of a create's payment, before its task is stored: a payment presented
    /// twice at once opens one sale; the other create is refused and holds nothing.
    pub(in crate::engine) async fn open_sale(
        &self,
        t: &Translated,
        sale: &Sale,
        url: &str,
    ) -> Result<(), ProxyError> {
        match self.store.open_sale(sale).await {
            Ok(()) => Ok(()),
            Err(StoreError::Duplicate(_)) => Err(match &t.x402 {
                Some(accept) => refused(accept::refusal(
                    accept,
                    url,
                    402,
                    "payment_already_used",
                    "this payment has paid for a task already: sign a new one".to_string(),
                )),
                None => ProxyError::Internal("a sale on a route without x402".to_string()),
            }),
            Err(e) => Err(ProxyError::Store(e)),
        }
    }

    /// Settles an `exact` sale when its create is about to answer 2xx (its authorisation
    /// expires long before a slow task ends). A refused settlement fails the task (its hold
    /// released), takes back what the sale granted, and answers 402 with the settlement's
    /// outcome.
    pub(in crate::engine) async fn collect(
        &self,
        t: &Translated,
        stored: Stored,
        sale: Sale,
        cx: &mut Cx<'_>,
    ) -> Result<Stored, ProxyError> {
        let (Some(accept), Some(paid)) = (&t.x402, cx.paid) else {
            return Ok(stored);
        };
        let url = paid.resource.clone();
        if sale.scheme != Scheme::Exact.as_str() {
            return Ok(stored);
        }
        let amount = sale.authorised;
        let Some((sale, answer)) = self.settle_sale(accept, sale, amount, 0).await? else {
            // Settled by whoever moved it first (the sweep): nothing more to do here.
            return Ok(stored);
        };
        match sale.state {
            SaleState::Settled => {
                cx.receipt = answer;
                return Ok(stored);
            }
            // Its outcome unknown (the answer was lost): the task goes on, without a receipt,
            // and the sweep learns from the facilitator whether the payment settled.
            SaleState::Settling => return Ok(stored),
            _ => {}
        }
        let why = sale
            .detail
            .clone()
            .unwrap_or_else(|| "the settlement failed".to_string());
        let patch = TaskPatch {
            status: Some(mapping::task::Status::Failed),
            reason: Some("payment".to_string()),
            message: Some(format!("the payment could not be settled: {why}")),
            ..TaskPatch::default()
        };
        let _ = self.apply(t, stored, patch, cx).await?;
        // Its hold released by the failure: what the sale granted is taken back.
        self.store
            .save_sale(&sale, SaleState::Failed, sale.authorised)
            .await
            .map_err(ProxyError::Store)?;
        let reason = answer
            .as_ref()
            .and_then(|a| a.error_reason.clone())
            .unwrap_or_else(|| "unexpected_settle_error".to_string());
        let mut r = accept::refusal(
            accept,
            &url,
            402,
            &reason,
            format!("the payment could not be settled: {why}"),
        );
        r.response = answer.as_ref().map(wire::encode_header);
        Err(refused(r))
    }

    /// Settles `amount` of an authorised sale, once: the sale is claimed in this process (the
    /// sweep leaves it alone from then on), then moved to settling only if it is still
    /// authorised (`None` when another request or instance got there first: that one settles
    /// it), then sent and recorded ([`X402Settlement::send`]). The claim comes before the move:
    /// a sweep that saw the sale settling between the two would send it too. All of it runs on
    /// a task of its own, so that a request cut short (a stop's grace period running out)
    /// cannot leave a settlement sent and unrecorded.
    async fn settle_sale(
        &self,
        accept: &crate::config::X402Accept,
        mut sale: Sale,
        amount: u64,
        revoke_on_failure: u64,
    ) -> Result<Option<(Sale, Option<wire::SettleResponse>)>, ProxyError> {
        let Some(claim) = self.settling.claim(&sale.reference) else {
            return Ok(None);
        };
        let settlement = self.x402_settlement(accept, claim);
        detached(async move {
            sale.state = SaleState::Settling;
            // What is being settled, so that a crash before its answer knows what was sent.
            sale.settled = Some(amount);
            sale.updated_at = Utc::now();
            let mine = settlement
                .store
                .save_sale(&sale, SaleState::Authorised, 0)
                .await
                .map_err(ProxyError::Store)?;
            if !mine {
                return Ok(None);
            }
            settlement
                .send(sale, amount, revoke_on_failure)
                .await
                .map(Some)
        })
        .await
    }

    fn x402_settlement(&self, accept: &crate::config::X402Accept, claim: Claim) -> X402Settlement {
        X402Settlement {
            store: self.store.clone(),
            client: self.client.clone(),
            accept: accept.clone(),
            _claim: claim,
        }
    }

    /// Voids a create's sale that was never settled (the create failed before it answered):
    /// what it granted is taken back, as far as the task's hold was released.
    pub(in crate::engine) async fn void_sale(&self, reference: &str, why: &str) {
        let Ok(Some(mut sale)) = self.store.sale(reference).await else {
            return;
        };
        if sale.state != SaleState::Authorised {
            return;
        }
        sale.state = SaleState::Void;
        sale.detail = Some(why.to_string());
        sale.updated_at = Utc::now();
        if let Err(e) = self
            .store
            .save_sale(&sale, SaleState::Authorised, sale.authorised)
            .await
        {
            tracing::error!(sale = %sale.reference, "voiding a sale failed: {e}");
        }
    }

    /// Settles what a paid task owes now that it has ended: an `upto` sale the sum of the
    /// steps captured (nothing for 0); an `exact` sale still unsettled (a crash between its
    /// create and its settlement) its price if the task started upstream, else nothing.
    pub(in crate::engine) async fn close_sales(&self, t: &Translated, task: &Task) {
        let Some(accept) = &t.x402 else {
            return;
        };
        let sales = match self.store.sales(&task.id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(task = %task.id, "reading a task's sales failed: {e}");
                return;
            }
        };
        for sale in sales
            .into_iter()
            .filter(|s| s.state == SaleState::Authorised)
        {
            let owed = if sale.scheme == Scheme::Upto.as_str() {
                match self.store.ledger_of_task(&task.id).await {
                    Ok(rows) => rows
                        .iter()
                        .filter(|r| r.kind == "capture")
                        .map(|r| r.amount.max(0) as u64)
                        .sum::<u64>()
                        .min(sale.authorised),
                    Err(e) => {
                        tracing::error!(task = %task.id, "reading a task's ledger failed: {e}");
                        continue;
                    }
                }
            } else if task.upstream_id.is_some() {
                sale.authorised
            } else {
                0
            };
            if owed == 0 {
                self.void_sale(&sale.reference, "nothing was owed: no step completed")
                    .await;
                continue;
            }
            // The task's hold is released: a failed settlement takes back what is left of the
            // grant (the steps captured stay, and `credits verify` lists the sale).
            let authorised = sale.authorised;
            match self.settle_sale(accept, sale, owed, authorised).await {
                Ok(Some((s, _))) if s.state == SaleState::Settled => {
                    tracing::info!(task = %task.id, sale = %s.reference, amount = owed, transaction = s.transaction.as_deref().unwrap_or(""), "x402 payment settled");
                }
                Ok(Some((s, _))) if s.state == SaleState::Settling => {}
                Ok(Some((s, _))) => {
                    tracing::warn!(task = %task.id, sale = %s.reference, "x402 settlement failed: {}", s.detail.as_deref().unwrap_or(""));
                }
                Ok(None) => {}
                Err(e) => tracing::error!(task = %task.id, "settling a sale failed: {e}"),
            }
        }
    }
}

/// How long a settlement may be under way before it is taken for cut short and sent again: the
/// facilitator's answer is waited for 30 s (`payment::x402::accept`).
const SETTLE_OVERDUE: Duration = Duration::from_secs(35);

/// The sales this process is settling right now: the sweep leaves them alone.
#[derive(Default, Clone)]
pub(in crate::engine) struct UnderWay(Arc<parking_lot::Mutex<std::collections::HashSet<String>>>);

/// This process's claim on settling one sale, until dropped.
pub(in crate::engine) struct Claim {
    set: UnderWay,
    reference: String,
}

impl UnderWay {
    /// The claim on `reference`, unless this process holds it already.
    pub(in crate::engine) fn claim(&self, reference: &str) -> Option<Claim> {
        self.0.lock().insert(reference.to_string()).then(|| Claim {
            set: self.clone(),
            reference: reference.to_string(),
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.set.0.lock().remove(&self.reference);
    }
}

/// What sending a settlement needs, owned, so that it can run on a task of its own; the
/// sale's claim is held until it is dropped.
struct X402Settlement {
    store: Arc<dyn store::TaskStore>,
    client: Arc<crate::upstream::Client>,
    accept: crate::config::X402Accept,
    _claim: Claim,
}

impl X402Settlement {
    /// Asks the facilitator to settle a sale recorded as settling, and records its answer:
    /// settled (what was authorised beyond `amount` taken back) or failed (`revoke_on_failure`
    /// taken back).
    async fn send(
        self,
        sale: Sale,
        amount: u64,
        revoke_on_failure: u64,
    ) -> Result<(Sale, Option<wire::SettleResponse>), ProxyError> {
        let (sale, answer) =
            accept::settle(&self.client, &self.accept, sale, amount, Utc::now()).await;
        let revoke = match sale.state {
            SaleState::Settled => sale.authorised.saturating_sub(amount),
            // The answer was lost: nothing is taken back until the sweep knows the outcome.
            SaleState::Settling => {
                tracing::warn!(sale = %sale.reference, "{}", sale.detail.as_deref().unwrap_or(""));
                0
            }
            _ => revoke_on_failure,
        };
        self.store
            .save_sale(&sale, SaleState::Settling, revoke)
            .await
            .map_err(ProxyError::Store)?;
        Ok((sale, answer))
    }
}

/// Runs `work` on a task of its own and waits for it: dropping the waiting future (a client
/// that hung up) leaves the work to finish.
pub(in crate::engine) async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, ProxyError>> + Send + 'static,
) -> Result<T, ProxyError> {
    tokio::spawn(work)
        .await
        .map_err(|e| ProxyError::Internal(format!("a settlement stopped: {e}")))?
}

/// How long before an authorisation expires what its task owes is settled: a third of the
/// authorisation's life, at most 30 s, and never less than [`FACILITATOR_BUFFER`] and a margin.
const SETTLE_MARGIN: Duration = Duration::from_secs(30);
/// The x402 SDK's facilitator refuses a Permit2 authorisation within 6 s of its deadline
/// (`permit2_deadline_expired`, at verify and at settle: x402 2.25.0
/// `mechanisms/evm/upto/permit2_utils.py`); 2 s more for the call to get there.
const FACILITATOR_BUFFER: Duration = Duration::from_secs(8);

/// When a sale must be settled, whatever its task is doing.
fn settle_by(sale: &Sale) -> chrono::DateTime<Utc> {
    let life = (sale.deadline - sale.created_at)
        .to_std()
        .unwrap_or_default();
    let margin = SETTLE_MARGIN.min(life / 3).max(FACILITATOR_BUFFER);
    sale.deadline - chrono::Duration::from_std(margin).unwrap_or_default()
}

impl Engine {
    /// Looks at every open sale once (see the module's opening comment); `route_of` finds a
    /// task's route by name. Returns how long until the next sale falls due, if any does.
    pub async fn sweep_sales(
        &self,
        route_of: &(dyn Fn(&str) -> Option<Arc<Translated>> + Send + Sync),
    ) -> Option<Duration> {
        let sales = match self.store.open_sales().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot read the open sales: {e}");
                return None;
            }
        };
        let mut next: Option<Duration> = None;
        for sale in sales {
            let stored = match self.store.get(&sale.task_id).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(sale = %sale.reference, "cannot read the sale's task: {e}");
                    continue;
                }
            };
            let t = stored.as_ref().and_then(|s| route_of(&s.task.route));
            let Some(accept) = t.as_ref().and_then(|t| t.x402.clone()) else {
                // Its route is gone or takes x402 no more: the operator must settle it.
                continue;
            };
            match sale.state {
                SaleState::Settling => self.resolve_settling(&accept, sale).await,
                _ => match stored {
                    None => {
                        self.void_sale(&sale.reference, "its task was never stored")
                            .await
                    }
                    Some(stored) if stored.task.status.is_terminal() => {
                        if let Some(t) = &t {
                            self.close_sales(t, &stored.task).await;
                        }
                    }
                    Some(stored) => {
                        let due = settle_by(&sale);
                        let now = Utc::now();
                        if due <= now {
                            if let Some(t) = &t {
                                self.settle_at_deadline(t, stored, sale).await;
                            }
                        } else {
                            let left = (due - now).to_std().unwrap_or_default();
                            next = Some(next.map_or(left, |n| n.min(left)));
                        }
                    }
                },
            }
        }
        next
    }

    /// Settles what a running task owes when its authorisation is about to expire: its hold is
    /// released first (steps that complete later are the payer's to cover, and are not
    /// settled), then the sum so far is settled, once.
    async fn settle_at_deadline(&self, t: &Translated, stored: Stored, sale: Sale) {
        let task_id = stored.task.id.clone();
        let release = store::Settlement {
            captures: Vec::new(),
            release: true,
        };
        if let Err(e) = self
            .store
            .update_and_settle(&stored.task, stored.version, &release)
            .await
        {
            // A conflict: the task moved; the next sweep sees it as it is now.
            tracing::debug!(task = %task_id, "releasing a hold at its payment's deadline: {e}");
            return;
        }
        tracing::info!(task = %task_id, sale = %sale.reference, "the payment's authorisation expires before its task ends: settling what is done");
        // Settled as if ended: an `upto` sale its steps so far, an `exact` one its price.
        self.close_sales(t, &stored.task).await;
    }

    /// A sale caught settling by a crash, or whose settlement's answer was lost: the
    /// facilitator is asked to verify the payment again. Refused because its nonce is spent:
    /// the settlement went through, and is recorded settled. Still valid: it has not reached
    /// the chain (yet), and is sent once it has been quiet for [`SETTLE_OVERDUE`] (a
    /// settlement sent before may still be on its way to a block). Anything else is left to
    /// the operator (`unknown`), never sent blind.
    async fn resolve_settling(&self, accept: &crate::config::X402Accept, sale: Sale) {
        let Some(claim) = self.settling.claim(&sale.reference) else {
            return;
        };
        // Read again under the claim: the sweep's list is older than the settlement that
        // may have ended since.
        let mut sale = match self.store.sale(&sale.reference).await {
            Ok(Some(s)) if s.state == SaleState::Settling => s,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(sale = %sale.reference, "cannot read a sale again: {e}");
                return;
            }
        };
        // Another instance on the store may be settling it right now: only one whose answer
        // is overdue (the facilitator is waited for 30 s) was cut short.
        let quiet = (Utc::now() - sale.updated_at)
            .to_std()
            .is_ok_and(|d| d > SETTLE_OVERDUE);
        if self.store.shared() && !quiet {
            return;
        }
        let amount = sale.settled.unwrap_or(sale.authorised);
        let verdict = accept::reverify(&self.client, accept, &sale).await;
        match verdict {
            Ok(None) if !quiet => {
                tracing::debug!(sale = %sale.reference, "a settlement cut short is not sent again before it is overdue");
            }
            Ok(None) => {
                tracing::info!(sale = %sale.reference, "a settlement cut short by a stop never reached the chain: sending it");
                let authorised = sale.authorised;
                let settlement = self.x402_settlement(accept, claim);
                let sent =
                    detached(async move { settlement.send(sale, amount, authorised).await }).await;
                if let Err(e) = sent {
                    tracing::error!("settling a sale failed: {e}");
                }
            }
            Ok(Some(reason)) if accept::spent(&reason) => {
                sale.state = SaleState::Settled;
                sale.detail = Some(format!(
                    "settled before interlingua stopped; the facilitator now says `{reason}`, its transaction was not recorded"
                ));
                sale.updated_at = Utc::now();
                let unsettled = sale.authorised.saturating_sub(amount);
                if let Err(e) = self
                    .store
                    .save_sale(&sale, SaleState::Settling, unsettled)
                    .await
                {
                    tracing::error!(sale = %sale.reference, "recording a settled sale failed: {e}");
                }
            }
            Ok(Some(reason)) => {
                sale.state = SaleState::Unknown;
                sale.detail = Some(format!(
                    "a settlement was cut short by a stop, and the payment no longer verifies (`{reason}`): whether it reached the chain is for the operator to check"
                ));
                sale.updated_at = Utc::now();
                tracing::warn!(sale = %sale.reference, "{}", sale.detail.as_deref().unwrap_or(""));
                let _ = self.store.save_sale(&sale, SaleState::Settling, 0).await;
            }
            Err(e) => {
                tracing::warn!(sale = %sale.reference, "cannot ask the facilitator about a settlement cut short: {e}");
            }
        }
    }
}
