//! Running the proxy: binding the listeners, running pingora's services on a tokio runtime of our
//! own, and shutting down gracefully.
//!
//! interlingua does not use pingora's `Server` (which owns signals, daemonising and the process
//! exit, and sleeps its whole grace period): it binds every listener itself, so that an address
//! with port 0 works and reports the port it got, hands the sockets to pingora's listening
//! services through a file-descriptor table, and on shutdown waits only as long as requests are
//! actually in flight.

mod connections;
mod listeners;
mod opening;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::server::configuration::ServerConf;
use pingora::server::{Fds, ListenFds};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::reload::{self, Reloader};
use crate::setup::Setup;
use crate::setup::Source;
use crate::state::State;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot create the data directory `{path}`: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set up TLS for {address}: {detail}")]
    Tls { address: SocketAddr, detail: String },
    #[error("cannot open the task store: {0}")]
    Store(store::StoreError),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

/// A running interlingua: listeners bound, services accepting.
pub struct Server {
    runtime: Runtime,
    state: Arc<State>,
    reloader: Arc<Reloader>,
    proxy_addrs: Vec<SocketAddr>,
    admin_addr: SocketAddr,
    shutdown: ShutdownHandle,
    stop_rx: watch::Receiver<Stop>,
    services: Vec<tokio::task::JoinHandle<()>>,
}

/// A server's parts, before the runtime that runs them joins them.
struct Started {
    state: Arc<State>,
    reloader: Arc<Reloader>,
    proxy_addrs: Vec<SocketAddr>,
    admin_addr: SocketAddr,
    shutdown: ShutdownHandle,
    stop_rx: watch::Receiver<Stop>,
    services: Vec<tokio::task::JoinHandle<()>>,
}

/// How a server was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Running,
    /// Stop accepting, let in-flight requests finish within the grace period.
    Graceful,
    /// Stop waiting for in-flight requests.
    Now,
}

/// Asks a running server to stop. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct ShutdownHandle {
    stop: Arc<watch::Sender<Stop>>,
}

impl ShutdownHandle {
    /// Begins a graceful shutdown; a second call ends the wait for in-flight requests.
    pub fn shutdown(&self) {
        self.stop.send_modify(|s| {
            *s = match s {
                Stop::Running => Stop::Graceful,
                Stop::Graceful | Stop::Now => Stop::Now,
            }
        });
    }
}

/// What happened at shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Requests still in flight when the server stopped waiting (0 after a clean drain).
    pub abandoned: i64,
    pub waited: Duration,
}

