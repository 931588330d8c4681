//! Client connections held to the `[server]` limits, through raw sockets: a header dripped a
//! byte at a time is cut off at `client_header_timeout` (408), a connection idle between
//! requests is closed at `keepalive_timeout`, one over `max_connections` is refused (503), and
//! the metrics count each. And what an error answer says of its connection holds: kept after an
//! agent's failure on a translated route, `Connection: close` (and closed) when it is not.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::raw::{read_answer, wait_closed, Answer};
use common::{
    config, error_of, forever_running, one_route, sample_agent_on, text, Proxy, Upstream, DEADLINE,
};
use http_body_util::BodyExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Short limits, so that the tests see them at work.
const LIMITS: &str = "client_header_timeout = \"300ms\"\nkeepalive_timeout = \"300ms\"";

fn proxy_with(server: &str, up: &Upstream) -> Proxy {
    Proxy::start(&config(server, &one_route(up.addr, "", "")))
}

const GET: &[u8] = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n";

/// A connection that has been answered once and is kept alive.
async fn kept_alive(proxy: &Proxy) -> BufReader<TcpStream> {
    let mut conn = BufReader::new(TcpStream::connect(proxy.addr).await.expect("connect"));
    conn.get_mut().write_all(GET).await.expect("write");
    let answer = read_answer(&mut conn).await;
    assert_eq!(answer.status, 200, "{answer}");
    conn
}

#[tokio::test]
async fn a_header_dripped_a_byte_at_a_time_is_cut_off_with_408() {
    let up = Upstream::ok().await;
    let proxy = proxy_with(LIMITS, &up);
    let mut slow = Vec::new();
    for _ in 0..3 {
        let conn = TcpStream::connect(proxy.addr).await.expect("connect");
        let (read, mut write) = conn.into_split();
        // The slowloris: a byte every 50 ms, for as long as the connection takes them.
        let drip = tokio::spawn(async move {
            let header = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            for byte in header.iter().cycle() {
                tick.tick().await;
                if write.write_all(&[*byte]).await.is_err() {
                    return;
                }
            }
        });
        slow.push((Instant::now(), BufReader::new(read), drip));
    }
    for (started, mut read, drip) in slow {
        let answer = read_answer(&mut read).await;
        let waited = started.elapsed();
        assert_eq!(answer.status, 408, "{answer}");
        assert_eq!(error_of(&answer.body_text()).0, "request_timeout");
        assert_eq!(answer.header("connection").as_deref(), Some("close"));
        // Real time: client_header_timeout is the server's timer on a real socket.
        assert!(
            waited >= Duration::from_millis(300),
            "cut off after {waited:?}"
        );
        wait_closed(&mut read).await;
        drip.abort();
    }
    assert_eq!(up.seen().len(), 0, "no request went upstream");
    proxy.client_timeouts_showing("header", 3).await;
}

#[tokio::test]
async fn a_later_header_that_stalls_on_a_kept_connection_is_cut_off_with_408() {
    let up = Upstream::ok().await;
    let proxy = proxy_with(LIMITS, &up);
    let mut conn = kept_alive(&proxy).await;
    conn.get_mut()
        .write_all(b"GET /x HTTP/1.1\r\nHo")
        .await
        .expect("write");
    let answer = read_answer(&mut conn).await;
    assert_eq!(answer.status, 408, "{answer}");
    assert_eq!(error_of(&answer.body_text()).0, "request_timeout");
    wait_closed(&mut conn).await;
    assert_eq!(up.seen().len(), 1, "only the first request went upstream");
    proxy.client_timeouts_showing("header", 1).await;
}

#[tokio::test]
async fn a_connection_idle_after_its_answer_is_closed_at_the_keepalive_timeout() {
    let up = Upstream::ok().await;
    let proxy = proxy_with(LIMITS, &up);
    let mut conn = kept_alive(&proxy).await;
    let answered = Instant::now();
    let rest = wait_closed(&mut conn).await;
    let idle = answered.elapsed();
    assert!(rest.is_empty(), "nothing more is sent: {rest:?}");
    // Real time: keepalive_timeout is the server's timer on a real socket.
    assert!(idle >= Duration::from_millis(250), "closed after {idle:?}");
    // A connection that never sends a byte is closed too, without an answer.
    let mut silent = TcpStream::connect(proxy.addr).await.expect("connect");
    assert!(wait_closed(&mut silent).await.is_empty());
    proxy.client_timeouts_showing("idle", 2).await;
}

#[tokio::test]
async fn a_kept_connection_serves_one_request_after_another() {
    let up = Upstream::ok().await;
    let proxy = proxy_with(LIMITS, &up);
    let mut conn = kept_alive(&proxy).await;
    for _ in 0..3 {
        conn.get_mut().write_all(GET).await.expect("write");
        assert_eq!(read_answer(&mut conn).await.status, 200);
    }
    assert_eq!(up.seen().len(), 4);
}

