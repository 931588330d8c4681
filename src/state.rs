//! What every request reads and no request changes: the live config ([`Live`]: the validated
//! config, the route table, the upstreams, the compiled dialects, the limits), and what outlives
//! any config (the engine, the metrics, the watcher). One `Arc<State>` is shared by the proxy and
//! the admin listener; a reload swaps its `Live` whole.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::auth::{Authenticator, Resources};
use crate::config::StoreBackend;
use crate::config::{Config, Route};
use crate::engine::watch::Watcher;
use crate::engine::{Engine, Translated};
use crate::limit::shared::{RouteBuckets, Shared};
use crate::limit::RouteLimits;
use crate::metrics::Metrics;
use crate::routing::RouteTable;
use crate::upstream::Upstreams;
use mapping::dialect::Dialects;
use store::{Leases, StoreError, TaskStore};

/// Why the shared state could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Key(crate::auth::KeyError),
    #[error("cannot make a sealing key: the system has no randomness to give ({0})")]
    SealKey(getrandom::Error),
}

/// Shared state of a running server: what lives as long as the process (the engine and its
/// store, the metrics, the watcher, Redis), and the live config, which a reload replaces whole.
pub struct State {
    live: ArcSwap<Live>,
    pub metrics: Arc<Metrics>,
    pub engine: Arc<Engine>,
    /// Follows unfinished tasks until they end.
    pub watcher: Arc<Watcher>,
    /// The connection for limits shared by the fleet, when `[limits] redis` is set.
    pub shared_limits: Option<Arc<Shared>>,
    /// The key of sealed tokens, kept across reloads (a new one would void every token).
    seal_key: Arc<[u8]>,
}

/// One validated config and everything built from it that requests read. A request takes one
/// ([`State::live`]) when it starts and reads only that one to its end, so a reload never shows
/// it half of one config and half of another, and a route index always points into its own
/// snapshot.
pub struct Live {
    /// 1 for the config started with, one more for each reload applied.
    pub generation: u64,
    pub config: Config,
    pub routes: RouteTable,
    pub upstreams: Arc<Upstreams>,
    pub dialects: Dialects,
    /// Per route (by index), its translation; `None` for passthrough routes.
    pub translated: Vec<Option<Arc<Translated>>>,
    /// Verifies bearer tokens, when `[auth]` is configured.
    pub auth: Option<Arc<Authenticator>>,
    /// What routes with auth publish about getting a token (RFC 9728), by route and by path.
    pub resources: Resources,
    /// Per route (by index), its rate limits.
    pub limits: Vec<Arc<RouteLimits>>,
    /// Per route (by index), its buckets in Redis (empty without `[limits] redis`).
    pub buckets: Vec<RouteBuckets>,
}

