//! One trace as the API sends it (`GET /api/v1/traces/{id}`), and the list of retained traces.

use dei_propagator::{Index, PayloadDigest, StackDigest};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One RPC occurrence in a trace: a client span and its server span, or either alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Occurrence {
    /// The (final) index.
    pub index: Index,
    /// The RPC's identity in the trace: the client span id, or the server span's parent id.
    #[serde(with = "crate::views::hex")]
    pub rpc: [u8; 8],
    /// The client span's parent (the span that issued the call), when the client span was seen.
    #[serde(with = "crate::views::hex::option")]
    pub caller_span: Option<[u8; 8]>,
    /// `dei.signature` (or the span name).
    pub signature: Option<Arc<str>>,
    /// `dei.payload.digest`.
    pub payload: Option<PayloadDigest>,
    /// The start of the request's payload, when the caller recorded it (`dei.payload`, opt-in).
    pub payload_preview: Option<Arc<str>>,
    /// `dei.stack.digest` (of the client span), shared with the trace store's other occurrences of it.
    pub stack_digest: Option<Arc<StackDigest>>,
    /// A stream's own occurrence (`dei.preliminary`): its index ends in the preliminary element.
    pub preliminary: bool,
    /// The client span's status, when the client span was seen (shared with equal statuses).
    pub client_status: Option<Arc<SpanStatus>>,
    /// The server span's status, when the server span was seen (shared with equal statuses).
    pub server_status: Option<Arc<SpanStatus>>,
    /// Calling service.
    pub client_service: Option<Arc<str>>,
    /// Called service (or virtual peer).
    pub server_service: Option<Arc<str>>,
    /// Client span start/end, Unix ns.
    pub client_time: Option<(u64, u64)>,
    /// Server span start/end, Unix ns.
    pub server_time: Option<(u64, u64)>,
    /// Either side had status ERROR.
    pub error: bool,
    /// The injected fault, if any.
    pub fault: Option<Box<str>>,
    /// Flagged ambiguous by instrumentation.
    pub ambiguous: bool,
    /// On a stream's occurrence: the messages its client sent (`dei.stream.message` events), in order.
    pub messages: Box<[StreamMessage]>,
    /// On a stream message's occurrence: which stream it was sent on.
    pub stream: Option<Box<MessageOf>>,
}

/// One message a stream's client sent (a `dei.stream.message` event, paper §4.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamMessage {
    /// Its 1-based position k on the stream, when the event said (`dei.message`).
    pub k: Option<u32>,
    /// The preliminary index the callee served it under (`…r|(x+k)~`).
    pub preliminary_index: Index,
    /// Its final index (its own occurrence's index).
    pub index: Index,
    /// The fault injected on it, wire form (the stream ended before it).
    pub fault: Option<String>,
    /// When it was sent, Unix ns.
    pub time_unix_nano: u64,
}

/// The stream a message occurrence was sent on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageOf {
    /// The stream's (preliminary) index.
    pub index: Index,
    /// The message's 1-based position k, when known.
    pub k: Option<u32>,
    /// When it was sent, Unix ns.
    pub time_unix_nano: u64,
}

impl Occurrence {
    /// When the call started (client side preferred), Unix ns.
    pub fn start_ns(&self) -> u64 {
        self.client_time.or(self.server_time).map_or(0, |t| t.0)
    }
    /// When the call ended (client side preferred), Unix ns.
    pub fn end_ns(&self) -> u64 {
        self.client_time.or(self.server_time).map_or(0, |t| t.1)
    }
}

/// An OTLP span status code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusCode {
    /// `STATUS_CODE_UNSET`.
    #[default]
    Unset,
    /// `STATUS_CODE_OK`.
    Ok,
    /// `STATUS_CODE_ERROR`.
    Error,
}

/// A span's status and the protocol status its caller saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpanStatus {
    /// The OTLP status code.
    pub code: StatusCode,
    /// The status message (the description of an error), at most 1 KiB.
    pub message: Option<Arc<str>>,
    /// `rpc.grpc.status_code` (a value outside `i32` is ignored).
    pub grpc_status_code: Option<i32>,
    /// `http.response.status_code` (a value outside `i32` is ignored).
    pub http_status_code: Option<i32>,
}

