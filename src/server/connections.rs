//! Client connections before pingora reads a request from them: how many one listener holds,
//! how long a request header may take to arrive, how long a connection may idle between two
//! requests.
//!
//! pingora 0.9 bounds none of these. Its header read times out per read (after 60 s of silence),
//! so a client dripping a byte a second holds its connection, and the memory behind it, for
//! ever; and it accepts as many connections as the process has file descriptors.
//! [`Guarded`] wraps pingora's proxy application, one per listener: it counts the listener's
//! connections and refuses one over the limit, and for every HTTP/1 request it reads the header
//! itself, under a deadline, then hands those bytes to pingora as a pipelined prefix, which
//! pingora parses without reading the socket again. HTTP/2 connections (h2c, ALPN `h2`) go to
//! pingora as they are; its `h2_idle_timeout` closes them when idle. Bytes that cannot open a
//! request (a TLS handshake on a plain-HTTP listener, binary noise: see [`opening`]) are answered
//! 400 as soon as they arrive, and the connection is closed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, HttpServerOptions, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::opening::{opening, Opening, H2_PREFACE};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::proxy::respond;

/// One byte past pingora's own limit on a request header, so that pingora refuses a longer one
/// (400) as soon as it gets it, instead of reading on at its own pace.
const MAX_HEADER: usize = 1_048_576;
/// How long a refused connection is drained after its answer, so that the client reads the 503
/// rather than a reset caused by the request bytes it had already sent.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// The `[server]` settings that bound client connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub max_connections: usize,
}

/// One listener's application: pingora's (`A`, shared by the listeners of one service group)
/// behind the limits.
pub struct Guarded<A> {
    inner: Arc<A>,
    limits: Limits,
    /// The listener's address as the metrics label it.
    listener: String,
    open: AtomicUsize,
    metrics: Arc<Metrics>,
}

impl<A> Guarded<A> {
    pub fn new(inner: Arc<A>, limits: Limits, listener: String, metrics: Arc<Metrics>) -> Self {
        Guarded {
            inner,
            limits,
            listener,
            open: AtomicUsize::new(0),
            metrics,
        }
    }
}

/// Which HTTP a connection speaks.
enum Protocol {
    H1,
    H2,
}

/// How reading one request header ended.
enum Head {
    /// A whole header (and whatever of the body came with it).
    Complete(BytesMut),
    /// The client closed the connection, the server is shutting down, or a read failed.
    Closed,
    /// No byte of a request came within the wait.
    Idle,
    /// Some of a header came, but not all of it before the deadline.
    TooSlow,
    /// What came cannot open a request ([`Opening::Tls`] or [`Opening::NotHttp`]).
    NotHttp(Opening),
}

/// Counts a connection as open on its listener until dropped.
struct Open<'a, A>(&'a Guarded<A>);

impl<A> Drop for Open<'_, A> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.metrics.connection_closed(&self.0.listener);
    }
}

#[async_trait]
impl<A> ServerApp for Guarded<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let open = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.metrics.connection_opened(&self.listener);
        let _open = Open(self.as_ref());
        if open > self.limits.max_connections {
            self.metrics.connection_refused(&self.listener);
            refuse(&mut stream, &ProxyError::TooManyConnections, true).await;
            return None;
        }
        // The first request's header must be in within the header timeout of the opening.
        let deadline = Instant::now() + self.limits.header_timeout;
        match self.protocol(&mut stream, deadline).await {
            // pingora's own path: it finds HTTP/2 again and serves it.
            Ok(Protocol::H2) => return self.inner.process_new(stream, shutdown).await,
            Ok(Protocol::H1) => self.serve_h1(stream, deadline, shutdown).await,
            Err(ended) => self.end(&mut stream, ended).await,
        }
        // Every request of the connection was served above: nothing goes back to pingora.
        None
    }

    async fn cleanup(&self) {
        self.inner.http_cleanup().await;
    }
}

