//! The axum server middleware.
//!
//! ```
//! use axum::{Router, routing::get};
//! use dei_instrumentation::{DeiConfig, DeiHttpServerLayer};
//! let app: Router = Router::new()
//!     .route("/bookings/{user}", get(|| async { "[]" }))
//!     .layer(DeiHttpServerLayer::new(DeiConfig::default()));
//! ```
//!
//! The signature is the method and the matched route template (`GET /bookings/{user}`). A request that
//! matched no route (no `MatchedPath`: axum's fallback, a 404) has the signature `METHOD <unmatched>`, the
//! span name `METHOD` and no `http.route`, as the OpenTelemetry semantic conventions ask: the path a client
//! chose goes in `url.path` only, so that no one can make span names or signatures without bound. For the
//! same reason a method outside the conventions' list (`GET`, `HEAD`, `POST`, `PUT`, `DELETE`, `CONNECT`,
//! `OPTIONS`, `TRACE`, `PATCH`) is recorded as `_OTHER` in `http.request.method` and in the signature, the
//! method as sent in `http.request.method_original`, and the span name says `HTTP` in its place. A server span
//! carries an index it received, so its signature names what was served and changes no index.
//!
//! The payload digest covers the query, `?`, and the body up to the cap, computed as the handler reads the
//! body: nothing is buffered. So it is complete only once the handler has read the body to its end or to the
//! cap: a handler that ignores the body, or stops early, or a body that fails, leaves the span without
//! `dei.payload.digest` and with `dei.payload.digest.incomplete = true` instead, and is counted
//! ([`incomplete_payload_digests_total`]). The caller's span has the digest in any case.

use crate::body::{DeiResponseBody, InboundDigest};
use crate::config::{DeiConfig, Incoming};
use crate::incoming;
use crate::span::OtelSpan;
use axum::body::Body;
use axum::extract::MatchedPath;
use dei_propagator::Signature;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use tower_layer::Layer;
use tower_service::Service;

/// A tower layer for axum routers (`Router::layer` or `Router::route_layer`).
#[derive(Clone, Debug, Default)]
pub struct DeiHttpServerLayer {
    config: DeiConfig,
    incoming: Incoming,
}

impl DeiHttpServerLayer {
    /// A layer with this configuration, trusting the `dei` and `dei-faults` values requests arrive with
    /// ([`Incoming::Trust`]; fault plans are then handled as [`DeiConfig::faults`] says).
    pub fn new(config: DeiConfig) -> Self {
        DeiHttpServerLayer {
            config,
            incoming: Incoming::Trust,
        }
    }

    /// What this layer does with incoming `dei` and `dei-faults` values: [`Incoming::Restart`] on a layer that
    /// receives traffic from outside the system (a trust boundary) drops them and serves every request as a
    /// root.
    pub fn incoming(mut self, incoming: Incoming) -> Self {
        self.incoming = incoming;
        self
    }
}

impl<S> Layer<S> for DeiHttpServerLayer {
    type Service = DeiHttpServerService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        DeiHttpServerService {
            inner,
            config: self.config.clone(),
            incoming: self.incoming,
        }
    }
}

/// The service made by [`DeiHttpServerLayer`].
#[derive(Clone, Debug)]
pub struct DeiHttpServerService<S> {
    inner: S,
    config: DeiConfig,
    incoming: Incoming,
}

impl<S> Service<http::Request<Body>> for DeiHttpServerService<S>
where
    S: Service<http::Request<Body>, Response = axum::response::Response> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<DeiResponseBody<Body>>;
    type Error = S::Error;
    type Future = crate::incoming::ServerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let route = request.extensions().get::<MatchedPath>().map(MatchedPath::as_str);
        let known = KNOWN_METHODS.into_iter().find(|(m, _)| *m == request.method().as_str());
        let (method, unmatched) = known.unwrap_or(OTHER_METHOD);
        let signature = match route {
            Some(route) => Signature::http(method, route),
            None => Signature::from_static_name(unmatched),
        };
        let name = match (route, known) {
            (Some(_), Some(_)) => Cow::Borrowed(signature.name()),
            (Some(route), None) => Cow::Owned(format!("HTTP {route}")),
            (None, Some(_)) => Cow::Borrowed(method),
            (None, None) => Cow::Borrowed("HTTP"),
        };
        // The `dei.*` attributes, declared empty: tracing-opentelemetry sizes the span's attribute list by its
        // fields, so the attributes set later fit without growing it. They are set on the OpenTelemetry span.
        let span = tracing::info_span!(
            target: "dei",
            "http.server",
            otel.name = &*name,
            otel.kind = "server",
            http.request.method = method,
            http.request.method_original = known.is_none().then(|| request.method().as_str()),
            http.route = route,
            url.path = request.uri().path(),
            http.response.status_code = tracing::field::Empty,
            dei.signature = tracing::field::Empty,
            dei.index = tracing::field::Empty,
            dei.count = tracing::field::Empty,
            dei.depth = tracing::field::Empty,
            dei.instantiation = tracing::field::Empty,
            dei.payload.digest = tracing::field::Empty,
        );
        let opened = incoming::open(
            &self.config,
            self.incoming,
            request.headers(),
            &signature,
            None,
            &span,
            false,
        );
        let cap = self.config.payload_digest_cap();
        let digest =
            |_: &_, _: &_, parts: &mut http::request::Parts| InboundDigest::http(parts.uri.query().unwrap_or(""), cap);
        incoming::dispatch(
            &mut self.inner,
            &self.config,
            request,
            opened,
            digest,
            span,
            false,
            Body::new,
        )
    }
}

/// The methods the semantic conventions know (case-sensitive, as HTTP methods are), each with the signature of
/// a request that matched no route. Any other method is `_OTHER`.
const KNOWN_METHODS: [(&str, &str); 9] = [
    ("GET", "GET <unmatched>"),
    ("HEAD", "HEAD <unmatched>"),
    ("POST", "POST <unmatched>"),
    ("PUT", "PUT <unmatched>"),
    ("DELETE", "DELETE <unmatched>"),
    ("CONNECT", "CONNECT <unmatched>"),
    ("OPTIONS", "OPTIONS <unmatched>"),
    ("TRACE", "TRACE <unmatched>"),
    ("PATCH", "PATCH <unmatched>"),
];

/// `http.request.method` for any other method, and the signature of such a request that matched no route.
const OTHER_METHOD: (&str, &str) = ("_OTHER", "_OTHER <unmatched>");

static INCOMPLETE_DIGESTS: AtomicU64 = AtomicU64::new(0);

/// HTTP server spans (sampled, or under a fault plan) left without `dei.payload.digest` because the handler did
/// not read the request body to its end or to the digest's cap, or the body failed, since the process started
/// (an in-process count, not exported as a metric). Each such span has `dei.payload.digest.incomplete = true`;
/// the first case is also logged, once, as a warning.
pub fn incomplete_payload_digests_total() -> u64 {
    INCOMPLETE_DIGESTS.load(Ordering::Relaxed)
}

/// Marks a server span whose payload digest will not be complete, counts it, and warns about the first.
pub(crate) fn record_incomplete_digest(otel: &OtelSpan, why: &str) {
    if crate::body::mark_incomplete_digest(otel, &INCOMPLETE_DIGESTS) {
        tracing::warn!(
            "dei: an HTTP server span has no dei.payload.digest ({why}; the digest covers the query and the body \
             up to payload_digest_cap): it carries dei.payload.digest.incomplete = true. Handlers that ignore \
             the body leave it so. Counted by \
             dei_instrumentation::http::server::incomplete_payload_digests_total(); this warning is shown once"
        );
    }
}
