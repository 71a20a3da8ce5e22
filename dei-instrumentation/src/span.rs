//! The `dei.*` span attributes: the contract with the collector and the fault search.
//!
//! They are recorded through tracing-opentelemetry (on the OpenTelemetry span of the tracing span, all of a
//! span's attributes at once) so that they reach any OpenTelemetry exporter. Raw payloads never go on spans unless
//! [`record_payloads`](crate::DeiConfigBuilder::record_payloads) is on.
//!
//! | attribute | client span | server span |
//! |---|---|---|
//! | `dei.index` | the outgoing index (wire form) | the incoming index (`1` for a root) |
//! | `dei.signature` | `pkg.Service/Method`, `METHOD authority/path` | `pkg.Service/Method`, `METHOD /route/{template}` |
//! | `dei.payload.digest` | SHA-256 of the payload, 64 hex | the same, digested from the received body |
//! | `dei.stack.digest`, `dei.stack`, `dei.stack.mode`, `dei.stack.walker` | the caller's application stack | — (the callee cannot see it) |
//! | `dei.count`, `dei.depth` | of the index | of the index |
//! | `dei.instantiation` | the scope's instantiation | the server's |
//! | `dei.preliminary` | `true` on streams | `true` on streams |
//! | `dei.ambiguous` | set when the call completes | — |
//! | `dei.fault` | the injected fault, wire form (`g14`, `h503`, `c`, `l250`) | the incoming plan, wire form (`dei.fault.plan`) |
//! | `dei.fault.plan.dropped` | — | `true` when this service refused the incoming plan ([`crate::Faults`]) |
//! | `dei.incoming.dropped` | — | `true` when an edge layer dropped the incoming `dei`/`dei-faults` ([`crate::Incoming`]) |
//! | `dei.depth_limited` | `true` when the index could not grow past 64 elements | — |
//!
//! Streams add one span event per message sent, [`STREAM_MESSAGE_EVENT`], with [`PRELIMINARY_INDEX`],
//! [`INDEX`] and [`MESSAGE`] (the 1-based position k): the mapping from the preliminary to the final index.
//! A message whose final index the fault plan names also gets [`FAULT`] on its event; the stream's span has
//! [`FAULT`] only when the stream itself was failed.

use crate::stack::CapturedStack;
use dei_propagator::{Fault, Index, Instantiation, PayloadDigest};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue, Value};
use std::sync::Arc;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `dei.index`: the index, wire form.
pub const INDEX: &str = "dei.index";
/// `dei.signature`: the readable RPC signature.
pub const SIGNATURE: &str = "dei.signature";
/// `dei.payload.digest`: SHA-256 of the payload, 64 hex characters.
pub const PAYLOAD_DIGEST: &str = "dei.payload.digest";
/// `dei.payload`: the raw payload (lossy UTF-8, first KiB), only when turned on.
pub const PAYLOAD: &str = "dei.payload";
/// `dei.stack.digest`: SHA-256 of the application frames, 64 hex characters.
pub const STACK_DIGEST: &str = "dei.stack.digest";
/// `dei.stack`: readable application frames, innermost first, one per line.
pub const STACK: &str = "dei.stack";
/// `dei.stack.mode`: how the stack was captured (see [`crate::stack::StackMode`]).
pub const STACK_MODE: &str = "dei.stack.mode";
/// `dei.stack.walker`: how the stack was walked, `frame-pointers` or `dwarf` (see
/// [`crate::stack::StackWalker`]); only when the mode unwinds.
pub const STACK_WALKER: &str = "dei.stack.walker";
/// `dei.count`: the innermost element's invocation count.
pub const COUNT: &str = "dei.count";
/// `dei.depth`: the number of elements.
pub const DEPTH: &str = "dei.depth";
/// `dei.instantiation`: the instantiation's name.
pub const INSTANTIATION: &str = "dei.instantiation";
/// `dei.preliminary`: a stream's preliminary index.
pub const PRELIMINARY: &str = "dei.preliminary";
/// `dei.ambiguous`: another RPC with the same invocation signature was in flight in the same scope.
pub const AMBIGUOUS: &str = "dei.ambiguous";
/// `dei.fault`: the fault injected on this RPC, wire form.
pub const FAULT: &str = "dei.fault";
/// `dei.fault.plan`: on a server span, the fault plan that came with the request (wire form).
pub const FAULT_PLAN: &str = "dei.fault.plan";
/// `dei.fault.plan.dropped`: on a server span, `true` when the request came with a fault plan that this
/// service dropped ([`Faults::Refuse`](crate::Faults::Refuse)).
pub const FAULT_PLAN_DROPPED: &str = "dei.fault.plan.dropped";
/// `dei.incoming.dropped`: on a server span, `true` when a server layer at a trust boundary
/// ([`Incoming::Restart`](crate::Incoming::Restart)) dropped the request's `dei` or `dei-faults` values.
pub const INCOMING_DROPPED: &str = "dei.incoming.dropped";
/// `dei.depth_limited`: on a client span, `true` when the call's index could not be extended because its
/// scope was at the depth limit (64 elements): the index is its caller's, not unique to this call, and no
/// fault applies to it (see [`dei_propagator::RequestScope::issue`]).
pub const DEPTH_LIMITED: &str = "dei.depth_limited";
/// The span event recorded for each message sent on a stream.
pub const STREAM_MESSAGE_EVENT: &str = "dei.stream.message";
/// `dei.preliminary_index`: on a stream message event, the stream's preliminary index.
pub const PRELIMINARY_INDEX: &str = "dei.preliminary_index";
/// `dei.message`: on a stream message event, the message's 1-based position k.
pub const MESSAGE: &str = "dei.message";

