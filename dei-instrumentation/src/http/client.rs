//! The reqwest client middleware (reqwest-middleware).
//!
//! ```
//! use dei_instrumentation::{DeiConfig, DeiReqwestMiddleware};
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(DeiReqwestMiddleware::new(DeiConfig::default()))
//!     .build();
//! # let _ = client;
//! ```
//!
//! # Signatures, and naming the target
//!
//! The signature is `METHOD host/path` by default: the URL's host without its port, so that a server on a port
//! chosen at run time (an ephemeral port on loopback, a port from service discovery) gives the same index from
//! run to run. The host is taken as written: `127.0.0.1` and `localhost` give different signatures, and a host
//! that changes from run to run (a pod's IP address, a host name from discovery) changes every index below the
//! call. Two services on one host that serve the same path (`users` and `billing` both answering `GET /health`
//! on `127.0.0.1`, on two ports) get the same signature, so calls to them issued from one helper are told
//! apart by count only, and swap indexes when their order changes: a fault plan then hits one service in one
//! run and the other in the next.
//!
//! Name the target, and the signature is `METHOD name/path`: the name takes the host's place (so naming a
//! target after the host name it already has, `users` for `http://users:8080/`, changes no index). The name
//! comes from, first to last:
//! 1. the request's [`TargetService`] extension
//!    (`client.get(url).with_extension(TargetService::new("users"))`);
//! 2. the middleware's map from host and port ([`DeiReqwestMiddleware::target`]);
//! 3. the middleware's fixed name ([`DeiReqwestMiddleware::target_service`], for a client that calls one
//!    service).
//!
//! ```
//! use dei_instrumentation::http::TargetService;
//! use dei_instrumentation::{DeiConfig, DeiReqwestMiddleware};
//! # async fn f(users: std::net::SocketAddr, billing: std::net::SocketAddr) -> reqwest_middleware::Result<()> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(
//!         DeiReqwestMiddleware::new(DeiConfig::default())
//!             // every call to this address: `GET users/health`
//!             .target(&users.ip().to_string(), users.port(), "users"),
//!     )
//!     .build();
//! client.get(format!("http://{users}/health")).send().await?;
//! // one request: `GET billing/health`
//! client
//!     .get(format!("http://{billing}/health"))
//!     .with_extension(TargetService::new("billing"))
//!     .send()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! A process that sees one default signature (no name) used for two ports warns once and counts each such
//! call ([`unnamed_targets_sharing_a_signature_total`]): name those targets.
//!
//! # Payload, spans
//!
//! The payload is `query` + `?` + the body, at most [`payload_digest_cap`](crate::DeiConfig::payload_digest_cap)
//! bytes of it. A streaming request body cannot be read without consuming it, so it counts as empty. The index
//! counts as in flight until the response head arrives.
//!
//! The client span records `url.full` as the OpenTelemetry semantic conventions ask: credentials in the URL are
//! replaced (`REDACTED:REDACTED@`), the value of every query parameter is replaced by `REDACTED` (the keys are
//! kept; an item without `=` is replaced whole), and the fragment, which is never sent, is left out. The
//! conventions require this for a few keys (`AWSAccessKeyId`, `Signature`, `sig`, `X-Goog-Signature`); all
//! values are redacted here because tokens travel under any name (`token`, `api_key`, `code`, …), and the query
//! is still part of the payload digest. The span's error status, when reqwest fails, names the URL the same
//! way.
//!
//! # Faults
//!
//! See [`crate::fault`] for the plan's syntax. What a caller gets, and how it differs from the real thing:
//!
//! | planned | the caller gets | differs from a real one in |
//! |---|---|---|
//! | `h<status>`, `g<code>` | `Ok(response)` with that status, an empty body, no headers, [`url()`](reqwest::Response::url) the request's URL | [`remote_addr()`](reqwest::Response::remote_addr) is `None` |
//! | `c` | `Err(Error::Middleware(`[`InjectedConnectionError`]`))` | `is_connect()` is false (it answers for reqwest's own errors only, which cannot be made outside reqwest); `is_middleware()` is true, `url()` is `None` |
//! | `l<ms>`, shorter than the request's timeout | waits, then sends with what is left of the timeout | — |
//! | `l<ms>`, as long as the request's timeout or longer | waits the timeout, then `Err(Error::Middleware(`[`InjectedTimeout`]`))` without sending | `is_timeout()` is false (the same reason); `is_middleware()` is true, `url()` is `None` |
//!
//! Code that tells errors apart checks for the injected ones too:
//! `err.is_timeout() || InjectedTimeout::of(&err).is_some()`, and
//! `err.is_connect() || matches!(&err, reqwest_middleware::Error::Middleware(e) if e.is::<InjectedConnectionError>())`.
//!
//! **Timeouts.** A latency fault counts against the request's own timeout
//! ([`RequestBuilder::timeout`](reqwest_middleware::RequestBuilder::timeout), which the middleware reads from
//! the request). A timeout set on the client (`reqwest::ClientBuilder::timeout`) is not visible to middleware
//! (reqwest-middleware hands it the request, not the client's settings): the wait is outside it, and a call
//! with a latency longer than the client's timeout still succeeds, late. To exercise timeouts, set the timeout
//! per request, or on every request of the client with an initialiser:
//! `reqwest_middleware::ClientBuilder::new(client).with_init(|r: reqwest_middleware::RequestBuilder| r.timeout(d))`.

