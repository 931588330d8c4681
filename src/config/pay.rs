//! A route's `payment.pay`: what interlingua may pay an agent that asks for payment in its
//! answer to a call (x402: a 402 with `PAYMENT-REQUIRED`). The wallet's key comes from the
//! environment only; the policy (networks, assets, caps) is what no payment leaves.

use super::file::{self, X402PayEntry};
use super::model::{SecretKey, X402Pay};
use super::payment::{is_address, is_evm_network};
use super::values::from_env;
use mapping::problem::Collector;
use toml::Spanned;

/// A route's `payment.pay.x402`. `Some(None)`: none; `None`: problems were recorded.
pub fn x402_pay(
    r: &file::RouteEntry,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<Option<X402Pay>> {
    let Some(entry) = r
        .payment
        .as_ref()
        .and_then(|pay| pay.get_ref().pay.as_ref())
    else {
        return Some(None);
    };
    let where_ = format!("{path}.payment.pay");
    let Some(x) = &entry.get_ref().x402 else {
        p.at(
            Some(entry.span()),
            where_,
            "name the rail interlingua pays on: `x402 = { key_env, networks, assets, max_per_call, max_per_task }`",
        );
        return None;
    };
    policy(x.get_ref(), &format!("{where_}.x402"), p).map(Some)
}

fn policy(x: &X402PayEntry, path: &str, p: &mut Collector<'_>) -> Option<X402Pay> {
    let before = p.len();
    let key = from_env(&x.key_env, &format!("{path}.key_env"), p);
    if let Some(k) = &key {
        if let Err(why) = check_key(k) {
            // Says what is wrong with the value, never the value.
            p.at(
                Some(x.key_env.span()),
                format!("{path}.key_env"),
                format!("the environment variable `{}` {why}", x.key_env.get_ref()),
            );
        }
    }
    let networks = listed(&x.networks, &format!("{path}.networks"), p, |n| {
        (!is_evm_network(n)).then(|| {
            format!("`{n}` is not an EVM network as CAIP-2 writes it (`eip155:8453`): interlingua signs EVM payments only")
        })
    });
    let assets = listed(&x.assets, &format!("{path}.assets"), p, |a| {
        (!is_address(a)).then(|| format!("`{a}` is not an address (`0x` and 40 hex digits)"))
    });
    let cap = |v: &Spanned<u64>, field: &str, p: &mut Collector<'_>| {
        let n = *v.get_ref();
        if n == 0 || n > i64::MAX as u64 {
            p.at(
                Some(v.span()),
                format!("{path}.{field}"),
                format!(
                    "{n} is not an amount the cost ledger keeps (1 to {}, in the assets' atomic units)",
                    i64::MAX
                ),
            );
        }
        n
    };
    let max_per_call = cap(&x.max_per_call, "max_per_call", p);
    let max_per_task = cap(&x.max_per_task, "max_per_task", p);
    if max_per_task < max_per_call {
        p.at(
            Some(x.max_per_task.span()),
            format!("{path}.max_per_task"),
            format!(
                "`max_per_task` ({max_per_task}) is below `max_per_call` ({max_per_call}): no call could be paid at its cap"
            ),
        );
    }
    if p.len() != before {
        return None;
    }
    Some(X402Pay {
        key: SecretKey(key?),
        networks,
        assets: assets.iter().map(|a| a.to_ascii_lowercase()).collect(),
        max_per_call,
        max_per_task,
    })
}

/// The values of a list that must not be empty, each checked by `problem`.
fn listed(
    list: &Spanned<Vec<Spanned<String>>>,
    path: &str,
    p: &mut Collector<'_>,
    problem: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    if list.get_ref().is_empty() {
        p.at(
            Some(list.span()),
            path,
            "name at least one: an empty list would refuse every payment",
        );
    }
    let mut out = Vec::new();
    for (i, v) in list.get_ref().iter().enumerate() {
        match problem(v.get_ref()) {
            Some(why) => p.at(Some(v.span()), format!("{path}[{i}]"), why),
            None => out.push(v.get_ref().clone()),
        }
    }
    out
}

