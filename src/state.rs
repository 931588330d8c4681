//! What every request reads and no request changes: the validated config, the route table, the
//! upstreams and the metrics. One `Arc<State>` is shared by the proxy and the admin listener.

use std::sync::Arc;

use crate::config::{Config, Route};
use crate::metrics::Metrics;
use crate::proxy::routing::RouteTable;
use crate::proxy::upstream::Upstreams;

/// Shared, read-only state of a running server.
pub struct State {
    pub config: Config,
    pub routes: RouteTable,
    pub upstreams: Arc<Upstreams>,
    pub metrics: Arc<Metrics>,
}

impl State {
    pub fn new(config: Config) -> Arc<State> {
        Arc::new(State {
            routes: RouteTable::new(&config.routes),
            upstreams: Arc::new(Upstreams::new(&config.upstreams)),
            metrics: Metrics::new(),
            config,
        })
    }

    /// The route at `index`, as returned by the route table.
    pub fn route(&self, index: usize) -> Option<&Route> {
        self.config.routes.get(index)
    }
}
