//! The propagator's extraction on arbitrary header maps never panics, and whatever it extracts is a valid,
//! canonical value that came from the carrier; re-injecting it and extracting again gives the same values.
#![no_main]

use dei_propagator::{DeiContextExt, DeiPropagator, Index};
use libfuzzer_sys::fuzz_target;
use opentelemetry::Context;
use opentelemetry::baggage::BaggageExt;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::BaggagePropagator;
use std::collections::HashMap;

const KEYS: [&str; 5] = ["dei", "baggage", "dei-faults", "traceparent", "other"];

fuzz_target!(|data: &[u8]| {
    // The input is a list of (key selector byte, value up to the next 0xff byte).
    let mut headers: HashMap<String, String> = HashMap::new();
    for chunk in data.split(|&b| b == 0xff) {
        let Some((&selector, value)) = chunk.split_first() else {
            continue;
        };
        let key = KEYS[usize::from(selector) % KEYS.len()];
        headers.insert(key.to_string(), String::from_utf8_lossy(value).into_owned());
    }
    let propagator = DeiPropagator::new();
    let cx = propagator.extract_with_context(&Context::new(), &headers);
    if let Some(index) = cx.dei_index() {
        let text = index.encode();
        let from_header = headers.get("dei").is_some_and(|h| *h == text);
        // what a standard baggage propagator reads from the carrier (it percent-decodes values)
        let baggage = BaggagePropagator::new().extract(&headers);
        let from_baggage = baggage.baggage().get("dei").is_some_and(|v| v.as_str() == text);
        assert!(from_header || from_baggage, "extracted {text} that is in no carrier");
        assert_eq!(Index::decode(&text).as_ref(), Ok(index));
    }
    let mut out: HashMap<String, String> = HashMap::new();
    propagator.inject_context(&cx, &mut out);
    let again = propagator.extract_with_context(&Context::new(), &out);
    assert_eq!(again.dei_index(), cx.dei_index());
    let non_empty = |c: &Context| c.fault_plan().filter(|p| !p.is_empty()).cloned();
    assert_eq!(non_empty(&again), non_empty(&cx));
});
