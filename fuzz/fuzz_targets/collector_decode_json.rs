//! The collector's OTLP/JSON path (decoding straight into the lite view, as `dei-collector analyze` and a
//! receiver without a forwarder take `application/json`; the id check; the extraction of what analysis reads)
//! never panics on any body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = dei_collector::fuzzing::decode_json(data);
});
