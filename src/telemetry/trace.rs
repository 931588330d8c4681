//! Traces: OpenTelemetry spans, made with `tracing` and exported over OTLP/HTTP
//! (`[telemetry]`). Every use of the OpenTelemetry crates is here or in the module above.
//!
//! ```text
//! request (SERVER)                     early_request_filter … logging, named `POST /masumi`
//! │                                    once routed; its parent is the client's `traceparent`
//! ├── auth                             the bearer token verified
//! ├── limits                           the request counted (locally, or in Redis)
//! ├── store.<op>                       each call to the task store (insert_with_hold, get, …)
//! ├── invoke_agent <upstream> (CLIENT) each HTTP call to the agent; the `traceparent` it sends
//! │                                    names this span, so the agent's spans hang below it
//! └── background                       what a request leaves running (a synchronous back's
//!                                      call, a stream), with its own store and agent spans
//! watch (root)                         the watcher's look at one task, with the same children
//! ```
//!
//! Free when off: each constructor first reads one flag ([`enabled`]), set only once a tracer is
//! installed, and otherwise returns `Span::none()`, which every `record`, `enter` and
//! `instrument` passes over. The in-process tests install no tracer, so they trace nothing.
//!
//! A span is never entered across an `.await`: pingora runs each phase as its own future, so the
//! request span is kept in the request's context and futures are `.instrument`ed with it; the
//! store and agent spans find their parent as the current span. Numbers are recorded as `i64`:
//! tracing-opentelemetry 0.34 records a `u64` field as its text.

use std::sync::atomic::{AtomicBool, Ordering};

use http::{HeaderMap, Method};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use pingora::http::RequestHeader;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};

use crate::config::{Telemetry, Upstream};