/// The key behind the mappings' sealed tokens: `[server] seal_key_env`'s, or else 32 random bytes
/// for this process alone (its tokens do not survive a restart nor reach another instance).
fn seal_key(config: &Config) -> Result<Arc<[u8]>, StateError> {
    if let Some(key) = &config.server.seal_key {
        return Ok(key.0.clone());
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(StateError::SealKey)?;
    // Only translated routes run mappings; a proxy of passthrough routes seals nothing.
    if config.routes.iter().any(Route::is_translated) {
        tracing::info!(
            "sealed tokens use a per-process key; set [server] seal_key_env for a fleet"
        );
    }
    Ok(Arc::from(key.as_slice()))
}

/// Opens the store the config names (SQLite in the data directory, or PostgreSQL), applying
/// pending schema migrations unless the config says to leave them to `interlingua migrate`.
pub async fn open_store(config: &Config) -> Result<Arc<dyn TaskStore>, StoreError> {
    let leases = Leases {
        ttl: config.store.lease_ttl,
        ..Leases::default()
    };
    let migrations = if config.store.migrate_on_start {
        store::Migrations::Apply
    } else {
        store::Migrations::Require
    };
    store::open(&location(config), leases, migrations).await
}

/// Where the config's store is.
pub fn location(config: &Config) -> store::Location {
    match &config.store.backend {
        StoreBackend::Sqlite => store::Location::Sqlite(config.server.data_dir.clone()),
        StoreBackend::Postgres {
            url,
            password,
            pool_size,
        } => store::Location::Postgres {
            url: url.clone(),
            password: password.clone(),
            pool_max: *pool_size,
        },
    }
}

impl State {
    /// Builds the state around an open store ([`open_store`]).
    pub fn new(
        config: Config,
        dialects: Dialects,
        store: Arc<dyn TaskStore>,
    ) -> Result<Arc<State>, StateError> {
        let metrics = Metrics::new();
        // The engine's calls to backs keep as many idle connections as the proxy's, for the
        // same reason (see `server.upstream_keepalive`).
        let idle_pool = config
            .server
            .upstream_keepalive
            .saturating_mul(config.server.threads.max(1));
        let engine = Arc::new(Engine::new(store, metrics.clone(), idle_pool));
        let shared_limits = config
            .shared_limits
            .as_ref()
            .map(|s| Shared::new(s, &metrics));
        let seal_key = seal_key(&config)?;
        let live = Live::build(None, config, dialects, &engine, &seal_key)?;
        let watcher = Watcher::new(
            engine.clone(),
            live.translated.iter().flatten().cloned(),
            live.config.store.lease_ttl,
        );
        let _ = engine.watcher.set(Arc::downgrade(&watcher));
        Ok(Arc::new(State {
            live: ArcSwap::from_pointee(live),
            metrics,
            engine,
            watcher,
            shared_limits,
            seal_key,
        }))
    }

    /// The live config, for one request (or one admin answer) to read to its end.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// Makes `config` the live config, carrying over from the one it replaces what has not
    /// changed (see [`Live::build`]). New requests see it; those under way finish on theirs.
    /// The caller has validated it, and checked that it changes nothing that takes a restart.
    pub fn swap(&self, config: Config, dialects: Dialects) -> Result<Arc<Live>, StateError> {
        let prev = self.live.load_full();
        let live = Arc::new(Live::build(
            Some(&prev),
            config,
            dialects,
            &self.engine,
            &self.seal_key,
        )?);
        // What a back said about itself (its schemas, its discovery) is kept for the routes that
        // still reach the same agent in the same dialect.
        for r in &prev.config.routes {
            let agent =
                |c: &Config, r: &Route| (c.upstreams.get(r.upstream).cloned(), r.back.clone());
            let same = live.config.routes.iter().find(|n| n.name == r.name);
            if same.is_none_or(|n| agent(&live.config, n) != agent(&prev.config, r)) {
                self.engine.forget_route(&r.name);
            }
        }
        // The watcher first: a task created on the new config finds its route there.
        self.watcher
            .set_routes(live.translated.iter().flatten().cloned());
        self.live.store(live.clone());
        Ok(live)
    }
}

impl Live {
    /// Builds a live config. With `prev` (a reload), what did not change is carried over: an
    /// upstream's resolved address, each rate limit's count when its route keeps its name and
    /// the limit its quota, and the token verifier (with its cache and fetched key sets) when
    /// `[auth]` is the same.
    fn build(
        prev: Option<&Live>,
        config: Config,
        dialects: Dialects,
        engine: &Engine,
        seal_key: &Arc<[u8]>,
    ) -> Result<Live, StateError> {
        // A key set read from a file is read again by a new verifier (a reload after rotating it).
        let jwks_file = |a: &crate::config::Auth| {
            a.keys.iter().any(|k| {
                matches!(
                    k.kind,
                    crate::config::KeyKind::Jwks {
                        source: crate::config::JwksSource::File(_),
                        ..
                    }
                )
            })
        };
        let auth = match (&config.auth, prev) {
            (Some(a), Some(p)) if p.config.auth.as_ref() == Some(a) && !jwks_file(a) => {
                p.auth.clone()
            }
            (Some(a), _) => Some(Arc::new(
                Authenticator::new(a, engine.client.clone()).map_err(StateError::Key)?,
            )),
            (None, _) => None,
        };
        let limits = config
            .routes
            .iter()
            .map(|r| {
                let before = prev.and_then(|p| {
                    let i = p.config.routes.iter().position(|o| o.name == r.name)?;
                    p.limits.get(i)
                });
                Arc::new(RouteLimits::carried(&r.access.limits, before.map(|l| &**l)))
            })
            .collect();
        let buckets = if config.shared_limits.is_some() {
            RouteBuckets::of(&config.routes)
        } else {
            Vec::new()
        };
        let upstreams = Arc::new(Upstreams::carried(
            &config.upstreams,
            prev.map(|p| &*p.upstreams),
        ));
        let translated: Vec<Option<Arc<Translated>>> = config
            .routes
            .iter()
            .map(|r| {
                let front = dialects.get(r.front.name())?.clone();
                let back = dialects.get(r.back.name())?.clone();
                let upstream = upstreams.get(r.upstream)?.clone();
                Some(Arc::new(Translated::new(
                    r,
                    front,
                    back,
                    upstream,
                    seal_key.clone(),
                )))
            })
            .collect();
        Ok(Live {
            generation: prev.map_or(1, |p| p.generation + 1),
            routes: RouteTable::new(&config.routes),
            upstreams,
            translated,
            auth,
            resources: Resources::new(&config),
            limits,
            buckets,
            dialects,
            config,
        })
    }

    /// The route at `index`, as returned by the route table.
    pub fn route(&self, index: usize) -> Option<&Route> {
        self.config.routes.get(index)
    }

    /// The translation of the route at `index`, if it is translated.
    pub fn translated(&self, index: usize) -> Option<&Arc<Translated>> {
        self.translated.get(index).and_then(Option::as_ref)
    }
}
