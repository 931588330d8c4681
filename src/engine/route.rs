//! A translated route, ready to run: a route's two mappings bound to its upstream, price,
//! access and payment settings.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::{Access, Price, Route, Translation};
use crate::upstream::UpstreamState;
use mapping::dialect::mapping::Op;
use mapping::dialect::{Context, Mapping};
use mapping::task::{Operation, Task};

/// The back variable interlingua sets, on a route with `payment.pay.x402`, to its paying
/// address (a mapping that declares it can tell an agent it pays in band); a route's own value
/// is replaced.
pub const X402_PAYER_VAR: &str = "x402_payer";

/// A translated route, ready to run.
pub struct Translated {
    pub route: String,
    pub front: Arc<Mapping>,
    pub back: Arc<Mapping>,
    /// Each mapping's `[vars]` with the route's values over them.
    pub front_vars: Map<String, Value>,
    pub back_vars: Map<String, Value>,
    pub settings: Translation,
    pub upstream: Arc<UpstreamState>,
    /// What its tasks cost; `None`: free.
    pub price: Option<Price>,
    /// Whether tasks belong to the verified subject (routes with auth).
    pub owned: bool,
    /// Headers every call to the back carries: the route's credential, the caller's identity.
    pub access: Access,
    /// The service interlingua pays the agent through, when the route names one.
    pub payment: Option<crate::config::PaymentService>,
    /// What a client may pay with x402 instead of presenting a token.
    pub x402: Option<crate::config::X402Accept>,
    /// What interlingua may pay an agent that answers a call with 402, and its wallet.
    pub x402_pay: Option<Arc<crate::payment::x402::pay::Policy>>,
    /// The Masumi node the route's jobs are sold on, to buyers without a token.
    pub sell: Option<Arc<crate::config::MasumiSeller>>,
    /// The key the mappings' `seal`/`unseal` use (`[server] seal_key_env`, or one per process).
    pub seal_key: Arc<[u8]>,
}

impl Translated {
    /// Binds a route to its mappings; `seal_key` is what their `seal`/`unseal` use.
    pub fn new(
        route: &Route,
        front: Arc<Mapping>,
        back: Arc<Mapping>,
        upstream: Arc<UpstreamState>,
        seal_key: Arc<[u8]>,
    ) -> Translated {
        let vars = |m: &Mapping| {
            let mut v = m.vars.clone();
            if let Some(over) = route.translation.vars.get(&m.name) {
                v.extend(over.clone());
            }
            v
        };
        let x402_pay = route.x402_pay.as_ref().and_then(|c| {
            crate::payment::x402::pay::Policy::new(c)
                .inspect_err(|e| {
                    // The config's check takes the keys this refuses: not reached.
                    tracing::error!(route = %route.name, "payment.pay.x402: {e}");
                })
                .ok()
                .map(Arc::new)
        });
        let mut back_vars = vars(&back);
        // A back that can carry a payment in band is told who pays (a2a.toml's var.x402_payer).
        if let (Some(policy), Some(payer)) = (&x402_pay, back_vars.get_mut(X402_PAYER_VAR)) {
            *payer = Value::String(policy.payer());
        }
        Translated {
            route: route.name.clone(),
            front_vars: vars(&front),
            back_vars,
            front,
            back,
            settings: route.translation.clone(),
            upstream,
            price: route.price.clone(),
            // A payer's tasks are theirs as a token holder's are.
            owned: route.access.auth || route.x402.is_some(),
            access: route.access.clone(),
            payment: route.payment.clone(),
            x402: route.x402.clone(),
            x402_pay,
            sell: route.sell.clone().map(Arc::new),
            seal_key,
        }
    }

    /// The back's create form `task` was started with (recorded on it when the back has
    /// several), else its first.
    pub fn create_form(&self, task: &Task) -> Option<&Op> {
        task.back_form
            .as_ref()
            .and_then(|key| {
                self.back
                    .forms(Operation::CreateTask)
                    .find(|o| o.key == *key)
            })
            .or_else(|| self.back.op(Operation::CreateTask))
    }

    /// Whether the back answers `task` only when done (one synchronous call): such a task is
    /// never polled; the answer is stored when it comes.
    pub fn sync_task(&self, task: &Task) -> bool {
        self.create_form(task)
            .is_some_and(|o| o.returns == mapping::dialect::mapping::Returns::Result)
    }

    pub(in crate::engine) fn front_ctx(&self) -> Context<'_> {
        Context {
            mapping: &self.front,
            vars: &self.front_vars,
            seal_key: &self.seal_key,
        }
    }

    pub(in crate::engine) fn back_ctx(&self) -> Context<'_> {
        Context {
            mapping: &self.back,
            vars: &self.back_vars,
            seal_key: &self.seal_key,
        }
    }
}
