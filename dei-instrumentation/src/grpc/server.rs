//! The tonic server layer: every request is served in its own scope, whose prefix is the incoming index.
//!
//! ```no_run
//! # mod pb { tonic::include_proto!("deitest"); }
//! # async fn run(svc: pb::leaf_server::LeafServer<impl pb::leaf_server::Leaf>) -> Result<(), Box<dyn std::error::Error>> {
//! use dei_instrumentation::{DeiConfig, DeiServerLayer};
//! tonic::transport::Server::builder()
//!     .layer(DeiServerLayer::new(DeiConfig::default()))
//!     .add_service(svc)
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The handler future runs inside the server span (entered on every poll, after `set_parent`) and inside the
//! request's `Context` (`with_context`), so every RPC it issues — and every RPC issued from tasks started with
//! [`dei_propagator::spawn`] and friends — takes its index from the request's scope. The response body is
//! polled in the same context, so lazily produced response streams are covered too. Streaming handlers wrap
//! their request stream in [`crate::grpc::stream::DeiStreaming`].

use super::frame::MessageDigester;
use super::methods::MethodKind;
use super::stream::ServerSpan;
use crate::body::{DeiResponseBody, InboundDigest};
use crate::config::{DeiConfig, Incoming};
use crate::incoming;
use crate::span::{self, OtelSpan};
use bytes::Bytes;
use dei_propagator::PayloadDigest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

/// A tower layer for `tonic::transport::Server::builder().layer(..)`.
#[derive(Clone, Debug, Default)]
pub struct DeiServerLayer {
    config: DeiConfig,
    incoming: Incoming,
}

impl DeiServerLayer {
    /// A layer with this configuration, trusting the `dei` and `dei-faults` values requests arrive with
    /// ([`Incoming::Trust`]; fault plans are then handled as [`DeiConfig::faults`] says).
    pub fn new(config: DeiConfig) -> Self {
        DeiServerLayer {
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

impl<S> Layer<S> for DeiServerLayer {
    type Service = DeiServerService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        DeiServerService {
            inner,
            config: self.config.clone(),
            incoming: self.incoming,
        }
    }
}

/// The service made by [`DeiServerLayer`].
#[derive(Clone, Debug)]
pub struct DeiServerService<S> {
    inner: S,
    config: DeiConfig,
    incoming: Incoming,
}

impl<S, B> Service<http::Request<Body>> for DeiServerService<S>
where
    S: Service<http::Request<Body>, Response = http::Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    type Response = http::Response<DeiResponseBody<B>>;
    type Error = S::Error;
    type Future = crate::incoming::ServerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path();
        let method = self.config.grpc_method(path);
        let kind = method.kind;
        // The `dei.*` attributes, declared empty: tracing-opentelemetry sizes the span's attribute list by its
        // fields, so the attributes set later fit without growing it. They are set on the OpenTelemetry span.
        let span = tracing::info_span!(
            target: "dei",
            "grpc.server",
            otel.name = method.signature.name(),
            otel.kind = "server",
            // set with the `dei.*` attributes, from values made once per method (or static)
            rpc.system = tracing::field::Empty,
            rpc.service = tracing::field::Empty,
            rpc.method = tracing::field::Empty,
            dei.signature = tracing::field::Empty,
            dei.index = tracing::field::Empty,
            dei.count = tracing::field::Empty,
            dei.depth = tracing::field::Empty,
            dei.instantiation = tracing::field::Empty,
            dei.payload.digest = tracing::field::Empty,
            rpc.grpc.status_code = tracing::field::Empty,
        );
        let single_request = kind == Some(MethodKind::ServerStreaming);
        let opened = incoming::open(
            &self.config,
            self.incoming,
            request.headers(),
            &method.signature,
            Some(&method.rpc),
            &span,
            single_request,
        );
        incoming::dispatch(
            &mut self.inner,
            &self.config,
            request,
            opened,
            |call, otel, parts| {
                if call.index.opens_stream() {
                    // A stream: its preliminary index has the empty payload.
                    span::record_payload(otel, &PayloadDigest::empty(), None);
                    if !single_request {
                        // Its messages are counted by the handler (`DeiStreaming`), which marks the span when a
                        // count passes the largest.
                        parts.extensions.insert(ServerSpan(otel.clone()));
                    }
                    InboundDigest::Done
                } else {
                    InboundDigest::Grpc(MessageDigester::new(0))
                }
            },
            span,
            true,
            Body::new,
        )
    }
}

static INCOMPLETE_DIGESTS: AtomicU64 = AtomicU64::new(0);

/// gRPC server spans (sampled, or under a fault plan) left without `dei.payload.digest` because the request
/// stream was dropped before its first message (a streaming handler that returned without reading it, a
/// method that is not served) or failed before it, since the process started (an in-process count, not exported
/// as a metric). Each such span has `dei.payload.digest.incomplete = true`; the first case is also logged, once,
/// as a warning. A stream that came with a preliminary index (from a DEI caller) is not among them: its
/// payload digest is the empty payload's, whether the handler reads it or not.
pub fn incomplete_payload_digests_total() -> u64 {
    INCOMPLETE_DIGESTS.load(Ordering::Relaxed)
}

/// Marks a server span whose payload digest will not be complete, counts it, and warns about the first.
pub(crate) fn record_incomplete_digest(otel: &OtelSpan, why: &str) {
    if crate::body::mark_incomplete_digest(otel, &INCOMPLETE_DIGESTS) {
        tracing::warn!(
            "dei: a gRPC server span has no dei.payload.digest ({why}; the digest is the first message's): it \
             carries dei.payload.digest.incomplete = true. Streaming handlers that return without reading their \
             request stream leave it so. Counted by \
             dei_instrumentation::grpc::server::incomplete_payload_digests_total(); this warning is shown once"
        );
    }
}
