//! Forwarding: every accepted batch goes on, unchanged, to a downstream OTLP endpoint (Jaeger, an
//! OpenTelemetry Collector, another dei-collector) over gRPC or HTTP.
//!
//! Batches wait in a bounded [queue](Forwarder::enqueue) measured in spans and in bytes; its capacity covers
//! the batches waiting and those the workers hold (being sent or retried). A worker takes every batch
//! waiting, up to [`ForwardConfig::max_request_bytes`], and sends them as one export request: the
//! concatenation of encoded `ExportTraceServiceRequest`s is itself one (protobuf appends repeated fields), so
//! combining re-encodes and copies nothing (the parts go out as they are, one data frame each:
//! [`parts::PartsBody`]), and a busy collector sends fewer, larger requests instead of waiting on one round
//! trip per incoming request. Workers send them with retry and exponential backoff for as long as the
//! downstream fails with a retryable error, so no span within the queue's capacity is lost during an outage;
//! a batch that does not fit is refused ([`QueueFull`]) so that the receiver can tell its client to retry,
//! and nothing is dropped on arrival. A permanent rejection (e.g. `INVALID_ARGUMENT`, HTTP 400) of a
//! combined request sends its batches again one by one; a batch rejected alone is dropped and counted, and
//! so are the `rejected_spans` of a success's OTLP `partial_success`. [`Forwarder::shutdown`]
//! stops accepting, drains the queue until a deadline, and counts what is left.

pub mod parts;

use crate::counters::Counters;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use parts::PartsBody;
use prost::Message as _;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The OTLP/gRPC export method path.
pub const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Where batches go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Downstream {
    /// OTLP/gRPC at this endpoint, e.g. `http://127.0.0.1:4317`.
    Grpc(String),
    /// OTLP/HTTP protobuf at this URL, e.g. `http://127.0.0.1:4318/v1/traces`.
    Http(String),
}

impl Downstream {
    /// The endpoint or URL.
    pub fn endpoint(&self) -> &str {
        match self {
            Downstream::Grpc(e) | Downstream::Http(e) => e,
        }
    }

    /// Checks that the endpoint is an absolute `http://` or `https://` URL with a host (and, for OTLP/HTTP, a
    /// path such as `/v1/traces`), so that a typo is refused at start-up instead of failing every batch.
    /// `https://` forwards over TLS ([`ForwardTls`]). The error names the endpoint and what is wrong with it;
    /// callers prefix the option it came from.
    pub fn validate(&self) -> Result<(), String> {
        let (protocol, example) = match self {
            Downstream::Grpc(_) => ("OTLP/gRPC", "http://127.0.0.1:4317"),
            Downstream::Http(_) => ("OTLP/HTTP", "http://127.0.0.1:4318/v1/traces"),
        };
        let endpoint = self.endpoint();
        let bad = |why: &str| {
            Err(format!(
                "{endpoint:?} is not a usable {protocol} endpoint: {why} (e.g. {example})"
            ))
        };
        let uri: http::Uri = match endpoint.parse() {
            Ok(u) => u,
            Err(e) => return bad(&e.to_string()),
        };
        match uri.scheme_str() {
            Some("http" | "https") => {}
            Some(other) => return bad(&format!("scheme {other:?}, not http or https")),
            None => return bad("no scheme (http:// or https://)"),
        }
        match uri.host() {
            Some(h) if !h.is_empty() => {}
            _ => return bad("no host"),
        }
        if matches!(self, Downstream::Http(_)) && matches!(uri.path(), "" | "/") {
            return bad("no path (OTLP/HTTP receivers take traces at /v1/traces)");
        }
        Ok(())
    }

    /// Whether the endpoint is `https://`.
    pub fn is_tls(&self) -> bool {
        self.endpoint().starts_with("https://")
    }
}

/// TLS for an `https://` downstream, as the OpenTelemetry Collector's exporters take it: the server is
/// checked against the system's roots plus `ca_file`; `cert_file` and `key_file` give a client certificate
/// (mutual TLS). Files are PEM, read and checked when the forwarder starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardTls {
    /// Extra root certificates (PEM), e.g. a private CA's.
    pub ca_file: Option<std::path::PathBuf>,
    /// The client certificate chain (PEM), for mutual TLS; needs `key_file`.
    pub cert_file: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    pub key_file: Option<std::path::PathBuf>,
    /// The name the server's certificate must carry, when it differs from the endpoint's host.
    pub server_name: Option<String>,
}

impl ForwardTls {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == ForwardTls::default()
    }
}

