//! A zero-copy decoding of just the parts of an OTLP `ExportTraceServiceRequest` that analysis reads.
//!
//! Field numbers and wire types are those of `opentelemetry/proto/trace/v1/trace.proto` and
//! `common/v1/common.proto`; fields not declared here (scopes, links, trace state, dropped counts,
//! `kvlist` values, …) are skipped without allocating. Strings are kept as [`Bytes`] slices of the request
//! body (decode from a [`Bytes`] buffer) and checked as UTF-8 only where they are used. This is the hot path
//! of the receivers: the body itself is forwarded unchanged.

use bytes::Bytes;

/// `ExportTraceServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// `resource_spans = 1`.
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

/// `ResourceSpans`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceSpans {
    /// `resource = 1`.
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// `scope_spans = 2`.
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
}

/// `Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    /// `attributes = 1`.
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeSpans`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeSpans {
    /// `spans = 2`.
    #[prost(message, repeated, tag = "2")]
    pub spans: Vec<Span>,
}

/// `Span`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Span {
    /// `trace_id = 1`.
    #[prost(bytes = "bytes", tag = "1")]
    pub trace_id: Bytes,
    /// `span_id = 2`.
    #[prost(bytes = "bytes", tag = "2")]
    pub span_id: Bytes,
    /// `parent_span_id = 4`.
    #[prost(bytes = "bytes", tag = "4")]
    pub parent_span_id: Bytes,
    /// `name = 5` (a string, kept as bytes).
    #[prost(bytes = "bytes", tag = "5")]
    pub name: Bytes,
    /// `kind = 6`.
    #[prost(int32, tag = "6")]
    pub kind: i32,
    /// `start_time_unix_nano = 7`.
    #[prost(fixed64, tag = "7")]
    pub start_time_unix_nano: u64,
    /// `end_time_unix_nano = 8`.
    #[prost(fixed64, tag = "8")]
    pub end_time_unix_nano: u64,
    /// `attributes = 9`.
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    /// `events = 11`.
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
    /// `status = 15`.
    #[prost(message, optional, tag = "15")]
    pub status: Option<Status>,
}

/// `Span.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// `time_unix_nano = 1`.
    #[prost(fixed64, tag = "1")]
    pub time_unix_nano: u64,
    /// `name = 2`.
    #[prost(bytes = "bytes", tag = "2")]
    pub name: Bytes,
    /// `attributes = 3`.
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
}

/// `Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// `message = 2` (a string, kept as bytes).
    #[prost(bytes = "bytes", tag = "2")]
    pub message: Bytes,
    /// `code = 3` (2 is ERROR).
    #[prost(int32, tag = "3")]
    pub code: i32,
}

/// `KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// `key = 1`.
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    /// `value = 2`.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `AnyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    /// The value (`kvlist_value = 6` is not read).
    #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5, 7")]
    pub value: Option<Value>,
}

/// `AnyValue.value`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    /// `string_value = 1`.
    #[prost(bytes = "bytes", tag = "1")]
    StringValue(Bytes),
    /// `bool_value = 2`.
    #[prost(bool, tag = "2")]
    BoolValue(bool),
    /// `int_value = 3`.
    #[prost(int64, tag = "3")]
    IntValue(i64),
    /// `double_value = 4`.
    #[prost(double, tag = "4")]
    DoubleValue(f64),
    /// `array_value = 5`.
    #[prost(message, tag = "5")]
    ArrayValue(ArrayValue),
    /// `bytes_value = 7`.
    #[prost(bytes = "bytes", tag = "7")]
    BytesValue(Bytes),
}

/// `ArrayValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ArrayValue {
    /// `values = 1`.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<AnyValue>,
}

impl Request {
    /// Spans in the request.
    pub fn span_count(&self) -> usize {
        self.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn reads_what_the_full_schema_wrote() {
        let json = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},
          "scopeSpans":[{"scope":{"name":"lib"},"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708",
          "parentSpanId":"0807060504030201","name":"op","kind":2,"startTimeUnixNano":"5","endTimeUnixNano":"9",
          "status":{"code":2,"message":"boom"},"links":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"}],
          "attributes":[{"key":"a","value":{"kvlistValue":{"values":[]}}},{"key":"b","value":{"arrayValue":{"values":[{"stringValue":"x"}]}}},
          {"key":"c","value":{"intValue":"7"}}],
          "events":[{"name":"e","timeUnixNano":"6","attributes":[{"key":"k","value":{"boolValue":true}}]}]}]}]}]}"#;
        let full = crate::otlp::decode_json(json).unwrap();
        let lite = Request::decode(Bytes::from(full.encode_to_vec())).unwrap();
        let span = &lite.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.trace_id.len(), 16);
        assert_eq!(&span.name[..], b"op");
        assert_eq!(
            (span.kind, span.start_time_unix_nano, span.end_time_unix_nano),
            (2, 5, 9)
        );
        assert_eq!(span.status.as_ref().map(|s| s.code), Some(2));
        assert_eq!(span.attributes.len(), 3);
        assert_eq!(span.attributes[0].value.as_ref().and_then(|v| v.value.as_ref()), None);
        assert_eq!(
            span.attributes[2].value.as_ref().and_then(|v| v.value.clone()),
            Some(Value::IntValue(7))
        );
        assert_eq!(&span.events[0].name[..], b"e");
        assert_eq!(lite.span_count(), 1);
    }
}
