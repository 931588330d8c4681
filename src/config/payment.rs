//! A route's `payment`: the operator's payment service, through which interlingua buys jobs from
//! agents that charge on a rail of their own (a Masumi agent's escrow), and what the route takes
//! from clients that pay on the wire (`accept.x402`; `accept.masumi` is in [`super::sell`]).

use std::time::Duration;

use super::file::{self, MasumiEntry, X402AcceptEntry, X402OfferEntry};
use super::model::{
    MasumiNetwork, MasumiService, PaymentService, X402Accept, X402Offer, X402Scheme,
};
use super::values::{duration, from_env};
use mapping::problem::Collector;
use toml::Spanned;

/// The Masumi node writes `FundsOrDatumInvalid` this long after a `payByTime` that passed
/// without a lock (its state rules: `src/utils/logic/state-transitions/transitions.md` in
/// <https://github.com/masumi-network/masumi-payment-service/tree/aca38338>); a purchase still
/// unlocked by then never will be.
const DEFAULT_LOCK_GRACE: Duration = Duration::from_secs(5 * 60);

/// A route's payment service. `Some(None)`: none; `None`: problems were recorded.
pub fn payment(
    r: &file::RouteEntry,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<Option<PaymentService>> {
    let Some(spanned) = &r.payment else {
        return Some(None);
    };
    let where_ = format!("{path}.payment");
    let entry = spanned.get_ref();
    match &entry.masumi {
        Some(m) => masumi(m.get_ref(), &format!("{where_}.masumi"), p)
            .map(|s| Some(PaymentService::Masumi(s))),
        None if entry.accept.is_some() || entry.pay.is_some() => Some(None),
        None => {
            p.at(
                Some(spanned.span()),
                where_,
                "name a rail: `masumi = { url, token_env, network }` or `pay.x402 = { key_env, networks, assets, max_per_call, max_per_task }` (paying the agent), or `accept.x402 = { facilitator, offers }` (being paid)",
            );
            None
        }
    }
}

/// The longest authorisation a route may ask for by default: the x402 SDK's own default.
const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// A route's `payment.accept.x402`. `Some(None)`: none; `None`: problems were recorded.
pub fn x402(r: &file::RouteEntry, path: &str, p: &mut Collector<'_>) -> Option<Option<X402Accept>> {
    let Some(entry) = r
        .payment
        .as_ref()
        .and_then(|pay| pay.get_ref().accept.as_ref())
    else {
        return Some(None);
    };
    let where_ = format!("{path}.payment.accept");
    let Some(x) = &entry.get_ref().x402 else {
        if entry.get_ref().masumi.is_some() {
            return Some(None);
        }
        p.at(
            Some(entry.span()),
            where_,
            "name what the route takes: `x402 = { facilitator, offers }` or `masumi = { url, token_env, agent_identifier, max_run }`",
        );
        return None;
    };
    accept(x.get_ref(), &format!("{where_}.x402"), p).map(Some)
}

fn accept(x: &X402AcceptEntry, path: &str, p: &mut Collector<'_>) -> Option<X402Accept> {
    let before = p.len();
    let facilitator = x.facilitator.get_ref().trim_end_matches('/').to_string();
    if let Err(e) = crate::config::Url::parse(&facilitator) {
        p.at(
            Some(x.facilitator.span()),
            format!("{path}.facilitator"),
            e.to_string(),
        );
    }
    let facilitator_auth = x
        .facilitator_auth_env
        .as_ref()
        .map(|env| from_env(env, &format!("{path}.facilitator_auth_env"), p));
    if x.offers.get_ref().is_empty() {
        p.at(
            Some(x.offers.span()),
            format!("{path}.offers"),
            "name at least one offer: `{ scheme, network, asset, asset_name, asset_version, pay_to, per_call }`",
        );
    }
    let mut offers: Vec<X402Offer> = Vec::new();
    for (i, o) in x.offers.get_ref().iter().enumerate() {
        let at = format!("{path}.offers[{i}]");
        let Some(offer) = offer(o.get_ref(), &at, p) else {
            continue;
        };
        if offers
            .iter()
            .any(|e| e.scheme == offer.scheme && e.network == offer.network)
        {
            p.at(
                Some(o.span()),
                at,
                format!(
                    "a second `{}` offer on `{}`: a client's payment names only its scheme and network, so each pair is offered once",
                    offer.scheme.as_str(),
                    offer.network
                ),
            );
            continue;
        }
        offers.push(offer);
    }
    if p.len() != before {
        return None;
    }
    Some(X402Accept {
        facilitator,
        facilitator_auth: facilitator_auth.flatten(),
        offers,
    })
}

fn offer(o: &X402OfferEntry, path: &str, p: &mut Collector<'_>) -> Option<X402Offer> {
    let before = p.len();
    let scheme = match o.scheme.get_ref().as_str() {
        "exact" => X402Scheme::Exact,
        "upto" => X402Scheme::Upto,
        other => {
            p.at(
                Some(o.scheme.span()),
                format!("{path}.scheme"),
                format!("`{other}` is not `exact` or `upto`"),
            );
            X402Scheme::Exact
        }
    };
    let network = o.network.get_ref().clone();
    if !is_evm_network(&network) {
        p.at(
            Some(o.network.span()),
            format!("{path}.network"),
            format!("`{network}` is not an EVM network as CAIP-2 writes it (`eip155:8453`)"),
        );
    }
    for (field, value) in [("asset", &o.asset), ("pay_to", &o.pay_to)]
        .into_iter()
        .chain(
            o.facilitator_address
                .as_ref()
                .map(|a| ("facilitator_address", a)),
        )
    {
        if !is_address(value.get_ref()) {
            p.at(
                Some(value.span()),
                format!("{path}.{field}"),
                format!(
                    "`{}` is not an address (`0x` and 40 hex digits)",
                    value.get_ref()
                ),
            );
        }
    }
    let in_range = |v: &Spanned<u64>, field: &str, p: &mut Collector<'_>| {
        let n = *v.get_ref();
        if n == 0 || n > i64::MAX as u64 {
            p.at(
                Some(v.span()),
                format!("{path}.{field}"),
                format!("{n} is not an amount the ledger keeps (1 to {})", i64::MAX),
            );
        }
        n
    };
    let (amount, per_step) = match scheme {
        X402Scheme::Exact => {
            for (field, v) in [("per_step", &o.per_step), ("max", &o.max)] {
                if let Some(v) = v {
                    p.at(
                        Some(v.span()),
                        format!("{path}.{field}"),
                        "an `exact` offer has one price per call (`per_call`); steps are priced by `upto`",
                    );
                }
            }
            match &o.per_call {
                Some(v) => (in_range(v, "per_call", p), 0),
                None => {
                    p.at(
                        Some(o.scheme.span()),
                        format!("{path}.per_call"),
                        "an `exact` offer needs its price: `per_call`, in the asset's atomic units",
                    );
                    (0, 0)
                }
            }
        }
        X402Scheme::Upto => {
            if let Some(v) = &o.per_call {
                p.at(
                    Some(v.span()),
                    format!("{path}.per_call"),
                    "an `upto` offer is priced per step (`per_step`) up to `max`",
                );
            }
            if o.facilitator_address.is_none() {
                p.at(
                    Some(o.scheme.span()),
                    format!("{path}.facilitator_address"),
                    "an `upto` offer names the facilitator's address (its `/supported` lists it): the client's authorisation lets only that address settle",
                );
            }
            match (&o.per_step, &o.max) {
                (Some(step), Some(max)) => {
                    let (step_n, max_n) = (in_range(step, "per_step", p), in_range(max, "max", p));
                    if max_n < step_n {
                        p.at(
                            Some(max.span()),
                            format!("{path}.max"),
                            format!("`max` ({max_n}) is below one step's price ({step_n})"),
                        );
                    }
                    (max_n, step_n)
                }
                _ => {
                    p.at(
                        Some(o.scheme.span()),
                        format!("{path}.per_step"),
                        "an `upto` offer needs `per_step` and `max`, in the asset's atomic units",
                    );
                    (0, 0)
                }
            }
        }
    };
    let max_timeout = duration(
        o.max_timeout.as_ref(),
        &format!("{path}.max_timeout"),
        DEFAULT_MAX_TIMEOUT,
        p,
    );
    if let Some(t) = max_timeout.filter(|t| t.as_secs() == 0) {
        p.at(
            o.max_timeout.as_ref().map(|m| m.span()),
            format!("{path}.max_timeout"),
            format!("{t:?} leaves a client no time to pay: at least 1s"),
        );
    }
    if p.len() != before {
        return None;
    }
    Some(X402Offer {
        scheme,
        network,
        asset: o.asset.get_ref().clone(),
        asset_name: o.asset_name.get_ref().clone(),
        asset_version: o.asset_version.get_ref().clone(),
        pay_to: o.pay_to.get_ref().clone(),
        amount,
        per_step,
        facilitator_address: o.facilitator_address.as_ref().map(|a| a.get_ref().clone()),
        max_timeout_seconds: max_timeout?.as_secs(),
    })
}

