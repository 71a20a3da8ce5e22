//! What a stream's server span says about the stream, with requests from a raw tonic client (no DEI layer: the
//! `dei` values are crafted) to a real tonic server on loopback behind the DEI server layer.

mod common;

use common::*;
use dei_instrumentation::{DeiServerLayer, DeiStreaming, IncomingCall};
use dei_propagator::PayloadDigest;
use opentelemetry::Value;
use opentelemetry::trace::TraceId;
use opentelemetry_sdk::trace::SpanData;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use tonic::metadata::MetadataValue;
use tonic::transport::{Endpoint, Server};
use tonic::{Request, Response, Status};

/// Request metadata that makes `Collect` drop its request stream before reading a message.
const DROP: &str = "x-drop-unread";

/// Trace ids handed to the raw requests (each request is its own trace).
static NEXT_TRACE: AtomicU64 = AtomicU64::new(0x5700);

fn next_trace() -> TraceId {
    TraceId::from(u128::from(NEXT_TRACE.fetch_add(1, Ordering::SeqCst)))
}

/// `Collect` answers `k:index` for each message it read (the index it served the message under), or, for a
/// request with [`DROP`], drops the request stream unread and answers `dropped`; `Watch` answers once, with the
/// index its request was served under.
struct Streams;

#[tonic::async_trait]
impl pb::leaf_server::Leaf for Streams {
    async fn get(&self, _: Request<pb::Msg>) -> Result<Response<pb::Msg>, Status> {
        Err(Status::unimplemented("get"))
    }

    async fn collect(&self, request: Request<tonic::Streaming<pb::Msg>>) -> Result<Response<pb::Msg>, Status> {
        if request.metadata().contains_key(DROP) {
            drop(request);
            return Ok(Response::new(msg("dropped")));
        }
        let mut stream = DeiStreaming::new(request);
        let mut served = Vec::new();
        while let Some(m) = stream.message().await? {
            served.push(format!("{}:{}", m.k, m.index));
        }
        Ok(Response::new(msg(&served.join(" "))))
    }

    type WatchStream = futures::stream::Iter<std::vec::IntoIter<Result<pb::Msg, Status>>>;

    async fn watch(&self, _: Request<pb::Msg>) -> Result<Response<Self::WatchStream>, Status> {
        let index = IncomingCall::current()
            .map(|c| c.scope.prefix().encode())
            .unwrap_or_default();
        Ok(Response::new(futures::stream::iter(vec![Ok(msg(&index))])))
    }

    type ChatStream = Self::WatchStream;

    async fn chat(&self, _: Request<tonic::Streaming<pb::Msg>>) -> Result<Response<Self::ChatStream>, Status> {
        Err(Status::unimplemented("chat"))
    }
}

async fn serve() -> SocketAddr {
    dei_instrumentation::testing::telemetry();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let router = Server::builder()
        .layer(DeiServerLayer::new(config()))
        .add_service(pb::leaf_server::LeafServer::new(Streams));
    tokio::spawn(router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    addr
}

/// A client without the DEI layer: what it sends is what the test puts in the request.
async fn raw_client(addr: SocketAddr) -> pb::leaf_client::LeafClient<tonic::transport::Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    pb::leaf_client::LeafClient::new(channel)
}

/// Puts a sampled trace context and, when given, a `dei` value on `request`; the trace id is returned.
fn crafted<T>(request: &mut Request<T>, dei: Option<&str>) -> TraceId {
    let trace = next_trace();
    let metadata = request.metadata_mut();
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    metadata.insert("traceparent", MetadataValue::try_from(traceparent).expect("ascii"));
    if let Some(dei) = dei {
        metadata.insert("dei", MetadataValue::try_from(dei).expect("ascii"));
    }
    trace
}

/// The server span of a trace, once it ended.
async fn server_span(trace: TraceId) -> SpanData {
    let spans = spans_of(trace, 1).await;
    spans
        .into_iter()
        .find(is_server)
        .unwrap_or_else(|| panic!("a server span in trace {trace}"))
}

