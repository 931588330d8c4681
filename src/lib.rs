//! interlingua: a reverse proxy for AI agents, on Cloudflare's pingora.
//!
//! A client speaks its dialect to a route; interlingua checks who is calling and how often,
//! translates the request through the canonical task model into the dialect of the route's agent,
//! holds and captures the caller's credits per step, and answers in the client's dialect.
//! Passthrough routes forward unchanged. The crates below this one (the workspace's `crates/`)
//! hold what needs no proxy: `mapping` (the canonical model and the mapping language), `masumi`
//! (MIP-004, Attachment 01), `store` (tasks and the ledger), `samples` (agents for the demo).
//!
//! The map of this crate, from the bottom layer up (`tests/architecture.rs` checks that no module
//! imports another in a circle):
//!
//! | module      | what it is |
//! |-------------|------------|
//! | `metrics`   | Prometheus counters and histograms |
//! | `request_id`| the X-Request-Id header: kept when sane, made when not |
//! | `config`    | the TOML file (`file`), read section by section, validated into `model`; `url` |
//! | `telemetry` | logging and the access-log event; `trace`, OpenTelemetry spans exported over OTLP |
//! | `setup`     | a config and the dialects its routes name, loaded together |
//! | `routing`   | host → longest path prefix → method |
//! | `upstream`  | the client every call to an agent or service goes through, peers, `UpstreamError` |
//! | `auth`      | bearer JWTs (HMAC, RSA, EC, EdDSA; key sets over a file or URL) |
//! | `limit`     | rate limits per route, client and subject (governor GCRA; shared through Redis) |
//! | `credits`   | what steps cost; `verify`, the ledger's invariants |
//! | `payment`   | paying agents on their own rail (a Masumi purchase; an x402 402 paid from the route's wallet), on the operator's account, and being paid (x402's wire and offers; a Masumi payment request as the seller) |
//! | `error`     | what a request can end in: the concerns' errors composed, with status and code |
//! | `engine`    | a front request carried out as one canonical operation: `request` (the request read), `ops/` (one file per operation), `tasks` (stored, applied, refreshed), `back/` (every call to an agent), `settle/` (where a step is charged; the rails), `answer` (the one place answers and errors are rendered); the watcher |
//! | `state`     | what every request reads: the live config (`Live`, swapped whole by a reload), the engine |
//! | `reload`    | reading the config again and swapping it in (SIGHUP, file changes, the admin API); what takes a restart |
//! | `proxy`     | the pipeline: pingora's `ProxyHttp` phases (see its phase chart); `operation`, a translated route's request handed to the engine and its outcome written; `respond`, errors met before the engine written |
//! | `admin`     | `/healthz`, `/readyz`, `/metrics`, `/config`, credits and tasks on the admin listener |
//! | `server`    | binds listeners, runs pingora's services, graceful shutdown |
//! | `cli`       | `interlingua serve / check / demo / translate / dialects / credits / token` |
//!
//! A request's path:
//!
//! ```text
//! client ─► listener (TCP or TLS; HTTP/1.1 keep-alive, h2 by ALPN or h2c)
//!        ─► proxy: request id ─► route ─► body limit ─► auth ─► plan ─► rate limits
//!             passthrough: ─► upstream (pooled) ─► response
//!             translated:  ─► engine: decode (front mapping) ─► hold credits ─► call the back
//!                              (back mapping, upstream::Client) ─► capture per step ─► encode
//!        ─► access log
//!        ◄─ answers and errors: engine::answer renders them, in the front dialect's shape (or JSON
//!           {"error":{…}}); proxy::operation and proxy::respond write them
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod admin;
pub mod auth;
pub mod cli;
pub mod config;
pub mod credits;
pub mod engine;
pub mod error;
pub mod limit;
pub mod metrics;
pub mod payment;
pub mod proxy;
pub mod reload;
pub mod request_id;
pub mod routing;
pub mod server;
pub mod setup;
pub mod state;
pub mod telemetry;
pub mod upstream;
