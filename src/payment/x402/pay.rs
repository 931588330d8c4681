//! x402 on the paying side: interlingua pays an agent that answers one of its calls with 402,
//! within the route's policy, from the operator's wallet.
//!
//! ```text
//! a back call ─► 402 + PAYMENT-REQUIRED ─► Demand::read
//!             ─► Policy::choose: the first offer whose scheme, network, asset and amount the
//!                policy allows (per call, and with what the task already spent, per task)
//!             ─► Policy::sign (sign.rs: the SDK's payload) ─► the same call + PAYMENT-SIGNATURE
//!             ─► Asked::answered: what the agent's answer and PAYMENT-RESPONSE make of it
//! ```
//!
//! An A2A agent may ask in band instead (the A2A x402 extension, v0.2: an input-required task
//! whose status message carries `x402.payment.required`): [`Demand::in_band`] reads it,
//! [`Policy::payload`] signs the same way, and the payment goes in the next message's metadata.
//! Its receipt comes with the task's final message ([`settled_in_band`]).
//!
//! An offer outside the policy is never signed ([`Asked::refused`]). Each step ends in one row
//! of the cost ledger ([`store::Cost`]); the engine (`engine/back/x402_pay.rs`) stores it and decides
//! what the task becomes. Version 2 (<https://github.com/coinbase/x402/blob/main/specs/transports-v2/http.md>)
//! is paid as it comes; a version 1 demand (a JSON body with `x402Version: 1`, the network by
//! name, paid with `X-PAYMENT`) is read as version 2's, paid with the same signature, and sent in
//! version 1's payload ([`version_1_entry`], [`Policy::payload`]).

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::sign::{build_payment_payload, Nonce, SignError, Wallet};
use super::wire::{
    self, Requirements, SettleResponse, PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE,
};
use crate::config::X402Pay;
use store::{Cost, CostState};

/// The rail's name in the cost ledger.
pub const RAIL: &str = "x402";

/// A route's policy, with its wallet: what interlingua may pay, and who pays.
pub struct Policy {
    wallet: Wallet,
    networks: Vec<String>,
    /// Lower-case.
    assets: Vec<String>,
    max_per_call: u64,
    max_per_task: u64,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("payer", &self.wallet.address())
            .field("networks", &self.networks)
            .field("assets", &self.assets)
            .field("max_per_call", &self.max_per_call)
            .field("max_per_task", &self.max_per_task)
            .finish()
    }
}

/// An agent's 402, as far as paying it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Demand {
    /// Version 2: the `PAYMENT-REQUIRED` header verbatim, and its document.
    Payable { header: String, doc: Value },
    /// A demand interlingua does not pay (version 1, or a header it cannot read): what it was,
    /// verbatim, and why.
    Unpayable { raw: String, why: String },
}

/// An offer chosen: what is signed, and what it costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Offer {
    pub requirements: Requirements,
    /// The `accepts` entry as the agent wrote it (the signer echoes what it knows of it).
    entry: Value,
    /// Atomic units of the asset; within `i64`.
    pub amount: u64,
}

/// Why no offer was chosen: in words naming each offer's reason, and the first offer (what the
/// cost row shows).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub why: String,
    pub first: Option<Box<Requirements>>,
}

impl Demand {
    /// The demand of a 402 answer: its `PAYMENT-REQUIRED` header (version 2), or a version 1
    /// body; `None` for a 402 that asks for no x402 payment at all.
    pub fn read(headers: &[(String, String)], body: &[u8]) -> Option<Demand> {
        if let Some(header) = header(headers, PAYMENT_REQUIRED) {
            return Some(match wire::decode_header::<Value>(header) {
                Err(e) => Demand::Unpayable {
                    raw: header.to_string(),
                    why: format!("the agent's PAYMENT-REQUIRED cannot be read: {e}"),
                },
                Ok(doc) => Demand::of(doc, header.to_string(), &[2], "PAYMENT-REQUIRED"),
            });
        }
        // Version 1 put the demand in the body (`x402Version: 1`, paid with `X-PAYMENT`).
        let body: Value = serde_json::from_slice(body).ok()?;
        body.get("x402Version")?;
        let raw = body.to_string();
        Some(Demand::of(body, raw, &[1], "402 body"))
    }