use crate::config::DeiConfig;
use crate::fault::{self, Action, InjectedConnectionError};
use crate::outgoing::{self, Call};
use crate::span::{OtelSpan, Path};
use dei_propagator::{Fault, PayloadHasher, Signature};
use http::Extensions;
use reqwest_middleware::{Middleware, Next};
use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tracing::Instrument;

/// The name of the service a request goes to, set as a request extension
/// (`client.get(url).with_extension(TargetService::new("users"))`): the call's signature is then
/// `METHOD name/path` rather than `METHOD host/path` (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TargetService(Cow<'static, str>);

impl TargetService {
    /// A target named `name` (a literal, or a name made at run time).
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        TargetService(name.into())
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// A host as [`DeiReqwestMiddleware::target`] matches it: an IP address by value (whatever its spelling), a
/// name without regard to case.
#[derive(Clone, Debug, PartialEq, Eq)]
enum TargetHost {
    Ip(IpAddr),
    Name(String),
}

impl TargetHost {
    /// A host as written by the user or as a URL has it (an IPv6 address in brackets or not).
    fn parse(host: &str) -> Self {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => TargetHost::Ip(ip),
            Err(_) => TargetHost::Name(host.to_ascii_lowercase()),
        }
    }

    fn matches(&self, url_host: &str) -> bool {
        match self {
            TargetHost::Name(name) => name.eq_ignore_ascii_case(url_host),
            TargetHost::Ip(_) => TargetHost::parse(url_host) == *self,
        }
    }
}

/// reqwest-middleware middleware doing for HTTP calls what `DeiClientLayer` (feature `tonic`) does for gRPC.
#[derive(Clone, Debug, Default)]
pub struct DeiReqwestMiddleware {
    config: DeiConfig,
    /// Names by host and port ([`DeiReqwestMiddleware::target`]).
    targets: Vec<(TargetHost, u16, TargetService)>,
    /// The name of every other call ([`DeiReqwestMiddleware::target_service`]).
    fixed: Option<TargetService>,
}

impl DeiReqwestMiddleware {
    /// A middleware with this configuration.
    pub fn new(config: DeiConfig) -> Self {
        DeiReqwestMiddleware {
            config,
            targets: Vec::new(),
            fixed: None,
        }
    }

    /// Names the service at `host` and `port` (the URL's port, or the scheme's default port when the URL
    /// names none): calls to it have the signature `METHOD name/path`. An IP address matches whatever its
    /// spelling (`::1`, `[::1]`); a host name matches without regard to case, and only as written
    /// (`localhost` does not match `127.0.0.1`). A request's own [`TargetService`] extension wins; the last
    /// name given for one host and port wins.
    pub fn target(mut self, host: &str, port: u16, name: impl Into<Cow<'static, str>>) -> Self {
        let host = TargetHost::parse(host);
        self.targets.retain(|(h, p, _)| !(*h == host && *p == port));
        self.targets.push((host, port, TargetService::new(name)));
        self
    }

    /// Names the service of every call through this middleware that neither its request
    /// ([`TargetService`]) nor [`target`](Self::target) names: for a client that calls one service.
    pub fn target_service(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.fixed = Some(TargetService::new(name));
        self
    }

    /// The name of the target of a call to `url` with these extensions, if any.
    fn target_name<'a>(&'a self, url: &reqwest::Url, extensions: &'a Extensions) -> Option<&'a str> {
        if let Some(t) = extensions.get::<TargetService>() {
            return Some(t.name());
        }
        if !self.targets.is_empty()
            && let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default())
            && let Some((_, _, t)) = self.targets.iter().find(|(h, p, _)| *p == port && h.matches(host))
        {
            return Some(t.name());
        }
        self.fixed.as_ref().map(TargetService::name)
    }
}

