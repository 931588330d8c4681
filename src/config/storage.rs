//! `[store]`: where tasks and credits live. Absent, the embedded SQLite store in
//! `server.data_dir` (one instance); with a `url`, PostgreSQL, shared by every instance that names
//! it (docs/operating.md, "Running several instances").

use std::time::Duration;

use toml::Spanned;

use super::file::StoreSection;
use super::model::{StoreBackend, StoreSettings};
use super::values::{duration, from_env};
use mapping::problem::Collector;

/// Enough for a proxy's concurrent writes on a 2-core database; PostgreSQL's own default
/// `max_connections` (100) leaves room for several instances at this size.
const DEFAULT_POOL_SIZE: usize = 16;
const MAX_POOL_SIZE: i64 = 1024;
/// How long a dead instance's tasks go unwatched at most before another instance takes them.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);
/// A lease renewed every third of its length survives two missed renewals; below a second,
/// a busy database's latency would lose leases of live instances.
const MIN_LEASE_TTL: Duration = Duration::from_secs(1);

pub fn store(s: Option<&StoreSection>, p: &mut Collector<'_>) -> Option<StoreSettings> {
    let Some(s) = s else {
        return Some(StoreSettings::default());
    };
    let lease_ttl = duration(
        s.lease_ttl.as_ref(),
        "store.lease_ttl",
        DEFAULT_LEASE_TTL,
        p,
    );
    if let (Some(ttl), Some(v)) = (lease_ttl, &s.lease_ttl) {
        if ttl < MIN_LEASE_TTL {
            p.at(Some(v.span()), "store.lease_ttl", "must be at least 1s");
        }
    }
    let pool_size = match &s.pool_size {
        Some(n) if !(1..=MAX_POOL_SIZE).contains(n.get_ref()) => {
            p.at(
                Some(n.span()),
                "store.pool_size",
                format!("must be between 1 and {MAX_POOL_SIZE}"),
            );
            None
        }
        Some(n) => Some(*n.get_ref() as usize),
        None => Some(DEFAULT_POOL_SIZE),
    };
    let backend = match &s.url {
        None => {
            for (set, key) in [
                (s.password_env.as_ref().map(Spanned::span), "password_env"),
                (s.pool_size.as_ref().map(Spanned::span), "pool_size"),
            ] {
                if let Some(span) = set {
                    p.at(
                        Some(span),
                        format!("store.{key}"),
                        "applies to PostgreSQL only: set `store.url` too",
                    );
                }
            }
            Some(StoreBackend::Sqlite)
        }
        Some(url) => postgres(url, s.password_env.as_ref(), pool_size, p),
    };
    Some(StoreSettings {
        backend: backend?,
        lease_ttl: lease_ttl?,
        migrate_on_start: s.migrate_on_start.unwrap_or(true),
    })
}

fn postgres(
    url: &Spanned<String>,
    password_env: Option<&Spanned<String>>,
    pool_size: Option<usize>,
    p: &mut Collector<'_>,
) -> Option<StoreBackend> {
    let text = url.get_ref().trim();
    let Some(rest) = text
        .strip_prefix("postgres://")
        .or_else(|| text.strip_prefix("postgresql://"))
    else {
        p.at(
            Some(url.span()),
            "store.url",
            "must be a PostgreSQL URL (`postgres://user@host:port/database`); leave it out for the embedded SQLite store",
        );
        return None;
    };
    // A password in the file would be read by anyone who can read the config, and logged by
    // whoever prints it: it comes from the environment only.
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if let Some((user, _)) = authority.rsplit_once('@') {
        if user.contains(':') {
            p.at(
                Some(url.span()),
                "store.url",
                "must not contain a password: name the environment variable that holds it with `store.password_env`",
            );
            return None;
        }
    }
    let password = match password_env {
        Some(env) => Some(from_env(env, "store.password_env", p)?),
        None => None,
    };
    Some(StoreBackend::Postgres {
        url: text.to_string(),
        password,
        pool_size: pool_size?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, StoreBackend};

    const BASE: &str = "[[listeners]]\naddress = \"127.0.0.1:0\"\n";

    fn problems(store: &str) -> String {
        match parse(&format!("{BASE}[store]\n{store}\n"), "t") {
            Ok(_) => String::new(),
            Err(p) => p.to_string(),
        }
    }

    #[test]
    fn without_a_url_the_store_is_sqlite() {
        let c = parse(BASE, "t").unwrap();
        assert_eq!(c.store.backend, StoreBackend::Sqlite);
        assert_eq!(c.store.lease_ttl, std::time::Duration::from_secs(15));
        assert!(c.store.migrate_on_start);
    }

    #[test]
    fn a_postgres_url_with_its_password_from_the_environment() {
        std::env::set_var("INTERLINGUA_TEST_PG_PASSWORD", "s3cret");
        let c = parse(
            &format!(
                "{BASE}[store]\nurl = \"postgres://app@db:5432/interlingua\"\n\
                 password_env = \"INTERLINGUA_TEST_PG_PASSWORD\"\npool_size = 8\nlease_ttl = \"5s\"\n"
            ),
            "t",
        )
        .unwrap();
        assert_eq!(
            c.store.backend,
            StoreBackend::Postgres {
                url: "postgres://app@db:5432/interlingua".into(),
                password: Some("s3cret".into()),
                pool_size: 8,
            }
        );
        assert_eq!(c.store.lease_ttl, std::time::Duration::from_secs(5));
    }

    #[test]
    fn bad_store_settings_are_reported_where_they_are() {
        assert_eq!(
            problems("url = \"mysql://db/x\""),
            "t:4:7: store.url: must be a PostgreSQL URL (`postgres://user@host:port/database`); \
             leave it out for the embedded SQLite store"
        );
        assert_eq!(
            problems("url = \"postgres://app:pw@db/x\""),
            "t:4:7: store.url: must not contain a password: name the environment variable that \
             holds it with `store.password_env`"
        );
        assert_eq!(
            problems("pool_size = 4"),
            "t:4:13: store.pool_size: applies to PostgreSQL only: set `store.url` too"
        );
        assert_eq!(
            problems("url = \"postgres://db/x\"\nlease_ttl = \"500ms\""),
            "t:5:13: store.lease_ttl: must be at least 1s"
        );
        assert_eq!(
            problems("url = \"postgres://db/x\"\npassword_env = \"INTERLINGUA_TEST_UNSET_PG\""),
            "t:5:16: store.password_env: the environment variable `INTERLINGUA_TEST_UNSET_PG` \
             is not set (or empty)"
        );
    }
}
