//! Index decoding never panics, and accepts only canonical values: `decode(s)` Ok implies
//! `encode(decode(s)) == s`. Limits are taken from the input too, so small limits are exercised.
#![no_main]

use dei_propagator::{Index, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (limits, text) = match data.split_first() {
        Some((&b, rest)) if b & 1 == 1 => (
            Limits {
                max_len: usize::from(b) * 8,
                max_depth: usize::from(b >> 3),
            },
            rest,
        ),
        _ => (Limits::default(), data),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok(index) = Index::decode_with(text, &limits) {
        assert_eq!(index.encode(), text, "accepted a non-canonical value");
        assert!(index.depth() <= limits.max_depth && text.len() <= limits.max_len);
        for element in index.elements() {
            assert!(element.count >= 1);
        }
    }
});
