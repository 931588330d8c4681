//! From the file as written to the model the proxy runs on, checking everything on the way and
//! reporting every problem with its position.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use http::Method;
use toml::Spanned;

use super::access;
use super::file::{self, LogFormatName};
use super::model::*;
use super::pay;
use super::payment;
use super::sections::RawConfig;
use super::values::{duration, duration_or_zero, from_env, no_effect_without};
use mapping::depth;
use mapping::problem::Collector;
use mapping::units::parse_size;
use masumi::attachment01;

pub const DEFAULT_ADMIN_ADDRESS: &str = "127.0.0.1:9901";
const DEFAULT_DATA_DIR: &str = "./data";
const DEFAULT_MAPPINGS_DIR: &str = "./mappings";
const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);
const DEFAULT_POLL_MAX_INTERVAL: Duration = Duration::from_secs(10);
const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_MIN_REFRESH: Duration = Duration::from_millis(250);
const DEFAULT_LOST_AFTER: Duration = Duration::from_secs(60);
const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(30);
/// Enough for any client on a slow link to send a header of a few KiB; a slowloris connection
/// dripping a byte at a time is closed after it.
const DEFAULT_CLIENT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Below the upstreams' default `read_timeout` (60 s), so a client that stops sending its body
/// is answered 408 for its own silence before the upstream's wait for that body runs out.
const DEFAULT_CLIENT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// pingora's own (and close to nginx's 75 s).
const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// Each idle client connection holds ≈ 24 KiB (measured at 2 000: its tasks and state, a 4 KiB
/// header buffer, the 8 KiB write buffer; TLS adds pingora's 64 KiB read buffer): 10 000 of them
/// ≈ 240 MiB, per listener.
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
const MAX_MAX_CONNECTIONS: i64 = 1 << 24;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_TOTAL_TIMEOUT: Duration = Duration::from_secs(300);
const DEFAULT_MAX_BODY: u64 = 10 * 1024 * 1024;
const MAX_THREADS: i64 = 1024;
/// Past pingora's 128: a busy route holding more connections than the pool keeps would close
/// the rest after each answer and connect anew for the next request, leaving a TIME_WAIT socket
/// behind each time (at 512 clients, ≈ 900 a second in the benchmark).
const DEFAULT_UPSTREAM_KEEPALIVE: usize = 1024;
const MAX_UPSTREAM_KEEPALIVE: i64 = 1 << 20;

/// Builds the runtime model. Returns `None` only when it has recorded at least one problem.
pub fn build(raw: RawConfig, origin: &str, p: &mut Collector<'_>) -> Option<Config> {
    let server = server(&raw.server, p);
    let store = super::storage::store(raw.store.as_ref(), p);
    let log = log(&raw.log, p);
    let admin = admin(raw.admin.as_ref(), p);
    let listeners = listeners(&raw, admin.as_ref().map(|a| a.address), p);
    let upstreams = upstreams(&raw.upstreams, p);
    let auth = access::auth(raw.auth.as_ref(), p);
    let auth_state = match &auth {
        Some(Some(a)) => access::AuthState::Valid(a),
        Some(None) => access::AuthState::Missing,
        None => access::AuthState::Broken,
    };
    let routes = routes(&raw, &upstreams, auth_state, p);
    let shared_limits = super::limits::limits(raw.limits.as_ref(), p);
    let telemetry = telemetry(raw.telemetry.as_ref(), p);
    if !p.is_empty() {
        return None;
    }
    Some(Config {
        origin: origin.to_string(),
        server: server?,
        store: store?,
        log: log?,
        admin: admin?,
        listeners,
        upstreams: upstreams.into_iter().map(|(_, u)| u).collect(),
        routes,
        auth: auth?,
        shared_limits: shared_limits?,
        telemetry: telemetry?,
    })
}

