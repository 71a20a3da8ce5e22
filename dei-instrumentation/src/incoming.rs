//! What every server integration does for one incoming request: extract the trace context, the index and the
//! fault plan through the global propagator, open the request's scope, parent the server span and record the
//! attributes.

use crate::body::{CallGuard, InboundBody, InboundDigest};
use crate::carrier::{EdgeExtractor, HeaderExtractor};
use crate::config::{DeiConfig, Faults, Incoming};
use crate::grpc::stream::IncomingCall;
use crate::span::{self, OtelSpan};
use dei_propagator::rejection::{self, Event, Source};
use dei_propagator::{DeiContextExt, FAULT_PLAN_KEY, FaultPlan, RequestScope, Signature};
use opentelemetry::Context;
use opentelemetry::propagation::Extractor;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// A DEI-carrying header whose value is not visible ASCII, so no propagator can read it.
#[derive(Debug, thiserror::Error)]
#[error("the {0} header is not visible ASCII")]
pub(crate) struct UnreadableHeader(&'static str);

/// The headers that carry DEI state (under their default names), and the rejection counter of each.
const DEI_HEADERS: [(&str, Source); 3] = [
    ("dei", Source::Header),
    (FAULT_PLAN_KEY, Source::FaultPlan),
    ("baggage", Source::Baggage),
];

/// Counts DEI headers that [`HeaderExtractor`] must treat as absent because they are not visible ASCII (at a
/// trust boundary, only `baggage`: the others are dropped anyway, and counted as such).
fn reject_unreadable(headers: &HeaderExtractor<'_>, incoming: Incoming) {
    for (name, source) in DEI_HEADERS {
        if incoming == Incoming::Restart && name != "baggage" {
            continue;
        }
        let unreadable = headers.all(name).iter().filter(|v| v.to_str().is_err()).count();
        for _ in 0..unreadable {
            rejection::record(source, &UnreadableHeader(name));
        }
    }
}

/// Opens the request's scope; returns it with the server span's OpenTelemetry span (started here). `single_request` is true for server-streaming methods, whose one request
/// message is served as message 1 of the stream.
///
/// Malformed `dei`, `baggage` or `dei-faults` values are rejected and counted by the propagator
/// ([`dei_propagator::rejection`]) and treated as absent: the request is served as a root. Values that are not
/// visible ASCII never reach the propagator; they are counted here, one count per value.
///
/// At a trust boundary ([`Incoming::Restart`]) the propagator never sees our values: they are dropped and
/// counted, and the request is served as a root. A fault plan is kept only when the configuration takes plans
/// from callers ([`Faults::Relay`], [`Faults::Accept`]); otherwise it is dropped and counted.
pub(crate) fn open(
    config: &DeiConfig,
    incoming: Incoming,
    headers: &http::HeaderMap,
    signature: &Signature,
    span: &tracing::Span,
    single_request: bool,
) -> (IncomingCall, OtelSpan) {
    let raw = headers;
    let headers = HeaderExtractor(raw);
    reject_unreadable(&headers, incoming);
    let edge;
    let mut dropped_at_edge = 0;
    let extractor: &dyn Extractor = match incoming {
        Incoming::Trust => &headers,
        Incoming::Restart => {
            edge = EdgeExtractor::new(raw);
            dropped_at_edge = edge.dropped;
            if edge.dropped > 0 {
                rejection::record_event(
                    Event::DroppedAtEdge,
                    &format_args!(
                        "dropped {} incoming dei/dei-faults value(s) at a trust boundary (Incoming::Restart): served as a root",
                        edge.dropped
                    ),
                );
            }
            &edge
        }
    };
    let mut parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(extractor));
    let mut plan_dropped = false;
    if config.faults() == Faults::Refuse
        && let Some(plan) = parent.fault_plan().filter(|p| !p.is_empty())
    {
        rejection::record_event(
            Event::FaultPlanDropped,
            &format_args!(
                "dropped a fault plan of {} entries from a caller: this service does not take plans (Faults::Refuse; enable with DeiConfig::builder().faults(..) or DEI_ACCEPT_FAULTS)",
                plan.entries().len()
            ),
        );
        parent = parent.with_fault_plan(FaultPlan::default());
        plan_dropped = true;
    }
    let index = parent.dei_index().cloned().unwrap_or_default();
    let wire = match parent.dei_index_wire() {
        Some(wire) => wire.clone(),
        None => root_wire(),
    };
    let prefix = if single_request && index.opens_stream() {
        index.stream_message(1)
    } else {
        index.clone()
    };
    let scope = RequestScope::enter(prefix, config.instantiation().clone());
    let context = parent.with_dei_scope(scope.clone());
    // Before the span is entered or its context read: afterwards set_parent fails.
    if let Err(e) = span.set_parent(context.clone()) {
        tracing::debug!("dei: could not parent the server span: {e}");
    }
    let mut attributes = span::Attributes::new();
    attributes.push(span::SIGNATURE, signature.name_shared());
    attributes.index(&index, wire, config.instantiation());
    if let Some(plan) = context.fault_plan().filter(|p| !p.is_empty()) {
        attributes.push(span::FAULT_PLAN, plan.encode());
    }
    if plan_dropped {
        attributes.push(span::FAULT_PLAN_DROPPED, true);
    }
    if dropped_at_edge > 0 {
        attributes.push(span::INCOMING_DROPPED, true);
    }
    let otel = attributes.set_on(span);
    let call = IncomingCall {
        index,
        instantiation: config.instantiation().clone(),
        scope,
        context,
    };
    (call, otel)
}

/// The wire form of the root index, made once: every request that arrives without an index records it.
fn root_wire() -> std::sync::Arc<str> {
    static ROOT: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| dei_propagator::Index::root().encode().into())
        .clone()
}

/// What [`dispatch`] hands back: the handler's future, the guard that ends with the response, and the
/// request's `Context` (the response body is polled in it).
pub(crate) struct Dispatched<F> {
    pub(crate) future: crate::caller::Serving<F>,
    pub(crate) guard: CallGuard,
    pub(crate) cx: Context,
}

/// Hands the request to the inner service inside the server span and the request's `Context`, its body wrapped
/// (by `wrap`, into the service's body type) in an [`InboundBody`] that digests the payload as it passes, and
/// the call in its extensions (for [`crate::grpc::stream::DeiStreaming`]). `grpc`: the outcome is read from
/// gRPC trailers.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch<S, B>(
    inner: &mut S,
    config: &DeiConfig,
    request: http::Request<B>,
    (call, otel): (IncomingCall, OtelSpan),
    digest: InboundDigest,
    span: &tracing::Span,
    grpc: bool,
    wrap: impl FnOnce(InboundBody<B>) -> B,
) -> Dispatched<S::Future>
where
    S: tower_service::Service<http::Request<B>>,
    B: http_body::Body,
{
    let (mut parts, body) = request.into_parts();
    let body = wrap(InboundBody::new(body, digest, otel.clone(), config.record_payloads()));
    let cx = call.context.clone();
    parts.extensions.insert(call);
    let request = http::Request::from_parts(parts, body);
    let future = {
        let _entered = span.enter();
        let _attached = cx.clone().attach();
        let _serving = crate::caller::ServingGuard::enter();
        crate::caller::Serving::new(inner.call(request))
    };
    let guard = CallGuard {
        _span: span.clone(),
        otel,
        issued: None,
        grpc,
    };
    Dispatched { future, guard, cx }
}