/// The PEM files of a [`ForwardTls`], read and checked.
struct TlsMaterial {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsMaterial {
    fn load(tls: &ForwardTls) -> Result<TlsMaterial, String> {
        let read = |path: &std::path::Path, what: &str, marker: &str| -> Result<Vec<u8>, String> {
            let pem = std::fs::read(path).map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))?;
            if !String::from_utf8_lossy(&pem).contains(marker) {
                return Err(format!("the {what} {} holds no PEM {marker}", path.display()));
            }
            Ok(pem)
        };
        let ca = match &tls.ca_file {
            Some(p) => Some(read(p, "CA file", "CERTIFICATE")?),
            None => None,
        };
        let identity = match (&tls.cert_file, &tls.key_file) {
            (Some(c), Some(k)) => Some((
                read(c, "client certificate", "CERTIFICATE")?,
                read(k, "client key", "PRIVATE KEY")?,
            )),
            (None, None) => None,
            _ => return Err("a client certificate needs both the certificate and the key file".into()),
        };
        Ok(TlsMaterial { ca, identity })
    }
}

/// Forwarding settings.
#[derive(Debug, Clone)]
pub struct ForwardConfig {
    /// The downstream.
    pub downstream: Downstream,
    /// Most spans in the queue, counting the batches the workers hold.
    pub capacity_spans: usize,
    /// Most bytes of request bodies in the queue, counting the batches the workers hold: what the queue
    /// costs in memory (a span's size varies a hundredfold, with its attributes and events).
    pub capacity_bytes: usize,
    /// Concurrent senders.
    pub workers: usize,
    /// First retry delay.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Timeout of one attempt.
    pub request_timeout: Duration,
    /// How long shutdown keeps draining.
    pub drain_timeout: Duration,
    /// How long a receiver waits for room in a full queue before refusing the batch (backpressure under
    /// saturation; during an outage the queue stays full and batches are refused after this wait).
    pub enqueue_wait: Duration,
    /// Largest export request a worker builds by combining waiting batches (a single larger batch is sent
    /// alone, unchanged). The default, 2 MiB, stays under the 4 MiB that gRPC servers (the OpenTelemetry
    /// Collector, Jaeger) accept by default.
    pub max_request_bytes: usize,
    /// Extra headers (lower-case name, value) sent with every request, e.g. `authorization` for a backend
    /// behind authentication; for gRPC they are request metadata.
    pub headers: Vec<(String, String)>,
    /// TLS settings for an `https://` downstream.
    pub tls: ForwardTls,
}

impl ForwardConfig {
    /// Defaults for a downstream: 100 000 spans and 32 MiB, 4 workers, 50 ms..5 s backoff, 10 s attempts,
    /// 30 s drain, 200 ms wait for room.
    pub fn new(downstream: Downstream) -> Self {
        ForwardConfig {
            downstream,
            capacity_spans: 100_000,
            capacity_bytes: DEFAULT_QUEUE_BYTES,
            workers: 4,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            enqueue_wait: Duration::from_millis(200),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            headers: Vec::new(),
            tls: ForwardTls::default(),
        }
    }
}

/// The default of [`ForwardConfig::capacity_bytes`]: 32 MiB.
pub const DEFAULT_QUEUE_BYTES: usize = 32 * 1024 * 1024;

/// The default of [`ForwardConfig::max_request_bytes`].
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;

/// One export request, as encoded protobuf.
#[derive(Debug, Clone)]
pub struct Batch {
    /// The `ExportTraceServiceRequest` bytes.
    pub body: Bytes,
    /// Spans in it.
    pub spans: usize,
}

/// What the forwarding queue holds: waiting, or held by a worker (being sent or retried).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct QueueDepth {
    /// Spans.
    pub spans: usize,
    /// Request body bytes.
    pub bytes: usize,
}

/// A batch did not fit in the forwarding queue (or the forwarder is shutting down): nothing was queued, and
/// the client should retry later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the forwarding queue is full ({capacity} spans or {capacity_bytes} bytes, counting batches being sent); \
     retry later"
)]
pub struct QueueFull {
    /// The queue's capacity in spans.
    pub capacity: usize,
    /// The queue's capacity in bytes.
    pub capacity_bytes: usize,
}

#[derive(Debug, Default)]
struct QueueState {
    batches: VecDeque<Batch>,
    /// Spans waiting plus spans held by workers.
    spans: usize,
    /// Body bytes waiting plus those held by workers.
    bytes: usize,
    closed: bool,
    deadline: Option<Instant>,
}

