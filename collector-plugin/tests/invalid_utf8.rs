//! A protobuf string that is not UTF-8 (a span name `ff fe 78`, a `service.name` value) makes the request
//! invalid protobuf, as a schema-strict peer (prost, protobuf-go, the OpenTelemetry Collector) reads it: the
//! real binary refuses it over OTLP/HTTP (400) and OTLP/gRPC (INVALID_ARGUMENT) naming the field, counts it as
//! a bad-protobuf rejection, and forwards nothing of it.

mod common;

use common::{CollectorProcess, Downstream, grpc_export};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::time::Duration;

/// A request of one span (`span_id` 1…) with service `service` and name `name`, encoded, its one `@@@` (in
/// either) replaced by the invalid UTF-8 `ff fe 78`.
fn request(span: u8, service: &str, name: &str) -> Vec<u8> {
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(service.into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![0, 0, 0, 0, 0, 0, 0, span],
                    name: name.into(),
                    kind: 3,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut body = req.encode_to_vec();
    if let Some(at) = body.windows(3).position(|w| w == b"@@@") {
        body[at..at + 3].copy_from_slice(&[0xff, 0xfe, 0x78]);
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_string_field_is_refused_over_http_and_grpc_and_not_forwarded() {
    let downstream = Downstream::start().await;
    let collector = CollectorProcess::start(&["--forward-grpc", &downstream.endpoint()]);

    // OTLP/HTTP: a span named ff fe 78
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", collector.http))
        .header("content-type", "application/x-protobuf")
        .body(request(1, "svc", "@@@"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 400);
    // the body is a google.rpc.Status in protobuf: its message is text inside it
    let text = String::from_utf8_lossy(&r.bytes().await.expect("body")).into_owned();
    assert!(
        text.contains("malformed protobuf ExportTraceServiceRequest: resourceSpans[0].scopeSpans[0].spans[0].name: invalid UTF-8 in a string field"),
        "{text:?}"
    );

    // OTLP/gRPC: a service.name that is not UTF-8 (it became `unknown_service`)
    let status = grpc_export(collector.grpc, request(2, "@@@", "span"))
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains("resourceSpans[0].resource.attributes[0].value.stringValue: invalid UTF-8"),
        "{status:?}"
    );

    let counters = &collector.get_json("/api/v1/stats")["counters"];
    assert_eq!(counters["rejected_bad_protobuf"], 2, "{counters:#}");
    assert_eq!(counters["spans_received"], 0, "{counters:#}");
    assert_eq!(counters["requests_accepted"], 0, "{counters:#}");

    // a valid request after them is accepted and forwarded, and it alone
    grpc_export(collector.grpc, request(3, "svc", "span"))
        .await
        .expect("accepted");
    assert_eq!(downstream.wait_for_spans(1, Duration::from_secs(10)).await, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = downstream.received.lock().expect("lock").distinct();
    assert_eq!(received.len(), 1, "only the valid span was forwarded: {received:?}");
    assert!(received.iter().all(|(_, span)| span == &vec![0, 0, 0, 0, 0, 0, 0, 3]));
}
