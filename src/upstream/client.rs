//! Calling an upstream from the engine: one request, the whole (bounded) answer, through
//! pingora's connector — the same connection pool, TLS and timeouts as proxied requests.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::connectors::ConnectorOptions;
use pingora::http::RequestHeader;
use pingora::protocols::http::client::HttpSession;
use pingora::protocols::http::v1::client::{http_req_header_to_wire, HttpSession as HttpSessionV1};
use pingora::upstreams::peer::HttpPeer;
use tokio::io::AsyncWriteExt;

use super::error::{FetchError, UpstreamError};
use super::peers::UpstreamState;
use crate::config::Url;

/// The largest upstream answer the engine reads.
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);

/// An upstream's answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Time spent on the exchange.
    pub took: Duration,
}

/// Sends requests to upstreams.
pub struct Client {
    connector: Connector,
}

impl Client {
    /// A client keeping up to `idle_pool` idle connections (over all upstreams) for reuse. A
    /// pool smaller than the calls in flight closes connections that the next calls reopen.
    pub fn new(idle_pool: usize) -> Client {
        Client {
            connector: Connector::new(Some(ConnectorOptions::new(idle_pool.max(1)))),
        }
    }

    /// Sends one request to `upstream` and reads the whole answer. A pooled connection the
    /// upstream had already closed is retried once on a new one. The upstream's timeouts apply,
    /// `total_timeout` to the whole exchange.
    pub async fn call(
        &self,
        upstream: &UpstreamState,
        request: RequestHeader,
        body: Option<Bytes>,
    ) -> Result<Answer, UpstreamError> {
        let started = Instant::now();
        let total = upstream.config.total_timeout;
        let peer = upstream.peer().await?;
        let exchange = async {
            match self.exchange(&peer, request.clone(), body.clone()).await {
                Err((e, true)) if e.retry() => self
                    .exchange(&peer, request, body)
                    .await
                    .map_err(|(e, _)| e),
                other => other.map_err(|(e, _)| e),
            }
        };
        let result = match tokio::time::timeout(total, exchange).await {
            Ok(r) => r,
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    upstream: upstream.config.name.clone(),
                    detail: format!("no complete answer within total_timeout ({total:?})"),
                })
            }
        };
        let (status, headers, body) = result.map_err(|mut e| {
            // Everything on this connection is the upstream's doing (pingora leaves the source
            // of a broken read or write unset), and its address stays in the log.
            e.as_up();
            tracing::warn!(upstream = %upstream.config.name, "calling the upstream failed: {e}");
            UpstreamError::from_pingora(&e, &upstream.config.name).unwrap_or_else(|| {
                UpstreamError::Failed {
                    upstream: upstream.config.name.clone(),
                    detail: "the connection broke".to_string(),
                }
            })
        })?;
        Ok(Answer {
            status,
            headers,
            body,
            took: started.elapsed(),
        })
    }

    /// One attempt. The error says whether the connection was a reused one (then worth a retry).
    async fn exchange(
        &self,
        peer: &HttpPeer,
        request: RequestHeader,
        body: Option<Bytes>,
    ) -> Result<(u16, Vec<(String, String)>, Bytes), (Box<pingora::Error>, bool)> {
        // Boxed: pingora's connect (TCP, then TLS) is a future of ≈ 9 KB, which every future
        // awaiting this one would otherwise carry inline, and copy at each move, even when a
        // pooled connection makes it return at once (bench/README.md, "Where the CPU went").
        let (mut session, reused) = Box::pin(self.connector.get_http_session(peer))
            .await
            .map_err(|e| (e, false))?;
        // A pooled session keeps no timeouts of its own: each exchange sets the peer's.
        session.set_read_timeout(peer.options.read_timeout);
        session.set_write_timeout(peer.options.write_timeout);
        let fail = |mut e: Box<pingora::Error>| {
            e.retry.decide_reuse(reused);
            (e, reused)
        };
        let mut session = match (session, body) {
            (HttpSession::H1(h1), Some(b)) => {
                HttpSession::H1(send_whole(h1, &request, &b, peer).await.map_err(fail)?)
            }
            (mut session, body) => {
                session
                    .write_request_header(Box::new(request))
                    .await
                    .map_err(fail)?;
                if let Some(b) = body {
                    session.write_request_body(b, true).await.map_err(fail)?;
                }
                session.finish_request_body().await.map_err(fail)?;
                session
            }
        };
        session.read_response_header().await.map_err(fail)?;
        let (status, headers) = match session.response_header() {
            Some(h) => (
                h.status.as_u16(),
                h.headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_string(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect(),
            ),
            None => {
                return Err((
                    pingora::Error::explain(
                        pingora::ErrorType::InvalidHTTPHeader,
                        "no response header",
                    )
                    .into_up(),
                    false,
                ))
            }
        };
        let mut body = BytesMut::new();
        while let Some(chunk) = session.read_response_body().await.map_err(fail)? {
            if body.len() + chunk.len() > MAX_RESPONSE {
                return Err((
                    pingora::Error::explain(
                        pingora::ErrorType::InvalidHTTPHeader,
                        format!("the answer is larger than {MAX_RESPONSE} bytes"),
                    )
                    .into_up(),
                    false,
                ));
            }
            body.extend_from_slice(&chunk);
        }
        self.connector
            .release_http_session(session, peer, Some(POOL_IDLE))
            .await;
        Ok((status, headers, body.freeze()))
    }
}

