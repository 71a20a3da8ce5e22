//! Streams (paper §4.2): preliminary indexes, final indexes per message, implicit counting at the callee.
//!
//! A streaming call's headers leave before its messages exist, so the call is sent with a *preliminary*
//! index: the stream's creation site, an empty payload, and the `~` flag. The client layer then issues each
//! message's *final* index — the message's payload and its send site — as the message goes out, and records
//! the mapping as a `dei.stream.message` span event (see [`crate::span`]). The callee counts messages
//! implicitly: it serves the k-th message of a stream opened with `…r|x~` under `…r|(x+k)~`
//! ([`Index::stream_message`]).
//!
//! - Caller: send through [`channel`] to record each message's send site (any other stream works too; its
//!   messages then get the creation site).
//! - Faults: a message whose final index the fault plan (in the `Context` the call was made in) names gets
//!   the fault: a latency fault delays it; any other fault ends the request stream before it, the call ends
//!   with the fault's status (see [`crate::fault`]), later sends fail, and [`StreamSender::injected_fault`]
//!   tells which fault it was. Its `dei.stream.message` event and the client span carry `dei.fault`.
//! - Callee: wrap the incoming `tonic::Streaming` in [`DeiStreaming`] and serve each [`StreamMessage`] inside
//!   its context ([`StreamMessage::in_scope`]). A message whose count would pass the largest (a crafted
//!   incoming index) is served under the largest count and marks the server span
//!   ([`STREAM_COUNT_OVERFLOW`](crate::span::STREAM_COUNT_OVERFLOW)).

use super::client::SendSites;
use crate::config::DeiConfig;
pub(crate) use crate::fault::StreamFault;
use crate::stack::{CapturedStack, StackCapturer};
use dei_propagator::Fault;
use dei_propagator::{DeiContextExt, Index, RequestScope};
use futures::Stream;
use opentelemetry::Context;
use opentelemetry::context::FutureExt as _;
use std::future::Future;
use std::panic::Location;
use std::pin::Pin;
use std::task::Poll;
use tokio::sync::mpsc;

/// The sending half of [`channel`]: each [`send`](StreamSender::send) records its call site and stack.
#[derive(Debug)]
pub struct StreamSender<T> {
    tx: mpsc::Sender<(T, CapturedStack)>,
    capturer: StackCapturer,
    fault: StreamFault,
}

impl<T> Clone for StreamSender<T> {
    fn clone(&self) -> Self {
        StreamSender {
            tx: self.tx.clone(),
            capturer: self.capturer.clone(),
            fault: self.fault.clone(),
        }
    }
}

/// The stream was closed: the call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the stream is closed")]
pub struct StreamClosed;

impl<T: Send + 'static> StreamSender<T> {
    /// Sends a message, recording the caller's location and stack as its send site.
    ///
    /// Fails once the stream is closed, including when a planned fault ended it
    /// ([`StreamSender::injected_fault`]).
    #[track_caller]
    pub fn send(&self, message: T) -> impl Future<Output = Result<(), StreamClosed>> + Send + 'static {
        let site = self.capturer.capture_at(Some(Location::caller()));
        let tx = self.tx.clone();
        let fault = self.fault.clone();
        async move {
            if fault.get().is_some() {
                return Err(StreamClosed);
            }
            tx.send((message, site)).await.map_err(|_| StreamClosed)
        }
    }

    /// The fault the client layer injected on one of this stream's messages, if any: the call ends with its
    /// status and later sends fail.
    pub fn injected_fault(&self) -> Option<Fault> {
        self.fault.get()
    }
}

/// The messages of a [`channel`], as the request stream of a streaming call.
#[derive(Debug)]
pub struct OutboundMessages<T> {
    rx: mpsc::Receiver<(T, CapturedStack)>,
    sites: SendSites,
}

impl<T> Stream for OutboundMessages<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<T>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((message, site))) => {
                // tonic encodes messages in the order the stream yields them: the sites queue stays in step
                // with the frames the client layer sees.
                self.sites.push(site);
                Poll::Ready(Some(message))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A request stream whose messages carry their send sites to the client layer.
///
/// ```no_run
/// # mod pb { tonic::include_proto!("deitest"); }
/// # async fn run(mut client: pb::leaf_client::LeafClient<tonic::transport::Channel>) -> Result<(), Box<dyn std::error::Error>> {
/// let config = dei_instrumentation::DeiConfig::default();
/// let (tx, request) = dei_instrumentation::grpc::stream::channel::<pb::Msg>(&config, 16);
/// // The call runs in its own task: `dei_propagator::spawn` carries the request's Context (and its scope) into
/// // it; a plain `tokio::spawn` would not, and the stream would start a new root outside the fault plan.
/// let response = dei_propagator::spawn(async move { client.collect(request).await });
/// tx.send(pb::Msg { text: "Hello".into(), ..Default::default() }).await?;
/// tx.send(pb::Msg { text: "World".into(), ..Default::default() }).await?;
/// drop(tx);
/// let reply = response.await??;
/// # Ok(()) }
/// ```
#[track_caller]
pub fn channel<T>(config: &DeiConfig, buffer: usize) -> (StreamSender<T>, tonic::Request<OutboundMessages<T>>) {
    let (tx, rx) = mpsc::channel(buffer.max(1));
    let sites = SendSites::default();
    let mut request = tonic::Request::new(OutboundMessages {
        rx,
        sites: sites.clone(),
    });
    request.extensions_mut().insert(sites);
    let fault = StreamFault::default();
    request.extensions_mut().insert(fault.clone());
    (
        StreamSender {
            tx,
            capturer: config.stack_capturer().clone(),
            fault,
        },
        request,
    )
}

pub use crate::incoming::IncomingCall;

/// One message of an incoming stream, with the context to serve it in.
#[derive(Debug)]
pub struct StreamMessage<T> {
    /// The message.
    pub message: T,
    /// Its 1-based position k.
    pub k: u32,
    /// The prefix it is served under: `…r|(x+k)~` for a stream opened with `…r|x~`.
    pub index: Index,
    /// The context to serve it in: the request's, with a scope whose prefix is [`StreamMessage::index`].
    pub context: Context,
}

impl<T> StreamMessage<T> {
    /// The scope RPCs issued for this message take their indexes from.
    pub fn scope(&self) -> Option<&RequestScope> {
        self.context.dei_scope()
    }