#[derive(Debug)]
struct Queue {
    state: Mutex<QueueState>,
    notify: Notify,
    space: Notify,
    capacity: usize,
    capacity_bytes: usize,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a batch, then takes it and the batches behind it while their bodies fit in `max_bytes`
    /// together.
    async fn pop_combined(&self, max_bytes: usize) -> Option<Vec<Batch>> {
        loop {
            let notified = self.notify.notified();
            {
                let mut s = self.lock();
                if let Some(first) = s.batches.pop_front() {
                    let mut bytes = first.body.len();
                    let mut taken = vec![first];
                    while let Some(next) = s.batches.front() {
                        if bytes + next.body.len() > max_bytes {
                            break;
                        }
                        bytes += next.body.len();
                        taken.extend(s.batches.pop_front());
                    }
                    let more = !s.batches.is_empty();
                    drop(s);
                    if more {
                        // let another worker take what is left while this one sends
                        self.notify.notify_one();
                    }
                    return Some(taken);
                }
                if s.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// A worker is done with a request (delivered or dropped): its room is free.
    fn release(&self, spans: usize, bytes: usize) {
        {
            let mut s = self.lock();
            s.spans = s.spans.saturating_sub(spans);
            s.bytes = s.bytes.saturating_sub(bytes);
        }
        self.space.notify_waiters();
    }

    fn deadline(&self) -> Option<Instant> {
        self.lock().deadline
    }
}

enum SendError {
    Retryable(String),
    Permanent(String),
}

/// What a downstream that answered with success says it did not take: OTLP's `partial_success`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Rejected {
    /// `rejected_spans`: spans it refused (0 when it took them all).
    spans: u64,
    /// `error_message`: why, or a warning.
    message: String,
}

/// The most bytes of a downstream's response body read: an `ExportTraceServiceResponse` is a count and a
/// message; 4 MiB is gRPC's default message limit. (A gRPC body over it is a failed attempt, retried; an
/// HTTP one is read as a success with nothing rejected.)
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

impl Rejected {
    fn from_response(r: ExportTraceServiceResponse) -> Rejected {
        match r.partial_success {
            Some(p) => Rejected {
                spans: u64::try_from(p.rejected_spans).unwrap_or(0),
                message: p.error_message,
            },
            None => Rejected::default(),
        }
    }

    /// An OTLP/HTTP success body: protobuf, or JSON when the content type says so (`rejectedSpans` is an
    /// int64, a string or a number in JSON). A body that is neither is read as "nothing rejected": the
    /// 2xx status is OTLP's success, and `partial_success` is optional.
    fn from_http_body(content_type: Option<&str>, body: &[u8]) -> Rejected {
        let is_json = content_type.is_some_and(|t| t.trim_start().starts_with("application/json"));
        if !is_json {
            return ExportTraceServiceResponse::decode(body)
                .map(Rejected::from_response)
                .unwrap_or_default();
        }
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Rejected::default();
        };
        let Some(partial) = value.get("partialSuccess").or_else(|| value.get("partial_success")) else {
            return Rejected::default();
        };
        let field = |camel: &str, snake: &str| partial.get(camel).or_else(|| partial.get(snake));
        let spans = match field("rejectedSpans", "rejected_spans") {
            Some(serde_json::Value::Number(n)) => n.as_u64().unwrap_or(0),
            Some(serde_json::Value::String(s)) => s.parse().unwrap_or(0),
            _ => 0,
        };
        let message = field("errorMessage", "error_message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        Rejected { spans, message }
    }

    /// A gRPC response body: one length-prefixed, uncompressed `ExportTraceServiceResponse`.
    fn from_grpc_body(body: &[u8]) -> Rejected {
        match body {
            [0, len @ ..] if len.len() >= 4 => {
                let n = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                match len[4..].get(..n) {
                    Some(message) => ExportTraceServiceResponse::decode(message)
                        .map(Rejected::from_response)
                        .unwrap_or_default(),
                    None => Rejected::default(),
                }
            }
            _ => Rejected::default(),
        }
    }
}

#[derive(Clone)]
enum Client {
    /// The channel, and the request headers (gRPC's, then the configured extra ones).
    Grpc(tonic::transport::Channel, Arc<http::HeaderMap>),
    Http(Arc<HttpClient>),
}

/// The OTLP/HTTP client: hyper with rustls (`https://`) or plain TCP (`http://`).
struct HttpClient {
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        PartsBody,
    >,
    uri: http::Uri,
    headers: http::HeaderMap,
    timeout: Duration,
}

/// The rustls settings for a downstream: the system's roots plus the CA file's, and the client certificate.
/// Without TLS material (an `http://` downstream, which the connector reaches over plain TCP) they trust
/// nothing and are never used.
fn rustls_config(tls: Option<TlsMaterial>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    let tls = match tls {
        Some(t) => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            t
        }
        None => TlsMaterial {
            ca: None,
            identity: None,
        },
    };
    if let Some(ca) = &tls.ca {
        for cert in CertificateDer::pem_slice_iter(ca) {
            let cert = cert.map_err(|e| format!("CA file: {e}"))?;
            roots.add(cert).map_err(|e| format!("CA file: {e}"))?;
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    match tls.identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

impl Client {
    fn new(config: &ForwardConfig) -> Result<Client, String> {
        config.downstream.validate()?;
        let tls = match (config.downstream.is_tls(), config.tls.is_empty()) {
            (true, _) => Some(TlsMaterial::load(&config.tls)?),
            (false, true) => None,
            (false, false) => {
                return Err(format!(
                    "TLS settings are given but the downstream {} is not https://",
                    config.downstream.endpoint()
                ));
            }
        };
        match &config.downstream {
            Downstream::Grpc(endpoint) => {
                let mut ep = tonic::transport::Endpoint::from_shared(endpoint.clone())
                    .map_err(|e| format!("bad gRPC endpoint {endpoint:?}: {e}"))?
                    .timeout(config.request_timeout)
                    .connect_timeout(Duration::from_secs(2));
                if let Some(tls) = tls {
                    let mut t = tonic::transport::ClientTlsConfig::new().with_native_roots();
                    if let Some(ca) = tls.ca {
                        t = t.ca_certificate(tonic::transport::Certificate::from_pem(ca));
                    }
                    if let Some((cert, key)) = tls.identity {
                        t = t.identity(tonic::transport::Identity::from_pem(cert, key));
                    }
                    if let Some(name) = &config.tls.server_name {
                        t = t.domain_name(name.clone());
                    }
                    ep = ep.tls_config(t).map_err(|e| format!("TLS for {endpoint}: {e}"))?;
                }
                let mut headers = http::HeaderMap::new();
                headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
                headers.insert(
                    http::header::USER_AGENT,
                    http::HeaderValue::from_static(concat!("dei-collector/", env!("CARGO_PKG_VERSION"))),
                );
                for (name, value) in &config.headers {
                    // the same rules as gRPC metadata: lower-case ASCII names, no binary (`-bin`) values
                    let key = tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(name.as_bytes())
                        .map_err(|e| format!("forward header name {name:?}: {e}"))?;
                    let value: tonic::metadata::MetadataValue<tonic::metadata::Ascii> = value
                        .parse()
                        .map_err(|e| format!("forward header {name}: value: {e}"))?;
                    let name = http::HeaderName::from_bytes(key.as_str().as_bytes())
                        .map_err(|e| format!("forward header name {name:?}: {e}"))?;
                    let value = http::HeaderValue::from_bytes(value.as_encoded_bytes())
                        .map_err(|e| format!("forward header {name}: value: {e}"))?;
                    headers.append(name, value);
                }
                Ok(Client::Grpc(ep.connect_lazy(), Arc::new(headers)))
            }
            Downstream::Http(url) => {
                let mut headers = http::HeaderMap::new();
                for (name, value) in &config.headers {
                    let name = http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| format!("forward header name {name:?}: {e}"))?;
                    let value =
                        http::HeaderValue::from_str(value).map_err(|e| format!("forward header {name}: value: {e}"))?;
                    headers.append(name, value);
                }
                headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/x-protobuf"),
                );
                let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
                let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
                tcp.enforce_http(false);
                tcp.set_connect_timeout(Some(Duration::from_secs(2)));
                tcp.set_nodelay(true);
                let builder = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(rustls_config(tls)?)
                    .https_or_http();
                let builder = match &config.tls.server_name {
                    Some(name) => {
                        let name = rustls::pki_types::ServerName::try_from(name.clone())
                            .map_err(|e| format!("TLS server name {name:?}: {e}"))?;
                        builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
                    }
                    None => builder,
                };
                let connector = builder.enable_http1().wrap_connector(tcp);
                let client =
                    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
                Ok(Client::Http(Arc::new(HttpClient {
                    client,
                    uri,
                    headers,
                    timeout: config.request_timeout,
                })))
            }
        }
    }

    /// Sends one export request given as its parts (see [`Request`]); on success, what the downstream said
    /// it rejected.
    async fn send(&mut self, parts: Vec<Bytes>) -> Result<Rejected, SendError> {
        match self {
            Client::Grpc(channel, headers) => {
                use tower::{Service, ServiceExt};
                let total: usize = parts.iter().map(Bytes::len).sum();
                let prefix = parts::grpc_prefix(total).ok_or_else(|| {
                    SendError::Permanent(format!("a request of {total} bytes is over gRPC's message length"))
                })?;
                let body = PartsBody::new(std::iter::once(prefix).chain(parts));
                let mut request = http::Request::post(GRPC_EXPORT_PATH)
                    .body(tonic::body::Body::new(body))
                    .map_err(|e| SendError::Permanent(format!("request: {e}")))?;
                *request.headers_mut() = headers.as_ref().clone();
                let response = channel
                    .ready()
                    .await
                    .map_err(|e| SendError::Retryable(format!("connect: {}", error_chain(&e))))?
                    .call(request)
                    .await
                    .map_err(|e| SendError::Retryable(error_chain(&e)))?;
                grpc_outcome(response).await
            }
            Client::Http(c) => {
                let mut request = http::Request::post(c.uri.clone())
                    .body(PartsBody::new(parts))
                    .map_err(|e| SendError::Permanent(format!("request: {e}")))?;
                *request.headers_mut() = c.headers.clone();
                let response = match tokio::time::timeout(c.timeout, c.client.request(request)).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => return Err(SendError::Retryable(error_chain(&e))),
                    Err(_) => return Err(SendError::Retryable(format!("no answer within {:?}", c.timeout))),
                };
                let status = response.status();
                let content_type = response
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                // read the body (so that the connection can carry the next request), bounded
                let body = http_body_util::Limited::new(response.into_body(), MAX_RESPONSE_BYTES);
                let body = tokio::time::timeout(c.timeout, http_body_util::BodyExt::collect(body)).await;
                if status.is_success() {
                    Ok(match body {
                        Ok(Ok(collected)) => Rejected::from_http_body(content_type.as_deref(), &collected.to_bytes()),
                        _ => Rejected::default(),
                    })
                } else if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
                    Err(SendError::Retryable(format!("HTTP {status}")))
                } else {
                    Err(SendError::Permanent(format!("HTTP {status}")))
                }
            }
        }
    }
}

