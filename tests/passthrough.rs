//! Passthrough routes through the real proxy: what goes upstream and what comes back is exactly
//! what was sent, streamed, over kept-alive connections.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::{client, config, full, one_route, text, Proxy, Upstream, DEADLINE};
use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_path_query_and_headers_pass_through_unchanged() {
    let upstream = Upstream::start(|_req| async {
        Response::builder()
            .status(201)
            .header("x-upstream", "u1")
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .body(full("created"))
            .unwrap()
    })
    .await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");

    let resp = client()
        .patch(proxy.url("/agents/a%20b/tasks?x=1&y=%C3%A9&x=2"))
        .header("x-custom", "value with spaces")
        .header("x-multi", "one")
        .header("x-multi", "two")
        .header("authorization", "Bearer abc")
        .body("patch body")
        .send()
        .await
        .unwrap();

    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["x-upstream"], "u1");
    let cookies: Vec<_> = resp.headers().get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert_eq!(resp.text().await.unwrap(), "created");

    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.method, "PATCH");
    assert_eq!(req.target, "/agents/a%20b/tasks?x=1&y=%C3%A9&x=2");
    assert_eq!(req.header("x-custom").as_deref(), Some("value with spaces"));
    assert_eq!(req.header_all("x-multi"), ["one", "two"]);
    assert_eq!(req.header("authorization").as_deref(), Some("Bearer abc"));
    assert_eq!(req.header("host"), Some(proxy.addr.to_string()));
    assert_eq!(req.header("content-length").as_deref(), Some("10"));
}

