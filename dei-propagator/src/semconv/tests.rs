//! Test vectors of the span contract: the parser on every key, well-formed and not, and the stream rewriter on
//! the cases the collector and the search each tested.

use super::*;
use crate::{Element, ElementDigest, Fault, Index, PayloadDigest};
use AttributeValue::{Bool, Double, Int, Other, Str};

fn el(d: u8, count: u32) -> Element {
    Element::new(ElementDigest([d; 8]), count)
}

fn idx(elements: &[Element]) -> Index {
    Index::from_elements(elements.to_vec())
}

const DIGEST: &str = "abababababababababababababababababababababababababababababababab";

#[test]
fn every_key_is_a_dei_key_once() {
    let mut keys: Vec<&str> = ATTRIBUTES.to_vec();
    keys.push(STREAM_MESSAGE_EVENT);
    assert!(keys.iter().all(|k| k.starts_with("dei.")), "{keys:?}");
    keys.sort_unstable();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n, "a key is defined twice");
}

#[test]
fn reads_every_span_attribute() {
    let frames = "src/a.rs:1:2\n\nsrc/b.rs:3:4";
    let attributes = [
        (INDEX, Str("1.AQEBAQEBAQE2")),
        (SIGNATURE, Str("a.B/C")),
        (PAYLOAD_DIGEST, Str(DIGEST)),
        (PAYLOAD, Str("{\"user\":\"ann\"}")),
        (STACK_DIGEST, Str(DIGEST)),
        (STACK, Str(frames)),
        (STACK_MODE, Str("unwind")),
        (STACK_WALKER, Str("frame-pointers")),
        (COUNT, Int(2)),
        (DEPTH, Int(1)),
        (INSTANTIATION, Str("dei")),
        (PRELIMINARY, Bool(false)),
        (AMBIGUOUS, Bool(true)),
        (FAULT, Str("h503")),
        (FAULT_PLAN, Str("1.AQEBAQEBAQE2=g14")),
        (FAULT_PLAN_DROPPED, Bool(true)),
        (INCOMING_DROPPED, Bool(true)),
        (DEPTH_LIMITED, Bool(true)),
        (PAYLOAD_DIGEST_INCOMPLETE, Bool(true)),
        (STREAM_COUNT_OVERFLOW, Bool(true)),
        ("rpc.system", Str("grpc")),
        ("peer.service", Int(3)),
    ];
    let span = DeiSpan::parse(attributes).expect("well-formed");
    assert_eq!(
        span.index.as_ref().map(Index::encode).as_deref(),
        Some("1.AQEBAQEBAQE2")
    );
    assert_eq!(span.signature, Some("a.B/C"));
    assert_eq!(span.payload_digest.map(|d| d.to_hex()).as_deref(), Some(DIGEST));
    assert_eq!(span.payload, Some("{\"user\":\"ann\"}"));
    assert_eq!(span.stack_digest.map(|d| d.to_hex()).as_deref(), Some(DIGEST));
    let read: Vec<&str> = span.stack.expect("frames").iter().collect();
    assert_eq!(read, ["src/a.rs:1:2", "src/b.rs:3:4"], "empty lines are no frames");
    assert_eq!(
        (span.stack_mode, span.stack_walker),
        (Some("unwind"), Some("frame-pointers"))
    );
    assert_eq!((span.count, span.depth), (Some(2), Some(1)));
    assert_eq!(span.instantiation, Some("dei"));
    assert!(!span.preliminary && span.ambiguous);
    assert_eq!(span.fault, Some(Fault::Http(503)));
    assert_eq!(span.fault_plan, Some("1.AQEBAQEBAQE2=g14"));
    assert!(span.fault_plan_dropped && span.incoming_dropped && span.depth_limited);
    assert!(span.payload_digest_incomplete);
    assert!(span.stream_count_overflow);
    // every key of the contract is read by the parser
    for key in ATTRIBUTES.iter().filter(|k| ![PRELIMINARY_INDEX, MESSAGE].contains(k)) {
        let (_, value) = attributes.iter().find(|(k, _)| k == key).expect("in the vector");
        assert_eq!(DeiSpan::default().apply(key, *value, usize::MAX), Ok(true), "{key}");
    }
}