/// One RPC of one trace, with its nested RPCs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceNode {
    /// The occurrence.
    #[serde(flatten)]
    pub occurrence: Occurrence,
    /// RPCs whose index extends this one.
    pub children: Vec<TraceNode>,
}

/// The tree of one trace (`GET /api/v1/traces/{trace_id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceView {
    /// Trace id, hex.
    pub trace_id: String,
    /// Earliest span start, Unix ns.
    pub start_unix_nano: u64,
    /// RPCs.
    pub rpcs: usize,
    /// Top-level RPCs (whose parent index is not in the trace), with their nested RPCs.
    pub tree: Vec<TraceNode>,
    /// Spans still waiting for a stream mapping.
    pub pending_preliminary: usize,
    /// Spans (and stream messages) of the trace the collector did not record because the trace already held
    /// its cap of RPC occurrences (`serve --max-trace-rpcs`): the tree lacks their RPCs. 0 in the answer of a
    /// collector that predates the field.
    #[serde(default)]
    pub occurrences_dropped: u64,
    /// Spans of the trace whose DEI data the collector skipped for a malformed `dei.*` attribute or
    /// `dei.stream.message` event: their RPCs (or faults) are missing from the tree. 0 in the answer of a
    /// collector that predates the field.
    #[serde(default)]
    pub spans_dei_skipped: u64,
}

/// One retained trace in the list (`GET /api/v1/traces`). Fields in the order the API has always sent them,
/// then the ones added since.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceSummary {
    /// Occurrences with an injected fault.
    pub faults: usize,
    /// RPC occurrences.
    pub rpcs: usize,
    /// Earliest span start, Unix ns.
    pub start_unix_nano: u64,
    /// Trace id, hex.
    pub trace_id: String,
    /// From the earliest span start to the latest span end, ns (0 when no span recorded its times).
    #[serde(default)]
    pub duration_nano: u64,
    /// The signature of the root RPC (the earliest of those whose parent index is not in the trace).
    #[serde(default)]
    pub root_operation: Option<Arc<str>>,
    /// The service that made the root RPC (its client span's, or else its server span's).
    #[serde(default)]
    pub root_service: Option<Arc<str>>,
    /// Every service on the trace's RPCs (callers and callees, virtual peers included), sorted; at most 32.
    #[serde(default)]
    pub services: Vec<Arc<str>>,
    /// Occurrences with status ERROR on either span (injected faults included).
    #[serde(default)]
    pub errors: usize,
    /// `error` when an occurrence had an error, `ok` otherwise.
    #[serde(default)]
    pub status: TraceStatus,
    /// As [`TraceView::occurrences_dropped`]: spans of the trace not recorded past its cap.
    #[serde(default)]
    pub occurrences_dropped: u64,
    /// As [`TraceView::spans_dei_skipped`]: spans of the trace whose DEI data was skipped as malformed.
    #[serde(default)]
    pub spans_dei_skipped: u64,
}

/// A trace's status in the list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceStatus {
    /// No occurrence had an error.
    #[default]
    Ok,
    /// At least one occurrence had an error (or an injected fault).
    Error,
}

/// The retained traces, newest first (`GET /api/v1/traces`), after the query's filters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceList {
    /// Traces retained in all.
    pub retained: usize,
    /// The newest matching traces, up to the limit.
    pub traces: Vec<TraceSummary>,
    /// Retained traces that match the filters (all of them without filters); more than `traces.len()` when
    /// the limit cut the list.
    #[serde(default)]
    pub matched: usize,
    /// The limit applied.
    #[serde(default)]
    pub limit: usize,
}

/// The retained traces that contain an index (`GET /api/v1/tree/node/traces`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeTraces {
    /// The index (wire form).
    pub index: String,
    /// Trace ids, hex, newest first.
    pub traces: Vec<String>,
}
