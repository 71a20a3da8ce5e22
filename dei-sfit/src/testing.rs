//! Test support (feature `testing`): the in-process span source in one call.
//!
//! [`in_process_spans`] builds on
//! [`dei_instrumentation::testing::telemetry`]: once per process it installs the global propagator (W3C trace
//! context, W3C baggage, DEI), a tracer provider whose span processor is *simple* (a span is exported as it
//! ends, so an execution's spans are there when the test returns; a batch processor would make the search
//! wait for, or miss, them), its in-memory exporter, the global tracer provider
//! (`opentelemetry::global::set_tracer_provider`) and a global tracing subscriber exporting INFO and above
//! (the RPC spans, not the debug spans of h2, hyper and tower). It returns an [`InMemorySpans`] reading that
//! exporter.
//!
//! The services must run in the same process (their spans go to the global subscriber) and must accept
//! fault plans: `DeiConfig::builder().faults(Faults::Accept)`; plans are off by default, and a search whose
//! services drop them injects nothing ([`Report::nothing_injected`](crate::Report::nothing_injected)).
//!
//! One search at a time per process: the source clears the shared exporter when an execution begins, so run
//! searches (and oracles) one after another, never concurrently. Within one search, executions may run in
//! parallel ([`SearchOptions::parallelism`](crate::SearchOptions::parallelism)): the first call also adds a
//! [`SpanRouter`] to the tracer provider, from which each execution reads the spans of its own trace. When the
//! test telemetry was installed before (by a direct call of `dei_instrumentation::testing::telemetry`), the
//! router cannot be added; parallel executions then filter the exporter's spans by trace instead.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let spans = dei_sfit::testing::in_process_spans();
//! // let report = dei_sfit::Search::new(options, spans).run(&test).await?;
//! # let _ = spans;
//! # }
//! ```

use crate::source::{InMemorySpans, SpanRouter};
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use std::sync::OnceLock;

/// The span source for services running in this process, with the test telemetry installed (once per
/// process; later calls return a source over the same exporter and router).
pub fn in_process_spans() -> InMemorySpans {
    static ROUTER: OnceLock<Option<SpanRouter>> = OnceLock::new();
    let router = ROUTER.get_or_init(|| {
        let router = SpanRouter::new();
        let telemetry = dei_instrumentation::testing::telemetry_with(router.clone());
        // the router is the provider's only if it sees a span end
        let before = router.ended();
        telemetry
            .provider()
            .tracer("dei-sfit")
            .start("dei-sfit: span router probe")
            .end();
        if router.ended() > before {
            Some(router)
        } else {
            tracing::warn!(
                "dei-sfit: the test telemetry was installed before in_process_spans(): parallel executions \
                 filter the exporter's spans by trace (every read copies them all)"
            );
            None
        }
    });
    let telemetry = dei_instrumentation::testing::telemetry();
    let spans = InMemorySpans::new(telemetry.exporter().clone()).with_provider(telemetry.provider().clone());
    match router {
        Some(r) => spans.with_router(r.clone()),
        None => spans,
    }
}
