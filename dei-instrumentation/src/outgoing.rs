//! What every client integration does for one outgoing call: take the next index from the scope in the current
//! `Context`, check the fault plan, record the attributes, and build the context to inject.

use crate::carrier::HeaderInjector;
use crate::config::{DeiConfig, Faults, StackFrames};
use crate::fault::{self, Action};
use crate::span::{self, OtelSpan};
use crate::stack::CapturedStack;
use dei_propagator::rejection::{self, Event};
use dei_propagator::{
    DeiContextExt, Fault, FaultPlan, Index, InvocationSignature, IssuedIndex, PayloadDigest, RequestScope, Signature,
};
use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use std::sync::Arc;
use std::time::Duration;

/// What this service's configuration lets the layers do with the fault plan of a call's context.
#[derive(Clone, Debug)]
pub(crate) struct FaultGate {
    plan: Option<FaultPlan>,
    faults: Faults,
    max_latency: Duration,
}

impl FaultGate {
    /// The gate for calls made under `cx` (the plan is copied: a stream keeps it for its messages).
    pub(crate) fn new(config: &DeiConfig, cx: &Context) -> Self {
        FaultGate {
            plan: cx.fault_plan().filter(|p| !p.is_empty()).cloned(),
            faults: config.faults(),
            max_latency: config.max_latency(),
        }
    }

    /// The fault to inject on the call with this issued index (see [`planned_fault`]).
    pub(crate) fn fault_for(&self, issued: &IssuedIndex) -> Option<Fault> {
        planned_fault(self.plan.as_ref(), self.faults, self.max_latency, issued)
    }
}

/// The fault to inject on the call with this issued index: the plan's entry for it, when this service applies
/// plans ([`Faults::Accept`]) and the fault is valid, with a latency shortened to `max_latency`. An entry for a
/// service that does not apply plans, an invalid fault (a gRPC code or HTTP status no receiver reads:
/// [`fault::is_invalid`]) and a clamped latency are counted; an index at the depth limit is never a target (it
/// names the caller).
fn planned_fault(
    plan: Option<&FaultPlan>,
    faults: Faults,
    max_latency: Duration,
    issued: &IssuedIndex,
) -> Option<Fault> {
    if issued.depth_limited() {
        return None;
    }
    let fault = plan?.fault_for(issued.index())?;
    if !faults.applies() {
        rejection::record_event(
            Event::FaultNotApplied,
            &format_args!(
                "the fault plan names this call ({fault}) but this service does not apply plans (faults: {}): sent as usual",
                faults.as_str()
            ),
        );
        return None;
    }
    if fault::is_invalid(fault) {
        fault::record_invalid(fault, issued.index());
        return None;
    }
    match fault {
        Fault::Latency(d) if d > max_latency => {
            rejection::record_event(
                Event::LatencyClamped,
                &format_args!(
                    "a latency fault of {} ms is longer than this service's cap of {} ms: waits the cap",
                    d.as_millis(),
                    max_latency.as_millis()
                ),
            );
            Some(Fault::Latency(max_latency))
        }
        f => Some(f),
    }
}

/// The scope that issues the next index: the one in the current `Context`, or else a fresh root scope.
///
/// Outside any scope each call is its own root: its index has one element and count 1. A functional test
/// normally opens a root scope (see [`crate::root_context`]) so that its calls are counted together.
pub(crate) fn scope_of(config: &DeiConfig, cx: &Context) -> RequestScope {
    cx.dei_scope()
        .cloned()
        .unwrap_or_else(|| RequestScope::root(config.instantiation().clone()))
}

/// The client side of [`Path::Off`]: the `dei` values that the trace context's propagation would carry (an
/// incoming request's index, in the server span's context) are taken out of the request's headers again, so
/// that no stale prefix travels on.
pub(crate) fn strip_dei(headers: &mut http::HeaderMap) {
    headers.remove(dei_propagator::INDEX_KEY);
    headers.remove(dei_propagator::FAULT_PLAN_KEY);
    let stripped = headers
        .get("baggage")
        .and_then(|v| v.to_str().ok())
        .and_then(dei_propagator::baggage_without_dei);
    if let Some(rest) = stripped {
        if rest.is_empty() {
            headers.remove("baggage");
        } else if let Ok(value) = http::HeaderValue::from_str(&rest) {
            headers.insert("baggage", value);
        }
    }
}

/// An outgoing call whose index was issued.
pub(crate) struct Outgoing {
    /// The issued index; keep it until the call completes.
    pub(crate) issued: IssuedIndex,
    /// The context to inject (the client span, the fault plan and the baggage), with the index: see
    /// [`Outgoing::inject`].
    inject_cx: Context,

