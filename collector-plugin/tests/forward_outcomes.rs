//! What the forwarder makes of the downstream's answers, with the real binary: a success that carries OTLP's
//! `partial_success` counts its rejected spans as dropped (not sent) and logs the downstream's message, over
//! OTLP/HTTP (protobuf and JSON answers) and OTLP/gRPC.

mod common;

use common::{CollectorProcess, Downstream};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use serde_json::Value;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The collector binary with its log (stderr) read into a channel, killed on drop.
struct Collector {
    /// Held for its lifetime: the process is killed when it is dropped.
    _process: CollectorProcess,
    http: String,
    api: String,
    log: mpsc::Receiver<String>,
}

impl Collector {
    fn start(extra: &[&str]) -> Collector {
        let (process, log) = CollectorProcess::start_logged(extra);
        Collector {
            http: process.http.to_string(),
            api: process.api.to_string(),
            _process: process,
            log,
        }
    }

    async fn export(&self, request: &ExportTraceServiceRequest) {
        let r = reqwest::Client::new()
            .post(format!("http://{}/v1/traces", self.http))
            .header("content-type", "application/x-protobuf")
            .body(request.encode_to_vec())
            .send()
            .await
            .expect("export");
        assert!(r.status().is_success(), "{}", r.status());
    }

    async fn get(&self, path: &str) -> String {
        reqwest::get(format!("http://{}{path}", self.api))
            .await
            .expect("api")
            .text()
            .await
            .expect("api body")
    }

    async fn counters(&self) -> Value {
        let stats: Value = serde_json::from_str(&self.get("/api/v1/stats").await).expect("stats json");
        stats["counters"].clone()
    }

