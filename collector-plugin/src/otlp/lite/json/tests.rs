//! The JSON decoder against the protobuf one: the same request, written by the full OTLP schema in both
//! encodings, gives the same view; and OTLP/JSON's own rules (hex ids, integers as strings or numbers, enums
//! as integers, unknown fields, `null`, escapes, nesting).

use super::super::tests::full_request;
use super::super::{MAX_DEPTH, Value};
use super::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{self as common, any_value};
use proptest::prelude::*;
use prost::Message as _;

/// Doubles as JSON carries them exactly: serde_json writes no NaN or infinity (they become `null`), and its
/// default parser may miss a double by one unit in the last place; such values become nearby integers, which
/// both encodings carry exactly.
fn exact_in_json(req: &mut ExportTraceServiceRequest) {
    fn value(v: &mut common::AnyValue) {
        match &mut v.value {
            Some(any_value::Value::DoubleValue(d)) => {
                let back: f64 = serde_json::from_str(&serde_json::to_string(d).unwrap_or_default()).unwrap_or(f64::NAN);
                if back.to_bits() != d.to_bits() {
                    *d = if d.is_finite() {
                        d.clamp(-1e15, 1e15).round()
                    } else {
                        0.5
                    };
                }
            }
            Some(any_value::Value::ArrayValue(a)) => a.values.iter_mut().for_each(value),
            _ => {}
        }
    }
    let kvs = |kvs: &mut Vec<common::KeyValue>| kvs.iter_mut().filter_map(|kv| kv.value.as_mut()).for_each(value);
    for rs in &mut req.resource_spans {
        if let Some(r) = &mut rs.resource {
            kvs(&mut r.attributes);
        }
        for span in rs.scope_spans.iter_mut().flat_map(|ss| &mut ss.spans) {
            kvs(&mut span.attributes);
            span.events.iter_mut().for_each(|e| kvs(&mut e.attributes));
        }
    }
}

fn json_lite<'a>(body: &'a [u8], arena: &'a Bump) -> Request<'a> {
    decode(body, arena).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

proptest! {
    #[test]
    fn json_and_protobuf_of_one_request_give_the_same_view(mut req in full_request()) {
        exact_in_json(&mut req);
        let protobuf = req.encode_to_vec();
        let json = serde_json::to_vec(&req).expect("the generated types write JSON");
        let arena = Bump::new();
        let from_json = decode(&json, &arena);
        prop_assert!(from_json.is_ok(), "{:?}: {}", from_json.err(), String::from_utf8_lossy(&json));
        let from_protobuf = Request::decode(&protobuf).expect("an encoded request decodes");
        prop_assert_eq!(from_json.ok(), Some(from_protobuf));
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let arena = Bump::new();
        let _ = decode(&body, &arena);
    }

    #[test]
    fn corrupted_json_never_panics(mut req in full_request(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>()) {
        exact_in_json(&mut req);
        let json = serde_json::to_vec(&req).expect("the generated types write JSON");
        let arena = Bump::new();
        let _ = decode(&json[..cut.index(json.len())], &arena);
        let mut corrupt = json.clone();
        let at = flip.index(corrupt.len());
        corrupt[at] ^= 0x20;
        let _ = decode(&corrupt, &arena);
    }
}

const SPAN: &str = r#""traceId":"0102030405060708090A0b0c0d0e0f10","spanId":"0102030405060708""#;

fn span_json(fields: &str) -> String {
    format!(r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{{SPAN},{fields}}}]}}]}}]}}"#)
}