/// A deterministic pseudo-random byte stream, so a corrupted or reordered byte is noticed.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_streamed_body_arrives_byte_for_byte_both_ways() {
    let upstream = Upstream::echo_whole_body().await;
    let proxy = Proxy::passthrough(upstream.addr, "", r#"max_body = "64MiB""#);
    let sent = pattern(12 * 1024 * 1024 + 7, 42);

    // Sent chunked, in uneven pieces, without a Content-Length.
    let pieces: Vec<Result<Bytes, std::io::Error>> = sent
        .chunks(64 * 1024 + 3)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(pieces));
    let resp = client()
        .post(proxy.url("/upload"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let got = resp.bytes().await.unwrap();
    assert_eq!(got.len(), sent.len());
    assert!(got[..] == sent[..], "the body came back altered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_without_waiting_for_the_whole_request() {
    // The upstream echoes as it reads. If the proxy buffered the request, the first echoed
    // piece could not arrive before the client sends the rest, and this test would time out.
    let upstream = Upstream::echo_body().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let body = reqwest::Body::wrap_stream(tokio_stream_from(rx));
    let request = tokio::spawn(client().post(proxy.url("/stream")).body(body).send());

    tx.send(Ok(Bytes::from_static(b"first piece;")))
        .await
        .unwrap();
    let resp = tokio::time::timeout(DEADLINE, request)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let first = tokio::time::timeout(DEADLINE, stream.next())
        .await
        .expect("the first piece was echoed before the request ended")
        .unwrap()
        .unwrap();
    assert_eq!(&first[..], b"first piece;");

    tx.send(Ok(Bytes::from_static(b"second piece")))
        .await
        .unwrap();
    drop(tx);
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap() {
        rest.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(rest, b"second piece");
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_pooled_and_reused() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    // Separate client connections, one after the other: the proxy reuses its one upstream
    // connection for all of them.
    for _ in 0..5 {
        let fresh = client();
        let resp = fresh.get(proxy.url("/x")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap(), "ok");
    }
    assert_eq!(upstream.seen().len(), 5);
    // pingora puts the connection back in its pool just after the client has its answer; on a
    // loaded machine the next request can come first and open a second one (seen in CI beside
    // compilers). Five requests over at most two connections is reuse; without a pool it is five.
    assert!(
        upstream.connections() <= 2,
        "pooled upstream connections: {} for 5 requests",
        upstream.connections()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_pool_keeps_upstream_keepalive_idle_connections_per_thread() {
    let release = Arc::new(Notify::new());
    let upstream = Upstream::held(release.clone(), "ok").await;
    // One per worker thread, and the test config runs two: two idle connections are kept.
    let proxy = Proxy::start(&config(
        "upstream_keepalive = 1",
        &one_route(upstream.addr, "", ""),
    ));
    let c = client();
    let done = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let (c, url, done) = (c.clone(), proxy.url("/x"), done.clone());
            tokio::spawn(async move {
                let body = c.get(url).send().await.unwrap().text().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
                body
            })
        })
        .collect();
    upstream.wait_for_requests(4).await;
    assert_eq!(
        upstream.connections(),
        4,
        "four requests at once, four connections"
    );
    Upstream::answer_one_at_a_time(&release, &done, 4).await;
    for call in calls {
        assert_eq!(call.await.unwrap(), "ok");
    }
    // Released to a pool of two: the two oldest are closed, two are kept.
    upstream.wait_for_the_surplus_closed(4, 2).await;
    release.notify_one();
    let resp = c.get(proxy.url("/y")).send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "ok");
    assert_eq!(upstream.connections(), 4, "a kept connection was reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connection_is_kept_alive_across_requests() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    for i in 0..3 {
        let req = format!("GET /k/{i} HTTP/1.1\r\nHost: test\r\n\r\n");
        conn.write_all(req.as_bytes()).await.unwrap();
        let (status, headers, body) = read_response(&mut conn).await;
        assert_eq!(status, 200, "request {i} on the same connection");
        assert!(!headers.to_ascii_lowercase().contains("connection: close"));
        assert_eq!(body, b"ok");
    }
    assert_eq!(upstream.seen().len(), 3);
}

/// Reads one HTTP/1.1 response with a Content-Length body from a raw connection.
async fn read_response(conn: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(DEADLINE, conn.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed before a response");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .expect("content-length");
    while buf.len() < head_end + len {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(DEADLINE, conn.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed inside a body");
        buf.extend_from_slice(&chunk[..n]);
    }
    (status, head, buf[head_end..head_end + len].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_http2_clients_are_served() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let h2 = reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let resp = h2.get(proxy.url("/h2")).send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().contains_key("x-request-id"));
    assert_eq!(resp.text().await.unwrap(), "ok");
    // The upstream is still spoken to in HTTP/1.1.
    assert_eq!(upstream.seen()[0].target, "/h2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_is_kept_when_sane_and_made_when_not() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let http = client();

    let kept = http
        .get(proxy.url("/id"))
        .header("x-request-id", "client-chosen-42")
        .send()
        .await
        .unwrap();
    assert_eq!(kept.headers()["x-request-id"], "client-chosen-42");

    let made = http.get(proxy.url("/id")).send().await.unwrap();
    let made_id = made.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(uuid_like(&made_id), "{made_id}");

    let replaced = http
        .get(proxy.url("/id"))
        .header("x-request-id", "has spaces in it")
        .send()
        .await
        .unwrap();
    let replaced_id = replaced.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(uuid_like(&replaced_id), "{replaced_id}");

    let seen = upstream.seen();
    assert_eq!(
        seen[0].header("x-request-id").as_deref(),
        Some("client-chosen-42")
    );
    assert_eq!(seen[1].header("x-request-id"), Some(made_id));
    assert_eq!(seen[2].header("x-request-id"), Some(replaced_id));
    assert_eq!(
        seen[2].header_all("x-request-id").len(),
        1,
        "the bad id is replaced, not added to"
    );
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|&c| c == '-').count() == 4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_choose_the_upstream_by_host_prefix_and_method() {
    let a = Upstream::start(|_req| async { text(200, "a") }).await;
    let b = Upstream::start(|_req| async { text(200, "b") }).await;
    let c = Upstream::start(|_req| async { text(200, "c") }).await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            r#"
[[upstreams]]
name = "a"
address = "{}"
[[upstreams]]
name = "b"
address = "{}"
[[upstreams]]
name = "c"
address = "{}"
[[routes]]
name = "api"
match = {{ path_prefix = "/api" }}
upstream = "a"
[[routes]]
name = "api-posts"
match = {{ path_prefix = "/api/jobs", methods = ["POST"] }}
upstream = "b"
[[routes]]
name = "agents-host"
match = {{ path_prefix = "/", host = "agents.example" }}
upstream = "c"
"#,
            a.addr, b.addr, c.addr
        ),
    ));
    let http = client();
    let body = |r: reqwest::Response| async move { r.text().await.unwrap() };
    assert_eq!(
        body(http.get(proxy.url("/api/jobs/1")).send().await.unwrap()).await,
        "a"
    );
    assert_eq!(
        body(http.post(proxy.url("/api/jobs")).send().await.unwrap()).await,
        "b"
    );
    let with_host = http
        .get(proxy.url("/api/jobs"))
        .header("host", "Agents.Example:8080")
        .send()
        .await
        .unwrap();
    assert_eq!(body(with_host).await, "c");
    let miss = http.get(proxy.url("/apis")).send().await.unwrap();
    assert_eq!(miss.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_offer_http2_through_alpn() {
    let upstream = Upstream::ok().await;
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    // A second listener, with TLS, beside the plain one every test config has.
    let tls_listener = format!(
        "[[listeners]]\naddress = \"127.0.0.1:0\"\ntls = {{ certificate = \"{}\", key = \"{}\" }}\n\n",
        cert_path.display(),
        key_path.display()
    );
    let proxy = Proxy::start(&config(
        "",
        &(tls_listener + &one_route(upstream.addr, "", "")),
    ));
    let tls_addr = proxy.addrs[1];

    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut tls = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
    let tcp = TcpStream::connect(tls_addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let stream = connector.connect(name, tcp).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));

    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::get("https://localhost/secure")
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp: Response<Incoming> = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ok");
    assert_eq!(upstream.seen()[0].target, "/secure");
}

/// A TLS upstream with a self-signed certificate, answering `sni=<name the client sent>`.
async fn tls_upstream() -> std::net::SocketAddr {
    use tokio_rustls::rustls;
    let cert = rcgen::generate_simple_self_signed(vec!["agent.internal".to_string()]).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let config = config.clone();
            tokio::spawn(async move {
                let acceptor =
                    tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
                let Ok(start) = acceptor.await else { return };
                let sni = start
                    .client_hello()
                    .server_name()
                    .unwrap_or("-")
                    .to_string();
                let Ok(tls) = start.into_stream(config).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |_req| {
                    let body = format!("sni={sni}");
                    async move { Ok::<_, std::convert::Infallible>(Response::new(full(body))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_upstreams_get_the_configured_sni() {
    let addr = tls_upstream().await;
    let proxy = Proxy::passthrough(
        addr,
        "tls = true\nsni = \"agent.internal\"\nverify_certificate = false",
        "",
    );
    let resp = client().get(proxy.url("/over-tls")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "sni=agent.internal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_upstream_with_an_untrusted_certificate_is_502() {
    let addr = tls_upstream().await;
    let proxy = Proxy::passthrough(addr, "tls = true\nsni = \"agent.internal\"", "");
    let resp = client().get(proxy.url("/over-tls")).send().await.unwrap();
    assert_eq!(resp.status(), 502);
    let (code, message, _) = common::error_of(&resp.text().await.unwrap());
    assert_eq!(code, "upstream_failed");
    assert!(message.contains("upstream `up`"), "{message}");
}