#[tokio::test]
async fn one_connection_over_the_limit_is_refused_with_503() {
    let up = Upstream::ok().await;
    let proxy = proxy_with("max_connections = 2", &up);
    let first = kept_alive(&proxy).await;
    let _second = kept_alive(&proxy).await;
    let listener = proxy.addr.to_string();
    let metric =
        |name: &str, n: usize| format!("interlingua_{name}{{listener=\"{listener}\"}} {n}");
    proxy
        .metrics_showing(&[&metric("connections_open", 2)])
        .await;

    let mut third = BufReader::new(TcpStream::connect(proxy.addr).await.expect("connect"));
    third.get_mut().write_all(GET).await.expect("write");
    let answer = read_answer(&mut third).await;
    assert_eq!(answer.status, 503, "{answer}");
    assert_eq!(error_of(&answer.body_text()).0, "too_many_connections");
    assert_eq!(answer.header("connection").as_deref(), Some("close"));
    assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
    wait_closed(&mut third).await;
    proxy
        .metrics_showing(&[&metric("connections_refused_total", 1)])
        .await;

    // Once one of the two closes, a new connection is served again.
    drop(first);
    proxy
        .metrics_showing(&[&metric("connections_open", 1)])
        .await;
    let _again = kept_alive(&proxy).await;
    assert_eq!(
        up.seen().len(),
        3,
        "the refused request never went upstream"
    );
}

/// A MIP-003 agent whose first call fails (500) and whose later ones answer as
/// [`common::forever_running_agent`] does.
async fn failing_once() -> Upstream {
    let calls = Arc::new(AtomicUsize::new(0));
    Upstream::start(move |req| {
        let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                text(500, "down for a moment")
            } else {
                forever_running(req.uri().path())
            }
        }
    })
    .await
}

/// Sends `first`, reads its answer, then sends `second` on the same connection: both answers
/// (the second `None` when the connection was closed after the first).
async fn two_on_one_connection(
    proxy: &Proxy,
    first: &str,
    second: &str,
) -> (Answer, Option<Answer>) {
    let mut conn = BufReader::new(TcpStream::connect(proxy.addr).await.expect("connect"));
    conn.get_mut()
        .write_all(first.as_bytes())
        .await
        .expect("write");
    let answer = read_answer(&mut conn).await;
    // A connection the proxy has closed may still take the write (its reset comes later); the
    // read then finds the end of the stream, or the reset.
    let _ = conn.get_mut().write_all(second.as_bytes()).await;
    let more = tokio::time::timeout(DEADLINE, conn.fill_buf())
        .await
        .expect("an answer or a close within the deadline");
    let open = matches!(more, Ok(bytes) if !bytes.is_empty());
    let next = if open {
        Some(read_answer(&mut conn).await)
    } else {
        None
    };
    (answer, next)
}

fn post(path: &str, extra: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n{extra}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn an_agent_failing_on_a_translated_route_leaves_the_connection_to_the_next_request() {
    let mip003 = failing_once().await;
    let mcp = Upstream::start(|_req| async { text(500, "down") }).await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"mip\"\naddress = \"{}\"\n\n\
             [[upstreams]]\nname = \"down\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"m\"\nmatch = {{ path_prefix = \"/m\" }}\nupstream = \"mip\"\n\
             front = \"mip003\"\nback = \"mip003\"\n\n\
             [[routes]]\nname = \"tool\"\nmatch = {{ path_prefix = \"/mcp\" }}\nupstream = \"down\"\n\
             front = \"mcp\"\nback = \"mip003\"\n",
            mip003.addr, mcp.addr
        ),
    ));

    // A create whose first call to the agent fails (502), then the same create, which it takes.
    let create = post(
        "/m/start_job",
        "",
        r#"{"identifier_from_purchaser":"aabbccddeeff0011","input_data":{"text":"hi"}}"#,
    );
    let (failed, next) = two_on_one_connection(&proxy, &create, &create).await;
    assert_eq!(failed.status, 502, "{failed}");
    assert_eq!(
        failed.json(),
        serde_json::json!({"detail": "upstream `mip` failed: status 500: down for a moment"}),
        "{failed}"
    );
    assert_eq!(
        failed.header("connection").as_deref(),
        Some("keep-alive"),
        "{failed}"
    );
    let next = next.expect("the connection carried the second request");
    assert_eq!(next.status, 200, "{next}");
    assert!(next.json()["job_id"].is_string(), "{next}");

    // An MCP tool call whose agent fails, then a ping, on one connection.
    let accept = "Accept: application/json, text/event-stream\r\n";
    let call = post(
        "/mcp",
        accept,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool","arguments":{"text":"hi"}}}"#,
    );
    let ping = post(
        "/mcp",
        accept,
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    );
    let (failed, next) = two_on_one_connection(&proxy, &call, &ping).await;
    assert_eq!(
        failed.header("connection").as_deref(),
        Some("keep-alive"),
        "{failed}"
    );
    assert_eq!(failed.status, 200, "{failed}");
    assert_eq!(
        failed.json(),
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32603, "message": "upstream `down` failed: status 500: down"}}),
        "{failed}"
    );
    let next = next.expect("the connection carried the second request");
    assert_eq!(next.status, 200, "{next}");
    assert_eq!(
        next.json(),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "result": {}})
    );
}