    /// The demand an A2A agent makes in band (the A2A x402 extension,
    /// https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2/spec.md): the
    /// `x402.payment.required` of its input-required status message, a `PaymentRequired`
    /// document of version 2 or 1 (the extension's own examples are version 1's). Kept
    /// verbatim as its JSON text.
    pub fn in_band(required: &Value) -> Demand {
        let mut doc = required.clone();
        // An agent on protobuf (a2a-sdk) sends every number in metadata as a double.
        wire::whole_numbers(&mut doc);
        let raw = doc.to_string();
        Demand::of(doc, raw, &[1, 2], "x402.payment.required")
    }

    /// `doc`, a demand of one of `versions` carried in `what` (`raw` as the agent sent it): a
    /// version 1 demand is read as version 2's (see [`version_1_entry`]), its version kept.
    fn of(doc: Value, raw: String, versions: &[u64], what: &str) -> Demand {
        let version = doc.get("x402Version").and_then(Value::as_u64);
        if !version.is_some_and(|v| versions.contains(&v)) {
            let shown = doc.get("x402Version").cloned().unwrap_or(Value::Null);
            let paid = versions
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" or ");
            return Demand::Unpayable {
                raw,
                why: format!(
                    "the agent's {what} asks for x402 version {shown}; interlingua pays version {paid} there"
                ),
            };
        }
        let Some(accepts) = doc.get("accepts").and_then(Value::as_array) else {
            return Demand::Unpayable {
                raw,
                why: format!("the agent's {what} has no `accepts` list"),
            };
        };
        if version != Some(1) {
            return Demand::Payable { header: raw, doc };
        }
        let doc = serde_json::json!({
            "x402Version": 1,
            "error": doc.get("error"),
            "accepts": accepts.iter().map(version_1_entry).collect::<Vec<_>>(),
        });
        Demand::Payable { header: raw, doc }
    }

    /// The request header that carries a payment of this demand: `PAYMENT-SIGNATURE`, or
    /// version 1's `X-PAYMENT`.
    pub fn signature_header(&self) -> &'static str {
        match self {
            Demand::Payable { doc, .. } if is_version_1(doc) => wire::X_PAYMENT,
            _ => PAYMENT_SIGNATURE,
        }
    }

    /// The demand as the agent sent it, for the cost row.
    pub fn raw(&self) -> &str {
        match self {
            Demand::Payable { header, .. } => header,
            Demand::Unpayable { raw, .. } => raw,
        }
    }
}

impl Policy {
    /// The policy of a route's `payment.pay.x402`; an error only for a key the config's check
    /// let through (it checks the same).
    pub fn new(config: &X402Pay) -> Result<Policy, SignError> {
        Ok(Policy {
            wallet: Wallet::from_hex(&config.key.0)?,
            networks: config.networks.clone(),
            assets: config.assets.clone(),
            max_per_call: config.max_per_call,
            max_per_task: config.max_per_task,
        })
    }

    /// The address interlingua pays from (EIP-55).
    pub fn payer(&self) -> String {
        self.wallet.address()
    }

    /// What one task's payments may take in all.
    pub fn max_per_task(&self) -> u64 {
        self.max_per_task
    }