fn server(s: &file::ServerSection, p: &mut Collector<'_>) -> Option<ServerSettings> {
    let threads = match bounded(
        s.threads.as_ref(),
        "server.threads",
        0..=MAX_THREADS,
        "0 (one per CPU core)",
        p,
    ) {
        Some(n) if n > 0 => n as usize,
        _ => default_threads(),
    };
    // pingora keeps a released connection even with a pool of 0, so 0 is refused rather than
    // promised to mean "no reuse".
    let upstream_keepalive = count(
        s.upstream_keepalive.as_ref(),
        "server.upstream_keepalive",
        MAX_UPSTREAM_KEEPALIVE,
        DEFAULT_UPSTREAM_KEEPALIVE,
        p,
    );
    let grace_period = duration(
        s.grace_period.as_ref(),
        "server.grace_period",
        DEFAULT_GRACE_PERIOD,
        p,
    );
    let data_dir = match &s.data_dir {
        Some(d) if d.get_ref().trim().is_empty() => {
            p.at(Some(d.span()), "server.data_dir", "must not be empty");
            PathBuf::new()
        }
        Some(d) => PathBuf::from(d.get_ref()),
        None => PathBuf::from(DEFAULT_DATA_DIR),
    };
    let mappings_dir = s.mappings_dir.as_ref().map_or_else(
        || PathBuf::from(DEFAULT_MAPPINGS_DIR),
        |d| PathBuf::from(d.get_ref()),
    );
    let mut timeout = |value: &Option<Spanned<String>>, key: &str, default: Duration| {
        duration(value.as_ref(), key, default, p)
    };
    let client_header_timeout = timeout(
        &s.client_header_timeout,
        "server.client_header_timeout",
        DEFAULT_CLIENT_HEADER_TIMEOUT,
    );
    let client_body_timeout = timeout(
        &s.client_body_timeout,
        "server.client_body_timeout",
        DEFAULT_CLIENT_BODY_TIMEOUT,
    );
    let keepalive_timeout = timeout(
        &s.keepalive_timeout,
        "server.keepalive_timeout",
        DEFAULT_KEEPALIVE_TIMEOUT,
    );
    let max_connections = count(
        s.max_connections.as_ref(),
        "server.max_connections",
        MAX_MAX_CONNECTIONS,
        DEFAULT_MAX_CONNECTIONS,
        p,
    );
    let seal_key = match &s.seal_key_env {
        Some(env) => Some(seal_key(env, p)?),
        None => None,
    };
    Some(ServerSettings {
        data_dir,
        threads,
        upstream_keepalive,
        grace_period: grace_period?,
        mappings_dir,
        client_header_timeout: client_header_timeout?,
        client_body_timeout: client_body_timeout?,
        keepalive_timeout: keepalive_timeout?,
        max_connections,
        seal_key,
        watch_config: s.watch_config.unwrap_or(true),
    })
}

/// `server.seal_key_env`: the key from the environment, at least [`SealKey::MIN_LEN`] bytes.
fn seal_key(env: &Spanned<String>, p: &mut Collector<'_>) -> Option<SealKey> {
    let key = from_env(env, "server.seal_key_env", p)?;
    if key.len() < SealKey::MIN_LEN {
        p.at(
            Some(env.span()),
            "server.seal_key_env",
            format!(
                "the environment variable `{}` holds {} bytes; a sealing key needs at least {}",
                env.get_ref(),
                key.len(),
                SealKey::MIN_LEN
            ),
        );
        return None;
    }
    Some(SealKey(key.into_bytes().into()))
}

/// An integer setting within `range` (`lowest` says how its low end reads); `None` when absent,
/// or out of range (a problem recorded).
fn bounded(
    value: Option<&Spanned<i64>>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    lowest: &str,
    p: &mut Collector<'_>,
) -> Option<i64> {
    let v = value?;
    if range.contains(v.get_ref()) {
        return Some(*v.get_ref());
    }
    p.at(
        Some(v.span()),
        key,
        format!("must be between {lowest} and {}", range.end()),
    );
    None
}

/// A count from 1 to `max`; `default` when absent, or out of range (a problem recorded).
fn count(
    value: Option<&Spanned<i64>>,
    key: &str,
    max: i64,
    default: usize,
    p: &mut Collector<'_>,
) -> usize {
    bounded(value, key, 1..=max, "1", p).map_or(default, |n| n as usize)
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn log(s: &file::LogSection, p: &mut Collector<'_>) -> Option<LogSettings> {
    let filter = s
        .filter
        .as_ref()
        .map_or_else(|| "info".to_string(), |f| f.get_ref().clone());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&filter) {
        let span = s.filter.as_ref().map(|f| f.span());
        p.at(
            span,
            "log.filter",
            format!("`{filter}` is not a log filter: {e}"),
        );
        return None;
    }
    Some(LogSettings {
        format: match s.format {
            Some(LogFormatName::Json) => LogFormat::Json,
            Some(LogFormatName::Text) | None => LogFormat::Text,
        },
        filter,
        access_log: s.access_log.unwrap_or(true),
    })
}

