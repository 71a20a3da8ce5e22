//! The tonic client layer: every outgoing call gets its index.
//!
//! ```no_run
//! # mod pb { tonic::include_proto!("deitest"); }
//! use dei_instrumentation::{DeiClientLayer, DeiConfig};
//! use tower::ServiceBuilder;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051");
//! // `server`: the client spans' `server.address` and `server.port` (the channel's requests do not carry them).
//! let layer = DeiClientLayer::new(DeiConfig::default()).server(endpoint.uri());
//! let channel = ServiceBuilder::new().layer(layer).service(endpoint.connect().await?);
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
use crate::span::OtelSpan;
use crate::span::Path;
use crate::stack::CapturedStack;
use bytes::Bytes;
use dei_propagator::{Index, PayloadDigest, RequestScope, Signature};
use futures::future::BoxFuture;
use http_body::{Body as _, Frame, SizeHint};
use opentelemetry::Context;
use std::collections::VecDeque;
use std::future::Future;
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
///
/// The span's `server.address` and `server.port` come from the request's URI when it names the server (a
/// generated client made `with_origin`), else from [`server`](Self::server): a generated client made with
/// `new(channel)` sends only the path, and the channel adds the authority below this layer. Neither enters
/// the index.
#[derive(Clone, Debug, Default)]
pub struct DeiClientLayer {
    config: DeiConfig,
    server: Option<Server>,
}

/// The server a layer's calls go to, as its spans name it: `server.address` and `server.port`.
#[derive(Clone, Debug)]
struct Server {
    address: Arc<str>,
    port: Option<u16>,
}

impl DeiClientLayer {
    /// A layer with this configuration.
    pub fn new(config: DeiConfig) -> Self {
        DeiClientLayer { config, server: None }
    }

    /// Names the server of the channel this layer wraps, by the URI it connects to (`endpoint.uri()`): its
    /// host is the spans' `server.address`, and its port, or the scheme's default (80 for `http`, 443 for
    /// `https`), their `server.port`. A request whose URI names a server (a client made `with_origin`) is
    /// recorded with that one instead. A URI without a host names none. Span attributes only: the index does
    /// not depend on the server, so it stays the same wherever the server runs.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use dei_instrumentation::{DeiClientLayer, DeiConfig};
    /// let endpoint = tonic::transport::Endpoint::from_static("http://movies:50051");
    /// let layer = DeiClientLayer::new(DeiConfig::default()).server(endpoint.uri());
    /// let channel = tower::ServiceBuilder::new().layer(layer).service(endpoint.connect().await?);
    /// # let _ = channel;
    /// # Ok(()) }
    /// ```
    pub fn server(mut self, uri: &http::Uri) -> Self {
        self.server = uri.host().map(|host| Server {
            address: Arc::from(crate::span::server_address(host)),
            port: server_port(uri),
        });
        self
    }
}

impl<S> Layer<S> for DeiClientLayer {
    type Service = DeiClientService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        DeiClientService {
            inner,
            config: self.config.clone(),
            server: self.server.clone(),
        }
    }
}

/// The service made by [`DeiClientLayer`].
#[derive(Clone, Debug)]
pub struct DeiClientService<S> {
    inner: S,
    config: DeiConfig,
    server: Option<Server>,
}

/// Send sites of a stream's messages, in send order, shared between [`super::stream::StreamSender`] and the
/// request body (through the request's extensions).
#[derive(Clone, Debug, Default)]
pub(crate) struct SendSites(Arc<Mutex<VecDeque<CapturedStack>>>, Arc<std::sync::atomic::AtomicBool>);

impl SendSites {
    fn pop(&self) -> Option<CapturedStack> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }

    /// The call is not indexed ([`crate::config::Unsampled::Off`]): nothing takes the sites, so none is kept.
    fn untapped(&self) {
        let mut sites = self.0.lock().unwrap_or_else(|p| p.into_inner());
        sites.clear();
        sites.shrink_to_fit();
        drop(sites);
        self.1.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Keeps a message's send site for the client layer, unless the call is not indexed.
    pub(crate) fn push(&self, site: CapturedStack) {
        if !self.1.load(std::sync::atomic::Ordering::Relaxed) {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push_back(site);
        }
    }
}

