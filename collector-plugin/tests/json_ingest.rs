//! OTLP/JSON over HTTP takes two paths: with a forwarder it is decoded into the generated types, forwarded as
//! their protobuf encoding and analyzed from that encoding's lite view; without one it is decoded straight
//! into the lite view. The same request gives the same stats, graph and tree either way, and the forwarded
//! protobuf carries every span.

use dei_collector::server::{self, Downstream, ForwardConfig, Running, ServerConfig};
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// frontend (root) → users.Users/GetUser, client and server spans with DEI's attributes; the service names,
/// a span name and the signature are written with JSON escapes, and the timestamps both as strings and as
/// numbers.
fn request() -> String {
    let inv = InvocationSignature::new(
        Signature::from_name("users.Users/GetUser"),
        PayloadDigest::of(b"u1"),
        StackDigest([1; 32]),
    );
    let index = Index::root().child(Element::new(inv.element_digest(&Instantiation::dei()), 1));
    let attrs = format!(
        r#"[{{"key":"dei.index","value":{{"stringValue":"{}"}}}},
            {{"key":"dei.signature","value":{{"stringValue":"users.Users\/GetUser"}}}},
            {{"key":"dei.payload.digest","value":{{"stringValue":"{}"}}}},
            {{"key":"dei.stack.digest","value":{{"stringValue":"{}"}}}},
            {{"key":"dei.count","value":{{"intValue":"1"}}}},
            {{"key":"dei.depth","value":{{"intValue":1}}}},
            {{"key":"dei.instantiation","value":{{"stringValue":"dei"}}}}]"#,
        index.encode(),
        PayloadDigest::of(b"u1").to_hex(),
        StackDigest([1; 32]).to_hex()
    );
    let trace = "0102030405060708090a0b0c0d0e0f10";
    format!(
        r#"{{"resourceSpans":[
          {{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"fr\u006fntend"}}}}]}},
            "scopeSpans":[{{"scope":{{"name":"test"}},"spans":[
              {{"traceId":"{trace}","spanId":"1111111111111111","name":"GET \/","kind":2,
                "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":1700000000900000000}},
              {{"traceId":"{trace}","spanId":"2222222222222222","parentSpanId":"1111111111111111",
                "name":"users.Users/GetUser","kind":3,"startTimeUnixNano":"1700000000100000000",
                "endTimeUnixNano":"1700000000500000000","attributes":{attrs}}}]}}]}},
          {{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"users"}}}}]}},
            "scopeSpans":[{{"spans":[
              {{"traceId":"{trace}","spanId":"3333333333333333","parentSpanId":"2222222222222222",
                "name":"users.Users\/GetUser","kind":2,"startTimeUnixNano":"1700000000200000000",
                "endTimeUnixNano":"1700000000400000000","attributes":{attrs},"unknownField":[1,{{"x":null}}]}}]}}]}}]}}"#
    )
}

async fn post_json(r: &Running, body: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://{}/v1/traces", r.http_addr))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the receiver answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_is_read_the_same_with_and_without_a_forwarder() {
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let sink = dei_collector_bench::sink::start(any, any)
        .await
        .expect("a sink on loopback");
    let mut forwarding = ServerConfig::ephemeral();
    forwarding.forward = Some(ForwardConfig::new(Downstream::Grpc(format!(
        "http://{}",
        sink.grpc_addr
    ))));
    let forwarding = server::start(forwarding).await.expect("a forwarding collector");
    let alone = server::start(ServerConfig::ephemeral())
        .await
        .expect("a collector without a forwarder");
    assert!(alone.collector.forwarder().is_none());

    let body = request();
    assert_eq!(post_json(&forwarding, &body).await, 200);
    assert_eq!(post_json(&alone, &body).await, 200);

    // every span reaches the sink as protobuf
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.counts.spans.load(Ordering::Relaxed) < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sink.counts.spans.load(Ordering::Relaxed), 3);

    let (f, a) = (forwarding.collector.stats(), alone.collector.stats());
    assert_eq!((f.counters.spans_received, a.counters.spans_received), (3, 3));
    assert_eq!((f.counters.attributes_rejected, a.counters.attributes_rejected), (0, 0));
    assert_eq!(f.tree_nodes, 2, "the root and users.Users/GetUser");
    assert_eq!(a.tree_nodes, f.tree_nodes);
    let graph = forwarding.collector.graph();
    assert_eq!(alone.collector.graph(), graph);
    assert!(
        graph
            .edges
            .iter()
            .any(|e| &*e.client == "frontend" && &*e.server == "users" && e.requests == 1),
        "the escaped service name is read: {graph:?}"
    );
    forwarding.shutdown().await;
    alone.shutdown().await;
}