impl Server {
    /// Binds every listener and starts serving. Returns once the sockets are bound: connections
    /// made after this returns are accepted. May be called from inside another tokio runtime
    /// (it never blocks on its own).
    pub fn start(setup: Setup) -> Result<Server, StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(setup.config.server.threads)
            .thread_name("interlingua")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        match Server::start_on(&runtime, setup) {
            Ok(started) => Ok(Server {
                runtime,
                state: started.state,
                reloader: started.reloader,
                proxy_addrs: started.proxy_addrs,
                admin_addr: started.admin_addr,
                shutdown: started.shutdown,
                stop_rx: started.stop_rx,
                services: started.services,
            }),
            Err(e) => {
                // Dropping a runtime may block, which is not allowed inside another runtime.
                runtime.shutdown_background();
                Err(e)
            }
        }
    }

    fn start_on(runtime: &Runtime, setup: Setup) -> Result<Started, StartError> {
        let Setup {
            config,
            dialects,
            source,
            digest,
        } = setup;
        std::fs::create_dir_all(&config.server.data_dir).map_err(|source| StartError::DataDir {
            path: config.server.data_dir.display().to_string(),
            source,
        })?;

        let threads = config.server.threads;
        let upstream_keepalive = config.server.upstream_keepalive;
        // Opened on the server's own runtime (PostgreSQL's pool lives on it); the caller may be
        // inside another runtime, so it waits on a channel rather than `block_on`.
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        let to_open = config.clone();
        runtime.spawn(async move {
            let _ = opened_tx.send(crate::state::open_store(&to_open).await);
        });
        let store = opened_rx
            .recv()
            .map_err(|_| {
                StartError::Store(store::StoreError::Backend(
                    "the runtime stopped while opening it".into(),
                ))
            })?
            .map_err(StartError::Store)?;
        let state = State::new(config, dialects, store).map_err(StartError::State)?;
        let reloader = Reloader::new(state.clone(), source, digest);
        let fds: ListenFds = Arc::new(parking_lot::Mutex::new(Fds::new()));
        let pingora_conf = Arc::new(ServerConf {
            threads,
            upstream_keepalive_pool_size: upstream_keepalive,
            ..ServerConf::default()
        });
        let bound = listeners::bind_all(&state, &reloader, &pingora_conf, &fds)?;
        // A config given as text (the embedded default, a test's) has no file to follow.
        if matches!(reloader.source(), Source::File(_)) {
            reload::watch::spawn(reloader.clone(), runtime.handle());
        }

        let (stop_tx, stop_rx) = watch::channel(Stop::Running);
        let (pingora_tx, pingora_rx) = watch::channel(false);
        // Requests wait in the listen backlog until the watcher has listed the tasks an earlier
        // process left unfinished (see `Watcher::run`).
        let (listed_tx, listed_rx) = watch::channel(false);
        runtime.spawn(state.watcher.clone().run(listed_tx));
        let mut services = Vec::new();
        for mut service in bound.services {
            let fds = fds.clone();
            let shutdown = pingora_rx.clone();
            let mut listed = listed_rx.clone();
            services.push(runtime.spawn(async move {
                // An error means the watcher is gone: serve anyway.
                let _ = listed.wait_for(|l| *l).await;
                service.start_service(Some(fds), shutdown, 1).await;
            }));
        }
        // pingora's listeners stop accepting when this flips; kept apart from `Stop` so that a
        // second signal (Stop::Now) does not need pingora to know about it.
        let mut stop_watch = stop_rx.clone();
        runtime.spawn(async move {
            let _ = stop_watch.wait_for(|s| *s != Stop::Running).await;
            let _ = pingora_tx.send(true);
        });

        let resolving = state.clone();
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(crate::upstream::RESOLVE_EVERY);
            loop {
                tick.tick().await;
                // The live config's upstreams, whichever it is by now.
                let upstreams = resolving.live().upstreams.clone();
                upstreams.resolve_all().await;
            }
        });
        let housekeeping = state.clone();
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
            loop {
                tick.tick().await;
                for l in &housekeeping.live().limits {
                    l.forget_idle();
                }
            }
        });

        tracing::info!(
            proxy = ?bound.proxy_addrs,
            admin = %bound.admin_addr,
            config = %state.live().config.origin,
            routes = state.live().config.routes.len(),
            threads,
            "interlingua listening"
        );
        Ok(Started {
            state,
            reloader,
            proxy_addrs: bound.proxy_addrs,
            admin_addr: bound.admin_addr,
            shutdown: ShutdownHandle {
                stop: Arc::new(stop_tx),
            },
            stop_rx,
            services,
        })
    }

    /// The proxy listeners' addresses, in config order, with the ports actually bound.
    pub fn proxy_addrs(&self) -> &[SocketAddr] {
        &self.proxy_addrs
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// What reloads the server's config (SIGHUP, the admin API, file changes).
    pub fn reloader(&self) -> &Arc<Reloader> {
        &self.reloader
    }

    /// The server's shared state (its store, engine, metrics).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// A handle that stops this server.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// The runtime the server runs on, to spawn helpers (signal handlers, say) beside it.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Serves until a shutdown is asked for, then stops accepting, waits for in-flight requests
    /// (at most the configured grace period, or until a second shutdown request) and stops.
    /// Blocks the calling thread.
    pub fn run_until_stopped(self) -> ShutdownReport {
        let state = self.state.clone();
        let metrics = self.state.metrics.clone();
        let mut stop = self.stop_rx.clone();
        let services = self.services;
        let report = self.runtime.block_on(async move {
            let _ = stop.wait_for(|s| *s != Stop::Running).await;
            let started = Instant::now();
            // The grace period of the config live when the stop came (a reload may change it).
            let grace = state.live().config.server.grace_period;
            tracing::info!(
                in_flight = metrics.in_flight(),
                grace_period = %humantime::format_duration(grace),
                "shutting down: no new connections; waiting for in-flight requests"
            );
            for service in services {
                let _ = service.await;
            }
            tokio::select! {
                _ = metrics.wait_idle() => {}
                _ = tokio::time::sleep(grace.saturating_sub(started.elapsed())) => {}
                _ = stop.wait_for(|s| *s == Stop::Now) => {}
            }
            ShutdownReport {
                abandoned: metrics.in_flight().max(0),
                waited: started.elapsed(),
            }
        });
        // Other instances take this one's tasks at once rather than when its leases run out.
        let store = self.state.engine.store.clone();
        let handed = self.runtime.block_on(async move {
            tokio::time::timeout(Duration::from_secs(5), store.hand_back_leases()).await
        });
        match handed {
            Ok(Ok(n)) if n > 0 => {
                tracing::info!(tasks = n, "handed the leases of unfinished tasks back")
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!("cannot hand task leases back (they run out instead): {e}")
            }
            Err(_) => tracing::warn!(
                "the store did not take the task leases back in 5s (they run out instead)"
            ),
        }
        if report.abandoned > 0 {
            tracing::warn!(
                abandoned = report.abandoned,
                "stopped with requests still in flight"
            );
        } else {
            tracing::info!(
                waited_ms = report.waited.as_millis() as u64,
                "all requests finished; stopped"
            );
        }
        self.runtime.shutdown_timeout(Duration::from_millis(200));
        report
    }
}
