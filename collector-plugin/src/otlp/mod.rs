//! Decoding OTLP export requests: protobuf and OTLP/JSON bodies, gzip, size limits and id validation.
//!
//! Everything here is a pure function from bytes to an [`ExportTraceServiceRequest`] or a [`Rejection`]
//! that names what was wrong. Receivers map a rejection to the status [`Rejection::http_status`] and
//! [`Rejection::grpc_code`] give: `400` / `INVALID_ARGUMENT` for bad input, and a retryable `503` (with
//! `Retry-After`) / `UNAVAILABLE` when the collector is full and the client should retry.

pub mod codec;
pub mod lite;

use crate::counters::Counters;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::io::Read;
use std::sync::atomic::AtomicU64;

/// Why an export request was rejected as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The body is not a valid protobuf `ExportTraceServiceRequest`.
    #[error("malformed protobuf ExportTraceServiceRequest: {0}")]
    BadProtobuf(String),
    /// The body is not a valid OTLP/JSON `ExportTraceServiceRequest`.
    #[error("malformed OTLP/JSON ExportTraceServiceRequest: {0}")]
    BadJson(String),
    /// The content type or content encoding is not supported.
    #[error("{0}")]
    ContentType(String),
    /// The body, before or after decompression, exceeds the limit.
    #[error("request body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// Decoded, the body would take more memory than its size allows ([`lite::Budget`]): a body of
    /// tiny spans, attributes, events or array values. Counted with [`Rejection::TooLarge`].
    #[error("{0}")]
    Expands(lite::Expanded),
    /// A span has an invalid trace id, span id or parent span id.
    #[error("invalid id: {0}")]
    BadIds(String),
    /// Strict mode: a `dei.*` attribute has the wrong type or a malformed value.
    #[error("invalid dei attribute: {0}")]
    BadAttributes(String),
    /// The body is compressed with an encoding the collector does not read (`Content-Encoding` or
    /// `grpc-encoding` other than gzip/identity).
    #[error("{0}")]
    UnsupportedEncoding(String),
    /// The gzip data is corrupt.
    #[error("invalid gzip body: {0}")]
    BadGzip(String),
    /// gRPC framing is wrong: a frame marked compressed without `grpc-encoding`, a truncated frame, more than
    /// one message.
    #[error("malformed gRPC message framing: {0}")]
    BadFraming(String),
    /// The client went away, or stopped sending, before the body was complete.
    #[error("the request body was not received in full: {0}")]
    Incomplete(String),
    /// Retryable: the forwarding queue is full (counting batches being sent); nothing was accepted.
    #[error("{0}")]
    QueueFull(String),
    /// Retryable: the request bytes buffered across all connections reached their cap; nothing was
    /// accepted.
    #[error("{0}")]
    Overloaded(String),
}

/// Seconds a refused client is told to wait (`Retry-After`) before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;

impl Rejection {
    /// The counter that this rejection increments.
    pub fn counter<'a>(&self, c: &'a Counters) -> &'a AtomicU64 {
        match self {
            Rejection::BadProtobuf(_) => &c.rejected_bad_protobuf,
            Rejection::BadJson(_) => &c.rejected_bad_json,
            Rejection::ContentType(_) => &c.rejected_content_type,
            Rejection::TooLarge { .. } | Rejection::Expands(_) => &c.rejected_too_large,
            Rejection::BadIds(_) => &c.rejected_bad_ids,
            Rejection::BadAttributes(_) => &c.rejected_bad_attributes,
            Rejection::UnsupportedEncoding(_) => &c.rejected_unsupported_encoding,
            Rejection::BadGzip(_) => &c.rejected_bad_gzip,
            Rejection::BadFraming(_) => &c.rejected_bad_framing,
            Rejection::Incomplete(_) => &c.rejected_incomplete_body,
            Rejection::QueueFull(_) => &c.rejected_queue_full,
            Rejection::Overloaded(_) => &c.rejected_overloaded,
        }
    }

    /// Whether the client should retry the same request later (the collector is full), rather than drop it.
    pub fn retryable(&self) -> bool {
        matches!(self, Rejection::QueueFull(_) | Rejection::Overloaded(_))
    }

    /// The OTLP/HTTP status: 503 for retryable rejections, 400 otherwise.
    pub fn http_status(&self) -> u16 {
        if self.retryable() { 503 } else { 400 }
    }

    /// The gRPC status code: `UNAVAILABLE` for retryable rejections, `UNIMPLEMENTED` for an unsupported
    /// compression (the gRPC convention), `INVALID_ARGUMENT` otherwise.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            r if r.retryable() => tonic::Code::Unavailable,
            Rejection::UnsupportedEncoding(_) => tonic::Code::Unimplemented,
            _ => tonic::Code::InvalidArgument,
        }
    }
}

