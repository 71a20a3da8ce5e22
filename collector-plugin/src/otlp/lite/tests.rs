//! The borrowing decoder against an oracle: the same view declared with prost's derive (the decoder this
//! one replaced), its strings as prost's `string` (which must be UTF-8), with the skipped fields that hold
//! strings declared too, on structured requests written by the full OTLP schema and on arbitrary bytes.

use super::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{self as common, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource as FullResource;
use opentelemetry_proto::tonic::trace::v1::{self as trace, span};
use proptest::prelude::*;
use prost::Message as _;

/// The view as prost's derive declares it (fields as `Bytes` slices of the body).
mod oracle {
    #![allow(missing_docs, clippy::enum_variant_names)]
    use prost::bytes::Bytes;

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
        /// `schema_url = 3` (not in the view).
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }

    /// `Resource`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        /// `attributes = 1`.
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
        /// `entity_refs = 3` (not in the view).
        #[prost(message, repeated, tag = "3")]
        pub entity_refs: Vec<EntityRef>,
    }

    /// `EntityRef` (not in the view).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EntityRef {
        /// `schema_url = 1`.
        #[prost(string, tag = "1")]
        pub schema_url: String,
        /// `type = 2`.
        #[prost(string, tag = "2")]
        pub r#type: String,
        /// `id_keys = 3`.
        #[prost(string, repeated, tag = "3")]
        pub id_keys: Vec<String>,
        /// `description_keys = 4`.
        #[prost(string, repeated, tag = "4")]
        pub description_keys: Vec<String>,
    }

    /// `ScopeSpans`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeSpans {
        /// `scope = 1` (not in the view).
        #[prost(message, optional, tag = "1")]
        pub scope: Option<Scope>,
        /// `spans = 2`.
        #[prost(message, repeated, tag = "2")]
        pub spans: Vec<Span>,
        /// `schema_url = 3` (not in the view).
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }

    /// `InstrumentationScope` (not in the view).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Scope {
        /// `name = 1`.
        #[prost(string, tag = "1")]
        pub name: String,
        /// `version = 2`.
        #[prost(string, tag = "2")]
        pub version: String,
        /// `attributes = 3`.
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
    }

    /// `Span.Link` (not in the view).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Link {
        /// `trace_state = 3`.
        #[prost(string, tag = "3")]
        pub trace_state: String,
        /// `attributes = 4`.
        #[prost(message, repeated, tag = "4")]
        pub attributes: Vec<KeyValue>,
    }

    /// `KeyValueList` (not in the view).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValueList {
        /// `values = 1`.
        #[prost(message, repeated, tag = "1")]
        pub values: Vec<KeyValue>,
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
        /// `trace_state = 3` (not in the view).
        #[prost(string, tag = "3")]
        pub trace_state: String,
        /// `parent_span_id = 4`.
        #[prost(bytes = "bytes", tag = "4")]
        pub parent_span_id: Bytes,
        /// `name = 5`.
        #[prost(string, tag = "5")]
        pub name: String,
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
        /// `links = 13` (not in the view).
        #[prost(message, repeated, tag = "13")]
        pub links: Vec<Link>,
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
        #[prost(string, tag = "2")]
        pub name: String,
        /// `attributes = 3`.
        #[prost(message, repeated, tag = "3")]
        pub attributes: Vec<KeyValue>,
    }

    /// `Status`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        /// `message = 2`.
        #[prost(string, tag = "2")]
        pub message: String,
        /// `code = 3` (2 is ERROR).
        #[prost(int32, tag = "3")]
        pub code: i32,
    }

    /// `KeyValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        /// `key = 1`.
        #[prost(string, tag = "1")]
        pub key: String,
        /// `value = 2`.
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    /// `AnyValue`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        /// The value (a `kvlist_value = 6` is checked, not held: the view has no value then).
        #[prost(oneof = "Value", tags = "1, 2, 3, 4, 5, 6, 7")]
        pub value: Option<Value>,
    }

    /// `AnyValue.value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// `string_value = 1`.
        #[prost(string, tag = "1")]
        StringValue(String),
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
        /// `kvlist_value = 6`.
        #[prost(message, tag = "6")]
        KvlistValue(KeyValueList),
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
}

