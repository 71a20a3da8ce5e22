//! The propagator with the standard ones: composition, carriers, baggage relays, bad input.

use dei_propagator::rejection::{self, Event, Source};
use dei_propagator::{
    Carriers, DeiContextExt, DeiPropagator, Element, ElementDigest, Fault, FaultPlan, INDEX_KEY, Index, Limits,
    PlanLimits, WireError, inject_with_index, inject_with_index_wire,
};
use opentelemetry::baggage::{Baggage, BaggageExt, BaggageMetadata};
use opentelemetry::propagation::{TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use std::collections::HashMap;

type Headers = HashMap<String, String>;

fn index(depth: u8) -> Index {
    Index::from_elements(
        (1..=depth)
            .map(|i| Element::new(ElementDigest([i; 8]), u32::from(i)))
            .collect(),
    )
}

fn span_context() -> SpanContext {
    SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("trace id"),
        SpanId::from_hex("00f067aa0ba902b7").expect("span id"),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    )
}

/// A context as a client has it when sending: a span, user baggage (with a property) and the outgoing index.
fn sending_context(index: &Index) -> Context {
    let baggage: Baggage = [KeyValue::new("user", "alice")].into_iter().collect();
    let mut baggage = baggage;
    baggage.insert_with_metadata("tenant", "t-1", BaggageMetadata::from("ttl=60"));
    Context::new()
        .with_remote_span_context(span_context())
        .with_baggage(baggage)
        .with_dei_index(index.clone())
}

fn dei_last() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
        Box::new(DeiPropagator::new()),
    ])
}

fn dei_first() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![
        Box::new(DeiPropagator::new()),
        Box::new(BaggagePropagator::new()),
        Box::new(TraceContextPropagator::new()),
    ])
}

fn inject(p: &dyn TextMapPropagator, cx: &Context) -> Headers {
    let mut headers = Headers::new();
    p.inject_context(cx, &mut headers);
    headers
}

fn assert_everything_arrived(cx: &Context, index: &Index) {
    assert_eq!(
        cx.span().span_context().trace_id(),
        span_context().trace_id(),
        "trace context"
    );
    assert_eq!(
        cx.baggage().get("user").map(|v| v.as_str()),
        Some("alice"),
        "user baggage"
    );
    assert_eq!(
        cx.baggage()
            .get_with_metadata("tenant")
            .map(|(v, m)| (v.as_str(), m.as_str())),
        Some(("t-1", "ttl=60")),
        "baggage properties"
    );
    assert_eq!(cx.dei_index(), Some(index), "the index");
}

#[test]
fn composes_with_trace_context_and_baggage_in_both_orders() {
    let index = index(8);
    let cx = sending_context(&index);
    for (name, sender) in [("dei last", dei_last()), ("dei first", dei_first())] {
        let headers = inject(&sender, &cx);
        assert!(headers.contains_key("traceparent"), "{name}");
        assert_eq!(headers.get(INDEX_KEY), Some(&index.encode()), "{name}");
        for (receiver_name, receiver) in [("dei last", dei_last()), ("dei first", dei_first())] {
            let received = receiver.extract(&headers);
            assert_everything_arrived(&received, &index);
            let _ = receiver_name;
        }
    }
    // The baggage copy: written by the propagator that runs last. With DeiPropagator last (the order of
    // `composite_propagator`), the baggage holds the index too; with it first, BaggagePropagator overwrites
    // the `baggage` header with the context's baggage alone, and only the header carries the index.
    let last = inject(&dei_last(), &cx);
    assert!(
        last["baggage"]
            .split(',')
            .any(|e| e == format!("dei={}", index.encode()))
    );
    let first = inject(&dei_first(), &cx);
    assert!(!first["baggage"].contains("dei="));
    let composite = dei_last();
    let fields: Vec<&str> = composite.fields().collect();
    for f in ["traceparent", "baggage", "dei", "dei-faults"] {
        assert!(fields.contains(&f), "{f} in {fields:?}");
    }
}