/// The body encodings of OTLP/HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyEncoding {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl BodyEncoding {
    /// The encoding named by a `Content-Type` header value (parameters such as `charset` are ignored).
    pub fn from_content_type(value: Option<&str>) -> Result<BodyEncoding, Rejection> {
        let Some(value) = value else {
            return Err(Rejection::ContentType(
                "missing Content-Type: use application/x-protobuf or application/json".into(),
            ));
        };
        let mime = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match mime.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(BodyEncoding::Protobuf),
            "application/json" => Ok(BodyEncoding::Json),
            other => Err(Rejection::ContentType(format!(
                "unsupported Content-Type {other:?}: use application/x-protobuf or application/json"
            ))),
        }
    }
}

/// Decompresses gzip, reading at most `limit` bytes of output.
pub fn gunzip_limited(body: &[u8], limit: usize) -> Result<Vec<u8>, Rejection> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let mut reader = flate2::read::GzDecoder::new(body).take(limit as u64 + 1);
    reader
        .read_to_end(&mut out)
        .map_err(|e| Rejection::BadGzip(e.to_string()))?;
    if out.len() > limit {
        return Err(Rejection::TooLarge { limit });
    }
    Ok(out)
}

/// Decodes a protobuf `ExportTraceServiceRequest` into the full generated types (tests; the receivers read
/// the [`lite`] view).
#[cfg(test)]
pub fn decode_protobuf(body: &[u8]) -> Result<ExportTraceServiceRequest, Rejection> {
    ExportTraceServiceRequest::decode(body).map_err(|e| Rejection::BadProtobuf(e.to_string()))
}

/// Decodes an OTLP/JSON `ExportTraceServiceRequest` into the full generated types (hex ids, integer enums,
/// 64-bit integers as strings): only for forwarding a JSON request, whose protobuf encoding is what goes
/// downstream. Analysis reads JSON through [`decode_json_lite`].
pub fn decode_json(body: &[u8]) -> Result<ExportTraceServiceRequest, Rejection> {
    serde_json::from_slice(body).map_err(|e| Rejection::BadJson(e.to_string()))
}

/// Decodes an OTLP/JSON body straight into the [`lite`] view ([`lite::json`]): strings borrow from `body`
/// where they have no escapes, and what had to be decoded (escaped strings, hex ids, base64) goes into
/// `arena`. Refused as [`Rejection::BadJson`], array values nested too deeply included, or as
/// [`Rejection::Expands`] past the [`lite::Budget`] of its size.
pub fn decode_json_lite<'a>(body: &'a [u8], arena: &'a bumpalo::Bump) -> Result<lite::Request<'a>, Rejection> {
    let budget = arena.alloc(lite::Budget::for_body(body.len()));
    lite::json::decode_within(body, arena, budget).map_err(|e| match budget.exceeded() {
        Some(expanded) => Rejection::Expands(expanded),
        None => Rejection::BadJson(e.to_string()),
    })
}

/// [`decode_json_lite`] from a parsed JSON value (offline: a document read from a stream of them).
pub fn json_value_lite<'a>(
    value: &'a serde_json::Value,
    arena: &'a bumpalo::Bump,
) -> Result<lite::Request<'a>, Rejection> {
    lite::json::from_value(value, arena).map_err(|e| Rejection::BadJson(e.to_string()))
}

/// Decodes a protobuf body into the [`lite`] view (zero-copy: string and bytes fields borrow `body`).
pub fn decode_lite(body: &[u8]) -> Result<lite::Request<'_>, Rejection> {
    lite::Request::decode(body).map_err(|e| match e {
        lite::DecodeError::Expanded(expanded) => Rejection::Expands(expanded),
        e => Rejection::BadProtobuf(e.to_string()),
    })
}

