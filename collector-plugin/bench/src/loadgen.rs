//! A load generator: sends OTLP export requests over loopback as fast as the receiver accepts them, from a
//! fixed number of concurrent senders, for a fixed time.
//!
//! Each request holds whole traces of a small shop (frontend → users, frontend → catalog → pricing ×3,
//! users → a database peer) with client and server spans and full `dei.*` attributes. Trace ids are
//! rewritten on every send, so every request carries new traces.

use crate::RawCodec;
use bytes::Bytes;
use dei_collector::server::{Downstream, GRPC_EXPORT_PATH};
use dei_propagator::semconv;
use dei_propagator::{Element, Index, Instantiation, InvocationSignature, PayloadDigest, Signature, StackDigest};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Spans in one generated trace.
pub const SPANS_PER_TRACE: usize = 12;

/// Load settings.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Target.
    pub target: Downstream,
    /// How long to send.
    pub duration: Duration,
    /// Concurrent senders.
    pub concurrency: usize,
    /// Traces per request.
    pub traces_per_request: usize,
}

/// What the load generator achieved.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadResult {
    /// Spans acknowledged by the receiver (minus those it reported as rejected).
    pub spans: u64,
    /// Requests acknowledged.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Spans the receiver accepted but reported as rejected (OTLP partial success), not counted in `spans`.
    pub rejected_spans: u64,
    /// Seconds spent sending.
    pub seconds: f64,
    /// Acknowledged spans per second.
    pub spans_per_second: f64,
}

fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

/// A template request of `traces` traces with marker trace ids, and the byte offsets of every trace id.
pub fn template(traces: usize) -> (Vec<u8>, Vec<usize>) {
    let dei = Instantiation::dei();
    let stack = StackDigest([7; 32]);
    let inv = |sig: &str, payload: &str| {
        InvocationSignature::new(Signature::from_name(sig), PayloadDigest::of(payload.as_bytes()), stack)
    };
    let mut by_service: HashMap<&'static str, Vec<Span>> = HashMap::new();
    let mut markers = Vec::new();
    for t in 0..traces {
        let mut trace_id = [
            0xD1, 0xE1, 0xC0, 0x11, 0xEC, 0x70, 0x12, 0x34, 0, 0, 0xFE, 0xED, 0xFA, 0xCE, 0xBE, 0xEF,
        ];
        trace_id[8..10].copy_from_slice(&(t as u16).to_be_bytes());
        markers.push(trace_id);
        let base = 1_700_000_000_000_000_000u64 + t as u64 * 1_000_000;
        let mut next_id = 1u8;
        let mut id = || {
            next_id += 1;
            [next_id, 0, 0, 0, 0, 0, 0, 1]
        };
        let root = id();
        let mk = |service_span: &mut HashMap<&'static str, Vec<Span>>,
                  svc: &'static str,
                  span_id: [u8; 8],
                  parent: Option<[u8; 8]>,
                  name: &str,
                  kind: i32,
                  start: u64,
                  end: u64,
                  attrs: Vec<KeyValue>| {
            service_span.entry(svc).or_default().push(Span {
                trace_id: trace_id.to_vec(),
                span_id: span_id.to_vec(),
                parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
                name: name.into(),
                kind,
                start_time_unix_nano: start,
                end_time_unix_nano: end,
                attributes: attrs,
                status: Some(Status {
                    code: 1,
                    message: String::new(),
                }),
                ..Default::default()
            });
        };
        mk(
            &mut by_service,
            "frontend",
            root,
            None,
            "GET /checkout",
            2,
            base,
            base + 900_000,
            vec![],
        );
        let rpc_attrs = |index: &Index, sig: &str, payload: &str| {
            vec![
                kv(semconv::INDEX, s(&index.encode())),
                kv(semconv::SIGNATURE, s(sig)),
                kv(
                    semconv::PAYLOAD_DIGEST,
                    s(&PayloadDigest::of(payload.as_bytes()).to_hex()),
                ),
                kv(semconv::STACK_DIGEST, s(&stack.to_hex())),
                kv(
                    semconv::COUNT,
                    Value::IntValue(index.last().map_or(1, |e| e.count) as i64),
                ),
                kv(semconv::DEPTH, Value::IntValue(index.depth() as i64)),
                kv(semconv::INSTANTIATION, s("dei")),
                kv("rpc.system", s("grpc")),
            ]
        };
        let mut rpc = |by: &mut HashMap<&'static str, Vec<Span>>,
                       parent_span: [u8; 8],
                       index: &Index,
                       from: &'static str,
                       to: &'static str,
                       sig: &str,
                       payload: &str,
                       start: u64|
         -> [u8; 8] {
            let c = id();
            let sv = id();
            mk(
                by,
                from,
                c,
                Some(parent_span),
                sig,
                3,
                start,
                start + 200_000,
                rpc_attrs(index, sig, payload),
            );
            mk(
                by,
                to,
                sv,
                Some(c),
                sig,
                2,
                start + 20_000,
                start + 180_000,
                rpc_attrs(index, sig, payload),
            );
            sv
        };
        let e_users = Index::root().child(Element::new(inv("users.Users/GetUser", "u42").element_digest(&dei), 1));
        let e_cat = Index::root().child(Element::new(
            inv("catalog.Catalog/ListItems", "cart").element_digest(&dei),
            1,
        ));
        let users_srv = rpc(
            &mut by_service,
            root,
            &e_users,
            "frontend",
            "users",
            "users.Users/GetUser",
            "u42",
            base + 10_000,
        );
        let cat_srv = rpc(
            &mut by_service,
            root,
            &e_cat,
            "frontend",
            "catalog",
            "catalog.Catalog/ListItems",
            "cart",
            base + 300_000,
        );
        for (k, item) in ["a", "b", "c"].iter().enumerate() {
            let e = e_cat.child(Element::new(inv("pricing.Pricing/Price", item).element_digest(&dei), 1));
            rpc(
                &mut by_service,
                cat_srv,
                &e,
                "catalog",
                "pricing",
                "pricing.Pricing/Price",
                item,
                base + 320_000 + k as u64 * 10_000,
            );
        }
        let db = id();
        let mut attrs = vec![kv("db.system", s("postgresql"))];
        attrs.extend(rpc_attrs(
            &e_users.child(Element::new(inv("SELECT users", "u42").element_digest(&dei), 1)),
            "SELECT users",
            "u42",
        ));
        mk(
            &mut by_service,
            "users",
            db,
            Some(users_srv),
            "SELECT users",
            3,
            base + 40_000,
            base + 60_000,
            attrs,
        );
    }
    let mut services: Vec<_> = by_service.into_iter().collect();
    services.sort_by_key(|(k, _)| *k);
    let req = ExportTraceServiceRequest {
        resource_spans: services
            .into_iter()
            .map(|(svc, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", s(svc))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                schema_url: String::new(),
            })
            .collect(),
    };
    let body = req.encode_to_vec();
    let mut offsets = Vec::new();
    for m in &markers {
        let mut from = 0;
        while let Some(p) = body[from..].windows(16).position(|w| w == m) {
            offsets.push(from + p);
            from += p + 16;
        }
    }
    (body, offsets)
}

