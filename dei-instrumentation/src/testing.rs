//! A tracer provider with an in-memory span exporter, for functional tests (feature `testing`).
//!
//! [`telemetry`] installs, once per process, the composite propagator (W3C trace context, W3C baggage, DEI)
//! as the global propagator, and a global tracing subscriber whose OpenTelemetry layer exports to an
//! [`InMemorySpanExporter`] through a simple (synchronous) span processor, so a span is readable as soon as
//! it ends. Tests that run in parallel share it: select spans by trace id ([`TestTelemetry::trace`]).

use opentelemetry::trace::{TraceId, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use std::sync::OnceLock;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

/// The process-wide test telemetry.
#[derive(Debug)]
pub struct TestTelemetry {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

impl TestTelemetry {
    /// Every finished span so far.
    pub fn spans(&self) -> Vec<SpanData> {
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().unwrap_or_default()
    }

    /// The finished spans of one trace.
    pub fn trace(&self, trace_id: TraceId) -> Vec<SpanData> {
        self.spans()
            .into_iter()
            .filter(|s| s.span_context.trace_id() == trace_id)
            .collect()
    }

    /// The tracer provider (to create spans directly with the OpenTelemetry API).
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }
}

/// Installs the test telemetry on first use and returns it.
pub fn telemetry() -> &'static TestTelemetry {
    static TELEMETRY: OnceLock<TestTelemetry> = OnceLock::new();
    TELEMETRY.get_or_init(|| {
        dei_propagator::install_global_propagator();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .with_resource(Resource::builder().with_service_name("dei-test").build())
            .build();
        let tracer = provider.tracer("dei-test");
        // INFO and above: the RPC spans, not the TRACE-level internals of h2, hyper and tower.
        let otel = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(LevelFilter::INFO);
        let subscriber = tracing_subscriber::registry().with(otel);
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            tracing::warn!("dei: a global tracing subscriber was already set; test spans may not be exported");
        }
        opentelemetry::global::set_tracer_provider(provider.clone());
        TestTelemetry { exporter, provider }
    })
}

/// The value of a string, integer or boolean attribute of a span, as text.
pub fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}
