//! Binding the listeners ourselves and handing the sockets to pingora.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::IntoRawFd;
use std::sync::Arc;

use pingora::apps::http_app::HttpServer;
use pingora::apps::HttpServerOptions;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::ListenerConfig;
use pingora::protocols::l4::stream::L4BufferSettings;
use pingora::server::configuration::ServerConf;
use pingora::server::ListenFds;
use pingora::services::listening::Service;
use pingora::services::Service as ServiceTrait;

use super::connections::{Guarded, Limits};
use super::StartError;
use crate::admin::Admin;
use crate::config::Listener;
use crate::proxy::Proxy;
use crate::reload::Reloader;
use crate::state::State;

/// How much of an answer to a client is gathered before it is sent. pingora's default (1 460
/// bytes, one segment) splits any answer over about 1.2 kB into two sends, the header and then
/// the body: two system calls, two segments, and a client woken twice. An answer of up to 8 KiB
/// now leaves in one write; a larger one leaves as before (the header, then the body). Only
/// bodies of known length are gathered (pingora flushes the header of a chunked or
/// close-delimited answer, and each of its chunks, at once), and such a body is a document its
/// reader parses whole, so holding back its first 8 KiB until more arrives or it ends delays
/// nothing a client can use. The cost is 8 KiB per client connection, allocated at the accept
/// and resident once written (16 KiB measured +16 MiB of peak RSS at 1 024 connections).
const CLIENT_WRITE_BUFFER: usize = 8 * 1024;

pub struct Bound {
    pub services: Vec<Box<dyn ServiceTrait>>,
    pub proxy_addrs: Vec<SocketAddr>,
    pub admin_addr: SocketAddr,
}

/// Binds the admin and proxy listeners and builds the pingora services that will serve them.
///
/// Listeners that differ in `h2c` get separate proxy applications, because pingora sets
/// cleartext HTTP/2 per application. Each listener is a service of its own, its application
/// shared with the others of its group (so they share one upstream connection pool) behind the
/// listener's own connection limits ([`Guarded`]).
pub fn bind_all(
    state: &Arc<State>,
    reloader: &Arc<Reloader>,
    conf: &Arc<ServerConf>,
    fds: &ListenFds,
) -> Result<Bound, StartError> {
    let mut services: Vec<Box<dyn ServiceTrait>> = Vec::new();

    let live = state.live();
    let admin_addr = bind(live.config.admin.address, fds)?;
    let mut admin = Service::new(
        "admin".to_string(),
        HttpServer::new_app(Admin::new(state.clone(), reloader.clone())),
    );
    admin.add_tcp(&admin_addr.to_string());
    services.push(Box::new(admin));

    let mut proxy_addrs = Vec::new();
    for h2c in [true, false] {
        let group: Vec<(usize, &Listener)> = live
            .config
            .listeners
            .iter()
            .enumerate()
            .filter(|(_, l)| l.h2c == h2c)
            .collect();
        if group.is_empty() {
            continue;
        }
        let server = &live.config.server;
        let mut app = pingora::proxy::http_proxy(conf, Proxy::new(state.clone()));
        let mut options = HttpServerOptions::default();
        options.h2c = h2c;
        options.h2_idle_timeout = Some(server.keepalive_timeout);
        app.server_options = Some(options);
        let app = Arc::new(app);
        let limits = Limits {
            header_timeout: server.client_header_timeout,
            keepalive_timeout: server.keepalive_timeout,
            max_connections: server.max_connections,
        };
        for (index, l) in group {
            let addr = bind(l.address, fds)?;
            let guarded =
                Guarded::new(app.clone(), limits, addr.to_string(), state.metrics.clone());
            let mut service = Service::new(format!("proxy {addr}"), guarded);
            // A plain-HTTP connection reads straight into the buffer of the request it reads.
            // pingora's 64 KiB read buffer only copied it once more, and every connection
            // zero-filled its own at the accept: free on fresh memory, but once the allocator
            // recycles memory, 64 KiB resident per idle connection (2 000 of them: +128 MiB).
            // Under TLS it gathers the small reads of TLS records, and stays.
            let mut buffers = L4BufferSettings::default().write(CLIENT_WRITE_BUFFER);
            if l.tls.is_none() {
                buffers = buffers.read(0);
            }
            let endpoint = ListenerConfig::tcp(addr.to_string()).l4_buffer(buffers);
            match &l.tls {
                None => service.add_listener(endpoint),
                Some(files) => {
                    let tls_error = |detail: String| StartError::Tls {
                        address: addr,
                        detail,
                    };
                    let cert = files.certificate.to_string_lossy();
                    let key = files.key.to_string_lossy();
                    let mut settings = TlsSettings::intermediate(&cert, &key)
                        .map_err(|e| tls_error(e.to_string()))?;
                    settings.enable_h2();
                    service.add_listener(endpoint.tls(settings));
                }
            }
            proxy_addrs.push((index, addr));
            services.push(Box::new(service));
        }
    }
    // Report addresses in config order, whichever service serves them.
    proxy_addrs.sort_by_key(|(index, _)| *index);
    Ok(Bound {
        services,
        proxy_addrs: proxy_addrs.into_iter().map(|(_, addr)| addr).collect(),
        admin_addr,
    })
}

/// Binds one address and records the socket in pingora's table under the address actually bound,
/// which pingora then listens on instead of binding again.
fn bind(address: SocketAddr, fds: &ListenFds) -> Result<SocketAddr, StartError> {
    let bind_error = |source| StartError::Bind { address, source };
    let listener = TcpListener::bind(address).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let actual = listener.local_addr().map_err(bind_error)?;
    fds.lock().add(actual.to_string(), listener.into_raw_fd());
    Ok(actual)
}
