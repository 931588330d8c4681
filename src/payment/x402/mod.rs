//! x402: being paid by clients (and paying agents) with signed token transfers that a
//! facilitator verifies and settles on chain (<https://github.com/coinbase/x402>, version 2).
//!
//! | module | what it is |
//! |---|---|
//! | [`wire`] | the documents and their headers (`PAYMENT-REQUIRED`, `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`), the facilitator's bodies and answers |
//! | [`offer`] | a route's offers as `accepts` entries, and the check that a payment is one of them |
//! | [`accept`] | a client's payment read, verified and settled through the facilitator; the sale it opens |
//! | [`sign`] | the payer's side: a wallet and the EIP-712 signatures of `exact` (EIP-3009, Permit2) and `upto` (Permit2) payloads |
//! | [`pay`] | paying agents: an agent's 402 read, an offer chosen within the route's policy and signed, the receipt read into a cost row |
//!
//! When each scheme's money moves (the hold, the settlement, what a failed task gives back) is
//! the engine's: `engine/admission.rs` and `engine/settle/x402.rs`; when an agent is paid, `engine/back/x402_pay.rs`.
//! `docs/payments.md` explains them to operators.

pub mod accept;
pub mod offer;
pub mod pay;
pub mod sign;
pub mod wire;
