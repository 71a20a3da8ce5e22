//! Carrying the index state in the OpenTelemetry [`Context`].

use crate::fault::FaultPlan;
use crate::index::Index;
use crate::scope::RequestScope;
use opentelemetry::Context;
use std::sync::{Arc, OnceLock};

/// The index of the RPC being sent or served, as a context value, with its wire form (encoded at most once,
/// when first asked for: the propagator writes it and the instrumentation records it on spans).
#[derive(Clone, Debug)]
struct PropagatedIndex {
    index: Index,
    wire: OnceLock<Arc<str>>,
}

/// `cx` with `index`, whose wire form `wire` is already known (an extracted value: decoding accepts only
/// canonical text, so the text read is what encoding would give).
pub(crate) fn with_decoded_index(cx: &Context, index: Index, wire: &str) -> Context {
    debug_assert_eq!(index.encode(), wire);
    cx.with_value(PropagatedIndex {
        index,
        wire: OnceLock::from(Arc::from(wire)),
    })
}

thread_local! {
    /// The wire form of the index that [`inject_with_index`] is writing on this thread, in place of the
    /// context's.
    static OUTGOING: std::cell::RefCell<Option<Arc<str>>> = const { std::cell::RefCell::new(None) };
}

/// The index an [`inject_with_index`] call on this thread is writing, if one is under way.
pub(crate) fn outgoing_wire() -> Option<Arc<str>> {
    OUTGOING.try_with(|o| o.borrow().clone()).ok().flatten()
}

/// Restores the previous outgoing index when an [`inject_with_index`] call ends (however it ends).
struct Restore(Option<Arc<str>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        let _ = OUTGOING.try_with(|o| *o.borrow_mut() = previous);
    }
}

/// Injects `cx` through `propagator` as if `cx` carried the index whose wire form is `wire` as its
/// [`dei_index`](DeiContextExt::dei_index): what an instrumentation does for every outgoing call, without
/// building a context for it (a context value costs a copy of the context's map and two allocations). The
/// [`DeiPropagator`](crate::DeiPropagator) (alone or in a composite) writes `wire`; any other propagator
/// sees `cx` as it is.
///
/// ```
/// use dei_propagator::{DeiContextExt, Index, inject_with_index};
/// use opentelemetry::Context;
/// use std::collections::HashMap;
/// let index = Index::decode("1.AQEBAQEBAQE1").unwrap();
/// let mut headers = HashMap::new();
/// inject_with_index(&dei_propagator::composite_propagator(), &Context::new(), &index.encode_shared(), &mut headers);
/// assert_eq!(headers["dei"], "1.AQEBAQEBAQE1");
/// ```
pub fn inject_with_index(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    cx: &Context,
    wire: &Arc<str>,
    injector: &mut dyn opentelemetry::propagation::Injector,
) {
    let previous = OUTGOING
        .try_with(|o| o.borrow_mut().replace(wire.clone()))
        .ok()
        .flatten();
    let _restore = Restore(previous);
    propagator.inject_context(cx, injector);
}

/// An index read by an [`extract_with_index`] call: the index and its wire form.
type Extracted = Option<(Index, Arc<str>)>;

thread_local! {
    /// While an [`extract_with_index`] call runs on this thread: `Some`, holding the index it read, if any.
    static CAPTURE: std::cell::RefCell<Option<Extracted>> = const { std::cell::RefCell::new(None) };
}

/// Hands an extracted index to the [`extract_with_index`] call under way on this thread; gives it back when
/// there is none (the propagator then puts it in the context).
pub(crate) fn capture_extracted(index: Index, wire: &str) -> Option<Index> {
    let mut index = Some(index);
    let _ = CAPTURE.try_with(|c| {
        if let Some(slot) = &mut *c.borrow_mut() {
            *slot = index.take().map(|i| (i, Arc::from(wire)));
        }
    });
    index
}

/// Restores an outer [`extract_with_index`] call's slot when an inner one ends (however it ends).
struct RestoreCapture(Option<Extracted>);

impl Drop for RestoreCapture {
    fn drop(&mut self) {
        let previous = self.0.take();
        let _ = CAPTURE.try_with(|c| *c.borrow_mut() = previous);
    }
}

