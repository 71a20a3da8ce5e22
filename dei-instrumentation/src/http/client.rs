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
//! # Faults
//!
//! See [`crate::fault`] for the plan's syntax. What a caller gets, and how it differs from the real thing:
//!
//! | planned | the caller gets | differs from a real one in |
//! |---|---|---|
//! | `h<status>`, `g<code>` | `Ok(response)` with that status, an empty body, no headers, [`url()`](reqwest::Response::url) the request's URL | [`remote_addr()`](reqwest::Response::remote_addr) is `None` |
//! | `c` | `Err(Error::Middleware(`[`InjectedConnectionError`]`))` | `is_connect()` is false (it answers for reqwest's own errors only, which cannot be made outside reqwest); `is_middleware()` is true, `url()` is `None` |
//!
//! Code that tells errors apart checks for the injected ones too:
//! `err.is_connect() || matches!(&err, reqwest_middleware::Error::Middleware(e) if e.is::<InjectedConnectionError>())`.

use crate::config::DeiConfig;
use crate::fault::{self, Action, InjectedConnectionError};
use crate::outgoing::{self, Call};
use crate::span::{OtelSpan, Path};
use dei_propagator::{Fault, PayloadHasher, Signature};
use http::Extensions;
use reqwest_middleware::{Middleware, Next};
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
        // The `dei.*` attributes, declared empty: tracing-opentelemetry sizes the span's attribute list by its
        // fields, so the attributes set later fit without growing it. They are set on the OpenTelemetry span.
        let span = tracing::info_span!(
            target: "dei",
            "http.client",
            otel.name = signature.name(),
            otel.kind = "client",
            http.request.method = %method,
            url.full = %url,
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
                Err(e) => otel.set_status(opentelemetry::trace::Status::error(e.to_string())),
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
            Action::Delay(d) => tokio::time::sleep(d).await,
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
            Err(e) => out.otel.set_status(opentelemetry::trace::Status::error(e.to_string())),
        }
        if out.record {
            out.otel
                .set_attribute(crate::span::AMBIGUOUS, out.issued.is_ambiguous());
        }
        result
    }
}
