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
    /// While an [`inject_with_index`] call runs on this thread: `true`, with the wire form of its index in the
    /// buffer (kept between calls, so that writing it allocates nothing once the buffer has grown).
    static OUTGOING: std::cell::RefCell<(bool, String)> = const { std::cell::RefCell::new((false, String::new())) };
}

/// Runs `f` with the wire form of the index an [`inject_with_index`] call on this thread is writing, if one is
/// under way.
pub(crate) fn with_outgoing(f: impl FnOnce(Option<&str>)) {
    let mut f = Some(f);
    let _ = OUTGOING.try_with(|o| {
        let o = o.try_borrow().ok();
        let wire = o.as_ref().filter(|o| o.0).map(|o| o.1.as_str());
        if let Some(f) = f.take() {
            f(wire);
        }
    });
    // The thread's locals are gone: no call is under way.
    if let Some(f) = f {
        f(None);
    }
}

/// Ends an [`inject_with_index`] call (however it ends).
struct EndOutgoing;

impl Drop for EndOutgoing {
    fn drop(&mut self) {
        let _ = OUTGOING.try_with(|o| {
            if let Ok(mut o) = o.try_borrow_mut() {
                o.0 = false;
            }
        });
    }
}

/// Injects `cx` through `propagator` as if `cx` carried `index` as its
/// [`dei_index`](DeiContextExt::dei_index): what an instrumentation does for every outgoing call, without
/// building a context for it (a context value costs a copy of the context's map and two allocations) and
/// with the wire form written into a buffer of the thread's. The [`DeiPropagator`](crate::DeiPropagator)
/// (alone or in a composite) writes `index`; any other propagator sees `cx` as it is.
///
/// ```
/// use dei_propagator::{Index, inject_with_index};
/// use opentelemetry::Context;
/// use std::collections::HashMap;
/// let index = Index::decode("1.AQEBAQEBAQE1").unwrap();
/// let mut headers = HashMap::new();
/// inject_with_index(&dei_propagator::composite_propagator(), &Context::new(), &index, &mut headers);
/// assert_eq!(headers["dei"], "1.AQEBAQEBAQE1");
/// ```
pub fn inject_with_index(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    cx: &Context,
    index: &Index,
    injector: &mut dyn opentelemetry::propagation::Injector,
) {
    inject_outgoing(propagator, cx, index, None, injector);
}

/// [`inject_with_index`] for a caller that has made the index's wire form already (`wire`, the text
/// [`Index::encode`] writes for `index`, such as the shared form it records on a span): it is copied, not
/// encoded again. `wire` is written as it is (cut, like any index, to the propagator's limits: see
/// [`DeiPropagator`](crate::DeiPropagator)): it must be `index`'s.
///
/// ```
/// use dei_propagator::{Index, inject_with_index_wire};
/// use opentelemetry::Context;
/// use std::collections::HashMap;
/// let index = Index::decode("1.AQEBAQEBAQE1").unwrap();
/// let wire = index.encode_shared();
/// let mut headers = HashMap::new();
/// inject_with_index_wire(&dei_propagator::composite_propagator(), &Context::new(), &index, &wire, &mut headers);
/// assert_eq!(headers["dei"], "1.AQEBAQEBAQE1");
/// ```
pub fn inject_with_index_wire(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    cx: &Context,
    index: &Index,
    wire: &str,
    injector: &mut dyn opentelemetry::propagation::Injector,
) {
    inject_outgoing(propagator, cx, index, Some(wire), injector);
}

/// [`inject_with_index`], with the wire form of `index` when the caller has it.
fn inject_outgoing(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    cx: &Context,
    index: &Index,
    wire: Option<&str>,
    injector: &mut dyn opentelemetry::propagation::Injector,
) {
    let started = OUTGOING
        .try_with(|o| match o.try_borrow_mut() {
            // Not nested in another call (a propagator that injects from inside its own inject).
            Ok(mut o) if !o.0 => {
                o.1.clear();
                match wire {
                    Some(wire) => o.1.push_str(wire),
                    None => crate::wire::encode_into(index, &mut o.1),
                }
                o.0 = true;
                true
            }
            _ => false,
        })
        .unwrap_or(false);
    if !started {
        propagator.inject_context(&cx.with_dei_index(index.clone()), injector);
        return;
    }
    let _end = EndOutgoing;
    propagator.inject_context(cx, injector);
}

/// An index read by an [`extract_with_index`] call.
type Extracted = Option<Index>;

thread_local! {
    /// While an [`extract_with_index`] call runs on this thread: `Some`, holding the index it read, if any.
    static CAPTURE: std::cell::RefCell<Option<Extracted>> = const { std::cell::RefCell::new(None) };
}

/// Hands an extracted index to the [`extract_with_index`] call under way on this thread; gives it back when
/// there is none (the propagator then puts it in the context).
pub(crate) fn capture_extracted(index: Index) -> Option<Index> {
    let mut index = Some(index);
    let _ = CAPTURE.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut()
            && let Some(slot) = &mut *c
        {
            *slot = index.take();
        }
    });
    index
}

