//! The canonical task model and the mapping language: what interlingua translates through, and
//! how a dialect's TOML file describes itself against it. Pure data and functions: no sockets, no
//! runtime, no database (CI fails if this crate gains pingora, tokio, rusqlite or hyper).
//!
//! | module | what it is |
//! |--------|------------|
//! | [`task`] | the canonical task, its steps and statuses, how observations fold into it, timestamps |
//! | [`dialect`] | mapping files compiled into translators: the file format, the compiler, expressions and builtins, the codec that decodes and encodes messages |
//! | [`problem`] | a problem found in a file, with file:line:col, and the collector that gathers every one |
//! | [`units`] | durations and sizes as files write them (`"30s"`, `"1 MiB"`) |
//! | [`depth`] | how deep a JSON document nests, measured before it is parsed or stored |
//!
//! Dialect-specific libraries the mappings call (MIP-004 hashes, Attachment 01 schemas) live in
//! the `masumi` crate, under a name that says whose they are.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod depth;
pub mod dialect;
pub mod problem;
pub mod task;
pub mod units;
