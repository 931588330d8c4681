//! Every failure gets its status and interlingua's JSON error body, with the request id.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{client, config, error_of, route_at, Proxy, Upstream, DEADLINE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Asserts an error response: status, code, JSON shape, and the request id in header and body.
async fn assert_error(resp: reqwest::Response, status: u16, code: &str) -> String {
    assert_eq!(resp.status(), status);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let header_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let body = resp.text().await.unwrap();
    let (got_code, message, body_id) = error_of(&body);
    assert_eq!(got_code, code, "{body}");
    assert_eq!(body_id, header_id);
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_404_with_the_json_error_shape() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::start(&config("", &route_at(upstream.addr, "/agents", "", "")));
    let resp = client()
        .get(proxy.url("/elsewhere?x=1"))
        .header("x-request-id", "r-404")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body = resp.text().await.unwrap();
    assert_eq!(
        body,
        r#"{"error":{"code":"no_route","message":"no route for GET /elsewhere","request_id":"r-404"}}"#
    );
    assert_eq!(upstream.seen().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_over_the_limit_is_413_before_anything_goes_upstream() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", r#"max_body = "1KiB""#);
    let resp = client()
        .post(proxy.url("/big"))
        .body(vec![b'x'; 1025])
        .send()
        .await
        .unwrap();
    let message = assert_error(resp, 413, "body_too_large").await;
    assert!(message.contains("1024 bytes"), "{message}");
    assert_eq!(upstream.connections(), 0, "nothing went upstream");

    // At the limit exactly is fine.
    let ok = client()
        .post(proxy.url("/big"))
        .body(vec![b'x'; 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_that_grows_over_the_limit_is_413() {
    // The upstream answers only after the whole body; one that answered earlier would have its
    // response already on the way, and the limit could then only cut the connection.
    let upstream = Upstream::read_all().await;
    let proxy = Proxy::passthrough(upstream.addr, "", r#"max_body = "1KiB""#);
    let mut conn = TcpStream::connect(proxy.addr).await.unwrap();
    conn.write_all(b"POST /grow HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    // 3 chunks of 400 bytes: the third crosses 1024. Nothing more is sent, so the proxy has read
    // all there is and the 413 cannot be lost to a reset.
    for _ in 0..3 {
        conn.write_all(b"190\r\n").await.unwrap();
        conn.write_all(&[b'y'; 400]).await.unwrap();
        conn.write_all(b"\r\n").await.unwrap();
    }
    let mut got = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, conn.read_to_end(&mut got))
        .await
        .expect("answered");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert!(text.contains(r#""code":"body_too_large""#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_refuses_connections_is_502() {
    // A port that was just ours and is now closed.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Proxy::passthrough(closed, "", "");
    let resp = client().get(proxy.url("/x")).send().await.unwrap();
    let message = assert_error(resp, 502, "upstream_failed").await;
    assert!(message.contains("upstream `up`"), "{message}");
}

/// An upstream that accepts connections and treats each with `behave`.
async fn raw_upstream<F, Fut>(behave: F) -> std::net::SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(behave(stream));
        }
    });
    addr
}

/// Reads until the end of the request head, so the upstream misbehaves after the request.
async fn read_head(stream: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => buf.push(byte[0]),
            _ => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_resets_the_connection_is_502() {
    let addr = raw_upstream(|mut s| async move {
        read_head(&mut s).await;
        // Linger 0: close with a TCP reset instead of a clean end (a zero linger never blocks).
        #[allow(deprecated)]
        let _ = s.set_linger(Some(Duration::ZERO));
        drop(s);
    })
    .await;
    let proxy = Proxy::passthrough(addr, "", "");
    let resp = client().get(proxy.url("/reset")).send().await.unwrap();
    assert_error(resp, 502, "upstream_failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_without_answering_is_502() {
    let addr = raw_upstream(|mut s| async move {
        read_head(&mut s).await;
        let _ = s.shutdown().await;
    })
    .await;
    let proxy = Proxy::passthrough(addr, "", "");
    let resp = client().get(proxy.url("/closed")).send().await.unwrap();
    assert_error(resp, 502, "upstream_failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_answers_garbage_is_502() {
    let addr = raw_upstream(|mut s| async move {
        read_head(&mut s).await;
        let _ = s.write_all(b"this is not HTTP\r\n\r\n").await;
        let _ = s.shutdown().await;
    })
    .await;
    let proxy = Proxy::passthrough(addr, "", "");
    let resp = client().get(proxy.url("/garbage")).send().await.unwrap();
    assert_error(resp, 502, "upstream_failed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_is_504_after_its_read_timeout() {
    let (hold_tx, _hold_rx) = tokio::sync::broadcast::channel::<()>(1);
    let holder = hold_tx.clone();
    let addr = raw_upstream(move |mut s| {
        let mut hold = holder.subscribe();
        async move {
            read_head(&mut s).await;
            // Never answer; keep the connection open until the test ends.
            let _ = hold.recv().await;
        }
    })
    .await;
    let proxy = Proxy::passthrough(addr, r#"read_timeout = "300ms""#, "");
    let started = std::time::Instant::now();
    let resp = client().get(proxy.url("/slow")).send().await.unwrap();
    let message = assert_error(resp, 504, "upstream_timeout").await;
    // Real time: read_timeout is pingora's timer on a real socket; not before it, is the point.
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(message.contains("upstream `up` timed out"), "{message}");
    drop(hold_tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_trickles_past_its_total_timeout_is_cut_off() {
    // Headers at once, then a byte every 50ms for 10s: each wait is short, the whole is not.
    let addr = raw_upstream(|mut s| async move {
        read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n")
            .await;
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        for _ in 0..200 {
            tick.tick().await;
            if s.write_all(b".").await.is_err() {
                return;
            }
        }
    })
    .await;
    let proxy = Proxy::passthrough(
        addr,
        "read_timeout = \"500ms\"\ntotal_timeout = \"500ms\"",
        "",
    );
    let started = std::time::Instant::now();
    let resp = client().get(proxy.url("/trickle")).send().await.unwrap();
    assert_eq!(resp.status(), 200, "the headers were already on their way");
    let body = resp.bytes().await;
    assert!(
        body.is_err(),
        "the body must be cut short, got {:?}",
        body.map(|b| b.len())
    );
    // Real time: total_timeout is pingora's timer on a real socket.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_after_an_error_still_serves_the_next_request() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::start(&config("", &route_at(upstream.addr, "/ok", "", "")));
    let http = client();
    let miss = http.get(proxy.url("/missing")).send().await.unwrap();
    assert_eq!(miss.status(), 404);
    let _ = miss.bytes().await;
    let hit = http.get(proxy.url("/ok")).send().await.unwrap();
    assert_eq!(hit.status(), 200);
    assert_eq!(hit.bytes().await.unwrap(), Bytes::from_static(b"ok"));
}
