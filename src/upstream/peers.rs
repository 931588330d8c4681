//! Upstreams at run time: each one's resolved address, kept fresh in the background, and the
//! pingora peer a request is sent to.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use pingora::upstreams::peer::HttpPeer;

use super::error::UpstreamError;
use crate::config::Upstream;

/// How often host names are resolved again.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(30);
/// How long one resolution may take before it counts as failed.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle pooled upstream connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// One upstream and what is known of its address.
pub struct UpstreamState {
    pub config: Upstream,
    resolved: RwLock<Resolution>,
}

#[derive(Clone)]
enum Resolution {
    Pending,
    Ok(SocketAddr),
    Failed(String),
}

/// Every upstream of the configuration, in config order.
pub struct Upstreams {
    list: Vec<Arc<UpstreamState>>,
}

impl Upstreams {
    pub fn new(configs: &[Upstream]) -> Upstreams {
        Upstreams::carried(configs, None)
    }

    /// The upstreams of a reloaded config: one configured exactly as in `prev` is the same
    /// upstream (its resolved address kept); any other starts unresolved, as at start-up.
    pub fn carried(configs: &[Upstream], prev: Option<&Upstreams>) -> Upstreams {
        let list = configs
            .iter()
            .map(|c| {
                if let Some(same) = prev.and_then(|p| p.list.iter().find(|u| u.config == *c)) {
                    return same.clone();
                }
                let resolved = match c.host.parse::<IpAddr>() {
                    Ok(ip) => Resolution::Ok(SocketAddr::new(ip, c.port)),
                    Err(_) => Resolution::Pending,
                };
                Arc::new(UpstreamState {
                    config: c.clone(),
                    resolved: RwLock::new(resolved),
                })
            })
            .collect();
        Upstreams { list }
    }

    pub fn get(&self, index: usize) -> Option<&Arc<UpstreamState>> {
        self.list.get(index)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<UpstreamState>> {
        self.list.iter()
    }

    /// Resolves every host name once, all at the same time. IP literals need nothing.
    pub async fn resolve_all(&self) {
        let mut lookups = tokio::task::JoinSet::new();
        for u in &self.list {
            let u = u.clone();
            lookups.spawn(async move { u.resolve().await });
        }
        while lookups.join_next().await.is_some() {}
    }

    /// Problems that make the proxy not ready: upstreams without an address.
    pub fn readiness_problems(&self) -> Vec<String> {
        self.list
            .iter()
            .filter_map(|u| match &*u.resolved.read() {
                Resolution::Ok(_) => None,
                Resolution::Pending => {
                    Some(format!("upstream `{}`: not resolved yet", u.config.name))
                }
                Resolution::Failed(why) => Some(format!("upstream `{}`: {why}", u.config.name)),
            })
            .collect()
    }
}

impl UpstreamState {
    async fn resolve(&self) {
        if self.config.host.parse::<IpAddr>().is_ok() {
            return;
        }
        let authority = self.config.authority();
        let lookup =
            tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(authority.as_str()));
        let host = &self.config.host;
        let outcome = match lookup.await {
            Ok(Ok(mut addrs)) => match addrs.next() {
                Some(addr) => Resolution::Ok(addr),
                None => Resolution::Failed(format!("`{host}` resolves to no address")),
            },
            Ok(Err(e)) => Resolution::Failed(format!("cannot resolve `{host}`: {e}")),
            Err(_) => Resolution::Failed(format!(
                "resolving `{host}` took longer than {}s",
                RESOLVE_TIMEOUT.as_secs()
            )),
        };
        if let Resolution::Failed(why) = &outcome {
            tracing::warn!(upstream = %self.config.name, "{why}");
            // A failed refresh keeps the last good address: DNS hiccups should not cause outages.
            if matches!(&*self.resolved.read(), Resolution::Ok(_)) {
                return;
            }
        }
        *self.resolved.write() = outcome;
    }

    /// The upstream's address; one not resolved yet (the first request after start-up) is
    /// resolved now.
    async fn address(&self) -> Result<SocketAddr, UpstreamError> {
        let pending = matches!(&*self.resolved.read(), Resolution::Pending);
        if pending {
            self.resolve().await;
        }
        match &*self.resolved.read() {
            Resolution::Ok(addr) => Ok(*addr),
            Resolution::Pending => Err(self.failed("its address is not resolved yet")),
            Resolution::Failed(why) => Err(self.failed(why)),
        }
    }

    /// The peer for one request, with this upstream's timeouts. An upstream not resolved yet
    /// (the first request after start-up) is resolved now.
    pub async fn peer(&self) -> Result<Box<HttpPeer>, UpstreamError> {
        let addr = self.address().await?;
        let c = &self.config;
        let mut peer = HttpPeer::new(addr, c.tls, c.sni.clone());
        let o = &mut peer.options;
        o.connection_timeout = Some(c.connect_timeout);
        o.total_connection_timeout = Some(c.connect_timeout);
        // No single wait may outlast the whole exchange.
        let wait = c.read_timeout.min(c.total_timeout);
        o.read_timeout = Some(wait);
        o.write_timeout = Some(wait);
        o.idle_timeout = Some(POOL_IDLE);
        o.verify_cert = c.verify_certificate;
        o.verify_hostname = c.verify_certificate;
        Ok(Box::new(peer))
    }

    /// Whether a TCP connection to the upstream can be opened within its connect timeout.
    pub async fn probe(&self) -> Result<(), UpstreamError> {
        let addr = self.address().await?;
        match tokio::time::timeout(
            self.config.connect_timeout,
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.failed(&format!("cannot connect to {addr}: {e}"))),
            Err(_) => Err(UpstreamError::Timeout {
                upstream: self.config.name.clone(),
                detail: format!(
                    "no connection to {addr} within {:?}",
                    self.config.connect_timeout
                ),
            }),
        }
    }

    fn failed(&self, why: &str) -> UpstreamError {
        UpstreamError::Failed {
            upstream: self.config.name.clone(),
            detail: why.to_string(),
        }
    }
}