/// The target of every span made here: the log filter and the exporter's filter tell them from
/// log events by it, so that `RUST_LOG` never turns traces off and log lines never carry spans.
pub const TARGET: &str = "interlingua::trace";

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are made: a tracer is installed (`[telemetry] otlp_endpoint`).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The tracer provider for `settings`: spans batched by a thread of the SDK's own and posted as
/// protobuf to `otlp_endpoint` (used as written, `/v1/traces` not appended). Its blocking HTTP
/// client is what that thread can use (an async one would need a runtime there); it is built
/// without TLS, so the endpoint is `http://` (the config refuses `https://`). The exporter reads
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TIMEOUT` from the environment itself.
///
/// Sampling is parent-based: a request whose client sent a `traceparent` is kept when its
/// sampled flag is set; a trace begun here is kept at `sample_ratio`.
pub(super) fn provider(settings: &Telemetry) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.otlp_endpoint.clone())
        .build()
        .map_err(|e| format!("cannot set up the OTLP exporter: {e}"))?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(settings.service_name.clone())
                .build(),
        )
        .build())
}

/// The layer that turns the spans made here into OpenTelemetry spans of `provider`'s tracer.
/// Source locations, threads and busy/idle times are left out (they cost on every span and
/// tell an operator little), and a span's parent is the current `tracing` span.
pub(super) fn layer<S>(provider: &SdkTracerProvider) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("interlingua"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
}

/// Turns span making on, once the layer is installed.
pub(super) fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether the current span is one of ours (a request's, the watcher's, or below one): the
/// spans below are made only inside a trace, never as roots of their own.
fn in_trace() -> bool {
    enabled()
        && Span::current()
            .metadata()
            .is_some_and(|m| m.target() == TARGET)
}

/// The span of one request, from its method, path and headers. A client's `traceparent` (and
/// `tracestate`) makes it a child of the client's span; one that is absent or unreadable makes
/// it the root of a new trace.
pub fn request(method: &Method, path: &str, headers: &HeaderMap, request_id: &str) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        "otel.kind" = "server",
        "otel.name" = method.as_str(),
        "otel.status_code" = Empty,
        "http.request.method" = method.as_str(),
        "url.path" = path,
        "http.route" = Empty,
        "http.response.status_code" = Empty,
        "error.type" = Empty,
        "interlingua.route" = Empty,
        "interlingua.request_id" = request_id,
        "interlingua.task.id" = Empty,
        "interlingua.credits.charged" = Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    // Only fails for a span the layer does not see, which is then no span to export.
    let _ = span.set_parent(parent);
    span
}

/// What a request ended with, on its span, which ends here: `{method} {route prefix}` as its
/// name once routed, the status, the error's code. A 5xx is the span's error; a 4xx is the
/// client's, and leaves it unset.
pub fn request_done(
    span: &Span,
    method: &Method,
    route: Option<(&str, &str)>,
    status: u16,
    error: Option<&str>,
) {
    if span.is_none() {
        return;
    }
    if let Some((name, prefix)) = route {
        // Recorded as `otel.name` this would be lost on a span already started (by a child).
        span.context()
            .span()
            .update_name(format!("{method} {prefix}"));
        span.record("http.route", prefix);
        span.record("interlingua.route", name);
    }
    span.record("http.response.status_code", i64::from(status));
    if let Some(code) = error {
        span.record("error.type", code);
    }
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
    // The span's end is when it was last left: now.
    span.in_scope(|| {});
}

/// What a translated request did, on its span: the task it created or named, the credits it
/// charged.
pub fn request_task(span: &Span, task_id: Option<&str>, charged: u64) {
    if span.is_none() {
        return;
    }
    if let Some(id) = task_id {
        span.record("interlingua.task.id", id);
    }
    span.record(
        "interlingua.credits.charged",
        i64::try_from(charged).unwrap_or(i64::MAX),
    );
}

/// The span of the bearer token's check, below `request`.
pub fn auth(request: &Span) -> Span {
    if request.is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: request,
        "auth",
        "interlingua.plan" = Empty,
        "error.type" = Empty,
        "otel.status_code" = Empty,
    )
}

/// The span of the rate limits' count, below `request`; `backend` is `local` or `redis`.
pub fn limits(request: &Span, backend: &'static str) -> Span {
    if request.is_none() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: request,
        "limits",
        "interlingua.limits.backend" = backend,
        "interlingua.limit.policy" = Empty,
        "error.type" = Empty,
        "otel.status_code" = Empty,
    )
}

/// Marks `span` as ended in the error whose code is `code`.
pub fn failed(span: &Span, code: &str) {
    span.record("error.type", code);
    span.record("otel.status_code", "error");
}

/// The span of one call to the task store (`op`, a `TaskStore` method), below the current
/// span; `backend` is the store's (`sqlite`, `postgres`).
pub fn store(op: &'static str, backend: &'static str) -> Span {
    if !in_trace() {
        return Span::none();
    }
    let system = match backend {
        "postgres" => "postgresql",
        other => other,
    };
    tracing::info_span!(
        target: TARGET,
        "store",
        "otel.name" = format_args!("store.{op}"),
        "db.system.name" = system,
        "db.operation.name" = op,
    )
}

/// The span of one HTTP call to `agent`, below the current span: the GenAI conventions'
/// `invoke_agent` client span, with the dialect it is spoken in and the operation (the mapping's
/// form or call) when there is one.
pub fn agent_call(
    agent: &Upstream,
    dialect: &str,
    operation: Option<&str>,
    method: &Method,
) -> Span {
    if !in_trace() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        "otel.kind" = "client",
        "otel.name" = format_args!("invoke_agent {}", agent.name),
        "otel.status_code" = Empty,
        "gen_ai.operation.name" = "invoke_agent",
        "gen_ai.agent.name" = agent.name.as_str(),
        "gen_ai.conversation.id" = Empty,
        "interlingua.dialect" = dialect,
        "interlingua.operation" = operation,
        "http.request.method" = method.as_str(),
        "server.address" = agent.host.as_str(),
        "server.port" = i64::from(agent.port),
        "http.response.status_code" = Empty,
        "error.type" = Empty,
    )
}

/// What an agent answered, on its call's span: the status (4xx and 5xx are the call's error),
/// or, with no answer, why (`Err`, an error code).
pub fn agent_answered(span: &Span, answer: Result<u16, &str>) {
    if span.is_none() {
        return;
    }
    match answer {
        Ok(status) => {
            span.record("http.response.status_code", i64::from(status));
            if status >= 400 {
                span.record("error.type", status.to_string());
                span.record("otel.status_code", "error");
            }
        }
        Err(code) => failed(span, code),
    }
}

/// A span for work a request leaves running when it answers (`what`: `execute`, `stream`),
/// below the current span, so that the calls it makes stay in the request's trace.
pub fn background(what: &'static str) -> Span {
    if !in_trace() {
        return Span::none();
    }
    tracing::info_span!(target: TARGET, "background", "otel.name" = what)
}

/// The root span of the watcher's look at task `task_id`.
pub fn watch(task_id: &str) -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: None,
        "watch",
        "interlingua.task.id" = task_id,
    )
}

/// A client's W3C trace context, as it came (`traceparent`, `tracestate`). With traces off it is
/// sent on to the agent unchanged, so that a caller's trace still reaches it; with traces on the
/// agent gets the context of interlingua's own span instead (see [`propagate`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTrace {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl ClientTrace {
    /// The trace context in `headers`; empty when there is none (nothing is allocated then).
    pub fn of(headers: &HeaderMap) -> ClientTrace {
        let value = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        match value(TRACEPARENT) {
            None => ClientTrace::default(),
            traceparent => ClientTrace {
                traceparent,
                tracestate: value(TRACESTATE),
            },
        }
    }
}

/// Sets the trace context an agent call carries on its request `header`: the context of `span`,
/// the call's own span, when it is one (the agent's work then hangs below it); otherwise the
/// client's, unchanged. Fails only if pingora refuses a header.
pub fn propagate(
    span: &Span,
    client: Option<&ClientTrace>,
    header: &mut RequestHeader,
) -> pingora::Result<()> {
    let mut set = Ok(());
    let mut insert = |name: &'static str, value: String| {
        if set.is_ok() {
            set = header.insert_header(name, value);
        }
    };
    if !span.is_none() {
        TraceContextPropagator::new().inject_context(&span.context(), &mut Setter(&mut insert));
    } else if let Some(client) = client {
        if let Some(v) = &client.traceparent {
            insert(TRACEPARENT, v.clone());
        }
        if let Some(v) = &client.tracestate {
            insert(TRACESTATE, v.clone());
        }
    }
    set
}

/// A request's headers, read by the propagator.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The propagator's output, handed to a header setter; an empty `tracestate` is left out.
struct Setter<'a, F>(&'a mut F);

impl<F: FnMut(&'static str, String)> Injector for Setter<'_, F> {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            TRACEPARENT => TRACEPARENT,
            TRACESTATE if !value.is_empty() => TRACESTATE,
            _ => return,
        };
        (self.0)(name, value);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::{HeaderMap, HeaderValue, Method};
    use opentelemetry::trace::{SpanKind, TraceId};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
    use tracing::Span;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    use super::*;

    const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const CLIENT_SPAN: &str = "00f067aa0ba902b7";

    /// Keeps what it is given to export.
    #[derive(Debug, Clone, Default)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanExporter for Kept {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    fn agent() -> Upstream {
        let text = "[[listeners]]\naddress = \"127.0.0.1:0\"\n\n\
            [[upstreams]]\nname = \"echo\"\naddress = \"127.0.0.1:9\"\n\n\
            [[routes]]\nmatch = { path_prefix = \"/\" }\nupstream = \"echo\"\n";
        let config = crate::config::parse(text, "t.toml").unwrap_or_else(|p| panic!("{p}"));
        config.upstreams[0].clone()
    }

    fn client(flags: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-{flags}");
        h.insert("traceparent", HeaderValue::from_str(&parent).unwrap());
        h.insert("tracestate", HeaderValue::from_static("vendor=1"));
        h
    }

    /// The trace context `propagate` sets on a request to the agent.
    fn sent(span: &Span, client: &HeaderMap) -> Vec<(String, String)> {
        let mut h = RequestHeader::build("POST", b"/start_job", None).unwrap();
        propagate(span, Some(&ClientTrace::of(client)), &mut h).unwrap();
        h.headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect()
    }

    /// A request with `headers` and one agent call in it, traced at `ratio`: the headers the
    /// agent got, and the spans exported.
    fn traced(headers: &HeaderMap, ratio: f64) -> (Vec<(String, String)>, Vec<SpanData>) {
        let kept = Kept::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(kept.clone())
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .build();
        let subscriber = tracing_subscriber::registry().with(
            layer(&provider).with_filter(Targets::new().with_target(TARGET, tracing::Level::INFO)),
        );
        enable();
        let mut sent = Vec::new();
        tracing::subscriber::with_default(subscriber, || {
            let request = request(&Method::POST, "/start_job", headers, "r-1");
            let call = request
                .in_scope(|| agent_call(&agent(), "mip003", Some("create_task"), &Method::POST));
            sent = self::sent(&call, headers);
            agent_answered(&call, Ok(201));
            drop(call);
            request_done(&request, &Method::POST, Some(("r", "/")), 201, None);
        });
        let spans = kept.0.lock().unwrap().clone();
        (sent, spans)
    }

    #[test]
    fn without_traces_the_clients_trace_context_goes_on_unchanged() {
        assert_eq!(
            sent(&Span::none(), &client("01")),
            [
                (
                    "traceparent".to_string(),
                    format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
                ),
                ("tracestate".to_string(), "vendor=1".to_string())
            ]
        );
        // A tracestate alone is no trace context.
        let mut alone = HeaderMap::new();
        alone.insert("tracestate", HeaderValue::from_static("vendor=1"));
        assert_eq!(ClientTrace::of(&alone), ClientTrace::default());
        assert_eq!(sent(&Span::none(), &alone), []);
    }

    #[test]
    fn an_agent_call_is_sent_its_own_span_as_parent_in_the_clients_trace() {
        let (sent, spans) = traced(&client("01"), 0.0);
        let find = |kind: SpanKind| {
            spans
                .iter()
                .find(|s| s.span_kind == kind)
                .unwrap_or_else(|| panic!("no {kind:?} span in {spans:?}"))
        };
        let (request, call) = (find(SpanKind::Server), find(SpanKind::Client));
        let client_trace = TraceId::from_hex(CLIENT_TRACE).unwrap();
        assert_eq!(request.span_context.trace_id(), client_trace);
        assert_eq!(call.span_context.trace_id(), client_trace);
        assert_eq!(request.parent_span_id.to_string(), CLIENT_SPAN);
        assert_eq!(call.parent_span_id, request.span_context.span_id());
        assert_eq!(
            (request.name.as_ref(), call.name.as_ref()),
            ("POST /", "invoke_agent echo")
        );
        assert_eq!(
            sent,
            [
                (
                    "traceparent".to_string(),
                    format!("00-{CLIENT_TRACE}-{}-01", call.span_context.span_id())
                ),
                ("tracestate".to_string(), "vendor=1".to_string())
            ]
        );
        let attribute = |s: &SpanData, key: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attribute(call, "server.port").as_deref(), Some("9"));
        assert_eq!(
            attribute(call, "http.response.status_code").as_deref(),
            Some("201")
        );
        assert_eq!(
            attribute(call, "interlingua.operation").as_deref(),
            Some("create_task")
        );
        assert_eq!(attribute(request, "http.route").as_deref(), Some("/"));
    }

    #[test]
    fn a_client_that_samples_its_trace_out_gets_none_exported_but_still_a_parent() {
        let (sent, spans) = traced(&client("00"), 1.0);
        assert!(spans.is_empty(), "{spans:?}");
        let (name, parent) = &sent[0];
        assert_eq!(*name, "traceparent");
        assert!(
            parent.starts_with(&format!("00-{CLIENT_TRACE}-")) && parent.ends_with("-00"),
            "{parent}"
        );
        assert!(!parent.contains(CLIENT_SPAN), "{parent}");
    }
}
