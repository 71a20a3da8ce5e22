//! The baseline that the DEI layers are compared with: minimal OpenTelemetry layers for tonic, as a service
//! instruments itself without DEI. The client layer opens a client span and injects the trace context (and
//! baggage) through the global propagator; the server layer extracts it and serves the request in a server
//! span parented on it. Neither boxes its future (tracing's `Instrumented`), so the comparison charges DEI
//! with every allocation it adds.

use std::task::Poll;
use tower::{Layer, Service};
use tracing::Instrument;
use tracing::instrument::Instrumented;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct Inject<'a>(&'a mut http::HeaderMap);

impl opentelemetry::propagation::Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct Extract<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// The baseline client layer.
#[derive(Clone, Debug, Default)]
pub struct OtelClientLayer;

impl<S> Layer<S> for OtelClientLayer {
    type Service = OtelClient<S>;
    fn layer(&self, inner: S) -> OtelClient<S> {
        OtelClient(inner)
    }
}

/// The service made by [`OtelClientLayer`].
#[derive(Clone, Debug)]
pub struct OtelClient<S>(S);

impl<S> Service<http::Request<tonic::body::Body>> for OtelClient<S>
where
    S: Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let name = request.uri().path().trim_start_matches('/');
        let span = tracing::info_span!(
            "grpc.client",
            otel.name = name,
            otel.kind = "client",
            rpc.system = "grpc"
        );
        let cx = span.context();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Inject(request.headers_mut())));
        let _entered = span.enter();
        self.0.call(request).instrument(span.clone())
    }
}

/// The baseline server layer.
#[derive(Clone, Debug, Default)]
pub struct OtelServerLayer;

impl<S> Layer<S> for OtelServerLayer {
    type Service = OtelServer<S>;
    fn layer(&self, inner: S) -> OtelServer<S> {
        OtelServer(inner)
    }
}

/// The service made by [`OtelServerLayer`].
#[derive(Clone, Debug)]
pub struct OtelServer<S>(S);

impl<S> Service<http::Request<tonic::body::Body>> for OtelServer<S>
where
    S: Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Extract(request.headers())));
        let name = request.uri().path().trim_start_matches('/');
        let span = tracing::info_span!(
            "grpc.server",
            otel.name = name,
            otel.kind = "server",
            rpc.system = "grpc"
        );
        let _ = span.set_parent(parent);
        let future = {
            let _entered = span.enter();
            self.0.call(request)
        };
        future.instrument(span)
    }
}
