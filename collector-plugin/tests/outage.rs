//! The downstream is stopped and restarted during a steady load: nothing within the queue's capacity is
//! lost. A load larger than the queue is dropped and counted; shutdown drains the queue.

mod common;

use collector_plugin::forward::{Downstream as Target, ForwardConfig};
use collector_plugin::server::{self, ServerConfig};
use common::Downstream;
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
    let mut config = ServerConfig::ephemeral();
    let mut f = ForwardConfig::new(Target::Grpc(downstream.endpoint()));
    f.capacity_spans = capacity;
    f.initial_backoff = Duration::from_millis(20);
    f.max_backoff = Duration::from_millis(200);
    f.request_timeout = Duration::from_secs(2);
    f.drain_timeout = Duration::from_secs(20);
    f.enqueue_wait = Duration::from_millis(20);
    config.forward = Some(f);
    server::start(config).await.unwrap()
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
    assert_eq!(c.forward_spans_dropped_overflow, 0);
    assert_eq!(c.forward_spans_dropped_rejected, 0);
    assert_eq!(c.forward_spans_sent, total as u64);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_is_dropped_and_counted_and_shutdown_drains() {
    let mut downstream = Downstream::start().await;
    downstream.stop().await;
    // capacity 100 spans; 4 workers each hold one in-flight batch of 10 while retrying
    let running = collector(&downstream, 100).await;
    let mut client = TraceServiceClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    let mut rejected = 0;
    for b in 0..30 {
        let resp = client.export(batch(b, 10)).await.unwrap().into_inner();
        if let Some(p) = resp.partial_success {
            assert!(p.error_message.contains("forwarding queue full"), "{p:?}");
            rejected += p.rejected_spans as u64;
        }
    }
    // wait until the workers have picked up their batches and the queue is full
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = running.collector.counters().snapshot();
    assert!(c.forward_spans_dropped_overflow > 0, "{c:?}");
    assert_eq!(
        rejected, c.forward_spans_dropped_overflow,
        "the client is told what was not forwarded"
    );
    let accepted = 300 - c.forward_spans_dropped_overflow;
    assert!(accepted >= 100, "at least the queue's capacity was kept: {c:?}");
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
