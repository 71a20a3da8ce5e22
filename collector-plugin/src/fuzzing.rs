//! Entry points for the fuzz targets (`fuzz/`): the collector's own decoders over arbitrary bytes. Not a
//! stable API.

/// Decodes `body` as a protobuf `ExportTraceServiceRequest` into the receivers' borrowed view and checks its
/// span ids, as the receivers do: the number of spans, or why the body is refused.
pub fn decode_lite(body: &[u8]) -> Result<usize, String> {
    let req = crate::otlp::decode_lite(body).map_err(|e| e.to_string())?;
    crate::otlp::validate_lite_ids(&req).map_err(|e| e.to_string())
}

/// Decodes `body` as [`decode_lite`] does and extracts what analysis reads from every span (the `dei.*`
/// attributes, events, status): the number of span records and of attribute issues, or why the body is
/// refused.
pub fn extract_attributes(body: &[u8]) -> Result<(usize, usize), String> {
    let req = crate::otlp::decode_lite(body).map_err(|e| e.to_string())?;
    crate::otlp::validate_lite_ids(&req).map_err(|e| e.to_string())?;
    let mut issues = Vec::new();
    let records = crate::span_record::extract_lite(&req, &mut issues);
    Ok((records.len(), issues.len()))
}

/// Decodes `body` as an OTLP/JSON `ExportTraceServiceRequest` straight into the lite view and extracts what
/// analysis reads, as `dei-collector analyze` and a receiver without a forwarder do for JSON: the number of
/// span records and of attribute issues, or why the body is refused.
pub fn decode_json(body: &[u8]) -> Result<(usize, usize), String> {
    let arena = bumpalo::Bump::new();
    let req = crate::otlp::decode_json_lite(body, &arena).map_err(|e| e.to_string())?;
    crate::otlp::validate_lite_ids(&req).map_err(|e| e.to_string())?;
    let mut issues = Vec::new();
    let records = crate::span_record::extract_lite(&req, &mut issues);
    Ok((records.len(), issues.len()))
}
