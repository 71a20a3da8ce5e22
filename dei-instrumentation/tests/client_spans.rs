//! The OpenTelemetry semantic conventions' attributes of client spans, as exported: `server.address` and
//! `server.port` (an integer) on gRPC and HTTP client spans, with real servers on loopback.

mod common;

use common::*;
use opentelemetry::Value;
use opentelemetry_sdk::trace::SpanData;

fn value(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// The one client span of a trace whose `dei.signature` is `signature`.
fn client_span(spans: &[SpanData], signature: &str) -> SpanData {
    let mut found = spans
        .iter()
        .filter(|s| is_client(s) && attr(s, "dei.signature").as_deref() == Some(signature));
    let span = found
        .next()
        .unwrap_or_else(|| panic!("a client span of {signature} in {spans:?}"));
    assert!(found.next().is_none(), "one client span of {signature}");
    span.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_spans_carry_server_address_and_port() {
    let sys = System::start().await;
    let config = sys.config.clone();

    // gRPC, a generated client that names its server (`with_origin`): the request's URI has the authority.
    let origin: http::Uri = format!("http://{}", sys.leaf).parse().expect("origin");
    let mut named = pb::leaf_client::LeafClient::with_origin(channel(sys.leaf, &config).await, origin);
    let (reply, trace) = in_root(&config, |cx| cx, async { named.get(msg("x")).await }).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get");
    assert_eq!(value(&span, "server.address"), Some(Value::from("127.0.0.1")));
    assert_eq!(
        value(&span, "server.port"),
        Some(Value::I64(i64::from(sys.leaf.port()))),
        "{:?}",
        span.attributes
    );

    // gRPC, a generated client over the channel alone: the request carries only the path (the channel adds its
    // authority below the layer), so the span names no server rather than a wrong one.
    let mut unnamed = sys.leaf_client().await;
    let (reply, trace) = in_root(&config, |cx| cx, async { unnamed.get(msg("x")).await }).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get");
    assert_eq!(value(&span, "server.address"), None);
    assert_eq!(value(&span, "server.port"), None);

    // HTTP through reqwest.
    let http = http_client(&config);
    let url = format!("http://{}/items/7", sys.leaf_http);
    let (reply, trace) = text_in_root(&config, http.get(&url)).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "GET 127.0.0.1/items/7");
    assert_eq!(value(&span, "server.address"), Some(Value::from("127.0.0.1")));
    assert_eq!(
        value(&span, "server.port"),
        Some(Value::I64(i64::from(sys.leaf_http.port()))),
        "{:?}",
        span.attributes
    );
}
