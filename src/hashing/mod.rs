//! Hashes dialects require: MIP-004 input and output hashes for Masumi.

pub mod mip004;
