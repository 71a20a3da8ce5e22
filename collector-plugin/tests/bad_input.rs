//! Malformed input gets 400 / INVALID_ARGUMENT with a clear message, is counted, and the collector keeps
//! serving.

mod common;

use dei_collector::server::{self, Running, ServerConfig};
use prost::Message;
use std::io::Write;

const GOOD: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
 "scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"x","kind":3,
 "startTimeUnixNano":"1","endTimeUnixNano":"2",
 "attributes":[{"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1"}}]}]}]}]}"#;

/// (name, content type, content encoding, body, expected message).
type Case = (&'static str, &'static str, Option<&'static str>, Vec<u8>, &'static str);

async fn start(strict: bool) -> Running {
    let mut config = ServerConfig::ephemeral();
    config.ingest.max_body_bytes = 4096;
    config.ingest.strict_attributes = strict;
    server::start(config).await.unwrap()
}

async fn post(r: &Running, content_type: &str, encoding: Option<&str>, body: Vec<u8>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", r.http_addr))
        .header("content-type", content_type)
        .body(body);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

async fn grpc(r: &Running, body: Vec<u8>) -> Result<(), tonic::Status> {
    common::grpc_export(r.grpc_addr, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_rejections() {
    let r = start(false).await;
    let cases: Vec<Case> = vec![
        (
            "bad protobuf",
            "application/x-protobuf",
            None,
            vec![0xff, 0xff, 0xff, 0xff, 0x0f],
            "malformed protobuf",
        ),
        (
            "bad JSON",
            "application/json",
            None,
            b"{\"resourceSpans\": [".to_vec(),
            "malformed OTLP/JSON",
        ),
        (
            "wrong content type",
            "text/plain",
            None,
            GOOD.as_bytes().to_vec(),
            "unsupported Content-Type",
        ),
        (
            "oversized body",
            "application/json",
            None,
            vec![b' '; 5000],
            "exceeds the limit of 4096 bytes",
        ),
        (
            "gzip bomb",
            "application/json",
            Some("gzip"),
            gzip(&vec![b' '; 100_000]),
            "exceeds the limit of 4096 bytes",
        ),
        (
            "bad gzip",
            "application/json",
            Some("gzip"),
            b"not gzip".to_vec(),
            "invalid gzip",
        ),
        (
            "unknown encoding",
            "application/json",
            Some("br"),
            GOOD.as_bytes().to_vec(),
            "unsupported Content-Encoding",
        ),
        (
            "bogus span id",
            "application/json",
            None,
            GOOD.replace("0102030405060708\"", "01020304\"").into_bytes(),
            "spanId must be 8 bytes",
        ),
        (
            "zero trace id",
            "application/json",
            None,
            GOOD.replace("0102030405060708090a0b0c0d0e0f10", "00000000000000000000000000000000")
                .into_bytes(),
            "traceId must be 16 bytes and not all zero",
        ),
        (
            "non-hex id",
            "application/json",
            None,
            GOOD.replace("0102030405060708\"", "zz02030405060708\"").into_bytes(),
            "malformed OTLP/JSON",
        ),
    ];
    for (name, ct, enc, body, expect) in cases {
        let (status, text) = post(&r, ct, enc, body).await;
        assert_eq!(status, 400, "{name}: {text}");
        assert!(text.contains(expect), "{name}: {text}");
        assert!(
            text.contains("\"code\":3") || ct == "application/x-protobuf",
            "{name}: {text}"
        );
    }
    let c = r.collector.counters().snapshot();
    assert_eq!(c.rejected_bad_protobuf, 1);
    assert_eq!(c.rejected_bad_json, 2);
    assert_eq!(c.rejected_content_type, 1);
    assert_eq!(c.rejected_bad_gzip, 1);
    assert_eq!(c.rejected_unsupported_encoding, 1);
    assert_eq!(c.rejected_too_large, 2);
    assert_eq!(c.rejected_bad_ids, 2);
    // still serving
    let (status, text) = post(&r, "application/json", None, GOOD.as_bytes().to_vec()).await;
    assert_eq!(status, 200, "{text}");
    let (status, _) = post(&r, "application/json", Some("gzip"), gzip(GOOD.as_bytes())).await;
    assert_eq!(status, 200);
    assert_eq!(r.collector.counters().snapshot().requests_accepted, 2);
    assert_eq!(r.collector.stats().tree_nodes, 2);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_attribute_types_skip_the_spans_dei_data_or_are_rejected_in_strict_mode() {
    let bad = GOOD.replace(
        r#"[{"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1"}}]"#,
        r#"[{"key":"dei.index","value":{"stringValue":"1.AQEBAQEBAQE1"}},
            {"key":"dei.count","value":{"stringValue":"three"}},
            {"key":"dei.payload.digest","value":{"stringValue":"XYZ"}},
            {"key":"dei.ambiguous","value":{"intValue":"1"}},
            {"key":"dei.stack","value":{"arrayValue":{"values":[{"intValue":"3"}]}}},
            {"key":"dei.fault","value":{"stringValue":"g99"}}]"#,
    );
    let r = start(false).await;
    let (status, text) = post(&r, "application/json", None, bad.clone().into_bytes()).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("5 dei attribute(s) ignored"), "{text}");
    assert!(text.contains("the DEI data of 1 span(s) skipped"), "{text}");
    assert!(
        text.contains("dei.count") && text.contains("expected an int, got string"),
        "{text}"
    );
    let c = r.collector.counters().snapshot();
    assert_eq!(
        (c.attributes_rejected, c.spans_dei_skipped, c.spans_received),
        (5, 1, 1)
    );
    // the span's DEI data, its well-formed index included, was skipped: the tree has only its root
    assert_eq!(r.collector.stats().tree_nodes, 1);
    r.shutdown().await;

    let r = start(true).await;
    let (status, text) = post(&r, "application/json", None, bad.into_bytes()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("invalid dei attribute"), "{text}");
    assert_eq!(r.collector.counters().snapshot().rejected_bad_attributes, 1);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_rejections() {
    let r = start(false).await;
    let e = grpc(&r, vec![0xff, 0xff, 0xff, 0xff, 0x0f]).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("malformed protobuf"), "{e:?}");
    let e = grpc(&r, vec![0x0a; 10_000]).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("exceeds the limit"), "{e:?}");
    let mut req =
        serde_json::from_str::<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest>(GOOD)
            .unwrap();
    req.resource_spans[0].scope_spans[0].spans[0].trace_id = vec![1, 2, 3];
    let e = grpc(&r, req.encode_to_vec()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("traceId must be 16 bytes"), "{e:?}");
    let good =
        serde_json::from_str::<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest>(GOOD)
            .unwrap();
    grpc(&r, good.encode_to_vec()).await.expect("still serving");
    let c = r.collector.counters().snapshot();
    assert_eq!(
        (
            c.rejected_bad_protobuf,
            c.rejected_too_large,
            c.rejected_bad_ids,
            c.requests_accepted
        ),
        (1, 1, 1, 1)
    );
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_rejects_bad_queries() {
    let r = start(false).await;
    let get = |path: &str| {
        let url = format!("http://{}{path}", r.api_addr);
        async move {
            let resp = reqwest::get(url).await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let (s, t) = get("/api/v1/tree/node?index=2.bogus").await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("invalid index"));
    let (s, t) = get("/api/v1/traces/xyz").await;
    assert_eq!(s, 400, "{t}");
    let (s, t) = get("/api/v1/diff?a_from=5").await;
    assert_eq!(s, 400, "{t}");
    // a side is a list of traces or a window: both at once would leave the window unapplied
    let id = "0102030405060708090a0b0c0d0e0f10";
    let (s, t) = get(&format!("/api/v1/diff?a_traces={id}&a_from=0&a_to=10&b_traces={id}")).await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("side a: give a_traces or a_from and a_to, not both"), "{t}");
    let (s, t) = get(&format!("/api/v1/diff?a_traces={id}&b_traces={id}&b_to=10")).await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("side b:"), "{t}");
    // a list that names no trace is no selection
    let (s, t) = get(&format!("/api/v1/diff?a_traces=,,,&b_traces={id}")).await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("a_traces=\\\",,,\\\" names no trace"), "{t}");
    let (s, t) = get(&format!("/api/v1/diff?a_traces={id}&b_traces={id}")).await;
    assert_eq!(s, 200, "{t}");
    let (s, t) = get("/api/v1/analyses/projection?instantiation=nope").await;
    assert_eq!(s, 400, "{t}");
    assert!(t.contains("filibuster"), "{t}");
    let (s, _) = get("/api/v1/graph?format=svg").await;
    assert_eq!(s, 400);
    let (s, _) = get("/api/v1/traces/0102030405060708090a0b0c0d0e0f10").await;
    assert_eq!(s, 404);
    // not a query node: a 404 like the others, with a JSON error
    let (s, t) = get("/api/v1/peers").await;
    assert_eq!(s, 404, "{t}");
    let body: serde_json::Value = serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {t}"));
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("not a query node")),
        "{body}"
    );
    let (s, t) = get("/metrics").await;
    assert_eq!(s, 200);
    assert!(t.contains("dei_collector_requests_accepted_total 0"), "{t}");
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_serves_the_web_view_and_node_traces() {
    let r = start(false).await;
    let (status, _) = post(&r, "application/json", None, GOOD.as_bytes().to_vec()).await;
    assert_eq!(status, 200);
    let get = |path: &str| {
        let url = format!("http://{}{path}", r.api_addr);
        async move {
            let resp = reqwest::get(url).await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let (s, t) = get("/ui/").await;
    assert_eq!(s, 200);
    assert!(t.contains("<title>dei-collector</title>"), "{t}");
    let (s, t) = get("/ui/vendor/cytoscape.min.js").await;
    assert_eq!(s, 200);
    assert!(t.len() > 100_000);
    let (s, t) = get("/api/v1/tree/node/traces?index=1.AQEBAQEBAQE1").await;
    assert_eq!(s, 200, "{t}");
    assert!(t.contains("0102030405060708090a0b0c0d0e0f10"), "{t}");
    let (s, t) = get("/api/v1/search").await;
    assert_eq!(s, 404, "no report configured: {t}");
    r.shutdown().await;
}
