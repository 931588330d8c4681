//! Test harness: real upstream servers and a real interlingua, all on 127.0.0.1:0.
//!
//! Nothing here sleeps to synchronise: waits are on conditions (a channel, a counter, a socket
//! state) and every wait has a deadline, so a broken proxy fails a test instead of hanging it.
//!
//! Here: upstreams ([`Upstream`], [`sample_agent`], and [`sample_agent_on`] whose clock the
//! test moves), an in-process proxy ([`Proxy`], [`config`]) and a client. Beside it: [`wait`] (polling with deadlines), [`secrets`] (the signing key, the
//! admin token, tokens), [`tokens`] (the auth tests' keys, token builders and JWKS server),
//! [`money`] (paid routes and the admin API's credits), [`process`] (the `interlingua` binary as
//! a child), [`peers`] (real third-party peers in Python), [`chain`] (a real x402 stack: a local
//! EVM node, the x402 SDK's facilitator, paid agent and paying client), [`node`] (its chain tools,
//! from npm) and [`raw`] (HTTP/1.1 written and read by hand over a socket).

#![allow(dead_code)]

pub mod chain;
pub mod money;
pub mod node;
pub mod peers;
pub mod process;
pub mod raw;
pub mod relay;
pub mod secrets;
pub mod tokens;
pub mod wait;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use interlingua::server::{Server, ShutdownHandle, ShutdownReport};
use mapping::task::Task;
use samples::{Clock, Options};
use store::{SqliteStore, TaskQuery, TaskStore};
use tokio::net::TcpListener;
use wait::wait_until;

/// The longest any single wait in a test may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub type Body = BoxBody<Bytes, hyper::Error>;
type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync,
>;

/// A request as an upstream saw it (the body is read by handlers that want it).
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query, exactly as received.
    pub target: String,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    }
}

