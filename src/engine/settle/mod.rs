//! Settlement: where a completed step is charged, and where each rail plugs in.
//!
//! What a step costs is `credits::captures`' answer (the route's price, the agent's report,
//! clamped); here it is written onto the task's steps and settled in the same store write that
//! records the step's end (`Engine::settlement`, called from `tasks.rs`'s `apply`), or charged
//! alone for a fee per call (`Engine::charge`). The rails move money outside interlingua around
//! those ledger rows:
//!
//! | rail | file |
//! |---|---|
//! | x402, being paid: a sale per payment, settled on chain | `x402.rs` |
//! | Masumi, paying an agent on its node | `masumi_buy.rs` |
//! | Masumi, selling a job: the payment request | `masumi_sell.rs` |
//! | Masumi, selling a job: the escrow followed to the chain's verdict | `escrow.rs` |
//!
//! (x402 paying an agent is part of a back call: `back/x402_pay.rs`.)

mod escrow;
pub(in crate::engine) mod masumi_buy;
mod masumi_sell;
pub(in crate::engine) mod x402;

use tracing::Instrument;

use crate::credits;
use crate::engine::{Cx, Engine, Translated};
use crate::error::ProxyError;
use store::Settlement;

impl Engine {
    /// Charges one extra capture on a task.
    pub(in crate::engine) async fn charge(
        &self,
        task_id: &str,
        capture: &store::Capture,
        cx: &mut Cx<'_>,
    ) -> Result<(), ProxyError> {
        let settled = self
            .store
            .charge(task_id, capture)
            .instrument(self.store_span("charge"))
            .await
            .map_err(crate::engine::store_error)?;
        cx.spent.charged += settled.captured;
        self.metrics.credits("captured", settled.captured);
        Ok(())
    }

    /// What the steps that just finished cost (written onto the steps, so every front sees the
    /// price), and whether the task's hold is to be released.
    pub(in crate::engine) fn settlement(
        &self,
        t: &Translated,
        task: &mut mapping::task::Task,
        finished: &[String],
    ) -> Settlement {
        // The price the task was created under; a task stored before prices were kept, the
        // route's.
        let price = task
            .price
            .or_else(|| t.price.as_ref().map(crate::config::Price::step_price));
        let Some(price) = price else {
            return Settlement {
                captures: Vec::new(),
                release: task.status.is_terminal(),
            };
        };
        let captures = credits::captures(&price, t.back.steps, &task.steps, finished);
        for c in &captures {
            if let Some(step) = task.steps.iter_mut().find(|s| s.id == c.step_id) {
                step.cost = c.amount;
            }
        }
        task.cost = task.steps.iter().map(|s| s.cost).sum();
        Settlement {
            captures,
            release: task.status.is_terminal(),
        }
    }
}