/// Extracts through `propagator` as [`TextMapPropagator::extract`] does, except that the index the
/// [`DeiPropagator`](crate::DeiPropagator) reads is handed back with its wire form instead of being put in the
/// context (a context value costs a copy of the context's map and two allocations): for a server that opens
/// the request's scope with it at once. The fault plan, the trace context and the baggage are in the context
/// as usual.
///
/// ```
/// use dei_propagator::{DeiContextExt, extract_with_index};
/// use std::collections::HashMap;
/// let headers = HashMap::from([("dei".to_string(), "1.AQEBAQEBAQE1".to_string())]);
/// let (cx, index) = extract_with_index(&dei_propagator::composite_propagator(), &headers);
/// let (index, wire) = index.expect("an index");
/// assert_eq!((index.encode(), &*wire), ("1.AQEBAQEBAQE1".to_string(), "1.AQEBAQEBAQE1"));
/// assert!(cx.dei_index().is_none());
/// ```
///
/// [`TextMapPropagator::extract`]: opentelemetry::propagation::TextMapPropagator::extract
pub fn extract_with_index(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    extractor: &dyn opentelemetry::propagation::Extractor,
) -> (Context, Extracted) {
    let previous = CAPTURE.try_with(|c| c.borrow_mut().replace(None)).ok().flatten();
    let _restore = RestoreCapture(previous);
    let cx = propagator.extract(extractor);
    let extracted = CAPTURE.try_with(|c| c.borrow_mut().take()).ok().flatten().flatten();
    (cx, extracted)
}

mod sealed {
    /// Only [`opentelemetry::Context`] implements [`super::DeiContextExt`].
    pub trait Sealed {}
    impl Sealed for opentelemetry::Context {}
}

/// Typed access to the DEI values in an OpenTelemetry [`Context`].
///
/// ```
/// use dei_propagator::{DeiContextExt, Index, Instantiation, RequestScope};
/// use opentelemetry::Context;
/// let cx = Context::new().with_dei_scope(RequestScope::root(Instantiation::dei()));
/// assert!(cx.dei_scope().is_some());
/// let index = Index::decode("1.AQEBAQEBAQE1").unwrap();
/// let cx = cx.with_dei_index(index.clone());
/// assert_eq!(cx.dei_index(), Some(&index));
/// assert_eq!(cx.dei_index_wire().map(|w| &**w), Some("1.AQEBAQEBAQE1"));
/// ```
///
/// The trait is sealed: it is implemented for [`Context`] only.
pub trait DeiContextExt: sealed::Sealed {
    /// This context with the request scope that issues indexes.
    fn with_dei_scope(&self, scope: RequestScope) -> Context;
    /// The request scope, if one was opened.
    fn dei_scope(&self) -> Option<&RequestScope>;
    /// This context with the index to propagate: an outgoing RPC's own index, or an extracted incoming one.
    fn with_dei_index(&self, index: Index) -> Context;
    /// The index to propagate, if any.
    fn dei_index(&self) -> Option<&Index>;
    /// The wire form of [`dei_index`](Self::dei_index), encoded once for the context value (or kept from the
    /// text it was extracted from); shared, so recording it on a span copies nothing.
    fn dei_index_wire(&self) -> Option<&Arc<str>>;
    /// This context with a fault plan for the RPCs issued under it.
    fn with_fault_plan(&self, plan: FaultPlan) -> Context;
    /// The fault plan, if any.
    fn fault_plan(&self) -> Option<&FaultPlan>;
}

impl DeiContextExt for Context {
    fn with_dei_scope(&self, scope: RequestScope) -> Context {
        self.with_value(scope)
    }

    fn dei_scope(&self) -> Option<&RequestScope> {
        self.get::<RequestScope>()
    }

    fn with_dei_index(&self, index: Index) -> Context {
        self.with_value(PropagatedIndex {
            index,
            wire: OnceLock::new(),
        })
    }

    fn dei_index(&self) -> Option<&Index> {
        self.get::<PropagatedIndex>().map(|p| &p.index)
    }

    fn dei_index_wire(&self) -> Option<&Arc<str>> {
        self.get::<PropagatedIndex>()
            .map(|p| p.wire.get_or_init(|| crate::wire::encode_shared(&p.index)))
    }

    fn with_fault_plan(&self, plan: FaultPlan) -> Context {
        self.with_value(plan)
    }

    fn fault_plan(&self) -> Option<&FaultPlan> {
        self.get::<FaultPlan>()
    }
}
