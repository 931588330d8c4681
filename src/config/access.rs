//! Checking what the config says about access and money: `[auth]` and its keys, and each route's
//! `auth`, `plans`, `rate_limit`, `upstream_auth`, `identity_headers`, `auth_metadata` (see
//! [`metadata`](super::metadata)) and `price`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use jsonwebtoken::Algorithm;
use toml::Spanned;

use super::file::{self, AuthSection, KeyEntry};
use super::model::*;
use super::values::{duration, from_env};
use mapping::problem::Collector;
use mapping::units::parse_size;

const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
const DEFAULT_MAX_TOKEN: usize = 8 * 1024;
const DEFAULT_JWKS_REFRESH: Duration = Duration::from_secs(60);

/// `[auth]`. `Some(None)`: no auth configured; `None`: problems were recorded.
pub fn auth(a: Option<&AuthSection>, p: &mut Collector<'_>) -> Option<Option<Auth>> {
    let Some(a) = a else {
        return Some(None);
    };
    let before = p.len();
    let leeway = duration(a.leeway.as_ref(), "auth.leeway", DEFAULT_LEEWAY, p);
    let max_token_size = match &a.max_token_size {
        None => DEFAULT_MAX_TOKEN,
        Some(s) => match parse_size(s.get_ref()) {
            Ok(n) if n >= 64 => n as usize,
            Ok(_) => {
                p.at(
                    Some(s.span()),
                    "auth.max_token_size",
                    "must be at least 64 bytes",
                );
                DEFAULT_MAX_TOKEN
            }
            Err(e) => {
                p.at(Some(s.span()), "auth.max_token_size", e);
                DEFAULT_MAX_TOKEN
            }
        },
    };
    if a.keys.is_empty() {
        p.at(
            None,
            "auth.keys",
            "no [[auth.keys]]: no token could ever be verified",
        );
    }
    let mut keys: Vec<Key> = Vec::new();
    for (i, k) in a.keys.iter().enumerate() {
        let path = format!("auth.keys[{i}]");
        if let Some(key) = key(k, &path, p) {
            if keys.iter().any(|other| other.id == key.id) {
                p.at(
                    Some(k.get_ref().id.span()),
                    format!("{path}.id"),
                    format!("key `{}` is defined twice", key.id),
                );
            }
            keys.push(key);
        }
    }
    let (authorization_servers, scopes_supported, resource_base) = super::metadata::defaults(a, p);
    let claim = |c: &Option<Spanned<String>>, default: &str| {
        ClaimPath::parse(c.as_ref().map_or(default, |s| s.get_ref().as_str()))
    };
    if p.len() != before {
        return None;
    }
    Some(Some(Auth {
        leeway: leeway?,
        max_token_size,
        issuer: a.issuer.as_ref().map(|s| s.get_ref().clone()),
        audience: a.audience.as_ref().map(|s| s.get_ref().clone()),
        subject_claim: claim(&a.subject_claim, "sub"),
        plan_claim: claim(&a.plan_claim, "plan"),
        allow_future_iat: a.allow_future_iat.unwrap_or(false),
        allow_duplicate_claims: a.allow_duplicate_claims.unwrap_or(false),
        keys,
        authorization_servers,
        scopes_supported,
        resource_base,
    }))
}

