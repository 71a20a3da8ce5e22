//! Recording the `dei.*` span attributes, whose keys, value types and meanings are the span contract
//! [`dei_propagator::semconv`] (re-exported here).
//!
//! They are recorded through tracing-opentelemetry (on the OpenTelemetry span of the tracing span, all of a
//! span's attributes at once) so that they reach any OpenTelemetry exporter. Raw payloads never go on spans unless
//! [`record_payloads`](crate::DeiConfigBuilder::record_payloads) is on.
//!
//! What this crate records where:
//! - both sides: [`INDEX`], [`SIGNATURE`], [`PAYLOAD_DIGEST`], [`COUNT`], [`DEPTH`], [`INSTANTIATION`], and
//!   [`PRELIMINARY`] on streams;
//! - client spans: [`STACK_DIGEST`], [`STACK_MODE`], [`STACK_WALKER`], the readable frames [`STACK`] (once per
//!   distinct stack digest per process, on the first sampled client span that carries it: [`StackFrames`]),
//!   [`AMBIGUOUS`] when the call completes, [`FAULT`] when one was injected, [`DEPTH_LIMITED`];
//! - server spans: [`PAYLOAD_DIGEST_INCOMPLETE`] in place of [`PAYLOAD_DIGEST`] when the handler dropped the
//!   request body before the digest was complete, or the body failed (an HTTP body before its end or the
//!   digest's cap, a gRPC request stream before its first message), [`FAULT_PLAN`] (the incoming plan),
//!   [`FAULT_PLAN_DROPPED`] when this service refused it ([`crate::Faults`]), [`INCOMING_DROPPED`] when an edge
//!   layer dropped the incoming `dei`/`dei-faults` ([`crate::Incoming`]), [`STREAM_COUNT_OVERFLOW`] when a
//!   stream's messages could not each be served under a count of their own (`DeiStreaming`, feature `tonic`).
//!
//! Only sampled (or recording) spans get them: on a trace that is not sampled the layers compute and
//! propagate the index but record nothing ([`Unsampled`]).
//!
//! Streams add one span event per message sent, [`STREAM_MESSAGE_EVENT`], with [`PRELIMINARY_INDEX`],
//! [`INDEX`] and [`MESSAGE`] (the 1-based position k): the mapping from the preliminary to the final index.
//! A message whose final index the fault plan names also gets [`FAULT`] on its event; the stream's span has
//! [`FAULT`] only when the stream itself was failed.

use crate::config::{DeiConfig, StackFrames, Unsampled};
use crate::stack::CapturedStack;
use dei_propagator::DeiContextExt;
use dei_propagator::{Fault, Index, Instantiation, PayloadDigest, Signature};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue, StringValue, Value};
use std::sync::Arc;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `rpc.system` (OpenTelemetry semantic conventions), set with the `dei.*` attributes on gRPC spans: `grpc`, a
/// static value (a tracing field would copy it into a new `String` on every span, sampled or not).
pub(crate) const RPC_SYSTEM: &str = "rpc.system";
/// `rpc.service` (OpenTelemetry semantic conventions), set with the `dei.*` attributes on gRPC spans.
pub(crate) const RPC_SERVICE: &str = "rpc.service";
/// `rpc.method` (OpenTelemetry semantic conventions), set with the `dei.*` attributes on gRPC spans.
pub(crate) const RPC_METHOD: &str = "rpc.method";

pub use dei_propagator::semconv::{
    AMBIGUOUS, COUNT, DEPTH, DEPTH_LIMITED, FAULT, FAULT_PLAN, FAULT_PLAN_DROPPED, INCOMING_DROPPED, INDEX,
    INSTANTIATION, MESSAGE, PAYLOAD, PAYLOAD_DIGEST, PAYLOAD_DIGEST_INCOMPLETE, PRELIMINARY, PRELIMINARY_INDEX,
    SIGNATURE, STACK, STACK_DIGEST, STACK_MODE, STACK_WALKER, STREAM_COUNT_OVERFLOW, STREAM_MESSAGE_EVENT,
};

