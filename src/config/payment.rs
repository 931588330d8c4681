//! A route's `payment`: the operator's payment service, through which interlingua buys jobs from
//! agents that charge on a rail of their own (a Masumi agent's escrow).

use std::time::Duration;

use super::access::from_env;
use super::file::{self, MasumiEntry};
use super::model::{MasumiNetwork, MasumiService, PaymentService};
use super::validate::duration;
use mapping::problem::Collector;

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
    match &spanned.get_ref().masumi {
        Some(m) => masumi(m.get_ref(), &format!("{where_}.masumi"), p)
            .map(|s| Some(PaymentService::Masumi(s))),
        None => {
            p.at(
                Some(spanned.span()),
                where_,
                "name the payment service: `masumi = { url, token_env, network }`",
            );
            None
        }
    }
}

fn masumi(m: &MasumiEntry, path: &str, p: &mut Collector<'_>) -> Option<MasumiService> {
    let before = p.len();
    let url = m.url.get_ref().trim_end_matches('/').to_string();
    if let Err(e) = crate::config::Url::parse(&url) {
        p.at(Some(m.url.span()), format!("{path}.url"), e.to_string());
    }
    let token = from_env(&m.token_env, &format!("{path}.token_env"), p);
    let network = match m.network.as_ref().map(|n| n.get_ref().as_str()) {
        None | Some("Preprod") => MasumiNetwork::Preprod,
        Some("Mainnet") => MasumiNetwork::Mainnet,
        Some(other) => {
            p.at(
                m.network.as_ref().map(|n| n.span()),
                format!("{path}.network"),
                format!("`{other}` is not `Preprod` or `Mainnet` (the node's spelling)"),
            );
            MasumiNetwork::Preprod
        }
    };
    let lock_grace = duration(
        m.lock_grace.as_ref(),
        &format!("{path}.lock_grace"),
        DEFAULT_LOCK_GRACE,
        p,
    );
    if p.len() != before {
        return None;
    }
    Some(MasumiService {
        url,
        token: token?,
        network,
        lock_grace: lock_grace?,
    })
}