fn key(k: &Spanned<KeyEntry>, path: &str, p: &mut Collector<'_>) -> Option<Key> {
    let span = k.span();
    let k = k.get_ref();
    let id = k.id.get_ref().clone();
    let allowed: &[Algorithm] = match k.kind.get_ref().as_str() {
        "hmac" => &[Algorithm::HS256, Algorithm::HS384, Algorithm::HS512],
        "rsa" => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        "ec" => &[Algorithm::ES256, Algorithm::ES384],
        "ed25519" => &[Algorithm::EdDSA],
        "jwks" => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
            Algorithm::ES256,
            Algorithm::ES384,
            Algorithm::EdDSA,
        ],
        other => {
            p.at(
                Some(k.kind.span()),
                format!("{path}.type"),
                format!("`{other}` is not a key type; use hmac, rsa, ec, ed25519 or jwks"),
            );
            return None;
        }
    };
    let kind_name = k.kind.get_ref().clone();
    let algorithms: Vec<Algorithm> = match &k.algorithms {
        None => vec![allowed[0]],
        Some(list) => list
            .iter()
            .filter_map(|a| {
                let text = a.get_ref();
                if text.eq_ignore_ascii_case("none") {
                    p.at(
                        Some(a.span()),
                        format!("{path}.algorithms"),
                        "`none` is never accepted",
                    );
                    return None;
                }
                match text.parse::<Algorithm>() {
                    Ok(alg) if allowed.contains(&alg) => Some(alg),
                    Ok(_) => {
                        p.at(
                            Some(a.span()),
                            format!("{path}.algorithms"),
                            format!("`{text}` cannot be used with a `{kind_name}` key"),
                        );
                        None
                    }
                    Err(_) => {
                        p.at(
                            Some(a.span()),
                            format!("{path}.algorithms"),
                            format!("`{text}` is not a JWT algorithm"),
                        );
                        None
                    }
                }
            })
            .collect(),
    };
    let need = |field: &Option<Spanned<String>>, name: &str, p: &mut Collector<'_>| {
        if field.is_none() {
            p.at(
                Some(span.clone()),
                path,
                format!("a `{kind_name}` key needs `{name}`"),
            );
        }
    };
    let kind = match kind_name.as_str() {
        "hmac" => {
            need(&k.secret_env, "secret_env", p);
            let secret = from_env(k.secret_env.as_ref()?, &format!("{path}.secret_env"), p)?;
            KeyKind::Hmac {
                secret: secret.into_bytes(),
            }
        }
        "jwks" => {
            let source = match (&k.jwks_file, &k.jwks_url) {
                (Some(f), None) => {
                    let file = PathBuf::from(f.get_ref());
                    if !file.is_file() {
                        p.at(
                            Some(f.span()),
                            format!("{path}.jwks_file"),
                            format!("file `{}` not found", file.display()),
                        );
                    }
                    JwksSource::File(file)
                }
                (None, Some(u)) => {
                    let url = u.get_ref();
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        p.at(
                            Some(u.span()),
                            format!("{path}.jwks_url"),
                            "must be an http:// or https:// URL",
                        );
                    }
                    JwksSource::Url(url.clone())
                }
                _ => {
                    p.at(
                        Some(span),
                        path,
                        "a `jwks` key needs exactly one of `jwks_file`, `jwks_url`",
                    );
                    return None;
                }
            };
            let refresh_interval = duration(
                k.refresh_interval.as_ref(),
                &format!("{path}.refresh_interval"),
                DEFAULT_JWKS_REFRESH,
                p,
            )?;
            KeyKind::Jwks {
                source,
                refresh_interval,
            }
        }
        family => {
            need(&k.pem_file, "pem_file", p);
            let file = k.pem_file.as_ref()?;
            let public = match std::fs::read(file.get_ref()) {
                Ok(b) => b,
                Err(e) => {
                    p.at(
                        Some(file.span()),
                        format!("{path}.pem_file"),
                        format!("cannot read `{}`: {e}", file.get_ref()),
                    );
                    return None;
                }
            };
            let family = match family {
                "rsa" => KeyFamily::Rsa,
                "ec" => KeyFamily::Ec,
                _ => KeyFamily::Ed25519,
            };
            let parsed = match family {
                KeyFamily::Rsa => jsonwebtoken::DecodingKey::from_rsa_pem(&public).map(|_| ()),
                KeyFamily::Ec => jsonwebtoken::DecodingKey::from_ec_pem(&public).map(|_| ()),
                KeyFamily::Ed25519 => jsonwebtoken::DecodingKey::from_ed_pem(&public).map(|_| ()),
            };
            if let Err(e) = parsed {
                p.at(
                    Some(file.span()),
                    format!("{path}.pem_file"),
                    format!(
                        "`{}` is not a {kind_name} public key in PEM: {e}",
                        file.get_ref()
                    ),
                );
                return None;
            }
            KeyKind::Pem {
                family,
                public,
                private_key_file: k
                    .private_key_file
                    .as_ref()
                    .map(|f| PathBuf::from(f.get_ref())),
            }
        }
    };
    Some(Key {
        id,
        kind,
        algorithms,
    })
}

/// What routes see of `[auth]`.
#[derive(Debug, Clone, Copy)]
pub enum AuthState<'a> {
    /// The file has no `[auth]`.
    Missing,
    /// `[auth]` is there, but has problems (recorded where they are: a key's secret not set,
    /// say); routes that need it say nothing more of it.
    Broken,
    Valid(&'a Auth),
}