fn value(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

/// Sends `texts` on `Collect` with the `dei` value `dei`; the reply and the server span.
async fn collect(addr: SocketAddr, dei: Option<&str>, texts: &[&str]) -> (String, SpanData) {
    collect_with(addr, dei, texts, false).await
}

/// [`collect`], asking the handler to drop the request stream unread when `drop_unread`.
async fn collect_with(addr: SocketAddr, dei: Option<&str>, texts: &[&str], drop_unread: bool) -> (String, SpanData) {
    let messages: Vec<pb::Msg> = texts.iter().map(|t| msg(t)).collect();
    let mut request = Request::new(futures::stream::iter(messages));
    let trace = crafted(&mut request, dei);
    if drop_unread {
        request.metadata_mut().insert(DROP, MetadataValue::from_static("1"));
    }
    let reply = raw_client(addr)
        .await
        .collect(request)
        .await
        .expect("Collect")
        .into_inner()
        .text;
    (reply, server_span(trace).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_message_past_the_largest_count_is_marked_on_the_server_span() {
    let addr = serve().await;
    let overflow = dei_instrumentation::span::STREAM_COUNT_OVERFLOW;

    // A stream opened with a crafted count two below the largest: message 1 gets the largest count, messages 2
    // and 3 have none of their own and are served under it too; the span says so.
    let (reply, span) = collect(addr, Some("1.AQEBAQEBAQE4294967294~"), &["a", "b", "c"]).await;
    let max = "1.AQEBAQEBAQE4294967295~";
    assert_eq!(reply, format!("1:{max} 2:{max} 3:{max}"));
    assert_eq!(value(&span, overflow), Some(Value::Bool(true)), "{:?}", span.attributes);
    assert_eq!(attr(&span, "dei.index").as_deref(), Some("1.AQEBAQEBAQE4294967294~"));

    // A stream whose counts fit: every message its own count, and no mark.
    let (reply, span) = collect(addr, Some("1.AQEBAQEBAQE5~"), &["a", "b", "c"]).await;
    assert_eq!(reply, "1:1.AQEBAQEBAQE6~ 2:1.AQEBAQEBAQE7~ 3:1.AQEBAQEBAQE8~");
    assert_eq!(value(&span, overflow), None, "{:?}", span.attributes);

    // Server streaming: the one request is message 1, so a stream index at the largest count leaves it none.
    for (dei, served, marked) in [
        ("1.AQEBAQEBAQE4294967295~", max, Some(Value::Bool(true))),
        ("1.AQEBAQEBAQE4294967294~", max, None),
    ] {
        let mut request = Request::new(msg("w"));
        let trace = crafted(&mut request, Some(dei));
        let mut replies = raw_client(addr).await.watch(request).await.expect("Watch").into_inner();
        let reply = replies.message().await.expect("a reply").expect("one message").text;
        while replies.message().await.expect("the end").is_some() {}
        assert_eq!(reply, served, "{dei}");
        let span = server_span(trace).await;
        assert_eq!(value(&span, overflow), marked, "{dei}: {:?}", span.attributes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_stream_dropped_before_its_first_message_is_marked_incomplete_on_the_server_span() {
    let addr = serve().await;
    let (digest, incomplete) = ("dei.payload.digest", "dei.payload.digest.incomplete");
    let total = dei_instrumentation::grpc::server::incomplete_payload_digests_total;

    // A stream from a caller without DEI (no preliminary index): the digest is its first message's, so a
    // handler that drops the stream unread leaves none, and the span says why.
    let before = total();
    let (reply, span) = collect_with(addr, None, &["a", "b"], true).await;
    assert_eq!(reply, "dropped");
    assert_eq!(attr(&span, digest), None, "{:?}", span.attributes);
    assert_eq!(
        value(&span, incomplete),
        Some(Value::Bool(true)),
        "{:?}",
        span.attributes
    );
    assert!(total() > before, "counted: {before} -> {}", total());

    // The same stream read to its end: the first message's digest, no mark.
    let (reply, span) = collect(addr, None, &["a", "b"]).await;
    assert_eq!(reply, "1:1 2:1", "served in the handler's root scope");
    let first = PayloadDigest::of(&prost::Message::encode_to_vec(&msg("a")));
    assert_eq!(attr(&span, digest), Some(first.to_hex()));
    assert_eq!(value(&span, incomplete), None, "{:?}", span.attributes);

    // A stream from a DEI caller: its payload is its preliminary index's, the empty one, read or not.
    let (reply, span) = collect_with(addr, Some("1.AQEBAQEBAQE5~"), &["a", "b"], true).await;
    assert_eq!(reply, "dropped");
    assert_eq!(attr(&span, digest), Some(PayloadDigest::empty().to_hex()));
    assert_eq!(value(&span, incomplete), None, "{:?}", span.attributes);
}
