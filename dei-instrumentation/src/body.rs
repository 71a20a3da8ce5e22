//! Body wrappers: they pass every frame on untouched and observe it on the way.
//!
//! - [`DeiResponseBody`] keeps an RPC's span and issued index alive until the response ends, records the
//!   outcome (gRPC status from trailers, `dei.ambiguous`) and, on servers, polls the inner body inside the
//!   request's `Context`, so that a streamed response produced lazily still issues indexes in the request's
//!   scope.
//! - [`InboundBody`] digests what a server receives (the first gRPC message, or `query?body` up to a cap for
//!   HTTP) without buffering it, and records `dei.payload.digest` once the digest is complete. A body dropped
//!   before that (a handler that does not read it: an HTTP body not to its end or the cap, a gRPC request
//!   stream not to its first message) or that fails leaves no digest: the span gets
//!   `dei.payload.digest.incomplete = true` instead, and the case is counted
//!   ([`crate::http::server::incomplete_payload_digests_total`],
//!   [`crate::grpc::server::incomplete_payload_digests_total`]). A gRPC request stream that ends without a
//!   message has no digest and no mark (there was no payload to see), and a stream opened with a preliminary
//!   index has the empty payload's digest from the start, read or not (its index's payload).

#[cfg(feature = "tonic")]
use crate::fault;
use crate::fault::StreamFault;
#[cfg(feature = "tonic")]
use crate::grpc::frame::MessageDigester;
use crate::span::{self, OtelSpan};
use bytes::Bytes;
use dei_propagator::{IssuedIndex, PayloadHasher};
use http_body::{Body, Frame, SizeHint};
use opentelemetry::Context;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Poll, ready};

/// What ends with an RPC: its span handle and, on clients, its issued index.
pub(crate) struct CallGuard {
    /// Held until the RPC ends: the span closes (and its OpenTelemetry span ends) when this is dropped.
    pub(crate) _span: tracing::Span,
    /// Its OpenTelemetry span, where the outcome is recorded.
    pub(crate) otel: OtelSpan,
    pub(crate) issued: Option<IssuedIndex>,
    pub(crate) grpc: bool,
    /// Whether the outcome goes on the span (a sampled span: [`crate::outgoing::Path::Full`]).
    pub(crate) record: bool,
}

impl CallGuard {
    fn record_trailers(&self, trailers: &http::HeaderMap) {
        #[cfg(feature = "tonic")]
        if self.grpc
            && self.record
            && let Some(code) = grpc_code(trailers)
        {
            record_grpc_status(&self.otel, code);
        }
        #[cfg(not(feature = "tonic"))]
        let _ = trailers;
    }
}

#[cfg(feature = "tonic")]
/// The gRPC status code in `headers` (a response's headers or trailers), as `tonic::Status::from_header_map`
/// reads it — a value that is not a code is `Unknown`, and so is any code whose `grpc-message` does not
/// percent-decode to UTF-8 — without building the message and details, which only a failed call's caller needs.
pub(crate) fn grpc_code(headers: &http::HeaderMap) -> Option<tonic::Code> {
    let code = tonic::Code::from_bytes(headers.get(tonic::Status::GRPC_STATUS)?.as_bytes());
    let message_ok = headers.get(tonic::Status::GRPC_MESSAGE).is_none_or(|m| {
        let bytes = m.as_bytes();
        // Plain ASCII without escapes is UTF-8 as it is; anything else is decoded as tonic decodes it.
        !bytes.iter().any(|&b| b == b'%' || !b.is_ascii())
            || percent_encoding::percent_decode(bytes).decode_utf8().is_ok()
    });
    Some(if message_ok { code } else { tonic::Code::Unknown })
}

#[cfg(feature = "tonic")]
/// Records `rpc.grpc.status_code` and the span status.
pub(crate) fn record_grpc_status(span: &OtelSpan, code: tonic::Code) {
    span.set_attribute("rpc.grpc.status_code", code as i64);
    if code != tonic::Code::Ok {
        span.set_status(opentelemetry::trace::Status::error(format!("{code:?}")));
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some(issued) = self.issued.take() {
            let ambiguous = issued.complete();
            if self.record {
                self.otel.set_attribute(span::AMBIGUOUS, ambiguous);
            }
        }
    }
}