/// `server.port` of a request to `uri`: its port, or its scheme's default (80 for `http`, 443 for `https`).
fn server_port(uri: &http::Uri) -> Option<u16> {
    uri.port_u16().or_else(|| match uri.scheme_str() {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    })
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
    type Future = ResponseFuture<S::Future, B, S::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // `call` runs inside the caller's poll: its stack and its Context are the caller's. Everything up to
        // handing the request to the inner service happens here, so that the common call needs no future of
        // its own beyond the inner service's.
        let method = self.config.grpc_method(request.uri().path());
        let kind = method.kind;
        // The `dei.*` attributes, declared empty: tracing-opentelemetry sizes the span's attribute list by its
        // fields, so the attributes set later fit without growing it. They are set on the OpenTelemetry span.
        let span = tracing::info_span!(
            target: "dei",
            "grpc.client",
            otel.name = method.signature.name(),
            otel.kind = "client",
            // set with the `dei.*` attributes, from values made once per method (or static)
            rpc.system = tracing::field::Empty,
            rpc.service = tracing::field::Empty,
            rpc.method = tracing::field::Empty,
            server.address = tracing::field::Empty,
            server.port = tracing::field::Empty,
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
            rpc.grpc.status_code = tracing::field::Empty,
        );
        // A generated client's requests carry only the path; the channel adds the authority later. A client
        // made `with_origin` (or a request with a full URI) names the server: its port is the URI's, or the
        // scheme's default. Otherwise the layer's own `server`, if it was given one.
        if let Some(host) = request.uri().host() {
            span.record("server.address", crate::span::server_address(host));
            if let Some(port) = server_port(request.uri()) {
                span.record("server.port", i64::from(port));
            }
        } else if let Some(server) = &self.server {
            span.record("server.address", &*server.address);
            if let Some(port) = server.port {
                span.record("server.port", i64::from(port));
            }
        }
        let otel = OtelSpan::of(&span);
        let (caller_cx, scoped) = crate::caller::caller_lookup();
        let path = Path::for_call(&self.config, otel.sampling(), &caller_cx);
        if path == Path::Off {
            // Plain OpenTelemetry: the trace context, no DEI.
            if let Some(sites) = request.extensions().get::<SendSites>() {
                sites.untapped();
            }
            outgoing::inject(otel.context(), request.headers_mut());
            outgoing::strip_dei(request.headers_mut());
            let response = self.inner.call(request);
            let guard = CallGuard {
                _span: span,
                otel,
                issued: None,
                grpc: true,
                record: false,
            };
            return ResponseFuture::sent(response, guard, None, false);
        }
        if !scoped {
            crate::caller::check_unscoped();
        }
        let stack = self.config.stack_capturer().capture_inlined();
        let info = CallInfo {
            stack,
            caller_cx,
            method,
            span,
            otel,
            kind,
            record: path.records(),
        };
        let (parts, mut body) = request.into_parts();
        let keep = if self.config.record_payloads() { 1024 } else { 0 };
        let wait = match kind {
            Some(kind) if kind.is_streaming() => None,
            Some(_) => Some(true),
            None => Some(false),
        };
        let mut probe = wait.map(|_| Probe::new(keep));
        if let (Some(p), Some(wait)) = (probe.as_mut(), wait) {
            // tonic encodes a unary call's message at once: it is ready now. A waker that does nothing is
            // enough to find out; the body registers the real one when the connection polls it.
            let mut noop = std::task::Context::from_waker(std::task::Waker::noop());
            if p.poll(&mut body, wait, &mut noop).is_pending() {
                // Not ready yet (a unary body fed from elsewhere): the rest of the call waits for it.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let config = self.config.clone();
                let mut probe = probe.take().unwrap_or_else(|| Probe::new(keep));
                return ResponseFuture::slow(Box::pin(async move {
                    futures::future::poll_fn(|cx| probe.poll(&mut body, wait, cx)).await;
                    let call = match prepare(&config, parts, body, Some(probe), info) {
                        Prepared::Send(call) => call,
                        Prepared::Failed(response) => return Ok(response),
                    };
                    call.send(inner).await
                }));
            }
        }
        match prepare(&self.config, parts, body, probe, info) {
            Prepared::Failed(response) => ResponseFuture::ready(response),
            Prepared::Send(call) => {
                let (request, guard, stream_fault, record) = call.into_request();
                // tonic's channel hands the request to the connection's task in `call`: the attributes are
                // recorded (in `into_request`) while it goes out.
                let response = self.inner.call(request);
                ResponseFuture::sent(response, guard, stream_fault, record)
            }
        }
    }
}

