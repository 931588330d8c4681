//! The engine: a front request carried out as one canonical operation, through the canonical
//! model to the back and back.
//!
//! ```text
//! front request ─ request.rs: read (front mapping) ─► canonical ─► ops/<operation>.rs
//!                                                                    │ tasks.rs: load, apply, refresh
//!                                                                    │ back/: calls to the agent
//!                                                                    │ settle/: charges, rails
//! front answer ◄─ answer.rs: rendered (front mapping), success or error ◄┘
//!
//! a back call:  canonical ─ encode (back mapping) ─► HTTP ─► upstream ─► decode (back mapping) ─► canonical
//! ```
//!
//! Where things happen, by file:
//!
//! | question | file |
//! |---|---|
//! | where a request becomes a canonical operation | `request.rs` (its document: `documents::read_front`) |
//! | where a task is made and started | `ops/create.rs` (its fields: `documents::start_task`) |
//! | where each operation's story is told | `ops/{create,get,input,cancel,search,search_steps,describe}.rs` |
//! | where a task is stored, refreshed, followed | `tasks.rs` (and `follow.rs`, `watch.rs`, `stream.rs`) |
//! | where a back is called | `back/mod.rs` (`Back::call`; discovery in `back/discover.rs`, an agent's 402 in `back/x402_pay.rs`) |
//! | where a completed step is charged | `settle/mod.rs` (what it costs: `credits::captures`) |
//! | where a rail plugs in | `settle/`: `x402.rs` (being paid), `masumi_buy.rs` (paying), `masumi_sell.rs` and `escrow.rs` (selling) |
//! | where an answer is rendered | `answer.rs`, for results and errors alike |
//!
//! "canonical" is one typed document ([`mapping::dialect::doc`]): the engine builds what rules
//! read (`Canonical::front(task)`, `Canonical::back(&task).with_turn(n)`, `.with_request(..)`,
//! `.with_charge(..)`) and takes what they wrote by name (`Decoded::task_patch`, `task_ref`,
//! `search`, …), never by indexing a JSON document.
//!
//! The engine supplies what the back lacks: ids for the front (the store maps them to upstream
//! ids), steps (synthesized, one per status), polling for a front that wants the result, background
//! execution for a back that only answers with the result, `availability`, `input_schema` and
//! `search_tasks` from config, the mappings and the store. It knows no dialect by name.
//!
//! The steps that shape messages, between the store and the calls, are pure functions in
//! [`documents`] (a request read, a task started, a back's documents written and its answers
//! read and folded, an answer's document rendered): the operations here and the golden tests
//! call the same.

mod admission;
pub mod answer;
mod back;
pub mod documents;
mod follow;
mod ops;
mod request;
mod route;
mod settle;
mod stream;
mod tasks;
pub mod views;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use tracing::Span;

use crate::auth::Identity;
use crate::metrics::Metrics;
use crate::telemetry::trace::{self, ClientTrace};
use crate::upstream::Client;
use store::TaskStore;

pub use answer::{Body, FrontResponse};
pub use request::{FrontRequest, Outcome};
pub use route::{Translated, X402_PAYER_VAR};

/// One request, as the engine carries it out.
pub struct Cx<'a> {
    pub request_id: &'a str,
    /// Who is calling, on routes with auth.
    pub identity: Option<&'a Identity>,
    /// The client's trace context (requests; none for the watcher's calls).
    pub trace: Option<&'a ClientTrace>,
    /// What the request has cost so far; the outcome reports it.
    pub spent: Spent,
    /// The x402 payment this request brought, verified, when it creates a task with it.
    pub paid: Option<&'a crate::payment::x402::accept::Verified>,
    /// The settlement made for this request (an x402 `SettleResponse`): the answer carries it
    /// as `PAYMENT-RESPONSE`, and as `payment.receipt` for fronts that carry it in band.
    pub receipt: Option<crate::payment::x402::wire::SettleResponse>,
}

impl<'a> Cx<'a> {
    /// The context of work interlingua does on its own (the watcher, a sweep, the console),
    /// for no client: `request_id` names it in logs.
    pub fn background(request_id: &'a str) -> Cx<'a> {
        Cx {
            request_id,
            identity: None,
            trace: None,
            spent: Spent::default(),
            paid: None,
            receipt: None,
        }
    }
}

/// What one request cost: time waiting for upstreams, credits charged.
#[derive(Debug, Default, Clone, Copy)]
pub struct Spent {
    pub upstream: Duration,
    pub charged: u64,
}

/// The translation engine, shared by every request.
pub struct Engine {
    pub store: Arc<dyn TaskStore>,
    /// The client every call to an agent or a payment service goes through.
    pub client: Arc<Client>,
    pub metrics: Arc<Metrics>,
    /// Follows the tasks this engine starts (set once the watcher exists).
    pub watcher: std::sync::OnceLock<std::sync::Weak<watch::Watcher>>,
    /// The routes' agents: calls, discovery, input schemas.
    back: back::Back,
    /// When each task was last refreshed from its back (polls coalesce).
    refreshes: follow::Refreshes,
    /// The x402 sales this process is settling right now, and the escrow sales it is moving.
    settling: settle::x402::UnderWay,
    /// Wakes the escrow sweep: a sold job's result is ready to submit.
    escrow_wake: tokio::sync::Notify,
}

impl Engine {
    /// `idle_pool`: idle upstream connections the engine keeps for its own calls to backs.
    pub fn new(store: Arc<dyn TaskStore>, metrics: Arc<Metrics>, idle_pool: usize) -> Engine {
        let client = Arc::new(Client::new(idle_pool));
        Engine {
            back: back::Back::new(client.clone(), store.clone()),
            store,
            metrics,
            watcher: std::sync::OnceLock::new(),
            client,
            refreshes: follow::Refreshes::default(),
            settling: settle::x402::UnderWay::default(),
            escrow_wake: tokio::sync::Notify::new(),
        }
    }

    /// The span of one call to the store (`op`, the `TaskStore` method); see [`store_span`].
    pub(in crate::engine) fn store_span(&self, op: &'static str) -> Span {
        store_span(&*self.store, op)
    }

    /// Forgets what route `name`'s back said about itself (its input schema, its discovery): a
    /// reload pointed the route at another agent, or removed it.
    pub fn forget_route(&self, name: &str) {
        self.back.forget_route(name);
    }
}

/// The span of one call to `store` (`op`, the `TaskStore` method), below the current span when
/// that is a traced request's or the watcher's; `Span::none()` otherwise.
fn store_span(store: &dyn TaskStore, op: &'static str) -> Span {
    if !trace::enabled() {
        return Span::none();
    }
    trace::store(op, store.backend())
}

/// A store error, as a request's.
pub(in crate::engine) fn store_error(e: store::StoreError) -> crate::error::ProxyError {
    crate::error::ProxyError::Store(e)
}

/// What a create holds, and where its task is: new (`stored` none), or stored already at that
/// version, waiting to be paid for.
pub(in crate::engine) struct Held {
    pub(in crate::engine) hold: Option<store::Hold>,
    pub(in crate::engine) stored: Option<i64>,
}

impl Held {
    /// A task stored at `version` whose credits are held already: a sold job, held by its
    /// sale when the buyer's funds were locked.
    pub(in crate::engine) fn stored(version: i64) -> Held {
        Held {
            hold: None,
            stored: Some(version),
        }
    }
}
