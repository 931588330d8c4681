//! Bad request framing through a raw socket, byte for byte as written here: bytes that are not
//! HTTP at all (400 at once), malformed chunked bodies (400), bodies that stop coming (408, on
//! passthrough and translated routes, whatever the upstream's own timeout), a body the upstream
//! refuses half-way (502, or the upstream's own 413), and paths with dot-segments (normalised
//! before routing). No answer may name the upstream's address.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::raw::{exchange, read_answer, wait_closed, Answer};
use common::{config, error_of, one_route, Proxy, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Checks that an answer is interlingua's error `code` with `status` and that it names no
/// upstream address (the proxy's listeners and the upstreams are all on 127.0.0.1).
fn assert_error(answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{answer}");
    let (got, _, _) = error_of(&answer.body_text());
    assert_eq!(got, code, "{answer}");
    answer.assert_no_address();
}

fn chunked(size_line: &str, rest: &str) -> String {
    format!(
        "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{size_line}\r\n{rest}"
    )
}

#[tokio::test]
async fn malformed_chunked_bodies_are_400_and_never_name_the_upstream() {
    let up = Upstream::read_all().await;
    let proxy = Proxy::passthrough(up.addr, "", "");
    let cases = [
        ("zz", chunked("zz", "hello\r\n0\r\n\r\n")),
        ("-1", chunked("-1", "hello\r\n0\r\n\r\n")),
        ("twenty f", chunked(&"f".repeat(20), "hello\r\n0\r\n\r\n")),
        ("0x5", chunked("0x5", "hello\r\n0\r\n\r\n")),
        (" 5", chunked(" 5", "hello\r\n0\r\n\r\n")),
        ("no CRLF after the data", chunked("5", "hello0\r\n\r\n")),
    ];
    for (name, request) in cases {
        let answer = exchange(proxy.addr, request.as_bytes()).await;
        assert_eq!(answer.status, 400, "{name}: {answer}");
        assert_error(&answer, 400, "bad_request");
        assert!(
            !answer.body_text().contains(&up.addr.to_string()),
            "{name}: {answer}"
        );
    }
}

/// The first flight of a real TLS client (rustls): its ClientHello.
fn client_hello() -> Vec<u8> {
    use tokio_rustls::rustls;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
    let mut tls = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("TLS");
    let mut hello = Vec::new();
    tls.write_tls(&mut hello).expect("a ClientHello");
    hello
}

#[tokio::test]
async fn bytes_that_are_not_http_are_answered_400_at_once_and_the_connection_closed() {
    let up = Upstream::ok().await;
    // A header timeout well within the test's deadline: were the bytes waited on as a header
    // still to come, the answer would be its 408, not a 400.
    let header_wait = "client_header_timeout = \"15s\"";
    let plain = Proxy::start(&config(header_wait, &one_route(up.addr, "", "")));
    let h1_only = Proxy::start(&config(header_wait, &one_route(up.addr, "", "")).replace(
        "[[listeners]]\naddress = \"127.0.0.1:0\"\n",
        "[[listeners]]\naddress = \"127.0.0.1:0\"\nh2c = false\n",
    ));
    let cases: [(&str, Vec<u8>); 5] = [
        ("a TLS ClientHello", client_hello()),
        ("binary bytes", vec![0x00, 0xff, 0x13, 0x37]),
        (
            "bytes opening as the HTTP/2 preface does",
            b"PR\xffI".to_vec(),
        ),
        (
            "a method of bytes no method holds",
            b"GET\x01/ HTTP/1.1\r\n".to_vec(),
        ),
        (
            "a request line opening with a space",
            b" GET / HTTP/1.1\r\n".to_vec(),
        ),
    ];
    for proxy in [&plain, &h1_only] {
        for (name, bytes) in &cases {
            let mut conn = BufReader::new(TcpStream::connect(proxy.addr).await.expect("connect"));
            // Sent, and the connection held open: nothing but the bytes tells what they are.
            conn.get_mut().write_all(bytes).await.expect("write");
            let answer = read_answer(&mut conn).await;
            assert_error(&answer, 400, "bad_request");
            assert_eq!(
                answer.header("connection").as_deref(),
                Some("close"),
                "{name}"
            );
            wait_closed(&mut conn).await;
        }
    }
    assert_eq!(up.seen().len(), 0, "nothing went upstream");
    // The connections after them are served as ever.
    let answer = exchange(
        plain.addr,
        b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(answer.status, 200, "{answer}");
}

/// A proxy whose clients must send each piece of a body within 300 ms, in front of an upstream
/// that waits far longer for it.
fn slow_body_proxy(up: SocketAddr) -> Proxy {
    Proxy::start(&config(
        "client_body_timeout = \"300ms\"",
        &one_route(up, "read_timeout = \"15s\"", ""),
    ))
}

#[tokio::test]
async fn a_body_that_stops_coming_is_408_before_the_upstream_gives_up() {
    let up = Upstream::read_all().await;
    let proxy = slow_body_proxy(up.addr);
    let cases = [
        (
            "10 of 100 bytes",
            "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789",
        ),
        (
            "a short chunk",
            "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n0123456789",
        ),
        (
            "100-continue and no body",
            "POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n",
        ),
    ];
    for (name, request) in cases {
        let started = Instant::now();
        let answer = exchange(proxy.addr, request.as_bytes()).await;
        assert_eq!(answer.status, 408, "{name}: {answer}");
        assert_error(&answer, 408, "request_timeout");
        // Well before the upstream's 15 s read timeout.
        assert!(started.elapsed() < Duration::from_secs(10), "{name}");
    }
    proxy.client_timeouts_showing("body", 3).await;
}

/// The three stalls, on a passthrough route whose upstream's own wait (`read_timeout`, 100 ms) is
/// shorter than the client's (`client_body_timeout`, 600 ms): the upstream is waiting for the
/// client's body, so its silence is the client's.
#[tokio::test]
async fn a_body_that_stops_coming_is_408_even_when_the_upstream_waits_less_long() {
    let up = Upstream::read_all().await;
    let proxy = Proxy::start(&config(
        "client_body_timeout = \"600ms\"",
        &one_route(up.addr, "read_timeout = \"100ms\"", ""),
    ));
    let cases = [
        (
            "10 of 100 bytes",
            "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789",
        ),
        (
            "a short chunk",
            "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n0123456789",
        ),
        (
            "100-continue and no body",
            "POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n",
        ),
    ];
    for (name, request) in cases {
        let answer = exchange(proxy.addr, request.as_bytes()).await;
        assert_eq!(answer.status, 408, "{name}: {answer}");
        assert_error(&answer, 408, "request_timeout");
    }
    proxy.client_timeouts_showing("body", 3).await;
    // A body sent whole still gets the upstream's answer.
    let answer = exchange(
        proxy.addr,
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    )
    .await;
    assert_eq!(answer.body_text(), "read 3 bytes", "{answer}");
}

#[tokio::test]
async fn a_body_that_stops_coming_on_a_translated_route_is_408_in_the_front_shape() {
    let up = Upstream::ok().await;
    let proxy = Proxy::start(&config(
        "client_body_timeout = \"300ms\"",
        &format!(
            "[[upstreams]]\nname = \"up\"\naddress = \"{}\"\nread_timeout = \"15s\"\n\n\
             [[routes]]\nname = \"m\"\nmatch = {{ path_prefix = \"/m\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\n",
            up.addr
        ),
    ));
    let answer = exchange(
        proxy.addr,
        b"POST /m/start_job HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"input_da",
    )
    .await;
    assert_eq!(answer.status, 408, "{answer}");
    assert_eq!(
        answer.json(),
        serde_json::json!({"detail": "the request was not received in time"}),
        "{answer}"
    );
    assert_eq!(up.seen().len(), 0, "nothing went upstream");
}

/// An upstream that reads `cap` bytes of a request, answers `answer` (if any), and closes, as a
/// server with a body limit of its own does.
async fn capped_upstream(cap: usize, answer: Option<&'static str>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut read = 0;
                while read < cap {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
                if let Some(answer) = answer {
                    let _ = conn.write_all(answer.as_bytes()).await;
                }
                // Closing with the rest of the body unread resets the connection.
            });
        }
    });
    addr
}

