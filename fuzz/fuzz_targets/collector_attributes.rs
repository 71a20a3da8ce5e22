//! Extracting what analysis reads from every span (the `dei.*` attributes, stream-message events, status,
//! peer) never panics, and makes one record per span of every body that the decoder accepts: it refuses
//! exactly the bodies that `decode_lite` refuses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let extracted = dei_collector::fuzzing::extract_attributes(data);
    let decoded = dei_collector::fuzzing::decode_lite(data);
    match (&extracted, &decoded) {
        (Ok((records, _issues)), Ok(spans)) => assert_eq!(records, spans, "not one record per span"),
        (Err(e), Err(d)) => assert_eq!(e, d, "refused for another reason than the decoder's"),
        _ => panic!("extraction {extracted:?} but decoding {decoded:?}"),
    }
});