/// Largest raw payload recorded.
const PAYLOAD_RECORD_CAP: usize = 1024;

/// Most attributes one span gets at once (a client span: `rpc.system`, `rpc.service`, `rpc.method`, signature,
/// index (4–5), payload (1–2), stack (2–4), fault, depth limit).
const MAX_ATTRIBUTES: usize = 20;

/// The `dei.*` attributes of one span, gathered and then set at once: one lookup of the span's OpenTelemetry
/// data instead of one per attribute. Gathered on the stack: no allocation of their own.
pub(crate) struct Attributes {
    items: [Option<KeyValue>; MAX_ATTRIBUTES],
    len: usize,
}

impl Attributes {
    /// No attributes yet.
    pub(crate) fn new() -> Self {
        Attributes {
            items: std::array::from_fn(|_| None),
            len: 0,
        }
    }

    /// One attribute (dropped past [`MAX_ATTRIBUTES`], which the layers never reach).
    pub(crate) fn push(&mut self, key: &'static str, value: impl Into<Value>) {
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = Some(KeyValue::new(key, value));
            self.len += 1;
        } else {
            debug_assert!(false, "more than {MAX_ATTRIBUTES} dei attributes on one span");
        }
    }

    /// `rpc.system`, `rpc.service` and `rpc.method` of a gRPC call, when it is one.
    pub(crate) fn rpc(&mut self, rpc: Option<&(StringValue, StringValue)>) {
        if let Some((service, method)) = rpc {
            self.push(RPC_SYSTEM, "grpc");
            self.push(RPC_SERVICE, service.clone());
            self.push(RPC_METHOD, method.clone());
        }
    }

    /// `dei.signature`: a static name as a static value (no reference count shared with other threads).
    pub(crate) fn signature(&mut self, signature: &Signature) {
        match signature.static_name() {
            Some(name) => self.push(SIGNATURE, name),
            None => self.push(SIGNATURE, signature.name_shared()),
        }
    }

    /// The attributes derived from an index; `wire` is its wire form (see
    /// [`DeiContextExt::dei_index_wire`](dei_propagator::DeiContextExt::dei_index_wire)), encoded once.
    pub(crate) fn index(&mut self, index: &Index, wire: Arc<str>, instantiation: &Instantiation) {
        self.push(INDEX, wire);
        self.push(COUNT, i64::from(index.last().map_or(0, |e| e.count)));
        self.push(DEPTH, index.depth() as i64);
        self.push(INSTANTIATION, instantiation.name.clone());
        if index.opens_stream() {
            self.push(PRELIMINARY, true);
        }
    }

    /// A payload digest and the raw payload (made by [`raw_payload`]) when asked for.
    pub(crate) fn payload_with_raw(&mut self, digest: &PayloadDigest, raw: Option<String>) {
        self.push(PAYLOAD_DIGEST, hex_value(digest));
        if let Some(raw) = raw {
            self.push(PAYLOAD, raw);
        }
    }

    /// A captured stack: its digest always, its readable frames as `frames` says.
    pub(crate) fn stack(&mut self, stack: &CapturedStack, frames: StackFrames) {
        self.push(STACK_DIGEST, stack.digest_hex_value());
        self.push(STACK_MODE, stack.mode().as_str());
        if stack.mode().unwinds() {
            self.push(STACK_WALKER, stack.walker().as_str());
        }
        let readable = match frames {
            StackFrames::EverySpan => true,
            StackFrames::OncePerStack => stack.claim_frames(),
            StackFrames::Never => false,
        };
        if readable {
            self.push(STACK, stack.readable_shared());
        }
    }

    /// Sets them on an OpenTelemetry span (taken out one by one: the array is not copied).
    pub(crate) fn set_on_otel(mut self, otel: &OtelSpan) {
        if let Some(items) = self.items.get_mut(..self.len)
            && !items.is_empty()
        {
            otel.0.span().set_attributes(items.iter_mut().filter_map(Option::take));
        }
    }
}

