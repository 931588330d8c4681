//! Checking `[limits]`: the Redis server that rate limits are shared through, what happens when
//! it cannot be asked, and how long a check may wait for it.

use std::time::Duration;

use redis::IntoConnectionInfo;

use super::file::LimitsSection;
use super::model::{OnRedisError, SharedLimits};
use super::values::{duration, from_env, no_effect_without};
use mapping::problem::Collector;

/// A request must never wait long on Redis: a round trip on a LAN takes well under a millisecond.
const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(100);

/// `[limits]`. `Some(None)`: no Redis (each instance counts alone); `None`: problems were
/// recorded.
pub fn limits(l: Option<&LimitsSection>, p: &mut Collector<'_>) -> Option<Option<SharedLimits>> {
    let Some(l) = l else {
        return Some(None);
    };
    let before = p.len();
    let timeout = duration(
        l.redis_timeout.as_ref(),
        "limits.redis_timeout",
        DEFAULT_REDIS_TIMEOUT,
        p,
    );
    let on_error = match l.on_redis_error.as_ref() {
        None => Some(OnRedisError::Local),
        Some(v) => match v.get_ref().as_str() {
            "local" => Some(OnRedisError::Local),
            "deny" => Some(OnRedisError::Deny),
            other => {
                p.at(
                    Some(v.span()),
                    "limits.on_redis_error",
                    format!("`{other}` is not a choice; use \"local\" or \"deny\""),
                );
                None
            }
        },
    };
    let Some(url) = &l.redis else {
        let set = [
            (l.on_redis_error.is_some(), "on_redis_error"),
            (l.redis_timeout.is_some(), "redis_timeout"),
            (l.redis_password_env.is_some(), "redis_password_env"),
        ];
        no_effect_without(&set, "limits", "redis", p);
        return if p.len() == before { Some(None) } else { None };
    };
    let text = url.get_ref().trim();
    let info = if !text.starts_with("redis://") {
        p.at(
            Some(url.span()),
            "limits.redis",
            format!("`{text}` is not a redis:// URL (TLS and Unix sockets are not supported)"),
        );
        None
    } else {
        match text.into_connection_info() {
            Ok(info) => Some(info),
            Err(e) => {
                p.at(
                    Some(url.span()),
                    "limits.redis",
                    format!("`{text}` is not a Redis URL: {e}"),
                );
                None
            }
        }
    };
    let password = match &l.redis_password_env {
        Some(env) => from_env(env, "limits.redis_password_env", p),
        None => None,
    };
    let info = match (info, password) {
        (Some(info), Some(_)) if info.redis_settings().password().is_some() => {
            p.at(
                Some(url.span()),
                "limits.redis",
                "the URL has a password and limits.redis_password_env names another; give one",
            );
            None
        }
        (Some(info), Some(pw)) => {
            let settings = info.redis_settings().clone().set_password(pw);
            Some(info.set_redis_settings(settings))
        }
        (info, _) => info,
    };
    if p.len() != before {
        return None;
    }
    Some(Some(SharedLimits {
        display: without_password(text),
        redis: info?,
        on_error: on_error?,
        timeout: timeout?,
    }))
}

/// The URL with any password replaced by `***`, for logs and `/readyz`.
fn without_password(url: &str) -> String {
    let Some(rest) = url.strip_prefix("redis://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("redis://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::without_password;
    use crate::config::OnRedisError;
    use std::time::Duration;

    /// The URL shown, the fallback, the timeout and the password.
    type Seen = (String, OnRedisError, Duration, Option<String>);

    /// `[limits]` holding `body`, validated: what it became, or every problem as text.
    fn limits(body: &str) -> Result<Option<Seen>, String> {
        let text = format!("[limits]\n{body}\n\n[[listeners]]\naddress = \"127.0.0.1:0\"\n");
        crate::config::parse(&text, "t.toml")
            .map(|c| {
                c.shared_limits.map(|s| {
                    let password = s.redis.redis_settings().password().map(str::to_string);
                    (s.display, s.on_error, s.timeout, password)
                })
            })
            .map_err(|p| p.to_string())
    }

    #[test]
    fn redis_settings_have_defaults_and_the_password_comes_from_the_environment() {
        assert_eq!(limits(""), Ok(None));
        assert_eq!(
            limits("redis = \"redis://10.0.0.5:6379/1\""),
            Ok(Some((
                "redis://10.0.0.5:6379/1".into(),
                OnRedisError::Local,
                Duration::from_millis(100),
                None
            )))
        );
        const ENV: &str = "INTERLINGUA_UNIT_REDIS_PASSWORD";
        std::env::set_var(ENV, "pw");
        assert_eq!(
            limits(&format!(
                "redis = \"redis://cache:6379\"\nredis_password_env = \"{ENV}\"\n\
                 on_redis_error = \"deny\"\nredis_timeout = \"25ms\""
            )),
            Ok(Some((
                "redis://cache:6379".into(),
                OnRedisError::Deny,
                Duration::from_millis(25),
                Some("pw".into())
            )))
        );
        assert_eq!(
            limits("redis = \"redis://:s3cret@cache:6379\"").map(|l| l.map(|l| (l.0, l.3))),
            Ok(Some((
                "redis://:***@cache:6379".into(),
                Some("s3cret".into())
            )))
        );
    }

    #[test]
    fn every_bad_redis_setting_is_reported_at_its_place() {
        let wrong = limits(
            "redis = \"http://cache:6379\"\non_redis_error = \"allow\"\nredis_timeout = \"0s\"\n\
             redis_password_env = \"INTERLINGUA_UNIT_REDIS_UNSET\"",
        )
        .unwrap_err();
        for part in [
            "t.toml:2:9: limits.redis: `http://cache:6379` is not a redis:// URL",
            "t.toml:3:18: limits.on_redis_error: `allow` is not a choice; use \"local\" or \"deny\"",
            "t.toml:4:17: limits.redis_timeout: must be longer than zero",
            "t.toml:5:22: limits.redis_password_env: the environment variable `INTERLINGUA_UNIT_REDIS_UNSET` is not set",
        ] {
            assert!(wrong.contains(part), "no `{part}` in:\n{wrong}");
        }
        let alone = limits("on_redis_error = \"deny\"").unwrap_err();
        assert!(
            alone.contains("limits.on_redis_error: has no effect without limits.redis"),
            "{alone}"
        );
        let unknown = limits("redis_url = \"redis://cache\"").unwrap_err();
        assert!(unknown.contains("t.toml:2:1"), "{unknown}");
    }

    #[test]
    fn the_password_never_shows() {
        assert_eq!(
            without_password("redis://:s3cret@10.0.0.5:6379/2"),
            "redis://:***@10.0.0.5:6379/2"
        );
        assert_eq!(
            without_password("redis://app:s3cret@cache:6379"),
            "redis://app:***@cache:6379"
        );
        assert_eq!(without_password("redis://cache:6379"), "redis://cache:6379");
    }
}
