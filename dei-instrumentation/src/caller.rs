//! The context an outgoing call is made in, and the checks that keep a lost request scope from going unnoticed.
//!
//! A client call takes its request scope (the counters of the request it belongs to) from the current
//! OpenTelemetry [`Context`]. Two idioms carry that context into other tasks:
//!
//! - `dei_propagator::spawn` (and `spawn_blocking`, `spawn_thread`): the `Context` itself;
//! - `tokio::spawn(fut.in_current_span())` or `.instrument(span)`: the tracing span, whose OpenTelemetry
//!   context (through tracing-opentelemetry) holds the scope of the request the span belongs to. A call that
//!   finds no scope in the current `Context` looks there too.
//!
//! A plain `tokio::spawn` carries neither, and its calls start new roots: their indexes then name nothing that
//! a fault plan of the request can reach. Where that can be seen, it is made loud:
//!
//! - a call made with no scope while the same thread is polling a request's handler (a scope-less `Context`
//!   attached by hand, a nested executor) is counted in the process (read with [`calls_without_scope_total`];
//!   not exported as a metric) and warned about once, with the fix;
//! - the first call checks that the global propagator writes the index at all, and warns once if it does not
//!   (the default global propagator is a no-op: `dei_propagator::install_global_propagator()` was forgotten).
//!
//! A task started with a plain `tokio::spawn` runs outside any request's poll and cannot be told from a
//! background job: use one of the idioms above, or open a root scope for a background job
//! ([`crate::root_context`]).

use dei_propagator::DeiContextExt;
use opentelemetry::Context;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use tracing_opentelemetry::OpenTelemetrySpanExt;

static CALLS_WITHOUT_SCOPE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// How many request handlers this thread is polling right now (nested servers in one process count each).
    static SERVING: Cell<u32> = const { Cell::new(0) };
}

/// Client calls made with no request scope while their thread was serving a request, since the process started
/// (an in-process count, not exported as a metric).
pub fn calls_without_scope_total() -> u64 {
    CALLS_WITHOUT_SCOPE.load(Ordering::Relaxed)
}

/// The context a client call made now belongs to, and whether it holds a request scope: the current `Context`
/// when it holds a scope, else the current tracing span's OpenTelemetry context when that does, else the
/// current `Context` (the call starts a new root). A call that is indexed without a scope then runs the checks
/// in the module docs ([`check_unscoped`]); one that is not indexed at all ([`crate::config::Unsampled::Off`])
/// does not.
pub(crate) fn caller_lookup() -> (Context, bool) {
    let cx = Context::current();
    if cx.dei_scope().is_some() {
        return (cx, true);
    }
    let span = tracing::Span::current();
    if !span.is_disabled() {
        let span_cx = span.context();
        if span_cx.dei_scope().is_some() {
            return (span_cx, true);
        }
    }
    (cx, false)
}

/// The checks for a call indexed without a request scope (see the module docs).
pub(crate) fn check_unscoped() {
    check_propagator();
    if SERVING.with(Cell::get) > 0 {
        let total = CALLS_WITHOUT_SCOPE.fetch_add(1, Ordering::Relaxed) + 1;
        if total == 1 {
            tracing::warn!(
                "dei: a client call was made without a request scope while its thread was serving a request; it \
                 starts a new root, so its index does not belong to the request and its planned faults are not \
                 applied. Keep the request's OpenTelemetry Context: spawn with dei_propagator::spawn (or \
                 spawn_blocking, spawn_thread), or with tokio::spawn(fut.in_current_span()); do not attach a \
                 Context without the scope. Counted by dei_instrumentation::calls_without_scope_total(); this \
                 warning is shown once"
            );
        }
    }
}

/// Warns once if the global propagator does not write the `dei` index (header or baggage).
fn check_propagator() {
    static CHECKED: Once = Once::new();
    CHECKED.call_once(|| {
        if !global_propagator_writes_index() {
            tracing::warn!(
                "dei: the global OpenTelemetry propagator does not write the `dei` index, so services downstream \
                 start new roots. Call dei_propagator::install_global_propagator() at start-up (the default \
                 global propagator is a no-op)"
            );
        }
    });
}

/// True when the global propagator injects an index into a carrier (as the `dei` header or baggage entry).
pub(crate) fn global_propagator_writes_index() -> bool {
    let cx = Context::new().with_dei_index(dei_propagator::Index::root());
    let mut carrier = std::collections::HashMap::<String, String>::new();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut carrier));
    carrier.contains_key(dei_propagator::INDEX_KEY)
        || carrier
            .get("baggage")
            .is_some_and(|b| b.split(',').any(|e| e.trim().starts_with("dei=")))
}

pin_project_lite::pin_project! {
    /// A request handler's future, marked on its thread while it is polled (see [`caller_lookup`]).
    pub(crate) struct Serving<F> {
        #[pin]
        inner: F,
    }
}

impl<F> Serving<F> {
    pub(crate) fn new(inner: F) -> Self {
        Serving { inner }
    }
}

impl<F: Future> Future for Serving<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let _serving = ServingGuard::enter();
        self.project().inner.poll(cx)
    }
}

/// Marks the thread as serving a request until dropped.
pub(crate) struct ServingGuard(());

impl ServingGuard {
    pub(crate) fn enter() -> Self {
        SERVING.with(|s| s.set(s.get().saturating_add(1)));
        ServingGuard(())
    }
}

impl Drop for ServingGuard {
    fn drop(&mut self) {
        let _ = SERVING.try_with(|s| s.set(s.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_propagator_check_tells_a_forgotten_install_from_an_installed_one() {
        // The default global propagator: writes nothing.
        opentelemetry::global::set_text_map_propagator(opentelemetry::propagation::TextMapCompositePropagator::new(
            Vec::new(),
        ));
        assert!(!global_propagator_writes_index());
        dei_propagator::install_global_propagator();
        assert!(global_propagator_writes_index());
    }

    #[test]
    fn the_serving_mark_nests_and_ends_with_its_guard() {
        assert_eq!(SERVING.with(Cell::get), 0);
        {
            let _outer = ServingGuard::enter();
            let _inner = ServingGuard::enter();
            assert_eq!(SERVING.with(Cell::get), 2);
        }
        assert_eq!(SERVING.with(Cell::get), 0);
    }
}
