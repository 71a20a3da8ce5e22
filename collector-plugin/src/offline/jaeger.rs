//! Jaeger's JSON download (the UI's "Download JSON", `GET /api/traces/{id}`): read as OTLP export requests.
//!
//! The document is `{"data":[{"traceID":..,"spans":[..],"processes":{..}}]}`. Each trace becomes one
//! `ExportTraceServiceRequest` with one resource per process:
//! - a process's `serviceName` becomes `service.name`, its tags the resource's other attributes;
//! - a span's ids (hex; 64-bit trace ids are left-padded to 128 bits), `operationName`, `startTime` and
//!   `duration` (microseconds) map directly; the parent is the `CHILD_OF` reference (else the first
//!   reference, else the legacy `parentSpanID`);
//! - the tags Jaeger writes for OpenTelemetry spans map back: `span.kind` → the kind, `otel.status_code` /
//!   `otel.status_description` (and `error=true`) → the status, `otel.scope.name` / `otel.library.name` and
//!   `otel.scope.version` → the scope; every other tag is an attribute of its type (`string`, `bool`,
//!   `int64`, `float64`; `binary` stays a string);
//! - logs become events, named by their `event` field.
//!
//! A span whose `processID` is not among the trace's `processes` has no service: its resource gets no
//! `service.name` (analysis counts it as `unknown_service`), and [`Converted::unknown_processes`] says so, for
//! the offline run to report.

use crate::otlp::Rejection;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span, status};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// A Jaeger JSON document.
#[derive(Debug, Deserialize)]
pub struct Document {
    /// The traces.
    pub data: Vec<Trace>,
}

/// One trace of a Jaeger JSON document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trace {
    /// The trace id, hex.
    #[serde(rename = "traceID", default)]
    pub trace_id: String,
    /// The spans.
    #[serde(default)]
    pub spans: Vec<JaegerSpan>,
    /// The processes, by id.
    #[serde(default)]
    pub processes: HashMap<String, Process>,
}

/// A Jaeger span.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JaegerSpan {
    /// Trace id, hex.
    #[serde(rename = "traceID", default)]
    pub trace_id: String,
    /// Span id, hex.
    #[serde(rename = "spanID")]
    pub span_id: String,
    /// Legacy parent span id, hex.
    #[serde(rename = "parentSpanID", default)]
    pub parent_span_id: Option<String>,
    /// The operation name.
    #[serde(default)]
    pub operation_name: String,
    /// References to other spans.
    #[serde(default)]
    pub references: Option<Vec<Reference>>,
    /// Start, Unix microseconds.
    #[serde(default)]
    pub start_time: u64,
    /// Duration, microseconds.
    #[serde(default)]
    pub duration: u64,
    /// Tags.
    #[serde(default)]
    pub tags: Option<Vec<Tag>>,
    /// Logs.
    #[serde(default)]
    pub logs: Option<Vec<Log>>,
    /// The process's key in the trace's `processes`.
    #[serde(rename = "processID", default)]
    pub process_id: String,
}

/// A reference to another span.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// `CHILD_OF` or `FOLLOWS_FROM`.
    #[serde(default)]
    pub ref_type: String,
    // the referenced span's `traceID` is not read: a reference within one trace is all a span tree uses
    /// The referenced span's id, hex.
    #[serde(rename = "spanID")]
    pub span_id: String,
}

/// A key-value tag.
#[derive(Debug, Deserialize)]
pub struct Tag {
    /// The key.
    pub key: String,
    /// `string`, `bool`, `int64`, `float64` or `binary`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The value.
    #[serde(default)]
    pub value: serde_json::Value,
}

/// A span log.
#[derive(Debug, Deserialize)]
pub struct Log {
    /// Unix microseconds.
    #[serde(default)]
    pub timestamp: u64,
    /// Its fields.
    #[serde(default)]
    pub fields: Vec<Tag>,
}

/// A process (a service instance).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// The service name.
    #[serde(default)]
    pub service_name: String,
    /// Its tags.
    #[serde(default)]
    pub tags: Option<Vec<Tag>>,
}

/// Hex to `n` bytes, left-padded with zeros (Jaeger writes 64-bit trace ids and drops leading zeros).
/// Invalid hex or too many digits are refused, naming the `field` (the id validation refuses an empty or
/// all-zero one later, as for OTLP).
fn id_bytes(hex_id: &str, n: usize, field: &str) -> Result<Vec<u8>, Rejection> {
    let digits = hex_id.trim();
    let bad = || Rejection::BadIds(format!("Jaeger {field} {hex_id:?} is not at most {} hex digits", 2 * n));
    if digits.len() > 2 * n {
        return Err(bad());
    }
    let padded = format!("{digits:0>width$}", width = 2 * n);
    hex::decode(padded).map_err(|_| bad())
}

fn any(value: any_value::Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(value) })
}