/// A 4 MiB body sent to the proxy as fast as it takes it (the client stops sending, and keeps
/// reading, when the proxy stops taking).
async fn post_big(proxy: SocketAddr) -> Answer {
    let body = vec![b'x'; 4 * 1024 * 1024];
    let mut request = format!(
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    exchange(proxy, &request).await
}

#[tokio::test]
async fn a_body_the_upstream_refuses_half_way_is_its_failure_502() {
    let up = capped_upstream(1024 * 1024, None).await;
    let proxy = Proxy::passthrough(up, "", "max_body = \"8MiB\"");
    let answer = post_big(proxy.addr).await;
    assert_error(&answer, 502, "upstream_failed");
    assert!(!answer.body_text().contains(&up.to_string()), "{answer}");
}

#[tokio::test]
async fn a_body_the_upstream_refuses_half_way_on_a_translated_route_is_502() {
    let up = capped_upstream(1024 * 1024, None).await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"up\"\naddress = \"{up}\"\n\n\
             [[routes]]\nname = \"m\"\nmatch = {{ path_prefix = \"/m\" }}\nupstream = \"up\"\n\
             front = \"mip003\"\nback = \"mip003\"\n\
             input_schema = {{ input_data = [ {{ id = \"text\", type = \"text\", name = \"Text\" }} ] }}\n"
        ),
    ));
    let text = "x".repeat(4 * 1024 * 1024);
    let body =
        format!("{{\"identifier_from_purchaser\":\"abc\",\"input_data\":{{\"text\":\"{text}\"}}}}");
    let request = format!(
        "POST /m/start_job HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(answer.status, 502, "{answer}");
    assert_eq!(
        answer.json(),
        serde_json::json!({"detail": "upstream `up` failed: the connection broke"}),
        "{answer}"
    );
}