#[test]
fn otlp_json_rules() {
    let body = span_json(
        r#""name":"a\"b\u00e9","kind":2,"startTimeUnixNano":"1700000000000000001","endTimeUnixNano":1700000000000000002,
        "unknownField":{"deep":[1,2,{"x":null}]},"droppedAttributesCount":3,
        "attributes":[{"key":"svc\u002ename","value":{"stringValue":"plain"}},
                      {"key":"i","value":{"intValue":"-9223372036854775808"}},
                      {"key":"j","value":{"intValue":42}},
                      {"key":"d","value":{"doubleValue":"Infinity"}},
                      {"key":"b","value":{"boolValue":true,"futureValue":{}}},
                      {"key":"bytes","value":{"bytesValue":"AAEC"}},
                      {"key":"kv","value":{"kvlistValue":{"values":[]}}},
                      {"key":"arr","value":{"arrayValue":{"values":[{"stringValue":"x"},{"intValue":"1"}]}}},
                      {"key":"none","value":null},
                      {"key":"nullmember","value":{"stringValue":"kept","intValue":null}}],
        "events":[{"time_unix_nano":"7","name":"e"}],
        "status":{"code":2,"message":"m"}"#,
    );
    let arena = Bump::new();
    let req = json_lite(body.as_bytes(), &arena);
    assert_eq!(req.span_count(), 1);
    let span = &req.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(
        span.trace_id,
        (1..=16).collect::<Vec<u8>>().as_slice(),
        "hex of either case"
    );
    assert_eq!(span.span_id, &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(span.parent_span_id, b"", "absent is empty");
    assert_eq!(span.name, "a\"bé".as_bytes(), "escapes decoded");
    assert_eq!(span.kind, 2);
    assert_eq!(span.start_time_unix_nano, 1_700_000_000_000_000_001, "a string");
    assert_eq!(span.end_time_unix_nano, 1_700_000_000_000_000_002, "a number");
    let attr = |k: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == k.as_bytes())
            .unwrap_or_else(|| panic!("{k}"))
            .value
            .as_ref()
            .and_then(|v| v.value.clone())
    };
    assert_eq!(span.attributes[0].key, b"svc.name", "an escaped key");
    assert_eq!(attr("svc.name"), Some(Value::StringValue(b"plain")));
    assert_eq!(attr("i"), Some(Value::IntValue(i64::MIN)));
    assert_eq!(attr("j"), Some(Value::IntValue(42)));
    assert_eq!(attr("d"), Some(Value::DoubleValue(f64::INFINITY)));
    assert_eq!(attr("b"), Some(Value::BoolValue(true)), "an unknown member is ignored");
    assert_eq!(attr("bytes"), Some(Value::BytesValue(&[0, 1, 2])));
    assert_eq!(attr("kv"), None, "kvlist values are not read, as in protobuf");
    assert_eq!(
        attr("arr"),
        Some(Value::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(Value::StringValue(b"x"))
                },
                AnyValue {
                    value: Some(Value::IntValue(1))
                },
            ]
        }))
    );
    assert_eq!(
        span.attributes
            .iter()
            .find(|kv| kv.key == b"none")
            .map(|kv| kv.value.is_none()),
        Some(true)
    );
    assert_eq!(
        attr("nullmember"),
        Some(Value::StringValue(b"kept")),
        "a null member changes nothing"
    );
    assert_eq!(
        (span.events[0].time_unix_nano, span.events[0].name),
        (7, &b"e"[..]),
        "snake_case names"
    );
    assert_eq!(span.status.as_ref().map(|s| (s.code, s.message)), Some((2, &b"m"[..])));
    // an unescaped string borrows from the body; an escaped one cannot
    let within = |s: &[u8]| body.as_bytes().as_ptr_range().contains(&s.as_ptr());
    assert!(within(span.attributes[1].key));
    assert!(!within(span.name));

    // an empty object, and null, are an empty request
    for empty in ["{}", r#"{"resourceSpans":null}"#, r#"{"resourceSpans":[],"other":1}"#] {
        assert_eq!(json_lite(empty.as_bytes(), &arena), Request::default(), "{empty}");
    }
}

#[test]
fn malformed_json_is_refused_with_the_reason() {
    let arena = Bump::new();
    for (fields, why) in [
        (r#""parentSpanId":"zz""#, "is not hex"),
        (r#""parentSpanId":"abc""#, "odd number of hex digits"),
        (r#""parentSpanId":7"#, "a hex string"),
        (r#""kind":4294967298"#, "out of range"),
        (r#""startTimeUnixNano":"-1""#, "out of range"),
        (r#""startTimeUnixNano":"soon""#, "soon"),
        (r#""attributes":{"key":"k"}"#, "an array"),
        (
            r#""attributes":[{"key":"k","value":{"bytesValue":"***"}}]"#,
            "bytesValue",
        ),
        (r#""attributes":[{"key":"k","value":{"boolValue":"yes"}}]"#, "a boolean"),
        (r#""status":[2]"#, "an object"),
        (r#""name":"n"}]}]}]} trailing"#, "trailing"),
    ] {
        let body = span_json(fields);
        match decode(body.as_bytes(), &arena) {
            Ok(req) => panic!("{fields}: accepted as {req:?}"),
            Err(e) => assert!(e.to_string().contains(why), "{fields}: {e}"),
        }
    }
}

#[test]
fn deep_array_nesting_is_refused_as_in_protobuf() {
    let nested = |levels: u32| {
        let mut v = r#"{"stringValue":"x"}"#.to_string();
        for _ in 0..levels {
            v = format!(r#"{{"arrayValue":{{"values":[{v}]}}}}"#);
        }
        span_json(&format!(r#""attributes":[{{"key":"deep","value":{v}}}]"#))
    };
    let arena = Bump::new();
    // the deepest nesting protobuf reads is read from JSON too, and one more level is refused by both
    let full = |levels: u32| {
        let arena = Bump::new();
        let req: ExportTraceServiceRequest =
            serde_json::from_str(&nested(levels)).expect("the generated types read it");
        let protobuf = req.encode_to_vec();
        let ok = Request::decode(&protobuf).is_ok();
        let json = nested(levels);
        assert_eq!(decode(json.as_bytes(), &arena).is_ok(), ok, "{levels} levels");
        ok
    };
    assert!(full(MAX_DEPTH));
    assert!(!full(MAX_DEPTH + 1));
    let err = decode(nested(MAX_DEPTH + 1).as_bytes(), &arena).expect_err("too deep");
    assert!(err.to_string().contains("nested deeper than"), "{err}");
}
