//! Logging: `tracing` events, filtered RUST_LOG-style, written as text or JSON lines. Pingora's own
//! `log` records are routed into the same subscriber.

use std::io::BufWriter;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// The target of the one-event-per-request access log, so it can be filtered on its own
/// (`RUST_LOG=info,interlingua::access=off`).
pub const ACCESS_LOG_TARGET: &str = "interlingua::access";

/// Keeps the log writer's thread alive; dropping it writes out what is still queued.
#[must_use = "lines still queued are lost when this is dropped"]
pub struct LogFlush {
    _writer: WorkerGuard,
}

/// Installs the process-wide log subscriber. `RUST_LOG`, when set, replaces the configured filter.
///
/// Lines are formatted on the thread that logs and written by a writer thread, in batches: one
/// write for everything queued since the last, so the access log costs no system call per
/// request. The queue blocks rather than drop a line when the writer falls behind. Hold the
/// returned [`LogFlush`] until the process ends.
///
/// Returns an error when a subscriber is already installed (only the first call wins), or when
/// `RUST_LOG` is not a valid filter.
pub fn init(settings: &LogSettings) -> Result<LogFlush, String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => EnvFilter::try_new(&env)
            .map_err(|e| format!("RUST_LOG=`{env}` is not a log filter: {e}"))?,
        _ => EnvFilter::try_new(&settings.filter).map_err(|e| e.to_string())?,
    };
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("interlingua-log")
        .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let result = match settings.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| e.to_string())?;
    Ok(LogFlush { _writer: guard })
}