    /// Waits until sent and dropped spans add up to `spans` and returns the counters.
    async fn settled(&self, spans: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let c = self.counters().await;
            let n = |k: &str| c[k].as_u64().unwrap_or(0);
            if n("forward_spans_sent") + n("forward_spans_dropped_rejected") >= spans || Instant::now() > deadline {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The first log line containing `what`, waiting up to `timeout`.
    fn logged(&self, what: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.log.recv_timeout(left) {
                Ok(l) if l.contains(what) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

/// A request of `n` spans of one trace.
fn spans(n: u8, trace: u8) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (1..=n)
                    .map(|i| Span {
                        trace_id: vec![trace; 16],
                        span_id: vec![0, 0, 0, 0, 0, 0, 1, i],
                        name: "op".into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// An OTLP/HTTP receiver that answers every export 200 with `body` as `content_type`.
async fn http_downstream(content_type: &'static str, body: Vec<u8>) -> String {
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move || {
            let body = body.clone();
            async move { ([(http::header::CONTENT_TYPE, content_type)], body) }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}/v1/traces")
}

/// Checks that of 10 spans, the 4 the downstream rejected are counted as dropped, in the stats and on
/// `/metrics`, and that its message is logged.
async fn check_partial(c: &Collector) {
    c.export(&spans(10, 7)).await;
    let counters = c.settled(10).await;
    assert_eq!(counters["forward_spans_sent"], 6, "{counters}");
    assert_eq!(counters["forward_spans_dropped_rejected"], 4, "{counters}");
    let metrics = c.get("/metrics").await;
    assert!(
        metrics.contains("dei_collector_forward_spans_dropped_rejected_total 4"),
        "{metrics}"
    );
    let warning = c
        .logged("partial success", Duration::from_secs(10))
        .expect("a warning about the partial success");
    assert!(
        warning.contains("WARN") && warning.contains("rejected 4 of 10") && warning.contains("quota exceeded"),
        "{warning}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_over_http_is_counted_as_dropped_and_logged() {
    let answer = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 4,
            error_message: "quota exceeded".into(),
        }),
    };
    let protobuf = http_downstream("application/x-protobuf", answer.encode_to_vec()).await;
    let c = Collector::start(&["--forward-http", &protobuf]);
    check_partial(&c).await;
    // OTLP/JSON: rejectedSpans is an int64, a string in proto3 JSON
    let json = br#"{"partialSuccess":{"rejectedSpans":"4","errorMessage":"quota exceeded"}}"#.to_vec();
    let json = http_downstream("application/json", json).await;
    let c = Collector::start(&["--forward-http", &json]);
    check_partial(&c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_over_grpc_is_counted_as_dropped_and_logged() {
    let downstream = Downstream::start().await;
    downstream.received.lock().expect("lock").answer_partial = Some((4, "quota exceeded".into()));
    let c = Collector::start(&["--forward-grpc", &downstream.endpoint()]);
    check_partial(&c).await;
    assert_eq!(downstream.received.lock().expect("lock").span_ids().len(), 10);
}

/// An OTLP/HTTP receiver that answers its first export 503 (retried) and every later one 400 (dropped).
async fn unavailable_then_rejecting_downstream() -> String {
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move || {
            let calls = calls.clone();
            async move {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    (http::StatusCode::SERVICE_UNAVAILABLE, "busy")
                } else {
                    (http::StatusCode::BAD_REQUEST, "unexpected EOF")
                }
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}/v1/traces")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_right_after_a_retry_warning_is_logged_and_so_is_one_within_the_window() {
    let url = unavailable_then_rejecting_downstream().await;
    let c = Collector::start(&["--forward-http", &url, "--forward-workers", "1"]);
    c.export(&spans(10, 7)).await;
    let retried = c
        .logged("forwarding to", Duration::from_secs(10))
        .expect("the retry's warning");
    assert!(retried.contains("retrying with backoff"), "{retried}");
    // the drop follows the retry by one backoff (50 ms): it is logged all the same
    let dropped = c
        .logged("forwarding to", Duration::from_secs(5))
        .expect("the drop's warning, right after the retry's");
    assert!(
        dropped.contains("the downstream rejected the batch, dropped") && dropped.contains("HTTP 400"),
        "{dropped}"
    );
    // a second drop within the window is logged when the window ends
    c.export(&spans(10, 8)).await;
    let counters = c.settled(20).await;
    assert_eq!(counters["forward_spans_dropped_rejected"], 20, "{counters}");
    let again = c
        .logged("forwarding to", Duration::from_secs(15))
        .expect("the second drop's warning, when the window ends");
    assert!(again.contains("the downstream rejected the batch, dropped"), "{again}");
}

/// An OTLP/HTTP receiver that answers 503 until `open` is set, then 400 to a request holding a span named
/// `poison` and 200 to the others, keeping their spans.
struct Picky {
    url: String,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    kept: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

async fn picky_downstream() -> Picky {
    use std::sync::atomic::Ordering;
    let (open, calls, kept) = (
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        std::sync::Arc::new(std::sync::Mutex::new(Vec::new())),
    );
    let (o, c, k) = (open.clone(), calls.clone(), kept.clone());
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (open, calls, kept) = (o.clone(), c.clone(), k.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if !open.load(Ordering::SeqCst) {
                    return (http::StatusCode::SERVICE_UNAVAILABLE, "down");
                }
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return (http::StatusCode::BAD_REQUEST, "not protobuf");
                };
                let spans: Vec<&Span> = request
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                    .collect();
                if spans.iter().any(|s| s.name == "poison") {
                    return (http::StatusCode::BAD_REQUEST, "a poisoned span");
                }
                let mut kept = kept.lock().expect("lock");
                kept.extend(spans.iter().map(|s| s.span_id.clone()));
                (http::StatusCode::OK, "")
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Picky {
        url: format!("http://{addr}/v1/traces"),
        open,
        calls,
        kept,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_request_combined_with_others_drops_only_itself() {
    use std::sync::atomic::Ordering;
    let downstream = picky_downstream().await;
    let c = Collector::start(&["--forward-http", &downstream.url, "--forward-workers", "1"]);
    // the one worker takes the first request and retries it while the downstream is down
    c.export(&spans(10, 1)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while downstream.calls.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // these wait in the queue, then go out as one combined request: a poisoned one and three good ones
    let mut poison = spans(10, 2);
    poison.resource_spans[0].scope_spans[0].spans[0].name = "poison".into();
    c.export(&poison).await;
    for trace in 3..=5 {
        c.export(&spans(10, trace)).await;
    }
    downstream.open.store(true, Ordering::SeqCst);
    let counters = c.settled(50).await;
    assert_eq!(counters["forward_spans_sent"], 40, "{counters}");
    assert_eq!(counters["forward_spans_dropped_rejected"], 10, "{counters}");
    assert_eq!(counters["forward_requests_split"], 1, "{counters}");
    assert_eq!(downstream.kept.lock().expect("lock").len(), 40);
    let warning = c
        .logged("the downstream rejected the batch", Duration::from_secs(10))
        .expect("the poisoned request's drop is logged");
    assert!(
        warning.contains("HTTP 400") && warning.contains("spans=10"),
        "{warning}"
    );
}
