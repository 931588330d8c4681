//! interlingua's benchmark harness: interlingua side by side with nginx and the upstream reached
//! directly, and how its cost grows.
//!
//! ```text
//! bench/run ── builds (release), installs wrk, oha, nginx when missing ──► interlingua-bench run
//!
//!  generator CPU                      contender CPU(s)
//!  ┌──────────────┐    loopback       ┌─────────────────────────────────────────────┐
//!  │ wrk (closed  │ ───────────────►  │ direct: the canned upstream                 │
//!  │ loop) / oha  │                   │ nginx ──► canned upstream                   │
//!  │ (fixed rate) │                   │ interlingua (passthrough | full pipeline)   │
//!  └──────────────┘                   │        ──► canned upstream                  │
//!                                     │ interlingua (paid create, x402)             │
//!                                     │        ──► canned upstream, facilitator     │
//!                                     └─────────────────────────────────────────────┘
//! ```
//!
//! - [`run`]: the whole run: start the stack, check it, compare, draw the curves, report.
//! - [`stack`]: the contenders' processes and configs (interlingua, nginx, the upstream, the
//!   facilitator).
//! - [`canned`]: the canned upstream (MIP-003, Nevermined and echo answers, fixed bodies).
//! - [`facilitator`]: the stand-in x402 facilitator of the paid create (verifies and settles
//!   every payment at once, counts each call); [`payer`]: that contender's payments, a nonce
//!   each; [`serve`]: the server both stand-ins run on.
//! - [`compare`]: the main table's rounds (A B C … A B C …), CPU from `/proc`.
//! - [`curves`]: latency vs body size, connections, routes, stored tasks; creates vs clients.
//! - [`polled`]: the tasks a get_task contender's clients poll, kept running (`run` and
//!   `curves` both make them).
//! - [`fleet`]: the store on PostgreSQL: its contenders, one instance against two on one database.
//! - [`load`]: driving wrk and oha, reading their figures.
//! - [`procs`]: starting, pinning, bounding and stopping processes by pid; `/proc` readings.
//! - [`blocking`]: what a client blocking on a 2 s task waits beyond the task (A2A over MIP-003).
//! - [`idle`]: resident memory while idle client connections are held, and after they close.
//! - [`instructions`]: instructions per request under callgrind, against a committed baseline
//!   (CI's regression guard).
//! - [`seed`]: filling a task store for the stored-tasks curve.
//! - [`stats`]: percentiles, medians, per-round ratios (what the headline is made of).
//! - [`report`], [`plot`]: tables, results files, PNG plots, the headline line.
//! - [`plan`]: durations and budgets of quick and full runs.

#![forbid(unsafe_code)]

pub mod blocking;
pub mod canned;
pub mod compare;
pub mod curves;
pub mod facilitator;
pub mod fleet;
pub mod http;
pub mod idle;
pub mod instructions;
pub mod load;
pub mod payer;
pub mod plan;
pub mod plot;
pub mod polled;
pub mod procs;
pub mod report;
pub mod run;
pub mod seed;
pub mod serve;
pub mod stack;
pub mod stats;