/// A route's access settings, `auth_state` being what `[auth]` is. `None`: problems were
/// recorded.
pub fn access(
    r: &file::RouteEntry,
    path: &str,
    auth_state: AuthState<'_>,
    p: &mut Collector<'_>,
) -> Option<Access> {
    let before = p.len();
    let auth = r.auth.unwrap_or(false);
    let auth_section = match auth_state {
        AuthState::Valid(a) => Some(a),
        AuthState::Missing | AuthState::Broken => None,
    };
    if auth && matches!(auth_state, AuthState::Missing) {
        p.at(
            None,
            format!("{path}.auth"),
            "the route requires auth, but there is no [auth] section with keys",
        );
    }
    let plans: Vec<String> = r
        .plans
        .iter()
        .flatten()
        .map(|s| s.get_ref().clone())
        .collect();
    if !plans.is_empty() && !auth {
        p.at(
            r.plans.as_ref().and_then(|l| l.first()).map(|s| s.span()),
            format!("{path}.plans"),
            "plans need auth = true: the plan comes from the verified token",
        );
    }
    // The accounts of buyers who paid on a rail hold what they paid, for their own tasks: no
    // token may spend them.
    for (i, plan) in r.plans.iter().flatten().enumerate() {
        if ["x402:", "masumi:"]
            .iter()
            .any(|rail| plan.get_ref().starts_with(rail))
        {
            p.at(
                Some(plan.span()),
                format!("{path}.plans[{i}]"),
                format!(
                    "`{}` is a payment rail's plan (what buyers paid on it, for their own tasks): a token cannot carry it",
                    plan.get_ref()
                ),
            );
        }
    }
    let quota = |q: &Option<Spanned<String>>, name: &str, p: &mut Collector<'_>| -> Option<Quota> {
        let q = q.as_ref()?;
        match parse_quota(q.get_ref()) {
            Ok(quota) => Some(quota),
            Err(e) => {
                p.at(Some(q.span()), format!("{path}.rate_limit.{name}"), e);
                None
            }
        }
    };
    let limits = match &r.rate_limit {
        None => RateLimits::default(),
        Some(l) => {
            if l.per_subject.is_some() && !auth {
                p.at(
                    l.per_subject.as_ref().map(|s| s.span()),
                    format!("{path}.rate_limit.per_subject"),
                    "per_subject needs auth = true; use per_client on routes without auth",
                );
            }
            RateLimits {
                per_subject: quota(&l.per_subject, "per_subject", p),
                route: quota(&l.route, "route", p),
                per_client: quota(&l.per_client, "per_client", p),
            }
        }
    };
    let upstream_auth = r.upstream_auth.as_ref().and_then(|u| {
        let span = u.span();
        let u = u.get_ref();
        let where_ = format!("{path}.upstream_auth");
        match (&u.bearer_env, &u.header, &u.value_env) {
            (Some(env), None, None) => Some(UpstreamAuth {
                header: "authorization".to_string(),
                value: format!(
                    "Bearer {}",
                    from_env(env, &format!("{where_}.bearer_env"), p)?
                ),
            }),
            (None, Some(h), Some(env)) => {
                let value = from_env(env, &format!("{where_}.value_env"), p)?;
                if http::HeaderName::from_bytes(h.get_ref().as_bytes()).is_err() {
                    p.at(
                        Some(h.span()),
                        format!("{where_}.header"),
                        "is not a header name",
                    );
                    return None;
                }
                Some(UpstreamAuth {
                    header: h.get_ref().to_ascii_lowercase(),
                    value,
                })
            }
            _ => {
                p.at(
                    Some(span),
                    where_,
                    "give `bearer_env`, or `header` with `value_env`",
                );
                None
            }
        }
    });
    let identity_headers = r.identity_headers.as_ref().map(|h| IdentityHeaders {
        subject: h.subject.as_ref().map_or_else(
            || "x-interlingua-subject".to_string(),
            |s| s.get_ref().to_ascii_lowercase(),
        ),
        plan: h.plan.as_ref().map_or_else(
            || "x-interlingua-plan".to_string(),
            |s| s.get_ref().to_ascii_lowercase(),
        ),
    });
    if identity_headers.is_some() && !auth {
        p.at(
            None,
            format!("{path}.identity_headers"),
            "identity headers need auth = true",
        );
    }
    let metadata = super::metadata::route(r, path, auth_section, p);
    if p.len() != before {
        return None;
    }
    Some(Access {
        auth,
        plans,
        limits,
        upstream_auth,
        identity_headers,
        metadata: metadata?,
    })
}

