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
