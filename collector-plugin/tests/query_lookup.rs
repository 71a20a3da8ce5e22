//! A query node's trace lookup (`GET /api/v1/traces/{id}`) with the real binaries: a shard's answer is read
//! up to `--max-snapshot-bytes` and must be the trace's view; garbage or too much is that shard's error
//! (502 naming it, counted in `/api/v1/peers`), never relayed as 200. A real shard's trace still comes
//! through unchanged.

mod common;

use common::{CollectorProcess, QueryNodeProcess, get_json};
use dei_collector_bench::loadgen::template;
use prost::Message;
use std::net::SocketAddr;
use std::time::Duration;

/// A stand-in shard: no snapshot (404), and every trace lookup answered 200 with `body`.
async fn fake_shard(body: &'static [u8]) -> String {
    let app = axum::Router::new().route(
        "/api/v1/traces/{id}",
        axum::routing::get(move || async move { ([(http::header::CONTENT_TYPE, "application/json")], body) }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}")
}

/// GET `path`: status and body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let r = reqwest::get(format!("http://{addr}{path}")).await.expect("get");
    (r.status().as_u16(), r.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shards_garbage_or_oversized_trace_answer_is_a_502_naming_it() {
    let shard = CollectorProcess::start(&[]);
    let body = template(1).0;
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", shard.http))
        .header("content-type", "application/x-protobuf")
        .body(body.clone())
        .send()
        .await
        .expect("export");
    assert!(r.status().is_success());
    let request = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(body.as_slice())
        .expect("template");
    let held = hex::encode(&request.resource_spans[0].scope_spans[0].spans[0].trace_id);
    let real = format!("http://{}", shard.api);
    let garbage = fake_shard(b"<html>not json</html>").await;
    let huge: &'static [u8] = Box::leak(vec![b'x'; 200_000].into_boxed_slice());
    let oversized = fake_shard(huge).await;
    let q = QueryNodeProcess::start(
        &[real.clone(), garbage.clone(), oversized.clone()],
        &["--max-snapshot-bytes", "100000"],
    );
    // a trace no shard holds: two shards answered 200 with what is not its view
    let missing = "0102030405060708090a0b0c0d0e0fff";
    let (status, text) = get(q.api, &format!("/api/v1/traces/{missing}")).await;
    assert_eq!(status, 502, "{text}");
    let error: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
    let error = error["error"].as_str().expect("error");
    assert!(
        error.contains(&format!("{garbage}: the answer is not a trace view")),
        "{error}"
    );
    assert!(
        error.contains(&format!("{oversized}: the answer is larger than 100000 bytes")),
        "{error}"
    );
    // counted per shard, in /api/v1/peers as of the next pull
    let counted = common::eventually(Duration::from_secs(10), || {
        let peers = get_json(q.api, "/api/v1/peers");
        peers["peers"][1]["bad_trace_answers"] == 1 && peers["peers"][2]["bad_trace_answers"] == 1
    });
    assert!(counted, "{}", get_json(q.api, "/api/v1/peers"));
    // the trace the real shard holds comes through, the same as the shard's own answer
    let (status, text) = get(q.api, &format!("/api/v1/traces/{held}")).await;
    assert_eq!(status, 200, "{text}");
    let view: serde_json::Value = serde_json::from_str(&text).expect("trace view");
    assert_eq!(view, shard.get_json(&format!("/api/v1/traces/{held}")));
}

/// A stand-in shard whose snapshot starts (200, one byte of body) and never ends.
async fn stalling_shard() -> String {
    let app = axum::Router::new().route(
        "/api/v1/snapshot",
        axum::routing::get(|| async {
            let first = futures::stream::once(async { Ok::<_, std::convert::Infallible>(bytes::Bytes::from("{")) });
            let body = axum::body::Body::from_stream(futures::StreamExt::chain(first, futures::stream::pending()));
            ([(http::header::CONTENT_TYPE, "application/json")], body)
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_whose_snapshot_body_times_out_is_named_in_the_error() {
    let shard = stalling_shard().await;
    let q = QueryNodeProcess::start(std::slice::from_ref(&shard), &["--timeout-ms", "300"]);
    let (status, text) = get(q.api, "/api/v1/peers").await;
    assert_eq!(status, 200, "{text}");
    let peers: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(peers["partial"], true, "{peers:#}");
    let error = peers["peers"][0]["error"].as_str().expect("an error");
    // the body's timeout, named by the endpoint like every other pull error
    assert!(error.starts_with(&format!("{shard}/api/v1/snapshot: ")), "{error}");
    assert!(error.contains("timed out"), "{error}");
}