/// A tag's value as an OTLP value, by its declared type (numbers written as strings are accepted).
fn tag_value(tag: &Tag) -> Option<AnyValue> {
    use any_value::Value as V;
    use serde_json::Value as J;
    match (tag.kind.as_str(), &tag.value) {
        ("bool", J::Bool(b)) => any(V::BoolValue(*b)),
        ("bool", J::String(s)) => any(V::BoolValue(s == "true")),
        ("int64", J::Number(n)) => n.as_i64().map(V::IntValue).and_then(any),
        ("int64", J::String(s)) => s.parse().ok().map(V::IntValue).and_then(any),
        ("float64", J::Number(n)) => n.as_f64().map(V::DoubleValue).and_then(any),
        ("float64", J::String(s)) => s.parse().ok().map(V::DoubleValue).and_then(any),
        (_, J::String(s)) => any(V::StringValue(s.clone())),
        (_, J::Null) => None,
        (_, other) => any(V::StringValue(other.to_string())),
    }
}

fn key_value(tag: &Tag) -> Option<KeyValue> {
    Some(KeyValue {
        key: tag.key.clone(),
        value: tag_value(tag),
        ..KeyValue::default()
    })
}

fn text(tag: &Tag) -> String {
    match &tag.value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn convert_span(s: &JaegerSpan, trace_id: &[u8]) -> Result<(Span, InstrumentationScope), Rejection> {
    let mut out = Span {
        trace_id: trace_id.to_vec(),
        span_id: id_bytes(&s.span_id, 8, "spanID")?,
        name: s.operation_name.clone(),
        start_time_unix_nano: s.start_time.saturating_mul(1000),
        end_time_unix_nano: s.start_time.saturating_add(s.duration).saturating_mul(1000),
        ..Span::default()
    };
    let references = s.references.as_deref().unwrap_or_default();
    let parent = references
        .iter()
        .find(|r| r.ref_type == "CHILD_OF")
        .or_else(|| references.first())
        .map(|r| r.span_id.as_str())
        .or(s.parent_span_id.as_deref())
        .filter(|p| !p.trim_start_matches('0').is_empty());
    if let Some(p) = parent {
        out.parent_span_id = id_bytes(p, 8, "parent spanID")?;
    }
    let mut scope = InstrumentationScope::default();
    let mut status = Status::default();
    let mut error_tag = false;
    for tag in s.tags.as_deref().unwrap_or_default() {
        match tag.key.as_str() {
            "span.kind" => {
                out.kind = match text(tag).as_str() {
                    "client" => span::SpanKind::Client,
                    "server" => span::SpanKind::Server,
                    "producer" => span::SpanKind::Producer,
                    "consumer" => span::SpanKind::Consumer,
                    "internal" => span::SpanKind::Internal,
                    _ => span::SpanKind::Unspecified,
                } as i32;
            }
            "otel.status_code" => {
                status.code = match text(tag).as_str() {
                    "OK" => status::StatusCode::Ok,
                    "ERROR" => status::StatusCode::Error,
                    _ => status::StatusCode::Unset,
                } as i32;
            }
            "otel.status_description" => status.message = text(tag),
            "error" => {
                error_tag = matches!(
                    tag_value(tag),
                    Some(AnyValue {
                        value: Some(any_value::Value::BoolValue(true))
                    })
                )
            }
            "otel.scope.name" | "otel.library.name" => scope.name = text(tag),
            "otel.scope.version" | "otel.library.version" => scope.version = text(tag),
            _ => out.attributes.extend(key_value(tag)),
        }
    }
    if error_tag && status.code == status::StatusCode::Unset as i32 {
        status.code = status::StatusCode::Error as i32;
    }
    out.status = Some(status);
    for log in s.logs.as_deref().unwrap_or_default() {
        let mut event = span::Event {
            time_unix_nano: log.timestamp.saturating_mul(1000),
            name: "log".into(),
            ..span::Event::default()
        };
        for field in &log.fields {
            if field.key == "event" {
                event.name = text(field);
            } else {
                event.attributes.extend(key_value(field));
            }
        }
        out.events.push(event);
    }
    Ok((out, scope))
}

/// A Jaeger trace as an OTLP export request, with what did not convert as it should.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The export request.
    pub request: ExportTraceServiceRequest,
    /// The spans whose `processID` is not a key of the trace's `processes`, counted by that id (`""` when the
    /// span has none): their service is unknown.
    pub unknown_processes: BTreeMap<String, usize>,
}