/// `[telemetry]`. `Some(None)`: no traces (no section, or one without `otlp_endpoint` and
/// nothing else); `None`: problems were recorded.
fn telemetry(
    t: Option<&file::TelemetrySection>,
    p: &mut Collector<'_>,
) -> Option<Option<Telemetry>> {
    let Some(t) = t else {
        return Some(None);
    };
    let before = p.len();
    let sample_ratio = match &t.sample_ratio {
        None => 1.0,
        Some(r) if (0.0..=1.0).contains(r.get_ref()) => *r.get_ref(),
        Some(r) => {
            p.at(
                Some(r.span()),
                "telemetry.sample_ratio",
                format!(
                    "{} is not a share of traces: use a number from 0 to 1",
                    r.get_ref()
                ),
            );
            0.0
        }
    };
    let service_name = match &t.service_name {
        None => "interlingua".to_string(),
        Some(n) if n.get_ref().trim().is_empty() => {
            p.at(
                Some(n.span()),
                "telemetry.service_name",
                "must not be empty",
            );
            String::new()
        }
        Some(n) => n.get_ref().trim().to_string(),
    };
    let Some(endpoint) = &t.otlp_endpoint else {
        let set = [
            (t.sample_ratio.is_some(), "sample_ratio"),
            (t.service_name.is_some(), "service_name"),
        ];
        no_effect_without(&set, "telemetry", "otlp_endpoint", p);
        return (p.len() == before).then_some(None);
    };
    let text = endpoint.get_ref().trim();
    match super::url::Url::parse(text) {
        // The exporter's HTTP client is built without TLS (see telemetry::trace).
        Ok(url) if url.tls => p.at(
            Some(endpoint.span()),
            "telemetry.otlp_endpoint",
            format!("`{text}`: https is not supported; send to a collector over http:// (one beside the proxy, or on a private network)"),
        ),
        Ok(_) => {}
        Err(e) => p.at(
            Some(endpoint.span()),
            "telemetry.otlp_endpoint",
            format!("{e}; write the collector's traces endpoint, e.g. http://127.0.0.1:4318/v1/traces"),
        ),
    }
    (p.len() == before).then(|| {
        Some(Telemetry {
            otlp_endpoint: text.to_string(),
            sample_ratio,
            service_name,
        })
    })
}

fn admin(a: Option<&file::AdminSection>, p: &mut Collector<'_>) -> Option<AdminListener> {
    let address = match a {
        Some(a) => socket_address(&a.address, "admin.address", p)?,
        None => DEFAULT_ADMIN_ADDRESS.parse().ok()?,
    };
    let token = match a.and_then(|a| a.token_env.as_ref()) {
        Some(env) => Some(from_env(env, "admin.token_env", p)?),
        None => None,
    };
    Some(AdminListener { address, token })
}

fn listeners(raw: &RawConfig, admin: Option<SocketAddr>, p: &mut Collector<'_>) -> Vec<Listener> {
    if !raw.has_listeners {
        p.at(
            None,
            "listeners",
            "no [[listeners]]: the proxy would accept no traffic; add one, e.g. address = \"127.0.0.1:8080\"",
        );
    }
    let mut seen: HashMap<SocketAddr, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, l) in &raw.listeners {
        let path = format!("listeners[{i}]");
        let Some(address) = socket_address(&l.address, &format!("{path}.address"), p) else {
            continue;
        };
        if address.port() != 0 {
            if let Some(first) = seen.insert(address, *i) {
                p.at(
                    Some(l.address.span()),
                    format!("{path}.address"),
                    format!("{address} is already used by listeners[{first}]"),
                );
            }
            if admin == Some(address) {
                p.at(
                    Some(l.address.span()),
                    format!("{path}.address"),
                    format!("{address} is also the admin listener's address"),
                );
            }
        }
        let tls = l.tls.as_ref().map(|t| TlsFiles {
            certificate: existing_file(&t.certificate, &format!("{path}.tls.certificate"), p),
            key: existing_file(&t.key, &format!("{path}.tls.key"), p),
        });
        out.push(Listener {
            address,
            tls,
            h2c: l.h2c.unwrap_or(true),
        });
    }
    out
}