struct CallInfo {
    stack: CapturedStack,
    caller_cx: Context,
    method: GrpcMethod,
    span: tracing::Span,
    otel: OtelSpan,
    kind: Option<MethodKind>,
    record: bool,
}

/// What the first frames of a request body showed.
struct Probe {
    frames: Buffered,
    first: Option<(PayloadDigest, Vec<u8>)>,
    messages: usize,
    ended: bool,
    digester: MessageDigester,
}

impl Probe {
    fn new(keep: usize) -> Self {
        Probe {
            frames: Buffered::default(),
            first: None,
            messages: 0,
            ended: false,
            digester: MessageDigester::new(keep),
        }
    }

    /// Polls the body until the first message is complete (`wait`), or — without waiting — until it is
    /// pending, ends or shows a second message.
    fn poll(&mut self, body: &mut Body, wait: bool, cx: &mut std::task::Context<'_>) -> Poll<()> {
        loop {
            if wait && self.messages >= 1 {
                return Poll::Ready(());
            }
            match Pin::new(&mut *body).poll_frame(cx) {
                Poll::Pending if wait => return Poll::Pending,
                Poll::Pending => return Poll::Ready(()),
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Err(e))) => {
                    self.frames.push_back(Err(e));
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        let (messages, first) = (&mut self.messages, &mut self.first);
                        self.digester.feed(data, |m| {
                            *messages += 1;
                            if first.is_none() {
                                *first = Some((m.digest, m.prefix.unwrap_or_default()));
                            }
                        });
                    }
                    self.frames.push_back(Ok(frame));
                    if self.messages >= 2 {
                        return Poll::Ready(());
                    }
                }
            }
        }
    }
}

type BodyItem = Result<Frame<Bytes>, Status>;

/// Frames read from a request body before it was handed on, in order: the first one (a unary call's only
/// one) without an allocation of its own.
#[derive(Default)]
struct Buffered {
    first: Option<BodyItem>,
    rest: VecDeque<BodyItem>,
}

impl Buffered {
    fn push_back(&mut self, item: BodyItem) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(item);
        } else {
            self.rest.push_back(item);
        }
    }

    fn pop_front(&mut self) -> Option<BodyItem> {
        self.first.take().or_else(|| self.rest.pop_front())
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }
}

/// A call ready to go: its index issued, its request built (the headers still to inject).
struct ReadyCall {
    parts: http::request::Parts,
    body: OutboundBody,
    out: outgoing::Outgoing,
    span: tracing::Span,
    stream_fault: Option<StreamFault>,
}

// Lives on the stack for one call, moved once: boxing the large variant would cost the allocation it saves.
#[allow(clippy::large_enum_variant)]
enum Prepared<B> {
    Send(ReadyCall),
    /// A planned fault answered the call without sending it.
    Failed(http::Response<DeiResponseBody<B>>),
}

