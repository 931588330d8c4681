//! What every request reads and no request changes: the validated config, the route table, the
//! upstreams, the compiled dialects, the engine and the metrics. One `Arc<State>` is shared by the
//! proxy and the admin listener.

use std::sync::Arc;

use crate::auth::{Authenticator, Resources};
use crate::config::StoreBackend;
use crate::config::{Config, Route};
use crate::engine::watch::Watcher;
use crate::engine::{Engine, Translated};
use crate::limit::shared::Shared;
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

/// Shared state of a running server.
pub struct State {
    pub config: Config,
    pub routes: RouteTable,
    pub upstreams: Arc<Upstreams>,
    pub metrics: Arc<Metrics>,
    pub dialects: Dialects,
    pub engine: Arc<Engine>,
    /// Per route (by index), its translation; `None` for passthrough routes.
    pub translated: Vec<Option<Arc<Translated>>>,
    /// Verifies bearer tokens, when `[auth]` is configured.
    pub auth: Option<Authenticator>,
    /// What routes with auth publish about getting a token (RFC 9728), by route and by path.
    pub resources: Resources,
    /// Per route (by index), its rate limits.
    pub limits: Vec<RouteLimits>,
    /// The same limits for the whole fleet, in Redis, when `[limits] redis` is set.
    pub shared_limits: Option<Arc<Shared>>,
    /// Follows unfinished tasks until they end.
    pub watcher: Arc<Watcher>,
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
        let auth = match &config.auth {
            Some(a) => Some(Authenticator::new(a, engine.client.clone()).map_err(StateError::Key)?),
            None => None,
        };
        let limits = config
            .routes
            .iter()
            .map(|r| RouteLimits::new(&r.access.limits))
            .collect();
        let shared_limits = config
            .shared_limits
            .as_ref()
            .map(|s| Shared::new(s, &config.routes, &metrics));
        let upstreams = Arc::new(Upstreams::new(&config.upstreams));
        let seal_key = seal_key(&config)?;
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
        let watcher = Watcher::new(
            engine.clone(),
            translated.iter().flatten().cloned(),
            config.store.lease_ttl,
        );
        let _ = engine.watcher.set(Arc::downgrade(&watcher));
        Ok(Arc::new(State {
            routes: RouteTable::new(&config.routes),
            upstreams,
            metrics,
            engine,
            translated,
            auth,
            resources: Resources::new(&config),
            limits,
            shared_limits,
            watcher,
            dialects,
            config,
        }))
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
