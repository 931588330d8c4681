//! A route's x402 offers: what it asks a client to pay, and whether a payment a client sent is
//! one of them.
//!
//! A payment is checked against the offers before any facilitator is asked: a payload signed for
//! another route, another amount, another token or another recipient is refused here with the
//! field that differs, and nothing is held. The facilitator then checks the signature, the
//! balance and the time window on chain (x402 specification v2, `schemes/exact/scheme_exact_evm.md`
//! "Verification"; `schemes/upto/scheme_upto.md`).

use serde_json::{Map, Value};

use super::wire::{Requirements, Resource};

pub use crate::config::{X402Offer as Offer, X402Scheme as Scheme};

impl Offer {
    /// The offer as an `accepts` entry of `PAYMENT-REQUIRED`.
    pub fn requirements(&self) -> Requirements {
        let mut extra = Map::new();
        extra.insert("name".into(), Value::String(self.asset_name.clone()));
        extra.insert("version".into(), Value::String(self.asset_version.clone()));
        if self.scheme == Scheme::Upto {
            extra.insert(
                "assetTransferMethod".into(),
                Value::String("permit2".to_string()),
            );
            if let Some(address) = &self.facilitator_address {
                extra.insert("facilitatorAddress".into(), Value::String(address.clone()));
            }
        }
        Requirements {
            scheme: self.scheme.as_str().to_string(),
            network: self.network.clone(),
            amount: self.amount.to_string(),
            asset: self.asset.clone(),
            pay_to: self.pay_to.clone(),
            max_timeout_seconds: self.max_timeout_seconds,
            extra: Some(extra),
        }
    }
}

/// Why a payment is none of a route's offers: the first field that differs from the offer of
/// the same scheme and network (or that there is no such offer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("this route takes no `{scheme}` payment on `{network}`")]
    NoOffer { scheme: String, network: String },
    #[error("the payment's `{field}` is `{sent}`, the route asks `{asked}`")]
    Field {
        field: &'static str,
        sent: String,
        asked: String,
    },
}

/// The offer a client's `accepted` names, if it is one of `offers` in every field that the
/// route sets; addresses compare without regard to case (EIP-55 checksums are case).
pub fn matching<'a>(offers: &'a [Offer], accepted: &Requirements) -> Result<&'a Offer, Mismatch> {
    let offer = offers
        .iter()
        .find(|o| o.scheme.as_str() == accepted.scheme && o.network == accepted.network)
        .ok_or_else(|| Mismatch::NoOffer {
            scheme: accepted.scheme.clone(),
            network: accepted.network.clone(),
        })?;
    let wanted = offer.requirements();
    let differs = |field: &'static str, sent: &str, asked: &str| Mismatch::Field {
        field,
        sent: sent.to_string(),
        asked: asked.to_string(),
    };
    if !accepted.asset.eq_ignore_ascii_case(&wanted.asset) {
        return Err(differs("asset", &accepted.asset, &wanted.asset));
    }
    if !accepted.pay_to.eq_ignore_ascii_case(&wanted.pay_to) {
        return Err(differs("payTo", &accepted.pay_to, &wanted.pay_to));
    }
    if accepted.amount != wanted.amount {
        return Err(differs("amount", &accepted.amount, &wanted.amount));
    }
    if accepted.max_timeout_seconds > wanted.max_timeout_seconds {
        return Err(differs(
            "maxTimeoutSeconds",
            &accepted.max_timeout_seconds.to_string(),
            &wanted.max_timeout_seconds.to_string(),
        ));
    }
    let extra = accepted.extra.clone().unwrap_or_default();
    for (key, asked) in wanted.extra.iter().flatten() {
        let sent = extra.get(key).and_then(Value::as_str).unwrap_or("");
        if Some(sent) != asked.as_str() {
            let field = match key.as_str() {
                "name" => "extra.name",
                "version" => "extra.version",
                _ => "extra.assetTransferMethod",
            };
            return Err(differs(field, sent, asked.as_str().unwrap_or("")));
        }
    }
    Ok(offer)
}

/// The resource a route's 402 names: the URL the client asked for.
pub fn resource(url: String, description: Option<String>) -> Resource {
    Resource {
        url,
        description,
        mime_type: Some("application/json".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact() -> Offer {
        Offer {
            scheme: Scheme::Exact,
            network: "eip155:31337".to_string(),
            asset: "0x5FbDB2315678afecb367f032d93F642f64180aa3".to_string(),
            asset_name: "USDC".to_string(),
            asset_version: "2".to_string(),
            pay_to: "0x28f5aA1a4DDCEa8Ad9cb4b4B2Ad0c87e05D1B335".to_string(),
            amount: 10_000,
            per_step: 0,
            facilitator_address: None,
            max_timeout_seconds: 300,
        }
    }

    fn upto() -> Offer {
        Offer {
            scheme: Scheme::Upto,
            amount: 30_000,
            per_step: 10_000,
            ..exact()
        }
    }

    #[test]
    fn the_offer_itself_matches_whatever_the_case_of_its_addresses() {
        let offers = [exact(), upto()];
        let mut sent = exact().requirements();
        sent.asset = sent.asset.to_ascii_lowercase();
        sent.pay_to = sent.pay_to.to_ascii_uppercase().replacen("0X", "0x", 1);
        assert_eq!(matching(&offers, &sent), Ok(&offers[0]));
        assert_eq!(matching(&offers, &upto().requirements()), Ok(&offers[1]));
        assert_eq!(
            upto()
                .requirements()
                .extra
                .and_then(|e| e.get("assetTransferMethod").cloned()),
            Some(Value::String("permit2".to_string()))
        );
    }

    /// A change made to a payment's `accepted`.
    type Change = fn(&mut Requirements);

    #[test]
    fn each_field_that_differs_is_named() {
        let offers = [exact()];
        let cases: [(&str, Change); 6] = [
            ("amount", |r| r.amount = "1".to_string()),
            ("asset", |r| r.asset = "0x00".to_string()),
            ("payTo", |r| r.pay_to = "0x01".to_string()),
            ("maxTimeoutSeconds", |r| r.max_timeout_seconds = 301),
            ("extra.name", |r| {
                r.extra = Some(Map::from_iter([
                    ("name".to_string(), Value::String("USD Coin".to_string())),
                    ("version".to_string(), Value::String("2".to_string())),
                ]))
            }),
            ("extra.version", |r| {
                r.extra = Some(Map::from_iter([(
                    "name".to_string(),
                    Value::String("USDC".to_string()),
                )]))
            }),
        ];
        for (field, change) in cases {
            let mut sent = exact().requirements();
            change(&mut sent);
            match matching(&offers, &sent) {
                Err(Mismatch::Field { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
        let mut other_network = exact().requirements();
        other_network.network = "eip155:8453".to_string();
        assert_eq!(
            matching(&offers, &other_network),
            Err(Mismatch::NoOffer {
                scheme: "exact".to_string(),
                network: "eip155:8453".to_string()
            })
        );
        let mut shorter = exact().requirements();
        shorter.max_timeout_seconds = 60;
        assert_eq!(matching(&offers, &shorter), Ok(&offers[0]));
    }
}