/// Issues the call's index (from what the probe read) and decides about faults.
fn prepare<B>(
    config: &DeiConfig,
    mut parts: http::request::Parts,
    body: Body,
    probe: Option<Probe>,
    info: CallInfo,
) -> Prepared<B> {
    let streaming = match (info.kind, &probe) {
        (Some(kind), _) => kind.is_streaming(),
        (None, Some(p)) => !(p.ended && p.messages == 1),
        (None, None) => true,
    };
    let (buffered, first, rest_done) = match probe {
        Some(p) => (p.frames, p.first, p.ended),
        None => (Buffered::default(), None, false),
    };
    let span = info.span;
    let (payload, raw) = match (streaming, first) {
        (false, Some((digest, raw))) => (digest, raw),
        _ => (PayloadDigest::empty(), Vec::new()),
    };
    let mut out = outgoing::begin(
        config,
        &info.caller_cx,
        info.otel,
        Call {
            rpc: Some(&info.method.rpc),
            signature: info.method.signature.clone(),
            payload,
            raw_payload: Some(&raw),
            stack: &info.stack,
            preliminary: streaming,
        },
        info.record,
    );
    let delay = match out.action {
        Action::Fail(f) => {
            out.record_attributes();
            let response = fault::grpc_response(f, ());
            if out.record
                && let Some(code) = crate::body::grpc_code(response.headers())
            {
                record_grpc_status(&out.otel, code);
            }
            let guard = CallGuard {
                _span: span.clone(),
                otel: out.otel,
                issued: Some(out.issued),
                grpc: true,
                record: out.record,
            };
            let (rparts, ()) = response.into_parts();
            return Prepared::Failed(http::Response::from_parts(rparts, DeiResponseBody::empty(guard)));
        }
        // The request's headers go out at once and its body waits: the wait falls inside the deadlines of the
        // channel (`Endpoint::timeout`) and of the call (`grpc-timeout`), as a slow network's would, and a
        // caller that gives up during it gets the timeout it would get from a slow callee.
        Action::Delay(d) => Some(d),
        Action::Send => None,
    };
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
        plan: outgoing::FaultGate::new(config, &info.caller_cx),
        fault,
        record: out.record,
    });
    let body = OutboundBody {
        buffered,
        rest: body,
        rest_done,
        tap,
        segments: VecDeque::new(),
        delay,
        sleep: None,
        cut: false,
    };
    out.inject(&mut parts.headers);
    Prepared::Send(ReadyCall {
        parts,
        body,
        out,
        span,
        stream_fault,
    })
}

impl ReadyCall {
    /// The request to hand to the inner service, and what the response future keeps; records the attributes.
    fn into_request(mut self) -> (http::Request<Body>, CallGuard, Option<StreamFault>, bool) {
        let request = http::Request::from_parts(self.parts, Body::new(self.body));
        self.out.record_attributes();
        let record = self.out.record;
        let guard = CallGuard {
            _span: self.span,
            otel: self.out.otel,
            issued: Some(self.out.issued),
            grpc: true,
            record,
        };
        (request, guard, self.stream_fault, record)
    }

    /// Sends through `inner`.
    async fn send<S, B>(self, mut inner: S) -> Result<http::Response<DeiResponseBody<B>>, S::Error>
    where
        S: Service<http::Request<Body>, Response = http::Response<B>>,
        B: http_body::Body<Data = Bytes>,
    {
        let (request, guard, stream_fault, record) = self.into_request();
        ResponseFuture::<_, B, S::Error>::sent(inner.call(request), guard, stream_fault, record).await
    }
}

/// The response as the caller sees it: the inner service's, with its body wrapped so that the call's span
/// and index end with it, or the status of a fault that hit one of a stream's messages first.
fn finish<B>(
    response: http::Response<B>,
    guard: CallGuard,
    stream_fault: Option<StreamFault>,
    record: bool,
) -> http::Response<DeiResponseBody<B>> {
    if let Some(f) = stream_fault.as_ref().and_then(StreamFault::get) {
        let status = fault::status_for_stream(f);
        if record {
            record_grpc_status(&guard.otel, status.code());
        }
        let (rparts, ()) = status.into_http::<()>().into_parts();
        return http::Response::from_parts(rparts, DeiResponseBody::empty(guard));
    }
    if record && let Some(code) = crate::body::grpc_code(response.headers()) {
        record_grpc_status(&guard.otel, code);
    }
    response.map(|b| DeiResponseBody::new(b, guard, None).ending_on(stream_fault))
}