    /// The first of the agent's offers the policy allows, `spent` being what the task's
    /// earlier payments took; or why none is.
    pub fn choose(&self, doc: &Value, spent: u64) -> Result<Offer, Refusal> {
        let entries = doc
            .get("accepts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut reasons = Vec::new();
        for entry in entries {
            let allowed = match entry.get("scheme").and_then(Value::as_str) {
                Some(scheme) if is_version_1(doc) && scheme != "exact" => Err(format!(
                    "scheme `{scheme}` is not one interlingua pays in x402 version 1 (exact)"
                )),
                _ => self.allows(entry, spent),
            };
            match allowed {
                Ok(offer) => return Ok(offer),
                Err(why) => reasons.push(why),
            }
        }
        let first = entries
            .first()
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .map(Box::new);
        let why = match reasons.as_slice() {
            [] => "the agent offers no way to pay".to_string(),
            [one] => format!("the agent's offer is outside the route's policy: {one}"),
            many => format!(
                "none of the agent's {} offers is within the route's policy: {}",
                many.len(),
                many.iter()
                    .enumerate()
                    .map(|(i, why)| format!("({}) {why}", i + 1))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        };
        Err(Refusal { why, first })
    }

    /// `entry` as an offer the policy allows, or why it is not one.
    fn allows(&self, entry: &Value, spent: u64) -> Result<Offer, String> {
        let requirements: Requirements = serde_json::from_value(entry.clone())
            .map_err(|e| format!("an offer that is not x402's: {e}"))?;
        let r = &requirements;
        if !matches!(r.scheme.as_str(), "exact" | "upto") {
            return Err(format!(
                "scheme `{}` is not one interlingua pays (exact, upto)",
                r.scheme
            ));
        }
        if !self.networks.contains(&r.network) {
            return Err(format!(
                "network `{}` is not among payment.pay.x402.networks",
                r.network
            ));
        }
        if !self.assets.contains(&r.asset.to_ascii_lowercase()) {
            return Err(format!(
                "asset `{}` on `{}` is not among payment.pay.x402.assets",
                r.asset, r.network
            ));
        }
        let amount = r
            .amount
            .parse::<u64>()
            .map_err(|_| format!("amount `{}` is not a number of atomic units", r.amount))?;
        if amount > self.max_per_call {
            return Err(format!(
                "amount {amount} is above max_per_call ({})",
                self.max_per_call
            ));
        }
        let total = spent.saturating_add(amount);
        if total > self.max_per_task {
            return Err(format!(
                "amount {amount} would bring the task's payments to {total}, above max_per_task ({})",
                self.max_per_task
            ));
        }
        Ok(Offer {
            requirements,
            entry: entry.clone(),
            amount,
        })
    }

    /// The `PAYMENT-SIGNATURE` header that pays `offer`, chosen from the demand `doc`: the SDK's
    /// payload (its `resource` and `extensions` echoed), valid from now for the offer's
    /// `maxTimeoutSeconds`, with a fresh nonce.
    pub fn sign(
        &self,
        doc: &Value,
        offer: &Offer,
        now_unix_secs: u64,
    ) -> Result<String, SignError> {
        Ok(wire::encode_header(&self.payload(
            doc,
            offer,
            now_unix_secs,
        )?))
    }

    /// `offer` signed: the `PaymentPayload` document itself, as a payment in band carries it.
    /// For a version 1 demand, version 1's payload: the scheme and the network by name beside
    /// the same signed authorization.
    pub fn payload(
        &self,
        doc: &Value,
        offer: &Offer,
        now_unix_secs: u64,
    ) -> Result<Value, SignError> {
        let payload = build_payment_payload(
            &self.wallet,
            &offer.entry,
            doc.get("resource"),
            doc.get("extensions"),
            now_unix_secs,
            Nonce::random()?,
        )?;
        if !is_version_1(doc) {
            return Ok(payload);
        }
        Ok(serde_json::json!({
            "x402Version": 1,
            "scheme": offer.requirements.scheme,
            "network": offer.entry.get(V1_NETWORK).unwrap_or(&Value::Null),
            "payload": payload.get("payload").unwrap_or(&Value::Null),
        }))
    }
}

/// A payment asked for: the task and route it is booked against, when, and the demand
/// verbatim. Builds the cost row of whatever came of it.
pub struct Asked<'a> {
    pub task_id: &'a str,
    pub route: &'a str,
    pub at: DateTime<Utc>,
    pub required: &'a str,
}

impl Asked<'_> {
    /// Nothing signed: `why`; `offer` the one the row shows (the first offered).
    pub fn refused(&self, why: &str, offer: Option<&Requirements>) -> Cost {
        let mut cost = self.row(CostState::Refused, offer);
        cost.detail = Some(why.to_string());
        cost
    }

    /// `offer` signed by `payer`, about to be sent: the row written before it leaves.
    pub fn sending(&self, offer: &Offer, payer: String) -> Cost {
        let mut cost = self.row(CostState::Sending, Some(&offer.requirements));
        cost.amount = Some(offer.amount);
        cost.payer = Some(payer);
        cost
    }