    /// What to do about a planned fault.
    pub(crate) action: Action,
    /// The scope the index came from (streams issue their messages' final indexes from it).
    pub(crate) scope: RequestScope,
    /// The client span's OpenTelemetry span, where the outcome is recorded.
    pub(crate) otel: OtelSpan,
    /// Whether `dei.*` attributes (and the outcome) are recorded ([`Path::Full`]).
    pub(crate) record: bool,
    /// What the `dei.*` attributes are made from, not yet on the span: see [`Outgoing::record_attributes`].
    pending: Option<Pending>,
    /// The index's wire form, shared, made once on a recorded call ([`Path::Full`](crate::span::Path::Full)):
    /// the `dei` header is written from it and `dei.index` records it. A call that records nothing writes the
    /// header from a buffer of the thread's instead (no allocation).
    wire: Option<Arc<str>>,
}

/// What a recorded client span's `dei.*` attributes are made from (beside the issued index and the scope, which
/// [`Outgoing`] holds), kept until [`Outgoing::record_attributes`]: a few shared handles and a digest, where the
/// attributes themselves (an array of key-values, about a kilobyte) would be copied with the call at every move.
struct Pending {
    rpc: Option<(opentelemetry::StringValue, opentelemetry::StringValue)>,
    signature: Signature,
    payload: PayloadDigest,
    /// `dei.payload`, when payloads are recorded.
    raw: Option<String>,
    stack: CapturedStack,
    frames: StackFrames,
    fault: Option<Fault>,
}

impl Outgoing {
    /// Sets the `dei.*` attributes on the client span (once). Nothing on the way to the wire needs them, so a
    /// client records them once the request is on its way: with tonic's channel, whose `call` hands the request
    /// to the connection's task at once, that work overlaps the network round trip instead of preceding it.
    pub(crate) fn record_attributes(&mut self) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let index = self.issued.index();
        let wire = self.wire.clone().unwrap_or_else(|| index.encode_shared());
        let mut attributes = span::Attributes::new();
        attributes.rpc(p.rpc.as_ref());
        attributes.signature(&p.signature);
        attributes.index(index, wire, self.scope.instantiation());
        attributes.payload_with_raw(&p.payload, p.raw);
        attributes.stack(&p.stack, p.frames);
        if let Some(f) = p.fault {
            attributes.push(span::FAULT, f.to_string());
        }
        if self.issued.depth_limited() {
            attributes.push(span::DEPTH_LIMITED, true);
        }
        attributes.set_on_otel(&self.otel);
    }
}

/// The components of an outgoing call.
pub(crate) struct Call<'a> {
    /// `rpc.service` and `rpc.method` of a gRPC call.
    pub(crate) rpc: Option<&'a (opentelemetry::StringValue, opentelemetry::StringValue)>,
    pub(crate) signature: Signature,
    pub(crate) payload: PayloadDigest,
    pub(crate) raw_payload: Option<&'a [u8]>,
    pub(crate) stack: &'a CapturedStack,
    pub(crate) preliminary: bool,
}

/// Issues the call's index from the scope in `cx` (the caller's context, taken when the call was made),
/// keeps what the attributes of the client span `otel` are made from when `record` (they are made and set by
/// [`Outgoing::record_attributes`]) and decides about faults.
pub(crate) fn begin(config: &DeiConfig, cx: &Context, otel: OtelSpan, call: Call<'_>, record: bool) -> Outgoing {
    let scope = scope_of(config, cx);
    let invocation = InvocationSignature::new(call.signature.clone(), call.payload, call.stack.digest());
    let issued = if call.preliminary {
        scope.issue_preliminary(&invocation)
    } else {
        scope.issue(&invocation)
    };
    let fault = planned_fault(cx.fault_plan(), config.faults(), config.max_latency(), &issued);
    // With a tracing-opentelemetry subscriber the span's context is the current context plus the span;
    // without one, inject the current context. The span's attributes are set later.
    let base = if otel.context().has_active_span() {
        otel.context().clone()
    } else {
        cx.clone()
    };
    // The index goes on the wire without a context of its own (`inject_with_index`), and its wire form for
    // `dei.index` is made only when the span records it.
    let inject_cx = base;
    let pending = record.then(|| Pending {
        rpc: call.rpc.cloned(),
        raw: (call.raw_payload)
            .filter(|_| config.record_payloads())
            .map(span::raw_payload),
        signature: call.signature,
        payload: call.payload,
        stack: call.stack.clone(),
        frames: config.stack_frames(),
        fault,
    });
    // Encoded once: for the header and for `dei.index`.
    let wire = record.then(|| issued.index().encode_shared());
    Outgoing {
        issued,
        inject_cx,
        action: Action::for_fault(fault),
        scope,
        otel,
        record,
        pending,
        wire,
    }
}

