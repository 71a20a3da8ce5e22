//! Counting the spans of a protobuf `ExportTraceServiceRequest` without decoding them: the sink's only work,
//! kept small so that the sink is not what limits a benchmark.

use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};

/// The number of spans in a protobuf `ExportTraceServiceRequest` (`resource_spans = 1` → `scope_spans = 2` →
/// `spans = 2`), or `None` when the body is not one: a malformed key or length, a truncated field, or one of
/// those three fields with a wire type other than length-delimited. The spans themselves are not read.
pub fn count_spans(body: &[u8]) -> Option<usize> {
    let mut n = 0usize;
    for_each(body, 1, &mut |resource_spans| {
        for_each(resource_spans, 2, &mut |scope_spans| {
            for_each(scope_spans, 2, &mut |_span| {
                n += 1;
                Some(())
            })
        })
    })?;
    Some(n)
}

/// Calls `f` with the body of every field `tag` (length-delimited) of the message `buf`, skipping the others.
fn for_each<'a>(mut buf: &'a [u8], tag: u32, f: &mut dyn FnMut(&'a [u8]) -> Option<()>) -> Option<()> {
    while !buf.is_empty() {
        let (t, wire) = decode_key(&mut buf).ok()?;
        if t != tag {
            skip_field(wire, t, &mut buf, DecodeContext::default()).ok()?;
            continue;
        }
        if wire != WireType::LengthDelimited {
            return None;
        }
        let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
        if len > buf.len() {
            return None;
        }
        let (field, rest) = buf.split_at(len);
        buf = rest;
        f(field)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;

    #[test]
    fn counts_the_spans_of_the_load_generators_requests() {
        let (body, _) = crate::loadgen::template(3);
        let req = ExportTraceServiceRequest::decode(body.as_slice()).expect("the template decodes");
        let spans: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(spans, 3 * crate::loadgen::SPANS_PER_TRACE);
        assert_eq!(count_spans(&body), Some(spans));
        // two requests concatenated are one request with the spans of both (protobuf appends)
        let twice = [body.as_slice(), body.as_slice()].concat();
        assert_eq!(count_spans(&twice), Some(2 * spans));
        assert_eq!(count_spans(&[]), Some(0));
    }

    #[test]
    fn malformed_bodies_are_refused() {
        let (body, _) = crate::loadgen::template(1);
        assert_eq!(count_spans(&body[..body.len() - 1]), None, "truncated");
        assert_eq!(count_spans(&[0xff, 0xff, 0xff, 0xff, 0x0f]), None, "a bad key");
        // field 1 as a varint instead of a message
        assert_eq!(count_spans(&[0x08, 0x01]), None);
    }
}