fn upstreams(
    entries: &[(usize, file::UpstreamEntry)],
    p: &mut Collector<'_>,
) -> Vec<(usize, Upstream)> {
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, u) in entries {
        let path = format!("upstreams[{i}]");
        let name = u.name.get_ref().trim().to_string();
        if !is_identifier(&name) {
            p.at(
                Some(u.name.span()),
                format!("{path}.name"),
                "must be non-empty and use only letters, digits, '-', '_' and '.'",
            );
        } else if let Some(first) = names.insert(name.clone(), *i) {
            p.at(
                Some(u.name.span()),
                format!("{path}.name"),
                format!("upstream `{name}` is already defined by upstreams[{first}]"),
            );
        }
        let connect = duration(
            u.connect_timeout.as_ref(),
            &format!("{path}.connect_timeout"),
            DEFAULT_CONNECT_TIMEOUT,
            p,
        );
        let read = duration(
            u.read_timeout.as_ref(),
            &format!("{path}.read_timeout"),
            DEFAULT_READ_TIMEOUT,
            p,
        );
        let total = duration(
            u.total_timeout.as_ref(),
            &format!("{path}.total_timeout"),
            DEFAULT_TOTAL_TIMEOUT,
            p,
        );
        if let (Some(read), Some(total)) = (read, total) {
            if read > total {
                p.at(
                    u.read_timeout.as_ref().map(|s| s.span()),
                    format!("{path}.read_timeout"),
                    format!(
                        "read_timeout ({}) is longer than total_timeout ({})",
                        humantime::format_duration(read),
                        humantime::format_duration(total)
                    ),
                );
            }
        }
        let tls = u.tls.unwrap_or(false);
        if let (false, Some(sni)) = (tls, &u.sni) {
            p.at(
                Some(sni.span()),
                format!("{path}.sni"),
                "sni is only used with tls = true",
            );
        }
        let base_path = match &u.base_path {
            Some(b) if b.get_ref().is_empty() => String::new(),
            Some(b) if b.get_ref().starts_with('/') && !b.get_ref().contains(['?', '#']) => {
                b.get_ref().trim_end_matches('/').to_string()
            }
            Some(b) => {
                p.at(
                    Some(b.span()),
                    format!("{path}.base_path"),
                    "must be a path starting with '/'",
                );
                String::new()
            }
            None => String::new(),
        };
        let Some((host, port)) = host_port(&u.address, &format!("{path}.address"), p) else {
            continue;
        };
        let (Some(connect_timeout), Some(read_timeout), Some(total_timeout)) =
            (connect, read, total)
        else {
            continue;
        };
        out.push((
            *i,
            Upstream {
                name,
                sni: u
                    .sni
                    .as_ref()
                    .map_or_else(|| host.clone(), |s| s.get_ref().clone()),
                host,
                port,
                tls,
                verify_certificate: u.verify_certificate.unwrap_or(true),
                connect_timeout,
                read_timeout,
                total_timeout,
                base_path,
            },
        ));
    }
    out
}