/// How much of DEI an RPC gets (see [`crate::config::Unsampled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// Index, propagation, faults and every `dei.*` attribute: a sampled span, or a call under a fault plan.
    Full,
    /// Index, propagation and faults; no span work.
    Lean,
    /// Nothing: the trace context is propagated as plain OpenTelemetry layers do, without the `dei` values.
    Off,
}

impl Path {
    /// The path of a call whose span samples as `sampling`, made in `cx`.
    pub(crate) fn for_call(config: &DeiConfig, sampling: Sampling, cx: &Context) -> Path {
        let planned = || cx.fault_plan().is_some_and(|p| !p.is_empty());
        match sampling {
            Sampling::Sampled => Path::Full,
            _ if planned() => Path::Full,
            Sampling::Unsampled if config.unsampled() == Unsampled::Off => Path::Off,
            _ => Path::Lean,
        }
    }

    /// True when `dei.*` attributes are recorded.
    pub(crate) fn records(self) -> bool {
        self == Path::Full
    }
}

/// Whether the OpenTelemetry span of an RPC is sampled (see [`crate::config::Unsampled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// Sampled or recording: its attributes are kept.
    Sampled,
    /// A valid span that is neither sampled nor recording: its attributes would be dropped.
    Unsampled,
    /// No OpenTelemetry span (no tracing-opentelemetry layer): nothing can be recorded.
    NoSpan,
}

/// The OpenTelemetry span behind a tracing span, held so that what is recorded later (the payload digest of a
/// streamed body, the outcome) needs no lookup through the subscriber. Without a tracing-opentelemetry layer
/// it holds no span, and recording does nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct OtelSpan(Context);

impl OtelSpan {
    /// The OpenTelemetry span of `span`, started if it was not yet.
    pub(crate) fn of(span: &tracing::Span) -> Self {
        let cx = span.context();
        if cx.has_active_span() {
            OtelSpan(cx)
        } else {
            OtelSpan::default()
        }
    }

    /// Its context (the current context when the span was started, plus the span).
    pub(crate) fn context(&self) -> &Context {
        &self.0
    }

    /// Whether the span is sampled.
    pub(crate) fn sampling(&self) -> Sampling {
        let span = self.0.span();
        let sc = span.span_context();
        if span.is_recording() || sc.is_sampled() {
            Sampling::Sampled
        } else if sc.is_valid() {
            Sampling::Unsampled
        } else {
            Sampling::NoSpan
        }
    }

    /// Sets one attribute.
    pub(crate) fn set_attribute(&self, key: &'static str, value: impl Into<Value>) {
        self.0.span().set_attribute(KeyValue::new(key, value));
    }

    /// Sets the status.
    pub(crate) fn set_status(&self, status: opentelemetry::trace::Status) {
        self.0.span().set_status(status);
    }
}

/// `server.address` of a host as a URL writes it: an IPv6 address without its brackets (`[::1]` is `::1`), as
/// the semantic conventions write it beside `server.port`.
pub(crate) fn server_address(host: &str) -> &str {
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

/// `dei.payload`: the first [`PAYLOAD_RECORD_CAP`] bytes of a payload, lossy UTF-8.
pub(crate) fn raw_payload(raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[..raw.len().min(PAYLOAD_RECORD_CAP)]).into_owned()
}

/// The value of `dei.payload.digest`: the digest's 64 lowercase hex digits (as
/// [`PayloadDigest::to_hex`] writes them), made on the stack and copied once into the value.
fn hex_value(digest: &PayloadDigest) -> Value {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (pair, byte) in out.chunks_exact_mut(2).zip(digest.0) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
    Value::from(String::from(std::str::from_utf8(&out).expect("hex digits are ASCII")))
}

