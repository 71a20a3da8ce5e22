//! Every rejection is counted under its reason, including those tonic's framing and decompression make before
//! the collector's handler sees a message (a gzip bomb, a compression flag without `grpc-encoding`, a
//! truncated frame, an unsupported encoding), gRPC requests over the concurrent-connection cap, and OTLP/HTTP
//! clients that disconnect mid-body or stall after their headers.

use bytes::Bytes;
use dei_collector::server::GRPC_EXPORT_PATH;
use dei_collector::server::{self, Running, ServerConfig};
use dei_collector::views::CountersSnapshot;
use std::io::Write;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A gRPC length-prefixed frame: compression flag, a length (which may lie), the bytes.
fn frame(compressed: bool, claimed_len: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![u8::from(compressed)];
    f.extend_from_slice(&claimed_len.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Sends one raw gRPC request; returns (grpc-status, grpc-message).
async fn raw_grpc(r: &Running, encoding: Option<&str>, body: Vec<u8>) -> (String, String) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", r.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}{GRPC_EXPORT_PATH}", r.grpc_addr))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(e) = encoding {
        req = req.header("grpc-encoding", e);
    }
    let req = req
        .body(tonic::body::Body::new(http_body_util::Full::new(Bytes::from(body))))
        .unwrap();
    let resp = channel.oneshot(req).await.unwrap();
    let get = |k: &str| {
        resp.headers()
            .get(k)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    if resp.headers().contains_key("grpc-status") {
        return (get("grpc-status"), percent_decode(&get("grpc-message")));
    }
    // not trailers-only: the status is in the trailers
    let trailers = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .trailers()
        .cloned()
        .unwrap_or_default();
    let t = |k: &str| {
        trailers
            .get(k)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    (t("grpc-status"), percent_decode(&t("grpc-message")))
}

fn percent_decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match (b[i], s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

fn counters(r: &Running) -> CountersSnapshot {
    r.collector.counters().snapshot()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_framing_and_compression_rejections_are_counted() {
    let mut config = ServerConfig::ephemeral();
    config.ingest.max_body_bytes = 4096;
    let r = server::start(config).await.unwrap();

    let bomb = gzip(&vec![0x0a; 200_000]);
    assert!(bomb.len() < 4096);
    let (code, msg) = raw_grpc(&r, Some("gzip"), frame(true, bomb.len() as u32, &bomb)).await;
    assert_eq!(code, "3", "gzip bomb: {msg}");
    assert!(msg.contains("exceeds the limit of 4096 bytes"), "{msg}");
    assert_eq!(counters(&r).rejected_too_large, 1);

    let (code, msg) = raw_grpc(&r, None, frame(true, 3, b"abc")).await;
    assert_eq!(code, "3", "compressed flag without grpc-encoding: {msg}");
    assert!(msg.contains("malformed gRPC message framing"), "{msg}");
    assert_eq!(counters(&r).rejected_bad_framing, 1);

    let (code, msg) = raw_grpc(&r, None, frame(false, 100, &[0x0a; 10])).await;
    assert_eq!(code, "3", "truncated frame: {msg}");
    assert!(msg.contains("malformed gRPC message framing"), "{msg}");
    assert_eq!(counters(&r).rejected_bad_framing, 2);

    let (code, msg) = raw_grpc(&r, Some("br"), frame(true, 3, b"abc")).await;
    assert_eq!(code, "12", "unsupported encoding: {msg}");
    assert_eq!(counters(&r).rejected_unsupported_encoding, 1);

    // a good request still goes through, counted as accepted, not as a rejection
    let (code, msg) = raw_grpc(&r, None, frame(false, 0, b"")).await;
    assert_eq!(code, "0", "{msg}");
    let c = counters(&r);
    assert_eq!(c.requests_accepted, 1);
    assert_eq!(
        (c.rejected_bad_protobuf, c.rejected_content_type, c.rejected_bad_gzip),
        (0, 0, 0),
        "{c:?}"
    );
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_mid_body_disconnects_and_header_stalls_are_counted() {
    let mut config = ServerConfig::ephemeral();
    config.limits.read_timeout = Some(Duration::from_secs(1));
    let r = server::start(config).await.unwrap();

    // a client that disconnects mid-body
    let mut s = TcpStream::connect(r.http_addr).await.unwrap();
    s.write_all(b"POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"resourceSpans\"")
        .await
        .unwrap();
    drop(s);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while counters(&r).rejected_incomplete_body == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the disconnect was never counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        counters(&r).rejected_content_type,
        0,
        "not counted as a content-type error"
    );

    // a client that sends part of its headers and stalls is closed after the read timeout
    let mut s = TcpStream::connect(r.http_addr).await.unwrap();
    s.write_all(b"POST /v1/traces HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("the stalled connection was closed");
    assert!(counters(&r).connections_timed_out >= 1);
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_counted() {
    let mut config = ServerConfig::ephemeral();
    config.limits.max_connections = 3;
    let r = server::start(config).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(r.http_addr).await.unwrap();
        // a complete request on each, so the server has certainly accepted it
        s.write_all(b"GET /nope HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let mut b = [0u8; 12];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"HTTP/1.1 404");
        held.push(s);
    }
    let mut extra = TcpStream::connect(r.http_addr).await.unwrap();
    let _ = extra.write_all(b"GET /nope HTTP/1.1\r\nhost: x\r\n\r\n").await;
    let mut buf = Vec::new();
    let _ = extra.read_to_end(&mut buf).await;
    assert!(
        buf.is_empty(),
        "the fourth connection got no answer: {}",
        String::from_utf8_lossy(&buf)
    );
    assert_eq!(counters(&r).connections_refused, 1);
    drop(held);
    // room again
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = TcpStream::connect(r.http_addr).await.unwrap();
        let _ = s.write_all(b"GET /nope HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let mut b = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut b)).await;
        if b.starts_with(b"HTTP/1.1 404") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slots were never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_bodies_over_the_buffer_cap_are_refused_as_retryable() {
    let mut config = ServerConfig::ephemeral();
    config.ingest.max_body_bytes = 8192;
    config.ingest.max_buffered_bytes = 1000;
    let r = server::start(config).await.unwrap();
    let (code, msg) = raw_grpc(&r, None, frame(false, 3000, &[0x0a; 3000])).await;
    assert_eq!(code, "14", "UNAVAILABLE: {msg}");
    assert!(msg.contains("buffering its limit of 1000 request bytes"), "{msg}");
    let c = counters(&r);
    assert_eq!((c.rejected_overloaded, c.rejected_bad_framing), (1, 0), "{c:?}");
    assert_eq!(
        r.collector.buffered_bytes(),
        0,
        "the refused body's bytes were given back"
    );
    // a request within the cap is accepted
    let (code, msg) = raw_grpc(&r, None, frame(false, 0, b"")).await;
    assert_eq!(code, "0", "{msg}");
    assert_eq!(r.collector.buffered_bytes(), 0);
    r.shutdown().await;
}

/// POSTs an OTLP/HTTP body; returns the status and the body.
async fn post(r: &Running, content_type: &str, gzipped: bool, body: Vec<u8>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", r.http_addr))
        .header("content-type", content_type)
        .body(body);
    if gzipped {
        req = req.header("content-encoding", "gzip");
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// An `ExportTraceServiceRequest` of `n` empty spans (2 bytes each on the wire, 160 decoded).
fn empty_spans(n: usize) -> Vec<u8> {
    let spans = [0x12, 0x00].repeat(n);
    let mut scope = vec![0x12];
    prost::encoding::encode_varint(spans.len() as u64, &mut scope);
    scope.extend_from_slice(&spans);
    let mut request = vec![0x0a];
    prost::encoding::encode_varint(scope.len() as u64, &mut request);
    request.extend_from_slice(&scope);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_whose_decoded_view_would_pass_their_budget_are_refused_and_counted() {
    let r = server::start(ServerConfig::ephemeral()).await.unwrap();
    // 2 MB of empty spans: 8 KiB gzipped, about 160 MB decoded without a budget.
    let body = empty_spans(1_000_000);
    let zipped = gzip(&body);
    assert!(zipped.len() < 16 * 1024, "{}", zipped.len());
    let expected = "too many spans, attributes, events or array values for its size";

    let (status, text) = post(&r, "application/x-protobuf", true, zipped.clone()).await;
    assert_eq!(status, 400, "{text}");
    assert_eq!(counters(&r).rejected_too_large, 1);
    let (code, msg) = raw_grpc(&r, Some("gzip"), frame(true, zipped.len() as u32, &zipped)).await;
    assert_eq!(code, "3", "INVALID_ARGUMENT: {msg}");
    assert!(msg.contains(expected), "{msg}");
    assert_eq!(counters(&r).rejected_too_large, 2);
    // OTLP/JSON: `{}` per span
    let json = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        vec!["{}"; 500_000].join(",")
    );
    let (status, text) = post(&r, "application/json", false, json.into_bytes()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains(expected), "{text}");
    let c = counters(&r);
    assert_eq!(
        (
            c.rejected_too_large,
            c.rejected_bad_protobuf,
            c.rejected_bad_json,
            c.requests_accepted
        ),
        (3, 0, 0, 0),
        "{c:?}"
    );
    assert_eq!(
        r.collector.buffered_bytes(),
        0,
        "the refused bodies' bytes were given back"
    );
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decompressed_bodies_take_their_share_of_the_buffer_cap() {
    let mut config = ServerConfig::ephemeral();
    config.ingest.max_buffered_bytes = 10_000;
    let r = server::start(config).await.unwrap();
    // A valid, empty request: an unknown field of 50,000 zero bytes, which the decoder skips.
    let mut body = vec![0x12];
    prost::encoding::encode_varint(50_000, &mut body);
    body.resize(body.len() + 50_000, 0);
    let zipped = gzip(&body);
    assert!(zipped.len() < 1_000, "{}", zipped.len());

    let (status, text) = post(&r, "application/x-protobuf", true, zipped.clone()).await;
    assert_eq!(status, 503, "{text}");
    let (code, msg) = raw_grpc(&r, Some("gzip"), frame(true, zipped.len() as u32, &zipped)).await;
    assert_eq!(code, "14", "UNAVAILABLE: {msg}");
    assert!(msg.contains("decompressed messages included"), "{msg}");
    let c = counters(&r);
    assert_eq!((c.rejected_overloaded, c.requests_accepted), (2, 0), "{c:?}");
    assert_eq!(
        r.collector.buffered_bytes(),
        0,
        "the refused bodies' bytes were given back"
    );
    // Within the cap, the same request compressed is accepted, and its bytes are given back after.
    let mut small = vec![0x12];
    prost::encoding::encode_varint(4_000, &mut small);
    small.resize(small.len() + 4_000, 0);
    let (status, text) = post(&r, "application/x-protobuf", true, gzip(&small)).await;
    assert_eq!(status, 200, "{text}");
    let zipped = gzip(&small);
    let (code, msg) = raw_grpc(&r, Some("gzip"), frame(true, zipped.len() as u32, &zipped)).await;
    assert_eq!(code, "0", "{msg}");
    assert_eq!(counters(&r).requests_accepted, 2);
    assert_eq!(r.collector.buffered_bytes(), 0);
    r.shutdown().await;
}
