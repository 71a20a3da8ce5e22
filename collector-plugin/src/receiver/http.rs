//! The OTLP/HTTP receiver: `POST /v1/traces` with `application/x-protobuf` or `application/json`, optionally
//! gzip-compressed (`Content-Encoding: gzip`).
//!
//! Bad input gets `400 Bad Request` with a `google.rpc.Status` body (`code` 3, `INVALID_ARGUMENT`, and a
//! message saying what was wrong), encoded like the request (JSON when the content type was not
//! understood). When the collector is full (forwarding queue, buffered bytes) the answer is the retryable
//! `503 Service Unavailable` with `Retry-After` and `code` 14 (`UNAVAILABLE`): nothing was accepted and the
//! client's exporter sends the request again.

use crate::collector::Collector;
use crate::otlp::{self, BodyEncoding, Rejection};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use prost::Message;
use std::sync::Arc;

/// `google.rpc.Status`, the OTLP/HTTP error body.
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
pub struct RpcStatus {
    /// The gRPC status code (3, `INVALID_ARGUMENT`; 14, `UNAVAILABLE`, when the client should retry).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What was wrong.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// The OTLP/HTTP router (`POST /v1/traces`).
pub fn router(collector: Arc<Collector>) -> Router {
    Router::new().route("/v1/traces", post(export)).with_state(collector)
}

/// The response to a rejected request: 400, or 503 with `Retry-After` when the client should retry; the
/// body a `google.rpc.Status` encoded like the request.
pub fn error_response(encoding: Option<BodyEncoding>, r: &Rejection) -> Response {
    let status = RpcStatus {
        code: if r.retryable() { 14 } else { 3 },
        message: r.to_string(),
    };
    let code = StatusCode::from_u16(r.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut resp = match encoding {
        Some(BodyEncoding::Protobuf) => (
            code,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            status.encode_to_vec(),
        )
            .into_response(),
        _ => (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&status).expect("a Status (strings and integers) serializes"),
        )
            .into_response(),
    };
    if r.retryable() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(otlp::RETRY_AFTER_SECS));
    }
    resp
}

/// Reads a body of at most `limit` bytes within the body timeout, reserving its bytes in the global cap on
/// buffered bytes (kept in `held`): a declared `Content-Length` all at once before reading (so that a
/// request that cannot fit is refused before its body is read), otherwise chunk by chunk.
async fn read_body<'c>(
    collector: &'c Collector,
    body: Body,
    limit: usize,
    declared: Option<usize>,
    held: &mut Option<tokio::sync::SemaphorePermit<'c>>,
) -> Result<Bytes, Rejection> {
    let overloaded = || {
        Rejection::Overloaded(format!(
            "the collector is buffering its limit of {} request bytes; retry later",
            collector.config().max_buffered_bytes
        ))
    };
    let deadline = tokio::time::Instant::now() + collector.config().body_timeout;
    let mut reserved = 0usize;
    let mut buf = match declared {
        Some(n) if n > limit => return Err(Rejection::TooLarge { limit }),
        Some(n) => {
            *held = Some(collector.reserve_buffer(n).ok_or_else(overloaded)?);
            reserved = n;
            bytes::BytesMut::with_capacity(n)
        }
        None => bytes::BytesMut::new(),
    };
    let mut body = Limited::new(body, limit);
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err(Rejection::Incomplete(format!(
                    "timed out after {:?} with {} bytes received",
                    collector.config().body_timeout,
                    buf.len()
                )));
            }
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(Rejection::TooLarge { limit });
            }
            Ok(Some(Err(e))) => return Err(Rejection::Incomplete(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            let more = (buf.len() + data.len()).saturating_sub(reserved);
            if more > 0 {
                let permit = collector.reserve_buffer(more).ok_or_else(overloaded)?;
                reserved += more;
                match held {
                    Some(h) => h.merge(permit),
                    None => *held = Some(permit),
                }
            }
            buf.extend_from_slice(&data);
        }
    }
}

async fn export(State(collector): State<Arc<Collector>>, headers: HeaderMap, body: Body) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let encoding = match BodyEncoding::from_content_type(content_type) {
        Ok(e) => e,
        Err(r) => return error_response(None, &collector.reject(r)),
    };
    let limit = collector.config().max_body_bytes;
    // every byte buffered holds a share of the global cap until the request is answered
    let mut held: Option<tokio::sync::SemaphorePermit<'_>> = None;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let raw = match read_body(&collector, body, limit, declared, &mut held).await {
        Ok(b) => b,
        Err(r) => {
            let timed_out = matches!(&r, Rejection::Incomplete(m) if m.starts_with("timed out"));
            let mut resp = error_response(Some(encoding), &collector.reject(r));
            if timed_out {
                *resp.status_mut() = StatusCode::REQUEST_TIMEOUT;
            }
            return resp;
        }
    };
    let content_encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_ascii_lowercase());
    let body = match content_encoding.as_deref() {
        None | Some("") | Some("identity") => raw,
        Some("gzip") => match otlp::gunzip_limited(&raw, limit) {
            Ok(b) => {
                // the decompressed bytes hold their share of the cap too, until the request is answered
                match collector.reserve_buffer(b.len()) {
                    Some(permit) => match held.as_mut() {
                        Some(h) => h.merge(permit),
                        None => drop(held.replace(permit)),
                    },
                    None => {
                        let r = Rejection::Overloaded(format!(
                            "the collector is buffering its limit of {} request bytes (decompressed bodies included); retry later",
                            collector.config().max_buffered_bytes
                        ));
                        return error_response(Some(encoding), &collector.reject(r));
                    }
                }
                Bytes::from(b)
            }
            Err(r) => return error_response(Some(encoding), &collector.reject(r)),
        },
        Some(other) => {
            let r = Rejection::UnsupportedEncoding(format!("unsupported Content-Encoding {other:?}: use gzip or none"));
            return error_response(Some(encoding), &collector.reject(r));
        }
    };
    let result = match encoding {
        BodyEncoding::Protobuf => collector.accept_protobuf(body).await,
        BodyEncoding::Json => collector.accept_json(&body).await,
    };
    match result {
        Ok(accepted) => {
            let resp = accepted.response();
            match encoding {
                BodyEncoding::Protobuf => {
                    ([(header::CONTENT_TYPE, "application/x-protobuf")], resp.encode_to_vec()).into_response()
                }
                BodyEncoding::Json => (
                    [(header::CONTENT_TYPE, "application/json")],
                    serde_json::to_vec(&resp).unwrap_or_else(|_| b"{}".to_vec()),
                )
                    .into_response(),
            }
        }
        Err(r) => error_response(Some(encoding), &r),
    }
}