/// Sends load as configured.
pub async fn run(config: LoadConfig) -> Result<LoadResult, String> {
    let (template, offsets) = template(config.traces_per_request.max(1));
    let spans_per_request = (config.traces_per_request.max(1) * SPANS_PER_TRACE) as u64;
    let template = Arc::new(template);
    let offsets = Arc::new(offsets);
    let counter = Arc::new(AtomicU64::new(1));
    let rejected = Arc::new(AtomicU64::new(0));
    let (spans, requests, errors) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let start = Instant::now();
    let deadline = start + config.duration;
    let mut tasks = Vec::new();
    let channel = match &config.target {
        Downstream::Grpc(ep) => Some(
            tonic::transport::Endpoint::from_shared(ep.clone())
                .map_err(|e| format!("bad endpoint {ep}: {e}"))?
                .connect_lazy(),
        ),
        Downstream::Http(_) => None,
    };
    let http = reqwest::Client::new();
    for _ in 0..config.concurrency.max(1) {
        let (template, offsets, counter) = (template.clone(), offsets.clone(), counter.clone());
        let (spans, requests, errors) = (spans.clone(), requests.clone(), errors.clone());
        let rejected_total = rejected.clone();
        let target = config.target.clone();
        let channel = channel.clone();
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let mut grpc = channel.map(tonic::client::Grpc::new);
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let mut body = template.as_ref().clone();
                for &o in offsets.iter() {
                    body[o..o + 8].copy_from_slice(&n.to_be_bytes());
                }
                let body = Bytes::from(body);
                // Some(response bytes) when the request was accepted.
                let response: Option<Bytes> = match (&target, grpc.as_mut()) {
                    (Downstream::Grpc(_), Some(g)) => {
                        if g.ready().await.is_err() {
                            None
                        } else {
                            let path = http::uri::PathAndQuery::from_static(GRPC_EXPORT_PATH);
                            g.unary(tonic::Request::new(body), path, RawCodec)
                                .await
                                .ok()
                                .map(|r| r.into_inner())
                        }
                    }
                    (Downstream::Http(url), _) => match http
                        .post(url.as_str())
                        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                        .body(body)
                        .send()
                        .await
                    {
                        Ok(r) if r.status().is_success() => r.bytes().await.ok(),
                        _ => None,
                    },
                    _ => None,
                };
                match response {
                    Some(bytes) => {
                        // spans the receiver reports as rejected (partial success) do not count
                        let rejected = ExportTraceServiceResponse::decode(bytes)
                            .ok()
                            .and_then(|r| r.partial_success)
                            .map_or(0, |p| p.rejected_spans.max(0) as u64);
                        spans.fetch_add(spans_per_request.saturating_sub(rejected), Ordering::Relaxed);
                        rejected_total.fetch_add(rejected, Ordering::Relaxed);
                        requests.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let spans = spans.load(Ordering::Relaxed);
    Ok(LoadResult {
        spans,
        requests: requests.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        rejected_spans: rejected.load(Ordering::Relaxed),
        seconds,
        spans_per_second: spans as f64 / seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_has_every_trace_id_once_per_span() {
        let (body, offsets) = template(3);
        assert_eq!(offsets.len(), 3 * SPANS_PER_TRACE);
        let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        let n: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(n, 3 * SPANS_PER_TRACE);
    }
}
