//! Traces over OTLP, from the real binary (the tracer, like the log subscriber, is the process's:
//! the in-process harness installs none) to a real OTLP/HTTP receiver that decodes what it gets:
//! one translated create, the spans of its trace with their parents, kinds and attributes, and
//! the `traceparent` the agent was sent; with sampling at 0 nothing is sent, and without
//! `[telemetry]` the client's own trace context reaches the agent unchanged.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use common::process::{interlingua, serve, Served};
use common::secrets::{auth_table, token, ADMIN_ENV, PLAN};
use common::{client, config, forever_running_agent, full, Seen, Upstream};
use http_body_util::BodyExt;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

const DID: &str = "did:nv:0000000000000000000000000000000000000000000000000000000000000007";
const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// One exported span, and the `service.name` it was exported under.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    fn id(&self) -> String {
        hex(&self.span.span_id)
    }

    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// An attribute's value as text.
    fn attr(&self, key: &str) -> Option<String> {
        let kv = self.span.attributes.iter().find(|kv| kv.key == key)?;
        Some(text(kv.value.as_ref()?.value.as_ref()?))
    }
}

/// A value as text: strings as they are, integers in decimal (a `u64` field exported as the
/// text of the number would show here as that text, and fail the comparison with a number's).
fn text(value: &Any) -> String {
    match value {
        Any::StringValue(s) => s.clone(),
        Any::IntValue(i) => format!("{i} (int)"),
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An OTLP/HTTP receiver: every `POST /v1/traces` decoded as protobuf, its spans kept.
struct Receiver {
    upstream: Upstream,
    spans: Arc<Mutex<Vec<Got>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Arc<Mutex<Vec<Got>>> = Arc::default();
        let kept = spans.clone();
        let upstream = Upstream::start(move |req: hyper::Request<hyper::body::Incoming>| {
            let kept = kept.clone();
            async move {
                assert_eq!(req.uri().path(), "/v1/traces");
                assert_eq!(
                    req.headers()["content-type"].to_str().unwrap(),
                    "application/x-protobuf"
                );
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let export = ExportTraceServiceRequest::decode(body).expect("an OTLP export");
                for rs in export.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|kv| kv.key == "service.name")
                        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                        .map(text)
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        kept.lock()
                            .unwrap()
                            .extend(ss.spans.into_iter().map(|span| Got {
                                service: service.clone(),
                                span,
                            }));
                    }
                }
                hyper::Response::builder()
                    .status(200)
                    .header("content-type", "application/x-protobuf")
                    .body(full(ExportTraceServiceResponse::default().encode_to_vec()))
                    .unwrap()
            }
        })
        .await;
        Receiver { upstream, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.upstream.addr)
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }
}

/// A receiver, a MIP-003 agent whose jobs run on, and a proxy in `dir`: a paid Nevermined route
/// to the agent (a hold of 5, a fee of 2 per create), a passthrough route `/raw` to it, and the
/// `[telemetry]` section `telemetry` makes of the receiver's endpoint; `alice` granted 10 credits.
async fn started(
    dir: &Path,
    telemetry: impl FnOnce(&str) -> String,
) -> (Receiver, Upstream, Served) {
    let receiver = Receiver::start().await;
    let agent = forever_running_agent().await;
    let served = serve_in(dir, agent.addr, &telemetry(&receiver.endpoint()));
    (receiver, agent, served)
}

