//! The `dei.*` span contract: every span attribute and event key that `dei-instrumentation` records and that
//! the collector (`dei-collector`) and the fault search (`dei-sfit`) read, defined once, with one parser and one
//! stream-index rewriter for all of them.
//!
//! - The keys are the constants below, each with its value type and meaning.
//! - [`DeiSpan`] reads a span's `dei.*` attributes, given as borrowed `(key, value)` pairs
//!   ([`AttributeValue`]), into a typed record; [`StreamMessage`] reads one [`STREAM_MESSAGE_EVENT`]. Neither
//!   copies a string: the record borrows them from the input. A malformed value is an [`AttributeError`]
//!   naming its key.
//! - [`StreamRewriter`] rewrites the indexes of calls made while serving a stream message from the
//!   message's preliminary index to its final one (paper §4.2).
//!
//! | attribute | value | client span | server span |
//! |---|---|---|---|
//! | [`INDEX`] | string, index wire form | the outgoing index | the incoming index (`1` for a root) |
//! | [`SIGNATURE`] | string | `pkg.Service/Method`, `METHOD host/path` (no port) or `METHOD name/path` (a named target) | `pkg.Service/Method`, `METHOD /route/{template}`, `METHOD <unmatched>` |
//! | [`PAYLOAD_DIGEST`] | string, 64 hex | SHA-256 of the payload | the same, digested from the received body |
//! | [`PAYLOAD_DIGEST_INCOMPLETE`] | bool | — | `true` when the request's payload was dropped or failed before its digest was complete: an HTTP body before its end or the digest's cap, a gRPC request stream before its first message (no digest then) |
//! | [`PAYLOAD`] | string | the raw payload, only when turned on | the same |
//! | [`STACK_DIGEST`], [`STACK_MODE`], [`STACK_WALKER`] | string | the caller's application stack | — |
//! | [`STACK`] | string, one frame a line | the readable frames of that stack, once per distinct digest per process | — |
//! | [`COUNT`], [`DEPTH`] | int | of the index | of the index |
//! | [`INSTANTIATION`] | string | the scope's instantiation | the server's |
//! | [`PRELIMINARY`] | bool | `true` on streams | `true` on streams |
//! | [`AMBIGUOUS`] | bool | set when the call completes | — |
//! | [`FAULT`] | string, fault wire form | the injected fault | — |
//! | [`FAULT_PLAN`] | string, plan wire form | — | the plan that came with the request |
//! | [`FAULT_PLAN_DROPPED`], [`INCOMING_DROPPED`] | bool | — | `true` when this service dropped them |
//! | [`DEPTH_LIMITED`] | bool | `true` when the index could not grow past 64 elements | — |
//! | [`STREAM_COUNT_OVERFLOW`] | bool | — | `true` on a stream's server span when a message's count would pass the largest (4294967295): its later messages share that count |
//!
//! A stream's client span gets one [`STREAM_MESSAGE_EVENT`] per message sent, with [`PRELIMINARY_INDEX`],
//! [`INDEX`], [`MESSAGE`] and, when the plan failed that message, [`FAULT`].
//!
//! ```
//! use dei_propagator::semconv::{self, AttributeValue, DeiSpan};
//! let attributes = [
//!     (semconv::INDEX, AttributeValue::Str("1.AQEBAQEBAQE2")),
//!     (semconv::SIGNATURE, AttributeValue::Str("shop.Cart/Add")),
//!     (semconv::DEPTH, AttributeValue::Int(1)),
//!     ("rpc.system", AttributeValue::Str("grpc")),
//! ];
//! let span = DeiSpan::parse(attributes).unwrap();
//! assert_eq!(span.index.unwrap().encode(), "1.AQEBAQEBAQE2");
//! assert_eq!(span.signature, Some("shop.Cart/Add"));
//! ```

mod parse;
mod streams;

pub use parse::{AttributeError, AttributeValue, DeiSpan, StackFrames, StrArray, StreamMessage};
pub use streams::{Rewrite, StreamRewriter};

