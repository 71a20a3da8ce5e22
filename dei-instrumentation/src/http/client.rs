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
//! The signature is `METHOD host/path`: the URL's host without its port, so that a server on a port chosen at
//! run time (an ephemeral port on loopback, a port from service discovery) gives the same index from run to
//! run. The payload is `query` + `?` + the body, at most
//! [`payload_digest_cap`](crate::DeiConfig::payload_digest_cap) bytes of it. A streaming request body cannot
//! be read without consuming it, so it counts as empty. The index counts as in flight until the response head
//! arrives.
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
use std::time::Duration;
use tracing::Instrument;

/// reqwest-middleware middleware doing for HTTP calls what [`crate::DeiClientLayer`] does for gRPC.
#[derive(Clone, Debug, Default)]
pub struct DeiReqwestMiddleware {
    config: DeiConfig,
}

impl DeiReqwestMiddleware {
    /// A middleware with this configuration.
    pub fn new(config: DeiConfig) -> Self {
        DeiReqwestMiddleware { config }
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
        // The host names the service; the port does not (it may change from run to run).
        let signature = Signature::http(&method, &format!("{}{}", url.host_str().unwrap_or(""), url.path()));
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
            server.address = url.host_str().unwrap_or(""),
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
}
