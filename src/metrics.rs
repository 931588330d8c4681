//! Prometheus metrics, one registry per running server (so that several servers in one process,
//! as in the tests, never share counters).

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use tokio::sync::Notify;

/// The proxy's metrics.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    upstream_latency: HistogramVec,
    request_duration: HistogramVec,
    in_flight: IntGauge,
    credits: IntCounterVec,
    rejections: IntCounterVec,
    connections_open: IntGaugeVec,
    connections_refused: IntCounterVec,
    client_timeouts: IntCounterVec,
    lease_takeovers: IntCounter,
    leases_held: IntGauge,
    store_pool: IntGaugeVec,
    idle: Notify,
}

/// Latency buckets from 0.5 ms to 60 s: a proxy's own cost sits at the bottom, agents at the top.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

impl Metrics {
    /// A fresh set of metrics in its own registry.
    pub fn new() -> Arc<Metrics> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "interlingua_requests_total",
                "Requests answered, by route and HTTP status.",
            ),
            &["route", "status"],
        )
        .expect("static metric definition");
        let upstream_latency = HistogramVec::new(
            HistogramOpts::new(
                "interlingua_upstream_latency_seconds",
                "Time from choosing the upstream to its last response byte, by route.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route"],
        )
        .expect("static metric definition");
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "interlingua_request_duration_seconds",
                "Time from the request header to the end of the response, by route.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route"],
        )
        .expect("static metric definition");
        let in_flight = IntGauge::new(
            "interlingua_requests_in_flight",
            "Requests being handled now.",
        )
        .expect("static metric definition");
        let credits = IntCounterVec::new(
            Opts::new(
                "interlingua_credits_total",
                "Credits held, captured and released.",
            ),
            &["kind"],
        )
        .expect("static metric definition");
        let rejections = IntCounterVec::new(
            Opts::new(
                "interlingua_rejections_total",
                "Requests refused by access and money checks, by status (401, 402, 403, 429).",
            ),
            &["reason"],
        )
        .expect("static metric definition");
        let connections_open = IntGaugeVec::new(
            Opts::new(
                "interlingua_connections_open",
                "Client connections open now, by proxy listener.",
            ),
            &["listener"],
        )
        .expect("static metric definition");
        let connections_refused = IntCounterVec::new(
            Opts::new(
                "interlingua_connections_refused_total",
                "Client connections refused (503) because the listener held max_connections.",
            ),
            &["listener"],
        )
        .expect("static metric definition");
        let client_timeouts = IntCounterVec::new(
            Opts::new(
                "interlingua_client_timeouts_total",
                "Client connections closed for slowness: header (client_header_timeout, 408), \
                 body (client_body_timeout, 408), idle (keepalive_timeout, or no request at all).",
            ),
            &["kind"],
        )
        .expect("static metric definition");
        let lease_takeovers = IntCounter::new(
            "interlingua_lease_takeovers_total",
            "Unfinished tasks this instance took over from instances whose leases ran out.",
        )
        .expect("static metric definition");
        let leases_held = IntGauge::new(
            "interlingua_leases_held",
            "Unfinished tasks this instance holds the lease of (follows), at the last renewal.",
        )
        .expect("static metric definition");
        let store_pool = IntGaugeVec::new(
            Opts::new(
                "interlingua_store_pool_connections",
                "The store's connection pool (PostgreSQL): open (size), idle, and the most it opens (max).",
            ),
            &["state"],
        )
        .expect("static metric definition");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(upstream_latency.clone()),
            Box::new(request_duration.clone()),
            Box::new(in_flight.clone()),
            Box::new(credits.clone()),
            Box::new(rejections.clone()),
            Box::new(connections_open.clone()),
            Box::new(connections_refused.clone()),
            Box::new(client_timeouts.clone()),
            Box::new(lease_takeovers.clone()),
            Box::new(leases_held.clone()),
            Box::new(store_pool.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Arc::new(Metrics {
            registry,
            requests,
            upstream_latency,
            request_duration,
            in_flight,
            credits,
            rejections,
            connections_open,
            connections_refused,
            client_timeouts,
            lease_takeovers,
            leases_held,
            store_pool,
            idle: Notify::new(),
        })
    }

    /// Adds a collector defined by another module (the shared rate limiter's) to this server's
    /// registry. A name registered twice is a programming error, logged and left out.
    pub fn register(&self, collector: Box<dyn prometheus::core::Collector>) {
        if let Err(e) = self.registry.register(collector) {
            tracing::error!(error = %e, "a metric could not be registered");
        }
    }

    /// Counts a request as in flight until the returned guard is dropped.
    pub fn start_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.inc();
        InFlight(self.clone())
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// Waits until no request is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            // Register before checking, so a request ending in between still wakes us.
            notified.as_mut().enable();
            if self.in_flight.get() <= 0 {
                return;
            }
            notified.await;
        }
    }

    /// Records one answered request.
    pub fn record(&self, route: &str, status: u16, total: Duration, upstream: Option<Duration>) {
        let status = status.to_string();
        self.requests
            .with_label_values(&[route, status.as_str()])
            .inc();
        self.request_duration
            .with_label_values(&[route])
            .observe(total.as_secs_f64());
        if let Some(up) = upstream {
            self.upstream_latency
                .with_label_values(&[route])
                .observe(up.as_secs_f64());
        }
    }

    /// Counts credits moved (`held`, `captured`, `released`).
    pub fn credits(&self, kind: &str, amount: u64) {
        if amount > 0 {
            self.credits.with_label_values(&[kind]).inc_by(amount);
        }
    }

    /// Counts a request refused with `status` (401, 402, 403, 429).
    pub fn rejection(&self, status: u16) {
        self.rejections
            .with_label_values(&[status.to_string().as_str()])
            .inc();
    }

    /// Counts a client connection opened on `listener`, until [`Metrics::connection_closed`].
    pub fn connection_opened(&self, listener: &str) {
        self.connections_open.with_label_values(&[listener]).inc();
    }

    pub fn connection_closed(&self, listener: &str) {
        self.connections_open.with_label_values(&[listener]).dec();
    }

    /// Counts a connection refused on `listener` for being over its `max_connections`.
    pub fn connection_refused(&self, listener: &str) {
        self.connections_refused
            .with_label_values(&[listener])
            .inc();
    }

    /// Counts a client connection closed for slowness (`header`, `body` or `idle`).
    pub fn client_timeout(&self, kind: &str) {
        self.client_timeouts.with_label_values(&[kind]).inc();
    }

    /// Counts tasks taken over from instances whose leases ran out.
    pub fn lease_takeovers(&self, tasks: u64) {
        self.lease_takeovers.inc_by(tasks);
    }

    /// How many leases this instance held at its last renewal.
    pub fn leases_held(&self, tasks: usize) {
        self.leases_held.set(tasks as i64);
    }

    /// The store's pool, as read at a scrape.
    pub fn store_pool(&self, pool: store::PoolStatus) {
        for (state, n) in [("size", pool.size), ("idle", pool.idle), ("max", pool.max)] {
            self.store_pool.with_label_values(&[state]).set(n as i64);
        }
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// A request in flight; dropping it ends the request.
pub struct InFlight(Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.dec();
        if self.0.in_flight.get() <= 0 {
            self.0.idle.notify_waiters();
        }
    }
}