/// What a gRPC export response says: its status is in the trailers, or in the headers of a trailers-only
/// response; an HTTP status other than 200 maps to a gRPC code as the gRPC specification says (429, 502, 503
/// and 504 to `UNAVAILABLE`, which is retried).
async fn grpc_outcome(response: http::Response<tonic::body::Body>) -> Result<Rejected, SendError> {
    use tonic::Code::*;
    let classify = |status: tonic::Status| {
        let msg = format!("{:?}: {}", status.code(), status.message());
        match status.code() {
            Ok => Result::Ok(Rejected::default()),
            Unavailable | ResourceExhausted | DeadlineExceeded | Aborted | Cancelled | OutOfRange | DataLoss
            | Unknown => Err(SendError::Retryable(msg)),
            _ => Err(SendError::Permanent(msg)),
        }
    };
    let (head, body) = response.into_parts();
    if head.status != http::StatusCode::OK {
        let code = match head.status.as_u16() {
            400 => Internal,
            401 => Unauthenticated,
            403 => PermissionDenied,
            404 => Unimplemented,
            429 | 502 | 503 | 504 => Unavailable,
            _ => Unknown,
        };
        return classify(tonic::Status::new(code, format!("HTTP {}", head.status)));
    }
    if let Some(status) = tonic::Status::from_header_map(&head.headers) {
        return classify(status);
    }
    // the response message is small (read up to a bound); its trailers carry the status
    let collected = http_body_util::BodyExt::collect(http_body_util::Limited::new(body, MAX_RESPONSE_BYTES))
        .await
        .map_err(|e| SendError::Retryable(format!("response: {}", error_chain(e.as_ref()))))?;
    let status = collected.trailers().and_then(tonic::Status::from_header_map);
    match status {
        Some(status) if status.code() == Ok => Result::Ok(Rejected::from_grpc_body(&collected.to_bytes())),
        Some(status) => classify(status),
        None => Err(SendError::Retryable("the response carried no grpc-status".into())),
    }
}