#[test]
fn no_attribute_and_unknown_keys_give_an_empty_record() {
    assert_eq!(DeiSpan::parse([]), Ok(DeiSpan::default()));
    let later = [
        ("dei.later.key", Double(1.5)),
        ("dei.", Other("bytes")),
        ("http.route", Str("/x")),
    ];
    assert_eq!(DeiSpan::parse(later), Ok(DeiSpan::default()));
    assert_eq!(DeiSpan::default().apply("dei.later.key", Int(1), usize::MAX), Ok(false));
}

#[test]
fn a_malformed_value_is_an_error_naming_its_key() {
    let cases: [(&str, AttributeValue, &str); 24] = [
        (INDEX, Int(5), "expected a string, got int"),
        (INDEX, Str("not an index"), "malformed index"),
        (INDEX, Other("invalid UTF-8 string"), "got invalid UTF-8 string"),
        (SIGNATURE, Bool(true), "expected a string, got bool"),
        (PAYLOAD_DIGEST, Str("ABCD"), "malformed digest"),
        (STACK_DIGEST, Str("ABCD"), "malformed digest"),
        (STACK_DIGEST, Double(1.0), "got double"),
        (STACK, Int(1), "expected a string or a string array, got int"),
        (STACK_MODE, Int(1), "got int"),
        (STACK_WALKER, Bool(false), "got bool"),
        (COUNT, Int(0), "at least 1"),
        (COUNT, Int(-1), "-1 is out of range"),
        (COUNT, Str("2"), "expected an int, got string"),
        (DEPTH, Int(1 << 40), "out of range"),
        (INSTANTIATION, Int(1), "got int"),
        (PRELIMINARY, Str("yes"), "expected a bool, got string"),
        (AMBIGUOUS, Int(1), "expected a bool"),
        (FAULT, Str("x9"), "malformed fault \"x9\""),
        (FAULT, Str("g014"), "malformed fault"),
        (FAULT_PLAN, Bool(true), "got bool"),
        (FAULT_PLAN_DROPPED, Str("true"), "expected a bool"),
        (DEPTH_LIMITED, Other("empty"), "got empty"),
        (PAYLOAD_DIGEST_INCOMPLETE, Int(1), "expected a bool, got int"),
        (STREAM_COUNT_OVERFLOW, Str("true"), "expected a bool, got string"),
    ];
    for (key, value, problem) in cases {
        // a well-formed attribute before it does not save the span
        let err = DeiSpan::parse([(SIGNATURE, Str("ok")), (key, value)]).expect_err(key);
        assert_eq!(err.key(), key, "{err}");
        let text = err.to_string();
        assert!(text.contains(problem) && text.contains(key), "{key}: {text}");
    }
    let long = "x".repeat(1025);
    for key in [SIGNATURE, INSTANTIATION] {
        let err = DeiSpan::parse_bounded([(key, Str(&long))], 1024).expect_err("too long");
        assert_eq!(err, AttributeError::TooLong { key, max: 1024 });
        assert!(DeiSpan::parse([(key, Str(&long))]).is_ok(), "unbounded by default");
    }
}

#[test]
fn a_lenient_reader_keeps_the_well_formed_attributes() {
    let attributes = [
        (INDEX, Str("1.AQEBAQEBAQE2")),
        (FAULT, Str("not-a-fault")),
        (SIGNATURE, Str("a.B/C")),
        (PAYLOAD_DIGEST, Int(3)),
        (DEPTH, Int(4)),
    ];
    let mut rejected = Vec::new();
    let span = DeiSpan::parse_lenient(attributes, |e| rejected.push(e.key()));
    assert_eq!(rejected, [FAULT, PAYLOAD_DIGEST, DEPTH]);
    assert_eq!(span.signature, Some("a.B/C"));
    assert!(span.index.is_some());
    assert_eq!((span.fault, span.payload_digest, span.depth), (None, None, None));
    let strict = DeiSpan::parse(attributes).expect_err("strict");
    assert_eq!(strict.key(), FAULT, "the first malformed attribute");
}