/// A real HTTP/1.1 upstream on an ephemeral port, counting connections and recording requests.
pub struct Upstream {
    pub addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Starts an upstream answering every request with `handler`.
    pub async fn start<F, Fut>(handler: F) -> Upstream
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |req| Box::pin(handler(req)));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        let connections = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (c, s, gone) = (connections.clone(), seen.clone(), closed.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                c.fetch_add(1, Ordering::SeqCst);
                let (handler, seen, gone) = (handler.clone(), s.clone(), gone.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        seen.lock().unwrap().push(Seen {
                            method: req.method().to_string(),
                            target: req.uri().to_string(),
                            headers: req
                                .headers()
                                .iter()
                                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                                .collect(),
                        });
                        let fut = handler(req);
                        async move { Ok::<_, Infallible>(fut.await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    gone.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Upstream {
            addr,
            connections,
            closed,
            seen,
            task,
        }
    }

    /// An upstream answering every request with `200 ok`.
    pub async fn ok() -> Upstream {
        Upstream::start(|_req| async { text(200, "ok") }).await
    }

    /// An upstream that streams every request body straight back as the response body.
    pub async fn echo_body() -> Upstream {
        Upstream::start(|req: Request<Incoming>| async move {
            let body = req.into_body().boxed();
            Response::builder()
                .status(200)
                .body(body)
                .expect("response")
        })
        .await
    }

    /// An upstream that reads each request's body whole, then answers it back. (One that
    /// answers while it reads, as [`Upstream::echo_body`] does, can stall a body larger than the
    /// sockets' buffers: pingora 0.9 does not read an answer while a piece of the request is being
    /// written; see docs/operating.md, "Troubleshooting".)
    pub async fn echo_whole_body() -> Upstream {
        Upstream::start(|req: Request<Incoming>| async move {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return text(400, "body"),
            };
            Response::builder()
                .status(200)
                .body(full(body))
                .expect("response")
        })
        .await
    }

    /// An upstream that answers each request `200 body` only once `release` is notified (one
    /// notification per request).
    pub async fn held(release: Arc<tokio::sync::Notify>, body: &'static str) -> Upstream {
        Upstream::start(move |_req| {
            let release = release.clone();
            async move {
                release.notified().await;
                text(200, body)
            }
        })
        .await
    }

    /// Releases `n` requests held by a [`Upstream::held`], one at a time, each once the answer
    /// before it has reached its client (`answered` counts those): pingora's pool can keep an
    /// evicted connection open when two connections are released to it at the same instant.
    pub async fn answer_one_at_a_time(
        release: &tokio::sync::Notify,
        answered: &AtomicUsize,
        n: usize,
    ) {
        for i in 1..=n {
            release.notify_one();
            wait::wait_until(|| answered.load(Ordering::SeqCst) >= i, "an answer").await;
        }
    }

    /// Waits until the connections a pool of `kept` could not keep, out of `released`, are
    /// closed, and checks that some were kept. Under load pingora's pool sometimes closes one
    /// more than the surplus (3 runs in 30 beside a CPU hog), so that one is allowed.
    pub async fn wait_for_the_surplus_closed(&self, released: usize, kept: usize) {
        let surplus = released - kept;
        self.wait_for_closed(surplus).await;
        let closed = self.closed();
        assert!(
            (surplus..=surplus + 1).contains(&closed) && closed < released,
            "{closed} of {released} connections closed by a pool of {kept}"
        );
    }

    /// An upstream that reads each whole request body before answering `read <n> bytes`.
    pub async fn read_all() -> Upstream {
        Upstream::start(|req: Request<Incoming>| async move {
            match req.into_body().collect().await {
                Ok(body) => {
                    let n = body.to_bytes().len();
                    Response::builder()
                        .status(200)
                        .body(full(format!("read {n} bytes")))
                        .expect("response")
                }
                Err(_) => text(400, "body broken off"),
            }
        })
        .await
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Connections the other side has closed so far.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits until the other side has closed `n` connections.
    pub async fn wait_for_closed(&self, n: usize) {
        wait_until(|| self.closed() >= n, "upstream connections closed").await;
    }

    /// Requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until the upstream has received `n` requests.
    pub async fn wait_for_requests(&self, n: usize) {
        wait_until(|| self.seen.lock().unwrap().len() >= n, "upstream requests").await;
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response with a text body.
pub fn text(status: u16, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(full(body))
        .expect("response")
}

pub fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Sends `req` on to the HTTP server at `to` as it came (its method, target, headers but the
/// host and length, and body); that server's status and body. For stubs that stand in front of
/// a real agent and change some of what it says.
pub async fn forward(to: SocketAddr, req: Request<Incoming>) -> (u16, Bytes) {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.expect("the request's body").to_bytes();
    let mut call = client()
        .request(parts.method, format!("http://{to}{}", parts.uri))
        .body(body);
    for (k, v) in &parts.headers {
        if k != "host" && k != "content-length" {
            call = call.header(k, v);
        }
    }
    let resp = call.send().await.expect("the agent answers");
    let status = resp.status().as_u16();
    (status, resp.bytes().await.expect("the agent's answer"))
}

/// A response of `status` with `body` as JSON.
pub fn answer(status: u16, body: Bytes) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body))
        .expect("response")
}

/// Starts one of interlingua's sample agents on 127.0.0.1:0, `serve` being its `serve` function
/// (`samples::mip003::serve`, ...) and each of its tasks taking `work`; its address.
pub async fn sample_agent<F, Fut>(serve: F, work: Duration) -> SocketAddr
where
    F: FnOnce(TcpListener, Options) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    sample_agent_with(serve, Options::work(work)).await
}

/// Starts a sample agent as [`sample_agent`] does, its tasks taking `work` by `clock`: with a
/// [`Clock::manual`], a task stays in its first state (and a synchronous answer unsent) until
/// the test moves the clock on, so that the test, not the time it takes, decides when the agent
/// gets on with it.
pub async fn sample_agent_on<F, Fut>(serve: F, work: Duration, clock: &Clock) -> SocketAddr
where
    F: FnOnce(TcpListener, Options) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let options = Options {
        work,
        clock: clock.clone(),
        ..Options::default()
    };
    sample_agent_with(serve, options).await
}

/// Starts a sample agent as [`sample_agent`] does, asking for input in words (no field named:
/// [`samples::Ask::Words`]).
pub async fn sample_agent_asking_in_words<F, Fut>(serve: F, work: Duration) -> SocketAddr
where
    F: FnOnce(TcpListener, Options) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    sample_agent_with(serve, Options::work(work).asking_in_words()).await
}

async fn sample_agent_with<F, Fut>(serve: F, options: Options) -> SocketAddr
where
    F: FnOnce(TcpListener, Options) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a sample agent");
    let addr = listener.local_addr().expect("sample agent address");
    tokio::spawn(serve(listener, options));
    addr
}

/// A real interlingua, started in-process from config text.
pub struct Proxy {
    pub addr: SocketAddr,
    pub addrs: Vec<SocketAddr>,
    pub admin: SocketAddr,
    handle: ShutdownHandle,
    thread: Option<std::thread::JoinHandle<ShutdownReport>>,
    _data: tempfile::TempDir,
}

