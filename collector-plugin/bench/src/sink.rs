//! A sink: an OTLP receiver (gRPC and HTTP protobuf) that counts spans ([`crate::count_spans`]), and nothing
//! else.
//! `GET /count` on its HTTP port returns `{"spans": N, "requests": M}`.

use crate::RawCodec;
use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bytes::Bytes;
use futures::future::BoxFuture;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// The OTLP trace service's gRPC name (the first segment of [`dei_collector::server::GRPC_EXPORT_PATH`]).
const SERVICE_NAME: &str = "opentelemetry.proto.collector.trace.v1.TraceService";

/// Span and request counts.
#[derive(Debug, Default)]
pub struct SinkCounts {
    /// Spans received.
    pub spans: AtomicU64,
    /// Requests received.
    pub requests: AtomicU64,
}

impl SinkCounts {
    fn count(&self, body: &Bytes) -> bool {
        match crate::count_spans(body) {
            Some(n) => {
                self.spans.fetch_add(n as u64, Ordering::Relaxed);
                self.requests.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

#[derive(Clone)]
struct GrpcSink(Arc<SinkCounts>);

impl tonic::server::NamedService for GrpcSink {
    const NAME: &'static str = SERVICE_NAME;
}

struct Count(Arc<SinkCounts>);

impl tonic::server::UnaryService<Bytes> for Count {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<tonic::Response<Bytes>, tonic::Status>>;
    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let ok = self.0.count(request.get_ref());
        Box::pin(async move {
            if ok {
                Ok(tonic::Response::new(Bytes::new()))
            } else {
                Err(tonic::Status::invalid_argument("malformed ExportTraceServiceRequest"))
            }
        })
    }
}

impl<B> tower::Service<http::Request<B>> for GrpcSink
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let counts = self.0.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
                .max_decoding_message_size(64 << 20);
            Ok(grpc.unary(Count(counts), req).await)
        })
    }
}

async fn http_export(State(c): State<Arc<SinkCounts>>, body: Bytes) -> (http::StatusCode, &'static str) {
    if c.count(&body) {
        (http::StatusCode::OK, "")
    } else {
        (http::StatusCode::BAD_REQUEST, "malformed")
    }
}

async fn http_count(State(c): State<Arc<SinkCounts>>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "spans": c.spans.load(Ordering::Relaxed),
        "requests": c.requests.load(Ordering::Relaxed),
    }))
}

/// A running sink.
#[derive(Debug)]
pub struct Sink {
    /// gRPC address.
    pub grpc_addr: SocketAddr,
    /// HTTP address (`/v1/traces`, `/count`).
    pub http_addr: SocketAddr,
    /// The counts.
    pub counts: Arc<SinkCounts>,
}

/// Starts a sink on the given addresses (port 0 for ephemeral).
pub async fn start(grpc: SocketAddr, http: SocketAddr) -> std::io::Result<Sink> {
    let counts = Arc::new(SinkCounts::default());
    let gl = tokio::net::TcpListener::bind(grpc).await?;
    let hl = tokio::net::TcpListener::bind(http).await?;
    let (grpc_addr, http_addr) = (gl.local_addr()?, hl.local_addr()?);
    let svc = GrpcSink(counts.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(gl))
            .await;
    });
    let app = Router::new()
        .route("/v1/traces", post(http_export))
        .route("/count", get(http_count))
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(counts.clone());
    tokio::spawn(async move {
        let _ = axum::serve(hl, app).await;
    });
    Ok(Sink {
        grpc_addr,
        http_addr,
        counts,
    })
}
