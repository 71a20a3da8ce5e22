//! What every server integration does for one incoming request: extract the trace context, the index and the
//! fault plan through the global propagator, open the request's scope, parent the server span and record the
//! attributes.

use crate::config::DeiConfig;
use crate::grpc::stream::IncomingCall;
use crate::span;
use dei_propagator::{DeiContextExt, RequestScope, Signature};
use opentelemetry::propagation::Extractor;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// An [`Extractor`] over HTTP headers; values that are not visible ASCII are treated as absent.
pub(crate) struct HeaderExtractor<'a>(pub(crate) &'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Opens the request's scope. `single_request` is true for server-streaming methods, whose one request
/// message is served as message 1 of the stream.
///
/// Malformed `dei`, `baggage` or `dei-faults` values are rejected and counted by the propagator
/// ([`dei_propagator::rejection`]) and treated as absent: the request is served as a root.
pub(crate) fn open(
    config: &DeiConfig,
    headers: &http::HeaderMap,
    signature: &Signature,
    span: &tracing::Span,
    single_request: bool,
) -> IncomingCall {
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    let index = parent.dei_index().cloned().unwrap_or_default();
    let prefix = if single_request && index.is_preliminary() {
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
    span.set_attribute(span::SIGNATURE, signature.name().to_string());
    span::record_index(span, &index, config.instantiation());
    if let Some(plan) = context.fault_plan().filter(|p| !p.is_empty()) {
        span.set_attribute(span::FAULT_PLAN, plan.encode());
    }
    IncomingCall {
        index,
        instantiation: config.instantiation().clone(),
        scope,
        context,
    }
}