impl<A> Guarded<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    fn options(&self) -> Option<&HttpServerOptions> {
        self.inner.server_options()
    }

    /// Which HTTP the connection speaks: HTTP/2 on ALPN `h2` over TLS, or on a cleartext
    /// listener that allows h2c when it opens with the preface (as pingora tells them apart).
    async fn protocol(&self, stream: &mut Stream, deadline: Instant) -> Result<Protocol, Head> {
        if stream.get_ssl_digest().is_some() {
            let h2 = matches!(
                stream.selected_alpn_proto(),
                Some(pingora::protocols::ALPN::H2)
            );
            return Ok(if h2 { Protocol::H2 } else { Protocol::H1 });
        }
        if !self.options().is_some_and(|o| o.h2c) {
            return Ok(Protocol::H1);
        }
        // pingora's peek waits for as many bytes as it is asked for (for ever, on a slowloris),
        // and what it has read is lost if the wait is cut short: then the connection can only be
        // closed. Asked for one byte, then four, then the whole preface, it tells an HTTP/1
        // request (or bytes that are not HTTP at all) as soon as they part from the preface.
        let mut buf = [0u8; H2_PREFACE.len()];
        for n in [1, 4, H2_PREFACE.len()] {
            match tokio::time::timeout_at(deadline, stream.try_peek(&mut buf[..n])).await {
                Ok(Ok(_)) if buf[..n] == H2_PREFACE[..n] => {}
                Ok(Ok(_)) => return Ok(Protocol::H1),
                Ok(Err(_)) => return Err(Head::Closed),
                Err(_) if n == 1 => return Err(Head::Idle),
                Err(_) => return Err(Head::TooSlow),
            }
        }
        Ok(Protocol::H2)
    }

    /// Ends a connection on which no (further) request came whole: closed as it is, answered
    /// 408 when a header was on its way, or 400 when what came cannot be HTTP.
    async fn end(&self, stream: &mut Stream, ended: Head) {
        match ended {
            Head::Complete(_) | Head::Closed => {}
            Head::Idle => self.metrics.client_timeout("idle"),
            Head::TooSlow => {
                self.metrics.client_timeout("header");
                refuse(stream, &ProxyError::ClientTimeout, false).await;
            }
            Head::NotHttp(what) => {
                let err = if what == Opening::Tls && stream.get_ssl_digest().is_none() {
                    tracing::warn!(
                        listener = %self.listener,
                        "TLS handshake on a plain-HTTP listener: answered 400 and closed"
                    );
                    ProxyError::BadRequest("a TLS handshake on a plain-HTTP listener".to_string())
                } else {
                    tracing::debug!(listener = %self.listener, "bytes that are not HTTP: answered 400 and closed");
                    ProxyError::BadRequest("the request is not HTTP".to_string())
                };
                // The client may still be sending: the rest is read for a moment, so that the
                // answer is not lost to a reset.
                refuse(stream, &err, true).await;
            }
        }
    }

    /// Serves HTTP/1 requests one after the other until the connection ends.
    async fn serve_h1(&self, mut stream: Stream, first: Instant, shutdown: &ShutdownWatch) {
        let limits = self.limits;
        let mut kept_alive = false;
        let mut settings: Option<HttpPersistentSettings> = None;
        loop {
            // A new connection's first header must be whole by `first`; on a connection kept
            // alive, the next request must start within the keep-alive timeout, and its header
            // be whole within the header timeout of its first byte.
            let (first_byte, whole) = if kept_alive {
                (Instant::now() + limits.keepalive_timeout, None)
            } else {
                (first, Some(first))
            };
            let head = read_head(
                &mut stream,
                first_byte,
                whole,
                limits.header_timeout,
                shutdown,
            );
            let prefix = match head.await {
                Head::Complete(prefix) => prefix,
                ended => return self.end(&mut stream, ended).await,
            };
            let mut session = ServerSession::new_http1(stream);
            match settings.take() {
                Some(kept) => kept.apply_to_session(&mut session),
                None => {
                    // Whole seconds, as pingora counts them (0 would mean "for ever"): to
                    // pingora it only says the connection may be kept; the wait for the next
                    // request is ours.
                    let secs = limits.keepalive_timeout.as_secs().max(1);
                    session.set_keepalive(Some(secs));
                    session.set_keepalive_reuses_remaining(
                        self.options().and_then(|o| o.keepalive_request_limit),
                    );
                }
            }
            if *shutdown.borrow() {
                session.set_keepalive(None);
            }
            session.set_pipelined_prefix(prefix);
            let reused = self.inner.process_new_http(session, shutdown).await;
            let Some((next, kept)) = reused.map(|r| r.consume()) else {
                return;
            };
            stream = next;
            settings = kept;
            kept_alive = true;
        }
    }
}

/// Reads one request header: its first byte by `first_byte`, all of it by `whole` (when it is
/// set) or within `header_timeout` of its first byte.
async fn read_head(
    stream: &mut Stream,
    first_byte: Instant,
    whole: Option<Instant>,
    header_timeout: Duration,
    shutdown: &ShutdownWatch,
) -> Head {
    let mut shutdown = shutdown.clone();
    let mut buf = BytesMut::with_capacity(4096);
    let mut deadline = first_byte;
    let mut opened = Opening::Pending;
    loop {
        let before = buf.len();
        let idle = before == 0;
        let read = tokio::select! {
            read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)) => read,
            // Between requests a stopping server closes the connection; within one it waits.
            _ = shutdown.wait_for(|stop| *stop), if idle => return Head::Closed,
        };
        match read {
            Err(_) if idle => return Head::Idle,
            Err(_) => return Head::TooSlow,
            Ok(Err(_)) | Ok(Ok(0)) => return Head::Closed,
            Ok(Ok(_)) if idle => {
                deadline = whole.unwrap_or_else(|| Instant::now() + header_timeout);
            }
            Ok(Ok(_)) => {}
        }
        if opened == Opening::Pending {
            opened = opening(&buf);
            if matches!(opened, Opening::Tls | Opening::NotHttp) {
                return Head::NotHttp(opened);
            }
        }
        if header_ends(&buf, before) || buf.len() >= MAX_HEADER {
            return Head::Complete(buf);
        }
    }
}

/// Whether `buf` holds the blank line ending a header, looking only at what the last read
/// (from `from` on) may have completed. httparse also takes a bare LF as a line end.
fn header_ends(buf: &[u8], from: usize) -> bool {
    let start = from.saturating_sub(3);
    let tail = &buf[start..];
    tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n")
}

/// Answers `err` on a connection pingora never saw a request on, and closes it. With `drain`,
/// reads what the client sends for a moment first: closing a socket with unread bytes resets
/// it, and the reset can reach the client before the answer does.
async fn refuse(stream: &mut Stream, err: &ProxyError, drain: bool) {
    let answer = respond::connection_answer(err);
    if stream.write_all(&answer).await.is_err() || stream.flush().await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    if drain {
        let mut sink = [0u8; 4096];
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::header_ends;

    #[test]
    fn a_header_ends_at_its_blank_line_even_across_reads() {
        assert!(header_ends(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0));
        assert!(header_ends(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 26));
        assert!(header_ends(b"GET / HTTP/1.1\nHost: a\n\n", 20));
        assert!(!header_ends(b"GET / HTTP/1.1\r\nHost: a\r\n", 0));
    }
}