/// The error a call fails with when its planned latency is as long as the request's timeout or longer: the
/// middleware waited the timeout and did not send the call.
///
/// It reaches the caller as `reqwest_middleware::Error::Middleware`, whose `is_timeout()` is false (only reqwest
/// can make the errors it answers for): check [`InjectedTimeout::of`] as well.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "dei: injected timeout: the planned latency of {} ms reaches the request's timeout of {} ms, waited the timeout (call with index {index}, not sent)",
    latency.as_millis(),
    timeout.as_millis()
)]
pub struct InjectedTimeout {
    /// The index of the call that was not sent.
    pub index: String,
    /// The planned latency (after this service's cap, [`max_latency`](crate::DeiConfig::max_latency)).
    pub latency: Duration,
    /// The request's timeout, which is how long the call waited.
    pub timeout: Duration,
}

impl InjectedTimeout {
    /// The injected timeout `err` is, if it is one.
    ///
    /// ```
    /// # fn f(err: reqwest_middleware::Error) {
    /// use dei_instrumentation::http::client::InjectedTimeout;
    /// let timed_out = err.is_timeout() || InjectedTimeout::of(&err).is_some();
    /// # }
    /// ```
    pub fn of(err: &reqwest_middleware::Error) -> Option<&InjectedTimeout> {
        match err {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<InjectedTimeout>(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }
}

/// The response for a planned failing fault, its URL the request's.
fn fault_response(fault: Fault, url: &reqwest::Url) -> reqwest::Response {
    use reqwest::ResponseBuilderExt as _;
    let status = match fault {
        Fault::Http(s) => s,
        Fault::Grpc(code) => fault::http_status_for_grpc(code),
        Fault::Connection | Fault::Latency(_) => 503,
    };
    let mut response = http::Response::new(Vec::<u8>::new());
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    // The builder is the only way to hand reqwest the URL (its extension type is private); a builder holding
    // nothing but the URL cannot fail.
    match http::response::Builder::new().url(url.clone()).body(()) {
        Ok(with_url) => response.extensions_mut().extend(with_url.into_parts().0.extensions),
        Err(e) => tracing::debug!("dei: the injected response has no URL: {e}"),
    }
    reqwest::Response::from(response)
}

/// `url.full` as the semantic conventions ask (see the [module docs](self)): credentials replaced, every query
/// value replaced, no fragment. Borrowed when there is nothing to redact.
fn redacted_url(url: &reqwest::Url) -> Cow<'_, str> {
    let credentials = !url.username().is_empty() || url.password().is_some();
    if !credentials && url.query().is_none() && url.fragment().is_none() {
        return Cow::Borrowed(url.as_str());
    }
    let mut redacted = url.clone();
    if credentials && (redacted.set_username("REDACTED").is_err() || redacted.set_password(Some("REDACTED")).is_err()) {
        // Only a URL without a host refuses credentials, and such a URL cannot hold any: never reached. Record
        // nothing of it rather than risk them.
        return Cow::Borrowed("REDACTED");
    }
    if let Some(query) = url.query() {
        let mut out = String::with_capacity(query.len() + 16);
        for (i, item) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match item.split_once('=') {
                Some((key, "")) => {
                    out.push_str(key);
                    out.push('=');
                }
                Some((key, _)) => {
                    out.push_str(key);
                    out.push_str("=REDACTED");
                }
                None if item.is_empty() => {}
                None => out.push_str("REDACTED"),
            }
        }
        redacted.set_query(Some(&out));
    }
    redacted.set_fragment(None);
    Cow::Owned(redacted.into())
}

/// The span status message for a failed call: the error, with its URL redacted as `url.full` is.
fn error_status(err: &reqwest_middleware::Error) -> String {
    let message = err.to_string();
    match err.url() {
        Some(url) => match redacted_url(url) {
            Cow::Owned(redacted) => message.replace(url.as_str(), &redacted),
            Cow::Borrowed(_) => message,
        },
        None => message,
    }
}

/// Calls whose default signature this process had last seen with another port (see [`check_port`]).
static UNNAMED_TARGETS_SHARING: AtomicU64 = AtomicU64::new(0);

/// Calls with a default signature (`METHOD host/path`, no [`TargetService`] name) that this process had last
/// seen used with another port of the same host, since the process started (an in-process count, not
/// exported as a metric). Such calls can go to two services whose indexes swap from run to run: name the
/// targets (see the [module docs](self)). The first is also logged, once, as a warning.
///
/// Calls to one service at several ports of one host (replicas) count too: naming the target is the
/// remedy there as well, and gives the replicas one signature. The check remembers the last port of up to
/// 1024 signatures at a time (a fixed table, no allocation): a process calling more distinct paths can miss
/// cases, as signatures that share an entry push each other out.
pub fn unnamed_targets_sharing_a_signature_total() -> u64 {
    UNNAMED_TARGETS_SHARING.load(Ordering::Relaxed)
}