/// A route's price. `Some(None)`: free.
pub fn price(r: &file::RouteEntry, path: &str, p: &mut Collector<'_>) -> Option<Option<Price>> {
    let Some(spanned) = &r.price else {
        return Some(None);
    };
    let pr = spanned.get_ref();
    let get = |v: &Option<Spanned<u64>>, default: u64| v.as_ref().map_or(default, |s| *s.get_ref());
    let step = get(&pr.step, 0);
    let min = get(&pr.min, 0);
    let max = get(&pr.max, u64::MAX);
    let price = Price {
        hold: get(&pr.hold, step.max(min)),
        step,
        min,
        max,
        from: match pr.from.as_ref().map(|s| s.get_ref().as_str()) {
            None | Some("route") => PriceFrom::Route,
            Some("agent") => PriceFrom::Agent,
            Some(other) => {
                p.at(
                    pr.from.as_ref().map(|s| s.span()),
                    format!("{path}.price.from"),
                    format!("`{other}` is not `route` or `agent`"),
                );
                return None;
            }
        },
        failed: get(&pr.failed, 0),
        operations: BTreeMap::new(),
    };
    let mut price = price;
    if let Some(ops) = &pr.operations {
        for (name, fee) in ops.get_ref() {
            match mapping::task::Operation::from_name(name) {
                Some(op) => {
                    price.operations.insert(op, *fee);
                }
                None => p.at(
                    Some(ops.span()),
                    format!("{path}.price.operations"),
                    format!("`{name}` is not a canonical operation"),
                ),
            }
        }
    }
    if price.min > price.max {
        p.at(
            Some(spanned.span()),
            format!("{path}.price"),
            "min is larger than max",
        );
        return None;
    }
    Some(Some(price))
}

/// A rate limit that does not read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a rate; write e.g. \"10/s, burst 20\" (per s, m or h)")]
pub struct QuotaError(pub String);

/// Parses "10/s", "100/m, burst 20", "5/h".
pub fn parse_quota(text: &str) -> Result<Quota, QuotaError> {
    let bad = || QuotaError(text.to_string());
    let mut parts = text.split(',').map(str::trim);
    let rate = parts.next().ok_or_else(bad)?;
    let (count, unit) = rate.split_once('/').ok_or_else(bad)?;
    let count: u32 = count.trim().parse().map_err(|_| bad())?;
    let per = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    let burst = match parts.next() {
        None => count,
        Some(b) => b
            .strip_prefix("burst")
            .and_then(|n| n.trim().parse::<u32>().ok())
            .ok_or_else(bad)?,
    };
    if parts.next().is_some() || count == 0 || burst == 0 {
        return Err(bad());
    }
    Ok(Quota { count, per, burst })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas() {
        assert_eq!(
            parse_quota("10/s, burst 20"),
            Ok(Quota {
                count: 10,
                per: Duration::from_secs(1),
                burst: 20
            })
        );
        assert_eq!(parse_quota("100/m").map(|q| q.burst), Ok(100));
        for bad in ["10", "10/d", "0/s", "10/s, burst", "10/s, 20", "x/s"] {
            assert!(parse_quota(bad).is_err(), "{bad}");
        }
    }

    /// The policy knobs are booleans, off unless set; anything else is a problem at its place.
    #[test]
    fn auth_policy_knobs() {
        const ENV: &str = "INTERLINGUA_UNIT_AUTH_SECRET";
        std::env::set_var(ENV, "a-secret");
        let config = |knobs: &str| {
            format!(
                "[auth]\n{knobs}\n[[auth.keys]]\nid = \"k\"\ntype = \"hmac\"\nsecret_env = \"{ENV}\"\n\n\
                 [[listeners]]\naddress = \"127.0.0.1:0\"\n"
            )
        };
        let auth = |knobs: &str| {
            crate::config::parse(&config(knobs), "t.toml")
                .map(|c| {
                    c.auth
                        .map(|a| (a.allow_future_iat, a.allow_duplicate_claims))
                })
                .map_err(|p| p.to_string())
        };
        assert_eq!(auth(""), Ok(Some((false, false))));
        assert_eq!(
            auth("allow_future_iat = true\nallow_duplicate_claims = true"),
            Ok(Some((true, true)))
        );
        let wrong = auth("allow_future_iat = \"yes\"").unwrap_err();
        assert!(
            wrong.contains("t.toml:2:")
                && wrong.contains("invalid type: string \"yes\", expected a boolean"),
            "{wrong}"
        );
    }

    #[test]
    fn claim_paths() {
        assert_eq!(ClaimPath::parse("sub").0, vec!["sub"]);
        assert_eq!(ClaimPath::parse("org.plan").0, vec!["org", "plan"]);
        assert_eq!(
            ClaimPath::parse("/https:~1~1x.io~1plan").0,
            vec!["https://x.io/plan"]
        );
    }
}
