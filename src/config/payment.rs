//! A route's `payment`: the operator's payment service, through which interlingua buys jobs from
//! agents that charge on a rail of their own (a Masumi agent's escrow).

use std::time::Duration;

use super::access::from_env;
use super::file::{self, MasumiEntry};
use super::model::{MasumiNetwork, MasumiService, PaymentService};
use super::validate::duration;
use mapping::problem::Collector;

/// The Masumi node writes `FundsOrDatumInvalid` this long after a `payByTime` that passed
/// without a lock (PAYMENTS.md §2.7); a purchase still unlocked by then never will be.
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
    if let Err(e) = crate::engine::client::Url::parse(&url) {
        p.at(Some(m.url.span()), format!("{path}.url"), e);
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

#[cfg(test)]
mod tests {
    const TOKEN_ENV: &str = "INTERLINGUA_UNIT_MASUMI_TOKEN";

    fn config(back: &str, payment: &str) -> String {
        format!(
            "[[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
             [[upstreams]]\nname = \"agent\"\naddress = \"127.0.0.1:9\"\n\n\
             [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"agent\"\n\
             front = \"{back}\"\nback = \"{back}\"\n{payment}\n"
        )
    }

    fn problems(back: &str, payment: &str) -> String {
        match crate::setup::parse(&config(back, payment), "t.toml") {
            Ok(_) => String::new(),
            Err(p) => p.to_string(),
        }
    }

    #[test]
    fn a_payment_service_is_checked_where_it_is_written_and_against_the_back() {
        std::env::set_var(TOKEN_ENV, "k");
        let good = format!(
            "payment = {{ masumi = {{ url = \"http://127.0.0.1:3001/api/v1/\", token_env = \"{TOKEN_ENV}\", network = \"Mainnet\", lock_grace = \"1m\" }} }}"
        );
        let setup = crate::setup::parse(&config("mip003", &good), "t.toml").unwrap();
        assert_eq!(
            setup.config.routes[0].payment,
            Some(super::PaymentService::Masumi(super::MasumiService {
                url: "http://127.0.0.1:3001/api/v1".to_string(),
                token: "k".to_string(),
                network: super::MasumiNetwork::Mainnet,
                lock_grace: std::time::Duration::from_secs(60),
            }))
        );
        let bad = r#"payment = { masumi = { url = "ftp://x", token_env = "INTERLINGUA_UNIT_UNSET", network = "preprod" } }"#;
        let found = problems("mip003", bad);
        for expected in [
            "t.toml:13:30: routes[0].payment.masumi.url: `ftp://x` is not an http:// or https:// URL",
            "t.toml:13:53: routes[0].payment.masumi.token_env: the environment variable `INTERLINGUA_UNIT_UNSET` is not set",
            "t.toml:13:89: routes[0].payment.masumi.network: `preprod` is not `Preprod` or `Mainnet`",
        ] {
            assert!(found.contains(expected), "{expected} in:\n{found}");
        }
        assert!(problems("mip003", "payment = { stripe = {} }").contains("unknown field `stripe`"));
        // A back that never asks to be paid has nothing to pay.
        assert!(problems("nevermined", &good)
            .contains("routes[0].payment: the back `nevermined` carries no payment request"));
    }
}