pin_project! {
    /// A response body that ends the RPC's instrumentation when it ends (see the [module docs](self)).
    pub struct DeiResponseBody<B> {
        #[pin]
        inner: Option<B>,
        guard: Option<CallGuard>,
        cx: Option<Context>,
        // A stream call ends with this fault's status once a fault hit one of its messages.
        stream_fault: Option<StreamFault>,
    }
}

impl<B> DeiResponseBody<B> {
    pub(crate) fn new(inner: B, guard: CallGuard, cx: Option<Context>) -> Self {
        DeiResponseBody {
            inner: Some(inner),
            guard: Some(guard),
            cx,
            stream_fault: None,
        }
    }

    /// Ends the body with the fault's status (as trailers) once a fault hits one of the stream's messages.
    #[cfg(feature = "tonic")]
    pub(crate) fn ending_on(mut self, stream_fault: Option<StreamFault>) -> Self {
        self.stream_fault = stream_fault;
        self
    }

    /// An empty body (a fault response).
    #[cfg(feature = "tonic")]
    pub(crate) fn empty(guard: CallGuard) -> Self {
        DeiResponseBody {
            inner: None,
            guard: Some(guard),
            cx: None,
            stream_fault: None,
        }
    }
}

impl<B> std::fmt::Debug for DeiResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeiResponseBody").finish_non_exhaustive()
    }
}

impl<B> Body for DeiResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        #[cfg(feature = "tonic")]
        if let Some(f) = this.stream_fault.as_ref().and_then(StreamFault::get)
            && this.inner.is_some()
        {
            this.inner.set(None);
            return Poll::Ready(end_with_fault(this.guard, f));
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            this.guard.take();
            return Poll::Ready(None);
        };
        let polled = {
            let _attached = this.cx.as_ref().map(|c| c.clone().attach());
            ready!(inner.poll_frame(cx))
        };
        // The response can end (trailers, its end, an error) because the fault ended the request stream: the
        // server saw the request end and closed its response. The fault was set on the connection's task,
        // possibly after the check above (this thread can be preempted between the check and the poll for
        // longer than that round trip), but always before the end it caused arrived: looked at again now, it
        // is seen, and the call ends with its status rather than the server's.
        #[cfg(feature = "tonic")]
        if polled
            .as_ref()
            .is_none_or(|p| p.as_ref().map_or(true, Frame::is_trailers))
            && let Some(f) = this.stream_fault.as_ref().and_then(StreamFault::get)
        {
            this.inner.set(None);
            return Poll::Ready(end_with_fault(this.guard, f));
        }
        match &polled {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(g) = this.guard.take()
                {
                    g.record_trailers(trailers);
                }
            }
            Some(Err(_)) => {
                if let Some(g) = this.guard.take() {
                    g.otel
                        .set_status(opentelemetry::trace::Status::error("response body error"));
                }
            }
            None => {
                this.guard.take();
            }
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

#[cfg(feature = "tonic")]
/// The last frame of a stream call that a fault ended: trailers with the fault's status, recorded on the span.
fn end_with_fault<E>(guard: &mut Option<CallGuard>, fault: dei_propagator::Fault) -> Option<Result<Frame<Bytes>, E>> {
    let status = fault::status_for_stream(fault);
    if let Some(g) = guard.take()
        && g.record
    {
        record_grpc_status(&g.otel, status.code());
    }
    let mut trailers = http::HeaderMap::new();
    status.add_header(&mut trailers).ok()?;
    Some(Ok(Frame::trailers(trailers)))
}

/// How an [`InboundBody`] digests.
pub(crate) enum InboundDigest {
    /// The first gRPC message.
    #[cfg(feature = "tonic")]
    Grpc(MessageDigester),
    /// `query?body`, the body up to `remaining` more bytes.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    Http { hasher: PayloadHasher, remaining: usize },
    /// Done (or nothing to digest).
    Done,
}

impl InboundDigest {
    /// `query` + `?` fed, the body to come, at most `cap` bytes of it.
    #[cfg(feature = "axum")]
    pub(crate) fn http(query: &str, cap: usize) -> Self {
        let mut hasher = PayloadHasher::new();
        hasher.update(query.as_bytes());
        hasher.update(b"?");
        InboundDigest::Http { hasher, remaining: cap }
    }
}