/// `dei.index` (string): the RPC's index, wire form (docs/wire-format.md). On a client span the outgoing index,
/// on a server span the incoming one (`1` for a root); on a [`STREAM_MESSAGE_EVENT`], the message's final
/// index.
pub const INDEX: &str = "dei.index";
/// `dei.signature` (string): the readable RPC signature, `pkg.Service/Method` for gRPC; on an HTTP client
/// `METHOD host/path` (the host without its port), or `METHOD name/path` when the caller named the target
/// service; on an HTTP server `METHOD /route/{template}`, or `METHOD <unmatched>` for a request no route
/// matched (a method outside the HTTP semantic conventions' list is `_OTHER`).
pub const SIGNATURE: &str = "dei.signature";
/// `dei.payload.digest` (string): SHA-256 of the payload, 64 hex characters.
pub const PAYLOAD_DIGEST: &str = "dei.payload.digest";
/// `dei.payload.digest.incomplete` (bool): on a server span, `true` when the request's payload was dropped
/// (the handler did not read it) or failed before its digest was complete: on HTTP, a body before its end or
/// the digest's cap; on gRPC, whose digest is the first request message's, a request stream before its first
/// message (only a stream from a caller without DEI: a DEI caller's stream has a preliminary index, whose
/// payload digest is the empty payload's). The span then has no [`PAYLOAD_DIGEST`].
pub const PAYLOAD_DIGEST_INCOMPLETE: &str = "dei.payload.digest.incomplete";
/// `dei.payload` (string): the raw payload (lossy UTF-8, at most its first KiB), only when the services turn
/// it on (`record_payloads`).
pub const PAYLOAD: &str = "dei.payload";
/// `dei.stack.digest` (string): SHA-256 of the caller's application frames, 64 hex characters.
pub const STACK_DIGEST: &str = "dei.stack.digest";
/// `dei.stack` (string): the caller's readable application frames, innermost first, one per line (a string
/// array, one frame an item, is read too). Recorded once per distinct [`STACK_DIGEST`] per process by
/// default.
pub const STACK: &str = "dei.stack";
/// `dei.stack.mode` (string): how the stack was captured (`dei-instrumentation`'s `StackMode`, e.g.
/// `unwind`, `symbols-only`, `stripped`).
pub const STACK_MODE: &str = "dei.stack.mode";
/// `dei.stack.walker` (string): how the stack was walked, `frame-pointers` or `dwarf`; only when the mode
/// unwinds.
pub const STACK_WALKER: &str = "dei.stack.walker";
/// `dei.count` (int, at least 1): the innermost element's invocation count.
pub const COUNT: &str = "dei.count";
/// `dei.depth` (int): the number of elements of [`INDEX`].
pub const DEPTH: &str = "dei.depth";
/// `dei.instantiation` (string): the name of the instantiation the index was computed under.
pub const INSTANTIATION: &str = "dei.instantiation";
/// `dei.preliminary` (bool): `true` on a stream's span, whose index is the stream's preliminary index.
pub const PRELIMINARY: &str = "dei.preliminary";
/// `dei.ambiguous` (bool): another RPC with the same invocation signature was in flight in the same scope.
pub const AMBIGUOUS: &str = "dei.ambiguous";
/// `dei.fault` (string): the fault injected on this RPC, wire form (`g14`, `h503`, `c`, `l250`); on a
/// [`STREAM_MESSAGE_EVENT`], the fault injected on that message.
pub const FAULT: &str = "dei.fault";
/// `dei.fault.plan` (string): on a server span, the fault plan that came with the request, wire form.
pub const FAULT_PLAN: &str = "dei.fault.plan";
/// `dei.fault.plan.dropped` (bool): on a server span, `true` when the request came with a fault plan that this
/// service dropped (`dei-instrumentation`'s `Faults::Refuse`).
pub const FAULT_PLAN_DROPPED: &str = "dei.fault.plan.dropped";
/// `dei.incoming.dropped` (bool): on a server span, `true` when a server layer at a trust boundary
/// (`dei-instrumentation`'s `Incoming::Restart`) dropped the request's `dei` or `dei-faults` values.
pub const INCOMING_DROPPED: &str = "dei.incoming.dropped";
/// `dei.depth_limited` (bool): on a client span, `true` when the call's index could not be extended because
/// its scope was at the depth limit (64 elements): the index is its caller's, not unique to this call, and no
/// fault applies to it (see [`RequestScope::issue`](crate::RequestScope::issue)).
pub const DEPTH_LIMITED: &str = "dei.depth_limited";
/// `dei.stream.count_overflow` (bool): on a stream's server span, `true` when a message's position k, added to
/// the count of the stream's preliminary index `…r|x~`, passed the largest count (4294967295; only a crafted
/// incoming index gets there): that message and every later one were served under the largest count, not
/// under `…r|(x+k)~` each, so the calls made for them can share indexes
/// ([`Index::checked_stream_message`](crate::Index::checked_stream_message)).
pub const STREAM_COUNT_OVERFLOW: &str = "dei.stream.count_overflow";
/// `dei.stream.message`: the span event recorded on a stream's client span for each message sent, with
/// [`PRELIMINARY_INDEX`], [`INDEX`] (the final index), [`MESSAGE`] and, on a failed message, [`FAULT`].
pub const STREAM_MESSAGE_EVENT: &str = "dei.stream.message";
/// `dei.preliminary_index` (string, index wire form): on a [`STREAM_MESSAGE_EVENT`], the stream's preliminary
/// index `…r|x~`.
pub const PRELIMINARY_INDEX: &str = "dei.preliminary_index";
/// `dei.message` (int, at least 1): on a [`STREAM_MESSAGE_EVENT`], the message's position k on the stream; the
/// callee served it under the preliminary index counted up by k, `…r|(x+k)~`.
pub const MESSAGE: &str = "dei.message";

/// Every `dei.*` span attribute key (the event's own keys included), for checks that walk the contract.
pub const ATTRIBUTES: [&str; 22] = [
    INDEX,
    SIGNATURE,
    PAYLOAD_DIGEST,
    PAYLOAD_DIGEST_INCOMPLETE,
    PAYLOAD,
    STACK_DIGEST,
    STACK,
    STACK_MODE,
    STACK_WALKER,
    COUNT,
    DEPTH,
    INSTANTIATION,
    PRELIMINARY,
    AMBIGUOUS,
    FAULT,
    FAULT_PLAN,
    FAULT_PLAN_DROPPED,
    INCOMING_DROPPED,
    DEPTH_LIMITED,
    STREAM_COUNT_OVERFLOW,
    PRELIMINARY_INDEX,
    MESSAGE,
];

/// The most characters of a recorded payload ([`PAYLOAD`]) that readers keep as its preview.
pub const PAYLOAD_PREVIEW_CHARS: usize = 64;

/// The first [`PAYLOAD_PREVIEW_CHARS`] characters of a recorded payload, with `…` when it was longer.
pub fn payload_preview(payload: &str) -> String {
    let mut chars = payload.chars();
    let mut out: String = chars.by_ref().take(PAYLOAD_PREVIEW_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests;