/// Whether `key` is a secp256k1 private key in hex (`0x` optional), as the signer takes it;
/// why not, in words that do not repeat it.
fn check_key(key: &str) -> Result<(), &'static str> {
    let digits = key.trim();
    let digits = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
        .unwrap_or(digits);
    let mut bytes = k256::elliptic_curve::zeroize::Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(digits, bytes.as_mut())
        .map_err(|_| "is not a private key: 32 bytes in hex (64 digits, `0x` optional)")?;
    k256::ecdsa::SigningKey::from_slice(bytes.as_ref())
        .map(|_| ())
        .map_err(|_| "is not a valid secp256k1 private key (zero, or beyond the curve's order)")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_ENV: &str = "INTERLINGUA_UNIT_X402_WALLET";
    const NOT_A_KEY_ENV: &str = "INTERLINGUA_UNIT_X402_NOT_A_KEY";
    const TOKEN: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";

    fn config(front: &str, pay: &str) -> String {
        format!(
            "[[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
             [[upstreams]]\nname = \"agent\"\naddress = \"127.0.0.1:9\"\n\n\
             [[routes]]\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"agent\"\n\
             front = \"{front}\"\nback = \"{front}\"\npayment = {{ pay = {{ x402 = {{ {pay} }} }} }}\n"
        )
    }

    fn problems(front: &str, pay: &str) -> String {
        match crate::config::parse(&config(front, pay), "t.toml") {
            Ok(_) => String::new(),
            Err(p) => p.to_string(),
        }
    }

    #[test]
    fn a_policy_is_read_with_its_key_from_the_environment() {
        std::env::set_var(
            KEY_ENV,
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        );
        let text = config(
            "mip003",
            &format!("key_env = \"{KEY_ENV}\", networks = [\"eip155:8453\"], assets = [\"{TOKEN}\"], max_per_call = 10000, max_per_task = 30000"),
        );
        let loaded = crate::config::parse(&text, "t.toml").unwrap_or_else(|p| panic!("{p}"));
        let policy = loaded.routes[0].x402_pay.clone().expect("a policy");
        assert_eq!(
            (
                policy.networks,
                policy.assets,
                policy.max_per_call,
                policy.max_per_task
            ),
            (
                vec!["eip155:8453".to_string()],
                vec![TOKEN.to_ascii_lowercase()],
                10_000,
                30_000
            )
        );
        // The key never shows where the config is printed.
        assert!(!format!("{:?}", loaded.routes[0]).contains("59c6995e"));
    }

    #[test]
    fn each_problem_of_a_policy_is_reported_where_it_is_written() {
        std::env::set_var(NOT_A_KEY_ENV, "not a key");
        let found = problems(
            "mip003",
            &format!("key_env = \"{NOT_A_KEY_ENV}\", networks = [\"base\"], assets = [\"0x12\"], max_per_call = 0, max_per_task = 9223372036854775808"),
        );
        for expected in [
            "t.toml:13:40: routes[0].payment.pay.x402.key_env: the environment variable `INTERLINGUA_UNIT_X402_NOT_A_KEY` is not a private key",
            "t.toml:13:87: routes[0].payment.pay.x402.networks[0]: `base` is not an EVM network",
            "t.toml:13:106: routes[0].payment.pay.x402.assets[0]: `0x12` is not an address",
            "t.toml:13:130: routes[0].payment.pay.x402.max_per_call: 0 is not an amount the cost ledger keeps",
            "t.toml:13:148: routes[0].payment.pay.x402.max_per_task: 9223372036854775808 is not an amount",
        ] {
            assert!(found.contains(expected), "{expected} in:\n{found}");
        }
        assert!(!found.contains("not a key"), "{found}");
        let found = problems(
            "mip003",
            "key_env = \"INTERLINGUA_UNIT_UNSET\", networks = [], assets = [], max_per_call = 2, max_per_task = 1",
        );
        for expected in [
            "routes[0].payment.pay.x402.key_env: the environment variable `INTERLINGUA_UNIT_UNSET` is not set",
            "routes[0].payment.pay.x402.networks: name at least one",
            "routes[0].payment.pay.x402.assets: name at least one",
            "routes[0].payment.pay.x402.max_per_task: `max_per_task` (1) is below `max_per_call` (2)",
        ] {
            assert!(found.contains(expected), "{expected} in:\n{found}");
        }
        assert!(problems("mip003", "wallet = \"0x1\"").contains("unknown field `wallet`"));
        std::env::set_var(
            KEY_ENV,
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        );
        let passthrough = problems(
            "passthrough",
            &format!("key_env = \"{KEY_ENV}\", networks = [\"eip155:1\"], assets = [\"{TOKEN}\"], max_per_call = 1, max_per_task = 1"),
        );
        assert!(
            passthrough.contains(
                "routes[0].payment.pay.x402: a passthrough route forwards answers it does not read"
            ),
            "{passthrough}"
        );
    }

    #[test]
    fn a_key_is_checked_without_being_repeated() {
        let good = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        assert_eq!(check_key(good), Ok(()));
        assert_eq!(check_key(&format!(" {} ", &good[2..])), Ok(()));
        for bad in ["0x1234", "zz", &"00".repeat(32), &"ff".repeat(32)] {
            let why = check_key(bad).expect_err(bad);
            assert!(!why.contains(bad), "{why}");
        }
    }
}