    /// `offer` signed by `payer` and sent: what the agent's answer to the paid call (`status`,
    /// `headers`) makes of it. Paid when the answer is 2xx and its receipt does not say the
    /// settlement failed; failed when the agent asks again (402), refuses the call, or its
    /// receipt says the settlement failed.
    pub fn answered(
        &self,
        offer: &Offer,
        payer: String,
        status: u16,
        headers: &[(String, String)],
    ) -> Cost {
        let receipt_text =
            header(headers, PAYMENT_RESPONSE).or_else(|| header(headers, wire::X_PAYMENT_RESPONSE));
        let receipt = receipt_text.map(wire::decode_header::<SettleResponse>);
        let ok = (200..300).contains(&status);
        let (state, detail) = match (&receipt, status) {
            (_, 402) => (CostState::Failed, asked_again(headers)),
            (Some(Ok(r)), _) if r.success => (
                CostState::Paid,
                (!ok).then(|| format!("settled, but the agent answered {status} to the paid call")),
            ),
            (Some(Ok(r)), _) => (
                CostState::Failed,
                Some(format!(
                    "the agent's settlement failed: {}",
                    r.error_reason.as_deref().unwrap_or("no reason given")
                )),
            ),
            (Some(Err(e)), _) if ok => (
                CostState::Paid,
                Some(format!(
                    "the agent's PAYMENT-RESPONSE cannot be read ({e}): the settlement is not confirmed"
                )),
            ),
            (None, _) if ok => (
                CostState::Paid,
                Some("the agent answered without PAYMENT-RESPONSE: the settlement is not confirmed".to_string()),
            ),
            (_, status) => (
                CostState::Failed,
                Some(format!("the agent answered {status} to the paid call")),
            ),
        };
        let mut cost = self.row(state, Some(&offer.requirements));
        cost.amount = Some(offer.amount);
        if let Some(Ok(r)) = &receipt {
            // `upto` settles what was owed, up to the amount signed.
            if let Some(settled) = r
                .amount
                .as_deref()
                .and_then(|a| a.parse::<u64>().ok())
                .filter(|a| *a <= offer.amount)
            {
                cost.amount = Some(settled);
            }
            cost.transaction = Some(r.transaction.clone()).filter(|t| !t.is_empty());
        }
        cost.payer = Some(payer);
        cost.detail = detail;
        cost.response = receipt_text.map(str::to_string);
        cost
    }

    /// `offer` signed by `payer`, about to be sent in band: the row written before it leaves,
    /// which keeps `sending` until the agent's receipt comes ([`settled_in_band`]).
    pub fn sending_in_band(&self, offer: &Offer, payer: String) -> Cost {
        let mut cost = self.sending(offer, payer);
        cost.detail = Some(store::costs::AWAITS_RECEIPT.to_string());
        cost
    }

    /// `offer` signed by `payer` and sent in band: the agent asked for it again instead of taking
    /// it (its new input-required status, `required` its fresh demand).
    pub fn asked_again_in_band(&self, offer: &Offer, payer: String, required: &Value) -> Cost {
        let mut cost = self.row(CostState::Failed, Some(&offer.requirements));
        cost.amount = Some(offer.amount);
        cost.payer = Some(payer);
        cost.detail = Some(asked_again_in_band(required));
        cost
    }

    /// The task's payment sent in band earlier, still awaiting its receipt: the agent asks for
    /// one again instead (`required`), so it did not take it. The outcome of that row.
    pub fn asked_again_later(&self, required: &Value) -> Cost {
        let mut cost = self.row(CostState::Failed, None);
        cost.amount = None;
        cost.detail = Some(asked_again_in_band(required));
        cost
    }

    /// `offer` signed by `payer` and sent in band: the agent refused the message that carried it
    /// (`why`, its error).
    pub fn rejected_in_band(&self, offer: &Offer, payer: String, why: &str) -> Cost {
        let mut cost = self.row(CostState::Failed, Some(&offer.requirements));
        cost.amount = Some(offer.amount);
        cost.payer = Some(payer);
        cost.detail = Some(format!(
            "the agent refused the message carrying the payment: {why}"
        ));
        cost
    }

    fn row(&self, state: CostState, offer: Option<&Requirements>) -> Cost {
        Cost {
            task_id: self.task_id.to_string(),
            route: self.route.to_string(),
            at: self.at,
            rail: RAIL.to_string(),
            state,
            scheme: offer.map(|o| o.scheme.clone()),
            network: offer.map(|o| o.network.clone()),
            asset: offer.map(|o| o.asset.clone()),
            pay_to: offer.map(|o| o.pay_to.clone()),
            // What was offered, where the ledger can keep it.
            amount: offer
                .and_then(|o| o.amount.parse::<u64>().ok())
                .filter(|a| i64::try_from(*a).is_ok()),
            payer: None,
            transaction: None,
            detail: None,
            required: Some(self.required.to_string()),
            response: None,
        }
    }
}