/// An error with its sources, `a: b: c`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// The most characters of a downstream's `error_message` logged.
const MAX_LOGGED_MESSAGE: usize = 500;

/// How often a forwarding failure of one kind (retried, or dropped) is logged at most: the first failure
/// is, then the failures that follow within the interval are logged together when it ends (the last one,
/// with the number of similar failures since the last warning).
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// What became of a failed send: retried, or its spans dropped. Each kind has its own warning window, so
/// that a drop is never hidden behind a retry's warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Retried,
    Dropped,
}

/// Rate-limited warnings about failed sends, shared by the workers.
#[derive(Debug)]
struct Warnings {
    endpoint: String,
    retried: Mutex<WarnState>,
    dropped: Mutex<WarnState>,
}

/// One kind's warning window.
#[derive(Debug, Default)]
struct WarnState {
    /// When its last warning went out.
    last: Option<Instant>,
    /// Failures since then not logged yet.
    suppressed: u64,
    /// The last of them: error, what was done, spans.
    pending: Option<(String, &'static str, usize)>,
    /// Whether a task will log the suppressed failures when the window ends.
    flush_scheduled: bool,
}

impl Warnings {
    fn new(endpoint: String) -> Warnings {
        Warnings {
            endpoint,
            retried: Mutex::default(),
            dropped: Mutex::default(),
        }
    }