/// The oracle's view in this module's types, borrowing from the oracle's `Bytes`.
fn from_oracle(r: &oracle::Request) -> Request<'_> {
    fn kvs(v: &[oracle::KeyValue]) -> Vec<KeyValue<'_>> {
        v.iter()
            .map(|kv| KeyValue {
                key: kv.key.as_bytes(),
                value: kv.value.as_ref().map(any),
            })
            .collect()
    }
    fn any(v: &oracle::AnyValue) -> AnyValue<'_> {
        AnyValue {
            value: v.value.as_ref().and_then(|v| match v {
                oracle::Value::StringValue(s) => Some(Value::StringValue(s.as_bytes())),
                oracle::Value::BoolValue(b) => Some(Value::BoolValue(*b)),
                oracle::Value::IntValue(i) => Some(Value::IntValue(*i)),
                oracle::Value::DoubleValue(d) => Some(Value::DoubleValue(*d)),
                oracle::Value::ArrayValue(a) => Some(Value::ArrayValue(ArrayValue {
                    values: a.values.iter().map(any).collect(),
                })),
                oracle::Value::KvlistValue(_) => None,
                oracle::Value::BytesValue(b) => Some(Value::BytesValue(b)),
            }),
        }
    }
    Request {
        resource_spans: r
            .resource_spans
            .iter()
            .map(|rs| ResourceSpans {
                resource: rs.resource.as_ref().map(|r| Resource {
                    attributes: kvs(&r.attributes),
                }),
                scope_spans: rs
                    .scope_spans
                    .iter()
                    .map(|ss| ScopeSpans {
                        spans: ss
                            .spans
                            .iter()
                            .map(|s| Span {
                                trace_id: &s.trace_id,
                                span_id: &s.span_id,
                                parent_span_id: &s.parent_span_id,
                                name: s.name.as_bytes(),
                                kind: s.kind,
                                start_time_unix_nano: s.start_time_unix_nano,
                                end_time_unix_nano: s.end_time_unix_nano,
                                attributes: kvs(&s.attributes),
                                events: s
                                    .events
                                    .iter()
                                    .map(|e| Event {
                                        time_unix_nano: e.time_unix_nano,
                                        name: e.name.as_bytes(),
                                        attributes: kvs(&e.attributes),
                                    })
                                    .collect(),
                                status: s.status.as_ref().map(|st| Status {
                                    message: st.message.as_bytes(),
                                    code: st.code,
                                }),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Both decoders on one body: the same success, and the same view when they succeed. (NaN doubles compare
/// unequal, so they are compared by their bits through `Debug`.)
fn agree(body: &[u8]) -> Result<(), TestCaseError> {
    let bytes = prost::bytes::Bytes::copy_from_slice(body);
    let want = oracle::Request::decode(bytes);
    let got = Request::decode(body);
    match (&want, &got) {
        (Ok(w), Ok(g)) => prop_assert_eq!(format!("{:?}", from_oracle(w)), format!("{g:?}")),
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => prop_assert!(false, "the oracle decoded what this decoder refused: {e}"),
        (Err(e), Ok(_)) => prop_assert!(false, "this decoder accepted what the oracle refused: {e}"),
    }
    Ok(())
}

fn any_value(depth: u32) -> BoxedStrategy<common::AnyValue> {
    let leaf = prop_oneof![
        ".{0,12}".prop_map(any_value::Value::StringValue),
        any::<bool>().prop_map(any_value::Value::BoolValue),
        any::<i64>().prop_map(any_value::Value::IntValue),
        any::<f64>().prop_map(any_value::Value::DoubleValue),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(any_value::Value::BytesValue),
        (".{0,4}", ".{0,6}").prop_map(|(key, value)| any_value::Value::KvlistValue(common::KeyValueList {
            values: vec![common::KeyValue {
                key,
                value: Some(common::AnyValue {
                    value: Some(any_value::Value::StringValue(value)),
                }),
                ..Default::default()
            }],
        })),
    ];
    let value = if depth == 0 {
        leaf.boxed()
    } else {
        prop_oneof![
            4 => leaf,
            1 => proptest::collection::vec(any_value(depth - 1), 0..3)
                .prop_map(|values| any_value::Value::ArrayValue(common::ArrayValue { values })),
        ]
        .boxed()
    };
    proptest::option::of(value)
        .prop_map(|value| common::AnyValue { value })
        .boxed()
}

fn attributes() -> impl Strategy<Value = Vec<common::KeyValue>> {
    proptest::collection::vec(
        ("[a-z.]{0,10}", proptest::option::of(any_value(2))).prop_map(|(key, value)| common::KeyValue {
            key,
            value,
            ..Default::default()
        }),
        0..4,
    )
}

fn full_span() -> impl Strategy<Value = trace::Span> {
    (
        (
            proptest::collection::vec(any::<u8>(), 0..17),
            proptest::collection::vec(any::<u8>(), 0..9),
            proptest::collection::vec(any::<u8>(), 0..9),
            ".{0,10}",
            -1i32..7,
        ),
        (any::<u64>(), any::<u64>(), attributes()),
        proptest::collection::vec((any::<u64>(), ".{0,6}", attributes()), 0..3),
        proptest::option::of((".{0,8}", 0i32..3)),
    )
        .prop_map(
            |((trace_id, span_id, parent_span_id, name, kind), (start, end, attributes), events, status)| trace::Span {
                trace_id,
                span_id,
                parent_span_id,
                name,
                kind,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes,
                events: events
                    .into_iter()
                    .map(|(time_unix_nano, name, attributes)| span::Event {
                        time_unix_nano,
                        name,
                        attributes,
                        ..Default::default()
                    })
                    .collect(),
                status: status.map(|(message, code)| trace::Status { message, code }),
                trace_state: "k=v".into(),
                links: vec![span::Link {
                    trace_state: "l=w".into(),
                    attributes: vec![common::KeyValue {
                        key: "link.k".into(),
                        value: Some(common::AnyValue {
                            value: Some(any_value::Value::StringValue("v".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
}

pub(super) fn full_request() -> impl Strategy<Value = ExportTraceServiceRequest> {
    proptest::collection::vec(
        (
            proptest::option::of(attributes()),
            proptest::collection::vec(proptest::collection::vec(full_span(), 0..3), 0..3),
        ),
        0..3,
    )
    .prop_map(|resources| ExportTraceServiceRequest {
        resource_spans: resources
            .into_iter()
            .map(|(resource, scopes)| trace::ResourceSpans {
                resource: resource.map(|attributes| FullResource {
                    attributes,
                    entity_refs: vec![common::EntityRef {
                        schema_url: "u".into(),
                        r#type: "service".into(),
                        id_keys: vec!["service.name".into()],
                        description_keys: vec!["d".into()],
                    }],
                    ..Default::default()
                }),
                scope_spans: scopes
                    .into_iter()
                    .map(|spans| trace::ScopeSpans {
                        scope: Some(common::InstrumentationScope {
                            name: "lib".into(),
                            version: "1.0".into(),
                            attributes: vec![common::KeyValue {
                                key: "scope.k".into(),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }),
                        spans,
                        schema_url: "s".into(),
                    })
                    .collect(),
                schema_url: String::new(),
            })
            .collect(),
    })
}

proptest! {
    #[test]
    fn reads_what_the_full_schema_wrote_as_the_oracle_does(req in full_request()) {
        let body = req.encode_to_vec();
        agree(&body)?;
        let got = Request::decode(&body).expect("an encoded request decodes");
        let spans: usize = req.resource_spans.iter().flat_map(|r| &r.scope_spans).map(|s| s.spans.len()).sum();
        prop_assert_eq!(got.span_count(), spans);
    }

    #[test]
    fn merges_repeated_messages_as_the_oracle_does(a in full_request(), b in full_request()) {
        // two encodings back to back are one message whose fields were given twice
        let mut body = a.encode_to_vec();
        body.extend(b.encode_to_vec());
        agree(&body)?;
    }

    #[test]
    fn arbitrary_bytes_are_refused_or_read_as_the_oracle_does(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        agree(&body)?;
    }

    #[test]
    fn truncated_and_corrupted_requests_never_panic(req in full_request(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
        let body = req.encode_to_vec();
        if !body.is_empty() {
            agree(&body[..cut.index(body.len())])?;
            let mut corrupt = body.clone();
            let at = flip.index(corrupt.len());
            corrupt[at] ^= 0x5a;
            agree(&corrupt)?;
        }
    }
}

/// A request of one span whose one attribute is `key` = `value`.
fn request_of_one_attribute(key: &str, value: common::AnyValue) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![trace::ResourceSpans {
            scope_spans: vec![trace::ScopeSpans {
                spans: vec![trace::Span {
                    attributes: vec![common::KeyValue {
                        key: key.into(),
                        value: Some(value),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn deep_array_nesting_is_refused() {
    let mut v = common::AnyValue {
        value: Some(any_value::Value::StringValue("x".into())),
    };
    for _ in 0..(MAX_DEPTH + 2) {
        v = common::AnyValue {
            value: Some(any_value::Value::ArrayValue(common::ArrayValue { values: vec![v] })),
        };
    }
    let req = request_of_one_attribute("deep", v);
    let err = Request::decode(&req.encode_to_vec()).expect_err("too deep");
    assert_eq!(err, DecodeError::TooDeep);
}

#[test]
fn a_field_with_the_wrong_wire_type_is_refused() {
    // resource_spans (1) as a varint
    assert!(Request::decode(&[0x08, 0x01]).is_err());
    // span.start_time_unix_nano (7) as a varint inside a span inside scope_spans inside resource_spans
    let span = [0x38, 0x05];
    let scope = [&[0x12, span.len() as u8][..], &span].concat();
    let resource = [&[0x12, scope.len() as u8][..], &scope].concat();
    let body = [&[0x0a, resource.len() as u8][..], &resource].concat();
    assert!(Request::decode(&body).is_err());
    assert!(oracle::Request::decode(prost::bytes::Bytes::from(body)).is_err());
}

/// A protobuf `ExportTraceServiceRequest` of one scope whose spans are each `span` (an encoded `Span`).
fn request_of_spans(span: &[u8], n: usize) -> Vec<u8> {
    fn field(tag: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(tag << 3 | 2);
        prost::encoding::encode_varint(body.len() as u64, out);
        out.extend_from_slice(body);
    }
    let mut spans = Vec::new();
    for _ in 0..n {
        field(2, span, &mut spans);
    }
    let mut scope = Vec::new();
    field(2, &spans, &mut scope);
    let mut request = Vec::new();
    field(1, &scope, &mut request);
    request
}

#[test]
fn a_body_of_tiny_spans_is_refused_before_its_view_passes_the_budget() {
    // 500,000 empty spans: 1 MB on the wire, 80 MB as a view.
    let body = request_of_spans(&[], 500_000);
    let budget = Budget::for_body(body.len());
    match Request::decode_within(&body, &budget) {
        Err(DecodeError::Expanded(e)) => {
            assert_eq!(e.body, body.len());
            assert_eq!(e.limit, body.len() * EXPANSION + EXPANSION_FLOOR);
        }
        other => panic!(
            "expected the budget to refuse it, got {:?}",
            other.map(|r| r.span_count())
        ),
    }
    assert!(budget.exceeded().is_some());
    // The same spans under no budget decode, as before.
    assert_eq!(
        Request::decode_within(&body, &Budget::unlimited()).map(|r| r.span_count()),
        Ok(500_000)
    );
}

#[test]
fn dense_valid_values_fit_the_budget() {
    // Valid spans (ids, name, times) each with an attribute holding 64 one-byte integers: the densest values.
    let mut span = Vec::new();
    span.extend_from_slice(&[1 << 3 | 2, 16]);
    span.extend_from_slice(&[7; 16]);
    span.extend_from_slice(&[2 << 3 | 2, 8]);
    span.extend_from_slice(&[9; 8]);
    span.extend_from_slice(&[5 << 3 | 2, 1, b'x']);
    let mut array = Vec::new();
    for i in 0..64u8 {
        // values = 1: AnyValue { int_value = 3: i }
        array.extend_from_slice(&[1 << 3 | 2, 2, 3 << 3, i & 0x7f]);
    }
    let mut value = vec![5 << 3 | 2];
    prost::encoding::encode_varint(array.len() as u64, &mut value);
    value.extend_from_slice(&array);
    let mut kv = vec![1 << 3 | 2, 1, b'k', 2 << 3 | 2];
    prost::encoding::encode_varint(value.len() as u64, &mut kv);
    kv.extend_from_slice(&value);
    span.push(9 << 3 | 2);
    prost::encoding::encode_varint(kv.len() as u64, &mut span);
    span.extend_from_slice(&kv);
    let body = request_of_spans(&span, 20_000);
    assert!(
        body.len() > 50 * EXPANSION_FLOOR,
        "a body well past the floor: {}",
        body.len()
    );
    let request = Request::decode(&body).expect("dense but valid values fit the budget");
    assert_eq!(request.span_count(), 20_000);
}

/// `value` with its `@@@` (the one occurrence in the request) made invalid UTF-8: `ff fe 78`, a span name
/// that a schema-strict decoder refuses.
fn invalid_at_marker(req: &ExportTraceServiceRequest) -> Vec<u8> {
    let mut body = req.encode_to_vec();
    let at = body.windows(3).position(|w| w == b"@@@").expect("the marker");
    assert!(body[at + 3..].windows(3).all(|w| w != b"@@@"), "one marker");
    body[at..at + 3].copy_from_slice(&[0xff, 0xfe, 0x78]);
    body
}

#[test]
fn an_invalid_utf8_string_anywhere_in_the_schema_is_refused_naming_its_field() {
    let text = |s: &str| common::AnyValue {
        value: Some(any_value::Value::StringValue(s.into())),
    };
    let kv = |key: &str, value: common::AnyValue| common::KeyValue {
        key: key.into(),
        value: Some(value),
        ..Default::default()
    };
    // a request with every string field of the schema set, `mark` picking the one that holds the marker
    let request = |mark: &str| {
        let m = |field: &str, value: &str| -> String { if field == mark { "@@@".into() } else { value.into() } };
        ExportTraceServiceRequest {
            resource_spans: vec![trace::ResourceSpans {
                resource: Some(FullResource {
                    attributes: vec![kv(&m("rkey", "service.name"), text(&m("rvalue", "svc")))],
                    entity_refs: vec![common::EntityRef {
                        schema_url: m("eschema", "u"),
                        r#type: m("etype", "service"),
                        id_keys: vec![m("eid", "service.name")],
                        description_keys: vec![m("edesc", "d")],
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![trace::ScopeSpans {
                    scope: Some(common::InstrumentationScope {
                        name: m("sname", "lib"),
                        version: m("sversion", "1"),
                        attributes: vec![kv(&m("skey", "k"), text(&m("svalue", "v")))],
                        ..Default::default()
                    }),
                    spans: vec![trace::Span {
                        trace_id: vec![1; 16],
                        span_id: vec![2; 8],
                        trace_state: m("tracestate", "k=v"),
                        name: m("name", "span"),
                        attributes: vec![
                            kv(&m("akey", "a"), text(&m("avalue", "b"))),
                            kv(
                                "array",
                                common::AnyValue {
                                    value: Some(any_value::Value::ArrayValue(common::ArrayValue {
                                        values: vec![text(&m("element", "e"))],
                                    })),
                                },
                            ),
                            kv(
                                "kvlist",
                                common::AnyValue {
                                    value: Some(any_value::Value::KvlistValue(common::KeyValueList {
                                        values: vec![kv(&m("lkey", "k"), text(&m("lvalue", "v")))],
                                    })),
                                },
                            ),
                        ],
                        events: vec![span::Event {
                            name: m("ename", "e"),
                            attributes: vec![kv(&m("ekey", "k"), text(&m("evalue", "v")))],
                            ..Default::default()
                        }],
                        links: vec![span::Link {
                            trace_state: m("ltracestate", "k=v"),
                            attributes: vec![kv(&m("linkkey", "k"), text(&m("linkvalue", "v")))],
                            ..Default::default()
                        }],
                        status: Some(trace::Status {
                            message: m("status", "m"),
                            code: 2,
                        }),
                        ..Default::default()
                    }],
                    schema_url: m("sschema", "s"),
                }],
                schema_url: m("rschema", "r"),
            }],
        }
    };
    let r = "resourceSpans[0]";
    let s = "resourceSpans[0].scopeSpans[0]";
    let span = "resourceSpans[0].scopeSpans[0].spans[0]";
    let cases = [
        ("rkey", format!("{r}.resource.attributes[0].key")),
        ("rvalue", format!("{r}.resource.attributes[0].value.stringValue")),
        ("eschema", format!("{r}.resource.entityRefs[0].schemaUrl")),
        ("etype", format!("{r}.resource.entityRefs[0].type")),
        ("eid", format!("{r}.resource.entityRefs[0].idKeys[0]")),
        ("edesc", format!("{r}.resource.entityRefs[0].descriptionKeys[0]")),
        ("rschema", format!("{r}.schemaUrl")),
        ("sname", format!("{s}.scope.name")),
        ("sversion", format!("{s}.scope.version")),
        ("skey", format!("{s}.scope.attributes[0].key")),
        ("svalue", format!("{s}.scope.attributes[0].value.stringValue")),
        ("sschema", format!("{s}.schemaUrl")),
        ("tracestate", format!("{span}.traceState")),
        ("name", format!("{span}.name")),
        ("akey", format!("{span}.attributes[0].key")),
        ("avalue", format!("{span}.attributes[0].value.stringValue")),
        (
            "element",
            format!("{span}.attributes[1].value.arrayValue.values[0].stringValue"),
        ),
        ("lkey", format!("{span}.attributes[2].value.kvlistValue.values[0].key")),
        (
            "lvalue",
            format!("{span}.attributes[2].value.kvlistValue.values[0].value.stringValue"),
        ),
        ("ename", format!("{span}.events[0].name")),
        ("ekey", format!("{span}.events[0].attributes[0].key")),
        ("evalue", format!("{span}.events[0].attributes[0].value.stringValue")),
        ("ltracestate", format!("{span}.links[0].traceState")),
        ("linkkey", format!("{span}.links[0].attributes[0].key")),
        ("linkvalue", format!("{span}.links[0].attributes[0].value.stringValue")),
        ("status", format!("{span}.status.message")),
    ];
    let valid = request("none").encode_to_vec();
    assert_eq!(Request::decode(&valid).map(|r| r.span_count()), Ok(1));
    for (field, path) in cases {
        let body = invalid_at_marker(&request(field));
        // what the OpenTelemetry schema's decoder (prost, full types) says of it
        let full = ExportTraceServiceRequest::decode(body.as_slice());
        assert!(full.is_err(), "{field}: a schema-strict decoder refuses it");
        match Request::decode(&body) {
            Err(DecodeError::InvalidUtf8 { path: got, why }) => {
                assert_eq!(got, path, "{field}");
                assert!(why.contains("invalid utf-8"), "{field}: {why}");
            }
            other => panic!("{field}: {:?}", other.map(|r| r.span_count())),
        }
        agree(&body).unwrap_or_else(|e| panic!("{field}: {e}"));
    }
}

#[test]
fn kvlist_values_nested_past_the_depth_are_refused_like_arrays() {
    let mut v = common::AnyValue {
        value: Some(any_value::Value::StringValue("x".into())),
    };
    for _ in 0..(MAX_DEPTH + 2) {
        v = common::AnyValue {
            value: Some(any_value::Value::KvlistValue(common::KeyValueList {
                values: vec![common::KeyValue {
                    key: "k".into(),
                    value: Some(v),
                    ..Default::default()
                }],
            })),
        };
    }
    let req = request_of_one_attribute("deep", v);
    assert_eq!(Request::decode(&req.encode_to_vec()), Err(DecodeError::TooDeep));
}
