//! The OpenTelemetry semantic conventions' attributes of client spans, as exported: `server.address` and
//! `server.port` (an integer) on gRPC and HTTP client spans, with real servers on loopback.

mod common;

use common::*;
use dei_instrumentation::DeiClientLayer;
use opentelemetry::Value;
use opentelemetry_sdk::trace::SpanData;

fn value(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// Asserts the span's `server.address` and `server.port` (an integer).
fn assert_server(span: &SpanData, address: Option<&str>, port: Option<i64>) {
    let address = address.map(|a| Value::from(a.to_string()));
    assert_eq!(value(span, "server.address"), address, "{:?}", span.attributes);
    assert_eq!(
        value(span, "server.port"),
        port.map(Value::I64),
        "{:?}",
        span.attributes
    );
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

/// A channel connected to the leaf service, and a client layer told that its server is `server` (which need not
/// be where the channel goes: the layer only names it on spans).
async fn leaf_channel_and_layer(sys: &System, server: &str) -> (tonic::transport::Channel, DeiClientLayer) {
    let connected = tonic::transport::Endpoint::from_shared(format!("http://{}", sys.leaf))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let server: http::Uri = server.parse().expect("uri");
    (connected, DeiClientLayer::new(sys.config.clone()).server(&server))
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
    assert_server(&span, Some("127.0.0.1"), Some(i64::from(sys.leaf.port())));

    // gRPC, a generated client over the channel alone: the request carries only the path (the channel adds its
    // authority below the layer), so the span names no server rather than a wrong one.
    let mut unnamed = sys.leaf_client().await;
    let (reply, trace) = in_root(&config, |cx| cx, async { unnamed.get(msg("x")).await }).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get");
    assert_server(&span, None, None);

    // HTTP through reqwest.
    let http = http_client(&config);
    let url = format!("http://{}/items/7", sys.leaf_http);
    let (reply, trace) = text_in_root(&config, http.get(&url)).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "GET 127.0.0.1/items/7");
    assert_server(&span, Some("127.0.0.1"), Some(i64::from(sys.leaf_http.port())));
}

/// A generated client made the usual way (`new(channel)`, the layer over the channel) sends only the path: a
/// layer given the endpoint's URI (`server`) names the server on its spans; one without names none. The index
/// is the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usual_clients_name_the_server_the_layer_was_given() {
    use tonic::transport::Endpoint;
    use tower::ServiceBuilder;

    let sys = System::start().await;
    let config = sys.config.clone();
    let endpoint = Endpoint::from_shared(format!("http://{}", sys.leaf)).expect("endpoint");
    let connected = endpoint.connect().await.expect("connect");
    let told = ServiceBuilder::new()
        .layer(DeiClientLayer::new(config.clone()).server(endpoint.uri()))
        .service(connected.clone());
    let untold = ServiceBuilder::new()
        .layer(DeiClientLayer::new(config.clone()))
        .service(connected);

    let mut spans = Vec::new();
    // One call site for both clients, so that their calls have the same stack and, if the server does not
    // enter it, the same index.
    for channel in [told, untold] {
        let mut client = pb::leaf_client::LeafClient::new(channel);
        let (reply, trace) = in_root(&config, |cx| cx, async { client.get(msg("x")).await }).await;
        assert!(reply.is_ok(), "{reply:?}");
        spans.push(client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get"));
    }
    let [told, untold] = <[SpanData; 2]>::try_from(spans).expect("two spans");

    assert_server(&told, Some("127.0.0.1"), Some(i64::from(sys.leaf.port())));
    assert_server(&untold, None, None);

    let index = attr(&told, "dei.index");
    assert!(index.as_deref().is_some_and(|i| i.starts_with("1.")), "{index:?}");
    assert_eq!(index, attr(&untold, "dei.index"), "the server does not enter the index");
}

/// A layer given the server by a URI without a port records the scheme's default; the request's own URI (a
/// client made `with_origin`) wins over the layer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_uri_wins_over_the_layers_server_and_a_default_port_is_the_schemes() {
    use tower::ServiceBuilder;

    let sys = System::start().await;
    let config = sys.config.clone();
    let (connected, layer) = leaf_channel_and_layer(&sys, "https://movies.internal").await;

    // The layer's server, with https's port.
    let mut usual =
        pb::leaf_client::LeafClient::new(ServiceBuilder::new().layer(layer.clone()).service(connected.clone()));
    let (reply, trace) = in_root(&config, |cx| cx, async { usual.get(msg("x")).await }).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get");
    assert_server(&span, Some("movies.internal"), Some(443));

    // The request's own.
    let origin: http::Uri = format!("http://{}", sys.leaf).parse().expect("origin");
    let mut named =
        pb::leaf_client::LeafClient::with_origin(ServiceBuilder::new().layer(layer).service(connected), origin);
    let (reply, trace) = in_root(&config, |cx| cx, async { named.get(msg("x")).await }).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get");
    assert_server(&span, Some("127.0.0.1"), Some(i64::from(sys.leaf.port())));
}

/// An IPv6 server is named without the brackets its URL writes it with (`[::1]` is `::1`), as the semantic
/// conventions write `server.address` beside `server.port`: on a gRPC span (the layer's server) and on an HTTP
/// span (a call to a port nothing listens on: the span still says where it went).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_server_address_has_no_brackets() {
    use tower::ServiceBuilder;

    let sys = System::start().await;
    let config = sys.config.clone();
    let (connected, layer) = leaf_channel_and_layer(&sys, "http://[::1]:50051").await;
    let mut client = pb::leaf_client::LeafClient::new(ServiceBuilder::new().layer(layer).service(connected));
    let (reply, trace) = in_root(&config, |cx| cx, async { client.get(msg("x")).await }).await;
    assert!(reply.is_ok(), "{reply:?}");
    let span = client_span(&spans_of(trace, 2).await, "deitest.Leaf/Get");
    assert_server(&span, Some("::1"), Some(50051));

    // Port 9 (discard) on loopback: refused, or unreachable without IPv6; either way the call fails.
    let http = http_client(&config);
    let (reply, trace) = text_in_root(&config, http.get("http://[::1]:9/items/7")).await;
    assert!(reply.is_err(), "{reply:?}");
    let span = client_span(&spans_of(trace, 1).await, "GET [::1]/items/7");
    assert_server(&span, Some("::1"), Some(9));
}