fn routes(
    raw: &RawConfig,
    upstreams: &[(usize, Upstream)],
    auth: access::AuthState<'_>,
    p: &mut Collector<'_>,
) -> Vec<Route> {
    let by_name: HashMap<&str, usize> = upstreams
        .iter()
        .enumerate()
        .map(|(pos, (_, u))| (u.name.as_str(), pos))
        .collect();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<(usize, Route)> = Vec::new();
    for (i, r) in &raw.routes {
        let path = format!("routes[{i}]");
        let name = match &r.name {
            Some(n) if !is_identifier(n.get_ref().trim()) => {
                p.at(
                    Some(n.span()),
                    format!("{path}.name"),
                    "must be non-empty and use only letters, digits, '-', '_' and '.'",
                );
                continue;
            }
            Some(n) => n.get_ref().trim().to_string(),
            None => format!("route-{i}"),
        };
        if let Some(first) = names.insert(name.clone(), *i) {
            p.at(
                r.name.as_ref().map(|n| n.span()),
                format!("{path}.name"),
                format!("route `{name}` is already defined by routes[{first}]"),
            );
        }
        let upstream = match by_name.get(r.upstream.get_ref().as_str()) {
            Some(&pos) => Some(pos),
            None => {
                let wanted = r.upstream.get_ref();
                if !raw.broken_upstreams.contains(wanted) {
                    let known: Vec<&str> = by_name.keys().copied().collect();
                    p.at(
                        Some(r.upstream.span()),
                        format!("{path}.upstream"),
                        format!("no upstream named `{wanted}`{}", known_list(&known)),
                    );
                }
                None
            }
        };
        let front = dialect(r.front.as_ref(), &format!("{path}.front"), p);
        let back = dialect(r.back.as_ref(), &format!("{path}.back"), p);
        let matcher = route_match(&r.matcher, &format!("{path}.match"), p);
        let max_body = match &r.max_body {
            None => Some(DEFAULT_MAX_BODY),
            Some(s) => parse_size(s.get_ref())
                .map_err(|e| p.at(Some(s.span()), format!("{path}.max_body"), e))
                .ok(),
        };
        if let (Some(f), Some(b)) = (&front, &back) {
            if (*f == Dialect::Passthrough) != (*b == Dialect::Passthrough) {
                p.at(
                    r.back.as_ref().or(r.front.as_ref()).map(|s| s.span()),
                    format!("{path}.back"),
                    format!(
                        "front `{}` and back `{}`: passthrough is on both sides or neither",
                        f.name(),
                        b.name()
                    ),
                );
            }
        }
        let translation = translation(r, &path, p);
        let access = access::access(r, &path, auth, p);
        let price = access::price(r, &path, p);
        let payment = payment::payment(r, &path, p);
        let x402 = payment::x402(r, &path, p);
        let x402_pay = pay::x402_pay(r, &path, p);
        let sell = super::sell::seller(r, &path, p);
        if let (Some(Some(_)), Some(a)) = (&price, &access) {
            if !a.auth {
                p.at(
                    r.price.as_ref().map(|s| s.span()),
                    format!("{path}.price"),
                    "a priced route needs auth = true: credits belong to a verified plan and subject",
                );
            }
        }
        let (
            Some(upstream),
            Some(front),
            Some(back),
            Some(matcher),
            Some(max_body),
            Some(translation),
            Some(access),
            Some(price),
            Some(payment),
            Some(x402),
            Some(x402_pay),
            Some(sell),
        ) = (
            upstream,
            front,
            back,
            matcher,
            max_body,
            translation,
            access,
            price,
            payment,
            x402,
            x402_pay,
            sell,
        )
        else {
            continue;
        };
        if sell.is_some() && (x402.is_some() || front == Dialect::Passthrough) {
            p.at(
                r.payment.as_ref().map(|s| s.span()),
                format!("{path}.payment.accept.masumi"),
                if x402.is_some() {
                    "a route sells its jobs on one rail: a create without a token is either an x402 payment or a Masumi purchase, not both"
                } else {
                    "a passthrough route forwards requests it does not read: selling on Masumi needs a front dialect, whose creates it can hash and hold until they are paid"
                },
            );
            continue;
        }
        if x402.is_some() && front == Dialect::Passthrough {
            p.at(
                r.payment.as_ref().map(|s| s.span()),
                format!("{path}.payment.accept.x402"),
                "a passthrough route forwards requests it does not read: x402 needs a front dialect, whose creates it can price and whose errors it can write",
            );
            continue;
        }
        if x402_pay.is_some() && front == Dialect::Passthrough {
            p.at(
                r.payment.as_ref().map(|s| s.span()),
                format!("{path}.payment.pay.x402"),
                "a passthrough route forwards answers it does not read: paying an agent needs the engine to make the call, and retry it paid",
            );
            continue;
        }
        if let Some((j, earlier)) = out.iter().find(|(_, e)| shadows(&e.matcher, &matcher)) {
            p.at(
                Some(r.matcher.path_prefix.span()),
                format!("{path}.match"),
                format!(
                    "routes[{j}] (`{}`) already takes every request this match takes, so this route would never be chosen",
                    earlier.name
                ),
            );
        }
        // One resource (host and prefix) has one metadata document, whichever route it is read from.
        if let Some((j, _)) = out.iter().find(|(_, e)| {
            e.matcher.host == matcher.host
                && e.matcher.path_prefix == matcher.path_prefix
                && e.access.metadata.is_some()
                && access.metadata.is_some()
                && e.access.metadata != access.metadata
        }) {
            p.at(
                r.auth_metadata.as_ref().map(|m| m.span()),
                format!("{path}.auth_metadata"),
                format!("routes[{j}] has the same host and prefix, so it is the same protected resource, but publishes other metadata"),
            );
        }
        out.push((
            *i,
            Route {
                name,
                matcher,
                upstream,
                front,
                back,
                max_body,
                translation,
                access,
                price,
                payment,
                x402,
                x402_pay,
                sell,
            },
        ));
    }
    out.into_iter().map(|(_, r)| r).collect()
}