impl Outgoing {
    /// Injects the call's context and its index through the global propagator into an HTTP header map.
    pub(crate) fn inject(&self, headers: &mut http::HeaderMap) {
        let (cx, index, headers) = (&self.inject_cx, self.issued.index(), &mut HeaderInjector(headers));
        opentelemetry::global::get_text_map_propagator(|p| match &self.wire {
            Some(wire) => dei_propagator::inject_with_index_wire(p, cx, index, wire, headers),
            None => dei_propagator::inject_with_index(p, cx, index, headers),
        });
    }
}

/// Injects `cx` through the global propagator into an HTTP header map.
pub(crate) fn inject(cx: &Context, headers: &mut http::HeaderMap) {
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(cx, &mut HeaderInjector(headers)));
}

/// Issues a stream message's final index from the stream's scope, checks it against the fault plan (through
/// the stream's gate) and records the mapping (and the fault) on the span.
#[allow(clippy::too_many_arguments)]
pub(crate) fn stream_message(
    scope: &RequestScope,
    span: &tracing::Span,
    preliminary: &Index,
    signature: &Signature,
    payload: PayloadDigest,
    stack: &CapturedStack,
    k: u32,
    faults: &FaultGate,
    record: bool,
) -> (Index, Action) {
    let invocation = InvocationSignature::new(signature.clone(), payload, stack.digest());
    // Messages of one stream are sent in order, so they are never in flight together: the issued index is
    // released at once.
    let issued = scope.issue(&invocation);
    if let Some(opened) = preliminary.last() {
        // The callee serves this message under the preliminary count + k: a later stream from the same site
        // must not be served there unflagged.
        scope.stream_message_sent(opened, k);
    }
    let fault = faults.fault_for(&issued);
    let final_index = issued.index().clone();
    if record {
        span::record_stream_message(span, preliminary, &final_index, k, fault);
    }
    (final_index, Action::for_fault(fault))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dei_propagator::{Element, ElementDigest, Instantiation, StackDigest};

    fn call() -> InvocationSignature {
        InvocationSignature::new(
            Signature::grpc_path("/B/echo"),
            PayloadDigest::of(b"x"),
            StackDigest([1; 32]),
        )
    }

    #[test]
    fn a_plan_applies_only_where_accepted_within_the_cap_and_never_at_the_depth_limit() {
        let scope = RequestScope::root(Instantiation::dei());
        let issued = scope.issue(&call());
        let long = Fault::Latency(Duration::from_secs(900));
        let plan = FaultPlan::new(vec![(issued.index().clone(), long)]);
        let cap = Duration::from_secs(30);
        let not_applied = rejection::event_total(Event::FaultNotApplied);
        assert_eq!(planned_fault(Some(&plan), Faults::Refuse, cap, &issued), None);
        assert_eq!(planned_fault(Some(&plan), Faults::Relay, cap, &issued), None);
        assert!(rejection::event_total(Event::FaultNotApplied) >= not_applied + 2);
        let clamped = rejection::event_total(Event::LatencyClamped);
        assert_eq!(
            planned_fault(Some(&plan), Faults::Accept, cap, &issued),
            Some(Fault::Latency(cap))
        );
        assert!(rejection::event_total(Event::LatencyClamped) > clamped);
        let short = FaultPlan::new(vec![(issued.index().clone(), Fault::UNAVAILABLE)]);
        assert_eq!(
            planned_fault(Some(&short), Faults::Accept, cap, &issued),
            Some(Fault::UNAVAILABLE)
        );
        // A fault no receiver reads is not carried out, as the wire would not carry it: counted.
        for invalid in [Fault::Grpc(0), Fault::Grpc(17), Fault::Http(100), Fault::Http(600)] {
            let plan = FaultPlan::new(vec![(issued.index().clone(), invalid)]);
            let before = fault::invalid_faults_not_applied_total();
            assert_eq!(
                planned_fault(Some(&plan), Faults::Accept, cap, &issued),
                None,
                "{invalid:?}"
            );
            assert!(fault::invalid_faults_not_applied_total() > before);
        }
        // At the depth limit the call carries its scope's index, which names the caller's call: never a target.
        let deep: Index = (0..64).map(|i| Element::new(ElementDigest([i; 8]), 1)).collect();
        let scope = RequestScope::enter(deep.clone(), Instantiation::dei());
        let limited = scope.issue(&call());
        assert!(limited.depth_limited());
        let plan = FaultPlan::new(vec![(deep, Fault::UNAVAILABLE)]);
        assert_eq!(planned_fault(Some(&plan), Faults::Accept, cap, &limited), None);
    }
}