/// What became of task `task_id`'s payment made in band, still on its way (`sending`), once its
/// agent's answer carries `receipt` (the newest of its `x402.payment.receipts`, a
/// `SettleResponse`), or once the task has ended without one (`None`): the row's outcome.
/// `amount` is what the receipt says was settled (the store keeps the signed amount when the
/// receipt names none, or more).
pub fn settled_in_band(task_id: &str, route: &str, receipt: Option<&Value>) -> Cost {
    let read = receipt.map(|r| {
        let mut r = r.clone();
        wire::whole_numbers(&mut r);
        serde_json::from_value::<SettleResponse>(r)
    });
    let (state, detail) = match &read {
        None => (
            CostState::Paid,
            Some(
                "the task ended without the agent's receipt: the settlement is not confirmed"
                    .to_string(),
            ),
        ),
        Some(Ok(r)) if r.success => (CostState::Paid, None),
        Some(Ok(r)) => (
            CostState::Failed,
            Some(format!(
                "the agent's settlement failed: {}",
                r.error_reason.as_deref().unwrap_or("no reason given")
            )),
        ),
        Some(Err(e)) => (
            CostState::Paid,
            Some(format!(
                "the agent's receipt cannot be read ({e}): the settlement is not confirmed"
            )),
        ),
    };
    let settled = match &read {
        Some(Ok(r)) => r.amount.as_deref().and_then(|a| a.parse::<u64>().ok()),
        _ => None,
    };
    Cost {
        task_id: task_id.to_string(),
        route: route.to_string(),
        at: Utc::now(),
        rail: RAIL.to_string(),
        state,
        scheme: None,
        network: None,
        asset: None,
        pay_to: None,
        amount: settled.filter(|a| i64::try_from(*a).is_ok()),
        payer: None,
        transaction: match &read {
            Some(Ok(r)) if !r.transaction.is_empty() => Some(r.transaction.clone()),
            _ => None,
        },
        detail,
        required: None,
        response: receipt.map(Value::to_string),
    }
}

/// Where a version 1 offer, read as version 2's, keeps its network's name.
const V1_NETWORK: &str = "x402V1Network";

/// The EVM networks x402 version 1 names, by chain id (the names of the x402 specification's
/// version 1 and its SDKs; version 2 names them by CAIP-2 instead).
const V1_NETWORKS: &[(&str, u64)] = &[
    ("ethereum", 1),
    ("base", 8453),
    ("base-sepolia", 84532),
    ("polygon", 137),
    ("polygon-amoy", 80002),
    ("avalanche", 43114),
    ("avalanche-fuji", 43113),
    ("abstract", 2741),
    ("abstract-testnet", 11124),
    ("iotex", 4689),
    ("sei", 1329),
    ("sei-testnet", 1328),
    ("peaq", 3338),
    ("story", 1513),
    ("educhain", 656476),
    ("celo", 42220),
];

fn is_version_1(doc: &Value) -> bool {
    doc.get("x402Version").and_then(Value::as_u64) == Some(1)
}

/// A version 1 `accepts` entry read as version 2's, so that one policy and one signer serve
/// both: its network by CAIP-2 (the name kept beside it), `maxAmountRequired` as `amount`. A
/// network version 1 does not name on EVM stays as it is: the policy refuses it by name.
fn version_1_entry(entry: &Value) -> Value {
    let mut entry = entry.clone();
    let Some(o) = entry.as_object_mut() else {
        return entry;
    };
    let name = o.get("network").and_then(Value::as_str).map(str::to_string);
    if let Some((name, id)) = name
        .as_deref()
        .and_then(|n| V1_NETWORKS.iter().find(|(known, _)| *known == n))
    {
        o.insert("network".into(), Value::String(format!("eip155:{id}")));
        o.insert(V1_NETWORK.into(), Value::String((*name).to_string()));
    }
    if let Some(max) = o.remove("maxAmountRequired") {
        o.insert("amount".into(), max);
    }
    entry
}

/// What an agent asking in band again says: the `error` of its fresh demand.
fn asked_again_in_band(required: &Value) -> String {
    match required.get("error").and_then(Value::as_str) {
        Some(r) => format!("the agent asked to be paid again after the payment was sent: {r}"),
        None => "the agent asked to be paid again after the payment was sent".to_string(),
    }
}

