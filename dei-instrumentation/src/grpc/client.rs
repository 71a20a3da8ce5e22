//! The tonic client layer: every outgoing call gets its index.
//!
//! ```no_run
//! # mod pb { tonic::include_proto!("deitest"); }
//! use dei_instrumentation::{DeiClientLayer, DeiConfig};
//! use tower::ServiceBuilder;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect().await?;
//! let channel = ServiceBuilder::new().layer(DeiClientLayer::new(DeiConfig::default())).service(channel);
//! let mut client = pb::leaf_client::LeafClient::new(channel);
//! # Ok(()) }
//! ```
//!
//! # Unary or streaming
//! The layer sees an HTTP/2 request with a body of gRPC frames; nothing in it says whether the call is unary
//! (see [`super::methods`]). Declared methods ([`crate::DeiConfigBuilder::streaming_method`],
//! [`crate::DeiConfigBuilder::methods_from_descriptor_set`]) are handled as declared: a unary call's first
//! message is awaited (tonic encodes it at once), a streaming call's body is never waited for. An undeclared
//! method is probed without blocking: the body is polled until it is pending, ends, or shows a second message;
//! a call whose whole body was one ready message is unary, anything else is a stream. A unary call is always
//! classified right; a stream whose first message happens to be ready together with its end is indexed as
//! unary, and one fed from a channel may be classified differently across runs — declare streaming methods.

use super::frame::MessageDigester;
use super::methods::MethodKind;
use super::signatures::GrpcMethod;
use super::stream::StreamFault;
use crate::body::{CallGuard, DeiResponseBody, record_grpc_status};
use crate::config::DeiConfig;
use crate::fault::{self, Action};
use crate::outgoing::{self, Call};
use crate::stack::CapturedStack;
use bytes::Bytes;
use dei_propagator::{Index, PayloadDigest, RequestScope, Signature};
use futures::future::BoxFuture;
use http_body::{Body as _, Frame, SizeHint};
use opentelemetry::Context;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Poll, ready};
use std::time::Duration;
use tonic::Status;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;

/// A tower layer for a tonic `Channel` (or any gRPC client service) that gives every call its index,
/// injects it, records the `dei.*` attributes on a client span and injects planned faults.
#[derive(Clone, Debug, Default)]
pub struct DeiClientLayer {
    config: DeiConfig,
}

impl DeiClientLayer {
    /// A layer with this configuration.
    pub fn new(config: DeiConfig) -> Self {
        DeiClientLayer { config }
    }
}

impl<S> Layer<S> for DeiClientLayer {
    type Service = DeiClientService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        DeiClientService {
            inner,
            config: self.config.clone(),
        }
    }
}

/// The service made by [`DeiClientLayer`].
#[derive(Clone, Debug)]
pub struct DeiClientService<S> {
    inner: S,
    config: DeiConfig,
}

/// Send sites of a stream's messages, in send order, shared between [`super::stream::StreamSender`] and the
/// request body (through the request's extensions).
#[derive(Clone, Debug, Default)]
pub(crate) struct SendSites(pub(crate) Arc<Mutex<VecDeque<CapturedStack>>>);

impl SendSites {
    fn pop(&self) -> Option<CapturedStack> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }
}

impl<S, B> Service<http::Request<Body>> for DeiClientService<S>
where
    S: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
{
    type Response = http::Response<DeiResponseBody<B>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // `call` runs inside the caller's poll: its stack and its Context are the caller's.
        let stack = self.config.stack_capturer().capture_inlined();
        let caller_cx = crate::caller::caller_context();
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let config = self.config.clone();
        let path = request.uri().path();
        let method = self.config.grpc_method(path);
        let kind = method.kind;
        let (service, rpc_method) = method.service_and_method();
        let span = tracing::info_span!(
            target: "dei",
            "grpc.client",
            otel.name = method.signature.name(),
            otel.kind = "client",
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = rpc_method,
            server.address = tracing::field::Empty,
        );
        // A generated client's requests carry only the path; the channel adds the authority later.
        if let Some(host) = request.uri().host() {
            span.record("server.address", host);
        }
        Box::pin(call(
            inner,
            config,
            request,
            CallInfo {
                stack,
                caller_cx,
                method,
                span,
                kind,
            },
        ))
    }
}

struct CallInfo {
    stack: CapturedStack,
    caller_cx: Context,
    method: GrpcMethod,
    span: tracing::Span,
    kind: Option<MethodKind>,
}

/// What the first frames of a request body showed.
struct Probe {
    frames: VecDeque<Result<Frame<Bytes>, Status>>,
    first: Option<(PayloadDigest, Vec<u8>)>,
    messages: usize,
    ended: bool,
}

