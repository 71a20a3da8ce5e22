//! Carrying the index state in the OpenTelemetry [`Context`].

use crate::fault::FaultPlan;
use crate::index::Index;
use crate::scope::RequestScope;
use opentelemetry::Context;

/// The index of the RPC being sent or served, as a context value.
#[derive(Clone, Debug)]
struct PropagatedIndex(Index);

/// Typed access to the DEI values in an OpenTelemetry [`Context`].
///
/// ```
/// use dei_propagator::{DeiContextExt, Index, Instantiation, RequestScope};
/// use opentelemetry::Context;
/// let cx = Context::new().with_dei_scope(RequestScope::root(Instantiation::dei()));
/// assert!(cx.dei_scope().is_some());
/// assert_eq!(cx.with_dei_index(Index::root()).dei_index(), Some(&Index::root()));
/// ```
pub trait DeiContextExt {
    /// This context with the request scope that issues indexes.
    fn with_dei_scope(&self, scope: RequestScope) -> Context;
    /// The request scope, if one was opened.
    fn dei_scope(&self) -> Option<&RequestScope>;
    /// This context with the index to propagate: an outgoing RPC's own index, or an extracted incoming one.
    fn with_dei_index(&self, index: Index) -> Context;
    /// The index to propagate, if any.
    fn dei_index(&self) -> Option<&Index>;
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
        self.with_value(PropagatedIndex(index))
    }

    fn dei_index(&self) -> Option<&Index> {
        self.get::<PropagatedIndex>().map(|p| &p.0)
    }

    fn with_fault_plan(&self, plan: FaultPlan) -> Context {
        self.with_value(plan)
    }

    fn fault_plan(&self) -> Option<&FaultPlan> {
        self.get::<FaultPlan>()
    }
}
