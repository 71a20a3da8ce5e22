//! What every server integration does for one incoming request: extract the trace context, the index and the
//! fault plan through the global propagator, open the request's scope, parent the server span and record the
//! attributes.

use crate::body::{CallGuard, DeiResponseBody, InboundBody, InboundDigest};
use crate::carrier::{EdgeExtractor, HeaderExtractor};
use crate::config::{DeiConfig, Faults, Incoming, Unsampled};
use crate::span::Path;
use crate::span::{self, OtelSpan, Sampling};
use dei_propagator::rejection::{self, Event, Source};
use dei_propagator::{DeiContextExt, FAULT_PLAN_KEY, FaultPlan, Index, Instantiation, RequestScope, Signature};
use opentelemetry::Context;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TraceContextExt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, ready};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// What a server layer knew about the request being served: [`IncomingCall::current`] in the handler.
#[derive(Clone, Debug)]
pub struct IncomingCall {
    /// The incoming index (the root when none came).
    pub index: Index,
    /// The instantiation of the server's scopes.
    pub instantiation: Instantiation,
    /// The scope the handler runs in.
    pub scope: RequestScope,
    /// The request's context (trace, baggage, scope, fault plan).
    pub context: Context,
}

impl IncomingCall {
    /// The call being served, from the current `Context`: a handler behind a DEI server layer runs in its
    /// request's `Context`, whose scope has the incoming index as prefix. `None` outside any request scope
    /// (and under [`Unsampled::Off`] for a request that opened none). A server-streaming request's scope is
    /// that of its one message (`…|(x+1)~`), which is what this reports as its index.
    pub fn current() -> Option<IncomingCall> {
        let context = Context::current();
        let scope = context.dei_scope()?.clone();
        Some(IncomingCall {
            index: scope.prefix().clone(),
            instantiation: scope.instantiation().clone(),
            scope,
            context,
        })
    }
}

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
/// trust boundary, only `baggage`: the others are dropped anyway, and counted as such). Returns how many `dei`
/// values came, readable or not (0 at a trust boundary, where they are not read), for
/// [`dei_propagator::extract_with_index_counted`].
fn reject_unreadable(headers: &HeaderExtractor<'_>, incoming: Incoming) -> usize {
    let mut index_values = 0;
    for (name, source) in DEI_HEADERS {
        if incoming == Incoming::Restart && name != "baggage" {
            continue;
        }
        let (mut values, mut unreadable) = (0, 0);
        for value in headers.all(name) {
            values += 1;
            unreadable += usize::from(value.to_str().is_err());
        }
        if name == dei_propagator::INDEX_KEY {
            index_values = values;
        }
        for _ in 0..unreadable {
            rejection::record(source, &UnreadableHeader(name));
        }
    }
    index_values
}

/// What [`open`] found: the request's call (none on [`Path::Off`]), its server span and the path it takes.
pub(crate) struct Opened {
    pub(crate) call: Option<IncomingCall>,
    pub(crate) otel: OtelSpan,
    pub(crate) path: Path,
}

/// Opens the request's scope and starts the server span (`rpc`: `rpc.service` and `rpc.method` of a gRPC
/// request, recorded with the `dei.*` attributes). `single_request` is true for server-streaming
/// methods, whose one request message is served as message 1 of the stream.
///
/// Malformed `dei`, `baggage` or `dei-faults` values are rejected and counted by the propagator
/// ([`dei_propagator::rejection`]) and treated as absent: the request is served as a root. Values that are not
/// visible ASCII never reach the propagator; they are counted here, one count per value.
///
/// At a trust boundary ([`Incoming::Restart`]) the propagator never sees our values: they are dropped and
/// counted, and the request is served as a root. A fault plan is kept only when the configuration takes plans
/// from callers ([`Faults::Relay`], [`Faults::Accept`]); otherwise it is dropped and counted.
///
/// With [`Unsampled::Off`], a request whose trace context says it is not sampled, and which brings no fault
/// plan, opens no scope: the span is parented as plain OpenTelemetry layers do, and nothing else happens.
pub(crate) fn open(
    config: &DeiConfig,
    incoming: Incoming,
    headers: &http::HeaderMap,
    signature: &Signature,
    rpc: Option<&(opentelemetry::StringValue, opentelemetry::StringValue)>,
    span: &tracing::Span,
    single_request: bool,
) -> Opened {
    let raw = headers;
    let headers = HeaderExtractor(raw);
    let index_values = reject_unreadable(&headers, incoming);
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
    // The index comes back beside the context rather than in it: the request's scope holds it. The header map
    // says how many `dei` values it holds, so that a single one is read without a list (an allocation).
    let (mut parent, extracted) = opentelemetry::global::get_text_map_propagator(|p| match incoming {
        Incoming::Trust => dei_propagator::extract_with_index_counted(p, extractor, index_values),
        Incoming::Restart => dei_propagator::extract_with_index(p, extractor),
    });
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
    let planned = parent.fault_plan().is_some_and(|p| !p.is_empty());
    if config.unsampled() == Unsampled::Off && !planned && {
        let remote = parent.span();
        let sc = remote.span_context();
        sc.is_valid() && !sc.is_sampled()
    } {
        if let Err(e) = span.set_parent(parent) {
            tracing::debug!("dei: could not parent the server span: {e}");
        }
        return Opened {
            call: None,
            otel: OtelSpan::of(span),
            path: Path::Off,
        };
    }
    let extracted_any = extracted.is_some();
    // no incoming index: this request is a root
    let index = extracted.unwrap_or_else(Index::root);
    // A server-streaming request is message 1 of its stream. A crafted stream index whose count is the
    // largest leaves it no count of its own: it is served under the largest (counted and logged by
    // `stream_message`) and the span says so.
    let mut count_overflow = false;
    let prefix = if single_request && index.opens_stream() {
        index.checked_stream_message(1).unwrap_or_else(|_| {
            count_overflow = true;
            index.stream_message(1)
        })
    } else {
        index.clone()
    };
    let scope = RequestScope::enter(prefix, config.instantiation().clone());
    let context = parent.with_dei_scope(scope.clone());
    // Before the span is entered or its context read: afterwards set_parent fails.
    if let Err(e) = span.set_parent(context.clone()) {
        tracing::debug!("dei: could not parent the server span: {e}");
    }
    let otel = OtelSpan::of(span);
    let path = match otel.sampling() {
        Sampling::Sampled => Path::Full,
        _ if planned => Path::Full,
        _ => Path::Lean,
    };
    if path == Path::Full {
        let wire = if extracted_any {
            index.encode_shared()
        } else {
            root_wire()
        };
        let mut attributes = span::Attributes::new();
        attributes.rpc(rpc);
        attributes.signature(signature);
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
        if count_overflow {
            attributes.push(span::STREAM_COUNT_OVERFLOW, true);
        }
        attributes.set_on_otel(&otel);
    }
    let call = IncomingCall {
        index,
        instantiation: config.instantiation().clone(),
        scope,
        context,
    };
    Opened {
        call: Some(call),
        otel,
        path,
    }
}