#[test]
fn the_crates_composite_is_dei_last() {
    let index = index(3);
    // The baggage copy is opt-in: the default composite writes the header only.
    let plain = inject(&dei_propagator::composite_propagator(), &sending_context(&index));
    assert_eq!(plain[INDEX_KEY], index.encode());
    assert!(!plain.get("baggage").is_some_and(|b| b.contains("dei=")), "{plain:?}");
    let with_baggage = || dei_propagator::composite_propagator_with(dei_propagator::Carriers::HEADER_AND_BAGGAGE);
    let headers = inject(&with_baggage(), &sending_context(&index));
    assert!(headers["baggage"].contains(&format!("dei={}", index.encode())));
    let received = dei_propagator::composite_propagator().extract(&headers);
    assert_everything_arrived(&received, &index);
    assert!(received.baggage().get(INDEX_KEY).is_none());
    // Without the header (a relay that forwards baggage only), the index still comes from the baggage.
    let mut relayed = headers.clone();
    relayed.remove(INDEX_KEY);
    let received = dei_propagator::composite_propagator().extract(&relayed);
    assert_everything_arrived(&received, &index);
    // Only DEI's entries: no baggage in the context at all.
    let bare = inject(&with_baggage(), &Context::new().with_dei_index(index.clone()));
    let received = dei_propagator::composite_propagator().extract(&bare);
    assert!(received.baggage().is_empty());
    assert_eq!(received.dei_index(), Some(&index));
}

