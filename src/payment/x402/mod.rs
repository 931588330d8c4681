//! x402: being paid by clients (and, later, paying agents) with signed token transfers that a
//! facilitator verifies and settles on chain (<https://github.com/coinbase/x402>, version 2).
//!
//! What is here so far: the wire documents and their headers ([`wire`]), and a route's offers
//! with the check that a client's payment is one of them ([`offer`]). The route's config, the
//! 402 answer in each front's dialect, the facilitator's calls and the settlements through the
//! ledger build on these (`docs/payments.md` says what a route can take today).

pub mod offer;
pub mod wire;
