//! interlingua: a reverse proxy for AI agents, on Cloudflare's pingora.
//!
//! A client speaks its dialect to a route; interlingua forwards the request to the route's
//! upstream agent and the answer back. This version forwards unchanged (`passthrough`); the
//! dialect engine, access control and metering build on the same pipeline.
//!
//! The map of the tree:
//!
//! | module      | what it is |
//! |-------------|------------|
//! | `cli`       | `interlingua serve / check / demo` |
//! | `config`    | the TOML file (`file`), read section by section, validated into `model` |
//! | `server`    | binds listeners, runs pingora's services, graceful shutdown |
//! | `proxy`     | the pipeline: pingora's `ProxyHttp` phases (see its phase chart) |
//! | `proxy::routing` | host → longest path prefix → method |
//! | `proxy::upstream` | resolved upstream addresses and pooled peers |
//! | `proxy::respond`  | the one place errors become responses |
//! | `error`     | what a request can end in, and its status |
//! | `admin`     | `/healthz`, `/readyz`, `/metrics` on the admin listener |
//! | `metrics`   | Prometheus counters and histograms |
//! | `payment`   | paying agents on their own rail (a Masumi purchase), on the operator's account |
//! | `telemetry` | logging and the access-log event |
//! | `sample`    | sample agents for the demo |
//!
//! A request's path:
//!
//! ```text
//! client ─► listener (TCP or TLS; HTTP/1.1 keep-alive, h2 by ALPN or h2c)
//!        ─► proxy: request id ─► route ─► body limit ─► upstream (pooled) ─► response ─► access log
//!        ◄─ errors: proxy::respond, JSON {"error":{"code","message","request_id"}}
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
pub mod request_id;
pub mod routing;
pub mod server;
pub mod setup;
pub mod state;
pub mod telemetry;
pub mod upstream;