#[test]
fn the_other_baggage_propagator_sees_every_entry_but_deis() {
    let other = dei_propagator::OtherBaggagePropagator::new();
    let carrier = |baggage: &str| -> Headers { [("baggage".to_string(), baggage.to_string())].into() };
    let cx = other.extract(&carrier("a=1, dei=1.x1 ,b=2;p=q,dei-faults=zz, deity=3"));
    let mut keys: Vec<String> = cx.baggage().iter().map(|(k, _)| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b", "deity"]);
    assert_eq!(
        cx.baggage()
            .get_with_metadata("b")
            .map(|(v, m)| (v.as_str(), m.as_str())),
        Some(("2", "p=q"))
    );
    assert!(other.extract(&carrier("dei=1.x1,dei-faults=zz")).baggage().is_empty());
    assert!(other.extract(&Headers::new()).baggage().is_empty());
    // A header of ours alone empties the request's baggage, as the standard propagator would (the ambient
    // context's baggage does not leak in); no header keeps it.
    let ambient = Context::new().with_baggage([KeyValue::new("ambient", "1")]);
    assert!(
        other
            .extract_with_context(&ambient, &carrier("dei=1.x1"))
            .baggage()
            .is_empty()
    );
    assert_eq!(other.extract_with_context(&ambient, &Headers::new()).baggage().len(), 1);
    // The standard propagator's limits hold: a header over 8192 bytes is rejected whole, and only the first
    // 64 entries are read.
    let long = format!("dei=1.x1,a={}", "v".repeat(8200));
    assert!(other.extract(&carrier(&long)).baggage().is_empty());
    let many: Vec<String> = std::iter::once("dei=1.x1".to_string())
        .chain((0..70).map(|i| format!("k{i}=v")))
        .collect();
    assert_eq!(other.extract(&carrier(&many.join(","))).baggage().len(), 63);
    // The standard propagator's view of a header without DEI's entries is unchanged.
    let plain = "user=al%20ice,tenant=t-1;ttl=60";
    let (ours, standard) = (
        other.extract(&carrier(plain)),
        BaggagePropagator::new().extract(&carrier(plain)),
    );
    assert_eq!(ours.baggage().len(), standard.baggage().len());
    assert_eq!(ours.baggage().get("user"), standard.baggage().get("user"));
}

#[test]
fn the_header_is_preferred_over_baggage() {
    let (a, b) = (index(2), index(3));
    let headers: Headers = [
        ("dei".to_string(), a.encode()),
        ("baggage".to_string(), format!("k=v,dei={}", b.encode())),
    ]
    .into();
    assert_eq!(DeiPropagator::new().extract(&headers).dei_index(), Some(&a));
    assert_eq!(dei_last().extract(&headers).dei_index(), Some(&a));
    assert_eq!(dei_first().extract(&headers).dei_index(), Some(&a));
    // a rejected header falls back to the baggage entry
    let before = rejection::rejected_total(Source::Header);
    let headers: Headers = [
        ("dei".to_string(), "1.garbage".to_string()),
        ("baggage".to_string(), format!("dei={}", b.encode())),
    ]
    .into();
    assert_eq!(DeiPropagator::new().extract(&headers).dei_index(), Some(&b));
    assert!(rejection::rejected_total(Source::Header) > before);
}

#[test]
fn a_relay_that_runs_only_the_baggage_propagator_passes_the_index_on() {
    let index = index(5);
    let plan = FaultPlan::new(vec![(
        index.child(Element::new(ElementDigest([9; 8]), 1)),
        Fault::UNAVAILABLE,
    )]);
    let sent = inject(&dei_last(), &sending_context(&index).with_fault_plan(plan.clone()));
    // The relay: a service in any language with only the standard W3C baggage propagator.
    let relay_cx = BaggagePropagator::new().extract(&sent);
    let relayed = inject(&BaggagePropagator::new(), &relay_cx);
    assert!(!relayed.contains_key("dei"), "the relay does not know the dei header");
    let received = DeiPropagator::new().extract(&relayed);
    assert_eq!(received.dei_index(), Some(&index), "taken from the baggage entry");
    assert_eq!(received.fault_plan(), Some(&plan));
    assert_eq!(dei_first().extract(&relayed).dei_index(), Some(&index));
}

#[test]
fn carriers_are_configurable() {
    let index = index(4);
    let only = |header, baggage| {
        DeiPropagator::with_config(Carriers { header, baggage }, Limits::default(), Default::default())
    };
    let cx = Context::new().with_dei_index(index.clone());
    let header_only = inject(&only(true, false), &cx);
    assert_eq!(header_only.keys().collect::<Vec<_>>(), vec!["dei"]);
    assert!(!only(true, false).fields().any(|f| f == "baggage"));
    let baggage_only = inject(&only(false, true), &cx);
    assert_eq!(baggage_only.keys().collect::<Vec<_>>(), vec!["baggage"]);
    assert_eq!(baggage_only["baggage"], format!("dei={}", index.encode()));
    assert!(inject(&only(false, false), &cx).is_empty());
    for headers in [header_only, baggage_only] {
        assert_eq!(DeiPropagator::new().extract(&headers).dei_index(), Some(&index));
    }
    // nothing to send, nothing written
    assert!(inject(&DeiPropagator::new(), &Context::new()).is_empty());
}

#[test]
fn bad_values_are_rejected_with_typed_errors_counted_and_treated_as_absent() {
    let limits = Limits::default();
    let too_long = format!("1{}", ".AAAAAAAAAAA4294967295".repeat(80));
    assert!(matches!(Index::decode(&too_long), Err(WireError::TooLong { max, .. }) if max == limits.max_len));
    let too_deep = format!("1{}", ".AAAAAAAAAAA1".repeat(limits.max_depth + 1));
    assert!(too_deep.len() <= limits.max_len);
    assert_eq!(
        Index::decode(&too_deep),
        Err(WireError::TooDeep { max: limits.max_depth })
    );
    assert_eq!(
        Index::decode("7.AAAAAAAAAAA1"),
        Err(WireError::UnsupportedVersion("7".into()))
    );
    assert_eq!(Index::decode("1.AAAAAAAAAAA0"), Err(WireError::BadCount { element: 0 }));
    assert_eq!(
        Index::decode("1.AAAAAAAAAAA1.AAAA"),
        Err(WireError::BadDigest { element: 1 })
    );

    let bad_values = [
        String::new(),
        "garbage".to_string(),
        "1.AAAAAAAAAAA1,dei=2".to_string(),
        too_long.clone(),
        too_deep.clone(),
        "x".repeat(1 << 20),
        "1.".repeat(5000),
        "1.AAAAAAAAAAA1\u{0}".to_string(),
        "1.ÀÀÀÀÀÀÀÀÀÀÀ1".to_string(),
    ];
    let trace_id = span_context().trace_id();
    for value in &bad_values {
        for (key, source) in [("dei", Source::Header), ("baggage", Source::Baggage)] {
            let before = rejection::rejected_total(source);
            let carried = if key == "baggage" {
                format!("user=bob,dei={value}")
            } else {
                value.clone()
            };
            let mut headers: Headers = [(key.to_string(), carried)].into();
            inject(
                &TraceContextPropagator::new(),
                &Context::new().with_remote_span_context(span_context()),
            )
            .into_iter()
            .for_each(|(k, v)| {
                headers.insert(k, v);
            });
            let cx = dei_last().extract(&headers);
            assert!(cx.dei_index().is_none(), "{key}={value:.40}: treated as absent");
            assert_eq!(cx.span().span_context().trace_id(), trace_id, "the request goes on");
            // every one is counted: a baggage over 8192 bytes and a `dei` entry twice (`,` starts a new entry)
            // are rejected as carried, anything else by the decoder
            assert!(rejection::rejected_total(source) > before, "{key}={value:.40}: counted");
        }
    }
    // fault plans: typed errors, counted, absent
    let before = rejection::rejected_total(Source::FaultPlan);
    let headers: Headers = [("dei-faults".to_string(), "1*1.AAAAAAAAAAA1:g99".to_string())].into();
    assert!(DeiPropagator::new().extract(&headers).fault_plan().is_none());
    assert!(rejection::rejected_total(Source::FaultPlan) > before);
    let snapshot = rejection::snapshot();
    for name in ["header", "baggage", "fault_plan"] {
        assert!(snapshot.iter().any(|(n, c)| *n == name && *c > 0), "{snapshot:?}");
    }
    assert_eq!(snapshot.len(), 13, "three sources and ten events: {snapshot:?}");
}

#[test]
fn limits_are_configurable() {
    let index = index(6);
    let strict = DeiPropagator::with_config(Carriers::default(), Limits::for_depth(5), Default::default());
    let headers = inject(&DeiPropagator::new(), &Context::new().with_dei_index(index.clone()));
    assert!(strict.extract(&headers).dei_index().is_none(), "deeper than 5");
    assert_eq!(DeiPropagator::new().extract(&headers).dei_index(), Some(&index));
    assert_eq!(Limits::for_depth(5).max_len, 1 + 5 * 23);
}

/// An index beyond the propagator's limits (built by hand: a scope never issues one deeper than 64 elements) is
/// written cut to its first elements within them, in both carriers and by every way of injecting, and each cut
/// is counted: sent whole, a receiver with the same limits would reject it and serve the call as a new root.
#[test]
fn an_index_beyond_the_limits_is_injected_as_its_first_elements_and_counted() {
    let deep: Index = (0..70u8)
        .map(|i| Element::new(ElementDigest([i; 8]), u32::from(i) + 1))
        .collect();
    let first_64 = Index::from_elements(deep.elements()[..64].to_vec());
    let before = rejection::event_total(Event::DepthLimited);
    let by_context = inject(&DeiPropagator::new(), &Context::new().with_dei_index(deep.clone()));
    let mut by_call = Headers::new();
    inject_with_index(&DeiPropagator::new(), &Context::new(), &deep, &mut by_call);
    let mut by_wire = Headers::new();
    inject_with_index_wire(
        &dei_last(),
        &sending_context(&Index::root()),
        &deep,
        &deep.encode(),
        &mut by_wire,
    );
    let counted = rejection::event_total(Event::DepthLimited) - before;
    for (how, headers) in [("context", &by_context), ("call", &by_call), ("wire", &by_wire)] {
        assert_eq!(headers.get(INDEX_KEY), Some(&first_64.encode()), "{how}");
        let baggage = headers.get("baggage").map(String::as_str).unwrap_or_default();
        assert!(
            baggage.split(',').any(|e| e == format!("dei={}", first_64.encode())),
            "{how}: {baggage}"
        );
        assert_eq!(
            DeiPropagator::new().extract(headers).dei_index(),
            Some(&first_64),
            "{how}: a receiver with the default limits reads it"
        );
    }
    assert!(counted >= 3, "one count per injected call: {counted}");
    // at the limit, nothing is cut
    let mut at_limit = Headers::new();
    inject_with_index(&DeiPropagator::new(), &Context::new(), &first_64, &mut at_limit);
    assert_eq!(at_limit.get(INDEX_KEY), Some(&first_64.encode()));
    // a propagator's own limits, in bytes too: 40 bytes hold the root and three 13-byte elements
    let narrow = DeiPropagator::with_config(
        Carriers::HEADER,
        Limits {
            max_len: 40,
            max_depth: 64,
        },
        Default::default(),
    );
    let six = index(6);
    let headers = inject(&narrow, &Context::new().with_dei_index(six.clone()));
    let three = Index::from_elements(six.elements()[..3].to_vec());
    assert_eq!(headers.get(INDEX_KEY), Some(&three.encode()));
    assert_eq!(narrow.extract(&headers).dei_index(), Some(&three));
}

/// A fault plan that every receiver with the propagator's limits would reject whole (built by hand:
/// `FaultPlan::new` checks nothing) is not injected at all, in either carrier and by every way of injecting,
/// and each call injected without it is counted; the call's index goes as usual. A plan at the limits goes
/// whole.
#[test]
fn a_plan_a_receiver_would_reject_is_not_injected_and_counted() {
    let el = |digest: u8, count: u32| Element::new(ElementDigest([digest; 8]), count);
    let entry = |count: u32| (Index::root().child(el(1, count)), Fault::UNAVAILABLE);
    let deep = |depth: u8| -> Index { (0..depth).map(|i| el(i, 1)).collect() };
    // 4 entries of 64 elements (836 bytes each) and one of 57 with the longest latency: 4096 bytes
    let of_bytes = |last_count: u32| {
        let mut entries: Vec<(Index, Fault)> = (1..=4u32)
            .map(|k| (deep(63).child(el(200, k)), Fault::Connection))
            .collect();
        entries.push((
            deep(56).child(el(201, last_count)),
            Fault::Latency(std::time::Duration::from_millis(999_999)),
        ));
        FaultPlan::new(entries)
    };
    assert_eq!((of_bytes(1).encode().len(), of_bytes(10).encode().len()), (4096, 4097));
    let rejected = [
        ("65 entries", FaultPlan::new((1..=65).map(entry).collect())),
        ("4097 bytes", of_bytes(10)),
        (
            "an index of 65 elements",
            FaultPlan::new(vec![entry(1), (deep(65), Fault::Connection)]),
        ),
        (
            "a count of 0",
            FaultPlan::new(vec![(Index::root().child(el(1, 0)), Fault::Connection)]),
        ),
        ("gRPC code 0", FaultPlan::new(vec![(Index::root(), Fault::Grpc(0))])),
        (
            "HTTP status 600",
            FaultPlan::new(vec![entry(1), (Index::root(), Fault::Http(600))]),
        ),
        (
            "an index twice",
            FaultPlan::new(vec![entry(1), entry(2), (entry(1).0, Fault::Connection)]),
        ),
    ];
    let call = index(3);
    for (what, plan) in rejected {
        assert!(
            FaultPlan::decode(&plan.encode()).is_err(),
            "{what}: a receiver rejects it"
        );
        let before = rejection::event_total(Event::FaultPlanNotSent);
        let by_context = inject(
            &DeiPropagator::new(),
            &Context::new()
                .with_dei_index(call.clone())
                .with_fault_plan(plan.clone()),
        );
        let mut by_call = Headers::new();
        inject_with_index(
            &DeiPropagator::new(),
            &Context::new().with_fault_plan(plan.clone()),
            &call,
            &mut by_call,
        );
        let composite = inject(&dei_last(), &sending_context(&call).with_fault_plan(plan.clone()));
        let counted = rejection::event_total(Event::FaultPlanNotSent) - before;
        assert_eq!(counted, 3, "{what}: one count per call injected");
        for headers in [&by_context, &by_call, &composite] {
            assert_eq!(headers.get("dei-faults"), None, "{what}");
            let baggage = headers.get("baggage").map(String::as_str).unwrap_or_default();
            assert!(!baggage.contains("dei-faults"), "{what}: {baggage}");
            let cx = DeiPropagator::new().extract(headers);
            assert_eq!(cx.dei_index(), Some(&call), "{what}: the index goes");
            assert_eq!(cx.fault_plan(), None, "{what}");
        }
        assert!(composite["baggage"].contains("user=alice"), "the other entries go");
    }
    let at_limits = [
        FaultPlan::new((1..=64).map(entry).collect()),
        of_bytes(1),
        FaultPlan::new(vec![entry(1), (deep(64), Fault::Connection)]),
    ];
    for plan in at_limits {
        let before = rejection::event_total(Event::FaultPlanNotSent);
        let headers = inject(
            &DeiPropagator::new(),
            &Context::new()
                .with_dei_index(call.clone())
                .with_fault_plan(plan.clone()),
        );
        assert_eq!(headers.get("dei-faults"), Some(&plan.encode()));
        assert_eq!(DeiPropagator::new().extract(&headers).fault_plan(), Some(&plan));
        assert_eq!(rejection::event_total(Event::FaultPlanNotSent), before);
    }
    // a propagator's own plan limits
    let narrow = DeiPropagator::with_config(
        Carriers::HEADER,
        Limits::default(),
        PlanLimits {
            max_len: 4096,
            max_entries: 2,
        },
    );
    let two = FaultPlan::new((1..=2).map(entry).collect());
    let three = FaultPlan::new((1..=3).map(entry).collect());
    let sent = inject(&narrow, &Context::new().with_fault_plan(two.clone()));
    assert_eq!(narrow.extract(&sent).fault_plan(), Some(&two));
    let before = rejection::event_total(Event::FaultPlanNotSent);
    let sent = inject(&narrow, &Context::new().with_fault_plan(three));
    assert_eq!(sent.get("dei-faults"), None);
    assert_eq!(rejection::event_total(Event::FaultPlanNotSent), before + 1);
}

/// A plan with latencies the wire does not carry (built by hand: longer than 999,999 ms, or finer than a
/// millisecond) goes whole, each such latency written shortened, and each call injected with it is counted
/// once; a plan whose latencies the wire carries is not counted.
#[test]
fn a_plan_with_a_latency_the_wire_does_not_carry_is_sent_shortened_and_counted() {
    use std::time::Duration;
    let call = index(2);
    let plan = FaultPlan::new(vec![
        (index(1), Fault::Latency(Duration::from_secs(5000))),
        (call.clone(), Fault::UNAVAILABLE),
        (index(3), Fault::Latency(Duration::from_micros(2500))),
    ]);
    let written = FaultPlan::new(vec![
        (index(1), Fault::Latency(Duration::from_millis(999_999))),
        (call.clone(), Fault::UNAVAILABLE),
        (index(3), Fault::Latency(Duration::from_millis(2))),
    ]);
    let before = rejection::event_total(Event::LatencyClamped);
    let composite = inject(&dei_last(), &sending_context(&call).with_fault_plan(plan.clone()));
    let mut by_call = Headers::new();
    inject_with_index(
        &DeiPropagator::new(),
        &Context::new().with_fault_plan(plan),
        &call,
        &mut by_call,
    );
    assert_eq!(
        rejection::event_total(Event::LatencyClamped) - before,
        2,
        "once per call, not per entry"
    );
    for headers in [&composite, &by_call] {
        assert_eq!(headers.get("dei-faults"), Some(&written.encode()));
        assert_eq!(DeiPropagator::new().extract(headers).fault_plan(), Some(&written));
    }
    let before = rejection::event_total(Event::LatencyClamped);
    inject(&DeiPropagator::new(), &Context::new().with_fault_plan(written));
    assert_eq!(
        rejection::event_total(Event::LatencyClamped),
        before,
        "nothing shortened"
    );
}

#[test]
fn baggage_pitfalls() {
    let index = index(3);
    // other entries and their properties survive; a stale incoming `dei` entry is replaced, not duplicated
    let mut baggage: Baggage = [KeyValue::new("dei", "1.AAAAAAAAAAA9"), KeyValue::new("a", "1")]
        .into_iter()
        .collect();
    baggage.insert_with_metadata("b", "x y", BaggageMetadata::from("p=1"));
    let cx = Context::new().with_baggage(baggage).with_dei_index(index.clone());
    let headers = inject(&DeiPropagator::new(), &cx);
    let entries: Vec<&str> = headers["baggage"].split(',').collect();
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert!(
        entries.contains(&"a=1") && entries.contains(&"b=x%20y;p=1"),
        "{entries:?}"
    );
    assert!(entries.contains(&format!("dei={}", index.encode()).as_str()));
    // our values never contain `=`, `,`, `;`, `%` or spaces, so a baggage parser cannot cut them
    let ours = headers["dei"].clone();
    assert!(!ours.contains(['=', ',', ';', '%', ' ', '"']));
    let extracted = BaggagePropagator::new().extract(&headers);
    assert_eq!(extracted.baggage().get("dei").map(|v| v.as_str()), Some(ours.as_str()));

    // a full baggage (64 entries) silently refuses our entry: counted, and the header still carries it
    let full: Baggage = (0..64).map(|i| KeyValue::new(format!("k{i}"), "v")).collect();
    assert_eq!(full.len(), 64);
    let before = rejection::baggage_full_total();
    let headers = inject(
        &DeiPropagator::new(),
        &Context::new().with_baggage(full).with_dei_index(index.clone()),
    );
    assert!(rejection::baggage_full_total() > before);
    assert!(!headers["baggage"].contains("dei="));
    assert_eq!(DeiPropagator::new().extract(&headers).dei_index(), Some(&index));
}

#[test]
fn the_direct_baggage_header_is_what_the_baggage_propagator_writes() {
    let index = index(8);
    let plan = FaultPlan::new(vec![(
        index.clone(),
        Fault::Latency(std::time::Duration::from_millis(250)),
    )]);
    let cx = Context::new()
        .with_dei_index(index.clone())
        .with_fault_plan(plan.clone());
    let ours = inject(&DeiPropagator::new(), &cx);
    let baggage: Baggage = [
        KeyValue::new("dei", index.encode()),
        KeyValue::new("dei-faults", plan.encode()),
    ]
    .into_iter()
    .collect();
    let standard = inject(&BaggagePropagator::new(), &Context::new().with_baggage(baggage));
    let entries = |h: &Headers| {
        let mut e: Vec<String> = h["baggage"].split(',').map(str::to_string).collect();
        e.sort();
        e
    };
    assert_eq!(entries(&ours), entries(&standard));
    // with other entries (one with a property, one percent-encoded, and a stale `dei` of an incoming
    // request's), our entries are appended to what the baggage propagator writes for the others
    let with_others = || {
        let mut b: Baggage = [KeyValue::new("user", "al ice"), KeyValue::new("dei", "1.stale1")]
            .into_iter()
            .collect();
        b.insert_with_metadata("tenant", "t-1", BaggageMetadata::from("ttl=60"));
        b
    };
    let ours = inject(&DeiPropagator::new(), &cx.with_baggage(with_others()));
    let mut theirs = with_others();
    theirs.insert("dei", index.encode());
    theirs.insert("dei-faults", plan.encode());
    let standard = inject(&BaggagePropagator::new(), &Context::new().with_baggage(theirs));
    assert_eq!(entries(&ours), entries(&standard));
    assert_eq!(entries(&ours).len(), 4, "{:?}", entries(&ours));
    // other entries that leave no room in the header's 8192 bytes (60 of 133 bytes: 7,980 bytes of content,
    // which `Baggage` keeps, and an 8,099-byte header): ours is left out of the baggage, counted
    let before = rejection::baggage_full_total();
    let roomy: Baggage = (0..60)
        .map(|i| KeyValue::new(format!("k{i:02}"), "v".repeat(130)))
        .collect();
    let sent = inject(&DeiPropagator::new(), &cx.with_baggage(roomy));
    assert!(sent["baggage"].len() <= 8192, "{}", sent["baggage"].len());
    assert!(!sent["baggage"].contains("dei="));
    assert_eq!(
        sent.get(INDEX_KEY),
        Some(&index.encode()),
        "the header still carries it"
    );
    assert!(rejection::baggage_full_total() > before);
    // an index too large for baggage under generous limits is left out of the baggage, counted, never sent
    let huge = Index::from_elements((0..700).map(|i| Element::new(ElementDigest([i as u8; 8]), 1)).collect());
    let generous = DeiPropagator::with_config(Carriers::default(), Limits::for_depth(1000), Default::default());
    let before = rejection::baggage_full_total();
    let headers = inject(&generous, &Context::new().with_dei_index(huge.clone()));
    assert!(rejection::baggage_full_total() > before);
    assert!(headers.get("baggage").is_none_or(|b| b.len() <= 8192));
    assert_eq!(
        generous.extract(&headers).dei_index(),
        Some(&huge),
        "the header still carries it"
    );
}

#[test]
fn extraction_keeps_the_users_baggage_and_drops_our_entries() {
    let index = index(6);
    let plan = FaultPlan::new(vec![(
        index.child(Element::new(ElementDigest([3; 8]), 2)),
        Fault::UNAVAILABLE,
    )]);
    let sent = inject(&dei_last(), &sending_context(&index).with_fault_plan(plan.clone()));
    assert!(sent["baggage"].contains("dei=") && sent["baggage"].contains("dei-faults="));
    let received = dei_last().extract(&sent);
    assert_everything_arrived(&received, &index);
    assert_eq!(received.fault_plan(), Some(&plan));
    assert!(
        received.baggage().get(INDEX_KEY).is_none(),
        "the index lives in the context, not its baggage"
    );
    assert!(received.baggage().get("dei-faults").is_none());
    // The next hop carries the user's entries and the new index, once.
    let next = index.child(Element::new(ElementDigest([7; 8]), 1));
    let onward = inject(&dei_last(), &received.with_dei_index(next.clone()));
    let entries: Vec<&str> = onward["baggage"].split(',').collect();
    assert!(entries.contains(&"user=alice"), "{entries:?}");
    assert_eq!(
        entries.iter().filter(|e| e.starts_with("dei=")).count(),
        1,
        "{entries:?}"
    );
    assert!(
        entries.contains(&format!("dei={}", next.encode()).as_str()),
        "{entries:?}"
    );
    // Nothing but our entries: the extracted baggage is empty.
    let bare = inject(&dei_last(), &Context::new().with_dei_index(index.clone()));
    let received = dei_last().extract(&bare);
    assert!(received.baggage().is_empty());
    assert_eq!(received.dei_index(), Some(&index));
}
