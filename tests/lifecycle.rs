//! The admin listener and shutdown, in-process.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{client, config, one_route, text, Proxy, Upstream, DEADLINE};
use tokio::net::TcpStream;
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_answer_on_the_admin_listener() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let http = client();
    let health = http.get(proxy.admin_url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), r#"{"status":"ok"}"#);
    let ready = http.get(proxy.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(
        ready.text().await.unwrap(),
        r#"{"config":"test.toml","status":"ready","store":{"backend":"sqlite","status":"ok"}}"#
    );
    let missing = http.get(proxy.admin_url("/nope")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    // The proxy's routes are not on the admin listener, and the admin's not on the proxy's.
    let not_proxied = http.get(proxy.url("/healthz")).send().await.unwrap();
    assert_eq!(not_proxied.text().await.unwrap(), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_an_upstream_cannot_be_resolved() {
    let proxy = Proxy::start(&config(
        "",
        r#"
[[upstreams]]
name = "ghost"
address = "no-such-host.invalid:80"
[[routes]]
match = { path_prefix = "/" }
upstream = "ghost"
"#,
    ));
    let http = client();
    let mut last = String::new();
    let started = std::time::Instant::now();
    // Resolution runs in the background; wait for its verdict.
    while started.elapsed() < DEADLINE {
        let resp = http.get(proxy.admin_url("/readyz")).send().await.unwrap();
        let status = resp.status();
        last = resp.text().await.unwrap();
        if !last.contains("not resolved yet") {
            assert_eq!(status, 503, "{last}");
            break;
        }
        tokio::task::yield_now().await;
    }
    let v: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(v["status"], "not_ready");
    let problem = v["problems"][0].as_str().unwrap();
    assert!(problem.starts_with("upstream `ghost`:"), "{problem}");
    assert!(problem.contains("no-such-host.invalid"), "{problem}");

    // And a request to it is a 502 that says why.
    let resp = http.get(proxy.url("/x")).send().await.unwrap();
    assert_eq!(resp.status(), 502);
}

/// The value of one sample line of a Prometheus text exposition.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_and_status() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let http = client();
    for _ in 0..3 {
        assert_eq!(
            http.get(proxy.url("/m")).send().await.unwrap().status(),
            200
        );
    }
    let _ = http
        .get(format!("http://{}/m", proxy.addr))
        .header("host", "x")
        .send()
        .await;
    let resp = http.get(proxy.admin_url("/metrics")).send().await.unwrap();
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let metrics = proxy
        .metrics_showing(&[r#"interlingua_request_duration_seconds_count{route="main"} 4"#])
        .await;
    assert_eq!(
        sample(
            &metrics,
            r#"interlingua_requests_total{route="main",status="200"}"#
        ),
        Some(4.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"interlingua_upstream_latency_seconds_count{route="main"}"#
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &metrics,
            r#"interlingua_request_duration_seconds_count{route="main"}"#
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(&metrics, "interlingua_requests_in_flight"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_requests_in_flight() {
    let release = Arc::new(Notify::new());
    let upstream = Upstream::held(release.clone(), "late").await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let pending = tokio::spawn(client().get(proxy.url("/held")).send());
    upstream.wait_for_requests(1).await;
    let metrics = client()
        .get(proxy.admin_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        sample(&metrics, "interlingua_requests_in_flight"),
        Some(1.0)
    );
    release.notify_one();
    assert_eq!(pending.await.unwrap().unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_lets_the_request_in_flight_finish() {
    let release = Arc::new(Notify::new());
    let upstream = Upstream::held(release.clone(), "finished").await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    let addr = proxy.addr;
    let in_flight = tokio::spawn(client().get(proxy.url("/long")).send());
    upstream.wait_for_requests(1).await;

    proxy.shutdown_handle().shutdown();
    // New connections are refused once the listener is closed.
    let started = std::time::Instant::now();
    loop {
        match TcpStream::connect(addr).await {
            Err(_) => break,
            Ok(_) => {
                assert!(
                    started.elapsed() < DEADLINE,
                    "still accepting after shutdown"
                );
                tokio::task::yield_now().await;
            }
        }
    }
    // The request in flight still gets its whole answer.
    release.notify_one();
    let resp = in_flight.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "finished");
    let report = proxy.join().await;
    assert_eq!(report.abandoned, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_up_on_requests_after_the_grace_period() {
    let upstream = Upstream::start(|_req| async {
        std::future::pending::<()>().await;
        text(200, "never")
    })
    .await;
    let proxy = Proxy::start(&config(
        "grace_period = \"300ms\"",
        &one_route(upstream.addr, "", ""),
    ));
    let _stuck = tokio::spawn(client().get(proxy.url("/stuck")).send());
    upstream.wait_for_requests(1).await;
    proxy.shutdown_handle().shutdown();
    let report = proxy.join().await;
    assert_eq!(report.abandoned, 1);
    // Real time: the grace period is the server's own timer.
    assert!(report.waited >= Duration::from_millis(300), "{report:?}");
    assert!(report.waited < Duration::from_secs(5), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_server_stops_at_once() {
    let upstream = Upstream::ok().await;
    let proxy = Proxy::passthrough(upstream.addr, "", "");
    assert_eq!(
        client().get(proxy.url("/x")).send().await.unwrap().status(),
        200
    );
    let report = tokio::task::spawn_blocking(move || proxy.stop())
        .await
        .unwrap();
    assert_eq!(report.abandoned, 0);
    assert!(report.waited < Duration::from_secs(2), "{report:?}");
}