/// Largest raw payload recorded.
const PAYLOAD_RECORD_CAP: usize = 1024;

/// The `dei.*` attributes of one span, gathered and then set at once: one lookup of the span's OpenTelemetry
/// data instead of one per attribute.
#[derive(Default)]
pub(crate) struct Attributes(Vec<KeyValue>);

impl Attributes {
    /// Room for the attributes a client span gets.
    pub(crate) fn new() -> Self {
        Attributes(Vec::with_capacity(12))
    }

    /// One attribute.
    pub(crate) fn push(&mut self, key: &'static str, value: impl Into<Value>) {
        self.0.push(KeyValue::new(key, value));
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

    /// A payload digest (and the raw payload when asked for).
    pub(crate) fn payload(&mut self, digest: &PayloadDigest, raw: Option<&[u8]>) {
        self.push(PAYLOAD_DIGEST, digest.to_hex());
        if let Some(raw) = raw {
            let cut = &raw[..raw.len().min(PAYLOAD_RECORD_CAP)];
            self.push(PAYLOAD, String::from_utf8_lossy(cut).into_owned());
        }
    }

    /// A captured stack.
    pub(crate) fn stack(&mut self, stack: &CapturedStack, readable: bool) {
        self.push(STACK_DIGEST, stack.digest_hex());
        self.push(STACK_MODE, stack.mode().as_str());
        if stack.mode().unwinds() {
            self.push(STACK_WALKER, stack.walker().as_str());
        }
        if readable {
            self.push(STACK, stack.readable_shared());
        }
    }

    /// Sets them on the span and returns its OpenTelemetry span. That span is started here if it was not yet:
    /// call this after [`OpenTelemetrySpanExt::set_parent`].
    pub(crate) fn set_on(self, span: &tracing::Span) -> OtelSpan {
        let otel = OtelSpan::of(span);
        otel.0.span().set_attributes(self.0);
        otel
    }

    /// Sets them on an OpenTelemetry span taken earlier.
    pub(crate) fn set_on_otel(self, otel: &OtelSpan) {
        otel.0.span().set_attributes(self.0);
    }
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

    /// Sets one attribute.
    pub(crate) fn set_attribute(&self, key: &'static str, value: impl Into<Value>) {
        self.0.span().set_attribute(KeyValue::new(key, value));
    }

    /// Sets the status.
    pub(crate) fn set_status(&self, status: opentelemetry::trace::Status) {
        self.0.span().set_status(status);
    }
}

/// Records a payload digest (and the raw payload when asked for) on its own.
pub(crate) fn record_payload(otel: &OtelSpan, digest: &PayloadDigest, raw: Option<&[u8]>) {
    let mut a = Attributes::default();
    a.payload(digest, raw);
    a.set_on_otel(otel);
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
