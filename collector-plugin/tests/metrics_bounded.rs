//! `/metrics` stays bounded: latency histograms go only to the busiest edges (`metrics_max_histogram_edges`),
//! every edge keeps its request counter, and a gauge says how many edges' histograms were left out.

use dei_collector::server::{self, ServerConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

fn resource_spans(service: &str, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(Value::StringValue(service.into())),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        schema_url: String::new(),
    }
}

/// One client→server call from `c{edge}` to `s{edge}` in trace `n`.
fn call(edge: u8, n: u8) -> Vec<ResourceSpans> {
    let trace_id = vec![edge + 1, n + 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
    let client = Span {
        trace_id: trace_id.clone(),
        span_id: vec![1, 0, 0, 0, 0, 0, edge, n],
        name: "call".into(),
        kind: 3,
        start_time_unix_nano: 1_000,
        end_time_unix_nano: 5_000_000,
        ..Default::default()
    };
    let server = Span {
        trace_id,
        span_id: vec![2, 0, 0, 0, 0, 0, edge, n],
        parent_span_id: client.span_id.clone(),
        name: "call".into(),
        kind: 2,
        start_time_unix_nano: 2_000,
        end_time_unix_nano: 4_000_000,
        ..Default::default()
    };
    vec![
        resource_spans(&format!("c{edge}"), vec![client]),
        resource_spans(&format!("s{edge}"), vec![server]),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_only_for_the_busiest_edges() {
    let mut config = ServerConfig::ephemeral();
    config.ingest.metrics_max_histogram_edges = 2;
    let r = server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", r.grpc_addr))
        .await
        .unwrap();
    // edge 0: 3 calls, edge 1: 2, edge 2: 1
    let mut resource_spans = Vec::new();
    for (edge, calls) in [(0u8, 3u8), (1, 2), (2, 1)] {
        for n in 0..calls {
            resource_spans.extend(call(edge, n));
        }
    }
    client
        .export(ExportTraceServiceRequest { resource_spans })
        .await
        .unwrap();
    assert_eq!(r.collector.stats().graph_edges, 3);
    let text = reqwest::get(format!("http://{}/metrics", r.api_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for edge in 0..3 {
        assert!(
            text.contains(&format!(
                "traces_service_graph_request_total{{client=\"c{edge}\",server=\"s{edge}\",connection_type=\"\"}}"
            )),
            "every edge keeps its counter: {text}"
        );
    }
    let histogram_edges = |edge: u8| {
        text.lines()
            .filter(|l| l.starts_with("traces_service_graph_request_server_seconds_count"))
            .filter(|l| l.contains(&format!("client=\"c{edge}\"")))
            .count()
    };
    assert_eq!(
        (histogram_edges(0), histogram_edges(1), histogram_edges(2)),
        (1, 1, 0),
        "{text}"
    );
    assert!(text.contains("\ndei_metrics_histogram_edges_omitted 1\n"), "{text}");
    r.shutdown().await;
}
