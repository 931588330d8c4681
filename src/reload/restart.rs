//! What a reload cannot change: the settings bound once at start-up (sockets, the store, the
//! runtime, the global log subscriber and tracer, the Redis connection). A new config that
//! changes any of them is refused whole, one problem per setting, so the running config never
//! becomes a mix of the old file and the new one.

use mapping::problem::{Kind, Location, Problem};

use crate::config::{Config, SharedLimits};

/// One problem per restart-only setting `new` changes from `old`; empty: it may be reloaded.
pub fn restart_only(old: &Config, new: &Config) -> Vec<Problem> {
    let mut found = Vec::new();
    // Each setting shown as text; a setting whose text differs has changed.
    let mut compare = |path: &str, show: &dyn Fn(&Config) -> String| {
        let (before, after) = (show(old), show(new));
        if before != after {
            found.push(Problem {
                location: Location {
                    file: new.origin.clone(),
                    line_col: None,
                    path: path.to_string(),
                },
                message: format!(
                    "changed from {before} to {after}; this takes a restart (the running config is unchanged)"
                ),
                kind: Kind::Invalid,
            });
        }
    };
    let duration = |d: std::time::Duration| humantime::format_duration(d).to_string();
    compare("listeners", &listeners);
    compare("admin.address", &|c| c.admin.address.to_string());
    compare("server.data_dir", &|c| {
        format!("`{}`", c.server.data_dir.display())
    });
    compare("server.threads", &|c| c.server.threads.to_string());
    compare("server.upstream_keepalive", &|c| {
        c.server.upstream_keepalive.to_string()
    });
    compare("server.max_connections", &|c| {
        c.server.max_connections.to_string()
    });
    compare("server.client_header_timeout", &|c| {
        duration(c.server.client_header_timeout)
    });
    compare("server.keepalive_timeout", &|c| {
        duration(c.server.keepalive_timeout)
    });
    // The key itself is never printed.
    compare("server.seal_key_env", &|c| match &c.server.seal_key {
        Some(k) if Some(k) == old.server.seal_key.as_ref() => "the key of seal_key_env".to_string(),
        Some(_) => "another key".to_string(),
        None => "a per-process key".to_string(),
    });
    compare("store", &|c| {
        if c.store == old.store {
            "the store opened at start-up".to_string()
        } else {
            "another".to_string()
        }
    });
    compare("limits", &|c| redis(c.shared_limits.as_ref()));
    compare("log.format", &|c| {
        format!("{:?}", c.log.format).to_lowercase()
    });
    compare("log.filter", &|c| format!("`{}`", c.log.filter));
    // The tracer is installed once, with the process's log subscriber.
    compare("telemetry", &|c| match &c.telemetry {
        None => "no traces".to_string(),
        Some(t) => format!(
            "traces to {} (sample_ratio {}, service_name `{}`)",
            t.otlp_endpoint, t.sample_ratio, t.service_name
        ),
    });
    found
}

/// The listeners as a short text: address, TLS, h2c, in order.
fn listeners(c: &Config) -> String {
    let each: Vec<String> = c
        .listeners
        .iter()
        .map(|l| {
            let mut s = l.address.to_string();
            if let Some(tls) = &l.tls {
                s.push_str(&format!(
                    " tls ({}, {})",
                    tls.certificate.display(),
                    tls.key.display()
                ));
            }
            if l.h2c {
                s.push_str(" h2c");
            }
            s
        })
        .collect();
    format!("[{}]", each.join(", "))
}

/// Redis for shared limits, as a short text (never its password).
fn redis(s: Option<&SharedLimits>) -> String {
    match s {
        None => "no redis".to_string(),
        Some(s) => format!(
            "redis `{}` (on_redis_error {}, redis_timeout {})",
            s.display,
            s.on_error.as_str(),
            humantime::format_duration(s.timeout)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::restart_only;
    use crate::config::{parse, Config};

    const BASE: &str = r#"
[server]
data_dir = "./data"
threads = 2

[admin]
address = "127.0.0.1:9901"

[[listeners]]
address = "127.0.0.1:8080"

[[upstreams]]
name = "agent"
address = "127.0.0.1:9"

[[routes]]
match = { path_prefix = "/" }
upstream = "agent"
"#;

    fn config(text: &str) -> Config {
        parse(text, "new.toml").unwrap()
    }

    #[test]
    fn each_restart_only_setting_is_named_and_the_rest_may_change() {
        let old = config(BASE);
        let cases = [
            (
                "127.0.0.1:8080",
                "127.0.0.1:8081",
                "listeners: changed from [127.0.0.1:8080 h2c] to [127.0.0.1:8081 h2c]",
            ),
            (
                "127.0.0.1:9901",
                "127.0.0.1:9902",
                "admin.address: changed from 127.0.0.1:9901 to 127.0.0.1:9902",
            ),
            (
                "./data",
                "./other",
                "server.data_dir: changed from `./data` to `./other`",
            ),
            (
                "threads = 2",
                "threads = 3",
                "server.threads: changed from 2 to 3",
            ),
            (
                "threads = 2",
                "threads = 2\nkeepalive_timeout = \"7s\"",
                "server.keepalive_timeout: changed from 1m to 7s",
            ),
            (
                "threads = 2",
                "threads = 2\n[log]\nformat = \"json\"",
                "log.format: changed from text to json",
            ),
            (
                "threads = 2",
                "threads = 2\n[store]\nlease_ttl = \"9s\"",
                "store: changed from the store opened at start-up to another",
            ),
            (
                "threads = 2",
                "threads = 2\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"",
                "telemetry: changed from no traces to traces to http://127.0.0.1:4318/v1/traces (sample_ratio 1, service_name `interlingua`)",
            ),
        ];
        for (from, to, expected) in cases {
            let new = config(&BASE.replace(from, to));
            let found: Vec<String> = restart_only(&old, &new)
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(found.len(), 1, "{expected}: {found:?}");
            assert_eq!(
                found[0],
                format!(
                    "new.toml: {expected}; this takes a restart (the running config is unchanged)"
                )
            );
        }
        // Routes, upstreams and the admin token are not restart-only.
        let live = config(&format!(
            "{}\n[[upstreams]]\nname = \"other\"\naddress = \"127.0.0.1:10\"\n",
            BASE.replace("path_prefix = \"/\"", "path_prefix = \"/v2\"")
        ));
        assert!(restart_only(&old, &live).is_empty());
    }
}