/// Restores an outer [`extract_with_index`] call's slot when an inner one ends (however it ends).
struct RestoreCapture(Option<Extracted>);

impl Drop for RestoreCapture {
    fn drop(&mut self) {
        let previous = self.0.take();
        let _ = CAPTURE.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                *c = previous;
            }
        });
    }
}

/// Extracts through `propagator` as [`TextMapPropagator::extract`] does, except that the index the
/// [`DeiPropagator`](crate::DeiPropagator) reads is handed back with its wire form instead of being put in the
/// context (a context value costs a copy of the context's map and two allocations): for a server that opens
/// the request's scope with it at once. The fault plan, the trace context and the baggage are in the context
/// as usual. (The index's wire form is [`Index::encode`]: decoding accepts only canonical text.)
///
/// ```
/// use dei_propagator::{DeiContextExt, extract_with_index};
/// use std::collections::HashMap;
/// let headers = HashMap::from([("dei".to_string(), "1.AQEBAQEBAQE1".to_string())]);
/// let (cx, index) = extract_with_index(&dei_propagator::composite_propagator(), &headers);
/// assert_eq!(index.map(|i| i.encode()).as_deref(), Some("1.AQEBAQEBAQE1"));
/// assert!(cx.dei_index().is_none());
/// ```
///
/// [`TextMapPropagator::extract`]: opentelemetry::propagation::TextMapPropagator::extract
pub fn extract_with_index(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    extractor: &dyn opentelemetry::propagation::Extractor,
) -> (Context, Extracted) {
    let previous = CAPTURE
        .try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.replace(None)))
        .ok()
        .flatten();
    let _restore = RestoreCapture(previous);
    let cx = propagator.extract(extractor);
    let extracted = CAPTURE
        .try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.take()))
        .ok()
        .flatten()
        .flatten();
    (cx, extracted)
}

thread_local! {
    /// While an [`extract_with_index_counted`] call runs on this thread: the address of the extractor it reads
    /// and how many values that extractor holds under `dei`. Taken by the first read of the `dei` key from that
    /// extractor.
    static INDEX_VALUES: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

/// The address that identifies an extractor while a call reads it (the data pointer of the reference).
fn address(extractor: &dyn opentelemetry::propagation::Extractor) -> usize {
    std::ptr::from_ref(extractor).cast::<()>().addr()
}

/// How many values `extractor` holds under `dei`, when the [`extract_with_index_counted`] call under way on
/// this thread said so for this extractor (once: the answer is taken).
pub(crate) fn index_values(extractor: &dyn opentelemetry::propagation::Extractor) -> Option<usize> {
    INDEX_VALUES
        .try_with(|v| match v.get() {
            Some((at, n)) if at == address(extractor) => {
                v.set(None);
                Some(n)
            }
            _ => None,
        })
        .ok()
        .flatten()
}

/// Restores an outer [`extract_with_index_counted`] call's count when an inner call ends (however it ends).
struct RestoreIndexValues(Option<(usize, usize)>);

impl Drop for RestoreIndexValues {
    fn drop(&mut self) {
        let previous = self.0;
        let _ = INDEX_VALUES.try_with(|v| v.set(previous));
    }
}

/// [`extract_with_index`] from a carrier that knows how many values it holds under `dei` (`index_values`,
/// readable or not, such as an HTTP header map's count): with none or one, the
/// [`DeiPropagator`](crate::DeiPropagator) reads the `dei` key with [`Extractor::get`] instead of
/// [`Extractor::get_all`], whose list costs an allocation on every request. With more it reads them all and
/// rejects the duplicate exactly as [`extract_with_index`] does; the result is the same in every case.
///
/// `index_values` must be the number of values `extractor` holds under `dei`, and its `get("dei")` must
/// return the first of them when it is readable (as for any carrier with one value per key). Other
/// propagators, and any other extractor read during the call, are not affected.
///
/// ```
/// use dei_propagator::extract_with_index_counted;
/// use std::collections::HashMap;
/// let headers = HashMap::from([("dei".to_string(), "1.AQEBAQEBAQE1".to_string())]);
/// let (_, index) = extract_with_index_counted(&dei_propagator::composite_propagator(), &headers, 1);
/// assert_eq!(index.map(|i| i.encode()).as_deref(), Some("1.AQEBAQEBAQE1"));
/// ```
///
/// [`Extractor::get`]: opentelemetry::propagation::Extractor::get
/// [`Extractor::get_all`]: opentelemetry::propagation::Extractor::get_all
pub fn extract_with_index_counted(
    propagator: &dyn opentelemetry::propagation::TextMapPropagator,
    extractor: &dyn opentelemetry::propagation::Extractor,
    index_values: usize,
) -> (Context, Extracted) {
    let previous = INDEX_VALUES
        .try_with(|v| v.replace(Some((address(extractor), index_values))))
        .ok()
        .flatten();
    let _restore = RestoreIndexValues(previous);
    extract_with_index(propagator, extractor)
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
