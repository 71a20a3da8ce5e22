//! The span contract's parser copies no string: `dei-collector` runs it on every span it receives. Parsing a
//! span's attributes allocates only the decoded index (one allocation), and nothing at all without one.
//!
//! This file holds one test, so that no other test's thread allocates while it counts.

use dei_propagator::semconv::{self, AttributeValue, DeiSpan, StreamMessage};

/// The system allocator wrapped by `stats_alloc`, which counts every allocation of the process (and keeps the
/// `unsafe` of a global allocator in that crate).
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Allocations (and reallocations) made while running `f`.
fn counted<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let region = stats_alloc::Region::new(ALLOCATOR);
    let out = f();
    let change = region.change();
    (out, change.allocations + change.reallocations)
}

#[test]
fn parsing_allocates_only_the_decoded_indexes() {
    let digest = "ab".repeat(32);
    let frames = ["src/a.rs:1:2", "src/b.rs:3:4"];
    let client = [
        (semconv::SIGNATURE, AttributeValue::Str("shop.Cart/Add")),
        (semconv::PAYLOAD_DIGEST, AttributeValue::Str(&digest)),
        (semconv::PAYLOAD, AttributeValue::Str("{\"item\":7}")),
        (semconv::STACK_DIGEST, AttributeValue::Str(&digest)),
        (semconv::STACK, AttributeValue::Array(&frames)),
        (semconv::STACK_MODE, AttributeValue::Str("unwind")),
        (semconv::COUNT, AttributeValue::Int(2)),
        (semconv::DEPTH, AttributeValue::Int(2)),
        (semconv::INSTANTIATION, AttributeValue::Str("dei")),
        (semconv::AMBIGUOUS, AttributeValue::Bool(true)),
        (semconv::FAULT, AttributeValue::Str("g14")),
        ("rpc.system", AttributeValue::Str("grpc")),
    ];
    let (span, allocations) = counted(|| DeiSpan::parse(client));
    let span = span.expect("well-formed");
    assert_eq!(allocations, 0, "no string is copied");
    assert_eq!(span.stack.map(|s| s.iter().count()), Some(2));

    let with_index = [(semconv::INDEX, AttributeValue::Str("1.AQEBAQEBAQE1.AgICAgICAgI3"))];
    let (span, allocations) = counted(|| DeiSpan::parse(client.into_iter().chain(with_index)));
    assert_eq!(span.expect("well-formed").index.map(|i| i.depth()), Some(2));
    assert_eq!(allocations, 1, "the index's elements");

    let event = [
        (semconv::PRELIMINARY_INDEX, AttributeValue::Str("1.AQEBAQEBAQE1~")),
        (semconv::INDEX, AttributeValue::Str("1.AgICAgICAgI1")),
        (semconv::MESSAGE, AttributeValue::Int(1)),
    ];
    let (message, allocations) = counted(|| StreamMessage::parse(event));
    assert!(message.is_ok());
    assert_eq!(allocations, 2, "the two indexes");
}
