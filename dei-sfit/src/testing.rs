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
//! searches (and oracles) one after another, never concurrently.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! let spans = dei_sfit::testing::in_process_spans();
//! // let report = dei_sfit::Search::new(options, spans).run(&test).await?;
//! # let _ = spans;
//! # }
//! ```

use crate::source::InMemorySpans;

/// The span source for services running in this process, with the test telemetry installed (once per
/// process; later calls return a source over the same exporter).
pub fn in_process_spans() -> InMemorySpans {
    let telemetry = dei_instrumentation::testing::telemetry();
    InMemorySpans::new(telemetry.exporter().clone()).with_provider(telemetry.provider().clone())
}