/// Polls the body until the first message is complete (`wait`), or — without waiting — until it is pending,
/// ends or shows a second message.
async fn probe(body: &mut Body, wait: bool, keep: usize) -> Probe {
    let mut p = Probe {
        frames: VecDeque::new(),
        first: None,
        messages: 0,
        ended: false,
    };
    let mut digester = MessageDigester::new(keep);
    futures::future::poll_fn(|cx| {
        loop {
            if wait && p.messages >= 1 {
                return Poll::Ready(());
            }
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending if wait => return Poll::Pending,
                Poll::Pending => return Poll::Ready(()),
                Poll::Ready(None) => {
                    p.ended = true;
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Err(e))) => {
                    p.frames.push_back(Err(e));
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        digester.feed(data, |m| {
                            p.messages += 1;
                            if p.first.is_none() {
                                p.first = Some((m.digest, m.prefix.unwrap_or_default()));
                            }
                        });
                    }
                    p.frames.push_back(Ok(frame));
                    if p.messages >= 2 {
                        return Poll::Ready(());
                    }
                }
            }
        }
    })
    .await;
    p
}

async fn call<S, B>(
    mut inner: S,
    config: DeiConfig,
    request: http::Request<Body>,
    info: CallInfo,
) -> Result<http::Response<DeiResponseBody<B>>, S::Error>
where
    S: Service<http::Request<Body>, Response = http::Response<B>>,
    B: http_body::Body<Data = Bytes>,
{
    let (mut parts, mut body) = request.into_parts();
    let keep = if config.record_payloads() { 1024 } else { 0 };
    let (streaming, probe) = match info.kind {
        Some(kind) if kind.is_streaming() => (true, None),
        Some(_) => (false, Some(probe(&mut body, true, keep).await)),
        None => {
            let p = probe(&mut body, false, keep).await;
            let unary = p.ended && p.messages == 1;
            (!unary, Some(p))
        }
    };
    let (buffered, first, rest_done) = match probe {
        Some(p) => (p.frames, p.first, p.ended),
        None => (VecDeque::new(), None, false),
    };
    let span = info.span;
    let (payload, raw) = match (streaming, first) {
        (false, Some((digest, raw))) => (digest, raw),
        _ => (PayloadDigest::empty(), Vec::new()),
    };
    let mut out = outgoing::begin(
        &config,
        &info.caller_cx,
        &span,
        Call {
            signature: info.method.signature.clone(),
            payload,
            raw_payload: Some(&raw),
            stack: &info.stack,
            preliminary: streaming,
        },
    );
    match out.action {
        Action::Fail(f) => {
            out.record_attributes();
            let response = fault::grpc_response(f, ());
            if let Some(code) = crate::body::grpc_code(response.headers()) {
                record_grpc_status(&out.otel, code);
            }
            let guard = CallGuard {
                _span: span.clone(),
                otel: out.otel,
                issued: Some(out.issued),
                grpc: true,
            };
            let (rparts, ()) = response.into_parts();
            return Ok(http::Response::from_parts(rparts, DeiResponseBody::empty(guard)));
        }
        Action::Delay(d) => {
            // Recorded before the wait: a caller that gives up during it (a timeout) drops this future, and
            // the span must still say which RPC was delayed.
            out.record_attributes();
            tokio::time::sleep(d).await
        }
        Action::Send => {}
    }
    outgoing::inject(&out.inject_cx, &mut parts.headers);
    let stream_fault = streaming.then(|| parts.extensions.get::<StreamFault>().cloned().unwrap_or_default());
    let tap = stream_fault.clone().map(|fault| StreamTap {
        digester: MessageDigester::new(0),
        scope: out.scope.clone(),
        span: span.clone(),
        preliminary: out.issued.index().clone(),
        signature: info.method.signature.clone(),
        creation: info.stack.clone(),
        sites: parts.extensions.get::<SendSites>().cloned(),
        k: 0,
        plan: outgoing::FaultGate::new(&config, &info.caller_cx),
        fault,
    });
    let body = Body::new(OutboundBody {
        buffered,
        rest: body,
        rest_done,
        tap,
        segments: VecDeque::new(),
        sleep: None,
        cut: false,
    });
    let request = http::Request::from_parts(parts, body);
    // tonic's channel hands the request to the connection's task in `call`: the attributes are recorded while
    // it goes out.
    let response = inner.call(request);
    out.record_attributes();
    let otel = out.otel;
    let guard = CallGuard {
        _span: span.clone(),
        otel: otel.clone(),
        issued: Some(out.issued),
        grpc: true,
    };
    let response = response.await;
    // A fault on a stream message that hit before the response came: the call ends with the fault's status.
    if let Some(f) = stream_fault.as_ref().and_then(StreamFault::get) {
        let status = fault::status_for_stream(f);
        record_grpc_status(&otel, status.code());
        let (rparts, ()) = status.into_http::<()>().into_parts();
        return Ok(http::Response::from_parts(rparts, DeiResponseBody::empty(guard)));
    }
    match response {
        Ok(response) => {
            if let Some(code) = crate::body::grpc_code(response.headers()) {
                record_grpc_status(&otel, code);
            }
            Ok(response.map(|b| DeiResponseBody::new(b, guard, None).ending_on(stream_fault)))
        }
        Err(e) => {
            otel.set_status(opentelemetry::trace::Status::error("transport error"));
            Err(e)
        }
    }
}