/// Records a payload digest (and the raw payload when asked for) on its own.
pub(crate) fn record_payload(otel: &OtelSpan, digest: &PayloadDigest, raw: Option<&[u8]>) {
    match raw {
        None => otel.set_attribute(PAYLOAD_DIGEST, hex_value(digest)),
        Some(raw) => {
            let mut a = Attributes::new();
            a.payload_with_raw(digest, Some(raw_payload(raw)));
            a.set_on_otel(otel);
        }
    }
}

/// Records one stream message's final index (the preliminary → final mapping).
pub(crate) fn record_stream_message(
    span: &tracing::Span,
    preliminary: &Index,
    final_index: &Index,
    k: u32,
    fault: Option<Fault>,
) {
    let mut attributes = vec![
        KeyValue::new(PRELIMINARY_INDEX, preliminary.encode()),
        KeyValue::new(INDEX, final_index.encode()),
        KeyValue::new(MESSAGE, i64::from(k)),
    ];
    if let Some(f) = fault {
        attributes.push(KeyValue::new(FAULT, f.to_string()));
    }
    span.add_event(STREAM_MESSAGE_EVENT, attributes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{StackCapturer, StackConfig};

    /// One call site, captured by whichever capturer is given.
    #[inline(never)]
    fn site(c: &StackCapturer) -> CapturedStack {
        c.capture()
    }

    #[inline(never)]
    fn other_site(c: &StackCapturer) -> CapturedStack {
        c.capture()
    }

    fn has_frames(stack: &CapturedStack, frames: StackFrames) -> bool {
        let mut a = Attributes::new();
        a.stack(stack, frames);
        let keys: Vec<&str> = a.items.iter().flatten().map(|kv| kv.key.as_str()).collect();
        assert!(keys.contains(&STACK_DIGEST), "the digest goes on every span: {keys:?}");
        keys.contains(&STACK)
    }

    #[test]
    fn the_payload_digest_value_is_the_digests_hex_form() {
        for payload in [&b""[..], b"x", &[0xff; 1024][..], b"\x00\x01\x7f\x80"] {
            let digest = PayloadDigest::of(payload);
            assert_eq!(hex_value(&digest), Value::from(digest.to_hex()));
        }
        let every_nibble = PayloadDigest(std::array::from_fn(|i| (i as u8).wrapping_mul(0x17)));
        assert_eq!(hex_value(&every_nibble), Value::from(every_nibble.to_hex()));
    }

    #[test]
    fn readable_frames_once_per_stack_in_the_process_on_every_span_or_never() {
        let config = || StackConfig::default().allow("src/span.rs");
        let (c, another) = (StackCapturer::new(config()), StackCapturer::new(config()));
        // One call site (the loop's line is in the stack too): twice through `c`, once through another
        // configuration's capturer.
        let stacks: Vec<CapturedStack> = [&c, &c, &another].into_iter().map(site).collect();
        let stack = &stacks[0];
        assert!(!stack.is_empty(), "{}", stack.readable());
        assert!(stacks.iter().all(|s| s.digest() == stack.digest()));
        assert!(has_frames(stack, StackFrames::EverySpan));
        assert!(has_frames(stack, StackFrames::EverySpan));
        assert!(!has_frames(stack, StackFrames::Never));
        assert!(
            has_frames(stack, StackFrames::OncePerStack),
            "the first span with this stack"
        );
        assert!(!has_frames(&stacks[1], StackFrames::OncePerStack), "not again");
        // Once per process, not per capturer.
        assert!(!has_frames(&stacks[2], StackFrames::OncePerStack));
        // A stack not seen before gets them.
        let other = other_site(&c);
        assert_ne!(other.digest(), stack.digest());
        assert!(!has_frames(&other, StackFrames::Never));
        assert!(has_frames(&other, StackFrames::OncePerStack));
    }
}