fn serve_in(dir: &Path, agent: SocketAddr, telemetry: &str) -> Served {
    let admin = format!("[admin]\naddress = \"127.0.0.1:0\"\ntoken_env = \"{ADMIN_ENV}\"\n");
    let text = config(
        "",
        &format!(
            "{auth}\n[[upstreams]]\nname = \"mip\"\naddress = \"{agent}\"\n\n\
             [[routes]]\nname = \"paid\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"mip\"\n\
             front = \"nevermined\"\nback = \"mip003\"\nauth = true\nplans = [\"{PLAN}\"]\n\
             rate_limit = {{ per_subject = \"100/s\" }}\n\
             price = {{ hold = 5, step = 1, operations = {{ create_task = 2 }} }}\n\n\
             [[routes]]\nname = \"raw\"\nmatch = {{ path_prefix = \"/raw\" }}\nupstream = \"mip\"\n\n\
             {telemetry}\n",
            auth = auth_table(),
        ),
    )
    .replace("[admin]\naddress = \"127.0.0.1:0\"\n", &admin)
    .replace("{data_dir}", &dir.join("data").display().to_string());
    let file = dir.join("interlingua.toml");
    std::fs::write(&file, text).unwrap();
    let grant = interlingua()
        .args(["credits", "grant", "--plan", PLAN, "--subject", "alice"])
        .args(["--amount", "10", "-c", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        grant.status.success(),
        "{}",
        String::from_utf8_lossy(&grant.stderr)
    );
    serve(&file, Stdio::null())
}

/// One create with the client's trace context (`flags`: its sampled flag); the answer's task id.
async fn create(served: &Served, flags: &str) -> String {
    let resp = client()
        .post(format!("http://{}/api/v1/agents/{DID}/tasks", served.proxy))
        .bearer_auth(token("alice"))
        .header(
            "traceparent",
            format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-{flags}"),
        )
        .header("tracestate", "client=1")
        .json(&json!({"input_query": "trace me"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let created: Value = resp.json().await.unwrap();
    created["task"]["task_id"].as_str().unwrap().to_string()
}

/// One passthrough request with the client's trace context, sampled.
async fn passthrough(served: &Served) {
    let resp = client()
        .get(format!("http://{}/raw/status", served.proxy))
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .header("tracestate", "client=1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// SIGTERM, and the exit (code 0) that follows it: by then the last spans are exported.
async fn stop(served: Served) {
    kill(Pid::from_raw(served.child.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(served.exited().await.code(), Some(0));
}

/// The one request the agent got at `path`.
fn sent_to(agent: &Upstream, path: &str) -> Seen {
    let seen: Vec<Seen> = agent
        .seen()
        .into_iter()
        .filter(|s| s.target.starts_with(path))
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    seen[0].clone()
}

/// The parts of a `traceparent`: version, trace id, parent id, flags.
fn parts(traceparent: &str) -> Vec<String> {
    traceparent.split('-').map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_translated_create_is_one_trace_under_the_clients_span_down_to_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let (receiver, agent, served) = started(dir.path(), |endpoint| {
        format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\nservice_name = \"gateway-test\"")
    })
    .await;
    let answered = create(&served, "01").await;
    passthrough(&served).await;
    stop(served).await;
    // Spans name a task by its id in the store; Nevermined shows it as `task-{id}`.
    let task_id = answered
        .strip_prefix("task-")
        .unwrap_or_else(|| panic!("a Nevermined task id: {answered}"));

    let all = receiver.spans();
    let ours: Vec<&Got> = all
        .iter()
        .filter(|s| s.trace_id() == CLIENT_TRACE)
        .collect();
    // Anything else is the watcher's (a trace of its own, rooted at `watch`).
    let by_id: HashMap<String, &Got> = all.iter().map(|s| (s.id(), s)).collect();
    for other in all.iter().filter(|s| s.trace_id() != CLIENT_TRACE) {
        let mut root = other;
        while let Some(parent) = by_id.get(&root.parent()) {
            root = parent;
        }
        assert_eq!(
            root.span.name, "watch",
            "a span outside the client's trace: {other:?}"
        );
    }
    assert!(ours.iter().all(|s| s.service == "gateway-test"), "{ours:?}");
    let named = |name: &str, parent: &str| {
        let found: Vec<&&Got> = ours
            .iter()
            .filter(|s| s.span.name == name && s.parent() == parent)
            .collect();
        assert_eq!(found.len(), 1, "one `{name}` below {parent} in {ours:#?}");
        *found[0]
    };

    let request = named("POST /", CLIENT_SPAN);
    assert_eq!(request.span.kind, SpanKind::Server as i32);
    assert_eq!(
        request.parent(),
        CLIENT_SPAN,
        "the client's span is the request's parent"
    );
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", "/"),
        ("interlingua.route", "paid"),
        ("http.response.status_code", "201 (int)"),
        ("interlingua.task.id", task_id),
        ("interlingua.credits.charged", "2 (int)"),
    ] {
        assert_eq!(request.attr(key).as_deref(), Some(value), "request {key}");
    }
    assert!(request.attr("interlingua.request_id").is_some());

    let auth = named("auth", &request.id());
    assert_eq!(auth.attr("interlingua.plan").as_deref(), Some(PLAN));
    let limits = named("limits", &request.id());
    assert_eq!(
        limits.attr("interlingua.limits.backend").as_deref(),
        Some("local")
    );
    for store in [
        "store.insert_with_hold",
        "store.update_and_settle",
        "store.charge",
    ] {
        let span = named(store, &request.id());
        assert_eq!(span.attr("db.system.name").as_deref(), Some("sqlite"));
    }

    let call = named("invoke_agent mip", &request.id());
    assert_eq!(call.span.kind, SpanKind::Client as i32);
    for (key, value) in [
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.agent.name", "mip"),
        ("gen_ai.conversation.id", task_id),
        ("interlingua.dialect", "mip003"),
        ("interlingua.operation", "create_task"),
        ("http.request.method", "POST"),
        ("server.address", "127.0.0.1"),
        (
            "server.port",
            format!("{} (int)", agent.addr.port()).as_str(),
        ),
        ("http.response.status_code", "200 (int)"),
    ] {
        assert_eq!(call.attr(key).as_deref(), Some(value), "agent call {key}");
    }

    // The agent was told its caller is that call, in the client's trace, sampled.
    let started = sent_to(&agent, "/start_job");
    let sent = parts(&started.header("traceparent").expect("a traceparent"));
    assert_eq!(sent, ["00", CLIENT_TRACE, &call.id(), "01"]);
    assert_eq!(started.header("tracestate").as_deref(), Some("client=1"));

    // A passthrough request: its own server span, and its call to the agent below it.
    let raw = named("GET /raw", CLIENT_SPAN);
    assert_eq!(raw.span.kind, SpanKind::Server as i32);
    assert_eq!(raw.attr("interlingua.route").as_deref(), Some("raw"));
    let forwarded = named("invoke_agent mip", &raw.id());
    // No token, no limits on this route: nothing else below the request.
    assert_eq!(ours.iter().filter(|s| s.parent() == raw.id()).count(), 1);
    assert_eq!(forwarded.span.kind, SpanKind::Client as i32);
    assert_eq!(
        forwarded.attr("interlingua.dialect").as_deref(),
        Some("passthrough")
    );
    assert_eq!(
        forwarded.attr("http.response.status_code").as_deref(),
        Some("200 (int)")
    );
    let sent = parts(
        &sent_to(&agent, "/raw/status")
            .header("traceparent")
            .unwrap(),
    );
    assert_eq!(sent, ["00", CLIENT_TRACE, &forwarded.id(), "01"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sampling_at_0_a_client_that_samples_nothing_gets_nothing_exported() {
    let dir = tempfile::tempdir().unwrap();
    let (receiver, agent, served) = started(dir.path(), |endpoint| {
        format!("[telemetry]\notlp_endpoint = \"{endpoint}\"\nsample_ratio = 0")
    })
    .await;
    create(&served, "00").await;
    stop(served).await;
    assert!(receiver.spans().is_empty(), "{:?}", receiver.spans());
    assert_eq!(receiver.upstream.seen().len(), 0, "nothing was posted");
    // The agent still hears of the trace, as not sampled, with interlingua's span as its parent.
    let sent = parts(&sent_to(&agent, "/start_job").header("traceparent").unwrap());
    assert_eq!((sent[1].as_str(), sent[3].as_str()), (CLIENT_TRACE, "00"));
    assert_ne!(sent[2], CLIENT_SPAN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_the_agent_gets_the_clients_trace_context_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (receiver, agent, served) = started(dir.path(), |_| String::new()).await;
    create(&served, "01").await;
    passthrough(&served).await;
    stop(served).await;
    assert_eq!(receiver.upstream.seen().len(), 0, "nothing was posted");
    for path in ["/start_job", "/raw/status"] {
        let sent = sent_to(&agent, path);
        assert_eq!(
            sent.header_all("traceparent"),
            [format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")],
            "{path}"
        );
        assert_eq!(sent.header_all("tracestate"), ["client=1"], "{path}");
    }
}