/// The last port each default signature was used with: a direct-mapped table whose entries hold the high 48
/// bits of the signature's digest and the port (0: empty).
const PORT_SLOTS: usize = 1024;
static LAST_PORTS: [AtomicU64; PORT_SLOTS] = [const { AtomicU64::new(0) }; PORT_SLOTS];

/// Counts (and warns once about) a call with a default signature whose last call went to another port.
fn check_port(signature: &Signature, port: u16) {
    let digest = signature.digest();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let hash = u64::from_le_bytes(first);
    let tag = hash & !0xffff;
    let entry = tag | u64::from(port);
    let slot = &LAST_PORTS[(hash % PORT_SLOTS as u64) as usize];
    let last = slot.load(Ordering::Relaxed);
    if last == entry {
        return;
    }
    slot.store(entry, Ordering::Relaxed);
    if last != 0 && last & !0xffff == tag {
        let total = UNNAMED_TARGETS_SHARING.fetch_add(1, Ordering::Relaxed) + 1;
        if total == 1 {
            tracing::warn!(
                signature = signature.name(),
                ports = %format_args!("{} and {port}", last & 0xffff),
                "dei: HTTP calls with the signature `{}` went to two ports of one host: if they are two services, \
                 their calls share one signature and can swap indexes from run to run (a fault plan then hits one \
                 service or the other). Name the targets: a dei_instrumentation::http::TargetService request \
                 extension, or DeiReqwestMiddleware::target / target_service. Counted by \
                 dei_instrumentation::http::client::unnamed_targets_sharing_a_signature_total(); this warning is \
                 shown once",
                signature.name()
            );
        }
    }
}

