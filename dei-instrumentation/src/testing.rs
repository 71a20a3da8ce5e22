//! A tracer provider with an in-memory span exporter, for functional tests (feature `testing`).
//!
//! [`telemetry`] installs, once per process, the composite propagator (W3C trace context, W3C baggage, DEI)
//! as the global propagator, and a global tracing subscriber whose OpenTelemetry layer exports to an
//! [`InMemorySpanExporter`] through a simple (synchronous) span processor, so a span is readable as soon as
//! it ends. Tests that run in parallel share it: select spans by trace id ([`TestTelemetry::trace`]).
//! [`telemetry_with`] also hands every span to a second processor, e.g. a batch processor exporting over OTLP
//! to a collector under test.

use opentelemetry::trace::{TraceId, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, InMemorySpanExporter, SdkTracerProvider, SpanData, SpanProcessor};
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
        // an error here (a poisoned lock: a thread panicked while exporting) must not read as "no spans"
        self.exporter
            .get_finished_spans()
            .expect("the in-memory exporter's spans are readable")
    }

    /// The finished spans of one trace.
    pub fn trace(&self, trace_id: TraceId) -> Vec<SpanData> {
        self.spans()
            .into_iter()
            .filter(|s| s.span_context.trace_id() == trace_id)
            .collect()
    }

    /// The in-memory exporter every span goes to.
    pub fn exporter(&self) -> &InMemorySpanExporter {
        &self.exporter
    }

    /// The tracer provider (to create spans directly with the OpenTelemetry API).
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }
}

static TELEMETRY: OnceLock<TestTelemetry> = OnceLock::new();

/// Installs the test telemetry on first use and returns it.
pub fn telemetry() -> &'static TestTelemetry {
    TELEMETRY.get_or_init(|| install(None::<BatchSpanProcessor>))
}

/// Like [`telemetry`], and every span also goes to `processor`. Only the call that installs the telemetry adds
/// the processor: call this before anything else in the process uses [`telemetry`].
pub fn telemetry_with(processor: impl SpanProcessor + 'static) -> &'static TestTelemetry {
    let mut processor = Some(processor);
    let installed = TELEMETRY.get_or_init(|| install(processor.take()));
    if processor.is_some() {
        tracing::warn!("dei: the test telemetry was installed already; the extra span processor is not used");
    }
    installed
}

/// Like [`telemetry`], and every span also goes in batches (every 10 ms) over OTLP/HTTP to `otlp_url` (a
/// collector's `/v1/traces`): for tests that read spans both in memory and through a collector.
pub fn telemetry_over_otlp_http(otlp_url: &str) -> &'static TestTelemetry {
    use opentelemetry_otlp::WithExportConfig as _;
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(otlp_url)
        .build()
        .expect("OTLP exporter");
    let batch = BatchSpanProcessor::builder(otlp)
        .with_batch_config(
            opentelemetry_sdk::trace::BatchConfigBuilder::default()
                .with_scheduled_delay(std::time::Duration::from_millis(10))
                .build(),
        )
        .build();
    telemetry_with(batch)
}

fn install<P: SpanProcessor + 'static>(extra: Option<P>) -> TestTelemetry {
    dei_propagator::install_global_propagator();
    let exporter = InMemorySpanExporter::default();
    let mut builder = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_resource(Resource::builder().with_service_name("dei-test").build());
    if let Some(p) = extra {
        builder = builder.with_span_processor(p);
    }
    let provider = builder.build();
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
}

/// The value of a string, integer or boolean attribute of a span, as text.
pub fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}