/// Sends an HTTP/1.1 request with its body in one write, and returns the session that reads the
/// answer. Pingora's session flushes the request header before the body is written, so a
/// request with a body left in two sends (two TCP segments, the upstream woken twice): on both
/// cores at 256 concurrent creates, one send in four of the engine's, ≈ 4 % of a create's CPU.
async fn send_whole(
    h1: HttpSessionV1,
    request: &RequestHeader,
    body: &[u8],
    peer: &HttpPeer,
) -> Result<HttpSessionV1, Box<pingora::Error>> {
    let read_timeout = h1.read_timeout;
    let write_timeout = h1.write_timeout;
    let mut wire = http_req_header_to_wire(request).ok_or_else(|| {
        pingora::Error::explain(
            pingora::ErrorType::InvalidHTTPHeader,
            "the request line holds a forbidden byte",
        )
    })?;
    wire.extend_from_slice(body);
    let mut stream = h1.into_inner();
    let write = async {
        stream.write_all(&wire).await?;
        stream.flush().await
    };
    let written = match write_timeout {
        Some(t) => tokio::time::timeout(t, write)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
        None => write.await,
    };
    if let Err(e) = written {
        let kind = if e.kind() == std::io::ErrorKind::TimedOut {
            pingora::ErrorType::WriteTimedout
        } else {
            pingora::ErrorType::WriteError
        };
        let mut e = pingora::Error::because(kind, "writing the request", e);
        // A pooled connection the upstream has closed fails here: worth one more try on a new one.
        e.retry = pingora::RetryType::ReusedOnly;
        return Err(e);
    }
    let mut h1 = HttpSessionV1::new_with_options(stream, peer);
    h1.read_timeout = read_timeout;
    h1.write_timeout = write_timeout;
    Ok(h1)
}

/// A peer for `url` (its host resolved now) whose connect and read waits are bounded by
/// `timeout`.
async fn peer_for(url: &Url, timeout: Duration) -> Result<HttpPeer, FetchError> {
    let addr = tokio::net::lookup_host((url.host.as_str(), url.port))
        .await
        .map_err(|e| FetchError::Resolve {
            host: url.host.clone(),
            detail: e.to_string(),
        })?
        .next()
        .ok_or_else(|| FetchError::NoAddress(url.host.clone()))?;
    let mut peer = HttpPeer::new(addr, url.tls, url.host.clone());
    peer.options.connection_timeout = Some(timeout);
    peer.options.read_timeout = Some(timeout);
    Ok(peer)
}