fn translation(r: &file::RouteEntry, path: &str, p: &mut Collector<'_>) -> Option<Translation> {
    let before = p.len();
    let mut vars = BTreeMap::new();
    if let Some(table) = &r.vars {
        for (dialect, values) in table.get_ref() {
            match serde_json::to_value(values) {
                Ok(serde_json::Value::Object(m)) => {
                    vars.insert(dialect.clone(), m);
                }
                _ => p.at(
                    Some(table.span()),
                    format!("{path}.vars.{dialect}"),
                    "must be a table of values for that dialect's [vars]",
                ),
            }
        }
    }
    let validation = match r.validation.as_ref().map(|v| v.get_ref().as_str()) {
        None | Some("reference") => Validation::Reference,
        Some("strict") => Validation::Strict,
        Some(other) => {
            p.at(
                r.validation.as_ref().map(|v| v.span()),
                format!("{path}.validation"),
                format!("`{other}` is not `reference` or `strict`"),
            );
            Validation::Reference
        }
    };
    let input_schema = r.input_schema.as_ref().and_then(|t| {
        let json = serde_json::to_value(t.get_ref()).ok()?;
        let mode = match validation {
            Validation::Reference => attachment01::Mode::Reference,
            Validation::Strict => attachment01::Mode::Strict,
        };
        match attachment01::Schema::from_json(&json, mode) {
            Ok(_) => Some(json),
            Err(e) => {
                p.at(Some(t.span()), format!("{path}.input_schema"), e.message);
                None
            }
        }
    });
    let sync_timeout = duration(
        r.sync_timeout.as_ref(),
        &format!("{path}.sync_timeout"),
        DEFAULT_SYNC_TIMEOUT,
        p,
    );
    let poll_interval = duration(
        r.poll_interval.as_ref(),
        &format!("{path}.poll_interval"),
        DEFAULT_POLL_INTERVAL,
        p,
    );
    let poll_max_interval = duration(
        r.poll_max_interval.as_ref(),
        &format!("{path}.poll_max_interval"),
        DEFAULT_POLL_MAX_INTERVAL,
        p,
    );
    let input_timeout = duration(
        r.input_timeout.as_ref(),
        &format!("{path}.input_timeout"),
        DEFAULT_INPUT_TIMEOUT,
        p,
    );
    let min_refresh = duration_or_zero(
        r.min_refresh.as_ref(),
        &format!("{path}.min_refresh"),
        DEFAULT_MIN_REFRESH,
        p,
    );
    let lost_after = duration(
        r.lost_after.as_ref(),
        &format!("{path}.lost_after"),
        DEFAULT_LOST_AFTER,
        p,
    );
    let max_json_depth = bounded(
        r.max_json_depth.as_ref(),
        &format!("{path}.max_json_depth"),
        1..=depth::MAX_JSON_DEPTH as i64,
        "1",
        p,
    )
    .map_or(depth::DEFAULT_JSON_DEPTH, |n| n as usize);
    if p.len() != before {
        return None;
    }
    Some(Translation {
        vars,
        input_schema,
        description: r.description.clone(),
        validation,
        sync_timeout: sync_timeout?,
        poll_interval: poll_interval?,
        poll_max_interval: poll_max_interval?,
        input_timeout: input_timeout?,
        min_refresh: min_refresh?,
        lost_after: lost_after?,
        max_json_depth,
    })
}

fn route_match(m: &file::MatchEntry, path: &str, p: &mut Collector<'_>) -> Option<RouteMatch> {
    let mut ok = true;
    let prefix = m.path_prefix.get_ref();
    if !prefix.starts_with('/') || prefix.contains(['?', '#', ' ']) {
        p.at(
            Some(m.path_prefix.span()),
            format!("{path}.path_prefix"),
            "must be a path starting with '/', without query or fragment",
        );
        ok = false;
    }
    let host = match &m.host {
        Some(h) if h.get_ref().is_empty() || h.get_ref().contains([':', '/', ' ']) => {
            p.at(
                Some(h.span()),
                format!("{path}.host"),
                "must be a bare host name such as \"api.example.com\" (no port, no scheme)",
            );
            ok = false;
            None
        }
        Some(h) => Some(h.get_ref().to_ascii_lowercase()),
        None => None,
    };
    let methods = match &m.methods {
        None => None,
        Some(list) if list.is_empty() => {
            p.at(
                None,
                format!("{path}.methods"),
                "must list at least one method, or be left out to take any",
            );
            ok = false;
            None
        }
        Some(list) => {
            let mut out = Vec::new();
            for (k, name) in list.iter().enumerate() {
                match Method::from_bytes(name.get_ref().to_ascii_uppercase().as_bytes()) {
                    Ok(m) => out.push(m),
                    Err(_) => {
                        p.at(
                            Some(name.span()),
                            format!("{path}.methods[{k}]"),
                            format!("`{}` is not an HTTP method", name.get_ref()),
                        );
                        ok = false;
                    }
                }
            }
            Some(out)
        }
    };
    ok.then(|| RouteMatch {
        path_prefix: normalize_prefix(prefix),
        host,
        methods,
    })
}