impl Proxy {
    /// Starts interlingua on `config`, which may use `{data_dir}`; listeners should use port 0.
    pub fn start(config: &str) -> Proxy {
        Proxy::start_in(config, tempfile::tempdir().expect("temp dir"))
    }

    /// Starts interlingua with its data in `data` (kept until the proxy is dropped).
    pub fn start_in(config: &str, data: tempfile::TempDir) -> Proxy {
        let text = config.replace(
            "{data_dir}",
            &data.path().join("data").display().to_string(),
        );
        let setup = match interlingua::setup::parse(&text, "test.toml") {
            Ok(s) => s,
            Err(problems) => panic!("test config is invalid:\n{problems}\n---\n{text}"),
        };
        Proxy::serve(setup, data)
    }

    /// Starts interlingua from a config file, [`Proxy::file`], written from `config` (which may
    /// use `{data_dir}`): the file can then be changed and reloaded.
    pub fn start_file(config: &str) -> Proxy {
        let data = tempfile::tempdir().expect("temp dir");
        let file = data.path().join("interlingua.toml");
        let text = config.replace(
            "{data_dir}",
            &data.path().join("data").display().to_string(),
        );
        std::fs::write(&file, &text).expect("write the config file");
        let setup = match interlingua::setup::load(&file) {
            Ok(s) => s,
            Err(problems) => panic!("test config is invalid:\n{problems}\n---\n{text}"),
        };
        Proxy::serve(setup, data)
    }

    /// `POST /config/reload` on the admin API (its token from [`secrets::ADMIN_TOKEN`]): the
    /// status and the report.
    pub async fn reload(&self) -> (u16, serde_json::Value) {
        let resp = client()
            .post(self.admin_url("/config/reload"))
            .bearer_auth(secrets::ADMIN_TOKEN)
            .send()
            .await
            .expect("the admin API answers");
        status_and_json(resp).await
    }

    /// The config file of a proxy started with [`Proxy::start_file`].
    pub fn file(&self) -> std::path::PathBuf {
        self._data.path().join("interlingua.toml")
    }

    fn serve(setup: interlingua::setup::Setup, data: tempfile::TempDir) -> Proxy {
        let server = Server::start(setup).expect("server starts");
        let addrs = server.proxy_addrs().to_vec();
        let admin = server.admin_addr();
        let handle = server.shutdown_handle();
        let thread = std::thread::spawn(move || server.run_until_stopped());
        Proxy {
            addr: addrs[0],
            addrs,
            admin,
            handle,
            thread: Some(thread),
            _data: data,
        }
    }

    /// One upstream `up` at `upstream` and one route `main` taking `/` to it, with settings
    /// added to each.
    pub fn passthrough(
        upstream: SocketAddr,
        upstream_settings: &str,
        route_settings: &str,
    ) -> Proxy {
        Proxy::start(&config(
            "",
            &one_route(upstream, upstream_settings, route_settings),
        ))
    }

    /// The admin API's `/metrics` text once it shows every one of `lines`. A request is counted
    /// in pingora's logging phase, after its answer has gone out, so a client can hold the answer
    /// a moment before the count moves.
    pub async fn metrics_showing(&self, lines: &[&str]) -> String {
        let http = client();
        wait::eventually("the metrics", || async {
            let resp = http
                .get(self.admin_url("/metrics"))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let text = resp.text().await.map_err(|e| e.to_string())?;
            match lines.iter().find(|l| !text.lines().any(|t| t == **l)) {
                None => Ok(text),
                Some(missing) => Err(format!("no `{missing}` in:\n{text}")),
            }
        })
        .await
    }

    /// Waits until `interlingua_client_timeouts_total{kind}` shows `n` connections closed for
    /// slowness (`header`, `body` or `idle`).
    pub async fn client_timeouts_showing(&self, kind: &str, n: usize) {
        let line = format!("interlingua_client_timeouts_total{{kind=\"{kind}\"}} {n}");
        self.metrics_showing(&[&line]).await;
    }

