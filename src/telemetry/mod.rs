//! Logging and traces. Logs: `tracing` events, filtered RUST_LOG-style, written as text or JSON
//! lines. Pingora's own `log` records are routed into the same subscriber, the one it logs far
//! above its meaning (`failed to acquire reusable stream`) lowered to `debug`. Traces (`trace`):
//! spans of requests and what they call, exported over OTLP when `[telemetry]` says where.

pub mod trace;

use std::io::BufWriter;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::level_filters::LevelFilter;
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::{filter_fn, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogFormat, LogSettings, Telemetry};

/// The target of the one-event-per-request access log, so it can be filtered on its own
/// (`RUST_LOG=info,interlingua::access=off`).
pub const ACCESS_LOG_TARGET: &str = "interlingua::access";

/// Keeps the log writer's thread alive; dropping it writes out what is still queued, and sends
/// the spans not yet exported (waiting up to 5 s for the collector).
#[must_use = "lines and spans still queued are lost when this is dropped"]
pub struct LogFlush {
    traces: Option<SdkTracerProvider>,
    _writer: WorkerGuard,
}

impl Drop for LogFlush {
    fn drop(&mut self) {
        if let Some(provider) = self.traces.take() {
            if let Err(e) = provider.shutdown() {
                tracing::warn!("the last spans may not have been exported: {e}");
            }
        }
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("RUST_LOG=`{env}` is not a log filter: {detail}")]
    Filter { env: String, detail: String },
    /// The configured `[log] filter` (validated at load, so only if validation missed it).
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Installed(String),
    /// The OTLP exporter of `[telemetry]` could not be set up.
    #[error("{0}")]
    Traces(String),
}

/// Installs the process-wide log subscriber, and with `traces` the tracer that exports spans
/// over OTLP (see [`trace`]). `RUST_LOG`, when set, replaces the configured log filter; it never
/// filters spans, and log lines never show them.
///
/// Lines are formatted on the thread that logs and written by a writer thread, in batches: one
/// write for everything queued since the last, so the access log costs no system call per
/// request. The queue blocks rather than drop a line when the writer falls behind. Hold the
/// returned [`LogFlush`] until the process ends.
///
/// Returns an error when a subscriber is already installed (only the first call wins), when
/// `RUST_LOG` is not a valid filter, or when the exporter cannot be set up.
pub fn init(settings: &LogSettings, traces: Option<&Telemetry>) -> Result<LogFlush, LogError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => {
            EnvFilter::try_new(&env).map_err(|e| LogError::Filter {
                env,
                detail: e.to_string(),
            })?
        }
        _ => EnvFilter::try_new(&settings.filter).map_err(|e| LogError::Config(e.to_string()))?,
    };
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("interlingua-log")
        .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let provider = match traces {
        None => {
            let subscriber = tracing_subscriber::registry()
                .with(filter)
                .with(lines(settings.format, writer));
            tracing::subscriber::set_global_default(subscriber)
                .map_err(|e| LogError::Installed(e.to_string()))?;
            None
        }
        Some(t) => {
            let provider = trace::provider(t).map_err(LogError::Traces)?;
            // The log filter lets spans through to the layers, each of which takes its own:
            // the log lines never the spans, the exporter nothing else.
            let filter = filter.add_directive(
                format!("{}=info", trace::TARGET)
                    .parse()
                    .map_err(|e| LogError::Config(format!("{e}")))?,
            );
            let subscriber = tracing_subscriber::registry()
                .with(filter)
                .with(
                    lines(settings.format, writer)
                        .with_filter(filter_fn(|m| m.target() != trace::TARGET)),
                )
                .with(
                    trace::layer(&provider)
                        .with_filter(Targets::new().with_target(trace::TARGET, LevelFilter::INFO)),
                );
            tracing::subscriber::set_global_default(subscriber)
                .map_err(|e| LogError::Installed(e.to_string()))?;
            trace::enable();
            Some(provider)
        }
    };
    // pingora logs through `log`: its records go to the same subscriber, some at a truer level.
    log::set_boxed_logger(Box::new(PingoraLog(tracing_log::LogTracer::new())))
        .map_err(|e| LogError::Installed(e.to_string()))?;
    log::set_max_level(log_level(LevelFilter::current()));
    Ok(LogFlush {
        traces: provider,
        _writer: guard,
    })
}

/// The layer that writes log lines, as text or JSON, through `writer`.
fn lines<S>(format: LogFormat, writer: NonBlocking) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => Box::new(layer),
        LogFormat::Json => Box::new(layer.json().flatten_event(true).with_current_span(false)),
    }
}

/// pingora's `log` records, handed to `tracing`, with the ones pingora logs above what they
/// mean lowered.
struct PingoraLog(tracing_log::LogTracer);

impl log::Log for PingoraLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if is_lost_reuse(record) {
            self.0.log(
                &log::Record::builder()
                    .level(log::Level::Debug)
                    .target(record.target())
                    .args(*record.args())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .build(),
            );
        } else {
            self.0.log(record);
        }
    }

    fn flush(&self) {}
}

/// `ERROR pingora_core::connectors: failed to acquire reusable stream` (pingora-core 0.9.1,
/// connectors/mod.rs:293) is no error. An idle pooled upstream connection is watched by a task
/// holding the connection's `Arc`; a request that takes the connection from the pool waits for
/// that task to release its lock, then unwraps the `Arc`, but the task drops its clone of the
/// `Arc` just after releasing the lock, and on a busy multi-threaded runtime the unwrap often
/// comes in between. The connection is then closed and the request opens a new one: one TCP
/// handshake lost, the request unharmed. Hundreds a minute under load; `debug` is its level.
fn is_lost_reuse(record: &log::Record<'_>) -> bool {
    record.level() == log::Level::Error
        && record.target() == "pingora_core::connectors"
        && record.args().as_str() == Some("failed to acquire reusable stream")
}

fn log_level(max: LevelFilter) -> log::LevelFilter {
    use LevelFilter as T;
    match max {
        T::OFF => log::LevelFilter::Off,
        T::ERROR => log::LevelFilter::Error,
        T::WARN => log::LevelFilter::Warn,
        T::INFO => log::LevelFilter::Info,
        T::DEBUG => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    }
}

#[cfg(test)]
mod tests {
    use super::is_lost_reuse;

    #[test]
    fn only_pingoras_lost_reuse_line_is_lowered() {
        let record = |level, target, args| {
            let lowered = is_lost_reuse(
                &log::Record::builder()
                    .level(level)
                    .target(target)
                    .args(args)
                    .build(),
            );
            lowered
        };
        assert!(record(
            log::Level::Error,
            "pingora_core::connectors",
            format_args!("failed to acquire reusable stream")
        ));
        assert!(!record(
            log::Level::Error,
            "pingora_core::connectors::l4",
            format_args!("failed to acquire reusable stream")
        ));
        assert!(!record(
            log::Level::Error,
            "pingora_core::connectors",
            format_args!("something else")
        ));
    }
}
