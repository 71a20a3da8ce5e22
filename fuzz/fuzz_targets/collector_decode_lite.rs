//! The collector's borrowing protobuf decoder (`decode_lite` and the receivers' id check) never panics, and
//! agrees with prost's generated decoder of the full OTLP types: when both accept a body, they find the same
//! number of spans.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let lite = dei_collector::fuzzing::decode_lite(data);
    if let (Ok(spans), Ok(full)) = (&lite, ExportTraceServiceRequest::decode(data)) {
        let expected: usize = full
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(
            *spans, expected,
            "the borrowing decoder and prost count different spans"
        );
    }
});