/// pingora passes on the answer an upstream sends before it closes (this held before the
/// classification above was fixed, and must go on holding).
#[tokio::test]
async fn a_body_the_upstream_refuses_with_413_gets_its_413() {
    const TOO_LARGE: &str = "HTTP/1.1 413 Payload Too Large\r\ncontent-type: text/plain\r\n\
                             content-length: 9\r\nconnection: close\r\n\r\ntoo large";
    let up = capped_upstream(1024 * 1024, Some(TOO_LARGE)).await;
    let proxy = Proxy::passthrough(up, "", "max_body = \"8MiB\"");
    let answer = post_big(proxy.addr).await;
    assert_eq!(answer.status, 413, "{answer}");
    assert_eq!(answer.body_text(), "too large", "{answer}");
}

#[tokio::test]
async fn dot_segments_are_resolved_before_routing_and_sent_resolved() {
    let public = Upstream::ok().await;
    let echo = Upstream::ok().await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"public\"\naddress = \"{}\"\n\n\
             [[upstreams]]\nname = \"echo\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"pub\"\nmatch = {{ path_prefix = \"/pub\" }}\nupstream = \"public\"\n\n\
             [[routes]]\nname = \"echo\"\nmatch = {{ path_prefix = \"/echo\" }}\nupstream = \"echo\"\n",
            public.addr, echo.addr
        ),
    ));
    let cases = [
        ("/pub/../echo/secret", "/echo/secret"),
        ("/pub/%2e%2e/echo/secret", "/echo/secret"),
        ("/pub/%2E%2e/echo/secret?x=1", "/echo/secret?x=1"),
        ("/pub/./../echo//secret", "/echo/secret"),
        ("//echo//secret", "/echo/secret"),
    ];
    for (i, (path, seen)) in cases.into_iter().enumerate() {
        let answer = exchange(
            proxy.addr,
            format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(answer.status, 200, "{path}: {answer}");
        echo.wait_for_requests(i + 1).await;
        assert_eq!(echo.seen()[i].target, seen, "{path}");
    }
    assert_eq!(
        public.seen().len(),
        0,
        "the public route served none of them"
    );
}