/// The wire form of the root index, made once: every request that arrives without an index records it.
fn root_wire() -> std::sync::Arc<str> {
    static ROOT: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| dei_propagator::Index::root().encode().into())
        .clone()
}

/// Hands the request to the inner service inside the server span and the request's `Context` and, on a sampled
/// span, its body wrapped (by `wrap`,
/// into the service's body type) in an [`InboundBody`] that digests the payload as it passes (`digest` makes
/// the digester: the payload digest goes on the span only; it may leave what the handler needs to record on the
/// span later in the request's extensions). `grpc`: the outcome is read from gRPC trailers.
/// On [`Path::Off`] the request goes to the inner service as it is, inside the span.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch<S, B>(
    inner: &mut S,
    config: &DeiConfig,
    request: http::Request<B>,
    opened: Opened,
    digest: impl FnOnce(&IncomingCall, &OtelSpan, &mut http::request::Parts) -> InboundDigest,
    span: tracing::Span,
    grpc: bool,
    wrap: impl FnOnce(InboundBody<B>) -> B,
) -> ServerFuture<S::Future>
where
    S: tower_service::Service<http::Request<B>>,
    B: http_body::Body,
{
    let Opened { call, otel, path } = opened;
    let record = path.records();
    let (request, cx) = match call {
        None => (request, None),
        Some(call) => {
            let request = if record {
                let (mut parts, body) = request.into_parts();
                let digest = digest(&call, &otel, &mut parts);
                let body = wrap(InboundBody::new(body, digest, otel.clone(), config.record_payloads()));
                http::Request::from_parts(parts, body)
            } else {
                request
            };
            // The handler finds the call in its Context (`IncomingCall::current`), not in the request's extensions
            // (which hold only what `digest` left there for the span).
            (request, Some(call.context))
        }
    };
    // The request's Context first, then the span (whose OpenTelemetry context, with the server span, is then
    // the current one).
    let future = {
        let _attached = cx.as_ref().map(|cx| cx.clone().attach());
        let _entered = span.enter();
        let _serving = crate::caller::ServingGuard::enter();
        crate::caller::Serving::new(inner.call(request))
    };
    let guard = CallGuard {
        _span: span.clone(),
        otel,
        issued: None,
        grpc,
        record,
    };
    ServerFuture {
        inner: future,
        span,
        cx,
        guard: Some(guard),
        grpc,
    }
}

pin_project_lite::pin_project! {
    /// The future of a request served behind [`crate::DeiServerLayer`] or [`crate::DeiHttpServerLayer`]: the
    /// handler's future, polled inside the server span and the request's `Context`, whose response body is
    /// wrapped so that the span ends with it. Not boxed.
    pub struct ServerFuture<F> {
        #[pin]
        inner: crate::caller::Serving<F>,
        span: tracing::Span,
        cx: Option<Context>,
        guard: Option<CallGuard>,
        grpc: bool,
    }
}

impl<F> std::fmt::Debug for ServerFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ServerFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<DeiResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = {
            let _attached = this.cx.as_ref().map(|c| c.clone().attach());
            let _entered = this.span.enter();
            ready!(this.inner.poll(cx))
        };
        let response = response?;
        let Some(guard) = this.guard.take() else {
            // Polled after completion.
            return Poll::Pending;
        };
        if *this.grpc {
            #[cfg(feature = "tonic")]
            if guard.record
                && let Some(code) = crate::body::grpc_code(response.headers())
            {
                crate::body::record_grpc_status(&guard.otel, code);
            }
        } else {
            let status = response.status();
            this.span.record("http.response.status_code", status.as_u16());
            if status.is_server_error() {
                guard
                    .otel
                    .set_status(opentelemetry::trace::Status::error(status.to_string()));
            }
        }
        let body_cx = this.cx.clone();
        Poll::Ready(Ok(response.map(|b| DeiResponseBody::new(b, guard, body_cx))))
    }
}