    fn state(&self, kind: Failure) -> std::sync::MutexGuard<'_, WarnState> {
        let m = match kind {
            Failure::Retried => &self.retried,
            Failure::Dropped => &self.dropped,
        };
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs `error` unless a warning of this kind went out less than [`WARN_INTERVAL`] ago; then it is
    /// logged (with the others of the window) when the window ends.
    fn failed(self: &Arc<Self>, kind: Failure, error: &str, what: &'static str, spans: usize) {
        let now = Instant::now();
        let suppressed = {
            let mut st = self.state(kind);
            if let Some(last) = st.last
                && now.duration_since(last) < WARN_INTERVAL
            {
                st.suppressed += 1;
                st.pending = Some((error.to_string(), what, spans));
                if !std::mem::replace(&mut st.flush_scheduled, true) {
                    let warnings = self.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep_until(last + WARN_INTERVAL).await;
                        warnings.flush(kind);
                    });
                }
                return;
            }
            st.last = Some(now);
            st.pending = None;
            std::mem::take(&mut st.suppressed)
        };
        self.log(error, what, spans, suppressed);
    }

    /// Logs the failures suppressed in a window that has ended: the last one, and how many others.
    fn flush(&self, kind: Failure) {
        let (pending, suppressed) = {
            let mut st = self.state(kind);
            st.flush_scheduled = false;
            let Some(pending) = st.pending.take() else { return };
            st.last = Some(Instant::now());
            (pending, std::mem::take(&mut st.suppressed))
        };
        let (error, what, spans) = pending;
        self.log(&error, what, spans, suppressed.saturating_sub(1));
    }

    fn log(&self, error: &str, what: &str, spans: usize, similar: u64) {
        tracing::warn!(
            endpoint = %self.endpoint,
            error = %error,
            spans,
            similar_failures_since_last_warning = similar,
            "forwarding to {} failed: {error}; {what} (at most one such warning per {:?}; every failure \
             is counted: dei_collector_forward_retries_total, dei_collector_forward_spans_dropped_*_total)",
            self.endpoint,
            WARN_INTERVAL
        );
    }
}

/// The forwarding queue and its workers.
#[derive(Debug)]
pub struct Forwarder {
    queue: Arc<Queue>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    counters: Arc<Counters>,
    drain_timeout: Duration,
    enqueue_wait: Duration,
    downstream: Downstream,
}

