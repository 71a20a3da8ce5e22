//! The downstream is stopped and restarted during a steady load: nothing within the queue's capacity is
//! lost. A load larger than the queue is refused with a retryable `UNAVAILABLE` and counted (nothing is
//! accepted and then dropped); shutdown drains the queue.

mod common;

use common::Downstream;
use dei_collector::server::{self, ServerConfig};
use dei_collector::server::{Downstream as Target, ForwardConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use std::time::Duration;

/// A request of `n` spans of trace `batch`, span ids 1..=n.
fn batch(batch: u32, n: u32) -> ExportTraceServiceRequest {
    let mut trace_id = [7u8; 16];
    trace_id[..4].copy_from_slice(&batch.to_be_bytes());
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(Value::StringValue("loader".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: (1..=n)
                    .map(|i| Span {
                        trace_id: trace_id.to_vec(),
                        span_id: [0, 0, 0, 0, 1, 2, 3, i as u8].to_vec(),
                        name: format!("op{i}"),
                        kind: 1,
                        start_time_unix_nano: 1,
                        end_time_unix_nano: 2,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

async fn collector(downstream: &Downstream, capacity: usize) -> server::Running {
    collector_with(downstream, capacity, dei_collector::server::DEFAULT_QUEUE_BYTES).await
}

async fn collector_with(downstream: &Downstream, capacity: usize, capacity_bytes: usize) -> server::Running {
    let mut config = ServerConfig::ephemeral();
    let mut f = ForwardConfig::new(Target::Grpc(downstream.endpoint()));
    f.capacity_spans = capacity;
    f.capacity_bytes = capacity_bytes;
    f.initial_backoff = Duration::from_millis(20);
    f.max_backoff = Duration::from_millis(200);
    f.request_timeout = Duration::from_secs(2);
    f.drain_timeout = Duration::from_secs(20);
    f.enqueue_wait = Duration::from_millis(20);
    config.forward = Some(f);
    server::start(config).await.unwrap()
}

/// The collector's Prometheus text.
async fn metrics(running: &server::Running) -> String {
    reqwest::get(format!("http://{}/metrics", running.api_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_outage_under_steady_load_loses_nothing_within_capacity() {
    let mut downstream = Downstream::start().await;
    let running = collector(&downstream, 10_000).await;
    let mut client = TraceServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    let (batches, per) = (150u32, 10u32);
    for b in 0..batches {
        if b == 40 {
            downstream.stop().await;
        }
        if b == 110 {
            downstream.restart().await;
        }
        client
            .export(batch(b, per))
            .await
            .expect("the collector accepts while the downstream is down");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let total = (batches * per) as usize;
    let got = downstream.wait_for_spans(total, Duration::from_secs(30)).await;
    assert_eq!(got, total, "every span within capacity arrives after the outage");
    let c = running.collector.counters().snapshot();
    assert!(c.forward_retries > 0, "the outage was noticed and retried: {c:?}");
    assert_eq!(c.rejected_queue_full, 0);
    assert_eq!(c.forward_spans_dropped_rejected, 0);
    assert_eq!(c.forward_spans_sent, total as u64);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_bounded_in_bytes_too() {
    use prost::Message as _;
    let mut downstream = Downstream::start().await;
    downstream.stop().await;
    let size = batch(0, 10).encoded_len();
    // room for 3 batches' bytes, and for many more spans
    let running = collector_with(&downstream, 100_000, 3 * size).await;
    let mut client = TraceServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    let mut accepted = 0;
    for b in 0..8 {
        match client.export(batch(b, 10)).await {
            Ok(_) => accepted += 1,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(status.message().contains(&format!("{} bytes", 3 * size)), "{status:?}");
            }
        }
    }
    assert_eq!(accepted, 3, "exactly the byte capacity was accepted");
    let depth = running.collector.queue_depth();
    assert_eq!(
        (depth.spans, depth.bytes),
        (30, 3 * size),
        "the batches workers hold count"
    );
    let metrics = metrics(&running).await;
    assert!(
        metrics.contains(&format!("\ndei_forward_queue_bytes {}\n", 3 * size)),
        "{metrics}"
    );
    let c = running.collector.counters().snapshot();
    assert_eq!((c.rejected_queue_full, c.spans_refused), (5, 50), "{c:?}");
    downstream.restart().await;
    running.collector.shutdown().await;
    let c = running.collector.counters().snapshot();
    assert_eq!(c.forward_spans_sent, 30, "{c:?}");
    assert_eq!(
        running.collector.queue_depth(),
        Default::default(),
        "delivered: the room is free"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_with_unavailable_and_shutdown_drains() {
    let mut downstream = Downstream::start().await;
    downstream.stop().await;
    // capacity 100 spans, counting the batches the 4 workers hold while they retry
    let running = collector(&downstream, 100).await;
    let mut client = TraceServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    let (mut accepted, mut refused) = (0u64, 0u64);
    for b in 0..30 {
        match client.export(batch(b, 10)).await {
            Ok(resp) => {
                assert_eq!(resp.into_inner().partial_success, None, "accepted means accepted");
                accepted += 10;
            }
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(status.message().contains("forwarding queue is full"), "{status:?}");
                refused += 10;
            }
        }
    }
    assert_eq!(
        accepted, 100,
        "exactly the capacity was accepted, held batches included"
    );
    assert_eq!(refused, 200);
    assert_eq!(
        running.collector.queued_spans(),
        100,
        "the gauge counts the batches workers hold"
    );
    let metrics = metrics(&running).await;
    assert!(metrics.contains("\ndei_forward_queue_spans 100\n"), "{metrics}");
    let c = running.collector.counters().snapshot();
    assert_eq!((c.rejected_queue_full, c.spans_refused), (20, 200), "{c:?}");
    assert_eq!(
        (c.requests_accepted, c.spans_received),
        (10, 100),
        "only what was accepted is counted and analyzed"
    );
    downstream.restart().await;
    // shutdown while batches are still queued: it drains them
    running.collector.shutdown().await;
    let c = running.collector.counters().snapshot();
    assert_eq!(c.forward_spans_sent, accepted, "{c:?}");
    assert_eq!(c.forward_spans_dropped_shutdown, 0);
    assert_eq!(
        downstream
            .wait_for_spans(accepted as usize, Duration::from_secs(5))
            .await,
        accepted as usize
    );
    running.shutdown().await;
}
