//! The OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
//!
//! It is the same service that opentelemetry-proto's generated `TraceServiceServer` provides, served with a
//! pass-through codec so that the request bytes can be forwarded unchanged and a malformed message is
//! answered with `INVALID_ARGUMENT` (the generated server says `INTERNAL`). gzip request compression is
//! accepted. Messages over the size limit also get `INVALID_ARGUMENT`.

use crate::collector::Collector;
use crate::forward::codec::RawCodec;
use crate::otlp::Rejection;
use bytes::Bytes;
use futures::future::BoxFuture;
use prost::Message;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

/// The gRPC service name.
pub const SERVICE_NAME: &str = "opentelemetry.proto.collector.trace.v1.TraceService";

/// The trace service, as a tower service for tonic's router.
#[derive(Debug, Clone)]
pub struct TraceExportService {
    collector: Arc<Collector>,
}

impl TraceExportService {
    /// A service feeding `collector`.
    pub fn new(collector: Arc<Collector>) -> Self {
        TraceExportService { collector }
    }
}

impl tonic::server::NamedService for TraceExportService {
    const NAME: &'static str = SERVICE_NAME;
}

struct Export(Arc<Collector>);

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<Response<Bytes>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let collector = self.0.clone();
        Box::pin(async move {
            let body = request.into_inner();
            match collector.accept_protobuf(body).await {
                Ok(accepted) => Ok(Response::new(Bytes::from(accepted.response().encode_to_vec()))),
                Err(r) => Err(status(&r)),
            }
        })
    }
}

/// The gRPC status for a rejection: `INVALID_ARGUMENT`, or `UNAVAILABLE` when the client should retry.
pub fn status(r: &Rejection) -> Status {
    Status::new(r.grpc_code(), r.to_string())
}

impl<B> tower::Service<http::Request<B>> for TraceExportService
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
        let collector = self.collector.clone();
        Box::pin(async move {
            if req.uri().path() != crate::forward::GRPC_EXPORT_PATH {
                return Ok(Status::unimplemented(format!("unknown method {}", req.uri().path())).into_http());
            }
            let limit = collector.config().max_body_bytes;
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(limit)
                .max_encoding_message_size(usize::MAX);
            let mut resp = grpc.unary(Export(collector.clone()), req).await;
            // tonic answers an oversized message with OUT_OF_RANGE before our codec sees it.
            if resp.headers().get("grpc-status").is_some_and(|v| v == "11") {
                let r = collector.reject(Rejection::TooLarge { limit });
                resp = status(&r).into_http();
            }
            Ok(resp)
        })
    }
}