impl Forwarder {
    /// Starts the workers (on the current tokio runtime).
    pub fn start(config: ForwardConfig, counters: Arc<Counters>) -> Result<Forwarder, String> {
        let client = Client::new(&config)?;
        let warnings = Arc::new(Warnings::new(config.downstream.endpoint().to_string()));
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState::default()),
            notify: Notify::new(),
            space: Notify::new(),
            capacity: config.capacity_spans,
            capacity_bytes: config.capacity_bytes,
        });
        let workers = (0..config.workers.max(1))
            .map(|_| {
                let (queue, counters, mut client, config, warnings) = (
                    queue.clone(),
                    counters.clone(),
                    client.clone(),
                    config.clone(),
                    warnings.clone(),
                );
                tokio::spawn(async move {
                    while let Some(batches) = queue.pop_combined(config.max_request_bytes).await {
                        let request = Request::combine(batches);
                        let (spans, bytes) = (request.spans, request.bytes());
                        deliver(&queue, &mut client, &config, &counters, &warnings, request).await;
                        queue.release(spans, bytes);
                    }
                })
            })
            .collect();
        Ok(Forwarder {
            queue,
            workers: Mutex::new(workers),
            counters,
            drain_timeout: config.drain_timeout,
            enqueue_wait: config.enqueue_wait,
            downstream: config.downstream.clone(),
        })
    }

    /// Queues a batch, waiting up to `enqueue_wait` for room; refuses it ([`QueueFull`], nothing queued or
    /// dropped: the caller tells its client to retry) when it does not fit in time or the forwarder is
    /// shutting down. Room counts the batches the workers hold. A batch larger than the whole queue is
    /// accepted into an empty queue.
    pub async fn enqueue(&self, batch: Batch) -> Result<(), QueueFull> {
        let deadline = Instant::now() + self.enqueue_wait;
        loop {
            let space = self.queue.space.notified();
            {
                let mut s = self.queue.lock();
                let fits = (s.spans + batch.spans <= self.queue.capacity
                    && s.bytes + batch.body.len() <= self.queue.capacity_bytes)
                    || (s.spans == 0 && s.bytes == 0);
                if !s.closed && fits {
                    s.spans += batch.spans;
                    s.bytes += batch.body.len();
                    s.batches.push_back(batch);
                    drop(s);
                    Counters::add(&self.counters.forward_batches_queued, 1);
                    self.queue.notify.notify_one();
                    return Ok(());
                }
                if s.closed {
                    return Err(self.full());
                }
            }
            if tokio::time::timeout_at(deadline, space).await.is_err() {
                return Err(self.full());
            }
        }
    }

    fn full(&self) -> QueueFull {
        QueueFull {
            capacity: self.queue.capacity,
            capacity_bytes: self.queue.capacity_bytes,
        }
    }

    /// Spans in the queue: waiting, or held by a worker (being sent or retried).
    pub fn queued_spans(&self) -> usize {
        self.queue.lock().spans
    }

    /// The queue's capacity in spans.
    pub fn capacity_spans(&self) -> usize {
        self.queue.capacity
    }

    /// Spans and bytes in the queue: waiting, or held by a worker.
    pub fn depth(&self) -> QueueDepth {
        let s = self.queue.lock();
        QueueDepth {
            spans: s.spans,
            bytes: s.bytes,
        }
    }

    /// The queue's capacity in bytes.
    pub fn capacity_bytes(&self) -> usize {
        self.queue.capacity_bytes
    }

    /// The downstream endpoint.
    pub fn endpoint(&self) -> &str {
        self.downstream.endpoint()
    }

    /// Whether a TCP connection to the downstream's host and port opens within `timeout` (for `/readyz`).
    pub async fn probe(&self, timeout: Duration) -> Result<(), String> {
        let uri: http::Uri = self
            .downstream
            .endpoint()
            .parse()
            .map_err(|e| format!("bad endpoint: {e}"))?;
        let host = uri
            .host()
            .ok_or("no host")?
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(80);
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("connect to {host}:{port}: {e}")),
            Err(_) => Err(format!("connect to {host}:{port}: no answer within {timeout:?}")),
        }
    }

    /// Stops accepting, sends what is queued until the drain deadline, then counts the rest as dropped.
    pub async fn shutdown(&self) {
        let deadline = Instant::now() + self.drain_timeout;
        {
            let mut s = self.queue.lock();
            s.closed = true;
            s.deadline = Some(deadline);
        }
        self.queue.notify.notify_waiters();
        self.queue.space.notify_waiters();
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in workers {
            let _ = tokio::time::timeout_at(deadline + Duration::from_secs(1), w).await;
        }
        let mut s = self.queue.lock();
        let left: usize = s.batches.iter().map(|b| b.spans).sum();
        let left_bytes: usize = s.batches.iter().map(|b| b.body.len()).sum();
        s.batches.clear();
        s.spans = s.spans.saturating_sub(left);
        s.bytes = s.bytes.saturating_sub(left_bytes);
        Counters::add(&self.counters.forward_spans_dropped_shutdown, left as u64);
    }
}

/// One downstream export request: one or more batches, whose concatenation is the request.
struct Request {
    parts: Vec<Bytes>,
    /// Spans in each part.
    part_spans: Vec<usize>,
    spans: usize,
}

impl Request {
    fn combine(batches: Vec<Batch>) -> Request {
        Request {
            spans: batches.iter().map(|b| b.spans).sum(),
            part_spans: batches.iter().map(|b| b.spans).collect(),
            parts: batches.into_iter().map(|b| b.body).collect(),
        }
    }