pin_project_lite::pin_project! {
    /// The future of a call through [`DeiClientService`]: the inner service's future, whose response is
    /// wrapped as it comes. Only a call whose unary request body was not ready when the call was made is
    /// boxed (a latency fault waits in the request body, inside the channel's deadlines).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        Sent {
            #[pin]
            inner: F,
            guard: Option<CallGuard>,
            stream_fault: Option<StreamFault>,
            record: bool,
        },
        Ready {
            response: Option<http::Response<DeiResponseBody<B>>>,
        },
        Slow {
            future: BoxFuture<'static, Result<http::Response<DeiResponseBody<B>>, E>>,
        },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    fn sent(inner: F, guard: CallGuard, stream_fault: Option<StreamFault>, record: bool) -> Self {
        ResponseFuture {
            state: State::Sent {
                inner,
                guard: Some(guard),
                stream_fault,
                record,
            },
        }
    }

    fn ready(response: http::Response<DeiResponseBody<B>>) -> Self {
        ResponseFuture {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    fn slow(future: BoxFuture<'static, Result<http::Response<DeiResponseBody<B>>, E>>) -> Self {
        ResponseFuture {
            state: State::Slow { future },
        }
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: http_body::Body<Data = Bytes>,
{
    type Output = Result<http::Response<DeiResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Sent {
                inner,
                guard,
                stream_fault,
                record,
            } => {
                let response = ready!(inner.poll(cx));
                let Some(guard) = guard.take() else {
                    // Polled after completion.
                    return Poll::Pending;
                };
                Poll::Ready(match response {
                    Ok(response) => Ok(finish(response, guard, stream_fault.take(), *record)),
                    Err(e) => {
                        // A fault that hit a stream's message first still ends the call with its status.
                        if let Some(f) = stream_fault.as_ref().and_then(StreamFault::get) {
                            let (parts, ()) = fault::status_for_stream(f).into_http::<()>().into_parts();
                            let response = http::Response::from_parts(parts, ());
                            return Poll::Ready(Ok(finish_empty(response, guard, *record)));
                        }
                        guard
                            .otel
                            .set_status(opentelemetry::trace::Status::error("transport error"));
                        Err(e)
                    }
                })
            }
            StateProj::Ready { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => Poll::Pending,
            },
            StateProj::Slow { future } => future.as_mut().poll(cx),
        }
    }
}

/// A fault's response (headers only) with the call's guard.
fn finish_empty<B>(response: http::Response<()>, guard: CallGuard, record: bool) -> http::Response<DeiResponseBody<B>> {
    if record && let Some(code) = crate::body::grpc_code(response.headers()) {
        record_grpc_status(&guard.otel, code);
    }
    let (parts, ()) = response.into_parts();
    http::Response::from_parts(parts, DeiResponseBody::empty(guard))
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
    /// Whether message events go on the span.
    record: bool,
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
                self.record,
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
    buffered: Buffered,
    rest: Body,
    /// The probe saw the end of `rest`: it is not polled again.
    rest_done: bool,
    tap: Option<StreamTap>,
    /// Data the tap let through, waiting to be sent.
    segments: VecDeque<Segment>,
    /// A latency fault on the call itself: the body waits this long before its first frame.
    delay: Option<Duration>,
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
        if let Some(d) = this.delay.take() {
            // Made on the first poll, inside the connection's task and its runtime.
            this.sleep = Some(Box::pin(tokio::time::sleep(d)));
        }
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
            && self.delay.is_none()
            && self.sleep.is_none()
            && (self.cut || (self.buffered.is_empty() && (self.rest_done || self.rest.is_end_stream())))
    }

    fn size_hint(&self) -> SizeHint {
        if self.buffered.is_empty() && self.segments.is_empty() && self.delay.is_none() && !self.cut {
            self.rest.size_hint()
        } else {
            SizeHint::default()
        }
    }
}
