//! The OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
//!
//! It is the same service that opentelemetry-proto's generated `TraceServiceServer` provides, served with a
//! pass-through codec so that the request bytes can be forwarded unchanged and a malformed message is
//! answered with `INVALID_ARGUMENT` (the generated server says `INTERNAL`). gzip request compression is
//! accepted. Messages over the size limit also get `INVALID_ARGUMENT`.

use crate::collector::Collector;
use crate::otlp::Rejection;
use crate::otlp::codec::RawCodec;
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

/// The unary handler; `called` says that tonic decoded a message and handed it over (so that an error
/// status without it comes from tonic's framing and decompression, and is counted here); `compressed`, that
/// the message came gzip-compressed (its decompressed bytes then take their own share of the cap).
struct Export {
    collector: Arc<Collector>,
    called: Arc<std::sync::atomic::AtomicBool>,
    compressed: bool,
}

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<Response<Bytes>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let collector = self.collector.clone();
        let compressed = self.compressed;
        self.called.store(true, std::sync::atomic::Ordering::Relaxed);
        Box::pin(async move {
            let body = request.into_inner();
            // held until the request is answered
            let _decompressed = match compressed {
                false => None,
                true => match collector.reserve_buffer(body.len()) {
                    Some(permit) => Some(permit),
                    None => {
                        let r = Rejection::Overloaded(format!(
                            "the collector is buffering its limit of {} request bytes (decompressed messages included); retry later",
                            collector.config().max_buffered_bytes
                        ));
                        return Err(status(&collector.reject(r)));
                    }
                },
            };
            match collector.accept_protobuf(body).await {
                Ok(accepted) => Ok(Response::new(Bytes::from(accepted.response().encode_to_vec()))),
                Err(r) => Err(status(&r)),
            }
        })
    }
}

/// A gRPC request body whose bytes, while they are received, hold their share of the collector's cap on
/// buffered request bytes; past the cap it fails and sets `overloaded`.
struct CappedBody<B> {
    inner: B,
    collector: Arc<Collector>,
    reserved: usize,
    overloaded: Arc<std::sync::atomic::AtomicBool>,
}

impl<B> Drop for CappedBody<B> {
    fn drop(&mut self) {
        self.collector.release_buffer(self.reserved);
    }
}

impl<B> http_body::Body for CappedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len();
                    if !this.collector.reserve_buffer_unguarded(n) {
                        this.overloaded.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Poll::Ready(Some(Err("the cap on buffered request bytes is reached".into())));
                    }
                    this.reserved += n;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Decodes the percent-encoding of a `grpc-message` header.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Ok(v) = u8::from_str_radix(s.get(i + 1..i + 3).unwrap_or(""), 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
            let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let overloaded = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let req = req.map(|inner| CappedBody {
                inner: Box::pin(inner),
                collector: collector.clone(),
                reserved: 0,
                overloaded: overloaded.clone(),
            });
            let timeout = collector.config().body_timeout;
            let compressed = req
                .headers()
                .get("grpc-encoding")
                .is_some_and(|e| e.as_bytes() != b"identity");
            let export = Export {
                collector: collector.clone(),
                called: called.clone(),
                compressed,
            };
            let resp = match tokio::time::timeout(timeout, grpc.unary(export, req)).await {
                Ok(resp) => resp,
                Err(_) => {
                    let r = Rejection::Incomplete(format!("timed out after {timeout:?}"));
                    return Ok(status(&collector.reject(r)).into_http());
                }
            };
            if called.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(resp);
            }
            // tonic refused the message before our handler saw it: count it under its reason
            let code = resp
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
                .map(tonic::Code::from_i32);
            let message = resp
                .headers()
                .get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .map(percent_decode)
                .unwrap_or_default();
            let r = match code {
                None | Some(tonic::Code::Ok) => return Ok(resp),
                Some(_) if overloaded.load(std::sync::atomic::Ordering::Relaxed) => Rejection::Overloaded(format!(
                    "the collector is buffering its limit of {} request bytes; retry later",
                    collector.config().max_buffered_bytes
                )),
                // an oversized message, or a gzip bomb past the limit once decompressed
                Some(tonic::Code::OutOfRange | tonic::Code::ResourceExhausted) => Rejection::TooLarge { limit },
                Some(tonic::Code::Unimplemented) => Rejection::UnsupportedEncoding(message),
                Some(tonic::Code::Cancelled) => Rejection::Incomplete(message),
                Some(_) if message.contains("gzip") || message.contains("decompress") => Rejection::BadGzip(message),
                Some(_) => Rejection::BadFraming(message),
            };
            Ok(status(&collector.reject(r)).into_http())
        })
    }
}