#[test]
fn depth_must_be_the_index_depth() {
    let index = (INDEX, Str("1.AQEBAQEBAQE2"));
    assert!(DeiSpan::parse([index, (DEPTH, Int(1))]).is_ok());
    let err = DeiSpan::parse([(DEPTH, Int(2)), index]).expect_err("mismatch");
    assert_eq!(
        err,
        AttributeError::DepthMismatch {
            key: DEPTH,
            depth: 2,
            index_depth: 1
        }
    );
    assert!(DeiSpan::parse([(DEPTH, Int(2))]).is_ok(), "no index to compare with");
}

#[test]
fn stack_frames_come_as_lines_or_as_a_string_array() {
    let items = ["src/a.rs:1:2", "src/b.rs:3:4"];
    let span = DeiSpan::parse([(STACK, AttributeValue::Array(&items))]).expect("a string array");
    let lines = DeiSpan::parse([(STACK, Str("src/a.rs:1:2\nsrc/b.rs:3:4\n"))]).expect("lines");
    assert_eq!(span.stack, lines.stack, "the same frames either way");
    // from the SDK's own values
    let sdk = opentelemetry::Value::Array(opentelemetry::Array::String(vec!["f:1".into(), "g:2".into()]));
    let span = DeiSpan::parse([(STACK, AttributeValue::from(&sdk))]).expect("SDK string array");
    assert_eq!(span.stack.expect("frames").iter().collect::<Vec<_>>(), ["f:1", "g:2"]);
    let ints = opentelemetry::Value::Array(opentelemetry::Array::I64(vec![3]));
    let err = DeiSpan::parse([(STACK, AttributeValue::from(&ints))]).expect_err("ints");
    assert_eq!(err.key(), STACK);
    assert!(err.to_string().contains("got array"), "{err}");
}

/// One array whose second item is not a string.
struct Mixed;

impl<'a> StrArray<'a> for Mixed {
    fn len(&'a self) -> usize {
        2
    }

