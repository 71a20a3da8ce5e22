//! What the chain tests (rotel, OpenTelemetry Collector) share: the rule for independent tools that may be
//! missing, and a small trace with DEI attributes made by two services.

use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Whether a missing independent tool fails the test (`DEI_REQUIRE_INTEROP=1`, as in CI).
pub fn required() -> bool {
    std::env::var("DEI_REQUIRE_INTEROP").is_ok_and(|v| v == "1")
}

/// Reports a missing tool: a failure when [`required`], otherwise a loud note that the test did not run.
pub fn unavailable(what: &str) {
    if required() {
        panic!("DEI_REQUIRE_INTEROP=1 but {what} is not available");
    }
    eprintln!(
        "\n!!!!!!!!!! NOT RUN: {what} is not available (set DEI_REQUIRE_INTEROP=1 to make this a failure) !!!!!!!!!!\n"
    );
}

/// The real peers (Jaeger, the Collector), for the tests that start them.
#[path = "../peers/mod.rs"]
pub mod peers;
#[allow(unused_imports)] // not every test binary that includes `common` starts peers
pub use peers::free_port;

/// The Python interpreter (`$PYTHON`, or `python3`).
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// An index element of the full DEI for a signature and payload (a fixed stack), count 1.
pub fn element(sig: &str, payload: &str) -> Element {
    let inv = InvocationSignature::new(
        Signature::from_name(sig),
        PayloadDigest::of(payload.as_bytes()),
        StackDigest([1; 32]),
    );
    Element::new(inv.element_digest(&Instantiation::dei()), 1)
}

/// frontend → users: a root span, a client span and the server span, the last two with DEI attributes.
pub fn frontend_to_users_trace(front: &SdkTracerProvider, users: &SdkTracerProvider, index: &Index) {
    let (ft, ut) = (front.tracer("t"), users.tracer("t"));
    let attrs = vec![
        KeyValue::new("dei.index", index.encode()),
        KeyValue::new("dei.signature", "users.Users/GetUser"),
        KeyValue::new("dei.depth", 1i64),
    ];
    let root = Context::current_with_span(ft.span_builder("GET /").with_kind(SpanKind::Server).start(&ft));
    let client = root.with_span(
        ft.span_builder("users.Users/GetUser")
            .with_kind(SpanKind::Client)
            .with_attributes(attrs.clone())
            .start_with_context(&ft, &root),
    );
    let server = ut
        .span_builder("users.Users/GetUser")
        .with_kind(SpanKind::Server)
        .with_attributes(attrs)
        .start_with_context(&ut, &client);
    drop(server);
    client.span().end();
    root.span().end();
}

/// Asserts that the collector's service graph (`/api/v1/graph`) has the frontend → users edge with exactly
/// `requests` requests.
pub fn assert_frontend_users_edge(c: &super::CollectorProcess, requests: u64) {
    let g = c.get_json("/api/v1/graph");
    let edges = g["edges"].as_array().cloned().unwrap_or_default();
    assert!(
        edges
            .iter()
            .any(|e| e["client"] == "frontend" && e["server"] == "users" && e["requests"] == requests),
        "{g}"
    );
}