/// What a second 402 says: the reason its fresh `PAYMENT-REQUIRED` gives (the facilitator's).
fn asked_again(headers: &[(String, String)]) -> Option<String> {
    let reason = header(headers, PAYMENT_REQUIRED)
        .and_then(|h| wire::decode_header::<Value>(h).ok())
        .and_then(|d| d.get("error")?.as_str().map(str::to_string));
    Some(match reason {
        Some(r) => format!("the agent asked to be paid again after the payment was sent: {r}"),
        None => "the agent asked to be paid again after the payment was sent".to_string(),
    })
}

/// A header's value, its name in any case.
fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SecretKey;
    use serde_json::json;

    const TOKEN: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
    const PAY_TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
    // anvil's dev account 2: a public test key.
    const KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";

    fn policy(max_per_call: u64, max_per_task: u64) -> Policy {
        Policy::new(&X402Pay {
            key: SecretKey(KEY.to_string()),
            networks: vec!["eip155:31337".to_string()],
            assets: vec![TOKEN.to_ascii_lowercase()],
            max_per_call,
            max_per_task,
        })
        .expect("a policy")
    }

    fn offer(network: &str, amount: &str) -> Value {
        json!({"scheme": "exact", "network": network, "asset": TOKEN, "amount": amount,
               "payTo": PAY_TO, "maxTimeoutSeconds": 300, "extra": {"name": "USDC", "version": "2"}})
    }

    fn demand(accepts: Vec<Value>) -> Value {
        json!({"x402Version": 2, "error": "Payment required",
               "resource": {"url": "http://127.0.0.1:1/start_job", "description": "run", "mimeType": ""},
               "accepts": accepts})
    }

    fn headers(name: &str, doc: &Value) -> Vec<(String, String)> {
        vec![(name.to_string(), wire::encode_header(doc))]
    }

    #[test]
    fn a_version_2_header_and_a_version_1_body_are_payable() {
        let doc = demand(vec![offer("eip155:31337", "10000")]);
        let h = headers("Payment-Required", &doc);
        assert_eq!(
            Demand::read(&h, b"{}"),
            Some(Demand::Payable {
                header: h[0].1.clone(),
                doc
            })
        );
        // Version 1: in the body, read as version 2's (the network by CAIP-2, its name kept;
        // `maxAmountRequired` as `amount`), paid with X-PAYMENT.
        let v1 = json!({"x402Version": 1, "error": "X-PAYMENT header is required",
            "accepts": [{"scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "10000",
                "resource": "http://agent/start_job", "payTo": PAY_TO, "asset": TOKEN,
                "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}}]});
        let read = Demand::read(&[], v1.to_string().as_bytes()).expect("a demand");
        let Demand::Payable { header, doc } = &read else {
            panic!("a payable v1 demand: {read:?}");
        };
        assert_eq!(header, &v1.to_string());
        assert_eq!(read.signature_header(), "x-payment");
        assert_eq!(
            (&doc["accepts"][0]["network"], &doc["accepts"][0]["amount"]),
            (&json!("eip155:84532"), &json!("10000"))
        );
        // Paid from a wallet on that network: version 1's payload, the same authorization.
        let p = Policy::new(&X402Pay {
            key: SecretKey(KEY.to_string()),
            networks: vec!["eip155:84532".to_string()],
            assets: vec![TOKEN.to_ascii_lowercase()],
            max_per_call: 10_000,
            max_per_task: 10_000,
        })
        .expect("a policy");
        let chosen = p.choose(doc, 0).expect("within the policy");
        let paid = p.payload(doc, &chosen, 1_780_000_000).expect("signed");
        assert_eq!(
            (&paid["x402Version"], &paid["scheme"], &paid["network"]),
            (&json!(1), &json!("exact"), &json!("base-sepolia")),
            "{paid}"
        );
        assert_eq!(paid["payload"]["authorization"]["value"], "10000", "{paid}");
        assert_eq!(paid["payload"]["authorization"]["to"], PAY_TO, "{paid}");
        assert!(paid.get("accepted").is_none(), "{paid}");
        // In band too (the A2A x402 extension's examples are version 1's).
        assert!(matches!(
            Demand::in_band(&v1),
            Demand::Payable { doc, .. } if doc["accepts"][0]["network"] == "eip155:84532"
        ));
        // Version 1 has no `upto`.
        let upto = json!({"x402Version": 1, "accepts": [{"scheme": "upto", "network": "base-sepolia",
            "maxAmountRequired": "10000", "resource": "r", "payTo": PAY_TO, "asset": TOKEN,
            "maxTimeoutSeconds": 60}]});
        let Some(Demand::Payable { doc, .. }) = Demand::read(&[], upto.to_string().as_bytes())
        else {
            panic!("a v1 demand");
        };
        assert_eq!(
            p.choose(&doc, 0).map_err(|r| r.why),
            Err("the agent's offer is outside the route's policy: scheme `upto` is not one interlingua pays in x402 version 1 (exact)".to_string())
        );
        let v3 = json!({"x402Version": 3, "accepts": []});
        let Some(Demand::Unpayable { why, .. }) = Demand::read(&[], v3.to_string().as_bytes())
        else {
            panic!("a v3 demand");
        };
        assert_eq!(
            why,
            "the agent's 402 body asks for x402 version 3; interlingua pays version 1 there"
        );
        assert_eq!(Demand::read(&[], br#"{"detail":"pay me"}"#), None);
        let Some(Demand::Unpayable { why, .. }) =
            Demand::read(&[("payment-required".into(), "%%".into())], b"")
        else {
            panic!("an unreadable header");
        };
        assert!(why.contains("cannot be read"), "{why}");
    }

    #[test]
    fn the_first_offer_within_the_policy_is_chosen() {
        let doc = demand(vec![
            offer("eip155:8453", "10000"),
            json!({"scheme": "nvm:erc4337", "network": "eip155:31337", "planId": "p"}),
            offer("eip155:31337", "10000"),
        ]);
        let chosen = policy(10_000, 50_000).choose(&doc, 0).expect("an offer");
        assert_eq!(
            (chosen.requirements.network.as_str(), chosen.amount),
            ("eip155:31337", 10_000)
        );
    }

    #[test]
    fn offers_outside_the_policy_are_refused_naming_why() {
        let p = policy(10_000, 25_000);
        let why = |accepts: Vec<Value>, spent: u64| {
            p.choose(&demand(accepts), spent).expect_err("refused").why
        };
        assert_eq!(
            why(vec![offer("eip155:8453", "10000")], 0),
            "the agent's offer is outside the route's policy: network `eip155:8453` is not among payment.pay.x402.networks"
        );
        assert!(why(vec![offer("eip155:31337", "10001")], 0)
            .ends_with("amount 10001 is above max_per_call (10000)"));
        assert!(why(vec![offer("eip155:31337", "10000")], 20_000).ends_with(
            "amount 10000 would bring the task's payments to 30000, above max_per_task (25000)"
        ));
        let mut other_asset = offer("eip155:31337", "1");
        other_asset["asset"] = json!(PAY_TO);
        assert!(why(vec![other_asset], 0).contains("is not among payment.pay.x402.assets"));
        let two = why(
            vec![
                offer("eip155:1", "1"),
                offer("eip155:31337", &u128::MAX.to_string()),
            ],
            0,
        );
        assert!(two.starts_with("none of the agent's 2 offers"), "{two}");
        assert!(
            two.contains("(1) network `eip155:1`") && two.contains("(2) amount"),
            "{two}"
        );
        assert_eq!(why(vec![], 0), "the agent offers no way to pay");
    }

    #[test]
    fn a_signed_payment_echoes_the_offer_and_pays_from_the_wallet() {
        let p = policy(10_000, 10_000);
        let doc = demand(vec![offer("eip155:31337", "10000")]);
        let chosen = p.choose(&doc, 0).expect("an offer");
        let header = p.sign(&doc, &chosen, 1_780_000_000).expect("signed");
        let payment = wire::decode_payment(&header).expect("a v2 payment");
        assert_eq!(payment.accepted, chosen.requirements);
        let (from, _) = payment.payer_and_nonce().expect("an authorization");
        assert_eq!(from, p.payer().to_ascii_lowercase());
        assert_eq!(
            payment.resource.map(|r| r.url),
            Some("http://127.0.0.1:1/start_job".into())
        );
    }

    #[test]
    fn the_paid_answer_decides_the_row() {
        let p = policy(10_000, 10_000);
        let doc = demand(vec![offer("eip155:31337", "10000")]);
        let chosen = p.choose(&doc, 0).expect("an offer");
        let asked = Asked {
            task_id: "task-1",
            route: "r",
            at: Utc::now(),
            required: "REQ",
        };
        let tx = format!("0x{}", "ab".repeat(32));
        let receipt = json!({"success": true, "transaction": tx, "network": "eip155:31337",
                             "payer": p.payer()});
        let paid = asked.answered(
            &chosen,
            p.payer(),
            200,
            &headers("payment-response", &receipt),
        );
        assert_eq!(
            (
                paid.state,
                paid.amount,
                paid.transaction.as_deref(),
                paid.detail.as_deref()
            ),
            (CostState::Paid, Some(10_000), Some(tx.as_str()), None)
        );
        assert_eq!(paid.required.as_deref(), Some("REQ"));
        assert!(paid.response.is_some());
        let again = demand(vec![]).as_object().cloned().map(|mut d| {
            d.insert(
                "error".into(),
                json!("invalid_exact_evm_insufficient_balance"),
            );
            Value::Object(d)
        });
        let again = again.expect("a document");
        let failed = asked.answered(
            &chosen,
            p.payer(),
            402,
            &headers("payment-required", &again),
        );
        assert_eq!(failed.state, CostState::Failed);
        assert!(failed
            .detail
            .as_deref()
            .is_some_and(|d| d.ends_with("invalid_exact_evm_insufficient_balance")));
        let unconfirmed = asked.answered(&chosen, p.payer(), 200, &[]);
        assert_eq!(unconfirmed.state, CostState::Paid);
        assert!(unconfirmed
            .detail
            .is_some_and(|d| d.contains("not confirmed")));
        let refused_call = asked.answered(&chosen, p.payer(), 422, &[]);
        assert_eq!(refused_call.state, CostState::Failed);
        let refused = asked.refused("no", None);
        assert_eq!(
            (refused.state, refused.amount, refused.payer),
            (CostState::Refused, None, None)
        );
    }

    #[test]
    fn a_demand_in_band_is_read_with_protobufs_doubles_and_its_receipt_settles_the_row() {
        // a2a-sdk's metadata is a protobuf Struct: every number a double.
        let required = json!({"x402Version": 2.0, "resource": {"url": "a2a://agent/skill"},
            "accepts": [{"scheme": "exact", "network": "eip155:31337", "amount": "10000",
                "asset": TOKEN, "payTo": PAY_TO, "maxTimeoutSeconds": 300.0,
                "extra": {"name": "USDC", "version": "2"}}]});
        let Demand::Payable { doc, header } = Demand::in_band(&required) else {
            panic!("a payable demand");
        };
        assert_eq!(doc["accepts"][0]["maxTimeoutSeconds"], json!(300));
        assert_eq!(
            serde_json::from_str::<Value>(&header).ok(),
            Some(doc.clone())
        );
        let chosen = policy(10_000, 20_000)
            .choose(&doc, 0)
            .expect("within the policy");
        assert_eq!(chosen.amount, 10_000);
        for (bad, why) in [
            (
                json!({"x402Version": 3, "accepts": []}),
                "version 3; interlingua pays version 1 or 2 there",
            ),
            (json!({"x402Version": 2}), "no `accepts` list"),
        ] {
            match Demand::in_band(&bad) {
                Demand::Unpayable { why: said, .. } => assert!(said.contains(why), "{said}"),
                other => panic!("{other:?}"),
            }
        }

        let receipt = json!({"success": true, "transaction": "0xabc", "network": "eip155:31337",
            "payer": PAY_TO, "amount": "4000"});
        let paid = settled_in_band("t", "r", Some(&receipt));
        assert_eq!(
            (
                paid.state,
                paid.amount,
                paid.transaction.as_deref(),
                paid.detail
            ),
            (CostState::Paid, Some(4_000), Some("0xabc"), None)
        );
        assert_eq!(paid.response, Some(receipt.to_string()));
        let failed = settled_in_band(
            "t",
            "r",
            Some(
                &json!({"success": false, "errorReason": "invalid_transaction_state",
                "transaction": "", "network": "eip155:31337"}),
            ),
        );
        assert_eq!(
            (failed.state, failed.transaction, failed.detail.as_deref()),
            (
                CostState::Failed,
                None,
                Some("the agent's settlement failed: invalid_transaction_state")
            )
        );
        let unconfirmed = settled_in_band("t", "r", None);
        assert_eq!(unconfirmed.state, CostState::Paid);
        assert!(unconfirmed
            .detail
            .is_some_and(|d| d.contains("not confirmed")));
    }
}