    fn str_at(&'a self, i: usize) -> Option<&'a str> {
        (i == 0).then_some("f:1")
    }
}

#[test]
fn an_array_with_an_item_that_is_not_a_string_is_rejected() {
    let err = DeiSpan::parse([(STACK, AttributeValue::Array(&Mixed))]).expect_err("mixed");
    assert_eq!(err.key(), STACK);
    assert!(err.to_string().contains("array of strings"), "{err}");
    assert!(DeiSpan::parse([(SIGNATURE, AttributeValue::Array(&Mixed))]).is_err());
}

#[test]
fn sdk_values_convert_to_their_types() {
    use opentelemetry::Value;
    let values = [
        Value::from("s"),
        Value::from(7_i64),
        Value::from(true),
        Value::from(0.5),
        Value::Array(opentelemetry::Array::Bool(vec![true])),
    ];
    let names: Vec<&str> = values.iter().map(|v| AttributeValue::from(v).type_name()).collect();
    assert_eq!(names, ["string", "int", "bool", "double", "array"]);
    assert!(matches!(AttributeValue::from(&values[0]), Str("s")));
}

/// A span's or an event's attributes.
type Attributes<'a> = Vec<(&'a str, AttributeValue<'a>)>;

fn event<'a>(stream: &'a str, final_index: &'a str, k: Option<i64>) -> Attributes<'a> {
    let mut attributes = vec![(PRELIMINARY_INDEX, Str(stream)), (INDEX, Str(final_index))];
    if let Some(k) = k {
        attributes.push((MESSAGE, Int(k)));
    }
    attributes
}

#[test]
fn a_stream_message_event_maps_the_index_its_message_was_served_under() {
    let stream = idx(&[el(1, 1), el(2, 1).preliminary()]);
    let message = idx(&[el(1, 1), el(3, 1)]);
    let (s, m) = (stream.encode(), message.encode());
    let parsed = StreamMessage::parse(event(&s, &m, Some(2))).expect("well-formed");
    assert_eq!((parsed.k, parsed.fault), (Some(2), None));
    assert_eq!(parsed.served_under(), stream.stream_message(2));
    assert_eq!(parsed.served_under().encode(), "1.AQEBAQEBAQE1.AgICAgICAgI3~");
    let without_k = StreamMessage::parse(event(&s, &m, None)).expect("no position");
    assert_eq!(without_k.served_under(), stream, "as given");
    let mut failed = event(&s, &m, Some(1));
    failed.push((FAULT, Str("c")));
    assert_eq!(
        StreamMessage::parse(failed).map(|e| e.fault),
        Ok(Some(Fault::Connection))
    );

    let bad: [(Attributes, &str, &str); 6] = [
        (event(&s, &m, Some(0)), MESSAGE, "start at 1"),
        (event(&m, &m, Some(1)), PRELIMINARY_INDEX, "preliminary element"),
        (event(&s, &s, Some(1)), INDEX, "final element"),
        (vec![(INDEX, Str(&m))], PRELIMINARY_INDEX, "missing"),
        (vec![(PRELIMINARY_INDEX, Str(&s))], INDEX, "missing"),
        (event(&s, "x", Some(1)), INDEX, "malformed index"),
    ];
    for (attributes, key, problem) in bad {
        let err = StreamMessage::parse(attributes).expect_err(problem);
        assert_eq!(err.key(), key, "{err}");
        assert!(err.to_string().contains(problem), "{err}");
    }
}

/// A stream index whose count is near the largest (a crafted incoming one) leaves its later messages without a
/// count of their own: the saturated prefix they are served under is counted, the checked form says so, and
/// readers reject the event that would map it.
#[test]
fn a_stream_message_past_the_largest_count_is_counted_and_its_event_rejected() {
    use crate::StreamCountOverflow;
    use crate::rejection::{self, Event};
    let stream = idx(&[el(1, 1), el(2, u32::MAX - 1).preliminary()]);
    let last = idx(&[el(1, 1), el(2, u32::MAX).preliminary()]);
    assert_eq!(stream.checked_stream_message(1), Ok(last.clone()));
    assert_eq!(
        stream.checked_stream_message(2),
        Err(StreamCountOverflow {
            count: u32::MAX - 1,
            k: 2
        })
    );
    let before = rejection::event_total(Event::StreamCountOverflow);
    assert_eq!(stream.stream_message(1), last, "within the range: not counted");
    assert_eq!(rejection::event_total(Event::StreamCountOverflow), before);
    assert_eq!(stream.stream_message(2), last, "served under the largest count");
    assert_eq!(stream.stream_message(3), last);
    assert_eq!(
        rejection::event_total(Event::StreamCountOverflow),
        before + 2,
        "each message past the largest count is counted"
    );
    let (s, m) = (stream.encode(), idx(&[el(1, 1), el(3, 1)]).encode());
    assert_eq!(
        StreamMessage::parse(event(&s, &m, Some(1))).map(|e| e.served_under()),
        Ok(last)
    );
    let err = StreamMessage::parse(event(&s, &m, Some(2))).expect_err("no count of its own");
    assert_eq!(err.key(), MESSAGE, "{err}");
    assert!(err.to_string().contains("past the largest count"), "{err}");
}

#[test]
fn payload_previews_are_bounded() {
    assert_eq!(payload_preview("{\"user\":\"ann\"}"), "{\"user\":\"ann\"}");
    let long = "é".repeat(70);
    assert_eq!(payload_preview(&long), format!("{}…", "é".repeat(64)));
    assert_eq!(payload_preview(&"x".repeat(64)), "x".repeat(64));
}

// The stream rewriter.

/// A stream opened under `parent`, the index its callee served message `k` under, and the message's final
/// index.
fn stream_of(parent: &Index, d: u8, final_digest: u8) -> (Index, Index, Index) {
    let stream = parent.child(el(d, 1).preliminary());
    (
        stream.clone(),
        stream.stream_message(1),
        parent.child(el(final_digest, 1)),
    )
}

#[test]
fn a_call_served_under_a_message_is_rewritten_to_its_final_index() {
    let a = idx(&[el(1, 1)]);
    let (stream, served, message) = stream_of(&a, 2, 3);
    let call = served.child(el(4, 1));
    let mut rewriter = StreamRewriter::new();
    // before its mapping arrives: pending, unchanged
    let pending = rewriter.rewrite(&call, true);
    assert_eq!(
        (pending.index.clone(), pending.rewritten, pending.complete),
        (call.clone(), false, false)
    );
    assert_eq!(rewriter.insert(served.clone(), message.clone()), None);
    let done = rewriter.rewrite(&call, true);
    assert_eq!(done.index, message.child(el(4, 1)));
    assert!(done.rewritten && done.complete);
    assert_eq!(done.message, Some(&message), "served under that message");
    // a stream's own index is kept, or rewritten when it is the index its callee served the message under
    let own = rewriter.rewrite(&stream, true);
    assert_eq!((own.index, own.rewritten, own.complete), (stream.clone(), false, true));
    assert_eq!(rewriter.rewrite(&served, false).index, message);
    // an index with no preliminary element, and one under another stream's unmapped message
    assert_eq!(
        rewriter.rewrite(&a, true),
        Rewrite {
            index: a.clone(),
            rewritten: false,
            complete: true,
            message: None
        }
    );
    let other = stream.stream_message(2).child(el(5, 1));
    let r = rewriter.rewrite(&other, true);
    assert_eq!((r.index, r.rewritten, r.complete), (other, false, false));
    assert_eq!(rewriter.get(&served), Some(&message));
    assert_eq!(rewriter.len(), 1);
}

/// Streams opened while serving another stream's message: the inner mapping is keyed under the outer
/// preliminary prefix and its final index is under it too; rewriting goes innermost first.
#[test]
fn nested_streams_rewrite_innermost_first() {
    let a = idx(&[el(1, 1)]);
    let (_, outer_served, outer_final) = stream_of(&a, 2, 3);
    let (inner, inner_served, inner_final) = stream_of(&outer_served, 4, 5);
    let leaf = inner_served.child(el(6, 1));
    let outer = |i: &Index| {
        i.rewrite_prefix(&outer_served, &outer_final)
            .expect("under the outer message")
    };
    for outer_first in [true, false] {
        let mut rewriter = StreamRewriter::new();
        let maps = [
            (outer_served.clone(), outer_final.clone()),
            (inner_served.clone(), inner_final.clone()),
        ];
        for (p, f) in if outer_first {
            maps.clone()
        } else {
            [maps[1].clone(), maps[0].clone()]
        } {
            rewriter.insert(p, f);
        }
        let r = rewriter.rewrite(&leaf, true);
        assert_eq!(r.index, outer(&inner_final.child(el(6, 1))));
        assert!(r.rewritten && r.complete);
        assert_eq!(r.message, Some(&inner_final), "the innermost message");
        // the inner stream's own index and its message's final index, each under the outer message's
        assert_eq!(rewriter.rewrite(&inner, true).index, outer(&inner));
        assert_eq!(rewriter.rewrite(&inner_final, false).index, outer(&inner_final));
    }
    // only the outer mapping: the outer prefix is rewritten, the inner one waits
    let mut rewriter = StreamRewriter::new();
    rewriter.insert(outer_served.clone(), outer_final.clone());
    let r = rewriter.rewrite(&leaf, true);
    assert_eq!(r.index, outer(&leaf));
    assert!(r.rewritten && !r.complete);
    assert_eq!(r.message, Some(&outer_final));
}

#[test]
fn mappings_that_loop_end_incomplete() {
    let looping = idx(&[el(1, 1).preliminary()]);
    let mut rewriter = StreamRewriter::new();
    // the prefix maps to an index that starts with it again
    rewriter.insert(looping.clone(), looping.child(el(2, 1)));
    let r = rewriter.rewrite(&looping.child(el(3, 1)), true);
    assert!(!r.complete && r.rewritten);
}

#[test]
fn payload_digest_vectors_are_the_hex_form() {
    // the digest attribute is the digest's lowercase hex; uppercase reads as well
    let d = PayloadDigest::of(b"x");
    let upper = d.to_hex().to_uppercase();
    let span = DeiSpan::parse([(PAYLOAD_DIGEST, Str(&upper))]).expect("uppercase hex");
    assert_eq!(span.payload_digest, Some(d));
}