    /// The newest task in the proxy's store once `holds` holds of it (a stage of its life the
    /// test waits for, as the proxy stored it); fails the test, naming `what`, after the deadline.
    pub async fn latest_task(&self, what: &str, holds: impl Fn(&Task) -> bool) -> Task {
        let store = SqliteStore::open(&self.data_dir()).expect("the proxy's store");
        let newest = TaskQuery {
            page: 1,
            page_size: 1,
            ..TaskQuery::default()
        };
        wait::eventually(&format!("the task {what}"), || async {
            match store
                .search(&newest)
                .await
                .map_err(|e| e.to_string())?
                .0
                .pop()
            {
                Some(t) if holds(&t) => Ok(t),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// The data directory (the task store and ledger live there).
    pub fn data_dir(&self) -> std::path::PathBuf {
        self._data.path().join("data")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Asks for a graceful shutdown and waits until the server has stopped.
    pub fn stop(mut self) -> ShutdownReport {
        self.handle.shutdown();
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("server thread")
    }

    /// Stops the server and hands back its data directory, for a restart on the same data.
    pub async fn stop_keeping_data(mut self) -> tempfile::TempDir {
        let handle = self.handle.clone();
        let thread = self.thread.take().expect("running");
        tokio::task::spawn_blocking(move || {
            handle.shutdown();
            thread.join().expect("server thread")
        })
        .await
        .expect("join");
        std::mem::replace(&mut self._data, tempfile::tempdir().expect("temp dir"))
    }

    /// Waits (off the async runtime) for a server whose shutdown was already requested.
    pub async fn join(mut self) -> ShutdownReport {
        let thread = self.thread.take().expect("running");
        tokio::task::spawn_blocking(move || thread.join().expect("server thread"))
            .await
            .expect("join")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.handle.shutdown();
            self.handle.shutdown();
            let _ = thread.join();
        }
    }
}

/// A test config: `[server]` with a temporary data directory plus `server` settings, the admin
/// listener and one proxy listener on port 0, then `rest` (upstreams, routes, other tables).
pub fn config(server: &str, rest: &str) -> String {
    format!(
        "[server]\ndata_dir = \"{{data_dir}}\"\nthreads = 2\n{server}\n\n\
         [admin]\naddress = \"127.0.0.1:0\"\n\n\
         [[listeners]]\naddress = \"127.0.0.1:0\"\n\n{rest}"
    )
}

/// An upstream `up` at `addr` and a route `main` taking `/` to it, with settings added to each.
pub fn one_route(addr: SocketAddr, upstream_settings: &str, route_settings: &str) -> String {
    route_at(addr, "/", upstream_settings, route_settings)
}

/// An upstream `up` at `addr` and a route `main` taking `prefix` to it.
pub fn route_at(
    addr: SocketAddr,
    prefix: &str,
    upstream_settings: &str,
    route_settings: &str,
) -> String {
    format!(
        "[[upstreams]]\nname = \"up\"\naddress = \"{addr}\"\n{upstream_settings}\n\n\
         [[routes]]\nname = \"main\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"up\"\n{route_settings}\n"
    )
}

/// A plain HTTP client that keeps connections alive and never retries.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(DEADLINE)
        .build()
        .expect("client")
}

/// The status and JSON body of `resp`; panics, showing the body, if it is not JSON.
pub async fn status_and_json(resp: reqwest::Response) -> (u16, serde_json::Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("read the body");
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

/// Parses the JSON error body interlingua answers with and checks its shape.
pub fn error_of(body: &str) -> (String, String, String) {
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    let e = &v["error"];
    assert_eq!(
        v.as_object().map(|o| o.len()),
        Some(1),
        "only `error` at the top: {body}"
    );
    assert_eq!(
        e.as_object().map(|o| o.len()),
        Some(3),
        "code, message, request_id: {body}"
    );
    (
        e["code"].as_str().expect("code").to_string(),
        e["message"].as_str().expect("message").to_string(),
        e["request_id"].as_str().expect("request_id").to_string(),
    )
}

/// A MIP-003 agent whose job runs forever; counts nothing itself (the upstream records calls).
pub async fn forever_running_agent() -> Upstream {
    Upstream::start(|req| async move { forever_running(req.uri().path()) }).await
}

/// What [`forever_running_agent`] answers a request for `path` with: its job for `/start_job`,
/// the job's status (running) for anything else.
pub fn forever_running(path: &str) -> Response<Body> {
    let body = if path == "/start_job" {
        r#"{"id":"job-1","blockchainIdentifier":"b","payByTime":1,"submitResultTime":2,"unlockTime":3,"externalDisputeUnlockTime":4,"agentIdentifier":"a","sellerVKey":"v","identifierFromPurchaser":"aabbccddeeff0011","input_hash":"h"}"#
    } else {
        r#"{"id":"s-1","status":"running"}"#
    };
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(full(body))
        .unwrap()
}