/// interlingua's sample MIP-003 agent (its jobs waiting for the test's clock) behind a gate that
/// answers its `/provide_input` with 500: the agent fails just as the client gives its input.
async fn agent_failing_on_input(clock: &samples::Clock) -> Upstream {
    let agent = sample_agent_on(samples::mip003::serve, Duration::from_millis(100), clock).await;
    let http = common::client();
    Upstream::start(move |req: hyper::Request<hyper::body::Incoming>| {
        let http = http.clone();
        async move {
            let target = req.uri().to_string();
            if req.uri().path() == "/provide_input" {
                return text(500, "cannot take input now");
            }
            let method = req.method().clone();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let answer = http
                .request(method, format!("http://{agent}{target}"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("the sample agent answers");
            let status = answer.status().as_u16();
            let body = answer.bytes().await.expect("its body");
            hyper::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(common::full(body))
                .expect("a response")
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_the_agent_fails_to_take_leaves_the_connection_to_the_next_request() {
    const DID: &str = "did:nv:5392e8cdc5addec2b7384072fda166d42a5d4ab96ae6d311f516b6b324f24cec";
    let clock = samples::Clock::manual();
    let agent = agent_failing_on_input(&clock).await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "[[upstreams]]\nname = \"mip\"\naddress = \"{}\"\n\n\
             [[routes]]\nname = \"nv\"\nmatch = {{ path_prefix = \"/nv\" }}\nupstream = \"mip\"\n\
             front = \"nevermined\"\nback = \"mip003\"\n",
            agent.addr
        ),
    ));
    let http = common::client();
    let tasks = proxy.url(&format!("/nv/api/v1/agents/{DID}/tasks"));
    let created: serde_json::Value = http
        .post(&tasks)
        .json(&serde_json::json!({"input_query": "hello", "input_additional": {"mode": "input"}}))
        .send()
        .await
        .expect("a create")
        .json()
        .await
        .expect("its task");
    let task = format!(
        "/nv/api/v1/agents/{DID}/tasks/{}",
        created["task"]["task_id"].as_str().expect("an id")
    );
    clock.advance(Duration::from_millis(100));
    let waiting = common::wait::eventually("the task waiting for input", || async {
        let body: serde_json::Value = http
            .get(proxy.url(&task))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if body["task"]["task_status"] == "Not_Ready" {
            Ok(body)
        } else {
            Err(body.to_string())
        }
    })
    .await;
    let step = waiting["steps"]
        .as_array()
        .and_then(|s| s.last())
        .expect("a step")["step_id"]
        .as_str()
        .expect("its id")
        .to_string();

    // The input, which the agent fails to take (502), then a read of the task, on one connection.
    let input = post(
        &format!("{task}/step/{step}"),
        "",
        r#"{"step_status":"Pending","input_additional":{"more":"please"}}"#,
    )
    .replacen("POST", "PUT", 1);
    let get = format!("GET {task} HTTP/1.1\r\nHost: a\r\n\r\n");
    let (failed, next) = two_on_one_connection(&proxy, &input, &get).await;
    assert_eq!(failed.status, 502, "{failed}");
    assert_eq!(
        failed.json()["message"],
        "upstream `mip` failed: status 500: cannot take input now",
        "{failed}"
    );
    assert_eq!(
        failed.header("connection").as_deref(),
        Some("keep-alive"),
        "{failed}"
    );
    let next = next.expect("the connection carried the second request");
    assert_eq!(next.status, 200, "{next}");
    assert_eq!(next.json()["task"]["task_status"], "Not_Ready", "{next}");
}

#[tokio::test]
async fn a_failed_passthrough_exchange_says_connection_close_and_closes() {
    // An address nothing listens on: the connection to the upstream is refused.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = gone.local_addr().expect("address");
    drop(gone);
    let proxy = Proxy::passthrough(addr, "", "");
    let (failed, next) = two_on_one_connection(
        &proxy,
        "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await;
    assert_eq!(failed.status, 502, "{failed}");
    assert_eq!(error_of(&failed.body_text()).0, "upstream_failed");
    assert_eq!(
        failed.header("connection").as_deref(),
        Some("close"),
        "{failed}"
    );
    assert!(
        next.is_none(),
        "closed after the answer, as it said: {next:?}"
    );
}

#[test]
fn the_connection_settings_are_checked_like_every_other() {
    let text = "[server]\nmax_connections = 0\nclient_header_timeout = \"0s\"\n\
                keepalive_timeout = \"5\"\nclient_body_timeout = \"soon\"\n";
    let problems = match interlingua::setup::parse(text, "t.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(problems) => problems.to_string(),
    };
    for expected in [
        "t.toml:2:19: server.max_connections: must be between 1 and 16777216",
        "t.toml:3:25: server.client_header_timeout: must be longer than zero",
        "t.toml:4:21: server.keepalive_timeout: `5` has no unit; write it as \"5s\" or \"5ms\"",
        "t.toml:5:23: server.client_body_timeout:",
    ] {
        assert!(
            problems.lines().any(|l| l.starts_with(expected)),
            "no `{expected}` in:\n{problems}"
        );
    }
}