    fn bytes(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    /// Each part as a request of its own.
    fn split(self) -> impl Iterator<Item = Request> {
        self.parts
            .into_iter()
            .zip(self.part_spans)
            .map(|(part, spans)| Request {
                parts: vec![part],
                part_spans: vec![spans],
                spans,
            })
    }
}

/// Sends a request until it is delivered, rejected, or shutdown's deadline passes. When the downstream
/// rejects a combined request, each of its batches is sent alone, so that only the batches it rejects are
/// dropped (a client's bad request does not take the others down with it).
async fn deliver(
    queue: &Queue,
    client: &mut Client,
    config: &ForwardConfig,
    counters: &Counters,
    warnings: &Arc<Warnings>,
    request: Request,
) {
    let Some(error) = attempt(queue, client, config, counters, warnings, &request).await else {
        return;
    };
    if request.parts.len() == 1 {
        return dropped(counters, warnings, &error, request.spans);
    }
    Counters::add(&counters.forward_requests_split, 1);
    for part in request.split() {
        if let Some(error) = attempt(queue, client, config, counters, warnings, &part).await {
            dropped(counters, warnings, &error, part.spans);
        }
    }
}

/// Counts and logs spans the downstream rejected.
fn dropped(counters: &Counters, warnings: &Arc<Warnings>, error: &str, spans: usize) {
    warnings.failed(
        Failure::Dropped,
        error,
        "the downstream rejected the batch, dropped",
        spans,
    );
    Counters::add(&counters.forward_spans_dropped_rejected, spans as u64);
}

/// Sends a request, retrying retryable failures with backoff: `None` when it was delivered (its spans, and
/// a partial success's rejected ones, counted) or dropped at shutdown (counted), the downstream's error when
/// it rejected the request (not counted yet).
async fn attempt(
    queue: &Queue,
    client: &mut Client,
    config: &ForwardConfig,
    counters: &Counters,
    warnings: &Arc<Warnings>,
    batch: &Request,
) -> Option<String> {
    let mut backoff = config.initial_backoff;
    loop {
        match client.send(batch.parts.clone()).await {
            Ok(rejected) => {
                // a partial success: the spans it refused were not delivered
                let dropped = usize::try_from(rejected.spans).unwrap_or(usize::MAX).min(batch.spans);
                Counters::add(&counters.forward_requests_sent, 1);
                Counters::add(&counters.forward_batches_sent, batch.parts.len() as u64);
                Counters::add(&counters.forward_spans_sent, (batch.spans - dropped) as u64);
                if dropped > 0 {
                    Counters::add(&counters.forward_spans_dropped_rejected, dropped as u64);
                    let message: String = rejected.message.chars().take(MAX_LOGGED_MESSAGE).collect();
                    warnings.failed(
                        Failure::Dropped,
                        &format!(
                            "partial success: the downstream rejected {} of {} span(s): {message}",
                            rejected.spans, batch.spans
                        ),
                        "the rejected spans are dropped",
                        dropped,
                    );
                }
                return None;
            }
            Err(SendError::Permanent(e)) => return Some(e),
            Err(SendError::Retryable(e)) => {
                let now = Instant::now();
                if let Some(deadline) = queue.deadline()
                    && now + backoff > deadline
                {
                    Counters::add(&counters.forward_spans_dropped_shutdown, batch.spans as u64);
                    return None;
                }
                warnings.failed(Failure::Retried, &e, "retrying with backoff", batch.spans);
                Counters::add(&counters.forward_retries, 1);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.max_backoff);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pairs<'a> = &'a [(&'static str, &'static str)];

    fn response(status: u16, headers: Pairs<'_>, trailers: Option<Pairs<'_>>) -> http::Response<tonic::body::Body> {
        let mut frames: Vec<Result<http_body::Frame<Bytes>, std::convert::Infallible>> =
            vec![Ok(http_body::Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0])))];
        if let Some(trailers) = trailers {
            let mut map = http::HeaderMap::new();
            for (k, v) in trailers {
                map.insert(http::HeaderName::from_static(k), http::HeaderValue::from_static(v));
            }
            frames.push(Ok(http_body::Frame::trailers(map)));
        }
        let body = http_body_util::StreamBody::new(futures::stream::iter(frames));
        let mut r = http::Response::new(tonic::body::Body::new(body));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        for (k, v) in headers {
            r.headers_mut()
                .insert(http::HeaderName::from_static(k), http::HeaderValue::from_static(v));
        }
        r
    }

    async fn outcome(r: http::Response<tonic::body::Body>) -> &'static str {
        match grpc_outcome(r).await {
            Ok(r) if r.spans > 0 => "partial",
            Ok(_) => "ok",
            Err(SendError::Retryable(_)) => "retry",
            Err(SendError::Permanent(_)) => "drop",
        }
    }

    #[tokio::test]
    async fn a_grpc_response_is_judged_by_its_status_wherever_it_is() {
        let ok = [("grpc-status", "0")];
        assert_eq!(outcome(response(200, &[], Some(&ok))).await, "ok");
        assert_eq!(
            outcome(response(200, &[], Some(&[("grpc-status", "14")]))).await,
            "retry"
        );
        assert_eq!(
            outcome(response(200, &[], Some(&[("grpc-status", "8")]))).await,
            "retry"
        );
        assert_eq!(outcome(response(200, &[], Some(&[("grpc-status", "3")]))).await, "drop");
        // trailers-only: the status is in the headers
        assert_eq!(outcome(response(200, &[("grpc-status", "16")], None)).await, "drop");
        assert_eq!(outcome(response(200, &[("grpc-status", "0")], None)).await, "ok");
        // no status at all is not a success
        assert_eq!(outcome(response(200, &[], None)).await, "retry");
        // HTTP errors map as the gRPC specification says
        assert_eq!(outcome(response(503, &[], None)).await, "retry");
        assert_eq!(outcome(response(429, &[], None)).await, "retry");
        assert_eq!(outcome(response(404, &[], None)).await, "drop");
        assert_eq!(outcome(response(401, &[], None)).await, "drop");
    }
}