/// `/api/` and `/api` take the same requests; keep one spelling.
fn normalize_prefix(prefix: &str) -> String {
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Whether `earlier` takes every request `later` would take (same host and prefix, and every
/// method `later` lists).
fn shadows(earlier: &RouteMatch, later: &RouteMatch) -> bool {
    if earlier.host != later.host || earlier.path_prefix != later.path_prefix {
        return false;
    }
    match (&earlier.methods, &later.methods) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(e), Some(l)) => l.iter().all(|m| e.contains(m)),
    }
}

/// A dialect name. Whether a mapping file exists for it is checked when mappings are loaded.
fn dialect(name: Option<&Spanned<String>>, path: &str, p: &mut Collector<'_>) -> Option<Dialect> {
    let Some(name) = name else {
        return Some(Dialect::Passthrough);
    };
    match name.get_ref().as_str() {
        "passthrough" => Some(Dialect::Passthrough),
        other
            if !other.is_empty()
                && other.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            Some(Dialect::Mapped(other.to_string()))
        }
        other => {
            p.at(
                Some(name.span()),
                path,
                format!("`{other}` is not a dialect name (letters, digits and '_')"),
            );
            None
        }
    }
}

fn socket_address(
    value: &Spanned<String>,
    path: &str,
    p: &mut Collector<'_>,
) -> Option<SocketAddr> {
    let text = value.get_ref().trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr);
    }
    // A name such as `localhost:8080` is resolved once, here.
    match text.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Some(addr),
        _ => {
            p.at(
                Some(value.span()),
                path,
                format!("`{text}` is not an address to listen on; write ip:port, e.g. \"127.0.0.1:8080\""),
            );
            None
        }
    }
}

/// Splits `host:port` (or `[v6]:port`) without resolving it.
fn host_port(value: &Spanned<String>, path: &str, p: &mut Collector<'_>) -> Option<(String, u16)> {
    let text = value.get_ref().trim();
    let fail = |p: &mut Collector<'_>, why: &str| {
        p.at(Some(value.span()), path, format!("`{text}` {why}"));
        None
    };
    if text.contains("://") {
        return fail(
            p,
            "must be host:port without a scheme; set tls = true for HTTPS upstreams",
        );
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((host, port)) = rest.split_once("]:") else {
            return fail(p, "is not [ipv6]:port");
        };
        (host, port)
    } else {
        let Some((host, port)) = text.rsplit_once(':') else {
            return fail(p, "has no port; write host:port, e.g. \"127.0.0.1:9000\"");
        };
        (host, port)
    };
    if host.is_empty() || host.contains(['/', ' ']) {
        return fail(p, "has no valid host");
    }
    match port.parse::<u16>() {
        Ok(port) if port != 0 => Some((host.to_string(), port)),
        _ => fail(p, "has no valid port (1-65535)"),
    }
}

fn existing_file(value: &Spanned<String>, path: &str, p: &mut Collector<'_>) -> PathBuf {
    let file = PathBuf::from(value.get_ref());
    if !file.is_file() {
        p.at(
            Some(value.span()),
            path,
            format!("file `{}` not found", file.display()),
        );
    }
    file
}

fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn known_list(names: &[&str]) -> String {
    if names.is_empty() {
        return " (no upstreams are defined)".to_string();
    }
    let mut sorted: Vec<&str> = names.to_vec();
    sorted.sort_unstable();
    format!(" (defined: {})", sorted.join(", "))
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    /// `[server]` holding `body`, validated: the sealing key's length, or every problem as text.
    fn seal_key(body: &str) -> Result<Option<usize>, String> {
        let text = format!("[server]\n{body}\n\n[[listeners]]\naddress = \"127.0.0.1:0\"\n");
        parse(&text, "t.toml")
            .map(|c| c.server.seal_key.map(|k| k.0.len()))
            .map_err(|p| p.to_string())
    }

    #[test]
    fn the_sealing_key_comes_from_the_environment_and_is_long_enough() {
        assert_eq!(seal_key(""), Ok(None));
        const SET: &str = "INTERLINGUA_UNIT_SEAL_KEY";
        std::env::set_var(SET, "k".repeat(40));
        assert_eq!(seal_key(&format!("seal_key_env = \"{SET}\"")), Ok(Some(40)));
        const SHORT: &str = "INTERLINGUA_UNIT_SEAL_KEY_SHORT";
        std::env::set_var(SHORT, "too short");
        let short = seal_key(&format!("seal_key_env = \"{SHORT}\"")).unwrap_err();
        assert!(
            short.contains(
                "t.toml:2:16: server.seal_key_env: the environment variable \
                 `INTERLINGUA_UNIT_SEAL_KEY_SHORT` holds 9 bytes; a sealing key needs at least 32"
            ),
            "{short}"
        );
        let unset = seal_key("seal_key_env = \"INTERLINGUA_UNIT_SEAL_KEY_UNSET\"").unwrap_err();
        assert!(
            unset.contains(
                "t.toml:2:16: server.seal_key_env: the environment variable \
                 `INTERLINGUA_UNIT_SEAL_KEY_UNSET` is not set"
            ),
            "{unset}"
        );
    }

    #[test]
    fn the_sealing_key_never_shows_in_a_logged_config() {
        const SET: &str = "INTERLINGUA_UNIT_SEAL_KEY_SHOWN";
        std::env::set_var(SET, "a secret that must never be logged!");
        let text = format!(
            "[server]\nseal_key_env = \"{SET}\"\n\n[[listeners]]\naddress = \"127.0.0.1:0\"\n"
        );
        let config = parse(&text, "t.toml").unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("a secret"), "{shown}");
        assert!(shown.contains("SealKey(35 bytes)"), "{shown}");
    }

    /// `[telemetry]` holding `body`, validated: what it became, or every problem as text.
    fn telemetry(body: &str) -> Result<Option<crate::config::Telemetry>, String> {
        let text = format!("[telemetry]\n{body}\n\n[[listeners]]\naddress = \"127.0.0.1:0\"\n");
        parse(&text, "t.toml")
            .map(|c| c.telemetry)
            .map_err(|p| p.to_string())
    }

    #[test]
    fn telemetry_needs_an_http_endpoint_and_takes_a_ratio_from_0_to_1() {
        assert_eq!(telemetry(""), Ok(None));
        let on = telemetry("otlp_endpoint = \"http://127.0.0.1:4318/v1/traces\"")
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                on.otlp_endpoint.as_str(),
                on.sample_ratio,
                on.service_name.as_str()
            ),
            ("http://127.0.0.1:4318/v1/traces", 1.0, "interlingua")
        );
        // An integer is a ratio too.
        let some = telemetry(
            "otlp_endpoint = \"http://collector:4318/v1/traces\"\nsample_ratio = 0\nservice_name = \"gw\"",
        )
        .unwrap()
        .unwrap();
        assert_eq!((some.sample_ratio, some.service_name.as_str()), (0.0, "gw"));
        let wrong = telemetry(
            "otlp_endpoint = \"https://collector/v1/traces\"\nsample_ratio = 1.5\nservice_name = \" \"",
        )
        .unwrap_err();
        for part in [
            "t.toml:2:17: telemetry.otlp_endpoint: `https://collector/v1/traces`: https is not supported",
            "t.toml:3:16: telemetry.sample_ratio: 1.5 is not a share of traces: use a number from 0 to 1",
            "t.toml:4:16: telemetry.service_name: must not be empty",
        ] {
            assert!(wrong.contains(part), "no `{part}` in:\n{wrong}");
        }
        let not_a_url = telemetry("otlp_endpoint = \"collector:4318\"").unwrap_err();
        assert!(
            not_a_url.contains(
                "telemetry.otlp_endpoint: `collector:4318` is not an http:// or https:// URL"
            ),
            "{not_a_url}"
        );
        let unknown = telemetry("headers_env = \"OTLP_HEADERS\"").unwrap_err();
        assert!(
            unknown.contains("t.toml:2:1: telemetry: unknown field `headers_env`"),
            "{unknown}"
        );
        let alone = telemetry("sample_ratio = 0.5").unwrap_err();
        assert!(
            alone.contains("telemetry.sample_ratio: has no effect without telemetry.otlp_endpoint"),
            "{alone}"
        );
    }
}