/// The trace as an OTLP export request: one resource per process, one scope per instrumentation scope.
/// Refused when an id is not hex; spans whose `processID` the trace does not list are converted without a
/// service and counted ([`Converted::unknown_processes`]).
pub fn to_otlp(trace: &Trace) -> Result<Converted, Rejection> {
    // process id → scope → spans, in a stable order
    let mut by_process: BTreeMap<&str, BTreeMap<(String, String), Vec<Span>>> = BTreeMap::new();
    for s in &trace.spans {
        let trace_hex = if s.trace_id.is_empty() {
            &trace.trace_id
        } else {
            &s.trace_id
        };
        let (span, scope) = convert_span(s, &id_bytes(trace_hex, 16, "traceID")?)?;
        by_process
            .entry(s.process_id.as_str())
            .or_default()
            .entry((scope.name, scope.version))
            .or_default()
            .push(span);
    }
    let mut unknown_processes = BTreeMap::new();
    let resource_spans = by_process
        .into_iter()
        .map(|(pid, scopes)| {
            let mut attributes = Vec::new();
            match trace.processes.get(pid) {
                Some(p) => {
                    attributes.push(KeyValue {
                        key: "service.name".into(),
                        value: any(any_value::Value::StringValue(p.service_name.clone())),
                        ..KeyValue::default()
                    });
                    attributes.extend(p.tags.as_deref().unwrap_or_default().iter().filter_map(key_value));
                }
                None => {
                    let spans = scopes.values().map(Vec::len).sum();
                    unknown_processes.insert(pid.to_string(), spans);
                }
            }
            ResourceSpans {
                resource: Some(Resource {
                    attributes,
                    ..Resource::default()
                }),
                scope_spans: scopes
                    .into_iter()
                    .map(|((name, version), spans)| ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name,
                            version,
                            ..InstrumentationScope::default()
                        }),
                        spans,
                        ..ScopeSpans::default()
                    })
                    .collect(),
                ..ResourceSpans::default()
            }
        })
        .collect();
    Ok(Converted {
        request: ExportTraceServiceRequest { resource_spans },
        unknown_processes,
    })
}

/// True when `value` has Jaeger's shape: a `data` array whose entries have `spans` (or is empty).
pub fn looks_like(value: &serde_json::Value) -> bool {
    value.get("data").and_then(|d| d.as_array()).is_some_and(|traces| {
        traces
            .iter()
            .all(|t| t.get("spans").is_some() || t.get("traceID").is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_padded_and_bad_ones_empty() {
        assert_eq!(id_bytes("ab", 8, "spanID"), Ok(vec![0, 0, 0, 0, 0, 0, 0, 0xab]));
        assert_eq!(id_bytes("0102030405060708", 16, "traceID").map(|v| v.len()), Ok(16));
        for bad in ["zz".to_string(), "1".repeat(17)] {
            let e = id_bytes(&bad, 8, "spanID").expect_err("refused");
            assert!(e.to_string().contains("Jaeger spanID"), "{e}");
        }
    }

    #[test]
    fn tags_map_to_kind_status_scope_and_typed_attributes() {
        let doc: Document = serde_json::from_str(
            r#"{"data":[{"traceID":"00000000000000aa","spans":[{"traceID":"aa","spanID":"02",
            "operationName":"x","references":[{"refType":"CHILD_OF","traceID":"aa","spanID":"01"}],
            "startTime":10,"duration":5,"processID":"p1","tags":[
              {"key":"span.kind","type":"string","value":"client"},
              {"key":"error","type":"bool","value":true},
              {"key":"otel.scope.name","type":"string","value":"dei"},
              {"key":"dei.message","type":"int64","value":3},
              {"key":"ratio","type":"float64","value":0.5}],
            "logs":[{"timestamp":12,"fields":[{"key":"event","type":"string","value":"dei.stream.message"},
              {"key":"dei.message","type":"int64","value":1}]}]}],
            "processes":{"p1":{"serviceName":"svc","tags":[{"key":"host","type":"string","value":"h"}]}}}]}"#,
        )
        .expect("jaeger json");
        let converted = to_otlp(&doc.data[0]).expect("hex ids");
        assert!(converted.unknown_processes.is_empty());
        let req = converted.request;
        let rs = &req.resource_spans[0];
        let res = rs.resource.as_ref().expect("resource");
        assert_eq!(res.attributes[0].key, "service.name");
        assert_eq!(rs.scope_spans[0].scope.as_ref().map(|s| s.name.as_str()), Some("dei"));
        let s = &rs.scope_spans[0].spans[0];
        assert_eq!(s.kind, span::SpanKind::Client as i32);
        assert_eq!(s.parent_span_id, vec![0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(s.trace_id.len(), 16);
        assert_eq!((s.start_time_unix_nano, s.end_time_unix_nano), (10_000, 15_000));
        assert_eq!(
            s.status.as_ref().map(|x| x.code),
            Some(status::StatusCode::Error as i32)
        );
        let attr = |k: &str| s.attributes.iter().find(|a| a.key == k).and_then(|a| a.value.clone());
        assert_eq!(
            attr("dei.message").and_then(|v| v.value),
            Some(any_value::Value::IntValue(3))
        );
        assert_eq!(
            attr("ratio").and_then(|v| v.value),
            Some(any_value::Value::DoubleValue(0.5))
        );
        assert_eq!(s.events[0].name, "dei.stream.message");
        assert_eq!(s.events[0].time_unix_nano, 12_000);
    }
}