impl Client {
    /// GETs `url` (at most 1 MiB) within `timeout`; returns the status and body.
    pub async fn fetch(&self, url: &Url, timeout: Duration) -> Result<(u16, Bytes), FetchError> {
        let work = async {
            let peer = peer_for(url, timeout).await?;
            let mut req = RequestHeader::build(http::Method::GET, url.target.as_bytes(), None)
                .map_err(request_error)?;
            req.insert_header(http::header::HOST, url.host.as_str())
                .map_err(request_error)?;
            req.insert_header(http::header::ACCEPT, "application/json")
                .map_err(request_error)?;
            let (status, _, body) = self
                .exchange(&peer, req, None)
                .await
                .map_err(|(e, _)| FetchError::Exchange(e.to_string()))?;
            Ok((status, body))
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| FetchError::Timeout(timeout))?
    }
}

/// Whether a POST may go out a second time, on a new connection, when the pooled connection
/// it went out on breaks before the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// It changes nothing, or the service answers a repeat as such (a verification; a create
    /// whose duplicate is refused with 409): sent again.
    Allowed,
    /// It moves money and a repeat would too, or fail for having done so: a connection that
    /// broke may have carried it to the service first, so it is never sent twice
    /// ([`FetchError::may_have_arrived`] tells the caller the outcome is unknown).
    Never,
}

impl Client {
    /// POSTs `body` as JSON to `url` with `headers` besides, within `timeout`; returns the
    /// status and body (at most [`MAX_RESPONSE`]). Used for services other than the routes'
    /// upstreams (a payment service), on connections of the same pool.
    pub async fn post_json(
        &self,
        url: &Url,
        headers: &[(&str, &str)],
        body: &serde_json::Value,
        timeout: Duration,
        resend: Resend,
    ) -> Result<(u16, Bytes), FetchError> {
        let work = async {
            let mut peer = peer_for(url, timeout).await?;
            peer.options.write_timeout = Some(timeout);
            let payload = Bytes::from(
                serde_json::to_vec(body).map_err(|e| FetchError::Request(e.to_string()))?,
            );
            let mut req = RequestHeader::build(http::Method::POST, url.target.as_bytes(), None)
                .map_err(request_error)?;
            let length = payload.len().to_string();
            for (name, value) in [
                ("host", url.host.as_str()),
                ("accept", "application/json"),
                ("content-type", "application/json"),
                ("content-length", length.as_str()),
            ]
            .into_iter()
            .chain(headers.iter().copied())
            {
                req.insert_header(name.to_string(), value)
                    .map_err(request_error)?;
            }
            let attempt = |req: RequestHeader| self.exchange(&peer, req, Some(payload.clone()));
            // A pooled connection the service had closed: once more on a new one.
            let (status, _, body) = match attempt(req.clone()).await {
                Err((e, true)) if e.retry() && resend == Resend::Allowed => attempt(req).await,
                other => other,
            }
            .map_err(|(e, _)| {
                if unsent(&e) {
                    FetchError::Connect(e.to_string())
                } else {
                    FetchError::Exchange(e.to_string())
                }
            })?;
            Ok((status, body))
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| FetchError::Timeout(timeout))?
    }
}

/// Whether `e` stopped the exchange before its request was sent: no connection was made.
fn unsent(e: &pingora::Error) -> bool {
    use pingora::ErrorType::*;
    matches!(
        e.etype(),
        ConnectTimedout
            | ConnectRefused
            | ConnectNoRoute
            | ConnectError
            | BindError
            | TLSHandshakeFailure
            | TLSHandshakeTimedout
            | InvalidCert
            | HandshakeError
            | SocketError
    )
}

fn request_error(e: Box<pingora::Error>) -> FetchError {
    FetchError::Request(e.to_string())
}