/// Issues each stream message's final index as the message passes (paper §4.2), and applies the faults the
/// plan names for them.
struct StreamTap {
    digester: MessageDigester,
    scope: RequestScope,
    span: tracing::Span,
    preliminary: Index,
    signature: Signature,
    creation: CapturedStack,
    sites: Option<SendSites>,
    k: u32,
    /// The fault plan of the caller's context, as this service's configuration lets it apply.
    plan: outgoing::FaultGate,
    /// Set when a failing fault hit a message.
    fault: StreamFault,
}

/// A piece of a data frame to send, after waiting `delay` (a latency fault on its first message).
type Segment = (Option<Duration>, Bytes);

impl StreamTap {
    /// Issues the final indexes of the messages completed by `data` and splits it where faults apply: the
    /// segments to send, in order. A failing fault cuts the data before its message and sets the fault.
    fn feed(&mut self, data: Bytes) -> Vec<Segment> {
        let mut done = Vec::new();
        self.digester.feed_at(&data, |m, end| done.push((m.digest, end)));
        let mut segments = Vec::new();
        // The start of the current segment, its delay, and the end of the last message seen.
        let (mut start, mut delay, mut previous_end) = (0, None, 0);
        for (digest, end) in done {
            self.k = self.k.saturating_add(1);
            // The send site, when the message went through a `StreamSender`; else the stream's creation site.
            let site = self.sites.as_ref().and_then(SendSites::pop);
            let stack = site.as_ref().unwrap_or(&self.creation);
            let (_, action) = outgoing::stream_message(
                &self.scope,
                &self.span,
                &self.preliminary,
                &self.signature,
                digest,
                stack,
                self.k,
                &self.plan,
            );
            match action {
                Action::Send => {}
                Action::Delay(d) => {
                    // This message (and what follows) waits; what came before it goes now.
                    if previous_end > start {
                        segments.push((delay.take(), data.slice(start..previous_end)));
                    }
                    start = previous_end;
                    delay = Some(delay.map_or(d, |before: Duration| before + d));
                }
                Action::Fail(f) => {
                    self.fault.set(f);
                    if previous_end > start {
                        segments.push((delay, data.slice(start..previous_end)));
                    }
                    return segments;
                }
            }
            previous_end = end;
        }
        if data.len() > start {
            segments.push((delay, data.slice(start..)));
        }
        segments
    }
}

/// The outgoing request body: frames read while probing, then the rest, each observed by the stream tap.
struct OutboundBody {
    buffered: VecDeque<Result<Frame<Bytes>, Status>>,
    rest: Body,
    /// The probe saw the end of `rest`: it is not polled again.
    rest_done: bool,
    tap: Option<StreamTap>,
    /// Data the tap let through, waiting to be sent.
    segments: VecDeque<Segment>,
    /// A latency fault being waited out.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A failing fault ended the stream: nothing more is sent.
    cut: bool,
}

impl http_body::Body for OutboundBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                this.sleep = None;
            }
            if let Some((delay, data)) = this.segments.pop_front() {
                if let Some(d) = delay {
                    this.sleep = Some(Box::pin(tokio::time::sleep(d)));
                    this.segments.push_front((None, data));
                    continue;
                }
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            if this.cut {
                return Poll::Ready(None);
            }
            let item = match this.buffered.pop_front() {
                Some(item) => item,
                None if this.rest_done => return Poll::Ready(None),
                None => match ready!(Pin::new(&mut this.rest).poll_frame(cx)) {
                    Some(item) => item,
                    None => return Poll::Ready(None),
                },
            };
            let Some(tap) = this.tap.as_mut() else {
                return Poll::Ready(Some(item));
            };
            match item.map(Frame::into_data) {
                Ok(Ok(data)) => {
                    this.segments.extend(tap.feed(data));
                    this.cut = tap.fault.get().is_some();
                }
                Ok(Err(frame)) => return Poll::Ready(Some(Ok(frame))),
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.segments.is_empty()
            && self.sleep.is_none()
            && (self.cut || (self.buffered.is_empty() && (self.rest_done || self.rest.is_end_stream())))
    }

    fn size_hint(&self) -> SizeHint {
        if self.buffered.is_empty() && self.segments.is_empty() && !self.cut {
            self.rest.size_hint()
        } else {
            SizeHint::default()
        }
    }
}
