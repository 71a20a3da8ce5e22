//! A full forwarding queue refuses with a retryable status, and real OTLP exporters (the Python SDK's
//! OTLP/HTTP exporter, the Rust opentelemetry-otlp gRPC exporter) retry the refused batch until it is
//! accepted and delivered once the queue drains.
//!
//! Needs the Python SDK (`opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-http`); with
//! `DEI_REQUIRE_INTEROP=1` (CI) a missing SDK fails the test, otherwise the test says loudly that it did not
//! run.

mod common;

use common::chain::{python, unavailable};
use common::{Downstream, full_collector};
use dei_collector::server;
use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry_otlp::{RetryPolicy, SpanExporter, WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Exports one span with the SDK's exporter (a 60 s retry deadline) and fails unless the export succeeded.
const PY: &str = r#"
import sys
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

results = []
class Recording(OTLPSpanExporter):
    def export(self, spans):
        r = super().export(spans)
        results.append(r)
        return r

p = TracerProvider(resource=Resource.create({"service.name": "py-retry"}))
p.add_span_processor(SimpleSpanProcessor(Recording(endpoint=sys.argv[1], timeout=60)))
with p.get_tracer("t").start_as_current_span("refused-then-retried"):
    pass
p.shutdown()
print(results)
sys.exit(0 if results == [SpanExportResult.SUCCESS] else 1)
"#;

/// Waits until the collector has refused at least one request for a full queue.
async fn wait_for_refusal(running: &server::Running) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while running.collector.counters().snapshot().rejected_queue_full == 0 {
        assert!(Instant::now() < deadline, "the exporter was never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Names of the spans the downstream received, with duplicates.
fn delivered_names(downstream: &Downstream) -> Vec<String> {
    downstream
        .received
        .lock()
        .unwrap()
        .requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_grpc_exporter_retries_refused_batches_until_the_queue_drains() {
    let (mut downstream, running) = full_collector().await;
    let endpoint = format!("http://{}", running.grpc_addr);
    let handle = tokio::runtime::Handle::current();
    let export = tokio::task::spawn_blocking(move || {
        let _g = handle.enter();
        let exporter = SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(60))
            .with_retry_policy(
                RetryPolicy::default()
                    .with_max_retries(100)
                    .with_max_delay(Duration::from_millis(500)),
            )
            .build()
            .unwrap();
        let provider = SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name("rust-retry").build())
            .with_simple_exporter(exporter)
            .build();
        // the span's end exports it, retrying while refused
        provider.tracer("t").in_span("rust-refused-then-retried", |_| {});
        provider.shutdown()
    });
    wait_for_refusal(&running).await;
    let c = running.collector.counters().snapshot();
    assert_eq!(
        (c.requests_accepted, c.spans_received),
        (1, 10),
        "the refused batch was not analyzed"
    );
    downstream.restart().await;
    assert_eq!(downstream.wait_for_spans(11, Duration::from_secs(60)).await, 11);
    assert_eq!(
        delivered_names(&downstream)
            .iter()
            .filter(|n| *n == "rust-refused-then-retried")
            .count(),
        1
    );
    export.await.unwrap().expect("the provider shut down cleanly");
    let c = running.collector.counters().snapshot();
    assert_eq!((c.requests_accepted, c.spans_received), (2, 11), "{c:?}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_exporter_retries_refused_batches_until_the_queue_drains() {
    let has_sdk = Command::new(python())
        .args(["-c", "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        return unavailable("the Python OpenTelemetry SDK with the OTLP/HTTP exporter");
    }
    let (mut downstream, running) = full_collector().await;

    let child = Command::new(python())
        .args(["-c", PY, &format!("http://{}/v1/traces", running.http_addr)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    // the exporter is refused (HTTP 503 with Retry-After) at least once while the queue is full
    wait_for_refusal(&running).await;
    let c = running.collector.counters().snapshot();
    assert_eq!(
        (c.requests_accepted, c.spans_received),
        (1, 10),
        "the refused batch was not analyzed"
    );

    downstream.restart().await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "the exporter's retry succeeded: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(downstream.wait_for_spans(11, Duration::from_secs(20)).await, 11);
    let names = delivered_names(&downstream);
    assert_eq!(
        names.iter().filter(|n| *n == "refused-then-retried").count(),
        1,
        "the retried span was delivered once: {names:?}"
    );
    let c = running.collector.counters().snapshot();
    assert!(
        c.rejected_queue_full >= 1 && c.spans_refused == c.rejected_queue_full,
        "{c:?}"
    );
    assert_eq!((c.requests_accepted, c.spans_received), (2, 11), "{c:?}");
    assert_eq!(c.forward_spans_sent, 11, "{c:?}");
    running.shutdown().await;
}