    /// Runs `future` in this message's context.
    pub fn in_scope<F: Future>(&self, future: F) -> opentelemetry::context::WithContext<F> {
        future.with_context(self.context.clone())
    }
}

/// An incoming stream whose messages are counted implicitly (see the [module docs](self)).
///
/// Each message of a stream that arrived with a preliminary index gets its own scope, `…r|(x+k)~`. A message
/// whose count `x + k` would pass the largest (4294967295: only a crafted incoming index gets there) has no count
/// of its own: it is served under the largest, as every later message is (so their calls can share indexes),
/// the case is counted and logged ([`Index::stream_message`]), and the server span gets
/// [`dei.stream.count_overflow`](crate::span::STREAM_COUNT_OVERFLOW) `= true`. A stream
/// that arrived without one (a caller without DEI, or a root call) serves every message in the handler's
/// scope, which is deterministic when messages are served in order.
#[derive(Debug)]
pub struct DeiStreaming<T> {
    inner: tonic::Streaming<T>,
    call: Option<IncomingCall>,
    k: u32,
    /// A message's count passed the largest (the server span is marked once).
    count_overflow: bool,
    /// The server span, to mark (a sampled stream's).
    server_span: Option<ServerSpan>,
}

/// The server span of a sampled stream request whose messages the handler counts ([`DeiStreaming`]), left in
/// the request's extensions by the server layer so that what happens to the stream later is recorded on it.
#[derive(Clone, Debug)]
pub(crate) struct ServerSpan(pub(crate) crate::span::OtelSpan);

impl<T> DeiStreaming<T> {
    /// Wraps the stream of a request served behind [`crate::DeiServerLayer`]. Call it in the handler (which
    /// runs in the request's `Context`: [`IncomingCall::current`]); an [`IncomingCall`] in the request's
    /// extensions is taken first.
    pub fn new(mut request: tonic::Request<tonic::Streaming<T>>) -> Self {
        let call = (request.extensions().get::<IncomingCall>().cloned()).or_else(IncomingCall::current);
        let server_span = request.extensions_mut().remove::<ServerSpan>();
        DeiStreaming {
            inner: request.into_inner(),
            call,
            k: 0,
            count_overflow: false,
            server_span,
        }
    }

    /// What the server layer knew about the call.
    pub fn incoming(&self) -> Option<&IncomingCall> {
        self.call.as_ref()
    }

    fn wrap(&mut self, message: T) -> StreamMessage<T> {
        self.k = self.k.saturating_add(1);
        let k = self.k;
        match &self.call {
            Some(call) if call.index.opens_stream() => {
                let index = call.index.checked_stream_message(k).unwrap_or_else(|_| {
                    // No count of its own (a crafted stream index near the largest count): served under the
                    // largest, counted and logged by `stream_message`, and marked on the server span once.
                    if !self.count_overflow {
                        self.count_overflow = true;
                        if let Some(ServerSpan(otel)) = &self.server_span {
                            otel.set_attribute(crate::span::STREAM_COUNT_OVERFLOW, true);
                        }
                    }
                    call.index.stream_message(k)
                });
                let scope = RequestScope::enter(index.clone(), call.instantiation.clone());
                let context = call.context.with_dei_scope(scope).with_dei_index(index.clone());
                StreamMessage {
                    message,
                    k,
                    index,
                    context,
                }
            }
            Some(call) => StreamMessage {
                message,
                k,
                index: call.scope.prefix().clone(),
                context: call.context.clone(),
            },
            None => StreamMessage {
                message,
                k,
                index: Index::root(),
                context: Context::current(),
            },
        }
    }

    /// The next message, or `None` at the end of the stream.
    pub async fn message(&mut self) -> Result<Option<StreamMessage<T>>, tonic::Status> {
        match self.inner.message().await? {
            Some(m) => Ok(Some(self.wrap(m))),
            None => Ok(None),
        }
    }
}

impl<T> Stream for DeiStreaming<T> {
    type Item = Result<StreamMessage<T>, tonic::Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(m))) => Poll::Ready(Some(Ok(self.wrap(m)))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