/// Runs `f` on the [`lite`] view of a request built in the generated types (re-encoded and decoded: for
/// Jaeger's downloads, converted to them, and tests). Refused as the receivers refuse its encoding: array
/// values nested too deeply.
pub fn with_lite<T>(req: &ExportTraceServiceRequest, f: impl FnOnce(&lite::Request<'_>) -> T) -> Result<T, Rejection> {
    let body = req.encode_to_vec();
    Ok(f(&decode_lite(&body)?))
}

/// Checks every span's ids: a 16-byte non-zero trace id, an 8-byte non-zero span id, and a parent span id
/// that is empty or 8 bytes. Returns the number of spans.
pub fn validate_lite_ids(req: &lite::Request) -> Result<usize, Rejection> {
    let mut n = 0usize;
    for (r, rs) in req.resource_spans.iter().enumerate() {
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            for (i, span) in ss.spans.iter().enumerate() {
                let at = || format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]");
                if span.trace_id.len() != 16 || span.trace_id.iter().all(|b| *b == 0) {
                    return Err(Rejection::BadIds(format!(
                        "{}: traceId must be 16 bytes and not all zero (got {} bytes)",
                        at(),
                        span.trace_id.len()
                    )));
                }
                if span.span_id.len() != 8 || span.span_id.iter().all(|b| *b == 0) {
                    return Err(Rejection::BadIds(format!(
                        "{}: spanId must be 8 bytes and not all zero (got {} bytes)",
                        at(),
                        span.span_id.len()
                    )));
                }
                if !span.parent_span_id.is_empty() && span.parent_span_id.len() != 8 {
                    return Err(Rejection::BadIds(format!(
                        "{}: parentSpanId must be empty or 8 bytes (got {} bytes)",
                        at(),
                        span.parent_span_id.len()
                    )));
                }
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Encodes a request as protobuf (what is forwarded for a request that arrived as JSON).
pub fn encode_protobuf(req: &ExportTraceServiceRequest) -> bytes::Bytes {
    bytes::Bytes::from(req.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn content_types() {
        assert_eq!(
            BodyEncoding::from_content_type(Some("application/x-protobuf")),
            Ok(BodyEncoding::Protobuf)
        );
        assert_eq!(
            BodyEncoding::from_content_type(Some("application/json; charset=utf-8")),
            Ok(BodyEncoding::Json)
        );
        assert!(matches!(
            BodyEncoding::from_content_type(Some("text/plain")),
            Err(Rejection::ContentType(_))
        ));
        assert!(matches!(
            BodyEncoding::from_content_type(None),
            Err(Rejection::ContentType(_))
        ));
    }

    #[test]
    fn gzip_bomb_is_cut_at_the_limit() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&vec![0u8; 1 << 20]).unwrap();
        let small = enc.finish().unwrap();
        assert!(small.len() < 10_000);
        assert_eq!(gunzip_limited(&small, 1000), Err(Rejection::TooLarge { limit: 1000 }));
        assert_eq!(gunzip_limited(&small, 1 << 20).unwrap().len(), 1 << 20);
        assert!(matches!(gunzip_limited(b"not gzip", 1000), Err(Rejection::BadGzip(_))));
    }

    #[test]
    fn garbage_is_rejected_not_panicking() {
        assert!(matches!(
            decode_protobuf(&[0xff, 0xff, 0xff, 0xff]),
            Err(Rejection::BadProtobuf(_))
        ));
        let arena = bumpalo::Bump::new();
        for body in [
            &b"{\"resourceSpans\": 3}"[..],
            b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"zz\"}]}]}]}",
        ] {
            assert!(matches!(decode_json(body), Err(Rejection::BadJson(_))));
            assert!(matches!(decode_json_lite(body, &arena), Err(Rejection::BadJson(_))));
        }
    }

    #[test]
    fn ids_are_checked() {
        let json = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0000000000000000","name":"x"}]}]}]}"#;
        let arena = bumpalo::Bump::new();
        let req = decode_json_lite(json, &arena).unwrap();
        let err = validate_lite_ids(&req).unwrap_err();
        assert!(err.to_string().contains("spanId must be 8 bytes"), "{err}");
        let json = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"x"}]}]}]}"#;
        assert_eq!(validate_lite_ids(&decode_json_lite(json, &arena).unwrap()), Ok(1));
    }
}
