//! The collector's OTLP/JSON path (as the HTTP receiver takes `application/json`: decoding, the id check and
//! the extraction of what analysis reads) never panics on any body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = dei_collector::fuzzing::decode_json(data);
});