/// Whether `s` names an EVM network as CAIP-2 writes it: `eip155:` and a chain id.
pub(super) fn is_evm_network(s: &str) -> bool {
    let chain = s.strip_prefix("eip155:").unwrap_or("");
    !chain.is_empty() && chain.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `s` is an EVM address: `0x` and 40 hex digits.
pub(super) fn is_address(s: &str) -> bool {
    s.strip_prefix("0x")
        .is_some_and(|h| h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn masumi(m: &MasumiEntry, path: &str, p: &mut Collector<'_>) -> Option<MasumiService> {
    masumi_node(
        (
            &m.url,
            &m.token_env,
            m.network.as_ref(),
            m.lock_grace.as_ref(),
        ),
        path,
        p,
    )
}

/// A Masumi payment node's entries: `url`, `token_env`, `network` and `lock_grace`.
pub(super) type NodeEntries<'a> = (
    &'a Spanned<String>,
    &'a Spanned<String>,
    Option<&'a Spanned<String>>,
    Option<&'a Spanned<String>>,
);

/// A Masumi payment node (the purchaser's, `payment.masumi`, or the seller's,
/// `payment.accept.masumi`).
pub(super) fn masumi_node(
    (url, token_env, network, lock_grace): NodeEntries<'_>,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<MasumiService> {
    let before = p.len();
    let url_text = url.get_ref().trim_end_matches('/').to_string();
    if let Err(e) = crate::config::Url::parse(&url_text) {
        p.at(Some(url.span()), format!("{path}.url"), e.to_string());
    }
    let token = from_env(token_env, &format!("{path}.token_env"), p);
    let network = match network.map(|n| n.get_ref().as_str()) {
        None | Some("Preprod") => MasumiNetwork::Preprod,
        Some("Mainnet") => MasumiNetwork::Mainnet,
        Some(other) => {
            p.at(
                network.map(|n| n.span()),
                format!("{path}.network"),
                format!("`{other}` is not `Preprod` or `Mainnet` (the node's spelling)"),
            );
            MasumiNetwork::Preprod
        }
    };
    let lock_grace = duration(
        lock_grace,
        &format!("{path}.lock_grace"),
        DEFAULT_LOCK_GRACE,
        p,
    );
    if p.len() != before {
        return None;
    }
    Some(MasumiService {
        url: url_text,
        token: token?,
        network,
        lock_grace: lock_grace?,
    })
}