pin_project! {
    /// A request body that digests what passes through it (see the [module docs](self)).
    pub struct InboundBody<B> {
        #[pin]
        inner: B,
        digest: InboundDigest,
        otel: OtelSpan,
        keep_raw: bool,
        raw: Vec<u8>,
    }
    impl<B> PinnedDrop for InboundBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            incomplete(this.digest, this.otel, Incomplete::Dropped);
        }
    }
}

impl<B: Body> InboundBody<B> {
    pub(crate) fn new(inner: B, digest: InboundDigest, otel: OtelSpan, keep_raw: bool) -> Self {
        let mut body = InboundBody {
            inner,
            digest,
            otel,
            keep_raw,
            raw: Vec::new(),
        };
        if body.inner.is_end_stream() {
            finish(&mut body.digest, &body.otel, &body.raw, body.keep_raw);
        }
        body
    }
}

const RAW_CAP: usize = 1024;

/// Why a digest will not be complete.
#[derive(Clone, Copy)]
enum Incomplete {
    /// The body was dropped first (the handler did not read it far enough).
    Dropped,
    /// The body failed first.
    Failed,
}

/// Marks the span of a digest that is still under way as incomplete (and counts it), as the body is dropped or
/// fails: an HTTP body before its end or the cap, a gRPC request stream before its first message. A digest that
/// is done (or a stream that ended without a message: there was no payload to see) is left as it is.
fn incomplete(digest: &mut InboundDigest, otel: &OtelSpan, why: Incomplete) {
    match std::mem::replace(digest, InboundDigest::Done) {
        #[cfg(feature = "tonic")]
        InboundDigest::Grpc(_) => crate::grpc::server::record_incomplete_digest(
            otel,
            match why {
                Incomplete::Dropped => "the request stream was dropped before its first message",
                Incomplete::Failed => "the request stream failed before its first message",
            },
        ),
        #[cfg(feature = "axum")]
        InboundDigest::Http { .. } => crate::http::server::record_incomplete_digest(
            otel,
            match why {
                Incomplete::Dropped => "the body was dropped before its end",
                Incomplete::Failed => "the body failed",
            },
        ),
        _ => {
            let _ = (otel, why);
        }
    }
}

/// Marks a server span whose payload digest will not be complete (`dei.payload.digest.incomplete = true`) and
/// counts it in `count`; true for the first such span of the process (which the caller warns about).
#[cfg(any(feature = "tonic", feature = "axum"))]
pub(crate) fn mark_incomplete_digest(otel: &OtelSpan, count: &std::sync::atomic::AtomicU64) -> bool {
    otel.set_attribute(span::PAYLOAD_DIGEST_INCOMPLETE, true);
    count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0
}

fn finish(digest: &mut InboundDigest, otel: &OtelSpan, raw: &[u8], keep_raw: bool) {
    if let InboundDigest::Http { hasher, .. } = std::mem::replace(digest, InboundDigest::Done) {
        span::record_payload(otel, &hasher.finish(), keep_raw.then_some(raw));
    }
}

impl<B> Body for InboundBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let polled = ready!(this.inner.as_mut().poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if *this.keep_raw && this.raw.len() < RAW_CAP {
                        let room = (RAW_CAP - this.raw.len()).min(data.len());
                        this.raw.extend_from_slice(&data[..room]);
                    }
                    match this.digest {
                        #[cfg(feature = "tonic")]
                        InboundDigest::Grpc(d) => {
                            let mut first = None;
                            d.feed(data, |m| {
                                if first.is_none() {
                                    first = Some(m);
                                }
                            });
                            if let Some(m) = first {
                                let raw = m.prefix.as_deref().or((*this.keep_raw).then_some(&this.raw[..]));
                                span::record_payload(this.otel, &m.digest, raw.filter(|_| *this.keep_raw));
                                *this.digest = InboundDigest::Done;
                            }
                        }
                        InboundDigest::Http { hasher, remaining } => {
                            let take = (*remaining).min(data.len());
                            hasher.update(&data[..take]);
                            *remaining -= take;
                            // Complete at the cap, or with the last data frame: a handler that stops reading
                            // there, without asking for the end, has read the whole body.
                            if *remaining == 0 || this.inner.is_end_stream() {
                                finish(this.digest, this.otel, this.raw, *this.keep_raw);
                            }
                        }
                        InboundDigest::Done => {}
                    }
                }
            }
            None => finish(this.digest, this.otel, this.raw, *this.keep_raw),
            Some(Err(_)) => incomplete(this.digest, this.otel, Incomplete::Failed),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(all(test, feature = "tonic"))]
