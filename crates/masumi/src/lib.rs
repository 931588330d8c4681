//! Masumi's libraries, which the mapping language's builtins call: the MIP-004 input and output
//! hashes ([`mip004`]), MIP-003 Attachment 01 input schemas ([`attachment01`]) and their
//! conversion to and from JSON Schema ([`json_schema`]). Dialect-specific knowledge, kept in a
//! room whose name says so; nothing here knows about the proxy.

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod attachment01;
pub mod json_schema;
pub mod mip004;