#[async_trait::async_trait]
impl Middleware for DeiReqwestMiddleware {
    async fn handle(
        &self,
        mut request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        // This runs on the first poll of the caller's `send().await`: the stack and Context are the caller's.
        let url = request.url();
        let method = request.method().as_str().to_string();
        let host = url.host_str().unwrap_or("");
        // The host (or the name the caller gave it) names the service; the port does not (it may change from
        // run to run).
        let named = self.target_name(url, extensions);
        let signature = Signature::http(&method, &format!("{}{}", named.unwrap_or(host), url.path()));
        let full = redacted_url(url);
        // The `dei.*` attributes, declared empty: tracing-opentelemetry sizes the span's attribute list by its
        // fields, so the attributes set later fit without growing it. They are set on the OpenTelemetry span.
        let span = tracing::info_span!(
            target: "dei",
            "http.client",
            otel.name = signature.name(),
            otel.kind = "client",
            http.request.method = %method,
            url.full = &*full,
            server.address = crate::span::server_address(host),
            server.port = url.port_or_known_default().map(i64::from),
            http.response.status_code = tracing::field::Empty,
            dei.signature = tracing::field::Empty,
            dei.index = tracing::field::Empty,
            dei.count = tracing::field::Empty,
            dei.depth = tracing::field::Empty,
            dei.instantiation = tracing::field::Empty,
            dei.payload.digest = tracing::field::Empty,
            dei.stack.digest = tracing::field::Empty,
            dei.stack.mode = tracing::field::Empty,
            dei.stack.walker = tracing::field::Empty,
            dei.stack = tracing::field::Empty,
            dei.ambiguous = tracing::field::Empty,
        );
        drop(full);
        let otel = OtelSpan::of(&span);
        let (cx, scoped) = crate::caller::caller_lookup();
        let path = Path::for_call(&self.config, otel.sampling(), &cx);
        if path == Path::Off {
            // Plain OpenTelemetry: the trace context, no DEI.
            outgoing::inject(otel.context(), request.headers_mut());
            outgoing::strip_dei(request.headers_mut());
            let result = next.run(request, extensions).instrument(span.clone()).await;
            match &result {
                Ok(response) => {
                    span.record("http.response.status_code", response.status().as_u16());
                    if response.status().is_server_error() {
                        otel.set_status(opentelemetry::trace::Status::error(response.status().to_string()));
                    }
                }
                Err(e) => otel.set_status(opentelemetry::trace::Status::error(error_status(e))),
            }
            return result;
        }
        if !scoped {
            crate::caller::check_unscoped();
        }
        if named.is_none()
            && let Some(port) = url.port_or_known_default()
        {
            check_port(&signature, port);
        }
        let stack = self.config.stack_capturer().capture_inlined();
        let mut hasher = PayloadHasher::new();
        hasher.update(url.query().unwrap_or("").as_bytes());
        hasher.update(b"?");
        let body = request.body().and_then(|b| b.as_bytes()).unwrap_or(&[]);
        let body = &body[..body.len().min(self.config.payload_digest_cap())];
        hasher.update(body);
        let mut out = outgoing::begin(
            &self.config,
            &cx,
            otel,
            Call {
                rpc: None,
                signature,
                payload: hasher.finish(),
                raw_payload: Some(body),
                stack: &stack,
                preliminary: false,
            },
            path.records(),
        );
        // reqwest sends when the future below is polled: nothing to overlap with.
        out.record_attributes();
        match out.action {
            Action::Fail(Fault::Connection) => {
                out.otel
                    .set_status(opentelemetry::trace::Status::error("injected connection error"));
                out.otel
                    .set_attribute(crate::span::AMBIGUOUS, out.issued.is_ambiguous());
                return Err(reqwest_middleware::Error::middleware(InjectedConnectionError {
                    index: out.issued.index().encode(),
                }));
            }
            Action::Fail(f) => {
                let response = fault_response(f, request.url());
                span.record("http.response.status_code", response.status().as_u16());
                out.otel
                    .set_status(opentelemetry::trace::Status::error("injected fault"));
                out.otel
                    .set_attribute(crate::span::AMBIGUOUS, out.issued.is_ambiguous());
                return Ok(response);
            }
            Action::Delay(latency) => match request.timeout().copied() {
                // The wait counts against the request's timeout: one that reaches it fails the call as the
                // timeout would have, at the same moment, without sending it.
                Some(timeout) if latency >= timeout => {
                    tokio::time::sleep(timeout).await;
                    out.otel
                        .set_status(opentelemetry::trace::Status::error("injected timeout"));
                    out.otel
                        .set_attribute(crate::span::AMBIGUOUS, out.issued.is_ambiguous());
                    return Err(reqwest_middleware::Error::middleware(InjectedTimeout {
                        index: out.issued.index().encode(),
                        latency,
                        timeout,
                    }));
                }
                Some(timeout) => {
                    tokio::time::sleep(latency).await;
                    *request.timeout_mut() = Some(timeout - latency);
                }
                None => tokio::time::sleep(latency).await,
            },
            Action::Send => {}
        }
        out.inject(request.headers_mut());
        let result = next.run(request, extensions).instrument(span.clone()).await;
        match &result {
            Ok(response) => {
                span.record("http.response.status_code", response.status().as_u16());
                if response.status().is_server_error() {
                    out.otel
                        .set_status(opentelemetry::trace::Status::error(response.status().to_string()));
                }
            }
            Err(e) => out
                .otel
                .set_status(opentelemetry::trace::Status::error(error_status(e))),
        }
        if out.record {
            out.otel
                .set_attribute(crate::span::AMBIGUOUS, out.issued.is_ambiguous());
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(url: &str) -> String {
        redacted_url(&reqwest::Url::parse(url).expect("a URL")).into_owned()
    }

    #[test]
    fn url_full_keeps_no_credentials_no_query_values_and_no_fragment() {
        assert_eq!(redact("http://h:8080/a/b"), "http://h:8080/a/b");
        assert_eq!(
            redact("https://me:pw@h/a?secret_token=hunter2&AWSAccessKeyId=k&sig=s&empty=&flag&&x=1#frag"),
            "https://REDACTED:REDACTED@h/a?secret_token=REDACTED&AWSAccessKeyId=REDACTED&sig=REDACTED&empty=&REDACTED&&x=REDACTED"
        );
        assert_eq!(redact("http://token@h/"), "http://REDACTED:REDACTED@h/");
        assert_eq!(redact("http://h/#access_token=t"), "http://h/");
        assert_eq!(redact("http://h/?"), "http://h/?");
    }

    #[test]
    fn a_target_host_matches_ip_addresses_by_value_and_names_without_case() {
        assert!(TargetHost::parse("::1").matches("[::1]"));
        assert!(TargetHost::parse("[0:0::1]").matches("[::1]"));
        assert!(TargetHost::parse("127.0.0.1").matches("127.0.0.1"));
        assert!(!TargetHost::parse("127.0.0.1").matches("localhost"));
        assert!(TargetHost::parse("Users.Local").matches("users.local"));
        assert!(!TargetHost::parse("users").matches("billing"));
    }
}