mod tests {
    use super::*;
    use dei_propagator::Fault;

    /// A server's response whose frames arrive while a fault hits the request stream: each poll first sets
    /// the fault (as the connection's task does on another thread, right after the response body's check),
    /// then yields the next frame.
    struct EndsAsTheFaultHits {
        fault: StreamFault,
        frames: std::collections::VecDeque<Option<Result<Frame<Bytes>, &'static str>>>,
    }

    impl Body for EndsAsTheFaultHits {
        type Data = Bytes;
        type Error = &'static str;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            self.fault.set(Fault::Connection);
            Poll::Ready(self.frames.pop_front().flatten())
        }
    }

    fn ok_trailers() -> Frame<Bytes> {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        Frame::trailers(trailers)
    }

    /// The frames the caller reads from a response whose server sends `frames` as the fault hits.
    fn read(frames: Vec<Option<Result<Frame<Bytes>, &'static str>>>) -> Vec<String> {
        let fault = StreamFault::default();
        let inner = EndsAsTheFaultHits {
            fault: fault.clone(),
            frames: frames.into(),
        };
        let mut body = Box::pin(DeiResponseBody {
            inner: Some(inner),
            guard: None,
            cx: None,
            stream_fault: Some(fault),
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut seen = Vec::new();
        loop {
            match body.as_mut().poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => seen.push(match frame.into_data() {
                    Ok(data) => format!("data {data:?}"),
                    Err(frame) => {
                        let trailers = frame.into_trailers().unwrap_or_default();
                        format!("status {:?}", grpc_code(&trailers))
                    }
                }),
                Poll::Ready(Some(Err(e))) => seen.push(format!("error {e}")),
                Poll::Ready(None) => return seen,
                Poll::Pending => unreachable!("the test body is always ready"),
            }
        }
    }

    #[test]
    fn a_response_that_ends_as_the_fault_hits_ends_with_the_faults_status() {
        let unavailable = "status Some(Unavailable)";
        // the server's OK trailers, the bare end of its body, or an error: each is replaced by the fault's status
        assert_eq!(read(vec![Some(Ok(ok_trailers()))]), [unavailable]);
        assert_eq!(read(vec![None]), [unavailable]);
        assert_eq!(read(vec![Some(Err("reset"))]), [unavailable]);
        // a message the server sent before is still delivered; the end that follows is the fault's
        let data = Some(Ok(Frame::data(Bytes::from_static(b"m"))));
        assert_eq!(read(vec![data, Some(Ok(ok_trailers()))]), ["data b\"m\"", unavailable]);
    }

    #[test]
    fn the_grpc_code_is_read_as_tonic_reads_it() {
        let codes = [
            Some("0"),
            Some("4"),
            Some("14"),
            Some("16"),
            Some("17"),
            Some("99"),
            Some("x"),
            Some(""),
            None,
        ];
        // Messages: none, plain, escaped, escaped but not UTF-8 (tonic then reports `Unknown`), raw non-ASCII.
        let messages: [Option<&[u8]>; 5] = [
            None,
            Some(b"plain"),
            Some(b"went%20wrong"),
            Some(b"%C3%28"),
            Some(b"\xe9t\xe9"),
        ];
        for code in codes {
            for message in messages {
                let mut headers = http::HeaderMap::new();
                if let Some(c) = code {
                    headers.insert("grpc-status", http::HeaderValue::from_static(c));
                }
                if let Some(m) = message {
                    headers.insert("grpc-message", http::HeaderValue::from_bytes(m).expect("header value"));
                }
                let tonic = tonic::Status::from_header_map(&headers).map(|s| s.code());
                assert_eq!(grpc_code(&headers), tonic, "{code:?} {message:?}");
            }
        }
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-status", http::HeaderValue::from_static("14"));
        headers.insert("grpc-message", http::HeaderValue::from_static("%C3%28"));
        assert_eq!(
            grpc_code(&headers),
            Some(tonic::Code::Unknown),
            "the case that differs from the raw code"
        );
    }
}
